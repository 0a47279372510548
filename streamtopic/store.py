"""The co-occurrence store: a versioned, chunked zarr group holding the sum of Q_d.

Layout of a store directory (a zarr 3 group)::

    zarr.json                 root attributes: format, vocabulary size, chunk size, head version
    vocab                     (V,) strings
    versions/v000001/         one group per committed ingest round
        Q                     (V, V) float64, chunks (c, c): the dense blocks this round changed
        S/<r0>_<c0>           a sparse block this round changed (rows r0…, columns c0…): its
                              CSR arrays as one array of bytes (one chunk file, ``c.0``)
        block_versions        (nb, nb) int32: which version holds each block (0: all zero)
                              (its base, when the block also has deltas: see below)
        word_counts, doc_freq (V,) int64
        D/p<k>                the round's text documents as (word id, count) pairs, one
                              array of bytes per partition (:mod:`streamtopic.doccache`)
        zarr.json             attributes: counts, the manifest of ingested sources, each
                              block's non-zeros and which blocks are sparse, the cached
                              partitions of the round (``documents``) and the versions that
                              hold cached documents (``document_versions``)

A block is stored sparse when fewer than ``SPARSE_BELOW`` of its entries are non-zero, so the
store's size follows its non-zeros, not V²: among the frequent words Q is dense, among the
rare ones it is almost empty. Readers get every block dense (:func:`read_q_block`), or in
its stored form when they ask.

Versions are immutable once committed. An ingest writes a new version beside the head (each
block by exactly one task), then commits by rewriting the root ``zarr.json`` (one atomic file
replace) to point at it. A process killed before that leaves the head untouched; its partial
version is removed by the next writer. Blocks that a round does not touch stay where they are,
so an incremental update rewrites only what changed.

A small round does not rewrite the blocks it touches either: where its part of a block is
small beside the block (``DELTA_SHARE``), it writes that part alone, as a sparse *delta*
block of its version (``S/``, as a sparse block), and the head lists the block's deltas
(``block_deltas``: version and non-zeros of each, oldest first) on top of its base (the
version ``block_versions`` names). Readers add the deltas to the base, in version order,
which is the sum a rewrite would have stored, bit for bit. A round that would make a
block's deltas too many (``MAX_DELTAS``) or too large rewrites the block whole, deltas
merged: so the cost of a round follows the new data, and a read never adds more than a
bounded share of entries.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import scipy.sparse as sp
import zarr

from ._locking import FileLock, owner_record
from ._scratch import disk_bytes
from .cluster import usable_cores
from .doccache import DamagedCacheError, PartitionRecord, partition_path, read_partition
from .integrity import array_digest, chain_digest, seal, unsealed
from .manifest import (
    ManifestEntry,
    ManifestError,
    ManifestMark,
    append_manifest,
    read_manifest,
)

try:  # the C extension's encoder of dense blocks as sparse ones and counter of their
    # non-zeros (scipy's and numpy's without it)
    from ._pairs import count_nonzero_rows as _c_count_nonzero
    from ._pairs import sparse_bytes as _c_sparse_bytes
except ImportError:  # built without a C compiler
    _c_count_nonzero = _c_sparse_bytes = None

__all__ = ["StoreError", "CachedPartition", "CooccurrenceStore", "DEFAULT_CHUNK"]

log = logging.getLogger(__name__)

FORMAT = "streamtopic-cooccurrence"
#: 2: the manifest carries its digest (``sources_digest``), which readers then require;
#: 3: sparse blocks (``S/``), listed in the head's ``sparse_blocks``;
#: 4: dense blocks below the diagonal read as their mirror image transposed
#: (``mirrored_dense_blocks``), and the token cache (``D/``, :mod:`streamtopic.doccache`);
#: 5: digests (:mod:`streamtopic.integrity`): the root's metadata and each version's are
#: sealed, each version records the digests of its arrays and of the vocabulary's first V
#: words; the manifest is appended per version to ``manifest.jsonl``
#: (:mod:`streamtopic.manifest`)
#: 6: delta blocks (``block_deltas``)
FORMAT_VERSION = 6
#: Marks a superseded version that :meth:`CooccurrenceStore.cleanup` stripped and none of
#: whose blocks is in use (kept for its token cache only): later cleanups skip it, so their
#: cost does not grow with the number of versions
COLLECTED = ".collected"
DEFAULT_CHUNK = 2048
#: A block with fewer non-zeros than this share of its entries is stored sparse (CSR)
SPARSE_BELOW = 0.25
#: How a block is stored (:attr:`CooccurrenceStore.block_sparse`): in the dense array, as a
#: sparse block of its own, or as the transpose of its mirror image's sparse block
#: (``MIRRORED``) or dense block (``MIRRORED_DENSE``): an ingest writes a block above the
#: diagonal once, for both. Writing dense mirrors cost as much as the blocks themselves: Q's
#: bytes bound the ingest of long documents (2.3 GB at 9.2M words, V = 33,385)
DENSE, SPARSE, MIRRORED, MIRRORED_DENSE = 0, 1, 2, 3
#: The head's record of the blocks of each stored kind (the others are DENSE)
_KIND_RECORDS = (("sparse_blocks", SPARSE), ("mirrored_blocks", MIRRORED),
                 ("mirrored_dense_blocks", MIRRORED_DENSE))
LOCK_FILE = ".streamtopic.lock"
#: A round writes its part of a block as a delta when that part and the block's deltas
#: before it hold at most this share of the base block's non-zeros (a read then adds at most
#: this share again of sparse entries), and the block has fewer than ``MAX_DELTAS`` deltas;
#: otherwise it rewrites the block whole. On 20 Newsgroups (V = 20,036, 10×10 blocks) a
#: batch of 1% of the documents touches all 55 stored blocks with 0.1–6% of their
#: non-zeros: rewriting them read and wrote 260 MiB (3 s of the round's 3.7 s)
DELTA_SHARE = 0.25
MAX_DELTAS = 16
#: A block's deltas: (version, non-zeros) of each, oldest first
Deltas = tuple[tuple[int, int], ...]


class StoreError(ValueError):
    """A path that is not a co-occurrence store, or a store in an unusable state."""


@dataclass(frozen=True)
class CachedPartition:
    """One partition of cached text documents: the version that holds it, its record, and
    the manifest entries of the inputs that version added (its documents' ``runs`` index
    them)."""

    version: int
    record: PartitionRecord
    sources: tuple[ManifestEntry, ...]


def _vname(number: int) -> str:
    return f"versions/v{number:06d}"


def _version_number(name: str) -> int | None:
    """The number of a version directory name (``v000012``), None for anything else."""
    if len(name) == 7 and name[0] == "v" and name[1:].isdigit():
        return int(name[1:])
    return None


class _WriterLock:
    """The store's writer lock: an exclusive ``flock`` on ``STORE/.streamtopic.lock``.

    The lock belongs to an open file, so it vanishes with its process: a killed writer leaves
    the file (with its record: host, pid, time) but not the lock, and the next writer simply
    takes it. The file is never removed, so two writers can never each lock a different file
    of the same name."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, LOCK_FILE)
        self._lock = FileLock(self.path)

    @property
    def held(self) -> bool:
        return self._lock.held

    def acquire(self) -> None:
        """Take the lock, or raise :class:`StoreError` naming the writer holding it."""
        try:
            took = self._lock.acquire(record=owner_record())
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot take the writer lock ({exc.strerror})") from None
        if not took:
            other = self._lock.read_record()
            raise StoreError(
                f"{os.path.dirname(self.path)}: another ingest is writing this store "
                f"(pid {other.get('pid', '?')} on {other.get('host', '?')})"
            )

    def release(self) -> None:
        self._lock.release()


_READERS = "readers"
#: Seconds after which a lease that this writer cannot probe (another user's, unreadable) no
#: longer keeps anything: it cannot block collection for ever.
STALE_LEASE = 86400.0


