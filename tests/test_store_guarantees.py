"""The store's guarantees under concurrency and damage (issue 15): one writer, snapshot reads,
integrity checks, verified inputs, and ingests refused before anything is committed."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import zarr

import streamtopic as st
from streamtopic import CooccurrenceStore
from streamtopic._locking import FileLock, is_locked
from streamtopic.cooccurrence import ChangedInputError
from streamtopic.store import StoreError
from streamtopic.vocabulary import Tokenizer

LOCK = ".streamtopic.lock"
TERMS = [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(260)]  # letters only


def write_docs(path, n_docs, seed, n_topics=5, length=40):
    """Text documents, one per line, from ``n_topics`` topics over 260 letter-only words."""
    topics = np.random.default_rng(12345).dirichlet(np.full(len(TERMS), 0.05), size=n_topics)
    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        for _ in range(n_docs):
            theta = rng.dirichlet(np.full(n_topics, 0.3))
            words = rng.choice(len(TERMS), size=length, p=theta @ topics)
            fh.write(" ".join(TERMS[w] for w in words) + "\n")
    return str(path)


def ingest(inputs, store, **kw):
    """Ingest; a new store keeps every word."""
    if not os.path.exists(store):
        kw.setdefault("min_df", 1)
        kw.setdefault("max_df", 1.0)
    return st.ingest(inputs, store, progress=False, **kw)


def q_total(store):
    return float(store.Q_sum.sum().compute())


def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def leave_stale_lock(store):
    """The lock file a killed ingest leaves: its record names a process that is gone."""
    with open(os.path.join(store, LOCK), "w") as fh:
        json.dump({"host": os.uname().nodename, "pid": dead_pid(), "time": time.time()}, fh)


# --------------------------------------------------------------------------- one writer


@contextlib.contextmanager
def racers(target, n):
    """``n`` spawned processes running ``target(barrier, jobs, results)``: each takes jobs
    from its own queue until None, and meets the others at the barrier before each one."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    queues = [ctx.Queue() for _ in range(n)]
    procs = [ctx.Process(target=target, args=(barrier, q, results)) for q in queues]
    for p in procs:
        p.start()
    try:
        yield queues, results
    finally:
        for q in queues:
            q.put(None)
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():  # pragma: no cover
                p.kill()


def _writer(barrier, jobs, results):
    """A writer process: for each (store, input) job, start with the others, then ingest."""
    import dask

    real_commit = CooccurrenceStore.commit

    def slow_commit(self, *args, **kw):  # the winner holds the lock past the others' start,
        time.sleep(1.0)  # however late a loaded machine schedules them
        return real_commit(self, *args, **kw)

    CooccurrenceStore.commit = slow_commit
    with dask.config.set(scheduler="threads"):
        for store, path in iter(jobs.get, None):
            barrier.wait()
            try:
                st.ingest(path, store, progress=False)
                results.put("committed")
            except StoreError as exc:
                results.put(f"refused: {exc}")
            except BaseException as exc:  # pragma: no cover - reported to the test
                results.put(f"failed: {type(exc).__name__}: {exc}")


@pytest.mark.slow
def test_writers_racing_over_a_stale_lock_one_commits(tmp_path):
    """Many rounds: a stale lock left by a killed ingest, then three writers that start at
    the same moment. Exactly one commits; the others are refused with "another ingest is
    writing"; the store always opens and Σ Q_sum equals its recorded total."""
    n_writers, rounds = 3, 6
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "base.txt", 300, seed=0), store)
    inputs = [[write_docs(tmp_path / f"r{r}w{w}.txt", 1500, seed=100 * r + w)
               for w in range(n_writers)] for r in range(rounds)]
    with racers(_writer, n_writers) as (queues, results):
        for r in range(rounds):
            leave_stale_lock(store)
            for w, q in enumerate(queues):
                q.put((store, inputs[r][w]))
            outcome = sorted(results.get(timeout=300) for _ in range(n_writers))
            committed = [o for o in outcome if o == "committed"]
            refused = [o for o in outcome if o.startswith("refused")]
            assert len(committed) == 1, outcome
            assert len(refused) == n_writers - 1, outcome
            assert all("another ingest is writing" in o for o in refused), outcome
            s = CooccurrenceStore.open(store)
            assert s.version == r + 2
            # the recorded total of the documents' pairs, Σ n'_d(n'_d − 1)/(n_d − 1) (n_d is
            # the input length: stop words count in it, so this is below the tokens)
            assert q_total(s) == pytest.approx(s.q_total, rel=1e-12)
            assert 0 < s.q_total <= s.n_tokens
            assert len(s.sources) == r + 2
            del s
    assert not is_locked(os.path.join(store, LOCK))


