"""Semi-synthetic corpora from known topics, generated and written in bounded memory.

The generative model is LDA's: topics are the columns of a column-stochastic V×K matrix ``A``
(each column a distribution over the V words); a document draws proportions
θ ~ Dirichlet(α) (K,), then each of its n tokens draws a topic z ~ Cat(θ) and a word
w ~ Cat(A[:, z]).

Functions
---------
:func:`dirichlet_topics`, :func:`dirichlet_topics_with_anchors`
    Random topics, column by column from a symmetric Dirichlet(β), optionally with one planted
    anchor word per topic (Arora et al., 2013).
:func:`sample_documents`, :func:`iter_documents`
    Document-term count matrices (D×V, CSR).
:func:`write_corpus`
    The same documents streamed to disk as HDF5, UCI bag-of-words or plain text.
:func:`population_cooccurrence`, :func:`dirichlet_second_moment`
    The exact expected co-occurrence Q = A E[θθᵀ] Aᵀ (the "infinite data" limit of the
    estimator in :mod:`streamtopic.cooccurrence`).

Determinism
-----------
Documents are generated in fixed *units* of consecutive documents; unit ``u`` draws from its
own stream, ``SeedSequence(seed).entropy`` with ``spawn_key + (u,)``. Unit boundaries depend
only on ``n_docs`` and ``doc_length``, so a seed gives the same documents whatever the
``block_docs`` of :func:`iter_documents` or :func:`write_corpus`, and :func:`sample_documents`
returns exactly the documents that :func:`write_corpus` writes with the same arguments.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, Union

import numpy as np
import scipy.sparse as sp

__all__ = [
    "SeedLike",
    "default_vocab",
    "dirichlet_topics",
    "dirichlet_topics_with_anchors",
    "dirichlet_second_moment",
    "population_cooccurrence",
    "sample_documents",
    "iter_documents",
    "write_corpus",
    "WRITE_FORMATS",
]

SeedLike = Union[int, np.random.SeedSequence, np.random.Generator, None]
"""Anything that seeds the generators: an int, a ``SeedSequence``, a ``Generator`` (whose
state is advanced) or None (fresh entropy)."""

WRITE_FORMATS = ("hdf5", "uci", "text")

_UNIT_TOKENS = 2**20  # target tokens per generation unit
_UNIT_MIN_DOCS = 64
_UNIT_MAX_DOCS = 16_384
_STOCHASTIC_TOL = 1e-6  # allowed deviation of a column sum of A from 1


# ----------------------------------------------------------------------------- seeds


def _rng(seed: SeedLike) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def _seed_sequence(seed: SeedLike) -> np.random.SeedSequence:
    """A SeedSequence from any seed; a Generator contributes fresh draws from its stream."""
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, np.random.Generator):
        return np.random.SeedSequence(seed.integers(0, 2**63, size=4).tolist())
    return np.random.SeedSequence(seed)


def _unit_rng(root: np.random.SeedSequence, unit: int) -> np.random.Generator:
    """The stream of generation unit ``unit``: a child of ``root`` that does not depend on
    how many children were spawned before (``root`` is not modified)."""
    child = np.random.SeedSequence(root.entropy, spawn_key=tuple(root.spawn_key) + (unit,))
    return np.random.default_rng(child)


# ----------------------------------------------------------------------------- topics


def default_vocab(n_words: int) -> list[str]:
    """Tokenizer-safe names of ``n_words`` words: ``w00000``, ``w00001``, ….

    The width is at least 5 digits and grows with ``n_words``, so every name has at least
    6 characters and matches the default token pattern ``(?u)\\b\\w\\w+\\b`` as one token.
    The list is in lexicographic order.

    Returns
    -------
    list of str, length V
    """
    if n_words < 0:
        raise ValueError(f"n_words={n_words!r}: must be >= 0")
    width = max(5, len(str(max(n_words - 1, 0))))
    digits = np.char.zfill(np.arange(n_words).astype(str), width)
    return np.char.add("w", digits).tolist() if n_words else []


def dirichlet_topics_with_anchors(
    n_words: int, n_topics: int, beta: float = 0.05, *, seed: SeedLike = None
) -> tuple[np.ndarray, np.ndarray]:
    """Random topics with one planted anchor word per topic, and the anchors.

    Each column is drawn from a symmetric Dirichlet(β) over the words. Then, as in Arora et
    al. (2013), K distinct words are drawn uniformly as anchors; the row of each anchor is
    zeroed in every topic, the anchor of topic k gets topic k's largest entry (taken before
    the zeroing), and the columns are renormalised. So word ``anchors[k]`` occurs only in
    topic k and is (one of) its most probable words.

    Parameters
    ----------
    n_words : int
        V, the vocabulary size (>= ``n_topics``).
    n_topics : int
        K, the number of topics (>= 1).
    beta : float
        Dirichlet concentration of each topic (> 0); small values give sparse topics.
    seed : int, SeedSequence, Generator or None

    Returns
    -------
    A : ndarray of shape (V, K), float64
        Column-stochastic topic matrix. Equal to ``dirichlet_topics(..., planted_anchors=True)``
        with the same seed.
    anchors : ndarray of shape (K,), int64
        ``anchors[k]`` is the anchor word (row of ``A``) of topic k.
    """
    return _topics(n_words, n_topics, beta, True, seed)


def dirichlet_topics(
    n_words: int,
    n_topics: int,
    beta: float = 0.05,
    *,
    planted_anchors: bool = False,
    seed: SeedLike = None,
) -> np.ndarray:
    """Random topics: the columns of A drawn from a symmetric Dirichlet(β).

    Parameters
    ----------
    n_words : int
        V, the vocabulary size.
    n_topics : int
        K, the number of topics (>= 1).
    beta : float
        Dirichlet concentration of each topic (> 0).
    planted_anchors : bool
        Plant one anchor word per topic; use :func:`dirichlet_topics_with_anchors` to also
        get which words they are.
    seed : int, SeedSequence, Generator or None

    Returns
    -------
    A : ndarray of shape (V, K), float64
        Column-stochastic: every column sums to 1. With the same seed, the topics with
        planted anchors are made from the same draw as those without. For small β some
        entries underflow to exactly 0 (a word absent from a topic).
    """
    return _topics(n_words, n_topics, beta, planted_anchors, seed)[0]


def _topics(
    n_words: int, n_topics: int, beta: float, planted: bool, seed: SeedLike
) -> tuple[np.ndarray, np.ndarray]:
    V, K = int(n_words), int(n_topics)
    if K < 1:
        raise ValueError(f"n_topics={n_topics!r}: must be >= 1")
    if V < 1:
        raise ValueError(f"n_words={n_words!r}: must be >= 1")
    if planted and V < K:
        raise ValueError(f"planted anchors need n_words >= n_topics (got V={V}, K={K})")
    if not beta > 0:
        raise ValueError(f"beta={beta!r}: must be > 0")
    rng = _rng(seed)
    A = np.ascontiguousarray(rng.dirichlet(np.full(V, float(beta)), size=K).T)  # V×K
    anchors = np.zeros(0, np.int64)
    if planted:
        anchors = rng.choice(V, size=K, replace=False).astype(np.int64)
        top = A.max(axis=0)  # (K,) each topic's largest entry
        A[anchors, :] = 0.0
        A[anchors, np.arange(K)] = top
    sums = A.sum(axis=0)
    if np.any(sums <= 0) or not np.all(np.isfinite(sums)):
        raise FloatingPointError(
            f"a topic drew all-zero weights (beta={beta!r} is too small for float64)"
        )
    A /= sums
    return A, anchors


def dirichlet_second_moment(alpha: float | np.ndarray, n_topics: int) -> np.ndarray:
    """E[θθᵀ] for θ ~ Dirichlet(α).

    With α0 = Σ_k α_k: E[θθᵀ] = (α αᵀ + diag α) / (α0 (α0 + 1)).

    Parameters
    ----------
    alpha : float or ndarray of shape (K,)
        Symmetric concentration (a float: α·1_K) or the K concentrations.
    n_topics : int
        K.

    Returns
    -------
    R : ndarray of shape (K, K)
        Symmetric, entries sum to 1.
    """
    a = _alpha_vector(alpha, n_topics)
    a0 = a.sum()
    return (np.outer(a, a) + np.diag(a)) / (a0 * (a0 + 1.0))


def population_cooccurrence(A: np.ndarray, alpha: float | np.ndarray) -> np.ndarray:
    """The exact population co-occurrence Q = A E[θθᵀ] Aᵀ for θ ~ Dirichlet(α).

    This is the expectation of each document's unbiased estimate Q_d (see
    :func:`streamtopic.cooccurrence.document_cooccurrence`), whatever the document lengths:
    the limit of the store's ``Q`` as the number of documents grows.

    Parameters
    ----------
    A : ndarray of shape (V, K)
        Column-stochastic topics.
    alpha : float or ndarray of shape (K,)
        Dirichlet concentration of the topic proportions (a float: symmetric α·1_K).

    Returns
    -------
    Q : ndarray of shape (V, V), float64
        Dense, symmetric, non-negative; entries sum to 1.
    """
    A = _check_topics(A)
    K = A.shape[1]
    a = _alpha_vector(alpha, K)
    a0 = a.sum()
    # A (ααᵀ + diag α) Aᵀ = (Aα)(Aα)ᵀ + (A diag α) Aᵀ, without a K×K detour
    Aa = A @ a  # (V,)
    Q = (A * a) @ A.T
    Q += np.outer(Aa, Aa)
    Q /= a0 * (a0 + 1.0)
    return Q


def _alpha_vector(alpha: float | np.ndarray, K: int) -> np.ndarray:
    a = np.asarray(alpha, dtype=np.float64)
    if a.ndim == 0:
        a = np.full(int(K), float(a))
    if a.shape != (int(K),):
        raise ValueError(f"alpha has shape {a.shape}; expected a float or ({K},)")
    if not np.all(a > 0) or not np.all(np.isfinite(a)):
        raise ValueError("alpha must be positive and finite")
    return a


def _check_topics(A: np.ndarray) -> np.ndarray:
    """A as a float64 V×K array whose columns sum to exactly 1 (renormalised)."""
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1:
        raise ValueError(f"A has shape {A.shape}; expected a non-empty V×K matrix")
    if not np.all(np.isfinite(A)) or np.any(A < 0):
        raise ValueError("A must be finite and non-negative")
    sums = A.sum(axis=0)
    bad = np.flatnonzero(np.abs(sums - 1.0) > _STOCHASTIC_TOL)
    if bad.size:
        raise ValueError(
            f"A must be column-stochastic: column {int(bad[0])} sums to {sums[bad[0]]!r}"
        )
    return A / sums


# ----------------------------------------------------------------------------- documents


@dataclass(frozen=True)
class _Model:
    """Everything a generation unit needs, precomputed once."""

    A_t: np.ndarray  # (K, V) topics as contiguous rows
    cdf_t: np.ndarray  # (K, V) cumulative sums, clipped to 1, last entry exactly 1
    alpha: np.ndarray  # (K,)
    doc_length: int
    poisson: bool
    unit_docs: int

    @property
    def V(self) -> int:
        return int(self.A_t.shape[1])

    @property
    def K(self) -> int:
        return int(self.A_t.shape[0])


def _model(
    A: np.ndarray, alpha: float | np.ndarray, doc_length: int, poisson: bool
) -> _Model:
    A = _check_topics(A)
    K = A.shape[1]
    if int(doc_length) != doc_length or doc_length < 1:
        raise ValueError(f"doc_length={doc_length!r}: must be a positive integer")
    if doc_length >= 2**31:
        raise ValueError(f"doc_length={doc_length!r}: too large")
    A_t = np.ascontiguousarray(A.T)
    cdf_t = np.minimum(np.cumsum(A_t, axis=1), 1.0)
    cdf_t[:, -1] = 1.0
    unit = int(np.clip(_UNIT_TOKENS // int(doc_length), _UNIT_MIN_DOCS, _UNIT_MAX_DOCS))
    return _Model(A_t, cdf_t, _alpha_vector(alpha, K), int(doc_length), bool(poisson), unit)


def _draw_words(model: _Model, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` i.i.d. words of topic ``k``, in random order, as int32 (n,).

    Two exact samplers, picked by cost (a deterministic choice): inverse-CDF search for few
    tokens, else the word counts as one multinomial draw, expanded and shuffled.
    """
    if n < model.V:
        return np.searchsorted(model.cdf_t[k], rng.random(n), side="right").astype(np.int32)
    counts = rng.multinomial(n, model.A_t[k])
    words = np.repeat(np.arange(model.V, dtype=np.int32), counts)
    rng.shuffle(words)
    return words


