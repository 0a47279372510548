"""Corpus readers: any supported input as a ``dask.bag`` of document chunks.

Every reader plans *partitions* on the client (record-aligned byte ranges, member ranges or row
ranges, never the data itself) and reads each partition in its own task. A partition holds a
bounded number of documents, as a list of :class:`DocChunk` (sparse document-term counts over the
chunk's own terms).

Formats
-------
``uci``
    UCI bag-of-words: ``docword.NAME.txt[.gz]`` and ``vocab.NAME.txt`` (beside it, or ``vocab=``).
``text``
    Plain text, one document per line (``.txt``, ``.txt.gz``, files, globs or directories).
``files``
    One document per file: a directory tree, or a ``.tar``/``.tar.gz`` archive of files.
``jsonl``
    JSON Lines, one object per line; the document is the string in ``text_field``.
``hdf5``
    CSR datasets ``indptr``, ``indices``, ``data`` and a ``vocab`` dataset (see :func:`convert`).

Headers: by default (``strip_headers=True``) the one-document-per-file readers (``files``:
directory trees and tar archives) drop each file's leading mail/news header block (From,
Organization, Lines, Path, ...) up to and including the first empty line, but keep the text of
its Subject (without "Re:"), which is content (``keep_subject=True``). A block is a header block
only if every line of it is a header field (``Name: value``, the name without spaces), an mbox
``From`` line or a continuation line; any other file is kept whole. Other formats ignore the
option. The text then goes to the :class:`~streamtopic.vocabulary.Tokenizer`, which by default
drops e-mail addresses, URLs, reply attribution lines and encoded binary in every text format.

Decoding policy: text is UTF-8. Undecodable bytes are replaced by U+FFFD, which never forms part
of a token, and counted (``DocChunk.n_replaced``; reported by ``ingest`` and kept in the store).
"""

from __future__ import annotations

import glob as _glob
import gzip
import hashlib
import json
import logging
import os
import re
import stat
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import repeat
from typing import Any, BinaryIO, cast

import numpy as np
import scipy.sparse as sp

from . import _gzindex
from ._dates import parse_time
from ._io import written_aside
from ._tarlist import plain_members
from ._tokenize import BatchTokenizer, count_matrix, kernel_flags, kernels_ready
from .cluster import n_workers, persist
from .doccache import CachedDocuments, DamagedCacheError, PartitionRecord, read_partition
from .limits import (
    MAX_COUNT,
    InputBoundError,
    check_hdf5_corpus,
    check_vocabulary,
    json_record,
    too_long,
)
from .limits import max_line_bytes as _max_line_bytes
from .manifest import ManifestEntry
from .progress import Stage
from .store import StoreError
from .vocabulary import TermStats, Tokenizer, read_vocab_file

log = logging.getLogger(__name__)

__all__ = [
    "FORMATS",
    "CorpusError",
    "DocChunk",
    "Source",
    "Corpus",
    "read_corpus",
    "detect_format",
    "convert",
    "split",
    "HDF5CorpusWriter",
    "bundled_corpus",
    "source_vocabulary",
]

FORMATS = ("auto", "uci", "text", "files", "jsonl", "hdf5")
DEFAULT_BLOCKSIZE = 2 * 2**20
#: Default partition size of a corpus read only from HDF5: its counts need no tokenising, so
#: larger partitions cost no more per byte, and an ingest's accumulation links are 8× fewer:
#: each costs about a millisecond of scheduling and streams its group's running sum (up to
#: 128 MiB) through the cache once. At V = 20,000 and 300-token documents: 25% less CPU.
HDF5_BLOCKSIZE = 16 * 2**20
MIN_BLOCKSIZE = 2**20
CHUNK_DOCS = 2048  # documents per DocChunk inside a partition