def _lock_taker(barrier, jobs, results):
    """A process that, for each store, starts with the others, takes the writer lock over
    a stale one, holds it a moment, and reports whether it got it."""
    from streamtopic.store import _WriterLock

    for store in iter(jobs.get, None):
        barrier.wait()
        lock = _WriterLock(store)
        try:
            lock.acquire()
        except StoreError as exc:
            results.put(f"refused: {exc}")
            continue
        except BaseException as exc:  # pragma: no cover - reported to the test
            results.put(f"failed: {type(exc).__name__}: {exc}")
            continue
        time.sleep(0.2)
        results.put("held")
        try:
            lock.release()
        except BaseException:  # pragma: no cover - the outcome is already reported
            pass


@pytest.mark.slow
def test_stale_lock_takeover_gives_one_holder(tmp_path):
    """The lock level of the race: many rounds of three processes taking the writer lock at
    the same moment over a stale lock. Exactly one holds it each round."""
    n, rounds = 3, 40
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "base.txt", 50, seed=0), store)
    with racers(_lock_taker, n) as (queues, results):
        for _ in range(rounds):
            leave_stale_lock(store)
            for q in queues:
                q.put(store)
            outcome = [results.get(timeout=120) for _ in range(n)]
            assert outcome.count("held") == 1, outcome
            assert all("another ingest is writing" in o for o in outcome if o != "held")


def test_lock_is_held_by_one_open_file():
    """The lock primitive: a second holder is refused while the first holds it, and takes it
    once the first lets go (or dies); the file itself is never removed."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "lock")
        a, b = FileLock(path), FileLock(path)
        assert a.acquire(record={"pid": 1})
        assert is_locked(path)
        assert not b.acquire()
        assert a.read_record() == {"pid": 1}
        a.release()
        assert os.path.exists(path) and not is_locked(path)
        assert b.acquire()
        b.release()


def test_second_ingest_is_refused_at_once(tmp_path):
    """While a writer holds the lock, another ingest fails before reading its input (so a
    broken input is not even looked at) and the store is unchanged."""
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 100, seed=1), store)
    holder = FileLock(os.path.join(store, LOCK))
    assert holder.acquire(record={"host": "elsewhere", "pid": 4242})
    try:
        with pytest.raises(StoreError, match="another ingest is writing.*pid 4242"):
            ingest(str(tmp_path / "does-not-exist.txt"), store)
    finally:
        holder.release()
    with CooccurrenceStore.open(store) as s:
        assert s.version == 1


# --------------------------------------------------------------------------- snapshot reads


def test_reader_keeps_its_version_while_ingests_commit(tmp_path):
    """A reader opened at version 1 reads version 1, block for block, after two ingests
    have committed versions 2 and 3 and removed what the head no longer uses; once it is
    closed, the next ingest removes version 1's superseded data."""
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 200, seed=1), store, chunk_size=64)
    reader = CooccurrenceStore.open(store)
    q1, df1, wc1 = reader.read_dense(), reader.doc_freq.copy(), reader.word_counts.copy()
    n1 = reader.n_docs
    ingest(write_docs(tmp_path / "b.txt", 200, seed=2), store)
    ingest(write_docs(tmp_path / "c.txt", 200, seed=3), store)
    with CooccurrenceStore.open(store) as head:
        assert head.version == 3 and head.n_docs > n1
        assert not np.array_equal(head.read_dense(), q1)
    # the reader's view is unchanged, through every read path
    assert reader.version == 1 and reader.n_docs == n1
    np.testing.assert_array_equal(reader.read_dense(), q1)
    np.testing.assert_array_equal(reader.Q.compute(), q1)
    np.testing.assert_array_equal(reader.doc_freq, df1)
    np.testing.assert_array_equal(reader.word_counts, wc1)
    assert reader.verify() == []
    v1 = os.path.join(store, "versions", "v000001")
    assert os.path.exists(os.path.join(v1, "doc_freq"))
    reader.close()
    ingest(write_docs(tmp_path / "d.txt", 50, seed=4), store)
    assert not os.path.exists(os.path.join(v1, "doc_freq"))  # collected once released
    with CooccurrenceStore.open(store) as s:
        assert s.version == 4 and s.verify() == []


