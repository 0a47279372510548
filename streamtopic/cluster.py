"""Where the work runs: the local default or a distributed Dask cluster.

One switch selects the scheduler for every command: ``--scheduler ADDRESS``,
``--scheduler-file FILE`` or the environment variable ``STREAMTOPIC_SCHEDULER`` (an address, or a
path to a scheduler file). With none of them the command line runs locally (``--local``): for
text it starts a local cluster of worker processes (one single-threaded worker per core, BLAS
pinned to one thread, dashboard on), since tokenising holds the GIL; for numerical work (UCI and
HDF5 inputs, fitting a store) Dask's threaded scheduler, which shares memory without copies.

The Python API follows Dask's conventions instead: it uses the active ``distributed.Client`` if
there is one, else the scheduler set with ``dask.config.set(scheduler=...)``, else threads.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, cast

from .progress import Stage

__all__ = [
    "CLUSTER_CONFIG",
    "QUIET_LOGGERS",
    "SCHEDULER_ENV",
    "current_client",
    "n_workers",
    "quiet_logs",
    "scheduler",
    "compute",
    "delayed_tree",
    "MemoryBudget",
    "blas_pinned",
]

SCHEDULER_ENV = "STREAMTOPIC_SCHEDULER"
log = logging.getLogger("streamtopic")

#: Dask settings of the clusters streamtopic starts (``deploy/`` sets the same on real
#: clusters). streamtopic's tasks are coarse (0.1–1 s each), so Dask's housekeeping can run
#: less often than its defaults, which suit millisecond tasks: the event-loop watchdog ticks
#: every 200 ms instead of 20 ms (in the scheduler, the nannies and the workers), the workers'
#: statistical profiler samples every 100 ms instead of 10 ms, the system monitor behind the
#: dashboard's plots every second, the nannies' memory check every 250 ms. Measured on two
#: cores, a two-worker cluster left idle then spends 0.4 s of CPU per 10 s instead of 1.4 s,
#: CPU that a busy cluster takes from its workers.
#:
#: Dask's nannies start workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which also fixes glibc's
#: mmap threshold at 128 KiB: every temporary array above that is a fresh ``mmap`` whose pages
#: the kernel zeroes on first touch and unmaps on free. The co-occurrence pass makes many
#: (sparse sums, index sorts, documents fetched from other workers): on the 60M-word
#: long-document corpus (issue 24, 2 workers) its CPU was 27% system time. With both
#: thresholds at 1 GiB freed memory is reused within the worker: system time 19%, the pass
#: 52 s against 66 s, the whole ingest 67 s against 86 s. The cost: up to 1 GiB freed but not
#: yet returned per worker, counted in its RSS.
CLUSTER_CONFIG: dict[str, str] = {
    "distributed.admin.tick.interval": "200ms",
    "distributed.worker.profile.interval": "100ms",
    "distributed.admin.system-monitor.interval": "1s",
    "distributed.worker.memory.monitor-interval": "250ms",
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    "distributed.nanny.pre-spawn-environ.MALLOC_MMAP_THRESHOLD_": str(1 << 30),
}


def current_client() -> Any | None:
    """The active ``distributed.Client``, or None."""
    if "distributed" not in sys.modules:
        return None  # no client can exist before distributed is imported (it takes ~0.3 s)
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover
        return None
    try:
        return default_client()
    except ValueError:
        return None


#: The share of the machine's available memory (or of a worker's memory limit) that the
#: automatic memory budget takes: the rest stays free for Dask, the OS page cache and the
#: copies a stage makes around its main arrays.
MEMORY_SHARE = 0.5


def local_memory() -> int:
    """Bytes of memory available to this process now."""
    import psutil

    return int(psutil.virtual_memory().available)


def memory_budget() -> int:
    """The automatic memory budget in bytes: ``MEMORY_SHARE`` of the memory available now,
    or, with a distributed client, of the smallest worker memory limit (a worker without a
    limit counts as its host's total memory)."""
    import psutil

    client = current_client()
    limits = []
    if client is not None:
        for w in scheduler_workers(client).values():
            limit = w.get("memory_limit") or 0
            limits.append(int(limit) if limit else int(psutil.virtual_memory().total))
    base = min(limits) if limits else local_memory()
    return max(256 * 2**20, int(MEMORY_SHARE * base))


@dataclass(frozen=True)
class MemoryBudget:
    """Bytes a fit or an ingest may hold in memory, resolved once (:meth:`resolve`), and the
    one answer to "do ``copies`` dense n×n arrays fit" that every stage asks."""

    bytes: int

    @classmethod
    def resolve(cls, given: int | None) -> MemoryBudget:
        """The user's budget (``--memory-budget``, ``memory_budget=``), else the automatic
        one (:func:`memory_budget`)."""
        return cls(int(given) if given is not None else memory_budget())

    def holds(self, n: int, copies: int, itemsize: int = 8) -> bool:
        """Whether ``copies`` dense n×n arrays of ``itemsize``-byte numbers fit."""
        return copies * itemsize * n * n <= self.bytes

    def largest(self, copies: int, itemsize: int = 8) -> int:
        """The largest n whose ``copies`` dense n×n arrays fit."""
        return int(math.sqrt(self.bytes / (itemsize * copies)))


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover
        return max(1, os.cpu_count() or 1)


def scheduler_workers(client: Any) -> dict[str, Any]:
    """The scheduler's record of every worker of ``client``, by address."""
    if _takes_n_workers(client):
        info = client.scheduler_info(n_workers=-1)
    else:
        info = client.scheduler_info()
    return dict(info.get("workers", {}))


def n_workers() -> int:
    """Parallel slots of the active scheduler (worker threads, or local cores)."""
    client = current_client()
    if client is not None:
        threads: int = sum(w.get("nthreads", 1) for w in scheduler_workers(client).values())
        return max(1, threads)
    return max(1, os.cpu_count() or 1)


def worker_addresses() -> list[str]:
    """Addresses of the current client's workers, sorted (empty without a client)."""
    client = current_client()
    return sorted(scheduler_workers(client)) if client is not None else []


def spread(costs: Sequence[float]) -> list[dict[str, Any]]:
    """Dask annotations that share tasks of the given costs out over the current client's
    workers: largest first, each to the worker that would finish it first (LPT scheduling,
    by worker threads). A loose restriction: another worker takes a task over if its worker
    is lost. Empty annotations without a client or with one worker.

    For a handful of coarse tasks of uneven size (the sketch's blocks of Q) this balances
    the workers where Dask's scheduler would not: it hands the first tasks out in the order
    it processes the graph, before any priority counts."""
    client = current_client()
    workers = scheduler_workers(client) if client is not None else {}
    if len(workers) < 2:
        return [{} for _ in costs]
    threads = {a: max(1, int(workers[a].get("nthreads", 1))) for a in sorted(workers)}
    load = dict.fromkeys(threads, 0.0)
    out: list[dict[str, Any]] = [{} for _ in costs]
    for k in sorted(range(len(costs)), key=lambda k: -costs[k]):
        home = min(load, key=lambda a: (load[a] + costs[k]) / threads[a])
        load[home] += costs[k]
        out[k] = {"workers": [home], "allow_other_workers": True}
    return out


def annotations_by_key(per_key: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    """Per-key annotations (e.g. :func:`spread`'s, by task key) as ``dask.annotate`` takes
    them for a whole layer: a function of the key per annotation; none when no key has any."""
    names = {n for a in per_key.values() for n in a}
    return {n: (lambda k, n=n: per_key[k].get(n)) for n in names}


def _takes_n_workers(client: Any) -> bool:
    import inspect

    try:
        return "n_workers" in inspect.signature(client.scheduler_info).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def _dashboard_address() -> str:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 8787))
            return "127.0.0.1:8787"
        except OSError:
            return "127.0.0.1:0"


