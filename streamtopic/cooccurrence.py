"""Streaming ingestion: the unbiased co-occurrence estimator, accumulated into the store.

For a document with word counts h (V,) over the store's vocabulary and length n >= 2,

    Q_d = w_d (h hᵀ − diag h),   w_d = 1/(n − 1)  (``doc_weight='tokens'``),

whose expectation under the topic model is n A R Aᵀ (restricted to the vocabulary): each
document weighs as its n tokens. The store keeps Σ_d Q_d; ``store.Q`` divides it by its
total, so that it sums to 1. Documents with n < 2 carry no pair and are skipped (and
counted). Stores built before ``doc_weight`` weigh every document alike, w_d =
1/(n(n − 1)) (``doc_weight='documents'``, the absence of the setting: Arora et al.'s
estimator), and keep it for their incremental ingests.

Why per token (issue 28). Weighing documents alike puts the weight of a 100-token
document's 4,950 pairs on a two-token document's single pair, so the rows of rare and
mid-frequency words of Q̄ are dominated by a few short documents (the reason for
:data:`~streamtopic.anchors.ANCHOR_MAX_SHARE`), and anchors come out generic. Per token,
each pair of a document weighs 1/(n − 1): short documents count for their tokens. Measured
with the default fit over seeds 0-4, each input ingested both ways (``python
benchmarks/doc_weight.py``, ``results/doc_weight.json``; NPMI of the top 10 words on the
training documents, the mean and the range over the seeds; held-out nats/token by document
completion, the mean; ``benchmarks/real_corpora.py``'s scorer), per token against per
document:

* 20 Newsgroups, K = 20: NPMI 0.266 [0.258, 0.276] against 0.240 [0.230, 0.245]; held-out
  −8.0431 against −8.0443. K = 50: 0.283 [0.270, 0.298] against 0.261 [0.259, 0.262];
  −7.9134 against −7.9190.
* KOS, K = 20: 0.207 [0.192, 0.215] against 0.190 [0.187, 0.192]; −7.4036 against −7.4171.
  K = 50: 0.214 [0.203, 0.224] against 0.191 [0.185, 0.196]; −7.3294 against −7.3371.
* SOTU paragraphs, K = 20: 0.188 [0.182, 0.192] against 0.170 [0.167, 0.177]; −7.5870
  against −7.5876. K = 50: 0.201 against 0.193; −7.5548 against −7.5749.

(tomotopy, 1,000 Gibbs iterations, same tokens: 0.278, 0.290; 0.207, 0.214; 0.174.)
Weights between the two, w_d = (n(n − 1))^−a, measured in memory by a helper (Q over the
core recomputed from the cached documents, before SQUAREM) on 20 Newsgroups K = 20, did
worse at a = 0.25, 0.4 and 0.75 (NPMI 0.256, 0.259, 0.233, seed 0) and no better at 0.6
(0.250, 0.256, 0.275 on seeds 0-2); w_d = 1 (pooled pairs) gave 0.239. On documents of
one length the two weightings are the same Q.

The length n is the document's length *in its input* (``doc_length='input'``, every store
built now): for text, its tokens before stop words are removed; for counts (UCI, HDF5), the
row sum over all of the file's words. It does not depend on the vocabulary, so each entry
Q[i, j] depends on words i and j alone: any sub-vocabulary of a store is exactly the store
ingested with that vocabulary (what fit-time vocabulary selection relies on,
:mod:`streamtopic.selection`). A document is counted (``n_docs``) iff n >= 2, even when fewer
than two of its tokens are in the vocabulary. Stores built before kept n = the document's
tokens in the vocabulary (``doc_length='vocabulary'``, the absence of the setting), and
keep it for their incremental ingests.

The pipeline, all in Dask:

1. each corpus partition yields its documents as a compact CSR matrix with weights
   w_d (above), and the exact diagonal of its Σ_d Q_d; the upper triangle of
   Q's blocks is cut into *groups* of whole zarr blocks (Q is symmetric: the lower triangle
   is the mirror image, computed by no one);
2. per group, a linear chain of tasks adds the documents' w_d h_d h_dᵀ on the group's
   rectangle into one running sum, each link a few partitions' documents (up to
   ``LINK_BYTES``): densely, tile by tile, the documents dense in a tile through a BLAS
   matrix product and the others by a compiled pair kernel (no intermediate sparse product),
   or with scipy's sparse product while the group's part of Q is still mostly empty. The
   links of one round run in parallel; memory does not grow with the number of partitions;
3. per group, exactly one task adds the sum to the head's blocks and writes the new version's
   blocks and their transposes into the mirror blocks (no two tasks ever write one chunk);
4. the client commits the version: one atomic switch of the store's head.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
import scipy.sparse as sp

from ._io import TargetExistsError, written_aside
from ._locking import is_locked
from ._scratch import collect, owned_dir
from .cluster import MemoryBudget, compute, current_client, delayed_tree, worker_addresses
from .corpus import (
    Corpus,
    CorpusError,
    DocChunk,
    line_of_offset,
    read_corpus,
    stat_fingerprint,
    uci_header,
)
from .doccache import CachedDocuments, PartitionRecord, write_partition
from .manifest import ManifestEntry
from .store import (
    DELTA_SHARE,
    DENSE,
    DOC_LENGTH,
    DOC_WEIGHT,
    DOC_WEIGHTS,
    LOCK_FILE,
    MAX_DELTAS,
    MIRRORED,
    MIRRORED_DENSE,
    SPARSE,
    CooccurrenceStore,
    Deltas,
    StoreError,
    add_sparse_into,
    block_nonzeros,
    block_sum,
    open_for_blocks,
    padded_block_map,
    read_q_block,
    write_q_block,
    write_q_delta,
)
from .termmap import global_ids, oov_terms, to_global
from .vocabulary import TermStats, Tokenizer, Vocabulary, read_vocab_file, validate_pruning
from .workspace import scratch_root

__all__ = [
    "IngestReport", "ingest", "document_cooccurrence", "document_weights", "GROUP_BYTES",
    "SPLIT_EVERY", "SYNC_EVERY", "ACCUMULATION_SHARE", "DENSE_START", "accumulation_bands",
    "accumulation_budget", "dense_groups",
]

GROUP_BYTES = 128 * 2**20  # dense bytes of Q one reduction group covers at most
SPLIT_EVERY = 8  # fan-in of the reduction trees (few tasks; partials are small)
#: A corpus whose text is at most this share of the memory budget is read once for a new
#: store's two passes, its token counts kept in memory between them.
CACHE_SHARE = 0.25
SYNC_EVERY = 4  # rounds of accumulation links per barrier (chains stay within 2 blocks)
DENSE_FRACTION = 0.25  # a partial piece denser than this is summed as a dense array
#: How a dense running sum counts its pairs: ``"blas"``, tile by tile (256 × 256), the
#: documents dense in a tile through BLAS and the rest pair by pair (the C extension's
#: ``add_pairs_tiled``); ``"scalar"``, every pair one multiply-add (``add_pairs_dense``, the
#: reference, and the only way without the C extension). Read from ``STREAMTOPIC_PAIRS`` at
#: import, so that worker processes follow the client's environment; tests and
#: ``benchmarks/pairs.py`` set it. The two agree to rounding (about 1e-15 relative).
PAIR_METHOD = os.environ.get("STREAMTOPIC_PAIRS", "blas")
#: A document takes a tile's matrix product when na·nb >= BLAS_DENSITY · (tile area), na and
#: nb its entries in the tile's rows and columns: the product costs the whole tile per
#: document at GEMM's rate, the scalar loop na·nb scattered multiply-adds. Measured on one
#: core (AMD EPYC, OpenBLAS 0.3, benchmarks/pairs.py --sweep): dgemm on a 256 × 256 tile with
#: 8–64 documents runs at 19–23 GMAC/s, the scalar loop at 1–2 ns a pair in the head of Q
#: (1 ns: break-even at about 0.05); on the long-document corpus 0.1 beat 0.05 and 0.2 (the
#: densified documents also cost their rows and columns), and within ±10% of 0.03–0.3.
BLAS_DENSITY = 0.1
#: Bytes of weighted documents (CSR entries, 12 bytes each) one accumulation link takes at
#: most: partitions are merged up to this (about 8 partitions of 2 MiB of text), so that a
#: link's arithmetic outweighs its task overhead (~1 ms on the distributed scheduler), the
#: dense tiles see more documents while they are in cache and a chain adds fewer, larger
#: sparse pieces. Memory: 2 × SYNC_EVERY link inputs at most (:func:`_chains`). Read from
#: ``STREAMTOPIC_LINK_BYTES`` at import (0: one partition a link, as before; benchmarks).
LINK_BYTES = int(os.environ.get("STREAMTOPIC_LINK_BYTES", 64 * 2**20))

#: Name prefix of a first ingest's scratch directory of spilled partitions (owned: see
#: ``streamtopic._scratch``), for a corpus too large to keep in memory between its passes
SPILL_PREFIX = ".streamtopic-ingest-"
#: A new store is built in ``.NAME.tmp-<hex>`` beside its path (:func:`.temp_beside`)
_BUILD_TAG = "tmp"

DEFAULT_MIN_DF = 5
DEFAULT_MAX_DF = 0.5
DEFAULT_KEEP_N = 100_000


def document_cooccurrence(
    H: sp.csr_matrix, lengths: np.ndarray | None = None, weight: str = DOC_WEIGHT
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Σ_d Q_d over the rows of a document-term count matrix.

    Parameters
    ----------
    H : scipy.sparse matrix of shape (D, V)
        Word counts.
    lengths : ndarray of shape (D,), optional
        The documents' lengths n_d (default: the row sums of ``H``); rows with n_d < 2 are
        ignored.
    weight : str
        ``'tokens'`` (w_d = 1/(n_d − 1), what stores built now hold) or ``'documents'``
        (w_d = 1/(n_d(n_d − 1))).

    Returns
    -------
    S : scipy.sparse.csr_matrix of shape (V, V)
        Σ_d w_d (h_d h_dᵀ − diag h_d), w_d by ``weight`` (:func:`document_weights`).
    used : ndarray of bool, shape (D,)
        Which rows contributed.
    """
    H = sp.csr_matrix(H, dtype=np.float64)
    n = _lengths(H, lengths)
    used = n >= 2
    V = H.shape[1]
    Hu, Hw, diag = _weighted(H[used], n[used], weight)
    S = _product(Hu.tocsc(), Hw.tocsc(), diag, 0, V, 0, V)
    return S, used


def _lengths(H: sp.csr_matrix, lengths: np.ndarray | None) -> np.ndarray:
    """The documents' lengths n_d (D,) float64: ``lengths``, else the row sums of ``H``."""
    if lengths is None:
        return np.asarray(H.sum(axis=1), dtype=np.float64).ravel()
    return np.asarray(lengths, dtype=np.float64).ravel()


def document_weights(n: np.ndarray, weight: str = DOC_WEIGHT) -> np.ndarray:
    """The weights w_d of documents of lengths ``n`` (n_docs,; each at least 2) in Σ_d Q_d:
    1/(n_d − 1) per token (``'tokens'``), 1/(n_d(n_d − 1)) per document (``'documents'``)."""
    n = np.asarray(n, dtype=np.float64)
    if weight == "tokens":
        return 1.0 / (n - 1.0)
    if weight == "documents":
        return 1.0 / (n * (n - 1.0))
    raise ValueError(f"weight={weight!r}: must be one of {', '.join(DOC_WEIGHTS)}")


