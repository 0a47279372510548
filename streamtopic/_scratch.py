"""Scratch directories owned by a live process, and the collection of those left by dead ones.

A scratch directory ``D`` has an *owner lock* beside it, ``D.owner``: a file that the process
using ``D`` holds locked (``flock``, :mod:`streamtopic._locking`) from before ``D`` exists
until after it is removed. A killed process's lock is free, so whoever comes later can tell
debris from work in progress:

* ``D`` with ``D.owner`` present and not locked: debris, removed;
* ``D`` without ``D.owner`` (written by an older version, or a lock file lost): removed only
  when nothing in it changed for ``STALE_SECONDS`` (an hour);
* ``D.owner`` without ``D`` and not locked: removed.

Collection is best effort: it never fails because of a file it cannot remove (a read-only
store, another collector removing the same debris).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ._io import remove_path
from ._locking import FileLock, owner_record

__all__ = ["OWNER_SUFFIX", "STALE_SECONDS", "collect", "disk_bytes", "hold", "owned_dir",
           "owned_path", "owner_of", "release_owner"]

#: Suffix of the owner lock file beside a scratch directory.
OWNER_SUFFIX = ".owner"
#: Age (seconds since anything at the top of it changed) after which a scratch directory
#: without an owner lock file is taken for debris.
STALE_SECONDS = 3600.0


def hold(path: str, *, shared: bool = False,
         record: dict[str, Any] | None = None) -> FileLock | None:
    """Take the lock file ``path`` (created if missing) without waiting.

    The lock is checked to be on the file that is at ``path`` once it is held: a collector
    may have removed the file between its opening and its locking, and a lock on a removed
    file protects nothing.

    Parameters
    ----------
    path : str
        The lock file.
    shared : bool
        A shared lock (readers) instead of an exclusive one.
    record : dict, optional
        Written into the file by an exclusive holder (who holds it; see
        :func:`streamtopic._locking.owner_record`).

    Returns
    -------
    FileLock or None
        The held lock; None when another process holds it, or the file cannot be opened
        (e.g. a read-only directory).
    """
    for _ in range(5):
        lock = FileLock(path, shared=shared)
        try:
            if not lock.acquire(record=record):
                return None
        except OSError:
            return None
        if lock.is_current():
            return lock
        lock.release()  # the file was removed (or replaced) meanwhile: take the new one
    return None


def owner_of(path: str) -> str:
    """The owner lock file of the scratch directory (or partial array) ``path``."""
    return path + OWNER_SUFFIX


def _take_owner(parent: str, prefix: str, what: str) -> tuple[str, FileLock]:
    """A fresh name ``parent/prefix<hex>`` and its owner lock, held by this process.

    Raises
    ------
    OSError
        When the owner lock cannot be made in ``parent``.
    """
    for _ in range(5):
        path = os.path.join(parent, f"{prefix}{uuid.uuid4().hex[:12]}")
        lock = hold(owner_of(path), record=owner_record())
        if lock is not None:
            return path, lock
        if not os.path.exists(owner_of(path)):  # not created: raise the OS's error
            os.close(os.open(owner_of(path), os.O_CREAT | os.O_RDWR, 0o644))
    raise OSError(f"{parent}: cannot take the owner lock of a scratch {what}")  # pragma: no cover


@contextmanager
def owned_dir(parent: str, prefix: str) -> Iterator[str]:
    """A new directory ``parent/prefix<hex>``, owned by this process while the block runs
    and removed (with its owner lock) when it ends.

    Raises
    ------
    OSError
        When ``parent`` cannot be created or written.
    """
    os.makedirs(parent, exist_ok=True)
    path, lock = _take_owner(parent, prefix, "directory")
    try:
        os.makedirs(path)
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
    finally:
        release_owner(lock)


@contextmanager
def owned_path(parent: str, prefix: str) -> Iterator[str]:
    """A fresh name ``parent/prefix<hex>`` (nothing made there), owned by this process while
    the block runs: whatever the caller makes there (a file or a directory) is removed with
    the owner lock when the block ends, or by the next :func:`collect` if the process dies.

    Raises
    ------
    OSError
        When the owner lock cannot be made in ``parent``.
    """
    path, lock = _take_owner(parent, prefix, "path")
    try:
        yield path
    finally:
        remove_path(path)
        release_owner(lock)


def release_owner(lock: FileLock) -> None:
    """Remove an owner lock file and drop its lock (the file goes first, while it is held,
    so no collector takes a lock on it in between)."""
    try:
        os.unlink(lock.path)
    except OSError:
        pass
    lock.release()


def disk_bytes(path: str) -> int:
    """Bytes of the files under ``path`` (a file's own size if it is one; 0 if missing)."""
    if os.path.isfile(path):
        try:
            return os.path.getsize(path)
        except OSError:
            return 0
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total


def _last_change(path: str) -> float:
    """The latest modification time of ``path`` and of the entries directly in it."""
    try:
        latest = os.stat(path).st_mtime
        with os.scandir(path) as it:
            for entry in it:
                try:
                    latest = max(latest, entry.stat(follow_symlinks=False).st_mtime)
                except OSError:
                    pass
    except OSError:
        return time.time()  # vanishing or unreadable: not old
    return latest


def collect(root: str, match: Callable[[str], bool], *,
            stale_seconds: float = STALE_SECONDS) -> int:
    """Remove the debris of dead processes among the entries of ``root`` whose name
    ``match`` accepts (and their owner lock files); see the module documentation.

    Parameters
    ----------
    root : str
        The directory to look in (missing: nothing to do).
    match : callable
        Whether a name in ``root`` is a scratch directory (or partial array) of the kind
        collected; owner lock files are recognised by their suffix.
    stale_seconds : float
        Age after which a directory without an owner lock file is debris.

    Returns
    -------
    int
        Bytes freed.
    """
    try:
        names = set(os.listdir(root))
    except OSError:
        return 0
    freed = 0
    now = time.time()
    for name in sorted(names):
        if name.endswith(OWNER_SUFFIX):
            base = name[: -len(OWNER_SUFFIX)]
            if base in names or not match(base):
                continue
            lock = hold(os.path.join(root, name))  # an orphan owner file, free: remove it
            if lock is not None:
                release_owner(lock)
            continue
        if not match(name):
            continue
        path = os.path.join(root, name)
        owner = owner_of(path)
        if name + OWNER_SUFFIX in names or os.path.exists(owner):
            lock = hold(owner)
            if lock is None:  # a live owner (or one we cannot tell): keep
                continue
            try:
                freed += _remove(path)
            finally:
                release_owner(lock)
        elif now - _last_change(path) > stale_seconds:
            freed += _remove(path)
    return freed


def _remove(path: str) -> int:
    """Remove a file or directory tree; the bytes it held, 0 if it could not be removed."""
    size = disk_bytes(path)
    remove_path(path)
    return size if not os.path.lexists(path) else 0