class CorpusError(ValueError):
    """Malformed or unreadable input. The message names the file and line or byte offset."""

    def __init__(
        self, path: str, message: str, *, line: int | None = None, offset: int | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.offset = offset
        where = path
        if line is not None:
            where += f":{line}"
        elif offset is not None:
            where += f" (byte {offset})"
        super().__init__(f"{where}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes
        return (_make_corpus_error, (self.path, self.args[0], self.line, self.offset))


def _make_corpus_error(path: str, full: str, line: int | None, offset: int | None) -> CorpusError:
    err = CorpusError.__new__(CorpusError)
    ValueError.__init__(err, full)
    err.path, err.line, err.offset = path, line, offset
    return err


@dataclass
class DocChunk:
    """Documents as sparse counts over the chunk's own terms.

    Attributes
    ----------
    counts : scipy.sparse.csr_matrix of shape (n_docs, T)
        Token counts (int32). Row ``d`` is document ``first_doc + d`` of ``source``.
    terms : sequence of str, length T
        The term of each column.
    source : str
        The input this chunk came from.
    first_doc : int
        Index of the chunk's first document within ``source``.
    n_replaced : int
        Undecodable bytes replaced while decoding these documents.
    vocab_key : str or None
        For id-based sources (UCI, HDF5), a key of the source vocabulary; ``term_ids`` then
        gives each column's id in it.
    term_ids : ndarray of shape (T,) or None
    times : ndarray of int64, shape (n_docs,), or None
        Each document's time in seconds since 1970-01-01 UTC, when the corpus was read with
        a ``time_field`` (:func:`read_corpus`); else None.
    lengths : ndarray of shape (n_docs,) or None
        Each document's *input length*: for text, its tokens before stop words are removed
        (:meth:`~streamtopic.vocabulary.Tokenizer.tokens_and_length`); None when it is the
        row sum of ``counts`` (count inputs, whose columns are all of the file's words).
        See :attr:`input_lengths`.
    """

    counts: sp.csr_matrix
    terms: Sequence[str]
    source: str
    first_doc: int = 0
    n_replaced: int = 0
    vocab_key: str | None = None
    term_ids: np.ndarray | None = None
    n_records: int = 0  # UCI: entry lines read
    last_doc: int = -1  # UCI: index of the last document (docID − 1)
    offset: int = 0  # byte offset of the chunk's first record in ``source``
    lengths: np.ndarray | None = None
    times: np.ndarray | None = None

    @property
    def n_docs(self) -> int:
        return int(self.counts.shape[0])

    @property
    def input_lengths(self) -> np.ndarray:
        """Each document's length in its input (n_docs,) int64, whatever vocabulary is
        kept: ``lengths`` for text (stop words included), else the row sums of ``counts``
        (UCI, HDF5: every column of the file, including words outside a store's
        vocabulary)."""
        if self.lengths is not None:
            return np.asarray(self.lengths, dtype=np.int64)
        return np.asarray(self.counts.sum(axis=1), dtype=np.int64).ravel()

    def term_stats(self, min_length: int = 0) -> TermStats:
        """Document frequency and token count of each term in this chunk, over the
        documents whose input length (:attr:`input_lengths`) is at least ``min_length``."""
        stats = TermStats()
        c = self.counts
        if min_length > 0:
            c = c[np.flatnonzero(self.input_lengths >= min_length)]
        stats.n_docs = int(c.shape[0])
        tf = np.asarray(c.sum(axis=0)).ravel().astype(np.int64)
        df = np.bincount(c.indices, minlength=c.shape[1]).astype(np.int64)
        if self.vocab_key is not None and self.term_ids is not None:
            nz = tf > 0
            stats.add_ids(
                self.vocab_key, _source_vocab(self.vocab_key), self.term_ids[nz], df[nz], tf[nz]
            )
        elif min_length > 0:  # only the terms of the documents kept
            present = np.flatnonzero(tf)
            stats.add_terms([self.terms[i] for i in present.tolist()], df[present],
                            tf[present])
        else:
            stats.add_terms(self.terms, df, tf)
        return stats


@dataclass(frozen=True)
class Source:
    """One input of a corpus: a file, a directory of documents or an archive.

    ``vocab_path`` is the UCI vocabulary that maps ids to terms (UCI only).
    ``strip_headers``: drop each document's leading header block, and ``keep_subject``: keep
    the text of its Subject field (``files`` only; see :func:`read_corpus`).
    """

    path: str
    format: str
    size: int
    vocab_path: str | None = None
    strip_headers: bool = False
    keep_subject: bool = False

    def content_hash(self) -> str:
        """SHA-256 of the content (of every file, in order, for a directory; of the docword
        and its vocabulary for UCI)."""
        h = hashlib.sha256()
        if os.path.isdir(self.path):
            for rel in _list_tree(self.path):
                h.update(rel.encode("utf-8") + b"\0")
                _hash_file(os.path.join(self.path, rel), h)
        else:
            _hash_file(self.path, h)
        if self.vocab_path is not None:
            h.update(b"\0vocab\0")
            _hash_file(self.vocab_path, h)
        return h.hexdigest()


def _hash_file(path: str, h: Any) -> None:
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(2**20), b""):
            h.update(block)


@dataclass(frozen=True)
class _PartitionPlan:
    """A partition: where to read and how to parse it."""

    source: Source
    kind: str  # "bytes" | "members" | "rows"
    start: int
    stop: int
    first_doc: int = 0
    first_line: int | None = None  # line number of ``start`` (1-based) when known
    options: tuple[tuple[str, Any], ...] = ()

    def opt(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)


# ----------------------------------------------------------------------------- format detection


def _is_gzip(path: str) -> bool:
    return _compression(path) is not None


def _compression(path: str) -> str | None:
    """'gzip', 'bz2', 'xz' or None, by magic bytes."""
    with open(path, "rb") as fh:
        magic = fh.read(6)
    if magic[:2] == b"\x1f\x8b":
        return "gzip"
    if magic[:3] == b"BZh":
        return "bz2"
    if magic == b"\xfd7zXZ\x00":
        return "xz"
    return None


def _leading_bytes(path: str, n: int = 4096) -> bytes:
    """The first ``n`` bytes of the (decompressed) content of ``path``."""
    try:
        with _open_stream(path) as fh:
            return fh.read(n)
    except (OSError, EOFError, zlib.error) as exc:
        raise CorpusError(path, f"cannot decompress: {exc}") from exc


def _looks_uci(head: bytes) -> bool:
    lines = head.split(b"\n")
    if len(lines) < 4:
        return False
    if not all(ln.strip().isdigit() for ln in lines[:3]):
        return False
    parts = lines[3].split()
    return len(parts) == 3 and all(p.isdigit() for p in parts)


def detect_format(path: str) -> str:
    """Pick a reader for ``path`` by its name, then by its content.

    Directories are read as ``files`` (one document per file); use ``format="text"`` to read
    every file of a directory as one document per line. A directory whose files are all HDF5
    (``.h5``/``.hdf5``: the shards of one corpus, such as ``streamtopic synth --shards``
    writes) is read as ``hdf5``, its files in sorted order.
    """
    if os.path.isdir(path):
        return "hdf5" if _hdf5_shards(path) else "files"
    name = os.path.basename(path).lower()
    if name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2")):
        return "files"
    if name.endswith((".h5", ".hdf5")):
        return "hdf5"
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")):
        return "jsonl"
    if name.startswith("docword.") and name.endswith((".txt", ".txt.gz")):
        return "uci"
    with open(path, "rb") as fh:
        magic = fh.read(8)
    if magic.startswith(b"\x89HDF"):
        return "hdf5"
    head = _leading_bytes(path)
    if _looks_uci(head):
        return "uci"
    if head.lstrip()[:1] == b"{":
        return "jsonl"
    if _is_gzip(path):
        try:
            if tarfile.is_tarfile(path):
                return "files"
        except (OSError, EOFError):
            pass
    return "text"


# ----------------------------------------------------------------------------- input expansion


def _list_tree(root: str) -> list[str]:
    """Relative paths of the regular files below ``root``, sorted. Hidden entries and
    symbolic links (to files or directories) are skipped, as a tar archive's links are: a
    link could point anywhere, and the same file twice would be counted twice."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):  # never enters a linked directory
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in sorted(filenames):
            p = os.path.join(dirpath, f)
            if not f.startswith(".") and stat.S_ISREG(os.lstat(p).st_mode):
                out.append(os.path.relpath(p, root))
    out.sort()
    return out


def _hdf5_shards(root: str) -> list[str]:
    """The files below ``root`` (sorted, as :func:`_list_tree`) if there are some and all are
    HDF5 by name (``.h5``/``.hdf5``), else []. A tree of documents is told at its first file,
    without listing the rest."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in sorted(filenames):
            if f.startswith(".") or not stat.S_ISREG(os.lstat(os.path.join(dirpath, f)).st_mode):
                continue
            if not f.lower().endswith((".h5", ".hdf5")):
                return []
            break
        else:
            continue
        break
    files = _list_tree(root)
    if not files or not all(f.lower().endswith((".h5", ".hdf5")) for f in files):
        return []
    return [os.path.join(root, f) for f in files]


def _refuse_zarr(path: str) -> None:
    """Refuse a zarr directory (a co-occurrence store or a saved model) given as input: its
    chunks would be read as documents.

    Raises
    ------
    CorpusError
        When ``path`` is a directory with a ``zarr.json`` (zarr v3) or ``.zgroup`` (v2).
    """
    if os.path.isdir(path) and any(os.path.isfile(os.path.join(path, f))
                                   for f in ("zarr.json", ".zgroup", ".zarray")):
        raise CorpusError(path, "is a zarr store (a co-occurrence store or a model), not a "
                                "corpus: ingest reads documents; fit reads a store as its "
                                "only input")


def expand_inputs(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], fmt: str
) -> list[tuple[str, str]]:
    """Resolve paths, globs and directories into (absolute path, format) pairs."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    out: list[tuple[str, str]] = []
    for raw in inputs:
        p = os.fspath(raw)
        if any(ch in p for ch in "*?["):
            matches = sorted(_glob.glob(p, recursive=True))
            matches = [m for m in matches if os.path.isfile(m) or os.path.isdir(m)]
            if not matches:
                raise CorpusError(p, "no file matches this pattern")
        else:
            if not os.path.exists(p):
                raise CorpusError(p, "no such file or directory")
            matches = [p]
        for m in matches:
            m = os.path.abspath(m)
            _refuse_zarr(m)
            f = detect_format(m) if fmt == "auto" else fmt
            if f == "text" and os.path.isdir(m):
                files = _list_tree(m)
                if not files:
                    raise CorpusError(m, "directory holds no files")
                out.extend((os.path.join(m, r), "text") for r in files)
            elif f == "hdf5" and os.path.isdir(m):
                shards = _hdf5_shards(m)
                if not shards:
                    raise CorpusError(m, "format 'hdf5' reads a directory whose files are all "
                                         "HDF5 (.h5, .hdf5)")
                out.extend((s, "hdf5") for s in shards)
            elif f != "files" and os.path.isdir(m):
                raise CorpusError(m, f"is a directory; format {f!r} reads files")
            else:
                out.append((m, f))
    if not out:
        raise CorpusError(", ".join(os.fspath(p) for p in inputs) or "<none>", "no input given")
    return out


def _find_uci_vocab(docword: str, vocab: str | None) -> str:
    d, name = os.path.split(docword)
    stem = name[len("docword."):] if name.startswith("docword.") else name
    for suffix in (".gz", ".txt"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    candidate = os.path.join(d, f"vocab.{stem}.txt")
    if os.path.isfile(candidate):
        return candidate
    if vocab is not None:
        if not os.path.isfile(vocab):
            raise CorpusError(vocab, "vocabulary file not found")
        return os.path.abspath(vocab)
    raise CorpusError(
        docword, f"UCI vocabulary not found: expected {candidate} beside it, or pass vocab=/--vocab"
    )


# ----------------------------------------------------------------------------- byte streams


def _open_stream(path: str) -> BinaryIO:
    kind = _compression(path)
    if kind == "gzip":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if kind == "bz2":
        import bz2

        return bz2.open(path, "rb")  # type: ignore[return-value]
    if kind == "xz":
        import lzma

        return lzma.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _read_range(path: str, start: int, stop: int, index: str | None = None,
                digest: str | None = None) -> bytes:
    """Bytes [start, stop) of the (decompressed) content of ``path``; a gzip file with its
    seek-point ``index`` (see :mod:`streamtopic._gzindex`; ``digest``: its SHA-256 when it
    was planned) is entered near ``start``, else it is decompressed from its start."""
    if index is not None:
        got = _gzindex.read_range(path, index, start, stop, digest)
        if got is not None:
            return got
    try:
        with _open_stream(path) as fh:
            if not fh.seekable() or _compression(path) is not None:
                remaining = start
                while remaining > 0:
                    got = fh.read(min(remaining, 2**24))
                    if not got:
                        break
                    remaining -= len(got)
            else:
                fh.seek(start)
            return fh.read(stop - start)
    except (OSError, EOFError, zlib.error) as exc:
        raise CorpusError(path, f"cannot read: {exc}", offset=start) from exc


def line_of_offset(path: str, offset: int) -> int:
    """1-based line number of the byte at ``offset`` (error path only)."""
    n = 1
    with _open_stream(path) as fh:
        pos = 0
        while pos < offset:
            block = fh.read(min(2**22, offset - pos))
            if not block:
                break
            n += block.count(b"\n")
            pos += len(block)
    return n


def _line_splits(
    path: str, start: int, blocksize: int, key: Any = None, spacing: int | None = None,
    limit: int | None = None,
) -> tuple[list[int], list[int], int, str | None]:
    """Record-aligned split offsets of the content from ``start`` on.

    A record is a line, or with ``key`` (a function of a line) a run of consecutive lines with
    equal key (a UCI document). Returns (offsets, first line number of each range, total size,
    seek-point index file or None). Plain files are split with seeks; gzip files with one
    streaming scan, which also builds their index of seek points when ``spacing`` is given.
    """
    if not _is_gzip(path):
        return (*_seek_splits(path, start, blocksize, key, limit), None)
    return _gzip_splits(path, start, blocksize, key, spacing, limit)


def _seek_splits(
    path: str, start: int, blocksize: int, key: Any, limit: int | None = None
) -> tuple[list[int], list[int], int]:
    """:func:`_line_splits` of a plain file, by seeks (line numbers unknown: none). The line
    holding a split point is read at most ``limit`` bytes on (see
    :func:`~streamtopic.limits.max_line_bytes`): a longer one is refused."""
    limit = _max_line_bytes(limit)
    size = os.path.getsize(path)
    offsets = [start]
    with open(path, "rb") as fh:
        target = start + blocksize
        while target < size:
            fh.seek(target - 1)
            rest = fh.readline(limit + 1)  # finish the line holding byte target-1
            if len(rest) > limit and not rest.endswith(b"\n"):
                raise CorpusError(path, too_long("a line", len(rest), limit, exact=False),
                                  offset=target - 1)
            pos = fh.tell()
            if key is not None and pos < size:
                pos = _skip_same_key(fh, path, pos, start, key)
            if pos >= size:
                break
            offsets.append(pos)
            target = max(pos, target) + blocksize
    offsets.append(size)
    return offsets, [], size


def _gzip_splits(
    path: str, start: int, blocksize: int, key: Any, spacing: int | None = None,
    limit: int | None = None,
) -> tuple[list[int], list[int], int, str | None]:
    """:func:`_line_splits` of a gzip file: one streaming scan over the decompressed data, in
    large blocks; Python only looks at the lines around each split point. With ``spacing``,
    the scan records a seek point every ``spacing`` bytes and saves them as the file's index
    (:mod:`streamtopic._gzindex`). A line longer than ``limit`` bytes (default
    :func:`~streamtopic.limits.max_line_bytes`) is refused as soon as the scan has read that
    much of it (a gzip bomb of one endless line never fills the memory)."""
    limit = _max_line_bytes(limit)
    line_start = 0  # decompressed offset where the current line starts
    offsets = [start]
    lines: list[int] = []
    pos = 0  # decompressed offset of buf[0]
    lineno = 1  # line number of buf[0]
    next_target = start + blocksize
    buf = b""
    index = None
    try:
        opened = gzip.open(path, "rb") if spacing is None else _gzindex.open_scan(path, spacing)
        with opened as fh:
            while True:
                block = fh.read(2**22)
                nl = block.rfind(b"\n")
                if nl >= 0:
                    line_start = pos + len(buf) + nl + 1
                buf += block
                if pos + len(buf) - line_start > limit:
                    raise CorpusError(path, too_long("a line", pos + len(buf) - line_start,
                                                     limit, exact=False), offset=line_start)
                if not lines and pos + len(buf) > start:
                    lines.append(lineno + buf.count(b"\n", 0, start - pos))
                end = pos + len(buf)
                while end > next_target + 1 or (not block and end > next_target):
                    cut = _split_in_buffer(buf, next_target - pos, key, final=not block)
                    if cut is None:
                        break  # need more data to decide
                    if cut >= len(buf):
                        next_target = end + 1
                        break
                    offsets.append(pos + cut)
                    lines.append(lineno + buf.count(b"\n", 0, cut))
                    next_target = pos + cut + blocksize
                if not block:
                    total = end
                    break
                keep_from = _tail_start(buf, next_target - pos)
                if keep_from > 0:
                    lineno += buf.count(b"\n", 0, keep_from)
                    pos += keep_from
                    buf = buf[keep_from:]
            if spacing is not None:
                _gzindex.check_complete(path, total)
                index = _gzindex.save(fh, path)
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        raise CorpusError(path, f"cannot decompress gzip data: {exc}", offset=pos) from exc
    if not lines:
        lines.append(lineno)
    offsets.append(total)
    return offsets, lines, total, index


def _tail_start(buf: bytes, target: int) -> int:
    """Where the part of ``buf`` to keep for the next split starts: the last line start
    before ``target``, keeping at least the last 8 KiB (0: keep all)."""
    keep_from = buf.rfind(b"\n", 0, max(0, min(len(buf), target) - 1))
    keep_from = max(0, keep_from + 1) if keep_from >= 0 else 0
    keep_from = min(keep_from, max(0, len(buf) - 8192))
    if keep_from > 0:
        keep_from = buf.rfind(b"\n", 0, keep_from) + 1
    return keep_from


def _split_in_buffer(buf: bytes, target: int, key: Any, final: bool) -> int | None:
    """Offset in ``buf`` of the first record start at or after ``target`` (None: undecided)."""
    nl = buf.find(b"\n", max(0, target - 1))
    if nl < 0:
        return len(buf) if final else None
    start = nl + 1 if target > 0 else 0
    if target > 0 and buf[target - 1 : target] == b"\n":
        start = target
    if key is None:
        return start
    prev_start = buf.rfind(b"\n", 0, max(0, start - 1)) + 1
    k_prev = key(buf[prev_start:start])
    while start < len(buf):
        end = buf.find(b"\n", start)
        if end < 0:
            return len(buf) if final else None
        if key(buf[start:end + 1]) != k_prev:
            return start
        start = end + 1
    return len(buf) if final else None


def _skip_same_key(fh: BinaryIO, path: str, pos: int, floor: int, key: Any) -> int:
    """From line start ``pos``, move to the first line whose key differs from the line before."""
    back = min(4096, pos - floor)
    fh.seek(pos - back)
    prev_lines = fh.read(back).split(b"\n")
    prev = prev_lines[-2] if len(prev_lines) >= 2 else b""
    k_prev = key(prev)
    fh.seek(pos)
    while True:
        line = fh.readline()
        if not line:
            return fh.tell()
        if key(line) != k_prev:
            return pos
        pos += len(line)


def _decode(raw: bytes) -> tuple[str, int]:
    """Decode UTF-8, replacing undecodable bytes; return (text, bytes replaced)."""
    try:
        return raw.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        good = len(raw.decode("utf-8", errors="ignore").encode("utf-8"))
        return text, len(raw) - good


# ----------------------------------------------------------------------------- chunk building


class ChunkBuilder:
    """Accumulate tokenised documents into DocChunks of at most ``CHUNK_DOCS`` documents.

    With a fixed ``vocabulary`` (V words), each document's tokens are counted straight onto
    it: the chunk's terms are the V words, tokens outside them (stop words included) are
    dropped, and the input lengths are those of the text as usual.

    A tokenizer built from options (no analyzer, the default or the legacy pattern) runs in
    the compiled kernel (:class:`~streamtopic._tokenize.BatchTokenizer`): the documents of a
    chunk are queued, ASCII ones as raw bytes, and tokenised and counted in one call when
    the chunk is full; the chunks are the same as the Python path's. Where the kernels are
    not compiled yet (:func:`~streamtopic._tokenize.kernels_ready`: the first ingest on a
    machine), the Python path runs while another process compiles them, and builders made
    afterwards use them.
    """

    def __init__(self, source: str, first_doc: int, tokenizer: Tokenizer,
                 vocabulary: tuple[str, ...] | None = None) -> None:
        self.source = source
        self.next_doc = first_doc
        self.tokenizer = tokenizer
        self.vocabulary = vocabulary
        # without the compiled kernels (a first ingest on a machine: numba's cache lacks
        # them), Python tokenises while another process compiles them
        self.compiled = tokenizer.max_doc_tokens is not None or kernels_ready()
        self.kernel = (BatchTokenizer(tokenizer, vocabulary)
                       if kernel_flags(tokenizer) is not None and self.compiled else None)
        if tokenizer.max_doc_tokens is not None and self.kernel is None:
            raise ValueError("max_doc_tokens cuts documents in the compiled tokenizer, which "
                             "takes the built-in token patterns without an analyzer")
        self.fixed = (None if vocabulary is None or self.kernel is not None
                      else _fixed_index(vocabulary, tokenizer))
        self.chunks: list[DocChunk] = []
        self.pending_time: int | None = None
        self._reset()

    def _reset(self) -> None:
        self.index: dict[str, int] = {}
        self.ids: list[int] = []
        self.indptr: list[int] = [0]
        self.lengths: list[int] = []
        self.replaced = 0
        self.n_docs = 0
        self.times: list[int] = []

    def stamp_next(self, seconds: int) -> None:
        """The time of the document added next (seconds since 1970 UTC): a chunk's
        documents are stamped all or none."""
        self.pending_time = int(seconds)

    def add_bytes(self, raw: bytes) -> None:
        """Decode (UTF-8, see :func:`_decode`), tokenise and add a document."""
        if self.kernel is not None and raw.isascii():
            self.kernel.add_ascii(raw)
            self._end_document(0, 0)
            return
        self.add_text(*_decode(raw))

    def add_text(self, text: str, replaced: int = 0) -> None:
        """Tokenise and add a document."""
        if self.kernel is not None:
            self.kernel.add_text(text)
            self._end_document(0, replaced)
        elif self.fixed is None:
            self._add_tokens(*self.tokenizer.tokens_and_length(text), replaced=replaced)
        else:
            self.add_matches(self.tokenizer.matches(text), replaced)

    def add_matches(self, matches: list[str], replaced: int = 0) -> None:
        """Add a document given as its tokens before stop words are removed."""
        if self.kernel is not None:
            self.kernel.add_tokens(matches)
            self._end_document(0, replaced)
        elif self.fixed is None:
            stops = self.tokenizer.stop_word_set
            self._add_tokens([t for t in matches if t not in stops], len(matches), replaced)
        else:
            self.ids.extend(map(self.fixed.get, matches, repeat(-1)))
            self._end_document(len(matches), replaced)

    def _add_tokens(self, tokens: list[str], length: int, replaced: int = 0) -> None:
        """Python path: add a document's kept ``tokens`` and its input length."""
        index = self.index
        self.ids.extend([index.setdefault(t, len(index)) for t in tokens])
        self._end_document(length, replaced)

    def _end_document(self, length: int, replaced: int) -> None:
        if self.pending_time is not None:
            self.times.append(self.pending_time)
            self.pending_time = None
        if self.kernel is None:
            self.indptr.append(len(self.ids))
            self.lengths.append(length)
        self.replaced += replaced
        self.n_docs += 1
        if self.n_docs >= CHUNK_DOCS:
            self.flush()

    def _counted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, Sequence[str]]:
        """The chunk's token ids (n_kept,) int32, indptr (n_docs + 1,) int64, input lengths
        (n_docs,) int64 and terms; with ``max_doc_tokens``, each document cut into windows
        of that many matches (the documents then are the windows)."""
        if self.kernel is not None:
            batch = self.kernel.run()
            if self.tokenizer.max_doc_tokens is not None:
                batch = batch.windows(self.tokenizer.max_doc_tokens)
            return batch.ids, batch.indptr, batch.lengths, batch.terms
        ids = np.asarray(self.ids, dtype=np.int32)
        indptr = np.asarray(self.indptr, dtype=np.int64)
        lengths = np.asarray(self.lengths, dtype=np.int64)
        if self.vocabulary is None:
            return ids, indptr, lengths, list(self.index)
        keep = ids >= 0
        return ids[keep], np.r_[0, np.cumsum(keep)][indptr], lengths, self.vocabulary

    def flush(self) -> None:
        n = self.n_docs
        if n == 0:
            return
        times = np.asarray(self.times, dtype=np.int64) if self.times else None
        ids, indptr, lengths, terms = self._counted()
        m = count_matrix(ids, indptr, len(terms), self.compiled)
        if times is not None and times.size != m.shape[0]:
            raise ValueError("a time field stamps whole documents: read it without "
                             "max_doc_tokens (windows) and stamp every document")
        self.chunks.append(DocChunk(m, terms, self.source, self.next_doc, self.replaced,
                                    lengths=lengths, times=times))
        self.next_doc += m.shape[0]  # the documents, or their windows
        self._reset()


