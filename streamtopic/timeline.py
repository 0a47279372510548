"""Topics over time: each topic's prevalence in each slice of a store's documents.

A store's versions are its slices: the documents each ingest added (a daily batch, a month
of news). :func:`timeline` infers the topic proportions θ of every document of a slice with
the model's topics fixed (:func:`~streamtopic.inference.infer_topics`, the model's α as
prior) and weights them by the documents' lengths: topic k's prevalence in a slice is the
share of the slice's tokens it explains, Σ_d n_d θ_dk / Σ_d n_d, the same measure as the
model's ``topic_prevalence_`` over the whole corpus.

Cost: one pass over the store's documents (its token cache; no text is tokenised again), a
chunk of documents at a time in this process: memory of one chunk's counts and θ.
"""

from __future__ import annotations

import csv
import os
from typing import Any

import numpy as np

from ._io import written_aside
from .corpus import recorded_corpus
from .fitted import ModelError, Slice, check_is_fitted, store_record
from .inference import chunk_counts, fitted_store, infer_topics, model_prior
from .store import CooccurrenceStore

__all__ = ["Slice", "timeline", "write_timeline"]


def timeline(model: Any) -> list[Slice]:
    """Each topic's prevalence per version of the store ``model`` was fitted on, for the
    versions up to the one it was fitted on (a version that added no documents is left out).

    Raises
    ------
    ModelError
        The store is gone, or records no documents that can be read again.
    """
    check_is_fitted(model)
    path = fitted_store(model, "a timeline reads its documents")
    upto = int(store_record(model).get("version", 0))
    vocab = tuple(model.vocab_)
    index = {w: i for i, w in enumerate(vocab)}
    alpha = model_prior(model)
    out = []
    with CooccurrenceStore.open(path) as store:
        for v in range(1, upto + 1):
            corpus = recorded_corpus(store, after=v - 1, upto=v)
            if corpus is None:
                continue
            weighted = np.zeros(len(alpha))
            docs = tokens = 0
            for chunk in corpus.onto(vocab).iter_chunks():
                H = chunk_counts(chunk, vocab, index)[0]
                lengths = np.asarray(H.sum(axis=1)).ravel()
                theta = infer_topics(model.components_, H, alpha=alpha)
                weighted += lengths @ theta
                docs, tokens = docs + H.shape[0], tokens + int(lengths.sum())
            if docs:
                out.append(Slice(v, docs, tokens, weighted / max(float(tokens), 1.0)))
    if not out:
        raise ModelError(f"{path}: records no documents that can be read again")
    return out


def write_timeline(slices: list[Slice], path: str | os.PathLike[str]) -> None:
    """The timeline as CSV: one row per slice (version, documents, tokens, then each topic's
    prevalence), written aside and renamed."""
    K = slices[0].prevalence.size if slices else 0
    with written_aside(os.fspath(path)) as tmp, open(tmp, "w", newline="",
                                                    encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["version", "n_docs", "n_tokens", *(f"topic_{k}" for k in range(K))])
        for s in slices:
            w.writerow([s.version, s.n_docs, s.n_tokens, *(f"{x:.6f}" for x in s.prevalence)])
