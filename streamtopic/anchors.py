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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from ._numeric import safe_inverse
from .sketch import default_anchor_min_df, projection_block, write_sketch  # noqa: F401 (moved)

__all__ = [
    "AnchorResult",
    "find_anchors",
    "find_anchors_lp",
    "find_anchors_qr",
]


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
        the pivots before it, in units of Q̄ (the residual norm at selection, |R_kk|).
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
    precision: str = "single",
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

    Returns
    -------
    AnchorResult
        Anchors as row ids of ``X``.
    """
    if precision not in ("single", "double"):
        raise ValueError(f"precision={precision!r}: expected 'single' or 'double'")
    candidates = np.asarray(candidates, dtype=np.int64)
    _check_n_topics(K, candidates.size)
    Xc = np.asarray(X[candidates], dtype=np.float64)
    if K > Xc.shape[1]:  # K points in d < K dimensions are never linearly independent
        raise ValueError(
            f"n_topics={K} exceeds the sketch dimension {Xc.shape[1]}: sketch_dim "
            "(--sketch-dim) must be at least the number of topics K"
        )
    points = Xc.astype(np.float32) if precision == "single" else Xc
    with _row_products(points) as times:
        greedy_local = _greedy(Xc, K, times)
        local = greedy_local.copy()
        changed_total, sweeps = 0, 0
        history = [candidates[local].copy()]
        if cleanup:
            for sweep in range(1, max_sweeps + 1):
                local, changed = _cleanup_sweep(Xc, local, times)
                history.append(candidates[local].copy())
                changed_total, sweeps = changed_total + changed, sweep
                if changed == 0:
                    break
    dist = _distance_to_others(Xc, local)
    return AnchorResult(
        candidates[local], candidates[greedy_local], dist, changed_total, sweeps, history
    )


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

    Returns
    -------
    AnchorResult
        ``anchors`` (K,) the pivots in order, ``greedy`` the same, ``distances`` (K,) the
        residual norm of each pivot at selection (distance of q̄_{s_k} from the span of the
        rows picked before it, |R_kk|), ``changed`` = ``sweeps`` = 0.

    Raises
    ------
    ValueError
        When K < 2, K exceeds the number of candidates, the candidates are not valid row ids,
        the candidates run out of linearly independent rows, or ``in_memory=False`` is asked
        of a Q that is not a dask array.
    """
    K, V, p, candidates = _qr_inputs(Q, p, n_topics, candidates)
    inv = safe_inverse(p)
    lazy = hasattr(Q, "__dask_graph__")
    if in_memory is None:
        in_memory = not lazy or 2 * 8 * V * V <= memory_budget
    if not in_memory and not lazy:
        raise ValueError("in_memory=False needs Q as a dask array (e.g. store.Q)")
    if in_memory:
        row, project, norms = _products_in_memory(Q, inv, norms, progress)
    else:
        row, project, norms = _products_by_passes(Q, inv, norms, K, progress)
    norms = np.asarray(norms, dtype=np.float64).ravel()
    if norms.shape != (V,):
        raise ValueError(f"norms has shape {norms.shape}, expected ({V},)")
    chosen, dist = _pivoted_gram_schmidt(row, project, norms, K, V, allowed=candidates)
    return AnchorResult(chosen, chosen.copy(), dist, 0, 0, [chosen.copy()])


#: Row i of Q̄ (V,), and Q̄ b (V,) for a V-vector b: how the implicit QR touches Q̄.
_Row = Callable[[int], np.ndarray]
_Project = Callable[[np.ndarray], np.ndarray]