@lru_cache(maxsize=4)
def _fixed_index(vocabulary: tuple[str, ...], tokenizer: Tokenizer) -> dict[str, int]:
    """Word → column of a fixed vocabulary, without the tokenizer's stop words."""
    stops = tokenizer.stop_word_set
    return {w: i for i, w in enumerate(vocabulary) if w not in stops}


def _read_text_part(part: _PartitionPlan, tokenizer: Tokenizer,
                    vocabulary: tuple[str, ...] | None = None) -> list[DocChunk]:
    raw = _read_range(part.source.path, part.start, part.stop, part.opt("gzip_index"),
                      part.opt("gzip_index_sha256"))
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    builder = ChunkBuilder(part.source.path, part.first_doc, tokenizer, vocabulary)
    jsonl = part.source.format == "jsonl"
    field_name = part.opt("text_field", "text")
    time_field = part.opt("time_field")
    offset = part.start
    _check_line_lengths(part, lines)
    for i, line in enumerate(lines):
        if not jsonl:
            builder.add_bytes(line)
            continue
        text, replaced = _decode(line)
        if text.strip():
            obj = _json_object(part, text, offset, i)
            doc = _json_text(part, obj, field_name, offset, i)
            if time_field is not None:
                builder.stamp_next(_json_time(part, obj, time_field, offset, i))
            builder.add_text(doc, replaced)
        offset += len(line) + 1
    builder.flush()
    return builder.chunks


def _check_line_lengths(part: _PartitionPlan, lines: list[bytes]) -> None:
    """Refuse a partition's line longer than the limit (``max_line_bytes``: the planning
    scan of a gzip file saw every line; that of a plain file only those at split points)."""
    limit = _max_line_bytes(part.opt("max_line_bytes"))
    if len(lines) and max(map(len, lines)) > limit:
        i = next(j for j, line in enumerate(lines) if len(line) > limit)
        offset = part.start + sum(len(x) + 1 for x in lines[:i])
        line = part.first_line + i if part.first_line is not None else None
        raise CorpusError(part.source.path, too_long("a line", len(lines[i]), limit),
                          line=line, offset=offset)


def _line_number(part: _PartitionPlan, offset: int, i: int) -> int:
    """The line number of line ``i`` of a partition, at byte ``offset`` of its source."""
    if part.first_line is not None:
        return part.first_line + i
    return line_of_offset(part.source.path, offset)


def _json_object(part: _PartitionPlan, text: str, offset: int, i: int) -> dict[str, Any]:
    """The JSON object of a JSON Lines record (line ``i`` of the partition)."""
    try:
        obj = json_record(text)
    except json.JSONDecodeError as exc:
        raise CorpusError(part.source.path, f"invalid JSON: {exc.msg}",
                          line=_line_number(part, offset, i)) from None
    except InputBoundError as exc:
        raise CorpusError(part.source.path, str(exc),
                          line=_line_number(part, offset, i)) from None
    if not isinstance(obj, dict):
        raise CorpusError(part.source.path, "a JSON Lines record must be an object",
                          line=_line_number(part, offset, i))
    return obj


def _json_text(part: _PartitionPlan, obj: dict[str, Any], field_name: str, offset: int,
               i: int) -> str:
    value = obj.get(field_name)
    if not isinstance(value, str):
        if field_name not in obj:
            what = "missing"
        elif value is None:
            what = "null"
        else:
            what = f"not a string ({type(value).__name__})"
        raise CorpusError(part.source.path, f"text field {field_name!r} is {what}",
                          line=_line_number(part, offset, i))
    return value


