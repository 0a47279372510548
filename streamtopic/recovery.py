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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "RECOVER_METHODS",
    "BlockResult",
    "project_simplex",
    "solve_l2",
    "solve_admm",
    "solve_active_set",
    "solve_kl",
    "recover_original",
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
    return np.maximum(Y - theta[:, None], 0.0)


def _fw_gap(grad: np.ndarray, C: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", grad, C) - grad.min(axis=1)


def solve_l2(
    G: np.ndarray,
    B: np.ndarray,
    norms: np.ndarray,
    *,
    tol: float = 1e-8,
    max_iter: int = 5000,
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
    G : ndarray of shape (K, K)
        Gram matrix of the anchor rows, Q̄_S Q̄_Sᵀ (symmetric PSD, may be singular).
    B : ndarray of shape (n, K)
        Cross-products b_i = Q̄_S q_i of the block's rows.
    norms : ndarray of shape (n,)
        ‖q_i‖², the scale of each row's objective; rows with norm 0 get C_i = 0.
    tol : float
        Converged when the duality gap ≤ tol · ‖q_i‖².
    max_iter : int
        Iteration cap.
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
    G : ndarray of shape (K, K)
        Gram matrix of the anchor rows, Q̄_S Q̄_Sᵀ (symmetric PSD, may be singular).
    B : ndarray of shape (n, K)
        Cross-products b_i = Q̄_S q_i of the block's rows.
    norms : ndarray of shape (n,)
        ‖q_i‖², the scale of each row's objective; rows with norm 0 get C_i = 0.
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
    scale = float(np.trace(G)) / max(K, 1)
    if not np.isfinite(scale) or scale <= 0:
        scale = 1.0
    H = 2.0 * (G + _ACTIVE_SET_RIDGE * scale * np.eye(K))

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
        m = todo.size
        sub = np.arange(m)
        # pricing: the most negative multiplier among the fixed coordinates enters F
        mult = np.where(f, np.inf, g - lam[:, None])
        j = np.argmin(mult, axis=1)
        enter = stationary[todo] & (mult[sub, j] < 0)
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
        C[todo], F[todo], stationary[todo] = c, f, full
    C[~active] = 0.0
    gap[~active] = 0.0
    return BlockResult(C, gap <= thresh, gap, it)


def solve_kl(
    R: np.ndarray,
    Qrows: np.ndarray,
    *,
    tol: float = 1e-6,
    max_iter: int = 1000,
    C0: np.ndarray | None = None,
) -> BlockResult:
    """Simplex-constrained KL fits for a block of rows: argmin_c KL(q_i ‖ c R).

    This is maximum likelihood for the weights of a mixture of the anchor rows, so the EM
    map c_k ← c_k Σ_j q_j R_kj / (cR)_j decreases the objective at every step with no step
    size. It is accelerated by SQUAREM (Varadhan & Roland 2008): an extrapolation from two EM
    steps, projected back onto the simplex and kept only where it does better than plain EM.

    Words that no anchor row covers (Σ_k R_kj = 0) contribute a constant and are left out.

    Parameters
    ----------
    R : ndarray of shape (K, V)
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
    n, K = Qrows.shape[0], R.shape[0]
    covered = R.sum(axis=0) > 0
    Rc = np.ascontiguousarray(R[:, covered])
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

    def em(Cb: np.ndarray, Qb: np.ndarray, mb: np.ndarray):
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
        alpha = -np.sqrt(np.einsum("ij,ij->i", r, r) / np.maximum(np.einsum("ij,ij->i", v, v), tiny))
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