def test_lease_of_a_dead_reader_lapses(tmp_path):
    """A reader killed while it holds a lease does not pin its version for ever: its lease
    file is unlocked, and the next writer removes it with the data only it kept."""
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 100, seed=1), store)
    code = ("import os, sys, streamtopic as st\n"
            f"s = st.CooccurrenceStore.open({store!r})\n"
            "print('open', flush=True)\n"
            "sys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "open"
        leases = os.listdir(os.path.join(store, "readers"))
        assert len(leases) == 1 and is_locked(os.path.join(store, "readers", leases[0]))
    finally:
        proc.kill()
        proc.wait()
    ingest(write_docs(tmp_path / "b.txt", 100, seed=2), store)
    assert os.listdir(os.path.join(store, "readers")) == []
    assert not os.path.exists(os.path.join(store, "versions", "v000001", "doc_freq"))


def _fit_plain(path_or_store):
    model = st.AnchorTopicModel(5, method="plain", seed=0, progress=False)
    return model.fit(path_or_store)


def test_fits_during_an_incremental_ingest_see_the_version_they_opened(tmp_path):
    """Fits that start at several moments while another process ingests: each equals a
    clean fit of the version it opened (max |ΔA| <= 1e-12), or fails with a clear message.
    None returns a different model."""
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 600, seed=1), store, chunk_size=64)
    clean = {1: _fit_plain(store).components_}
    big = write_docs(tmp_path / "b.txt", 12000, seed=2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamtopic", "ingest", big, "--store", store, "--local",
         "threads", "-q"], stderr=subprocess.PIPE, text=True)
    results: list[tuple[str, object]] = []

    def fit_now():
        try:
            m = _fit_plain(store)
            results.append(("ok", m))
        except StoreError as exc:  # a clear message is allowed, a wrong model is not
            results.append(("error", str(exc)))
        except BaseException as exc:
            results.append(("crash", f"{type(exc).__name__}: {exc}"))

    threads = []
    staging = os.path.join(store, "versions", "v000002")
    deadline = time.time() + 120
    while not os.path.isdir(staging) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    while proc.poll() is None and time.time() < deadline and len(threads) < 40:
        t = threading.Thread(target=fit_now)
        t.start()
        threads.append(t)
        time.sleep(0.05)
    for _ in range(2):  # and right after the commit
        t = threading.Thread(target=fit_now)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    assert proc.wait() == 0, proc.stderr.read()
    clean[2] = _fit_plain(store).components_
    assert len(results) >= 4
    versions = set()
    for kind, value in results:
        if kind != "ok":  # leases make even a clear error unnecessary
            pytest.fail(f"a fit failed during the ingest ({kind}): {value}")
        version = value.diagnostics_["store"]["version"]
        versions.add(version)
        assert np.max(np.abs(value.components_ - clean[version])) <= 1e-12
    assert 1 in versions  # at least one fit read version 1 while version 2 was committed


# --------------------------------------------------------------------------- integrity


@pytest.fixture
def small_store(tmp_path):
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 300, seed=1), store, chunk_size=64)
    return store


def _some_chunk(store):
    with CooccurrenceStore.open(store) as s:
        i, j = np.argwhere(s.block_nnz > 0)[1]
        return os.path.join(store, "versions", "v000001", "Q", "c", str(i), str(j))


def test_deleted_chunk_is_detected_not_read_as_zeros(small_store):
    chunk = _some_chunk(small_store)
    i, j = (int(x) for x in chunk.split(os.sep)[-2:])
    os.remove(chunk)
    with CooccurrenceStore.open(small_store) as s:
        problems = s.verify()  # the block, and its mirror image that reads it transposed
        assert len(problems) == (1 if i == j else 2)
        assert all("missing" in p for p in problems)
        with pytest.raises(StoreError, match="is missing.*damaged"):
            s.read_dense()
        with pytest.raises(StoreError, match="is missing"):
            s.Q.sum().compute()
    with pytest.raises(StoreError, match="is missing"):
        _fit_plain(small_store)
    with pytest.raises(StoreError, match="is missing"):
        st.AnchorTopicModel(5, seed=0, progress=False).fit(small_store)  # the default


