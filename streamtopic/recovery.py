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
``∇f(c)·c − min_k ∇f(c)_k`` bounds f(c) − f*. Step sizes come from the problem itself
(the Lipschitz constant of the L2 gradient, a backtracking line search for KL), so nothing needs
tuning by the user.
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
    accelerated projected gradient (FISTA, step 1/L with L = 2 λ_max(G), and an adaptive
    restart per row whenever the objective rises).

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

    def objective(Z: np.ndarray) -> np.ndarray:
        return np.einsum("ij,ij->i", Z @ G, Z) - 2 * np.einsum("ij,ij->i", Z, B)

    f_prev = objective(X)
    gap = np.full(n, np.inf)
    it = 0
    todo = np.flatnonzero(active)
    while it < max_iter and todo.size:
        it += 1
        Yt, Bt = Y[todo], B[todo]
        grad = 2.0 * (Yt @ G - Bt)
        Xn = project_simplex(Yt - step * grad)
        fn = objective_rows(Xn, G, Bt)
        restart = fn > f_prev[todo]
        tn = 0.5 * (1 + np.sqrt(1 + 4 * t[todo] ** 2))
        mom = ((t[todo] - 1) / tn)[:, None]
        Yn = Xn + mom * (Xn - X[todo])
        # restart: drop the momentum, continue from the last iterate
        if restart.any():
            Xn[restart] = X[todo][restart]
            Yn[restart] = Xn[restart]
            tn[restart] = 1.0
            fn[restart] = f_prev[todo][restart]
        X[todo], Y[todo], t[todo], f_prev[todo] = Xn, Yn, tn, fn
        if it % 10 == 0 or it == max_iter:
            g = 2.0 * (X[todo] @ G - Bt)
            gap[todo] = _fw_gap(g, X[todo])
            todo = todo[gap[todo] > thresh[todo]]
    if todo.size:
        g = 2.0 * (X[todo] @ G - B[todo])
        gap[todo] = _fw_gap(g, X[todo])
    X[~active] = 0.0
    gap[~active] = 0.0
    return BlockResult(X, gap <= thresh, gap, it)


def objective_rows(X: np.ndarray, G: np.ndarray, B: np.ndarray) -> np.ndarray:
    """c G cᵀ − 2 c·b for each row (the L2 objective without the constant ‖q‖²)."""
    return np.einsum("ij,ij->i", X @ G, X) - 2 * np.einsum("ij,ij->i", X, B)


def solve_kl(
    R: np.ndarray,
    Qrows: np.ndarray,
    *,
    tol: float = 1e-7,
    max_iter: int = 2000,
    C0: np.ndarray | None = None,
) -> BlockResult:
    """Simplex-constrained KL fits for a block of rows: argmin_c KL(q_i ‖ c R).

    Exponentiated gradient (mirror descent on the simplex) with a per-row backtracking line
    search (Armijo) whose step grows after each accepted step: nothing to tune.

    Parameters
    ----------
    R : ndarray of shape (K, V)
        Anchor rows Q̄_S, each a distribution over words.
    Qrows : ndarray of shape (n, V)
        The block's rows Q̄_i (each sums to 1, or 0 for a word without mass).
    tol : float
        Converged when the duality gap ≤ tol (nats).
    max_iter : int
        Iteration cap.
    C0 : ndarray of shape (n, K), optional
        Starting point (default: uniform).
    """
    n, K = Qrows.shape[0], R.shape[0]
    mass = Qrows.sum(axis=1)
    active = mass > 0
    C = np.full((n, K), 1.0 / K) if C0 is None else np.clip(C0, 1e-12, None)
    C /= C.sum(axis=1, keepdims=True)
    eta = np.ones(n)
    gap = np.zeros(n)
    todo = np.flatnonzero(active)
    tiny = 1e-300

    def loss_grad(Cb: np.ndarray, Qb: np.ndarray, need_grad: bool = True):
        M = Cb @ R
        pos = Qb > 0
        ratio = np.where(pos, Qb / np.maximum(M, tiny), 0.0)
        loss = -np.sum(np.where(pos, Qb * np.log(np.maximum(M, tiny)), 0.0), axis=1)
        grad = -(ratio @ R.T) if need_grad else None
        return loss, grad

    Qt = Qrows[todo]
    f, g = loss_grad(C[todo], Qt)
    it = 0
    while it < max_iter and todo.size:
        it += 1
        Ct = C[todo]
        gp = _fw_gap(g, Ct)
        gap[todo] = gp
        keep = gp > tol
        if not keep.all():
            todo, Ct, Qt, f, g = todo[keep], Ct[keep], Qt[keep], f[keep], g[keep]
            if not todo.size:
                break
        e = eta[todo]
        accepted = np.zeros(todo.size, dtype=bool)
        Cn = Ct.copy()
        fn = f.copy()
        for _ in range(30):
            rows = np.flatnonzero(~accepted)
            if not rows.size:
                break
            gr = g[rows]
            Z = Ct[rows] * np.exp(-e[rows, None] * (gr - gr.min(axis=1, keepdims=True)))
            Z /= Z.sum(axis=1, keepdims=True)
            fz, _ = loss_grad(Z, Qt[rows], need_grad=False)
            # Armijo condition for mirror descent: sufficient decrease along the step
            dec = fz <= f[rows] + 0.5 * np.einsum("ij,ij->i", gr, Z - Ct[rows])
            ok = rows[dec]
            Cn[ok], fn[ok] = Z[dec], fz[dec]
            accepted[ok] = True
            e[rows[~dec]] *= 0.5
        eta[todo] = np.where(accepted, e * 1.5, e)
        C[todo] = Cn
        f, g = loss_grad(Cn, Qt)
    if todo.size:
        gap[todo] = _fw_gap(g, C[todo])
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
