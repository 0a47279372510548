"""The sketch: row sums of Q, squared row norms of Q̄, the anchor candidates and their points.

Anchor words are found among the rows of the row-normalised co-occurrence matrix
Q̄ = diag(1/p) Q (p the row sums). The rows live in V dimensions; the sketch Q̄ P (P a seeded
V×d random projection, d ≈ 1000) preserves distances to spans well enough
(Johnson–Lindenstrauss) and is computed block by block from the store in one pass
(:func:`write_sketch`, a :mod:`~streamtopic.passes` graph), so no process ever holds Q̄
itself. Only the candidates' rows are read back (:func:`sketch_points`); exact mode holds Q̄
in memory instead (:func:`exact_points`), and the exact anchors of
:func:`~streamtopic.anchors.find_anchors_qr` need the row statistics only
(:func:`row_sums_and_norms`).

Anchor candidates are the words with enough document frequency
(:func:`default_anchor_min_df`) and some co-occurrence mass (:func:`anchor_candidates`).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np
import scipy.sparse as sp

from ._numeric import safe_inverse
from .cluster import compute
from .passes import PassGraph, QBlocks, scratch_array, spread_out, sum_arrays, upper_blocks

if TYPE_CHECKING:
    from .store import CooccurrenceStore

__all__ = [
    "AnchorPoints",
    "default_anchor_min_df",
    "frequent_words",
    "anchor_candidates",
    "projection_block",
    "write_sketch",
    "sketch_points",
    "sketch_rows",
    "exact_points",
    "row_sums_and_norms",
]

PROJECT_ALL = 0.9  # project every row of a block where at least this share is wanted


class AnchorPoints(NamedTuple):
    """What the sketch stage gives the anchor search.

    ``p`` (V,) the row sums of Q, ``norms`` (V,) the squared row norms of Q̄, ``candidates``
    (n,) the anchor candidates (sorted word ids) and ``points`` the points anchors are
    chosen among, indexable by those ids: the candidates' sketch rows (n×d,
    :class:`_CandidateRows`) or Q̄ itself (V×V) in exact mode."""

    p: np.ndarray
    norms: np.ndarray
    candidates: np.ndarray
    points: Any


# ============================================================================ candidates


def default_anchor_min_df(n_docs: int) -> int:
    """Document frequency an anchor candidate needs by default: 4% of the documents, capped
    at 400 and at least 10.

    A row of Q̄ is an average over the documents that hold its word, so its noise falls with
    the word's document count, not with the corpus' size: an absolute count (400) is what a
    candidate needs, and small corpora, which cannot afford it, keep their most frequent
    4%. On the semi-synthetic benchmark (V = 2,000, K = 20, 70-token documents) this rule
    gives the best or near-best matched L1 both at 10,000 and at 100,000 documents, where a
    fixed fraction (0.5%) lets noisy rare rows win the greedy at 10,000."""
    return max(10, min(400, math.ceil(0.04 * n_docs)))


def frequent_words(
    store: CooccurrenceStore, min_df: int | None
) -> tuple[np.ndarray | None, int]:
    """The words whose document frequency reaches ``min_df`` (default
    :func:`default_anchor_min_df`; 0 without document frequencies) as sorted ids, None when
    no threshold applies; and the threshold used."""
    if min_df is None:
        min_df = default_anchor_min_df(store.n_docs) if store.counts_known else 0
    if store.counts_known and min_df > 0:
        return np.flatnonzero(store.doc_freq >= min_df), min_df
    return None, min_df


def anchor_candidates(p: np.ndarray, frequent: np.ndarray | None) -> np.ndarray:
    """Anchor candidates: the words of ``frequent`` (:func:`frequent_words`; None: all)
    with co-occurrence mass (p > 0), as sorted ids."""
    if frequent is None:
        return np.flatnonzero(p > 0)
    return cast("np.ndarray", frequent[p[frequent] > 0])


class _CandidateRows:
    """The points of some words only: ``rows`` (n×d) of the sorted word ids ``ids`` (n,),
    indexed by word ids as the full V×d array would be."""

    def __init__(self, ids: np.ndarray, rows: np.ndarray) -> None:
        self.ids = ids
        self.rows = rows

    def __getitem__(self, words: np.ndarray) -> np.ndarray:
        words = np.asarray(words)
        pos = np.minimum(np.searchsorted(self.ids, words), max(self.ids.size - 1, 0))
        if self.ids.size == 0 or not np.array_equal(self.ids[pos], words):
            raise KeyError("only the candidates' points are held")
        return self.rows[pos]


# ============================================================================ the stage


def sketch_points(
    src: QBlocks, d: int, seed: int | None, scratch: str, frequent: np.ndarray | None,
    *, progress: bool = False,
) -> AnchorPoints:
    """One pass over Q (:func:`write_sketch` into ``scratch``), then the row statistics and
    the candidates' rows of the sketch Q̄ P (n×d, the only rows read back).

    ``frequent``: the words with enough document frequency (:func:`frequent_words`), the
    candidates but for words without mass."""
    import zarr

    xpath, spath = os.path.join(scratch, "sketch"), os.path.join(scratch, "sketch-stats")
    # unoptimised: the graph is already coarse, and optimising it drops the parts'
    # priority annotations
    compute(write_sketch(src, d, seed, xpath, spath, rows=frequent),
            progress=progress, label="sketch",
            bytes_read=src.stored_bytes(upper_blocks(src.n_blocks)), optimize_graph=False)
    sums = np.asarray(zarr.open_array(spath, mode="r")[:])
    p = sums[:, 0].copy()
    inv = safe_inverse(p)
    norms = sums[:, 1] * inv * inv
    candidates = anchor_candidates(p, frequent)
    # PᵀQ is d×V: the candidates' columns, scaled by 1/p, are their rows of Q̄ P
    cols = np.asarray(zarr.open_array(xpath, mode="r").get_orthogonal_selection(
        (slice(None), candidates)))
    rows = np.ascontiguousarray(cols.T, dtype=np.float64)
    rows *= inv[candidates, None]
    return AnchorPoints(p, norms, candidates, _CandidateRows(candidates, rows))


def exact_points(Q: Any, frequent: np.ndarray | None, *, progress: bool = False) -> AnchorPoints:
    """The row statistics, the candidates and Q̄ itself (V×V, in memory) as their points,
    from Q (V×V dask array) read whole."""
    (Qn,) = compute(Q, progress=progress, label="sketch (exact)")
    p = Qn.sum(axis=1)
    inv = safe_inverse(p)
    Qbar = Qn * inv[:, None]
    candidates = anchor_candidates(p, frequent)
    return AnchorPoints(p, np.einsum("ij,ij->i", Qbar, Qbar), candidates, Qbar)


def row_sums_and_norms(
    Q: Any, *, progress: bool = False, bytes_read: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Row sums p (V,) of Q (V×V dask array) and squared row norms of Q̄ (V,), in one pass
    over Q."""
    s, sq = compute(Q.sum(axis=1), (Q * Q).sum(axis=1), progress=progress,
                    label="row sums", bytes_read=bytes_read)
    p = np.asarray(s, dtype=np.float64)
    inv = safe_inverse(p)
    return p, np.asarray(sq, dtype=np.float64) * inv * inv


