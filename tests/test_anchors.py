"""FastAnchorWords and the sketch."""

from __future__ import annotations

import numpy as np
import pytest

from streamtopic.anchors import _cleanup_sweep, find_anchors, projection_block


def _simplex_points(seed, K=6, d=30, n=400):
    rng = np.random.default_rng(seed)
    vertices = rng.dirichlet(np.full(d, 0.2), size=K)
    weights = rng.dirichlet(np.full(K, 0.5), size=n)
    X = np.vstack([vertices, weights @ vertices])
    return X, np.arange(K)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_finds_the_vertices_of_a_simplex(seed):
    X, vertices = _simplex_points(seed)
    res = find_anchors(X, 6, np.arange(len(X)))
    assert sorted(res.anchors.tolist()) == vertices.tolist()
    assert (res.distances > 0).all()


def test_candidates_restrict_the_choice():
    X, _ = _simplex_points(0)
    cand = np.arange(3, len(X))  # vertices 0..2 are not allowed
    res = find_anchors(X, 4, cand)
    assert set(res.anchors.tolist()) <= set(cand.tolist())


def test_cleanup_result_is_a_fixed_point():
    """After cleanup each anchor is the farthest point from the span of the other K−1."""
    rng = np.random.default_rng(4)
    X = rng.random((300, 20)) ** 3
    res = find_anchors(X, 8, np.arange(300), max_sweeps=20)
    again, changed = _cleanup_sweep(X, np.searchsorted(np.arange(300), res.anchors))
    assert changed == 0
    for i, a in enumerate(res.anchors):
        others = np.delete(res.anchors, i)
        B = X[others].T
        coef, *_ = np.linalg.lstsq(B, X.T, rcond=None)
        dist = np.linalg.norm(X.T - B @ coef, axis=0)
        dist[others] = -1
        assert np.argmax(dist) == a


def _volume(X: np.ndarray, anchors: np.ndarray) -> float:
    S = X[anchors]
    return float(np.sqrt(max(np.linalg.det(S @ S.T), 0.0)))


def test_cleanup_never_shrinks_the_anchor_volume_and_does_change_noisy_picks():
    """Each cleanup swap picks the point farthest from the span of the other K−1, which
    can only increase the volume spanned by the anchors; on noisy data it changes picks."""
    changed_somewhere = False
    for seed in range(12):
        rng = np.random.default_rng(seed)
        X, _ = _simplex_points(seed, K=6, d=30, n=400)
        X = X + 0.1 * rng.random(X.shape)  # noise: the greedy pass makes mistakes
        res = find_anchors(X, 6, np.arange(len(X)))
        assert _volume(X, res.anchors) >= _volume(X, res.greedy) * (1 - 1e-12)
        if res.changed:
            changed_somewhere = True
            assert _volume(X, res.anchors) > _volume(X, res.greedy)
    assert changed_somewhere


def test_errors_name_the_problem():
    X, _ = _simplex_points(0)
    with pytest.raises(ValueError, match="at least 2"):
        find_anchors(X, 1, np.arange(len(X)))
    with pytest.raises(ValueError, match="exceeds the 3 anchor candidates"):
        find_anchors(X, 5, np.arange(3))


def test_sparse_projection_is_seeded_and_isotropic():
    a = projection_block(7, 0, 500, 1000, 10_000)
    b = projection_block(7, 0, 500, 1000, 10_000)
    c = projection_block(8, 0, 500, 1000, 10_000)
    assert (a != b).nnz == 0 and (a != c).nnz > 0
    # E[P Pᵀ] = I: squared row norms average 1, rows are nearly orthogonal
    G = (a @ a.T).toarray()
    assert abs(np.diag(G).mean() - 1.0) < 0.05
    assert np.abs(G - np.diag(np.diag(G))).max() < 0.6
    assert a.nnz < 0.02 * a.shape[0] * a.shape[1]  # very sparse: density 1/√V