def _sample_unit(model: _Model, n_docs: int, rng: np.random.Generator) -> sp.csr_matrix:
    """One unit: ``n_docs`` documents as an (n_docs × V) int32 CSR count matrix."""
    V = model.V
    theta = rng.dirichlet(model.alpha, size=n_docs)  # (B, K)
    if model.poisson:
        lengths = np.maximum(rng.poisson(model.doc_length, size=n_docs), 1)
    else:
        lengths = np.full(n_docs, model.doc_length, dtype=np.int64)
    topic_counts = rng.multinomial(lengths, theta)  # (B, K): tokens of each topic per doc
    per_topic = topic_counts.sum(axis=0)  # (K,)
    doc_ids = np.arange(n_docs, dtype=np.int32)
    rows: list[np.ndarray] = []
    words: list[np.ndarray] = []
    for k in np.flatnonzero(per_topic).tolist():  # a loop over topics, vectorised within
        words.append(_draw_words(model, k, int(per_topic[k]), rng))
        rows.append(np.repeat(doc_ids, topic_counts[:, k]))
    row = np.concatenate(rows) if rows else np.zeros(0, np.int32)
    col = np.concatenate(words) if words else np.zeros(0, np.int32)
    H = sp.csr_matrix(
        (np.ones(row.size, dtype=np.int32), (row, col)), shape=(n_docs, V), dtype=np.int32
    )
    H.sum_duplicates()  # canonical: sorted indices, no duplicates
    return H