def _json_time(part: _PartitionPlan, obj: dict[str, Any], field_name: str, offset: int,
               i: int) -> int:
    """The record's time field read by :func:`~streamtopic._dates.parse_time`."""
    if field_name not in obj:
        raise CorpusError(part.source.path, f"time field {field_name!r} is missing",
                          line=_line_number(part, offset, i))
    try:
        return parse_time(obj[field_name])
    except ValueError as exc:
        raise CorpusError(part.source.path, f"time field {field_name!r}: {exc}",
                          line=_line_number(part, offset, i)) from None


_HEADER_END = re.compile(rb"\A\r?\n|\n\r?\n")  # the first empty line (LF or CRLF)
# Header fields ("Name: value", the name printable ASCII without space or colon), mbox "From "
# lines and continuation lines (starting with a blank), at least one of them a field.
_HEADER_BLOCK = re.compile(
    rb"(?:[ \t][^\n]*\n)*(?:[!-9;-~]+:|From )[^\n]*(?:\n(?:[!-9;-~]+:|From |[ \t])[^\n]*)*"
)
_SUBJECT = re.compile(rb"(?im)^Subject:[ \t]*(?:re:[ \t]*)*([^\n]*(?:\n[ \t][^\n]*)*)")


def _strip_header_block(raw: bytes, keep_subject: bool) -> bytes:
    """``raw`` without its leading header block: everything up to and including the first
    empty line, if every line before it belongs to a header (see the module docstring);
    with ``keep_subject``, the Subject's text (without "Re:") comes first in its place.
    A file without such a block is returned whole."""
    m = _HEADER_END.search(raw)
    if m is None or not _HEADER_BLOCK.fullmatch(raw, 0, m.start()):
        return raw
    body = raw[m.end():]
    subject = _SUBJECT.search(raw, 0, m.start()) if keep_subject else None
    return subject.group(1) + b"\n" + body if subject else body


def header_time(raw: bytes, name: str) -> int | None:
    """The time in the header field ``name`` (``Name: value``, any case) of a document's
    leading header block (see :func:`_strip_header_block`), read by
    :func:`~streamtopic._dates.parse_time`; None when the document has no such field.

    Raises
    ------
    ValueError
        For a field whose value is not a date.
    """
    m = _HEADER_END.search(raw)
    end = m.start() if m is not None else len(raw)
    if m is None or not _HEADER_BLOCK.fullmatch(raw, 0, end):
        return None
    pattern = re.compile(rb"(?im)^" + re.escape(name.encode("utf-8")) + rb":[ \t]*([^\n]*)")
    field = pattern.search(raw, 0, end)
    if field is None:
        return None
    return parse_time(field.group(1).decode("utf-8", "replace").strip())


def _file_time(raw: bytes, name: str, path: str, mtime: float | None,
               member: str | None = None) -> int:
    """A one-document file's time: its modification time (``name`` 'mtime'), else its
    header field ``name`` (:func:`header_time`). Errors name ``path`` and, in an archive,
    the ``member``."""
    where = f"member {member!r}: " if member is not None else ""
    if name == "mtime":
        if mtime is None:
            raise CorpusError(path, f"{where}time field 'mtime': the members of an archive "
                                    "carry no modification time here; name a date header")
        return int(mtime)
    try:
        when = header_time(raw, name)
    except ValueError as exc:
        raise CorpusError(path, f"{where}time field {name!r}: {exc}") from None
    if when is None:
        raise CorpusError(path, f"{where}time field {name!r}: no '{name}:' line in the "
                                "document's header block")
    return when


def _read_files_part(part: _PartitionPlan, tokenizer: Tokenizer,
                     vocabulary: tuple[str, ...] | None = None) -> list[DocChunk]:
    src = part.source
    builder = ChunkBuilder(src.path, part.first_doc, tokenizer, vocabulary)
    time_field = part.opt("time_field")
    if os.path.isdir(src.path):
        names = _list_tree(src.path)[part.start : part.stop]
        limit = _max_line_bytes(part.opt("max_line_bytes"))
        for rel in names:
            with open(os.path.join(src.path, rel), "rb") as fh:
                raw = fh.read(limit + 1)
                mtime = os.fstat(fh.fileno()).st_mtime
            if len(raw) > limit:  # grown since the planning
                raise CorpusError(os.path.join(src.path, rel),
                                  too_long("a document", len(raw), limit))
            when = (None if time_field is None
                    else _file_time(raw, time_field, os.path.join(src.path, rel), mtime))
            if src.strip_headers:
                raw = _strip_header_block(raw, src.keep_subject)
            if when is not None:
                builder.stamp_next(when)
            builder.add_bytes(raw)
    else:
        members: tuple[tuple[int, int], ...] = part.opt("members", ())
        if members:
            base = members[0][0]
            raw = _read_range(src.path, base, members[-1][0] + members[-1][1],
                              part.opt("gzip_index"), part.opt("gzip_index_sha256"))
            names = (document_names(src) or [])[part.start : part.stop] \
                if time_field is not None else []
            for j, (off, size) in enumerate(members):
                doc = raw[off - base : off - base + size]
                when = (None if time_field is None else _file_time(
                    doc, time_field, src.path, None,
                    names[j] if j < len(names) else str(part.start + j)))
                if src.strip_headers:
                    doc = _strip_header_block(doc, src.keep_subject)
                if when is not None:
                    builder.stamp_next(when)
                builder.add_bytes(doc)
    builder.flush()
    return builder.chunks


# --- UCI


def _file_id(path: str) -> tuple[str, int, int]:
    st = os.stat(path)
    return path, st.st_mtime_ns, st.st_size


def uci_header(path: str) -> tuple[int, int, int, int]:
    """(D, W, NNZ, byte offset of the first entry)."""
    return _uci_header_cached(*_file_id(path))


@lru_cache(maxsize=16)
def _uci_header_cached(path: str, mtime_ns: int, size: int) -> tuple[int, int, int, int]:
    try:
        with _open_stream(path) as fh:
            lines = [fh.readline() for _ in range(3)]
    except (OSError, EOFError, zlib.error) as exc:
        raise CorpusError(path, f"cannot read: {exc}") from exc
    names = ("D (number of documents)", "W (vocabulary size)", "NNZ (number of entries)")
    values = []
    for i, (line, name) in enumerate(zip(lines, names, strict=True), start=1):
        s = line.strip()
        if not s:
            raise CorpusError(path, f"UCI header: expected {name}, found end of file", line=i)
        try:
            v = int(s)
        except ValueError:
            raise CorpusError(
                path, f"UCI header: expected {name} as an integer, found {s[:40]!r}", line=i
            ) from None
        if v < 0:
            raise CorpusError(path, f"UCI header: {name} is negative", line=i)
        values.append(v)
    return values[0], values[1], values[2], sum(len(x) for x in lines)


def _source_vocab(key: str) -> tuple[str, ...]:
    """The id -> term list of a source vocabulary (``uci:PATH``, ``hdf5:PATH``, or a
    store's first V words, ``store:UID:V:PATH``); cached per process while the file is
    unchanged (a store's first V words never change)."""
    kind, path = key.split(":", 1)
    if kind == "store":
        uid, V, root = path.split(":", 2)
        return _store_vocab(root, uid, int(V))
    return _source_vocab_cached(kind, *_file_id(path))


def source_vocabulary(key: str) -> tuple[str, ...]:
    """The words of the source vocabulary ``key`` (a :class:`DocChunk`'s ``vocab_key``),
    by id."""
    return _source_vocab(key)


@lru_cache(maxsize=4)
def _store_vocab(root: str, uid: str, V: int) -> tuple[str, ...]:
    import zarr

    meta = zarr.open_group(root, mode="r").attrs.get("streamtopic", {})
    if not isinstance(meta, dict) or meta.get("uid") != uid:
        raise CorpusError(root, "the store whose cached documents these are was replaced")
    words = np.asarray(zarr.open_array(store=root, path="vocab", mode="r")[:V])
    return tuple(str(t) for t in words)


@lru_cache(maxsize=16)
def _source_vocab_cached(kind: str, path: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    if kind == "uci":
        return tuple(read_vocab_file(path))
    import h5py

    try:
        with h5py.File(path, "r") as f:
            words = _h5_strings(f["vocab"][:])
        check_vocabulary(words)
    except (InputBoundError, UnicodeDecodeError) as exc:
        raise CorpusError(path, str(exc) if isinstance(exc, InputBoundError)
                          else f"dataset 'vocab': not UTF-8 ({exc.reason})") from None
    return tuple(words)


def _h5_strings(arr: np.ndarray) -> list[str]:
    return [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in arr]


def _uci_key(line: bytes) -> bytes:
    return line.split(None, 1)[0] if line.strip() else b""


def _read_uci_part(part: _PartitionPlan) -> list[DocChunk]:
    path = part.source.path
    D, W, NNZ, _ = uci_header(path)
    raw = _read_range(path, part.start, part.stop, part.opt("gzip_index"),
                      part.opt("gzip_index_sha256"))
    arr = _parse_ints(raw)
    n_lines = raw.count(b"\n") + (0 if raw.endswith(b"\n") or not raw else 1)
    if arr is None or arr.size != 3 * n_lines:
        _uci_check_lines(part, raw)  # raises on a malformed line; blank lines are allowed
        arr = np.array(raw.split(), dtype=np.int64)
    entries = arr.reshape(-1, 3)
    doc, word, cnt = entries[:, 0], entries[:, 1], entries[:, 2]
    _uci_check_entries(part, raw, doc, word, cnt, D, W)
    vocab = _source_vocab(f"uci:{part.source.vocab_path}")
    if len(vocab) != W:
        raise CorpusError(
            part.source.vocab_path or path,
            f"vocabulary has {len(vocab)} terms but the header of {path} declares W={W}",
        )
    chunks: list[DocChunk] = []
    if doc.size == 0:
        return chunks
    line_starts = _entry_line_starts(raw, doc.size)
    # documents (docIDs) in this range, in order; each becomes a row
    starts = np.flatnonzero(np.r_[True, doc[1:] != doc[:-1]])
    doc_ids = doc[starts]
    key = f"uci:{part.source.vocab_path}"
    for c0 in range(0, len(starts), CHUNK_DOCS):
        c1 = min(c0 + CHUNK_DOCS, len(starts))
        e0 = starts[c0]
        e1 = starts[c1] if c1 < len(starts) else doc.size
        w = word[e0:e1] - 1
        uniq, local = np.unique(w, return_inverse=True)
        row = np.repeat(np.arange(c1 - c0), np.diff(np.r_[starts[c0:c1], e1]))
        m = sp.csr_matrix(
            (cnt[e0:e1].astype(np.int32), (row, local.astype(np.int32))),
            shape=(c1 - c0, len(uniq)),
        )
        m.sum_duplicates()
        chunk = DocChunk(
            m, [vocab[i] for i in uniq.tolist()], path, int(doc_ids[c0]) - 1, 0, key, uniq,
            n_records=int(e1 - e0), last_doc=int(doc_ids[c1 - 1]) - 1,
            offset=part.start + int(line_starts[e0]),
        )
        chunks.append(chunk)
    return chunks


def _uci_check_entries(part: _PartitionPlan, raw: bytes, doc: np.ndarray, word: np.ndarray,
                       cnt: np.ndarray, D: int, W: int) -> None:
    """Raise :class:`CorpusError` at the first entry (n,) out of range (docID in 1..D,
    wordID in 1..W, count in 1..``MAX_COUNT``) or out of docID order."""
    checks = [((doc < 1) | (doc > D), f"docID out of range 1..{D} (header D)"),
              ((word < 1) | (word > W), f"wordID out of range 1..{W} (header W)"),
              (cnt < 1, "count must be a positive integer"),
              (cnt > MAX_COUNT, f"count above {MAX_COUNT:,}")]
    for bad, message in checks:
        if bad.any():
            _uci_raise_at(part, raw, int(np.argmax(bad)), message)
    if doc.size > 1:
        dec = np.diff(doc) < 0
        if dec.any():
            _uci_raise_at(part, raw, int(np.argmax(dec)) + 1,
                          "entries must be sorted by docID (documents contiguous)")


def _entry_line_starts(raw: bytes, n_entries: int) -> np.ndarray:
    """Byte offset (within ``raw``) of each of the ``n_entries`` non-blank lines."""
    nl = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 10)
    starts = np.r_[0, nl + 1]
    ends = np.r_[nl, len(raw)]
    if raw.endswith(b"\n"):
        starts, ends = starts[:-1], ends[:-1]
    if starts.size == n_entries:
        return cast("np.ndarray", starts)
    bounds = zip(starts.tolist(), ends.tolist(), strict=True)
    keep = np.array([bool(raw[a:b].strip()) for a, b in bounds])
    return cast("np.ndarray", starts[keep])


