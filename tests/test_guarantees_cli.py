"""Issue 15, points 3, 7, 9 and 12: what the command line and the readers refuse, and how.

* 3: ``fit`` never ingests a damaged store, a saved model or a damaged model as raw input.
* 7: the HDF5 reader refuses zero and negative counts, as the UCI reader does.
* 9: OS errors are one line naming the path; Dask's worker logs never come before it.
* 12: the --sketch-dim message, absent UCI documents, a closed output pipe, and symbolic links
  inside directory inputs.
"""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import dask
import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic
from streamtopic import CooccurrenceStore, CorpusError, synth
from streamtopic.cli import main as cli_main
from streamtopic.corpus import read_corpus
from streamtopic.model import AnchorTopicModel

V, K = 40, 3
ROOT = Path(streamtopic.__file__).resolve().parents[1]
WORDS = ["apple", "brook", "cedar", "delta", "ember", "fjord", "grove", "heron"]


# ----------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def pop_store(tmp_path_factory, make_population_store) -> Path:
    """A small population store (no ingest): V = 40 words, K = 3 planted topics."""
    A, _ = synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=0)
    return make_population_store(tmp_path_factory.mktemp("pop") / "pop.zarr", A)


@pytest.fixture(scope="module")
def models(pop_store, tmp_path_factory) -> dict[str, Path]:
    """The same model saved as zarr and as HDF5."""
    d = tmp_path_factory.mktemp("models")
    with dask.config.set(scheduler="threads"):
        model = AnchorTopicModel(K, method="plain", progress=False).fit(str(pop_store))
    out = {"zarr": d / "m.zarr", "hdf5": d / "m.h5"}
    for fmt, path in out.items():
        model.save(str(path), format=fmt)
    return out


def cli(*args: str) -> tuple[int, str, BaseException | None]:
    """The command line in this process: (exit code, output, exception)."""
    result = CliRunner().invoke(cli_main, [str(a) for a in args])
    return result.exit_code, result.output, result.exception


