"""Damage that used to pass as data (issue 30, cases 5–9): crafted metadata, lost or altered
chunks of every array of a store and of a model, edited counts. Each is refused with one line
naming the file, by ``verify``, ``info``, ``fit`` and the readers of models, never read as
zeros, never a crash. Older stores (format 4: no digests) still read, and upgrade."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import streamtopic as st
from streamtopic import CooccurrenceStore
from streamtopic.cli import main
from streamtopic.store import FORMAT_VERSION

from ._corpora import write_docs
from ._legacy import downgrade_to_format4

K = 4


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict[str, Path]:
    """A store of two versions (text, chunks of 64 words: dense, sparse and mirrored
    blocks, a token cache, unkept words) and a plain model of it, zarr and HDF5."""
    d = tmp_path_factory.mktemp("damage")
    store = d / "s.zarr"
    with dask.config.set(scheduler="threads"):
        st.ingest(write_docs(d / "a.txt", 400, seed=1), store, min_df=2, max_df=1.0,
                  chunk_size=64, progress=False)
        st.ingest(write_docs(d / "b.txt", 100, seed=2), store, progress=False)
        model = st.AnchorTopicModel(K, method="plain", seed=0, progress=False).fit(store)
    model.save(d / "m.zarr")
    model.save(d / "m.h5", format="hdf5")
    with CooccurrenceStore.open(store) as s:
        assert s.version == 2 and 0.05 < (s.block_sparse > 0).mean() < 0.95
    return {"store": store, "model": d / "m.zarr", "h5": d / "m.h5", "dir": d}


@pytest.fixture
def store(pristine, tmp_path) -> Path:
    """A copy of the pristine store to damage."""
    shutil.copytree(pristine["store"], tmp_path / "s.zarr")
    return tmp_path / "s.zarr"


@pytest.fixture
def model(pristine, tmp_path) -> Path:
    shutil.copytree(pristine["model"], tmp_path / "m.zarr")
    return tmp_path / "m.zarr"


def cli(*args: str) -> tuple[int, str]:
    """A command in this process: its exit status and output; never a traceback."""
    res = CliRunner().invoke(main, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "Traceback" not in res.output
    return res.exit_code, res.output


def refused(*args: str, naming: str = "") -> str:
    """The command fails with exit status 1 and one line of error naming ``naming``."""
    code, out = cli(*args)
    assert code == 1, out
    errors = [ln for ln in out.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1, out
    assert naming in errors[0], out
    return errors[0]


def cli_in_child(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """A command in its own process (a crash there is a return code, not a dead test)."""
    return subprocess.run([sys.executable, "-m", "streamtopic", *args], capture_output=True,
                          text=True, timeout=timeout)


def edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def flip(path: Path, at: float = 0.5) -> None:
    raw = bytearray(path.read_bytes())
    raw[int(len(raw) * at)] ^= 0x01
    path.write_bytes(bytes(raw))


def chunk_files(array_dir: Path) -> list[Path]:
    return sorted(p for p in array_dir.rglob("*") if p.is_file() and p.name != "zarr.json")


V2 = "versions/v000002"


def fit_args(store: Path, out: Path, *more: str) -> list[str]:
    return ["fit", str(store), "-k", str(K), "--method", "plain", "-q", "--local", "threads",
            "-o", str(out), *more]


# ----------------------------------------------------------------------------- 5: crafted


@pytest.mark.slow
@pytest.mark.parametrize("edit", ["V+1", "V-1", "V+chunk"])
def test_an_edited_vocabulary_size_is_an_error_not_a_crash(store, tmp_path, edit):
    """Case 5: ``V`` edited in the root ``zarr.json`` made ``verify`` die with ``double free
    or corruption`` (V − 1) or fit a wrong model (V + 1)."""
    delta = {"V+1": 1, "V-1": -1, "V+chunk": 64}[edit]
    edit_json(store / "zarr.json",
              lambda d: d["attributes"]["streamtopic"].__setitem__(
                  "V", d["attributes"]["streamtopic"]["V"] + delta))
    for args in (["verify", str(store)], ["info", str(store)],
                 fit_args(store, tmp_path / "m")):
        r = cli_in_child(*args)
        assert r.returncode == 1, (args, r.returncode, r.stderr)
        assert r.stderr.count("\n") == 1 and "does not match its digest" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("shape", [[None, 200], [300, 300], [128, 128]])
def test_an_edited_shape_of_q_is_an_error_not_a_crash(store, tmp_path, shape):
    """Case 5: the Q shape edited in ``Q/zarr.json`` made ``fit`` die with SIGSEGV."""
    q = store / V2 / "Q" / "zarr.json"
    edit_json(q, lambda d: d.__setitem__("shape", [s or d["shape"][0] for s in shape]))
    for args in (["verify", str(store)], fit_args(store, tmp_path / "m")):
        r = cli_in_child(*args)
        assert r.returncode == 1, (args, r.returncode, r.stderr)
        assert r.stderr.count("\n") == 1 and "versions/v000002/Q" in r.stderr, r.stderr


def _sparse_block(store: Path) -> tuple[Path, np.ndarray]:
    """A sparse block of the head (its array's directory) and its bytes."""
    for d in sorted((store / "versions").glob("v*/S/*_*")):
        raw = np.asarray(zarr.open_array(str(d), mode="r")[:])
        return d, raw
    raise AssertionError("no sparse block")


@pytest.mark.parametrize("what", ["index", "indptr", "header"])
def test_a_crafted_sparse_block_is_refused_before_scipy(store, tmp_path, what):
    """Case 5: a sparse block whose bytes (with a valid checksum) hold a column index
    outside the block, row pointers past its entries or a header of another size: an
    error naming the block, before scipy's compiled code reads the indices."""
    d, raw = _sparse_block(store)
    raw = raw.copy()
    nnz, n_rows, wide = (int(x) for x in raw[:24].view(np.int64))
    if what == "index":
        idx = raw[24 + 8 * nnz + 4 * (n_rows + 1):].view(np.int32 if wide else np.uint16)
        idx[-1] = 60000
    elif what == "indptr":
        raw[24 + 8 * nnz: 24 + 8 * nnz + 4 * (n_rows + 1)].view(np.int32)[1] = 10**6
    else:
        raw[:8].view(np.int64)[0] = nnz + 1000
    arr = zarr.open_array(str(d), mode="r+")
    arr[:] = raw
    r = cli_in_child("verify", str(store))
    assert r.returncode == 1 and "sparse block" in r.stdout, (r.returncode, r.stdout, r.stderr)
    with CooccurrenceStore.open(store) as s, pytest.raises(st.StoreError, match="sparse block"):
        s.read_dense()


def test_a_crafted_store_with_its_digests_recomputed_is_refused(store, tmp_path):
    """Case 5: whoever edits V and recomputes the root's digest still meets the checks of
    shape: the head records another V, and the vocabulary is shorter."""
    from streamtopic.integrity import seal

    root = zarr.open_group(str(store), mode="r+")
    for delta in (1, -1):
        meta = dict(root.attrs["streamtopic"])
        root.attrs["streamtopic"] = seal(dict(meta, V=meta["V"] + delta))
        refused("verify", str(store), naming=str(store))
        refused(*fit_args(store, tmp_path / "m"), naming=str(store))
        root.attrs["streamtopic"] = seal(meta)
    refused_block_map = dict(root.attrs["streamtopic"])
    assert refused_block_map["V"] == CooccurrenceStore.open(store, lease=False).V


# ----------------------------------------------------------------------------- 6: arrays


@pytest.mark.parametrize("array", ["word_counts", "doc_freq", "block_versions", "unkept",
                                   "vocab"])
@pytest.mark.parametrize("damage", ["delete", "flip"])
def test_every_array_of_a_store_is_checked(store, tmp_path, array, damage):
    """Case 6: a deleted or flipped chunk of the counts, the document frequencies, the
    block map, the unkept words or the vocabulary (each passed ``verify`` and read as
    zeros, empty strings or garbage) is refused by verify, info and fit, naming it."""
    where = store / "vocab" if array == "vocab" else store / V2 / array
    (chunk,) = chunk_files(where)[:1]
    if damage == "delete":
        chunk.unlink()
    else:
        flip(chunk)
    name = "vocabulary" if array == "vocab" else array
    code, out = cli("verify", str(store))
    assert code == 1 and name in out, out
    refused("info", str(store), naming=name)
    refused(*fit_args(store, tmp_path / "m"), naming=name)


def test_a_model_of_empty_strings_is_never_written(store, tmp_path):
    """Case 6: a deleted vocabulary chunk gave a model of empty strings at exit status 0."""
    chunk_files(store / "vocab")[0].unlink()
    refused(*fit_args(store, tmp_path / "m"), naming="vocabulary")
    assert not (tmp_path / "m").exists()


def test_the_token_cache_and_its_records_are_checked(store):
    """The records of cached partitions are chained: an edit to one is refused."""
    v1 = store / "versions" / "v000001" / "zarr.json"
    edit_json(v1, lambda d: d["attributes"]["documents"][0].__setitem__(1, 3))
    code, out = cli("verify", str(store))
    assert code == 1 and "zarr.json" in out, out


# ----------------------------------------------------------------------------- 7: info, fit


def _q_chunks(store: Path) -> list[Path]:
    with CooccurrenceStore.open(store) as s:
        files = s._block_files(np.ones((s.n_blocks,) * 2, dtype=bool))
    return sorted({Path(f) for f in files})


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_info_stops_on_every_damaged_chunk_of_q(pristine, tmp_path, damage):
    """Case 7: ``info`` exited 0 on checksum-failing or truncated Q chunks (7 of 7)."""
    chunks = _q_chunks(pristine["store"])
    assert len(chunks) >= 5
    for i, chunk in enumerate(chunks):
        copy = tmp_path / f"s{i}.zarr"
        shutil.copytree(pristine["store"], copy)
        target = copy / chunk.relative_to(pristine["store"])
        if damage == "flip":
            flip(target, at=0.3)
        else:
            target.write_bytes(target.read_bytes()[:-7])
        refused("info", str(copy), naming=str(target.relative_to(copy)))
        shutil.rmtree(copy)


def test_the_default_fit_refuses_a_lost_block_outside_its_core(store, tmp_path):
    """Case 7: the default fit read only its core's blocks, and succeeded with a lost block
    of Q outside them."""
    with CooccurrenceStore.open(store) as s:
        c = s.chunk_size
        far = [f for f in _q_chunks(store) if "/S/" in str(f) and "_0/" not in str(f)
               and not str(f.parent.name).startswith("0_")]
    assert far, "no block outside the core"
    far[-1].unlink()
    refused("fit", str(store), "-k", str(K), "-q", "--local", "threads", "--core-size",
            str(c // 2), "-o", str(tmp_path / "m"), naming="is missing")
    assert not (tmp_path / "m").exists()


# ----------------------------------------------------------------------------- 8: models


MODEL_ARRAYS = ["components", "alpha", "anchors", "topic_prevalence", "topic_cooccurrence",
                "word_probability", "vocab"]


@pytest.mark.parametrize("array", MODEL_ARRAYS)
@pytest.mark.parametrize("damage", ["flip", "delete"])
def test_every_array_of_a_model_is_checked(model, array, damage):
    """Case 8: a flipped byte in components, α, anchors or prevalence left ``topics`` at
    exit status 0; a deleted components chunk read as zeros."""
    chunk = chunk_files(model / array)[0]
    if damage == "flip":
        flip(chunk)
    else:
        chunk.unlink()
    refused("topics", str(model), naming=str(model))


def test_infer_report_and_evaluate_refuse_a_damaged_model(model, pristine, tmp_path):
    flip(chunk_files(model / "components")[0])
    refused("topics", str(model), naming="components")
    refused("infer", str(model), str(pristine["dir"] / "b.txt"), "-o",
            str(tmp_path / "t.csv"), "--local", "threads", "-q", naming=str(model))
    refused("report", str(model), "-o", str(tmp_path / "r.html"), naming=str(model))
    refused("evaluate", str(model), "--local", "threads", "-q", naming=str(model))
    assert not any((tmp_path / n).exists() for n in ("t.csv", "r.html"))


@pytest.mark.parametrize("dataset", ["components", "alpha", "anchors", "vocab"])
def test_an_hdf5_model_is_checked_too(pristine, tmp_path, dataset):
    import h5py

    path = tmp_path / "m.h5"
    shutil.copy(pristine["h5"], path)
    with h5py.File(path, "r+") as f:
        d = f[dataset]
        if dataset == "vocab":
            d[0] = "zzz"
        else:
            flat = d[...]
            flat.reshape(-1)[0] = flat.reshape(-1)[0] + 1
            d[...] = flat
    refused("topics", str(path), naming=dataset)


def test_an_edited_model_attribute_is_refused(model):
    edit_json(model / "zarr.json",
              lambda d: d["attributes"]["streamtopic_model"]["params"].__setitem__(
                  "n_topics", K + 1))
    refused("topics", str(model), naming="digest")


# ----------------------------------------------------------------------------- 9: scalars


@pytest.mark.parametrize("key", ["n_docs", "n_tokens", "q_mass", "nnz"])
def test_edited_counts_are_refused(store, tmp_path, key):
    """Case 9: edits to n_docs / n_tokens of a version went undetected."""
    edit_json(store / V2 / "zarr.json",
              lambda d: d["attributes"].__setitem__(key, d["attributes"][key] * 2 + 1))
    for args in (["verify", str(store)], ["info", str(store)],
                 fit_args(store, tmp_path / "m")):
        refused(*args, naming="does not match its digest")


def test_an_edited_chunk_size_is_refused(store, tmp_path):
    """Case 9: the root chunk size edited ended in a 67-line traceback."""
    edit_json(store / "zarr.json",
              lambda d: d["attributes"]["streamtopic"].__setitem__("chunk", 32))
    for args in (["verify", str(store)], ["info", str(store)],
                 fit_args(store, tmp_path / "m")):
        refused(*args, naming=str(store))


# ----------------------------------------------------------------------------- format 4


def test_a_store_of_format_4_reads_and_upgrades(store, pristine, tmp_path):
    """Stores written before digests read as before (the checks of shape and of recorded
    non-zeros still apply); the next ingest writes the current format, its manifest appended."""
    with CooccurrenceStore.open(store) as s:
        q, sources, vocab = s.read_dense(), s.sources, s.vocab
    downgrade_to_format4(store)
    with CooccurrenceStore.open(store) as s:
        assert s.verify() == [] and s.sources == sources and s.vocab == vocab
        np.testing.assert_array_equal(s.read_dense(), q)
    with dask.config.set(scheduler="threads"):
        st.ingest(write_docs(tmp_path / "c.txt", 50, seed=3), store, progress=False)
    with CooccurrenceStore.open(store) as s:
        assert s.version == 3 and s.verify() == []
        assert [e["path"] for e in s.sources] == [e["path"] for e in sources] + [
            str(tmp_path / "c.txt")]
        assert json.loads((store / "zarr.json").read_text())["attributes"]["streamtopic"][
            "format_version"] == FORMAT_VERSION
    assert (store / "manifest.jsonl").read_text().count("\n") == 2