_DIGITS_AND_SPACE = re.compile(rb"[0-9 \t\r\n\f\v]*\Z")
#: A number of more than 18 digits: past int64's range, or near it (numpy's parser would
#: saturate it); far past any count, document or word id
_LONG_NUMBER = re.compile(rb"[0-9]{19}")


def _parse_ints(raw: bytes) -> np.ndarray | None:
    """All whitespace-separated non-negative integers of ``raw``, or None if anything else is
    there. The bytes are checked first (a C regex), so that numpy's parser never meets
    unmatched data: its warning would need ``warnings.catch_warnings``, which is not safe in
    threads."""
    if not raw.strip():
        return np.zeros(0, np.int64)
    if _DIGITS_AND_SPACE.match(raw) is None or _LONG_NUMBER.search(raw) is not None:
        return None
    try:
        return np.fromstring(raw, dtype=np.int64, sep=" ")
    except ValueError:
        return None


def _uci_raise_at(part: _PartitionPlan, raw: bytes, entry: int, message: str) -> None:
    """Raise for the ``entry``-th non-blank line of ``raw``, naming its line number."""
    lines = raw.split(b"\n")
    nonblank = [j for j, line in enumerate(lines) if line.strip()]
    i = nonblank[entry] if 0 <= entry < len(nonblank) else len(lines) - 1
    offset = part.start + sum(len(x) + 1 for x in lines[:i])
    if part.first_line is not None:
        lineno = part.first_line + i
    else:
        lineno = line_of_offset(part.source.path, offset)
    raise CorpusError(part.source.path, f"{message}: {lines[i][:60]!r}", line=lineno)


def _uci_check_lines(part: _PartitionPlan, raw: bytes) -> None:
    k = -1
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        k += 1
        fields = line.split()
        if len(fields) != 3 or not all(f.isdigit() for f in fields):
            _uci_raise_at(
                part, raw, k, "expected three non-negative integers 'docID wordID count'"
            )
        if any(len(f.lstrip(b"0")) > 18 for f in fields):
            _uci_raise_at(part, raw, k, f"number too large (a count is at most {MAX_COUNT:,})")


# --- HDF5


def _compact_ids(idx: np.ndarray, n_terms: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(idx, return_inverse=True)`` for ids in ``0:n_terms``: the ids present,
    sorted (U,), and each entry's position among them (as ``idx``). By a presence table, in
    linear time, when the vocabulary is not much larger than the chunk (6× faster than
    sorting a chunk of 2,048 documents of 250 words)."""
    if n_terms > 8 * idx.size + 2**16:
        uniq, local = np.unique(idx, return_inverse=True)
        return uniq, local.reshape(idx.shape)
    present = np.zeros(n_terms, dtype=bool)
    present[idx] = True
    uniq = np.flatnonzero(present)
    rank = np.empty(n_terms, dtype=np.int64)
    rank[uniq] = np.arange(uniq.size)
    return uniq, rank[idx]


def _check_time_column(path: str, f: Any, name: str, n_rows: int) -> None:
    """Refuse an HDF5 corpus without a one-value-per-row dataset ``name``."""
    column = f.get(name)
    if column is None or not hasattr(column, "shape") or column.shape != (n_rows,):
        found = "missing" if column is None else f"of shape {getattr(column, 'shape', None)}"
        raise CorpusError(path, f"time column {name!r} is {found}; expected a dataset of "
                                f"{n_rows:,} values, one per row")


def _read_hdf5_part(part: _PartitionPlan) -> list[DocChunk]:
    import h5py

    path = part.source.path
    key = f"hdf5:{path}"
    vocab = _source_vocab(key)
    chunks: list[DocChunk] = []
    time_field = part.opt("time_field")
    with h5py.File(path, "r") as f:
        try:
            n_rows, nnz = check_hdf5_corpus(f)
        except InputBoundError as exc:
            raise CorpusError(path, str(exc)) from None
        if time_field is not None:
            _check_time_column(path, f, time_field, n_rows)
        indptr_ds, indices_ds, data_ds = f["indptr"], f["indices"], f["data"]
        for r0 in range(part.start, part.stop, CHUNK_DOCS):
            r1 = min(r0 + CHUNK_DOCS, part.stop)
            ptr = indptr_ds[r0 : r1 + 1].astype(np.int64)
            if np.any(np.diff(ptr) < 0) or ptr[0] < 0 or ptr[-1] > nnz:
                raise CorpusError(path, f"dataset 'indptr': decreasing or out of range "
                                        f"0..{nnz:,} within rows {r0}..{r1}")
            idx = indices_ds[ptr[0] : ptr[-1]]
            dat = data_ds[ptr[0] : ptr[-1]]
            if idx.size and (idx.min() < 0 or idx.max() >= len(vocab)):
                raise CorpusError(
                    path, f"dataset 'indices': term index out of range 0..{len(vocab) - 1} "
                          f"in rows {r0}..{r1 - 1}"
                )
            bad = ~(dat >= 1) | ~(dat <= MAX_COUNT)  # zero, negative, NaN or too large
            if dat.dtype.kind == "f":
                bad |= dat != np.floor(dat)
            if bad.any():
                k = int(np.argmax(bad))
                row = r0 + int(np.searchsorted(ptr, ptr[0] + k, side="right")) - 1
                raise CorpusError(
                    path, f"dataset 'data', row {row} (entry {int(ptr[0]) + k}): count must be "
                    f"a positive integer (at most {MAX_COUNT:,}), found {dat[k].item()!r}"
                )
            uniq, local = _compact_ids(idx, len(vocab))
            m = sp.csr_matrix(
                (dat.astype(np.int32), local.astype(np.int32), ptr - ptr[0]),
                shape=(r1 - r0, len(uniq)),
            )
            m.sum_duplicates()
            times = (None if time_field is None
                     else _hdf5_times(path, f[time_field], r0, r1, time_field))
            chunks.append(DocChunk(m, [vocab[i] for i in uniq.tolist()], path, r0, 0, key, uniq,
                                   times=times))
    return chunks


def _hdf5_times(path: str, column: Any, r0: int, r1: int, name: str) -> np.ndarray:
    """Rows r0:r1 of an HDF5 corpus' time column ``name`` (one value per row: numbers or
    strings, read by :func:`~streamtopic._dates.parse_time`), as seconds (n,) int64."""
    values = column[r0:r1]
    out = np.empty(r1 - r0, dtype=np.int64)
    for j, v in enumerate(values.tolist()):
        try:
            out[j] = parse_time(v)
        except ValueError as exc:
            raise CorpusError(path, f"dataset {name!r}, row {r0 + j}: {exc}") from None
    return out


# --- the store's token cache (internal format "cache": see :mod:`streamtopic.doccache`)


def _read_cache_part(part: _PartitionPlan) -> list[DocChunk]:
    """A cached partition of a store as DocChunks over the store's words (``vocab_key``
    ``store:UID:V:PATH``), one source per chunk, at most ``CHUNK_DOCS`` documents each."""
    root, uid, V = part.opt("root"), part.opt("uid"), int(part.opt("V"))
    record = PartitionRecord.from_list(list(part.opt("record")))
    try:
        docs: CachedDocuments = read_partition(root, part.start, record, V)
    except DamagedCacheError as exc:
        raise DamagedCacheError(f"{exc}; the store is damaged (see `streamtopic verify`)"
                                ) from None
    key = f"store:{uid}:{V}:{root}"
    vocab = _source_vocab(key)
    names: tuple[str, ...] = part.opt("sources")
    chunks: list[DocChunk] = []
    row = 0
    for src, first, n in docs.runs.tolist():
        for r0 in range(0, n, CHUNK_DOCS):
            r1 = min(n, r0 + CHUNK_DOCS)
            H = docs.counts[row + r0 : row + r1]
            uniq, local = _compact_ids(H.indices, V)
            m = sp.csr_matrix((H.data, local.astype(np.int32), H.indptr), shape=(r1 - r0,
                                                                                 uniq.size))
            chunks.append(DocChunk(
                m, [vocab[i] for i in uniq.tolist()], names[src],
                first + r0 if first >= 0 else -1, 0, key, uniq,
                lengths=docs.lengths[row + r0 : row + r1]))
        row += n
    return chunks


def cached_corpus_parts(root: str, uid: str, V: int,
                        partitions: Sequence[Any]) -> tuple[list[Source], list[_PartitionPlan]]:
    """Sources and partitions reading a store's cached documents
    (``partitions``: its :class:`~streamtopic.store.CachedPartition` list), one source per
    version."""
    by_version: dict[int, list[Any]] = {}
    for p in partitions:
        by_version.setdefault(p.version, []).append(p)
    sources: list[Source] = []
    parts: list[_PartitionPlan] = []
    for v, group in by_version.items():
        src = Source(os.path.join(root, "versions", f"v{v:06d}", "D"), "cache",
                     sum(8 * p.record.nnz for p in group))
        sources.append(src)
        for p in group:
            names = tuple(s.path for s in p.sources)
            options = (("root", root), ("uid", uid), ("V", V),
                       ("record", tuple(p.record.as_list())), ("sources", names),
                       ("input", names[p.record.source] if names else None),
                       ("weight", 8 * p.record.nnz + 32 * p.record.n_docs))
            parts.append(_PartitionPlan(src, "cache", v, v + 1, 0, None, options))
    return sources, parts


def _read_part(part: _PartitionPlan, tokenizer: Tokenizer,
               vocabulary: tuple[str, ...] | None = None) -> list[DocChunk]:
    """A partition's documents; text is counted onto ``vocabulary`` when one is given (count
    inputs keep their own columns)."""
    fmt = part.source.format
    if fmt == "uci":
        return _read_uci_part(part)
    if fmt == "hdf5":
        return _read_hdf5_part(part)
    if fmt == "cache":
        return _read_cache_part(part)
    if fmt == "files":
        return _read_files_part(part, tokenizer, vocabulary)
    return _read_text_part(part, tokenizer, vocabulary)


# ----------------------------------------------------------------------------- planning


MAX_COMPRESSED_PARTITION = 64 * 2**20
COMPRESSED_MAX_PARTS = 8


def _compressed_blocksize(blocksize: int, decompressed: int) -> int:
    """Partition size for a compressed file read without seek points (bz2, xz, archives, and
    gzip when no index can be made: see :mod:`streamtopic._gzindex`).

    A compressed stream cannot be entered in the middle: a partition decompresses everything
    before its range. Few, larger partitions keep that waste to a few passes over the file
    (at most ``COMPRESSED_MAX_PARTS`` partitions unless they would exceed 64 MiB each). For
    corpora of many GB, shard the input or convert it to HDF5 (``streamtopic convert``).
    """
    per_part = decompressed // COMPRESSED_MAX_PARTS + 1
    return int(max(blocksize, min(MAX_COMPRESSED_PARTITION, per_part)))


def _gzip_size_estimate(path: str) -> int:
    """Decompressed size of a gzip file from its trailer (exact below 4 GiB, one member)."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        fh.seek(max(0, size - 4))
        isize = int.from_bytes(fh.read(4), "little")
    return isize if isize >= size else size * 4