def _qr_inputs(
    Q: Any, p: np.ndarray, n_topics: int, candidates: np.ndarray
) -> tuple[int, int, np.ndarray, np.ndarray]:
    """K, V, p (V,) and the candidates (int64) of :func:`find_anchors_qr`, checked."""
    K = int(n_topics)
    candidates = np.asarray(candidates, dtype=np.int64).ravel()
    _check_n_topics(K, candidates.size)
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
    from .cluster import compute

    if hasattr(Q, "__dask_graph__"):
        (Qm,) = compute(Q, progress=progress, label="anchors (QR): load Q")
    else:
        Qm = Q
    if sp.issparse(Qm):
        Qm = sp.csr_matrix(Qm, dtype=np.float64)

        def row(i: int) -> np.ndarray:
            return Qm.getrow(i).toarray().ravel() * inv[i]

        if norms is None:
            norms = np.asarray(Qm.multiply(Qm).sum(axis=1)).ravel() * inv * inv
    else:
        Qm = np.asarray(Qm, dtype=np.float64)

        def row(i: int) -> np.ndarray:
            return Qm[i] * inv[i]

        if norms is None:
            norms = np.einsum("ij,ij->i", Qm, Qm) * inv * inv

    def project(b: np.ndarray) -> np.ndarray:
        return np.asarray(Qm @ b).ravel() * inv

    return row, project, norms


def _products_by_passes(
    Q: Any, inv: np.ndarray, norms: np.ndarray | None, K: int, progress: bool
) -> tuple[_Row, _Project, np.ndarray]:
    """Rows and products of Q̄ = diag(``inv``) Q, a pass over the blocks of Q (V×V dask
    array) per product, and the squared row norms of Q̄ (``norms``, else by a pass)."""
    from .cluster import compute

    first = int(norms is None)  # the row-norms pass, when needed
    total = K - 1 + first
    passes = [0]

    def row(i: int) -> np.ndarray:
        (r,) = compute(Q[i], progress=False, label="anchors (QR): row")
        return np.asarray(r, dtype=np.float64).ravel() * inv[i]

    def project(b: np.ndarray) -> np.ndarray:
        passes[0] += 1
        (Qb,) = compute(_block_rows(Q, b), progress=progress,
                        label=f"anchors (QR): pass {passes[0] + first}/{total}")
        return np.asarray(Qb).ravel() * inv

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

    from threadpoolctl import threadpool_limits

    from .cluster import usable_cores

    n = min(8, usable_cores())
    if n < 2:
        yield _RowProducts(X, None)
        return
    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(n) as pool:
        yield _RowProducts(X, pool, n)