class _Lease:
    """A reader's lease on one version: ``STORE/readers/<id>.json`` (the version, host, pid),
    share-locked for as long as the reader holds it. Writers keep every version a live lease
    names, with the blocks it reads; a lease whose lock is free (its reader died) is debris.

    Made under a temporary name and renamed into place once locked, so a writer never sees
    an unlocked lease of a live reader."""

    def __init__(self, root: str, version: int) -> None:
        folder = os.path.join(root, _READERS)
        if not os.path.isdir(folder):  # with the umask: never writable by every user
            os.makedirs(folder, exist_ok=True)
        name = uuid.uuid4().hex
        tmp = os.path.join(folder, f".tmp-{name}")
        self.path = os.path.join(folder, f"{name}.json")
        self._lock = FileLock(tmp, shared=True)
        self._lock.acquire(blocking=True)
        try:
            with open(tmp, "w") as fh:
                os.fchmod(fh.fileno(), 0o644)  # writers of other users must probe it
                json.dump(dict(owner_record(), version=int(version)), fh)
            os.rename(tmp, self.path)
        except BaseException:
            self._lock.release()
            _remove_quietly(tmp)
            raise

    def release(self) -> None:
        _remove_quietly(self.path)  # first the file, then the lock: never an unlocked lease
        self._lock.release()


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _read_head(root: str) -> int | None:
    """The head version in the root ``zarr.json`` as it is on disk now (None if unreadable)."""
    try:
        with open(os.path.join(root, "zarr.json")) as fh:
            return int(json.load(fh)["attributes"]["streamtopic"]["head"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def live_leases(root: str, *, collect: bool = False) -> list[int] | None:
    """The versions named by live readers' leases of the store at ``root``; with ``collect``
    (a writer, holding the lock), the files of dead readers are removed. None when a lease
    cannot be probed or read (then nothing may be deleted).

    Entries are opened without following links and without blocking
    (:func:`probe_lease`): anything in ``readers/`` that is not a regular file (a FIFO, a
    socket, a link) is no lease, and is removed when collecting."""
    folder = os.path.join(root, _READERS)
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return []
    except OSError:
        return None
    versions: list[int] = []
    try:
        for entry in entries:
            tmp = entry.name.startswith(".tmp-")  # a lease being made, or its reader killed
            if not tmp and not entry.name.endswith(".json"):
                continue
            try:
                state = probe_lease(entry.path)
            except ValueError:  # a lease being written
                if not tmp:
                    raise
                state = 0
            except PermissionError:  # another user's lease: live unless a day old
                if _age(entry.path) > STALE_LEASE:
                    continue
                raise
            if state is None or (state == -1 and not (tmp and _age(entry.path) <= 60)):
                if collect:  # no lease (not a regular file), or a dead reader's
                    _remove_quietly(entry.path)
                continue
            if not tmp:
                versions.append(state)
    except FileNotFoundError:  # released meanwhile: look again
        return live_leases(root, collect=collect)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return versions


#: The largest lease file read (a lease is a line of JSON)
_LEASE_BYTES = 4096


def probe_lease(path: str) -> int | None:
    """What the file at ``path`` in ``readers/`` is: the version a live lease names (>= 0;
    a lease being made names 0 until it is written), -1 for a dead reader's lease (its lock
    is free), or None for anything that is not a regular file. The file is opened with
    ``O_NOFOLLOW | O_NONBLOCK``, so neither a link nor a FIFO can redirect or hang the
    probe, and at most 4 KiB of it is read.

    Raises
    ------
    FileNotFoundError
        The file went away meanwhile.
    PermissionError
        It cannot be opened (another user's lease).
    ValueError
        A live lease whose content is not a lease's.
    """
    import fcntl
    import stat

    if not stat.S_ISREG(os.lstat(path).st_mode):  # not even opened: a socket, a device
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # replaced by a link, or a socket
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held: a live reader
            raw = os.pread(fd, _LEASE_BYTES + 1, 0)
            if not raw:
                return 0
            if len(raw) > _LEASE_BYTES:
                raise ValueError(f"{path}: longer than a lease") from None
            return int(json.loads(raw)["version"])
        return -1
    finally:
        os.close(fd)  # also drops the probe's own lock


def _age(path: str) -> float:
    try:
        return time.time() - os.path.getmtime(path)
    except OSError:
        return 0.0


@dataclass
class Transaction:
    """An ingest round being written: a new version beside the head.

    ``owns_lock``: the round took the writer lock itself (in :meth:`CooccurrenceStore.begin`)
    and releases it when it commits or aborts; otherwise its caller holds the lock."""

    store: CooccurrenceStore
    number: int
    lock: _WriterLock
    owns_lock: bool = True
    #: the vocabulary size of the round (larger than the head's when it adds words)
    V: int = 0
    #: the head points at this round: from then on nothing may remove it
    committed: bool = False

    @property
    def group_path(self) -> str:
        return _vname(self.number)

    def finish(self) -> None:
        if self.owns_lock:
            self.lock.release()


#: Chunks are written as they are: the writers of Q only write blocks with non-zeros, so
#: zarr's check that a chunk is all fill value (a pass over every 32 MiB block) is skipped
_WRITE_AS_IS: Any = {"write_empty_chunks": True}


def open_for_blocks(root: str, path: str) -> zarr.Array[Any]:
    """A version's dense array of Q opened to write blocks into (see ``_WRITE_AS_IS``:
    ``open_array`` ignores a ``config``, so it is set on the array opened)."""
    arr = zarr.open_array(store=root, path=path, mode="r+")
    return arr.with_config(_WRITE_AS_IS) if hasattr(arr, "with_config") else arr


def _sparse_path(version: int, rows: slice, cols: slice) -> str:
    """Where a sparse block (rows, cols) of a version lives (a group of three arrays)."""
    return f"{_vname(version)}/S/{rows.start}_{cols.start}"


def _read_sparse(root: str, version: int, rows: slice, cols: slice) -> sp.csr_matrix:
    """A sparse block, from its one array of bytes (:func:`_sparse_bytes`), checked before
    scipy sees it (:func:`_sparse_parts`)."""
    arr = zarr.open_array(store=root, path=_sparse_path(version, rows, cols), mode="r")
    if arr.ndim != 1 or arr.dtype != np.uint8:
        raise ValueError(f"a sparse block stored as {arr.dtype} of {arr.ndim} dimensions")
    raw = np.asarray(arr[:])
    shape = (rows.stop - rows.start, cols.stop - cols.start)
    if raw.size >= 24 and int(raw[8:16].view(np.int64)[0]) == 0:
        return sp.csr_matrix(shape)  # the chunk file is gone: zarr reads its fill value
    data, indptr, indices = _sparse_parts(raw, shape)
    if indptr.size - 1 < shape[0]:  # written before the vocabulary grew: new rows empty
        indptr = np.r_[indptr, np.full(shape[0] - indptr.size + 1, indptr[-1], np.int32)]
    return sp.csr_matrix((data, indices, indptr), shape=shape)


def _sparse_parts(raw: np.ndarray, shape: tuple[int, int]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The values, row pointers and column indices (int32) of a sparse block's bytes, after
    checking everything scipy's compiled code trusts: the sizes, the row pointers (from 0 to
    nnz, never decreasing) and every column index within the block. Raises ValueError."""
    if raw.size < 24:
        raise ValueError(f"a sparse block of {raw.size} bytes")
    nnz, n_rows, wide = (int(x) for x in raw[:24].view(np.int64))
    width = 4 if wide else 2
    if wide not in (0, 1) or not 0 <= nnz <= shape[0] * shape[1] or not 0 < n_rows <= shape[0]:
        raise ValueError(f"a sparse block's header records {nnz} non-zeros in {n_rows} rows "
                         f"of a {shape[0]}×{shape[1]} block")
    if raw.size != 24 + 8 * nnz + 4 * (n_rows + 1) + width * nnz:
        raise ValueError(f"a sparse block of {raw.size} bytes; its header describes another "
                         "size")
    o = 24 + 8 * nnz
    data = raw[24:o].view(np.float64)
    indptr = raw[o : o + 4 * (n_rows + 1)].view(np.int32)
    indices = raw[o + 4 * (n_rows + 1):].view(np.int32 if wide else np.uint16)
    if indptr[0] != 0 or indptr[-1] != nnz or np.any(np.diff(indptr) < 0):
        raise ValueError("a sparse block's row pointers are inconsistent")
    if nnz and (int(indices.min()) < 0 or int(indices.max()) >= shape[1]):
        raise ValueError("a sparse block's column indices fall outside it")
    return data, indptr, indices.astype(np.int32)


def block_nonzeros(block: Any) -> int:
    """The non-zeros of a block (a scipy sparse matrix, or an ndarray: through the C
    extension when its rows are contiguous, numpy's ``count_nonzero`` being four times
    slower on a view of a few columns of a group's sum)."""
    if sp.issparse(block):
        return int(block.nnz)
    if (_c_count_nonzero is not None and block.ndim == 2 and block.dtype == np.float64
            and block.strides[1] == 8):
        return int(_c_count_nonzero(block))
    return int(np.count_nonzero(block))


def _dense_sparse_bytes(block: np.ndarray, nnz: int) -> np.ndarray:
    """:func:`_sparse_bytes` of a dense block (rows×cols float64) holding ``nnz``
    non-zeros, in one pass over it (the C extension's ``sparse_bytes``: about ten times
    faster than through scipy, which makes a COO matrix first); through scipy when the
    extension was not built or the rows are not contiguous."""
    wide = block.shape[1] > 2**16
    if _c_sparse_bytes is None or block.dtype != np.float64 or block.strides[1] != 8:
        return _sparse_bytes(sp.csr_matrix(block))
    out = np.empty(24 + 8 * nnz + 4 * (block.shape[0] + 1) + (4 if wide else 2) * nnz,
                   dtype=np.uint8)
    _c_sparse_bytes(block, out, nnz, wide)
    return out


def _sparse_bytes(S: sp.csr_matrix) -> np.ndarray:
    """A CSR block as one array of bytes: a header (nnz, rows, wide indices: int64 each),
    the values (float64), indptr (int32) and the column indices (uint16, or int32 when
    ``wide``), in that order so that each part is aligned."""
    wide = S.shape[1] > 2**16
    parts = [np.array([S.nnz, S.shape[0], int(wide)], dtype=np.int64), S.data.astype(np.float64),
             S.indptr.astype(np.int32), S.indices.astype(np.int32 if wide else np.uint16)]
    return np.concatenate([p.view(np.uint8) for p in parts])


def read_q_block(
    root: str, version: int, rows: slice, cols: slice, scale: float = 1.0, nnz: int = -1,
    *, sparse: int = DENSE, stored_form: bool = False, deltas: Deltas = (),
) -> Any:
    """Read one block of the sum from a version (zeros for version 0), plus its ``deltas``,
    times ``scale`` (1/n_docs gives Q itself).

    ``sparse``: how the block is stored (``DENSE``, ``SPARSE``, or ``MIRRORED`` and
    ``MIRRORED_DENSE``: the transpose of the sparse or dense block (cols, rows); the head's
    :attr:`~CooccurrenceStore.block_sparse`). ``deltas``: (version, non-zeros) of the
    block's delta blocks, added in that order (:attr:`~CooccurrenceStore.block_deltas`; a
    block below the diagonal reads its mirror image's transposed).
    The block is returned dense (ndarray, rows×cols), or, with ``stored_form``, a sparse
    block as a ``scipy.sparse.csr_matrix``.

    ``nnz`` is the block's recorded count of non-zeros (-1: unknown). A block recorded with
    non-zeros that reads as all zeros (its chunk file is gone), or whose chunk fails to decode
    or to match its checksum, raises :class:`StoreError`: damage is never read as zeros."""
    shape = (rows.stop - rows.start, cols.stop - cols.start)
    if version <= 0 and not deltas:
        return np.zeros(shape)
    out: Any = (_read_stored(root, version, rows, cols, nnz, sparse) if version > 0
                else sp.csr_matrix(shape))
    for dv, dn in deltas:
        out = block_sum(out, _read_delta(root, int(dv), rows, cols, int(dn)))
    if scale != 1.0:
        if sp.issparse(out):
            out.data *= scale
        else:
            out *= scale
    return out.toarray() if sp.issparse(out) and not stored_form else out


def _read_stored(root: str, version: int, rows: slice, cols: slice, nnz: int,
                 sparse: int) -> Any:
    """A version's stored block, as stored: a CSR matrix or a new ndarray; checked as
    :func:`read_q_block` says."""
    try:
        if sparse == MIRRORED:
            out: Any = _read_sparse(root, version, cols, rows).T.tocsr()
            count = out.nnz
        elif sparse == MIRRORED_DENSE:
            arr = dense_q(root, version)
            out = np.ascontiguousarray(_read_padded(arr, cols, rows).T)
            count = int(np.count_nonzero(out))
        elif sparse:
            out = _read_sparse(root, version, rows, cols)
            count = out.nnz
        else:
            arr = dense_q(root, version)
            out = _read_padded(arr, rows, cols)
            count = int(np.count_nonzero(out))
    except Exception as exc:  # zarr, blosc and crc32c raise several types
        raise _damage(root, version, rows, cols, f"cannot be read ({exc})") from exc
    _check_count(root, version, rows, cols, count, nnz)
    return out


def _read_delta(root: str, version: int, rows: slice, cols: slice, nnz: int
                ) -> sp.csr_matrix:
    """A version's delta of block (rows, cols), stored above the diagonal (a block below
    reads its mirror image's transposed), checked against its recorded ``nnz``."""
    mirrored = rows.start > cols.start
    try:
        out = (_read_sparse(root, version, cols, rows).T.tocsr() if mirrored
               else _read_sparse(root, version, rows, cols))
    except Exception as exc:  # zarr, blosc and crc32c raise several types
        raise _damage(root, version, rows, cols, f"(a delta) cannot be read ({exc})"
                      ) from exc
    _check_count(root, version, rows, cols, out.nnz, nnz)
    return out


try:  # scipy's kernel behind toarray(): adds a CSR matrix into a dense array, no allocation
    from scipy.sparse._sparsetools import csr_todense as _csr_add_into
except ImportError:  # pragma: no cover - a future scipy may move it
    _csr_add_into = None


def add_sparse_into(dense: np.ndarray, piece: sp.csr_matrix) -> None:
    """dense += piece, in place."""
    if _csr_add_into is not None and dense.flags.c_contiguous and dense.dtype == np.float64:
        idx_type = np.result_type(piece.indptr, piece.indices)
        _csr_add_into(
            piece.shape[0], piece.shape[1], piece.indptr.astype(idx_type, copy=False),
            piece.indices.astype(idx_type, copy=False), piece.data.astype(np.float64, copy=False),
            dense,
        )
        return
    rows = np.repeat(np.arange(piece.shape[0]), np.diff(piece.indptr))
    np.add.at(dense, (rows, piece.indices), piece.data)


def block_sum(old: Any, part: Any) -> Any:
    """A block ``old`` plus ``part`` (each a CSR matrix or an ndarray; ``old``, when dense,
    is the caller's own and is added into in place): sparse while both are, else dense.
    Each entry is ``old + part``: an ingest's sum of the head's block and a round's part,
    and a read's sum of a block and its delta (:func:`read_q_block`) are the same numbers."""
    if sp.issparse(old) and sp.issparse(part):
        return (old + part).tocsr()
    if sp.issparse(old):
        old = old.toarray()
    if isinstance(part, np.ndarray):
        old += part
    else:
        add_sparse_into(old, part.tocsr())
    return old


def _check_count(root: str, version: int, rows: slice, cols: slice, count: int,
                 nnz: int) -> None:
    """Raise :class:`StoreError` when a block read holds ``count`` non-zeros and the store
    recorded ``nnz`` (-1: unknown): a lost chunk reads as zeros, or as an edited fill
    value."""
    if nnz > 0 and count == 0:
        raise _damage(root, version, rows, cols,
                      f"is missing (the store recorded {nnz:,} non-zeros)")
    if nnz >= 0 and count != nnz:
        raise _damage(root, version, rows, cols,
                      f"holds {count:,} non-zeros; the store recorded {nnz:,}")


def dense_q(root: str, version: int) -> zarr.Array[Any]:
    """A version's dense array of Q, opened and checked: square, float64, in square chunks
    (:meth:`CooccurrenceStore.check_q_arrays` checks its size against the store's). Raises
    ValueError for anything else, before a block is decoded into a buffer of that shape."""
    arr = zarr.open_array(store=root, path=f"{_vname(version)}/Q", mode="r")
    if (arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.dtype != np.float64
            or arr.chunks[0] != arr.chunks[1]):
        raise ValueError(f"{_vname(version)}/Q is a {arr.shape} array of {arr.dtype} in "
                         f"chunks of {arr.chunks}, not a square float64 array")
    return arr


def _read_padded(arr: zarr.Array[Any], rows: slice, cols: slice) -> np.ndarray:
    """``arr[rows, cols]`` as float64, zeros where the array ends before them (a version
    written before the vocabulary grew holds the first words only)."""
    n_rows, n_cols = arr.shape
    if rows.stop <= n_rows and cols.stop <= n_cols:
        return np.asarray(arr[rows, cols], dtype=np.float64)
    out = np.zeros((rows.stop - rows.start, cols.stop - cols.start))
    r1, c1 = min(rows.stop, n_rows), min(cols.stop, n_cols)
    if r1 > rows.start and c1 > cols.start:
        out[: r1 - rows.start, : c1 - cols.start] = arr[rows.start : r1, cols.start : c1]
    return out


def write_q_block(
    root: str, version: int, rows: slice, cols: slice, block: Any,
    dense: zarr.Array[Any] | None = None,
) -> tuple[int, bool]:
    """Write one block of the sum (rows×cols: an ndarray or a scipy sparse matrix) into a
    version, as its only writer: sparse when fewer than ``SPARSE_BELOW`` of its entries are
    non-zero, else into the version's dense array (``dense``, opened here if None). A block
    of zeros writes nothing. Returns (its non-zeros, whether it was stored sparse)."""
    nnz = block_nonzeros(block)
    if nnz == 0:
        return 0, False
    area = (rows.stop - rows.start) * (cols.stop - cols.start)
    if nnz < SPARSE_BELOW * area:
        if sp.issparse(block):
            S = block.tocsr(copy=True)
            S.sum_duplicates()  # also sorts the indices
            S.eliminate_zeros()
            raw = _sparse_bytes(S)
        else:
            raw = _dense_sparse_bytes(block, nnz)
        zarr.create_array(store=root, name=_sparse_path(version, rows, cols), data=raw,
                          chunks=raw.shape, compressors=_q_compressor(), overwrite=True,
                          config=_WRITE_AS_IS,
                          chunk_key_encoding={"name": "default", "separator": "."})
        return nnz, True
    if dense is None:
        dense = open_for_blocks(root, f"{_vname(version)}/Q")
    dense[rows, cols] = block.toarray() if sp.issparse(block) else block
    return nnz, False


def write_q_delta(root: str, version: int, rows: slice, cols: slice, delta: Any) -> int:
    """Write a round's part of block (rows, cols), on or above the diagonal, as a delta of
    ``version`` (:data:`block_deltas <CooccurrenceStore.block_deltas>`): sparse, whatever its
    density, as the version's only writer of that block. Returns its non-zeros (0: nothing
    written)."""
    nnz = block_nonzeros(delta)
    if nnz == 0:
        return 0
    if sp.issparse(delta):
        S = delta.tocsr(copy=True)
        S.sum_duplicates()  # also sorts the indices
        S.eliminate_zeros()
        nnz, raw = int(S.nnz), _sparse_bytes(S)
    else:
        raw = _dense_sparse_bytes(delta, nnz)
    zarr.create_array(store=root, name=_sparse_path(version, rows, cols), data=raw,
                      chunks=raw.shape, compressors=_q_compressor(), overwrite=True,
                      config=_WRITE_AS_IS, chunk_key_encoding={"name": "default", "separator": "."})
    return nnz


def delta_files(root: str, rows: slice, cols: slice, deltas: Deltas) -> list[str]:
    """The chunk files of a block's deltas (those of its mirror image, below the
    diagonal)."""
    if rows.start > cols.start:
        rows, cols = cols, rows
    return [os.path.join(root, *_sparse_path(int(v), rows, cols).split("/"), "c.0")
            for v, _ in deltas]


def block_files(root: str, version: int, rows: slice, cols: slice, c: int,
                sparse: int) -> list[str]:
    """The chunk files that hold block (rows, cols) of a version (for sizes and removal;
    a mirrored block's are its mirror image's)."""
    if sparse in (MIRRORED, MIRRORED_DENSE):
        rows, cols = cols, rows
        sparse = SPARSE if sparse == MIRRORED else DENSE
    if sparse:
        return [os.path.join(root, *_sparse_path(version, rows, cols).split("/"), "c.0")]
    return [os.path.join(root, _vname(version), "Q", "c", str(rows.start // c),
                         str(cols.start // c))]


def _damage(root: str, version: int, rows: slice, cols: slice, what: str) -> StoreError:
    return StoreError(
        f"{root}: block of Q at rows {rows.start}:{rows.stop}, columns {cols.start}:{cols.stop} "
        f"(version {version}) {what}; the store is damaged (see `streamtopic verify`)"
    )


def read_array_dense(
    arr: zarr.Array[Any], *, scale: float = 1.0, block_versions: np.ndarray | None = None,
    root: str | None = None, threads: int | None = None, block_nnz: np.ndarray | None = None,
    block_sparse: np.ndarray | None = None,
    block_deltas: Mapping[tuple[int, int], Deltas] | None = None,
) -> np.ndarray:
    """A whole 2-D zarr array read into one in-memory array, times ``scale``.

    Every chunk is decoded straight into its slice of the result by a pool of ``threads``
    (default: the usable cores), so the read costs one pass and no concatenated copies.
    With ``block_versions`` (nb×nb) and ``root``, chunk (i, j) is read from the store version
    ``block_versions[i, j]`` (0: zeros) instead of ``arr``; ``block_nnz`` (nb×nb, -1:
    unknown) is each block's recorded count of non-zeros, checked as :func:`read_q_block`
    does; ``block_sparse`` (nb×nb bool) marks the blocks stored sparse; ``block_deltas``
    gives the blocks' deltas (:attr:`CooccurrenceStore.block_deltas`).
    """
    from concurrent.futures import ThreadPoolExecutor

    from zarr.core.buffer.cpu import NDBuffer

    n_rows, n_cols = arr.shape
    cr, cc = arr.chunks
    out = np.empty((n_rows, n_cols), dtype=np.float64)
    arrays: dict[int, zarr.Array[Any]] = {}

    def source(i: int, j: int) -> zarr.Array[Any] | None:
        if block_versions is None:
            return arr
        v = int(block_versions[i, j])
        if v <= 0:
            return None
        if v not in arrays:
            assert root is not None
            try:
                arrays[v] = dense_q(root, v)
            except Exception as exc:  # zarr raises several types for damaged metadata
                raise StoreError(f"{root}: {_vname(v)}/Q cannot be read ({exc}); the store "
                                 "is damaged (see `streamtopic verify`)") from exc
        return arrays[v]

    def job(ij: tuple[int, int]) -> None:
        i, j = ij
        sel = (slice(i * cr, min(n_rows, (i + 1) * cr)), slice(j * cc, min(n_cols, (j + 1) * cc)))
        src = source(i, j)
        view = out[sel]
        deltas = block_deltas.get((i, j), ()) if block_deltas else ()
        if deltas:
            assert root is not None and block_versions is not None
            view[...] = read_q_block(
                root, int(block_versions[i, j]), *sel, scale,
                int(block_nnz[i, j]) if block_nnz is not None else -1,
                sparse=int(block_sparse[i, j]) if block_sparse is not None else DENSE,
                deltas=deltas)
            return
        if src is None:
            view.fill(0.0)
            return
        v = int(block_versions[i, j]) if block_versions is not None else 0
        expected = int(block_nnz[i, j]) if block_nnz is not None else -1
        if block_sparse is not None and block_sparse[i, j]:
            assert root is not None
            view[...] = read_q_block(root, v, *sel, scale, expected,
                                     sparse=int(block_sparse[i, j]))
            return
        try:
            if src.shape == arr.shape:
                src.get_basic_selection(sel, out=NDBuffer.from_numpy_array(view))
            else:  # a version written before the vocabulary grew
                view[...] = _read_padded(src, *sel)
        except Exception as exc:  # zarr, blosc and crc32c raise several types
            raise _damage(str(root or arr.store), v, *sel, f"cannot be read ({exc})") from exc
        if expected >= 0:
            _check_count(str(root or arr.store), v, *sel, int(np.count_nonzero(view)),
                         expected)
        if scale != 1.0:
            view *= scale

    blocks = [(i, j) for i in range(-(-n_rows // cr)) for j in range(-(-n_cols // cc))]
    if block_versions is not None:  # open every version's array once, before the threads
        for i, j in blocks:
            source(i, j)
    n = threads or usable_cores()
    with ThreadPoolExecutor(max(1, min(n, len(blocks)))) as pool:
        list(pool.map(job, blocks))
    return out


class _KeepAlive:
    """Holds an object for as long as a task graph holds this, and pickles to nothing: a
    graph over a reader's version keeps the reader, and so its lease, alive in its process
    (``CooccurrenceStore.open(p).Q`` outlives the store object)."""

    def __init__(self, obj: Any = None) -> None:
        self.obj = obj

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (_KeepAlive, ())


def _q_block_task(
    v: np.ndarray, nnz: np.ndarray | None, sparse: np.ndarray, root: str, c: int, V: int,
    scale: float, keep: _KeepAlive, deltas: Mapping[tuple[int, int], Deltas] | None = None,
    block_id: tuple[int, int] | None = None,
) -> np.ndarray:
    """Block ``block_id`` of the sum, dense (its version ``v``, a 1×1 block of the block map;
    the recorded non-zeros of every block ``nnz``, nb×nb or None; the sparse blocks
    ``sparse``, nb×nb: how each is stored; the blocks' ``deltas``), times ``scale``."""
    assert block_id is not None
    i, j = block_id
    rows = slice(i * c, min(V, (i + 1) * c))
    cols = slice(j * c, min(V, (j + 1) * c))
    expected = int(nnz[i, j]) if nnz is not None else -1
    out: np.ndarray = read_q_block(root, int(v.ravel()[0]), rows, cols, scale, expected,
                                   sparse=int(sparse[i, j]),
                                   deltas=deltas.get((i, j), ()) if deltas else ())
    return out


_READ_ONLY: dict[str, zarr.Array[Any]] = {}


def open_read_only(path: str) -> zarr.Array[Any]:
    """A zarr array opened once per process (its metadata is read once, not per block)."""
    arr = _READ_ONLY.get(path)
    if arr is None:
        if len(_READ_ONLY) > 64:
            _READ_ONLY.clear()
        arr = _READ_ONLY[path] = zarr.open_array(path, mode="r")
    return arr


def _crc_problem(path: str) -> str | None:
    """What is wrong with a chunk file that ends with its CRC-32C checksum (zarr's
    ``crc32c`` codec), or None: read whole, its checksum computed, nothing decoded."""
    import google_crc32c

    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if len(raw) < 4 or google_crc32c.value(raw[:-4]) != int.from_bytes(raw[-4:], "little"):
        return "fails its CRC-32C checksum (truncated or altered)"
    return None


_SEE_VERIFY = "; the store is damaged (see `streamtopic verify`)"


def _reason(exc: Exception, path: str) -> str:
    """An error's message without the store path it starts with, nor the advice to run
    ``streamtopic verify`` it ends with."""
    msg = str(exc)
    msg = msg[len(path) + 2:] if msg.startswith(f"{path}: ") else msg
    return msg[: -len(_SEE_VERIFY)] if msg.endswith(_SEE_VERIFY) else msg


def _damaged(path: str, what: str) -> StoreError:
    return StoreError(f"{path}: {what}{_SEE_VERIFY}")


def _checked_meta(path: str, meta: Any) -> dict[str, Any]:
    """The root's metadata, checked: its digest (required from format 5 on), and the vocabulary
    size, chunk size and head as positive integers, before anything sizes an array by them."""
    meta = dict(meta)
    sealed = unsealed(meta, required=int(meta.get("format_version", 1)) >= 5)
    if sealed is False:
        raise _damaged(path, "its metadata (zarr.json) does not match its digest")
    for key, least in (("V", 1), ("chunk", 1), ("head", 0)):
        value = meta.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise _damaged(path, f"its metadata records {key} = {value!r}")
    return cast("dict[str, Any]", meta)


class CooccurrenceStore:
    """A versioned zarr store of the word co-occurrence estimator.

    Open one with :meth:`open`; ingest builds and updates it (:func:`streamtopic.ingest`).

    Attributes
    ----------
    path : str
        The store directory.
    vocab : list of str
        The V terms (frozen at creation).
    n_docs : int
        Documents that contributed (length n_d >= 2; see :attr:`doc_length`).
    n_tokens : int
        Tokens of the contributing documents (the sum of their lengths n_d).
    word_counts, doc_freq : ndarray of shape (V,)
        Token counts and document frequencies over the contributing documents.
    Q : dask.array of shape (V, V)
        The normalised estimator: the stored sum divided by its total :attr:`q_total` (it
        sums to 1).
    Q_sum : dask.array of shape (V, V)
        The stored, unnormalised sum of the per-document Q_d.
    """

    def __init__(self, path: str, root: zarr.Group) -> None:
        self.path = path
        self._root = root
        meta = root.attrs.get("streamtopic")
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise StoreError(f"{path}: not a streamtopic co-occurrence store")
        if int(meta.get("format_version", 1)) > FORMAT_VERSION:
            raise StoreError(
                f"{path}: written by a newer streamtopic (store format "
                f"{meta.get('format_version')}, this one reads up to {FORMAT_VERSION}); upgrade"
            )
        self._meta: dict[str, Any] = _checked_meta(path, meta)
        self._vocab: list[str] | None = None
        self._head_attrs: dict[str, Any] | None = None
        self._lease: _Lease | None = None
        self._finalizer: Any = None
        self._q_checked = False

    # ------------------------------------------------------------------ opening and creating

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, lease: bool = True) -> CooccurrenceStore:
        """Open an existing store for reading, pinned to its current head version.

        The object reads that version until it is closed, even while ingests commit newer
        ones: unless ``lease=False``, it holds a reader's lease (a share-locked file under
        ``readers/``) that keeps the version's data on disk. Close it with :meth:`close`
        (or use it as a context manager); a dead process's lease lapses by itself.

        Raises
        ------
        StoreError
            If ``path`` is missing or is not a store.
        """
        path = os.path.abspath(os.fspath(path))
        if not os.path.exists(path):
            raise StoreError(f"{path}: no such store")
        if not os.path.isfile(os.path.join(path, "zarr.json")):
            raise StoreError(f"{path}: not a streamtopic co-occurrence store (no zarr.json)")
        try:
            root = zarr.open_group(path, mode="r")
        except Exception as exc:  # zarr raises several types for foreign data
            raise StoreError(f"{path}: not a streamtopic co-occurrence store ({exc})") from exc
        store = cls(path, root)
        if lease:
            store._take_lease()
        return store

    def _take_lease(self) -> None:
        """Pin the head version this object reads: a lease that writers honour, so the
        version's blocks and counts stay on disk until :meth:`close`. The head is read again
        after the lease exists; if a commit came in between, the lease moves to the new head
        (a writer lists the leases only after its commit, so it sees this one)."""
        import weakref

        while True:
            version = self.version
            try:
                lease = _Lease(self.path, version)
            except OSError as exc:
                if exc.errno != errno.EROFS:  # a read-only file system has no writers
                    log.warning(
                        "%s: cannot take a reader's lease (%s): an ingest that commits "
                        "meanwhile may remove data this reader uses", self.path, exc.strerror)
                return
            if _read_head(self.path) in (version, None):
                break
            lease.release()
            self._reload()
        self._lease = lease
        self._finalizer = weakref.finalize(self, lease.release)

    def close(self) -> None:
        """Release the lease on the version this object reads (writers may then delete what
        only that version used). Reading afterwards is not safe under concurrent ingests."""
        if self._finalizer is not None:
            self._finalizer()
        self._lease = self._finalizer = None

    def __enter__(self) -> CooccurrenceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def is_store(path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` holds a co-occurrence store."""
        try:
            CooccurrenceStore.open(path, lease=False)
        except StoreError:
            return False
        return True

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        vocab: Sequence[str],
        *,
        chunk_size: int | None = None,
        config: dict[str, Any] | None = None,
    ) -> CooccurrenceStore:
        """Create an empty store (head version 0) at ``path``, which must not exist.

        Parameters
        ----------
        vocab : sequence of str
            The V terms.
        chunk_size : int, optional
            Rows and columns per block of Q (default ``min(V, 2048)``).
        config : dict, optional
            JSON-serialisable settings kept with the store (tokenizer, pruning).
        """
        path = os.path.abspath(os.fspath(path))
        if os.path.exists(path):
            raise StoreError(f"{path}: already exists")
        V = len(vocab)
        if V < 1:
            raise StoreError(f"{path}: the vocabulary is empty")
        if len(set(vocab)) != V:
            raise StoreError(f"{path}: the vocabulary has repeated terms")
        c = int(chunk_size or min(V, DEFAULT_CHUNK))
        if c < 1:
            raise ValueError(f"chunk_size={chunk_size!r}: must be positive")
        root = zarr.open_group(path, mode="w-")
        varr = root.create_array("vocab", shape=(V,), dtype=str, chunks=(min(V, 2**16),),
                                 compressors=checksum_codecs())
        varr[:] = np.asarray(list(vocab), dtype=str)
        root.attrs["streamtopic"] = seal({
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "uid": uuid.uuid4().hex,
            "V": V,
            "chunk": c,
            "head": 0,
            "config": config or {},
        })
        return cls(path, root)

    @classmethod
    def from_array(
        cls,
        Q: Any,
        vocab: Sequence[str],
        path: str | os.PathLike[str],
        *,
        n_docs: int,
        word_counts: np.ndarray | None = None,
        doc_freq: np.ndarray | None = None,
        n_tokens: int | None = None,
        chunk_size: int | None = None,
    ) -> CooccurrenceStore:
        """A store from an in-memory normalised Q (V×V, numpy or scipy.sparse).

        The stored sum is ``Q * n_docs``. For tests and "infinite data" (a population Q);
        ``word_counts`` and ``doc_freq`` are kept when given, else marked unknown.
        """
        V = len(vocab)
        if Q.shape != (V, V):
            raise ValueError(f"Q has shape {Q.shape}, expected ({V}, {V}) for {V} terms")
        if n_docs < 1:
            raise ValueError(f"n_docs={n_docs!r}: must be >= 1")
        store = cls.create(path, vocab, chunk_size=chunk_size, config={"source": "from_array"})
        txn = store.begin()
        try:
            arr = store._staging_q(txn)
            written, nnz, stored_sparse = [], {}, []
            for i in range(store.n_blocks):
                for j in range(store.n_blocks):
                    r, s = store.block_slices(i, j)
                    blk = Q[r, s]
                    blk = (sp.csr_matrix(blk, dtype=np.float64) if sp.issparse(blk)
                           else np.asarray(blk, dtype=np.float64)) * float(n_docs)
                    n, is_sparse = write_q_block(store.path, txn.number, r, s, blk, arr)
                    if n:
                        written.append((i, j))
                        nnz[(i, j)] = n
                        if is_sparse:
                            stored_sparse.append((i, j))
            known = word_counts is not None
            store.commit(
                txn,
                written=written,
                n_docs=int(n_docs),
                n_tokens=int(n_tokens or 0),
                word_counts=np.zeros(V, np.int64) if word_counts is None else word_counts,
                doc_freq=np.zeros(V, np.int64) if doc_freq is None else doc_freq,
                block_nnz=nnz,
                sparse=stored_sparse,
                extra={"counts_known": known or doc_freq is not None},
            )
        except BaseException:
            store.abort(txn)
            raise
        return store

    # ------------------------------------------------------- for ingest and the selection

    def reload(self) -> None:
        """Read the store's metadata again (a writer, once it holds the lock)."""
        self._reload()

    def head_record(self) -> dict[str, Any]:
        """The record of the version this object reads: its counts, sources and totals."""
        return self._head()

    def staging_q(self, txn: Transaction) -> zarr.Array[Any]:
        """The staging array of Q's blocks of an open transaction."""
        return self._staging_q(txn)

    # ------------------------------------------------------------------ reading

    def _reload(self) -> None:
        self._root = zarr.open_group(self.path, mode="r")
        self._meta = _checked_meta(self.path, self._root.attrs.get("streamtopic"))
        self._head_attrs = None
        self._vocab = None
        self._q_checked = False

    @property
    def uid(self) -> str:
        return str(self._meta["uid"])

    @property
    def version(self) -> int:
        """The committed head version (0: nothing ingested yet)."""
        return int(self._meta["head"])

    @property
    def V(self) -> int:
        return int(self._meta["V"])

    @property
    def chunk_size(self) -> int:
        return int(self._meta["chunk"])

    @property
    def n_blocks(self) -> int:
        return -(-self.V // self.chunk_size)

    @property
    def config(self) -> dict[str, Any]:
        return dict(self._meta.get("config", {}))

    def block_slices(self, i: int, j: int) -> tuple[slice, slice]:
        c, V = self.chunk_size, self.V
        return slice(i * c, min(V, (i + 1) * c)), slice(j * c, min(V, (j + 1) * c))

    @property
    def vocab(self) -> list[str]:
        """The V words, checked against the digest the head records (format 5)."""
        if self._vocab is None:
            words = self._vocab_words(self.V)
            recorded = self._recorded_digests().get("vocab")
            if recorded is not None and array_digest(words) != recorded:
                raise _damaged(self.path, "its vocabulary does not match its digest (a chunk "
                               "is missing or altered)")
            self._vocab = [str(t) for t in words]
        return self._vocab

    def _vocab_words(self, V: int) -> np.ndarray:
        """The first ``V`` words of the vocabulary array (it may hold words of a later
        version, or of a round that failed, past the head's V), as an array of str."""
        node = self._node("vocab")
        if not isinstance(node, zarr.Array) or node.ndim != 1 or node.shape[0] < V:
            raise _damaged(self.path, f"its vocabulary is not an array of at least {V:,} "
                           "words")
        try:
            return np.asarray([str(t) for t in np.asarray(node[:V])], dtype=str)
        except Exception as exc:  # a chunk that fails its checksum or to decode
            raise _damaged(self.path, f"its vocabulary cannot be read ({exc})") from exc

    def _head(self) -> dict[str, Any]:
        if self._head_attrs is None:
            if self.version == 0:
                self._head_attrs = {
                    "n_docs": 0, "n_tokens": 0, "n_skipped_docs": 0, "n_oov_tokens": 0,
                    "n_replaced_bytes": 0, "sources": [], "counts_known": True,
                }
            else:
                self._head_attrs = self._version_attrs(self.version)
        return self._head_attrs

    def _version_attrs(self, version: int) -> dict[str, Any]:
        """A version's metadata, checked: its digest (:func:`~streamtopic.integrity.seal`;
        the head's must be the one the root records), and for the head its vocabulary and
        chunk sizes and counts."""
        attrs = dict(self._node(_vname(version)).attrs)
        where = f"{_vname(version)}/zarr.json"
        expected = self._meta.get("head_digest") if version == self.version else None
        if unsealed(attrs, self.uid, required=expected is not None) is False or (
                expected is not None and attrs.get("digest") != expected):
            raise _damaged(self.path, f"{where} does not match its digest")
        if version != self.version:
            return attrs
        if attrs.get("V", self.V) != self.V or attrs.get("chunk", self.chunk_size) != \
                self.chunk_size:
            raise _damaged(self.path, f"{where} records V = {attrs.get('V')} and chunk size "
                           f"{attrs.get('chunk')}; the root records {self.V} and "
                           f"{self.chunk_size}")
        for key in ("n_docs", "n_tokens", "n_skipped_docs", "n_oov_tokens"):
            value = attrs.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise _damaged(self.path, f"{where} records {key} = {value!r}")
        return attrs

    def _recorded_digests(self) -> dict[str, str]:
        """The digests of the head's arrays (format 5; {} before)."""
        recorded = self._head().get("arrays", {})
        return recorded if isinstance(recorded, dict) else {}

    def _node(self, path: str) -> Any:
        """The zarr group or array ``path`` of this store; a missing or unreadable one is a
        :class:`StoreError` saying whether the version was superseded (this reader held no
        lease) or the store is damaged."""
        try:
            return self._root[path]
        except Exception as exc:  # zarr raises KeyError, JSON and codec errors
            version = path.split("/")[1] if path.startswith("versions/") else path
            if self.version != _read_head(self.path) and self._lease is None:
                why = "superseded by a later ingest while this reader held no lease"
            else:
                why = "the store is damaged (see `streamtopic verify`)"
            raise StoreError(f"{self.path}: {path} cannot be read ({version}: {why}; "
                             f"{type(exc).__name__}: {exc})") from exc

    @property
    def n_docs(self) -> int:
        return int(self._head()["n_docs"])

    @property
    def n_tokens(self) -> int:
        return int(self._head()["n_tokens"])

    @property
    def sources(self) -> list[ManifestEntry]:
        """The manifest: one entry per ingested input (path, sha256, counts, version),
        checked against its digest (:meth:`check_manifest`)."""
        return self.check_manifest()

    def _manifest_mark(self) -> ManifestMark:
        """What the head records of the manifest (format 5; an empty mark before)."""
        recorded = self._head().get("manifest")
        try:
            return ManifestMark() if recorded is None else ManifestMark.from_dict(recorded)
        except ManifestError as exc:
            raise _damaged(self.path, str(exc)) from None

    def _documents_chain(self) -> str:
        """The hash chain of the cached partitions' records up to the head: recorded from
        format 5 on, computed (and checked) from the versions' records otherwise."""
        recorded = self._head().get("documents_chain")
        if isinstance(recorded, str):
            return recorded
        chain = ""
        for v in self._head().get("document_versions", []):
            listed = self._version_attrs(int(v)).get("documents", [])
            chain = chain_digest(chain, json.dumps([int(v), listed]).encode())
        return chain

    def cached_partitions(self) -> list[CachedPartition]:
        """The partitions of text documents this version holds as (word id, count) pairs
        (:mod:`streamtopic.doccache`), in ingest order: every text input ingested since the
        store had a token cache. Inputs of other formats (UCI, HDF5), and text ingested by
        an older streamtopic, have none."""
        out: list[CachedPartition] = []
        by_version: dict[int, list[ManifestEntry]] = {}
        for s in self.sources:
            by_version.setdefault(s.version, []).append(s)
        chain = ""
        try:
            for v in self._head().get("document_versions", []):
                listed = self._version_attrs(int(v)).get("documents", [])
                chain = chain_digest(chain, json.dumps([int(v), listed]).encode())
                for values in listed:
                    out.append(CachedPartition(int(v), PartitionRecord.from_list(values),
                                               tuple(by_version.get(int(v), ()))))
        except (TypeError, ValueError) as exc:
            raise _damaged(self.path, f"a malformed record of cached documents ({exc})"
                           ) from None
        recorded = self._head().get("documents_chain")
        if recorded is not None and recorded != chain:
            raise _damaged(self.path, "the records of its cached documents do not match "
                           "their digest")
        return out

    def read_cached(self, part: CachedPartition) -> Any:
        """One cached partition's documents (:class:`~streamtopic.doccache.CachedDocuments`,
        over this store's V words), checked; damage is a :class:`StoreError`."""
        try:
            return read_partition(self.path, part.version, part.record, self.V)
        except DamagedCacheError as exc:
            raise StoreError(f"{exc}; the store is damaged (see `streamtopic verify`)"
                             ) from None

    @property
    def doc_length(self) -> str:
        """What a document's length n_d (in the weights w_d) is in this store:
        ``'input'``, its length in its input whatever the vocabulary (stores built since
        fit-time vocabularies: :data:`DOC_LENGTH`), or ``'vocabulary'``, its tokens in the
        store's vocabulary (older stores, which keep it for their incremental ingests)."""
        return doc_length_of(self.config)

    @property
    def doc_weight(self) -> str:
        """How the documents' Q_d weigh in this store's sum: ``'tokens'``, each as its
        length, w_d = 1/(n_d − 1) (stores built now: :data:`DOC_WEIGHT`), or
        ``'documents'``, each alike, w_d = 1/(n_d(n_d − 1)) (older stores, which keep it for
        their incremental ingests)."""
        return doc_weight_of(self.config)

    @property
    def q_total(self) -> float:
        """The total of the stored sum Σ_d Q_d, by which :attr:`Q` is divided so that it
        sums to 1: the recorded ``q_mass`` (Σ_d n'_d(n'_d − 1) w_d, n'_d the document's
        tokens in the vocabulary), or ``n_docs`` where none is recorded (each Q_d sums to 1
        when n_d counts the vocabulary's tokens, and a population Q is stored so)."""
        mass = self._head().get("q_mass")
        return float(self.n_docs) if mass is None else float(mass)

    @property
    def counts_known(self) -> bool:
        """False for stores made by :meth:`from_array` without counts."""
        return bool(self._head().get("counts_known", True))

    def _vector(self, name: str) -> np.ndarray:
        if self.version == 0:
            return np.zeros(self.V, np.int64)
        return self._checked_array(name, (self.V,))

    def _checked_array(self, name: str, shape: tuple[int, ...], part: int | None = None
                       ) -> np.ndarray:
        """The head's array ``name``, checked: its shape, and (format 5) the digest of its
        content (of its first ``part`` entries), which a lost chunk, read as zeros, fails."""
        path = f"{_vname(self.version)}/{name}"
        values = self._read(path)
        if values.shape != shape:
            raise _damaged(self.path, f"{path} has shape {values.shape}, expected {shape}")
        values = values if part is None else values[:part]
        recorded = self._recorded_digests().get(name)
        if recorded is not None and array_digest(values) != recorded:
            raise _damaged(self.path, f"{path} does not match its digest (a chunk is missing "
                           "or altered)")
        return values

    def _read(self, path: str) -> np.ndarray:
        """All of the array ``path`` (see :meth:`_node` for its errors)."""
        node = self._node(path)
        try:
            return np.asarray(node[:])
        except Exception as exc:  # a chunk that fails its checksum or to decode
            raise StoreError(f"{self.path}: {path} cannot be read ({exc}); the store is "
                             "damaged (see `streamtopic verify`)") from exc

    @property
    def word_counts(self) -> np.ndarray:
        return self._vector("word_counts")

    @property
    def doc_freq(self) -> np.ndarray:
        return self._vector("doc_freq")

    @property
    def block_versions(self) -> np.ndarray:
        """(nb, nb) int array: the version holding each block of Q (0: zero block)."""
        if self.version == 0:
            return np.zeros((self.n_blocks, self.n_blocks), np.int32)
        out = self._checked_array("block_versions", (self.n_blocks, self.n_blocks))
        if out.dtype.kind not in "iu" or (out.size and (out.min() < 0
                                                         or out.max() > self.version)):
            raise _damaged(self.path, f"{_vname(self.version)}/block_versions names versions "
                           f"outside 0…{self.version}")
        if not self._q_checked:
            self.check_q_arrays(out)
            self._q_checked = True
        return out

    def check_q_arrays(self, block_versions: np.ndarray) -> None:
        """Check the dense array of Q of every version that ``block_versions`` (nb×nb) names
        before any block of it is read: square float64 in (c × c) chunks, V_v × V_v for the
        V_v words that version had (the head: this store's V; format 5 records each
        version's), never larger than V. Raises :class:`StoreError` naming the array."""
        for v in np.unique(block_versions[block_versions > 0]).tolist():
            path = f"{_vname(v)}/Q"
            try:
                arr = dense_q(self.path, v)
                V_v = self.V if v == self.version else self._node(_vname(v)).attrs.get("V")
            except StoreError:
                raise
            except Exception as exc:  # zarr raises several types for damaged metadata
                raise _damaged(self.path, f"{path} cannot be read ({exc})") from exc
            n = arr.shape[0]
            if arr.chunks != (self.chunk_size,) * 2 or n > self.V or (
                    V_v is not None and n != V_v):
                raise _damaged(self.path, f"{path} has shape {arr.shape} in chunks of "
                               f"{arr.chunks}; the store has V = {self.V} in chunks of "
                               f"{self.chunk_size}")

    @property
    def block_nnz(self) -> np.ndarray | None:
        """(nb, nb) int64: each block's recorded count of non-zeros (0 for zero blocks), or
        None for a store that did not record them."""
        recorded = self._head().get("block_nnz")
        if recorded is None:
            return None if self.version > 0 else np.zeros((self.n_blocks,) * 2, np.int64)
        out = np.zeros((self.n_blocks, self.n_blocks), np.int64)
        for key, n in recorded.items():
            i, j = self._block_key(key)
            out[i, j] = int(n)
        return out

    def _block_key(self, key: Any) -> tuple[int, int]:
        """Block (i, j) from its record's key ``"i,j"``, checked against the block grid."""
        try:
            i, j = (int(x) for x in str(key).split(","))
        except ValueError:
            i = j = -1
        if not (0 <= i < self.n_blocks and 0 <= j < self.n_blocks):
            raise _damaged(self.path, f"{_vname(self.version)} records a block {key!r} "
                           f"outside its {self.n_blocks}×{self.n_blocks} blocks")
        return i, j

    @property
    def block_sparse(self) -> np.ndarray:
        """(nb, nb) int8: how each block is stored: ``DENSE`` (0), ``SPARSE`` (1: CSR under
        ``S/``), ``MIRRORED`` (2: the transpose of its mirror image's sparse block) or
        ``MIRRORED_DENSE`` (3: of its mirror image's dense block)."""
        out = np.zeros((self.n_blocks, self.n_blocks), dtype=np.int8)
        head = self._head()
        for name, kind in _KIND_RECORDS:
            for key in head.get(name, ()):
                out[self._block_key(key)] = kind
        return out

    @property
    def block_deltas(self) -> dict[tuple[int, int], Deltas]:
        """Each block's deltas on top of its base (:attr:`block_versions`), by block (i, j),
        both the block above the diagonal that holds them and its mirror image: (version,
        non-zeros) of each, oldest first. Blocks without deltas are not listed."""
        recorded = self._head().get("block_deltas", {})
        if not isinstance(recorded, dict):
            raise _damaged(self.path, f"{_vname(self.version)} records block_deltas of type "
                           f"{type(recorded).__name__}")
        out: dict[tuple[int, int], Deltas] = {}
        for key, chain in recorded.items():
            i, j = self._block_key(key)
            try:
                deltas = tuple((int(v), int(n)) for v, n in chain)
            except (TypeError, ValueError):
                deltas = ((-1, -1),)
            if i > j or not deltas or any(not (0 < v <= self.version and n > 0)
                                          for v, n in deltas):
                raise _damaged(self.path, f"{_vname(self.version)} records deltas {chain!r} "
                               f"of block {key!r}")
            out[(i, j)] = out[(j, i)] = deltas
        return out

    def _dask(self, scale: float) -> Any:
        import dask.array as da

        c, V, nb = self.chunk_size, self.V, self.n_blocks
        sizes = tuple(min(c, V - i * c) for i in range(nb))
        name = f"{self.uid}-{self.version}"
        vers = da.from_array(self.block_versions, chunks=1, name=f"stq-bv-{name}")
        return vers.map_blocks(
            _q_block_task, self.block_nnz, self.block_sparse, self.path, c, V, scale,
            _KeepAlive(self), self.block_deltas,
            chunks=(sizes, sizes), dtype=np.float64, meta=np.empty((0, 0)),
            name=f"stq-Q-{name}-{scale!r}",
        )

    @property
    def Q_sum(self) -> Any:
        return self._dask(1.0)

    @property
    def Q(self) -> Any:
        return self._dask(1.0 / self._checked_total())

    def _checked_total(self) -> float:
        """:attr:`q_total`, or a :class:`StoreError` when it is 0 (nothing to normalise)."""
        if self.n_docs == 0:
            raise StoreError(f"{self.path}: the store is empty (no documents ingested)")
        total = self.q_total
        if not total > 0:
            raise StoreError(f"{self.path}: no two tokens of a document are in the vocabulary "
                             "(Q is zero)")
        return total

    def read_dense(self, *, normalised: bool = True, threads: int | None = None) -> np.ndarray:
        """Q (V×V float64; the sum divided by :attr:`q_total` when ``normalised``) read into one
        in-memory array, its blocks decoded in parallel straight into place.

        For the in-memory paths only: it holds V² floats (``8·V²`` bytes)."""
        scale = 1.0 / self._checked_total() if normalised else 1.0
        bv, deltas = self.block_versions, self.block_deltas
        c, V = self.chunk_size, self.V
        if self.version == 0 or not (bv.any() or deltas):
            return np.zeros((V, V))
        try:
            head = dense_q(self.path, self.version)
        except Exception as exc:  # zarr raises several types for damaged metadata
            raise _damaged(self.path, f"{_vname(self.version)}/Q cannot be read ({exc})"
                           ) from exc
        if head.shape != (V, V) or head.chunks != (c, c):
            raise _damaged(self.path, f"{_vname(self.version)}/Q has shape {head.shape} in "
                           f"chunks of {head.chunks}, expected ({V}, {V}) in ({c}, {c})")
        return read_array_dense(head, scale=scale, block_versions=bv, root=self.path,
                                threads=threads, block_nnz=self.block_nnz,
                                block_sparse=self.block_sparse, block_deltas=deltas)

    def read_submatrix(self, ids: np.ndarray, *, threads: int | None = None) -> np.ndarray:
        """Q restricted to the words ``ids``: Q[ids][:, ids] (n×n float64, the sum divided by
        :attr:`q_total`), read into memory.

        Only the blocks on and above the diagonal that hold both a row and a column of
        ``ids`` are read, in parallel; each gives its part of the result and the transposed
        part below the diagonal. For a store whose vocabulary is ordered by document
        frequency, the most frequent n words are the leading n×n corner: (n/c)²/2 blocks.

        Parameters
        ----------
        ids : ndarray of shape (n,)
            Sorted, distinct word ids.

        Returns
        -------
        ndarray of shape (n, n)
        """
        from concurrent.futures import ThreadPoolExecutor

        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or np.any(np.diff(ids) <= 0) or (
                ids.size and (ids[0] < 0 or ids[-1] >= self.V)):
            raise ValueError("ids: must be sorted, distinct word ids of the store")
        n, c = ids.size, self.chunk_size
        out = np.zeros((n, n))
        if n == 0 or not self.q_total > 0:
            return out
        nb, bv, scale = -(-self.V // c), self.block_versions, 1.0 / self.q_total
        nnz, sparse, deltas = self.block_nnz, self.block_sparse, self.block_deltas
        # positions in ``ids`` of each block's words: block b holds ids[bounds[b]:bounds[b+1]]
        bounds = np.searchsorted(ids, np.arange(nb + 1) * c)
        wanted = [b for b in range(nb) if bounds[b + 1] > bounds[b]]

        def job(ij: tuple[int, int]) -> None:
            i, j = ij
            ri, rj = slice(bounds[i], bounds[i + 1]), slice(bounds[j], bounds[j + 1])
            block = read_q_block(self.path, int(bv[i, j]), *self.block_slices(i, j), scale,
                                 int(nnz[i, j]) if nnz is not None else -1,
                                 sparse=int(sparse[i, j]) if sparse is not None else 0,
                                 deltas=deltas.get((i, j), ()))
            part = block[np.ix_(ids[ri] - i * c, ids[rj] - j * c)]
            out[ri, rj] = part
            if i != j:
                out[rj, ri] = part.T

        pairs = [(i, j) for k, i in enumerate(wanted) for j in wanted[k:]]
        with ThreadPoolExecutor(max(1, min(threads or usable_cores(), len(pairs)))) as pool:
            list(pool.map(job, pairs))
        return out

    def q_bytes(self) -> int:
        """Bytes on disk of the blocks of Q the head reads (what one pass over Q reads)."""
        return sum(os.path.getsize(f) for f in set(self._block_files(np.ones(
            (self.n_blocks, self.n_blocks), dtype=bool))) if os.path.exists(f))

    def _block_files(self, which: np.ndarray) -> list[str]:
        """The chunk files of the head's stored blocks where ``which`` (nb×nb bool)."""
        bv, sparse = self.block_versions, self.block_sparse
        files = [f for i, j in np.argwhere(which & (bv > 0)).tolist()
                 for f in block_files(self.path, int(bv[i, j]), *self.block_slices(i, j),
                                      self.chunk_size, int(sparse[i, j]))]
        return files + [f for (i, j), deltas in self.block_deltas.items() if which[i, j]
                        for f in delta_files(self.path, *self.block_slices(i, j), deltas)]

    def info(self) -> dict[str, Any]:
        """A summary: V, documents, tokens, density, size on disk, sources."""
        bv = self.block_versions
        nnz_blocks = int(np.count_nonzero(bv))
        disk = disk_bytes(self.path)  # tolerates files a concurrent writer removes meanwhile
        head = self._head()
        nnz = int(head.get("nnz", 0))
        return {
            "path": self.path,
            "version": self.version,
            "V": self.V,
            "n_docs": self.n_docs,
            "n_tokens": self.n_tokens,
            "n_skipped_docs": int(head.get("n_skipped_docs", 0)),
            "n_oov_tokens": int(head.get("n_oov_tokens", 0)),
            "n_replaced_bytes": int(head.get("n_replaced_bytes", 0)),
            "chunk_size": self.chunk_size,
            "blocks_stored": nnz_blocks,
            "blocks_total": int(bv.size),
            "nnz": nnz,
            "density": nnz / float(self.V) ** 2 if self.V else 0.0,
            "blocks_sparse": int(np.isin(self.block_sparse, (SPARSE, MIRRORED)).sum()),
            "blocks_with_deltas": len(self.block_deltas),
            "bytes_of_q": self.q_bytes(),
            "bytes_per_nnz": self.q_bytes() / nnz if nnz else 0.0,
            "bytes_on_disk": disk,
            "missing_blocks": self.missing_blocks(),
            "token_cache": self._cache_info(),
            "sources": [s.as_json() for s in self.sources],
            "problems": self.check_chunks(),
        }

    def check_chunks(self) -> list[str]:
        """The quick check of ``streamtopic info``: the head's counts, block map, vocabulary
        and unkept words match their digests, and every chunk file of its blocks of Q and
        of its cached documents exists and matches its CRC-32C checksum (each file is read,
        not decoded: a pass over the bytes on disk). Returns the problems found."""
        problems: list[str] = []
        try:
            self.check_arrays()
        except StoreError as exc:
            problems.append(_reason(exc, self.path))
        files = self._block_files(np.ones((self.n_blocks,) * 2, dtype=bool))
        files += [os.path.join(self.path, *partition_path(p.version, p.record.part).split("/"),
                               "c.0") for p in self.cached_partitions()]
        for f in sorted(set(files)):
            problem = _crc_problem(f)
            if problem is not None:
                problems.append(f"{os.path.relpath(f, self.path)}: {problem}")
        return problems

    def _cache_info(self) -> dict[str, int]:
        """The cached text documents (:mod:`streamtopic.doccache`): partitions, documents,
        (document, word) entries, tokens and bytes on disk."""
        parts = self.cached_partitions()
        versions = {p.version for p in parts}
        return {"partitions": len(parts), "n_docs": sum(p.record.n_docs for p in parts),
                "nnz": sum(p.record.nnz for p in parts),
                "n_tokens": sum(p.record.tokens for p in parts),
                "bytes": sum(disk_bytes(os.path.join(self.path, _vname(v), "D"))
                             for v in versions)}

    def missing_blocks(self) -> list[list[int]]:
        """The blocks [i, j, version] recorded with non-zeros whose chunk files are gone: a
        quick check (a ``stat`` per file; :meth:`verify` reads them all)."""
        recorded = self.block_nnz
        if recorded is None:
            return []
        bv, sparse = self.block_versions, self.block_sparse
        missing = [[i, j, int(bv[i, j])]
                   for i, j in np.argwhere((recorded > 0) & (bv > 0)).tolist()
                   if not all(os.path.exists(f) for f in block_files(
                       self.path, int(bv[i, j]), *self.block_slices(i, j), self.chunk_size,
                       int(sparse[i, j])))]
        for (i, j), deltas in sorted(self.block_deltas.items()):
            for (v, _), f in zip(deltas, delta_files(self.path, *self.block_slices(i, j),
                                                     deltas), strict=True):
                if i <= j and not os.path.exists(f):
                    missing.append([i, j, v])
        return missing

    def check_arrays(self) -> None:
        """Read the head's block map, counts, document frequencies, vocabulary and unkept
        words, each checked against its shape and digest; raise :class:`StoreError` naming
        the first that fails. What every reader of the store relies on, checked at once."""
        _ = (self.block_versions, self.block_nnz, self.block_sparse, self.block_deltas,
             self.word_counts,
             self.doc_freq, self.vocab, self.unkept_words)

    def check_blocks_present(self) -> None:
        """Raise :class:`StoreError` naming the first block of Q recorded with non-zeros
        whose chunk file is gone (:meth:`missing_blocks`: a ``stat`` per block)."""
        missing = self.missing_blocks()
        if missing:
            i, j, v = missing[0]
            rows, cols = self.block_slices(i, j)
            more = f", and {len(missing) - 1} more blocks'" if len(missing) > 1 else ""
            raise _damage(self.path, v, rows, cols, f"is missing (its chunk file is gone{more})")

    def verify(self, *, threads: int | None = None) -> list[str]:
        """Check the version this object reads, and return the problems found (none: []).

        Every stored block of Q is read and decoded, which checks its CRC-32C checksum, and
        its non-zeros are counted against the store's record, so a lost or corrupted chunk is
        found. The counts must be readable; for a store built by ingest, the entries of the
        stored sum must add up to the document count (each document's Q_d sums to 1); the
        manifest must match its digest. That every recorded input exists with its recorded
        content is checked above the store (:func:`~streamtopic.corpus.input_problems`).
        """
        from concurrent.futures import ThreadPoolExecutor

        problems: list[str] = []
        try:
            self.check_arrays()
            bv, recorded, sparse = self.block_versions, self.block_nnz, self.block_sparse
            all_deltas = self.block_deltas
        except StoreError as exc:
            return [_reason(exc, self.path)]
        except Exception as exc:
            return [f"version {self.version}: its counts cannot be read ({exc})"]
        jobs = sorted({(i, j) for i, j in np.argwhere(bv > 0).tolist()} | set(all_deltas))

        def check(ij: tuple[int, int]) -> tuple[float, str | None]:
            i, j = ij
            rows, cols = self.block_slices(i, j)
            want = int(recorded[i, j]) if recorded is not None else -1
            deltas = all_deltas.get((i, j), ())
            try:
                block = read_q_block(self.path, int(bv[i, j]), rows, cols, 1.0, want,
                                     sparse=int(sparse[i, j]), deltas=deltas)
            except StoreError as exc:
                return 0.0, str(exc).split(": ", 1)[-1]
            got = int(np.count_nonzero(block))
            if want >= 0 and got != want and not deltas:  # read_q_block checked each part
                return 0.0, (f"block ({i}, {j}) of version {int(bv[i, j])} holds {got:,} "
                             f"non-zeros; the store recorded {want:,}")
            return float(block.sum()), None

        total = 0.0
        with ThreadPoolExecutor(max(1, min(threads or usable_cores(), len(jobs) or 1))) as pool:
            for value, problem in pool.map(check, jobs):
                total += value
                if problem is not None:
                    problems.append(problem)
        built_by_ingest = "tokenizer" in self.config or "pruning" in self.config
        if not problems and built_by_ingest and self.n_docs > 0:
            want = self.q_total  # n_docs, or the recorded total of input-length stores
            if abs(total - want) > 1e-9 * max(1.0, want):
                problems.append(f"the stored sum of Q adds up to {total:.12g}, not to " + (
                    f"the {self.n_docs:,} documents counted" if "q_mass" not in self._head()
                    else f"its recorded total {want:.12g}"))
        problems += self._verify_cached(threads)
        try:
            self.check_manifest()
        except StoreError as exc:
            problems.append(str(exc).split(": ", 1)[-1])
        return problems

    def _verify_cached(self, threads: int | None) -> list[str]:
        """The problems of the cached documents: each partition read and checked."""
        from concurrent.futures import ThreadPoolExecutor

        try:
            parts = self.cached_partitions()
        except StoreError as exc:
            return [str(exc).split(": ", 1)[-1]]

        def check(part: CachedPartition) -> str | None:
            try:
                self.read_cached(part)
            except StoreError as exc:
                return str(exc).split(": ", 1)[-1]
            return None

        with ThreadPoolExecutor(max(1, min(threads or usable_cores(), len(parts) or 1))) as pool:
            return [p for p in pool.map(check, parts) if p is not None]

    def check_manifest(self) -> list[ManifestEntry]:
        """The manifest of inputs, if it is the one the store wrote: from format 5 on, each
        line of ``manifest.jsonl`` up to the head's end must match the hash chain the head
        records (:mod:`streamtopic.manifest`); before, the list in the head's metadata must
        match its digest (stores of format 2 and later must have one). A check against
        accidental and hand edits; whoever can rewrite the store can also recompute it.

        Raises
        ------
        StoreError
            A missing or mismatched digest.
        """
        head = self._head()
        if "manifest" in head:
            try:
                sources = read_manifest(self.path, self._manifest_mark())
            except ManifestError as exc:
                raise StoreError(f"{self.path}: the manifest of inputs does not match its "
                                 f"digest (edited or damaged: {exc}), so its inputs are not "
                                 "read") from None
            return sources
        sources = list(head.get("sources", []))
        digest = head.get("sources_digest")
        required = int(self._meta.get("format_version", 1)) >= 2 and self.version > 0
        if (digest is None and required) or (
                digest is not None and digest != sources_digest(self.uid, sources)):
            raise StoreError(
                f"{self.path}: the manifest of inputs does not match its digest (edited or "
                "damaged), so its inputs are not read"
            )
        return [ManifestEntry(e) for e in sources]

    # ------------------------------------------------------------------ writing

    def writer_lock(self) -> _WriterLock:
        """Take the store's writer lock (held until its ``release``), or raise
        :class:`StoreError` if another writer holds it. An ingest takes it before it reads
        anything, so a second writer is refused at once."""
        lock = _WriterLock(self.path)
        lock.acquire()
        return lock

    def begin(self, lock: _WriterLock | None = None, new_terms: Sequence[str] = ()
              ) -> Transaction:
        """Start an ingest round: take the writer lock (unless ``lock``, held by the caller,
        is given), drop debris of dead rounds and create the new version's (empty) Q array.
        The object then reads the head as it is now.

        ``new_terms``: words the round adds to the vocabulary, after the head's V words
        (ids V, V + 1, …): Q grows to the new size; blocks of earlier versions are read as
        if padded with zeros. The vocabulary array is extended now (readers of the head
        read only its first V words)."""
        owns = lock is None
        lock = self.writer_lock() if lock is None else lock
        try:
            self._reload()
            self.cleanup()
            number = self.version + 1  # cleanup() removed any debris of an earlier round
            txn = Transaction(self, number, lock, owns, V=self.V + len(new_terms))
            if new_terms:
                self._extend_vocab(new_terms)
            self._staging_q(txn, create=True)
            return txn
        except BaseException:
            if owns:
                lock.release()
            raise

    def _extend_vocab(self, new_terms: Sequence[str]) -> None:
        known = set(self.vocab)
        if len(set(new_terms)) != len(new_terms) or known.intersection(new_terms):
            raise StoreError(f"{self.path}: new words must be distinct and new to the store")
        arr = zarr.open_array(store=self.path, path="vocab", mode="r+")
        V = self.V
        arr.resize((V + len(new_terms),))
        arr[V:] = np.asarray(list(new_terms), dtype=str)

    def _staging_q(self, txn: Transaction, create: bool = False) -> zarr.Array[Any]:
        if create:
            grp = zarr.open_group(self.path, mode="r+")
            c, V = self.chunk_size, self.V
            grp.create_group(f"{txn.group_path}/S")  # sparse blocks' parent, made once
            grp.create_group(f"{txn.group_path}/D")  # the cached documents' parent
            V = txn.V or V
            return grp.create_array(
                f"{txn.group_path}/Q", shape=(V, V), chunks=(c, c), dtype="f8", fill_value=0.0,
                compressors=_q_compressor(),
            )
        return open_for_blocks(self.path, f"{txn.group_path}/Q")

    def commit(
        self,
        txn: Transaction,
        *,
        written: Sequence[tuple[int, int]],
        n_docs: int,
        n_tokens: int,
        word_counts: np.ndarray,
        doc_freq: np.ndarray,
        n_skipped_docs: int = 0,
        n_oov_tokens: int = 0,
        n_replaced_bytes: int = 0,
        block_nnz: dict[tuple[int, int], int] | None = None,
        sparse: Sequence[tuple[int, int]] = (),
        mirrored: Sequence[tuple[int, int]] = (),
        mirrored_dense: Sequence[tuple[int, int]] = (),
        new_sources: Sequence[ManifestEntry] = (),
        unkept: Sequence[str] | None = None,
        extra: dict[str, Any] | None = None,
        documents: Sequence[PartitionRecord] = (),
        deltas: Mapping[tuple[int, int], int] | None = None,
    ) -> None:
        """Finish a round: write its counts and block map, then switch the head atomically.

        The counts are the round's *additions* (over the round's vocabulary, ``txn.V``
        words); they are added to the head's totals. ``block_nnz`` gives the non-zeros of
        each block written (both (i, j) and its mirror); the store keeps them to detect lost
        blocks. ``sparse``: the blocks written that were stored sparse
        (:func:`write_q_block`); ``mirrored``: those stored as the transpose of their
        mirror image's sparse block (``MIRRORED``); ``mirrored_dense``, of its dense block
        (``MIRRORED_DENSE``). ``unkept``: words the round read that
        are not in the vocabulary, added to the head's record of them (:attr:`unkept_words`).
        ``documents``: the round's cached partitions of text (:mod:`streamtopic.doccache`).
        ``deltas``: the blocks (on or above the diagonal) the round wrote as deltas
        (:func:`write_q_delta`), with their non-zeros: appended to those blocks'
        :attr:`block_deltas`; a block written whole drops its deltas.
        """
        try:
            head = self._head()
            number = txn.number
            grp = zarr.open_group(self.path, mode="r+")
            vg = _group(grp, txn.group_path)
            V = txn.V or self.V
            bv = padded_block_map(self.block_versions, -(-V // self.chunk_size))
            for i, j in written:
                bv[i, j] = number
            digests = self._write_vectors(vg, bv, word_counts, doc_freq, V)
            unkept_digest, n_unkept = self._write_unkept(vg, unkept)
            digests.update(unkept_digest)
            digests["vocab"] = array_digest(self._vocab_words(V))
            records = _block_records(head, written, block_nnz or {},
                                     {SPARSE: sparse, MIRRORED: mirrored,
                                      MIRRORED_DENSE: mirrored_dense}, number, deltas or {})
            added = {"n_docs": n_docs, "n_tokens": n_tokens, "n_skipped_docs": n_skipped_docs,
                     "n_oov_tokens": n_oov_tokens, "n_replaced_bytes": n_replaced_bytes}
            attrs: dict[str, Any] = {k: int(head[k]) + int(v) for k, v in added.items()}
            attrs.update(n_unkept)
            attrs.update(number=number, V=V, chunk=self.chunk_size, arrays=digests, **records,
                         **self._appended_records(number, new_sources, documents))
            attrs.update(extra or {})
            attrs = seal(attrs, self.uid)
            vg.attrs.update(attrs)
            # the switch: one atomic rewrite of the root zarr.json
            grp.attrs["streamtopic"] = seal(dict(
                self._meta, head=number, V=V, format_version=FORMAT_VERSION,
                head_digest=attrs["digest"]))
            txn.committed = True
            self._reload()
            self._collect_after_commit()
        finally:
            txn.finish()

    def _appended_records(self, number: int, new_sources: Sequence[ManifestEntry],
                          documents: Sequence[PartitionRecord]) -> dict[str, Any]:
        """A new version's records of what only grows: the manifest (its line appended,
        :mod:`streamtopic.manifest`) and the cached partitions (its own, the versions that
        hold any, and the hash chain of their records)."""
        head = self._head()
        mark = self._manifest_mark()
        if "manifest" not in head and head.get("sources"):  # a store of format 4 or older
            mark = append_manifest(self.path, mark, self.check_manifest())
        mark = append_manifest(self.path, mark, [dict(s, version=number) for s in new_sources])
        chain = self._documents_chain()
        listed = [r.as_list() for r in documents]
        if documents:
            chain = chain_digest(chain, json.dumps([number, listed]).encode())
        return {
            "manifest": mark.as_dict(),
            "committed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "counts_known": bool(head.get("counts_known", True)),
            "documents": listed,
            "document_versions": list(head.get("document_versions", []))
            + ([number] if documents else []),
            "documents_chain": chain,
        }

    def _write_vectors(self, vg: zarr.Group, bv: np.ndarray, word_counts: np.ndarray,
                       doc_freq: np.ndarray, V: int) -> dict[str, str]:
        """A round's block map (nb×nb) and its per-word totals (V,): the head's (zeros for
        the words the round adds) plus the round's ``word_counts`` and ``doc_freq``, each
        chunk checksummed. Returns each array's digest (:func:`array_digest`)."""
        chunks = (min(V, 2**20),)
        bv = bv.astype(np.int32)
        vg.create_array("block_versions", data=bv, compressors=checksum_codecs())
        digests = {"block_versions": array_digest(bv)}
        for name, head, added in (("word_counts", self.word_counts, word_counts),
                                  ("doc_freq", self.doc_freq, doc_freq)):
            total = np.zeros(V, np.int64)
            total[: head.size] = head
            total += np.asarray(added, np.int64)
            vg.create_array(name, data=total, chunks=chunks, compressors=checksum_codecs())
            digests[name] = array_digest(total)
        return digests

    def _write_unkept(self, vg: zarr.Group, round_unkept: Sequence[str] | None
                      ) -> tuple[dict[str, str], dict[str, int]]:
        """The version's record of the words read but not kept: the head's plus the
        round's, less the vocabulary (sorted strings); none if the head has none and this
        is not the first round, or the round did not collect its own. Returns its digest
        (of the words, :func:`array_digest`) and the version's record of their number."""
        head = self.unkept_words
        if round_unkept is None or (head is None and self.version > 0):
            return {}, {}
        words = sorted((set(head or ()) | set(round_unkept)).difference(self.vocab))
        arr = vg.create_array("unkept", shape=(max(1, len(words)),), dtype=str,
                              chunks=(max(1, min(len(words), 2**18)),),
                              compressors=checksum_codecs())
        if words:
            arr[:] = np.asarray(words, dtype=str)
        return {"unkept": array_digest(np.asarray(words, dtype=str))}, {"n_unkept": len(words)}

    @property
    def unkept_words(self) -> list[str] | None:
        """The words ingested into this version that are not in its vocabulary (pruned, or
        out of vocabulary), or None for a store that does not record them. Growing the
        vocabulary never adds one of these: their co-occurrences so far were not counted."""
        if self.version == 0:
            return []
        n = self._head().get("n_unkept")
        if n is None:
            return None
        if not isinstance(n, int) or n < 0:
            raise _damaged(self.path, f"{_vname(self.version)} records {n!r} unkept words")
        words = self._checked_array("unkept", (max(1, n),), part=n)
        return [str(t) for t in words]

    def _collect_after_commit(self) -> None:
        """:meth:`cleanup` after a commit, best effort: the round is committed whatever
        happens here, and what is left is collected by the next writer."""
        try:
            self.cleanup()
        except Exception as exc:  # an unreadable lease, a file that resists removal
            log.warning("%s: superseded data not removed yet (%s); the next ingest will",
                        self.path, exc)

    def abort(self, txn: Transaction) -> None:
        """Drop an unfinished round; the head is untouched. Nothing happens to a round
        already committed (a failure after the switch must not remove the new head)."""
        try:
            path = os.path.join(self.path, txn.group_path)
            if not txn.committed and os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
        finally:
            txn.finish()

    def cleanup(self) -> None:
        """Remove what neither the head nor a live reader's version uses: versions of dead
        rounds, superseded versions and superseded blocks, and dead readers' leases.

        Called by writers, holding the lock, after their commit (so every reader that could
        still see an older head has its lease in place by then). A version that a live lease
        names keeps its counts and every block it reads until the lease is released."""
        versions = os.path.join(self.path, "versions")
        if not os.path.isdir(versions):
            return
        leased = live_leases(self.path, collect=True)
        if leased is None:  # a lease we cannot read: delete nothing this time
            return
        head = self.version
        kept = {head} | {v for v in leased if 0 < v <= head}
        found = self._referenced_versions(kept)
        if found is None:  # a leased version we cannot read: delete nothing this time
            return
        maps, referenced, delta_use = found
        grp = zarr.open_group(self.path, mode="r+")
        # Walk the directory, not the zarr hierarchy: a writer killed while zarr was
        # creating a group leaves a directory without metadata (or a ``*.partial`` file),
        # which the hierarchy does not list. The caller holds the writer lock.
        for entry in sorted(os.scandir(versions), key=lambda e: e.name):
            name = entry.name
            if name == "zarr.json":
                continue
            number = _version_number(name)
            if number is None:
                if name.endswith(".partial") and entry.is_file(follow_symlinks=False):
                    os.remove(entry.path)  # zarr's unfinished metadata write
            elif number not in referenced:
                shutil.rmtree(entry.path, ignore_errors=True)
            elif number not in kept and not os.path.exists(os.path.join(entry.path, COLLECTED)):
                # superseded but in use (stripped before, with no block in use: its cache only)
                self._strip_version(grp, entry.path, number, maps,
                                    delta_use.get(number, set()))

    def _referenced_versions(
        self, kept: set[int]
    ) -> tuple[dict[int, np.ndarray], set[int], dict[int, set[tuple[int, int]]]] | None:
        """For :meth:`cleanup`: the block maps (nb × nb each) of the ``kept`` versions, by
        version, every version they use (themselves, the versions of their blocks, of their
        blocks' deltas and of the cached documents they read), and the blocks each version
        holds as deltas that a kept version reads; None when a kept version cannot be
        read."""
        maps = {}
        referenced = set(kept)
        delta_use: dict[int, set[tuple[int, int]]] = {}
        for v in kept:
            if v == 0:
                continue
            try:
                maps[v] = np.asarray(_array(self._root, f"{_vname(v)}/block_versions")[:])
                # the versions whose cached documents this one reads
                doc_versions: Any = _group(self._root, _vname(v)).attrs.get(
                    "document_versions", [])
                referenced |= {int(x) for x in doc_versions}
                chains: Any = _group(self._root, _vname(v)).attrs.get("block_deltas", {})
                for key, chain in chains.items():
                    i, j = (int(x) for x in str(key).split(","))
                    for dv, _ in chain:
                        delta_use.setdefault(int(dv), set()).add((i, j))
            except Exception:  # a leased version we cannot read
                return None
        for bv in maps.values():
            referenced |= set(np.unique(bv).tolist())
        referenced |= set(delta_use)
        return maps, referenced, delta_use

    def _strip_version(self, grp: zarr.Group, path: str, number: int,
                       maps: dict[int, np.ndarray], deltas_used: set[tuple[int, int]]
                       ) -> None:
        """For :meth:`cleanup`: strip the superseded version ``number`` (directory ``path``)
        that a kept version still uses, of its counts and of the blocks that no kept version
        reads (their block maps, ``maps``, and ``deltas_used``: the blocks it holds as
        deltas that a kept version reads); mark it ``COLLECTED`` when none of its blocks is
        in use."""
        vg = _group(grp, f"versions/{os.path.basename(path)}")
        for arr_name in ("word_counts", "doc_freq", "block_versions", "unkept"):
            if arr_name in vg:
                del vg[arr_name]
        used = np.zeros((self.n_blocks, self.n_blocks), dtype=bool)
        for bv in maps.values():
            used |= padded_block_map(bv, self.n_blocks) == number
        for i, j in deltas_used:
            used[i, j] = True
        for i, j in np.argwhere(~used).tolist():
            rows, cols = self.block_slices(i, j)
            for kind in (DENSE, SPARSE):  # a mirrored block's files are its mirror's
                for f in block_files(self.path, number, rows, cols, self.chunk_size, kind):
                    _remove_quietly(f)
            shutil.rmtree(os.path.join(self.path, *_sparse_path(number, rows, cols).split(
                "/")), ignore_errors=True)
        if not used.any():  # nothing of it will ever be used but its token cache
            with open(os.path.join(path, COLLECTED), "w"):
                pass


#: ``doc_length`` of the stores ingest builds now (recorded in their config).
DOC_LENGTH = "input"
#: ``doc_weight`` of the stores ingest builds now (recorded in their config): each
#: document's Q_d weighs as its tokens, w_d = 1/(n_d − 1) (see :mod:`streamtopic.cooccurrence`).
DOC_WEIGHT = "tokens"
#: The weights a store's config may record: per token, or the same for every document
#: (w_d = 1/(n_d(n_d − 1)), the stores built before ``doc_weight``).
DOC_WEIGHTS = ("tokens", "documents")


def doc_length_of(config: dict[str, Any]) -> str:
    """The document-length definition a store's ``config`` records (see
    :attr:`CooccurrenceStore.doc_length`): ``'vocabulary'`` when it records none."""
    return str(config.get("doc_length", "vocabulary"))


def doc_weight_of(config: dict[str, Any]) -> str:
    """The document weighting a store's ``config`` records (see
    :attr:`CooccurrenceStore.doc_weight`): ``'documents'`` when it records none."""
    weight = str(config.get("doc_weight", "documents"))
    if weight not in DOC_WEIGHTS:
        raise StoreError(f"the store's configuration records doc_weight={weight!r}; expected "
                         f"one of {', '.join(DOC_WEIGHTS)}")
    return weight


def _block_records(
    head: dict[str, Any], written: Sequence[tuple[int, int]],
    block_nnz: dict[tuple[int, int], int], kinds_written: dict[int, Sequence[tuple[int, int]]],
    number: int = 0, deltas: Mapping[tuple[int, int], int] | None = None,
) -> dict[str, Any]:
    """A new head's records of its blocks: the head's, with those of the blocks a round
    wrote replaced (non-zeros, total non-zeros, and the blocks of each stored kind other
    than ``DENSE``: ``kinds_written`` maps a kind to the blocks the round stored so), and
    the blocks' deltas: those of the blocks written dropped, the round's (``deltas``, as
    version ``number``) appended."""
    nnz_map = dict(head.get("block_nnz", {}))
    for (i, j), n in block_nnz.items():
        nnz_map[f"{i},{j}"] = int(n)
    replaced = {f"{i},{j}" for i, j in written}
    kinds = {}
    for name, kind in _KIND_RECORDS:
        kinds[name] = set(head.get(name, ())) - replaced
        kinds[name] |= {f"{i},{j}" for i, j in kinds_written.get(kind, ())}
    chains = {key: [list(d) for d in chain]
              for key, chain in head.get("block_deltas", {}).items() if key not in replaced}
    for (i, j), n in (deltas or {}).items():
        chains.setdefault(f"{i},{j}", []).append([number, int(n)])
    return {"nnz": int(sum(nnz_map.values())), "block_nnz": nnz_map,
            **{name: sorted(keys) for name, keys in kinds.items()},
            "block_deltas": dict(sorted(chains.items()))}


def padded_block_map(block_map: np.ndarray, nb: int) -> np.ndarray:
    """A copy of an (n, n) block map grown to (nb, nb) with zeros (a version with more words
    has more blocks; an earlier version's map covers the first ones)."""
    out = np.zeros((nb, nb), dtype=block_map.dtype)
    n = min(nb, block_map.shape[0])
    out[:n, :n] = block_map[:n, :n]
    return out


def _group(root: zarr.Group, path: str) -> zarr.Group:
    node = root[path]
    if not isinstance(node, zarr.Group):
        raise StoreError(f"{path}: a zarr group was expected")
    return node


def _array(root: zarr.Group, path: str) -> zarr.Array[Any]:
    node = root[path]
    if not isinstance(node, zarr.Array):
        raise StoreError(f"{path}: a zarr array was expected")
    return node


def sources_digest(uid: str, sources: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 of a store's manifest (its inputs, as JSON) and its uid: the manifest as the
    store wrote it. A manifest edited by hand no longer matches, and its inputs are not read."""
    import hashlib

    text = json.dumps({"uid": uid, "sources": [dict(s) for s in sources]}, sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def checksum_codecs() -> list[Any]:
    """A CRC-32C checksum on every chunk: a corrupted chunk fails to read instead of
    decoding into wrong numbers."""
    from zarr.codecs import Crc32cCodec

    return [Crc32cCodec()]


def _q_compressor() -> Any:
    """Blosc LZ4 without shuffle: about 3× faster to read than zarr's default zstd on blocks
    of Q, which later stages read many times. Without the byte shuffle, the runs of zero words
    in a sparse block compress 3× better (8.7× against 2.5× on a block of UCI KOS at 13 %
    density) and encode 3× faster; dense blocks compress about 1.1–1.2× either way."""
    from zarr.codecs import BloscCodec

    return [BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle"), *checksum_codecs()]


def remove_store(path: str) -> None:
    """Delete a store directory (used for temporary stores)."""
    shutil.rmtree(path, ignore_errors=True)


def looks_like_store(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory laid out like a co-occurrence store (a root
    ``zarr.json``, a ``versions/`` directory or a writer's lock file), whether or not it
    opens. Such a directory (a model saved as zarr is one too) is never raw input."""
    path = os.fspath(path)
    return os.path.isdir(path) and (
        os.path.isfile(os.path.join(path, "zarr.json"))
        or os.path.isdir(os.path.join(path, "versions"))
        or os.path.lexists(os.path.join(path, LOCK_FILE))
    )
