"""Real-cluster runs: `dask scheduler` and two `dask worker` processes on 127.0.0.1.

The CLI runs against them through a scheduler file; results must equal the local run (exactly
for Q, to 1e-10 for the model). Faults: a worker killed mid-ingest, and the client killed
mid-ingest. Every process started here is stopped by its process id.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import streamtopic as st
from streamtopic.synth import default_vocab

PY = sys.executable
# the cluster runs with deploy/'s Dask settings, as a deployed one does
DASK_ENV = dict(os.environ, DASK_CONFIG=str(Path(__file__).resolve().parent.parent / "deploy"
                                            / "dask.yaml"))


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    fh = open(log, "wb")
    return subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                            env=DASK_ENV)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)


class Cluster:
    """A scheduler and worker processes, addressed by a scheduler file."""

    def __init__(self, root: Path, n_workers: int = 2) -> None:
        self.root = root
        self.file = str(root / "scheduler.json")
        self.scheduler = _spawn(
            [PY, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", self.file,
             "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0"],
            root / "scheduler.log",
        )
        deadline = time.time() + 60
        while not os.path.exists(self.file):
            if time.time() > deadline or self.scheduler.poll() is not None:
                raise RuntimeError((root / "scheduler.log").read_text())
            time.sleep(0.1)
        self.workers = [self.add_worker(i) for i in range(n_workers)]
        self.wait_for(n_workers)

    def add_worker(self, i: int) -> subprocess.Popen:
        env = dict(DASK_ENV, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   MKL_NUM_THREADS="1")
        return subprocess.Popen(
            [PY, "-m", "distributed.cli.dask_worker", "--scheduler-file", self.file,
             "--nthreads", "1", "--host", "127.0.0.1", "--no-nanny",
             "--memory-limit", "4GiB", "--name", f"w{i}-{time.time_ns()}"],
            stdout=open(self.root / f"worker{i}.log", "ab"), stderr=subprocess.STDOUT,
            start_new_session=True, env=env,
        )

    def wait_for(self, n: int) -> None:
        from distributed import Client

        with Client(scheduler_file=self.file, timeout="30s") as c:
            c.wait_for_workers(n, timeout=60)

    def close(self) -> None:
        for w in self.workers:
            _stop(w)
        _stop(self.scheduler)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    yield c
    c.close()
    for p in [c.scheduler, *c.workers]:
        assert p.poll() is not None  # nothing left running


def _cli(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    res = subprocess.run([PY, "-m", "streamtopic", *args], capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


@pytest.mark.slow
def test_ingest_and_fit_on_a_cluster_equal_the_local_run(cluster, kos_docword, tmp_path):
    docword = kos_docword
    res = _cli(["ingest", docword, "--store", str(tmp_path / "c.zarr"),
                "--scheduler-file", cluster.file])
    assert "dashboard" in res.stderr.lower()  # the run prints the dashboard link
    # one progress line per stage (stderr is no terminal here), on stderr, never in the output
    assert re.search(r"^co-occurrence: \d+\.\d\d s$", res.stderr, re.M), res.stderr
    assert "co-occurrence" not in res.stdout and "\r" not in res.stderr
    _cli(["ingest", docword, "--store", str(tmp_path / "l.zarr"), "--local", "threads", "-q"])
    qc = st.CooccurrenceStore.open(tmp_path / "c.zarr").Q_sum.compute()
    ql = st.CooccurrenceStore.open(tmp_path / "l.zarr").Q_sum.compute()
    np.testing.assert_array_equal(qc, ql)  # exactly

    env_run = subprocess.run(
        [PY, "-m", "streamtopic", "fit", str(tmp_path / "c.zarr"), "-k", "10", "-o",
         str(tmp_path / "mc.zarr"), "-q"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, STREAMTOPIC_SCHEDULER=cluster.file),
    )
    assert env_run.returncode == 0, env_run.stderr
    _cli(["fit", str(tmp_path / "l.zarr"), "-k", "10", "-o", str(tmp_path / "ml.zarr"),
          "--local", "threads", "-q"])
    mc = st.AnchorTopicModel.load(tmp_path / "mc.zarr")
    ml = st.AnchorTopicModel.load(tmp_path / "ml.zarr")
    np.testing.assert_array_equal(mc.anchors_, ml.anchors_)
    np.testing.assert_allclose(mc.components_, ml.components_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(mc.topic_cooccurrence_, ml.topic_cooccurrence_, atol=1e-10)


def _text_corpus(path: Path, n_lines: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    words = np.array(default_vocab(1500))  # letters only: every word is a token
    ids = rng.zipf(1.3, size=(n_lines, 40)) % 1500
    with open(path, "w") as fh:
        for row in words[ids]:
            fh.write(" ".join(row) + "\n")


@pytest.mark.slow
def test_worker_killed_mid_ingest(cluster, tmp_path):
    """Dask reschedules the lost tasks: the result is exactly the undisturbed one."""
    corpus = tmp_path / "big.txt"
    _text_corpus(corpus, 150_000, seed=1)
    store = tmp_path / "k.zarr"
    proc = subprocess.Popen(
        [PY, "-m", "streamtopic", "ingest", str(corpus), "--store", str(store),
         "--scheduler-file", cluster.file, "--min-df", "1", "--max-df", "1.0", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # wait until the co-occurrence pass is under way (its staging version exists), then
    # kill one worker process
    deadline = time.time() + 120
    while not list(tmp_path.glob(".k.zarr.tmp-*/versions/v000001")):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline
        time.sleep(0.02)
    victim = cluster.workers[0]
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    cluster.workers[0] = cluster.add_worker(10)  # a replacement, as a real cluster would
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    _cli(["ingest", str(corpus), "--store", str(tmp_path / "ref.zarr"), "--local", "threads",
          "--min-df", "1", "--max-df", "1.0", "-q"])
    a = st.CooccurrenceStore.open(store)
    b = st.CooccurrenceStore.open(tmp_path / "ref.zarr")
    assert a.n_docs == b.n_docs == 150_000
    np.testing.assert_array_equal(a.Q_sum.compute(), b.Q_sum.compute())
    cluster.wait_for(2)


@pytest.mark.slow
def test_client_killed_mid_ingest(cluster, kos_docword, tmp_path):
    """The client commits; killed mid-ingest, it leaves the store at its previous state."""
    docword = kos_docword
    store = tmp_path / "s.zarr"
    _cli(["ingest", docword, "--store", str(store), "--local", "threads", "-q"])
    before = st.CooccurrenceStore.open(store)
    q0, v0, src0 = before.Q_sum.compute(), before.version, before.sources
    corpus = tmp_path / "more.txt"
    _text_corpus(corpus, 150_000, seed=2)
    proc = subprocess.Popen(
        [PY, "-m", "streamtopic", "ingest", str(corpus), "--store", str(store),
         "--scheduler-file", cluster.file, "-q"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.time() + 120
    while not (store / "versions" / "v000002").exists():
        assert proc.poll() is None
        assert time.time() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    after = st.CooccurrenceStore.open(store)
    assert after.version == v0 and after.sources == src0
    np.testing.assert_array_equal(after.Q_sum.compute(), q0)
    # the orphaned tasks may still be running on the workers; a rerun completes the ingest
    time.sleep(1.0)
    _cli(["ingest", str(corpus), "--store", str(store), "--scheduler-file", cluster.file, "-q"])
    done = st.CooccurrenceStore.open(store)
    assert done.version == v0 + 1 and len(done.sources) == 2


@pytest.mark.slow
def test_performance_report_and_stage_log(kos_docword, tmp_path):
    res = subprocess.run(
        [PY, "-m", "streamtopic", "-v", "ingest",
         kos_docword, "--store", str(tmp_path / "s.zarr"),
         "--performance-report", str(tmp_path / "report.html"), "-q"],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr
    html = (tmp_path / "report.html").read_text()
    assert "Dask Performance Report" in html
    # each stage logs its time, tasks and bytes read
    assert "co-occurrence:" in res.stderr and "tasks" in res.stderr and "MiB read" in res.stderr


@pytest.mark.slow
def test_python_api_takes_a_client(kos_docword, tmp_path):
    """ingest and fit run on the client they are given, which is not the default client."""
    import logging

    from distributed import Client, LocalCluster

    docword = kos_docword
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR) as lc, \
            Client(lc, set_as_default=False) as client:
        def prefixes() -> set[str]:
            return set(client.run_on_scheduler(
                lambda dask_scheduler: sorted(dask_scheduler.task_prefixes)
            ))

        st.ingest(docword, tmp_path / "c.zarr", progress=False, client=client)
        after_ingest = prefixes()
        assert any("write_group" in p for p in after_ingest)  # the ingest ran here
        m = st.AnchorTopicModel(5, method="plain", seed=0).fit(tmp_path / "c.zarr", client=client)
        assert prefixes() - after_ingest  # ... and so did the fit (new kinds of tasks)
    local = st.AnchorTopicModel(5, method="plain", seed=0).fit(tmp_path / "c.zarr")
    np.testing.assert_allclose(m.components_, local.components_, atol=1e-10)


def test_accumulation_chains_are_spread_over_the_workers(cluster, kos_docword, tmp_path):
    """Every chain starts from partition 0; left to itself the scheduler would run all chains
    (and hold all running sums) on the worker that read it. Each group's links and its writer
    run on the group's home worker, the homes taken in turn."""
    from collections import Counter

    from distributed import Client, get_task_stream

    from streamtopic.cooccurrence import _make_grid

    docword = kos_docword
    with Client(scheduler_file=cluster.file, timeout="30s") as client:
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        assert len(workers) == 2
        with get_task_stream(client) as ts:
            st.ingest(docword, tmp_path / "s.zarr", progress=False, client=client)
    store = st.CooccurrenceStore.open(tmp_path / "s.zarr")
    n_groups = len(_make_grid(store.V, store.chunk_size).groups)
    ran = Counter()
    for task in ts.data:
        name = task["key"] if isinstance(task["key"], str) else task["key"][0]
        for kind in ("_accumulate_piece", "_write_group"):
            if name.startswith(kind):
                ran[kind, task["worker"]] += 1
    writes = [ran["_write_group", w] for w in workers]
    links = [ran["_accumulate_piece", w] for w in workers]
    assert sum(writes) == n_groups >= 4
    # homes in turn (a preference the scheduler may override on a loaded machine: both
    # workers write, never one of them all)
    assert min(writes) >= n_groups // 3, writes
    assert min(links) >= sum(links) // 2 - sum(links) // n_groups  # about half each


