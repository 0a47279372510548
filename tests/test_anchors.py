"""FastAnchorWords, the sketch, and exact anchors by implicit pivoted QR."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

import streamtopic as st
from streamtopic import synth
from streamtopic.anchors import _cleanup_sweep, find_anchors, find_anchors_qr
from streamtopic.passes import QBlocks
from streamtopic.sketch import projection_block, write_sketch


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


def test_single_precision_products_pick_what_double_precision_picks():
    """The default search multiplies in single precision; on noisy points from a sketch of
    a semi-synthetic Q it makes the same greedy picks and the same cleanup as double."""
    rng = np.random.default_rng(7)
    A = rng.dirichlet(np.full(3000, 0.05), size=40).T  # V×K topics
    W = rng.dirichlet(np.full(40, 0.3), size=2000)  # mixtures
    Q = (A * 1.0) @ (W.T @ W / 2000) @ A.T + rng.normal(0, 1e-9, (3000, 3000))
    Qbar = Q / Q.sum(axis=1, keepdims=True)
    X = Qbar @ rng.normal(size=(3000, 500))
    cand = np.flatnonzero(A.max(axis=1) > 1e-3)
    single, double = (find_anchors(X, 40, cand, precision=p) for p in ("single", "double"))
    np.testing.assert_array_equal(single.greedy, double.greedy)
    np.testing.assert_array_equal(single.anchors, double.anchors)
    np.testing.assert_allclose(single.distances, double.distances, rtol=1e-12)
    with pytest.raises(ValueError, match="precision"):
        find_anchors(X, 40, cand, precision="half")


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


def test_row_split_products_equal_the_whole_product(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from streamtopic import anchors
    from streamtopic.anchors import _RowProducts

    rng = np.random.default_rng(5)
    X = rng.random((5003, 64))
    b, M = rng.random(64), rng.random((64, 7))
    with ThreadPoolExecutor(3) as pool:
        assert len(_RowProducts(X, pool, 3).bounds) == 2  # 2.5 MB: one thread does it all
        monkeypatch.setattr(anchors, "SPLIT_BYTES", X.nbytes // 4)
        times = _RowProducts(X, pool, 3)
        assert len(times.bounds) == 4  # three row ranges, one per thread
        np.testing.assert_allclose(times(b), X @ b, rtol=1e-14)
        np.testing.assert_allclose(times(M), X @ M, rtol=1e-14)
        # single-precision points (the anchor search's): float64 results, to float32 accuracy
        single = _RowProducts(X.astype(np.float32), pool, 3)
        for out, exact in ((single(b), X @ b), (single(M), X @ M)):
            assert out.dtype == np.float64
            np.testing.assert_allclose(out, exact, rtol=1e-5)
    np.testing.assert_array_equal(_RowProducts(X, None)(b), X @ b)


def test_anchor_distances_are_least_squares_distances_to_the_other_anchors():
    X, _ = _simplex_points(3, K=8, d=40)
    res = find_anchors(X, 8, np.arange(len(X)))
    S = X[res.anchors]
    for i in range(8):
        others = np.delete(S, i, axis=0).T
        coef, *_ = np.linalg.lstsq(others, S[i], rcond=None)
        assert res.distances[i] == pytest.approx(np.linalg.norm(S[i] - others @ coef),
                                                 rel=1e-9)


def test_sketch_from_the_upper_blocks_equals_the_dense_product(tmp_path):
    """(Q P)ᵀ, row sums and row sums of squares, from blocks on and above the diagonal only,
    for the store, a zarr array and an in-memory array (a partial last block included)."""
    import zarr

    V, c, d = 300, 128, 50
    rng = np.random.default_rng(4)
    E = rng.random((V, V))
    Q = E + E.T
    n_docs = 7
    store = st.CooccurrenceStore.from_array(Q, [f"w{i}" for i in range(V)],
                                            tmp_path / "s.zarr", n_docs=n_docs, chunk_size=c)
    zarr.create_array(str(tmp_path / "q.zarr"), shape=(V, V), chunks=(c, c), dtype="f8")[:] = Q
    P = sp.vstack([projection_block(3, j0, min(V, j0 + c), d, V) for j0 in range(0, V, c)])
    QP = Q @ P.toarray()
    for src in (QBlocks.from_store(store), QBlocks.from_zarr(str(tmp_path / "q.zarr")),
                QBlocks.from_memory(Q, c)):
        xpath, spath = str(tmp_path / "proj.zarr"), str(tmp_path / "stats.zarr")
        assert write_sketch(src, d, 3, xpath, spath).compute() == V
        proj, stats = zarr.open_array(xpath), zarr.open_array(spath)
        assert proj.chunks == (d, c) and proj.dtype == np.float32
        assert stats.chunks == (c, 2) and stats.dtype == np.float64
        got, sums = proj[:], stats[:]
        # the projection in single precision (relative to the largest entry of its row)
        err = np.abs(got.T - QP).max(axis=1) / np.abs(QP).max(axis=1)
        assert err.max() < 1e-6
        np.testing.assert_allclose(sums, np.column_stack([Q.sum(axis=1), (Q * Q).sum(axis=1)]),
                                   rtol=1e-12)
    # only some rows wanted: a block with few of them projects those only (the others are
    # zero), a block with most of them projects all; the sums still cover every row
    wanted = np.r_[np.arange(0, 128, 3), np.arange(128, 256), [260, 299]]
    xpath, spath = str(tmp_path / "proj-some.zarr"), str(tmp_path / "stats-some.zarr")
    assert write_sketch(QBlocks.from_memory(Q, c), d, 3, xpath, spath, rows=wanted).compute() == V
    some = zarr.open_array(xpath)[:]
    np.testing.assert_array_equal(some[:, wanted], got[:, wanted])
    untouched = np.setdiff1d(np.r_[0:128, 256:V], wanted)
    assert not some[:, untouched].any()
    np.testing.assert_array_equal(zarr.open_array(spath)[:], sums)
    # what a pass reads, for the stage logs
    every = [(i, j) for i in range(3) for j in range(3)]
    assert QBlocks.from_store(store).stored_bytes(every) == store.q_bytes() > 0
    upper = QBlocks.from_store(store).stored_bytes([(i, j) for i in range(3) for j in range(i, 3)])
    assert 0 < upper < store.q_bytes()
    assert QBlocks.from_zarr(str(tmp_path / "q.zarr")).stored_bytes(every) > 0
    assert QBlocks.from_memory(Q, c).stored_bytes(every) == 0


# ------------------------------------------------------------ exact anchors: implicit QR


def _planted(V=500, K=10):
    A, anchors = synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=0)
    return synth.population_cooccurrence(A, 0.1), anchors


def _noisy(V, K, seed=1, scale=1e-5):
    """A population Q plus a small symmetric non-negative perturbation (full rank)."""
    Q, _ = _planted(V, K)
    E = np.random.default_rng(seed).random((V, V)) * scale
    return Q + 0.5 * (E + E.T)


def test_qr_recovers_the_planted_anchors():
    Q, anchors = _planted()
    res = find_anchors_qr(Q, Q.sum(axis=1), 10, np.arange(500))
    assert sorted(res.anchors.tolist()) == sorted(anchors.tolist())
    assert (res.greedy == res.anchors).all() and res.changed == 0 and res.sweeps == 0
    assert (res.distances > 0).all()


def test_qr_blocked_path_matches_in_memory(tmp_path):
    """K passes over the store's ragged blocks (300 = 4·64 + 44) give the in-memory result:
    the same pivots, the same residual norms; so do Q loaded from the store and sparse Q."""
    V, K = 300, 8
    Q = _noisy(V, 6)
    p = Q.sum(axis=1)
    cand = np.arange(V)
    store = st.CooccurrenceStore.from_array(
        Q, synth.default_vocab(V), tmp_path / "q.zarr", n_docs=10**6, chunk_size=64
    )
    assert store.Q.chunks[0][-1] == 44
    ref = find_anchors_qr(Q, p, K, cand)
    blocked = find_anchors_qr(store.Q, p, K, cand, in_memory=False)
    loaded = find_anchors_qr(store.Q, p, K, cand)  # small V: the default loads Q
    sparse = find_anchors_qr(sp.csr_matrix(Q), p, K, cand)
    norms = np.einsum("ij,ij->i", Q, Q) / (p * p)
    given = find_anchors_qr(store.Q, p, K, cand, in_memory=False, norms=norms)
    for res in (blocked, loaded, sparse, given):
        assert res.anchors.tolist() == ref.anchors.tolist()
        np.testing.assert_allclose(res.distances, ref.distances, rtol=0, atol=1e-10)


def test_qr_pivots_are_scipy_column_pivots():
    """An independent reference: LAPACK's column-pivoted QR of Q̄ᵀ restricted to the
    candidate columns picks the same pivots, with |R_kk| the residual norms."""
    V, K = 120, 6
    Q = _noisy(V, 4, seed=3, scale=1e-3)
    p = Q.sum(axis=1)
    Qbar = Q / p[:, None]
    cand = np.arange(0, V, 2)[::-1].copy()  # a subset, in no particular order
    _, R, piv = scipy.linalg.qr(Qbar[cand].T, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    X = Qbar[cand]
    for k in range(K):  # distinct residuals: every pick clearly beats the runner-up
        B = X[piv[:k]].T
        resid = X.T - B @ np.linalg.lstsq(B, X.T, rcond=None)[0] if k else X.T
        r2 = np.sort(np.einsum("ij,ij->j", resid, resid))
        assert r2[-1] - r2[-2] > 1e-3 * r2[-1]
    res = find_anchors_qr(Q, p, K, cand)
    assert res.anchors.tolist() == cand[piv[:K]].tolist()
    np.testing.assert_allclose(res.distances, diag[:K], rtol=1e-8)


def test_qr_is_the_exact_greedy_of_fastanchorwords():
    """The QR pivots are FastAnchorWords' greedy pass on the exact rows of Q̄ (one kernel)."""
    V = 300
    Q = _noisy(V, 6, seed=2)
    p = Q.sum(axis=1)
    cand = np.flatnonzero(np.arange(V) % 3 != 0)
    res = find_anchors_qr(Q, p, 8, cand)
    fast = find_anchors(Q / p[:, None], 8, cand, cleanup=False)
    assert res.anchors.tolist() == fast.greedy.tolist()