# ============================================================================ the pass


def projection_block(seed: int | None, j0: int, j1: int, d: int, V: int) -> sp.csr_matrix:
    """Rows j0:j1 of the random projection P (V×d), as a sparse matrix.

    A *very sparse* random projection (Li, Hastie & Church 2006): entries ±√(s/d) with
    probability 1/(2s) each and 0 otherwise, s = √V, so E[PPᵀ] = I and distances to spans are
    preserved as by a Gaussian projection, at 1/s of the cost. Each block of rows is drawn
    from its own stream of ``seed``, so workers regenerate their rows of P instead of
    receiving them, and the result does not depend on which worker runs what.
    """
    s = max(1.0, math.sqrt(V))
    rng = np.random.default_rng([0 if seed is None else int(seed), j0, j1])
    n = (j1 - j0) * d
    nnz = int(rng.binomial(n, 1.0 / s))
    flat = rng.choice(n, size=nnz, replace=False) if nnz else np.zeros(0, np.int64)
    values = rng.choice(np.array([-1.0, 1.0]), size=nnz) * math.sqrt(s / d)
    return sp.csr_matrix((values, (flat // d, flat % d)), shape=(j1 - j0, d))


def sketch_rows(rows: np.ndarray, src: QBlocks, d: int, seed: int | None) -> np.ndarray:
    """The sketch (m×d) of ``rows`` (m×V, e.g. rows of Q̄ combined: a tandem anchor's row,
    :mod:`streamtopic.seeding`): rows @ P, with P regenerated by the row blocks of ``src``
    as :func:`write_sketch` drew it, so that they are points of the same sketch as its
    rows of Q̄ P."""
    rows = np.asarray(rows, dtype=np.float64)
    out = np.zeros((rows.shape[0], int(d)))
    for i in range(src.n_blocks):
        span = src.span(i)
        out += np.asarray(projection_block(seed, span.start, span.stop, d, src.V).T
                          @ rows[:, span].T).T
    return out


def _projection_t(seed: int | None, rows: slice, d: int, V: int) -> sp.csc_matrix:
    """P_jᵀ (d×n_j, float32, CSC) for the rows ``rows`` of P: the left factor of the sketch
    products, in the layout whose product with a C-ordered dense block is fastest."""
    return projection_block(seed, rows.start, rows.stop, d, V).T.astype(np.float32)


def _sums_and_squares(block: np.ndarray, axis: int) -> np.ndarray:
    """[sums | sums of squares] of the rows (``axis=1``) or columns (``axis=0``) of a block
    (n×2, float64)."""
    sub = "ij,ij->i" if axis == 1 else "ij,ij->j"
    return np.column_stack([block.sum(axis=axis), np.einsum(sub, block, block)])


def _sketch_part(
    src: QBlocks, i: int, j: int, seed: int | None, d: int,
    cols_i: np.ndarray | None = None, cols_j: np.ndarray | None = None,
) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """What block (i, j), i <= j, of the symmetric Q adds to the sketch sums: for row block
    i, (P_jᵀ Q_ijᵀ, d×n_i float32; its rows' sums and sums of squares, n_i×2 float64); for
    i < j also, from Q_ji = Q_ijᵀ, (P_iᵀ Q_ij, d×n_j; its columns' sums and squares). One
    read serves both row blocks. ``cols_i`` (``cols_j``): the rows of block i (j), as
    offsets in it, whose projections are wanted (None: all); the sums cover all rows.

    The products are float32 (the anchor search multiplies in float32 anyway; the sketch
    is accurate to about 1/√d), and transposed: a sparse P_jᵀ times a C-ordered dense block
    is the fast layout for scipy, 2.5× faster than Q_ij P_j in float64 on 2048² blocks, and
    half the bytes to move to the task that sums a row block.
    """
    block = src.block(i, j)
    V = src.V
    ri, rj = src.span(i), src.span(j)
    sub = block if cols_i is None else block[cols_i]
    rows = (_projection_t(seed, rj, d, V) @ np.ascontiguousarray(sub.T, dtype=np.float32),
            _sums_and_squares(block, 1))
    if i == j:
        return (rows,)
    sub = block if cols_j is None else block[:, cols_j]
    cols = (_projection_t(seed, ri, d, V) @ sub.astype(np.float32),
            _sums_and_squares(block, 0))
    return rows, cols


def _write_sketch_block(
    proj_path: str, stats_path: str, start: int, cols: np.ndarray | None,
    sides: tuple[int, ...], *parts: tuple[tuple[np.ndarray, np.ndarray], ...],
) -> int:
    """Sum a row block's parts, ``parts[k][sides[k]]``, each a pair (d×m float32, n×2
    float64), and write the sums at column (row) ``start`` of the arrays at ``proj_path``
    (d×V; the m projected rows at offsets ``cols``, None: all n) and ``stats_path`` (V×2),
    whose chunks of that row block this task owns. Returns the block's row count."""
    import zarr

    mine = [part[side] for side, part in zip(sides, parts, strict=True)]
    proj, stats = sum_arrays(*(m[0] for m in mine)), sum_arrays(*(m[1] for m in mine))
    n = stats.shape[0]
    if cols is not None:
        full = np.zeros((proj.shape[0], n), dtype=proj.dtype)
        full[:, cols] = proj
        proj = full
    zarr.open_array(proj_path, mode="r+")[:, start:start + n] = proj
    zarr.open_array(stats_path, mode="r+")[start:start + n] = stats
    return cast("int", n)


def _count(*rows: int) -> int:
    return sum(rows)


def _wanted_offsets(src: QBlocks, rows: np.ndarray | None) -> list[np.ndarray | None]:
    """Per row block, the offsets of ``rows`` (sorted word ids) in it; None where all its
    rows are projected (no ``rows``, or most of the block's)."""
    if rows is None:
        return [None] * src.n_blocks
    rows = np.asarray(rows, dtype=np.int64)
    out: list[np.ndarray | None] = []
    for r in range(src.n_blocks):
        span = src.span(r)
        lo, hi = np.searchsorted(rows, [span.start, span.stop])
        n = span.stop - span.start
        out.append(None if hi - lo >= PROJECT_ALL * n
                   else (rows[lo:hi] - span.start).astype(np.int32))
    return out


def write_sketch(
    src: QBlocks, d: int, seed: int | None, proj_path: str, stats_path: str,
    rows: np.ndarray | None = None,
) -> Any:
    """One pass over Q (V×V, read through ``src``, a :class:`~streamtopic.passes.QBlocks`)
    that writes two new uncompressed zarr arrays, chunked by Q's row blocks:

    * at ``proj_path``, PᵀQ = (Q P)ᵀ (d×V, float32), the transposed projection of Q: its
      columns ``rows`` (sorted word ids; all if None) at least, others possibly zero;
    * at ``stats_path``, the row sums p and the row sums of squares of Q (V×2, float64).

    Dividing column i of PᵀQ by p_i gives row i of the sketch Q̄ P (zero rows stay zero).
    Only the anchor candidates' rows are needed, and projecting costs a product per row, so
    a block of Q few of whose rows are candidates projects those only. Returns the pass as
    a dask ``Delayed``, computing to V.

    Q is symmetric, so only the blocks on and above the diagonal are read: block (i, j)
    gives P_jᵀ Q_ijᵀ to row block i and P_iᵀ Q_ij to row block j. A task holds one block of
    Q and its parts of the result; a task per row block sums its parts and writes them. When
    the parts are few per worker, they are shared out largest first
    (:func:`~streamtopic.passes.spread_out`).
    """
    V, c, nb = src.V, src.chunk, src.n_blocks
    scratch_array(proj_path, (d, V), (d, c), dtype="f4")
    scratch_array(stats_path, (V, 2), (c, 2))
    wanted = _wanted_offsets(src, rows)
    g = PassGraph(nb)
    parts = g.blocks("st-sketch-parts", _sketch_part,
                     lambda i, j: (src, i, j, seed, d, wanted[i], wanted[j]),
                     annotations=spread_out(upper_blocks(nb), src.pass_cost))
    sums = g.row_sums("st-sketch", parts, _write_sketch_block,
                      lambda r: (proj_path, stats_path, r * c, wanted[r]))
    return g.result(g.total("st-sketch-done", _count, sums))