def test_info_reports_a_deleted_chunk(small_store):
    os.remove(_some_chunk(small_store))
    for extra in ([], ["--json"]):
        r = subprocess.run([sys.executable, "-m", "streamtopic", "info", small_store, *extra],
                           capture_output=True, text=True)
        assert r.returncode == 1
        # the block and its mirror image (which reads it transposed)
        assert "damaged: 2 block(s) of Q recorded with non-zeros are missing" in r.stderr
        assert "Traceback" not in r.stderr


def test_corrupted_chunk_is_detected_by_its_checksum(small_store):
    path = _some_chunk(small_store)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01  # one bit
    open(path, "wb").write(bytes(data))
    with CooccurrenceStore.open(small_store) as s:
        problems = s.verify()  # the block and its mirror image, which reads it transposed
        assert len(problems) == 2 and all("checksum" in p for p in problems)
        with pytest.raises(StoreError, match="cannot be read.*checksum"):
            s.read_dense()
    with pytest.raises(StoreError, match="checksum"):
        _fit_plain(small_store)


def test_verify_command(small_store):
    ok = subprocess.run([sys.executable, "-m", "streamtopic", "verify", small_store],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "ok" in ok.stdout
    os.remove(_some_chunk(small_store))
    bad = subprocess.run([sys.executable, "-m", "streamtopic", "verify", small_store],
                         capture_output=True, text=True)
    assert bad.returncode == 1
    assert "missing" in bad.stdout + bad.stderr and "Traceback" not in bad.stderr


def test_verify_finds_a_wrong_sum(tmp_path):
    """A block whose non-zeros are intact but whose values were altered (rewritten with a
    valid checksum) breaks Σ Q_sum = n_docs."""
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 100, seed=1), store)
    arr = zarr.open_array(os.path.join(store, "versions", "v000001", "Q"), mode="r+")
    block = arr[:10, :10]
    arr[:10, :10] = np.where(block != 0, block * 2, 0.0)
    with CooccurrenceStore.open(store) as s:
        problems = s.verify()
    assert len(problems) == 1 and "adds up to" in problems[0]


# --------------------------------------------------------------------------- inputs


