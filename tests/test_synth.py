"""Tests of the semi-synthetic corpus generator (streamtopic.synth)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from streamtopic import read_corpus
from streamtopic.cooccurrence import document_cooccurrence
from streamtopic.synth import (
    default_vocab,
    dirichlet_second_moment,
    dirichlet_topics,
    dirichlet_topics_with_anchors,
    iter_documents,
    population_cooccurrence,
    sample_documents,
    write_corpus,
)


def _read_back(path: str | os.PathLike[str], terms: Sequence[str], **kwargs: object) -> sp.csr_matrix:
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
    v = default_vocab(12)
    assert v[:3] == ["w00000", "w00001", "w00002"] and v[-1] == "w00011"
    assert default_vocab(123_457)[-1] == "w123456"
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
    S, used = document_cooccurrence(H)
    Q_emp = S.toarray() / used.sum()
    Q_pop = population_cooccurrence(A, alpha)
    np.testing.assert_allclose(Q_emp.sum(), 1.0, rtol=1e-9)
    rel = np.linalg.norm(Q_emp - Q_pop) / np.linalg.norm(Q_pop)
    assert rel < 0.02, rel
    assert np.abs(Q_emp - Q_pop).max() < 0.03 * Q_pop.max()
