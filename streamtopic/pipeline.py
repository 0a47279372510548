"""A fit from its plan to its record: the stages in order, as module-level functions.

:func:`fit_store` takes a frozen :class:`~streamtopic.spectral.FitPlan` and a store and
returns the typed :class:`~streamtopic.fitted.FittedTopics`:

1. the fit-time vocabulary (:func:`~streamtopic.selection.selected_store`);
2. the training corpus the refinement reads (the store's token cache, or its recorded
   inputs; :func:`training_corpus`);
3. the spectral stages, on the core vocabulary or on the whole stored Q
   (:mod:`~streamtopic.spectral`);
4. the refinement, EM over the corpus (:func:`~streamtopic.refinement.refine_topics`);
5. α from the final topics (:mod:`~streamtopic.hyperparameters`), and the fit's record.

:func:`fit_matrix` does the same for counts held in memory, ingested first into a store in
the fit's scratch directory. The estimator (:class:`~streamtopic.model.AnchorTopicModel`)
makes the plan, calls one of them and adopts the record; nothing of a run is kept on it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from . import _warmup
from .cooccurrence import ingest
from .corpus import HDF5CorpusWriter, recorded_corpus
from .drift import match_topics
from .fitted import FittedTopics, ModelError
from .hyperparameters import estimate_alpha, topic_cooccurrence_from_topics
from .refinement import ALPHA, prior_alpha, refine_topics
from .seeding import NamedAnchors, pinned_entries, settings_record
from .selection import selected_store
from .spectral import (
    FitPlan,
    Seeding,
    Spectral,
    auto_core_size,
    core_words,
    resolve_seeding,
    spectral_core,
    spectral_store,
)
from .store import CooccurrenceStore, StoreError
from .workspace import fit_scratch, scratch_root

__all__ = ["fit_matrix", "fit_store", "is_count_matrix", "opened_store", "training_corpus",
           "update_store"]

log = logging.getLogger("streamtopic")

Array = npt.NDArray[Any]


@contextmanager
def opened_store(X: Any) -> Iterator[CooccurrenceStore]:
    """The store to fit, not empty and with every block of Q it recorded on disk (a block
    the fit does not read is no less missing): ``X`` itself, or the store at the path ``X``,
    opened here and closed at the end (releasing its lease on the version it read)."""
    if isinstance(X, CooccurrenceStore):
        store = X
    elif isinstance(X, (str, os.PathLike)):
        store = CooccurrenceStore.open(X)
    else:
        raise TypeError(
            f"fit expects a CooccurrenceStore or a store path, got {type(X).__name__}; "
            "ingest a corpus first (streamtopic.ingest)"
        )
    try:
        if store.n_docs == 0:
            raise StoreError(f"{store.path}: the store is empty (no documents ingested)")
        store.check_arrays()
        store.check_blocks_present()
        yield store
    finally:
        if store is not X:
            store.close()


def fit_store(plan: FitPlan, X: CooccurrenceStore | str | os.PathLike[str]) -> FittedTopics:
    """Fit the store ``X`` (or the store at that path) by ``plan``: the stages of the module
    docstring. The fit's scratch directory and the rectified arrays it uses from the store's
    cache are held until the stages end.

    Raises
    ------
    ValueError
        ``n_topics`` not below the store's V (before anything is written).
    """
    if plan.settings.refine_passes != 0:  # the EM kernel compiles while the spectral stages run
        _warmup.start()
    with opened_store(X) as source:
        if plan.n_topics >= source.V:  # refused before anything is written
            raise ValueError(f"n_topics={plan.n_topics}: must be below the {source.V:,} "
                             f"words of {source.path}")
        seconds: dict[str, float] = {}
        with ExitStack() as held, fit_scratch(scratch_root(plan.scratch_dir, source.path),
                                              source.path) as scratch:
            t0 = time.perf_counter()
            store, selected = selected_store(source, plan.selection, scratch, plan.n_topics)
            if selected is not None:
                seconds["select"] = time.perf_counter() - t0
            # the source's own record of its corpus (its token cache): a store derived
            # for a fit-time vocabulary holds only Q; refinement maps the words onto it
            seeds = resolve_seeding(plan, store)  # bad named words: before any stage
            corpus = None if plan.preview else training_corpus(plan, source)
            spectral, _ = _spectral(plan, store, scratch, seconds, held, seeds,
                                    refining=corpus is not None)
            refined = None if corpus is None else _refine(
                plan, spectral.start, corpus, store, scratch, seconds,
                pinned=_pinned(seeds, spectral.start.shape),
                alpha=prior_alpha(spectral.R, spectral.prevalence))
            topics = _topics(plan, store, spectral, refined, seconds)
        topics.diagnostics["seeding"] = settings_record(seeds.named, plan.exclude_words,
                                                        plan.tandem)
        topics.diagnostics["store"] = store_record(source)
        topics.diagnostics["vocabulary"] = selected
    return topics


def fit_matrix(plan: FitPlan, X: Any, feature_names: Sequence[str] | None) -> FittedTopics:
    """Fit counts held in memory (n_docs×V): written as an HDF5 corpus and ingested with
    every column kept (the store's vocabulary fixed to the columns, so the model's words are
    the V columns in order), in a scratch directory removed at the end."""
    H = count_matrix(X)
    names = ([f"x{i}" for i in range(H.shape[1])] if feature_names is None
             else [str(w) for w in feature_names])
    if len(names) != H.shape[1] or len(set(names)) != len(names):
        raise ValueError(f"feature_names: expected {H.shape[1]} distinct words, one per "
                         f"column of X; got {len(names)} ({len(set(names))} distinct)")
    here = os.path.join(os.getcwd(), "in-memory")  # a cluster's workers share the cwd
    with fit_scratch(scratch_root(plan.scratch_dir, here), here) as scratch:
        corpus, vocab = os.path.join(scratch, "X.h5"), os.path.join(scratch, "vocab.txt")
        with HDF5CorpusWriter(corpus, names) as w:
            w.append(H, names)
        with open(vocab, "w", encoding="utf-8") as fh:
            fh.write("".join(f"{w}\n" for w in names))
        store = os.path.join(scratch, "X.zarr")
        ingest(corpus, store, vocab=vocab, progress=plan.progress,
               memory_budget=plan.budget.bytes)
        return fit_store(plan, store)


def update_store(plan: FitPlan, X: CooccurrenceStore | str | os.PathLike[str],
                 previous: FittedTopics, corpus: Any | None,
                 prior_counts: Array | None) -> FittedTopics:
    """Fit the store ``X`` again after new data, keeping ``previous``' K topics at their
    indices: the spectral stages on the new Q; their topics put in the previous topics'
    order (:func:`~streamtopic.drift.match_topics` on the core's words, so anchors and R
    follow); then, unless the plan has no refinement or ``corpus`` is None, EM from the
    previous topics (K×V) over ``corpus`` (the new documents) with ``prior_counts`` (K×V,
    the expected counts of the documents the previous topics were fitted on) held fixed
    (:func:`~streamtopic.refinement.refine_topics`), which continues each topic where it
    was at the cost of the new documents alone.

    A plan of more topics than ``previous`` (``plan.n_topics`` = K + N, its
    ``anchor_words`` the previous anchors) lets N new topics in: the anchor search keeps the
    previous anchors first, in order, and finds N more with their rows projected out; the
    new topics start from their spectral rows, with no old counts.

    Raises
    ------
    ModelError
        The store's vocabulary is not the previous model's.
    """
    with opened_store(X) as store:
        if list(store.vocab) != list(previous.vocab):
            raise ModelError(f"{store.path}: its vocabulary ({store.V:,} words) is not the "
                             f"model's ({len(previous.vocab):,}: chosen at fit time, or the "
                             "store grew); an update continues the same words: fit anew")
        K, seconds = previous.components.shape[0], dict[str, float]()
        with ExitStack() as held, fit_scratch(scratch_root(plan.scratch_dir, store.path),
                                              store.path) as scratch:
            seeds = resolve_seeding(plan, store)
            spectral, core = _spectral(plan, store, scratch, seconds, held, seeds,
                                       refining=True)
            if plan.n_topics == K:
                spectral = _in_order_of(spectral, previous.components, core)
            start = np.vstack([previous.components, spectral.start[K:]])
            refined = None
            if corpus is not None and plan.settings.refine_passes != 0:
                prior = None if prior_counts is None else np.vstack(
                    [prior_counts, np.zeros((plan.n_topics - K, start.shape[1]))])
                refined = _refine(plan, start, corpus, store, scratch, seconds, prior,
                                  pinned=pinned_entries(_named_before(seeds, previous),
                                                        *start.shape),
                                  alpha=prior_alpha(spectral.R, spectral.prevalence))
            topics = _topics(plan, store, spectral, refined, seconds)
        topics.diagnostics["seeding"] = previous.diagnostics.get("seeding")
        topics.diagnostics["store"] = store_record(store)
        topics.diagnostics["vocabulary"] = None
    return topics


def _named_before(seeds: Seeding, previous: FittedTopics) -> NamedAnchors | None:
    """The named anchors of ``previous`` among the update's (which names every previous
    anchor when topics are added): its first m named topics, as its seeding recorded."""
    record = previous.diagnostics.get("seeding") or {}
    m = len(record.get("named") or [])
    if seeds.named is None or m == 0:
        return None
    named = seeds.named
    keep = named.topic < m
    return NamedAnchors(named.words[:m], named.ids[keep], named.topic[keep])


def _spectral(plan: FitPlan, store: CooccurrenceStore, scratch: str, seconds: dict[str, float],
              held: ExitStack, seeds: Seeding, *, refining: bool
              ) -> tuple[Spectral, Array | None]:
    """The spectral stages on the core vocabulary (:func:`~streamtopic.spectral.core_words`)
    or, without one, on the whole stored Q; and the core (sorted word ids; None: whole)."""
    core = core_words(plan, store, refining=refining, seeds=seeds)
    if core is None:
        return spectral_store(plan, store, scratch, seconds, held, seeds), None
    return spectral_core(plan, store, core, seconds, seeds), core


def _in_order_of(fit: Spectral, previous: Array, core: Array | None) -> Spectral:
    """The spectral stages' result with its topics in the order of the ``previous`` topics
    (K×V) they match best, compared on the words the stages fitted (the core's, each topic
    renormalised there): A's columns, the prevalence, R, the anchors."""
    words = np.arange(previous.shape[1]) if core is None else core
    before = previous[:, words]
    before = before / np.maximum(before.sum(axis=1, keepdims=True), 1e-300)
    after = fit.A[words].T
    after = after / np.maximum(after.sum(axis=1, keepdims=True), 1e-300)
    order = match_topics(before, after)
    res = fit.anchors
    anchors = replace(res, anchors=np.asarray(res.anchors)[order])
    return replace(fit, A=fit.A[:, order], prevalence=fit.prevalence[order],
                   R=fit.R[np.ix_(order, order)], anchors=anchors, start=fit.start[order])


