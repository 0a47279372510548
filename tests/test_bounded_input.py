"""Inputs that are not bounded (issue 30, cases 10–13 and 15): each is refused with one line
naming the file (and line, row or dataset), and nothing is committed to the store; the
corrected input then ingests under the same path.

* 10: counts past int32 (UCI ``4294967297``, ``2147483648``, 20 digits; HDF5 ``2**32 + 1``).
* 11: HDF5 datasets of the wrong kind or shape, a repeated vocabulary term.
* 12: JSON nested 100,000 levels deep; asyncio's "Task exception was never retrieved" under
  the local cluster.
* 13: a line or document over the limit (a gzip bomb of one endless line), configurable.
* 15: a store (or a model) given as input.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import dask
import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic as st
from streamtopic import CooccurrenceStore
from streamtopic.cli import main
from streamtopic.limits import DEFAULT_MAX_LINE_BYTES, MAX_JSON_DEPTH, json_record

WORDS = ["apple", "brook", "cedar", "delta", "ember", "fjord", "grove", "heron"]


def cli(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "Traceback" not in res.output
    return res.exit_code, res.output


def refused(*args: object, naming: str) -> str:
    """The command exits 1 with one line of error naming ``naming``."""
    code, out = cli(*args)
    assert code == 1, out
    assert out.count("\n") == 1 and out.startswith("Error: "), out
    assert naming in out, out
    return out


def tree(path: Path) -> dict[str, str]:
    """A store's files and their digests (its lock file and readers' folder aside)."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()
            and p.name != ".streamtopic.lock" and "readers" not in p.parts}


@pytest.fixture
def base_store(tmp_path) -> Path:
    """A UCI store of four documents over WORDS."""
    store = tmp_path / "base.zarr"
    with dask.config.set(scheduler="sync"):
        st.ingest(write_uci(tmp_path / "ok", [1, 2, 3, 1, 2, 1, 1, 2]), store, min_df=1,
                  max_df=1.0, progress=False)
    return store


def write_uci(d: Path, counts: list[object], name: str = "t") -> Path:
    """Four documents over WORDS, two entries each, with the given counts (as written)."""
    d.mkdir(exist_ok=True)
    rows = [(doc + 1, 2 * doc + k + 1, counts[2 * doc + k]) for doc in range(4)
            for k in range(2)]
    lines = ["4", str(len(WORDS)), str(len(rows))] + [f"{a} {b} {c}" for a, b, c in rows]
    (d / f"docword.{name}.txt").write_text("\n".join(lines) + "\n")
    (d / f"vocab.{name}.txt").write_text("\n".join(WORDS) + "\n")
    return d / f"docword.{name}.txt"


def write_h5(path: Path, **datasets: object) -> Path:
    """Four documents over WORDS, CSR; ``datasets`` replace (or, None, drop) the defaults."""
    default: dict[str, object] = {
        "indptr": np.array([0, 2, 4, 6, 8], dtype=np.int64),
        "indices": np.arange(8, dtype=np.int32),
        "data": np.array([1, 2, 1, 1, 3, 2, 1, 1], dtype=np.int32),
        "vocab": np.array(WORDS, dtype=object),
    }
    default.update(datasets)
    with h5py.File(path, "w") as f:
        for name, value in default.items():
            if value is None:
                continue
            arr = np.asarray(value)
            if arr.dtype == object:
                f.create_dataset(name, data=arr, dtype=h5py.string_dtype())
            else:
                f[name] = arr
    return path


# ----------------------------------------------------------------------------- 10


@pytest.mark.parametrize("count", ["4294967297", "2147483648", "12345678901234567890",
                                   "99999999999999999999999999"])
def test_a_uci_count_past_int32_is_refused_and_nothing_committed(base_store, tmp_path,
                                                                   count):
    """Not stored as 1, no document dropped: refused, naming the file and line; the store
    keeps its version and manifest, and the corrected file then ingests under that path."""
    before = tree(base_store)
    bad = write_uci(tmp_path / "in", [1, 2, 1, 1, count, 2, 1, 1], name="new")
    out = refused("ingest", bad, "-s", base_store, "-q", "--local", "sync",
                  naming=f"{bad}:8: ")
    assert "count above 2,147,483,647" in out or "number too large" in out
    assert tree(base_store) == before
    write_uci(tmp_path / "in", [1, 2, 1, 1, 7, 2, 1, 1], name="new")
    code, text = cli("ingest", bad, "-s", base_store, "-q", "--local", "sync")
    assert code == 0, text
    with CooccurrenceStore.open(base_store) as s:
        assert s.version == 2 and s.n_tokens == 13 + 16


def test_the_largest_count_reads(tmp_path):
    """2³¹ − 1 is a count: read as it is."""
    path = write_uci(tmp_path, [1, 2, 1, 1, 2**31 - 1, 2, 1, 1])
    chunks = list(st.read_corpus(str(path)).iter_chunks())
    assert max(int(c.counts.max()) for c in chunks) == 2**31 - 1