def _unit_bounds(n_docs: int, unit_docs: int) -> Iterator[tuple[int, int, int]]:
    for u, d0 in enumerate(range(0, n_docs, unit_docs)):
        yield u, d0, min(n_docs, d0 + unit_docs)


def _iter_units(
    model: _Model, n_docs: int, seed: SeedLike, token_order: bool = False
) -> Iterator[tuple[sp.csr_matrix, np.ndarray | None]]:
    """Yield each unit's counts and, with ``token_order``, its tokens in document order (each
    document's tokens shuffled; int32, length = tokens of the unit)."""
    root = _seed_sequence(seed)
    for u, d0, d1 in _unit_bounds(n_docs, model.unit_docs):
        rng = _unit_rng(root, u)
        H = _sample_unit(model, d1 - d0, rng)
        tokens = None
        if token_order:  # drawn after the counts, so the counts do not depend on it
            tokens = np.repeat(H.indices, H.data)
            doc = np.repeat(np.arange(H.shape[0], dtype=np.float64), np.diff(H.indptr))
            doc = np.repeat(doc, H.data)
            tokens = tokens[np.argsort(doc + rng.random(doc.size))]
        yield H, tokens


def _check_sampling(n_docs: int) -> int:
    if int(n_docs) != n_docs or n_docs < 0:
        raise ValueError(f"n_docs={n_docs!r}: must be a non-negative integer")
    return int(n_docs)


