"""The billion-token benchmark's pieces, small: sharded generation (deterministic, independent
of the processes, each shard from its own streams), a directory of shards ingested as one
corpus, and ``benchmarks/billion.py`` end to end on 200,000 tokens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

import streamtopic as st
from streamtopic import synth
from streamtopic.cli import main as cli_main
from streamtopic.corpus import detect_format

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import billion  # noqa: E402  (benchmarks/billion.py)

V, K, DOC_LENGTH = 200, 5, 100
UNIT = synth.unit_docs(DOC_LENGTH)
N_DOCS = 3 * UNIT - 100  # three generation units, the last one short
KW = dict(n_words=V, n_topics=K, n_docs=N_DOCS, doc_length=DOC_LENGTH, poisson=True, seed=11)


def _read(paths: list[str]) -> tuple[sp.csr_matrix, list[list[str]]]:
    """The documents of HDF5 corpora, stacked (D×V), and each file's vocabulary."""
    mats, vocabs = [], []
    for p in paths:
        with h5py.File(p, "r") as f:
            vocab = [w.decode() if isinstance(w, bytes) else str(w) for w in f["vocab"][:]]
            mats.append(sp.csr_matrix((f["data"][:], f["indices"][:], f["indptr"][:]),
                                      shape=(f["indptr"].shape[0] - 1, len(vocab))))
            vocabs.append(vocab)
    return sp.vstack(mats, format="csr"), vocabs


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """One corpus written three ways: one file, 3 shards by 1 process, 3 shards by 2."""
    d = tmp_path_factory.mktemp("shards")
    one = synth.synthesize(d / "one.h5", parallel=False, **KW)
    serial = synth.synthesize(d / "serial", shards=3, processes=1, **KW)
    pool = synth.synthesize(d / "pool", shards=3, processes=2, **KW)
    return {"dir": d, "one": one, "serial": serial, "pool": pool}


def test_shard_bounds_are_whole_units() -> None:
    assert synth.shard_bounds(N_DOCS, DOC_LENGTH, shards=3) == [
        (0, 0, UNIT), (1, UNIT, 2 * UNIT), (2, 2 * UNIT, N_DOCS)]
    assert synth.shard_bounds(N_DOCS, DOC_LENGTH, shards=2) == [
        (0, 0, UNIT), (1, UNIT, N_DOCS)]
    assert len(synth.shard_bounds(N_DOCS, DOC_LENGTH, shards=10)) == 3  # at most one per unit
    assert synth.shard_bounds(N_DOCS, DOC_LENGTH, shard_tokens=1) == \
        synth.shard_bounds(N_DOCS, DOC_LENGTH, shards=3)
    assert synth.shard_bounds(0, DOC_LENGTH, shards=2) == []
    with pytest.raises(ValueError):
        synth.shard_bounds(N_DOCS, DOC_LENGTH, shards=2, shard_tokens=10)


def test_shards_are_the_corpus_whatever_the_processes(sharded: dict[str, object]) -> None:
    d = sharded["dir"]
    assert isinstance(d, Path)
    H_one, (vocab_one,) = _read([str(d / "one.h5")])
    for name in ("serial", "pool"):
        paths = synth.shard_paths(d / name)
        assert [os.path.basename(p) for p in paths] == [
            synth.SHARD_NAME.format(s) for s in range(3)]
        H, vocabs = _read(paths)
        assert (H != H_one).nnz == 0, name  # the same documents, in the same order
        assert all(v == vocab_one for v in vocabs)  # one vocabulary over all shards
        rep = sharded[name]
        assert isinstance(rep, dict)
        assert rep["n_tokens"] == int(H_one.sum()) and rep["nnz"] == H_one.nnz
        assert [s["n_docs"] for s in rep["shards"]] == [UNIT, UNIT, UNIT - 100]
    truth = synth.load_topics(str(d / "pool") + synth.TOPICS_SUFFIX)
    assert [s["n_docs"] for s in truth["meta"]["shards"]] == [UNIT, UNIT, UNIT - 100]
    assert truth["A"].shape == (V, K)