def test_an_hdf5_count_past_int32_is_refused(base_store, tmp_path):
    before = tree(base_store)
    h5 = write_h5(tmp_path / "c.h5", data=np.array([1, 2, 1, 1, 2**32 + 1, 2, 1, 1]))
    out = refused("ingest", h5, "-s", base_store, "-q", "--local", "sync", naming=str(h5))
    assert "dataset 'data', row 2" in out and "4294967297" in out
    assert tree(base_store) == before


# ----------------------------------------------------------------------------- 11


@pytest.mark.parametrize("case, message", [
    ({"vocab": np.array(["apple", "brook", "apple", "delta", "ember", "fjord", "grove",
                         "heron"], dtype=object)},
     "dataset 'vocab': term 'apple' repeated (entries 0 and 2)"),
    ({"indices": np.arange(8, dtype=np.float64)},
     "dataset 'indices': expected integers, found dtype float64"),
    ({"indptr": np.array([0.0, 2, 4, 6, 8])},
     "dataset 'indptr': expected integers, found dtype float64"),
    ({"data": np.array([b"x"] * 8)}, "dataset 'data': expected integers or floats"),
    ({"indptr": np.array([[0, 2, 4, 6, 8]])}, "dataset 'indptr': expected a 1-D array"),
    ({"indptr": np.array([0, 2, 4, 6, 9])}, "dataset 'indices': 8 entries, but 'indptr' "
                                            "ends at 9"),
    ({"indptr": np.array([1, 2, 4, 6, 8])}, "dataset 'indptr': starts at 1, expected 0"),
    ({"indptr": np.array([0, 5, 4, 6, 8])}, "dataset 'indptr': decreasing"),
    ({"indices": np.array([0, 1, 2, 3, 4, 5, 6, 99])}, "dataset 'indices': term index out "
                                                       "of range"),
    ({"vocab": np.arange(8)}, "dataset 'vocab': expected strings"),
    ({"data": None}, "lacks dataset(s) data"),
], ids=["repeated-term", "float-indices", "float-indptr", "string-data", "2d-indptr",
        "indptr-past-end", "indptr-start", "indptr-decreasing", "index-out-of-range",
        "numeric-vocab", "missing-data"])
def test_a_malformed_hdf5_corpus_names_file_and_dataset(base_store, tmp_path, case, message):
    before = tree(base_store)
    h5 = write_h5(tmp_path / "c.h5", **case)
    out = refused("ingest", h5, "-s", base_store, "-q", "--local", "sync",
                  naming=f"Error: {h5}: ")
    assert message in out
    assert tree(base_store) == before


# ----------------------------------------------------------------------------- 12


def test_deeply_nested_json_is_one_line(tmp_path):
    src = tmp_path / "deep.jsonl"
    src.write_text('{"text": "apple brook cedar"}\n' + '{"a": ' + "[" * 100_000
                   + "]" * 100_000 + "}\n")
    out = refused("ingest", src, "-s", tmp_path / "s.zarr", "-q", "--local", "sync",
                  naming=f"{src}:2: ")
    assert f"JSON nested deeper than {MAX_JSON_DEPTH} levels" in out
    assert not (tmp_path / "s.zarr").exists()