def test_changed_input_at_the_same_path_is_refused(tmp_path):
    store = str(tmp_path / "s.zarr")
    path = write_docs(tmp_path / "a.txt", 200, seed=1)
    ingest(path, store)
    with open(path, "a") as fh:  # documents appended to an ingested file
        fh.write(open(write_docs(tmp_path / "more.txt", 100, seed=2)).read())
    for skip in (False, True):
        with pytest.raises(ChangedInputError, match="changed since it was ingested"):
            ingest(path, store, skip_existing=skip)
    with CooccurrenceStore.open(store) as s:
        assert s.version == 1 and s.n_docs == 200
        assert [e["path"] for e in s.sources] == [path]
    # the same through `fit` on the text, whose rerun skips inputs already in its store
    out = str(tmp_path / "m")
    r = subprocess.run([sys.executable, "-m", "streamtopic", "fit", path, "-k", "3", "-o", out,
                        "--store", store, "-q", "--local", "threads"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "changed since it was ingested" in r.stderr
    assert "Traceback" not in r.stderr


def _refined_fit(store):
    return st.AnchorTopicModel(3, seed=0, progress=False, refine_passes=2).fit(store)


def test_recorded_inputs_are_verified_before_they_are_read(tmp_path):
    """Inputs the refinement reads again (counts: HDF5 here; text has a token cache, below)
    are checked first: a changed or missing one is an error, not a refinement on other or
    half the data."""
    from streamtopic.corpus import convert, read_corpus

    store = str(tmp_path / "s.zarr")
    a, b = str(tmp_path / "a.h5"), str(tmp_path / "b.h5")
    convert(read_corpus(write_docs(tmp_path / "a.txt", 300, seed=1)), a, progress=False)
    convert(read_corpus(write_docs(tmp_path / "b.txt", 300, seed=2)), b, progress=False)
    ingest([a, b], store)
    base = _refined_fit(store).components_
    # a new modification time with the same content: the hash is checked, and it matches
    os.utime(a, ns=(time.time_ns(), time.time_ns() + 10**9))
    np.testing.assert_array_equal(_refined_fit(store).components_, base)
    # changed content
    original = open(a, "rb").read()
    convert(read_corpus(write_docs(tmp_path / "c.txt", 300, seed=3)), a + ".new",
            progress=False)
    os.replace(a + ".new", a)
    with pytest.raises(StoreError, match="a.h5: changed since it was ingested"):
        _refined_fit(store)
    open(a, "wb").write(original)
    # a deleted input: an error, not a refinement on half the corpus
    os.rename(b, b + ".away")
    with pytest.raises(StoreError, match="b.h5: an input of .* is missing"):
        _refined_fit(store)
    with pytest.raises(StoreError, match="is missing"):
        st.AnchorTopicModel(3, seed=0, progress=False).fit(store)  # refine_passes='auto'
    os.rename(b + ".away", b)
    np.testing.assert_array_equal(_refined_fit(store).components_, base)


def test_text_is_refined_from_the_token_cache(tmp_path):
    """Text is tokenised once: the refinement reads the store's cached (word id, count)
    pairs, so the same model comes out when the text files are gone, and a damaged cache is
    an error naming it (and `verify` finds it), never a refinement on less data."""
    from streamtopic.corpus import recorded_corpus

    store = str(tmp_path / "s.zarr")
    a = write_docs(tmp_path / "a.txt", 300, seed=1)
    b = write_docs(tmp_path / "b.txt", 300, seed=2)
    ingest([a], store)
    ingest([b], store)  # every block of version 1 is superseded: its documents are kept
    base = _refined_fit(store).components_
    with CooccurrenceStore.open(store) as s:
        assert {p.version for p in s.cached_partitions()} == {1, 2}
        corpus = recorded_corpus(s)
        assert {src.format for src in corpus.sources} == {"cache"}
        chunks = list(corpus.iter_chunks())
        assert sum(ch.n_docs for ch in chunks) == 600
        assert {ch.source for ch in chunks} == {a, b}
    os.remove(a)
    os.remove(b)
    np.testing.assert_array_equal(_refined_fit(store).components_, base)
    chunk = os.path.join(store, "versions", "v000001", "D", "p000000", "c.0")
    data = bytearray(open(chunk, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(chunk, "wb").write(bytes(data))
    with pytest.raises(ValueError, match="p000000.*damaged"):  # a StoreError, or its kin
        _refined_fit(store)
    with CooccurrenceStore.open(store) as s:
        assert any("p000000" in p for p in s.verify())
    os.remove(chunk)
    with pytest.raises(ValueError, match="p000000.*damaged"):
        _refined_fit(store)


def test_a_crafted_manifest_path_is_not_read(tmp_path):
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 200, seed=1), store)
    manifest = os.path.join(store, "manifest.jsonl")  # appended per version (format 5)
    with open(manifest) as fh:
        lines = [json.loads(line) for line in fh]
    lines[0][0]["path"] = "/etc/passwd"
    with open(manifest, "w") as fh:
        fh.writelines(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n"
                      for line in lines)
    with pytest.raises(StoreError, match="does not match its digest"):
        _refined_fit(store)
    with CooccurrenceStore.open(store) as s:
        assert any("digest" in p for p in s.verify())


def test_custom_analyzer_is_required_for_more_text(tmp_path):
    """A store built with a custom analyzer: more text without it is refused before anything
    is committed (not counted as all out of vocabulary and recorded); with it, it counts."""

    def analyzer(text):
        return text.split()

    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 200, seed=1), store,
           tokenizer=Tokenizer(analyzer=analyzer))
    more = write_docs(tmp_path / "b.txt", 100, seed=2)
    with pytest.raises(StoreError, match="custom analyzer"):
        st.ingest(more, store, progress=False)
    with pytest.raises(StoreError, match="tokenise text unlike the store's.*stop_words"):
        st.ingest(more, store, progress=False,
                  tokenizer=Tokenizer(analyzer=analyzer, stop_words="none"))
    with CooccurrenceStore.open(store) as s:
        assert s.version == 1 and len(s.sources) == 1
    report = st.ingest(more, store, progress=False, tokenizer=Tokenizer(analyzer=analyzer))
    assert report.n_docs == 100 and report.n_oov_tokens < report.n_tokens / 10