def _plan_source(
    src: Source, blocksize: int, options: tuple[tuple[str, Any], ...]
) -> list[_PartitionPlan]:
    """The partitions of one input, each about ``blocksize`` bytes of decompressed content."""
    path = src.path
    kind = _compression(path) if not os.path.isdir(path) else None
    spacing = None
    if kind is not None and src.format != "files":
        estimate = _gzip_size_estimate(path) if kind == "gzip" else src.size * 5
        if kind == "gzip" and _gzindex.available():
            spacing = _gzindex.spacing_for(path, estimate)  # normal partitions, seek points
        else:
            blocksize = _compressed_blocksize(blocksize, estimate)
    if src.format == "uci":
        start = uci_header(path)[3]
        return _plan_byte_ranges(src, start, blocksize, options, _uci_key, first_doc=0,
                                 first_line=4, spacing=spacing)
    if src.format in ("text", "jsonl"):
        return _plan_byte_ranges(src, 0, blocksize, options, None, first_doc=-1, first_line=1,
                                 spacing=spacing)
    if src.format == "files":
        return _plan_members(src, blocksize, kind, options)
    if src.format == "hdf5":
        return _plan_rows(src, blocksize, options)
    raise ValueError(f"format={src.format!r}: expected one of {', '.join(FORMATS)}")


def _plan_byte_ranges(
    src: Source, start: int, blocksize: int, options: tuple[tuple[str, Any], ...], key: Any,
    *, first_doc: int, first_line: int, spacing: int | None = None,
) -> list[_PartitionPlan]:
    """Line-aligned byte ranges of a text or UCI input from ``start`` on (``key``: see
    :func:`_line_splits`); ``first_line`` is the line number at ``start`` when the split
    does not count lines. With ``spacing`` (a gzip input), the ranges read through the index
    of seek points the split builds, or, if it could not be saved, are merged into the few
    large ranges of a gzip read without one."""
    offsets, lines, total, index = _line_splits(src.path, start, blocksize, key, spacing,
                                                dict(options).get("max_line_bytes"))
    if index is not None:
        options = options + _index_options(index)
    elif spacing is not None:
        coarse = _compressed_blocksize(blocksize, total)
        offsets, lines = _coarsen(offsets, lines, coarse)
    first_lines: list[int | None] = list(lines) or [first_line] + [None] * (len(offsets) - 2)
    return [
        _PartitionPlan(src, "bytes", a, b, first_doc,
                       first_lines[i] if i < len(first_lines) else None, options)
        for i, (a, b) in enumerate(zip(offsets[:-1], offsets[1:], strict=True))
        if b > a
    ]


def _index_options(index: str) -> tuple[tuple[str, Any], ...]:
    """A partition's options that name a gzip index: its path and its SHA-256, which the
    reader checks before it trusts the index."""
    return (("gzip_index", index), ("gzip_index_sha256", _gzindex.file_digest(index)))


def _coarsen(offsets: list[int], lines: list[int], blocksize: int) -> tuple[list[int], list[int]]:
    """Keep the split offsets (and their line numbers) at least ``blocksize`` apart: the
    first, then each first one at or past the last kept plus ``blocksize``, and the end."""
    keep = [0]
    for i in range(1, len(offsets) - 1):
        if offsets[i] >= offsets[keep[-1]] + blocksize:
            keep.append(i)
    keep.append(len(offsets) - 1)
    return [offsets[i] for i in keep], [lines[i] for i in keep[:-1] if i < len(lines)]


def _plan_members(
    src: Source, blocksize: int, kind: str | None, options: tuple[tuple[str, Any], ...]
) -> list[_PartitionPlan]:
    """Runs of whole documents of a directory tree or archive (``kind``: its compression)."""
    members = _members(src)
    limit = _max_line_bytes(dict(options).get("max_line_bytes"))
    for i, (_, size) in enumerate(members):
        if size > limit:
            names = document_names(src)
            what = f"document {names[i]!r}" if names else f"document {i}"
            raise CorpusError(src.path, too_long(what, size, limit))
    index = None if os.path.isdir(src.path) else _archive_listing(src.path)[1]
    if index is not None:
        options = options + _index_options(index)
    elif kind is not None:
        blocksize = _compressed_blocksize(blocksize, sum(m[1] for m in members))
    parts = []
    lo, acc = 0, 0
    for i, (_, size) in enumerate(members):
        acc += size
        if acc >= blocksize or i - lo + 1 >= CHUNK_DOCS * 4 or i == len(members) - 1:
            opts = options
            if not os.path.isdir(src.path):
                opts = options + (("members", tuple(members[lo : i + 1])),)
            parts.append(_PartitionPlan(src, "members", lo, i + 1, lo, None, opts))
            lo, acc = i + 1, 0
    return parts


def _plan_rows(
    src: Source, blocksize: int, options: tuple[tuple[str, Any], ...]
) -> list[_PartitionPlan]:
    """Runs of rows of an HDF5 CSR corpus, about ``blocksize`` bytes of entries each."""
    import h5py

    path = src.path
    try:
        with h5py.File(path, "r") as f:
            n_rows, nnz = check_hdf5_corpus(f)
    except InputBoundError as exc:
        raise CorpusError(path, str(exc)) from None
    except OSError as exc:
        raise CorpusError(path, f"not a readable HDF5 file: {exc}") from exc
    _source_vocab(f"hdf5:{path}")  # a repeated or undecodable term: refused now
    if n_rows <= 0:
        return []
    per_row = max(nnz / n_rows, 1.0)
    rows = max(1, int(blocksize / 8 / per_row))
    return [
        _PartitionPlan(src, "rows", r, min(r + rows, n_rows), r, None, options)
        for r in range(0, n_rows, rows)
    ]


def _members(src: Source) -> list[tuple[int, int]]:
    """(offset, size) of each document: for an archive, the byte offset of the member's data
    in the decompressed tar stream, so a partition reads one byte range and never parses the
    headers before it; for a directory, (0, file size)."""
    if os.path.isdir(src.path):
        return [(0, os.path.getsize(os.path.join(src.path, r))) for r in _list_tree(src.path)]
    return [(off, size) for _, off, size in _archive_listing(src.path)[0]]


def _archive_listing(path: str) -> tuple[tuple[tuple[str, int, int], ...], str | None]:
    """(name, offset of the data in the decompressed tar stream, size) of each file member of
    an archive, and the seek-point index of a gzip archive (:mod:`streamtopic._gzindex`;
    None if it cannot be made), read once per process while the file is unchanged."""
    st = os.stat(path)
    try:
        return _archive_listing_cached(path, st.st_mtime_ns, st.st_size)
    except (tarfile.TarError, OSError, EOFError, zlib.error, ValueError) as exc:
        # ValueError: tarfile's, on a member size past any seek offset
        raise CorpusError(path, f"cannot read archive: {exc}") from exc


@lru_cache(maxsize=8)
def _archive_listing_cached(path: str, mtime_ns: int,
                            size: int) -> tuple[tuple[tuple[str, int, int], ...], str | None]:
    saved = _saved_listing(path)
    if saved is not None:
        return saved
    compression = _compression(path)
    if compression is None:  # most archives: straight from the headers, else tarfile below
        listing = plain_members(path)
        if listing is not None:
            return listing, None
    if compression != "gzip" or not _gzindex.available():
        with tarfile.open(path, mode="r:*") as tar:
            return tuple((m.name, m.offset_data, m.size) for m in tar if m.isfile()), None
    # one pass through a reader that records seek points: partitions then enter the
    # stream near their own members instead of inflating everything before them
    with _gzindex.open_scan(path, _gzindex.spacing_for(path, 4 * size)) as fh:
        with tarfile.open(fileobj=fh, mode="r|") as tar:
            listing = tuple((m.name, m.offset_data, m.size) for m in tar if m.isfile())
        while fh.read(2**22):
            pass
        index = _gzindex.save(fh, path)
    if index is not None:
        _save_listing(path, index, listing)
    return listing, index


_LISTING_SUFFIX = ".members.json"


def _listing_path(index: str) -> str:
    return index[: -len(_gzindex.SUFFIX)] + _LISTING_SUFFIX


def _saved_listing(path: str) -> tuple[tuple[tuple[str, int, int], ...], str] | None:
    """The member listing saved beside a gzip archive's index by an earlier reading of the
    same file (same size and mtime; see :mod:`streamtopic._gzindex`), if both are there,
    in a private directory, and both match the digests the listing records: the archive's
    SHA-256 and its index's. Listing a large archive parses every header, which costs more
    than reading it; a listing that does not match is made again."""
    index = _gzindex.index_path(path)
    listing = _listing_path(index)
    try:
        if not (os.path.exists(index) and _gzindex.private_dir(os.path.dirname(index))):
            return None
        with open(listing, encoding="utf-8") as fh:
            saved = json.load(fh)
        rows = tuple((str(n), int(o), int(z)) for n, o, z in saved["members"])
        if (saved["digest"] != _listing_digest(saved["input"], saved["index"], rows)
                or saved["input"] != _gzindex.file_digest(path)
                or saved["index"] != _gzindex.file_digest(index)):
            log.info("%s: the saved member listing %s does not match the archive; listing "
                     "it again", path, listing)
            return None
        return rows, index
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _listing_digest(input_digest: str, index_digest: str,
                    rows: tuple[tuple[str, int, int], ...]) -> str:
    """SHA-256 of a saved listing's content: the archive's and index's digests and every
    member's (name, offset, size)."""
    text = json.dumps([input_digest, index_digest, [list(r) for r in rows]])
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _save_listing(path: str, index: str, listing: tuple[tuple[str, int, int], ...]) -> None:
    """Keep ``listing`` beside the index (aside, then renamed; other listings of the same
    path removed), with the digests :func:`_saved_listing` checks. Not kept if it cannot be
    written."""
    target = _listing_path(index)
    try:
        digests = _gzindex.file_digest(path), _gzindex.file_digest(index)
        saved = {"input": digests[0], "index": digests[1], "members": listing,
                 "digest": _listing_digest(*digests, listing)}
        with written_aside(target) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            json.dump(saved, fh)
        prefix = os.path.basename(target).split("-")[0]
        root = os.path.dirname(target)
        for name in os.listdir(root):
            other = os.path.join(root, name)
            if name.startswith(prefix) and name.endswith(_LISTING_SUFFIX) and other != target:
                os.remove(other)
    except OSError as exc:
        log.info("%s: member listing not kept (%s)", path, exc)