def test_qr_candidates_restrict_the_choice_and_errors_name_the_problem():
    Q, anchors = _planted()
    p = Q.sum(axis=1)
    cand = np.setdiff1d(np.arange(500), anchors[:5])  # half the planted anchors not allowed
    res = find_anchors_qr(Q, p, 10, cand)
    assert set(res.anchors.tolist()) <= set(cand.tolist())
    assert set(anchors[5:].tolist()) <= set(res.anchors.tolist())
    with pytest.raises(ValueError, match="exceeds the 3 anchor candidates"):
        find_anchors_qr(Q, p, 5, np.arange(3))
    with pytest.raises(ValueError, match="at least 2"):
        find_anchors_qr(Q, p, 1, np.arange(500))
    with pytest.raises(ValueError, match="only 10 affinely independent"):
        find_anchors_qr(Q, p, 11, np.arange(500))  # population Q has rank 10
    with pytest.raises(ValueError, match="dask array"):
        find_anchors_qr(Q, p, 4, np.arange(500), in_memory=False)


# ------------------------------------------------------------ LP anchors (Arora, Ge, Moitra)


def test_lp_finds_the_planted_anchors_of_a_population_q():
    """Every planted anchor is a vertex of the rows' convex hull, and no other row is: with
    no noise the robust test is the exact one."""
    from streamtopic.anchors import _lp_points, _robust_hull_distances, find_anchors_lp

    Q, anchors = _planted()
    Qbar = Q / Q.sum(axis=1, keepdims=True)
    res = find_anchors_lp(Qbar, 10, np.arange(500))
    assert sorted(res.anchors.tolist()) == sorted(anchors.tolist())
    assert (res.distances > 1e-6).all()
    Y, resid = _lp_points(Qbar, 10, 0)  # the rows in their rank-10 span, as find_anchors_lp
    assert resid.max() < 1e-12  # a population Q̄ has rank K: no noise
    inside = np.setdiff1d(np.arange(500), anchors)[:40]
    dist = _robust_hull_distances(Y[np.r_[anchors, inside]], 1e-6)  # ⊂ of the rows: a
    # smaller hull, so the interior rows' distances are upper bounds
    assert dist[10:].max() < 1e-7 and (dist[:10] > 1e-6).all()  # (LP_SAME_POINT)
    Q, _ = _planted(60, 4)
    with pytest.raises(ValueError, match="only 4 vertices"):
        find_anchors_lp(Q / Q.sum(axis=1, keepdims=True), 5, np.arange(60))