def run_cli(*args: object, **kwargs) -> subprocess.CompletedProcess:
    """``python -m streamtopic ARGS`` in a child process, as a user runs it (local
    scheduler, this checkout's package), its output captured unless told otherwise."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.pop("STREAMTOPIC_SCHEDULER", None)
    if "stdout" not in kwargs:
        kwargs["capture_output"] = True
    return subprocess.run([sys.executable, "-m", "streamtopic", *map(str, args)], env=env,
                          text=True, timeout=120, check=False, **kwargs)


# ----------------------------------------------------------------------------- point 3


def test_fit_refuses_a_store_whose_root_metadata_is_truncated(pop_store, tmp_path):
    bad = Path(shutil.copytree(pop_store, tmp_path / "bad.zarr"))
    meta = (bad / "zarr.json").read_bytes()
    (bad / "zarr.json").write_bytes(meta[: len(meta) // 3])
    out = tmp_path / "m.zarr"
    code, output, _ = cli("fit", bad, "-k", K, "-o", out, "-q")
    assert code == 1
    assert "looks like a co-occurrence store but does not open" in output
    assert str(bad) in output and len(output.strip().splitlines()) == 1
    assert not out.exists() and not Path(f"{out}.store").exists()


def test_fit_refuses_a_directory_holding_only_a_writer_lock(tmp_path):
    d = tmp_path / "half.store"
    d.mkdir()
    (d / ".streamtopic.lock").write_text("")
    (d / "notes.txt").write_text("apple brook cedar delta\n" * 20)
    out = tmp_path / "m.zarr"
    code, output, _ = cli("fit", d, "-k", K, "-o", out, "-q")
    assert code == 1 and "looks like a co-occurrence store" in output
    assert not Path(f"{out}.store").exists()


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_fit_refuses_a_saved_model(models, tmp_path, fmt):
    out = tmp_path / "m2.zarr"
    code, output, _ = cli("fit", models[fmt], "-k", K, "-o", out, "-q")
    assert code == 1
    assert f"{models[fmt]}: is a saved topic model" in output
    assert not out.exists() and not Path(f"{out}.store").exists()


def test_fit_refuses_a_damaged_model(models, tmp_path):
    bad = Path(shutil.copytree(models["zarr"], tmp_path / "bad-model.zarr"))
    (bad / "zarr.json").write_text("{")
    out = tmp_path / "m2.zarr"
    code, output, _ = cli("fit", bad, "-k", K, "-o", out, "-q")
    assert code == 1 and "looks like a saved topic model but does not load" in output
    assert not Path(f"{out}.store").exists()


# ----------------------------------------------------------------------------- point 7


def write_h5(path: Path, data: list[int]) -> Path:
    """Four documents over WORDS, CSR, with the given counts (8 entries)."""
    with h5py.File(path, "w") as f:
        f["indptr"] = np.array([0, 2, 4, 6, 8], dtype=np.int64)
        f["indices"] = np.array([0, 1, 2, 3, 4, 5, 6, 7], dtype=np.int32)
        f["data"] = np.asarray(data, dtype=np.int32)
        f.create_dataset("vocab", data=np.array(WORDS, dtype=object),
                         dtype=h5py.string_dtype())
    return path


def write_uci(d: Path, data: list[int]) -> Path:
    """The same four documents as UCI bag-of-words."""
    rows = [(doc + 1, 2 * doc + k + 1, data[2 * doc + k]) for doc in range(4) for k in range(2)]
    lines = ["4", str(len(WORDS)), str(len(rows))] + [f"{a} {b} {c}" for a, b, c in rows]
    (d / "docword.t.txt").write_text("\n".join(lines) + "\n")
    (d / "vocab.t.txt").write_text("\n".join(WORDS) + "\n")
    return d / "docword.t.txt"


def read_all(path: Path) -> list:
    return list(read_corpus(str(path)).iter_chunks())


@pytest.mark.parametrize("count", [0, -3])
def test_hdf5_counts_must_be_positive_as_in_uci(tmp_path, count):
    data = [1, 2, 1, 1, count, 2, 1, 1]  # entry 4: row 2
    h5 = write_h5(tmp_path / "c.h5", data)
    with pytest.raises(CorpusError) as err:
        read_all(h5)
    msg = str(err.value)
    assert msg.startswith(f"{h5}: ") and "dataset 'data', row 2" in msg
    assert "count must be a positive integer" in msg and str(count) in msg
    with pytest.raises(CorpusError) as uci:  # the UCI reader refuses the same input
        read_all(write_uci(tmp_path, data))
    assert "docword.t.txt:8" in str(uci.value)
    # and the good file reads
    assert sum(c.n_docs for c in read_all(write_h5(tmp_path / "ok.h5", [1] * 8))) == 4


def test_hdf5_negative_count_never_reaches_a_store(tmp_path):
    h5 = write_h5(tmp_path / "c.h5", [1, 2, 1, 1, -1, 2, 1, 1])
    with pytest.raises(CorpusError, match="count must be a positive integer"):
        streamtopic.ingest(str(h5), tmp_path / "s.zarr", min_df=1, max_df=1.0, progress=False)
    assert not (tmp_path / "s.zarr").exists()


# ----------------------------------------------------------------------------- point 9


@pytest.mark.parametrize("exc, shown", [
    (PermissionError(errno.EACCES, "Permission denied", "/data/s.zarr/zarr.json"),
     "/data/s.zarr/zarr.json: Permission denied"),
    (OSError(errno.EROFS, "Read-only file system", "/ro/s.zarr/.streamtopic.lock"),
     "/ro/s.zarr/.streamtopic.lock: Read-only file system"),
    (IsADirectoryError(errno.EISDIR, "Is a directory", "/data/s.zarr"),
     "/data/s.zarr: Is a directory"),
])
def test_os_errors_are_one_line_with_the_path(monkeypatch, exc, shown):
    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(CooccurrenceStore, "open", fail)
    code, output, raised = cli("info", "/data/s.zarr")
    assert code == 1 and isinstance(raised, SystemExit)
    assert output == f"Error: {shown}\n"


def test_a_full_disk_names_what_the_command_writes(monkeypatch, tmp_path):
    """zarr raises a full disk with no file name: the message names the store."""
    import streamtopic.cooccurrence

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(streamtopic.cooccurrence, "ingest", full)
    text = tmp_path / "t.txt"
    text.write_text("apple brook cedar\n")
    store = tmp_path / "s.zarr"
    code, output, raised = cli("ingest", text, "-s", store, "-q", "--local", "threads")
    assert code == 1 and isinstance(raised, SystemExit)
    assert output == f"Error: {store}: No space left on device\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_real_full_device_is_one_line(models):
    """``evaluate -o /dev/full``: the write fails with ENOSPC, as on a full disk."""
    proc = run_cli("evaluate", models["zarr"], "-o", "/dev/full", "-q", "--local", "threads")
    assert proc.returncode == 1
    assert proc.stderr == "Error: /dev/full: No space left on device\n"


def bad_jsonl(path: Path) -> Path:
    path.write_text('{"text": "apple brook cedar"}\n{"text": "delta ember fjord"}\n'
                    '{"text": "grove heron\n{"text": "apple cedar"}\n')
    return path


@pytest.mark.parametrize("command", ["ingest", "fit"])
def test_worker_logs_never_precede_the_error(tmp_path, command):
    """Text runs on a local cluster of processes: a worker's "Compute Failed" log must not
    be printed in front of the one-line error."""
    src = bad_jsonl(tmp_path / "docs.jsonl")
    args = (["-s", tmp_path / "s.zarr"] if command == "ingest"
            else ["-k", K, "-o", tmp_path / "m.zarr"])
    proc = run_cli(command, src, *args, "-q", "--local", "cluster", "--workers", "1")
    assert proc.returncode == 1
    assert proc.stderr == f"Error: {src}:3: invalid JSON: Unterminated string starting at\n"


# ----------------------------------------------------------------------------- point 12


def test_sketch_dim_smaller_than_k_says_so(pop_store):
    model = AnchorTopicModel(K, method="plain", sketch_dim=K - 1, progress=False)
    with pytest.raises(ValueError) as err:
        model.fit(str(pop_store))
    msg = str(err.value)
    assert "--sketch-dim" in msg and "at least" in msg and "affinely" not in msg
    AnchorTopicModel(K, method="plain", sketch_dim=K, progress=False).fit(str(pop_store))


def test_absent_uci_documents_are_reported_apart(tmp_path):
    """D = 10 declared; documents 1-6 have entries (document 3 a single token), 7-10 none."""
    entries = [(1, 1, 2), (1, 2, 1), (2, 2, 1), (2, 3, 2), (3, 4, 1), (4, 5, 1), (4, 6, 1),
               (5, 7, 3), (6, 8, 1), (6, 1, 1)]
    lines = ["10", str(len(WORDS)), str(len(entries))] + [" ".join(map(str, e)) for e in entries]
    with gzip.open(tmp_path / "docword.t.txt.gz", "wt") as fh:
        fh.write("\n".join(lines) + "\n")
    (tmp_path / "vocab.t.txt").write_text("\n".join(WORDS) + "\n")
    report = streamtopic.ingest(str(tmp_path / "docword.t.txt.gz"), tmp_path / "s.zarr",
                                min_df=1, max_df=1.0, progress=False)
    assert report.n_docs == 5 and report.n_absent_docs == 4
    summary = report.summary()
    assert "  1 documents skipped (fewer than 2 tokens)" in summary.splitlines()
    assert "4 documents declared in the UCI header but absent" in summary
    # the store counts both as skipped, as it always has
    stored = CooccurrenceStore.open(tmp_path / "s.zarr").info()["n_skipped_docs"]
    assert report.n_skipped_docs == 5 == stored


@pytest.mark.parametrize("args", [["info", "{store}"], ["topics", "{model}"], ["demo-path"]])
def test_a_closed_output_pipe_ends_quietly(pop_store, models, args):
    """``streamtopic info STORE | head -1``: the reader goes away; no message, and the
    status of a process ended by SIGPIPE, as Unix tools have."""
    args = [a.format(store=pop_store, model=models["zarr"]) for a in args]
    r, w = os.pipe()
    os.close(r)  # the reader has gone before the first line is written
    try:
        proc = run_cli(*args, stdout=w, stderr=subprocess.PIPE)
    finally:
        os.close(w)
    assert proc.stderr == ""
    assert proc.returncode == 128 + signal.SIGPIPE


def test_directories_skip_symbolic_links_as_tar_archives_do(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("grove heron grove heron\n")
    (outside / "more.txt").write_text("fjord ember\n")
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.txt").write_text("apple brook cedar\n")
    (docs / "sub" / "b.txt").write_text("delta ember fjord\n")
    (docs / "link.txt").symlink_to(outside / "secret.txt")
    (docs / "linkdir").symlink_to(outside, target_is_directory=True)
    with tarfile.open(tmp_path / "docs.tar", "w") as tar:
        tar.add(docs, arcname="docs")  # links are stored as links, not followed

    for path in (docs, tmp_path / "docs.tar"):
        chunks = list(read_corpus(str(path)).iter_chunks())
        assert sum(c.n_docs for c in chunks) == 2  # a.txt and sub/b.txt
        terms = {t for c in chunks for t in c.terms}
        assert terms == {"apple", "brook", "cedar", "delta", "ember", "fjord"}


def test_written_aside_takes_a_directory_path_with_a_trailing_slash(tmp_path):
    """``-o m.zarr/`` names m.zarr: the temporary path is beside it, not inside it."""
    from streamtopic._io import written_aside

    with written_aside(str(tmp_path / "m.zarr") + "/") as tmp:
        os.makedirs(tmp)
        with open(os.path.join(tmp, "x"), "w") as fh:
            fh.write("1")
    assert (tmp_path / "m.zarr" / "x").read_text() == "1"
    assert sorted(os.listdir(tmp_path)) == ["m.zarr"]


def test_fit_format_hdf5_on_text_names_model_format(tmp_path):
    """``fit --format`` is the input's format (as on every command); the old meaning, the
    model's file format, now ``--model-format``, is named when ``--format hdf5`` meets text."""
    text = tmp_path / "notes.txt"
    text.write_text("alpha beta gamma\nbeta gamma delta\n")
    r = CliRunner().invoke(cli_main, ["fit", str(text), "-k", "2", "-o", str(tmp_path / "m.h5"),
                                  "--format", "hdf5"])
    assert r.exit_code == 2 and "--model-format" in r.output
    assert not (tmp_path / "m.h5.store").exists()