def training_corpus(plan: FitPlan, store: CooccurrenceStore) -> Any | None:
    """The corpus the refinement reads (the inputs recorded in the store), or None when
    there is no refinement. ``refine_passes='auto'`` skips it, with a warning, when no
    recorded input exists any more (e.g. a population Q); a number of passes needs it."""
    rp = plan.settings.refine_passes
    if rp == 0:
        return None
    corpus = recorded_corpus(store)  # StoreError: an input missing or changed
    if corpus is None:
        if rp == "auto":
            log.warning("%s: no recorded input can be read again, so the topics are not "
                        "refined (the spectral stages use the whole vocabulary)", store.path)
            return None
        raise ModelError(
            f"refine_passes={rp}: {store.path} records no input that can be read again "
            "(a population Q, or text tokenised by a custom analyzer); refinement reads "
            "the training corpus"
        )
    return corpus


def _pinned(seeds: Seeding, shape: tuple[int, ...]) -> Array | None:
    """The topics' entries (K×V bool) the refinement holds at 0: each named word in the
    topics other than its own (:func:`~streamtopic.seeding.pinned_entries`)."""
    return pinned_entries(seeds.named, int(shape[0]), int(shape[1]))


def _refine(plan: FitPlan, start: Array, corpus: Any, store: CooccurrenceStore, scratch: str,
            seconds: dict[str, float], prior_counts: Array | None = None,
            pinned: Array | None = None, alpha: float | Array = ALPHA) -> Any:
    """EM over the corpus from ``start`` (K×V): until it converges ('auto'), or a set
    number of passes; ``prior_counts`` (K×V) the fixed counts of documents outside it,
    ``pinned`` (K×V bool) the entries held at 0, ``alpha`` the prior of θ_d (a number or
    one per topic, :func:`~streamtopic.refinement.prior_alpha`)."""
    rp = plan.settings.refine_passes
    t0 = time.perf_counter()
    _warmup.wait()  # the EM kernel's compilation in another process (a first fit), if under way
    refined = refine_topics(start, corpus, list(store.vocab),
                            passes=None if rp == "auto" else int(rp), seed=plan.seed,
                            scratch=scratch, progress=plan.progress,
                            prior_counts=prior_counts, pinned=pinned, alpha=alpha)
    seconds["refine"] = time.perf_counter() - t0
    return refined