def test_client_arithmetic_uses_one_blas_thread_while_a_cluster_runs(monkeypatch):
    """Between passes the client's own arithmetic (anchor search) runs on one BLAS thread
    when a distributed client is current (an idle BLAS pool spins on the workers' cores);
    without a client the limits are left alone."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from streamtopic import cluster as cl

    def blas_threads() -> set[int]:
        return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}

    with threadpool_limits(limits=2, user_api="blas"):
        monkeypatch.setattr(cl, "current_client", lambda: None)
        with cl.client_blas():
            assert blas_threads() == {2}
        monkeypatch.setattr(cl, "current_client", lambda: object())
        with cl.client_blas():
            assert blas_threads() == {1}
        assert blas_threads() == {2}


def test_blas_pinning_finds_the_libraries_once_and_again_after_an_import(monkeypatch):
    """``blas_pinned`` limits every BLAS library to one thread inside and restores them on
    exit; it searches the loaded libraries (``threadpoolctl.ThreadpoolController``, 1-15 ms
    a search) once, and again only after a module was imported since."""
    import threadpoolctl

    from streamtopic import cluster as cl

    real = threadpoolctl.ThreadpoolController
    searches = []

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            searches.append(1)
            super().__init__()

    def blas_threads() -> set[int]:
        return {p["num_threads"] for p in real().info() if p["user_api"] == "blas"}

    with real().limit(limits=2, user_api="blas"):
        monkeypatch.setattr(threadpoolctl, "ThreadpoolController", Counting)
        monkeypatch.setitem(sys.modules, "streamtopic-test-marker", None)  # a new module
        for _ in range(3):
            with cl.blas_pinned():
                assert blas_threads() == {1}
            assert blas_threads() == {2}
        assert len(searches) == 1
        monkeypatch.setitem(sys.modules, "streamtopic-test-marker-2", None)
        with cl.blas_pinned():
            assert blas_threads() == {1}
        assert len(searches) == 2
        with cl.blas_pinned(False):
            assert blas_threads() == {2}


def test_threaded_computations_do_not_import_distributed(tmp_path):
    """On Dask's threaded scheduler a computation (through ``cluster.compute`` and
    ``persist``) never imports ``distributed``: resolving a scheduler by its name does, and
    costs a command ~0.15 s."""
    script = (
        "import sys, dask, dask.threaded, dask.array as da\n"
        "from streamtopic.cluster import compute, persist\n"
        "with dask.config.set(scheduler=dask.threaded.get):\n"
        "    (x,) = compute(da.ones(10, chunks=5).sum(), progress=False)\n"
        "    (y,) = persist([da.ones(4, chunks=2)], progress=False)\n"
        "    assert x == 10 and int(y.sum().compute()) == 4\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'distributed'))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=dict(os.environ, STREAMTOPIC_WARMUP="0"), check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_local_cluster_paces_dask_housekeeping_for_coarse_tasks():
    """The local cluster runs Dask's periodic work at CLUSTER_CONFIG's pace, in the
    scheduler and the worker processes, and leaves the caller's config alone."""
    import dask
    import distributed  # noqa: F401  (loads distributed's defaults into dask.config)
    from dask.utils import parse_timedelta

    from streamtopic.cluster import CLUSTER_CONFIG, scheduler

    keys = sorted(CLUSTER_CONFIG)
    before = {k: dask.config.get(k, None) for k in keys}
    assert before != CLUSTER_CONFIG  # (else this test would prove nothing)
    tick = parse_timedelta(CLUSTER_CONFIG["distributed.admin.tick.interval"], default="ms")
    with scheduler(n_workers=1, local="cluster", quiet=True) as client:
        on_workers = client.run(lambda: {k: dask.config.get(k) for k in keys})
        assert list(on_workers.values()) == [CLUSTER_CONFIG]
        env = "distributed.nanny.pre-spawn-environ."  # the workers' glibc thresholds
        assert list(client.run(lambda: {k: os.environ.get(k[len(env):]) for k in keys
                                        if k.startswith(env)}).values()) \
            == [{k: v for k, v in CLUSTER_CONFIG.items() if k.startswith(env)}]
        assert client.run(lambda dask_worker: dask_worker._tick_interval) == {
            w: tick for w in on_workers}
        assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler._tick_interval) \
            == tick
    assert {k: dask.config.get(k, None) for k in keys} == before


