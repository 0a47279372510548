"""EM refinement of the spectral topics: ground truth on a semi-synthetic corpus."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import streamtopic as st
from streamtopic import synth
from streamtopic._kernels import em_expected_counts, em_theta
from streamtopic.inference import infer_topics
from streamtopic.metrics import matched_l1
from streamtopic.model import AnchorTopicModel, ModelError
from streamtopic.refinement import refine_topics

V, K = 500, 8


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    A, _ = synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=2)
    d = tmp_path_factory.mktemp("refine")
    synth.write_corpus(str(d / "c.h5"), A, 3000, format="hdf5", alpha=0.1, doc_length=60,
                       seed=3)
    (d / "vocab.txt").write_text("\n".join(synth.default_vocab(V)) + "\n")
    st.ingest(str(d / "c.h5"), d / "s.zarr", vocab=str(d / "vocab.txt"), progress=False)
    return A, d


def _random_problem(seed, n_docs, n_words, n_topics, density, max_count):
    """Random topics β (K×V) and counts H (CSR), the kernels' CSR arrays and βᵀ."""
    rng = np.random.default_rng(seed)
    beta = rng.dirichlet(np.full(n_words, 0.1), n_topics)
    H = sp.random(n_docs, n_words, density=density, format="csr", random_state=seed + 1,
                  data_rvs=lambda n: rng.integers(1, max_count, n).astype(float))
    args = (H.indptr.astype(np.int64), H.indices.astype(np.int32), H.data)
    return beta, H, args, np.ascontiguousarray(beta.T), rng


def test_em_kernels_match_numpy():
    beta, H, args, bt, _ = _random_problem(0, 40, 200, 6, 0.1, 5)
    theta = np.empty((40, 6))
    em_theta(*args, bt, 0.01, 1e-12, 5000, theta)
    ref = np.vstack([infer_topics(beta, H[i], tol=1e-12, max_iter=5000) for i in range(40)])
    np.testing.assert_allclose(theta, ref, atol=1e-8)
    out = np.zeros((200, 6))
    ll = em_expected_counts(*args, bt, theta, out)
    M = theta @ beta
    Hd = H.toarray()
    np.testing.assert_allclose(ll, (Hd * np.log(np.where(Hd > 0, M, 1))).sum(), rtol=1e-12)
    N = out.T * beta  # expected counts: each document's tokens shared out among topics
    np.testing.assert_allclose(N, theta.T @ (Hd / M) * beta, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(N.sum(), Hd.sum(), rtol=1e-12)


def test_warm_start_reaches_the_same_theta_with_less_work():
    """θ's MAP estimate is unique (α > 0): a warm start changes the iterations, not θ."""
    _, _, args, bt, rng = _random_problem(4, 60, 300, 7, 0.08, 4)
    cold = np.empty((60, 7))
    n_cold = em_theta(*args, bt, 0.1, 1e-13, 20000, cold)
    near = cold + rng.normal(0, 1e-3, cold.shape)
    near = np.abs(near) / np.abs(near).sum(axis=1, keepdims=True)
    n_warm = em_theta(*args, bt, 0.1, 1e-13, 20000, near, True)
    np.testing.assert_allclose(near, cold, atol=1e-9)
    assert n_warm < n_cold, (n_warm, n_cold)
    ignored = np.full((60, 7), 0.5)  # without warm, the start given is ignored
    assert em_theta(*args, bt, 0.1, 1e-13, 20000, ignored) == n_cold
    np.testing.assert_array_equal(ignored, cold)


def test_refinement_raises_the_likelihood_and_approaches_the_truth(corpus):
    A, d = corpus
    spectral = AnchorTopicModel(K, seed=0).fit(d / "s.zarr")
    refined = AnchorTopicModel(K, seed=0, refine_passes=4).fit(d / "s.zarr")
    info = refined.diagnostics_["refinement"]
    ll = info["loglik_per_token"]
    assert len(ll) == 4 and all(b > a for a, b in zip(ll, ll[1:])), ll
    iters = info["theta_iterations"]  # later passes start from the previous pass' θ
    assert len(iters) == 4 and iters[-1] < 0.7 * iters[0], iters
    l1_spec = matched_l1(A, spectral.components_.T).mean
    l1_ref = matched_l1(A, refined.components_.T).mean
    assert l1_ref < l1_spec, (l1_spec, l1_ref)
    np.testing.assert_allclose(refined.components_.sum(axis=1), 1.0)
    np.testing.assert_array_equal(refined.anchors_, spectral.anchors_)
    again = AnchorTopicModel(K, seed=0, refine_passes=4).fit(d / "s.zarr")
    np.testing.assert_array_equal(again.components_, refined.components_)  # deterministic


def test_refine_topics_api_and_errors(corpus, tmp_path):
    A, d = corpus
    res = refine_topics(np.ascontiguousarray(A.T), str(d / "c.h5"), synth.default_vocab(V),
                        passes=1)
    assert res.components.shape == (K, V) and len(res.seconds) == 1
    with pytest.raises(ValueError, match="passes=0"):
        refine_topics(A.T, str(d / "c.h5"), synth.default_vocab(V), passes=0)
    with pytest.raises(ValueError, match="vocab has 3 words"):
        refine_topics(A.T, str(d / "c.h5"), ["a", "b", "c"])
    with pytest.raises(ValueError, match="refine_passes=-1"):
        AnchorTopicModel(K, refine_passes=-1).fit(d / "s.zarr")
    # a store whose inputs are gone cannot be refined: say so
    Q = synth.population_cooccurrence(A, 0.1)
    st.CooccurrenceStore.from_array(Q, synth.default_vocab(V), tmp_path / "p.zarr", n_docs=10)
    with pytest.raises(ModelError, match="refinement reads the training corpus"):
        AnchorTopicModel(K, refine_passes=1).fit(tmp_path / "p.zarr")
