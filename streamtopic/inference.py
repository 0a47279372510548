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

import errno
import functools
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from ._io import written_aside
from ._kernels import mixture_weights
from ._scratch import collect, owned_dir, owned_path
from ._version import __version__
from .cluster import compute
from .corpus import (
    ChunkBuilder,
    Corpus,
    cached_corpus_parts,
    document_names,
    read_corpus,
    stat_fingerprint,
)
from .fitted import ModelError, store_record
from .manifest import ManifestEntry
from .persistence import load_model
from .store import CachedPartition, CooccurrenceStore
from .termmap import to_global
from .vocabulary import Tokenizer

if TYPE_CHECKING:
    from .vocabulary import Tokenizer

__all__ = [
    "DocumentCompletion",
    "Inferred",
    "collect_debris",
    "fitted_store",
    "document_completion",
    "document_counts",
    "infer_corpus",
    "infer_topics",
    "model_prior",
    "model_tokenizer",
    "split_halves",
]

FLOOR = 1e-9
#: Dirichlet pseudo-count per topic when a model has no fitted α.
DEFAULT_ALPHA = 0.01
#: The θ iteration stops when no entry moves more than this.
TOL = 1e-4
#: Iterations per document at most.
MAX_ITER = 100


def prior(alpha: float | np.ndarray, K: int) -> np.ndarray:
    """The Dirichlet pseudo-counts (K,) of a scalar (symmetric) or a vector ``alpha``.

    Raises
    ------
    ValueError
        For a shape other than () or (K,), or entries that are negative or not finite, or
        all zero.
    """
    a = np.asarray(alpha, dtype=np.float64)
    if a.ndim == 0:
        a = np.full(K, float(a))
    if a.shape != (K,):
        raise ValueError(f"alpha has shape {a.shape}; expected a number or ({K},)")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError("alpha must be finite and non-negative")
    if a.sum() <= 0:  # maximum likelihood: a document without words still gets 1/K
        a = np.full(K, 1e-300)
    return a


def infer_topics(
    components: np.ndarray,
    H: Any,
    *,
    alpha: float | np.ndarray = DEFAULT_ALPHA,
    tol: float = TOL,
    max_iter: int = MAX_ITER,
    At: np.ndarray | None = None,
) -> np.ndarray:
    """Topic proportions θ (n_docs×K) of documents H (n_docs×V counts), topics fixed.

    Each document is solved on its own (:func:`streamtopic._kernels.mixture_weights`, a
    compiled loop over its non-zeros), so a document's θ is the same in any batch.

    Parameters
    ----------
    components : ndarray of shape (K, V)
        Topic-word distributions (rows sum to 1).
    H : sparse matrix or array of shape (n_docs, V)
        Word counts.
    alpha : float or ndarray of shape (K,)
        Dirichlet pseudo-counts (a number: the same for every topic; 0: maximum likelihood).
    tol : float
        Stop a document when no entry of its θ moves more than ``tol`` in an iteration.
    max_iter : int
        Iterations per document at most.
    At : ndarray of shape (V, K), optional
        ``components.T`` C-contiguous, when the caller has it (batches of one corpus).
    """
    At = np.ascontiguousarray(components.T, dtype=np.float64) if At is None else At
    return _theta(At, H, prior(alpha, At.shape[1]), tol, max_iter)


def _theta(At: np.ndarray, H: Any, alpha: np.ndarray, tol: float, max_iter: int) -> np.ndarray:
    """:func:`infer_topics` with A (V×K, C-contiguous) and the pseudo-counts (K,) given."""
    H = sp.csr_matrix(H, dtype=np.float64)
    H.sum_duplicates()  # canonical: sorted, merged entries (the order θ's sums run in)
    theta = np.empty((H.shape[0], At.shape[1]))
    mixture_weights(H.indptr.astype(np.int64), H.indices.astype(np.int64), H.data, At, alpha,
                    float(tol), int(max_iter), theta)
    return theta


