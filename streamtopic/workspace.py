"""A fit's working space on disk: its scratch directory and its entry of the rectified cache.

* :func:`scratch_root` chooses where the fit's scratch directory is made: ``scratch_dir``,
  else a temporary directory when the fit runs on this machine, else the directory that
  contains the store (shared by a cluster's workers).
* :func:`fit_scratch` collects what killed fits left (:func:`collect_fit_debris`), then
  gives the fit a directory of its own there, owned by this process while the fit runs and
  removed when it ends (:func:`streamtopic._scratch.owned_dir`).
* :func:`rectified_key` names the fit's rectified Q in the store's bounded cache, and
  :func:`rectified_target` finds its place there
  (:func:`open_cache_entry`), holding the entry until the fit
  ends; or, when the cache cannot be used, a path in the fit's scratch.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _scratch, cluster
from ._locking import FileLock, is_locked, owner_record
from ._random import resolve_seed
from ._scratch import collect as _collect_debris
from ._scratch import disk_bytes as _disk_bytes
from ._scratch import hold as _hold
from ._scratch import release_owner as _release_owner
from .rectification import WORK_PATTERN, is_complete_array, is_zarr_array
from .store import CooccurrenceStore

if TYPE_CHECKING:
    from .store import CooccurrenceStore

__all__ = ["CACHE_DIR", "FIT_PREFIX", "CacheEntry", "RectifiedTarget", "cache_bytes",
           "cache_entries", "cache_limit", "clear_cache", "collect_fit_debris", "fit_scratch",
           "open_cache_entry", "rectified_key", "rectified_target", "runs_on_this_host",
           "scratch_root"]

log = logging.getLogger("streamtopic")

#: Name prefix of a fit's scratch directory (owned by the fit: see ``streamtopic._scratch``).
FIT_PREFIX = ".streamtopic-fit-"


def scratch_root(scratch_dir: str | os.PathLike[str] | None, store_path: str) -> str:
    """The directory a fit's scratch directory is made in: ``scratch_dir``, else a
    temporary directory when the fit runs on this machine (:func:`runs_on_this_host`), else
    the directory that contains the store at ``store_path`` (shared by a cluster's
    workers)."""
    if scratch_dir is not None:
        return os.path.abspath(os.fspath(scratch_dir))
    if runs_on_this_host():
        return tempfile.gettempdir()
    return os.path.dirname(os.path.abspath(store_path))


@contextmanager
def fit_scratch(root: str, store_path: str) -> Iterator[str]:
    """The fit's own scratch directory under ``root``, after the debris of killed fits is
    collected (:func:`collect_fit_debris`): owned by this process while the block runs, then
    removed. A directory that cannot be written is a one-line error naming it."""
    collect_fit_debris(root, store_path)
    with ExitStack() as stack:
        try:
            path = stack.enter_context(_scratch.owned_dir(root, FIT_PREFIX))
        except OSError as exc:
            raise ValueError(
                f"{root}: cannot write the fit's scratch there ({exc.strerror or exc}); "
                "choose another directory (scratch_dir, or --scratch)"
            ) from None
        yield path


def collect_fit_debris(root: str, store_path: str) -> int:
    """Remove what killed fits left: their scratch directories under ``root`` (owner lock
    free), and in the store (when writable) the scratch of fits of earlier versions
    (``.scratch/fit-*``, an hour old) and partial rectified arrays. Bytes freed."""
    freed = _collect_debris(root, lambda n: n.startswith(FIT_PREFIX))
    legacy = os.path.join(store_path, ".scratch")
    if os.path.isdir(legacy):
        freed += _collect_debris(legacy, lambda n: n.startswith("fit-"))
        with suppress(OSError):  # left if not empty (or read-only)
            os.rmdir(legacy)
    cache = os.path.join(store_path, CACHE_DIR)
    if os.path.isdir(cache):
        freed += _collect_cache(cache)
    if freed:
        log.info("removed %.1f MiB left by killed fits", freed / 2**20)
    return freed


@dataclass(frozen=True)
class RectifiedTarget:
    """Where a fit's rectified Q is: ``path`` (a zarr array), whether it is in the store's
    cache (``cached``) and already written by an earlier fit (``reused``)."""

    path: str
    cached: bool
    reused: bool


def rectified_key(version: int, n_topics: int, method: str, n_iter: int,
                  seed: int | None) -> str:
    """The name of a rectified Q in a store's cache: ``v000003-K20-ap-15-seed0``; the seed
    as a fit resolves it (:func:`~streamtopic._random.resolve_seed`: None is the default
    seed, whose rectified Q it is)."""
    return f"v{version:06d}-K{n_topics}-{method}-{n_iter}-seed{resolve_seed(seed)}"


def rectified_target(store: CooccurrenceStore, key: str, scratch: str,
                     stack: ExitStack) -> RectifiedTarget:
    """The rectified Q's place for a fit: the store's cache entry ``key``, held (shared when
    it exists, exclusive to write it) until ``stack`` closes, so that no one removes it while
    the fit reads it; or ``scratch/rectified/key`` when the cache cannot be used (a
    read-only store, or another fit writing the same entry).

    Parameters
    ----------
    store : CooccurrenceStore
        The store fitted (its path, version, V and the bytes of its Q bound the cache).
    key : str
        The entry's name (:func:`rectified_key`).
    scratch : str
        The fit's scratch directory.
    stack : ExitStack
        Releases the entry when the fit ends.
    """

    made = not os.path.isdir(os.path.join(store.path, CACHE_DIR))
    entry = open_cache_entry(store.path, key, version=store.version,
                             limit=cache_limit(store.q_bytes()), reserve=8 * store.V * store.V)
    if entry is None:
        if made:
            _remove_empty(os.path.join(store.path, CACHE_DIR))
        return RectifiedTarget(os.path.join(scratch, "rectified", key), False, False)
    stack.push(_released(entry, os.path.join(store.path, CACHE_DIR) if made else None))
    return RectifiedTarget(entry.path, True, entry.reused)


def _released(entry: CacheEntry, made: str | None) -> Callable[..., bool]:
    """What ends a fit's hold on its cache entry: the lock released; and when the fit failed
    and had the entry to write, the entry, its lock file and (``made``) the cache directory
    it created removed: a refused or failed fit leaves nothing in the store."""

    def release(exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is None or entry.reused:
            entry.release()
            return False
        shutil.rmtree(entry.path, ignore_errors=True)
        _release_owner(entry.lock)
        if made is not None:
            _remove_empty(made)
        return False

    return release


def _remove_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:  # not empty (another fit's entry), or gone
        pass


def _local_hosts() -> set[str]:
    """Names and addresses of this host."""
    hosts = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"}
    for name in (socket.gethostname(), socket.getfqdn()):
        hosts.add(name)
        try:
            hosts.update(socket.gethostbyname_ex(name)[2])
        except OSError:
            pass
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            hosts.update(a.address.split("%")[0] for a in addrs if a.address)
    except (ImportError, OSError):  # pragma: no cover - psutil missing or unsupported here
        log.debug("cannot list this host's addresses")
    return hosts


def runs_on_this_host() -> bool:
    """Whether the fit's work runs on this machine: no distributed client, or a client whose
    workers all run on this host (their scratch can then be a local temporary directory)."""
    client = cluster.current_client()
    if client is None:
        return True
    addresses = list(cluster.scheduler_workers(client))
    if not addresses:
        return False
    from distributed.comm.addressing import get_address_host

    local = _local_hosts()
    for addr in addresses:
        if addr.startswith("inproc://"):
            continue
        try:
            host = get_address_host(addr)
        except ValueError:  # pragma: no cover - an address we cannot parse
            return False
        if host not in local and not host.startswith("127."):
            return False
    return True


# ============================================================================ the store's cache
#
# ``AnchorTopicModel`` keeps the rectified Q of a fit on the whole vocabulary in the store,
# ``STORE/rectified/<key>`` (one zarr array per store version and settings,
# ``v000003-K20-ap-15-seed0``), for later fits with the same settings. Each entry has a lock
# file ``<key>.lock``: a fit holds it shared while it reads the entry, exclusive while it
# writes it (the array is written to ``<key>.partial-*`` and renamed into place). An entry is
# removed only by whoever takes its lock exclusively, so never while a live fit uses it; the
# lock file's modification time is the entry's last use.

#: The store's directory of rectified arrays.
CACHE_DIR = "rectified"
#: The cache's size bound is ``max(CACHE_MIN_BYTES, CACHE_Q_FACTOR × the bytes on disk of the
#: blocks of Q the head reads)``.
CACHE_MIN_BYTES = 256 * 2**20
CACHE_Q_FACTOR = 2
_LOCK_SUFFIX = ".lock"
_KEY_RE = re.compile(r"v(\d+)-.+")


def cache_limit(q_bytes: int) -> int:
    """The byte bound of a store's cache of rectified arrays.

    A rectified Q is dense (8 V² bytes, 512 MiB at V = 8,192) while the stored Q is sparse
    and compressed, so one entry can outweigh the whole store. The cache keeps the most
    recently used entries of the store's head version within
    ``max(CACHE_MIN_BYTES, CACHE_Q_FACTOR · q_bytes)`` (256 MiB, or twice Q): a store whose
    entries are small keeps several settings, one whose entries are large keeps one. The
    entry a fit is using is always kept, even alone over the bound, as are the entries other
    live fits use; entries of older versions of the store are removed once unused (fits read
    the head version).

    Parameters
    ----------
    q_bytes : int
        Bytes on disk of the blocks of Q the head version reads
        (:meth:`~streamtopic.store.CooccurrenceStore.q_bytes`).
    """
    return max(CACHE_MIN_BYTES, CACHE_Q_FACTOR * int(q_bytes))


@dataclass
class CacheEntry:
    """A cache entry held by a fit: ``path`` (the zarr array), whether it already holds the
    rectified Q (``reused``; else the holder writes it), and the lock kept until
    :meth:`release`."""

    path: str
    reused: bool
    lock: FileLock

    def release(self) -> None:
        self.lock.release()


def _cache_root(store_path: str | os.PathLike[str]) -> tuple[str, int, int]:
    """(the cache directory, the head version, its Q bytes) of the store at ``store_path``.

    Raises
    ------
    StoreError
        When ``store_path`` is not a store.
    """
    store = CooccurrenceStore.open(store_path, lease=False)
    return os.path.join(store.path, CACHE_DIR), int(store.version), int(store.q_bytes())


def _is_entry(root: str, name: str) -> bool:
    return (not name.startswith(".") and ".partial-" not in name
            and not name.endswith((_LOCK_SUFFIX, ".owner"))
            and is_zarr_array(os.path.join(root, name)))


def _entries(root: str) -> list[dict[str, Any]]:
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    out = []
    for name in names:
        if not _is_entry(root, name):
            continue
        path = os.path.join(root, name)
        lock = path + _LOCK_SUFFIX
        try:
            used = os.stat(lock).st_mtime
        except OSError:
            try:
                used = os.stat(path).st_mtime
            except OSError:  # removed meanwhile
                continue
        m = _KEY_RE.fullmatch(name)
        out.append({"key": name, "path": path, "bytes": _disk_bytes(path), "last_used": used,
                    "version": int(m.group(1)) if m else None,
                    "in_use": is_locked(lock)})
    return out


def cache_entries(store_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rectified arrays cached in a store, most recently used first.

    Parameters
    ----------
    store_path : path
        The co-occurrence store.

    Returns
    -------
    list of dict
        Per entry: ``path``, ``key`` (``v<version>-K<K>-<method>-<iterations>-seed<seed>``),
        ``version``, ``bytes`` on disk, ``last_used`` (seconds since the epoch) and
        ``in_use`` (a live fit holds it).
    """
    root, _, _ = _cache_root(store_path)
    return sorted(_entries(root), key=lambda e: -e["last_used"])


