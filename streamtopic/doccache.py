"""The token cache: every ingested text document as (word id, count) pairs, in the store.

Text is tokenised once. While an ingest counts a partition of text into Q, the same task
writes the partition's documents, already mapped onto the store's vocabulary, into the new
version of the store::

    versions/v000003/D/p000017     one array of bytes (one chunk file, ``c.0``): the
                                   documents of partition 17 of the round that made version 3

Refinement, evaluation and inference on the training corpus then read these arrays
(:func:`read_partition`, through :func:`streamtopic.corpus.recorded_corpus`) instead of the
text: no tokenising, no JSON or gzip decoding, and the raw inputs need not exist any more.

Layout of one partition (:func:`pack`, little-endian, every part aligned to 8 bytes)::

    header   int64[6]       MAGIC, n_docs, nnz, n_runs, V (the vocabulary size when written),
                            tokens (the sum of the counts)
    lengths  int64[n_docs]  each document's input length n_d (tokens before stop words)
    indptr   int64[n_docs+1]
    runs     int64[n_runs,3] (source, first document, documents): the documents' origin, as
                            indices into the version's new manifest entries and positions
                            within each input
    indices  int32[nnz]     word ids (sorted within each document)
    counts   int32[nnz]     (the two int32 parts together keep the total aligned)

Guarantees: the same as Q's blocks. Each partition is written by exactly one task into the
uncommitted version, so a failed or killed ingest leaves nothing (its version is removed); a
committed partition is immutable. Its chunk carries a CRC-32C checksum, and the version
records each partition's documents and non-zeros (:class:`PartitionRecord`), so a lost chunk
(read as zeros) or a damaged one is an error, never data. Every document of the input is
kept, including those with fewer than two tokens (which Q does not count), so that positions
match the input's.

Cost: 8 bytes per (document, distinct word) and 32 bytes per document before compression
(Blosc LZ4); writing it costs a small fraction of tokenising, reading it back a fraction of a
second per hundred million tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import zarr

__all__ = [
    "CachedDocuments",
    "DamagedCacheError",
    "PartitionRecord",
    "pack",
    "partition_path",
    "read_partition",
    "unpack",
    "write_partition",
]

MAGIC = 0x5354444F43533031  # "STDOCS01"
#: every partition has data: zarr's check that a chunk is all fill value is skipped
_WRITE_AS_IS: Any = {"write_empty_chunks": True}
_HEADER = 6


class DamagedCacheError(ValueError):
    """A cached partition that is missing, fails its checksum or does not match its record."""


@dataclass(frozen=True)
class CachedDocuments:
    """One partition's documents over the store's vocabulary.

    Attributes
    ----------
    counts : scipy.sparse.csr_matrix of shape (n_docs, V)
        Word counts (int32), column indices sorted within each row.
    lengths : ndarray of shape (n_docs,), int64
        Input lengths n_d (tokens before stop words were removed).
    runs : ndarray of shape (n_runs, 3), int64
        (source index, first document, documents): the rows come from ``runs[r, 2]``
        consecutive documents of source ``runs[r, 0]``, from position ``runs[r, 1]``.
    """

    counts: sp.csr_matrix
    lengths: np.ndarray
    runs: np.ndarray

    @property
    def n_docs(self) -> int:
        return int(self.counts.shape[0])


@dataclass(frozen=True)
class PartitionRecord:
    """What a version records of one cached partition (checked when it is read): its
    number, documents, entries and tokens, and its input (an index into the version's new
    manifest entries: a partition reads one input)."""

    part: int
    n_docs: int
    nnz: int
    tokens: int
    source: int

    def as_list(self) -> list[int]:
        return [self.part, self.n_docs, self.nnz, self.tokens, self.source]

    @classmethod
    def from_list(cls, values: list[int]) -> PartitionRecord:
        part, n_docs, nnz, tokens, source = (int(v) for v in values)
        return cls(part, n_docs, nnz, tokens, source)


def partition_path(version: int, part: int) -> str:
    """The array of partition ``part`` of ``version``, relative to the store root."""
    return f"versions/v{version:06d}/D/p{part:06d}"


def pack(docs: CachedDocuments) -> np.ndarray:
    """``docs`` as one array of bytes (the layout in the module docstring)."""
    H = docs.counts
    V = H.shape[1]
    header = np.array([MAGIC, H.shape[0], H.nnz, docs.runs.shape[0], V, int(H.data.sum())],
                      dtype=np.int64)
    parts = [header, np.asarray(docs.lengths, np.int64), H.indptr.astype(np.int64),
             np.asarray(docs.runs, np.int64).reshape(-1), H.indices.astype(np.int32),
             H.data.astype(np.int32)]
    return np.concatenate([p.view(np.uint8) for p in parts])


def unpack(raw: np.ndarray, V: int | None = None) -> CachedDocuments:
    """The documents in ``raw`` (:func:`pack`); their word ids must lie below ``V`` (default:
    the vocabulary size they were written with). Raises :class:`DamagedCacheError` on
    anything inconsistent, before any index is used."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    if raw.size < 8 * _HEADER:
        raise DamagedCacheError(f"{raw.size} bytes, shorter than a header")
    magic, n, nnz, n_runs, V0, tokens = (int(x) for x in raw[: 8 * _HEADER].view(np.int64))
    if magic != MAGIC or min(n, nnz, n_runs, V0) < 0:
        raise DamagedCacheError("not a cached partition (bad header)")
    sizes = [8 * n, 8 * (n + 1), 8 * 3 * n_runs, 4 * nnz, 4 * nnz]
    if raw.size != 8 * _HEADER + sum(sizes):
        raise DamagedCacheError(f"{raw.size} bytes; its header describes another size")
    o = 8 * _HEADER
    views = []
    for size, dtype in zip(sizes, (np.int64, np.int64, np.int64, np.int32, np.int32),
                           strict=True):
        views.append(raw[o : o + size].view(dtype))
        o += size
    lengths, indptr, runs, indices, counts = views
    limit = V0 if V is None else V
    if (indptr[0] != 0 or indptr[-1] != nnz or np.any(np.diff(indptr) < 0)
            or (nnz and (indices.min() < 0 or indices.max() >= limit))
            or (nnz and counts.min() < 1) or int(counts.sum(dtype=np.int64)) != tokens
            or int(runs.reshape(-1, 3)[:, 2].sum()) != n):
        raise DamagedCacheError("its documents are inconsistent (indices or counts)")
    H = sp.csr_matrix((counts, indices, indptr), shape=(n, limit))
    return CachedDocuments(H, lengths, runs.reshape(-1, 3))