def plugin_loglik(components: np.ndarray, H: Any, theta: np.ndarray) -> float:
    """Σ_dw h_dw log Σ_k θ_dk A_kw (with the floor :data:`FLOOR`) of counts H (n_docs×V),
    proportions θ (n_docs×K) and topics ``components`` (K×V)."""
    H = sp.csr_matrix(H).tocoo()
    V = components.shape[1]
    p = np.einsum("ik,ki->i", theta[H.row], components[:, H.col])
    return float(np.dot(H.data, np.log((1 - FLOOR) * p + FLOOR / V)))


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
    return (plugin_loglik(components, second, theta), int(second.data.sum()),
            int(H.shape[0]))


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
    from dask.delayed import delayed

    c = corpus if isinstance(corpus, Corpus) else read_corpus(corpus)
    source = _topics_source(model)
    parts = c.to_bag().to_delayed()
    tasks = [
        delayed(_completion_partition, pure=True)(p, source, alpha, seed + i)
        for i, p in enumerate(parts)
    ]
    (results,) = compute(tasks, progress=progress, label="held-out likelihood")
    total = sum(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    docs = sum(r[2] for r in results)
    oov = sum(r[3] for r in results)
    return DocumentCompletion(total / max(tokens, 1), docs, tokens, oov)


def _completion_partition(
    chunks: list[Any], source: Any, alpha: float, seed: int
) -> tuple[float, int, int, int]:
    topics = _topics_of(source)
    components = topics.At.T
    total, tokens, docs, oov = 0.0, 0, 0, 0
    for i, ch in enumerate(chunks):
        H, o = chunk_counts(ch, topics.vocab, topics.index)
        t, k, d = _completion_block(components, H, alpha, seed * 1_000_003 + i)
        total, tokens, docs, oov = total + t, tokens + k, docs + d, oov + o
    return total, tokens, docs, oov


# ----------------------------------------------------------------------------- a model's inputs


def model_prior(model: Any) -> np.ndarray:
    """The Dirichlet pseudo-counts (K,) a model's inference uses: its fitted ``alpha_`` when
    it has one, else :data:`DEFAULT_ALPHA` for every topic."""
    K = int(np.shape(model.components_)[0])
    alpha = getattr(model, "alpha_", None)
    return prior(DEFAULT_ALPHA if alpha is None else alpha, K)


def model_tokenizer(model: Any, stop_words: str | None = None) -> Tokenizer:
    """How text is tokenised for ``model``: as its store tokenised the training text (the
    setting recorded with the model, else the store's if it is still there), else the
    default :class:`~streamtopic.vocabulary.Tokenizer`, always whole documents (no
    ``max_doc_tokens``); with other stop words if ``stop_words`` is given."""
    from dataclasses import replace

    record = store_record(model)
    cfg = record.get("tokenizer")
    path = record.get("path")
    if cfg is None and path and CooccurrenceStore.is_store(path):
        with CooccurrenceStore.open(path) as store:
            cfg = store.config.get("tokenizer")
    # whole documents: windows (``max_doc_tokens``) shape the training statistics only
    tokenizer = replace(Tokenizer.from_config(cfg) if cfg else Tokenizer(), max_doc_tokens=None)
    return tokenizer if stop_words is None else replace(tokenizer, stop_words=stop_words)


def document_counts(docs: Iterable[Any], vocabulary: Sequence[str],
                    tokenizer: Tokenizer) -> sp.csr_matrix:
    """Counts (n_docs×V) of documents over a vocabulary.

    Parameters
    ----------
    docs : iterable
        Each a raw text (``str``, tokenised by ``tokenizer``) or a sequence of tokens (taken
        as the tokenizer's matches: its stop words are dropped). Tokens outside
        ``vocabulary`` are not counted.
    vocabulary : sequence of str, length V
    tokenizer : Tokenizer
    """
    builder = ChunkBuilder("<memory>", 0, tokenizer, tuple(vocabulary))
    for doc in docs:
        if isinstance(doc, str):
            builder.add_text(doc)
        elif isinstance(doc, (bytes, bytearray)):
            raise TypeError("documents must be str (decode bytes first) or lists of tokens")
        else:
            builder.add_matches(list(doc))
    builder.flush()
    V = len(vocabulary)
    if not builder.chunks:
        return sp.csr_matrix((0, V), dtype=np.float64)
    return sp.vstack([c.counts for c in builder.chunks], format="csr", dtype=np.float64)


# ----------------------------------------------------------------------------- a corpus' topics

#: Output formats of :func:`infer_corpus`, and the file name endings that choose them.
OUTPUT_FORMATS = ("zarr", "csv", "parquet")
_ENDINGS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
#: Rows per block written (and per chunk of the zarr arrays): about 8 MiB of θ at K = 128.
ROWS_PER_BLOCK = 8192
#: The attribute that marks a zarr group written by :func:`infer_corpus`.
MARK = "streamtopic_topics"


class InferenceError(ValueError):
    """An inference that cannot run: its output or settings, named in one line."""


@dataclass
class Inferred:
    """What :func:`infer_corpus` wrote.

    Attributes
    ----------
    path : str
    format : {'zarr', 'csv', 'parquet'}
    n_docs : int
        Rows written: one per document, in the corpus' order.
    n_tokens : int
        The documents' input tokens (text: before stop words are removed).
    n_in_vocabulary : int
        Of those, the tokens in the model's vocabulary (the ones θ is fitted to).
    seconds : float
        Wall time, from planning the corpus to the output in place.
    """

    path: str
    format: str
    n_docs: int
    n_tokens: int
    n_in_vocabulary: int
    seconds: float


def output_format(path: str, format: str = "auto") -> str:
    """The format of an output path: ``format``, or for 'auto' its ending (.csv, .parquet,
    .pq), else zarr."""
    if format != "auto":
        if format not in OUTPUT_FORMATS:
            raise InferenceError(f"format={format!r}: expected auto, {', '.join(OUTPUT_FORMATS)}")
        return format
    return _ENDINGS.get(os.path.splitext(os.fspath(path))[1].lower(), "zarr")


def infer_corpus(
    model: Any,
    corpus: Any,
    output: str | os.PathLike[str],
    *,
    format: str = "auto",
    alpha: float | np.ndarray | None = None,
    tol: float = TOL,
    max_iter: int = MAX_ITER,
    strip_headers: bool = True,
    progress: bool = False,
) -> Inferred:
    """Write the topic proportions of every document of a corpus, streamed on Dask.

    Each partition of the corpus is read, counted onto the model's words and solved by
    :func:`infer_topics` (the same estimator as :meth:`AnchorTopicModel.transform`, so the
    rows equal ``transform`` of the same documents), and its rows are kept in a scratch
    directory beside ``output``; then the rows are written in the corpus' order, aside, and
    renamed into place. Memory: one partition per task, and ``ROWS_PER_BLOCK`` rows at the
    end. Tasks read the model from its file (a model not saved yet is saved to the scratch
    first), so on a cluster ``output``'s directory must be one the workers share.

    Parameters
    ----------
    model : AnchorTopicModel
        A fitted model.
    corpus : path, glob, list of them, or :class:`~streamtopic.corpus.Corpus`
        Any format :func:`~streamtopic.corpus.read_corpus` reads; text is tokenised as the
        model's training text was (:func:`model_tokenizer`).
    output : path
        A zarr group (arrays ``theta`` n_docs×K, ``source``, ``position``, ``name``), or a
        CSV or Parquet file (columns ``source``, ``position``, ``name``, ``topic_0`` …);
        an earlier output there is replaced.
    format : {'auto', 'zarr', 'csv', 'parquet'}
        'auto': by the ending of ``output``.
    alpha : float or ndarray of shape (K,), optional
        The Dirichlet pseudo-counts; default :func:`model_prior`.
    tol, max_iter : see :func:`infer_topics`
    strip_headers : bool
        For one-document-per-file inputs: drop mail/news header blocks (as ``ingest``).
    progress : bool
        Dask's progress bar.
    """
    t0 = time.perf_counter()
    fmt = output_format(os.fspath(output), format)
    output = _check_output(os.fspath(output), fmt)
    K = int(np.shape(model.components_)[0])
    a = model_prior(model) if alpha is None else prior(alpha, K)
    c = corpus if isinstance(corpus, Corpus) else with_token_cache(read_corpus(
        corpus, tokenizer=model_tokenizer(model), strip_headers=strip_headers), model)
    c = c.onto(model.vocab_)
    parent, name = os.path.split(os.path.abspath(output))
    collect_debris(output)
    with owned_dir(parent, f".{name}.parts-") as scratch, \
            owned_path(parent, f".{name}.partial-") as aside:
        try:
            counts = _infer_parts(model, c, scratch, a, tol, max_iter, progress)
        except OSError as exc:  # no room for the parts beside the output: name the output
            if exc.errno not in _NO_ROOM:
                raise
            raise OSError(exc.errno, exc.strerror, output) from exc
        meta = _output_meta(model, c, a, tol, max_iter, counts)
        with written_aside(output, tmp=aside) as tmp:
            _WRITERS[fmt](tmp, _row_blocks(scratch, counts, c), K, meta)
    return Inferred(output, fmt, int(counts[:, 0].sum()), int(counts[:, 1].sum()),
                    int(counts[:, 2].sum()), time.perf_counter() - t0)


#: errors of a write refused for room (a full disk, a quota, a file size limit)
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def fitted_store(model: Any, needed_for: str) -> str:
    """The path of the store ``model`` was fitted on; a :class:`ModelError` saying what
    needs it (``needed_for``, e.g. "an update ingests into it") when it is gone."""
    path = store_record(model).get("path")
    if not path or not CooccurrenceStore.is_store(path):
        raise ModelError(f"the store the model was fitted on ({path}) is gone: {needed_for}")
    return str(path)


def with_token_cache(corpus: Any, model: Any) -> Any:
    """``corpus`` with every text input that the model's store holds in its token cache
    (:mod:`streamtopic.doccache`) read from there instead of tokenised again: the same
    path, unchanged since it was ingested (its recorded stamp), read the same way (format,
    headers, text field, tokenizer). Sources, order and positions stay those of ``corpus``;
    any other input is read as planned."""
    path = store_record(model).get("path")
    if not path or not CooccurrenceStore.is_store(path):
        return corpus
    with CooccurrenceStore.open(path, lease=False) as store:
        if store.config.get("tokenizer") != corpus.tokenizer.config():
            return corpus
        cached = store.cached_partitions()
        fields = {p.source.path: p.opt("text_field", "text") for p in corpus.parts}
        by_source: dict[str, list[Any]] = {}
        for src in corpus.sources:
            entry = _cached_entry(src, fields.get(src.path), cached, stat_fingerprint)
            if entry is not None:
                by_source[src.path] = [p for p in cached
                                       if p.sources[p.record.source] is entry]
        parts: list[Any] = []
        for p in corpus.parts:
            mine = by_source.pop(p.source.path, None)
            if mine is not None:  # the source's first partition: all of its cached ones
                parts += cached_corpus_parts(store.path, store.uid, store.V, mine)[1]
            elif p.source.path not in {q.opt("input") for q in parts}:
                parts.append(p)
        return Corpus(corpus.sources, parts, corpus.tokenizer, vocabulary=corpus.vocabulary)


def _cached_entry(src: Any, text_field: str | None, cached: Sequence[CachedPartition],
                  fingerprint: Any) -> ManifestEntry | None:
    """The manifest entry of a cached partition that is ``src`` as it is now and as it is
    read now (``text_field``: its JSON Lines field), or None."""
    if src.format in ("uci", "hdf5"):
        return None
    for p in cached:
        e = p.sources[p.record.source]
        if (e.path == src.path and e.get("format") == src.format
                and e.text_field == (text_field or "text")
                and e.strip_headers == src.strip_headers
                and e.keep_subject == src.keep_subject
                and e.stat == fingerprint(src.path, src.vocab_path)):
            return e
    return None


def _check_output(path: str, fmt: str) -> str:
    """``path`` made absolute; refuses to replace a directory that is not an earlier output,
    or a missing parent directory."""
    import zarr

    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise InferenceError(f"{path}: its directory {parent} does not exist")
    if os.path.isdir(path):
        try:
            mine = MARK in zarr.open_group(path, mode="r").attrs
        except Exception:  # not a zarr group at all
            mine = False
        if not mine or fmt != "zarr":
            raise InferenceError(f"{path}: is a directory and not an earlier output of infer; "
                                 "not replaced")
    return path


def collect_debris(output: str | os.PathLike[str]) -> int:
    """Remove what killed runs of :func:`infer_corpus` left beside ``output``: their hidden
    scratch directories (``.NAME.parts-*``) and partial outputs (``.NAME.partial-*``), each
    owned through a process-held lock while its run lives
    (:func:`streamtopic._scratch.collect`). Returns the bytes freed."""
    parent, name = os.path.split(os.path.abspath(os.fspath(output)))
    return collect(parent, lambda n: n.startswith((f".{name}.parts-", f".{name}.partial-")))


def _infer_parts(model: Any, corpus: Any, scratch: str, alpha: np.ndarray, tol: float,
                 max_iter: int, progress: bool) -> np.ndarray:
    """Solve every partition into ``scratch``; per partition (documents, input tokens,
    tokens in the vocabulary), (n_parts×3) int64."""
    from dask.delayed import delayed

    model_path = _saved_path(model) or _saved_copy(model, scratch)
    sources = tuple(s.path for s in corpus.sources)
    tasks = [
        delayed(_infer_partition, pure=False)(p, model_path, alpha, tol, max_iter,
                                              _part_file(scratch, i), sources)
        for i, p in enumerate(corpus.to_bag().to_delayed())
    ]
    (counts,) = compute(tasks, progress=progress, label="inferring topics")
    return np.asarray(counts, dtype=np.int64).reshape(-1, 3)


def _saved_path(model: Any) -> str | None:
    """Where ``model`` was saved or loaded from, if that file is unchanged since (tasks then
    load the topics from it: no V×K array goes through the scheduler); else None."""
    saved = getattr(model, "saved_at", None)
    if saved and os.path.exists(saved[0]) and _stamp(saved[0]) == saved[1]:
        return str(saved[0])
    return None


def _saved_copy(model: Any, scratch: str) -> str:
    """``model`` saved in ``scratch``, for the tasks to load."""
    path = os.path.join(scratch, "model")
    model.save(path)
    return path


def _stamp(path: str) -> int:
    return os.stat(path).st_mtime_ns


def _part_file(scratch: str, i: int) -> str:
    return os.path.join(scratch, f"{i:07d}.npz")


@dataclass(frozen=True)
class _Topics:
    """What a task needs of a saved model: A (V×K, C-contiguous), its words in order, and
    word → column."""

    At: np.ndarray
    vocab: tuple[str, ...]
    index: dict[str, int]


def _topics_source(model: Any) -> Any:
    """What tasks read a model's topics from: its file when it is saved and unchanged
    (:func:`_saved_path`), else its :class:`_Topics` as one delayed object (a model only in
    memory, or an object with ``components_`` and ``vocab_``)."""
    from dask.delayed import delayed

    path = _saved_path(model)
    if path is not None:
        return path
    vocab = tuple(model.vocab_)
    topics = _Topics(np.ascontiguousarray(np.asarray(model.components_, dtype=np.float64).T),
                     vocab, {w: i for i, w in enumerate(vocab)})
    return delayed(topics, pure=True, traverse=False)


def _topics_of(source: Any) -> _Topics:
    """The :class:`_Topics` of a :func:`_topics_source` (a path: loaded once per process)."""
    return source if isinstance(source, _Topics) else _model_topics(source, _stamp(source))


def chunk_counts(chunk: Any, vocab: tuple[str, ...],
                 index: dict[str, int]) -> tuple[sp.csr_matrix, int]:
    """A chunk's counts over the V words ``vocab`` (n_docs×V) and its tokens outside them:
    as read when its text was read onto them (:meth:`Corpus.onto`), else its own columns
    mapped through ``index`` (count inputs, or text read with its own terms)."""
    if len(chunk.terms) == len(vocab) and tuple(chunk.terms) == vocab:
        return chunk.counts, 0
    return to_global(chunk, index, len(vocab))


@functools.lru_cache(maxsize=2)
def _model_topics(path: str, stamp: int) -> _Topics:
    """A saved model's :class:`_Topics`, loaded once per process (``stamp``: its mtime)."""
    m = load_model(path)
    vocab = tuple(m.vocab_)
    return _Topics(np.ascontiguousarray(m.components_.T, dtype=np.float64), vocab,
                   {w: i for i, w in enumerate(vocab)})


def _infer_partition(chunks: list[Any], model_path: str, alpha: np.ndarray, tol: float,
                     max_iter: int, out: str, sources: tuple[str, ...]) -> tuple[int, int, int]:
    """θ of one partition's documents, saved to ``out`` with each document's source;
    returns (documents, input tokens, tokens in the vocabulary)."""

    topics = _topics_of(model_path)
    At = topics.At
    thetas, source = [], []
    n_tokens = in_vocab = 0
    for ch in chunks:
        H = chunk_counts(ch, topics.vocab, topics.index)[0]
        thetas.append(_theta(At, H, alpha, tol, max_iter))
        source.append(np.full(ch.n_docs, sources.index(ch.source), dtype=np.int32))
        n_tokens += int(ch.input_lengths.sum())
        in_vocab += int(H.sum())
    K = At.shape[1]
    theta = np.vstack(thetas) if thetas else np.empty((0, K))
    src = np.concatenate(source) if source else np.empty(0, np.int32)
    with written_aside(out) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, theta=theta, source=src)
    return theta.shape[0], n_tokens, in_vocab