def test_spread_shares_tasks_out_largest_first_to_the_worker_that_finishes_first(monkeypatch):
    """LPT: each task, largest first, to the worker (weighted by its threads) that would
    finish it first; loose restrictions; nothing to annotate without a cluster of 2+."""
    from streamtopic import cluster as cl

    monkeypatch.setattr(cl, "current_client", lambda: None)
    assert cl.spread([3.0, 1.0]) == [{}, {}]
    workers = {"tcp://b": {"nthreads": 1}, "tcp://a": {"nthreads": 1}}
    monkeypatch.setattr(cl, "current_client", lambda: object())
    monkeypatch.setattr(cl, "scheduler_workers", lambda client: workers)
    costs = [3.0, 5.0, 1.0, 4.0, 3.0]
    homes = cl.spread(costs)
    assert all(h["allow_other_workers"] is True and len(h["workers"]) == 1 for h in homes)
    # 5 → a, 4 → b, 3 → b (7 < 8), 3 → a (8), 1 → b (8): loads 8 and 8
    assert [h["workers"][0] for h in homes] == ["tcp://b", "tcp://a", "tcp://b", "tcp://b",
                                                 "tcp://a"]
    load = {}
    for h, c in zip(homes, costs, strict=True):
        load[h["workers"][0]] = load.get(h["workers"][0], 0) + c
    assert load == {"tcp://a": 8.0, "tcp://b": 8.0}
    # a worker with 3 threads takes three tasks of equal size for every one the other takes
    workers["tcp://a"]["nthreads"] = 3
    picks = [h["workers"][0] for h in cl.spread([1.0] * 8)]
    assert picks.count("tcp://a") == 6 and picks.count("tcp://b") == 2
    monkeypatch.setattr(cl, "scheduler_workers", lambda client: {"tcp://a": {"nthreads": 4}})
    assert cl.spread([1.0, 2.0]) == [{}, {}]  # one worker: nothing to share out


