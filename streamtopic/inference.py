"""Per-document inference with fixed topics, and held-out likelihood by document completion.

With topics fixed (A, V×K), a document's topic proportions θ maximise the likelihood of its
words, Σ_w h_w log Σ_k θ_k A_wk, over the simplex: the mixture-weights problem that RecoverKL
also solves. We use its EM map with a symmetric Dirichlet pseudo-count α (a MAP estimate under a
Dirichlet(1 + α) prior), which keeps θ off the simplex's faces for short documents:

    θ_k ← (θ_k Σ_w h_w A_wk / (Aθ)_w + α) / (n + Kα).

Held-out log-likelihood by *document completion* (Wallach et al. 2009's setting): each held-out
document's tokens are split into two halves by a seeded random draw without replacement (bags of
words have no order, so "the first half" is a random half); θ is estimated from the first half,
and the second half is scored:

    LL = Σ_docs Σ_w h²_w log p(w | θ̂) / Σ_docs n²,   p(w | θ̂) = (1 − λ) Σ_k θ̂_k A_wk + λ / V,

with a floor λ = 1e-9 on the model probability (so words with zero mass in every topic cost
log(λ/V) instead of −∞). Tokens outside the model's vocabulary are not scored, and counted.
Documents with fewer than 2 in-vocabulary tokens are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["infer_topics", "split_halves", "DocumentCompletion", "document_completion"]

FLOOR = 1e-9


def infer_topics(
    components: np.ndarray,
    H: sp.spmatrix,
    *,
    alpha: float = 0.01,
    tol: float = 1e-4,
    max_iter: int = 100,
    block_docs: int = 256,
) -> np.ndarray:
    """Topic proportions θ (n_docs×K) of documents H (n_docs×V counts), topics fixed.

    Vectorised EM over all documents of the block, restricted to the words they use.

    Parameters
    ----------
    components : ndarray of shape (K, V)
        Topic-word distributions (rows sum to 1).
    H : sparse matrix of shape (n_docs, V)
        Word counts.
    alpha : float
        Dirichlet pseudo-count per topic (0: maximum likelihood).
    tol : float
        Stop when no θ entry moves more than ``tol`` in an iteration.
    max_iter : int
    block_docs : int
        Documents solved together (their used words form a dense block).
    """
    H = sp.csr_matrix(H, dtype=np.float64)
    if H.shape[0] > block_docs:
        return np.vstack([
            infer_topics(components, H[i : i + block_docs], alpha=alpha, tol=tol,
                         max_iter=max_iter, block_docs=block_docs)
            for i in range(0, H.shape[0], block_docs)
        ])
    n_docs, K = H.shape[0], components.shape[0]
    cols = np.unique(H.indices)
    theta = np.full((n_docs, K), 1.0 / K)
    if cols.size == 0:
        return theta
    A = components[:, cols]  # K×U: only the words these documents use
    Hc = H[:, cols].toarray()
    n = Hc.sum(axis=1)
    for _ in range(max_iter):
        M = np.maximum(theta @ A, 1e-300)
        expected = theta * ((Hc / M) @ A.T)  # expected topic counts, n_docs×K
        new = (expected + alpha) / (n + K * alpha)[:, None]
        new[n == 0] = 1.0 / K
        done = np.abs(new - theta).max() < tol
        theta = new
        if done:
            break
    return theta


def split_halves(H: sp.csr_matrix, seed: int | None = 0) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Split each document's tokens into two halves at random (without replacement).

    Document d with n tokens gives ⌊n/2⌋ tokens to the first half and the rest to the second,
    drawn by a multivariate hypergeometric per document: vectorised over all tokens, seeded.
    """
    H = sp.csr_matrix(H)
    H.sum_duplicates()
    rng = np.random.default_rng(seed)
    counts = H.data.astype(np.int64)
    doc = np.repeat(np.arange(H.shape[0]), np.diff(H.indptr))
    # expand to tokens, shuffle within documents by sorting on (doc, random key)
    token_entry = np.repeat(np.arange(counts.size), counts)
    token_doc = doc[token_entry]
    order = np.lexsort((rng.random(token_entry.size), token_doc))
    token_entry = token_entry[order]
    n = np.asarray(H.sum(axis=1)).ravel().astype(np.int64)
    starts = np.r_[0, np.cumsum(n)[:-1]]
    rank = np.arange(token_entry.size) - np.repeat(starts, n)
    first = rank < np.repeat(n // 2, n)
    c1 = np.bincount(token_entry[first], minlength=counts.size)
    c2 = counts - c1
    # each half gets its own index arrays: eliminate_zeros rewrites them in place
    A = sp.csr_matrix((c1.astype(np.float64), H.indices.copy(), H.indptr.copy()), shape=H.shape)
    B = sp.csr_matrix((c2.astype(np.float64), H.indices.copy(), H.indptr.copy()), shape=H.shape)
    A.eliminate_zeros()
    B.eliminate_zeros()
    return A, B


@dataclass
class DocumentCompletion:
    """Held-out log-likelihood by document completion.

    Attributes
    ----------
    per_token : float
        Mean log-likelihood per scored token (nats; higher is better).
    n_docs : int
        Documents scored (at least 2 in-vocabulary tokens).
    n_tokens : int
        Tokens scored (the second halves).
    n_oov_tokens : int
        Held-out tokens outside the model's vocabulary (not scored).
    """

    per_token: float
    n_docs: int
    n_tokens: int
    n_oov_tokens: int


def _completion_block(
    components: np.ndarray, H: sp.csr_matrix, alpha: float, seed: int
) -> tuple[float, int, int]:
    """Σ log p over the second halves of a block of documents, tokens scored, docs scored."""
    n = np.asarray(H.sum(axis=1)).ravel()
    H = H[n >= 2]
    if H.shape[0] == 0:
        return 0.0, 0, 0
    first, second = split_halves(H, seed)
    theta = infer_topics(components, first, alpha=alpha)
    V = components.shape[1]
    second = second.tocoo()
    p = np.einsum("ik,ki->i", theta[second.row], components[:, second.col])
    p = (1 - FLOOR) * p + FLOOR / V
    return float(np.dot(second.data, np.log(p))), int(second.data.sum()), int(H.shape[0])


def document_completion(
    model: Any,
    corpus: Any,
    *,
    alpha: float = 0.01,
    seed: int = 0,
    progress: bool = False,
) -> DocumentCompletion:
    """Held-out log-likelihood per token of ``model`` on ``corpus`` by document completion.

    Parameters
    ----------
    model : AnchorTopicModel, or anything with ``components_`` (K×V) and ``vocab_``
    corpus : scipy.sparse matrix (docs × V over the model's vocabulary), or a path, glob,
        list or :class:`~streamtopic.corpus.Corpus` read in one streaming pass (Dask bag)
    alpha : float
        Dirichlet pseudo-count of the θ estimate.
    seed : int
        Seed of the half split (per partition: ``seed`` + partition number).
    """
    components = np.asarray(model.components_, dtype=np.float64)
    if sp.issparse(corpus):
        total, tokens, docs = _completion_block(components, sp.csr_matrix(corpus), alpha, seed)
        return DocumentCompletion(total / max(tokens, 1), docs, tokens, 0)
    from dask import delayed

    from .cluster import compute
    from .corpus import Corpus, read_corpus

    c = corpus if isinstance(corpus, Corpus) else read_corpus(corpus)
    vocab = list(model.vocab_)
    comp_d = delayed(components, pure=True, traverse=False)
    vocab_d = delayed(vocab, pure=True, traverse=False)
    parts = c.to_bag().to_delayed()
    tasks = [
        delayed(_completion_partition, pure=True)(p, comp_d, vocab_d, alpha, seed + i)
        for i, p in enumerate(parts)
    ]
    (results,) = compute(tasks, progress=progress, label="held-out likelihood")
    total = sum(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    docs = sum(r[2] for r in results)
    oov = sum(r[3] for r in results)
    return DocumentCompletion(total / max(tokens, 1), docs, tokens, oov)


def _completion_partition(
    chunks: list[Any], components: np.ndarray, vocab: list[str], alpha: float, seed: int
) -> tuple[float, int, int, int]:
    from .cooccurrence import _term_index, _to_global

    index = _term_index(vocab)
    total, tokens, docs, oov = 0.0, 0, 0, 0
    for i, ch in enumerate(chunks):
        H, o = _to_global(ch, index, len(vocab))
        t, k, d = _completion_block(components, H, alpha, seed * 1_000_003 + i)
        total, tokens, docs, oov = total + t, tokens + k, docs + d, oov + o
    return total, tokens, docs, oov
