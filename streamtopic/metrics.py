"""Metrics for topic models.

Against known topics (semi-synthetic corpora)
    :func:`matched_l1` matches learned topics to true ones one to one
    (``scipy.optimize.linear_sum_assignment`` on their L1 distances).

Against a corpus
    :func:`coherence` is the document co-occurrence coherence of Mimno et al. (2011), in the
    form of Arora et al. (2013), eq. 3. It counts co-document frequencies of the top words in
    one streaming pass (:func:`codocument_frequency`), so the corpus is never held in memory.
    :func:`npmi` is the normalised pointwise mutual information of the top words' document
    co-occurrence (Bouma 2009; Lau et al. 2014), counted in the same single pass, never from
    a V×V matrix.

Intrinsic quality of a model
    The metrics of the rectified anchor-word paper (Lee et al., "Practical Correlated Topic
    Modeling and Analysis via the Rectified Anchor Word Algorithm"): :func:`recovery_error`,
    :func:`approximation_error`, :func:`dominancy`, :func:`specificity`,
    :func:`dissimilarity` and :func:`sparsity`; and :func:`unique_words` per topic.

Notation follows that paper: ``C`` is the V×V joint word co-occurrence (a store's ``Q``, which
sums to 1), ``B`` the V×K column-stochastic topic-word matrix (a model's ``components_.T``)
and ``A`` the K×K joint topic-topic matrix (a model's ``topic_cooccurrence_``). Where a V×V
matrix appears, a numpy array or a dask array is accepted; a dask array is reduced block by
block, so no process ever holds it whole.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment
from scipy.special import rel_entr

from ._numeric import safe_inverse
from .cluster import compute
from .corpus import Corpus, read_corpus

if TYPE_CHECKING:  # pragma: no cover
    from .corpus import DocChunk

__all__ = [
    "MatchedL1",
    "matched_l1",
    "topic_topic_error",
    "top_word_ids",
    "codocument_frequency",
    "codocument_counts",
    "coherence",
    "npmi",
    "coherence_and_npmi",
    "unique_words",
    "recovery_error",
    "approximation_error",
    "dominancy",
    "specificity",
    "dissimilarity",
    "sparsity",
]

# elements of a V×V numpy operand processed at once (bounds the temporaries)
_NUMPY_BLOCK_ELEMENTS = 2**22


@dataclass
class MatchedL1:
    """Result of :func:`matched_l1`.

    Attributes
    ----------
    mean : float
        Mean L1 distance between matched topics (0 = identical, 2 = disjoint).
    per_topic : ndarray of shape (K,)
        L1 distance of true topic k to its matched learned topic.
    matching : ndarray of shape (K,)
        ``matching[k]`` is the learned topic matched to true topic k.
    """

    mean: float
    per_topic: np.ndarray
    matching: np.ndarray


def matched_l1(A_true: np.ndarray, A_hat: np.ndarray) -> MatchedL1:
    """Mean L1 distance between true and learned topics after optimal one-to-one matching.

    Parameters
    ----------
    A_true, A_hat : ndarray of shape (V, K)
        Column-stochastic topic-word matrices over the same V words (a learned model's
        ``components_`` is K×V: pass its transpose).
    """
    A_true = np.asarray(A_true, dtype=np.float64)
    A_hat = np.asarray(A_hat, dtype=np.float64)
    if A_true.shape != A_hat.shape:
        raise ValueError(f"A_true has shape {A_true.shape} but A_hat has {A_hat.shape}")
    # cost[k, l] = ‖A_true[:, k] − A_hat[:, l]‖₁, one K×V slab at a time
    K = A_true.shape[1]
    cost = np.empty((K, K))
    for k in range(K):
        cost[k] = np.abs(A_hat - A_true[:, [k]]).sum(axis=0)
    rows, cols = linear_sum_assignment(cost)
    per_topic = cost[rows, cols]
    return MatchedL1(float(per_topic.mean()), per_topic, cols)


def topic_topic_error(R_true: np.ndarray, R_hat: np.ndarray, matching: np.ndarray) -> float:
    """Entrywise L1 distance between a true and a learned topic-topic matrix, topics aligned.

    Parameters
    ----------
    R_true : ndarray of shape (K, K)
        The true E[θθᵀ] (sums to 1).
    R_hat : ndarray of shape (K, K)
        A learned ``topic_cooccurrence_``.
    matching : ndarray of shape (K,)
        ``matching[k]``: the learned topic matched to true topic k (from :func:`matched_l1`).

    Returns
    -------
    float
        ``Σ_kl |R_true[k, l] − R_hat[m_k, m_l]|`` (0 = identical, at most 2 for matrices summing
        to 1).
    """
    R_true = np.asarray(R_true, dtype=np.float64)
    R_hat = np.asarray(R_hat, dtype=np.float64)
    if R_true.shape != R_hat.shape or R_true.ndim != 2 or R_true.shape[0] != R_true.shape[1]:
        raise ValueError(f"R_true has shape {R_true.shape} but R_hat has {R_hat.shape}")
    m = np.asarray(matching)
    return float(np.abs(R_true - R_hat[np.ix_(m, m)]).sum())


# ----------------------------------------------------------------------------- top words


def top_word_ids(components: np.ndarray, n: int = 20) -> np.ndarray:
    """The ids of each topic's ``n`` most probable words, most probable first.

    Ties are broken by the lower word id, exactly as a stable sort of ``-components`` does
    (and so as :meth:`AnchorTopicModel.top_words`), but in O(K V) time.

    Parameters
    ----------
    components : array_like of shape (K, V)
        Topic-word weights, one topic per row (a model's ``components_``).
    n : int
        Words per topic; at most V are returned.

    Returns
    -------
    ndarray of int64, shape (K, min(n, V))
    """
    W = np.asarray(components, dtype=np.float64)
    if W.ndim != 2:
        raise ValueError(f"components must be 2-D (K, V), got shape {W.shape}")
    if n < 1:
        raise ValueError(f"n={n!r}: must be >= 1")
    K, V = W.shape
    n = int(min(n, V))
    if K == 0 or V == 0:
        return np.zeros((K, 0), dtype=np.int64)
    # the n-th largest value of each row; take everything above it, then the tied values
    # at it in id order until n are taken
    t = np.partition(W, V - n, axis=1)[:, V - n][:, None]
    above = W > t
    at = W == t
    need = n - above.sum(axis=1, keepdims=True)
    chosen = above | (at & (np.cumsum(at, axis=1) <= need))
    ids = np.nonzero(chosen)[1].reshape(K, n)  # ascending ids within each row
    vals = np.take_along_axis(W, ids, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(ids, order, axis=1).astype(np.int64)


def unique_words(components: np.ndarray, top_n: int = 20) -> np.ndarray:
    """For each topic, how many of its top-N words are in no other topic's top N.

    Top words are chosen as by :func:`top_word_ids` (ties broken by the lower word id).

    Parameters
    ----------
    components : array_like of shape (K, V)
        Topic-word weights, one topic per row (a model's ``components_``).
    top_n : int
        N, the words per topic compared.

    Returns
    -------
    ndarray of int64, shape (K,)
        Between 0 (every top word shared) and min(N, V).
    """
    top = top_word_ids(components, top_n)
    V = np.asarray(components).shape[1]
    # a topic's top words are distinct, so a word's count is the number of topics holding it
    holders = np.bincount(top.ravel(), minlength=V)
    return cast("np.ndarray", (holders[top] == 1).sum(axis=1).astype(np.int64))


# ----------------------------------------------------------------------------- coherence


def _pad_top_ids(top_ids: Any) -> tuple[np.ndarray, np.ndarray]:
    """K sequences of word ids (possibly ragged) as a (K, N) int64 array padded with -1, and
    the (K, N) mask of real entries."""
    if isinstance(top_ids, np.ndarray) and top_ids.ndim == 2:
        ids = top_ids.astype(np.int64, copy=False)
        return ids, np.ones(ids.shape, dtype=bool)
    rows = [np.asarray(r, dtype=np.int64).ravel() for r in top_ids]
    lengths = np.array([r.size for r in rows], dtype=np.int64)
    N = int(lengths.max()) if rows else 0
    mask = np.arange(N)[None, :] < lengths[:, None]
    ids = np.full((len(rows), N), -1, dtype=np.int64)
    if rows:
        ids[mask] = np.concatenate(rows) if N else np.zeros(0, np.int64)
    return ids, mask


def _binary_columns(counts: sp.spmatrix, local: np.ndarray, U: int) -> sp.csr_matrix:
    """The document-term matrix restricted to the columns with ``local >= 0``, renumbered to
    ``local`` and binarised: (n_docs, U), 1 where the document holds the word."""
    c = sp.csr_matrix(counts)
    col = local[c.indices]
    keep = (col >= 0) & (c.data != 0)
    rows = np.repeat(np.arange(c.shape[0], dtype=np.int64), np.diff(c.indptr))[keep]
    Bm = sp.csr_matrix(
        (np.ones(int(keep.sum()), dtype=np.int64), (rows, col[keep])), shape=(c.shape[0], U)
    )
    Bm.data[:] = 1  # columns that repeat a term were summed: back to presence
    return Bm


def _codf(Bm: sp.csr_matrix) -> np.ndarray:
    """Bᵀ B for a binary document-word matrix: (U, U) co-document frequencies (int64)."""
    return np.asarray((Bm.T @ Bm).toarray(), dtype=np.int64)


def _codf_docs(Bm: sp.csr_matrix) -> np.ndarray:
    """Bᵀ B of a binary (n_docs, U) matrix with a column of ones appended: (U+1, U+1) int64,
    the co-document frequencies, and in the last row and column each word's document
    frequency and (corner) the number of documents."""
    ones = sp.csr_matrix(np.ones((Bm.shape[0], 1), dtype=np.int64))
    return _codf(sp.hstack([Bm, ones], format="csr"))


def _chunk_local(terms: Sequence[str], sorted_terms: np.ndarray, order: np.ndarray) -> np.ndarray:
    """For each chunk term, its index among the counted words, or -1 (vectorised lookup by
    binary search in the sorted counted terms)."""
    if len(terms) == 0 or sorted_terms.size == 0:
        return np.full(len(terms), -1, dtype=np.int64)
    t = np.asarray(terms, dtype=str)
    pos = np.minimum(np.searchsorted(sorted_terms, t), sorted_terms.size - 1)
    return np.where(sorted_terms[pos] == t, order[pos], -1).astype(np.int64)


def _partition_codf(
    chunks: Sequence[DocChunk], sorted_terms: np.ndarray, order: np.ndarray
) -> list[np.ndarray]:
    """One partition's co-document frequencies of the counted words and its number of
    documents: [(U+1, U+1) int64] (see :func:`_codf_docs`)."""
    U = order.size
    acc = np.zeros((U + 1, U + 1), dtype=np.int64)
    for ch in chunks:
        local = _chunk_local(ch.terms, sorted_terms, order)
        acc += _codf_docs(_binary_columns(ch.counts, local, U))
    return [acc]


def _sum_arrays(arrays: Any) -> np.ndarray:
    """Sum a sequence of equal-shape arrays into a new array (inputs are not modified)."""
    acc: np.ndarray | None = None
    for a in arrays:
        acc = np.array(a, copy=True) if acc is None else acc + a
    assert acc is not None, "a reduction over no partitions"
    return acc


def codocument_frequency(
    word_ids: Sequence[int] | np.ndarray,
    corpus: Any,
    *,
    vocab: Sequence[str] | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Document frequencies and co-document frequencies of a few words, in one pass.

    Parameters
    ----------
    word_ids : sequence of int, length U
        Distinct word ids (columns of a matrix ``corpus``, or indices into ``vocab``).
    corpus : scipy.sparse matrix of shape (D, V), or a corpus
        A document-term matrix, or anything :func:`streamtopic.read_corpus` accepts (a path,
        glob or list of them) or a :class:`~streamtopic.Corpus`. A corpus is streamed once:
        each partition keeps only the U columns, binarises them and forms the U×U matrix
        BᵀB; a Dask bag reduction sums the partitions.
    vocab : sequence of str, length V, optional
        The word of each id; required for a corpus (its terms are matched to ids by string).
        Terms of the corpus outside ``vocab[word_ids]`` are ignored.
    progress : bool
        Show a progress bar for the corpus pass.

    Returns
    -------
    ndarray of int64, shape (U, U)
        ``M[a, b]`` = number of documents holding both ``word_ids[a]`` and ``word_ids[b]``;
        the diagonal holds each word's document frequency.
    """
    return codocument_counts(word_ids, corpus, vocab=vocab, progress=progress)[0]


def codocument_counts(
    word_ids: Sequence[int] | np.ndarray,
    corpus: Any,
    *,
    vocab: Sequence[str] | None = None,
    progress: bool = False,
) -> tuple[np.ndarray, int]:
    """:func:`codocument_frequency` (U×U int64) and the number of documents of ``corpus``
    (every document it yields, empty ones included), counted in the same single pass."""
    ids = np.asarray(word_ids, dtype=np.int64).ravel()
    U = ids.size
    if np.unique(ids).size != U:
        raise ValueError("word_ids must be distinct")
    if U and ids.min() < 0:
        raise ValueError(f"word id {int(ids.min())} is negative")
    if sp.issparse(corpus) or isinstance(corpus, np.ndarray):
        X = sp.csr_matrix(corpus)
        if X.ndim != 2:
            raise ValueError("a document-term matrix must be 2-D (docs × V)")
        V = X.shape[1]
        if vocab is not None and len(vocab) != V:
            raise ValueError(f"vocab has {len(vocab)} terms but the matrix has {V} columns")
        if U and ids.max() >= V:
            raise ValueError(f"word id {int(ids.max())} out of range for {V} columns")
        local = np.full(V, -1, dtype=np.int64)
        local[ids] = np.arange(U)
        return _codf(_binary_columns(X, local, U)), int(X.shape[0])

    if vocab is None:
        raise ValueError("vocab (the word of each id) is required to count over a corpus")
    if U and ids.max() >= len(vocab):
        raise ValueError(f"word id {int(ids.max())} out of range for a vocabulary of {len(vocab)}")
    if not isinstance(corpus, Corpus):
        corpus = read_corpus(corpus)
    terms = np.array([vocab[i] for i in ids.tolist()], dtype=str)  # the U counted words only
    order = np.argsort(terms, kind="stable")
    sorted_terms = terms[order]
    if U > 1 and (sorted_terms[1:] == sorted_terms[:-1]).any():
        raise ValueError("the vocabulary repeats a term among word_ids; terms must be distinct")
    total = (
        corpus.to_bag()
        .map_partitions(partial(_partition_codf, sorted_terms=sorted_terms, order=order))
        .reduction(_sum_arrays, _sum_arrays, split_every=8)
    )
    (M,) = compute(total, progress=progress, label="co-document frequencies")
    M = np.asarray(M, dtype=np.int64)
    return M[:U, :U], int(M[U, U])


def coherence(
    top_ids: Sequence[Sequence[int]] | np.ndarray,
    corpus: Any,
    eps: float = 0.01,
    *,
    vocab: Sequence[str] | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Document co-occurrence coherence of each topic (Mimno et al. 2011; Arora et al. 2013,
    eq. 3).

    For a topic's top words w_1, …, w_N in rank order (most probable first),

        coherence = Σ_{i > j} log((D(w_i, w_j) + ε) / D(w_j)),

    where D(w_j) is the number of documents holding the higher-ranked word w_j and
    D(w_i, w_j) the number holding both. Higher (closer to 0) is more coherent.

    **Words absent from the corpus.** The formula assumes every top word occurs. When
    D(w_j) = 0 the denominator is taken as 1, so each such pair scores log(ε): the word is
    treated as one that occurs but never with w_i, the least coherent finite score, rather
    than giving log(ε/0) = +∞ or skipping the pair (which would reward topics of unseen
    words). A warning names how many top words are absent.

    Parameters
    ----------
    top_ids : array_like of shape (K, N), or K sequences of word ids
        Each topic's top words, most probable first (see :func:`top_word_ids`). Topics may
        have different lengths; a topic of fewer than 2 words scores 0.
    corpus : scipy.sparse matrix of shape (D, V), or a corpus
        A document-term matrix whose columns are the word ids, or anything
        :func:`streamtopic.read_corpus` accepts, or a :class:`~streamtopic.Corpus`. A corpus
        is read in one streaming pass that counts only the distinct top words (see
        :func:`codocument_frequency`).
    eps : float
        ε > 0, the smoothing count (0.01 in Arora et al.; Mimno et al. use 1).
    vocab : sequence of str, length V, optional
        The word of each id (a model's ``vocab_``); required when ``corpus`` is not a matrix.
    progress : bool
        Show a progress bar for the corpus pass.

    Returns
    -------
    ndarray of float64, shape (K,)
        The coherence of each topic (≤ N(N−1)/2 · log(1 + ε)).
    """
    if not eps > 0:
        raise ValueError(f"eps={eps!r}: must be positive")
    loc, mask, union = _top_locations(top_ids)
    if loc.size == 0:
        return np.zeros(loc.shape[0])
    M = codocument_frequency(union, corpus, vocab=vocab, progress=progress)
    return _coherence_scores(loc, mask, M, eps)


def _top_locations(top_ids: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each topic's top words as indices into their sorted union: (K, N) int64 locations,
    the (K, N) mask of real entries (topics may be ragged) and the union's word ids (U,)."""
    ids, mask = _pad_top_ids(top_ids)
    union, inverse = np.unique(ids[mask], return_inverse=True)
    loc = np.zeros(ids.shape, dtype=np.int64)
    loc[mask] = inverse.ravel()
    return loc, mask, union


def _coherence_scores(loc: np.ndarray, mask: np.ndarray, M: np.ndarray, eps: float) -> np.ndarray:
    """:func:`coherence` from the union's U×U co-document frequencies ``M``: (K,)."""
    N = loc.shape[1]
    df = np.diagonal(M)
    absent = int((df == 0).sum())
    if absent:
        warnings.warn(
            f"{absent} of {df.size} top words occur in no document; each pair with one as "
            "the higher-ranked word scores log(eps)",
            RuntimeWarning,
            stacklevel=3,
        )
    pair = M[loc[:, :, None], loc[:, None, :]].astype(np.float64)  # [k, i, j] = D(w_i, w_j)
    denom = np.maximum(df, 1)[loc].astype(np.float64)[:, None, :]  # D(w_j)
    below = np.tril(np.ones((N, N), dtype=bool), k=-1)  # i > j: w_j ranks higher
    valid = below[None] & mask[:, :, None] & mask[:, None, :]
    terms = np.log((pair + eps) / denom)
    return cast("np.ndarray", np.where(valid, terms, 0.0).sum(axis=(1, 2)))


def _pair_npmi(pair: np.ndarray, df_i: np.ndarray, df_j: np.ndarray, n_docs: int) -> np.ndarray:
    """NPMI of word pairs from document counts (arrays of one shape): −1 where the pair never
    occurs together, 1 where both words are in every document."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p_ij = pair / n_docs
        pmi = np.log(p_ij) - np.log(df_i / n_docs) - np.log(df_j / n_docs)
        out = pmi / -np.log(p_ij)
    out = np.where(pair >= n_docs, 1.0, out)
    return np.where(pair <= 0, -1.0, out)


def npmi(
    top_ids: Sequence[Sequence[int]] | np.ndarray,
    corpus: Any,
    *,
    vocab: Sequence[str] | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Normalised pointwise mutual information of each topic's top words, from document
    co-occurrence (Bouma 2009; Lau, Newman and Baldwin 2014).

    With D documents, D(w) of them holding w and D(w_i, w_j) holding both, P(·) = D(·)/D and

        NPMI(w_i, w_j) = log(P(w_i, w_j) / (P(w_i) P(w_j))) / −log P(w_i, w_j) ∈ [−1, 1],

    a topic's score is the mean over its N(N−1)/2 pairs of top words (order does not
    matter). A pair never seen together scores −1 (the limit as P(w_i, w_j) → 0; so does a
    pair with a word absent from the corpus); a pair in every document scores 1. D counts
    every document the corpus yields (empty ones included).

    Parameters
    ----------
    top_ids : array_like of shape (K, N), or K sequences of word ids
        Each topic's top words (see :func:`top_word_ids`). A topic of fewer than 2 words
        scores 0.
    corpus : scipy.sparse matrix of shape (D, V), or a corpus
        A document-term matrix, or anything :func:`streamtopic.read_corpus` accepts, or a
        :class:`~streamtopic.Corpus`: read in one streaming pass that counts only the
        distinct top words and the documents (:func:`codocument_counts`).
    vocab : sequence of str, length V, optional
        The word of each id; required when ``corpus`` is not a matrix.
    progress : bool
        Show a progress bar for the corpus pass.

    Returns
    -------
    ndarray of float64, shape (K,)
        Each topic's mean NPMI, in [−1, 1] (higher: its top words occur together more).
    """
    loc, mask, union = _top_locations(top_ids)
    if loc.size == 0:
        return np.zeros(loc.shape[0])
    M, n_docs = codocument_counts(union, corpus, vocab=vocab, progress=progress)
    return _npmi_scores(loc, mask, M, n_docs)


def coherence_and_npmi(
    top_ids: np.ndarray,
    corpus: Any,
    *,
    npmi_top: int = 10,
    eps: float = 0.01,
    vocab: Sequence[str] | None = None,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`coherence` of each topic's top words and :func:`npmi` of its first
    ``npmi_top`` of them, both from ONE pass over ``corpus``.

    ``top_ids`` is (K, N), most probable first. Returns two (K,) float64 arrays.
    """
    if not eps > 0:
        raise ValueError(f"eps={eps!r}: must be positive")
    loc, mask, union = _top_locations(top_ids)
    if loc.size == 0:
        return np.zeros(loc.shape[0]), np.zeros(loc.shape[0])
    M, n_docs = codocument_counts(union, corpus, vocab=vocab, progress=progress)
    return (_coherence_scores(loc, mask, M, eps),
            _npmi_scores(loc[:, :npmi_top], mask[:, :npmi_top], M, n_docs))


def _npmi_scores(loc: np.ndarray, mask: np.ndarray, M: np.ndarray, n_docs: int) -> np.ndarray:
    """:func:`npmi` from the union's U×U co-document frequencies ``M`` and the number of
    documents: (K,)."""
    if n_docs == 0:
        raise ValueError("the reference corpus has no document")
    N = loc.shape[1]
    df = np.diagonal(M).astype(np.float64)
    pair = M[loc[:, :, None], loc[:, None, :]].astype(np.float64)  # [k, i, j] = D(w_i, w_j)
    scores = _pair_npmi(pair, df[loc][:, :, None], df[loc][:, None, :], n_docs)
    valid = np.triu(np.ones((N, N), dtype=bool), k=1)[None] & mask[:, :, None] & mask[:, None, :]
    n_pairs = valid.sum(axis=(1, 2))
    total = np.where(valid, scores, 0.0).sum(axis=(1, 2))
    return np.where(n_pairs > 0, total / np.maximum(n_pairs, 1), 0.0)


# ----------------------------------------------------------------------------- V×V helpers


def _is_dask(x: Any) -> bool:
    return hasattr(x, "__dask_graph__") and hasattr(x, "chunks")


def _row_blocks(n_rows: int, width: int) -> list[tuple[int, int]]:
    step = max(1, _NUMPY_BLOCK_ELEMENTS // max(width, 1))
    return [(r, min(n_rows, r + step)) for r in range(0, n_rows, step)]


def _inverse_sums(s: Any) -> Any:
    """1/s where s > 0, else 0 (numpy or dask)."""
    return safe_inverse(s if _is_dask(s) else np.asarray(s, dtype=np.float64))


def _check_2d(name: str, x: Any) -> None:
    if len(x.shape) != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")


# ---------------------------------------------------------------------- rectified anchor words


def recovery_error(
    C: Any,
    anchors: np.ndarray,
    coef: np.ndarray,
    *,
    normalize: bool = True,
    progress: bool = False,
) -> float:
    """The paper's "Recovery": how well the anchor rows reconstruct every word's row.

    With C̄ the row-normalised co-occurrence (C̄_i = C_i / Σ_j C_ij, the conditional
    p(w_2 | w_1 = i)), S the anchor words and B̆ = p(z | w) the V×K coefficients (rows on
    the simplex),

        recovery = (1/n) Σ_i ‖C̄_i − Σ_k B̆_ik C̄_{S_k}‖₂,

    the mean over the n rows given of the Euclidean residual of each row from its convex
    reconstruction by the anchor rows.

    Parameters
    ----------
    C : ndarray or dask array of shape (n, V)
        Co-occurrence rows: the whole V×V matrix (n = V, e.g. a store's ``Q``) or a block of
        its rows. A dask array is reduced block by block.
    anchors : array_like of int, shape (K,), or array_like of shape (K, V)
        The anchor word ids (rows of ``C``), or, when ``C`` is a block of rows, the anchor rows
        themselves (unnormalised like ``C`` when ``normalize``).
    coef : array_like of shape (n, K)
        p(z | w) for the n rows: the recovery step's simplex coefficients.
    normalize : bool
        Divide each row of ``C`` (and of given anchor rows) by its sum; rows summing to 0 stay
        0. Pass False when ``C`` is already C̄.
    progress : bool
        Show a progress bar when ``C`` is a dask array.

    Returns
    -------
    float
    """
    _check_2d("C", C)
    n, V = C.shape
    coef = np.asarray(coef, dtype=np.float64)
    if coef.ndim != 2 or coef.shape[0] != n:
        raise ValueError(f"coef must have shape ({n}, K), got {coef.shape}")
    anchors_arr, given_rows = _check_anchor_rows(anchors, n, V, coef.shape[1])
    if n == 0:
        raise ValueError("C has no rows")
    if _is_dask(C):
        return _recovery_error_dask(C, anchors_arr, given_rows, coef, normalize, progress)
    return _recovery_error_numpy(np.asarray(C), anchors_arr, given_rows, coef, normalize)


def _check_anchor_rows(anchors: Any, n: int, V: int, K: int) -> tuple[Any, bool]:
    """``anchors`` as an array, and whether it holds the anchor rows (K×V) rather than the
    anchor word ids (K,)."""
    anchors_arr = anchors if _is_dask(anchors) else np.asarray(anchors)
    given_rows = anchors_arr.ndim == 2
    if given_rows:
        if anchors_arr.shape != (K, V):
            raise ValueError(f"anchor rows must have shape ({K}, {V}), got {anchors_arr.shape}")
        return anchors_arr, True
    anchors_arr = anchors_arr.astype(np.int64).ravel()
    if anchors_arr.size != K:
        raise ValueError(f"{anchors_arr.size} anchors but coef has {K} columns")
    if K and (anchors_arr.min() < 0 or anchors_arr.max() >= n):
        raise ValueError(f"anchor ids must lie in 0..{n - 1}")
    return anchors_arr, False


def _rows_normalised(X: Any) -> Any:
    """X with each row divided by its sum (rows summing to 0 stay 0; numpy or dask)."""
    return X * _inverse_sums(X.sum(axis=1))[:, None]


def _recovery_error_dask(
    C: Any, anchors: Any, given_rows: bool, coef: np.ndarray, normalize: bool, progress: bool
) -> float:
    """:func:`recovery_error` of a dask array, in one pass over its blocks."""
    import dask.array as da

    K = coef.shape[1]
    Cf = C.astype(np.float64)
    Cbar = _rows_normalised(Cf) if normalize else Cf
    if given_rows:
        S = da.asarray(anchors).astype(np.float64)
        if normalize:
            S = _rows_normalised(S)
    else:
        S = Cbar[anchors]
    S = S.rechunk((K, C.chunks[1]))
    coef_d = da.from_array(coef, chunks=(C.chunks[0], K))
    R = Cbar - coef_d @ S
    (total,) = compute(da.sqrt((R * R).sum(axis=1)).sum(), progress=progress,
                       label="recovery error")
    return cast("float", float(total) / C.shape[0])


def _recovery_error_numpy(
    C: Any, anchors: Any, given_rows: bool, coef: np.ndarray, normalize: bool
) -> float:
    """:func:`recovery_error` of an in-memory array, by blocks of rows."""
    n, V = C.shape
    if given_rows:
        S = np.asarray(anchors, dtype=np.float64)
    else:
        S = np.asarray(C[anchors], dtype=np.float64)
    if normalize:
        S = _rows_normalised(S)
    total = 0.0
    for r0, r1 in _row_blocks(n, V):
        rows = np.asarray(C[r0:r1], dtype=np.float64)
        if normalize:
            rows = _rows_normalised(rows)
        R = rows - coef[r0:r1] @ S
        total += float(np.sqrt(np.einsum("ij,ij->i", R, R)).sum())
    return cast("float", total / n)


def approximation_error(
    C: Any, B: np.ndarray, A: np.ndarray, *, progress: bool = False
) -> float:
    """The paper's "Approximation": ‖C − B A Bᵀ‖_F.

    Parameters
    ----------
    C : ndarray or dask array of shape (V, V)
        The joint word co-occurrence (a store's ``Q``, summing to 1). A dask array is reduced
        block by block: each task forms one block of B A Bᵀ and sums its squared residual.
    B : array_like of shape (V, K)
        Column-stochastic topic-word matrix (a model's ``components_.T``).
    A : array_like of shape (K, K)
        Joint topic-topic matrix (a model's ``topic_cooccurrence_``).
    progress : bool
        Show a progress bar when ``C`` is a dask array.

    Returns
    -------
    float
        The Frobenius norm of the residual (0 when C = B A Bᵀ exactly).
    """
    _check_2d("C", C)
    V = C.shape[0]
    B = np.asarray(B, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    if C.shape != (V, V):
        raise ValueError(f"C must be square, got shape {tuple(C.shape)}")
    if B.ndim != 2 or B.shape[0] != V:
        raise ValueError(f"B must have shape ({V}, K), got {B.shape}")
    K = B.shape[1]
    if A.shape != (K, K):
        raise ValueError(f"A must have shape ({K}, {K}), got {A.shape}")
    BA = B @ A
    if _is_dask(C):
        import dask.array as da

        left = da.from_array(BA, chunks=(C.chunks[0], K))
        right = da.from_array(np.ascontiguousarray(B.T), chunks=(K, C.chunks[1]))
        R = C.astype(np.float64) - left @ right
        (sq,) = compute((R * R).sum(), progress=progress, label="approximation error")
        return float(np.sqrt(sq))
    C = np.asarray(C)
    sq = 0.0
    for r0, r1 in _row_blocks(V, V):
        R = np.asarray(C[r0:r1], dtype=np.float64) - BA[r0:r1] @ B.T
        sq += float(np.einsum("ij,ij->", R, R))
    return float(np.sqrt(sq))


def dominancy(A: np.ndarray) -> float:
    """The paper's "Dominancy": the mean diagonal dominance of the topic-topic matrix,

        dominancy = (1/K) Σ_k A_kk / Σ_l A_kl,

    the mean of the diagonal of the row-normalised A (A_kk / p(z = k) for a joint A). It is
    1 for a diagonal A (topics never co-occur with others) and small when topics mix.

    Parameters
    ----------
    A : array_like of shape (K, K)
        Joint topic-topic matrix (a model's ``topic_cooccurrence_``). Rows summing to 0
        (topics with p(z) = 0) are left out of the mean.

    Returns
    -------
    float
    """
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be square, got shape {A.shape}")
    rows = A.sum(axis=1)
    ok = rows != 0
    if not ok.any():
        raise ValueError("every row of A sums to 0")
    return float((np.diagonal(A)[ok] / rows[ok]).mean())


def specificity(B: np.ndarray, p_w: np.ndarray) -> float:
    """The paper's "Specificity": how far topics are from the corpus unigram distribution,

        specificity = (1/K) Σ_k KL(B_{:,k} ‖ p(w)) = (1/K) Σ_k Σ_w B_wk log(B_wk / p(w)),

    with 0 log 0 = 0 (natural logarithm). 0 when every topic is the unigram distribution.

    Parameters
    ----------
    B : array_like of shape (V, K)
        Topic-word matrix; each column is normalised to sum 1.
    p_w : array_like of shape (V,)
        Unigram probabilities or counts (e.g. a store's ``word_counts``), normalised to sum 1.
        A word with p(w) = 0 but positive weight in a topic makes that KL infinite.

    Returns
    -------
    float
    """
    B = np.asarray(B, dtype=np.float64)
    p = np.asarray(p_w, dtype=np.float64).ravel()
    if B.ndim != 2 or B.shape[0] != p.size:
        raise ValueError(f"B must have shape ({p.size}, K), got {B.shape}")
    if (B < 0).any() or (p < 0).any():
        raise ValueError("B and p_w must be nonnegative")
    col = B.sum(axis=0)
    if (col <= 0).any() or p.sum() <= 0:
        raise ValueError("every column of B, and p_w, must have positive mass")
    Bn = B / col[None, :]
    pn = p / p.sum()
    return float(rel_entr(Bn, pn[:, None]).sum(axis=0).mean())


def dissimilarity(B: np.ndarray, top_n: int = 20) -> float:
    """The paper's "Dissimilarity": the mean number of a topic's top-N words that appear in
    no other topic's top N,

        dissimilarity = (1/K) Σ_k ``|top_N(k) \\ ∪_{l≠k} top_N(l)|``,

    the mean of :func:`unique_words`. It ranges from 0 (every top word shared) to N.

    Parameters
    ----------
    B : array_like of shape (V, K)
        Topic-word matrix, one topic per column (a model's ``components_.T``).
    top_n : int
        N (20 in the paper).

    Returns
    -------
    float
    """
    B = np.asarray(B)
    _check_2d("B", B)
    return float(unique_words(B.T, top_n).mean())


def sparsity(B: np.ndarray) -> float:
    """Mean Hoyer sparsity of the topic columns,

        sparsity = (1/K) Σ_k (√V − ‖b_k‖₁ / ‖b_k‖₂) / (√V − 1),

    1 for a column with a single nonzero word, 0 for a uniform column.

    Parameters
    ----------
    B : array_like of shape (V, K)
        Topic-word matrix, one topic per column; V ≥ 2 and no column all zero.

    Returns
    -------
    float
    """
    B = np.asarray(B, dtype=np.float64)
    _check_2d("B", B)
    V = B.shape[0]
    if V < 2:
        raise ValueError("Hoyer sparsity needs V >= 2 words")
    l1 = np.abs(B).sum(axis=0)
    l2 = np.sqrt(np.einsum("ij,ij->j", B, B))
    if (l2 == 0).any():
        raise ValueError("a column of B is all zero")
    root = np.sqrt(V)
    return float(((root - l1 / l2) / (root - 1.0)).mean())