def iter_documents(
    A: np.ndarray,
    n_docs: int,
    *,
    alpha: float | np.ndarray = 0.1,
    doc_length: int = 70,
    poisson: bool = False,
    seed: SeedLike = None,
    block_docs: int = 10_000,
) -> Iterator[sp.csr_matrix]:
    """Generate documents block by block, in bounded memory.

    Parameters
    ----------
    A, alpha, doc_length, poisson, seed
        See :func:`sample_documents`.
    n_docs : int
        D, the total number of documents.
    block_docs : int
        Documents per yielded block (the last may be smaller). The documents do not depend
        on it.

    Yields
    ------
    H : scipy.sparse.csr_matrix of shape (B, V), int32
        Consecutive blocks of B = ``block_docs`` documents (the last may hold fewer);
        stacked, they equal ``sample_documents(A, n_docs, ...)`` with the same arguments.
    """
    n_docs = _check_sampling(n_docs)
    if block_docs < 1:
        raise ValueError(f"block_docs={block_docs!r}: must be >= 1")
    model = _model(A, alpha, doc_length, poisson)
    units = (H for H, _ in _iter_units(model, n_docs, seed))
    yield from _exact_blocks(units, int(block_docs))


def _exact_blocks(units: Iterator[sp.csr_matrix], block_docs: int) -> Iterator[sp.csr_matrix]:
    """Re-cut consecutive document blocks of any sizes into blocks of ``block_docs`` rows."""
    pending: list[sp.csr_matrix] = []
    n_pending = 0
    for H in units:
        start = 0
        if pending:
            take = H[: block_docs - n_pending]
            pending.append(take)
            n_pending += take.shape[0]
            start = take.shape[0]
            if n_pending < block_docs:
                continue
            yield sp.vstack(pending, format="csr")
            pending, n_pending = [], 0
        while H.shape[0] - start >= block_docs:
            yield H[start : start + block_docs]
            start += block_docs
        if start < H.shape[0]:
            pending, n_pending = [H[start:]], H.shape[0] - start
    if pending:
        yield sp.vstack(pending, format="csr") if len(pending) > 1 else pending[0]


