"""Seek points into gzip inputs, so that a partition decompresses only its own range.

A gzip stream cannot be entered in the middle: without help, a partition that starts at
decompressed byte ``s`` inflates everything before ``s``. The planning scan of a gzip input
(``corpus._gzip_splits``, one sequential pass that finds the record-aligned split offsets)
therefore reads the file through :class:`indexed_gzip.IndexedGzipFile`, which records a seek
point (the compressed position and the 32 KiB window of history before it) every
``spacing`` decompressed bytes as it goes, and exports that index to a file. A worker opens
the input with the index, seeks to the point before its range and inflates at most
``spacing`` bytes it does not need: every partition can then be the normal size, and memory
and time per partition do not depend on where in the file it lies.

Where the index lives: ``$STREAMTOPIC_GZIP_INDEX_DIR`` if set, else
``<tempfile.gettempdir()>/streamtopic-gzip-index-<uid>``, a directory of the user's own (made
mode 0700). Either is used only when it is a real directory (not a link) owned by the user
and writable by nobody else (:func:`private_dir`): an index or a listing there decides which
bytes are read, so one another user could edit would let them change what an ingest counts.
An index file is also checked against the digest its planner recorded before a worker uses
it (:func:`file_digest`). Its name is keyed by the input's absolute
path, size and modification time, so a changed input never meets an old index, and a newer
index replaces the other ones of the same path. The planning process writes it (aside, then
renamed into place); workers only read it. On a cluster whose workers do not share the
planner's temporary directory, set ``STREAMTOPIC_GZIP_INDEX_DIR`` to shared storage: a worker
that does not find the planned index (or cannot use it) falls back to inflating the stream
from its start, which gives the same bytes, only slower. If ``indexed_gzip`` is not
installed or the index directory cannot be written, the planner falls back to the earlier
plan: few, large partitions (``corpus._compressed_blocksize``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from functools import lru_cache
from typing import Any, BinaryIO

log = logging.getLogger(__name__)

__all__ = ["INDEX_DIR_ENV", "available", "check_complete", "file_digest", "index_dir",
           "index_path", "open_scan", "private_dir", "read_range", "save", "spacing_for"]

INDEX_DIR_ENV = "STREAMTOPIC_GZIP_INDEX_DIR"
#: seek points at least this far apart (decompressed bytes) ...
MIN_SPACING = 2**20
#: ... and at most this many of them per file (each keeps a 32 KiB window in the index, which
#: a worker loads whole: the index stays below about 8 MiB whatever the file's size)
MAX_POINTS = 256
#: read buffer of an indexed reader (indexed_gzip's default is 4 × spacing)
READ_BUFFER = 2**20
SUFFIX = ".gzidx"
#: what has been warned about once per process (unusable indexes and directories)
_warned: set[str] = set()


def available() -> bool:
    """Whether ``indexed_gzip`` can be imported and the index directory is the user's own
    and writable (:func:`private_dir`)."""
    try:
        import indexed_gzip  # noqa: F401
    except ImportError:
        return False
    root = index_dir()
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
    except OSError:
        return False
    return private_dir(root) and os.access(root, os.W_OK | os.X_OK)


def index_dir() -> str:
    """The directory of the index files (see the module docstring)."""
    env = os.environ.get(INDEX_DIR_ENV)
    if env:
        return os.path.abspath(env)
    return os.path.join(tempfile.gettempdir(), f"streamtopic-gzip-index-{os.geteuid()}")


def private_dir(root: str) -> bool:
    """Whether ``root`` is a directory (not a symbolic link) owned by this user that no one
    else may write to. The default directory is made private (mode 0700) when it is ours
    but readable by others; one that others may write to, or someone else's, is refused
    with a warning (its files could have been edited)."""
    import stat

    try:
        st = os.lstat(root)
    except OSError:
        return False
    why = None
    if not stat.S_ISDIR(st.st_mode):
        why = "not a directory"
    elif st.st_uid != os.geteuid():
        why = f"owned by user {st.st_uid}"
    elif st.st_mode & 0o022:
        why = f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    if why is None:
        if st.st_mode & 0o077 and not os.environ.get(INDEX_DIR_ENV):
            try:
                os.chmod(root, 0o700)
            except OSError:
                return False
        return True
    if root not in _warned:
        _warned.add(root)
        log.warning("%s: gzip index directory not used (%s): gzip inputs are read in few "
                    "large partitions", root, why)
    return False


@lru_cache(maxsize=64)
def _digest(path: str, size: int, mtime_ns: int, ino: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(2**20), b""):
            h.update(block)
    return h.hexdigest()


def file_digest(path: str) -> str:
    """SHA-256 of a file's content, computed once per process while its size, modification
    time and inode stay the same."""
    st = os.stat(path)
    return _digest(path, st.st_size, st.st_mtime_ns, st.st_ino)


def _prefix(path: str) -> str:
    return hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogateescape")).hexdigest()[:24]


def index_path(path: str) -> str:
    """The index file of ``path`` as it is now (its size and modification time)."""
    st = os.stat(path)
    return os.path.join(index_dir(), f"{_prefix(path)}-{st.st_size}-{st.st_mtime_ns}{SUFFIX}")


def spacing_for(path: str, decompressed_estimate: int) -> int:
    """Seek-point spacing for ``path``: ``MIN_SPACING``, or wider so that a file has at most
    about ``MAX_POINTS`` points (the trailer's size is modulo 4 GiB: text compresses at
    least twice, so twice the compressed size bounds it from below)."""
    decompressed = max(decompressed_estimate, 2 * os.path.getsize(path))
    return max(MIN_SPACING, -(-decompressed // MAX_POINTS))


def open_scan(path: str, spacing: int) -> BinaryIO:
    """A sequential reader of ``path`` that records seek points as it reads (read it in
    blocks: ``read()`` of everything at once does not)."""
    import indexed_gzip

    fh: BinaryIO = indexed_gzip.IndexedGzipFile(
        path, spacing=spacing, buffer_size=READ_BUFFER, readbuf_size=READ_BUFFER
    )
    return fh


def check_complete(path: str, total: int) -> None:
    """Raise (EOFError, OSError, zlib.error) unless ``path`` is a complete gzip stream of
    ``total`` decompressed bytes. indexed_gzip reads a truncated file to its end without an
    error: the trailer's size (modulo 4 GiB) must match, else (a truncated file, or several
    members, whose last trailer counts only the last member) Python's gzip reads it through,
    which raises on a truncated stream."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - 4))
        isize = int.from_bytes(fh.read(4), "little")
    if isize == total % 2**32:
        return
    import gzip

    with gzip.open(path, "rb") as gz:
        while gz.read(2**24):
            pass


