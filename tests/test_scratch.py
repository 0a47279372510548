"""Where a fit writes (issue 15, points 10 and 11): scratch outside the store, so that a
read-only store can be fitted; the debris of killed fits collected; the rectified cache bounded,
listed and cleared."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic as st
from streamtopic import synth
from streamtopic._locking import FileLock, owner_record
from streamtopic.cli import main
from streamtopic.model import AnchorTopicModel

V, K = 300, 5
PLAIN_AP = {"method": "plain", "rectify": "ap"}
KEY = "v000001-K{k}-ap-5-seed0"  # the default 5 rectification iterations


@pytest.fixture(scope="module")
def built(tmp_path_factory, make_semi_synthetic_store) -> Path:
    """A small store (V = 300, 2,000 documents) with its recorded input, for refinement."""
    A, _ = synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=0)
    return make_semi_synthetic_store(tmp_path_factory.mktemp("scratch-store"), A, 2000,
                                     doc_length=50, seed=1)


@pytest.fixture
def store(built, tmp_path) -> Path:
    """A fresh copy of the small store for one test."""
    dst = tmp_path / "s.zarr"
    shutil.copytree(built, dst)
    return dst


@pytest.fixture(scope="module")
def reference(built, tmp_path_factory) -> dict[str, np.ndarray]:
    """Topics of fits of a writable copy of the store, by method."""
    out = {}
    for name, params in (("default", {}), ("plain-ap", PLAIN_AP)):
        copy = tmp_path_factory.mktemp("ref") / "s.zarr"
        shutil.copytree(built, copy)
        out[name] = AnchorTopicModel(K, seed=0, **params).fit(copy).components_
    return out


# ----------------------------------------------------------------------------- read-only


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every file and directory under ``root``: (mode, size, mtime in ns)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            s = os.lstat(p)
            out[os.path.relpath(p, root)] = (s.st_mode, s.st_size if name in files else 0,
                                             s.st_mtime_ns)
    return out


@contextmanager
def _read_only(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make the tree ``root`` read-only for this process, also as root (whom file modes do
    not stop): every write primitive of ``os`` and ``open`` fails with EROFS on a path inside
    it, as on a read-only file system; as another user the files' modes are also
    ``chmod -R a-w``. Afterwards, nothing under ``root`` may have changed."""
    real = os.path.realpath(root)
    before = _tree(root)

    def inside(path: object, dir_fd: int | None = None) -> bool:
        if isinstance(path, int):
            return False
        p = os.fsdecode(os.fspath(path))  # type: ignore[arg-type]
        if dir_fd is not None and not os.path.isabs(p):
            p = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), p)
        p = os.path.realpath(os.path.abspath(p))
        return p == real or p.startswith(real + os.sep)

    def deny(path: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(os.fspath(path)))

    def guard(name: str, n_paths: int = 1) -> None:
        fn = getattr(os, name)

        def wrapped(*args, **kwargs):
            for p in args[:n_paths]:
                if inside(p, kwargs.get("dir_fd") or kwargs.get("src_dir_fd")):
                    deny(p)
            return fn(*args, **kwargs)

        monkeypatch.setattr(os, name, wrapped)

    for name in ("mkdir", "rmdir", "remove", "unlink", "utime", "truncate", "chmod"):
        guard(name)
    for name in ("rename", "replace", "link", "symlink"):
        guard(name, 2)
    write = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    real_os_open, real_open = os.open, io.open

    def os_open(path, flags, *args, **kwargs):
        if flags & write and inside(path, kwargs.get("dir_fd")):
            deny(path)
        return real_os_open(path, flags, *args, **kwargs)

    def py_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+") and inside(file):
            deny(file)
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", py_open)
    monkeypatch.setattr(builtins, "open", py_open)
    chmod = os.geteuid() != 0
    if chmod:
        subprocess.run(["chmod", "-R", "a-w", str(root)], check=True)
    try:
        yield
    finally:
        monkeypatch.undo()
        if chmod:
            subprocess.run(["chmod", "-R", "u+w", str(root)], check=True)
    after = _tree(root)
    if chmod:  # the modes changed by chmod, and back
        before = {k: v[1:] for k, v in before.items()}
        after = {k: v[1:] for k, v in after.items()}
    assert after == before, "the fit changed the read-only store"


