"""Operations (issue 30, cases 16–18): a refused or failed fit writes nothing into the store;
an error of writing names the path (a full disk, a file size limit, a short write); a killed
``infer -o`` leaves debris that the next run collects."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import dask
import pytest
from click.testing import CliRunner

import streamtopic as st
from streamtopic._io import written_aside
from streamtopic.cli import main

from ._corpora import write_docs


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """A small text store and a plain model of it."""
    d = tmp_path_factory.mktemp("ops")
    store = d / "s.zarr"
    with dask.config.set(scheduler="threads"):
        st.ingest(write_docs(d / "a.txt", 300, seed=1), store, min_df=2, max_df=1.0,
                  progress=False)
        model = st.AnchorTopicModel(4, method="plain", seed=0, progress=False).fit(store)
    model.save(d / "m.zarr")
    return {"store": store, "model": d / "m.zarr", "text": d / "a.txt", "dir": d}


def tree(path: Path) -> dict[str, str]:
    """Every entry below ``path`` (the lock file and the readers' folder aside) and the
    digest of every file's bytes."""
    out = {}
    for p in sorted(path.rglob("*")):
        rel = str(p.relative_to(path))
        if rel.startswith("readers/") or rel == ".streamtopic.lock":
            continue
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def cli(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "Traceback" not in res.output
    return res.exit_code, res.output


# ----------------------------------------------------------------------------- 16


@pytest.mark.parametrize("k", ["100000", "250"])
def test_a_refused_fit_writes_nothing_into_the_store(made, tmp_path, k):
    """``fit S -k 100000`` (more topics than words: refused before anything is opened for
    writing) and ``-k 250`` (fails in the anchor search, after the rectified cache entry was
    taken) leave the store as it was: no ``rectified/`` entry, lock or folder."""
    before = tree(made["store"])
    code, out = cli("fit", made["store"], "-k", k, "-q", "--local", "sync", "-o",
                    tmp_path / "m.zarr")
    assert code == 1 and out.count("Error:") == 1, out
    assert tree(made["store"]) == before
    assert not (tmp_path / "m.zarr").exists()


def test_too_many_topics_names_the_store(made, tmp_path):
    code, out = cli("fit", made["store"], "-k", "100000", "-q", "--local", "sync", "-o",
                    tmp_path / "m.zarr")
    assert code == 1
    assert out.startswith("Error: n_topics=100000: must be below the ")
    assert str(made["store"]) in out


# ----------------------------------------------------------------------------- 17


def test_a_short_write_names_its_file(tmp_path):
    """numpy's ``N requested and M written`` (a short write) names no file: written_aside
    names its target."""
    target = tmp_path / "out.npy"
    with pytest.raises(OSError) as info:
        with written_aside(target) as tmp:
            Path(tmp).write_bytes(b"x")
            raise OSError("29555 requested and 11760 written")
    assert info.value.filename == str(target)
    assert "29555 requested and 11760 written" in str(info.value)
    assert "disk full" in str(info.value)
    assert not target.exists() and os.listdir(tmp_path) == []


@pytest.mark.parametrize("atomic", [True, False])
def test_a_replaced_directory_is_never_deleted_in_place(tmp_path, monkeypatch, atomic):
    """Replacing a directory (a model, a store) deletes nothing inside the target: a kill
    while the old tree is removed leaves the new tree whole at the target (the old way,
    removing the old tree first, left half a model when an update was killed then). With
    an atomic swap (Linux) or without one (two renames)."""
    import streamtopic._io as io

    target = tmp_path / "m.zarr"
    (target / "a").mkdir(parents=True)
    (target / "a" / "x").write_text("old")
    (target / "vocab").write_text("old")
    if not atomic:
        monkeypatch.setattr(io, "_exchange", lambda a, b: False)
    def killed(path, **kwargs):  # the process dies while it removes a tree
        assert os.path.realpath(path) != os.path.realpath(target), "deleted in the target"
        raise KeyboardInterrupt

    monkeypatch.setattr(io, "remove_path", killed)
    monkeypatch.setattr(io.shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        with written_aside(target) as tmp:
            (Path(tmp) / "a").mkdir(parents=True)
            (Path(tmp) / "a" / "x").write_text("new")
            (Path(tmp) / "vocab").write_text("new")
    assert (target / "vocab").read_text() == "new" and (target / "a" / "x").read_text() == "new"
    monkeypatch.undo()
    debris = set(os.listdir(tmp_path))  # the killed run's old tree, under a hidden name
    with written_aside(target) as tmp:  # an uninterrupted replacement leaves nothing more
        Path(tmp).mkdir()
        (Path(tmp) / "vocab").write_text("newer")
    assert (target / "vocab").read_text() == "newer"
    assert set(os.listdir(tmp_path)) == debris


def test_an_error_with_a_file_name_keeps_it(tmp_path):
    with pytest.raises(OSError) as info:
        with written_aside(tmp_path / "out.npy"):
            raise OSError(errno.ENOSPC, "No space left on device", "/elsewhere/x")
    assert info.value.filename == "/elsewhere/x"


LIMITED = textwrap.dedent("""
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))
    from streamtopic.cli import main
    main(sys.argv[1:], prog_name="streamtopic")
""")


@pytest.mark.parametrize("name", ["out.npz", "out.csv", "out.parquet"])
def test_a_file_size_limit_in_infer_names_the_output(made, tmp_path, name):
    """A write refused by the file system (here a file size limit: EFBIG, as ENOSPC on a
    full disk) names the output ``infer`` writes, in one line; nothing is left beside it."""
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-c", LIMITED, "infer", str(made["model"]),
                           str(made["text"]), "-o", str(out), "-q", "--local", "sync"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == f"Error: {out}: File too large\n"  # the output, not a scratch part
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- 18


KILLED = textwrap.dedent("""
    import os, signal, sys
    import streamtopic.inference as inf
    real = inf._row_blocks

    def killed(*args, **kwargs):
        for block in real(*args, **kwargs):
            yield block
            os.kill(os.getpid(), signal.SIGKILL)

    inf._row_blocks = killed
    from streamtopic.cli import main
    main(sys.argv[1:], prog_name="streamtopic")
""")


def test_a_killed_infer_leaves_debris_that_the_next_run_collects(made, tmp_path):
    """``infer -o`` killed while it writes its output (its parts written, a partial output
    begun) leaves hidden debris; the next ``infer`` to the same output removes it."""
    out = tmp_path / "out.csv"
    args = [str(made["model"]), str(made["text"]), "-o", str(out), "-q", "--local", "sync"]
    proc = subprocess.run([sys.executable, "-c", KILLED, "infer", *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr
    debris = sorted(os.listdir(tmp_path))
    assert any(n.startswith(".out.csv.parts-") for n in debris), debris
    assert any(n.startswith(".out.csv.partial-") for n in debris), debris
    code, text = cli("infer", *args)
    assert code == 0, text
    assert sorted(os.listdir(tmp_path)) == ["out.csv"]