def _rebatch(
    units: Iterator[tuple[sp.csr_matrix, np.ndarray | None]], block_docs: int
) -> Iterator[list[tuple[sp.csr_matrix, np.ndarray | None]]]:
    """Group consecutive units into batches of at least ``block_docs`` documents (the last
    batch may hold fewer); memory holds at most one batch."""
    batch: list[tuple[sp.csr_matrix, np.ndarray | None]] = []
    n = 0
    for unit in units:
        batch.append(unit)
        n += unit[0].shape[0]
        if n >= block_docs:
            yield batch
            batch, n = [], 0
    if batch:
        yield batch


def sample_documents(
    A: np.ndarray,
    n_docs: int,
    *,
    alpha: float | np.ndarray = 0.1,
    doc_length: int = 70,
    poisson: bool = False,
    seed: SeedLike = None,
) -> sp.csr_matrix:
    """Draw documents from the topic model, as a document-term count matrix.

    Each document draws θ ~ Dirichlet(α) (K,), a length n (``doc_length``, or
    max(1, Poisson(``doc_length``))), its topic counts ~ Multinomial(n, θ), and for each topic
    that many words from the topic's column of ``A``. This is the token-by-token story
    (z ~ Cat(θ), w ~ Cat(A[:, z])) with the tokens' order dropped. Documents are generated in
    vectorised units of thousands (a loop over topics, none over documents or tokens).

    Parameters
    ----------
    A : ndarray of shape (V, K)
        Column-stochastic topics (columns are renormalised in float64).
    n_docs : int
        D, the number of documents.
    alpha : float or ndarray of shape (K,)
        Dirichlet concentration of the topic proportions (a float: symmetric).
    doc_length : int
        Tokens per document, or the Poisson mean with ``poisson``.
    poisson : bool
        Draw each length from Poisson(``doc_length``), at least 1.
    seed : int, SeedSequence, Generator or None
        See the module notes on determinism.

    Returns
    -------
    H : scipy.sparse.csr_matrix of shape (D, V), int32
        Canonical (sorted indices, no duplicates); row sums are the document lengths.
    """
    n_docs = _check_sampling(n_docs)
    model = _model(A, alpha, doc_length, poisson)
    blocks = [H for H, _ in _iter_units(model, n_docs, seed)]
    if not blocks:
        return sp.csr_matrix((0, model.V), dtype=np.int32)
    if len(blocks) == 1:
        return blocks[0]
    return sp.vstack(blocks, format="csr")


# ----------------------------------------------------------------------------- writing


def _check_vocab(vocab: Sequence[str] | None, V: int, fmt: str) -> list[str]:
    if vocab is None:
        return default_vocab(V)
    terms = np.asarray(list(vocab), dtype=str).tolist()
    if len(terms) != V:
        raise ValueError(f"vocab has {len(terms)} terms but A has V={V} rows")
    if len(set(terms)) != V:
        raise ValueError("vocab has repeated terms")
    arr = np.asarray(terms, dtype=str)
    if np.any(np.char.str_len(np.char.strip(arr)) == 0):
        raise ValueError("vocab has an empty or blank term")
    joined = "\n".join(terms)
    if joined.count("\n") != V - 1 or "\r" in joined:
        raise ValueError("vocab terms must not contain line breaks")
    if fmt == "text":
        from .vocabulary import Tokenizer

        if Tokenizer()(" ".join(terms)) != terms:
            raise ValueError(
                "format='text' needs terms that the default tokenizer reads back unchanged: "
                r"lowercase, 2+ word characters each, matching (?u)\b\w\w+\b"
            )
    return terms


def _uci_name(path: str) -> tuple[str, bool]:
    """NAME of ``docword.NAME.txt[.gz]`` and whether it is gzipped."""
    base = os.path.basename(path)
    m = re.fullmatch(r"docword\.(.+)\.txt(\.gz)?", base)
    if m is None:
        raise ValueError(
            f"{path}: a UCI corpus must be named docword.NAME.txt or docword.NAME.txt.gz "
            "(its vocabulary goes beside it as vocab.NAME.txt)"
        )
    return m.group(1), m.group(2) is not None