@pytest.mark.parametrize("name", ["default", "plain-ap"])
def test_a_read_only_store_can_be_fitted(store, reference, tmp_path, monkeypatch, name):
    """Point 10: nothing is written into the store (its rectified cache is skipped), the
    scratch goes to a temporary directory, and the topics are those of a writable store."""
    from streamtopic import _scratch

    params = {} if name == "default" else PLAIN_AP
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    made = []
    owned_dir = _scratch.owned_dir

    def recorded(parent, prefix):
        made.append(os.path.join(parent, prefix))
        return owned_dir(parent, prefix)

    with _read_only(store, monkeypatch):
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        monkeypatch.setattr(_scratch, "owned_dir", recorded)
        m = AnchorTopicModel(K, seed=0, **params).fit(store)
    np.testing.assert_array_equal(m.components_, reference[name])
    rect = m.diagnostics_["rectification"]
    if name == "plain-ap":
        assert rect["cached"] is False and rect["path"].startswith(str(tmp))
    assert made[0] == os.path.join(tmp, ".streamtopic-fit-")  # the fit's scratch
    assert os.listdir(tmp) == []  # and it is gone


def test_cli_fits_a_read_only_store_with_scratch_beside_the_model(store, reference, tmp_path,
                                                                   monkeypatch):
    out = tmp_path / "models" / "m"
    out.parent.mkdir()
    with _read_only(store, monkeypatch):
        r = CliRunner().invoke(main, ["fit", str(store), "-k", str(K), "-o", str(out), "-q",
                                      "--method", "plain", "--rectify", "ap"])
    assert r.exit_code == 0, r.output
    m = AnchorTopicModel.load(out)
    np.testing.assert_array_equal(m.components_, reference["plain-ap"])
    assert m.get_params()["scratch_dir"] == str(out.parent)  # the default: beside the model
    assert sorted(os.listdir(out.parent)) == ["m"]  # the scratch is gone


