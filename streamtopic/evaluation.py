"""Scoring a fitted model: unique top words, coherence, NPMI and held-out log-likelihood.

:func:`evaluate` gives the report ``streamtopic evaluate`` prints (and writes as JSON):

* ``unique_words``: per topic, how many of its top N words are in no other topic's top N
  (:func:`~streamtopic.metrics.unique_words`);
* ``coherence``: the document co-occurrence coherence of each topic's top N words
  (:func:`~streamtopic.metrics.coherence`) on a reference corpus, by default the training
  inputs recorded in the model's store;
* ``npmi``: the mean normalised PMI of each topic's top ``npmi_top`` words from document
  co-occurrence in the same reference corpus (:func:`~streamtopic.metrics.npmi`), counted
  in the same single pass as the coherence;
* ``heldout``: the log-likelihood per token of held-out documents by document completion
  (:func:`~streamtopic.inference.document_completion`), when they are given.

Text is tokenised as the model's store tokenised its training text.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from numbers import Integral
from typing import Any

import numpy as np

from . import metrics
from ._params import Interval, validate_params
from .corpus import Corpus, read_corpus, recorded_corpus
from .fitted import check_is_fitted
from .inference import document_completion, model_tokenizer
from .model import AnchorTopicModel
from .store import CooccurrenceStore
from .vocabulary import Tokenizer

__all__ = ["evaluate"]

_PARAMS: dict[str, list[Any]] = {
    "top_n": [Interval(Integral, 2, None)],
    "npmi_top": [Interval(Integral, 2, None)],
    "seed": [Interval(Integral, 0, None)],
    "strip_headers": ["boolean"],
    "progress": ["boolean"],
}

def _model_store(model: AnchorTopicModel, stack: ExitStack) -> CooccurrenceStore | None:
    """The store the model was fitted on, opened (and closed by ``stack``), if it is still
    there."""
    path = model.diagnostics_.get("store", {}).get("path")
    if not path or not CooccurrenceStore.is_store(path):
        return None
    return stack.enter_context(CooccurrenceStore.open(path))


def _as_corpus(inputs: Any, tokenizer: Tokenizer, strip_headers: bool) -> Corpus | None:
    """``inputs`` read as a corpus (a Corpus as it is; None or no input: None)."""
    if inputs is None or isinstance(inputs, Corpus):
        return inputs
    paths = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    if not paths:
        return None
    return read_corpus([os.fspath(p) for p in paths], tokenizer=tokenizer,
                       strip_headers=strip_headers)


def _names(inputs: Any, corpus: Corpus) -> list[Any]:
    """How the report names a corpus: its inputs as given, else its sources' paths."""
    if isinstance(inputs, (str, os.PathLike)):
        return [os.fspath(inputs)]
    if inputs is not None and not hasattr(inputs, "sources"):
        return [os.fspath(p) for p in inputs]
    return [[s.path for s in corpus.sources]]


def _coherence(model: AnchorTopicModel, order: np.ndarray, npmi_top: int, reference: Corpus,
               progress: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Coherence of the (K, N) top words ``order`` and NPMI of their first ``npmi_top``,
    from one pass over ``reference``."""
    coh, npmi = metrics.coherence_and_npmi(order, reference, npmi_top=npmi_top,
                                           vocab=model.vocab_, progress=progress)
    return ({"mean": float(np.mean(coh)), "per_topic": coh.tolist()},
            {"mean": float(np.mean(npmi)), "per_topic": npmi.tolist(), "top": npmi_top})


def _heldout(model: AnchorTopicModel, heldout: Corpus, seed: int,
             progress: bool) -> dict[str, Any]:
    dc = document_completion(model, heldout, seed=seed, progress=progress)
    return {"per_token": dc.per_token, "n_docs": dc.n_docs, "n_tokens": dc.n_tokens,
            "n_oov_tokens": dc.n_oov_tokens}


def evaluate(
    model: AnchorTopicModel | str | os.PathLike[str],
    *,
    corpus: Any = None,
    heldout: Any = None,
    top_n: int = 20,
    npmi_top: int = 10,
    seed: int = 0,
    stop_words: str | None = None,
    strip_headers: bool = True,
    progress: bool = False,
) -> dict[str, Any]:
    """Score a model: unique top words, coherence, NPMI and held-out log-likelihood per token.

    Parameters
    ----------
    model : AnchorTopicModel or path
        A fitted model, or the path of a saved one.
    corpus : path, list of paths or Corpus, optional
        Reference corpus of the coherence and the NPMI. Default: the training inputs recorded in the
        model's store, if the store and its inputs are still there (else no coherence).
    heldout : path, list of paths or Corpus, optional
        Held-out documents for the log-likelihood by document completion (none: no
        ``heldout`` entry).
    top_n : int
        N, the top words per topic that are scored (>= 2).
    npmi_top : int
        The top words per topic whose pairs the NPMI averages (>= 2; 10, as in Lau et al.
        2014; at most ``top_n`` are used).
    seed : int
        Seed of document completion's split of each document into halves.
    stop_words : {'english', 'none'} or path, optional
        Stop words for the text of ``corpus`` and ``heldout`` given as paths (default: as
        the model's store was built).
    strip_headers : bool
        How files of ``corpus`` and ``heldout`` are read (see :func:`~streamtopic.ingest`);
        the recorded training inputs are read as they were ingested.
    progress : bool
        Show progress bars.

    Returns
    -------
    dict
        ``model`` (its absolute path; None for a model object), ``n_topics``, ``top_n``,
        ``unique_words`` (``mean``, ``per_topic``: K counts), and when computed
        ``coherence`` (``mean``, ``per_topic``: K log-ratios, ``corpus``: its inputs),
        ``npmi`` (``mean``, ``per_topic``: K values in [−1, 1], ``top``, ``corpus``) and
        ``heldout`` (``per_token`` in nats, ``n_docs``, ``n_tokens``, ``n_oov_tokens``,
        ``corpus``).
    """
    validate_params(_PARAMS, {"top_n": top_n, "npmi_top": npmi_top, "seed": seed,
                              "strip_headers": strip_headers, "progress": progress})
    path = None if isinstance(model, AnchorTopicModel) else os.path.abspath(model)
    fitted = model if isinstance(model, AnchorTopicModel) else AnchorTopicModel.load(model)
    check_is_fitted(fitted)
    unique = metrics.unique_words(fitted.components_, top_n=top_n)
    report: dict[str, Any] = {
        "model": path, "n_topics": len(fitted.anchors_), "top_n": top_n,
        "unique_words": {"mean": float(np.mean(unique)), "per_topic": unique.tolist()}}
    order = np.argsort(-fitted.components_, axis=1, kind="stable")[:, :top_n]
    with ExitStack() as stack:
        store = _model_store(fitted, stack)
        tokenizer = model_tokenizer(fitted, stop_words)
        reference = _as_corpus(corpus, tokenizer, strip_headers)
        if reference is None and store is not None:
            corpus, reference = None, recorded_corpus(store)
        if reference is not None:
            coh, npmi = _coherence(fitted, order, min(npmi_top, top_n), reference, progress)
            names = _names(corpus, reference)
            report["coherence"] = {**coh, "corpus": names}
            report["npmi"] = {**npmi, "corpus": names}
        docs = _as_corpus(heldout, tokenizer, strip_headers)
        if docs is not None:
            report["heldout"] = {**_heldout(fitted, docs, seed, progress),
                                 "corpus": _names(heldout, docs)}
    return report
