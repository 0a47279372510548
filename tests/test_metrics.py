"""Metrics: every one against a small case worked out by hand."""

from __future__ import annotations

import math

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

import streamtopic as st
from streamtopic.metrics import (
    approximation_error,
    codocument_frequency,
    coherence,
    dissimilarity,
    dominancy,
    matched_l1,
    npmi,
    recovery_error,
    sparsity,
    specificity,
    top_word_ids,
    unique_words,
)
from streamtopic.synth import default_vocab

# A 4-document corpus over 6 words; "fig" occurs nowhere and "zebra" is outside the vocabulary.
VOCAB = ["apple", "banana", "cherry", "date", "elder", "fig"]
DOCS = [
    "apple banana cherry",
    "apple banana",
    "apple date zebra",
    "banana cherry cherry elder",
]
# counts by hand (docs × words)
X = sp.csr_matrix(
    np.array(
        [
            [1, 1, 1, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [1, 0, 0, 1, 0, 0],
            [0, 1, 2, 0, 1, 0],
        ]
    )
)
# document frequencies: apple 3, banana 3, cherry 2, date 1, elder 1, fig 0
# both: apple-banana 2, apple-cherry 1, apple-date 1, banana-cherry 2, banana-elder 1,
#       cherry-elder 1, every other pair 0
TOPICS = [[0, 1, 2], [4, 3, 0], [2, 4]]
EPS = 0.01


def _expected(eps: float = EPS) -> np.ndarray:
    log = math.log
    return np.array(
        [
            # banana|apple, cherry|apple, cherry|banana
            log((2 + eps) / 3) + log((1 + eps) / 3) + log((2 + eps) / 3),
            # date|elder, apple|elder, apple|date
            log((0 + eps) / 1) + log((0 + eps) / 1) + log((1 + eps) / 1),
            # elder|cherry
            log((1 + eps) / 2),
        ]
    )


@pytest.fixture
def text_corpus(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text("\n".join(DOCS) + "\n")
    return path


def test_codocument_frequency_by_hand():
    M = codocument_frequency([2, 0, 4], X)
    assert M.tolist() == [[2, 1, 1], [1, 3, 0], [1, 0, 1]]


def _npmi_by_hand() -> np.ndarray:
    """NPMI of TOPICS on X (D = 4), pair by pair from the counts above."""
    log = math.log

    def pair(d_ij: int, d_i: int, d_j: int) -> float:
        if d_ij == 0:
            return -1.0
        p = d_ij / 4
        return log(p / ((d_i / 4) * (d_j / 4))) / -log(p)

    return np.array([
        # apple-banana 2 (3, 3), apple-cherry 1 (3, 2), banana-cherry 2 (3, 2)
        (pair(2, 3, 3) + pair(1, 3, 2) + pair(2, 3, 2)) / 3,
        # elder-date 0, elder-apple 0, date-apple 1 (1, 3)
        (-1.0 - 1.0 + pair(1, 1, 3)) / 3,
        # cherry-elder 1 (2, 1)
        pair(1, 2, 1),
    ])


def test_npmi_by_hand_matrix_and_text(text_corpus):
    expected = _npmi_by_hand()
    np.testing.assert_allclose(npmi(TOPICS, X), expected, rtol=1e-12)
    np.testing.assert_allclose(npmi(TOPICS, str(text_corpus), vocab=VOCAB), expected, rtol=1e-12)
    # streamed over many partitions, the documents are counted once each
    corpus = st.read_corpus(str(text_corpus), blocksize=8)
    assert corpus.npartitions >= 3
    np.testing.assert_allclose(npmi(TOPICS, corpus, vocab=VOCAB), expected, rtol=1e-12)
    # an absent word (fig) pairs at -1; a pair in every document scores 1
    assert npmi([[0, 5]], X)[0] == -1.0
    assert npmi([[0, 1]], sp.csr_matrix(np.ones((3, 2))))[0] == 1.0
    assert npmi([[0]], X)[0] == 0.0


def test_npmi_random_corpus_against_direct_computation(tmp_path):
    rng = np.random.default_rng(1)
    V, D, N = 25, 150, 6
    H = rng.poisson(0.4, size=(D, V)) * (rng.random((D, 1)) < 0.9)  # some empty documents
    vocab = default_vocab(V)
    path = tmp_path / "r.txt"
    path.write_text("".join(" ".join(w for w, c in zip(vocab, row, strict=True)
                                     for _ in range(c)) + "\n" for row in H))
    top = np.array([rng.permutation(V)[:N] for _ in range(4)])
    B = H > 0
    direct = []
    for t in top:
        vals = []
        for a in range(N):
            for b in range(a + 1, N):
                i, j = t[a], t[b]
                both = np.mean(B[:, i] & B[:, j])
                if both == 0:
                    vals.append(-1.0)
                else:
                    pmi = math.log(both / (B[:, i].mean() * B[:, j].mean()))
                    vals.append(pmi / -math.log(both))
        direct.append(np.mean(vals))
    np.testing.assert_allclose(npmi(top, sp.csr_matrix(H)), direct, rtol=1e-12)
    got = npmi(top, st.read_corpus(str(path), blocksize=500), vocab=vocab)
    np.testing.assert_allclose(got, direct, rtol=1e-12)


def test_coherence_sparse_matrix():
    np.testing.assert_allclose(coherence(TOPICS, X, EPS), _expected(), rtol=1e-12)
    # a 2-D array of equal-length topics is read the same way
    got = coherence(np.array([[0, 1, 2], [4, 3, 0]]), X, 1.0)
    np.testing.assert_allclose(got, _expected(1.0)[:2], rtol=1e-12)


def test_coherence_text_file_matches_matrix(text_corpus):
    got = coherence(TOPICS, str(text_corpus), EPS, vocab=VOCAB)
    np.testing.assert_allclose(got, coherence(TOPICS, X, EPS), rtol=1e-12)
    np.testing.assert_allclose(got, _expected(), rtol=1e-12)


def test_coherence_streams_many_partitions(text_corpus, tmp_path):
    # a tiny blocksize gives about one line per partition: the bag reduction must add them up
    corpus = st.read_corpus(str(text_corpus), blocksize=8)
    assert corpus.npartitions >= 3
    np.testing.assert_allclose(coherence(TOPICS, corpus, EPS, vocab=VOCAB), _expected(), rtol=1e-12)
    # and over several files
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("\n".join(DOCS[:1]) + "\n")
    b.write_text("\n".join(DOCS[1:]) + "\n")
    got = coherence(TOPICS, [str(a), str(b)], EPS, vocab=VOCAB)
    np.testing.assert_allclose(got, _expected(), rtol=1e-12)


def test_coherence_random_corpus_against_dense_formula(tmp_path):
    rng = np.random.default_rng(0)
    V, D = 30, 200
    H = rng.poisson(0.3, size=(D, V))
    vocab = default_vocab(V)  # letters only: every word is a token
    lines = [" ".join(np.repeat(vocab, H[d]).tolist()) for d in range(D)]
    path = tmp_path / "rand.txt"
    path.write_text("\n".join(lines) + "\n")
    corpus = st.read_corpus(str(path), blocksize=256)
    assert corpus.npartitions >= 5
    top = [rng.permutation(V)[:6] for _ in range(4)]
    # the definition, term by term, on the dense matrix
    present = H > 0
    expected = []
    for t in top:
        s = 0.0
        for i in range(len(t)):
            for j in range(i):
                both = np.sum(present[:, t[i]] & present[:, t[j]])
                s += math.log((both + 0.5) / max(present[:, t[j]].sum(), 1))
        expected.append(s)
    np.testing.assert_allclose(coherence(top, corpus, 0.5, vocab=vocab), expected, rtol=1e-12)
    np.testing.assert_allclose(coherence(top, sp.csr_matrix(H), 0.5), expected, rtol=1e-12)


def test_coherence_absent_word_scores_log_eps():
    with pytest.warns(RuntimeWarning, match="1 of 2 top words"):
        got = coherence([[5, 0], [0, 5]], X, EPS)
    # fig first: D(fig) = 0 is taken as 1, so apple|fig = log(eps); fig|apple = log(eps/3)
    np.testing.assert_allclose(got, [math.log(EPS), math.log(EPS / 3)], rtol=1e-12)


def test_coherence_errors(text_corpus):
    with pytest.raises(ValueError, match="vocab"):
        coherence(TOPICS, str(text_corpus))
    with pytest.raises(ValueError, match="out of range"):
        coherence([[0, 9]], X)
    with pytest.raises(ValueError, match="eps"):
        coherence(TOPICS, X, 0.0)


def test_top_word_ids_and_unique_words_with_ties():
    W = np.array(
        [
            [0.4, 0.3, 0.3, 0.0, 0.0],  # top 2: 0, then 1 (tied with 2: lower id first)
            [0.0, 0.5, 0.5, 0.0, 0.0],  # 1, 2
            [0.1, 0.1, 0.1, 0.1, 0.6],  # 4, then 0 (four-way tie)
        ]
    )
    assert top_word_ids(W, 2).tolist() == [[0, 1], [1, 2], [4, 0]]
    # 0 is in topics 0 and 2, 1 in topics 0 and 1; 2 and 4 are held by one topic each
    assert unique_words(W, 2).tolist() == [0, 1, 1]
    assert unique_words(W, 5).tolist() == [0, 0, 0]  # every topic holds every word
    assert dissimilarity(W.T, 2) == pytest.approx(2 / 3)
    # the same order as a stable argsort, ties and all
    rng = np.random.default_rng(1)
    R = rng.integers(0, 4, size=(7, 50)) / 4.0
    for n in (1, 5, 13, 50, 80):
        ref = np.argsort(-R, axis=1, kind="stable")[:, :n]
        assert np.array_equal(top_word_ids(R, n), ref)


def test_matched_l1_of_a_permutation():
    rng = np.random.default_rng(2)
    A = rng.random((12, 5))
    A /= A.sum(axis=0)
    perm = np.array([3, 0, 4, 1, 2])
    res = matched_l1(A, A[:, perm])
    assert res.mean == pytest.approx(0.0, abs=1e-12)
    assert np.array_equal(res.matching, np.argsort(perm))  # the inverse permutation
    np.testing.assert_allclose(res.per_topic, 0.0, atol=1e-12)


def test_sparsity():
    V = 4
    one_hot = np.eye(V)[:, :1]
    uniform = np.full((V, 1), 1 / V)
    assert sparsity(one_hot) == pytest.approx(1.0)
    assert sparsity(uniform) == pytest.approx(0.0, abs=1e-12)
    # b = (1, 1, 0, 0)/2: ‖b‖₁/‖b‖₂ = √2, so (2 − √2)/(2 − 1); averaged with the one-hot column
    half = np.array([[0.5], [0.5], [0.0], [0.0]])
    assert sparsity(np.hstack([half, one_hot])) == pytest.approx((2 - math.sqrt(2) + 1) / 2)


def _bab():
    B = np.array([[0.5, 0.0], [0.3, 0.2], [0.2, 0.1], [0.0, 0.3], [0.0, 0.4]])
    A = np.array([[0.4, 0.1], [0.1, 0.4]])
    return B, A


def test_approximation_error():
    B, A = _bab()
    C = B @ A @ B.T
    assert approximation_error(C, B, A) == pytest.approx(0.0, abs=1e-12)
    E = np.zeros((5, 5))
    E[0, 3], E[4, 1] = 0.3, -0.4  # ‖E‖_F = 0.5
    assert approximation_error(C + E, B, A) == pytest.approx(0.5)
    Cd = da.from_array(C + E, chunks=(2, 3))
    assert approximation_error(Cd, B, A) == pytest.approx(0.5)
    assert approximation_error(da.from_array(C, chunks=2), B, A) == pytest.approx(0.0, abs=1e-12)


def test_recovery_error():
    # rows of C: [2,0,2] → [.5,0,.5]; [0,1,0]; [1,1,0] → [.5,.5,0]; anchors are words 0 and 1
    C = np.array([[2.0, 0.0, 2.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    coef = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    # word 2 is rebuilt as [.25, .5, .25]: residual (.25, 0, −.25), norm √0.125
    expected = math.sqrt(0.125) / 3
    assert recovery_error(C, [0, 1], coef) == pytest.approx(expected)
    assert recovery_error(da.from_array(C, chunks=(2, 2)), [0, 1], coef) == pytest.approx(expected)
    # anchors in another order, with the coefficient columns to match (numpy and dask)
    swapped = coef[:, ::-1]
    assert recovery_error(C, [1, 0], swapped) == pytest.approx(expected)
    assert recovery_error(da.from_array(C, chunks=1), [1, 0], swapped) == pytest.approx(expected)
    # a block of rows with the anchor rows given: the mean over that block
    assert recovery_error(C[2:], C[[0, 1]], coef[2:]) == pytest.approx(math.sqrt(0.125))
    # already normalised input
    Cbar = C / C.sum(axis=1, keepdims=True)
    assert recovery_error(Cbar, [0, 1], coef, normalize=False) == pytest.approx(expected)
    # exact convex combinations of the anchor rows: 0
    coef_exact = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    Cex = np.vstack([Cbar[:2], coef_exact[2] @ Cbar[:2]]) * np.array([[4.0], [1.0], [7.0]])
    assert recovery_error(Cex, [0, 1], coef_exact) == pytest.approx(0.0, abs=1e-12)


def test_dominancy():
    assert dominancy(np.diag([0.2, 0.3, 0.5])) == pytest.approx(1.0)
    A = np.array([[0.3, 0.1], [0.1, 0.5]])
    assert dominancy(A) == pytest.approx((0.3 / 0.4 + 0.5 / 0.6) / 2)


def test_specificity():
    p = np.array([0.5, 0.5])
    B = np.array([[1.0, 0.5], [0.0, 0.5]])
    # KL([1, 0] ‖ [.5, .5]) = log 2; KL(p ‖ p) = 0
    assert specificity(B, p) == pytest.approx(math.log(2) / 2)
    assert specificity(B, np.array([3, 3])) == pytest.approx(math.log(2) / 2)  # counts
    assert specificity(np.array([[0.5], [0.5]]), p) == pytest.approx(0.0, abs=1e-12)