def test_other_tokenisation_is_refused_for_an_existing_store(tmp_path):
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 200, seed=1), store)
    more = write_docs(tmp_path / "b.txt", 100, seed=2)
    with pytest.raises(StoreError, match="lowercase"):
        st.ingest(more, store, progress=False, tokenizer=Tokenizer(lowercase=False))
    report = st.ingest(more, store, progress=False, tokenizer=Tokenizer())  # the same settings
    assert report.n_docs == 100


# --------------------------------------------------------------------------- debris


@pytest.mark.slow
def test_failed_first_ingest_leaves_no_build_directory(tmp_path, monkeypatch):
    """A first ingest whose write fails (a full disk) while other writes are still running:
    the failure waits for them before it removes the hidden build directory, so none of them
    recreates it afterwards."""
    import errno

    from streamtopic import cooccurrence

    real = cooccurrence._write_group

    def write_group(piece, stats, root, old, old_nnz, number, grid, i, g, *rest):
        if (i, g) == (0, 0):
            time.sleep(0.1)  # the others have started
            raise OSError(errno.ENOSPC, "No space left on device")
        arr = zarr.open_array(store=root, path=f"versions/v{number:06d}/Q", mode="r+")
        time.sleep(0.4)  # a write under way when the first one fails
        r0, r1 = grid.rows(i)
        arr[r0:r1, r0:r1] = 1.0
        return real(piece, stats, root, old, old_nnz, number, grid, i, g, *rest)

    monkeypatch.setattr(cooccurrence, "_write_group", write_group)
    with pytest.raises(OSError, match="No space left"):
        ingest(write_docs(tmp_path / "a.txt", 300, seed=1), str(tmp_path / "s.zarr"),
               chunk_size=32)
    time.sleep(1.0)
    assert sorted(os.listdir(tmp_path)) == ["a.txt"]


# --------------------------------------------------------------------------- review findings


def test_failure_after_the_commit_keeps_the_new_head(tmp_path, monkeypatch):
    """An interrupt while the superseded data is being removed, after the head switched:
    the committed version stays (the round is not aborted) and the store is whole."""
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 200, seed=1), store)
    real = CooccurrenceStore.cleanup

    def cleanup(self):
        if self.version == 2:  # after the switch
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(CooccurrenceStore, "cleanup", cleanup)
    with pytest.raises(KeyboardInterrupt):
        ingest(write_docs(tmp_path / "b.txt", 200, seed=2), store)
    monkeypatch.setattr(CooccurrenceStore, "cleanup", real)
    with CooccurrenceStore.open(store) as s:
        assert s.version == 2 and s.n_docs == 400 and s.verify() == []
    assert not is_locked(os.path.join(store, LOCK))


def test_a_lease_that_cannot_be_probed_keeps_everything(tmp_path, monkeypatch):
    """A lease file the writer cannot open (another user's, say) may name any version: the
    writer then deletes nothing, and still commits."""
    from streamtopic import store as store_module

    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 200, seed=1), store)
    reader = CooccurrenceStore.open(store)
    q1 = reader.read_dense()

    def probe_denied(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(store_module, "probe_lease", probe_denied)
    ingest(write_docs(tmp_path / "b.txt", 200, seed=2), store)
    monkeypatch.undo()
    np.testing.assert_array_equal(reader.read_dense(), q1)
    with CooccurrenceStore.open(store) as s:
        assert s.version == 2 and s.verify() == []
    reader.close()


def test_a_graph_over_q_keeps_its_lease(tmp_path):
    """``CooccurrenceStore.open(p).Q`` outlives the store object: the graph holds the lease."""
    import gc

    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 200, seed=1), store)
    Q = CooccurrenceStore.open(store).Q
    gc.collect()
    before = Q.compute()
    ingest(write_docs(tmp_path / "b.txt", 200, seed=2), store)
    np.testing.assert_array_equal(Q.compute(), before)


def test_a_reader_without_a_lease_is_told_its_version_was_superseded(tmp_path):
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 200, seed=1), store)
    reader = CooccurrenceStore.open(store, lease=False)
    ingest(write_docs(tmp_path / "b.txt", 200, seed=2), store)
    with pytest.raises(StoreError, match="superseded by a later ingest"):
        _ = reader.doc_freq