def _topics(plan: FitPlan, store: CooccurrenceStore, fit: Spectral, refined: Any,
            seconds: dict[str, float]) -> FittedTopics:
    """The fit's record from the spectral stages' and the refinement's results."""
    A, prevalence = fit.A, fit.prevalence
    if refined is not None:
        A, prevalence = refined.components.T, refined.prevalence
    res, s = fit.anchors, plan.settings
    alpha, alpha_record = _alpha(plan, store, fit, refined, seconds)
    diagnostics = {
        "seconds": seconds,
        "settings": {"method": plan.method, "recover": s.recover, "rectify": s.rectify,
                     "anchor_method": s.anchor_method, "topic_topic": s.topic_topic,
                     "refine_passes": s.refine_passes, "core_size": s.core_size,
                     "memory_budget": int(plan.budget.bytes)},
        "core": fit.core,
        "greedy_anchors": np.asarray(res.greedy).tolist(),
        "cleanup_changed": int(res.changed),
        "cleanup_sweeps": int(res.sweeps),
        "n_candidates": int(fit.n_candidates),
        "anchor_min_df": int(fit.anchor_min_df),
        "solver": fit.solver,
        "rectification": fit.rectification,
        "refinement": None if refined is None else _refine_diagnostics(refined),
        "topic_topic": s.topic_topic,
        "alpha": alpha_record,
        "store": store_record(store),
    }
    return FittedTopics(
        components=np.ascontiguousarray(A.T), vocab=list(store.vocab),
        anchors=np.asarray(res.anchors, dtype=np.int64), topic_prevalence=prevalence,
        topic_cooccurrence=fit.R, word_probability=fit.p, alpha=alpha,
        n_converged=int(fit.solver["converged"]), n_fitted=int(fit.solver["fitted"]),
        diagnostics=diagnostics)


