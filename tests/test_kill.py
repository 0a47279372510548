"""A killed ingest leaves the store at its previous state, and a rerun completes it.

Each test starts a real ``python -m streamtopic ingest`` in its own session, waits until it is
writing the new version (the staging directory exists and the process is still running), kills
the whole process group with SIGKILL and checks the store, then reruns the ingest.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import dask
import numpy as np
import psutil
import pytest
import scipy.sparse as sp

import streamtopic
from streamtopic import CooccurrenceStore
from streamtopic._locking import is_locked

pytestmark = pytest.mark.slow  # every test here kills a process mid-ingest (seconds each)

V = 2000
WORDS_PER_LINE = 20
N_SMALL = 5_000  # first corpus: the existing store
N_BIG = 200_000  # second corpus: runs for a few seconds
LOCK = ".streamtopic.lock"


# ----------------------------------------------------------------------------- corpora


def vocab_words(n=V):
    """n distinct 4-letter words ('qaaa', 'qaab', ...)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["q" + letters[i // 676] + letters[(i // 26) % 26] + letters[i % 26] for i in range(n)]


def write_corpus(path, n_lines, seed):
    """A plain-text corpus of random words, one document per line; returns the word ids."""
    rng = np.random.default_rng(seed)
    words = np.frombuffer("".join(vocab_words()).encode(), np.uint8).reshape(V, 4)
    ids = rng.integers(0, V, size=(n_lines, WORDS_PER_LINE))
    buf = np.empty((n_lines, WORDS_PER_LINE, 5), np.uint8)
    buf[:, :, :4] = words[ids]
    buf[:, :, 4] = ord(" ")
    buf[:, -1, 4] = ord("\n")
    with open(path, "wb") as fh:
        fh.write(buf.tobytes())
    return ids


def expected_q_sum(ids_list, terms):
    """Σ_d (h hᵀ − diag h) / (n (n − 1)) straight from the generated word ids, in the order
    of ``terms``."""
    pos = {w: i for i, w in enumerate(vocab_words())}
    perm = np.array([pos[t] for t in terms])  # store column -> generator id
    inv = np.empty(V, np.int64)
    inv[perm] = np.arange(V)
    total = np.zeros((V, V))
    for ids in ids_list:
        n_docs = ids.shape[0]
        rows = np.repeat(np.arange(n_docs), WORDS_PER_LINE)
        H = sp.csr_matrix(
            (np.ones(ids.size), (rows, inv[ids.ravel()])), shape=(n_docs, V)
        )
        H.sum_duplicates()
        n = WORDS_PER_LINE
        S = (H.T @ H).toarray()
        S[np.diag_indices(V)] -= np.asarray(H.sum(axis=0)).ravel()
        total += S / (n - 1)  # w_d = 1/(n_d − 1): the stores' per-token weights
    return total


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    d = tmp_path_factory.mktemp("kill-corpora")
    vocab = d / "vocab.txt"
    vocab.write_text("\n".join(vocab_words()) + "\n", encoding="utf-8")
    small, big = str(d / "small.txt"), str(d / "big.txt")
    ids_small = write_corpus(small, N_SMALL, seed=1)
    ids_big = write_corpus(big, N_BIG, seed=2)
    return {"vocab": str(vocab), "small": small, "big": big,
            "ids_small": ids_small, "ids_big": ids_big, "dir": d}


@pytest.fixture(scope="module")
def reference(corpora):
    """Both corpora ingested into a fresh store in one call."""
    store = str(corpora["dir"] / "reference-store")
    with dask.config.set(scheduler="threads"):
        streamtopic.ingest(
            [corpora["small"], corpora["big"]], store, vocab=corpora["vocab"], progress=False
        )
    s = CooccurrenceStore.open(store)
    with dask.config.set(scheduler="threads"):
        q = s.Q_sum.compute()
    return {"Q_sum": q, "n_docs": s.n_docs, "n_tokens": s.n_tokens, "vocab": s.vocab,
            "word_counts": s.word_counts}


# ----------------------------------------------------------------------------- processes


def _env():
    env = dict(os.environ)
    env.pop("STREAMTOPIC_SCHEDULER", None)
    return env


def start_ingest(args, log_dir, name):
    out = open(os.path.join(log_dir, f"{name}.out"), "wb")
    err = open(os.path.join(log_dir, f"{name}.err"), "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamtopic", "ingest", *args, "-q"],
        stdout=out, stderr=err, start_new_session=True, env=_env(),
    )
    proc._logs = (out, err)  # closed in finish()
    return proc


def logs(proc):
    out, err = proc._logs
    for fh in (out, err):
        fh.flush()
    with open(out.name, "rb") as fh:
        o = fh.read().decode(errors="replace")
    with open(err.name, "rb") as fh:
        e = fh.read().decode(errors="replace")
    return f"stdout:\n{o}\nstderr:\n{e}"


def finish(proc):
    for fh in proc._logs:
        fh.close()


def wait_until(condition, proc, timeout=60.0, what="condition"):
    """Poll ``condition`` while ``proc`` runs; fail if it exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            pytest.fail(f"ingest exited ({proc.returncode}) before {what}\n{logs(proc)}")
        time.sleep(0.005)
    kill_group(proc)
    pytest.fail(f"timed out waiting for {what}\n{logs(proc)}")


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)  # reap it, so its pid is really gone


def run_ingest_cli(args, log_dir, name, timeout=300):
    proc = start_ingest(args, log_dir, name)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise
    text = logs(proc)
    finish(proc)
    assert rc == 0, text
    return text


def _gone(procs, timeout):
    """Wait for ``procs`` to end; return those still running (zombies count as ended)."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    still = []
    for p in alive:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                still.append(p)
        except psutil.NoSuchProcess:
            pass
    return still


# ----------------------------------------------------------------------------- checks


def snapshot(path):
    s = CooccurrenceStore.open(path)
    with dask.config.set(scheduler="threads"):
        q = s.Q_sum.compute()
    return {"version": s.version, "n_docs": s.n_docs, "n_tokens": s.n_tokens, "Q_sum": q,
            "sources": s.sources, "word_counts": s.word_counts}


def assert_same_state(after, before):
    assert after["version"] == before["version"]
    assert after["n_docs"] == before["n_docs"]
    assert after["n_tokens"] == before["n_tokens"]
    np.testing.assert_array_equal(after["Q_sum"], before["Q_sum"])
    assert after["sources"] == before["sources"]
    np.testing.assert_array_equal(after["word_counts"], before["word_counts"])


def assert_matches_reference(store, reference):
    s = snapshot(store)
    assert s["n_docs"] == reference["n_docs"] == N_SMALL + N_BIG
    assert s["n_tokens"] == reference["n_tokens"]
    assert CooccurrenceStore.open(store).vocab == reference["vocab"]
    ref_q = reference["Q_sum"]
    rel = abs(float(s["Q_sum"].sum()) - float(ref_q.sum())) / float(ref_q.sum())
    assert rel <= 1e-12, rel
    assert np.max(np.abs(s["Q_sum"] - ref_q)) <= 1e-12 * np.max(np.abs(ref_q))
    np.testing.assert_array_equal(s["word_counts"], reference["word_counts"])
    return s


def existing_store(tmp_path, corpora):
    store = str(tmp_path / "store")
    with dask.config.set(scheduler="threads"):
        report = streamtopic.ingest(
            [corpora["small"]], store, vocab=corpora["vocab"], progress=False
        )
    assert report.version == 1 and report.n_docs == N_SMALL
    return store


# ----------------------------------------------------------------------------- tests


def test_kill_second_ingest_threads(tmp_path, corpora, reference):
    store = existing_store(tmp_path, corpora)
    before = snapshot(store)
    staging = os.path.join(store, "versions", "v000002")
    lock = os.path.join(store, LOCK)

    proc = start_ingest([corpora["big"], "--store", store, "--local", "threads"],
                        str(tmp_path), "killed")
    wait_until(lambda: os.path.isdir(staging), proc, what="the staging version")
    assert proc.poll() is None  # mid-run: writing version 2, not committed
    kill_group(proc)
    finish(proc)
    assert proc.returncode == -signal.SIGKILL

    # the killed writer's lock is left behind (stale: its process is gone)
    assert os.path.exists(lock)
    with open(lock) as fh:
        assert json.load(fh)["pid"] == proc.pid
    assert not psutil.pid_exists(proc.pid)

    # the store is exactly at version 1
    after = snapshot(store)
    assert_same_state(after, before)
    assert after["version"] == 1

    # rerun the same ingest: the stale lock does not block it, nothing is counted twice
    run_ingest_cli([corpora["big"], "--store", store, "--local", "threads"],
                   str(tmp_path), "rerun")
    s = assert_matches_reference(store, reference)
    assert s["version"] == 2
    assert [e["path"] for e in s["sources"]] == [corpora["small"], corpora["big"]]
    assert [e["version"] for e in s["sources"]] == [1, 2]
    # the lock file stays (it is never removed, only locked), unheld and emptied of its record
    assert not is_locked(lock) and os.path.getsize(lock) == 0
    # the killed round's staging version became the committed version 2; nothing beyond it
    versions = [v for v in os.listdir(os.path.join(store, "versions")) if v.startswith("v")]
    assert "v000002" in versions and set(versions) <= {"v000001", "v000002"}


def test_debris_of_a_kill_during_group_creation(tmp_path, corpora, reference):
    """A kill can land while zarr is creating the staging version: its directory then holds
    the Q array but no group metadata, and an unfinished ``*.partial`` metadata file lies
    beside it. zarr's hierarchy does not list such a directory; the next ingest must still
    remove it and commit the round exactly once."""
    store = existing_store(tmp_path, corpora)
    before = snapshot(store)
    versions = os.path.join(store, "versions")
    head_q = os.path.join(versions, "v000001", "Q")
    debris_q = os.path.join(versions, "v000002", "Q")
    os.makedirs(os.path.join(debris_q, "c", "0"))
    with open(os.path.join(head_q, "zarr.json")) as src, \
            open(os.path.join(debris_q, "zarr.json"), "w") as dst:
        dst.write(src.read())
    with open(os.path.join(debris_q, "c", "0", "0"), "wb") as fh:
        fh.write(b"\0" * 64)  # a torn chunk
    with open(os.path.join(versions, "zarr.0123456789abcdef.partial"), "w") as fh:
        fh.write('{"zarr_format": 3, "node_')
    assert not os.path.exists(os.path.join(versions, "v000002", "zarr.json"))

    assert_same_state(snapshot(store), before)  # readers ignore the debris
    with dask.config.set(scheduler="threads"):
        report = streamtopic.ingest([corpora["big"]], store, progress=False)
    assert report.version == 2
    assert_matches_reference(store, reference)
    left = set(os.listdir(versions))  # no debris: the head, what it still reads, metadata
    assert "v000002" in left and left <= {"v000001", "v000002", "zarr.json"}


def test_kill_first_ingest_threads(tmp_path, corpora):
    """No store before: a killed first ingest leaves no store, and a rerun creates it."""
    store = str(tmp_path / "store")
    args = [corpora["big"], "--store", store, "--local", "threads",
            "--min-df", "1", "--max-df", "1.0"]
    staging = os.path.join(str(tmp_path), ".store.tmp-*", "versions", "v000001")

    proc = start_ingest(args, str(tmp_path), "killed")
    wait_until(lambda: glob.glob(staging), proc, what="the staging version")
    assert proc.poll() is None
    kill_group(proc)
    finish(proc)

    assert not os.path.exists(store)
    assert not CooccurrenceStore.is_store(store)

    assert glob.glob(os.path.join(str(tmp_path), ".store.tmp-*"))  # the dead build is there
    run_ingest_cli(args, str(tmp_path), "rerun")
    # ... and the rerun removed it (its writer is dead), leaving only the new store
    assert not glob.glob(os.path.join(str(tmp_path), ".store.tmp-*"))
    s = CooccurrenceStore.open(store)
    assert s.version == 1
    assert s.n_docs == N_BIG
    assert s.n_tokens == N_BIG * WORDS_PER_LINE
    assert [e["path"] for e in s.sources] == [corpora["big"]]
    with dask.config.set(scheduler="threads"):
        q = s.Q_sum.compute()
    expected = expected_q_sum([corpora["ids_big"]], s.vocab)
    assert abs(q.sum() - expected.sum()) <= 1e-12 * expected.sum()
    np.testing.assert_allclose(q, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    pos = {w: i for i, w in enumerate(vocab_words())}
    counts = np.bincount(corpora["ids_big"].ravel(), minlength=V)
    np.testing.assert_array_equal(s.word_counts, counts[[pos[t] for t in s.vocab]])


def test_kill_with_local_cluster(tmp_path, corpora, reference):
    """The default local cluster (worker processes): killing the command's process group
    leaves no worker behind, and the store is untouched."""
    store = existing_store(tmp_path, corpora)
    before = snapshot(store)
    staging = os.path.join(store, "versions", "v000002")

    proc = start_ingest([corpora["big"], "--store", store, "--workers", "2"],
                        str(tmp_path), "killed")
    descendants = []
    try:
        wait_until(lambda: os.path.isdir(staging), proc, timeout=120,
                   what="the staging version")
        assert proc.poll() is None
        descendants = psutil.Process(proc.pid).children(recursive=True)
        kill_group(proc)
    finally:
        if proc.poll() is None:
            kill_group(proc)
        finish(proc)
    # the cluster's processes were there, and they are gone (allow a few seconds)
    assert descendants, "expected worker processes under the local cluster"
    lingering = _gone(descendants, timeout=10)
    try:
        assert lingering == [], [(p.pid, p.cmdline()) for p in lingering]
    finally:
        for p in lingering:  # do not leave them behind if the assertion fails
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass

    assert_same_state(snapshot(store), before)

    run_ingest_cli([corpora["big"], "--store", store, "--local", "threads"],
                   str(tmp_path), "rerun")
    s = assert_matches_reference(store, reference)
    assert s["version"] == 2


def test_reference_matches_direct_computation(corpora, reference):
    """The one-call reference itself equals the estimator computed from the word ids."""
    expected = expected_q_sum([corpora["ids_small"], corpora["ids_big"]], reference["vocab"])
    np.testing.assert_allclose(
        reference["Q_sum"], expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max()
    )
