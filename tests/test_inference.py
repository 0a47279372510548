"""Per-document inference and held-out likelihood by document completion."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamtopic import synth
from streamtopic.inference import document_completion, infer_topics, split_halves
from streamtopic.model import AnchorTopicModel


class _Fixed:
    def __init__(self, components, vocab):
        self.components_ = components
        self.vocab_ = vocab


def test_split_halves_partitions_every_document():
    A, _ = synth.dirichlet_topics_with_anchors(80, 4, beta=0.2, seed=0)
    H = synth.sample_documents(A, 300, alpha=0.2, doc_length=37, poisson=True, seed=1)
    a, b = split_halves(H, seed=5)
    np.testing.assert_array_equal((a + b).toarray(), H.toarray())
    n = np.asarray(H.sum(axis=1)).ravel()
    np.testing.assert_array_equal(np.asarray(a.sum(axis=1)).ravel(), n // 2)
    a2, _ = split_halves(H, seed=5)
    assert (a2 != a).nnz == 0  # seeded
    a3, _ = split_halves(H, seed=6)
    assert (a3 != a).nnz > 0


def test_infer_topics_recovers_known_proportions():
    rng = np.random.default_rng(0)
    comp = rng.dirichlet(np.full(200, 0.1), size=3)  # K×V, well separated
    theta = np.array([[0.7, 0.2, 0.1], [0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])
    H = sp.csr_matrix(np.round(theta @ comp * 200_000))
    est = infer_topics(comp, H, alpha=0.0, tol=1e-9, max_iter=5000)
    np.testing.assert_allclose(est, theta, atol=5e-3)
    np.testing.assert_allclose(est.sum(axis=1), 1.0)


def test_document_completion_hand_case():
    # one topic: θ is trivially 1, so the score is the mean log-probability of the second half
    comp = np.array([[0.5, 0.25, 0.25]])
    H = sp.csr_matrix(np.array([[2, 1, 1]]))
    _, second = split_halves(H, seed=0)
    want = float((second.toarray()[0] * np.log(comp[0])).sum() / second.sum())
    got = document_completion(_Fixed(comp, ["aa", "bb", "cc"]), H)
    assert abs(got.per_token - want) < 1e-6 and got.n_tokens == 2 and got.n_docs == 1


def test_true_topics_beat_the_unigram_and_uniform(tmp_path):
    A, _ = synth.dirichlet_topics_with_anchors(300, 8, beta=0.1, seed=2)
    vocab = synth.default_vocab(300)
    H = synth.sample_documents(A, 800, alpha=0.1, doc_length=120, seed=4)
    unigram = np.asarray(H.sum(axis=0)).ravel() / H.sum()
    true = document_completion(_Fixed(A.T, vocab), H).per_token
    uni = document_completion(_Fixed(unigram[None, :], vocab), H).per_token
    flat = document_completion(_Fixed(np.full((1, 300), 1 / 300), vocab), H).per_token
    assert abs(flat - np.log(1 / 300)) < 1e-6
    assert true > uni + 0.3 > flat
    # the streaming path over a file gives the same number as the in-memory one (one
    # partition: the half split follows the same seed)
    synth.write_corpus(str(tmp_path / "h.h5"), A, 800, format="hdf5", alpha=0.1,
                       doc_length=120, seed=4)
    streamed = document_completion(_Fixed(A.T, vocab), str(tmp_path / "h.h5"))
    assert streamed.n_docs == 800 and abs(streamed.per_token - true) < 0.02


def test_model_transform(tmp_path):
    A, _ = synth.dirichlet_topics_with_anchors(400, 5, beta=0.05, seed=3)
    import streamtopic as st

    st.CooccurrenceStore.from_array(synth.population_cooccurrence(A, 0.1),
                                    synth.default_vocab(400), tmp_path / "p.zarr", n_docs=10**6)
    m = AnchorTopicModel(5, method="plain", seed=0).fit(tmp_path / "p.zarr")
    H = synth.sample_documents(A, 50, alpha=0.1, doc_length=300, seed=9)
    theta = m.transform(H)
    assert theta.shape == (50, 5) and np.allclose(theta.sum(axis=1), 1.0)