@dataclass
class _Rows:
    """A block of output rows: θ (n×K), each row's source (index into the sources), position
    in it, and name (one-document-per-file inputs; else "")."""

    theta: np.ndarray
    source: np.ndarray
    position: np.ndarray
    name: np.ndarray


def _row_blocks(scratch: str, counts: np.ndarray, corpus: Any) -> Iterator[_Rows]:
    """The partitions' rows in the corpus' order, about ``ROWS_PER_BLOCK`` at a time. A
    document's position is its index among its source's documents, in reading order."""
    names = [document_names(src) for src in corpus.sources]
    seen = np.zeros(len(corpus.sources), dtype=np.int64)  # documents per source so far
    pending: list[dict[str, np.ndarray]] = []
    rows = 0
    for i in range(len(counts)):
        with np.load(_part_file(scratch, i)) as z:
            pending.append({k: z[k] for k in ("theta", "source")})
        rows += len(pending[-1]["source"])
        if rows >= ROWS_PER_BLOCK or i == len(counts) - 1:
            theta = np.concatenate([p["theta"] for p in pending])
            source = np.concatenate([p["source"] for p in pending])
            position = _positions(source, seen)
            name = np.array([names[s][p] if names[s] is not None else ""
                             for s, p in zip(source.tolist(), position.tolist(), strict=True)],
                            dtype=object)
            yield _Rows(theta, source, position, name)
            pending, rows = [], 0