def test_each_shard_comes_from_its_own_streams(tmp_path: Path) -> None:
    """A shard alone is regenerated identically: it depends on (seed, its units) only."""
    out = tmp_path / "c"
    first = synth.synthesize(out, shards=3, processes=1, **KW)
    before, _ = _read(synth.shard_paths(out))
    os.remove(first["shards"][1]["path"])
    again = synth.synthesize(out, shards=3, processes=1, resume=True, **KW)
    assert [s["reused"] for s in again["shards"]] == [True, False, True]
    after, _ = _read(synth.shard_paths(out))
    assert (before != after).nnz == 0
    other = synth.synthesize(out, shards=3, processes=1, resume=True, **{**KW, "seed": 12})
    assert not any(s["reused"] for s in other["shards"])  # another plan: all written again


def test_shard_directory_refuses_foreign_files(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        synth.synthesize(tmp_path / "c", shards=2, processes=1, **KW)


def test_only_a_directory_of_hdf5_files_reads_as_hdf5(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.h5").write_bytes(b"")
    (tmp_path / "docs" / "b.txt").write_text("a document")
    assert detect_format(str(tmp_path / "docs")) == "files"
    (tmp_path / "docs" / "b.txt").unlink()
    (tmp_path / "docs" / ".hidden.txt").write_text("skipped, as in any directory")
    assert detect_format(str(tmp_path / "docs")) == "hdf5"


def test_shards_ingest_into_one_store(sharded: dict[str, object], tmp_path: Path) -> None:
    d = sharded["dir"]
    assert isinstance(d, Path)
    corpus = str(d / "pool")
    assert detect_format(corpus) == "hdf5"
    store = str(tmp_path / "s.zarr")
    res = CliRunner().invoke(cli_main, ["ingest", corpus, "--store", store, "-q",
                                        "--min-df", "1", "--max-df", "1.0"])
    assert res.exit_code == 0, res.output
    s = st.CooccurrenceStore.open(store)
    rep = sharded["pool"]
    assert isinstance(rep, dict)
    assert s.n_docs == N_DOCS and s.n_tokens == rep["n_tokens"]
    assert [src["path"] for src in s.sources] == synth.shard_paths(corpus)
    assert sum(src["n_tokens"] for src in s.sources) == rep["n_tokens"]
    s.close()


def test_gensim_slice_takes_the_first_tokens(sharded: dict[str, object]) -> None:
    d = sharded["dir"]
    assert isinstance(d, Path)
    docs, vocab, taken = billion._slice_docs(str(d / "pool"), 150_000)
    H, _ = _read(synth.shard_paths(d / "pool"))
    lengths = np.asarray(H.sum(axis=1)).ravel()
    n = int(np.searchsorted(np.cumsum(lengths), 150_000)) + 1
    assert len(docs) == n and taken == int(lengths[:n].sum()) >= 150_000
    row = H[n - 1]
    assert docs[-1] == list(zip(row.indices.tolist(), row.data.tolist(), strict=True))
    assert len(vocab) == V


def test_billion_benchmark_runs_small(tmp_path: Path) -> None:
    out = tmp_path / "billion.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "billion.py"), "--tokens", "200000",
           "--skip-gensim", "--topics", "random", "--words", "300", "-k", "5",
           "--processes", "1", "--workdir", str(tmp_path / "work"), "--quiet-wait", "0",
           "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["complete"] and json.loads(proc.stdout) == result
    gen, ing, fit = result["generate"], result["ingest"], result["fit"]
    for stage in (gen, ing, fit):
        for key in ("seconds", "peak_rss_bytes", "command"):
            assert stage[key], key
    assert 190_000 < gen["n_tokens"] < 210_000
    for key in ("tokens_per_second", "tokens_per_second_per_process", "bytes_on_disk",
                "n_shards"):
        assert gen[key] > 0, key
    for key in ("tokens_per_second", "bytes_on_disk", "nnz", "bytes_per_nnz"):
        assert ing[key] > 0, key
    assert ing["store"]["n_docs"] > 0
    assert fit["stage_seconds"] and fit["K"] == 5
    assert 0 <= fit["quality"]["matched_l1"] < 2
    assert result["acceptance"]["judged"] is False and "machine" in result
    assert not (tmp_path / "work" / "corpus").exists()  # removed without --keep