@contextmanager
def scheduler(
    address: str | None = None,
    scheduler_file: str | None = None,
    *,
    n_workers: int | None = None,
    local: str = "auto",
    numeric: bool = False,
    quiet: bool = False,
    performance_report: str | None = None,
) -> Iterator[Any | None]:
    """Connect to, or start, the scheduler for one command.

    Parameters
    ----------
    address : str, optional
        Address of a running ``dask scheduler`` (``tcp://host:8786``).
    scheduler_file : str, optional
        A scheduler file written by ``dask scheduler --scheduler-file``.
    n_workers : int, optional
        Worker processes of the local cluster (default: the number of cores).
    local : {'auto', 'cluster', 'inproc', 'threads', 'sync'}
        What runs when no scheduler is named: a local cluster of worker processes (with the
        dashboard), a one-worker cluster inside this process, or Dask's threaded or
        synchronous scheduler. ``auto`` picks threads for ``numeric`` work (it releases the
        GIL, and threads share memory without copies) and the process cluster otherwise.
    numeric : bool
        The work is numerical (UCI/HDF5 inputs, or a stored Q): no Python tokenising.
    quiet : bool
        Do not print the dashboard link.
    performance_report : str, optional
        Write Dask's standalone HTML performance report of the run to this file. It is the
        distributed scheduler's, so the in-process schedulers become a cluster in this process.

    Yields
    ------
    distributed.Client or None
        The client (None for the in-process schedulers).
    """
    address, scheduler_file = _named_scheduler(address, scheduler_file)
    if address is not None or scheduler_file is not None:
        with _remote_client(address, scheduler_file, quiet, performance_report) as client:
            yield client
        return
    if local == "auto":
        local = "threads" if numeric else "cluster"
    if performance_report is not None and local in ("threads", "sync"):
        local = "inproc"
    if local in ("threads", "sync"):
        with _in_process_scheduler(local):
            yield None
        return
    if local not in ("cluster", "inproc"):
        raise ValueError(
            f"local={local!r}: expected 'auto', 'cluster', 'inproc', 'threads' or 'sync'"
        )
    with _local_cluster(local, n_workers, quiet, performance_report) as client:
        yield client


