"""The projected sketch of Q̄ and FastAnchorWords (Arora et al. 2013, Algorithm 4).

Anchor words are the vertices of the convex hull of the rows of the row-normalised
co-occurrence matrix Q̄. FastAnchorWords finds them greedily: the point farthest from the
origin, then repeatedly the point farthest from the span of those chosen. A *cleanup pass*
then re-picks each anchor as the point farthest from the span of the other K−1.

The rows live in V dimensions; the sketch Q̄ P (P a seeded V×d random projection, d ≈ 1000)
preserves distances to spans well enough (Johnson–Lindenstrauss) and is computed block by
block from the store, so no process ever holds Q̄ itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "AnchorResult",
    "default_anchor_min_df",
    "projection_block",
    "sketch_sums",
    "find_anchors",
]


def default_anchor_min_df(n_docs: int) -> int:
    """Document frequency an anchor candidate needs by default: 0.5% of the documents, at
    least 10 (100 documents at 20,000 documents, as the paper authors' code uses)."""
    return max(10, math.ceil(0.005 * n_docs))


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


def _sketch_block(
    block: np.ndarray, seed: int | None, d: int, V: int, block_info: Any = None
) -> np.ndarray:
    """For one block Q_ij: [Q_ij P_j | row sums | row sums of squares], shape (r, 1, d+2)."""
    (j0, j1) = block_info[0]["array-location"][1]
    P = projection_block(seed, j0, j1, d, V)
    out = np.empty((block.shape[0], 1, d + 2))
    out[:, 0, :d] = (P.T @ block.T).T
    out[:, 0, d] = block.sum(axis=1)
    out[:, 0, d + 1] = np.einsum("ij,ij->i", block, block)
    return out


def sketch_sums(Q: Any, d: int, seed: int | None) -> Any:
    """One pass over Q (V×V dask array): a V×(d+2) dask array holding Q P (columns 0..d−1),
    the row sums p (column d) and the row sums of squares (column d+1).

    Scaling the first d columns of row i by 1/p_i gives the sketch Q̄ P (zero rows stay zero).
    Per block the work is a sparse-times-dense product, summed over column blocks by Dask's
    tree reduction: no task holds more than a block of Q and a block of the result.
    """
    V = Q.shape[0]
    nbc = len(Q.chunks[1])
    parts = Q.map_blocks(
        _sketch_block, seed, d, V,
        new_axis=2, chunks=(Q.chunks[0], (1,) * nbc, (d + 2,)),
        dtype=np.float64, meta=np.empty((0, 0, 0)),
    )
    return parts.sum(axis=1)


@dataclass
class AnchorResult:
    """Anchors found by FastAnchorWords.

    Attributes
    ----------
    anchors : ndarray of shape (K,)
        Word ids, after the cleanup pass.
    greedy : ndarray of shape (K,)
        Word ids chosen by the greedy pass, before cleanup.
    distances : ndarray of shape (K,)
        Distance of each final anchor from the span of the other K−1 (in sketch units).
    changed : int
        How many anchors the cleanup pass replaced.
    sweeps : int
        Cleanup sweeps run (until no anchor changes, at most ``max_sweeps``).
    """

    anchors: np.ndarray
    greedy: np.ndarray
    distances: np.ndarray
    changed: int
    sweeps: int
    history: list[np.ndarray] = field(default_factory=list)


def find_anchors(
    X: np.ndarray, K: int, candidates: np.ndarray, *, cleanup: bool = True, max_sweeps: int = 5
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

    Returns
    -------
    AnchorResult
        Anchors as row ids of ``X``.
    """
    candidates = np.asarray(candidates, dtype=np.int64)
    if K < 2:
        raise ValueError(f"n_topics={K}: need at least 2 topics")
    if K > candidates.size:
        raise ValueError(
            f"n_topics={K} exceeds the {candidates.size} anchor candidates (words with enough "
            "document frequency and co-occurrence mass); lower n_topics or anchor_min_df"
        )
    Xc = np.asarray(X[candidates], dtype=np.float64)
    greedy_local = _greedy(Xc, K)
    local = greedy_local.copy()
    changed_total, sweeps = 0, 0
    history = [candidates[local].copy()]
    if cleanup:
        for sweeps in range(1, max_sweeps + 1):
            local, changed = _cleanup_sweep(Xc, local)
            history.append(candidates[local].copy())
            changed_total += changed
            if changed == 0:
                break
    dist = _distance_to_others(Xc, local)
    return AnchorResult(
        candidates[local], candidates[greedy_local], dist, changed_total, sweeps, history
    )


def _greedy(X: np.ndarray, K: int) -> np.ndarray:
    """Farthest point from the origin, then farthest from the span of those chosen.

    Keeps the squared residual norms of all points and updates them by one projection per
    new basis vector (stabilised Gram–Schmidt): O(n d K) work, no n×d update."""
    n, d = X.shape
    resid2 = np.einsum("ij,ij->i", X, X)
    basis = np.zeros((K, d))
    chosen = np.empty(K, dtype=np.int64)
    for k in range(K):
        i = int(np.argmax(resid2))
        chosen[k] = i
        v = X[i].copy()
        for _ in range(2):  # re-orthogonalise once for stability
            v -= basis[:k].T @ (basis[:k] @ v)
        norm = np.linalg.norm(v)
        if norm <= 1e-14 * max(1.0, np.sqrt(resid2.max())):
            raise ValueError(
                f"only {k} affinely independent anchor candidates; lower n_topics"
            )
        basis[k] = v / norm
        proj = X @ basis[k]
        resid2 = np.maximum(resid2 - proj * proj, 0.0)
        resid2[chosen[: k + 1]] = -1.0
    return chosen


def _cleanup_sweep(X: np.ndarray, anchors: np.ndarray) -> tuple[np.ndarray, int]:
    """Re-pick each anchor in turn as the point farthest from the span of the other K−1.

    The distance of x from span(S∖{s_i}) follows from the dual basis of S: with c = S x and
    M = S Sᵀ, ‖x‖² − ‖P_S x‖² + (c M⁻¹)_i² / (M⁻¹)_ii, so each re-pick costs O(n K) after one
    n×K product per change, never an n×d update."""
    anchors = anchors.copy()
    K = anchors.size
    norms2 = np.einsum("ij,ij->i", X, X)
    S = X[anchors]  # K×d
    C = X @ S.T  # n×K: c = S x for every point
    M = S @ S.T
    changed = 0
    for i in range(K):
        Minv = np.linalg.pinv(M, hermitian=True)
        W = C @ Minv
        in_span = np.einsum("ij,ij->i", W, C)  # ‖P_S x‖²
        dist2 = norms2 - in_span + W[:, i] ** 2 / max(Minv[i, i], 1e-300)
        dist2[np.delete(anchors, i)] = -np.inf
        best = int(np.argmax(dist2))
        if best != anchors[i]:
            anchors[i] = best
            S[i] = X[best]
            C[:, i] = X @ S[i]
            M[i, :] = S @ S[i]
            M[:, i] = M[i, :]
            changed += 1
    return anchors, changed


def _distance_to_others(X: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    K = anchors.size
    out = np.empty(K)
    S = X[anchors]
    for i in range(K):
        So = np.delete(S, i, axis=0)
        coef, *_ = np.linalg.lstsq(So.T, S[i], rcond=None)
        out[i] = np.linalg.norm(S[i] - So.T @ coef)
    return out