def cache_bytes(store_path: str | os.PathLike[str]) -> int:
    """Bytes on disk of a store's cache of rectified arrays (entries and partial ones)."""
    root, _, _ = _cache_root(store_path)
    return _disk_bytes(root) if os.path.isdir(root) else 0


def _evict(root: str, key: str) -> int | None:
    """Remove the entry ``key`` unless a live fit holds it: bytes freed, or None."""
    path = os.path.join(root, key)
    lock = _hold(path + _LOCK_SUFFIX)
    if lock is None:
        return None
    try:
        size = _disk_bytes(path)
        shutil.rmtree(path, ignore_errors=True)
        return 0 if os.path.exists(path) else size
    finally:
        _release_owner(lock)  # the lock file goes with its entry


def _collect_cache(root: str) -> int:
    """Remove the debris of dead fits in the cache directory: partial arrays (and scratch
    directories) whose owner is dead, and lock files of missing entries that nobody holds."""
    freed = _collect_debris(root, lambda n: (re.fullmatch(r".+\.partial-[0-9a-f]{8}", n) is not None
                                      or re.fullmatch(WORK_PATTERN, n) is not None))
    try:
        names = set(os.listdir(root))
    except OSError:
        return freed
    for name in sorted(names):
        if name.endswith(_LOCK_SUFFIX) and name[: -len(_LOCK_SUFFIX)] not in names:
            lock = _hold(os.path.join(root, name))
            if lock is not None:
                if not os.path.exists(os.path.join(root, name[: -len(_LOCK_SUFFIX)])):
                    _release_owner(lock)
                else:  # written meanwhile
                    lock.release()
    return freed