def _open_out(path: str, gz: bool) -> IO[bytes]:
    if gz:
        return gzip.open(path, "wb", compresslevel=6)  # type: ignore[return-value]
    return open(path, "wb")


def _ascii_ints(values: np.ndarray, suffix: bytes) -> np.ndarray:
    """Decimal ASCII of non-negative ints followed by ``suffix``, as an object array of bytes
    (one element per value)."""
    strs = np.char.add(np.asarray(values, dtype=np.int64).astype("S"), suffix)
    return strs.astype(object)


def _uci_lines(H: sp.csr_matrix, first_doc: int, word_tab: np.ndarray) -> bytes:
    """``docID wordID count`` lines (1-based ids) of the documents of ``H`` (B×V)."""
    if H.nnz == 0:
        return b""
    doc_tab = _ascii_ints(np.arange(first_doc + 1, first_doc + H.shape[0] + 1), b" ")
    cnt_tab = _ascii_ints(np.arange(int(H.data.max()) + 1), b"\n")
    fields = np.empty((H.nnz, 3), dtype=object)
    fields[:, 0] = np.repeat(doc_tab, np.diff(H.indptr))
    fields[:, 1] = word_tab[H.indices]
    fields[:, 2] = cnt_tab[H.data]
    return b"".join(fields.ravel().tolist())


def _text_lines(tokens: np.ndarray, H: sp.csr_matrix, sp_tab: np.ndarray, nl_tab: np.ndarray) -> bytes:
    """One line per document of ``H``: its ``tokens`` (in document order) joined by spaces."""
    if tokens.size == 0:
        return b""
    ends = np.cumsum(np.asarray(H.sum(axis=1)).ravel().astype(np.int64)) - 1  # last token/doc
    last = np.zeros(tokens.size, dtype=bool)
    last[ends] = True
    return b"".join(np.where(last, nl_tab[tokens], sp_tab[tokens]).tolist())


def write_corpus(
    path: str | os.PathLike[str],
    A: np.ndarray,
    n_docs: int,
    *,
    format: str = "hdf5",
    vocab: Sequence[str] | None = None,
    alpha: float | np.ndarray = 0.1,
    doc_length: int = 70,
    poisson: bool = False,
    seed: SeedLike = None,
    block_docs: int = 10_000,
) -> dict[str, Any]:
    """Generate documents and write them to disk, streaming in bounded memory.

    The documents are those of ``sample_documents(A, n_docs, alpha=..., doc_length=...,
    poisson=..., seed=...)``; they are generated and written about ``block_docs`` at a time,
    so memory stays bounded by max(``block_docs``, one generation unit of ~2^20 tokens).
    Every file is written under a temporary name and renamed into place on success.

    Formats (all read back by :func:`streamtopic.read_corpus`)
    ----------------------------------------------------------
    ``hdf5``
        streamtopic's CSR layout, via :class:`streamtopic.corpus.HDF5CorpusWriter` with the
        vocabulary fixed (every term stored, in order, also those that never occur).
    ``uci``
        ``path`` must be ``docword.NAME.txt`` (or ``.txt.gz``); ``vocab.NAME.txt`` is
        written beside it. The header ``D, W, NNZ`` is written once NNZ is known: entries go
        to a temporary file first, then are appended after the header.
    ``text``
        One document per line, each token its term, tokens shuffled (deterministically,
        by the seed) within the document; ``.gz`` paths are gzipped. Terms must survive
        the default tokenizer unchanged (lowercase, 2+ word characters). Read it back with
        ``format='text'``: a corpus whose terms are all digits could look like UCI to
        format detection.

    Parameters
    ----------
    path : path
        The file to write (replaced if it exists).
    A : ndarray of shape (V, K)
        Column-stochastic topics.
    n_docs : int
        D, the number of documents.
    format : {'hdf5', 'uci', 'text'}
    vocab : sequence of str of length V, optional
        Term of each row of ``A`` (default :func:`default_vocab`).
    alpha, doc_length, poisson, seed
        See :func:`sample_documents`.
    block_docs : int
        Documents buffered per write; the output does not depend on it.

    Returns
    -------
    dict
        ``format``, ``n_docs``, ``n_tokens``, ``nnz`` (distinct document-term pairs),
        ``vocab_size``, ``path`` (the corpus file) and ``paths`` (every file written).
    """
    if format not in WRITE_FORMATS:
        raise ValueError(f"format={format!r}: expected one of {', '.join(WRITE_FORMATS)}")
    n_docs = _check_sampling(n_docs)
    if block_docs < 1:
        raise ValueError(f"block_docs={block_docs!r}: must be >= 1")
    model = _model(A, alpha, doc_length, poisson)
    terms = _check_vocab(vocab, model.V, format)
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"{parent}: directory does not exist")
    units = _iter_units(model, n_docs, seed, token_order=(format == "text"))
    batches = _rebatch(units, block_docs)
    if format == "hdf5":
        counts = _write_hdf5(path, batches, terms)
        paths = [path]
    elif format == "uci":
        counts, vocab_path = _write_uci(path, batches, terms, n_docs)
        paths = [path, vocab_path]
    else:
        counts = _write_text(path, batches, terms)
        paths = [path]
    return {
        "format": format,
        "n_docs": n_docs,
        "n_tokens": counts[0],
        "nnz": counts[1],
        "vocab_size": model.V,
        "path": path,
        "paths": paths,
    }