@pytest.fixture(scope="module")
def finite_corpus():
    """A separable semi-synthetic corpus with V = 500, K = 8 (β = 0.2: no other word is
    as peaked as a planted anchor), 20,000 documents of 70 tokens: Q, the candidates by the
    default document-frequency threshold, the topics and the planted anchors."""
    from streamtopic.cooccurrence import document_cooccurrence
    from streamtopic.sketch import default_anchor_min_df

    A, anchors = synth.dirichlet_topics_with_anchors(500, 8, beta=0.2, seed=0)
    H = synth.sample_documents(A, 20_000, alpha=0.1, doc_length=70, seed=1)
    Q = document_cooccurrence(H)[0].toarray()
    Q /= Q.sum()
    df = np.bincount(H.indices, minlength=500)
    cand = np.flatnonzero((df >= default_anchor_min_df(20_000)) & (Q.sum(axis=1) > 0))
    return Q, cand, A, anchors


@pytest.mark.slow
def test_lp_finds_the_planted_anchors_of_a_finite_corpus(finite_corpus, monkeypatch):
    """With sampling noise every row is slightly outside the hull of the others: the
    robust test (near-duplicates left out, thresholds from the rows' noise) still finds
    every planted anchor, as the pivoted QR and FastAnchorWords do; the exact test does not."""
    import streamtopic.anchors as anchors_mod
    from streamtopic.anchors import find_anchors_lp

    Q, cand, _, anchors = finite_corpus
    p = Q.sum(axis=1)
    Qbar = Q / p[:, None]
    assert np.isin(anchors, cand).all()
    planted = sorted(anchors.tolist())
    assert sorted(find_anchors_lp(Qbar, 8, cand).anchors.tolist()) == planted
    assert sorted(find_anchors_qr(Q, p, 8, cand).anchors.tolist()) == planted
    assert sorted(find_anchors(Qbar, 8, cand, precision="double").anchors.tolist()) == planted
    levels = anchors_mod._noise_levels(*anchors_mod._lp_points(Qbar[cand], 8, 0), 8, 0)
    monkeypatch.setattr(anchors_mod, "_noise_levels", lambda *args: levels)  # (once)
    monkeypatch.setattr(anchors_mod, "LP_SCALES", (0.0,))  # the exact test: noisy rows win
    assert len(set(find_anchors_lp(Qbar, 8, cand).anchors.tolist()) & set(planted)) < 8
    # radii so wide that all vertices merge into one: the next, narrower ones separate them
    monkeypatch.setattr(anchors_mod, "LP_SCALES", (10.0, 1.0))
    assert sorted(find_anchors_lp(Qbar, 8, cand).anchors.tolist()) == planted


