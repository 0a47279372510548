"""Advisory file locks (``fcntl.flock``) for the store's writer lock, reader leases and the
owners of scratch directories.

A lock held by a process disappears with the process, so a lock left by a killed process is
never *stale*: the next process simply takes it. Lock files are therefore never removed to be
taken over (removing a lock file that another process has just locked is what lets two
writers both believe they hold it). Only files whose lock is free may be deleted, by whoever
collects debris.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from typing import Any

__all__ = ["FileLock", "is_locked", "owner_record"]

#: A non-blocking acquire tries again this many times, ``PROBE_PAUSE`` seconds apart, since
#: :func:`is_locked` probes by holding the lock for a moment.
PROBE_RETRIES = 3
PROBE_PAUSE = 0.02


def owner_record() -> dict[str, Any]:
    """Who holds a lock: host, process id and time (shown in error messages)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}


class FileLock:
    """An exclusive (or shared) ``flock`` on ``path``, which is created if missing and never
    removed by :meth:`release`.

    Parameters
    ----------
    path : str
        The lock file.
    shared : bool
        Take a shared lock (many holders) instead of an exclusive one.
    """

    def __init__(self, path: str, *, shared: bool = False) -> None:
        self.path = path
        self.shared = shared
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def is_current(self) -> bool:
        """Whether the held lock is on the file now at ``path`` (not on one removed or
        replaced since it was opened: a lock on such a file protects nothing)."""
        if self._fd is None:
            return False
        try:
            return os.path.samestat(os.fstat(self._fd), os.stat(self.path))
        except OSError:
            return False

    def acquire(self, *, blocking: bool = False, record: dict[str, Any] | None = None) -> bool:
        """Take the lock; False if another process (or another open file of this one) holds
        it and ``blocking`` is false. With ``record``, the holder writes it into the file
        (JSON) once it holds an exclusive lock."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        flags = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        try:
            for attempt in range(PROBE_RETRIES + 1):
                try:
                    fcntl.flock(fd, flags if blocking else flags | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == PROBE_RETRIES:
                        os.close(fd)
                        return False
                    time.sleep(PROBE_PAUSE)  # perhaps only an :func:`is_locked` probe
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        if record is not None and not self.shared:
            data = json.dumps(record).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        return True

    def release(self) -> None:
        """Drop the lock (an exclusive holder first empties the file's record)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if not self.shared:
                os.ftruncate(fd, 0)
        except OSError:
            pass
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    def read_record(self) -> dict[str, Any]:
        """The holder's record ({} when unreadable or empty)."""
        try:
            with open(self.path) as fh:
                value = json.load(fh)
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def __enter__(self) -> FileLock:
        if not self.acquire(blocking=True):  # pragma: no cover - blocking never fails
            raise RuntimeError(f"{self.path}: cannot lock")
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_locked(path: str) -> bool:
    """Whether some open file (of any live process, this one included) holds a lock on
    ``path``. A missing file is not locked."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the probe's own lock
    return False