def test_a_manifest_without_its_digest_is_refused(tmp_path):
    """A version whose record of the manifest is removed, its metadata sealed again (as
    whoever crafts a store could): the manifest has no digest, and is refused."""
    from streamtopic.integrity import seal

    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 200, seed=1), store)
    root = zarr.open_group(store, mode="r+")
    meta = dict(root.attrs["streamtopic"])
    group = zarr.open_group(os.path.join(store, "versions", "v000001"), mode="r+")
    attrs = dict(group.attrs)
    del attrs["manifest"]
    attrs = seal(attrs, meta["uid"])
    group.attrs.clear()
    group.attrs.update(attrs)
    root.attrs["streamtopic"] = seal(dict(meta, head_digest=attrs["digest"]))
    with pytest.raises(StoreError, match="does not match its digest"):
        _refined_fit(store)


def test_a_cached_rectified_array_with_a_lost_chunk_is_rewritten(tmp_path):
    """The rectified cache: a lost chunk is not read as zeros by the next fit; the entry is
    written anew, and the model equals the first one."""
    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 600, seed=1), store, chunk_size=64)

    def fit():
        return st.AnchorTopicModel(5, method="plain", rectify="ap", seed=0,
                                   progress=False).fit(store)

    first = fit()
    path = first.diagnostics_["rectification"]["path"]
    chunks = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(path, "c")) for f in fs]
    os.remove(sorted(chunks)[1])
    again = fit()
    assert again.diagnostics_["rectification"]["reused"] is False
    np.testing.assert_array_equal(again.components_, first.components_)
    assert fit().diagnostics_["rectification"]["reused"] is True


def test_a_failed_computation_on_a_cluster_waits_for_its_running_tasks(tmp_path):
    """On a distributed cluster, a computation that fails returns only once its other
    running tasks have stopped, so the caller's clean-up comes after their writes."""
    import dask
    from distributed import Client, LocalCluster

    from streamtopic.cluster import compute

    marker = tmp_path / "written"

    def fail():
        time.sleep(0.2)
        raise ValueError("boom")

    def slow_write():
        time.sleep(1.5)
        marker.write_text("late")

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster):
        tasks = [dask.delayed(fail)(), dask.delayed(slow_write)()]
        with pytest.raises(ValueError, match="boom"):
            compute(tasks, progress=False)
        assert marker.exists()  # written before compute returned


def test_an_update_does_not_carry_a_lost_block_forward(small_store, tmp_path):
    """A head block whose chunk was lost is not read as zeros by the next ingest (which would
    write the damage into the new version and record it as sound): the ingest fails, and
    the store stays as it was."""
    os.remove(_some_chunk(small_store))
    with pytest.raises(StoreError, match="is missing"):
        ingest(write_docs(tmp_path / "more.txt", 300, seed=5), small_store)
    with CooccurrenceStore.open(small_store) as s:
        assert s.version == 1 and len(s.missing_blocks()) == 2  # the block and its mirror


def test_an_input_changed_while_it_is_ingested_is_refused(tmp_path, monkeypatch):
    from streamtopic import cooccurrence

    store = str(tmp_path / "s.zarr")
    ingest(write_docs(tmp_path / "a.txt", 200, seed=1), store)
    path = write_docs(tmp_path / "b.txt", 200, seed=2)
    real = cooccurrence._count_round

    def count_then_append(*args, **kw):
        out = real(*args, **kw)
        with open(path, "a") as fh:
            fh.write("wa wb wc\n")
        return out

    monkeypatch.setattr(cooccurrence, "_count_round", count_then_append)
    with pytest.raises(st.CorpusError, match="changed while it was being ingested"):
        ingest(path, store)
    with CooccurrenceStore.open(store) as s:
        assert s.version == 1


def test_json_lines_field_is_recorded_for_the_refinement(tmp_path):
    """Refinement reads JSON Lines inputs again with the text field they were ingested with."""
    src = write_docs(tmp_path / "a.txt", 300, seed=1)
    path = tmp_path / "a.jsonl"
    with open(src) as fh, open(path, "w") as out:
        for i, line in enumerate(fh):
            out.write(json.dumps({"id": i, "body": line.strip()}) + "\n")
    store = str(tmp_path / "s.zarr")
    ingest(str(path), store, text_field="body")
    with CooccurrenceStore.open(store) as s:
        assert s.sources[0]["text_field"] == "body"
    model = _refined_fit(store)
    assert model.diagnostics_["refinement"] is not None