def _positions(source: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Each row's index within its source (n,), counting on from ``seen`` (updated)."""
    order = np.argsort(source, kind="stable")
    s = source[order]
    starts = np.searchsorted(s, s, side="left")
    position = np.empty(source.size, dtype=np.int64)
    position[order] = seen[s] + np.arange(s.size) - starts
    np.add.at(seen, source, 1)
    return position


def _output_meta(model: Any, corpus: Any, alpha: np.ndarray, tol: float, max_iter: int,
                 counts: np.ndarray) -> dict[str, Any]:
    """The record written with the rows."""
    saved = getattr(model, "saved_at", None)
    return {
        "format_version": 1,
        "streamtopic": __version__,
        "model": saved[0] if saved else None,
        "n_docs": int(counts[:, 0].sum()),
        "n_tokens": int(counts[:, 1].sum()),
        "n_in_vocabulary": int(counts[:, 2].sum()),
        "sources": [s.path for s in corpus.sources],
        "topics": [f"topic_{k}" for k in range(alpha.size)],
        "anchor_words": list(getattr(model, "anchor_words_", [])),
        "estimator": {"alpha": alpha.tolist(), "tol": float(tol), "max_iter": int(max_iter)},
    }


def _write_zarr(path: str, blocks: Iterator[_Rows], K: int, meta: dict[str, Any]) -> None:
    import zarr

    n = meta["n_docs"]
    root = zarr.open_group(path, mode="w-")
    rows = (max(1, min(n, ROWS_PER_BLOCK)),)
    theta = root.create_array("theta", shape=(n, K), dtype="f8", chunks=(rows[0], K))
    source = root.create_array("source", shape=(n,), dtype="i4", chunks=rows)
    position = root.create_array("position", shape=(n,), dtype="i8", chunks=rows)
    name = root.create_array("name", shape=(n,), dtype=str, chunks=rows)
    at = 0
    for b in blocks:
        end = at + len(b.source)
        theta[at:end] = b.theta
        source[at:end] = b.source
        position[at:end] = b.position
        name[at:end] = b.name.astype(str)
        at = end
    root.attrs[MARK] = meta


def _csv_rows(blocks: Iterator[_Rows], sources: list[str]) -> Iterator[list[Any]]:
    for b in blocks:
        for s, p, nm, t in zip(b.source.tolist(), b.position.tolist(), b.name.tolist(),
                               b.theta.tolist(), strict=True):
            yield [sources[s], p, nm, *t]


def _write_csv(path: str, blocks: Iterator[_Rows], K: int, meta: dict[str, Any]) -> None:
    import csv

    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["source", "position", "name", *meta["topics"]])
        w.writerows(_csv_rows(blocks, meta["sources"]))


def _write_parquet(path: str, blocks: Iterator[_Rows], K: int, meta: dict[str, Any]) -> None:
    import json

    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise InferenceError("writing Parquet needs pyarrow: pip install pyarrow") from exc
    fields = [("source", pa.string()), ("position", pa.int64()), ("name", pa.string()),
              *[(t, pa.float64()) for t in meta["topics"]]]
    schema = pa.schema(fields, metadata={MARK: json.dumps(meta)})
    sources = np.asarray(meta["sources"], dtype=object)
    with pq.ParquetWriter(path, schema) as writer:
        for b in blocks:
            cols = [pa.array(sources[b.source]), pa.array(b.position), pa.array(b.name),
                    *[pa.array(b.theta[:, k]) for k in range(K)]]
            writer.write_table(pa.Table.from_arrays(cols, schema=schema))


_WRITERS = {"zarr": _write_zarr, "csv": _write_csv, "parquet": _write_parquet}