_Batches = Iterator[list[tuple[sp.csr_matrix, Union[np.ndarray, None]]]]


def _write_hdf5(path: str, batches: _Batches, terms: list[str]) -> tuple[int, int]:
    from .corpus import HDF5CorpusWriter

    n_tokens = nnz = 0
    with HDF5CorpusWriter(path, vocab=terms) as writer:
        for batch in batches:
            H = sp.vstack([u[0] for u in batch], format="csr") if len(batch) > 1 else batch[0][0]
            writer.append(H, terms)
            n_tokens += int(H.data.sum(dtype=np.int64))
            nnz += int(H.nnz)
    return n_tokens, nnz


def _tmp_beside(path: str, tag: str) -> str:
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=f".{tag}",
                               dir=os.path.dirname(path))
    os.close(fd)
    return tmp


def _write_uci(
    path: str, batches: _Batches, terms: list[str], n_docs: int
) -> tuple[tuple[int, int], str]:
    name, gz = _uci_name(path)
    vocab_path = os.path.join(os.path.dirname(path), f"vocab.{name}.txt")
    word_tab = _ascii_ints(np.arange(1, len(terms) + 1), b" ")
    entries = _tmp_beside(path, "entries")
    out_tmp = _tmp_beside(path, "partial")
    vocab_tmp = _tmp_beside(vocab_path, "partial")
    n_tokens = nnz = 0
    try:
        first = 0
        with open(entries, "wb") as fh:
            for batch in batches:
                for H, _ in batch:
                    fh.write(_uci_lines(H, first, word_tab))
                    first += H.shape[0]
                    n_tokens += int(H.data.sum(dtype=np.int64))
                    nnz += int(H.nnz)
        with _open_out(out_tmp, gz) as out, open(entries, "rb") as src:
            out.write(f"{n_docs}\n{len(terms)}\n{nnz}\n".encode("ascii"))
            shutil.copyfileobj(src, out, 2**22)
        with open(vocab_tmp, "wb") as fh:
            fh.write(("\n".join(terms) + "\n").encode("utf-8"))
        os.replace(vocab_tmp, vocab_path)
        os.replace(out_tmp, path)
    finally:
        for p in (entries, out_tmp, vocab_tmp):
            if os.path.exists(p):
                os.remove(p)
    return (n_tokens, nnz), vocab_path


def _write_text(path: str, batches: _Batches, terms: list[str]) -> tuple[int, int]:
    encoded = np.char.encode(np.asarray(terms, dtype=str), "utf-8")
    sp_tab = np.char.add(encoded, b" ").astype(object)  # (V,) bytes: term + separator
    nl_tab = np.char.add(encoded, b"\n").astype(object)
    tmp = _tmp_beside(path, "partial")
    n_tokens = nnz = 0
    try:
        with _open_out(tmp, path.endswith(".gz")) as fh:
            for batch in batches:
                for H, tokens in batch:
                    assert tokens is not None
                    fh.write(_text_lines(tokens, H, sp_tab, nl_tab))
                    n_tokens += int(tokens.size)
                    nnz += int(H.nnz)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return n_tokens, nnz