def _codecs() -> list[Any]:
    """LZ4 (fast to read back) and a CRC-32C checksum on the chunk, as Q's blocks."""
    from zarr.codecs import BloscCodec, Crc32cCodec

    return [BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle"), Crc32cCodec()]


def write_partition(root: str, version: int, part: int, docs: CachedDocuments
                    ) -> PartitionRecord:
    """Write one partition's documents (all of one input: ``docs.runs[:, 0]`` is one
    value) into an uncommitted ``version`` of the store at ``root``, as the array's only
    writer; returns what the version records of it."""
    raw = pack(docs)
    zarr.create_array(store=root, name=partition_path(version, part), data=raw,
                      chunks=raw.shape, compressors=_codecs(), overwrite=True,
                      config=_WRITE_AS_IS,
                      chunk_key_encoding={"name": "default", "separator": "."})
    H = docs.counts
    return PartitionRecord(part, int(H.shape[0]), int(H.nnz), int(H.data.sum()),
                           int(docs.runs[0, 0]) if docs.runs.size else 0)


def read_partition(root: str, version: int, record: PartitionRecord, V: int
                   ) -> CachedDocuments:
    """One cached partition of ``version``, checked against its ``record``: its checksum,
    its structure (word ids below ``V``) and its counts. Raises
    :class:`DamagedCacheError` naming the partition when anything differs."""
    path = partition_path(version, record.part)
    try:
        raw = np.asarray(zarr.open_array(store=root, path=path, mode="r")[:])
        docs = unpack(raw, V)
    except DamagedCacheError as exc:
        raise DamagedCacheError(f"{root}: cached documents {path}: {exc}") from None
    except Exception as exc:  # zarr, blosc and crc32c raise several types
        raise DamagedCacheError(f"{root}: cached documents {path} cannot be read ({exc})"
                                ) from exc
    H = docs.counts
    if (H.shape[0], H.nnz, int(H.data.sum())) != (record.n_docs, record.nnz, record.tokens):
        raise DamagedCacheError(
            f"{root}: cached documents {path} hold {H.shape[0]:,} documents and {H.nnz:,} "
            f"entries; the store recorded {record.n_docs:,} and {record.nnz:,}")
    return docs
