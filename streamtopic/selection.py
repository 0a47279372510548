"""Vocabulary chosen at fit time: a sub-vocabulary of a store, without reading the corpus.

Ingest may keep a generous vocabulary; ``AnchorTopicModel(min_df=, max_df=, keep_n=,
stop_words=)`` (``streamtopic fit --min-df …``) then fits a part of it. The selection has
gensim's ``filter_extremes`` semantics, as :meth:`~streamtopic.vocabulary.Vocabulary.from_stats`
has them at ingest: words in at least ``min_df`` documents and at most ``max_df`` × (documents),
then the ``keep_n`` of highest document frequency (ties by term), after the ``stop_words`` are
dropped. The statistics are the store's own: ``doc_freq`` and ``n_docs``, the counts over the
documents of input length ≥ 2, which are also what a new store's vocabulary pass prunes with.

Exactness. A store built now normalises each document by its *input* length
(:attr:`~streamtopic.store.CooccurrenceStore.doc_length` ``'input'``), so each entry Q[i, j]
depends on words i and j alone, and the selected words' block of the stored sum, with their
``word_counts`` and ``doc_freq`` and the store's ``n_docs`` and ``n_tokens``, *is* the store
ingested with that vocabulary (to rounding). :func:`selected_store` writes it as a derived
store in the fit's scratch directory, with the same configuration and manifest of inputs, so
that every stage of the fit, the refinement's reading of the corpus included, runs on it as
on a store ingested so. A store built before (lengths counted in its own vocabulary) refuses
any selection but the whole vocabulary: re-ingest it.

The defaults (:data:`FIT_MIN_DF`, :data:`FIT_MAX_DF`, :data:`FIT_KEEP_N`,
:data:`FIT_STOP_WORDS`) keep every word of the store. A selection by the defaults is skipped,
with a log line, on a store that cannot be selected from; one the user asked for is an error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .cluster import usable_cores
from .manifest import ManifestEntry
from .passes import QBlocks
from .store import (
    DOC_LENGTH,
    MIRRORED,
    MIRRORED_DENSE,
    SPARSE,
    CooccurrenceStore,
    StoreError,
    write_q_block,
)
from .vocabulary import resolve_stop_words

__all__ = ["FIT_KEEP_N", "FIT_MAX_DF", "FIT_MIN_DF", "FIT_STOP_WORDS", "Selection",
           "derive_store", "select_words", "selected_store"]

log = logging.getLogger("streamtopic")

#: The fit's vocabulary selection when its parameters are left at None: every word.
FIT_MIN_DF: int | None = None
FIT_MAX_DF: float | None = None
FIT_KEEP_N: int | None = None
FIT_STOP_WORDS: str | Sequence[str] | None = None

#: Name of the derived store in the fit's scratch directory.
DERIVED_NAME = "selected.zarr"


@dataclass(frozen=True)
class Selection:
    """Fit-time vocabulary selection settings (None: that filter is off).

    Attributes
    ----------
    min_df : int or None
        Keep words in at least this many documents.
    max_df : float or None
        Keep words in at most this fraction of the documents, in (0, 1].
    keep_n : int or None
        Then keep the ``keep_n`` words of highest document frequency (ties by term).
    stop_words : str, tuple of str or None
        Words to drop first: ``'english'``, ``'none'``, a file (one word per line) or words.
    explicit : bool
        Whether a parameter was given (else these are the defaults ``FIT_*``).
    """

    min_df: int | None = None
    max_df: float | None = None
    keep_n: int | None = None
    stop_words: str | tuple[str, ...] | None = None
    explicit: bool = False

    @classmethod
    def from_params(cls, min_df: int | None, max_df: float | None, keep_n: int | None,
                    stop_words: str | os.PathLike[str] | Sequence[str] | None) -> Selection:
        """The selection of an estimator's parameters: each None takes its default."""
        explicit = any(v is not None for v in (min_df, max_df, keep_n, stop_words))
        sw = FIT_STOP_WORDS if stop_words is None else stop_words
        if isinstance(sw, os.PathLike):
            sw = os.fspath(sw)
        return cls(FIT_MIN_DF if min_df is None else int(min_df),
                   FIT_MAX_DF if max_df is None else float(max_df),
                   FIT_KEEP_N if keep_n is None else int(keep_n),
                   sw if sw is None or isinstance(sw, str) else tuple(sorted(set(sw))),
                   explicit)

    @property
    def is_noop(self) -> bool:
        """Whether the settings keep every word of any store."""
        return (self.min_df is None and self.max_df is None and self.keep_n is None
                and not self.stop_set())

    def stop_set(self) -> frozenset[str]:
        """The words ``stop_words`` drops (ValueError naming ``stop_words`` if it is a string
        that is neither 'english', 'none' nor a file)."""
        if self.stop_words is None:
            return frozenset()
        return resolve_stop_words(self.stop_words)

    def record(self) -> dict[str, Any]:
        """The settings as JSON (the model's provenance)."""
        sw = self.stop_words
        return {"min_df": self.min_df, "max_df": self.max_df, "keep_n": self.keep_n,
                "stop_words": list(sw) if isinstance(sw, tuple) else sw}

    def describe(self) -> str:
        """``min_df=3, max_df=0.5`` (the filters that are on)."""
        on = [f"{k}={v!r}" for k, v in self.record().items() if v is not None]
        return ", ".join(on) or "no filter"


