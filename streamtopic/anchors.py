"""Anchor finding: FastAnchorWords (Arora et al. 2013, Algorithm 4) on the points of the
sketch stage (:mod:`streamtopic.sketch`), and exact anchors by implicit column-pivoted QR.

Anchor words are the vertices of the convex hull of the rows of the row-normalised
co-occurrence matrix Q̄ = diag(1/p) Q (p the row sums). FastAnchorWords finds them greedily:
the point farthest from the origin, then repeatedly the point farthest from the span of those
chosen. A *cleanup pass* then re-picks each anchor as the point farthest from the span of the
other K−1. Its points are the anchor candidates' rows of the sketch Q̄ P, a random projection
(:func:`~streamtopic.sketch.sketch_points`), or exact rows of Q̄.

A random projection does not preserve the joint stochasticity of Q, so
:func:`find_anchors_qr` offers the exact alternative (the method of the Rectified Anchor
Word paper, Lee, Cho, Bindel & Mimno 2019): the same greedy, which is column-pivoted QR
(Gram–Schmidt) on the rows of Q̄, run *implicitly* on Q itself. Q̄ is never formed; only the
K orthonormal basis vectors and the residual squared norms of the V rows are kept, and each
new basis vector costs one product with Q. For large V that product is a pass over the
store's blocks, so K anchors cost K passes over Q (one for the row norms, one per anchor
but the last) plus K single-row reads. Both methods share one greedy kernel
(:func:`_pivoted_gram_schmidt`).

:func:`find_anchors_lp` tests the hull itself (Arora, Ge & Moitra 2012): one linear program
per candidate gives its row's L1 distance from the convex hull of the rows not near it, with
the radius and the thresholds set by the rows' sampling noise, measured from the data.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from ._numeric import safe_inverse
from .cluster import MemoryBudget, blas_pinned, compute, usable_cores
from .sketch import default_anchor_min_df, projection_block, write_sketch  # noqa: F401 (moved)

log = logging.getLogger(__name__)

__all__ = [
    "ANCHOR_MAX_RATIO",
    "ANCHOR_MAX_SHARE",
    "AnchorResult",
    "find_anchors",
    "find_anchors_lp",
    "find_anchors_qr",
    "undominated",
]

#: A candidate is left out of the free anchors (:func:`undominated`) when the largest
#: off-diagonal entry of its row of Q̄ (the share of its co-occurrence that one other word
#: holds) exceeds both ``ANCHOR_MAX_SHARE`` and ``ANCHOR_MAX_RATIO`` times the candidates'
#: median of it. A Q that weighs every document alike (w_d = 1/(n_d(n_d − 1)), the stores
#: built before ``doc_weight``; the figures below are theirs) lets a document of two or three
#: tokens put a weight of 1/2 to 1/6 on one pair, as much as a 100-token document spreads
#: over 4,950 pairs, and a handful of them can make a frequent word's row point at one
#: other word. Stores weighted per token (:mod:`streamtopic.cooccurrence`) give short
#: documents their tokens' weight only; the rule stays, as a guard: on 20 Newsgroups' such
#: store (K = 20, seeds 0-4) the fits with and without it are the same.
#: On 20 Newsgroups (training set, the 2,000-word core) "sorry" puts
#: 31% of its row on "test" and "end" 14% on "roman" (28% and 11% once rectified), against a
#: median of 1.0%; the greedy picks such rows first, as anchors of topics that are not there.
#: A planted anchor's row is its topic's words: in population Q of Dirichlet(0.05) topics
#: its largest share is at most 1.3-3.8 times the median (V = 120-5,000, K = 4-100; 3.8 at
#: K = 50 and 100) and at most 0.08 (0.02 or less once V ≥ 2,000), so the two bounds
#: together leave every planted anchor in. Measured with the default fit, one run each
#: (candidates dropped; held-out nats/token by document completion; NPMI of the top 10
#: words on the training documents; ``benchmarks/real_corpora.py``'s scorer), against no
#: filter:
#:
#: * 20 Newsgroups, K = 20: 3 of 299 dropped; −8.0500 against −8.0475, NPMI 0.245 against
#:   0.228; K = 50: 4 dropped; −7.9324 against −7.9323, NPMI 0.265 against 0.246.
#: * SOTU paragraphs, K = 20: 4 of 275; −7.6046 against −7.6075, NPMI 0.170 against 0.165.
#: * KOS: none dropped (its largest share, 0.054, is under 5 times its median, 0.0175).
#:
#: (Tomotopy, 1,000 Gibbs iterations, same tokens: NPMI 0.278 and 0.290; 0.174; KOS 0.207 and
#: 0.214.) Other bounds, on the same fits: the share alone at 0.05 also drops 37 of KOS' 539
#: (NPMI 0.192 against 0.189 at K = 20, 0.198 against 0.191 at K = 50) but drops the planted
#: anchors of peaked topics (V = 600, K = 8); 8 times the median drops only "sorry" (20
#: Newsgroups 0.231 and 0.250); 0.03 drops 6 and does worse on 20 Newsgroups (0.236), and
#: a lower ``anchor_min_df`` (200 or 100) with either is worse still (0.219-0.235).
ANCHOR_MAX_SHARE = 0.05
ANCHOR_MAX_RATIO = 5.0
#: Rows of Q̄ that :func:`undominated` copies at a time.
UNDOMINATED_ROWS = 256


def undominated(points: np.ndarray, candidates: np.ndarray, at_least: int,
                share: float = ANCHOR_MAX_SHARE, ratio: float = ANCHOR_MAX_RATIO
                ) -> np.ndarray:
    """The ``candidates`` (row ids of ``points``, the rows of Q̄ held in memory, n×n) whose
    largest off-diagonal entry is at most ``share`` or at most ``ratio`` times the
    candidates' median of it (:data:`ANCHOR_MAX_SHARE`, :data:`ANCHOR_MAX_RATIO`): a row
    that puts more of its co-occurrence on one other word is taken to be a few short
    documents' doing, not a topic's. When fewer than ``at_least`` pass, the ``at_least``
    least dominated candidates (all of them, if fewer), in their order."""
    cand = np.asarray(candidates, dtype=np.int64)
    if cand.size == 0:
        return cand
    top = np.empty(cand.size)
    for a in range(0, cand.size, UNDOMINATED_ROWS):  # no |candidates|×n copy at once
        ids = cand[a:a + UNDOMINATED_ROWS]
        rows = np.array(points[ids], dtype=np.float64)
        rows[np.arange(ids.size), ids] = 0.0  # the word with itself
        top[a:a + ids.size] = rows.max(axis=1)
    keep = top <= max(share, ratio * float(np.median(top)))
    if int(keep.sum()) < at_least:
        keep = np.zeros(cand.size, dtype=bool)
        keep[np.argsort(top, kind="stable")[:at_least]] = True
    kept: np.ndarray = cand[keep]
    return kept


@dataclass
class AnchorResult:
    """Anchors found by :func:`find_anchors` or :func:`find_anchors_qr`.

    Attributes
    ----------
    anchors : ndarray of shape (K,)
        Word ids, after the cleanup pass (:func:`find_anchors_qr`: the QR pivots, in order).
    greedy : ndarray of shape (K,)
        Word ids chosen by the greedy pass, before cleanup (:func:`find_anchors_qr`: the
        same as ``anchors``).
    distances : ndarray of shape (K,)
        :func:`find_anchors`: distance of each final anchor from the span of the other K−1
        (in sketch units). :func:`find_anchors_qr`: distance of each pivot from the span of
        the pivots before it, in units of Q̄ (the residual norm at selection, ``|R_kk|``).
    changed : int
        How many anchors the cleanup pass replaced (0 without cleanup).
    sweeps : int
        Cleanup sweeps run (until no anchor changes, at most ``max_sweeps``; 0 without).
    history : list of ndarray of shape (K,)
        The anchors after the greedy pass and after each cleanup sweep.
    """

    anchors: np.ndarray
    greedy: np.ndarray
    distances: np.ndarray
    changed: int
    sweeps: int
    history: list[np.ndarray] = field(default_factory=list)


def find_anchors(
    X: np.ndarray, K: int, candidates: np.ndarray, *, cleanup: bool = True, max_sweeps: int = 5,
    precision: str = "single", named: np.ndarray | None = None,
    named_rows: np.ndarray | None = None,
) -> AnchorResult:
    """FastAnchorWords on the rows of ``X``.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Points: sketch rows (or rows of Q̄ in exact mode).
    K : int
        Number of anchors.
    candidates : ndarray of int
        Row ids that may become anchors.
    cleanup : bool
        Run the cleanup pass.
    max_sweeps : int
        Cleanup sweeps over the K anchors, repeated while any anchor changes.
    precision : {'single', 'double'}
        Precision of the products of the points with the basis vectors (everything else is
        double). The search is a chain of K matrix-vector products with the same points;
        in single precision they read half the bytes and, at d = 1000, the points of a few
        thousand candidates stay in cache: 3× faster on the benchmarks, with the same
        anchors. A sketch is accurate to about 1/√d anyway; ``'double'`` suits exact points.
    named : ndarray of int of shape (m,), optional
        Named anchors (:mod:`streamtopic.seeding`): the first m anchors, never re-picked by
        the cleanup; the other K − m are found with the named anchors' span projected out
        first. They are not candidates.
    named_rows : ndarray of shape (m, d), optional
        The named anchors' points (default ``X[named]``; a tandem anchor's combined row).

    Returns
    -------
    AnchorResult
        Anchors as row ids of ``X``, the named ones first.
    """
    if precision not in ("single", "double"):
        raise ValueError(f"precision={precision!r}: expected 'single' or 'double'")
    named, fixed, candidates = _named_inputs(named, named_rows, candidates, lambda i: X[i])
    _check_n_topics(K, candidates.size + named.size)
    K -= named.size
    Xc = np.asarray(X[candidates], dtype=np.float64)
    if K + named.size > Xc.shape[1]:  # K points in d < K dimensions: never independent
        raise ValueError(
            f"n_topics={K + named.size} exceeds the sketch dimension {Xc.shape[1]}: sketch_dim "
            "(--sketch-dim) must be at least the number of topics K"
        )
    points = Xc.astype(np.float32) if precision == "single" else Xc
    ids = np.r_[candidates, named]  # local ids of the named anchors: after the candidates'
    mine = np.arange(Xc.shape[0], ids.size)
    with _row_products(points) as times:
        greedy_local = _greedy(Xc, K, times, fixed)
        local = greedy_local.copy()
        changed_total, sweeps = 0, 0
        history = [ids[np.r_[mine, local]]]
        if cleanup:
            for sweep in range(1, max_sweeps + 1):
                local, changed = _cleanup_sweep(Xc, local, times, fixed)
                history.append(ids[np.r_[mine, local]])
                changed_total, sweeps = changed_total + changed, sweep
                if changed == 0:
                    break
    dist = _distance_to_others(Xc, local, fixed)
    return AnchorResult(ids[np.r_[mine, local]], ids[np.r_[mine, greedy_local]], dist,
                        changed_total, sweeps, history)


def _named_inputs(
    named: np.ndarray | None, named_rows: np.ndarray | None, candidates: np.ndarray,
    row: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """The named anchors' ids (m,), their rows (m×d; ``row`` of their ids by default; None
    when there are none) and the candidates without them (int64)."""
    candidates = np.asarray(candidates, dtype=np.int64).ravel()
    ids = np.zeros(0, np.int64) if named is None else np.asarray(named, np.int64).ravel()
    if ids.size == 0:
        return ids, None, candidates
    rows = row(ids) if named_rows is None else named_rows
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    if rows.shape[0] != ids.size:
        raise ValueError(f"named_rows has {rows.shape[0]} rows for {ids.size} named anchors")
    return ids, rows, candidates[~np.isin(candidates, ids)]


def find_anchors_qr(
    Q: Any,
    p: np.ndarray,
    n_topics: int,
    candidates: np.ndarray,
    *,
    in_memory: bool | None = None,
    memory_budget: int = 512 * 2**20,
    norms: np.ndarray | None = None,
    progress: bool = False,
    named: np.ndarray | None = None,
    named_rows: np.ndarray | None = None,
) -> AnchorResult:
    """Exact anchors: greedy column-pivoted QR on the rows of Q̄ = diag(1/p) Q, implicitly.

    The same greedy as :func:`find_anchors` without cleanup (it picks the candidate farthest
    from the span of the anchors so far), on the exact rows of Q̄ instead of a random
    projection, so the anchors are the QR pivots of Q̄ᵀ restricted to the candidate columns.
    Q̄ is never formed or modified: the function keeps the K orthonormal basis vectors (K×V)
    and the residual squared norms r_i = ‖q̄_i‖² − Σ_k (q̄_i·b_k)² of all V rows. Step k
    picks s_k = argmax of r over the candidates, reads the row q̄_{s_k} = Q[s_k] / p_{s_k},
    orthogonalises it against the basis (twice, for stability) and normalises it to b_k,
    then updates r −= (Q̄ b_k)² with one product Q̄ b_k = (Q b_k) / p.

    Cost: out of memory, each product is a pass over all blocks of Q (a Dask computation
    with one task per block-row; only the V-vector b_k is shipped to the tasks, the basis
    stays here). K anchors take K passes over Q: one for the squared row norms (none when
    ``norms`` is given) and one per anchor but the last, plus K single-row reads (each
    touching one block-row). In memory Q is loaded once and the K products are O(V²) each.

    Parameters
    ----------
    Q : dask array or ndarray or scipy.sparse matrix of shape (V, V)
        The co-occurrence matrix (e.g. ``store.Q``); only read.
    p : ndarray of shape (V,)
        Row sums of Q (rows with p = 0 are zero rows of Q̄).
    n_topics : int
        K, the number of anchors (>= 2).
    candidates : ndarray of int
        Word ids that may become anchors (all rows enter the residuals regardless).
    in_memory : bool, optional
        Load Q into memory once and run the products there (True), or make one pass over
        the blocks of the dask array per product (False; needs a dask array). Default: in
        memory when Q is not a dask array, or when twice the size of a dense float64 V×V
        (the loaded blocks and the assembled array) fits ``memory_budget``.
    memory_budget : int
        Bytes the in-memory path may use, for the default of ``in_memory``.
    norms : ndarray of shape (V,), optional
        Squared row norms of Q̄ when already known (e.g. from the sketch pass); saves a pass.
    progress : bool
        Show a progress bar for each pass over Q.
    named : ndarray of int of shape (m,), optional
        Named anchors (:mod:`streamtopic.seeding`): the first m pivots, in order; the QR
        starts with their rows, so the other K − m are found with the named rows' span
        projected out (m more products with Q). They are not candidates.
    named_rows : ndarray of shape (m, V), optional
        Their rows of Q̄ (default: read, one row each; a tandem anchor's combined row).

    Returns
    -------
    AnchorResult
        ``anchors`` (K,) the pivots in order (the named first), ``greedy`` the same,
        ``distances`` (K,) the residual norm of each pivot at selection (distance of
        q̄_{s_k} from the span of the rows picked before it, ``|R_kk|``), ``changed`` =
        ``sweeps`` = 0.

    Raises
    ------
    ValueError
        When K < 2, K exceeds the number of candidates, the candidates are not valid row ids,
        the candidates run out of linearly independent rows, or ``in_memory=False`` is asked
        of a Q that is not a dask array.
    """
    K, V, p, candidates = _qr_inputs(Q, p, n_topics, candidates, named)
    inv = safe_inverse(p)
    lazy = hasattr(Q, "__dask_graph__")
    if in_memory is None:
        in_memory = not lazy or MemoryBudget(memory_budget).holds(V, 2)
    if not in_memory and not lazy:
        raise ValueError("in_memory=False needs Q as a dask array (e.g. store.Q)")
    if in_memory:
        row, project, norms = _products_in_memory(Q, inv, norms, progress)
    else:
        row, project, norms = _products_by_passes(Q, inv, norms, K, progress)
    norms = np.asarray(norms, dtype=np.float64).ravel()
    if norms.shape != (V,):
        raise ValueError(f"norms has shape {norms.shape}, expected ({V},)")
    named, seeds, candidates = _named_inputs(
        named, named_rows, candidates, lambda ids: np.vstack([row(int(i)) for i in ids]))
    chosen, dist = _pivoted_gram_schmidt(row, project, norms, K - named.size, V,
                                         allowed=candidates, seeds=seeds)
    chosen = np.r_[named, chosen]
    return AnchorResult(chosen, chosen.copy(), dist, 0, 0, [chosen.copy()])


#: Row i of Q̄ (V,), and Q̄ b (V,) for a V-vector b: how the implicit QR touches Q̄.
_Row = Callable[[int], np.ndarray]
_Project = Callable[[np.ndarray], np.ndarray]


def _qr_inputs(
    Q: Any, p: np.ndarray, n_topics: int, candidates: np.ndarray, named: np.ndarray | None
) -> tuple[int, int, np.ndarray, np.ndarray]:
    """K, V, p (V,) and the candidates (int64) of :func:`find_anchors_qr`, checked (the
    named anchors count among the candidates)."""
    K = int(n_topics)
    candidates = np.asarray(candidates, dtype=np.int64).ravel()
    _check_n_topics(K, np.union1d(candidates, [] if named is None else named).size)
    V = int(Q.shape[0])
    if Q.shape != (V, V):
        raise ValueError(f"Q has shape {Q.shape}: expected a square V×V matrix")
    p = np.asarray(p, dtype=np.float64).ravel()
    if p.shape != (V,):
        raise ValueError(f"p has shape {p.shape}, expected ({V},)")
    if candidates.min() < 0 or candidates.max() >= V:
        raise ValueError(f"candidates must be word ids in [0, {V})")
    return K, V, p, candidates


def _products_in_memory(
    Q: Any, inv: np.ndarray, norms: np.ndarray | None, progress: bool
) -> tuple[_Row, _Project, np.ndarray]:
    """Rows and products of Q̄ = diag(``inv``) Q with Q (V×V: dask, dense or sparse) loaded
    into memory once, and the squared row norms of Q̄ (``norms`` if given)."""
    if hasattr(Q, "__dask_graph__"):
        (Qm,) = compute(Q, progress=progress, label="anchors (QR): load Q")
    else:
        Qm = Q
    if sp.issparse(Qm):
        Qm = sp.csr_matrix(Qm, dtype=np.float64)

        def row(i: int) -> np.ndarray:
            return cast("np.ndarray", Qm.getrow(i).toarray().ravel() * inv[i])

        if norms is None:
            norms = np.asarray(Qm.multiply(Qm).sum(axis=1)).ravel() * inv * inv
    else:
        Qm = np.asarray(Qm, dtype=np.float64)

        def row(i: int) -> np.ndarray:
            return cast("np.ndarray", Qm[i] * inv[i])

        if norms is None:
            norms = np.einsum("ij,ij->i", Qm, Qm) * inv * inv

    def project(b: np.ndarray) -> np.ndarray:
        return cast("np.ndarray", np.asarray(Qm @ b).ravel() * inv)

    return row, project, norms


def _products_by_passes(
    Q: Any, inv: np.ndarray, norms: np.ndarray | None, K: int, progress: bool
) -> tuple[_Row, _Project, np.ndarray]:
    """Rows and products of Q̄ = diag(``inv``) Q, a pass over the blocks of Q (V×V dask
    array) per product, and the squared row norms of Q̄ (``norms``, else by a pass)."""
    first = int(norms is None)  # the row-norms pass, when needed
    total = K - 1 + first
    passes = [0]

    def row(i: int) -> np.ndarray:
        (r,) = compute(Q[i], progress=False, label="anchors (QR): row")
        return cast("np.ndarray", np.asarray(r, dtype=np.float64).ravel() * inv[i])

    def project(b: np.ndarray) -> np.ndarray:
        passes[0] += 1
        (Qb,) = compute(_block_rows(Q, b), progress=progress,
                        label=f"anchors (QR): pass {passes[0] + first}/{total}")
        return cast("np.ndarray", np.asarray(Qb).ravel() * inv)

    if norms is None:
        (sq,) = compute(_block_rows(Q, None), progress=progress,
                        label=f"anchors (QR): pass 1/{total} (row norms)")
        norms = np.asarray(sq).ravel() * inv * inv
    return row, project, norms


def _block_row_product(blocks: list[Any], parts: list[np.ndarray] | None = None) -> np.ndarray:
    """One block-row of Q: Σ_j Q_ij b_j (``parts`` the pieces of b), else the row sums of
    squares Σ_j Σ_l (Q_ij)_l²."""
    out = np.zeros(blocks[0].shape[0])
    for j, blk in enumerate(blocks):
        if parts is None:
            out += (np.asarray(blk.multiply(blk).sum(axis=1)).ravel() if sp.issparse(blk)
                    else np.einsum("ij,ij->i", blk, blk))
        else:
            out += np.asarray(blk @ parts[j]).ravel()
    return out


def _block_rows(Q: Any, b: np.ndarray | None) -> Any:
    """Q b (or the row sums of squares of Q when ``b`` is None) as a V-vector dask array:
    one task per block-row, over the blocks of that row, no concatenation. Only ``b`` (cut
    into the column chunks of Q) enters the graph."""
    import dask.array as da

    if b is None:
        return da.blockwise(_block_row_product, "i", Q, "ij", concatenate=False,
                            dtype=np.float64, meta=np.empty(0))
    bd = da.from_array(np.asarray(b, dtype=np.float64), chunks=(Q.chunks[1],))
    return da.blockwise(_block_row_product, "i", Q, "ij", bd, "j", concatenate=False,
                        dtype=np.float64, meta=np.empty(0))


def _check_n_topics(K: int, n_candidates: int) -> None:
    if K < 2:
        raise ValueError(f"n_topics={K}: need at least 2 topics")
    if K > n_candidates:
        raise ValueError(
            f"n_topics={K} exceeds the {n_candidates} anchor candidates (words with enough "
            "document frequency and co-occurrence mass); lower n_topics or anchor_min_df"
        )


SPLIT_BYTES = 32 * 2**20  # points per thread of the anchor search's products, at least


class _RowProducts:
    """X @ M for the rows of X (n×d) split over threads, each product single-threaded.

    The anchor search is a chain of small products with the points; split by rows they run
    in parallel without a BLAS thread pool, whose idle threads spin (on a client that shares
    its cores with Dask workers, that spinning takes their CPU). Each row of the result is
    the same dot product as in one ``X @ M``."""

    def __init__(self, X: np.ndarray, pool: Any, threads: int = 1) -> None:
        self.X, self.pool = X, pool
        n = X.shape[0]
        # a thread per SPLIT_BYTES of points at least: smaller products are over (from
        # cache) before a thread has woken up
        parts = 1 if pool is None else max(1, min(threads, n // 1024, X.nbytes // SPLIT_BYTES))
        self.bounds = np.linspace(0, n, parts + 1).astype(int)

    def __call__(self, M: np.ndarray) -> np.ndarray:
        M = np.asarray(M, dtype=self.X.dtype)  # (a mixed-precision product is slow)
        if len(self.bounds) == 2:
            return np.asarray(self.X @ M, dtype=np.float64)
        out = np.empty((self.X.shape[0],) + M.shape[1:], dtype=self.X.dtype)
        done = [self.pool.submit(np.matmul, self.X[a:b], M, out=out[a:b])
                for a, b in zip(self.bounds[:-1], self.bounds[1:], strict=True)]
        for f in done:
            f.result()
        return out.astype(np.float64)


@contextmanager
def _row_products(X: np.ndarray) -> Iterator[_RowProducts]:
    """:class:`_RowProducts` for X over a pool of threads (one per usable core, at most 8;
    none on one core), with BLAS pinned to one thread meanwhile."""
    from concurrent.futures import ThreadPoolExecutor

    n = min(8, usable_cores())
    if n < 2:
        yield _RowProducts(X, None)
        return
    with blas_pinned(), ThreadPoolExecutor(n) as pool:
        yield _RowProducts(X, pool, n)


def _pivoted_gram_schmidt(
    row: Callable[[int], np.ndarray],
    project: Callable[[np.ndarray], np.ndarray],
    resid2: np.ndarray,
    K: int,
    dim: int,
    allowed: np.ndarray | None = None,
    seeds: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy column-pivoted QR (Gram–Schmidt) on the rows of an implicit n×dim matrix X.

    Step k picks the allowed row farthest from the span of the rows picked so far (the
    largest residual squared norm), orthogonalises it against the basis twice (for
    stability), normalises it to b_k and updates every residual by r_i −= (x_i·b_k)². X is
    only touched through ``row`` and ``project``, so it may be the sketch, Q̄ in memory, or Q̄
    on disk; the update after the last pick is skipped (it would not change any pick).

    With ``seeds`` (m×dim: the rows of named anchors, :mod:`streamtopic.seeding`) the basis
    starts with them, in their order, and every residual is first projected off their span:
    the K picks are conditioned on the named anchors (m more products with X).

    Parameters
    ----------
    row : callable, int -> ndarray of shape (dim,)
        Row i of X.
    project : callable, ndarray of shape (dim,) -> ndarray of shape (n,)
        X b for a unit vector b.
    resid2 : ndarray of shape (n,)
        Squared row norms of X (not modified).
    K : int
        Number of pivots (besides the seeds).
    dim : int
        Number of columns of X.
    allowed : ndarray of int, optional
        Rows that may become pivots (default: all).
    seeds : ndarray of shape (m, dim), optional
        Vectors the basis starts with.

    Returns
    -------
    chosen : ndarray of shape (K,), int64
        Pivot rows, in order.
    dist : ndarray of shape (m + K,)
        Distance of each seed, then of each pivot, from the span of those before it (‖v‖
        after orthogonalisation: ``|R_kk|`` of the QR factorisation).
    """
    resid2 = np.array(resid2, dtype=np.float64, copy=True)
    m = 0 if seeds is None else int(seeds.shape[0])
    basis = np.zeros((m + K, dim))
    chosen = np.empty(K, dtype=np.int64)
    dist = np.empty(m + K)
    for k in range(m + K):
        if k < m:
            assert seeds is not None
            v = np.array(seeds[k], dtype=np.float64, copy=True).ravel()
            scale = float(np.linalg.norm(v))
        else:
            pool = resid2 if allowed is None else resid2[allowed]
            at = int(np.argmax(pool))
            chosen[k - m] = at if allowed is None else int(allowed[at])
            v = np.array(row(int(chosen[k - m])), dtype=np.float64, copy=True).ravel()
            scale = math.sqrt(max(float(pool.max()), 0.0))
        for _ in range(2):  # re-orthogonalise once for stability
            v -= basis[:k].T @ (basis[:k] @ v)
        norm = float(np.linalg.norm(v))
        if norm <= 1e-14 * max(1.0, scale):
            raise ValueError(
                f"named anchor {k + 1} is a combination of the named anchors before it"
                if k < m else
                f"only {k - m} affinely independent anchor candidates; lower n_topics"
            )
        dist[k] = norm
        basis[k] = v / norm
        if k + 1 < m + K:
            proj = np.asarray(project(basis[k]), dtype=np.float64).ravel()
            resid2 = np.maximum(resid2 - proj * proj, 0.0)
        resid2[chosen[: max(k - m + 1, 0)]] = -1.0
    return chosen, dist


def _greedy(X: np.ndarray, K: int, times: Callable[[np.ndarray], np.ndarray] | None = None,
            fixed: np.ndarray | None = None) -> np.ndarray:
    """Farthest point from the origin, then farthest from the span of those chosen.

    Keeps the squared residual norms of all points and updates them by one projection per
    new basis vector (stabilised Gram–Schmidt): O(n d K) work, no n×d update. ``times``
    computes X @ b (default: in one product). ``fixed`` (m×d): named anchors' points, whose
    span is projected out first (K more are picked)."""
    project = times if times is not None else (lambda b: X @ b)
    chosen, _ = _pivoted_gram_schmidt(
        lambda i: X[i], project, np.einsum("ij,ij->i", X, X), K, X.shape[1], seeds=fixed
    )
    return chosen


def _cleanup_sweep(
    X: np.ndarray, anchors: np.ndarray,
    times: Callable[[np.ndarray], np.ndarray] | None = None,
    fixed: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """Re-pick each anchor in turn as the point farthest from the span of the other K−1.

    The distance of x from span(S∖{s_i}) follows from the dual basis of S: with c = S x and
    M = S Sᵀ, ‖x‖² − ‖P_S x‖² + (c M⁻¹)_i² / (M⁻¹)_ii, so each re-pick costs O(n K) after one
    n×K product per change, never an n×d update. M⁻¹ and the projections are formed again
    only after an anchor changes (O(n K²)), not for every re-pick. ``fixed`` (m×d): named
    anchors' points, part of S but never re-picked (``anchors`` are the others, as rows of
    X)."""
    times = times if times is not None else (lambda M: X @ M)
    m = 0 if fixed is None else int(fixed.shape[0])
    anchors = anchors.copy()
    K = m + anchors.size
    norms2 = np.einsum("ij,ij->i", X, X)
    S = X[anchors] if fixed is None else np.vstack([fixed, X[anchors]])  # K×d
    C = times(np.ascontiguousarray(S.T))  # n×K: c = S x for every point
    M = S @ S.T
    changed = 0
    stale = True
    for i in range(m, K):
        if stale:
            Minv = np.linalg.pinv(M, hermitian=True)
            W = C @ Minv
            base = norms2 - np.einsum("ij,ij->i", W, C)  # ‖x‖² − ‖P_S x‖²
            stale = False
        dist2 = base + W[:, i] ** 2 / max(Minv[i, i], 1e-300)
        dist2[np.delete(anchors, i - m)] = -np.inf
        best = int(np.argmax(dist2))
        if best != anchors[i - m]:
            anchors[i - m] = best
            S[i] = X[best]
            C[:, i] = times(S[i])
            M[i, :] = S @ S[i]
            M[:, i] = M[i, :]
            changed += 1
            stale = True
    return anchors, changed


def _distance_to_others(X: np.ndarray, anchors: np.ndarray,
                        fixed: np.ndarray | None = None) -> np.ndarray:
    """Distance of each anchor from the span of the other K−1: 1/√((M⁻¹)_ii) with
    M = S Sᵀ, the Gram matrix of the anchors' rows S (K×d): ``fixed`` (m×d, named anchors'
    points) first, then the rows ``anchors`` of X."""
    S = X[anchors] if fixed is None else np.vstack([fixed, X[anchors]])
    Minv = np.linalg.pinv(S @ S.T, hermitian=True)
    return cast("np.ndarray", 1.0 / np.sqrt(np.maximum(np.diag(Minv), 1e-300)))


# ============================================================================ LP anchors

#: Rows closer than this (L1, in units of the largest entry of the projected rows) are one
#: point for the LP test whatever the noise: a topic's anchor and a word that occurs, up to
#: rounding, in that topic alone are the same vertex of a population Q̄
LP_SAME_POINT = 1e-6
#: The exclusion radius in units of the noise level δ: a row is tested against the hull of
#: the rows farther than LP_EXCLUDE·δ from it (Arora, Ge & Moitra's 6δ)
LP_EXCLUDE = 6.0
#: A row stands out (is near a vertex) when its distance from that hull exceeds
#: LP_FLAG·(δ + ε_i): the paper's 2δ, with the row's own noise ε_i added (noise pushes a row
#: out of the hull by about its size, the hull's rows move by about δ)
LP_FLAG = 2.0
#: z of the lower confidence bound on a row's weight on its vertex, which picks the anchor
#: among the rows near one vertex
LP_CONFIDENCE = 2.0
#: Multiples of the noise level tried in turn until K vertices separate (0: the exact test)
LP_SCALES = (1.0, 0.5, 0.25, 0.0)
#: The noise level δ is LP_NOISE_FACTOR × this quantile of the rows' exact hull distances
#: (:func:`_noise_levels`): on semi-synthetic corpora (V = 500 to 2,000, 10 to 100
#: documents per word) the median L1 noise of a row in the span is 1.4 to 1.8 times it
LP_NOISE_QUANTILE = 0.95
LP_NOISE_FACTOR = 1.6
#: Rows whose exact hull distances measure the noise level, at most (a random sample)
LP_NOISE_SAMPLE = 500


def find_anchors_lp(
    X: np.ndarray, K: int, candidates: np.ndarray, *, seed: int | None = 0,
    dim: int | None = None,
) -> AnchorResult:
    """Anchors by linear programs, robust to sampling noise (Arora, Ge and Moitra 2012,
    "Learning Topic Models — Going beyond SVD", the algorithm for a noisy Q).

    Anchor rows of Q̄ are the vertices of the convex hull of the rows. The candidates' rows
    are projected onto their top ``dim`` right singular vectors (a separable Q̄ has rank K, so
    for a population Q the projection keeps the hull exactly). Then:

    1. *Noise.* The noise level δ comes from the exact test: the L1 distance from a row
       to the convex hull of all the others (a linear program, below) is 0 for a row inside
       the population hull but for its noise, so δ is ``LP_NOISE_FACTOR`` × a high quantile
       of those distances over (a sample of) the rows, the K largest left out
       (:func:`_noise_levels`). Each row's own noise ε_i scales δ by the row's distance
       from the rank-``dim`` span (what the model does not explain, also sampling noise:
       larger for rarer words), relative to the median row's; the document-frequency
       threshold on candidates keeps them all moderate.
    2. *Hull distances.* For each candidate, one linear program (HiGHS' dual simplex,
       :func:`scipy.optimize.linprog`; the interior point as the fallback) gives the L1
       distance from its row y_i to the convex hull of the rows farther than
       ``LP_EXCLUDE``·δ from it: min ‖y_i − Σ_j λ_j y_j‖₁ over λ ≥ 0, Σ_j λ_j = 1, the norm by
       the residual's positive and negative parts. Leaving out the row's near-duplicates
       means that the noisy copies of a vertex (its anchor and the words nearly unique to
       its topic) do not hide each other.
    3. *Vertices.* Rows farther than ``LP_FLAG``·(δ + ε_i) from that hull stand out; those
       within ``LP_EXCLUDE``·δ of each other (transitively) are one vertex. The K vertices
       whose rows lie farthest from the hull are kept. If fewer than K vertices separate,
       the noise radii are shrunk (``LP_SCALES``) down to the exact test.
    4. *Anchors.* For each vertex, its row of largest lower confidence bound on its
       barycentric weight on that vertex (with respect to the K vertices' mean rows),
       weight − ``LP_CONFIDENCE`` × the weight's noise: the most extreme row, the noisy
       ones discounted, so the frequent true anchor wins over rarer near-anchors.

    On a population Q the noise is nil and this is the exact test (rows within
    ``LP_SAME_POINT`` one point). On finite separable corpora it finds the planted anchors
    where the exact test misses them, and often where FastAnchorWords and the pivoted QR
    pick noisy near-anchors of the same topics (``benchmarks/lp_anchors.py``). It wants Q̄ as
    sampled: a rectified Q has rank K, so no residual to tell the rows' noise apart, and
    its rows move (use ``method='plain'``).

    Each program's columns come in by column generation (:func:`_hull_distance`): a row's
    program starts from the rows extreme along a few directions and stops once the row is
    known not to stand out. One program per candidate and noise scale, plus up to
    ``LP_NOISE_SAMPLE`` for δ: for small V (seconds at V = 500 to 2,000, ~10 s at V =
    4,000).

    Parameters
    ----------
    X : ndarray of shape (n, m)
        Rows of Q̄ (m = V columns, or fewer: with m ≤ ``dim`` the rows are not projected,
        and every row's noise is the level δ).
    K : int
        Number of anchors.
    candidates : ndarray of int
        Row ids that may become anchors (the hull is theirs).
    seed : int or None
        Seed of the starting vector of the partial SVD (ARPACK) and of the sample of rows
        that measures δ.
    dim : int, optional
        Projected dimension (default K).

    Returns
    -------
    AnchorResult
        Anchors as row ids of ``X``, the vertex farthest from the others' hull first
        (``distances``: each anchor's L1 distance from the hull of the rows outside its
        radius, in units of the projected rows' largest entry); no cleanup (``greedy`` =
        ``anchors``).

    Raises
    ------
    ValueError
        When fewer than K vertices separate even by the exact test (K exceeds the number of
        distinct vertices of the candidates' hull).
    """
    candidates = np.asarray(candidates, dtype=np.int64)
    _check_n_topics(K, candidates.size)
    Y, resid = _lp_points(np.asarray(X[candidates], dtype=np.float64), int(dim or K), seed)
    delta, noise = _noise_levels(Y, resid, K, seed)
    clusters: list[np.ndarray] = []
    for scale in LP_SCALES if LP_EXCLUDE * delta > LP_SAME_POINT else (0.0,):  # else nil
        radius = max(LP_EXCLUDE * scale * delta, LP_SAME_POINT)
        threshold = np.maximum(LP_FLAG * scale * (delta + noise), LP_SAME_POINT)  # (n,)
        dist = _robust_hull_distances(Y, radius, threshold)
        standing = dist > threshold
        clusters = _vertex_clusters(Y, dist, np.flatnonzero(standing), radius, K)
        log.info("LP anchors: noise level %.3g, radius %.3g: %d of %d rows stand out, "
                 "as %d of the %d vertices", delta, radius, standing.sum(), Y.shape[0],
                 len(clusters), K)
        if len(clusters) == K:
            break
    else:
        raise ValueError(
            f"n_topics={K}: only {len(clusters)} vertices of the anchor candidates' convex "
            "hull stand apart; lower n_topics"
        )
    sigma = noise / math.sqrt(2.0 * Y.shape[1] / math.pi)  # L2 in the span (n,)
    local = _representatives(Y, sigma, clusters, LP_CONFIDENCE)
    anchors = candidates[local]
    return AnchorResult(anchors, anchors.copy(), dist[local], 0, 0, [anchors.copy()])


def _lp_points(Xc: np.ndarray, d: int, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``Xc`` (n×m) in their top-``d`` right singular subspace (n×d, by ARPACK for
    a few vectors of a large matrix), scaled to a largest entry of 1 (HiGHS' tolerances are
    absolute), and each row's L2 distance from that subspace (n,), in the same units."""
    n, m = Xc.shape
    if m <= d:
        Y, resid = Xc.copy(), np.zeros(n)
    else:
        if d < min(n, m) - 1:
            from scipy.sparse.linalg import svds

            v0 = np.random.default_rng(seed).standard_normal(min(n, m))
            _, _, basis = svds(Xc, k=d, v0=v0)
        else:
            basis = scipy.linalg.svd(Xc, full_matrices=False, check_finite=False)[2][:d]
        Y = Xc @ basis.T
        resid = np.empty(n)
        step = max(1, 2**22 // m)  # the residuals of ~32 MiB of rows at a time
        for i in range(0, n, step):
            resid[i:i + step] = np.linalg.norm(Xc[i:i + step] - Y[i:i + step] @ basis, axis=1)
    top = max(float(np.abs(Y).max()), 1e-300)
    return Y / top, resid / top


def _noise_levels(
    Y: np.ndarray, resid: np.ndarray, K: int, seed: int | None
) -> tuple[float, np.ndarray]:
    """The noise level δ of the rows ``Y`` (n×d) and each row's noise ε (n,), L1 sizes in
    the rows' units.

    δ is ``LP_NOISE_FACTOR`` × the ``LP_NOISE_QUANTILE`` quantile of the exact test's hull
    distances (every other row in the hull) of up to ``LP_NOISE_SAMPLE`` rows, the K
    largest left out (vertices): a row inside the population hull sticks out of the
    others' only by noise. ε_i is δ × the row's distance from the rank-d span (``resid``
    (n,)) over the median such distance: the span's residual is sampling noise too, and
    follows each row's share of it (rarer words, more), but it grows with the number of
    words it spreads over, so only its relative size is used. With no residual (a rank-d
    Q̄, e.g. rectified), ε = δ."""
    n = Y.shape[0]
    sample = np.arange(n)
    if n > LP_NOISE_SAMPLE:
        sample = np.sort(np.random.default_rng(seed).choice(n, LP_NOISE_SAMPLE, replace=False))
    d0 = np.sort(_robust_hull_distances(Y, LP_SAME_POINT, rows=sample))
    d0 = d0[np.isfinite(d0)][: max(1, d0.size - K)]
    delta = LP_NOISE_FACTOR * float(np.quantile(d0, LP_NOISE_QUANTILE)) if d0.size else 0.0
    typical = float(np.median(resid))
    if typical > 0:
        return delta, delta * resid / typical
    return delta, np.full(n, delta)


def _robust_hull_distances(
    Y: np.ndarray, radius: float, enough: np.ndarray | None = None,
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """The L1 distance from each row of ``Y`` (n×d) to the convex hull of the rows farther
    than ``radius`` (L1) from it (n,); inf when there are none. One linear program per row
    (:func:`_hull_distance`), over λ (one per far row, brought in by column generation) and
    the residual's positive and negative parts (d each). A row's program may stop at any
    value at most ``enough`` (n,) (an upper bound: the row does not stand out). ``rows``
    (ids): only those rows' distances, in that order."""
    from scipy.spatial.distance import cdist

    n, d = Y.shape
    rows = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64)
    points = np.vstack([Y.T, np.ones((1, n))])  # (d+1)×n: λ's columns, Σλ = 1 the last row
    slack = np.vstack([np.hstack([np.eye(d), -np.eye(d)]), np.zeros((1, 2 * d))])
    outer = _outer_rows(Y)
    stop = np.zeros(n) if enough is None else enough
    dist = np.full(rows.size, np.inf)
    step = max(1, 2**20 // n)  # rows whose neighbours are found at once (~8 MiB)
    for i0 in range(0, rows.size, step):
        block = rows[i0:i0 + step]
        far = cdist(Y[block], Y, "cityblock") > radius  # (step×n)
        for k, (i, keep) in enumerate(zip(block.tolist(), far, strict=True)):
            if keep.any():
                dist[i0 + k] = _hull_distance(points, slack, i, keep, outer, float(stop[i]))
    return dist


#: Columns a round of column generation adds to a hull program, at most
LP_NEW_COLUMNS = 16


def _outer_rows(Y: np.ndarray, per_direction: int = 4) -> np.ndarray:
    """Rows of ``Y`` (n×d) likely to span the hull (a bool mask, (n,)): the ``per_direction``
    farthest along each coordinate axis, both ways, and along 4d fixed random directions."""
    n, d = Y.shape
    U = np.hstack([np.eye(d), -np.eye(d), np.random.default_rng(0).standard_normal((d, 4 * d))])
    top = min(per_direction, n)
    mask = np.zeros(n, dtype=bool)
    mask[np.argpartition(-(Y @ U), top - 1, axis=0)[:top].ravel()] = True
    return mask


def _hull_distance(
    points: np.ndarray, slack: np.ndarray, i: int, far: np.ndarray, outer: np.ndarray,
    enough: float,
) -> float:
    """min ‖y_i − Σ_j λ_j y_j‖₁ over λ ≥ 0 on the ``far`` rows (bool mask, (n,)), Σ_j λ_j = 1:
    ``points`` the columns (y_j; 1) ((d+1)×n), ``slack`` the residual's parts ((d+1)×2d).

    By column generation: the program over the far rows among ``outer`` (bool mask (n,)),
    then, while any far row's reduced cost −(u·y_j + t) (u, t the duals) is negative, again
    with the ``LP_NEW_COLUMNS`` most negative added. Exact when no column prices out, else
    stopped as soon as the value is at most ``enough``: it only falls as columns come in."""
    cols = far & outer
    if not cols.any():
        cols = far.copy()
    while True:
        value, duals = _solve_hull_program(points[:, cols], slack, points[:, i])
        if value <= enough:
            return value
        reduced = np.where(far & ~cols, -(duals @ points), 0.0)  # (n,)
        new = np.flatnonzero(reduced < -1e-7)  # (HiGHS' dual feasibility tolerance)
        if new.size == 0:
            return value
        cols[new[np.argsort(reduced[new], kind="stable")[:LP_NEW_COLUMNS]]] = True


def _solve_hull_program(
    points: np.ndarray, slack: np.ndarray, target: np.ndarray
) -> tuple[float, np.ndarray]:
    """The hull program over the columns ``points`` ((d+1)×m) and ``slack``, right-hand side
    ``target`` (d+1,): its value and its duals (d+1,)."""
    from scipy.optimize import linprog

    cost = np.r_[np.zeros(points.shape[1]), np.ones(slack.shape[1])]
    A_eq = np.hstack([points, slack])
    for method in ("highs-ds", "highs-ipm"):  # the interior point when the simplex stops
        res = linprog(cost, A_eq=A_eq, b_eq=target, bounds=(0, None), method=method)
        if res.status == 0:
            return float(res.fun), np.asarray(res.eqlin.marginals, dtype=np.float64)
    raise RuntimeError(f"a hull distance program failed: {res.message}")


def _vertex_clusters(
    Y: np.ndarray, dist: np.ndarray, standing: np.ndarray, radius: float, K: int
) -> list[np.ndarray]:
    """The rows ``standing`` (ids into ``Y``, n×d) grouped into vertices: rows within
    ``radius`` (L1) of each other, transitively, are one. The (at most) ``K`` vertices whose
    rows lie farthest from the others' hull (``dist``, (n,)), farthest first, as row ids."""
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    if standing.size == 0:
        return []
    pairs = cKDTree(Y[standing]).query_pairs(radius, p=1, output_type="ndarray")
    near = sp.coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])),
                         shape=(standing.size,) * 2)
    count, label = connected_components(near, directed=False)
    best = np.full(count, -np.inf)
    np.maximum.at(best, label, dist[standing])
    order = np.argsort(-best, kind="stable")[:K]
    return [standing[label == c] for c in order]


def _representatives(
    Y: np.ndarray, sigma: np.ndarray, clusters: list[np.ndarray], z: float
) -> np.ndarray:
    """One row per vertex (``clusters``, row ids into ``Y``, n×d): the row of largest
    w_k − z·σ_k, its barycentric weight on vertex k with respect to the vertices' mean rows
    and that weight's noise (the row's L2 noise ``sigma`` (n,) × the weight's gradient
    norm). (K,) row ids."""
    centres = np.array([Y[g].mean(axis=0) for g in clusters])  # K×d
    weights = np.linalg.pinv(np.vstack([centres.T, np.ones((1, len(clusters)))]))  # K×(d+1)
    gain = np.linalg.norm(weights[:, :-1], axis=1)  # (K,)
    picks = [g[int(np.argmax(Y[g] @ weights[k, :-1] + weights[k, -1] - z * gain[k] * sigma[g]))]
             for k, g in enumerate(clusters)]
    return np.asarray(picks, dtype=np.int64)
