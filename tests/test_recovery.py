"""Simplex-constrained solvers, checked against scipy on small problems solved exactly."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from streamtopic.recovery import project_simplex, recover_original, solve_kl, solve_l2


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
    for y, p in zip(Y, P):
        ref = _scipy_simplex(lambda c: ((c - y) ** 2).sum(), 5)
        assert np.abs(p - ref).max() < 1e-6
    # points already on the simplex are fixed
    X = rng.dirichlet(np.ones(5), size=10)
    np.testing.assert_allclose(project_simplex(X), X, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_l2_matches_scipy(seed):
    R, Q = _problem(seed)
    res = solve_l2(R @ R.T, Q @ R.T, (Q * Q).sum(axis=1), tol=1e-9)
    assert res.converged.all()
    for q, c in zip(Q, res.C):
        ref = _scipy_simplex(lambda x: ((q - x @ R) ** 2).sum(), R.shape[0])
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

    for q, c in zip(Q, res.C):
        ref = _scipy_simplex(lambda x: kl(q, np.maximum(x, 0)), R.shape[0])
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