def _pivoted_gram_schmidt(
    row: Callable[[int], np.ndarray],
    project: Callable[[np.ndarray], np.ndarray],
    resid2: np.ndarray,
    K: int,
    dim: int,
    allowed: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy column-pivoted QR (Gram–Schmidt) on the rows of an implicit n×dim matrix X.

    Step k picks the allowed row farthest from the span of the rows picked so far (the
    largest residual squared norm), orthogonalises it against the basis twice (for
    stability), normalises it to b_k and updates every residual by r_i −= (x_i·b_k)². X is
    only touched through ``row`` and ``project``, so it may be the sketch, Q̄ in memory, or Q̄
    on disk; the update after the last pick is skipped (it would not change any pick).

    Parameters
    ----------
    row : callable, int -> ndarray of shape (dim,)
        Row i of X.
    project : callable, ndarray of shape (dim,) -> ndarray of shape (n,)
        X b for a unit vector b.
    resid2 : ndarray of shape (n,)
        Squared row norms of X (not modified).
    K : int
        Number of pivots.
    dim : int
        Number of columns of X.
    allowed : ndarray of int, optional
        Rows that may become pivots (default: all).

    Returns
    -------
    chosen : ndarray of shape (K,), int64
        Pivot rows, in order.
    dist : ndarray of shape (K,)
        Distance of each pivot from the span of the pivots before it (‖v‖ after
        orthogonalisation: |R_kk| of the QR factorisation).
    """
    resid2 = np.array(resid2, dtype=np.float64, copy=True)
    basis = np.zeros((K, dim))
    chosen = np.empty(K, dtype=np.int64)
    dist = np.empty(K)
    for k in range(K):
        pool = resid2 if allowed is None else resid2[allowed]
        at = int(np.argmax(pool))
        i = at if allowed is None else int(allowed[at])
        chosen[k] = i
        v = np.array(row(i), dtype=np.float64, copy=True).ravel()
        for _ in range(2):  # re-orthogonalise once for stability
            v -= basis[:k].T @ (basis[:k] @ v)
        norm = float(np.linalg.norm(v))
        if norm <= 1e-14 * max(1.0, math.sqrt(max(float(pool.max()), 0.0))):
            raise ValueError(
                f"only {k} affinely independent anchor candidates; lower n_topics"
            )
        dist[k] = norm
        basis[k] = v / norm
        if k + 1 < K:
            proj = np.asarray(project(basis[k]), dtype=np.float64).ravel()
            resid2 = np.maximum(resid2 - proj * proj, 0.0)
        resid2[chosen[: k + 1]] = -1.0
    return chosen, dist


def _greedy(X: np.ndarray, K: int, times: Callable[[np.ndarray], np.ndarray] | None = None
            ) -> np.ndarray:
    """Farthest point from the origin, then farthest from the span of those chosen.

    Keeps the squared residual norms of all points and updates them by one projection per
    new basis vector (stabilised Gram–Schmidt): O(n d K) work, no n×d update. ``times``
    computes X @ b (default: in one product)."""
    project = times if times is not None else (lambda b: X @ b)
    chosen, _ = _pivoted_gram_schmidt(
        lambda i: X[i], project, np.einsum("ij,ij->i", X, X), K, X.shape[1]
    )
    return chosen


def _cleanup_sweep(
    X: np.ndarray, anchors: np.ndarray,
    times: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, int]:
    """Re-pick each anchor in turn as the point farthest from the span of the other K−1.

    The distance of x from span(S∖{s_i}) follows from the dual basis of S: with c = S x and
    M = S Sᵀ, ‖x‖² − ‖P_S x‖² + (c M⁻¹)_i² / (M⁻¹)_ii, so each re-pick costs O(n K) after one
    n×K product per change, never an n×d update. M⁻¹ and the projections are formed again
    only after an anchor changes (O(n K²)), not for every re-pick."""
    times = times if times is not None else (lambda M: X @ M)
    anchors = anchors.copy()
    K = anchors.size
    norms2 = np.einsum("ij,ij->i", X, X)
    S = X[anchors]  # K×d
    C = times(np.ascontiguousarray(S.T))  # n×K: c = S x for every point
    M = S @ S.T
    changed = 0
    stale = True
    for i in range(K):
        if stale:
            Minv = np.linalg.pinv(M, hermitian=True)
            W = C @ Minv
            base = norms2 - np.einsum("ij,ij->i", W, C)  # ‖x‖² − ‖P_S x‖²
            stale = False
        dist2 = base + W[:, i] ** 2 / max(Minv[i, i], 1e-300)
        dist2[np.delete(anchors, i)] = -np.inf
        best = int(np.argmax(dist2))
        if best != anchors[i]:
            anchors[i] = best
            S[i] = X[best]
            C[:, i] = times(S[i])
            M[i, :] = S @ S[i]
            M[:, i] = M[i, :]
            changed += 1
            stale = True
    return anchors, changed


def _distance_to_others(X: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """Distance of each anchor from the span of the other K−1: 1/√((M⁻¹)_ii) with
    M = S Sᵀ, the Gram matrix of the anchors' rows S (K×d)."""
    S = X[anchors]
    Minv = np.linalg.pinv(S @ S.T, hermitian=True)
    return 1.0 / np.sqrt(np.maximum(np.diag(Minv), 1e-300))


# ============================================================================ LP anchors


def find_anchors_lp(
    X: np.ndarray, K: int, candidates: np.ndarray, *, seed: int | None = 0,
    dim: int | None = None,
) -> AnchorResult:
    """Anchors by linear programs (Arora, Ge and Moitra 2012, "Learning Topic Models — Going
    beyond SVD"): a row of Q̄ is an anchor when it is not in the convex hull of the others.

    Each candidate row x_i is tested by one linear program, solved by HiGHS' interior point
    method (:func:`scipy.optimize.linprog`; its dual simplex as the fallback): the L1
    distance from x_i to the convex hull of the other candidates,
    min ‖x_i − Σ_j λ_j x_j‖₁ over λ ≥ 0, Σ_j λ_j = 1 (rows within ``LP_SAME_POINT`` of x_i
    are x_i itself and left out). It is 0 inside the hull and positive at a vertex. The K
    candidates farthest from the others' hull, one per point, are the anchors. The rows are
    first projected onto the candidates' top ``dim`` right singular vectors (default K):
    Q̄'s rows lie in the span of the K anchor rows, so for a population Q the projection
    keeps the hull and its vertices exactly, and it makes each program
    small. One program per candidate: for small V.

    The test is exact for a separable population Q (``tests/test_anchors.py``). On a finite
    corpus whose topics have many near-anchor words, a vertex's distance to the hull of the
    others is small (its neighbours nearly span it) and sampling noise pushes other rows
    out of the hull by as much: there FastAnchorWords and the pivoted QR, which measure the
    distance to the span of the anchors chosen so far, are the robust choices.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Rows of Q̄.
    K : int
        Number of anchors.
    candidates : ndarray of int
        Row ids that may become anchors (the hull is theirs).
    seed : int or None
        Unused (the projection is deterministic); kept for the estimator's call.
    dim : int, optional
        Projected dimension (default K).

    Returns
    -------
    AnchorResult
        Anchors as row ids of ``X``, by decreasing distance from the others' hull
        (``distances``, L1 in projected units scaled to a largest entry of 1); no cleanup
        (``greedy`` = ``anchors``).
    """
    candidates = np.asarray(candidates, dtype=np.int64)
    _check_n_topics(K, candidates.size)
    Xc = np.asarray(X[candidates], dtype=np.float64)
    d = int(dim or K)
    if d < Xc.shape[1]:  # the candidates' rows in their top-d right singular subspace
        _, _, Vt = scipy.linalg.svd(Xc, full_matrices=False, check_finite=False)
        Xc = Xc @ Vt[:d].T
    Xc /= max(float(np.abs(Xc).max()), 1e-300)  # entries of order 1: HiGHS's tolerances
    same = LP_SAME_POINT * max(float(np.abs(Xc).sum(axis=1).max()), 1e-300)

    def near(i: int) -> np.ndarray:  # the rows that are row i's point (n,), row i included
        return np.abs(Xc - Xc[i]).sum(axis=1) <= same

    dist = np.empty(len(Xc))
    for i in range(len(Xc)):
        keep = ~near(i)
        keep[i] = True
        dist[i] = _hull_distance(Xc[keep], int(keep[:i].sum()))
    local: list[int] = []
    for i in np.argsort(-dist, kind="stable").tolist():  # one row per point
        if not near(i)[local].any():
            local.append(i)
        if len(local) == K:
            break
    anchors = candidates[np.asarray(local, dtype=np.int64)]
    return AnchorResult(anchors, anchors.copy(), dist[local], 0, 0, [anchors.copy()])


#: Rows closer than this (L1, relative to the largest row's L1 norm) are one point for the LP
#: test: a row is tested against the hull of the rows that are not its duplicates, and at
#: most one row per point becomes an anchor (a topic's anchor and a word that occurs, up to
#: rounding, in that topic alone are the same vertex)
LP_SAME_POINT = 1e-6


def _hull_distance(P: np.ndarray, i: int) -> float:
    """The L1 distance from row i of P (n×d) to the convex hull of its other rows: one
    linear program over λ (n − 1) and the residual's positive and negative parts (d each)."""
    from scipy.optimize import linprog

    others = np.delete(P, i, axis=0)
    m, d = others.shape
    cost = np.r_[np.zeros(m), np.ones(2 * d)]
    eye = np.eye(d)
    A_eq = np.block([[others.T, eye, -eye], [np.ones((1, m)), np.zeros((1, 2 * d))]])
    b_eq = np.r_[P[i], 1.0]
    for method in ("highs-ipm", "highs-ds"):  # the interior point copes with the points'
        # degeneracy (rank K in d dimensions), where the simplex may stop on numerics
        res = linprog(cost, A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method=method)
        if res.status == 0:
            return float(res.fun)
    raise RuntimeError(f"the hull program of row {i} failed: {res.message}")