def _alpha(plan: FitPlan, store: CooccurrenceStore, fit: Spectral, refined: Any,
           seconds: dict[str, float]) -> tuple[Array, dict[str, Any]]:
    """α (K,) of the documents' Dirichlet law and its record (α₀, which R it came from,
    on how many words). Without refinement: from the spectral R and prevalence. With
    refinement: from R = Â† Q Â†ᵀ for the refined topics Â on the core's block of Q (the
    spectral stages' when they kept it, else read again here; without a core, the block of
    the most probable words of an automatic core's size), and the refined prevalence
    (:mod:`streamtopic.hyperparameters`, which normalises R: Q's scale does not matter)."""
    if refined is None:
        alpha = estimate_alpha(fit.R, fit.prevalence)
        return alpha, {"alpha0": float(alpha.sum()), "topic_cooccurrence": "spectral",
                       "words": None}
    t0 = time.perf_counter()
    words = fit.core_words
    if words is None:
        words = np.sort(np.argsort(-fit.p, kind="stable")[:auto_core_size(plan)])
    Q = fit.core_block if fit.core_block is not None else store.read_submatrix(words)
    R = topic_cooccurrence_from_topics(refined.components.T[words], Q)
    alpha = estimate_alpha(R, refined.prevalence)
    seconds["alpha"] = time.perf_counter() - t0
    return alpha, {"alpha0": float(alpha.sum()), "topic_cooccurrence": "refined",
                   "words": int(words.size)}


def store_record(store: CooccurrenceStore) -> dict[str, Any]:
    """The store a model was fitted on, in its record: its path, version, documents,
    vocabulary size (a fit-time selection is recorded apart, as ``vocabulary``) and how its
    text was tokenised (None for count inputs), which inference tokenises text with."""
    return {"path": store.path, "version": store.version, "n_docs": store.n_docs,
            "V": store.V, "n_tokens": store.n_tokens,
            "tokenizer": store.config.get("tokenizer")}


def _refine_diagnostics(refined: Any) -> dict[str, Any]:
    """The refinement's record in ``diagnostics_``."""
    out = {"passes": len(refined.loglik_per_token),
           "loglik_per_token": refined.loglik_per_token,
           "seconds": refined.seconds, "theta_iterations": refined.theta_iterations}
    for name in ("converged", "sample_docs", "sample_tokens", "full_pass", "extrapolations",
                 "rejected"):
        if hasattr(refined, name):
            out[name] = getattr(refined, name)
    if getattr(refined, "alpha", None) is not None:  # the prior of θ_d its E-steps used
        out["alpha"] = np.asarray(refined.alpha, dtype=float).tolist()
    return out


def is_count_matrix(X: Any) -> bool:
    """Whether ``X`` is counts in memory (a scipy sparse matrix or a 2-D array)."""
    return sp.issparse(X) or (isinstance(X, np.ndarray) and X.ndim == 2)


def count_matrix(X: Any) -> Any:
    """``X`` as a CSR matrix of non-negative integer counts (n_docs×V)."""
    H = sp.csr_matrix(X)
    data = H.data
    if data.size and (not np.all(np.isfinite(data)) or data.min() < 0
                      or not np.array_equal(data, np.round(data))):
        raise ValueError("X: expected word counts (non-negative integers), e.g. from "
                         "CountVectorizer; not weights such as TF-IDF")
    if H.shape[0] < 2 or H.shape[1] < 2:
        raise ValueError(f"X has shape {H.shape}: expected documents × words, at least 2 × 2")
    return H.astype(np.int64)
