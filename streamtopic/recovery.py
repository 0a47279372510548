"""Topic recovery: simplex-constrained fits of every word's row on the anchor rows.

For a word i with row-normalised co-occurrence row q_i = Q̄_i (V,) and anchor rows
Q̄_S (K×V), recovery finds C_i = p(z | w = i) on the probability simplex Δ_K:

* ``l2``  (RecoverL2):  argmin ‖q_i − C_i Q̄_S‖², in kernel form, i.e. from the K×K Gram
  G = Q̄_S Q̄_Sᵀ and the cross-products b_i = Q̄_S q_i only;
* ``kl``  (RecoverKL):  argmin KL(q_i ‖ C_i Q̄_S), on the full rows;
* ``original`` (Recover, Arora et al. 2012): a closed form through Q_SS⁻¹ (pseudo-inverse
  if singular), clipped to be non-negative;
* ``admm``: the ``l2`` problem in kernel form by ADMM (the RAW paper's choice), with one
  eigendecomposition of G per block;
* ``activeset``: the ``l2`` problem in kernel form, solved exactly (up to rounding) by a
  primal active-set method with batched KKT solves.

Every solver works on a whole block of rows at once (numpy over the block, no loop over words)
and stops on a duality-gap tolerance: for a convex f on the simplex, the Frank–Wolfe gap
``∇f(c)·c − min_k ∇f(c)_k`` bounds f(c) − f*. Nothing needs tuning by the user: the L2 step is
1/L from the Lipschitz constant of its gradient, ADMM's ρ comes from the spectrum of G, the
active set has no parameter, and KL uses EM, which has no step size.

On the whole stored Q the recovery is one Dask graph of coarse tasks over Q's blocks
(:func:`recover_by_blocks`, built by :class:`_RecoveryGraph` on :mod:`streamtopic.passes`):
the anchor columns Y = Q_{:,S} (V×K) and their K×K Gram; for the kernel solvers the
cross-products B = Q̄ Q̄_Sᵀ (V×K) and the simplex fits, by pieces of row blocks; RecoverKL
fits full rows of Q̄; then, as row blocks of the fit arrive, Aᵀ Q A (K×K) for the
topic-topic matrix R = A† Q A†ᵀ (:func:`pinv_topic_cooccurrence`), unless R comes from the
anchor formula (:func:`anchor_topic_cooccurrence`). The original Recover uses
Q_{:,S} Q_SS⁻¹ on the client.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ._numeric import safe_inverse
from .cluster import blas_pinned, compute, n_workers, usable_cores
from .passes import (
    PassGraph,
    QBlocks,
    largest_first,
    scratch_array,
    sum_arrays,
    to_scratch,
    upper_blocks,
)
from .store import open_read_only

__all__ = [
    "RECOVER_METHODS",
    "KERNEL_SOLVERS",
    "BlockResult",
    "BlockRecovery",
    "project_simplex",
    "solve_l2",
    "solve_admm",
    "solve_active_set",
    "solve_kl",
    "recover_original",
    "solver_defaults",
    "rows_per_task",
    "recover_by_blocks",
    "recover_in_memory",
    "recover_original_in_memory",
    "pinv_topic_cooccurrence",
    "anchor_topic_cooccurrence",
]

RECOVER_METHODS = ("l2", "kl", "original", "admm", "activeset")


@dataclass
class BlockResult:
    """Solutions for a block of n words.

    Attributes
    ----------
    C : ndarray of shape (n, K)
        Rows on the simplex (all-zero rows for words with no co-occurrence mass).
    converged : ndarray of bool, shape (n,)
        Whether the duality gap met the tolerance.
    gap : ndarray of shape (n,)
        Final duality gap (an upper bound on the objective's distance to its minimum).
    iterations : int
        Iterations run on the block.
    """

    C: np.ndarray
    converged: np.ndarray
    gap: np.ndarray
    iterations: int


def project_simplex(Y: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row of ``Y`` (n×K) onto the probability simplex.

    The sort-based algorithm (Held, Wolfe & Crowder; Duchi et al. 2008), vectorised over rows.
    """
    n, K = Y.shape
    U = -np.sort(-Y, axis=1)
    css = np.cumsum(U, axis=1) - 1.0
    ks = np.arange(1, K + 1, dtype=Y.dtype)
    cond = U - css / ks > 0
    rho = K - 1 - np.argmax(cond[:, ::-1], axis=1)  # last index where cond holds
    theta = css[np.arange(n), rho] / (rho + 1)
    return cast("np.ndarray", np.maximum(Y - theta[:, None], 0.0))


def _fw_gap(grad: np.ndarray, C: np.ndarray) -> np.ndarray:
    return cast("np.ndarray", np.einsum("ij,ij->i", grad, C) - grad.min(axis=1))


def solve_l2(
    G: np.ndarray, B: np.ndarray, norms: np.ndarray, *, tol: float = 1e-8, max_iter: int = 5000
) -> BlockResult:
    """Simplex-constrained least squares for a block of rows, in kernel form.

    Minimises f_i(c) = ‖q_i − c Q̄_S‖² = c G cᵀ − 2 c·b_i + ‖q_i‖² over the simplex, by
    accelerated projected gradient (FISTA, step 1/L with L = 2 λ_max(G), and a gradient-based
    adaptive restart per row).

    Parameters
    ----------
    G : ndarray of shape (K, K)
        Gram matrix of the anchor rows, Q̄_S Q̄_Sᵀ.
    B : ndarray of shape (n, K)
        Cross-products b_i = Q̄_S q_i of the block's rows.
    norms : ndarray of shape (n,)
        ‖q_i‖², the scale of each row's objective; rows with norm 0 get C_i = 0.
    tol : float
        Converged when the duality gap ≤ tol · ‖q_i‖².
    max_iter : int
        Iteration cap.
    """
    n, K = B.shape
    G = np.asarray(G, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    active = norms > 0
    L = 2.0 * float(np.linalg.eigvalsh(G)[-1])
    if not np.isfinite(L) or L <= 0:
        L = 1.0
    step = 1.0 / L
    # start from the best single anchor: argmin_k G_kk − 2 b_ik
    X = np.zeros((n, K))
    X[np.arange(n), np.argmin(np.diag(G)[None, :] - 2 * B, axis=1)] = 1.0
    Y = X.copy()
    t = np.ones(n)
    thresh = tol * np.where(active, norms, 1.0)

    gap = np.full(n, np.inf)
    it = 0
    todo = np.flatnonzero(active)
    while it < max_iter and todo.size:
        it += 1
        Yt, Xt = Y[todo], X[todo]
        grad = 2.0 * (Yt @ G - B[todo])
        Xn = project_simplex(Yt - step * grad)
        # gradient-based adaptive restart (O'Donoghue & Candès 2015): drop the momentum of
        # rows where it points uphill; needs no objective values, so no rounding trouble
        restart = np.einsum("ij,ij->i", Yt - Xn, Xn - Xt) > 0
        tn = 0.5 * (1 + np.sqrt(1 + 4 * t[todo] ** 2))
        tn[restart] = 1.0
        mom = np.where(restart, 0.0, (t[todo] - 1) / tn)[:, None]
        X[todo], Y[todo], t[todo] = Xn, Xn + mom * (Xn - Xt), tn
        if it % 10 == 0 or it == max_iter:
            g = 2.0 * (Xn @ G - B[todo])
            gap[todo] = _fw_gap(g, Xn)
            todo = todo[gap[todo] > thresh[todo]]
    if todo.size:
        g = 2.0 * (X[todo] @ G - B[todo])
        gap[todo] = _fw_gap(g, X[todo])
    X[~active] = 0.0
    gap[~active] = 0.0
    return BlockResult(X, gap <= thresh, gap, it)


#: ADMM over-relaxation factor α; in the default ρ, the relative size below which an
#: eigenvalue of 2G counts as zero, and the floor of h_min / h_max.
_ADMM_RELAX = 1.6
_ADMM_NULL = 1e-13
_ADMM_RHO_FLOOR = 1e-6


def _spectrum(G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition of the symmetric PSD Gram, eigenvalues clipped at 0."""
    w, V = np.linalg.eigh(0.5 * (G + G.T))
    return np.clip(w, 0.0, None), V


def solve_admm(
    G: np.ndarray,
    B: np.ndarray,
    norms: np.ndarray,
    *,
    tol: float = 1e-8,
    max_iter: int = 5000,
    rho: float | None = None,
) -> BlockResult:
    """Simplex-constrained least squares for a block of rows by ADMM, in kernel form.

    Same problem as :func:`solve_l2`: minimise f_i(c) = c G cᵀ − 2 c·b_i + ‖q_i‖² over the
    simplex, split as f_i(c) + ι_Δ(z) subject to c = z, with the scaled dual u. Each
    iteration is, for every row of the working set at once,

    * c ← (2G + ρI)⁻¹ (2 b_i + ρ (z − u));
    * ĉ ← α c + (1 − α) z, over-relaxation with α = 1.6 (Boyd et al. 2011, §3.4.3);
    * z ← project_simplex(ĉ + u);
    * u ← u + ĉ − z.

    The K×K matrix is diagonalised once for the block (2G = V diag(h) Vᵀ), so the c-update
    is two n×K×K products. ρ is common to the block and fixed: by default the geometric mean
    √(h_min h_max) of the extreme eigenvalues of the Hessian 2G, the optimal fixed value for
    strongly convex quadratics (Ghadimi et al. 2015). Eigenvalues below 10⁻¹³ h_max (the
    rounding level) count as zero and are skipped: when G = Q̄_S Q̄_Sᵀ, every b_i lies
    in the range of G, so f is flat along its null space, which does not slow ADMM down.
    h_min is also floored at 10⁻⁶ h_max, which keeps ρ usable when G is nearly singular.
    Residual balancing (Boyd et al. §3.4.1, or OSQP's normalised rule) is not used. On
    ill-conditioned G it moved ρ away from this value and slowed convergence several-fold.
    Elsewhere the fixed value did at least as well.

    Each row stops on the Frank–Wolfe gap of its feasible iterate z, ∇f(z)·z − min_k ∇f(z)_k
    with ∇f = 2(zG − b), like :func:`solve_l2`, and then leaves the working set. ADMM is a
    first-order method: along nearly flat directions of G (eigenvalues ≪ ρ) on which f
    still has a small slope it moves slowly, and tight tolerances may need many iterations
    (:func:`solve_active_set` is exact there).

    Parameters
    ----------
    G, B, norms, tol, max_iter
        As for :func:`solve_l2` (G may be singular).
    rho : float, optional
        Penalty parameter (> 0); default chosen from the spectrum of G as above.

    Returns
    -------
    BlockResult
        ``C`` (n, K) is z, always on the simplex (zero rows where the norm is 0).
    """
    n, K = B.shape
    G = np.asarray(G, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    norms = np.asarray(norms, dtype=np.float64)
    active = norms > 0
    w, V = _spectrum(G)
    h = 2.0 * w  # eigenvalues of the Hessian 2G, ascending
    hmax = float(h[-1])
    if not np.isfinite(hmax) or hmax <= 0:
        hmax = 1.0
    if rho is None:
        pos = h[h > _ADMM_NULL * hmax]
        h_min = float(pos[0]) if pos.size else hmax
        rho = float(np.sqrt(max(h_min, _ADMM_RHO_FLOOR * hmax) * hmax))
    elif not rho > 0:
        raise ValueError(f"rho={rho!r}: must be > 0")
    a = _ADMM_RELAX
    inv = 1.0 / (h + rho)

    # start from the best single anchor, as solve_l2
    Z = np.zeros((n, K))
    Z[np.arange(n), np.argmin(np.diag(G)[None, :] - 2 * B, axis=1)] = 1.0
    thresh = tol * np.where(active, norms, 1.0)
    gap = np.full(n, np.inf)
    # the working set, kept compact: rows todo, their z, u, b and 2b in the eigenbasis
    todo = np.flatnonzero(active)
    Zw, Bw = Z[todo], B[todo]
    Uw = np.zeros_like(Zw)
    B2Vw = 2.0 * (Bw @ V)
    it = 0
    while it < max_iter and todo.size:
        it += 1
        Cw = ((B2Vw + rho * ((Zw - Uw) @ V)) * inv) @ V.T
        Ch = a * Cw + (1.0 - a) * Zw
        Zw = project_simplex(Ch + Uw)
        Uw += Ch - Zw
        if it % 10 == 0 or it == max_iter:
            gap[todo] = _fw_gap(2.0 * (Zw @ G - Bw), Zw)
            done = gap[todo] <= thresh[todo]
            if done.any():
                Z[todo[done]] = Zw[done]
                keep = ~done
                todo, Zw, Uw, Bw, B2Vw = todo[keep], Zw[keep], Uw[keep], Bw[keep], B2Vw[keep]
    if todo.size:
        Z[todo] = Zw
        gap[todo] = _fw_gap(2.0 * (Zw @ G - Bw), Zw)
    Z[~active] = 0.0
    gap[~active] = 0.0
    return BlockResult(Z, gap <= thresh, gap, it)


#: Relative ridge of the active-set KKT solves: δ = _ACTIVE_SET_RIDGE · trace(G) / K.
_ACTIVE_SET_RIDGE = 1e-12


def _kkt_step(H: np.ndarray, F: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Batched steps d restricted to the free sets F (m×K) for the gradients g (m×K).

    Solves [H_FF 1; 1ᵀ 0] [d_F; ν] = [−g_F; 0] for every row at once. Each row's free
    coordinates are moved to the front and the systems are cut to p = max_i |F_i|, so each
    row gets one (p+1)×(p+1) system in which its fixed coordinates (padding, for rows with
    fewer free ones) are identity rows and columns with right-hand side 0, so d = 0 there.
    Falls back to batched pseudo-inverses if a system is exactly singular.
    """
    m, K = F.shape
    p = int(F.sum(axis=1).max())
    order = np.argsort(~F, axis=1, kind="stable")[:, :p]  # free coordinates first
    Fs = np.take_along_axis(F, order, axis=1)
    M = np.zeros((m, p + 1, p + 1))
    np.copyto(M[:, :p, :p], H[order[:, :, None], order[:, None, :]],
              where=Fs[:, :, None] & Fs[:, None, :])
    diag = np.arange(p)
    M[:, diag, diag] += ~Fs
    M[:, :p, p] = Fs
    M[:, p, :p] = Fs
    rhs = np.zeros((m, p + 1, 1))
    rhs[:, :p, 0] = np.where(Fs, -np.take_along_axis(g, order, axis=1), 0.0)
    try:
        sol = np.linalg.solve(M, rhs)
    except np.linalg.LinAlgError:
        sol = np.linalg.pinv(M) @ rhs
    d = np.zeros((m, K))
    np.put_along_axis(d, order, np.where(Fs, sol[:, :p, 0], 0.0), axis=1)
    return d


def _kkt_hessian(G: np.ndarray) -> np.ndarray:
    """2(G + δI) (K×K), δ = ``_ACTIVE_SET_RIDGE`` · trace(G)/K: the Hessian of the
    active-set KKT systems, non-singular."""
    K = G.shape[0]
    scale = float(np.trace(G)) / max(K, 1)
    if not np.isfinite(scale) or scale <= 0:
        scale = 1.0
    return cast("np.ndarray", 2.0 * (G + _ACTIVE_SET_RIDGE * scale * np.eye(K)))


def _active_set_step(
    H: np.ndarray, c: np.ndarray, f: np.ndarray, g: np.ndarray, lam: np.ndarray,
    stationary: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One active-set iteration for m rows not yet done: their points c (m×K), free sets f
    (m×K, bool; changed in place), gradients g (m×K), λ = g·c (m,) and whether each c
    minimises f on its face (m,). Returns the new points, free sets, and whether each took
    the full step to its face's minimiser (then stationary)."""
    sub = np.arange(c.shape[0])
    # pricing: the most negative multiplier among the fixed coordinates enters F
    mult = np.where(f, np.inf, g - lam[:, None])
    j = np.argmin(mult, axis=1)
    enter = stationary & (mult[sub, j] < 0)
    f[sub[enter], j[enter]] = True
    # step to the minimiser on the face, cut at the boundary (ratio test)
    d = _kkt_step(H, f, g)
    y = c + d
    neg = f & (y < 0)
    ratio = np.where(neg, c / np.where(neg, c - y, 1.0), np.inf)
    block = np.argmin(ratio, axis=1)
    alpha = np.minimum(ratio[sub, block], 1.0)
    full = alpha >= 1.0
    c = np.where(full[:, None], y, c + alpha[:, None] * d)
    part = sub[~full]
    c[part, block[~full]] = 0.0
    c = np.where(f, np.maximum(c, 0.0), 0.0)
    f &= c > 0
    f[part, block[~full]] = False
    c /= c.sum(axis=1, keepdims=True)
    return c, f, full


def solve_active_set(
    G: np.ndarray,
    B: np.ndarray,
    norms: np.ndarray,
    *,
    tol: float = 1e-10,
    max_iter: int | None = None,
) -> BlockResult:
    """Exact simplex-constrained least squares for a block of rows, by a primal active set.

    Same problem as :func:`solve_l2`: minimise f_i(c) = c G cᵀ − 2 c·b_i + ‖q_i‖² over the
    simplex. A Lawson–Hanson-style method adapted to Σc = 1: each row keeps a feasible c and
    a free set F ⊇ supp(c), starting from the best single anchor. At each iteration, rows
    whose Frank–Wolfe gap ∇f(c)·c − min_k ∇f(c)_k (∇f = 2(cG − b)) is ≤ tol·‖q_i‖² are done;
    this is the KKT test, as the gap equals −min_k (∇f_k − λ) with λ = ∇f(c)·c. Otherwise,
    if c minimises f on the face F (after a full step), the fixed coordinate with the most
    negative multiplier ∇f_k − λ enters F. Then the step d to the minimiser on the face
    solves the equality-constrained KKT system [2G_FF 1; 1ᵀ 0][d_F; ν] = [−∇f(c)_F; 0]
    (fixed coordinates: identity rows and columns, d = 0); if c + d leaves the simplex, the
    step is cut at the first coordinate to reach 0 and that coordinate leaves F.

    All rows are handled together: one batched ``np.linalg.solve`` per iteration, of one
    (p+1)×(p+1) system per row, p ≤ K the largest free set, and rows leave the working set
    when done.

    Singular or ill-conditioned G: the KKT systems use G + δI with
    δ = 10⁻¹² · trace(G)/K, which makes every system non-singular and the face problems
    strictly convex (so the method cannot stall on a flat face). The step is computed for
    the increment d from the current point, with the true gradient on the right-hand side,
    so the ridge acts as a tiny proximal term toward the current iterate, not as a bias
    toward 0: where G has curvature ≫ δ the step is the exact Newton step (a second step
    refines it if rounding calls for it), and along null directions of G, where f is
    linear, the step is long and the ratio test stops it at the boundary. Should LAPACK
    still report a singular system, the batch falls back to pseudo-inverses. Gaps and the
    stopping test always use the true G. A row that reaches ``max_iter`` (not seen in tests,
    which stayed under a third of the default cap) returns its last feasible iterate with
    ``converged`` False.

    Parameters
    ----------
    G, B, norms
        As for :func:`solve_l2` (G may be singular).
    tol : float
        Converged when the duality gap ≤ tol · ‖q_i‖² (i.e. every multiplier ≥ −tol·‖q_i‖²).
    max_iter : int, optional
        Cap on the iterations (batched KKT solves); default 3K + 10.

    Returns
    -------
    BlockResult
        ``C`` (n, K) always on the simplex (zero rows where the norm is 0).
    """
    n, K = B.shape
    G = np.asarray(G, dtype=np.float64)
    G = 0.5 * (G + G.T)
    B = np.asarray(B, dtype=np.float64)
    norms = np.asarray(norms, dtype=np.float64)
    if max_iter is None:
        max_iter = 3 * K + 10
    active = norms > 0
    H = _kkt_hessian(G)

    rows = np.arange(n)
    C = np.zeros((n, K))
    start = np.argmin(np.diag(G)[None, :] - 2 * B, axis=1)
    C[rows, start] = 1.0
    F = C > 0
    stationary = np.ones(n, dtype=bool)  # c minimises f on its face (true at a vertex)
    thresh = tol * np.where(active, norms, 1.0)
    gap = np.full(n, np.inf)
    todo = np.flatnonzero(active)
    it = 0
    while todo.size:
        c, f = C[todo], F[todo]
        g = 2.0 * (c @ G - B[todo])
        lam = np.einsum("ij,ij->i", g, c)
        gap[todo] = lam - g.min(axis=1)
        keep = gap[todo] > thresh[todo]
        if not keep.all():
            todo, c, f, g, lam = todo[keep], c[keep], f[keep], g[keep], lam[keep]
        if not todo.size or it >= max_iter:
            break
        it += 1
        C[todo], F[todo], stationary[todo] = _active_set_step(H, c, f, g, lam,
                                                              stationary[todo])
    C[~active] = 0.0
    gap[~active] = 0.0
    return BlockResult(C, gap <= thresh, gap, it)


def solve_kl(
    anchor_rows: np.ndarray,
    Qrows: np.ndarray,
    *,
    tol: float = 1e-6,
    max_iter: int = 1000,
    C0: np.ndarray | None = None,
) -> BlockResult:
    """Simplex-constrained KL fits for a block of rows: argmin_c KL(q_i ‖ c Q̄_S).

    This is maximum likelihood for the weights of a mixture of the anchor rows, so the EM
    map c_k ← c_k Σ_j q_j (Q̄_S)_kj / (c Q̄_S)_j decreases the objective at every step with no step
    size. It is accelerated by SQUAREM (Varadhan & Roland 2008): an extrapolation from two EM
    steps, projected back onto the simplex and kept only where it does better than plain EM.

    Words that no anchor row covers (Σ_k (Q̄_S)_kj = 0) contribute a constant and are left
    out.

    Parameters
    ----------
    anchor_rows : ndarray of shape (K, V)
        Anchor rows Q̄_S, each a distribution over words.
    Qrows : ndarray of shape (n, V)
        The block's rows Q̄_i (each sums to 1, or 0 for a word without mass).
    tol : float
        Converged when the duality gap ≤ tol (nats).
    max_iter : int
        Iteration cap (each iteration is three EM evaluations).
    C0 : ndarray of shape (n, K), optional
        Starting point (default: uniform); entries are kept strictly positive.
    """
    n, K = Qrows.shape[0], anchor_rows.shape[0]
    covered = anchor_rows.sum(axis=0) > 0
    Rc = np.ascontiguousarray(anchor_rows[:, covered])
    Qc = Qrows[:, covered]
    mass = Qc.sum(axis=1)
    active = mass > 0
    C = np.full((n, K), 1.0 / K)
    if C0 is not None:
        C = 0.9 * np.clip(C0, 0.0, None) + 0.1 / K  # strictly inside: EM keeps zeros at zero
        C /= C.sum(axis=1, keepdims=True)
    gap = np.zeros(n)
    todo = np.flatnonzero(active)
    tiny = 1e-300

    def em(Cb: np.ndarray, Qb: np.ndarray, mb: np.ndarray) -> tuple[np.ndarray, ...]:
        """EM image of Cb, the loss at Cb and its gradient."""
        M = np.maximum(Cb @ Rc, tiny)
        ratio = Qb / M
        grad = -(ratio @ Rc.T)
        loss = -np.einsum("ij,ij->i", Qb, np.log(M))
        return Cb * (-grad) / mb[:, None], loss, grad

    it = 0
    while it < max_iter and todo.size:
        it += 1
        Qt, mt, Ct = Qc[todo], mass[todo], C[todo]
        C1, f0, g0 = em(Ct, Qt, mt)
        gap[todo] = _fw_gap(g0, Ct) / mt
        keep = gap[todo] > tol
        if not keep.all():
            todo, Qt, mt, Ct, C1, f0 = todo[keep], Qt[keep], mt[keep], Ct[keep], C1[keep], f0[keep]
            if not todo.size:
                break
        C2, f1, _ = em(C1, Qt, mt)
        r = C1 - Ct
        v = C2 - C1 - r
        alpha = -np.sqrt(np.einsum("ij,ij->i", r, r)
                         / np.maximum(np.einsum("ij,ij->i", v, v), tiny))
        alpha = np.minimum(alpha, -1.0)[:, None]
        Cx = Ct - 2 * alpha * r + alpha * alpha * v
        Cx = np.maximum(Cx, 1e-16)
        Cx /= Cx.sum(axis=1, keepdims=True)
        C3, _, _ = em(Cx, Qt, mt)  # stabilising EM step from the extrapolated point
        # keep the extrapolation only where it beats two plain EM steps
        M2 = np.maximum(C2 @ Rc, tiny)
        f2 = -np.einsum("ij,ij->i", Qt, np.log(M2))
        M3 = np.maximum(C3 @ Rc, tiny)
        f3 = -np.einsum("ij,ij->i", Qt, np.log(M3))
        C[todo] = np.where((f3 <= f2)[:, None], C3, C2)
    if todo.size:
        _, _, g = em(C[todo], Qc[todo], mass[todo])
        gap[todo] = _fw_gap(g, C[todo]) / mass[todo]
    C[~active] = 0.0
    gap[~active] = 0.0
    return BlockResult(C, gap <= tol, gap, it)


def recover_original(
    Y: np.ndarray, Q_SS: np.ndarray, p_S: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The original Recover for a block of word rows (Arora, Ge & Moitra 2012).

    With anchors S and Q = A R Aᵀ, A = Q_{:,S} Q_SS⁻¹ diag(1/z) where z = Q_SS⁻¹ p_S and
    p_S are the row sums of the anchor rows. Negative entries (from noise) are clipped to 0;
    the caller normalises the columns.

    Parameters
    ----------
    Y : ndarray of shape (n, K)
        The block's entries Q_{i,S} (normalised Q).
    Q_SS : ndarray of shape (K, K)
    p_S : ndarray of shape (K,)

    Returns
    -------
    A_block : ndarray of shape (n, K)
        Unnormalised, non-negative topic-word weights of the block's words.
    z : ndarray of shape (K,)
    """
    Qinv = np.linalg.pinv(Q_SS)
    z = Qinv @ p_S
    z = np.where(np.abs(z) > 0, z, np.finfo(float).eps)
    A = (Y @ Qinv) / z[None, :]
    return np.maximum(A, 0.0), z


# ============================================================================ topic-topic


def pinv_topic_cooccurrence(A: np.ndarray, AtQA: np.ndarray) -> np.ndarray:
    """R = A† Q A†ᵀ (K×K) with A† = (AᵀA)⁻¹Aᵀ, from A (V×K) and Aᵀ Q A (K×K); symmetrised."""
    Minv = np.linalg.pinv(A.T @ A, hermitian=True)
    R = Minv @ np.asarray(AtQA) @ Minv
    return cast("np.ndarray", 0.5 * (R + R.T))


def anchor_topic_cooccurrence(A: np.ndarray, anchors: np.ndarray, Q_SS: np.ndarray) -> np.ndarray:
    """The anchor formula for the topic-topic matrix (Lee et al.): R = diag(1/a) Q_SS diag(1/a).

    With Q = A R Aᵀ and anchor s_k occurring in topic k only, Q_SS = diag(a) R diag(a) where
    a_k = A[s_k, k]; so R follows from the anchors' block of Q alone. Symmetrised and
    normalised to sum 1.

    Parameters
    ----------
    A : ndarray of shape (V, K)
        Topic-word probabilities p(w | z) (columns sum to 1).
    anchors : ndarray of shape (K,)
        Anchor word of each topic.
    Q_SS : ndarray of shape (K, K)
        Q at the anchors' rows and columns, in the same order.

    Returns
    -------
    ndarray of shape (K, K)
    """
    a = A[np.asarray(anchors), np.arange(A.shape[1])]
    inv = safe_inverse(a)
    R = inv[:, None] * np.asarray(Q_SS, dtype=np.float64) * inv[None, :]
    R = 0.5 * (R + R.T)
    total = R.sum()
    return cast("np.ndarray", R / total if total > 0 else R)


# ============================================================================ fits of row blocks

#: The solvers of the least squares in kernel form (from G and B), by ``recover`` method.
KERNEL_SOLVERS = {"l2": solve_l2, "admm": solve_admm, "activeset": solve_active_set}

#: Bytes of one (rows × K) float64 array in a solver's inner loop: sub-blocks of a task's rows
#: are solved in turn so that the loop's temporaries stay below glibc's default mmap threshold
#: (128 KiB). Dask's worker processes set ``MALLOC_TRIM_THRESHOLD_``, which freezes that
#: threshold, so every larger temporary is a fresh mmap and its pages fault in again on each
#: iteration: with 1,250-row blocks at K = 50, RecoverL2 ran 4× slower in a worker than in
#: this process. Rows are independent problems, so the split changes no result.
SOLVE_BYTES = 96 * 2**10


def solver_defaults(
    method: str, K: int, tol: float | None, max_iter: int | None
) -> tuple[float, int]:
    """The tolerance and iteration cap of ``method``'s solver for K topics, where not given:
    1e-7 and 5000 for L2 and ADMM, 1e-10 and 3K + 10 for the active set, 1e-6 nats and 1000
    for KL."""
    if method in KERNEL_SOLVERS:
        tol = (1e-10 if method == "activeset" else 1e-7) if tol is None else tol
        if max_iter is None:
            max_iter = 3 * K + 10 if method == "activeset" else 5000
    else:
        tol = 1e-6 if tol is None else tol
        max_iter = 1000 if max_iter is None else max_iter
    return tol, max_iter


def _kernel_block(
    B: np.ndarray, norms: np.ndarray, G: np.ndarray, *, tol: float, max_iter: int,
    method: str = "l2",
) -> np.ndarray:
    """Solve a block of rows (B: n×K) by sub-blocks of ``SOLVE_BYTES``; returns n×(K+2):
    the simplex rows, converged (0/1) and the duality gap."""
    n, K = B.shape
    step = max(16, SOLVE_BYTES // (8 * max(K, 1)))
    step = -(-n // -(-n // step))  # equal sub-blocks: no small remainder pays a full solve
    out = np.empty((n, K + 2))
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        res = KERNEL_SOLVERS[method](G, B[r0:r1], norms[r0:r1], tol=tol, max_iter=max_iter)
        out[r0:r1, :K] = res.C
        out[r0:r1, K] = res.converged
        out[r0:r1, K + 1] = res.gap
    return out


def _kl_block(
    Qbar: np.ndarray, anchor_rows: np.ndarray, *, tol: float, max_iter: int
) -> np.ndarray:
    """RecoverKL on a block of rows of Q̄ (n×V) against the anchor rows Q̄_S (K×V); returns
    n×(K+2) as :func:`_kernel_block`."""
    # warm start from the L2 fit of the same rows (kernel form: cheap)
    start = solve_l2(
        anchor_rows @ anchor_rows.T, Qbar @ anchor_rows.T, np.einsum("ij,ij->i", Qbar, Qbar),
        tol=1e-6, max_iter=500,
    ).C
    res = solve_kl(anchor_rows, Qbar, tol=tol, max_iter=max_iter, C0=start)
    return np.column_stack([res.C, res.converged.astype(np.float64), res.gap])


def _original_topics(A_un: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A (V×K) and p(z) (K,) from the original Recover's unnormalised A_un (V×K): its columns
    normalised, and p(z) the simplex weights that best explain p(w) = Σ_k A_wk p(z=k) (NNLS)."""
    from scipy.optimize import nnls

    col = A_un.sum(axis=0)
    A = A_un / np.where(col > 0, col, 1.0)
    w, _ = nnls(A, p)
    K = A.shape[1]
    return A, (w / w.sum() if w.sum() > 0 else np.full(K, 1.0 / K))


def _fit_record(
    method: str, tol: float, conv: np.ndarray, gap: np.ndarray, fitted: np.ndarray
) -> dict[str, Any]:
    """The solver's statistics: method, tolerance, rows converged among the ``fitted`` ones
    (bool, V), rows fitted and the largest duality gap among them."""
    return {"method": method, "tol": tol, "converged": int((conv & fitted).sum()),
            "fitted": int(fitted.sum()),
            "max_gap": float(gap[fitted].max()) if fitted.any() else 0.0}


def _original_record(p: np.ndarray) -> dict[str, Any]:
    """The original Recover's statistics: every row with mass fitted, exactly."""
    n = int((p > 0).sum())
    return {"method": "original", "converged": n, "fitted": n, "max_gap": 0.0}


# ============================================================================ in memory


def recover_in_memory(
    Q: np.ndarray, Qbar: np.ndarray, norms: np.ndarray, p: np.ndarray, S: np.ndarray,
    method: str, tol: float | None, max_iter: int | None,
    anchor_rows: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """p(z | w) for every row (n×K) and the solver's statistics, from Q (n×n) held in memory
    (Q̄ its row-normalised rows, ``norms`` their squared norms, ``p`` the row sums, ``S``
    the K anchors): the kernel solvers on B = Q̄ Q̄_Sᵀ and the Gram Q̄_S Q̄_Sᵀ, or RecoverKL
    on the full rows, by row blocks on threads. ``anchor_rows`` (K×n): the rows to fit
    against instead of Q̄_S (tandem anchors' combined rows, :mod:`streamtopic.seeding`)."""
    from concurrent.futures import ThreadPoolExecutor

    K = S.size
    fitted = p > 0
    tol, max_iter = solver_defaults(method, K, tol, max_iter)
    QS = Qbar[S] if anchor_rows is None else anchor_rows
    if method in KERNEL_SOLVERS:
        B = Qbar @ QS.T
        G = QS @ QS.T
        fit = lambda r: _kernel_block(B[r], norms[r], G, tol=tol,  # noqa: E731
                                      max_iter=max_iter, method=method)
    else:
        fit = lambda r: _kl_block(Qbar[r], QS, tol=tol, max_iter=max_iter)  # noqa: E731
    n = Q.shape[0]
    step = -(-n // (4 * usable_cores()))
    pieces = [slice(r, min(n, r + step)) for r in range(0, n, step)]
    with blas_pinned(), \
            ThreadPoolExecutor(usable_cores()) as pool:
        out = np.vstack(list(pool.map(fit, pieces)))
    C, conv, gap = out[:, :K], out[:, K] > 0.5, out[:, K + 1]
    C[~fitted] = 0.0
    return C, _fit_record(method, tol, conv, gap, fitted)


def recover_original_in_memory(
    Q: np.ndarray, p: np.ndarray, S: np.ndarray
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The original Recover on Q (n×n) held in memory (``p`` its row sums, ``S`` the K
    anchors): A (n×K), p(z) (K,) and the solver's statistics."""
    A, prevalence = _original_topics(recover_original(Q[:, S], Q[np.ix_(S, S)], p[S])[0], p)
    return A, prevalence, _original_record(p)


# ============================================================================ over Q's blocks


@dataclass
class BlockRecovery:
    """What :func:`recover_by_blocks` gives.

    Attributes
    ----------
    A : ndarray of shape (V, K)
        p(w | z); columns sum to 1.
    prevalence : ndarray of shape (K,)
        p(z).
    solver : dict
        The solver's statistics (method, tolerance, rows converged and fitted, largest gap).
    Q_SS : ndarray of shape (K, K)
        The anchors' entries of Q.
    AtQA : ndarray of shape (K, K) or None
        Aᵀ Q A, for ``topic_topic='pinv'`` (else None).
    """

    A: np.ndarray
    prevalence: np.ndarray
    solver: dict[str, Any]
    Q_SS: np.ndarray
    AtQA: np.ndarray | None


def rows_per_task(V: int, chunk: int, width: int, block_rows: int | None = None) -> int:
    """Rows per recovery task: ``block_rows`` if given, else Q's chunk size halved until
    there are about 8 tasks per worker (for balance: rows differ in cost) and a task's
    (rows × width) input stays under 64 MiB. A power-of-two fraction of the chunk size
    splits Q's row blocks without merging any two, so a task waits for one row block of
    the product only."""
    if block_rows is not None:
        return int(block_rows)
    budget = max(64, int(64 * 2**20 / (8 * max(width, 1))))
    target = min(budget, max(64, -(-V // (8 * n_workers()))))
    rows = chunk
    while rows > target and rows % 2 == 0 and rows // 2 >= 64:
        rows //= 2
    return int(rows)


def recover_by_blocks(
    Q: Any, src: QBlocks, p: np.ndarray, norms: np.ndarray, anchors: np.ndarray,
    scratch: str, *, method: str, topic_topic: str, tol: float | None = None,
    max_iter: int | None = None, block_rows: int | None = None, progress: bool = False,
    named_columns: np.ndarray | None = None,
) -> BlockRecovery:
    """Recovery on the whole stored Q: A (V×K), p(z), the solver's statistics, Q_SS (K×K)
    and, for ``topic_topic='pinv'``, Aᵀ Q A (K×K).

    ``Q`` is the dask array of Q and ``src`` reads its blocks inside tasks; ``p`` (V,) and
    ``norms`` (V,) are Q's row sums and Q̄'s squared row norms, ``anchors`` (K,) the anchor
    word ids. For the simplex solvers this is one Dask graph of coarse tasks, so that no
    stage waits for a round trip through the client and few tasks wait for the scheduler:
    per block of Q the anchor columns Y = Q_{:,S} (V×K); the Gram YᵀY and Q_SS (K×K); per
    block the products B = Q Y; the fits, by pieces of a row block; and, as row blocks of the
    fit arrive, (C diag p)ᵀ Q (C diag p) for Aᵀ Q A. Every task reads the blocks of Q it
    uses itself, so no decoded block waits in memory for a consumer. Scratch arrays go to
    the directory ``scratch``; ``block_rows`` sets the rows per fitting task
    (:func:`rows_per_task`). ``named_columns`` (V×m): the rows of Q̄ the first m topics
    are fitted against, as columns, instead of their anchors' rows (tandem anchors'
    combined rows, :mod:`streamtopic.seeding`); they take those anchors' columns of Y."""
    V, K, c = Q.shape[0], anchors.size, src.chunk
    rows_path = os.path.join(scratch, "rows")
    scratch_array(rows_path, (V, 2), (c, 2), data=np.column_stack([p, norms]))
    g = _RecoveryGraph(src, anchors, rows_path, named_columns)
    pinv = topic_topic != "anchor"
    if method == "original":
        if named_columns is not None:
            raise ValueError("named_columns need a recovery that fits rows of Q̄, not the "
                             "original Recover")
        return _recover_original_by_blocks(g, p, scratch, pinv, progress)
    tol, max_iter = solver_defaults(method, K, tol, max_iter)
    if method in KERNEL_SOLVERS:
        width = (K + 1) ** 2 if method == "activeset" else K
        fitted = g.kernel_fit(rows_per_task(V, c, width, block_rows), g.scale(p),
                              method=method, tol=tol, max_iter=max_iter)
    else:
        fitted = _kl_fits(Q, g, p, rows_per_task(V, c, V, block_rows), tol, max_iter)
    return _gather_fits(g, fitted, p, scratch, method, tol, pinv, progress)


def _recover_original_by_blocks(
    g: _RecoveryGraph, p: np.ndarray, scratch: str, pinv: bool, progress: bool
) -> BlockRecovery:
    """The original Recover from the anchor columns Y (V×K, written to ``scratch`` by the
    workers) and Q_SS, on the client; then Aᵀ Q A by a pass when ``pinv``."""
    import zarr

    src, anchors, K = g.src, g.anchors, g.K
    ypath = os.path.join(scratch, "Y")
    _, gram = compute(to_scratch(g.Y(), ypath), g.anchor_block(), progress=progress,
                      label="anchor rows", bytes_read=src.stored_bytes(g.y_blocks()))
    Q_SS = np.asarray(gram)[:, K:]
    A, prevalence = _original_topics(
        recover_original(np.asarray(zarr.open_array(ypath, mode="r")[:]), Q_SS, p[anchors])[0],
        p)
    AtQA = None
    if pinv:
        import dask.array as da

        # the workers read A (V×K) from scratch, by row blocks
        apath = os.path.join(scratch, "A")
        scratch_array(apath, A.shape, (src.chunk, K), data=A)
        (AtQA,) = compute(g.topic_topic(da.from_zarr(apath)), progress=progress,
                          label="topic-topic", bytes_read=src.stored_bytes(g.upper_blocks()))
        AtQA = np.asarray(AtQA)
    return BlockRecovery(A, prevalence, _original_record(p), Q_SS, AtQA)


def _kl_fits(
    Q: Any, g: _RecoveryGraph, p: np.ndarray, rows: int, tol: float, max_iter: int
) -> tuple[list[list[tuple[Any, ...]]], Any]:
    """RecoverKL's fitted row blocks (as :meth:`_RecoveryGraph.row_blocks_of`): full rows of
    Q̄ (``rows`` per task) against the anchor rows Q̄_S (K×V)."""
    import dask.array as da
    from dask.graph_manipulation import clone

    V, K, c = Q.shape[0], g.K, g.src.chunk
    inv = safe_inverse(p)
    inv_d = da.from_array(inv, chunks=(Q.chunks[0],))
    Qbar = (clone(Q) * inv_d[:, None]).rechunk((rows, V))
    anchor_rows = (g.Y() * g.scale(p)[None, :]).T.rechunk((K, V))
    out = da.blockwise(
        _kl_block, "ik", Qbar, "ij", anchor_rows, "kj",
        dtype=np.float64, concatenate=True, adjust_chunks={"k": K + 2},
        tol=tol, max_iter=max_iter,
    ).rechunk((c, K + 2))
    return g.row_blocks_of(out)


def _gather_fits(
    g: _RecoveryGraph, fitted: tuple[list[list[tuple[Any, ...]]], Any], p: np.ndarray, scratch: str,
    method: str, tol: float, pinv: bool, progress: bool,
) -> BlockRecovery:
    """Run the recovery's graph: the fitted rows C (V×(K+2)) written to ``scratch`` by row
    blocks and, when ``pinv``, (C diag p)ᵀ Q (C diag p) by a pass as they arrive; then A,
    p(z) and Aᵀ Q A by Bayes' rule on the client."""
    import zarr

    src, V, K = g.src, g.src.V, g.K
    cpath = os.path.join(scratch, "C")
    scratch_array(cpath, (V, K + 2), (src.chunk, K + 2))
    written = g.write_fits(fitted, cpath)
    last = g.topic_topic(written) if pinv else g.all_written(written)
    passes = 1 + pinv  # B = Q Y (or Q̄'s rows), Aᵀ Q A
    gram, tail = compute(g.anchor_block(), last, progress=progress, label="recovery",
                         bytes_read=src.stored_bytes(g.y_blocks())
                         + passes * src.stored_bytes(g.upper_blocks()),
                         optimize_graph=method not in KERNEL_SOLVERS)
    Q_SS = np.asarray(gram)[:, K:]
    Cext = np.asarray(zarr.open_array(cpath, mode="r")[:])
    C, conv, gap = Cext[:, :K], Cext[:, K] > 0.5, Cext[:, K + 1]
    fitted_rows = p > 0
    # Bayes' rule: p(w | z) ∝ p(z | w) p(w)
    weighted = C * p[:, None]
    mass = weighted.sum(axis=0)
    scale = 1.0 / np.where(mass > 0, mass, 1.0)
    A = weighted * scale[None, :]
    prevalence = mass / mass.sum()
    # Aᵀ Q A = diag(1/π) (C diag p)ᵀ Q (C diag p) diag(1/π)
    AtQA = np.asarray(tail) * np.outer(scale, scale) if pinv else None
    return BlockRecovery(A, prevalence, _fit_record(method, tol, conv, gap, fitted_rows), Q_SS,
                         AtQA)


class _RecoveryGraph:
    """The recovery's Dask graph, built task by task over the blocks of Q (nb×nb blocks of
    ``src.chunk`` rows; K anchors) on a :class:`~streamtopic.passes.PassGraph`. Outputs are
    dask arrays whose chunks are one row block (V×K arrays) or one K×K array; every task
    reads its own blocks of Q through ``src``."""

    def __init__(self, src: QBlocks, anchors: np.ndarray, rows_path: str,
                 columns: np.ndarray | None = None) -> None:
        self.src = src
        self.anchors = np.asarray(anchors, dtype=np.int64)
        self.K = int(self.anchors.size)
        #: V×m: the first m columns of Y, given (rows of Q̄, so unscaled by 1/p)
        self.columns = None if columns is None else np.asarray(columns, dtype=np.float64)
        if self.columns is not None and (self.columns.ndim != 2
                                         or self.columns.shape[0] != src.V
                                         or self.columns.shape[1] > self.K):
            raise ValueError(f"named_columns has shape {self.columns.shape}: expected "
                             f"({src.V}, m), m <= {self.K}")
        self.nb = src.n_blocks
        self.sizes = src.sizes
        self.rows_path = rows_path
        self.graph = PassGraph(self.nb)
        self._y: Any = None
        self._gram: Any = None

    def upper_blocks(self) -> list[tuple[int, int]]:
        """The blocks on and above the diagonal: all that a pass over the symmetric Q
        reads (what :meth:`kernel_fit`'s products and :meth:`topic_topic` read)."""
        return upper_blocks(self.nb)

    def y_blocks(self) -> list[tuple[int, int]]:
        """The blocks on and above the diagonal whose rows or columns hold anchors (what
        :meth:`Y` reads: by symmetry, Q_{:,S} is the transpose of the anchors' rows)."""
        owners = set((self.anchors // self.src.chunk).tolist())
        return [(i, j) for i, j in self.upper_blocks() if i in owners or j in owners]

    def Y(self) -> Any:
        """Y = Q_{:,S} (V×K), columns in the anchors' order: a task per block on and above
        the diagonal that holds anchor rows or columns, then a sum per row block. Block
        (i, j) gives row block i its anchor columns and, Q being symmetric, row block j the
        transposes of its anchor rows."""
        if self._y is not None:
            return self._y
        c, K, nb, sizes = self.src.chunk, self.K, self.nb, self.sizes
        owner = self.anchors // c
        ks = [np.flatnonzero(owner == b) for b in range(nb)]
        offsets = [self.anchors[k] - b * c for b, k in enumerate(ks)]
        # the largest blocks first: every later task waits for Y
        parts = self.graph.blocks(
            "st-yparts", _anchor_columns,
            lambda i, j: (self.src, i, j, offsets[j], ks[j], offsets[i], ks[i], K),
            blocks=self.y_blocks(), chunks=(sizes, (K,) * nb),
            annotations=largest_first(lambda i, j: sizes[i] * sizes[j]))
        # row block r: the columns of (r, j), j >= r, at anchors in j; the transposed rows
        # of (i, r), i < r, at anchors in i (never empty: every anchor's column reaches
        # every row block)
        self._y = self.graph.row_sums(
            "st-y", parts, keep=lambda i, j, side: ks[j if side == 0 else i].size > 0,
            chunks=(sizes, (K,)))
        if self.columns is not None:
            given, summed = self.columns, self._y
            tasks = {(r, 0): (_given_columns, (summed.name, r, 0), given[self.src.span(r)])
                     for r in range(nb)}
            self._y = self.graph.layer("st-y-named", tasks, [summed], (sizes, (K,)))
        return self._y

    def scale(self, p: np.ndarray) -> np.ndarray:
        """What turns Y's columns into rows of Q̄ (K,): 1/p at the anchors, 1 for the
        given columns (already rows of Q̄)."""
        inv_S: np.ndarray = safe_inverse(p)[self.anchors]
        if self.columns is not None:
            inv_S[:self.columns.shape[1]] = 1.0
        return inv_S

    def anchor_block(self) -> Any:
        """[YᵀY | Q_SS] (K×2K): the anchors' Gram and their entries of Q, in their order."""
        if self._gram is not None:
            return self._gram
        Y, K, nb = self.Y(), self.K, self.nb
        tasks = {(i, 0): (_anchor_gram, self.anchors, self.src.chunk, i, (Y.name, i, 0))
                 for i in range(nb)}
        parts = self.graph.layer("st-gram-parts", tasks, [Y], ((K,) * nb, (2 * K,)))
        self._gram = self.graph.total("st-gram", sum_arrays, parts, ((K,), (2 * K,)))
        return self._gram

    def q_product(self, X: Any) -> Any:
        """Q X (V×K) for X (V×K, chunked by Q's row blocks), by row blocks: a task per block
        on and above the diagonal (Q is symmetric: block (i, j) also gives Q_ji X_i), then a
        sum per row block."""
        src, sizes, K = self.src, self.sizes, self.K
        parts = self.graph.blocks(
            "st-qy-parts", _product_part,
            lambda i, j: (src, i, j, (X.name, i, 0), (X.name, j, 0)), [X],
            chunks=(sizes, (K,) * self.nb), annotations=largest_first(src.pass_cost))
        return self.graph.row_sums("st-qy", parts, chunks=(sizes, (K,)))

    def kernel_fit(
        self, rows: int, inv_S: np.ndarray, *, method: str, tol: float, max_iter: int
    ) -> tuple[list[list[tuple[Any, ...]]], Any]:
        """The keys of the fitted pieces (n×(K+2) each) of every row block, and the dask
        array holding them: B = Q Y per block of Q, summed per row block, then the simplex
        fits by pieces of ``rows`` rows (``inv_S``: 1/p at the anchors)."""
        Y, gram = self.Y(), self.anchor_block()
        B = self.q_product(Y)
        pieces: dict[tuple[int, int], tuple[Any, ...]] = {}
        keys: list[list[int]] = []
        piece_rows: list[int] = []
        n = 0
        for i, size in enumerate(self.sizes):
            keys.append([])
            r0 = self.src.span(i).start
            for a in range(0, size, rows):
                b = min(size, a + rows)
                pieces[(n, 0)] = (_solve_piece, (B.name, i, 0), (gram.name, 0, 0),
                                  self.rows_path, r0, a, b, inv_S, method, tol, max_iter)
                keys[i].append(n)
                piece_rows.append(b - a)
                n += 1
        F = self.graph.layer("st-fit", pieces, [B, gram], (tuple(piece_rows), (self.K + 2,)))
        return [[(F.name, k, 0) for k in ks] for ks in keys], F

    def row_blocks_of(self, out: Any) -> tuple[list[list[tuple[Any, ...]]], Any]:
        """The keys of a V×(K+2) dask array chunked by row blocks (one piece per block),
        and the array."""
        return [[(out.name, i, 0)] for i in range(self.nb)], out

    def write_fits(self, fitted: tuple[list[list[tuple[Any, ...]]], Any], cpath: str) -> Any:
        """C (V×(K+2): the fitted rows, converged, gap) written to ``cpath`` by row blocks
        (each task owns its zarr chunk), from the pieces ``fitted``; returns C diag p (V×K)
        by row blocks."""
        blocks, dep = fitted
        tasks = {(i, 0): (_write_fit_rows, cpath, self.rows_path, self.src.span(i).start,
                          self.K, *blocks[i])
                 for i in range(self.nb)}
        return self.graph.layer("st-cp", tasks, [dep], (self.sizes, (self.K,)))

    def topic_topic(self, Cp: Any) -> Any:
        """Cpᵀ Q Cp (K×K) for Cp (V×K, chunked by Q's row blocks), e.g. C diag p or A: a
        task per block of Q, then their sum."""
        K = self.K
        parts = self.graph.blocks(
            "st-tt-parts", _topic_part,
            lambda i, j: (self.src, i, j, (Cp.name, i, 0), (Cp.name, j, 0)), [Cp],
            chunks=((K,) * self.nb,) * 2)
        return self.graph.total("st-tt", sum_arrays, parts, ((K,), (K,)))

    def all_written(self, Cp: Any) -> Any:
        """A 1×1 array that depends on every row block of ``Cp`` (:meth:`write_fits`'), so
        that computing it writes C."""
        return self.graph.total("st-done", _count_rows, Cp)


def _anchor_columns(
    src: QBlocks, i: int, j: int, cols: np.ndarray, ks: np.ndarray, rows: np.ndarray,
    ks_rows: np.ndarray, K: int,
) -> tuple[np.ndarray | None, ...]:
    """Block (i, j), i <= j, of Q at its anchor columns ``cols`` (offsets in block j),
    placed at columns ``ks`` of an n_i×K array; for i < j also the transposes of its anchor
    rows ``rows`` (offsets in block i), at columns ``ks_rows`` of an n_j×K array (Q_ji at
    the anchor columns of block i). Zeros elsewhere; None for a side without anchors."""
    block = src.block(i, j)
    left = right = None
    if ks.size:
        left = np.zeros((block.shape[0], K))
        left[:, ks] = block[:, cols]
    if i != j and ks_rows.size:
        right = np.zeros((block.shape[1], K))
        right[:, ks_rows] = block[rows, :].T
    return left, right


def _given_columns(Y: np.ndarray, given: np.ndarray) -> np.ndarray:
    """A row block of Y (n×K) with its first m columns replaced by ``given`` (n×m)."""
    out = np.array(Y, dtype=np.float64, copy=True)
    out[:, :given.shape[1]] = given
    return out


def _anchor_gram(anchors: np.ndarray, chunk: int, i: int, Y: np.ndarray) -> np.ndarray:
    """Row block i's share of [YᵀY | Q_SS] (K×2K): Y_iᵀY_i, and the rows of Q_SS of the
    anchors that fall in row block i."""
    K = anchors.size
    out = np.zeros((K, 2 * K))
    out[:, :K] = Y.T @ Y
    ks = np.flatnonzero(anchors // chunk == i)
    out[ks, K:] = Y[anchors[ks] - i * chunk]
    return out


def _product_part(
    src: QBlocks, i: int, j: int, X_i: np.ndarray, X_j: np.ndarray
) -> tuple[np.ndarray, ...]:
    """What block (i, j), i <= j, of the symmetric Q adds to Q X: Q_ij X_j (n_i×K) to row
    block i and, for i < j, Q_ji X_i = Q_ijᵀ X_i (n_j×K) to row block j. One read serves
    both."""
    block = src.block(i, j)
    if i == j:
        return (block @ X_j,)
    return block @ X_j, (X_i.T @ block).T


def _scratch_rows(rows_path: str, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
    """p and the squared norms of Q̄'s rows r0:r1, from the scratch array the client wrote."""
    stats = np.asarray(open_read_only(rows_path)[r0:r1])
    return stats[:, 0], stats[:, 1]


def _solve_piece(
    B: np.ndarray, gram: np.ndarray, rows_path: str, r0: int, a: int, b: int,
    inv_S: np.ndarray, method: str, tol: float, max_iter: int,
) -> np.ndarray:
    """The simplex fits of rows a:b of a row block starting at row r0 (n×(K+2)), from
    B = Q Y for the block (n_i×K), [YᵀY | Q_SS] (K×2K) and 1/p at the anchors (K,)."""
    K = inv_S.size
    p, norms = _scratch_rows(rows_path, r0 + a, r0 + b)
    inv = safe_inverse(p)
    G = gram[:, :K] * np.outer(inv_S, inv_S)
    Bs = B[a:b] * inv[:, None] * inv_S[None, :]
    return _kernel_block(Bs, norms, G, tol=tol, max_iter=max_iter, method=method)


def _write_fit_rows(
    cpath: str, rows_path: str, r0: int, K: int, *pieces: np.ndarray
) -> np.ndarray:
    """Writes the fitted rows of one row block to C (its own zarr chunk) and returns
    C diag p for them (n×K)."""
    import zarr

    block = np.concatenate(pieces, axis=0) if len(pieces) > 1 else pieces[0]
    zarr.open_array(cpath, mode="r+")[r0:r0 + block.shape[0]] = block
    p, _ = _scratch_rows(rows_path, r0, r0 + block.shape[0])
    return cast("np.ndarray", block[:, :K] * p[:, None])


def _topic_part(src: QBlocks, i: int, j: int, Cp_i: np.ndarray, Cp_j: np.ndarray) -> np.ndarray:
    """What block (i, j), i <= j, of the symmetric Q adds to Cpᵀ Q Cp (K×K): M = Cp_iᵀ Q_ij
    Cp_j, plus, for i < j, Mᵀ = Cp_jᵀ Q_ji Cp_i."""
    M = Cp_i.T @ (src.block(i, j) @ Cp_j)
    return cast("np.ndarray", M if i == j else M + M.T)


def _count_rows(*blocks: np.ndarray) -> np.ndarray:
    return np.array([[float(sum(b.shape[0] for b in blocks))]])