def select_words(store: CooccurrenceStore, selection: Selection) -> np.ndarray:
    """The word ids (sorted, so in the store's order) that ``selection`` keeps of ``store``.

    Parameters
    ----------
    store : CooccurrenceStore
        Its ``doc_freq`` (V,) and ``n_docs`` are the statistics.
    selection : Selection

    Returns
    -------
    ndarray of int64, shape (n,)
    """
    df = np.asarray(store.doc_freq, dtype=np.int64)
    keep = np.ones(store.V, dtype=bool)
    stops = selection.stop_set()
    if stops:
        keep &= np.fromiter((t not in stops for t in store.vocab), bool, store.V)
    if selection.min_df is not None:
        keep &= df >= selection.min_df
    if selection.max_df is not None:
        keep &= df <= selection.max_df * store.n_docs  # as Vocabulary.from_stats
    ids = np.flatnonzero(keep)
    if selection.keep_n is not None and ids.size > selection.keep_n:
        vocab = store.vocab
        ranked = sorted(ids.tolist(), key=lambda i: (-int(df[i]), vocab[i]))
        ids = np.sort(np.asarray(ranked[: selection.keep_n], dtype=np.int64))
    return ids.astype(np.int64)


def selected_store(store: CooccurrenceStore, selection: Selection, scratch: str,
                   n_topics: int) -> tuple[CooccurrenceStore, dict[str, Any] | None]:
    """The store a fit runs on: ``store`` itself when the selection keeps every word (or is
    the defaults' and cannot apply), else a derived store of the selected words written in
    ``scratch`` (:func:`derive_store`). Returns it and the selection's record (None: no
    selection).

    Raises
    ------
    StoreError
        A selection asked of a store built before input lengths, or of one without document
        frequencies; a selection that leaves fewer than ``max(2, n_topics)`` words.
    """
    if selection.is_noop:
        return store, None
    why = _cannot_select(store)
    if why is not None:
        if store.counts_known and select_words(store, selection).size == store.V:
            # the whole vocabulary: nothing to select
            return store, dict(selection.record(), store_V=store.V, V=store.V)
        if not selection.explicit:
            log.info("%s: the default vocabulary selection (%s) is skipped: the store %s",
                     store.path, selection.describe(), why)
            return store, None
        raise StoreError(f"{store.path}: cannot select words at fit time ({selection.describe()}"
                         f"): the store {why}")
    ids = select_words(store, selection)
    if ids.size < max(2, int(n_topics)):
        raise StoreError(
            f"{store.path}: the vocabulary selection ({selection.describe()}) keeps "
            f"{ids.size} of its {store.V:,} words; n_topics={n_topics} needs at least "
            f"{max(2, int(n_topics))}")
    record = dict(selection.record(), store_V=store.V, V=int(ids.size))
    if ids.size == store.V:
        return store, record
    derived = derive_store(store, ids, os.path.join(scratch, DERIVED_NAME), record)
    log.info("%s: %d of %d words selected (%s)", store.path, ids.size, store.V,
             selection.describe())
    return derived, record


def _cannot_select(store: CooccurrenceStore) -> str | None:
    """Why no sub-vocabulary of ``store`` is exact (the end of a sentence), or None."""
    if not store.counts_known:
        return "records no document frequencies to select by (a population Q)"
    if store.doc_length != DOC_LENGTH:
        return ("was built before fit-time vocabulary selection (its document lengths count "
                "only its own vocabulary); re-ingest its inputs into a new store to select "
                "words at fit time")
    return None


