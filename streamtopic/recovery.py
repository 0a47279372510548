"""Topic recovery: simplex-constrained fits of every word's row on the anchor rows.

For a word i with row-normalised co-occurrence row q_i = Q̄_i (V,) and anchor rows
Q̄_S (K×V), recovery finds C_i = p(z | w = i) on the probability simplex Δ_K:

* ``l2``  (RecoverL2):  argmin ‖q_i − C_i Q̄_S‖², in kernel form, i.e. from the K×K Gram
  G = Q̄_S Q̄_Sᵀ and the cross-products b_i = Q̄_S q_i only;
* ``kl``  (RecoverKL):  argmin KL(q_i ‖ C_i Q̄_S), on the full rows;
* ``original`` (Recover, Arora et al. 2012): a closed form through Q_SS⁻¹ (pseudo-inverse
  if singular), clipped to be non-negative.

Every solver works on a whole block of rows at once (numpy over the block, no loop over words)
and stops on a duality-gap tolerance: for a convex f on the simplex, the Frank–Wolfe gap
``∇f(c)·c − min_k ∇f(c)_k`` bounds f(c) − f*. Nothing needs tuning by the user: the L2 step is
1/L from the Lipschitz constant of its gradient, and KL uses EM, which has no step size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "RECOVER_METHODS",
    "BlockResult",
    "project_simplex",
    "solve_l2",
    "solve_kl",
    "recover_original",
]

RECOVER_METHODS = ("l2", "kl", "original")


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