def _trim(root: str, version: int, limit: int, keep: set[str], reserve: int = 0) -> int:
    """Bound the cache: remove unused entries of other versions, then the least recently
    used ones until the rest (plus ``reserve`` bytes about to be written) fits ``limit``;
    entries in ``keep`` and those a live fit holds stay. Bytes freed."""
    freed = 0
    rest = []
    for e in sorted(_entries(root), key=lambda e: e["last_used"]):
        if e["key"] not in keep and e["version"] != version:
            f = _evict(root, e["key"])
            if f is not None:
                freed += f
                continue
        rest.append(e)
    total = reserve + sum(e["bytes"] for e in rest)
    for e in rest:  # least recently used first
        if total <= limit:
            break
        if e["key"] in keep:
            continue
        f = _evict(root, e["key"])
        if f is not None:
            freed += f
            total -= e["bytes"]
    return freed


def clear_cache(store_path: str | os.PathLike[str]) -> int:
    """Remove the cached rectified arrays of the store at ``store_path``, except those live
    fits are using or writing, and the debris of dead fits; returns the bytes freed.

    Raises
    ------
    StoreError
        When ``store_path`` is not a store.
    PermissionError
        When the cache directory cannot be written.
    """
    root, _, _ = _cache_root(store_path)
    if not os.path.isdir(root):
        return 0
    if not os.access(root, os.W_OK):
        raise PermissionError(f"{root}: cannot clear the cache (not writable)")
    freed = _collect_cache(root)
    for e in _entries(root):
        f = _evict(root, e["key"])
        freed += f or 0
    return freed