def _can_mount_read_only() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    d = tempfile.mkdtemp()
    try:
        r = subprocess.run(["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$1" "$1"', "sh", d],
                           capture_output=True, check=False)
    finally:
        os.rmdir(d)
    return r.returncode == 0


@pytest.mark.skipif(not _can_mount_read_only(), reason="needs root and mount namespaces")
def test_a_store_on_a_read_only_mount_can_be_fitted(store, reference, tmp_path):
    """Point 10 on a real read-only file system: the store bind-mounted read-only in a
    private mount namespace, both methods fitted by a child process."""
    code = (
        "import json, sys, dask; dask.config.set(scheduler='threads')\n"
        "from streamtopic.model import AnchorTopicModel\n"
        "out = {}\n"
        "for name, p in (('default', {}), ('plain-ap', {'method': 'plain', 'rectify': 'ap'})):\n"
        f"    m = AnchorTopicModel({K}, seed=0, **p).fit(sys.argv[1])\n"
        "    out[name] = m.components_.tolist()\n"
        "print(json.dumps(out))\n"
    )
    script = tmp_path / "fit.py"
    script.write_text(code)
    before = _tree(store)
    r = subprocess.run(
        ["unshare", "-m", "sh", "-c",
         ('mount --bind -o ro "$1" "$1" && touch "$1/probe" 2>/dev/null && exit 3; '
          'exec "$2" "$3" "$1"'), "sh", str(store), sys.executable, str(script)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for name in ("default", "plain-ap"):
        np.testing.assert_array_equal(np.asarray(got[name]), reference[name])
    assert _tree(store) == before


def test_scratch_dir_parameter(store, tmp_path, monkeypatch):
    """``scratch_dir``: validated, kept in the parameters and the saved model; by default a
    temporary directory, or the store's directory when the workers run elsewhere."""
    from streamtopic import cluster, model
    from streamtopic.workspace import scratch_root

    def root(m: AnchorTopicModel, s: st.CooccurrenceStore) -> str:
        return scratch_root(m.fit_plan().scratch_dir, s.path)

    s = st.CooccurrenceStore.open(store)
    assert root(AnchorTopicModel(K), s) == tempfile.gettempdir()
    assert root(AnchorTopicModel(K, scratch_dir=tmp_path), s) == str(tmp_path)
    monkeypatch.setattr(cluster, "current_client", lambda: object())
    monkeypatch.setattr(cluster, "scheduler_workers", lambda c: {"tcp://192.0.2.7:40000": {}})
    assert root(AnchorTopicModel(K), s) == str(store.parent)
    monkeypatch.setattr(cluster, "scheduler_workers", lambda c: {"tcp://127.0.0.1:40000": {}})
    assert root(AnchorTopicModel(K), s) == tempfile.gettempdir()
    monkeypatch.undo()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="scratch_dir=.*file: is not a directory"):
        AnchorTopicModel(K, scratch_dir=tmp_path / "file").fit(store)
    with pytest.raises(ValueError, match="scratch_dir=3"):
        AnchorTopicModel(K, scratch_dir=3).fit(store)
    m = AnchorTopicModel(K, seed=0, scratch_dir=tmp_path / "sc", **PLAIN_AP).fit(store)
    assert os.listdir(tmp_path / "sc") == []
    m.save(tmp_path / "m")
    assert AnchorTopicModel.load(tmp_path / "m").get_params()["scratch_dir"] == str(
        tmp_path / "sc")
    import zarr  # a model saved before the parameter existed still loads

    g = zarr.open_group(tmp_path / "m", mode="r+")
    meta = dict(g.attrs["streamtopic_model"])
    del meta["params"]["scratch_dir"]
    g.attrs["streamtopic_model"] = meta
    from ._legacy import downgrade_model_to_format1

    downgrade_model_to_format1(tmp_path / "m")  # (and before digests)
    assert AnchorTopicModel.load(tmp_path / "m").scratch_dir is None
    assert model.FIT_PREFIX.startswith(".")


# ----------------------------------------------------------------------------- debris


def _debris(path: Path, *, owner: bool, age: float = 0.0) -> Path:
    """What a killed fit leaves: a directory with a file, its owner lock file (nobody holds
    it: the process died) when ``owner``, modified ``age`` seconds ago."""
    path.mkdir(parents=True)
    (path / "zarr.json").write_text("{}")
    (path / "block").write_bytes(b"\0" * 4096)
    if owner:
        Path(f"{path}.owner").write_text(json.dumps({"host": "h", "pid": 999999, "time": 0}))
    if age:
        t = time.time() - age
        for p in (path / "zarr.json", path / "block", path):
            os.utime(p, (t, t))
    return path


def test_fits_collect_the_debris_of_killed_fits(store, tmp_path):
    """Point 11: a fit removes the scratch directories and partial rectified arrays of dead
    fits (owner lock free, or no owner and an hour old), and leaves those of live ones."""
    scratch = tmp_path / "scratch"
    dead = _debris(scratch / ".streamtopic-fit-0123456789ab", owner=True)
    live = _debris(scratch / ".streamtopic-fit-ba9876543210", owner=True)
    orphan = scratch / ".streamtopic-fit-00000000beef.owner"
    orphan.write_text("")
    other = _debris(scratch / "user-data", owner=False, age=7200)  # not ours
    old = _debris(store / ".scratch" / "fit-aaaaaaaaaaaa", owner=False, age=7200)
    young = _debris(store / ".scratch" / "fit-bbbbbbbbbbbb", owner=False)
    rect = store / "rectified"
    partial = _debris(rect / (KEY.format(k=K) + ".partial-deadbeef"), owner=True)
    old_partial = _debris(rect / (KEY.format(k=4) + ".partial-0badf00d"), owner=False, age=7200)
    live_partial = _debris(rect / (KEY.format(k=3) + ".partial-0123abcd"), owner=True)
    holds = [FileLock(f"{p}.owner") for p in (live, live_partial)]
    for h in holds:
        assert h.acquire(record=owner_record())
    try:
        AnchorTopicModel(K, seed=0, scratch_dir=scratch, **PLAIN_AP).fit(store)
        assert not dead.exists() and not Path(f"{dead}.owner").exists()
        assert not orphan.exists()
        assert not old.exists() and young.exists()
        assert not partial.exists() and not Path(f"{partial}.owner").exists()
        assert not old_partial.exists()
        assert live.exists() and live_partial.exists() and other.exists()
        assert sorted(os.listdir(scratch)) == sorted(
            [live.name, live.name + ".owner", other.name])
    finally:
        for h in holds:
            h.release()
    # once their owners are gone, they are debris too
    AnchorTopicModel(K, seed=0, scratch_dir=scratch, **PLAIN_AP).fit(store)
    assert not live.exists() and not live_partial.exists()


# ----------------------------------------------------------------------------- the cache


def test_the_rectified_cache_is_bounded_listed_and_cleared(store, monkeypatch):
    """Point 11: the cache keeps the most recently used entries within its bound (the entry
    in use always), lists them, and is cleared except for an entry a live fit holds."""
    from streamtopic import workspace

    entry = 8 * V * V  # one rectified Q (uncompressed, dense)
    monkeypatch.setattr(workspace, "CACHE_MIN_BYTES", int(2.5 * entry))
    monkeypatch.setattr(workspace, "CACHE_Q_FACTOR", 0)

    def fit(k: int) -> dict:
        return AnchorTopicModel(k, seed=0, **PLAIN_AP).fit(store).diagnostics_["rectification"]

    def keys() -> list[str]:
        return [e["key"] for e in workspace.cache_entries(store)]  # most recent first

    fit(3)
    fit(4)
    assert keys() == [KEY.format(k=4), KEY.format(k=3)]
    assert fit(3)["reused"] is True  # K = 3 becomes the most recently used
    fit(5)  # the least recently used (K = 4) makes room
    assert keys() == [KEY.format(k=5), KEY.format(k=3)]
    entries = workspace.cache_entries(store)
    assert all(e["bytes"] >= entry and not e["in_use"] and e["version"] == 1 for e in entries)
    total = workspace.cache_bytes(store)
    assert total == sum(e["bytes"] for e in entries) + sum(
        os.path.getsize(store / "rectified" / f) for f in os.listdir(store / "rectified")
        if f.endswith(".lock"))

    # a bound below one entry keeps the entry in use only
    monkeypatch.setattr(workspace, "CACHE_MIN_BYTES", entry // 2)
    assert fit(6)["cached"] is True
    assert keys() == [KEY.format(k=6)]

    # info shows the cache; clear-cache keeps what a live fit holds
    r = CliRunner().invoke(main, ["info", str(store), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["cache_bytes"] == workspace.cache_bytes(store) > entry
    r = CliRunner().invoke(main, ["info", str(store)])
    assert "rectified cache" in r.output and " in 1 array (" in r.output
    held = FileLock(str(store / "rectified" / (KEY.format(k=6) + ".lock")), shared=True)
    assert held.acquire()
    try:
        assert workspace.cache_entries(store)[0]["in_use"] is True
        assert workspace.clear_cache(store) == 0
        assert keys() == [KEY.format(k=6)]
    finally:
        held.release()
    r = CliRunner().invoke(main, ["clear-cache", str(store)])
    assert r.exit_code == 0, r.output
    assert f"removed {KEY.format(k=6)}" in r.output and "freed" in r.output
    assert keys() == [] and workspace.cache_bytes(store) == 0
    assert workspace.clear_cache(store) == 0
    # the store is intact: the next fit rectifies again
    assert fit(6)["reused"] is False