def document_names(src: Source) -> list[str] | None:
    """The name of each document of a one-document-per-file source, in the order it is read
    (paths relative to the directory, or member names of the archive); None for other
    formats, whose documents are named by their position."""
    if src.format != "files":
        return None
    if os.path.isdir(src.path):
        return _list_tree(src.path)
    return [name for name, _, _ in _archive_listing(src.path)[0]]


# ----------------------------------------------------------------------------- the corpus


@dataclass
class Corpus:
    """A planned corpus: its sources and partitions, ready to become a ``dask.bag``.

    Build one with :func:`read_corpus`. Nothing is read until the bag is computed.
    """

    sources: list[Source]
    parts: list[_PartitionPlan]
    tokenizer: Tokenizer = field(default_factory=Tokenizer)
    #: the bag, read once and persisted (:meth:`cached`), or None
    cache: Any = field(default=None, repr=False, compare=False)
    #: text is counted straight onto these words (:meth:`onto`), or None
    vocabulary: tuple[str, ...] | None = field(default=None, repr=False)

    @property
    def npartitions(self) -> int:
        return len(self.parts)

    def to_bag(self) -> Any:
        """A ``dask.bag.Bag`` whose partitions are lists of :class:`DocChunk`."""
        import dask.bag as db

        if self.cache is not None:
            return self.cache
        return db.from_sequence(self.parts, npartitions=max(1, len(self.parts))).map_partitions(
            _read_parts, self.tokenizer, self.vocabulary
        )

    def onto(self, vocabulary: Sequence[str]) -> Corpus:
        """The same corpus with its text counted straight onto ``vocabulary`` (V words): the
        chunks of text documents have the V words as their terms, in order, and drop every
        other token (the tokenizer's stop words too); input lengths are unchanged. Count
        inputs (UCI, HDF5) keep their own columns. For inference with a model's words."""
        return replace(self, vocabulary=tuple(vocabulary), cache=None)

    def text_bytes(self) -> int:
        """About how many bytes of input reading the corpus decodes (compressed inputs
        count four times their size)."""
        return int(sum(s.size * (4 if os.path.isfile(s.path) and _compression(s.path) else 1)
                       for s in self.sources))

    def cached(self, progress: bool = False) -> Corpus:
        """The same corpus, read and tokenised once now and kept by Dask (in this process,
        or on the workers of a cluster) for the passes that follow: its :class:`DocChunk`
        counts take a fraction of the text's bytes."""
        bag = persist(self.to_bag(), progress=progress, label="reading the corpus")
        return replace(self, cache=bag)

    def subset(self, indices: Sequence[int] | np.ndarray) -> Corpus:
        """The corpus restricted to the partitions ``indices`` (positions in ``parts``, kept
        in the order given), with the sources they read from; nothing is read."""
        parts = [self.parts[int(i)] for i in np.asarray(indices, dtype=np.int64).ravel()]
        used = {p.source for p in parts}
        return Corpus([s for s in self.sources if s in used], parts, self.tokenizer,
                      vocabulary=self.vocabulary)

    def iter_chunks(self) -> Iterator[DocChunk]:
        """Read the corpus in this process, one partition at a time (bounded memory)."""
        for part in self.parts:
            yield from _read_part(part, self.tokenizer, self.vocabulary)


def _read_parts(parts: Sequence[_PartitionPlan], tokenizer: Tokenizer,
                vocabulary: tuple[str, ...] | None = None) -> list[DocChunk]:
    out: list[DocChunk] = []
    for part in parts:
        out.extend(_read_part(part, tokenizer, vocabulary))
    return out