def _named_scheduler(
    address: str | None, scheduler_file: str | None
) -> tuple[str | None, str | None]:
    """The scheduler's address or file: the ones given, else ``$STREAMTOPIC_SCHEDULER`` (a
    file if one exists at that path, else an address)."""
    env = os.environ.get(SCHEDULER_ENV)
    if address is None and scheduler_file is None and env:
        if os.path.isfile(env):
            scheduler_file = env
        else:
            address = env
    return address, scheduler_file


@contextmanager
def _remote_client(
    address: str | None, scheduler_file: str | None, quiet: bool, performance_report: str | None
) -> Iterator[Any]:
    """A client of a running scheduler, closed on exit (the cluster stays up)."""
    from distributed import Client

    if scheduler_file is not None and not os.path.isfile(scheduler_file):
        raise FileNotFoundError(f"{scheduler_file}: scheduler file not found")
    try:
        client = Client(address, scheduler_file=scheduler_file, timeout="20s")
    except OSError as exc:
        target = address or scheduler_file
        raise ConnectionError(f"cannot reach the Dask scheduler at {target}: {exc}") from exc
    with client:
        _announce(client, quiet)
        with _report(performance_report):
            yield client


@contextmanager
def _in_process_scheduler(local: str) -> Iterator[None]:
    """Dask's threaded (``threads``) or synchronous (``sync``) scheduler."""
    import dask
    import dask.local
    import dask.threaded

    # the scheduler function itself: dask imports distributed (~0.2 s) to resolve a
    # scheduler given by name
    get = dask.threaded.get if local == "threads" else dask.local.get_sync
    with dask.config.set(scheduler=get):
        yield


@contextmanager
def _local_cluster(
    local: str, n_workers: int | None, quiet: bool, performance_report: str | None
) -> Iterator[Any]:
    """A local cluster of worker processes (``cluster``) or one worker in this process
    (``inproc``), and its client; both closed on exit."""
    import dask
    from distributed import Client, LocalCluster

    n = n_workers or max(1, os.cpu_count() or 1)
    # Dask's own logs (a worker's "Compute Failed" with its traceback, before the one-line
    # error the command reports) only with -v
    verbose = log.isEnabledFor(logging.INFO)
    if not verbose:
        quiet_logs()
    if local == "inproc":
        # one worker in this process, one thread per core: no pickling or transfers between
        # tasks; right for numerical work that releases the GIL
        kwargs: dict[str, Any] = {"n_workers": 1, "threads_per_worker": n, "processes": False}
    else:
        kwargs = {"n_workers": n, "threads_per_worker": 1, "processes": True}
    with dask.config.set(CLUSTER_CONFIG):  # read as the scheduler and workers start
        cluster = LocalCluster(
            dashboard_address=_dashboard_address(),
            silence_logs=logging.ERROR if verbose else logging.CRITICAL, **kwargs
        )
    with cluster, Client(cluster) as client:
        if not verbose:
            _silence_workers(client)
        _announce(client, quiet)
        with _report(performance_report):
            yield client


