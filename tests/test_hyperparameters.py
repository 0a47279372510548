"""The Dirichlet prior α from a fit's moments (streamtopic.hyperparameters) and the model's
``alpha_``: exact on population moments, close on sampled θ and on semi-synthetic corpora."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import streamtopic as st
from streamtopic import synth
from streamtopic.cli import main
from streamtopic.hyperparameters import (
    ALPHA0_MAX,
    ALPHA0_MIN,
    estimate_alpha,
    fit_concentration,
    topic_cooccurrence_from_topics,
)
from streamtopic.metrics import matched_l1
from streamtopic.model import AnchorTopicModel
from streamtopic.persistence import is_model

from ._legacy import downgrade_model_to_format1

ALPHA0 = [0.1, 0.5, 1.0, 2.0, 5.0]


def _alpha(shape: str, alpha0: float, K: int) -> np.ndarray:
    """Symmetric, or asymmetric over a tenfold range of prevalences (as benchmarks/alpha.py)."""
    w = np.ones(K) if shape == "symmetric" else 10.0 ** (-np.arange(K) / (K - 1))
    return alpha0 * w / w.sum()


def _rel_l1(a_hat: np.ndarray, a: np.ndarray) -> float:
    return float(np.abs(a_hat - a).sum() / a.sum())


@pytest.mark.parametrize("shape", ["symmetric", "asymmetric", "random"])
@pytest.mark.parametrize("alpha0", ALPHA0)
@pytest.mark.parametrize("K", [2, 20])
def test_population_moments_give_alpha_back(shape, alpha0, K):
    if shape == "random":
        a = alpha0 * np.random.default_rng(K).dirichlet(np.ones(K))
    else:
        a = _alpha(shape, alpha0, K)
    R = synth.dirichlet_second_moment(a, K)
    np.testing.assert_allclose(estimate_alpha(R, a / alpha0), a, rtol=1e-8, atol=0)
    # any scale of either argument, and R's row sums as the prevalence
    np.testing.assert_allclose(estimate_alpha(3.0 * R, 7.0 * a), a, rtol=1e-8, atol=0)
    np.testing.assert_allclose(estimate_alpha(R, R.sum(axis=1)), a, rtol=1e-8, atol=0)


def test_sampled_proportions():
    """The moments of 100,000 draws of θ ~ Dirichlet(α): α within 3% (relative L1)."""
    rng = np.random.default_rng(0)
    for a in (_alpha("asymmetric", 0.5, 20), _alpha("symmetric", 2.0, 10)):
        theta = rng.dirichlet(a, size=100_000)
        R = theta.T @ theta / len(theta)
        assert _rel_l1(estimate_alpha(R, theta.mean(axis=0)), a) < 0.03


def test_robust_to_one_bad_topic():
    """A topic whose row and column of R are 3× too large (a badly recovered topic) moves the
    Cauchy fit's α₀ by under 10%; least squares on the same entries by over 25%."""
    K, j = 20, 3
    for alpha0 in ALPHA0:
        R = synth.dirichlet_second_moment(_alpha("symmetric", alpha0, K), K)
        R[j, :] *= 3.0
        R[:, j] *= 3.0
        R /= R.sum()
        r = R.sum(axis=1)
        iu = np.triu_indices(K)
        d, e = (np.diag(r) - np.outer(r, r))[iu], (R - np.outer(r, r))[iu]
        c_ls = (d @ e) / (d @ d)
        assert abs((1 / c_ls - 1) / alpha0 - 1) > 0.25
        assert fit_concentration(R, loss="linear") == pytest.approx(1 / c_ls - 1, rel=1e-12)
        assert abs(fit_concentration(R) / alpha0 - 1) < 0.10


def test_concentration_bounds():
    p = np.array([0.5, 0.3, 0.2])
    # one topic per document (R = diag p): α₀ → 0; the same θ for all (R = p pᵀ): α₀ → ∞
    assert fit_concentration(np.diag(p)) == pytest.approx(ALPHA0_MIN, rel=1e-3)
    assert fit_concentration(np.outer(p, p)) == pytest.approx(ALPHA0_MAX, rel=1e-3)
    # an R "more diagonal" than any Dirichlet's still gives a positive α
    a = estimate_alpha(np.diag(p) + 0.01 * np.eye(3), p)
    assert np.all(a > 0) and a.sum() == pytest.approx(ALPHA0_MIN, rel=1e-3)


@pytest.mark.parametrize(("R", "p", "match"), [
    (np.ones((3, 2)), np.ones(3), "R has shape"),
    (np.float64(1.0), np.ones(1), "R has shape"),
    (np.eye(3), np.ones(2), "prevalence has shape"),
    (np.full((2, 2), np.nan), np.ones(2), "finite"),
    (np.eye(2), np.array([1.0, -0.1]), "non-negative"),
    (np.eye(2), np.zeros(2), "positive sum"),
    (-np.eye(2), np.ones(2), "R must have a positive sum"),
])
def test_bad_input(R, p, match):
    with pytest.raises(ValueError, match=match):
        estimate_alpha(R, p)


def test_bad_loss():
    with pytest.raises(ValueError, match="loss='l2'"):
        estimate_alpha(np.eye(2), np.ones(2), loss="l2")


def test_topic_cooccurrence_from_topics_on_some_words():
    """A† Q A†ᵀ is R for the whole Q and for the block of any K or more words."""
    A = synth.dirichlet_topics(300, 6, beta=0.1, seed=1)
    R = synth.dirichlet_second_moment(_alpha("asymmetric", 0.7, 6), 6)
    Q = A @ R @ A.T
    np.testing.assert_allclose(topic_cooccurrence_from_topics(A, Q), R, rtol=1e-8)
    words = np.sort(np.random.default_rng(2).choice(300, 40, replace=False))
    got = topic_cooccurrence_from_topics(A[words], 5.0 * Q[np.ix_(words, words)])
    np.testing.assert_allclose(got, R, rtol=1e-8)
    with pytest.raises(ValueError, match="expected"):
        topic_cooccurrence_from_topics(A, Q[:10, :10])