def _weights_and_diagonal(
    Hu: sp.csr_matrix, n: np.ndarray | None = None, weight: str = DOC_WEIGHT
) -> tuple[np.ndarray, np.ndarray]:
    """w_d (n_docs,; :func:`document_weights`), and the exact diagonal Σ_d (h_i² − h_i) w_d
    (V,); n_d (n_docs,) defaults to the row sums of ``Hu``."""
    nu = _lengths(Hu, n)
    w = document_weights(nu, weight)
    per_entry = np.repeat(w, np.diff(Hu.indptr))
    # term by term, so that exact zeros stay zero
    diag = np.bincount(Hu.indices, weights=(Hu.data * Hu.data - Hu.data) * per_entry,
                       minlength=Hu.shape[1])
    return w, diag


def _weighted(
    Hu: sp.csr_matrix, n: np.ndarray | None = None, weight: str = DOC_WEIGHT
) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray]:
    """Hu, Hw = diag(w) Hu, and the exact diagonal of Σ_d Q_d (lengths ``n`` and
    ``weight``: see :func:`_weights_and_diagonal`)."""
    w, diag = _weights_and_diagonal(Hu, n, weight)
    Hw = sp.csr_matrix((Hu.data * np.repeat(w, np.diff(Hu.indptr)), Hu.indices, Hu.indptr),
                       shape=Hu.shape)
    return Hu, Hw, diag


def _product(
    Hc: sp.csc_matrix, Hwc: sp.csc_matrix, diag: np.ndarray, r0: int, r1: int, c0: int, c1: int
) -> sp.csr_matrix:
    """Rows r0:r1 and columns c0:c1 of Σ_d Q_d, from column slices of H, with the exact
    diagonal Σ_d (h_i² − h_i) w_d (every word present has a diagonal entry to overwrite)."""
    S = (Hc[:, r0:r1].T.tocsr() @ Hwc[:, c0:c1]).tocsr()
    if max(r0, c0) < min(r1, c1):
        rows = np.repeat(np.arange(r1 - r0, dtype=np.int32), np.diff(S.indptr)) + r0
        on = S.indices + c0 == rows
        S.data[on] = diag[rows[on]]
        S.eliminate_zeros()
    return S


# ----------------------------------------------------------------------------- grid of groups


