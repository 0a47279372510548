"""``streamtopic.fit``: a topic model of any source, as ``streamtopic fit`` makes it.

:func:`fit` takes what the command line's ``fit`` takes — a co-occurrence store, raw input
(files, directories, archives, globs: ingested first into a store) — and a document-term
count matrix besides, and returns the fitted :class:`~streamtopic.model.AnchorTopicModel`.
The command line calls it (and adds what only it does: checking its paths, printing, saving
the model), so the two give the same model for the same source and options.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import Any

from . import _warmup
from .cooccurrence import IngestReport, ingest
from .corpus import Corpus, CorpusError, expand_inputs
from .model import AnchorTopicModel
from .pipeline import is_count_matrix
from .store import CooccurrenceStore

__all__ = ["fit", "numeric_inputs"]

#: ``scheduler(stage, numeric)``: the context a stage ('ingest' or 'fit') runs in, given
#: whether its input is numerical (UCI, HDF5, a store, a matrix: threads suffice).
Scheduler = Callable[[str, bool], AbstractContextManager[Any]]


def _no_scheduler(stage: str, numeric: bool) -> AbstractContextManager[Any]:
    """The current Dask scheduler for every stage (Dask's conventions)."""
    return nullcontext()


def numeric_inputs(inputs: Sequence[str | os.PathLike[str]], fmt: str = "auto") -> bool:
    """Whether every input is numerical (UCI or HDF5): no tokenising, threads suffice."""
    try:
        return all(f in ("uci", "hdf5") for _, f in expand_inputs(list(inputs), fmt))
    except (CorpusError, OSError):
        return False  # the ingest itself reports the error


def fit(
    source: Any,
    n_topics: int = 20,
    *,
    store: str | os.PathLike[str] | None = None,
    format: str = "auto",
    vocab: str | None = None,
    min_df: int | None = None,
    max_df: float | None = None,
    keep_n: int | None = None,
    stop_words: str | Sequence[str] | None = None,
    text_field: str = "text",
    strip_headers: bool = True,
    blocksize: int | None = None,
    chunk_size: int | None = None,
    max_doc_tokens: int | None = None,
    feature_names: Sequence[str] | None = None,
    progress: bool = True,
    scheduler: Scheduler = _no_scheduler,
    on_ingest: Callable[[IngestReport], None] | None = None,
    **params: Any,
) -> AnchorTopicModel:
    """Fit a topic model to ``source``, as ``streamtopic fit SOURCE`` does.

    Parameters
    ----------
    source : CooccurrenceStore, path, raw input, or sparse matrix or array (n_docs, V)
        A store (or its path); raw input (paths, globs, directories, archives, in the
        formats of :func:`~streamtopic.corpus.read_corpus`, or a
        :class:`~streamtopic.corpus.Corpus`), ingested first into ``store``
        with the reading options below; or document-term counts (``feature_names`` names
        their columns).
    n_topics : int
        K.
    store : path, optional
        The store raw input is ingested into; an existing one is reused, its vocabulary
        settings standing (``streamtopic fit --store``). Default: a temporary store,
        removed when the fit ends (the refinement reads it; later uses of the training
        corpus, such as ``transform`` of it, then cannot).
    format, vocab, text_field, strip_headers, blocksize, chunk_size, max_doc_tokens
        How raw input is read and stored (:func:`~streamtopic.cooccurrence.ingest`).
    min_df, max_df, keep_n, stop_words
        A new store's vocabulary pruning, and the model's vocabulary chosen among a store's
        words at fit time (the estimator's parameters of the same names).
    feature_names : sequence of str, optional
        The words of a matrix's columns.
    progress : bool
        Progress bars.
    scheduler : callable, optional
        ``scheduler(stage, numeric)``: the context each stage runs in (the command line
        runs tokenising on its process cluster, the numerical stages on threads). Default:
        the current Dask scheduler.
    on_ingest : callable, optional
        Called with the ingest's :class:`~streamtopic.cooccurrence.IngestReport`.
    **params
        The estimator's other parameters (:class:`~streamtopic.model.AnchorTopicModel`:
        ``method``, ``seed``, ``memory_budget`` …; ``memory_budget`` also bounds the
        ingest's memory).

    Returns
    -------
    AnchorTopicModel
        Fitted.
    """
    model = AnchorTopicModel(n_topics, progress=progress, **params)
    model.set_params(min_df=min_df, max_df=max_df, keep_n=keep_n, stop_words=stop_words)
    if model.fit_settings().refine_passes != 0:  # a bad parameter stops before the ingest
        _warmup.start()  # the EM kernel compiles while the ingest and the spectral stages run
    if is_count_matrix(source):
        with scheduler("fit", True):
            return model.fit(source, feature_names=feature_names)
    if isinstance(source, CooccurrenceStore) or (
            isinstance(source, (str, os.PathLike)) and CooccurrenceStore.is_store(source)):
        with scheduler("fit", True):
            return model.fit(source)
    reading = dict(format=format, vocab=vocab, min_df=min_df, max_df=max_df, keep_n=keep_n,
                   stop_words=stop_words, text_field=text_field, strip_headers=strip_headers,
                   blocksize=blocksize, chunk_size=chunk_size, max_doc_tokens=max_doc_tokens)
    with ExitStack() as stack:
        if store is None:
            store = os.path.join(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="streamtopic-fit-store-")), "store.zarr")
        inputs, numeric = _raw_inputs(source, format)
        with scheduler("ingest", numeric):
            report = _ingest_raw(inputs, store, reading, model.memory_budget, progress)
        if on_ingest is not None:
            on_ingest(report)
        with scheduler("fit", numeric):
            return model.fit(store)


def _raw_inputs(source: Any, fmt: str) -> tuple[Any, bool]:
    """Raw input as :func:`~streamtopic.cooccurrence.ingest` takes it (a :class:`Corpus`
    as it is, paths as a list), and whether it is numerical."""
    if isinstance(source, Corpus):
        return source, all(s.format in ("uci", "hdf5") for s in source.sources)
    inputs = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    return inputs, numeric_inputs(inputs, fmt)


def _ingest_raw(inputs: list[Any], store: str | os.PathLike[str], reading: dict[str, Any],
                memory_budget: int | None, progress: bool) -> IngestReport:
    """Raw input ingested into ``store`` for a fit (``streamtopic fit``'s ingest): an
    existing store is reused, its vocabulary settings standing (the options that build a
    new store are not passed); inputs already in it are skipped."""
    new = not os.path.exists(store)
    r = reading
    return ingest(
        inputs, store, format=r["format"], vocab=r["vocab"] if new else None,
        min_df=r["min_df"] if new else None, max_df=r["max_df"] if new else None,
        keep_n=r["keep_n"] if new and r["keep_n"] is not None else "default",
        stop_words=r["stop_words"], text_field=r["text_field"], skip_existing=True,
        blocksize=r["blocksize"], chunk_size=r["chunk_size"], progress=progress,
        strip_headers=r["strip_headers"], max_doc_tokens=r["max_doc_tokens"],
        memory_budget=memory_budget)