# ----------------------------------------------------------------------------- the model

V, K, M = 2000, 20, 100_000


@pytest.fixture(scope="module")
def topics():
    return synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=0)[0]


def test_population_store_gives_alpha_back(topics, tmp_path):
    """Infinite data: the fit's ``alpha_`` is the generator's α (no corpus: not refined)."""
    a = _alpha("asymmetric", 0.5, K)
    st.CooccurrenceStore.from_array(synth.population_cooccurrence(topics, a),
                                    synth.default_vocab(V), tmp_path / "p.zarr", n_docs=10**9)
    m = AnchorTopicModel(K, method="plain", seed=0).fit(tmp_path / "p.zarr")
    match = matched_l1(topics, m.components_.T).matching
    np.testing.assert_allclose(m.alpha_[match], a, rtol=1e-6)
    assert m.diagnostics_["alpha"]["topic_cooccurrence"] == "spectral"


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["symmetric", "asymmetric"])
def test_semi_synthetic_alpha_within_20_percent(shape, topics, tmp_path,
                                                make_semi_synthetic_store):
    """The acceptance of issue 18 point 4, at the benchmark's 100,000 documents of 100 tokens
    (benchmarks/alpha.py: 0.02-0.05 for these two): α₀ = 0.5, relative L1 <= 0.2 for the
    default fit (α from the refined topics) and for the plain one; the topics recovered."""
    a = _alpha(shape, 0.5, K)
    store = make_semi_synthetic_store(tmp_path, topics, M, doc_length=100, seed=1, alpha=a)
    m = AnchorTopicModel(K, seed=0).fit(store)
    ml = matched_l1(topics, m.components_.T)
    assert ml.mean < 0.05, ml.mean
    assert _rel_l1(m.alpha_[ml.matching], a) <= 0.2
    assert m.diagnostics_["alpha"] == {"alpha0": pytest.approx(m.alpha_.sum()),
                                       "topic_cooccurrence": "refined", "words": V}
    plain = AnchorTopicModel(K, method="plain", seed=0).fit(store)
    match = matched_l1(topics, plain.components_.T).matching
    assert _rel_l1(plain.alpha_[match], a) <= 0.2
    if shape == "asymmetric":
        _check_persistence(m, tmp_path)
        _check_cli(store, tmp_path)
    else:  # a core vocabulary: R on the core's block of Q
        cored = AnchorTopicModel(K, seed=0, core_size=1000).fit(store)
        assert cored.diagnostics_["alpha"]["words"] == 1000
        match = matched_l1(topics, cored.components_.T).matching
        assert _rel_l1(cored.alpha_[match], a) <= 0.2


def test_alpha_after_the_refinement_reuses_the_core_block(topics, tmp_path, monkeypatch,
                                                           make_semi_synthetic_store):
    """α's fit after the refinement takes the core's block of Q the spectral stages read
    (``Spectral.core_block``) instead of reading it from the store again; the same α as from
    a second read, to rounding (R is normalised, so Q's scale does not matter)."""
    import streamtopic.spectral as spectral
    from streamtopic.store import CooccurrenceStore

    store = make_semi_synthetic_store(tmp_path, topics, 3000, doc_length=60, seed=2)
    reads = []
    real = CooccurrenceStore.read_submatrix

    def counting(self, words, *args, **kwargs):
        reads.append(len(words))
        return real(self, words, *args, **kwargs)

    monkeypatch.setattr(CooccurrenceStore, "read_submatrix", counting)
    kept = AnchorTopicModel(K, seed=0, core_size=500).fit(store)
    assert reads == [500] and kept.diagnostics_["alpha"]["words"] == 500
    reads.clear()
    monkeypatch.setattr(spectral, "KEEP_CORE_BYTES", 0)
    again = AnchorTopicModel(K, seed=0, core_size=500).fit(store)
    assert reads == [500, 500]
    np.testing.assert_array_equal(again.components_, kept.components_)
    np.testing.assert_allclose(again.alpha_, kept.alpha_, rtol=1e-9)


def _check_persistence(m: AnchorTopicModel, tmp_path) -> None:
    """``alpha_`` is saved and loaded; a model saved before it existed loads with α from its
    saved R and prevalence."""
    for fmt, path in (("zarr", tmp_path / "m.zarr"), ("hdf5", tmp_path / "m.h5")):
        m.save(path, format=fmt)
        np.testing.assert_array_equal(AnchorTopicModel.load(path).alpha_, m.alpha_)
        downgrade_model_to_format1(path)  # as saved then: no digests, and no alpha
        if fmt == "zarr":
            del zarr.open_group(str(path), mode="a")["alpha"]
        else:
            with h5py.File(path, "a") as f:
                del f["alpha"]
        old = AnchorTopicModel.load(path)
        np.testing.assert_allclose(
            old.alpha_, estimate_alpha(m.topic_cooccurrence_, m.topic_prevalence_), rtol=1e-12)
        assert is_model(path)


def _check_cli(store, tmp_path) -> None:
    res = CliRunner().invoke(main, ["fit", str(store), "-k", str(K), "-o",
                                    str(tmp_path / "cli"), "-q", "--method", "plain"])
    assert res.exit_code == 0, res.output
    alpha = AnchorTopicModel.load(tmp_path / "cli").alpha_
    assert f"alpha0 = {alpha.sum():.3g}" in res.stderr