def test_lp_column_generation_solves_the_whole_program(finite_corpus):
    """A hull program by column generation has the value of the program over every far
    row (solved at once), and stops early only below its bound."""
    from streamtopic.anchors import _lp_points, _robust_hull_distances, _solve_hull_program

    Q, cand, _, anchors = finite_corpus
    Y, _ = _lp_points(Q[cand] / Q[cand].sum(axis=1, keepdims=True), 8, 0)
    rows = np.r_[np.searchsorted(cand, anchors), np.arange(0, len(cand), 25)]
    Y = Y[rows]  # the anchors and a spread of other rows
    n, d = Y.shape
    radius = 0.3
    got = _robust_hull_distances(Y, radius)
    points = np.vstack([Y.T, np.ones((1, n))])
    slack = np.vstack([np.hstack([np.eye(d), -np.eye(d)]), np.zeros((1, 2 * d))])
    far = np.abs(Y[:, None, :] - Y[None, :, :]).sum(axis=2) > radius
    whole = [_solve_hull_program(points[:, far[i]], slack, points[:, i])[0] for i in range(n)]
    np.testing.assert_allclose(got, whole, rtol=1e-6, atol=1e-8)
    assert got[:8].min() > 10 * np.median(got[8:])  # the vertices stand out
    bound = np.full(n, 0.05)
    early = _robust_hull_distances(Y, radius, bound)
    assert ((early == got) | ((early <= bound) & (got <= early + 1e-9))).all()