def test_sketch_parts_are_shared_out_over_the_workers(monkeypatch, tmp_path):
    """The sketch's parts carry LPT homes (largest first by cost) and priorities when they
    are few per worker; many parts keep Dask's order."""
    import zarr

    from streamtopic import cluster as cl
    from streamtopic.passes import QBlocks
    from streamtopic.sketch import write_sketch

    def scratch(name):
        return str(tmp_path / f"{name}-x.zarr"), str(tmp_path / f"{name}-s.zarr")

    path = str(tmp_path / "q.zarr")
    zarr.create_array(path, shape=(10, 10), chunks=(4, 4), dtype="f8")[:] = np.eye(10)
    monkeypatch.setattr(cl, "current_client", lambda: object())
    monkeypatch.setattr(cl, "scheduler_workers", lambda client: {"tcp://a": {"nthreads": 1},
                                                        "tcp://b": {"nthreads": 1}})
    sums = write_sketch(QBlocks.from_zarr(path), 3, 0, *scratch("a"))
    (layer,) = [lay for name, lay in sums.dask.layers.items() if "parts" in name]
    homes = {k: layer.annotations["workers"](k) for k in layer}
    prio = {k: layer.annotations["priority"](k) for k in layer}
    # blocks of 4, 4 and 2 rows: costs 16·1.5 = 24 for (0, 1); 16 for (0, 0), (1, 1);
    # 8·1.5 = 12 for (0, 2), (1, 2); 4 for (2, 2)
    assert {k[1:]: p for k, p in prio.items()} == {(0, 1): 24, (0, 0): 16, (1, 1): 16,
                                                   (0, 2): 12, (1, 2): 12, (2, 2): 4}
    load = {"tcp://a": 0.0, "tcp://b": 0.0}
    for k, h in homes.items():
        load[h[0]] += prio[k]
    assert sorted(load.values()) == [40.0, 44.0]  # LPT: 24+12+4 | 16+16+12
    # many parts per worker (15 > 4 per thread): Dask's own order, which keeps few in memory
    many = write_sketch(QBlocks.from_memory(np.eye(10), 2), 3, 0, *scratch("b"))
    (layer,) = [lay for name, lay in many.dask.layers.items() if "parts" in name]
    assert len(layer) == 15 and not layer.annotations