def derive_store(source: CooccurrenceStore, ids: np.ndarray, path: str,
                 record: dict[str, Any]) -> CooccurrenceStore:
    """A new store at ``path`` holding the words ``ids`` of ``source``: Q_sum[ids][:, ids],
    their ``word_counts`` and ``doc_freq``, the same ``n_docs``, ``n_tokens``, configuration
    (``selection``: ``record`` added) and manifest of inputs, and its own total ``q_mass``.

    Memory: a few blocks of Q per thread, never a dense V×V.

    Parameters
    ----------
    source : CooccurrenceStore
    ids : ndarray of int, shape (n,)
        Sorted, distinct word ids of ``source``.
    path : str
        Where the store is created (must not exist).
    record : dict
        The selection, kept in the new store's configuration.

    Returns
    -------
    CooccurrenceStore
        The new store (head version 1), with no reader's lease.
    """
    ids = np.asarray(ids, dtype=np.int64)
    terms = [source.vocab[i] for i in ids.tolist()]
    target = CooccurrenceStore.create(path, terms, chunk_size=min(ids.size, source.chunk_size),
                                      config=dict(source.config, selection=record))
    head = source.head_record()  # the head's counts (the store's own record of them)
    dropped = np.setdiff1d(np.arange(source.V), ids)
    oov = int(head.get("n_oov_tokens", 0)) + int(np.asarray(source.word_counts)[dropped].sum())
    txn = target.begin()
    try:
        written, nnz, kinds, mass = _copy_blocks(source, ids, target, txn)
        target.commit(
            txn, written=written, n_docs=source.n_docs, n_tokens=source.n_tokens,
            word_counts=np.asarray(source.word_counts)[ids],
            doc_freq=np.asarray(source.doc_freq)[ids],
            n_skipped_docs=int(head.get("n_skipped_docs", 0)), n_oov_tokens=oov,
            n_replaced_bytes=int(head.get("n_replaced_bytes", 0)), block_nnz=nnz,
            sparse=kinds[SPARSE], mirrored=kinds[MIRRORED],
            mirrored_dense=kinds[MIRRORED_DENSE],
            new_sources=[ManifestEntry({k: v for k, v in s.items() if k != "version"})
                         for s in source.sources],
            extra={"q_mass": mass, "counts_known": source.counts_known},
        )
    except BaseException:
        target.abort(txn)
        raise
    return target


def _copy_blocks(source: CooccurrenceStore, ids: np.ndarray, target: CooccurrenceStore,
                 txn: Any) -> tuple[list[tuple[int, int]], dict[tuple[int, int], int],
                                    dict[int, list[tuple[int, int]]], float]:
    """Write the target's blocks (I, J), I ≤ J, into the round ``txn``, each gathered from
    the source blocks it touches, in a pool of threads, dense or sparse
    (:func:`~streamtopic.store.write_q_block`); their mirror images read them transposed.
    Returns the blocks written, their non-zeros, the blocks of each stored kind other than
    dense (``SPARSE``, ``MIRRORED``, ``MIRRORED_DENSE``) and the total of the new stored sum
    (summed in a fixed order: deterministic)."""
    src = QBlocks.from_store(source)
    src.scale = 1.0  # the stored sum itself, not Q
    arr = target.staging_q(txn)  # as from_array writes its blocks
    nb = target.n_blocks

    def job(ij: tuple[int, int]) -> tuple[int, bool, float]:
        i, j = ij
        rows, cols = target.block_slices(i, j)
        block = _gather(src, ids[rows], ids[cols])
        n, sparse = write_q_block(target.path, txn.number, rows, cols, block, arr)
        return n, sparse, float(block.sum()) * (1.0 if i == j else 2.0)

    pairs = [(i, j) for i in range(nb) for j in range(i, nb)]
    with ThreadPoolExecutor(max(1, min(usable_cores(), len(pairs)))) as pool:
        results = list(pool.map(job, pairs))
    written: list[tuple[int, int]] = []
    nnz: dict[tuple[int, int], int] = {}
    kinds: dict[int, list[tuple[int, int]]] = {SPARSE: [], MIRRORED: [], MIRRORED_DENSE: []}
    mass = 0.0
    for (i, j), (n, is_sparse, total) in zip(pairs, results, strict=True):
        mass += total
        if n:
            both = [(i, j)] if i == j else [(i, j), (j, i)]
            written += both
            nnz.update(dict.fromkeys(both, n))
            if is_sparse:
                kinds[SPARSE].append((i, j))
            if i != j:
                kinds[MIRRORED if is_sparse else MIRRORED_DENSE].append((j, i))
    return written, nnz, kinds, mass


def _gather(src: Any, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The stored sum's entries [rows][:, cols] (sorted word ids of the source), read from
    the source blocks they fall in: (len(rows), len(cols)) float64."""
    c = src.chunk
    out = np.zeros((rows.size, cols.size))
    rb = np.searchsorted(rows, np.arange(src.n_blocks + 1) * c)
    cb = np.searchsorted(cols, np.arange(src.n_blocks + 1) * c)
    for a in range(src.n_blocks):
        ra = slice(rb[a], rb[a + 1])
        if ra.start == ra.stop:
            continue
        for b in range(src.n_blocks):
            sb = slice(cb[b], cb[b + 1])
            if sb.start == sb.stop:
                continue
            block = src.block(a, b)
            out[ra, sb] = block[np.ix_(rows[ra] - a * c, cols[sb] - b * c)]
    return out