def test_lp_noise_estimate_tracks_the_sampling_noise(finite_corpus):
    """The noise level δ (from the exact test's hull distances) is the size of a row's
    actual sampling noise in the span (against the population Q̄: the median L1), and each
    row's estimate (δ scaled by its distance from the rank-K span) follows its own noise."""
    from streamtopic.anchors import _lp_points, _noise_levels

    Q, cand, A, _ = finite_corpus
    Qbar = Q[cand] / Q[cand].sum(axis=1, keepdims=True)
    P = synth.population_cooccurrence(A, 0.1)[cand]
    P /= P.sum(axis=1, keepdims=True)
    _, _, Vt = scipy.linalg.svd(Qbar, full_matrices=False)
    Y, resid = _lp_points(Qbar, 8, 0)
    delta, noise = _noise_levels(Y, resid, 8, 0)
    top = np.abs(Qbar @ Vt[:8].T).max()  # _lp_points' units
    true = np.abs((Qbar - P) @ Vt[:8].T).sum(axis=1) / top  # L1 in the span (n,)
    assert 0.6 < delta / np.median(true) < 1.6, delta / np.median(true)
    assert np.corrcoef(np.log(true), np.log(noise))[0, 1] > 0.4
    np.testing.assert_allclose(np.median(noise), delta)


def test_the_estimator_fits_with_lp_anchors(tmp_path, make_population_store):
    """anchor_method='lp' (--anchors lp) on a separable population store finds an exact anchor
    of every topic, and the topics, as the exact QR does."""
    A, anchors = synth.dirichlet_topics_with_anchors(300, 6, beta=0.05, seed=2)
    store = make_population_store(tmp_path / "s.zarr", A)
    fits = {m: st.AnchorTopicModel(6, method="plain", anchor_method=m, anchor_min_df=1,
                                   seed=0, progress=False).fit(store) for m in ("lp", "qr")}
    # one exact anchor per topic: a planted one, or another word that only its topic
    # uses, to 1e-9 (this corpus has such twins: word 215 of topic 2 beside the planted
    # 211; p(z|w) = 1 − 2.5e-10)
    pzw = A / A.sum(axis=1, keepdims=True)
    chosen = fits["lp"].anchors_
    assert sorted(np.argmax(pzw[chosen], axis=1).tolist()) == list(range(6))
    assert (pzw[chosen].max(axis=1) > 1 - 1e-9).all()
    assert len(set(chosen.tolist()) & set(anchors.tolist())) >= 5
    topic = {int(np.argmax(pzw[a])): k for k, a in enumerate(fits["qr"].anchors_)}
    order = [topic[int(np.argmax(pzw[a]))] for a in chosen]
    np.testing.assert_allclose(fits["lp"].components_, fits["qr"].components_[order],
                               atol=1e-6)


def test_lp_anchors_leave_q_unrectified_unless_asked():
    """LP's noise thresholds need the noise that rectification removes: with 'lp' the
    default rectification is none, whatever the method; an explicit one is kept."""
    s = st.AnchorTopicModel(6, anchor_method="lp").fit_settings()
    assert (s.anchor_method, s.rectify) == ("lp", "none")
    asked = st.AnchorTopicModel(6, anchor_method="lp", rectify="ap")
    assert asked.fit_settings().rectify == "ap"
    assert st.AnchorTopicModel(6).fit_settings().rectify == "ap"
