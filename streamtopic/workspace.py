"""A fit's working space on disk: its scratch directory and its entry of the rectified cache.

* :func:`scratch_root` chooses where the fit's scratch directory is made: ``scratch_dir``,
  else a temporary directory when the fit runs on this machine, else the directory that
  contains the store (shared by a cluster's workers).
* :func:`fit_scratch` collects what killed fits left (:func:`collect_fit_debris`), then
  gives the fit a directory of its own there, owned by this process while the fit runs and
  removed when it ends (:func:`streamtopic._scratch.owned_dir`).
* :func:`rectified_key` names the fit's rectified Q in the store's bounded cache, and
  :func:`rectified_target` finds its place there
  (:func:`streamtopic.rectification.open_cache_entry`), holding the entry until the fit
  ends; or, when the cache cannot be used, a path in the fit's scratch.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import CooccurrenceStore

__all__ = ["FIT_PREFIX", "RectifiedTarget", "collect_fit_debris", "fit_scratch",
           "rectified_key", "rectified_target", "runs_on_this_host", "scratch_root"]

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
    from ._scratch import owned_dir

    collect_fit_debris(root, store_path)
    with ExitStack() as stack:
        try:
            path = stack.enter_context(owned_dir(root, FIT_PREFIX))
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
    from ._scratch import collect
    from .rectification import CACHE_DIR, _collect_cache

    freed = collect(root, lambda n: n.startswith(FIT_PREFIX))
    legacy = os.path.join(store_path, ".scratch")
    if os.path.isdir(legacy):
        freed += collect(legacy, lambda n: n.startswith("fit-"))
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
    """The name of a rectified Q in a store's cache: ``v000003-K20-ap-15-seed0``."""
    return (f"v{version:06d}-K{n_topics}-{method}-{n_iter}"
            f"-seed{seed if seed is not None else 'none'}")


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
    from .rectification import cache_limit, open_cache_entry

    entry = open_cache_entry(store.path, key, version=store.version,
                             limit=cache_limit(store.q_bytes()), reserve=8 * store.V * store.V)
    if entry is None:
        return RectifiedTarget(os.path.join(scratch, "rectified", key), False, False)
    stack.callback(entry.release)
    return RectifiedTarget(entry.path, True, entry.reused)


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
    from .cluster import _workers, current_client

    client = current_client()
    if client is None:
        return True
    addresses = list(_workers(client))
    if not addresses:
        return False
    from distributed.comm import get_address_host

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