def save(fh: Any, path: str) -> str | None:
    """Export the index ``fh`` built while reading ``path`` to its file (aside, then renamed
    into place; older indexes of the same path are removed). None if it cannot be written."""
    target = index_path(path)
    aside = f"{target}.{os.getpid()}.tmp"
    try:
        fh.export_index(aside)
        os.replace(aside, target)
    except Exception as exc:  # indexed_gzip raises its own errors, not only OSError
        log.warning("%s: cannot write its gzip index to %s (%s); reading it in few large "
                    "partitions", path, target, exc)
        try:
            os.remove(aside)
        except OSError:
            pass
        return None
    prefix = _prefix(path)
    root = os.path.dirname(target)
    for name in os.listdir(root):
        other = os.path.join(root, name)
        if name.startswith(prefix) and name.endswith(SUFFIX) and other != target:
            try:
                os.remove(other)
            except OSError:
                pass
    return target


def read_range(path: str, index: str, start: int, stop: int, digest: str | None = None
               ) -> bytes | None:
    """Decompressed bytes [start, stop) of ``path`` through its index ``index``, or None if
    the index is not there (another machine), is not this file's any more, is not the one
    the planner made (its SHA-256 is not ``digest``), is not in a private directory, or
    cannot be used: the caller then reads the stream from its start."""
    try:
        usable = (index_path(path) == index and os.path.isfile(index)
                  and private_dir(os.path.dirname(index))
                  and (digest is None or file_digest(index) == digest))
    except OSError:
        usable = False
    if usable:
        try:
            import indexed_gzip

            with indexed_gzip.IndexedGzipFile(
                # auto_build: past the last point (or in a file shorter than the spacing,
                # which has none) it inflates from the last point, under ``spacing`` bytes
                path, index_file=index, auto_build=True, buffer_size=READ_BUFFER,
                readbuf_size=READ_BUFFER,
            ) as fh:
                fh.seek(start)
                out: bytes = fh.read(stop - start)
            return out
        except Exception as exc:  # missing module, damaged index, NotCoveredError, ...
            reason = str(exc)
    else:
        reason = "index not found, or made for another version of the file"
    if index not in _warned:
        _warned.add(index)
        log.warning("%s: gzip index %s not usable (%s); decompressing from the start",
                    path, index, reason)
    return None