def test_json_depth_counts_only_brackets_outside_strings():
    text = '{"text": "' + "[" * 10_000 + '", "x": [[1]]}'
    assert json_record(text)["x"] == [[1]]
    assert json_record("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None


NEVER_RETRIEVED = textwrap.dedent("""
    import asyncio, gc, logging, sys
    logging.basicConfig(level=logging.WARNING)  # as a user's logging set-up would
    from streamtopic.cluster import scheduler

    async def fails():
        raise ValueError("a failed task")

    with scheduler(local="cluster", n_workers=1, quiet=True):
        loop = asyncio.new_event_loop()
        task = loop.create_task(fails())
        loop.run_until_complete(asyncio.sleep(0.01))
        del task
        gc.collect()
        loop.close()
""")


@pytest.mark.slow
def test_asyncio_never_retrieved_is_silent_under_the_local_cluster():
    """A task's exception that an event loop drops (as the client's does when a bad record
    fails a partition) is not printed: asyncio's logger is silenced as Dask's is."""
    proc = subprocess.run([sys.executable, "-c", NEVER_RETRIEVED], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Task exception was never retrieved" not in proc.stderr, proc.stderr
    assert proc.stderr == ""


@pytest.mark.slow
def test_a_bad_record_under_the_local_cluster_is_one_line(tmp_path):
    src = tmp_path / "docs.jsonl"
    with open(src, "w") as fh:
        for _ in range(4):
            for i in range(20_000):
                fh.write(f'{{"text": "apple brook cedar delta {i}"}}\n')
            fh.write('{"text": 3}\n')
    proc = subprocess.run([sys.executable, "-m", "streamtopic", "ingest", str(src), "-s",
                           str(tmp_path / "s.zarr"), "-q", "--local", "cluster",
                           "--workers", "2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"Error: {src}:") and "is not a string (int)" in proc.stderr


# ----------------------------------------------------------------------------- 13


def test_the_default_limit_is_generous():
    assert DEFAULT_MAX_LINE_BYTES == 64 * 2**20


def gzip_bomb(path: Path, text_bytes: int, nul_bytes: int) -> Path:
    """Text lines, then one endless line of NUL bytes (compresses a thousandfold)."""
    line = b"apple brook cedar delta ember fjord grove heron\n"
    with gzip.open(path, "wb", compresslevel=6) as fh:
        fh.write(line * (text_bytes // len(line)))
        block = b"\0" * 2**20
        for _ in range(nul_bytes // len(block)):
            fh.write(block)
    return path


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_gzip_bomb_is_refused_at_the_limit(base_store, tmp_path, monkeypatch, how):
    """2 MB of text then 64 MB of NUL bytes, with the limit at 4 MiB: refused (by the
    planning scan, before 8 MiB of the line were held), naming the file and the byte where
    the line starts; the store is untouched."""
    bomb = gzip_bomb(tmp_path / "bomb.txt.gz", 2 * 2**20, 64 * 2**20)
    before = tree(base_store)
    args: list[object] = ["ingest", bomb, "-s", base_store, "-q", "--local", "sync"]
    if how == "option":
        args += ["--max-line-bytes", str(4 * 2**20)]
    else:
        monkeypatch.setenv("STREAMTOPIC_MAX_LINE_BYTES", str(4 * 2**20))
    out = refused(*args, naming=f"Error: {bomb} (byte ")
    assert "a line of at least" in out and "over the limit of 4,194,304" in out
    assert "--max-line-bytes" in out
    assert tree(base_store) == before


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
def test_a_long_line_of_a_plain_file_is_refused(tmp_path, fmt):
    src = tmp_path / f"docs.{'txt' if fmt == 'text' else 'jsonl'}"
    short = "apple brook cedar" if fmt == "text" else '{"text": "apple brook cedar"}'
    long = "apple " * 3000 if fmt == "text" else '{"text": "' + "apple " * 3000 + '"}'
    src.write_text(f"{short}\n{long}\n{short}\n")
    out = refused("ingest", src, "-s", tmp_path / "s.zarr", "-q", "--local", "sync",
                  "--max-line-bytes", "10000", naming=f"Error: {src}:2: ")
    assert "a line of 18,0" in out and "over the limit of 10,000" in out
    assert not (tmp_path / "s.zarr").exists()
    code, text = cli("ingest", src, "-s", tmp_path / "s.zarr", "-q", "--local", "sync",
                     "--min-df", "1", "--max-df", "1.0")
    assert code == 0, text  # under the default limit


def test_a_long_document_of_a_directory_is_refused(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("apple brook cedar\n")
    (docs / "b.txt").write_text("apple brook cedar\n" * 1000)
    out = refused("ingest", docs, "-s", tmp_path / "s.zarr", "-q", "--local", "sync",
                  "--max-line-bytes", "10000", naming=f"Error: {docs}: document 'b.txt'")
    assert "over the limit of 10,000" in out


def test_the_limit_is_checked():
    with pytest.raises(ValueError, match="max_line_bytes=0"):
        st.read_corpus(__file__, max_line_bytes=0)


# ----------------------------------------------------------------------------- 15


def test_a_store_given_as_input_is_refused(base_store, tmp_path):
    new = tmp_path / "new.zarr"
    out = refused("ingest", base_store, "-s", new, "-q", "--local", "sync",
                  naming=f"Error: {base_store}: is a zarr store")
    assert "not a corpus" in out
    assert not new.exists()
    before = tree(base_store)
    refused("ingest", base_store, "-s", base_store, "-q", "--local", "sync",
            naming=str(base_store))
    assert tree(base_store) == before


def test_a_model_given_as_input_is_refused(base_store, tmp_path):
    rng = np.random.default_rng(0)
    text = tmp_path / "docs.txt"
    text.write_text("".join(" ".join(rng.choice(WORDS, size=20)) + "\n" for _ in range(200)))
    with dask.config.set(scheduler="sync"):
        st.ingest(str(text), tmp_path / "t.zarr", min_df=1, max_df=1.0, progress=False)
        st.AnchorTopicModel(2, method="plain", progress=False).fit(tmp_path / "t.zarr").save(
            tmp_path / "m.zarr")
    refused("ingest", tmp_path / "m.zarr", "-s", tmp_path / "new.zarr", "-q", "--local",
            "sync", naming="is a zarr store")
    with pytest.raises(st.CorpusError, match="is a zarr store"):
        st.read_corpus([str(tmp_path / "m.zarr")], format="text")


def test_asyncio_logger_quiet_in_process():
    from streamtopic.cluster import QUIET_LOGGERS, quiet_logs

    quiet_logs()
    assert all(logging.getLogger(n).level == logging.CRITICAL for n in QUIET_LOGGERS)
