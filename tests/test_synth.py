"""Tests of the semi-synthetic corpus generator (streamtopic.synth)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import streamtopic as st
from streamtopic import read_corpus, synth
from streamtopic.cooccurrence import document_cooccurrence
from streamtopic.synth import (
    LogisticNormal,
    default_vocab,
    dirichlet_second_moment,
    dirichlet_topics,
    dirichlet_topics_with_anchors,
    iter_documents,
    load_topics,
    parse_theta,
    plant_anchors,
    population_cooccurrence,
    population_store,
    sample_documents,
    second_moment,
    synthesize,
    topics_from_model,
    write_corpus,
)
from streamtopic.vocabulary import Tokenizer


def _read_back(
    path: str | os.PathLike[str], terms: Sequence[str], **kwargs: object
) -> sp.csr_matrix:
    """Read a corpus through ``read_corpus(...).iter_chunks()`` as a D×V matrix whose columns
    follow ``terms``."""
    vocab = np.asarray(terms, dtype=str)
    order = np.argsort(vocab)
    sorted_vocab = vocab[order]
    blocks = []
    for chunk in read_corpus(os.fspath(path), **kwargs).iter_chunks():  # type: ignore[arg-type]
        t = np.asarray(chunk.terms, dtype=str)
        pos = np.searchsorted(sorted_vocab, t)
        assert np.array_equal(sorted_vocab[np.minimum(pos, len(vocab) - 1)], t), "unknown term"
        cols = order[pos]
        c = chunk.counts.tocoo()
        blocks.append(
            sp.csr_matrix((c.data, (c.row, cols[c.col])), shape=(chunk.n_docs, len(vocab)))
        )
    return sp.vstack(blocks, format="csr")


def _same(X: sp.spmatrix, Y: sp.spmatrix) -> bool:
    return X.shape == Y.shape and (sp.csr_matrix(X) != sp.csr_matrix(Y)).nnz == 0


# ----------------------------------------------------------------------------- topics


@pytest.mark.parametrize("planted", [False, True])
@pytest.mark.parametrize("beta", [0.01, 0.05, 1.0])
def test_topic_columns_sum_to_one(planted: bool, beta: float) -> None:
    A = dirichlet_topics(500, 20, beta, planted_anchors=planted, seed=0)
    assert A.shape == (500, 20)
    assert A.dtype == np.float64
    assert np.all(A >= 0)
    np.testing.assert_allclose(A.sum(axis=0), 1.0, rtol=0, atol=1e-12)


def test_planted_anchors() -> None:
    V, K = 300, 12
    A, anchors = dirichlet_topics_with_anchors(V, K, 0.05, seed=7)
    assert anchors.shape == (K,)
    assert len(np.unique(anchors)) == K
    assert np.all((anchors >= 0) & (anchors < V))
    rows = A[anchors]  # K×K: row k is the anchor of topic k
    assert np.array_equal(np.count_nonzero(rows, axis=1), np.ones(K, dtype=int))
    assert np.array_equal(np.argmax(rows, axis=1), np.arange(K))
    np.testing.assert_array_equal(A[anchors, np.arange(K)], A.max(axis=0))
    # the same draw as the plain API, and as the topics without anchors
    np.testing.assert_array_equal(A, dirichlet_topics(V, K, 0.05, planted_anchors=True, seed=7))
    plain = dirichlet_topics(V, K, 0.05, seed=7)
    others = np.setdiff1d(np.arange(V), anchors)
    scale = A[others].sum(axis=0) / plain[others].sum(axis=0)  # one factor per column
    np.testing.assert_allclose(A[others], plain[others] * scale, rtol=1e-10, atol=0)


def test_topics_deterministic_and_validated() -> None:
    a = dirichlet_topics(100, 5, seed=3)
    np.testing.assert_array_equal(a, dirichlet_topics(100, 5, seed=3))
    assert not np.array_equal(a, dirichlet_topics(100, 5, seed=4))
    with pytest.raises(ValueError, match="n_words >= n_topics"):
        dirichlet_topics(3, 5, planted_anchors=True, seed=0)
    with pytest.raises(ValueError, match="beta"):
        dirichlet_topics(10, 2, beta=0.0)


def test_default_vocab() -> None:
    v = default_vocab(30)
    assert v[:3] == ["xaaaa", "xaaab", "xaaac"] and v[-1] == "xaabd"
    assert default_vocab(26**4)[-1] == "xzzzz" and default_vocab(26**4 + 1)[-1] == "xbaaaa"
    big = default_vocab(123_457)
    assert big == sorted(big) and Tokenizer()(" ".join(big)) == big
    assert v == sorted(v)


# ----------------------------------------------------------------------------- documents


def test_document_lengths() -> None:
    A = dirichlet_topics(200, 8, seed=1)
    H = sample_documents(A, 3000, doc_length=37, seed=2)
    assert H.shape == (3000, 200)
    assert np.issubdtype(H.dtype, np.integer)
    assert H.has_canonical_format
    assert np.all(np.asarray(H.sum(axis=1)).ravel() == 37)
    Hp = sample_documents(A, 20_000, doc_length=3, poisson=True, seed=2)
    n = np.asarray(Hp.sum(axis=1)).ravel()
    assert n.min() >= 1
    # max(1, Poisson(3)) has mean 3 + P(0) = 3 + e^-3
    assert abs(n.mean() - (3 + np.exp(-3))) < 5 * np.sqrt(3 / n.size)
    assert sample_documents(A, 0, seed=1).shape == (0, 200)


def test_word_frequencies_match_model() -> None:
    V, K, D, n = 100, 5, 20_000, 50
    A = dirichlet_topics(V, K, 0.1, seed=11)
    alpha = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    H = sample_documents(A, D, alpha=alpha, doc_length=n, seed=12)
    expected = A @ (alpha / alpha.sum())  # A E[θ]
    freq = H.toarray() / n  # per-document word frequencies, D×V
    mean = freq.mean(axis=0)
    se = freq.std(axis=0) / np.sqrt(D) + 1e-12
    z = np.abs(mean - expected) / se
    assert z.max() < 5.0, z.max()
    np.testing.assert_allclose(mean.sum(), 1.0)


def test_documents_deterministic() -> None:
    A = dirichlet_topics(500, 10, seed=0)
    H1 = sample_documents(A, 5000, seed=42)
    assert _same(H1, sample_documents(A, 5000, seed=42))
    assert not _same(H1, sample_documents(A, 5000, seed=43))
    seq = np.random.SeedSequence(42)
    assert _same(H1, sample_documents(A, 5000, seed=seq))
    for block in (1, 333, 5000, 10**6):
        blocks = list(iter_documents(A, 5000, seed=42, block_docs=block))
        assert all(b.shape[0] == block for b in blocks[:-1])
        assert 0 < blocks[-1].shape[0] <= block
        assert _same(sp.vstack(blocks, format="csr"), H1)


def test_documents_large_block_is_fast_enough() -> None:
    A = dirichlet_topics(5000, 50, seed=0)
    H = sample_documents(A, 100_000, doc_length=70, seed=1)  # 7M tokens in ~1-2 s
    assert H.shape == (100_000, 5000)
    assert int(H.sum()) == 7_000_000


# ----------------------------------------------------------------------------- writing


@pytest.fixture(scope="module")
def small_model() -> np.ndarray:
    return dirichlet_topics(400, 6, 0.1, seed=5)


@pytest.mark.parametrize(
    "fmt,name,read_format",
    [
        ("hdf5", "corpus.h5", "auto"),
        ("uci", "docword.synth.txt", "auto"),
        ("uci", "docword.synth.txt.gz", "auto"),
        ("text", "corpus.txt", "text"),
        ("text", "corpus.txt.gz", "text"),
    ],
)
def test_write_corpus_round_trip(
    tmp_path: Path, small_model: np.ndarray, fmt: str, name: str, read_format: str
) -> None:
    D = 2500
    kwargs = dict(alpha=0.2, doc_length=40, poisson=True, seed=9)
    path = tmp_path / name
    out = write_corpus(path, small_model, D, format=fmt, block_docs=700, **kwargs)
    H = sample_documents(small_model, D, **kwargs)
    assert out["format"] == fmt and out["n_docs"] == D
    assert out["n_tokens"] == int(H.sum()) and out["nnz"] == H.nnz
    assert out["vocab_size"] == 400
    assert all(os.path.isfile(p) for p in out["paths"])
    assert out["path"] == str(path)
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in out["paths"])
    back = _read_back(path, default_vocab(400), format=read_format)
    assert _same(back, H)


def test_write_corpus_independent_of_block_docs(tmp_path: Path, small_model: np.ndarray) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for fmt, name in (("text", "c.txt"), ("uci", "docword.c.txt")):
        write_corpus(tmp_path / "a" / name, small_model, 900, format=fmt, seed=3, block_docs=50)
        write_corpus(tmp_path / "b" / name, small_model, 900, format=fmt, seed=3, block_docs=10**5)
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_text_tokens_are_shuffled_and_uci_header(tmp_path: Path, small_model: np.ndarray) -> None:
    write_corpus(tmp_path / "c.txt", small_model, 200, format="text", doc_length=30, seed=1)
    lines = (tmp_path / "c.txt").read_text().splitlines()
    assert len(lines) == 200
    assert all(len(line.split()) == 30 for line in lines)
    assert any(line.split() != sorted(line.split()) for line in lines)
    out = write_corpus(tmp_path / "docword.x.txt", small_model, 200, format="uci", seed=1)
    head = (tmp_path / "docword.x.txt").read_text().splitlines()
    assert head[:3] == ["200", "400", str(out["nnz"])]
    assert len(head) == 3 + out["nnz"]
    assert (tmp_path / "vocab.x.txt").read_text().splitlines() == default_vocab(400)


def test_custom_vocab(tmp_path: Path) -> None:
    A = dirichlet_topics(4, 2, 1.0, seed=0)
    vocab = ["été", "naïve", "zebra", "apple"]
    write_corpus(tmp_path / "c.txt", A, 300, format="text", vocab=vocab, doc_length=5, seed=2)
    back = _read_back(tmp_path / "c.txt", vocab, format="text")
    assert _same(back, sample_documents(A, 300, doc_length=5, seed=2))
    write_corpus(tmp_path / "c.h5", A, 300, vocab=vocab, doc_length=5, seed=2)
    assert _same(_read_back(tmp_path / "c.h5", vocab), back)
    with pytest.raises(ValueError, match="tokenizer"):
        write_corpus(tmp_path / "d.txt", A, 10, format="text", vocab=["a", "bb", "cc", "dd"])
    with pytest.raises(ValueError, match="tokenizer"):
        write_corpus(tmp_path / "d.txt", A, 10, format="text", vocab=["Aa", "bb", "cc", "dd"])
    with pytest.raises(ValueError, match="repeated"):
        write_corpus(tmp_path / "d.h5", A, 10, vocab=["aa", "bb", "cc", "aa"])
    with pytest.raises(ValueError, match="docword"):
        write_corpus(tmp_path / "d.txt", A, 10, format="uci")
    with pytest.raises(ValueError, match="format"):
        write_corpus(tmp_path / "d.txt", A, 10, format="jsonl")
    assert not any(p.name.startswith("d") or p.name.startswith(".") for p in tmp_path.iterdir())


# ----------------------------------------------------------------------------- population Q


def test_population_cooccurrence_closed_form() -> None:
    A = dirichlet_topics(60, 7, 0.1, seed=1)
    Q = population_cooccurrence(A, 0.1)
    assert Q.shape == (60, 60)
    np.testing.assert_allclose(Q.sum(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(Q, Q.T, rtol=0, atol=1e-16)
    R = dirichlet_second_moment(0.1, 7)
    np.testing.assert_allclose(R.sum(), 1.0)
    np.testing.assert_allclose(Q, A @ R @ A.T, rtol=1e-12, atol=1e-18)
    alpha = np.linspace(0.05, 0.5, 7)
    np.testing.assert_allclose(
        population_cooccurrence(A, alpha), A @ dirichlet_second_moment(alpha, 7) @ A.T,
        rtol=1e-12, atol=1e-18,
    )
    # row sums: the expected word frequencies A E[θ]
    np.testing.assert_allclose(Q.sum(axis=1), A.mean(axis=1), rtol=1e-12)


@pytest.mark.parametrize("poisson", [False, True])
def test_population_cooccurrence_matches_empirical(poisson: bool) -> None:
    V, K, alpha = 30, 4, 0.3
    A = dirichlet_topics(V, K, 0.2, seed=21)
    H = sample_documents(A, 200_000, alpha=alpha, doc_length=10, poisson=poisson, seed=22)
    S, used = document_cooccurrence(H)  # per token: each document's Q_d sums to n_d
    n = np.asarray(H.sum(axis=1)).ravel()[used]
    np.testing.assert_allclose(S.sum(), n.sum(), rtol=1e-9)
    Q_emp = S.toarray() / n.sum()
    Q_pop = population_cooccurrence(A, alpha)  # whatever the weights, lengths apart from θ
    rel = np.linalg.norm(Q_emp - Q_pop) / np.linalg.norm(Q_pop)
    assert rel < 0.02, rel
    assert np.abs(Q_emp - Q_pop).max() < 0.03 * Q_pop.max()


def test_per_token_weights_estimate_q_better_from_documents_of_mixed_lengths() -> None:
    """Ground truth for the stores' weights: from many short documents and a few long ones
    (lengths independent of θ), both weightings estimate the population Q, but weighing
    each document as its tokens (w_d = 1/(n_d − 1), the default) is closer than weighing
    documents alike (w_d = 1/(n_d(n_d − 1))), whose few-token documents are noisy."""
    V, K, alpha = 60, 5, 0.2
    A = dirichlet_topics(V, K, 0.1, seed=31)
    short = sample_documents(A, 30_000, alpha=alpha, doc_length=3, seed=32)
    long = sample_documents(A, 1_000, alpha=alpha, doc_length=150, seed=33)
    H = sp.vstack([short, long]).tocsr()
    Q_pop = population_cooccurrence(A, alpha)
    err = {}
    for weight in ("tokens", "documents"):
        S, _ = document_cooccurrence(H, weight=weight)
        Q = S.toarray() / S.sum()
        err[weight] = np.linalg.norm(Q - Q_pop) / np.linalg.norm(Q_pop)
    assert err["tokens"] < 0.06, err
    assert err["tokens"] < 0.75 * err["documents"], err  # 0.032 against 0.048


# ----------------------------------------------------------------------------- logistic normal


def test_logistic_normal_theta() -> None:
    K, n = 12, 200_000
    for rho in (0.05, 0.1, 0.5):
        law = LogisticNormal(rho=rho, group_size=5, sigma=1.0)
        rng = np.random.default_rng(0)
        eta = law.sample_eta(n, K, rng)
        C = np.corrcoef(eta.T)
        g = law.groups(K)
        np.testing.assert_array_equal(g, [0] * 5 + [1] * 5 + [2] * 2)
        same = (g[:, None] == g[None, :]) & ~np.eye(K, dtype=bool)
        other = g[:, None] != g[None, :]
        # each correlation has standard error ~ 1/sqrt(n) = 0.0022
        assert np.abs(C[same] - rho).max() < 0.012, (rho, C[same])
        assert np.abs(C[other]).max() < 0.012
        np.testing.assert_allclose(eta.var(axis=0), 1.0, atol=0.02)
        cov = law.covariance(K)
        np.testing.assert_allclose(np.diag(cov), 1.0)
        np.testing.assert_allclose(cov[same], rho)
        np.testing.assert_allclose(cov[other], 0.0)
    theta = LogisticNormal(rho=0.1, group_size=4, sigma=2.0).sample(50_000, 8, rng)
    assert theta.shape == (50_000, 8) and np.all(theta > 0)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    # μ = 0 and equal groups: E[θ] is uniform
    assert np.abs(theta.mean(axis=0) - 1 / 8).max() < 5 * theta.std(axis=0).max() / np.sqrt(5e4)


def test_logistic_normal_documents(tmp_path: Path) -> None:
    A = dirichlet_topics(200, 10, 0.1, seed=3)
    law = LogisticNormal(rho=0.1, group_size=5)
    H = sample_documents(A, 3000, doc_length=30, seed=4, theta=law)
    assert H.shape == (3000, 200) and np.all(np.asarray(H.sum(axis=1)).ravel() == 30)
    ln = sample_documents(A, 3000, doc_length=30, seed=4, theta="ln:rho=0.1,group_size=5")
    assert _same(H, ln)
    assert not _same(H, sample_documents(A, 3000, doc_length=30, seed=4))  # Dirichlet
    blocks = list(iter_documents(A, 3000, doc_length=30, seed=4, theta=law, block_docs=999))
    assert _same(sp.vstack(blocks, format="csr"), H)
    write_corpus(tmp_path / "c.h5", A, 3000, doc_length=30, seed=4, theta=law)
    assert _same(_read_back(tmp_path / "c.h5", default_vocab(200)), H)


def test_parse_theta() -> None:
    assert parse_theta("dirichlet") == "dirichlet"
    assert parse_theta("logistic-normal") == LogisticNormal()
    assert parse_theta("ln:rho=0.05, group_size=5,sigma=0.5") == LogisticNormal(0.05, 5, 0.5)
    law = LogisticNormal(rho=0.1)
    assert parse_theta(law) is law
    assert synth.theta_dict(law) == {"kind": "logistic_normal", "rho": 0.1, "group_size": 10,
                                     "sigma": 1.0}
    assert synth.theta_dict("dirichlet", 0.3) == {"kind": "dirichlet", "alpha": 0.3}
    for bad in ("gamma", "ln:rho", "ln:tau=1", "ln:rho=x", "dirichlet:alpha=1"):
        with pytest.raises(ValueError):
            parse_theta(bad)
    for kwargs in ({"rho": 1.0}, {"rho": -0.1}, {"group_size": 0}, {"sigma": 0.0}):
        with pytest.raises(ValueError):
            LogisticNormal(**kwargs)  # type: ignore[arg-type]


def test_second_moment_monte_carlo() -> None:
    K = 10
    # the Dirichlet: exact by default; the Monte Carlo estimator converges to the closed form
    R, exact = second_moment("dirichlet", K, alpha=0.2)
    assert exact
    np.testing.assert_array_equal(R, dirichlet_second_moment(0.2, K))
    err = []
    for n in (10_000, 1_000_000):
        M, exact = second_moment("dirichlet", K, alpha=0.2, n_samples=n, seed=1,
                                 monte_carlo=True)
        assert not exact
        err.append(np.abs(M - R).max())
    assert err[1] < 0.02 * R.max() and err[1] < err[0]
    # the logistic normal: against an independent empirical E[θθᵀ] of many draws
    law = LogisticNormal(rho=0.1, group_size=4, sigma=1.5)
    M, exact = second_moment(law, K, n_samples=100_000, seed=2)
    assert not exact and M.shape == (K, K)
    np.testing.assert_allclose(M.sum(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(M, M.T, rtol=0, atol=0)
    T = law.sample(400_000, K, np.random.default_rng(3))
    emp = T.T @ T / T.shape[0]
    assert np.abs(M - emp).max() < 0.02 * emp.max(), np.abs(M - emp).max() / emp.max()
    # correlation within groups: E[θ_i θ_j] larger in a group than across groups
    assert M[0, 1] > M[0, 4]
    with pytest.raises(ValueError, match="closed-form"):
        second_moment(law, K, monte_carlo=False)
    np.testing.assert_array_equal(M, second_moment(law, K, n_samples=100_000, seed=2)[0])


def test_logistic_normal_matching_dirichlet() -> None:
    K, alpha = 20, 0.1
    D = dirichlet_second_moment(alpha, K)
    law = LogisticNormal.matching_dirichlet(alpha, K, rho=0.1, group_size=5)
    assert (law.rho, law.group_size) == (0.1, 5)
    # uncorrelated at that σ, E[θθᵀ] is the Dirichlet's, diagonal and off-diagonal
    # (independent draws: seed 1, not the search's 0)
    M, _ = second_moment(LogisticNormal(group_size=5, sigma=law.sigma), K, n_samples=20_000,
                         seed=1)
    np.testing.assert_allclose(M, D, rtol=0.03)
    # the default σ = 1 is much flatter than Dirichlet(0.1) (E[Σθ²] 0.11 against 0.37)
    theta = LogisticNormal(group_size=5).sample(20_000, K, np.random.default_rng(1))
    assert np.einsum("ij,ij->", theta, theta) / 20_000 < 0.5 * np.trace(D)
    # a sparser Dirichlet needs a larger σ; the search is deterministic given its seed
    assert LogisticNormal.matching_dirichlet(0.03, K).sigma > law.sigma
    assert LogisticNormal.matching_dirichlet(alpha, K, rho=0.1, group_size=5) == law
    with pytest.raises(ValueError, match="n_topics"):
        LogisticNormal.matching_dirichlet(alpha, 1)


@pytest.mark.parametrize("theta", ["dirichlet", LogisticNormal(rho=0.1, group_size=3)])
def test_population_store(tmp_path: Path, theta: object) -> None:
    V, K = 70, 6
    A = dirichlet_topics(V, K, 0.1, seed=8)
    out = population_store(tmp_path / "pop.zarr", A, theta, alpha=0.3,  # type: ignore[arg-type]
                           n_docs=1000, n_samples=20_000, seed=4, chunk_size=32)
    store = st.CooccurrenceStore.open(tmp_path / "pop.zarr")
    Q = np.asarray(store.Q.compute())
    np.testing.assert_allclose(Q.sum(), 1.0, rtol=1e-12)
    M, exact = second_moment(theta, K, alpha=0.3, n_samples=20_000, seed=4)  # type: ignore[arg-type]
    np.testing.assert_allclose(Q, A @ M @ A.T, rtol=1e-12, atol=1e-18)
    if exact:
        np.testing.assert_allclose(Q, population_cooccurrence(A, 0.3), rtol=1e-12, atol=1e-18)
    assert out["monte_carlo"] is (not exact)
    assert out["second_moment"] == ("exact" if exact else "monte_carlo")
    assert out["n_samples"] == (0 if exact else 20_000)
    assert out["V"] == V and out["K"] == K and store.n_docs == 1000
    assert store.vocab == default_vocab(V)


# ----------------------------------------------------------------------------- semi-synthetic


def test_plant_anchors_same_rule() -> None:
    V, K = 300, 12
    A_ref, anchors_ref = dirichlet_topics_with_anchors(V, K, 0.05, seed=7)
    rng = np.random.default_rng(7)
    A0 = dirichlet_topics(V, K, 0.05, seed=rng)  # the same draws, in the same order
    A1, anchors = plant_anchors(A0, rng)
    np.testing.assert_array_equal(anchors, anchors_ref)
    np.testing.assert_allclose(A1, A_ref, rtol=1e-12, atol=0)
    np.testing.assert_allclose(A1.sum(axis=0), 1.0, rtol=0, atol=1e-12)
    assert np.array_equal(np.argmax(A1[anchors], axis=1), np.arange(K))
    assert np.array_equal(np.count_nonzero(A1[anchors], axis=1), np.ones(K, dtype=int))
    assert not np.shares_memory(A1, A0)
    with pytest.raises(ValueError, match="n_words >= n_topics"):
        plant_anchors(np.full((3, 5), 1 / 3))


@pytest.fixture(scope="module")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    from streamtopic.model import AnchorTopicModel

    d = tmp_path_factory.mktemp("tiny")
    A, _ = dirichlet_topics_with_anchors(80, 4, 0.1, seed=2)
    vocab = [f"term{w}" for w in default_vocab(80)]  # letters only: text reads it back
    st.CooccurrenceStore.from_array(population_cooccurrence(A, 0.1), vocab, d / "pop.zarr",
                                    n_docs=10**6)
    model = AnchorTopicModel(4, method="plain", anchor_method="exact", seed=0).fit(d / "pop.zarr")
    model.save(d / "model.zarr")
    return d / "model.zarr", A


def test_topics_from_model(tiny_model_path: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    from streamtopic.metrics import matched_l1
    from streamtopic.model import AnchorTopicModel

    path, truth = tiny_model_path
    A, vocab = topics_from_model(path)
    model = AnchorTopicModel.load(path)
    assert A.shape == (80, 4) and A.dtype == np.float64
    assert vocab == model.vocab_ == [f"term{w}" for w in default_vocab(80)]
    np.testing.assert_allclose(A.sum(axis=0), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(A, model.components_.T, rtol=1e-9, atol=1e-12)
    assert matched_l1(truth, A).mean < 0.05  # exact anchors on a population Q
    # and as the source of a corpus: the model's vocabulary, its topics, planted anchors
    out = synthesize(tmp_path / "c.txt", model=path, n_docs=300, planted_anchors=True, seed=1,
                     parallel=False)
    saved = load_topics(out["topics_path"])
    assert saved["vocab"] == vocab and out["topics_source"] == "model"
    np.testing.assert_array_equal(saved["anchors"], out["anchors"])
    rng = np.random.default_rng(synth._child(np.random.SeedSequence(1), synth._TOPICS_KEY))
    A_planted, anchors = plant_anchors(A, rng)
    np.testing.assert_array_equal(saved["A"], A_planted)
    np.testing.assert_array_equal(saved["anchors"], anchors)
    back = _read_back(tmp_path / "c.txt", vocab, format="text")
    assert _same(back, sample_documents(A_planted, 300, seed=1))


# ----------------------------------------------------------------------------- synthesize


@pytest.fixture
def small_units(monkeypatch: pytest.MonkeyPatch) -> None:
    """Units of ~100 documents, so a small corpus spans many parallel tasks."""
    monkeypatch.setattr(synth, "_UNIT_TOKENS", 4096)


@pytest.mark.parametrize(
    "name,fmt", [("c.h5", "hdf5"), ("docword.c.txt.gz", "uci"), ("c.txt.gz", "text"),
                 ("c.txt", "text"), ("c.jsonl", "jsonl")]
)
def test_synthesize_parallel_equals_serial(
    tmp_path: Path, small_units: None, name: str, fmt: str
) -> None:
    import dask

    A = dirichlet_topics(150, 8, 0.1, seed=4)
    law = LogisticNormal(rho=0.1, group_size=4)
    kwargs: dict[str, object] = dict(doc_length=40, poisson=True, seed=11, theta=law)
    (tmp_path / "par").mkdir()
    (tmp_path / "ser").mkdir()
    ser_name = name if fmt != "jsonl" else "c.txt"  # write_corpus has no jsonl: compare text
    ser = write_corpus(tmp_path / "ser" / ser_name, A, 1000,
                       format=fmt if fmt != "jsonl" else "text",
                       block_docs=300, **kwargs)  # type: ignore[arg-type]
    seen: list[int] = []
    with dask.config.set(scheduler="threads"):
        par = synthesize(tmp_path / "par" / name, A=A, n_docs=1000, block_docs=300,
                         parallel=True, max_in_flight=3, progress=lambda d, n: seen.append(d),
                         **kwargs)  # type: ignore[arg-type]
    assert par["format"] == fmt and par["parallel"]
    assert len(seen) >= 9 and seen[-1] == 1000 and seen == sorted(seen)  # ~100 docs per unit
    assert (par["n_tokens"], par["nnz"]) == (ser["n_tokens"], ser["nnz"])
    H = sample_documents(A, 1000, **kwargs)  # type: ignore[arg-type]
    if fmt == "jsonl":
        import json

        lines = (tmp_path / "par" / name).read_text().splitlines()
        serial = (tmp_path / "ser" / "c.txt").read_text().splitlines()
        assert [json.loads(x)["text"] for x in lines] == serial
        assert _same(_read_back(tmp_path / "par" / name, default_vocab(150), format="jsonl"), H)
    elif fmt == "hdf5":
        assert _same(_read_back(tmp_path / "par" / name, default_vocab(150)), H)
    else:
        assert (tmp_path / "par" / name).read_bytes() == (tmp_path / "ser" / name).read_bytes()
    if fmt == "uci":
        vocab_files = [tmp_path / side / "vocab.c.txt" for side in ("par", "ser")]
        assert vocab_files[0].read_bytes() == vocab_files[1].read_bytes()
    # the true topics reload exactly
    saved = load_topics(par["topics_path"])
    assert par["topics_path"] == str(tmp_path / "par" / name) + ".topics.npz"
    np.testing.assert_array_equal(saved["A"], A / A.sum(axis=0))  # the A generated from
    np.testing.assert_allclose(saved["A"], A, rtol=1e-14, atol=0)
    assert saved["vocab"] == default_vocab(150) and saved["anchors"] is None
    assert saved["meta"]["theta"] == law.to_dict() and saved["meta"]["doc_length"] == 40
    assert sorted(os.listdir(tmp_path / "par")) == sorted(os.path.basename(p) for p in par["paths"])


def test_synthesize_distributed_client(tmp_path: Path, small_units: None) -> None:
    from distributed import Client, LocalCluster

    A = dirichlet_topics(100, 5, 0.1, seed=1)
    ser = write_corpus(tmp_path / "s.txt.gz", A, 600, format="text", doc_length=30, seed=2)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster):
        synthesize(tmp_path / "p.txt.gz", A=A, n_docs=600, doc_length=30, seed=2,
                   max_in_flight=2)
    assert (tmp_path / "p.txt.gz").read_bytes() == (tmp_path / "s.txt.gz").read_bytes()
    assert ser["n_docs"] == 600


def test_synthesize_random_topics_and_population(tmp_path: Path) -> None:
    law = LogisticNormal(rho=0.05, group_size=3)
    out = synthesize(tmp_path / "a.h5", n_words=120, n_topics=6, beta=0.1, planted_anchors=True,
                     n_docs=500, theta=law, seed=3, population=True, population_samples=5000,
                     population_docs=500)
    saved = load_topics(out["topics_path"])
    A, anchors = saved["A"], saved["anchors"]
    assert A.shape == (120, 6) and out["topics_source"] == "dirichlet"
    np.testing.assert_array_equal(anchors, out["anchors"])
    assert np.array_equal(np.count_nonzero(A[anchors], axis=1), np.ones(6, dtype=int))
    assert _same(_read_back(tmp_path / "a.h5", default_vocab(120)),
                 sample_documents(A, 500, seed=3, theta=law))
    pop = out["population"]
    assert pop["monte_carlo"] and pop["n_samples"] == 5000
    assert pop["path"] == str(tmp_path / "a.h5") + ".population.zarr"
    Q = np.asarray(st.CooccurrenceStore.open(pop["path"]).Q.compute())
    np.testing.assert_allclose(Q.sum(), 1.0, rtol=1e-12)
    # a rerun with the same seed gives the same topics, and replaces the population store
    again = synthesize(tmp_path / "b.h5", n_words=120, n_topics=6, beta=0.1,
                       planted_anchors=True, n_docs=500, theta=law, seed=3, parallel=False)
    np.testing.assert_array_equal(load_topics(again["topics_path"])["A"], A)
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()
    synthesize(tmp_path / "a.h5", n_words=120, n_topics=6, n_docs=10, seed=3, population=True,
               population_samples=100)
    with pytest.raises(ValueError, match="exactly one source"):
        synthesize(tmp_path / "x.h5", A=A, n_words=120, n_topics=6, n_docs=10)
    with pytest.raises(ValueError, match="exactly one source"):
        synthesize(tmp_path / "x.h5", n_docs=10)
    with pytest.raises(ValueError, match="format"):
        synthesize(tmp_path / "x.h5", A=A, n_docs=10, format="csv")
    with pytest.raises(ValueError, match="docword"):
        synthesize(tmp_path / "x.txt", A=A, n_docs=10, format="uci")
    assert not any(p.name.startswith("x") for p in tmp_path.iterdir())


def test_synthesize_takes_a_generator_as_seed(tmp_path: Path) -> None:
    """A Generator seeds through a few of its draws, recorded as a list of entropy words."""
    out = synthesize(tmp_path / "g.txt", n_words=30, n_topics=3, n_docs=20, parallel=False,
                     seed=np.random.default_rng(0))
    assert isinstance(out["seed_entropy"], list) and len(out["seed_entropy"]) == 4
    meta = load_topics(out["topics_path"])["meta"]
    assert meta["seed_entropy"] == [str(e) for e in out["seed_entropy"]]
    synthesize(tmp_path / "h.txt", n_words=30, n_topics=3, n_docs=20, parallel=False,
               seed=np.random.default_rng(0))
    assert (tmp_path / "g.txt").read_bytes() == (tmp_path / "h.txt").read_bytes()


def test_infer_format() -> None:
    assert synth.infer_format("a/b.h5") == "hdf5"
    assert synth.infer_format("docword.kos.txt.gz") == "uci"
    assert synth.infer_format("x.jsonl.gz") == "jsonl"
    assert synth.infer_format("x.txt") == "text"
