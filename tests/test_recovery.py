"""Simplex-constrained solvers, checked against scipy on small problems solved exactly."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from scipy.optimize import minimize

from streamtopic import synth
from streamtopic.recovery import (
    RECOVER_METHODS,
    project_simplex,
    recover_original,
    solve_active_set,
    solve_admm,
    solve_kl,
    solve_l2,
)


def _problem(seed: int, K: int = 6, V: int = 40, n: int = 25, noise: float = 0.003):
    rng = np.random.default_rng(seed)
    R = rng.dirichlet(np.full(V, 0.3), size=K)
    C = rng.dirichlet(np.full(K, 0.3), size=n)
    Q = C @ R + noise * rng.random((n, V))
    Q /= Q.sum(axis=1, keepdims=True)
    return R, Q


def _scipy_simplex(f, K):
    res = minimize(
        f, np.full(K, 1.0 / K), method="SLSQP", bounds=[(0.0, 1.0)] * K,
        constraints=[{"type": "eq", "fun": lambda c: c.sum() - 1.0}],
        options={"ftol": 1e-15, "maxiter": 2000},
    )
    return res.x


def test_project_simplex_matches_brute_force():
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(30, 5)) * 2
    P = project_simplex(Y)
    assert np.allclose(P.sum(axis=1), 1.0) and (P >= 0).all()
    for y, p in zip(Y, P, strict=True):
        ref = _scipy_simplex(lambda c, y=y: ((c - y) ** 2).sum(), 5)
        assert np.abs(p - ref).max() < 1e-6
    # points already on the simplex are fixed
    X = rng.dirichlet(np.ones(5), size=10)
    np.testing.assert_allclose(project_simplex(X), X, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_l2_matches_scipy(seed):
    R, Q = _problem(seed)
    res = solve_l2(R @ R.T, Q @ R.T, (Q * Q).sum(axis=1), tol=1e-9)
    assert res.converged.all()
    for q, c in zip(Q, res.C, strict=True):
        ref = _scipy_simplex(lambda x, q=q: ((q - x @ R) ** 2).sum(), R.shape[0])
        f_ours, f_ref = ((q - c @ R) ** 2).sum(), ((q - ref @ R) ** 2).sum()
        assert f_ours <= f_ref + 1e-12
        assert np.abs(c - ref).max() < 1e-4
    assert np.allclose(res.C.sum(axis=1), 1.0) and (res.C >= 0).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_kl_matches_scipy(seed):
    R, Q = _problem(seed)
    res = solve_kl(R, Q, tol=1e-9)
    assert res.converged.all()

    def kl(q, c):
        return -(q * np.log(np.maximum(c @ R, 1e-300))).sum()

    for q, c in zip(Q, res.C, strict=True):
        ref = _scipy_simplex(lambda x, q=q: kl(q, np.maximum(x, 0)), R.shape[0])
        assert kl(q, c) <= kl(q, np.maximum(ref, 0)) + 1e-9
    assert np.allclose(res.C.sum(axis=1), 1.0) and (res.C >= 0).all()


def test_exact_mixtures_are_recovered_exactly():
    rng = np.random.default_rng(3)
    R = rng.dirichlet(np.full(50, 0.2), size=5)
    C = rng.dirichlet(np.full(5, 0.5), size=20)
    Q = C @ R
    l2 = solve_l2(R @ R.T, Q @ R.T, (Q * Q).sum(axis=1), tol=1e-10, max_iter=20000)
    kl = solve_kl(R, Q, tol=1e-10, max_iter=5000)
    assert np.abs(l2.C - C).max() < 1e-3
    assert np.abs(kl.C - C).max() < 1e-3


def test_zero_rows_and_uncovered_words():
    R, Q = _problem(5)
    Q[3] = 0.0  # a word with no co-occurrence mass
    res_l2 = solve_l2(R @ R.T, Q @ R.T, (Q * Q).sum(axis=1))
    res_kl = solve_kl(R, Q)
    for res in (res_l2, res_kl):
        assert (res.C[3] == 0).all() and res.converged[3]
    # a word that no anchor covers contributes a constant: the fit of the rest is unchanged
    R2 = np.hstack([R, np.zeros((R.shape[0], 1))])
    Q2 = np.hstack([Q * 0.9, np.full((Q.shape[0], 1), 0.1)])
    Q2[3] = 0.0
    a = solve_kl(R, Q, tol=1e-10).C
    b = solve_kl(R2, Q2, tol=1e-10).C
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_original_recover_on_exact_population():
    rng = np.random.default_rng(2)
    V, K = 30, 4
    A = rng.dirichlet(np.full(V, 0.3), size=K).T  # V×K
    anchors = np.arange(K)
    A[anchors] = 0.0
    A[anchors, anchors] = 0.2
    A /= A.sum(axis=0, keepdims=True)
    Rt = np.cov(rng.random((K, 50))) + np.eye(K)
    Rt /= Rt.sum()
    Q = A @ Rt @ A.T
    A_hat, _ = recover_original(Q[:, anchors], Q[np.ix_(anchors, anchors)], Q[anchors].sum(axis=1))
    A_hat /= A_hat.sum(axis=0, keepdims=True)
    np.testing.assert_allclose(A_hat, A, atol=1e-10)


# ---------------------------------------------------------------------------------------------
# ADMM and the exact active set, against independently computed optima


def _objective(G, B, norms, C):
    return np.einsum("ij,jk,ik->i", C, G, C) - 2 * np.einsum("ij,ij->i", C, B) + norms


def _kernel_problem(seed: int, K: int, kind: str = "plain", n: int = 50, V: int = 80):
    """G, B, norms from K anchor rows and n word rows whose optima lie at vertices, on edges
    and inside. ``kind``: "plain"; "illcond" or "nearsingular" (anchor row 1 moved to within
    1e-2 or 1e-5 of row 0: λ_min(G)/λ_max(G) ≈ 1e-5 or 1e-11); "singular" (an anchor row
    that is the midpoint of two others)."""
    rng = np.random.default_rng(seed)
    R = rng.dirichlet(np.full(V, 0.3), size=K)
    if kind in ("illcond", "nearsingular"):
        eps = 1e-2 if kind == "illcond" else 1e-5
        R[1] = (1 - eps) * R[0] + eps * R[1]
    elif kind == "singular":
        R[-1] = 0.5 * (R[0] + R[1])
    centre = R.mean(axis=0)
    q = []
    for i in range(n):
        t = i % 4
        if t == 0:  # past an anchor, away from the centre: optimum at (or near) a vertex
            k = rng.integers(K)
            q.append(R[k] + rng.uniform(0.2, 1.0) * (R[k] - centre))
        elif t == 1:  # a mixture of two anchors plus noise: optimum on (or near) an edge
            k, m = rng.choice(K, 2, replace=False) if K > 1 else (0, 0)
            w = rng.uniform(0.2, 0.8)
            q.append(w * R[k] + (1 - w) * R[m] + 0.002 * rng.random(V))
        elif t == 2:  # a mixture of all the anchors: optimum inside
            q.append(rng.dirichlet(np.ones(K)) @ R + 0.001 * rng.random(V))
        else:  # an unrelated row
            q.append(rng.dirichlet(np.full(V, 0.3)))
    Q = np.array(q)
    return R @ R.T, Q @ R.T, np.einsum("ij,ij->i", Q, Q)


def _support_reference(G, B, norms):
    """Exact optima by enumerating supports: on each support S, the minimiser over the affine
    hull of S solves [2G_SS 1; 1ᵀ 0][c_S; μ] = [2b_S; 1] (least squares if singular; the
    matrix is shared by all rows); keep the non-negative ones and, per row, the best. The
    best vertex of the optimal face has a support on which that minimiser is unique."""
    n, K = B.shape
    best_f, best_C = np.full(n, np.inf), np.zeros((n, K))
    for r in range(1, K + 1):
        for S in map(list, combinations(range(K), r)):
            M = np.zeros((r + 1, r + 1))
            M[:r, :r] = 2 * G[np.ix_(S, S)]
            M[:r, r] = M[r, :r] = 1.0
            rhs = np.vstack([2 * B[:, S].T, np.ones((1, n))])
            cS = np.linalg.lstsq(M, rhs, rcond=None)[0][:r].T
            ok = (cS >= -1e-12).all(axis=1)
            C = np.zeros((n, K))
            C[:, S] = np.clip(cS, 0.0, None)
            C /= np.maximum(C.sum(axis=1, keepdims=True), 1e-300)
            f = _objective(G, B, norms, C)
            better = ok & (f < best_f)
            best_f[better], best_C[better] = f[better], C[better]
    return best_C, best_f


def _check_kkt(G, B, norms, C, rtol=1e-9):
    g = 2 * (C @ G - B)
    lam = np.einsum("ij,ij->i", g, C)
    mult = g - lam[:, None]  # ∇f_k − λ: ≥ 0 for every k, 0 on the support
    scale = norms[:, None]
    assert (C >= 0).all()
    np.testing.assert_allclose(C.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert (mult >= -rtol * scale).all()
    assert (np.abs(C * mult) <= rtol * scale).all()


def _solve_exact(solver, G, B, norms):
    if solver is solve_admm:  # first order: tighten the default tolerance (1e-8)
        return solve_admm(G, B, norms, tol=1e-11, max_iter=50_000)
    return solver(G, B, norms)


def test_new_methods_are_listed():
    assert RECOVER_METHODS == ("l2", "kl", "original", "admm", "activeset")


@pytest.mark.parametrize("solver", [solve_admm, solve_active_set], ids=["admm", "activeset"])
@pytest.mark.parametrize(
    "seed,K,kind",
    [(0, 5, "plain"), (1, 6, "plain"), (2, 8, "plain"), (3, 12, "plain"),
     (4, 6, "illcond"), (5, 8, "illcond"), (6, 6, "singular"), (7, 8, "singular")],
)
def test_matches_support_enumeration(solver, seed, K, kind):
    G, B, norms = _kernel_problem(seed, K, kind)
    C_ref, f_ref = _support_reference(G, B, norms)
    # the problems do have optima at vertices, on edges and inside
    sizes = (C_ref > 1e-9).sum(axis=1)
    assert (sizes == 1).any() and (sizes == 2).any() and (sizes >= 3).any()
    res = _solve_exact(solver, G, B, norms)
    assert res.converged.all()
    assert (res.C >= 0).all() and np.allclose(res.C.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    f = _objective(G, B, norms, res.C)
    assert (np.abs(f - f_ref) <= 1e-9 * norms).all()
    assert (res.gap <= 1e-9 * norms).all()
    if kind == "plain":  # G positive definite: the optimum is unique
        assert np.abs(res.C - C_ref).max() < 1e-6


@pytest.mark.parametrize("seed,K", [(8, 6), (9, 8)])
def test_nearly_singular_gram(seed, K):
    """λ_min/λ_max ≈ 1e-11 with a small slope along the flat direction: the active set is
    still exact. ADMM (first order) is slow there, as FISTA is: within the default 5000
    iterations it gets within ~1e-7 but does not meet the tolerance everywhere. Its gap
    stays an honest bound and its flags match it."""
    G, B, norms = _kernel_problem(seed, K, "nearsingular")
    _, f_ref = _support_reference(G, B, norms)
    res = solve_active_set(G, B, norms)
    assert res.converged.all()
    assert (np.abs(_objective(G, B, norms, res.C) - f_ref) <= 1e-9 * norms).all()
    _check_kkt(G, B, norms, res.C)
    admm = solve_admm(G, B, norms)
    f = _objective(G, B, norms, admm.C)
    assert (f - f_ref <= admm.gap + 1e-12 * norms).all()
    assert (f - f_ref <= 1e-7 * norms).all()
    assert np.array_equal(admm.converged, admm.gap <= 1e-8 * norms)


@pytest.mark.parametrize("kind", ["plain", "illcond", "nearsingular", "singular"])
def test_active_set_satisfies_kkt(kind):
    for seed, K in [(10, 5), (11, 10), (12, 20)]:
        G, B, norms = _kernel_problem(seed, K, kind)
        res = solve_active_set(G, B, norms)
        assert res.converged.all() and res.iterations <= 3 * K + 10
        _check_kkt(G, B, norms, res.C)


@pytest.mark.parametrize("solver", [solve_admm, solve_active_set], ids=["admm", "activeset"])
def test_matches_slsqp_k20(solver):
    G, B, norms = _kernel_problem(20, 20, "plain", n=12)
    res = _solve_exact(solver, G, B, norms)
    assert res.converged.all()
    f = _objective(G, B, norms, res.C)
    for i in range(B.shape[0]):
        b, nb = B[i], norms[i]
        ref = minimize(
            lambda c, b=b, nb=nb: c @ G @ c - 2 * c @ b + nb, np.full(20, 1 / 20),
            jac=lambda c, b=b: 2 * (G @ c - b), method="SLSQP", bounds=[(0.0, 1.0)] * 20,
            constraints=[{"type": "eq", "fun": lambda c: c.sum() - 1.0,
                          "jac": lambda c: np.ones_like(c)}],
            options={"ftol": 1e-16, "maxiter": 5000},
        )
        c_ref = np.clip(ref.x, 0.0, None)
        c_ref /= c_ref.sum()
        f_ref = _objective(G, B[i:i + 1], norms[i:i + 1], c_ref[None])[0]
        assert f[i] <= f_ref + 1e-9 * norms[i]
        assert np.abs(res.C[i] - c_ref).max() < 1e-5


def test_exact_population_recovered_by_all_l2_solvers():
    """Population Q of planted-anchor topics: every word's row is exactly a mixture of the
    anchor rows, with weights C[w, k] = p(z=k | w) = A[w, k] p(z=k) / p(w), p(z) uniform."""
    A, anchors = synth.dirichlet_topics_with_anchors(500, 10, beta=0.05, seed=0)
    Q = synth.population_cooccurrence(A, 0.1)
    Qbar = Q / Q.sum(axis=1, keepdims=True)
    G, B = Qbar[anchors] @ Qbar[anchors].T, Qbar @ Qbar[anchors].T
    norms = np.einsum("ij,ij->i", Qbar, Qbar)
    C_true = A / A.sum(axis=1, keepdims=True)
    l2 = solve_l2(G, B, norms, tol=1e-13, max_iter=50_000)
    admm = solve_admm(G, B, norms, tol=1e-13, max_iter=50_000)
    exact = solve_active_set(G, B, norms)
    for res in (l2, admm, exact):
        assert res.converged.all()
        assert np.abs(res.C - C_true).max() < 1e-6
    assert np.abs(admm.C - l2.C).max() < 1e-6 and np.abs(exact.C - l2.C).max() < 1e-6
    assert np.abs(exact.C - C_true).max() < 1e-8  # exact up to rounding
    # the defaults agree too, to their tolerances
    assert np.abs(solve_admm(G, B, norms).C - C_true).max() < 1e-5


@pytest.mark.parametrize("solver", [solve_admm, solve_active_set], ids=["admm", "activeset"])
def test_zero_rows_and_small_k(solver):
    G, B, norms = _kernel_problem(30, 6)
    B[[3, 7]] = 0.0
    norms[[3, 7]] = 0.0
    res = solver(G, B, norms)
    assert (res.C[[3, 7]] == 0).all() and res.converged[[3, 7]].all()
    assert (res.gap[[3, 7]] == 0).all() and res.converged.all()
    # K = 2, including identical anchor rows (G singular, every c optimal), and K = 1
    for kind in ("plain", "same"):
        G2, B2, n2 = _kernel_problem(31, 2, n=20)
        if kind == "same":
            G2 = np.full((2, 2), G2[0, 0])
            B2 = np.repeat(B2[:, :1], 2, axis=1)
        _, f_ref = _support_reference(G2, B2, n2)
        res = solver(G2, B2, n2)
        assert res.converged.all() and np.allclose(res.C.sum(axis=1), 1.0)
        assert (np.abs(_objective(G2, B2, n2, res.C) - f_ref) <= 1e-8 * n2).all()
    G1, B1, n1 = _kernel_problem(32, 1, n=8)
    res = solver(G1, B1, n1)
    assert res.converged.all() and (res.C == 1.0).all()


@pytest.mark.parametrize("method", ["l2", "activeset", "admm"])
def test_recovery_tasks_solve_in_small_sub_blocks_with_the_same_result(method, monkeypatch):
    """A recovery task solves its rows in sub-blocks whose (rows × K) arrays stay within
    ``SOLVE_BYTES`` (below glibc's mmap threshold, which Dask workers freeze); the rows are
    independent problems, so the answer equals one solve over the whole block."""
    import streamtopic.recovery as recovery_mod

    R, Q = _problem(11, K=8, V=60, n=4000)
    norms = np.einsum("ij,ij->i", Q, Q)
    G, B = R @ R.T, Q @ R.T
    whole = recovery_mod.KERNEL_SOLVERS[method](G, B, norms, tol=1e-9, max_iter=3000)
    sizes = []
    solver = recovery_mod.KERNEL_SOLVERS[method]

    def spy(G_, B_, norms_, **kw):
        sizes.append(B_.shape[0])
        return solver(G_, B_, norms_, **kw)

    monkeypatch.setitem(recovery_mod.KERNEL_SOLVERS, method, spy)
    out = recovery_mod._kernel_block(B, norms, G=G, tol=1e-9, max_iter=3000, method=method)
    assert len(sizes) > 1 and sum(sizes) == 4000
    assert max(sizes) * 8 * 8 <= recovery_mod.SOLVE_BYTES
    np.testing.assert_allclose(out[:, :8], whole.C, atol=1e-12)
    np.testing.assert_array_equal(out[:, 8] > 0.5, whole.converged)