def read_corpus(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    format: str = "auto",
    vocab: str | None = None,
    text_field: str = "text",
    tokenizer: Tokenizer | None = None,
    blocksize: int | None = None,
    strip_headers: bool = True,
    keep_subject: bool = True,
    max_line_bytes: int | None = None,
    time_field: str | None = None,
) -> Corpus:
    """Plan a corpus over files, globs and directories.

    Parameters
    ----------
    inputs : path, glob or sequence of them
        What to read.
    format : {'auto', 'uci', 'text', 'files', 'jsonl', 'hdf5'}
        Reader; ``auto`` picks one per input by name and content.
    vocab : path, optional
        UCI vocabulary, used when ``vocab.NAME.txt`` is not beside the docword file.
    text_field : str
        JSON Lines field holding the document text.
    tokenizer : Tokenizer, optional
        How text is split into tokens (default: ``Tokenizer()``: letters-only words, English
        stop words removed, e-mail addresses, URLs and encoded lines dropped).
    blocksize : int, optional
        Target bytes of (decompressed) input per partition. Default: about 2 MiB
        (``DEFAULT_BLOCKSIZE``; 16 MiB, ``HDF5_BLOCKSIZE``, when every input is HDF5), the
        number of partitions a multiple of the workers, at least one per worker.
    strip_headers : bool
        One document per file (directory trees, tar archives) only, on by default: drop each
        document's leading mail/news header block, up to and including the first empty line
        (LF or CRLF), if every line before it is a header field, an mbox ``From`` line or a
        continuation. Any other file is kept whole. Recorded per source
        (``Source.strip_headers``), and so in a store's manifest.
    keep_subject : bool
        With ``strip_headers``: keep the text of the Subject field (without "Re:") in place of
        the block, since it is content. Recorded per source (``Source.keep_subject``).
    max_line_bytes : int, optional
        The longest line (text, JSON Lines, UCI) or document (a file of a directory, a
        member of an archive) accepted, in decompressed bytes; a longer one is a
        :class:`CorpusError`. Default: ``$STREAMTOPIC_MAX_LINE_BYTES``, else 64 MiB
        (:mod:`streamtopic.limits`).
    time_field : str, optional
        Read each document's time too (:attr:`DocChunk.times`): the JSON Lines field of that
        name; the HDF5 dataset of that name (one value per row); for one document per file,
        ``'mtime'`` (the file's modification time; directory trees only) or the name of a
        header field of the document's leading header block (``'Date'``: the mail/news
        ``Date:`` line). Values are read by :func:`streamtopic._dates.parse_time` (a year,
        Unix time, ISO 8601 or an e-mail date). Plain text and UCI inputs have no time.

    Raises
    ------
    CorpusError
        For missing inputs, unknown formats and malformed headers (before anything is read);
        for a store or a model given as input; for a ``time_field`` that an input's format
        cannot carry, or that an HDF5 input lacks. A document whose time is missing or not a
        date is a :class:`CorpusError` naming its file and line when it is read.
    """
    if format not in FORMATS:
        raise ValueError(f"format={format!r}: expected one of {', '.join(FORMATS)}")
    if blocksize is not None and blocksize < 1:
        raise ValueError(f"blocksize={blocksize!r}: must be a positive number of bytes")
    tokenizer = tokenizer or Tokenizer()
    sources: list[Source] = []
    for path, fmt in expand_inputs(inputs, format):
        vocab_path = _find_uci_vocab(path, vocab) if fmt == "uci" else None
        size = (
            sum(os.path.getsize(os.path.join(path, r)) for r in _list_tree(path))
            if os.path.isdir(path)
            else os.path.getsize(path)
        )
        strip = bool(strip_headers) and fmt == "files"
        sources.append(Source(path, fmt, size, vocab_path, strip_headers=strip,
                              keep_subject=strip and bool(keep_subject)))
    if blocksize is None:
        # about DEFAULT_BLOCKSIZE per partition whatever the corpus size (so memory per task
        # is the same), the count a multiple of the workers (so every round keeps them busy)
        total = sum(s.size for s in sources)
        w = n_workers()
        target = HDF5_BLOCKSIZE if all(s.format == "hdf5" for s in sources) else DEFAULT_BLOCKSIZE
        n_parts = w * max(1, round(total / (target * w)))
        blocksize = int(max(MIN_BLOCKSIZE, -(-total // n_parts)))
    options: tuple[tuple[str, Any], ...] = (
        ("text_field", text_field), ("max_line_bytes", _max_line_bytes(max_line_bytes)))
    if time_field is not None:
        _check_time_field(sources, time_field)
        options += (("time_field", time_field),)
    parts: list[_PartitionPlan] = []
    for src in sources:
        src_parts = _plan_source(src, blocksize, options)
        parts.extend(src_parts)
    return Corpus(sources, parts, tokenizer)


def _check_time_field(sources: Sequence[Source], name: str) -> None:
    """Refuse a time field an input cannot carry (plain text, UCI; an HDF5 file without
    that dataset) before anything is read."""
    import h5py

    if not name:
        raise ValueError("time_field: give a field name")
    for src in sources:
        if src.format in ("text", "uci"):
            raise CorpusError(src.path, f"format {src.format!r} carries no time field; dated "
                                        "documents go in JSON Lines, HDF5 or one file each")
        if src.format == "hdf5":
            with h5py.File(src.path, "r") as f:
                _check_time_column(src.path, f, name, int(f["indptr"].shape[0]) - 1)


def bundled_corpus() -> str:
    """Path of the bundled demo corpus: UCI KOS blog entries (``docword.kos.txt.gz``).

    Data: UCI Machine Learning Repository, "Bag of Words" data set (D. Newman), CC BY 4.0.
    """
    here = os.path.join(os.path.dirname(__file__), "data", "docword.kos.txt.gz")
    return here


# ----------------------------------------------------------------------------- HDF5 output


class HDF5CorpusWriter:
    """Append documents to an HDF5 CSR corpus, streaming.

    Layout: ``indptr`` (D+1,) int64, ``indices`` (nnz,) int32, ``data`` (nnz,) int32 and
    ``vocab`` (V,) UTF-8 strings; term ids index ``vocab``. The vocabulary grows as new terms
    arrive unless it is fixed at construction.

    Use as a context manager; the file is written aside (a hidden name beside ``path``) and
    renamed into place on a clean exit, so an interrupted conversion leaves no corpus behind.
    """

    def __init__(self, path: str | os.PathLike[str], vocab: Sequence[str] | None = None) -> None:
        self.path = os.fspath(path)
        self._stack = ExitStack()
        self.terms: list[str] = list(vocab) if vocab is not None else []
        self._index = {t: i for i, t in enumerate(self.terms)}
        self._fixed = vocab is not None
        self.n_docs = 0
        self.nnz = 0
        self._f: Any = None

    def __enter__(self) -> HDF5CorpusWriter:
        import h5py

        with ExitStack() as stack:  # on an error here, closed and removed at once
            tmp = stack.enter_context(written_aside(self.path))
            f = self._f = stack.enter_context(h5py.File(tmp, "w"))
            f.create_dataset("indptr", shape=(1,), maxshape=(None,), dtype="i8", chunks=(2**16,))
            f.create_dataset("indices", shape=(0,), maxshape=(None,), dtype="i4",
                             chunks=(2**18,))
            f.create_dataset("data", shape=(0,), maxshape=(None,), dtype="i4", chunks=(2**18,))
            f.attrs["format"] = "streamtopic-csr"
            f.attrs["version"] = 1
            self._stack = stack.pop_all()  # unwound by __exit__
        return self

    def append(self, counts: sp.csr_matrix, terms: Sequence[str]) -> None:
        """Append documents: ``counts`` (n_docs × T) over the column terms ``terms``."""
        counts = sp.csr_matrix(counts)
        index = self._index
        if self._fixed:
            cols = np.array([index.get(t, -1) for t in terms], dtype=np.int64)
            keep = cols >= 0
            counts = counts[:, np.flatnonzero(keep)]
            cols = cols[keep]
        else:
            for t in terms:
                if t not in index:
                    index[t] = len(self.terms)
                    self.terms.append(t)
            cols = np.array([index[t] for t in terms], dtype=np.int64)
        counts.sort_indices()
        f = self._f
        n, nnz = counts.shape[0], counts.nnz
        ptr = f["indptr"]
        ptr.resize((self.n_docs + n + 1,))
        ptr[self.n_docs + 1 :] = counts.indptr[1:].astype(np.int64) + self.nnz
        for name, values in (("indices", cols[counts.indices]), ("data", counts.data)):
            ds = f[name]
            ds.resize((self.nnz + nnz,))
            ds[self.nnz :] = values.astype(np.int32)
        self.n_docs += n
        self.nnz += nnz

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        import h5py

        # closes the file, then renames it into place, or removes it if anything failed
        with self._stack:
            if exc is not None:
                raise exc
            self._f.create_dataset(
                "vocab", data=np.array(self.terms, dtype=object), dtype=h5py.string_dtype()
            )


def _ordered_chunks(corpus: Corpus, progress: bool, label: str) -> Iterator[DocChunk]:
    """The corpus' chunks in order, partitions read in parallel on the active scheduler a few
    at a time (memory stays bounded by a few partitions)."""
    import dask.base
    from dask.delayed import delayed

    batch = max(2, 2 * n_workers())
    parts = corpus.parts
    with Stage(label, enabled=progress) as stage:
        for b0 in range(0, len(parts), batch):
            tasks = [delayed(_read_part)(p, corpus.tokenizer) for p in parts[b0 : b0 + batch]]
            (results,) = dask.base.compute(tasks)
            for chunks in results:
                yield from chunks
            done = min(b0 + batch, len(parts))
            stage.update(done / len(parts), f"{done}/{len(parts)} partitions")


def convert(
    corpus: Corpus, output: str | os.PathLike[str], *, progress: bool = True
) -> dict[str, int]:
    """Write any readable corpus into the HDF5 CSR form, streaming, in corpus order.

    Text is written as the counts of its tokens, stop words removed: a store ingested from
    the HDF5 file counts each document's length as those tokens (a count input's row sum),
    where one ingested from the text counts its stop words too.

    Returns
    -------
    dict
        ``n_docs``, ``n_tokens``, ``nnz``, ``vocab_size``.
    """
    n_tokens = 0
    with HDF5CorpusWriter(output) as writer:
        for ch in _ordered_chunks(corpus, progress, "convert"):
            writer.append(ch.counts, ch.terms)
            n_tokens += int(ch.counts.sum())
        n_docs, nnz, V = writer.n_docs, writer.nnz, len(writer.terms)
    if n_docs == 0:
        os.remove(os.fspath(output))
        raise CorpusError(", ".join(s.path for s in corpus.sources), "the corpus has no documents")
    return {"n_docs": n_docs, "n_tokens": n_tokens, "nnz": nnz, "vocab_size": V}


def _uniform_hash(seed: int, index: np.ndarray) -> np.ndarray:
    """A uniform number in [0, 1) per document index (splitmix64 of seed and index): the
    split of a document depends only on the seed and its position, not on partitioning."""
    with np.errstate(over="ignore"):
        z = index.astype(np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return cast("np.ndarray", (z >> np.uint64(11)).astype(np.float64) / float(2**53))


def split(
    corpus: Corpus,
    train_output: str | os.PathLike[str],
    test_output: str | os.PathLike[str],
    *,
    test_fraction: float = 0.1,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, int]:
    """Split a corpus into train and test HDF5 corpora, streaming.

    Document i (in corpus order) goes to the test set when a hash of (seed, i) falls below
    ``test_fraction``: deterministic, and independent of how the input is partitioned.
    Each file carries its own vocabulary (terms are matched by string when read back).
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction={test_fraction!r}: must be in (0, 1)")
    index = 0
    vocab: list[str] = []
    with HDF5CorpusWriter(train_output) as train, HDF5CorpusWriter(test_output) as test:
        for ch in _ordered_chunks(corpus, progress, "split"):
            u = _uniform_hash(seed, np.arange(index, index + ch.n_docs))
            index += ch.n_docs
            is_test = u < test_fraction
            for writer, rows in ((train, ~is_test), (test, is_test)):
                writer.append(ch.counts[np.flatnonzero(rows)], ch.terms)
        n_train, n_test = train.n_docs, test.n_docs
        if n_train == 0 or n_test == 0:
            raise CorpusError(
                ", ".join(s.path for s in corpus.sources),
                f"split leaves {n_train} training and {n_test} test documents",
            )
        vocab = train.terms
    return {"n_train": n_train, "n_test": n_test, "vocab_size": len(vocab)}


def stat_fingerprint(path: str, vocab_path: str | None = None) -> str:
    """SHA-256 of an input's file names, sizes and modification times (of every file, for a
    directory; and of the UCI vocabulary): a cheap check that the input is as it was when
    its content hash was taken. Reading and hashing it is what a changed stamp calls for."""
    h = hashlib.sha256()
    files = ([os.path.join(path, rel) for rel in _list_tree(path)] if os.path.isdir(path)
             else [path])
    if vocab_path is not None:
        files.append(vocab_path)
    for f in files:
        st = os.stat(f)
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def verify_recorded_inputs(store: Any, entries: Sequence[ManifestEntry] | None = None
                           ) -> list[ManifestEntry]:
    """The manifest of a co-occurrence store, checked before its inputs are read again
    (all of them, or only ``entries``, which must belong to it).

    The manifest must be the one the store wrote (its digest matches), and every input must
    exist with the content it had when ingested: unchanged when its file sizes and times
    match the recorded stamp, else when its SHA-256 still matches.

    Raises
    ------
    StoreError
        An edited manifest, a missing input, or an input whose content changed.
    """
    sources = store.check_manifest() if entries is None else list(entries)
    if entries is not None:
        store.check_manifest()
    for s in sources:
        path = s.path
        vocab_path = s.vocab_path
        if not os.path.exists(path) or (vocab_path is not None and not os.path.exists(vocab_path)):
            raise StoreError(
                f"{path}: an input of {store.path} is missing (it is read again to refine and "
                "evaluate; restore it, or fit with refine_passes=0)"
            )
        if s.stat is not None and stat_fingerprint(path, vocab_path) == s.stat:
            continue
        src = Source(path, s.format, 0, vocab_path)
        if src.content_hash() != s.sha256:
            raise StoreError(
                f"{path}: changed since it was ingested into {store.path} (its content hash "
                "differs), so the store's counts no longer describe it"
            )
    return sources


def input_problems(store: Any) -> list[str]:
    """The problems with a store's recorded inputs (:func:`verify_recorded_inputs`): none
    when each exists with its recorded content, or when the manifest itself fails its check
    (:meth:`CooccurrenceStore.verify <streamtopic.store.CooccurrenceStore.verify>` reports
    that)."""
    try:
        store.check_manifest()
    except StoreError:
        return []
    try:
        verify_recorded_inputs(store)
    except StoreError as exc:
        return [str(exc)]
    return []


def recorded_corpus(store: Any, *, after: int | None = None,
                    upto: int | None = None) -> Corpus | None:
    """One corpus of a co-occurrence store's recorded inputs: its text from the store's
    token cache (:mod:`streamtopic.doccache`), never tokenised again, and every other input
    (counts, or text ingested before the cache existed) read by :func:`read_as_recorded`
    after :func:`verify_recorded_inputs`. None when the store records no input (a population
    Q), or when text it has no cache of was tokenised by a custom analyzer, which cannot be
    rebuilt. ``after`` and ``upto``: only the inputs that the versions after ``after`` and up
    to ``upto`` added (default: all)."""
    def wanted(version: int) -> bool:
        return (after is None or version > after) and (upto is None or version <= upto)

    manifest = [s for s in store.check_manifest() if wanted(s.version)]
    cached = [p for p in store.cached_partitions() if wanted(p.version)]
    covered = {int(v) for v in {p.version for p in cached}}
    rest = [s for s in manifest if not (s.version in covered
                                        and s.get("format") not in ("uci", "hdf5"))]
    cfg = store.config.get("tokenizer")
    if cfg and cfg.get("analyzer") is not None and any(
            s.get("format") not in ("uci", "hdf5") for s in rest):
        log.warning("%s: its text was tokenised by a custom analyzer (%s), which cannot be "
                    "rebuilt to read it again", store.path, cfg["analyzer"])
        return None
    sources, parts = cached_corpus_parts(store.path, store.uid, store.V, cached)
    tokenizer = Tokenizer.from_config(cfg) if cfg else Tokenizer()
    rest_corpus = read_as_recorded(store.config, verify_recorded_inputs(store, rest))
    if rest_corpus is not None:
        sources, parts = sources + rest_corpus.sources, parts + rest_corpus.parts
    return Corpus(sources, parts, tokenizer) if parts else None


def read_as_recorded(config: dict[str, Any], entries: Sequence[ManifestEntry]) -> Corpus | None:
    """One corpus of manifest ``entries``, each read with its own format, UCI vocabulary and
    header handling, and tokenised as the store ``config`` says (None for no entries). A
    setting an entry lacks (an older store) is read as it was then: headers kept, or
    stripped without the Subject. Nothing is verified: see :func:`recorded_corpus`."""
    cfg = config.get("tokenizer")
    tokenizer = Tokenizer.from_config(cfg) if cfg else Tokenizer()
    parts = [
        read_corpus(s.path, format=s.format, vocab=s.vocab_path, tokenizer=tokenizer,
                    strip_headers=s.strip_headers, keep_subject=s.keep_subject,
                    text_field=s.text_field)
        for s in entries
    ]
    if not parts:
        return None
    return Corpus([x for c in parts for x in c.sources], [x for c in parts for x in c.parts],
                  tokenizer)