@dataclass(frozen=True)
class _Grid:
    """Reduction groups over the upper triangle of Q's blocks (Q is symmetric): a group is a
    run of blocks (i, j0) … (i, j1 − 1), j0 ≥ i, of one row stripe. Its sum is written to
    those blocks and, transposed, to their mirror images (j, i). ``runs[i]``: the (j0, j1)
    of stripe i's groups, in order."""

    V: int
    c: int
    runs: tuple[tuple[tuple[int, int], ...], ...]

    @property
    def nb(self) -> int:
        return -(-self.V // self.c)

    @property
    def groups(self) -> list[tuple[int, int]]:
        """(i, g): row stripe i, g-th run of block columns from the diagonal."""
        return [(i, g) for i in range(self.nb) for g in range(len(self.runs[i]))]

    def rows(self, i: int) -> tuple[int, int]:
        return i * self.c, min(self.V, (i + 1) * self.c)

    def blocks(self, i: int, g: int) -> range:
        return range(*self.runs[i][g])

    def cols(self, i: int, g: int) -> tuple[int, int]:
        b = self.blocks(i, g)
        return b.start * self.c, min(self.V, b.stop * self.c)


#: Blocks one group of mostly empty blocks may span at most: the memory its running sum
#: takes should the estimate be wrong and it turn dense (16 blocks of 32 MiB)
SPARSE_RUN = 16


def _make_grid(V: int, c: int, doc_freq: np.ndarray | None = None, n_docs: int = 0) -> _Grid:
    """Groups of up to ``GROUP_BYTES`` of running sum; fewer blocks when there are few
    blocks, so that the groups (each one chain of tasks) are many and even enough to share
    out. With the words' document frequencies (``doc_freq``, V; ``n_docs`` documents), a
    block expected to be mostly empty counts by its expected non-zeros (sparse running sums
    take about 24 bytes each), so a stripe's sparse blocks share few groups, up to
    ``SPARSE_RUN`` blocks: fewer chains and links where Q is almost empty."""
    nb = -(-V // c)
    dense_run = max(1, min(GROUP_BYTES // (c * c * 8), nb // 4))
    if doc_freq is None or n_docs <= 0 or nb <= 4:
        return _Grid(V, c, tuple(tuple((j, min(nb, j + dense_run))
                                       for j in range(i, nb, dense_run)) for i in range(nb)))
    cost = _block_bytes(np.asarray(doc_freq, dtype=np.float64)[:V], n_docs, c)
    budget = dense_run * c * c * 8.0  # dense blocks group as without frequencies
    runs = []
    for i in range(nb):
        stripe, j = [], i
        while j < nb:
            k, total = j, 0.0
            while k < nb and k - j < SPARSE_RUN and (k == j or total + cost[i, k] <= budget):
                total += cost[i, k]
                k += 1
            stripe.append((j, k))
            j = k
        runs.append(tuple(stripe))
    return _Grid(V, c, tuple(runs))


def _block_bytes(df: np.ndarray, n_docs: int, c: int, bins: int = 32,
                 dense_above: float = 0.5 * DENSE_FRACTION) -> np.ndarray:
    """(nb, nb): the expected bytes of each block's running sum: dense (8 per entry) where
    the block's expected density (words co-occurring at random in documents, from their
    document frequencies binned by log) passes half of ``DENSE_FRACTION``, else 24 per
    expected non-zero."""
    nb = -(-df.size // c)
    edges = np.logspace(0, np.log10(max(2.0, float(n_docs))) + 1e-9, bins + 1)
    centre = np.sqrt(edges[:-1] * edges[1:])
    hist = np.zeros((nb, bins))
    for b in range(nb):
        part = df[b * c : (b + 1) * c]
        hist[b] = np.histogram(np.clip(part, 1, None), bins=edges)[0]
    p = np.clip(centre / n_docs, 0, 1)
    pair = -np.expm1(np.log1p(-np.minimum(np.outer(p, p), 1 - 1e-12)) * n_docs)
    nnz = hist @ pair @ hist.T
    sizes = np.minimum(c, df.size - np.arange(nb) * c).astype(np.float64)
    area = np.outer(sizes, sizes)
    return np.where(nnz > dense_above * area, 8.0 * area, 24.0 * nnz)


# ----------------------------------------------------------------------------- partition tasks


@dataclass
class _Stats:
    """Counts added by a set of partitions (summable)."""

    V: int
    n_docs: int = 0
    n_skipped: int = 0
    n_tokens: int = 0
    n_oov: int = 0
    n_replaced: int = 0
    q_mass: float = 0.0  # Σ_d n'_d (n'_d − 1) w_d: the total of the round's Σ_d Q_d
    word_counts: np.ndarray = field(init=False)
    doc_freq: np.ndarray = field(init=False)
    diag: np.ndarray = field(init=False)  # exact diagonal of the round's Σ_d Q_d
    per_source: dict[str, dict[str, int]] = field(default_factory=dict)
    #: words read that are not in the vocabulary (the store records them: never grown into it)
    unkept: set[str] = field(default_factory=set)
    # UCI chunks: (source, first docID − 1, last docID − 1, byte offset of the chunk's first line)
    doc_ranges: list[tuple[str, int, int, int]] = field(default_factory=list)
    #: the partitions of text documents written to the token cache (:mod:`.doccache`)
    documents: list[PartitionRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.word_counts = np.zeros(self.V, np.int64)
        self.doc_freq = np.zeros(self.V, np.int64)
        self.diag = np.zeros(self.V)

    def add(self, other: _Stats) -> _Stats:
        self.n_docs += other.n_docs
        self.n_skipped += other.n_skipped
        self.n_tokens += other.n_tokens
        self.n_oov += other.n_oov
        self.n_replaced += other.n_replaced
        self.q_mass += other.q_mass
        self.word_counts += other.word_counts
        self.doc_freq += other.doc_freq
        self.diag += other.diag
        self.doc_ranges.extend(other.doc_ranges)
        self.documents.extend(other.documents)
        self.unkept |= other.unkept
        for src, d in other.per_source.items():
            mine = self.per_source.setdefault(src, {})
            for k, v in d.items():
                mine[k] = max(mine.get(k, 0), v) if k == "max_doc" else mine.get(k, 0) + v
        return self


@dataclass
class _WeightedDocs:
    """One partition's documents, ready for the accumulation links: Hu (n×V CSR, sorted
    column indices, documents with n >= 2 only) and the weights w_d (:func:`document_weights`)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    w: np.ndarray
    V: int

    @property
    def nnz(self) -> int:
        return int(self.indices.size)

    def csr(self, weighted: bool = False) -> sp.csr_matrix:
        data = self.data * np.repeat(self.w, np.diff(self.indptr)) if weighted else self.data
        return sp.csr_matrix((data, self.indices, self.indptr), shape=(self.w.size, self.V))

    def columns(self) -> tuple[sp.csc_matrix, sp.csc_matrix]:
        """(H, W H) in CSC (n×V each), made once per process and kept (the links of every
        sparse group slice their columns); not pickled."""
        cached = self.__dict__.get("_columns")
        if cached is None:
            cached = self.__dict__["_columns"] = (self.csc(),
                                                  self.csr(weighted=True).tocsc())
        return cached

    def by_word(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The documents by word, as the pair kernel takes them: H in CSC, its indptr (V + 1,
        int64), document ids (nnz, int32, increasing within each word) and counts (nnz,
        float64); made once per process and kept, not pickled."""
        cached = self.__dict__.get("_by_word")
        if cached is None:
            Hc = self.csc()
            cached = self.__dict__["_by_word"] = (Hc.indptr.astype(np.int64),
                                                  Hc.indices.astype(np.int32, copy=False),
                                                  Hc.data)
        return cached

    def csc(self) -> sp.csc_matrix:
        """H in CSC (n×V, sorted indices), made once per process and kept; not pickled."""
        cached = self.__dict__.get("_csc")
        if cached is None:
            cached = self.__dict__["_csc"] = self.csr().tocsc()
            cached.sort_indices()
        return cached

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in _DOCS_CACHES}


#: What a :class:`_WeightedDocs` keeps of its own in a process, never pickled
_DOCS_CACHES = ("_columns", "_by_word", "_csc")


def _weighted_docs(
    Hu: sp.csr_matrix, n: np.ndarray | None = None, weight: str = DOC_WEIGHT
) -> tuple[_WeightedDocs, np.ndarray]:
    """The partition's documents (rows of ``Hu``, lengths ``n``, default their row sums) and
    the exact diagonal Σ_d (h_i² − h_i) w_d (V,). Diagonal entries the links add are
    Σ_d h_i² w_d; the block writer replaces them by the exact values, so the hot path never
    touches them."""
    Hu = sp.csr_matrix(Hu, dtype=np.float64)
    Hu.sum_duplicates()
    Hu.sort_indices()
    w, diag = _weights_and_diagonal(Hu, n, weight)
    part = _WeightedDocs(Hu.indptr.astype(np.int64), Hu.indices.astype(np.int32), Hu.data, w,
                 Hu.shape[1])
    return part, diag


#: What a partition task returns (a one-item list: a Dask bag's partition): its documents
#: (None if none has two tokens) and its counts.
_Partial = list[tuple[_WeightedDocs | None, _Stats]]

_STORE_INDEX: dict[tuple[str, str, int], dict[str, int]] = {}


def _store_index(path: str, uid: str, V: int) -> dict[str, int]:
    """The term → id map of the first ``V`` words of the store at ``path`` (identity ``uid``;
    a round that grows the vocabulary has written its new words there before it starts),
    read from the store once per process. Workers read the vocabulary from the shared store
    path rather than receive it from another worker, which may be deep in a GIL-holding
    tokeniser call and slow to answer."""
    import zarr

    key = (path, uid, V)
    index = _STORE_INDEX.get(key)
    if index is None:
        terms = np.asarray(zarr.open_array(store=path, path="vocab", mode="r")[:V])
        index = {str(t): i for i, t in enumerate(terms)}
        _STORE_INDEX.clear()
        _STORE_INDEX[key] = index
    return index


@dataclass(frozen=True)
class _CacheTarget:
    """Where a partition task writes its text documents (:mod:`.doccache`): partition
    ``part`` of the uncommitted ``version``; ``sources`` are the round's input paths, in
    the order of its manifest entries."""

    version: int
    part: int
    sources: tuple[str, ...]


def _cache_documents(target: _CacheTarget, store_path: str, chunks: Sequence[DocChunk],
                     rows: Sequence[sp.csr_matrix], stats: _Stats) -> None:
    """Write the partition's text documents (``rows``: each text chunk's counts over the
    store's vocabulary) to the token cache and record the partition in ``stats``."""
    if not rows:
        return
    H = sp.vstack(rows, format="csr").astype(np.int32)
    H.sort_indices()
    runs = np.array([(target.sources.index(ch.source), ch.first_doc, ch.n_docs)
                     for ch in chunks], dtype=np.int64).reshape(-1, 3)
    lengths = np.concatenate([ch.input_lengths for ch in chunks])
    docs = CachedDocuments(H, lengths, runs)
    stats.documents.append(write_partition(store_path, target.version, target.part, docs))


def _partition_partial(
    chunks: Sequence[DocChunk], store_path: str, uid: str, grid: _Grid, doc_length: str,
    cache: _CacheTarget | None = None, doc_weight: str = DOC_WEIGHT,
) -> _Partial:
    """One partition's contribution: its Q pieces per group, and its counts. ``doc_length``
    is the store's definition of a document's length n_d (:attr:`CooccurrenceStore.doc_length`:
    its input length, or its tokens in the vocabulary), ``doc_weight`` its documents' weights
    (:attr:`CooccurrenceStore.doc_weight`). With ``cache``, its text documents (chunks of
    no source vocabulary) go to the store's token cache."""
    index = _store_index(store_path, uid, grid.V)
    V = len(index)
    stats = _Stats(V)
    blocks: list[sp.csr_matrix] = []
    lengths: list[np.ndarray] = []
    text = [ch for ch in chunks if ch.vocab_key is None] if cache is not None else []
    cached: list[sp.csr_matrix] = []
    for ch in chunks:
        gids = global_ids(ch, index)
        H, oov = to_global(ch, index, V, gids)
        if cache is not None and ch.vocab_key is None:
            cached.append(H)
        if oov:
            stats.unkept.update(oov_terms(ch, gids))
        kept = np.asarray(H.sum(axis=1), dtype=np.float64).ravel()  # tokens in the vocabulary
        n = ch.input_lengths.astype(np.float64) if doc_length == DOC_LENGTH else kept
        used = n >= 2
        _count_chunk(stats, ch, H[used], n[used], int((~used).sum()), oov)
        pairs = used & (kept >= 2)  # the documents whose Q_d is not zero
        if pairs.any():
            blocks.append(H[pairs])
            lengths.append(n[pairs])
    if cache is not None:
        _cache_documents(cache, store_path, text, cached, stats)
    if not blocks:
        return [(None, stats)]
    Hp, n_p = sp.vstack(blocks, format="csr"), np.concatenate(lengths)
    part, diag = _weighted_docs(Hp, n_p, doc_weight)
    stats.diag += diag
    kept_p = np.asarray(Hp.sum(axis=1), dtype=np.float64).ravel()
    stats.q_mass += float(np.dot(part.w, kept_p * (kept_p - 1.0)))
    return [(part, stats)]


def _count_chunk(
    stats: _Stats, ch: DocChunk, Hu: sp.csr_matrix, n: np.ndarray, skipped: int, oov: int
) -> None:
    """Add a chunk's counts to ``stats``: its used documents ``Hu`` (counts over the store's
    vocabulary, n_used × V) of lengths ``n`` (n_used,), ``skipped`` documents shorter than 2
    and ``oov`` tokens outside the vocabulary."""
    V = stats.V
    docs, tokens = int(Hu.shape[0]), int(n.sum())
    src = stats.per_source.setdefault(ch.source, {})
    src["docs"] = src.get("docs", 0) + docs
    src["skipped"] = src.get("skipped", 0) + skipped
    src["tokens"] = src.get("tokens", 0) + tokens
    src["oov"] = src.get("oov", 0) + oov
    src["rows"] = src.get("rows", 0) + ch.n_docs
    if ch.vocab_key is not None and ch.vocab_key.startswith("uci:"):
        src["entries"] = src.get("entries", 0) + int(ch.n_records)
        stats.doc_ranges.append((ch.source, ch.first_doc, ch.last_doc, ch.offset))
    stats.n_docs += docs
    stats.n_skipped += skipped
    stats.n_tokens += tokens
    stats.n_oov += oov
    stats.n_replaced += ch.n_replaced
    stats.word_counts += np.asarray(Hu.sum(axis=0)).ravel().astype(np.int64)
    stats.doc_freq += np.bincount(Hu.indices, minlength=V).astype(np.int64)


class _DenseSums:
    """Zeroed float64 arrays for the dense running sums of this process, whose memory is
    reused: a writer gives its group's sum back once written (:func:`_write_group`), the
    next group to start dense with the same number of entries takes it, zeroed in place. A
    fresh array costs its pages' first touch instead, which the kernel zeroes one by one:
    measured on this machine's 2048 × 8192 sums (128 MiB), 0.02–0.2 s of system time where
    zeroing in place takes 0.01 s; a vocabulary of 100,000 words used evenly starts 40 GB
    of dense sums (Q's upper triangle), and 55 s of the ingest's 143 s of CPU were system
    time. Memory: the arrays lent and free never hold more entries than the most lent at
    once (a band's sums, within its budget: :func:`accumulation_bands`): a take that no free
    array matches drops free ones, largest first, until the new one fits under that mark.
    Only an array of exactly the entries asked for is lent again, so none is larger than
    the sum it holds (lending a 16-block array to a 4-block sum, tried first, raised the
    ingest's peak RSS from 3.3 to 4.3 GB). :func:`_release_dense_sums` drops the free ones
    when an ingest's counting ends."""

    def __init__(self) -> None:
        import threading

        self._free: list[np.ndarray] = []  # 1-D, float64, each its own memory
        self._lent = 0  # entries of the arrays lent (taken, not yet given back)
        self._most = 0  # the most entries lent at once since the last clear
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, int]) -> np.ndarray:
        """A zeroed C-contiguous float64 array of ``shape``."""
        n = shape[0] * shape[1]
        with self._lock:
            self._lent += n
            self._most = max(self._most, self._lent)
            match = [k for k, b in enumerate(self._free) if b.size == n]
            buf = self._free.pop(match[0]) if match else None
            if buf is None:  # the new array must fit under the mark with the free ones
                self._free.sort(key=lambda b: b.size)
                while self._free and self._lent + sum(b.size for b in self._free) > self._most:
                    self._free.pop()
        if buf is None:
            return np.zeros(shape)
        out = buf.reshape(shape)
        out.fill(0.0)
        return out

    def give(self, arr: np.ndarray) -> None:
        """Take back ``arr`` (a sum this caller owns and no longer uses), to lend again."""
        root = arr
        while isinstance(root.base, np.ndarray):
            root = root.base
        with self._lock:
            self._lent = max(0, self._lent - root.size)
            if root.dtype == np.float64 and root.flags.c_contiguous and root.flags.writeable:
                self._free.append(root.reshape(-1))

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._lent = self._most = 0


_DENSE_SUMS = _DenseSums()


def _clear_dense_sums() -> None:
    """Drop the free dense sums of this process (run on every worker by
    :func:`_release_dense_sums`)."""
    _DENSE_SUMS.clear()


def _release_dense_sums() -> None:
    """Drop the free dense sums of this process and of the current client's workers."""
    _DENSE_SUMS.clear()
    client = current_client()
    if client is not None:
        try:
            client.run(_clear_dense_sums)
        except Exception:  # a cluster that is gone holds nothing
            pass


class _SparseSum:
    """A running sum of sparse pieces of one rectangle of Q, kept as a few partial sums of
    decreasing size, merged like a binary counter: a new piece is merged with the last
    partial sum while it is at least half its size. Each entry is copied O(log n) times
    over n pieces, where adding every piece into one running sum would copy the whole sum
    each time. The order of the additions depends only on the order of the pieces."""

    def __init__(self) -> None:
        self.levels: list[sp.csr_matrix] = []

    @property
    def nnz(self) -> int:
        """An upper bound of the sum's non-zeros (entries of several levels may coincide)."""
        return sum(int(x.nnz) for x in self.levels)

    def add(self, piece: sp.csr_matrix) -> None:
        self.levels.append(piece)
        while len(self.levels) > 1 and 2 * self.levels[-1].nnz >= self.levels[-2].nnz:
            last = self.levels.pop()
            self.levels[-1] = (self.levels[-1] + last).tocsr()

    def total(self) -> sp.csr_matrix:
        out = self.levels[0]
        for x in self.levels[1:]:
            out = (out + x).tocsr()
        return out

    def dense(self) -> np.ndarray:
        out = _DENSE_SUMS.take(self.levels[0].shape)
        for x in self.levels:
            add_sparse_into(out, x)
        return out


def _add_piece(acc: Any, piece: Any) -> Any:
    """Add ``piece`` into the accumulator ``acc`` (None, a dense array or a
    :class:`_SparseSum`).

    ``acc`` belongs to the running task and may be changed in place; ``piece`` is another
    task's result and is never modified. Sparse sums turn dense past ``DENSE_FRACTION``.
    """
    if piece is None:
        return acc
    if isinstance(acc, np.ndarray):
        if isinstance(piece, np.ndarray):
            acc += piece
        else:
            add_sparse_into(acc, piece)
        return acc
    if isinstance(piece, np.ndarray):
        out = piece.copy()
        if acc is not None:
            for x in acc.levels:
                add_sparse_into(out, x)
        return out
    acc = _SparseSum() if acc is None else acc
    acc.add(piece)
    if acc.nnz > DENSE_FRACTION * piece.shape[0] * piece.shape[1]:
        return acc.dense()
    return acc


def _finished(acc: Any) -> Any:
    """A group's final sum: a dense array, a CSR matrix or None."""
    return acc.total() if isinstance(acc, _SparseSum) else acc


def _docs_of(*partitions: _Partial) -> _WeightedDocs | None:
    """The documents of one or more partitions, in order, as one :class:`_WeightedDocs` (its
    own task, so that links fetch only what they use); None if none has any."""
    docs = [p[0][0] for p in partitions if p[0][0] is not None]
    if len(docs) <= 1:
        return docs[0] if docs else None
    offsets = np.cumsum([0] + [d.nnz for d in docs[:-1]])
    indptr = np.concatenate([docs[0].indptr[:1]] + [d.indptr[1:] + o
                                                   for d, o in zip(docs, offsets, strict=True)])
    return _WeightedDocs(indptr, np.concatenate([d.indices for d in docs]),
                         np.concatenate([d.data for d in docs]),
                         np.concatenate([d.w for d in docs]), docs[0].V)


def _partitions_per_link(corpus: Corpus) -> int:
    """How many partitions one accumulation link takes (``LINK_BYTES`` of documents): a
    partition's documents take at most about twice its decoded text (12 bytes a distinct
    word of a document, against about 6 a token of text; less for counts)."""
    per_partition = 2.0 * corpus.text_bytes() / max(1, corpus.npartitions)
    return max(1, int(LINK_BYTES // max(per_partition, 1.0)))


def _link_inputs(parts: Sequence[Any], per_link: int) -> list[Any]:
    """The chains' inputs: consecutive runs of ``per_link`` partitions (delayed
    :func:`_partition_partial` results), each merged into one :class:`_WeightedDocs`."""
    from dask.delayed import delayed

    docs = delayed(_docs_of, pure=True)
    return [docs(*parts[k : k + per_link]) for k in range(0, len(parts), per_link)]


def _stats_of(partition: _Partial) -> _Stats:
    return partition[0][1]


def _group_product(part: _WeightedDocs, r0: int, r1: int, c0: int, c1: int) -> sp.csr_matrix:
    """Rows r0:r1, columns c0:c1 of the partition's Hᵀ W H, as a sparse matrix (scipy)."""
    Hc, Hwc = part.columns()
    return (Hc[:, r0:r1].T.tocsr() @ Hwc[:, c0:c1]).tocsr()


def pair_kernels() -> tuple[Any, Any]:
    """``(add_pairs_dense, count_pairs)``: the compiled C extension ``streamtopic._pairs``, or
    the numba versions in :mod:`streamtopic._kernels` when the extension was not built. Both
    add in the same order, so they give the same sums; the C one loads in a millisecond where
    numba takes about 0.3 s, which a short ingest would feel."""
    try:
        from ._pairs import add_pairs_dense, count_pairs
    except ImportError:  # built without a C compiler
        from ._kernels import add_pairs_dense, count_pairs
    return add_pairs_dense, count_pairs


def tiled_kernel() -> Any:
    """The C extension's ``add_pairs_tiled`` (dense documents of each tile through BLAS), or
    None when ``PAIR_METHOD`` is ``"scalar"`` or the extension was not built."""
    if PAIR_METHOD != "blas":
        return None
    try:
        from ._pairs import add_pairs_tiled
    except ImportError:  # built without a C compiler: the scalar kernels
        return None
    return add_pairs_tiled


def _dgemm() -> Any:
    """scipy's dgemm (``scipy.linalg.cython_blas``) as a capsule of its C function, which the
    tiled kernel calls on tiles of the running sum in place; None if scipy has none."""
    try:
        from scipy.linalg import cython_blas
    except ImportError:  # pragma: no cover - scipy always ships it
        return None
    return cython_blas.__pyx_capi__.get("dgemm")


def _add_pairs(acc: np.ndarray, part: _WeightedDocs, bounds: tuple[int, int, int, int]) -> None:
    """acc += (Σ_d w_d h_d h_dᵀ)[r0:r1, c0:c1] in place, ``acc`` of shape (r1 − r0, c1 − c0)
    float64 C-contiguous and ``bounds = (r0, r1, c0, c1)``: the tiled kernel (BLAS for the
    documents dense in a tile) or, with ``PAIR_METHOD = "scalar"``, the scalar pair kernel.
    Deterministic: the same documents and rectangle give the same bits (BLAS on one thread)."""
    tiled = tiled_kernel()
    if tiled is None:
        add_pairs_dense, _ = pair_kernels()
        add_pairs_dense(acc, part.indptr, part.indices, part.data, part.w, *bounds)
        return
    tiled(acc, part.indptr, part.indices, part.data, part.w, *bounds, _dgemm(), BLAS_DENSITY,
          *part.by_word())


def _accumulate_piece(
    acc: Any, part: _WeightedDocs | None, bounds: tuple[int, int, int, int], *tickets: None,
    dense: bool = False,
) -> Any:
    """One link of a group's accumulation chain: ``acc`` (the previous link's result, which
    only this link consumes) plus the partition's contribution to the group's rectangle
    ``bounds = (r0, r1, c0, c1)`` of Q.

    A dense running sum takes the contribution in place, straight from the documents (the
    compiled pair kernel: no intermediate sparse product). A sparse running sum (a group whose
    part of Q is still mostly empty) adds scipy's sparse product and turns dense past
    ``DENSE_FRACTION``; a group whose first partition already fills a quarter of it starts
    dense. In-place is safe: a link's input is read by no other task (a ticket only waits for
    it), and a failed link aborts the whole round (nothing is written), so nothing can be
    counted twice. ``tickets`` only order the work; ``dense``: start dense whatever the
    first partition fills (a group expected dense enough: :func:`dense_groups`). Returns the
    new sum."""
    if part is None or part.nnz == 0:
        return acc
    _, count_pairs = pair_kernels()
    r0, r1, c0, c1 = bounds
    area = (r1 - r0) * (c1 - c0)
    if acc is None and (dense or count_pairs(part.indptr, part.indices, r0, r1, c0, c1) > (
        DENSE_FRACTION * area
    )):
        acc = _DENSE_SUMS.take((r1 - r0, c1 - c0))
    if isinstance(acc, np.ndarray):
        _add_pairs(acc, part, bounds)
        return acc
    piece = _group_product(part, r0, r1, c0, c1)
    if piece.nnz == 0:
        return acc
    return _add_piece(acc, piece)


def _ticket(acc: Any) -> None:
    """Empty task, run beside a link: done when the link is done (a barrier waits for
    tickets, not for the running sums themselves, which would have to travel)."""
    return None


def _barrier(*tickets: None) -> None:
    """Empty task: done when every link of a round is done."""
    return None


def _sum_stats(*stats: _Stats) -> _Stats:
    acc = _Stats(stats[0].V)
    for s in stats:
        acc.add(s)
    return acc


#: The kind :func:`_write_group` reports for a block it wrote as a delta
AS_DELTA = 4


def _write_group(
    piece: Any, stats: _Stats, root: str, old_versions: np.ndarray, old_nnz: np.ndarray,
    new_version: int, grid: _Grid, i: int, g: int, old_sparse: np.ndarray | None = None,
    old_deltas: Sequence[Deltas] = (),
) -> list[tuple[int, int, int, int]]:
    """Add a group's summed piece to the head's blocks and write them into the new version;
    diagonal entries become the head's plus the round's exact Σ_d (h_i² − h_i) w_d. A block
    is stored sparse or dense by its density (:func:`~streamtopic.store.write_q_block`); its
    mirror image (j, i) is not written: it reads the block transposed (``MIRRORED`` or
    ``MIRRORED_DENSE``). Where the round's part of a block is small beside the block
    (:func:`_as_delta`), the part alone is written, as a delta of the block
    (:func:`~streamtopic.store.write_q_delta`), and the head's block is not read.

    The only writer of these blocks (and so of their mirror images) in this round. Returns
    (i, j, nnz, how it is stored: ``DENSE``, ``SPARSE``, ``MIRRORED``, ``MIRRORED_DENSE``
    or ``AS_DELTA``) for each block.
    """
    piece = _finished(piece)
    if piece is None:
        return []
    arr = open_for_blocks(root, f"versions/v{new_version:06d}/Q")
    r0, r1 = grid.rows(i)
    c0, _ = grid.cols(i, g)
    rows = slice(r0, r1)
    out: list[tuple[int, int, int, int]] = []
    parts = _column_blocks(piece, c0, grid.c, grid.blocks(i, g), grid.V)
    for k, j in enumerate(grid.blocks(i, g)):
        b0, b1 = j * grid.c, min(grid.V, (j + 1) * grid.c)
        part = parts[k]
        if not (part.any() if isinstance(part, np.ndarray) else part.nnz):
            continue
        cols = slice(b0, b1)
        deltas = old_deltas[k] if len(old_deltas) else ()
        if _as_delta(part, int(old_versions[k]), int(old_nnz[k]), deltas):
            if j == i:  # the round's exact diagonal, which the read adds to the head's
                part = _set_diagonal(part, stats.diag[r0:r1])
            nnz = write_q_delta(root, new_version, rows, cols, part)
            if nnz:
                out.append((i, j, nnz, AS_DELTA))
            continue
        old = None if old_versions[k] <= 0 and not deltas else read_q_block(
            root, int(old_versions[k]), rows, cols, nnz=int(old_nnz[k]),
            sparse=int(old_sparse[k]) if old_sparse is not None else DENSE,
            stored_form=True, deltas=deltas)
        exact = None if j != i else stats.diag[r0:r1] + (
            0.0 if old is None else np.asarray(old.diagonal()))
        block = part if old is None else block_sum(old, part)
        if exact is not None:
            block = _set_diagonal(block, exact)
        nnz, sparse = write_q_block(root, new_version, rows, cols, block, arr)
        out.append((i, j, nnz, SPARSE if sparse else DENSE))
        if j != i:  # the mirror image reads this block transposed: written once
            out.append((j, i, nnz, MIRRORED if sparse else MIRRORED_DENSE))
    if isinstance(piece, np.ndarray):  # this task's own, written: lent to the next sum
        _DENSE_SUMS.give(piece)
    return out


def _as_delta(part: Any, base: int, base_nnz: int, deltas: Deltas) -> bool:
    """Whether a round writes its ``part`` of a block as a delta: the block has a base
    (version ``base``, holding ``base_nnz`` recorded non-zeros) and fewer than
    ``MAX_DELTAS`` deltas (``deltas``), and the part with those deltas holds at most
    ``DELTA_SHARE`` of the base's non-zeros (:mod:`streamtopic.store`)."""
    if base <= 0 or base_nnz <= 0 or len(deltas) >= MAX_DELTAS:
        return False
    budget = DELTA_SHARE * base_nnz - sum(n for _, n in deltas)
    if budget <= 0:
        return False
    return block_nonzeros(part) <= budget


def _column_blocks(piece: Any, c0: int, c: int, blocks: range, V: int) -> list[Any]:
    """A group's sum (rows × its columns from ``c0``) cut into its blocks' columns: views of
    a dense sum; for a sparse one, CSR blocks made in one pass over its entries (slicing
    each block's columns would scan the whole sum once per block)."""
    bounds = [(j * c - c0, min(V, (j + 1) * c) - c0) for j in blocks]
    if isinstance(piece, np.ndarray):
        return [piece[:, a:b] for a, b in bounds]
    coo = piece.tocoo()
    # block of each entry, from the group's first block: 16-bit keys when they fit (numpy
    # sorts them stably by radix, in linear time: 1.1 s of 33 at 9.2M words of long documents)
    which = (coo.col // c).astype(np.int16 if len(bounds) < 2**15 else np.int64)
    order = np.argsort(which, kind="stable")  # each block's entries stay row-major
    starts = np.searchsorted(which[order], np.arange(len(bounds) + 1))
    out = []
    for k, (a, b) in enumerate(bounds):
        sel = order[starts[k] : starts[k + 1]]
        out.append(sp.csr_matrix((coo.data[sel], (coo.row[sel], coo.col[sel] - a)),
                                 shape=(piece.shape[0], b - a)))
    return out


def _set_diagonal(block: Any, values: np.ndarray) -> Any:
    """A diagonal block with its diagonal set to ``values`` (exactly: set, not adjusted);
    a dense block is changed in place."""
    if isinstance(block, np.ndarray):
        idx = np.arange(values.size)
        block[idx, idx] = values
        return block
    coo = block.tocoo()
    off = coo.row != coo.col
    idx = np.arange(values.size)
    row, col = np.r_[coo.row[off], idx], np.r_[coo.col[off], idx]
    data = np.r_[coo.data[off], values]
    keep = data != 0
    return sp.csr_matrix((data[keep], (row[keep], col[keep])), shape=block.shape)


def _chains(parts: Sequence[Any], grid: _Grid, homes: Sequence[str] = (),
            only: Sequence[int] | None = None, dense: Sequence[bool] = ()) -> list[Any]:
    """Sum each group's contributions along a linear chain of tasks, rounds in step.

    Link (k, g) adds link input k (the documents of a few partitions, :func:`_link_inputs`)
    into group g's running sum. The links of one round run in parallel. Rounds come in blocks
    of ``SYNC_EVERY``; a barrier waits for every link of a block's last round, and the links
    of block m also wait for the barrier of block m − 2, so the chains stay within two blocks
    of each other: memory holds one running sum per group plus at most 2 × ``SYNC_EVERY``
    link inputs (``LINK_BYTES`` each), however many partitions there are, and no running sum
    ever moves to another group's worker. Returns the final sum of each group.

    On a distributed cluster, ``homes`` (worker addresses) spreads the chains: chain g
    prefers worker ``homes[g mod len(homes)]`` (a loose restriction: any worker takes over if
    that one is lost). Left alone, the scheduler puts every chain where partition 0 was
    read, since all chains start from it, and then one worker holds all the running sums
    and does all the adding. ``only``: the groups to sum (indices into ``grid.groups``;
    default all), in that order; ``dense``: for each of them, whether its running sum
    starts dense (default: by its first link's pairs).
    """
    import dask.base
    from dask.delayed import delayed

    link = delayed(_accumulate_piece, pure=True)
    ticket = delayed(_ticket, pure=True)
    barrier = delayed(_barrier, pure=True)
    chosen = range(len(grid.groups)) if only is None else only
    bounds = [(*grid.rows(grid.groups[n][0]), *grid.cols(*grid.groups[n])) for n in chosen]
    accs: list[Any] = [None] * len(bounds)
    barriers: list[Any] = []  # one per block of rounds
    for k, part in enumerate(parts):
        block = k // SYNC_EVERY
        extra = (barriers[block - 2],) if block >= 2 else ()
        last_of_block = k % SYNC_EVERY == SYNC_EVERY - 1 or k == len(parts) - 1
        tickets = []
        for g, b in enumerate(bounds):
            with dask.base.annotate(**_home(homes, chosen[g])):
                accs[g] = link(accs[g], part, b, *extra,
                               dense=bool(dense[g]) if len(dense) else False)
                if last_of_block:
                    tickets.append(ticket(accs[g]))
        if last_of_block:
            barriers.append(barrier(*tickets))
    return accs


def _home(homes: Sequence[str], g: int) -> dict[str, Any]:
    """Dask annotations that make group g's tasks prefer its worker (none without workers)."""
    if not homes:
        return {}
    return {"workers": [homes[g % len(homes)]], "allow_other_workers": True}


# ----------------------------------------------------------------------------- vocabulary pass


def _partition_term_stats(chunks: Sequence[DocChunk]) -> list[TermStats]:
    """A partition's term statistics over the documents the store counts (input length at
    least 2), so that a new store's pruning sees the document frequencies and the number of
    documents that the store then records (and fit-time selection uses)."""
    total = TermStats()
    for ch in chunks:
        total.merge(ch.term_stats(min_length=2))
    return [total]


def _worth_caching(corpus: Corpus, budget: MemoryBudget) -> bool:
    """Whether a new store's two passes (vocabulary, co-occurrence) should share one read of
    the corpus, kept in memory between them: when its text takes at most ``CACHE_SHARE`` of
    the memory budget (its token counts take a fraction of that)."""
    return corpus.text_bytes() <= CACHE_SHARE * budget.bytes


def _vocabulary_pass(corpus: Corpus, progress: bool) -> TermStats:
    bag = corpus.to_bag().map_partitions(_partition_term_stats)
    item = bag.reduction(TermStats.sum, TermStats.sum, split_every=SPLIT_EVERY)
    (stats,) = compute(item, progress=progress, label="vocabulary pass",
                       bytes_read=sum(s.size for s in corpus.sources))
    return cast("TermStats", stats)


def _hash_sources(corpus: Corpus) -> list[str]:
    from dask.delayed import delayed

    tasks = [delayed(_source_hash, pure=False)(s) for s in corpus.sources]
    (hashes,) = compute(tasks, progress=False, label="hashing inputs")
    return list(hashes)


def _source_hash(src: Any) -> str:
    return cast("str", src.content_hash())


# ----------------------------------------------------------------------------- ingest


@dataclass
class IngestReport:
    """What one ingest did.

    Attributes
    ----------
    store : str
        Store path.
    version : int
        Head version after the ingest (unchanged if nothing was ingested).
    n_docs, n_tokens : int
        Documents added (those of length n_d >= 2: input length, or tokens in the vocabulary
        in an older store; see :mod:`streamtopic.cooccurrence`), and the sum of their lengths.
    n_skipped_docs : int
        Documents shorter than 2 (including empty ones, and the ``n_absent_docs``), as the
        store counts them in its ``n_skipped_docs``.
    n_oov_tokens : int
        Tokens not in the store's vocabulary (pruned or out of a frozen vocabulary).
    n_replaced_bytes : int
        Undecodable bytes replaced while decoding text.
    vocab_size : int
    sources : list of dict
        Manifest entries added.
    skipped_inputs : list of str
        Inputs already in the manifest, skipped with ``skip_existing``.
    seconds : float
    n_absent_docs : int
        UCI documents that the header declares (docIDs up to D) but that have no entry:
        empty documents, part of ``n_skipped_docs`` but reported apart.
    words_added : int
        Words the ingest added to the vocabulary (``grow=True``).
    """

    store: str
    version: int
    n_docs: int = 0
    n_tokens: int = 0
    n_skipped_docs: int = 0
    n_oov_tokens: int = 0
    n_replaced_bytes: int = 0
    vocab_size: int = 0
    sources: list[ManifestEntry] = field(default_factory=list)
    skipped_inputs: list[str] = field(default_factory=list)
    seconds: float = 0.0
    n_absent_docs: int = 0
    words_added: int = 0

    def summary(self) -> str:
        lines = [
            f"store {self.store} at version {self.version}: "
            f"+{self.n_docs:,} documents, +{self.n_tokens:,} tokens (V = {self.vocab_size:,})",
        ]
        short = self.n_skipped_docs - self.n_absent_docs
        if short:
            lines.append(f"  {short:,} documents skipped (fewer than 2 tokens)")
        if self.n_absent_docs:
            lines.append(f"  {self.n_absent_docs:,} documents declared in the UCI header but "
                         "absent (no entries; counted as skipped)")
        if self.words_added:
            lines.append(f"  {self.words_added:,} new words added to the vocabulary")
        if self.n_oov_tokens:
            lines.append(f"  {self.n_oov_tokens:,} tokens out of the vocabulary (not counted)")
        if self.n_replaced_bytes:
            lines.append(f"  {self.n_replaced_bytes:,} undecodable bytes replaced")
        for s in self.skipped_inputs:
            lines.append(f"  skipped {s}: already in the store")
        lines.append(f"  {self.seconds:.2f} s")
        return "\n".join(lines)


class DuplicateInputError(StoreError):
    """An input that the store's manifest already holds."""


class ChangedInputError(StoreError):
    """An input at a path that the store's manifest holds with other content."""


def ingest(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | Corpus,
    store: str | os.PathLike[str],
    *,
    format: str = "auto",
    vocab: str | None = None,
    min_df: int | None = None,
    max_df: float | None = None,
    keep_n: int | None | str = "default",
    stop_words: str | Sequence[str] | None = None,
    tokenizer: Tokenizer | None = None,
    text_field: str = "text",
    skip_existing: bool = False,
    blocksize: int | None = None,
    chunk_size: int | None = None,
    progress: bool = True,
    client: Any = None,
    strip_headers: bool = True,
    grow: bool = False,
    max_doc_tokens: int | None = None,
    max_line_bytes: int | None = None,
    memory_budget: int | None = None,
) -> IngestReport:
    """Add a corpus to a co-occurrence store, creating the store if needed.

    A new store gets its vocabulary from a streaming pass over the corpus, pruned with gensim's
    semantics (``min_df`` documents, ``max_df`` fraction, ``keep_n`` most frequent), or the
    fixed vocabulary of ``vocab``. An existing store keeps its vocabulary; tokens outside it
    are counted as out of vocabulary.

    The new data is committed atomically: if anything fails, or the process dies, the store is
    left exactly as it was.

    Parameters
    ----------
    inputs : paths, globs, directories, or a :class:`~streamtopic.corpus.Corpus`
    store : path
        The store directory.
    format, vocab, text_field, blocksize, strip_headers, max_line_bytes
        See :func:`streamtopic.corpus.read_corpus`. For a new store, ``vocab`` also fixes the
        store's vocabulary (no pruning).
    min_df, max_df, keep_n
        Pruning of a new store's vocabulary (defaults 5, 0.5, 100000, as gensim's
        ``filter_extremes``; ``keep_n=None`` keeps all).
    stop_words, tokenizer
        Tokenisation of text inputs (a new store records it; an existing store's is reused).
        ``stop_words=None`` means the default: ``Tokenizer()``, whose stop words are English
        (``'none'`` keeps every word); UCI and HDF5 inputs are not tokenised.
    skip_existing : bool
        Skip inputs already in the manifest instead of refusing them.
    chunk_size : int, optional
        Block size of Q for a new store.
    progress : bool
        Show progress bars.
    client : distributed.Client, optional
        Run on this client's cluster (default: the current client, else the configured
        Dask scheduler, else threads).
    grow : bool
        Let an existing store's vocabulary grow: words that the store has never read, and
        that pass its pruning within this ingest (``min_df`` of its documents, ``max_df`` of
        all the store's documents, ``keep_n`` words in all), are added after its words, with
        exact rows (:func:`_grown_words`). Words the store read before but did not keep are
        never added: their earlier co-occurrences were not counted.
    max_doc_tokens : int, optional
        Cut text documents into windows of this many tokens, each counted as a document
        (:class:`~streamtopic.vocabulary.Tokenizer`'s ``max_doc_tokens``: a modelling choice,
        off by default). A new store records it; an existing store keeps its own, and a
        different value is refused like any other tokenizer setting.
    memory_budget : int, optional
        Bytes the ingest may hold in memory (default: the automatic budget,
        :func:`streamtopic.cluster.memory_budget`): a corpus whose text takes at most
        ``CACHE_SHARE`` of it is kept in memory between the two passes of a new store, a
        larger one spilled to disk.

    Returns
    -------
    IngestReport

    Raises
    ------
    CorpusError
        Malformed input (names file and line or byte offset).
    DuplicateInputError
        An input already ingested (same path and content hash), without ``skip_existing``.
    ChangedInputError
        An input at a path already ingested, whose content changed since (appended documents
        belong in a new input).
    StoreError
        ``store`` exists but is not a store, another ingest holds it, or text would be
        tokenised unlike the store's text.
    """
    if client is not None:
        with client.as_current():
            return ingest(
                inputs, store, format=format, vocab=vocab, min_df=min_df, max_df=max_df,
                keep_n=keep_n, stop_words=stop_words, tokenizer=tokenizer,
                text_field=text_field, skip_existing=skip_existing, blocksize=blocksize,
                chunk_size=chunk_size, progress=progress, strip_headers=strip_headers, grow=grow,
                max_doc_tokens=max_doc_tokens, max_line_bytes=max_line_bytes,
            )
    t0 = time.perf_counter()
    store_path = os.path.abspath(os.fspath(store))
    existing: CooccurrenceStore | None = None
    lock = None
    if os.path.exists(store_path):
        existing = CooccurrenceStore.open(store_path, lease=False)  # StoreError: not a store
        lock = existing.writer_lock()  # before anything is read: a second writer stops here
    try:
        if existing is not None:
            existing.reload()  # the head as it is now that this ingest is its only writer
        report = _ingest_locked(
            inputs, store_path, existing, lock, format=format, vocab=vocab, min_df=min_df,
            max_df=max_df, keep_n=keep_n, stop_words=stop_words, tokenizer=tokenizer,
            text_field=text_field, skip_existing=skip_existing, blocksize=blocksize,
            chunk_size=chunk_size, progress=progress, strip_headers=strip_headers, grow=grow,
            max_doc_tokens=max_doc_tokens, max_line_bytes=max_line_bytes,
            budget=MemoryBudget.resolve(memory_budget),
        )
    finally:
        if lock is not None:
            lock.release()
    report.seconds = time.perf_counter() - t0
    return report


def _store_tokenizer(
    existing: CooccurrenceStore | None, tokenizer: Tokenizer | None, stop_words: Any,
    max_doc_tokens: int | None = None,
) -> Tokenizer:
    """The tokenizer of an ingest: the given one, else the store's own (as it was built), else
    the default, with ``stop_words`` and ``max_doc_tokens`` replaced when given. Into an
    existing store, text must be tokenised as the store's text was; :func:`_check_tokenizer`
    refuses anything else."""
    if tokenizer is not None:
        if stop_words is not None or max_doc_tokens is not None:
            raise ValueError("pass stop_words and max_doc_tokens inside the tokenizer, "
                             "not beside it")
        return tokenizer
    cfg = existing.config.get("tokenizer") if existing is not None else None
    tokenizer = Tokenizer.from_config(cfg) if cfg else Tokenizer()
    if stop_words is not None:
        tokenizer = replace(tokenizer, stop_words=stop_words)
    if max_doc_tokens is not None:
        tokenizer = replace(tokenizer, max_doc_tokens=max_doc_tokens)
    return tokenizer


def _check_tokenizer(
    existing: CooccurrenceStore, corpus: Corpus, given: Tokenizer | None
) -> None:
    """Refuse, before anything is counted, text that would be tokenised unlike the store's
    text: other settings, or a store built with a custom analyzer that this ingest lacks."""
    if not any(src.format not in ("uci", "hdf5") for src in corpus.sources):
        return  # already counts: nothing is tokenised
    cfg = existing.config.get("tokenizer")
    if not cfg:
        return
    stored = Tokenizer.from_config(cfg).config()
    stored["analyzer"] = cfg.get("analyzer")
    mine = corpus.tokenizer.config()
    if stored["analyzer"] is not None and given is None:
        raise StoreError(
            f"{existing.path}: the store's text was tokenised by a custom analyzer "
            f"({stored['analyzer']}); pass the same tokenizer to ingest more text into it"
        )
    differ = sorted(k for k in set(stored) | set(mine) if stored.get(k) != mine.get(k))
    if differ:
        raise StoreError(
            f"{existing.path}: this ingest would tokenise text unlike the store's "
            f"({', '.join(differ)} differ); new text must be tokenised as the store's was"
        )


def _new_sources(
    corpus: Corpus, existing: CooccurrenceStore | None, store_path: str, skip_existing: bool
) -> tuple[list[tuple[Any, str | None]], list[str]]:
    """The inputs to count, each with its content hash (None: hashed while counting, for a
    new store), and the paths skipped as already ingested. An input whose path the manifest
    holds with other content is refused: its earlier documents are already counted."""
    if existing is None:
        return [(src, None) for src in corpus.sources], []
    hashes = _hash_sources(corpus)
    recorded: dict[str, set[str]] = {}
    for entry in existing.sources:
        recorded.setdefault(entry.path, set()).add(entry.sha256)
    keep: list[tuple[Any, str | None]] = []
    skipped: list[str] = []
    for src, h in zip(corpus.sources, hashes, strict=True):
        if h in recorded.get(src.path, ()):
            if not skip_existing:
                raise DuplicateInputError(
                    f"{src.path}: already ingested into {store_path} (same path and content "
                    "hash); pass --skip-existing to skip it"
                )
            skipped.append(src.path)
        elif src.path in recorded:
            raise ChangedInputError(
                f"{src.path}: changed since it was ingested into {store_path} (its content "
                "hash differs) and its earlier documents are already counted; put new "
                "documents in a new file and ingest that"
            )
        else:
            keep.append((src, h))
    return keep, skipped


def _ingest_locked(
    inputs: Any, store_path: str, existing: CooccurrenceStore | None, lock: Any, *,
    format: str, vocab: str | None, min_df: int | None, max_df: float | None, keep_n: Any,
    stop_words: Any, tokenizer: Tokenizer | None, text_field: str, skip_existing: bool,
    blocksize: int | None, chunk_size: int | None, progress: bool, strip_headers: bool,
    budget: MemoryBudget, grow: bool = False, max_doc_tokens: int | None = None,
    max_line_bytes: int | None = None,
) -> IngestReport:
    """:func:`ingest`, once it holds an existing store's writer lock (``lock``)."""
    _check_pruning_args(existing, min_df, max_df, keep_n, vocab)
    given = tokenizer
    tokenizer = _store_tokenizer(existing, tokenizer, stop_words, max_doc_tokens)
    if isinstance(inputs, Corpus):
        corpus = inputs
    else:
        corpus = read_corpus(
            inputs, format=format, vocab=vocab, text_field=text_field,
            tokenizer=tokenizer, blocksize=blocksize, strip_headers=strip_headers,
            max_line_bytes=max_line_bytes,
        )
    if existing is not None:
        _check_tokenizer(existing, corpus, given)

    # --- which inputs are new (a new store has none yet: its inputs are hashed in the
    # co-occurrence pass itself, in parallel with the counting)
    stamps = _stamps(corpus.sources)  # before the hashes: each stamp vouches for its hash
    keep_sources, skipped = _new_sources(corpus, existing, store_path, skip_existing)
    if not keep_sources:
        version = existing.version if existing else 0
        return IngestReport(
            store_path, version, vocab_size=existing.V if existing else 0,
            skipped_inputs=skipped,
        )
    if skipped:
        kept = {s.path for s, _ in keep_sources}
        corpus = Corpus(
            [s for s, _ in keep_sources], [p for p in corpus.parts if p.source.path in kept],
            corpus.tokenizer,
        )
    if not corpus.parts:
        raise CorpusError(", ".join(s.path for s in corpus.sources), "the corpus is empty")

    if existing is not None:
        new_terms: list[str] = []
        if grow:
            corpus, new_terms = _grown_words(corpus, existing, progress, budget)
        report = _accumulate(corpus, existing, keep_sources, stamps, progress, lock, new_terms,
                             budget=budget)
    else:
        report = _first_ingest(corpus, store_path, keep_sources, stamps, progress, vocab=vocab,
                               min_df=min_df, max_df=max_df, keep_n=keep_n,
                               chunk_size=chunk_size, budget=budget)
    report.store = store_path
    report.skipped_inputs = skipped
    return report


def _first_ingest(
    corpus: Corpus, store_path: str, sources: list[tuple[Any, str | None]],
    stamps: dict[str, str], progress: bool, *, vocab: str | None, min_df: int | None,
    max_df: float | None, keep_n: Any, chunk_size: int | None, budget: MemoryBudget,
) -> IngestReport:
    """Build a new store in a hidden directory beside ``store_path`` (its vocabulary from a
    pass over the corpus, or the file ``vocab``), locked by this process from its creation,
    and rename it into place once committed."""
    pruning = {
        "min_df": DEFAULT_MIN_DF if min_df is None else min_df,
        "max_df": DEFAULT_MAX_DF if max_df is None else max_df,
        "keep_n": DEFAULT_KEEP_N if keep_n == "default" else keep_n,
    }
    with ExitStack() as held:
        n_docs = 0  # of the vocabulary pass (none with a fixed vocabulary)
        if vocab is not None:
            voc = Vocabulary.fixed(read_vocab_file(vocab))
        else:  # one read of the corpus for both passes, kept in memory or spilled to disk
            corpus, voc, n_docs = _vocabulary_and_reading(corpus, store_path, progress,
                                                          pruning, min_df, max_df, held, budget)
        return _build_store(corpus, store_path, sources, stamps, progress, vocab=vocab,
                            voc=voc, n_docs=n_docs, pruning=pruning, chunk_size=chunk_size,
                            budget=budget)


def _build_store(
    corpus: Corpus, store_path: str, sources: list[tuple[Any, str | None]],
    stamps: dict[str, str], progress: bool, *, vocab: str | None, voc: Vocabulary,
    n_docs: int, pruning: dict[str, Any], chunk_size: int | None, budget: MemoryBudget,
) -> IngestReport:
    """Create the new store in its hidden build directory, count the corpus into it and
    rename it into place (``n_docs``: the documents the vocabulary pass saw, 0 if none ran;
    with the words' document frequencies, they shape the groups: :func:`_make_grid`)."""
    parent = os.path.dirname(store_path) or "."
    if not os.path.isdir(parent):
        raise StoreError(f"{parent}: directory does not exist")
    _remove_dead_first_ingests(store_path)
    config = {
        "tokenizer": corpus.tokenizer.config(),
        "pruning": {"vocab_file": os.path.abspath(vocab) if vocab else None, **pruning},
        "doc_length": DOC_LENGTH,
        "doc_weight": DOC_WEIGHT,
    }
    lock = None
    try:
        with written_aside(store_path, tag=_BUILD_TAG, replace=False) as build_path:
            target = CooccurrenceStore.create(build_path, voc.terms, chunk_size=chunk_size,
                                              config=config)
            lock = target.writer_lock()
            report = _accumulate(corpus, target, sources, stamps, progress, lock,
                                 frequencies=(voc.doc_freq, n_docs) if n_docs else None,
                                 budget=budget)
    except TargetExistsError:
        raise StoreError(f"{store_path}: appeared while ingesting; not overwritten") from None
    finally:
        if lock is not None:
            lock.release()  # after the build directory is renamed, or removed
    return report


def _vocabulary_and_reading(
    corpus: Corpus, store_path: str, progress: bool, pruning: dict[str, Any],
    min_df: int | None, max_df: float | None, held: ExitStack, budget: MemoryBudget,
) -> tuple[Corpus, Vocabulary, int]:
    """A new store's vocabulary and the documents it was made from, from one read of the
    corpus that also serves the counting:
    the corpus comes back kept in memory (when its text takes at most ``CACHE_SHARE`` of the
    memory budget) or spilled to disk, each partition's documents pickled as its vocabulary
    pass reads them (:func:`_spill_partition`) into a scratch directory that ``held`` keeps
    until the ingest ends. Text is then tokenised once, whatever the corpus' size."""
    if _worth_caching(corpus, budget):
        corpus = corpus.cached(progress)
        stats = _vocabulary_pass(corpus, progress)
    else:
        root = scratch_root(None, store_path)
        collect(root, lambda n: n.startswith(SPILL_PREFIX))
        spill = held.enter_context(owned_dir(root, SPILL_PREFIX))
        corpus, stats = _spilled_vocabulary_pass(corpus, spill, progress)
    return corpus, _vocabulary_of(corpus, stats, pruning, min_df, max_df), stats.n_docs


def _spill_partition(chunks: list[DocChunk], path: str) -> TermStats:
    """Write a partition's documents to ``path`` (pickled) and return its term statistics:
    the vocabulary pass and the reading of the corpus for the counting, in one."""
    import pickle

    with written_aside(path) as tmp, open(tmp, "wb") as fh:
        pickle.dump(list(chunks), fh, protocol=pickle.HIGHEST_PROTOCOL)
    return _partition_term_stats(chunks)[0]


def _load_spilled(path: str) -> list[DocChunk]:
    import pickle

    with open(path, "rb") as fh:
        return list(pickle.load(fh))


def _spilled_vocabulary_pass(
    corpus: Corpus, directory: str, progress: bool
) -> tuple[Corpus, TermStats]:
    """The vocabulary pass, writing every partition's documents under ``directory``; returns
    the corpus read back from there (a bag of the same partitions) and the statistics."""
    import dask.bag as db
    from dask.delayed import delayed

    paths = [os.path.join(directory, f"part-{k:06d}.pkl") for k in range(corpus.npartitions)]
    parts = corpus.to_bag().to_delayed()
    stats = [delayed(_spill_partition, pure=True)(p, path)
             for p, path in zip(parts, paths, strict=True)]
    item = delayed_tree(_sum_term_stats, stats, SPLIT_EVERY)
    (total,) = compute(item, progress=progress, label="vocabulary pass",
                       bytes_read=sum(s.size for s in corpus.sources))
    bag = db.from_delayed([delayed(_load_spilled, pure=True)(p) for p in paths])
    return replace(corpus, cache=bag), total


def _sum_term_stats(*parts: TermStats) -> TermStats:
    """:meth:`TermStats.sum` of its arguments (a node of
    :func:`~streamtopic.cluster.delayed_tree`)."""
    return TermStats.sum(parts)


def _grown_words(
    corpus: Corpus, store: CooccurrenceStore, progress: bool, budget: MemoryBudget,
) -> tuple[Corpus, list[str]]:
    """The words an ingest with ``grow`` adds to ``store``, from a pass over the new corpus
    (returned too: cached when that saves reading it again), in order of decreasing document
    frequency, ties by term.

    The rule: a word is added when the store has never read it (it is neither in the
    vocabulary nor among :attr:`~CooccurrenceStore.unkept_words`) and it passes the store's
    pruning on this ingest's documents: at least ``min_df`` of them, at most ``max_df`` of
    all the store's documents, and ``keep_n`` words in all. All its occurrences are then in
    the documents counted now, so its row and column of Q are exact: those of a single
    ingest of every input over the grown vocabulary (a document's length n_d does not
    depend on the vocabulary). A word read before and not kept stays out: its earlier
    co-occurrences were never counted."""
    unkept = store.unkept_words
    pruning = store.config.get("pruning") or {}
    if unkept is None or store.doc_length != DOC_LENGTH:
        raise StoreError(f"{store.path}: this store does not record the words it has read "
                         "(built by an older streamtopic), so its vocabulary cannot grow "
                         "exactly; ingest its inputs into a new store")
    if pruning.get("vocab_file") or "min_df" not in pruning:
        raise StoreError(f"{store.path}: the store's vocabulary is fixed (--vocab); it does "
                         "not grow")
    if _worth_caching(corpus, budget):
        corpus = corpus.cached(progress)
    stats = _vocabulary_pass(corpus, progress)
    df, _ = stats.totals()
    known = set(store.vocab).union(unkept)
    most = float(pruning["max_df"]) * (store.n_docs + stats.n_docs)
    new = [t for t, d in df.items() if t not in known and int(pruning["min_df"]) <= d <= most]
    new.sort(key=lambda t: (-df[t], t))
    keep_n = pruning.get("keep_n")
    return corpus, new if keep_n is None else new[: max(0, int(keep_n) - store.V)]


def _vocabulary_of(
    corpus: Corpus, stats: TermStats, pruning: dict[str, Any], min_df: int | None,
    max_df: float | None,
) -> Vocabulary:
    """The vocabulary the corpus' term statistics give, pruned as ``pruning`` says."""
    if stats.n_docs == 0:
        raise CorpusError(
            ", ".join(s.path for s in corpus.sources),
            "the corpus has no documents with 2 or more tokens",
        )
    voc = Vocabulary.from_stats(stats, **pruning)
    if len(voc) == 0:
        raise CorpusError(
            ", ".join(s.path for s in corpus.sources),
            f"no term survives pruning (min_df={min_df or DEFAULT_MIN_DF}, "
            f"max_df={max_df or DEFAULT_MAX_DF}) over {stats.n_docs} documents",
        )
    return voc


def _remove_dead_first_ingests(store_path: str) -> None:
    """Delete the hidden build directories of earlier first ingests into ``store_path`` whose
    writer is dead (a process killed before its store was renamed into place)."""
    import glob

    pattern = os.path.join(
        os.path.dirname(store_path), f".{os.path.basename(store_path)}.{_BUILD_TAG}-*"
    )
    for tmp in glob.glob(pattern):
        lock = os.path.join(tmp, LOCK_FILE)
        if os.path.exists(lock):  # its writer locks it from creation until the rename; a
            # lock file younger than a second may still be on its way to being locked
            try:
                age = time.time() - os.path.getmtime(lock)
            except OSError:  # renamed into place meanwhile
                continue
            dead = age > 1 and not is_locked(lock)
        else:  # made before its lock (a moment), or left by a write after its removal
            try:
                dead = time.time() - os.path.getmtime(tmp) > 60
            except OSError:
                dead = False
        if dead:
            shutil.rmtree(tmp, ignore_errors=True)


def _check_pruning_args(
    existing: CooccurrenceStore | None,
    min_df: int | None,
    max_df: float | None,
    keep_n: Any,
    vocab: str | None,
) -> None:
    if existing is not None:
        given = [
            name for name, v in (("min_df", min_df), ("max_df", max_df)) if v is not None
        ] + (["keep_n"] if keep_n != "default" else [])
        if given:
            raise ValueError(
                f"{existing.path}: the store's vocabulary is frozen; "
                f"{', '.join(given)} only apply when a store is created"
            )
        return
    validate_pruning(
        DEFAULT_MIN_DF if min_df is None else min_df,
        DEFAULT_MAX_DF if max_df is None else max_df,
        DEFAULT_KEEP_N if keep_n == "default" else keep_n,
    )
    if vocab is not None and (min_df is not None or max_df is not None or keep_n != "default"):
        raise ValueError("a fixed vocabulary (vocab=) is not pruned: drop min_df/max_df/keep_n")


def _accumulate(
    corpus: Corpus,
    store: CooccurrenceStore,
    sources: Sequence[tuple[Any, str | None]],
    stamps: dict[str, str],
    progress: bool,
    lock: Any,
    new_terms: Sequence[str] = (),
    frequencies: tuple[np.ndarray, int] | None = None,
    *,
    budget: MemoryBudget,
) -> IngestReport:
    """Count the corpus into a new version of the store and commit it. ``sources`` pairs
    each input with its content hash, or None to hash it within this pass; ``new_terms``
    are words the round adds to the vocabulary (:func:`_grown_words`); ``frequencies``:
    the words' document frequencies and the documents they count, which shape the groups
    (:func:`_make_grid`; default: the store's own, for a store with documents)."""
    txn = store.begin(lock, new_terms)
    try:
        if frequencies is None and store.n_docs > 0:
            df = np.zeros(txn.V, np.int64)
            df[: store.V] = store.doc_freq
            frequencies = (df, store.n_docs)
        grid = _make_grid(txn.V, store.chunk_size, *(frequencies or (None, 0)))
        expected = _round_frequencies(store, corpus, frequencies) if len(grid.groups) > 1 \
            else None
        bands = accumulation_bands(grid, expected, accumulation_budget(budget))
        written_lists, stats, new_hashes = _count_round(
            corpus, store, sources, bands, grid, txn.number, progress,
            dense_groups(grid, expected), budget,
        )
        _check_unchanged([src for src, _ in sources], stamps)
        fresh = iter(new_hashes)
        hashed = [(src, h if h is not None else next(fresh)) for src, h in sources]
        _check_sources(corpus, stats)
        fields = {p.source.path: p.opt("text_field", "text") for p in corpus.parts}
        entries = _manifest_entries(hashed, stamps, fields, stats)
        absent_docs = _absent_uci_docs(corpus, stats)
        if store.n_docs == 0 and (stats.n_docs == 0 or stats.q_mass == 0):
            raise CorpusError(
                ", ".join(s.path for s in corpus.sources),
                "no document has 2 or more in-vocabulary tokens",
            )
        _commit_round(store, txn, written_lists, stats, entries, absent_docs)
    except BaseException:
        store.abort(txn)
        raise
    return IngestReport(
        store.path, store.version, stats.n_docs, stats.n_tokens,
        stats.n_skipped + absent_docs, stats.n_oov, stats.n_replaced, store.V, entries,
        n_absent_docs=absent_docs, words_added=len(new_terms),
    )


def _round_frequencies(store: CooccurrenceStore, corpus: Corpus,
                       frequencies: tuple[np.ndarray, int] | None
                       ) -> tuple[np.ndarray, int] | None:
    """The document frequencies and document count expected of this round's documents: a
    new store's own (its vocabulary pass); for a store with documents, its frequencies
    scaled by the round's input bytes over the bytes of the inputs it holds (a small update
    of a large store expects few pairs: neither bands nor dense sums)."""
    if frequencies is None or store.n_docs <= 0:
        return frequencies
    held = sum(e.size for e in store.sources)
    if held <= 0:
        return None
    share = min(1.0, sum(s.size for s in corpus.sources) / held)
    n = max(1, int(round(frequencies[1] * share)))
    return np.minimum(np.asarray(frequencies[0], dtype=np.float64) * share, n), n


def _partials(corpus: Corpus, store: CooccurrenceStore, grid: _Grid, version: int,
              paths: Sequence[str] | None) -> list[Any]:
    """The delayed :func:`_partition_partial` of each partition of ``corpus``, partition
    k writing its text documents to the token cache as part k of ``version`` (``paths``:
    the round's inputs in manifest order; None: the cache is written by another band)."""
    from dask.delayed import delayed

    task = delayed(_partition_partial, pure=True)
    return [task(p, store.path, store.uid, grid, store.doc_length,
                 _CacheTarget(version, k, tuple(paths)) if paths is not None else None,
                 store.doc_weight)
            for k, p in enumerate(corpus.to_bag().to_delayed())]


#: Share of the memory budget (:func:`~streamtopic.cluster.memory_budget`) that the running
#: sums of one accumulation band may take, by their expected bytes (:func:`_block_bytes`)
ACCUMULATION_SHARE = 0.25


def accumulation_budget(budget: MemoryBudget) -> int:
    """Bytes the running sums of one accumulation band may take: ``ACCUMULATION_SHARE`` of
    the ingest's memory budget, or ``$STREAMTOPIC_ACCUMULATION_BYTES`` (tests, benchmarks)."""
    env = os.environ.get("STREAMTOPIC_ACCUMULATION_BYTES", "").strip()
    return int(env) if env else int(ACCUMULATION_SHARE * budget.bytes)


#: Expected density (of a group's blocks, from the words' document frequencies) above which
#: its running sum is dense from the start: the pair kernel adds a pair in 1–2 ns, scipy's
#: sparse product and the merges of sparse sums take 50–100 ns (a vocabulary of 100,000
#: words used evenly: 1.5 billion non-zeros, 15% dense); the memory is bounded by the bands
DENSE_START = 0.02


def _group_density(grid: _Grid, frequencies: tuple[np.ndarray, int]) -> np.ndarray:
    """(groups,): each group's expected density (expected non-zeros over its area, from the
    words' document frequencies, the documents co-occurring at random)."""
    df = np.asarray(frequencies[0], dtype=np.float64)[: grid.V]
    nnz = _block_bytes(df, int(frequencies[1]), grid.c, dense_above=np.inf) / 24.0
    out = []
    for i, g in grid.groups:
        r0, r1 = grid.rows(i)
        c0, c1 = grid.cols(i, g)
        out.append(sum(nnz[i, j] for j in grid.blocks(i, g)) / max(1, (r1 - r0) * (c1 - c0)))
    return np.asarray(out)


def dense_groups(grid: _Grid, frequencies: tuple[np.ndarray, int] | None) -> list[bool]:
    """Per group of ``grid``, whether its running sum starts dense: its expected density
    passes ``DENSE_START`` (none without frequencies)."""
    if frequencies is None or frequencies[1] <= 0:
        return [False] * len(grid.groups)
    return [bool(d > DENSE_START) for d in _group_density(grid, frequencies)]


def accumulation_bands(grid: _Grid, frequencies: tuple[np.ndarray, int] | None,
                       budget: float) -> list[list[int]]:
    """The groups of ``grid`` (indices into ``grid.groups``) in bands: consecutive runs
    whose running sums' expected bytes (:func:`_block_bytes`, from the words' document
    frequencies and the documents they count) add up to at most ``budget``. Each band is
    one pass over the corpus with only its groups' sums in memory: a large vocabulary used
    evenly (whose sparse sums would outgrow the memory) costs more passes, not more memory.
    One band without frequencies, or when everything fits."""
    groups = list(range(len(grid.groups)))
    if frequencies is None or frequencies[1] <= 0:
        return [groups]
    cost = _block_bytes(np.asarray(frequencies[0], dtype=np.float64)[: grid.V],
                        int(frequencies[1]), grid.c)
    need = [float(sum(cost[i, j] for j in grid.blocks(i, g))) for i, g in grid.groups]
    for n, start_dense in enumerate(dense_groups(grid, frequencies)):
        if start_dense:  # 8 bytes an entry of its rectangle
            r0, r1 = grid.rows(grid.groups[n][0])
            c0, c1 = grid.cols(*grid.groups[n])
            need[n] = 8.0 * (r1 - r0) * (c1 - c0)
    bands: list[list[int]] = [[]]
    total = 0.0
    for n, b in enumerate(need):
        if bands[-1] and total + b > budget:
            bands.append([])
            total = 0.0
        bands[-1].append(n)
        total += b
    return bands


def _commit_round(
    store: CooccurrenceStore, txn: Any, written_lists: list[list[tuple[int, int, int, int]]],
    stats: _Stats, entries: list[ManifestEntry], absent_docs: int,
) -> None:
    """Commit a counted round: its blocks (each writer's (i, j, nnz, sparse)), counts,
    manifest entries and the words it read outside the vocabulary."""
    blocks = [b for lst in written_lists for b in lst if b[3] != AS_DELTA]
    deltas = {(i, j): n for lst in written_lists for (i, j, n, kind) in lst if kind == AS_DELTA}
    store.commit(
        txn,
        deltas=deltas,
        written=[(i, j) for (i, j, _, _) in blocks],
        n_docs=stats.n_docs,
        n_tokens=stats.n_tokens,
        word_counts=stats.word_counts,
        doc_freq=stats.doc_freq,
        n_skipped_docs=stats.n_skipped + absent_docs,
        n_oov_tokens=stats.n_oov,
        n_replaced_bytes=stats.n_replaced,
        block_nnz={(i, j): n for (i, j, n, _) in blocks},
        sparse=[(i, j) for (i, j, _, kind) in blocks if kind == SPARSE],
        mirrored=[(i, j) for (i, j, _, kind) in blocks if kind == MIRRORED],
        mirrored_dense=[(i, j) for (i, j, _, kind) in blocks if kind == MIRRORED_DENSE],
        new_sources=entries,
        unkept=sorted(stats.unkept),
        extra=_mass_record(store, stats),
        documents=sorted(stats.documents, key=lambda r: r.part),
    )


def _mass_record(store: CooccurrenceStore, stats: _Stats) -> dict[str, Any]:
    """The head attribute ``q_mass`` after a round (the store's plus the round's), for a
    store whose lengths are input lengths (:attr:`CooccurrenceStore.q_total`); nothing for
    an older store, whose total is its number of documents."""
    if store.doc_length != DOC_LENGTH:
        return {}
    return {"q_mass": (store.q_total if store.version > 0 else 0.0) + stats.q_mass}


def _stamps(sources: Sequence[Any]) -> dict[str, str]:
    """Each input's stamp of file sizes and times, by path
    (:func:`~streamtopic.corpus.stat_fingerprint`)."""
    return {src.path: stat_fingerprint(src.path, src.vocab_path) for src in sources}


def _check_unchanged(sources: Sequence[Any], stamps: dict[str, str]) -> None:
    """Refuse a round whose inputs changed after their stamps were taken (while they were
    hashed and counted)."""
    now = _stamps(sources)
    for src in sources:
        if now[src.path] != stamps[src.path]:
            raise CorpusError(src.path, "changed while it was being ingested; nothing was "
                                        "committed, ingest it again")


def _count_round(
    corpus: Corpus,
    store: CooccurrenceStore,
    sources: Sequence[tuple[Any, str | None]],
    bands: Sequence[Sequence[int]],
    grid: _Grid,
    version: int,
    progress: bool,
    dense: Sequence[bool],
    budget: MemoryBudget,
) -> tuple[list[list[tuple[int, int, int, int]]], _Stats, list[str]]:
    """Run one ingest round, band by band (:func:`accumulation_bands`): every group's chain
    over the partitions (delayed :func:`_partition_partial` results), then its writer into
    version ``version``; ``dense``: per group, whether its running sum starts dense
    (:func:`dense_groups`). The first band also writes the token cache, sums the round's
    counts and hashes the ``sources`` without a hash. The later bands take the documents
    the first one weighted, when they are small (``CACHE_SHARE`` of the memory budget), else
    read the corpus again. Returns (each writer's (i, j, nnz, sparse) per block written, the
    counts, the new hashes in order)."""
    from dask.delayed import delayed

    keep = len(bands) > 1 and 2.0 * corpus.text_bytes() <= CACHE_SHARE * budget.bytes
    written: list[list[tuple[int, int, int, int]]] = []
    stats: Any = None
    new_hashes: list[str] = []
    kept: list[Any] | None = None
    try:
        for b, band in enumerate(bands):
            label = ("co-occurrence" if len(bands) == 1
                     else f"co-occurrence {b + 1}/{len(bands)}")
            if kept is not None:
                links = [delayed(d, pure=True, traverse=False) for d in kept]
                parts: list[Any] = []
            else:
                parts = _partials(corpus, store, grid, version,
                                  [src.path for src, _ in sources] if b == 0 else None)
                links = _link_inputs(parts, _partitions_per_link(corpus))
            lists, stats, hashes, docs = _count_band(
                corpus, store, sources if b == 0 else (), parts, links, grid, band,
                [dense[n] if dense else False for n in band], version, stats, progress,
                label, keep=keep and b == 0)
            if b == 0:  # the first band's documents serve every later one
                kept = docs if keep else None
            written.extend(lists)
            new_hashes.extend(hashes)
    finally:
        _release_dense_sums()
    return written, stats, new_hashes


def _count_band(
    corpus: Corpus, store: CooccurrenceStore, sources: Sequence[tuple[Any, str | None]],
    parts: Sequence[Any], links: Sequence[Any], grid: _Grid, band: Sequence[int],
    dense: Sequence[bool], version: int, stats: Any, progress: bool, label: str,
    keep: bool = False,
) -> tuple[list[list[tuple[int, int, int, int]]], _Stats, list[str], list[Any] | None]:
    """One band of :func:`_count_round`: the chains (over ``links``, the link inputs) and
    writers of the groups ``band`` (indices into ``grid.groups``); ``stats``: the round's
    counts when an earlier band summed them, else None (summed here from ``parts``). With
    ``keep``, also returns the link inputs' values (for the later bands)."""
    import dask.base
    from dask.delayed import delayed

    nb = grid.nb  # more blocks than the head's when the round adds words
    head_bv = padded_block_map(store.block_versions, nb)
    head_sparse = padded_block_map(store.block_sparse, nb)
    head_nnz = store.block_nnz
    head_deltas = store.block_deltas
    # not recorded: not checked
    head_nnz = (np.full((nb, nb), -1, np.int64) if head_nnz is None
                else padded_block_map(head_nnz, nb))
    homes = worker_addresses()
    totals = _chains(links, grid, homes, only=band, dense=dense)
    stats_d = delayed(stats, pure=True, traverse=False) if stats is not None else delayed_tree(
        _sum_stats, [delayed(_stats_of, pure=True)(p) for p in parts], SPLIT_EVERY)
    writes = []
    for n, total in zip(band, totals, strict=True):
        i, g = grid.groups[n]
        old = np.array([head_bv[i, j] for j in grid.blocks(i, g)], dtype=np.int64)
        old_nnz = np.array([head_nnz[i, j] for j in grid.blocks(i, g)], dtype=np.int64)
        old_sparse = np.array([head_sparse[i, j] for j in grid.blocks(i, g)], dtype=np.int8)
        old_deltas = [head_deltas.get((i, j), ()) for j in grid.blocks(i, g)]
        with dask.base.annotate(**_home(homes, n)):
            writes.append(
                delayed(_write_group, pure=True)(
                    total, stats_d, store.path, old, old_nnz, version, grid, i, g, old_sparse,
                    old_deltas,
                )
            )
    to_hash = [delayed(_source_hash, pure=False)(src) for src, h in sources if h is None]
    written_lists, stats_out, new_hashes, docs = compute(
        writes, stats_d, to_hash, list(links) if keep else [], progress=progress, label=label,
        bytes_read=sum(s.size for s in corpus.sources) + store.q_bytes(),
    )
    return written_lists, stats_out, list(new_hashes), list(docs) if keep else None


def _manifest_entries(
    sources: Sequence[tuple[Any, str]], stamps: dict[str, str], fields: dict[str, str],
    stats: _Stats,
) -> list[ManifestEntry]:
    """The store manifest's entries of the inputs of one ingest round (``fields``: the JSON
    Lines text field of each input, by path)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    entries = []
    for src, h in sources:
        ps = stats.per_source.get(src.path, {})
        entries.append(ManifestEntry.new(
            path=src.path, sha256=h, stat=stamps[src.path], format=src.format, size=src.size,
            vocab_path=src.vocab_path, strip_headers=src.strip_headers,
            keep_subject=src.keep_subject, text_field=fields.get(src.path, "text"),
            n_docs=int(ps.get("docs", 0)), n_tokens=int(ps.get("tokens", 0)),
            n_oov_tokens=int(ps.get("oov", 0)), ingested_at=now))
    return entries


def _check_sources(corpus: Corpus, stats: _Stats) -> None:
    """Whole-file checks that no single partition can make (UCI's NNZ)."""
    for src in corpus.sources:
        if src.format != "uci":
            continue
        D, W, NNZ, _ = uci_header(src.path)
        ranges = sorted((r for r in stats.doc_ranges if r[0] == src.path), key=lambda r: r[3])
        for prev, cur in zip(ranges, ranges[1:], strict=False):
            if cur[1] <= prev[2]:
                raise CorpusError(
                    src.path,
                    f"entries must be sorted by docID (documents contiguous): docID {cur[1] + 1} "
                    f"follows docID {prev[2] + 1}",
                    line=line_of_offset(src.path, cur[3]),
                )
        got = stats.per_source.get(src.path, {}).get("entries", 0)
        if got != NNZ:
            raise CorpusError(
                src.path, f"header declares NNZ={NNZ} entries but the file holds {got}", line=3
            )


def _absent_uci_docs(corpus: Corpus, stats: _Stats) -> int:
    missing = 0
    for src in corpus.sources:
        if src.format == "uci":
            D = uci_header(src.path)[0]
            rows = stats.per_source.get(src.path, {}).get("rows", 0)
            missing += max(0, D - rows)
    return missing