#: Loggers silenced in a command's process and its workers, but with -v: Dask's own (a
#: worker's "Compute Failed" with its traceback), and asyncio's ("Task exception was never
#: retrieved": a failed task's exception as the client's or a worker's event loop drops it),
#: which would be printed before the one-line error the command reports.
QUIET_LOGGERS = ("distributed", "asyncio")


def quiet_logs() -> None:
    """Silence :data:`QUIET_LOGGERS` below CRITICAL in this process."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _silence_workers(client: Any) -> None:
    """Silence the logs of the client's workers (which ``LocalCluster(silence_logs=...)``
    leaves on in worker processes), now and in any worker that starts later."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class SilentLogs(WorkerPlugin):
        def setup(self, worker: Any) -> None:
            quiet_logs()

    client.register_plugin(SilentLogs(), name="streamtopic-silent-logs")


@contextmanager
def _report(path: str | None) -> Iterator[None]:
    """Dask's performance report of everything run inside, written to ``path``."""
    if path is None:
        yield
        return
    from distributed import performance_report

    with performance_report(filename=path):
        yield
    print(f"performance report: {path}", file=sys.stderr, flush=True)


def _announce(client: Any, quiet: bool) -> None:
    if quiet:
        return
    link = getattr(client, "dashboard_link", None)
    if link:
        print(f"Dask dashboard: {link}", file=sys.stderr, flush=True)


def compute(
    *collections: Any,
    progress: bool = True,
    label: str = "",
    optimize_graph: bool = True,
    bytes_read: int | None = None,
) -> tuple[Any, ...]:
    """``dask.compute`` with one progress display (:class:`streamtopic.progress.Stage`) on
    any scheduler: a bar on a terminal, one line with the stage's time elsewhere.

    On a distributed client this submits the collections, follows them and gathers;
    otherwise it runs them on the local scheduler. Logs (logger ``streamtopic``, level INFO;
    ``streamtopic -v``) the stage's wall time, its task count and, when the caller knows it,
    the bytes the stage reads.
    """
    import dask.base

    t0 = time.perf_counter()
    client = current_client()
    keys = set().union(*(c.__dask_graph__().keys() for c in _collections(collections)))
    n_tasks = len(keys)
    stage = Stage(label, enabled=progress and label is not None)
    with _one_blas_thread(client), stage:
        if client is not None:
            futures = client.compute(list(collections), optimize_graph=optimize_graph)
            try:
                stage.watch(futures)
                results = tuple(client.gather(futures))
            except BaseException:
                _settle(client, futures, keys)
                raise
        else:
            with _own_threads(collections) as kwargs, stage.tasks():
                results = dask.base.compute(*collections, optimize_graph=optimize_graph, **kwargs)
    read = f", {bytes_read / 2**20:.1f} MiB read" if bytes_read is not None else ""
    log.info("%s: %.2f s, %d tasks%s", label or "compute", time.perf_counter() - t0, n_tasks,
             read)
    return results


@contextmanager
def _own_threads(collections: Sequence[Any]) -> Iterator[dict[str, Any]]:
    """For Dask's threaded scheduler, a thread pool of this computation's own, waited for
    when it ends: when a task fails, ``dask.compute`` raises at once while its other running
    tasks go on, and a caller that cleans up after the failure (removes a half-written
    store) must not have them write after it. Other schedulers run as configured."""
    import dask
    import dask.threaded
    from dask.base import get_scheduler

    if get_scheduler(collections=_collections(collections)) is not dask.threaded.get:
        yield {}
        return
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(dask.config.get("num_workers", None) or usable_cores())
    try:
        # the function, not its name: dask imports distributed (~0.15 s) to resolve a name
        yield {"scheduler": dask.threaded.get, "pool": pool}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _settle(client: Any, futures: Sequence[Any], keys: set[Any],
            timeout: float = 60.0) -> None:
    """After a failed computation on a cluster: cancel its futures and wait (up to
    ``timeout`` seconds) until no worker still executes a task of its graph (``keys``), for
    the reason :func:`_own_threads` gives. The workers themselves are asked: once cancelled,
    a task that still runs is no longer the scheduler's."""
    names = {str(k) for k in keys} | {str(f.key) for f in futures}
    try:
        client.cancel(list(futures))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = client.run(_executing_keys)
            if not any(k in names for ks in running.values() for k in ks):
                return
            time.sleep(0.05)
        log.warning("tasks of a failed computation still run after %.0f s", timeout)
    except Exception:  # a cluster that is gone runs nothing
        return