def open_cache_entry(store_path: str, key: str, *, version: int, limit: int,
                     reserve: int = 0) -> CacheEntry | None:
    """The cache entry ``key`` of the store at ``store_path``, held for a fit.

    Debris of dead fits is collected, and the cache bounded (:func:`cache_limit`; ``reserve``
    bytes of a new entry counted), keeping this entry.

    Parameters
    ----------
    store_path : str
        The store (already opened by the caller).
    key : str
        The entry's name.
    version : int
        The store's head version (entries of others are removed once unused).
    limit : int
        The cache's byte bound.
    reserve : int
        Bytes the entry will take if it is written.

    Returns
    -------
    CacheEntry or None
        Held shared when it exists (``reused``), exclusive when the caller is to write it;
        None when it cannot be used: the store is read-only, or another fit is writing it
        (the caller then rectifies into its own scratch, without caching).
    """
    root = os.path.join(store_path, CACHE_DIR)
    try:
        os.makedirs(root, exist_ok=True)
    except OSError:
        return None
    _collect_cache(root)
    path = os.path.join(root, key)
    lpath = path + _LOCK_SUFFIX
    entry = None
    if is_zarr_array(path):
        lock = _hold(lpath, shared=True)
        if lock is not None and is_complete_array(path):  # not removed before we held it
            entry = CacheEntry(path, True, lock)
        elif lock is not None:
            lock.release()
    if entry is None:
        lock = _hold(lpath, record=owner_record())
        if lock is None:
            return None
        if is_zarr_array(path) and not is_complete_array(path):  # lost chunks: write it anew
            shutil.rmtree(path, ignore_errors=True)
        entry = CacheEntry(path, is_complete_array(path), lock)  # written meanwhile: reused
    try:
        os.utime(lpath)  # the entry's last use
    except OSError:
        pass
    _trim(root, version, limit, {key}, 0 if entry.reused else reserve)
    return entry