def _executing_keys(dask_worker: Any) -> list[str]:
    """The keys of the tasks a worker is executing (run on the worker by ``client.run``)."""
    state = getattr(dask_worker, "state", None)
    tasks = list(getattr(state, "executing", ())) + list(getattr(state, "long_running", ()))
    return [str(getattr(ts, "key", ts)) for ts in tasks]


def persist(items: Any, progress: bool = True, label: str = "") -> Any:
    """``dask.persist`` of ``items`` (on the active client, whose workers then hold the
    results, else on the local scheduler), with one progress display when asked."""
    import dask.base

    t0 = time.perf_counter()
    client = current_client()
    with Stage(label, enabled=progress) as stage, stage.tasks():
        (out,) = dask.base.persist(items)
        if client is not None:
            stage.watch(out)
    log.info("%s: %.2f s (persisted)", label or "persist", time.perf_counter() - t0)
    return out


@contextmanager
def _one_blas_thread(client: Any) -> Iterator[None]:
    """Pin BLAS to one thread while work runs on threads of this process (Dask's threaded
    scheduler, or a cluster whose workers live in this process), so that its threads do not
    oversubscribe the cores; worker processes are pinned by their environment."""
    with blas_pinned(client is None or _in_process_workers(client)):
        yield


@contextmanager
def client_blas() -> Iterator[None]:
    """One BLAS thread for the client's own arithmetic between passes (anchor search, Bayes'
    rule) while a distributed cluster runs the passes. That work is small and serial, and an
    idle BLAS pool spins on the cores that workers sharing the machine need (measured: 0.25 s
    of CPU per fit on 2 cores). Without a client nothing changes."""
    with blas_pinned(current_client() is not None):
        yield


# threadpoolctl's controller of this process' BLAS libraries, with the number of modules
# loaded when it looked for them (a module loaded since may have brought a library)
_BLAS_CONTROLLER: tuple[int, Any] | None = None


def blas_pinned(pin: bool = True) -> AbstractContextManager[Any]:
    """BLAS limited to one thread inside (when ``pin``), else nothing changed.

    The libraries are found once (``threadpoolctl.ThreadpoolController``) and looked for
    again only after a module was imported: ``threadpool_limits`` searches every loaded
    shared library on each call, 1-15 ms, and a fit pins BLAS around each of its dozens of
    computations."""
    global _BLAS_CONTROLLER
    if not pin:
        return nullcontext()
    from threadpoolctl import ThreadpoolController

    found = _BLAS_CONTROLLER
    if found is None or found[0] != len(sys.modules):
        found = _BLAS_CONTROLLER = (len(sys.modules), ThreadpoolController())
    return cast("AbstractContextManager[Any]", found[1].limit(limits=1, user_api="blas"))


def _in_process_workers(client: Any) -> bool:
    from distributed import Worker

    workers = getattr(getattr(client, "cluster", None), "workers", None) or {}
    return any(isinstance(w, Worker) for w in workers.values())


def _collections(items: Any) -> list[Any]:
    """Dask collections in ``items`` (lists of them included)."""
    out = []
    for c in items:
        if hasattr(c, "__dask_graph__"):
            out.append(c)
        elif isinstance(c, (list, tuple)):
            out.extend(_collections(c))
    return out


#: Fan-in of :func:`delayed_tree`.
TREE_FAN_IN = 8


def delayed_tree(combine: Any, items: Sequence[Any], fan_in: int = TREE_FAN_IN) -> Any:
    """A reduction tree of delayed calls ``combine(*items)`` with fan-in ``fan_in``."""
    from dask.delayed import delayed  # deferred, as all of Dask here: the CLI starts without it

    level = list(items)
    if len(level) == 1:
        return delayed(combine, pure=True)(level[0])
    while len(level) > 1:
        level = [
            delayed(combine, pure=True)(*level[k : k + fan_in])
            for k in range(0, len(level), fan_in)
        ]
    return level[0]
