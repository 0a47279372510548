"""The spectral stages of one fit, as functions of a frozen :class:`FitPlan`.

The estimator (:class:`~streamtopic.model.AnchorTopicModel`) validates its parameters and
makes one :class:`FitPlan`: the method's choices filled in (:class:`FitSettings`), the seed
and the memory budgets resolved once. The stages below read the plan and return records;
nothing of a run lives on the estimator.

Two paths lead to the same :class:`Spectral` record:

* :func:`spectral_core`: the core vocabulary's block of Q (n×n) read into memory once and
  fitted by :func:`spectral_in_memory` on threads (rectification, anchors, recovery,
  topic-topic), then the refinement's start over all V words;
* :func:`spectral_store`: the whole stored Q (V×V), by Dask graphs whose tasks read the
  blocks they use (:class:`~streamtopic.passes.QBlocks`); the rectified Q comes from the
  store's bounded cache (:func:`rectified_q`), and Q is held in memory when a few V×V copies
  fit the budget and no distributed cluster runs the fit.

The anchor method and the topic-topic method are dispatched in one place each
(:func:`choose_anchors`, :func:`topic_topic`), for both paths; recovery has one kernel per
path (an in-memory solve, or :func:`~streamtopic.recovery.recover_by_blocks`' graph).

Determinism: every random stage (the sketch's projection, the rectification's eigensolver,
the LP anchors) draws from ``numpy.random.default_rng(plan.seed)`` of its own, so a stage's
draws do not depend on which stages ran before it.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any

import dask.array as da
import numpy as np
import numpy.typing as npt
import zarr

from ._numeric import safe_inverse
from ._random import DEFAULT_SEED, resolve_seed
from ._scratch import disk_bytes
from .anchors import (
    AnchorResult,
    find_anchors,
    find_anchors_lp,
    find_anchors_qr,
    undominated,
)
from .cluster import MEMORY_SHARE, MemoryBudget, compute, current_client, local_memory
from .passes import QBlocks
from .recovery import (
    anchor_topic_cooccurrence,
    pinv_topic_cooccurrence,
    recover_by_blocks,
    recover_in_memory,
    recover_original_in_memory,
)
from .rectification import rectify
from .seeding import (
    DEFAULT_TANDEM,
    NAMED_MIN_DF,
    NamedAnchors,
    check_named_anchors,
    excluded_ids,
    name_anchors,
    rectified_core,
    tandem_rows,
    without,
)
from .selection import Selection
from .sketch import (
    AnchorPoints,
    anchor_candidates,
    exact_points,
    frequent_words,
    row_sums_and_norms,
    sketch_points,
    sketch_rows,
)
from .store import CooccurrenceStore, StoreError, read_array_dense
from .workspace import rectified_key, rectified_target

__all__ = ["ANCHOR_METHODS", "CORE_COPIES", "CORE_MIN", "CORE_PER_TOPIC", "EXACT_MAX_V",
           "KEEP_CORE_BYTES", "METHODS", "TOPIC_TOPIC_METHODS", "FitPlan", "FitSettings",
           "Seeding", "Spectral",
           "allowed_words", "auto_core_size", "choose_anchors", "core_words", "named_store_rows",
           "rectification_record", "resolve_seeding", "spectral_core", "spectral_in_memory",
           "spectral_store", "topic_topic"]

log = logging.getLogger("streamtopic")

Array = npt.NDArray[Any]

EXACT_MAX_V = 8000  # exact (unprojected) anchors hold Q̄ densely: only for small V
#: Alternating-projection iterations of the rectification in a fit (``rectify_iters``). Lee et
#: al. found 5 often enough and 15-20 close to 150; the refinement that follows makes up the
#: difference. On per-token stores, the default fit at 5 against 15 (means over seeds 0-4;
#: NPMI of the top 10 words; held-out nats/token; fit seconds): 20 Newsgroups K = 20 0.2666
#: against 0.2656, −8.0444 against −8.0431, 1.63 against 1.89 s; K = 50 0.2836 against
#: 0.2827, −7.9125 against −7.9134, 2.80 against 3.30 s; KOS K = 20 0.2031 against 0.2068,
#: −7.4037 against −7.4036, 1.12 against 1.49 s; K = 50 0.2145 against 0.2140, −7.3281
#: against −7.3294, 1.73 against 2.04 s; SOTU K = 20 0.1863 against 0.1875, −7.5926 against
#: −7.5870, 1.24 against 1.80 s. Semi-synthetic (V = 2,000, K = 20, Poisson(70)-token
#: documents): matched L1 0.0410 at both from 100,000 documents, 0.1627 at both from 5,000.
RECTIFY_ITERS = 5
#: Anchor finding: FastAnchorWords on a random projection of Q̄ ('sketch') or on Q̄'s exact
#: rows ('exact'), the exact pivoted QR ('qr'), or Arora, Ge and Moitra's linear programs.
ANCHOR_METHODS = ("sketch", "exact", "qr", "lp")
TOPIC_TOPIC_METHODS = ("pinv", "anchor")

#: What each ``method`` chooses for the parameters left at None.
#:
#: * ``rectified`` (the default, best on real text): the spectral stages run on a core
#:   vocabulary of the most frequent words (``CORE_MIN``, ``CORE_PER_TOPIC``);
#:   Q's core is rectified (JSMF/RAW, alternating projection), anchors are the exact pivoted
#:   QR's, rows are fitted by the exact active set, R is the anchor formula; then EM over the
#:   corpus, until it converges, refines the topics and gives every other word its row.
#: * ``plain``: Arora et al. (2013) as published: FastAnchorWords on a sketch of the whole Q̄,
#:   RecoverL2, R = A† Q A†ᵀ, no refinement. The semi-synthetic benchmarks use it.
METHODS: dict[str, dict[str, Any]] = {
    "rectified": {"recover": "activeset", "rectify": "ap", "anchor_method": "qr",
                  "topic_topic": "anchor", "refine_passes": "auto", "core_size": "auto"},
    "plain": {"recover": "l2", "rectify": "none", "anchor_method": "sketch",
              "topic_topic": "pinv", "refine_passes": 0, "core_size": "all"},
}
#: The automatic core vocabulary: ``max(CORE_MIN, CORE_PER_TOPIC · K)`` words, fewer if the
#: memory budget is smaller. Rectification, QR anchors and the fits cost O(n²K) on an n-word
#: core held in memory, and the refinement gives every other word its row. On 20 Newsgroups
#: (V = 19,092) the refined topics' held-out likelihood at K = 20 was −8.045 nats/token with a
#: 2,000-word core, −8.048 with 3,000, −8.038 with 5,000 and −8.032 with 8,000 (at K = 50:
#: −7.964, −7.974, −7.965), while the spectral stages took 0.8 s, 2.0 s, 4.5 s and 5.9 s.
CORE_MIN = 2000
#: The largest core block of Q (bytes of its n×n float64) that the spectral stages keep for
#: α's fit after the refinement (:attr:`Spectral.core_block`) instead of reading it from the
#: store again: 32 MiB at the default 2,000-word core. On UCI KOS (K = 20, 5 fits in turns,
#: the machine's other core busy) α's fit took 0.07-0.34 s with the second read (median
#: 0.24 s) and 0.01-0.03 s without it; the same α to rounding.
KEEP_CORE_BYTES = 256 * 2**20
CORE_PER_TOPIC = 40
#: Dense n×n copies of the core that its stages hold at once (rectification's three).
CORE_COPIES = 4
#: Dense V×V copies of the whole Q that holding it in memory needs (Q, Q̄ and a temporary).
HELD_COPIES = 3


@dataclass(frozen=True)
class FitSettings:
    """The parameters a fit runs with, the method's choices filled in."""

    recover: str
    rectify: str
    anchor_method: str
    topic_topic: str
    refine_passes: int | str
    core_size: int | str
    #: The seed every random stage draws from (:func:`~streamtopic._random.resolve_seed`).
    seed: int = DEFAULT_SEED


@dataclass(frozen=True)
class FitPlan:
    """One fit, resolved once before any stage runs: what the estimator's parameters mean
    for it. The stages read it and never the estimator.

    ``budget`` is the memory budget of the fit (the user's, else the automatic one, which on
    a distributed cluster is the smallest worker's); ``local_budget`` that of this process,
    which holds an automatic core (the user's budget when given, else ``MEMORY_SHARE`` of
    the memory available here)."""

    n_topics: int
    method: str
    settings: FitSettings
    budget: MemoryBudget
    local_budget: MemoryBudget
    selection: Selection
    rectify_iters: int = RECTIFY_ITERS
    sketch_dim: int = 1000
    anchor_min_df: int | None = None
    cleanup: bool = True
    tol: float | None = None
    max_iter: int | None = None
    block_rows: int | None = None
    progress: bool = False
    scratch_dir: str | os.PathLike[str] | None = None
    #: Named anchors, one tuple of words per named topic (:mod:`streamtopic.seeding`).
    anchor_words: tuple[tuple[str, ...], ...] | None = None
    #: Words that may not be anchors.
    exclude_words: tuple[str, ...] | None = None
    tandem: str = DEFAULT_TANDEM
    #: A refit's preview: the spectral stages on the model's core, without refinement.
    preview: bool = False

    @property
    def seed(self) -> int:
        """The fit's seed (``settings.seed``)."""
        return self.settings.seed

    @staticmethod
    def budgets(given: int | None) -> tuple[MemoryBudget, MemoryBudget]:
        """The fit's budget and this process' (see the class) for the user's ``given``."""
        local = int(given) if given is not None else int(MEMORY_SHARE * local_memory())
        return MemoryBudget.resolve(given), MemoryBudget(local)


@dataclass
class Spectral:
    """What the spectral stages give the rest of the fit.

    ``A`` (V×K, columns sum to 1; zero rows outside a core), ``prevalence`` (K,), ``R``
    (K×K), ``p`` (V,) word probabilities, the anchor search's result (global word ids), the
    candidates' count, solver statistics, the rectification's record, ``start`` (K×V) the
    topics the refinement starts from, the core vocabulary's record (None: whole
    vocabulary), its words (sorted ids; None: whole vocabulary), the document frequency
    an anchor candidate needed, and ``core_block``: the core's block of Q (n×n, normalised
    to sum 1) when it is at most ``KEEP_CORE_BYTES``, kept for α's fit after the refinement
    (else None: read again then)."""

    A: Array
    prevalence: Array
    R: Array
    p: Array
    anchors: AnchorResult
    n_candidates: int
    solver: dict[str, Any]
    rectification: dict[str, Any] | None
    start: Array
    core: dict[str, Any] | None
    core_words: Array | None = None
    anchor_min_df: int = 0
    core_block: Array | None = None


@dataclass
class StoredQ:
    """The Q that the spectral stages on the whole vocabulary read: ``Q`` (V×V dask array),
    ``blocks`` (its blocks, read inside tasks), ``held`` (the V×V array when Q is held in
    memory, else None), the rectification's record (None: the raw Q) and the bytes a pass
    over it reads from disk (0 when held)."""

    Q: Any
    blocks: QBlocks
    held: Array | None
    rectification: dict[str, Any] | None
    bytes_read: int


class _ReadOnly:
    """An in-memory V×V array seen through indexing only, so that ``da.from_array`` wraps it
    without the defensive copy it makes of anything with a ``copy`` method."""

    def __init__(self, array: Array) -> None:
        self._array = array
        self.shape = array.shape
        self.dtype = array.dtype
        self.ndim = array.ndim

    def __getitem__(self, key: Any) -> Array:
        part: Array = self._array[key]
        return part


@dataclass(frozen=True)
class Seeding:
    """A fit's named anchors resolved in its store (None: none) and the excluded words' ids
    (sorted)."""

    named: NamedAnchors | None = None
    excluded: Array = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def resolve_seeding(plan: FitPlan, store: CooccurrenceStore) -> Seeding:
    """The plan's named anchors and exclusions resolved in ``store``'s vocabulary, checked
    before any stage runs (:func:`~streamtopic.seeding.name_anchors`: one error naming every
    bad word). A named word needs ``anchor_min_df`` documents when given, else
    :data:`~streamtopic.seeding.NAMED_MIN_DF`."""
    excluded = excluded_ids(store.vocab, plan.exclude_words)
    if plan.anchor_words is None:
        return Seeding(None, excluded)
    min_df = NAMED_MIN_DF if plan.anchor_min_df is None else int(plan.anchor_min_df)
    named = name_anchors(plan.anchor_words, store.vocab,
                         store.doc_freq if store.counts_known else None, min_df,
                         plan.n_topics, excluded)
    return Seeding(named, excluded)


def allowed_words(plan: FitPlan, store: CooccurrenceStore,
                  seeds: Seeding) -> tuple[Array | None, int]:
    """The words whose points the anchor search holds (sorted ids; None: all) and the
    document-frequency threshold used: those reaching ``anchor_min_df``
    (:func:`~streamtopic.sketch.frequent_words`) but the excluded ones, and the named words
    (which are never free candidates)."""
    frequent, min_df = frequent_words(store, plan.anchor_min_df)
    frequent = without(frequent, store.V, seeds.excluded)
    if frequent is not None and seeds.named is not None:
        frequent = np.union1d(frequent, seeds.named.ids)
    return frequent, min_df


# --------------------------------------------------------------------- one dispatch each


def choose_anchors(
    settings: FitSettings, n_topics: int, Q: Any, points: Any, p: Array, norms: Array,
    candidates: Array, *, in_memory: bool, memory_budget: int, cleanup: bool = True,
    progress: bool = False, named: NamedAnchors | None = None, tandem: str = DEFAULT_TANDEM,
    named_points: Array | None = None,
) -> tuple[AnchorResult, Array | None]:
    """The anchors by ``settings.anchor_method``, for both paths, the ``named`` ones first.

    ``Q`` is the co-occurrence (n×n array held in memory, or the V×V dask array), ``points``
    the rows anchors are chosen among (Q̄ on a core; the sketch's candidate rows or Q̄ on the
    whole vocabulary; unused by 'qr'), ``p`` and ``norms`` (n,) Q's row sums and Q̄'s squared
    row norms, ``candidates`` the rows that may become free anchors. FastAnchorWords runs in
    double precision on exact rows, in single on a sketch. Named anchors (ids of ``Q``'s
    rows) condition the search: it starts with their rows projected out; a tandem anchor's
    row combines its words' rows of Q̄ (``tandem``): in memory from ``points``, over the
    whole stored Q given by the caller as ``named_points`` (m×d, the named topics' rows in
    the points' space: :func:`named_store_rows`). Returns the anchors and, in memory when a
    tandem is among them, the K anchor rows (K×n) the recovery fits against (else None)."""
    method, K = settings.anchor_method, int(n_topics)
    first, rows = None, None
    if named is not None:
        check_named_anchors(named, method, settings.recover)
        first = named.first
        rows = (tandem_rows(points[named.ids], named.topic, tandem) if in_memory
                else named_points)
    if method == "qr":
        res = find_anchors_qr(Q, p, K, candidates, in_memory=in_memory or None, norms=norms,
                              memory_budget=memory_budget, progress=progress, named=first,
                              named_rows=rows)
    elif method == "lp":
        res = find_anchors_lp(points, K, candidates, seed=settings.seed)
    else:
        precise = in_memory or method == "exact"
        res = find_anchors(points, K, candidates, cleanup=cleanup,
                           precision="double" if precise else "single", named=first,
                           named_rows=rows)
    if named is None or rows is None or not named.tandem or not in_memory:
        return res, None
    return res, np.vstack([rows, points[res.anchors[named.m:]]])


def topic_topic(method: str, A: Array, anchors: Array, Q_SS: Array,
                AtQA: Array | None) -> Array:
    """R (K×K) by ``method``: the anchor formula from Q_SS (K×K, the anchors' block of Q),
    or R = A† Q A†ᵀ from Aᵀ Q A (K×K), for both paths."""
    if method == "anchor":
        return anchor_topic_cooccurrence(A, anchors, Q_SS)
    if AtQA is None:
        raise ValueError("topic_topic='pinv' needs Aᵀ Q A")
    return pinv_topic_cooccurrence(A, AtQA)


def rectification_record(res: Any) -> dict[str, Any]:
    """A rectification's record in ``diagnostics_``: where it ran, and per iteration the
    movement and seconds, and the kept eigenvalues."""
    return {"in_memory": bool(res.in_memory), "movement": [float(m) for m in res.movement],
            "seconds": [float(x) for x in res.seconds],
            "eigenvalues": np.asarray(res.eigenvalues).tolist()}


# --------------------------------------------------------------------- the core path


def auto_core_size(plan: FitPlan) -> int:
    """``max(CORE_MIN, CORE_PER_TOPIC · K)`` words, fewer when ``CORE_COPIES`` dense n×n
    copies would not fit this process' budget (which holds the core), at least 2K."""
    K = plan.n_topics
    largest = plan.local_budget.largest(CORE_COPIES)
    return max(2 * K, min(max(CORE_MIN, CORE_PER_TOPIC * K), largest))


def core_words(plan: FitPlan, store: CooccurrenceStore, refining: bool,
               seeds: Seeding | None = None) -> Array | None:
    """The core vocabulary (sorted word ids): the ``n`` words of highest document
    frequency, ``n`` from ``core_size`` (:func:`auto_core_size` for 'auto'). None when the
    spectral stages take the whole vocabulary: ``core_size='all'``, no refinement (only the
    refinement gives the other words their rows), no document frequencies, or a core that
    would hold every word. A refit's preview takes the core although it does not refine;
    named anchors are always in the core."""
    size = plan.settings.core_size
    if size == "all" or not (refining or plan.preview) or not store.counts_known:
        return None
    n = auto_core_size(plan) if size == "auto" else int(size)
    df = np.asarray(store.doc_freq)
    if n >= int((df > 0).sum()):
        return None
    order = np.argsort(-df, kind="stable")[:n]
    if seeds is not None and seeds.named is not None:
        order = np.union1d(order, seeds.named.ids)
    return np.sort(order)


def spectral_core(plan: FitPlan, store: CooccurrenceStore, core: Array,
                  seconds: dict[str, float], seeds: Seeding | None = None) -> Spectral:
    """The spectral stages on the core vocabulary's block of Q (n×n, read once into
    memory and normalised to sum 1: the co-occurrence of the core words among
    themselves, which the topic model explains with the core's rows of A), then the
    starting topics over all V words for the refinement: the core's rows scaled by the
    core's share of the tokens, every other word at its unigram probability in every
    topic (uninformative: the first EM pass folds it in)."""
    t0 = time.perf_counter()
    Qc = store.read_submatrix(core)
    total = Qc.sum()
    if not total > 0:
        raise StoreError(f"{store.path}: the core vocabulary co-occurs nowhere")
    Qc /= total
    seconds["read_core"] = time.perf_counter() - t0
    seeds = seeds or Seeding()
    frequent, min_df = allowed_words(plan, store, seeds)
    cand = np.flatnonzero(np.isin(core, frequent)) if frequent is not None else None
    fit = spectral_in_memory(
        Qc, plan.n_topics, plan.settings, candidates=cand, rectify_iters=plan.rectify_iters,
        seed=plan.seed, cleanup=plan.cleanup, tol=plan.tol, max_iter=plan.max_iter,
        seconds=seconds, tandem=plan.tandem,
        named=None if seeds.named is None else seeds.named.local(core))
    counts = np.asarray(store.word_counts, dtype=np.float64)
    unigram = counts / counts.sum()
    share = unigram[core].sum()
    start = np.tile(unigram, (fit.A.shape[1], 1))
    start[:, core] = fit.A.T * share
    res = replace(fit.anchors, anchors=core[fit.anchors.anchors],
                  greedy=core[fit.anchors.greedy],
                  history=[core[h] for h in fit.anchors.history])
    A = np.zeros((store.V, fit.A.shape[1]))
    A[core] = fit.A
    return Spectral(A=A, prevalence=fit.prevalence, R=fit.R, p=unigram.copy(), anchors=res,
                    n_candidates=fit.n_candidates, solver=fit.solver,
                    rectification=fit.rectification, start=start,
                    core={"size": int(core.size), "share_of_tokens": float(share)},
                    core_words=core, anchor_min_df=min_df,
                    core_block=Qc if Qc.nbytes <= KEEP_CORE_BYTES else None)


def spectral_in_memory(
    Q: Array,
    n_topics: int,
    settings: FitSettings,
    *,
    candidates: Array | None = None,
    rectify_iters: int = RECTIFY_ITERS,
    seed: int | None = None,
    cleanup: bool = True,
    tol: float | None = None,
    max_iter: int | None = None,
    seconds: dict[str, float],
    named: NamedAnchors | None = None,
    tandem: str = DEFAULT_TANDEM,
) -> Spectral:
    """Rectification, anchors, recovery and topic-topic on a co-occurrence matrix held in
    memory (a core vocabulary's), with threads and no Dask graph.

    Parameters
    ----------
    Q : ndarray of shape (n, n)
        Symmetric, non-negative, summing to 1. Not modified.
    n_topics : int
        K.
    settings : FitSettings
        The stages' choices (``recover``, ``rectify``, ``anchor_method``, ``topic_topic``).
    candidates : ndarray of int, optional
        Rows that may become anchors (default: every row with mass); of those, the rows of
        Q̄ (rectified) that put far more of their mass on one other word than the others do
        are left out (:func:`~streamtopic.anchors.undominated`; not with the LP anchors,
        whose thresholds come from the rows' noise).
    seconds : dict
        Receives each stage's wall time.
    named : NamedAnchors, optional
        Named anchors as row ids of ``Q``, first (:func:`choose_anchors`); a tandem's rows
        combined by ``tandem``.

    Returns
    -------
    Spectral
        With row ids of ``Q`` for the anchors; ``start`` is ``A.T`` (K×n).
    """
    K, seed = int(n_topics), resolve_seed(seed)
    rect_info = None
    t0 = time.perf_counter()
    if settings.rectify != "none":
        res_r = rectified_core(Q, K, method=settings.rectify, n_iter=rectify_iters,
                               seed=seed)  # kept for a refit with other anchors
        assert res_r.array is not None
        Q = res_r.array
        rect_info = {"method": settings.rectify, "iterations": rectify_iters, "reused": False,
                     **rectification_record(res_r)}
        seconds["rectify"] = time.perf_counter() - t0
    p = Q.sum(axis=1)
    inv = safe_inverse(p)
    cand = np.flatnonzero(p > 0) if candidates is None else candidates[p[candidates] > 0]
    t0 = time.perf_counter()
    Qbar = Q * inv[:, None]
    if settings.anchor_method != "lp":  # the LP sets its own noise thresholds
        free = undominated(Qbar, cand, K)
        cand = free if named is None else np.union1d(free, cand[np.isin(cand, named.ids)])
    norms = np.einsum("ij,ij->i", Qbar, Qbar)
    res, anchor_rows = choose_anchors(replace(settings, seed=seed), K, Q, Qbar, p, norms, cand,
                                      in_memory=True, memory_budget=2**62, cleanup=cleanup,
                                      named=named, tandem=tandem)
    seconds["anchors"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    S = res.anchors
    if settings.recover == "original":
        A, prevalence, solver = recover_original_in_memory(Q, p, S)
    else:
        C, solver = recover_in_memory(Q, Qbar, norms, p, S, settings.recover, tol, max_iter,
                                      anchor_rows)
        weighted = C * p[:, None]  # Bayes' rule: p(w | z) ∝ p(z | w) p(w)
        mass = weighted.sum(axis=0)
        A = weighted / np.where(mass > 0, mass, 1.0)[None, :]
        prevalence = mass / mass.sum()
    # a tandem anchor is no word: its topic-topic entries come from A† Q A†ᵀ
    how = "pinv" if anchor_rows is not None else settings.topic_topic
    AtQA = A.T @ (Q @ A) if how == "pinv" else None
    R = topic_topic(how, A, S, Q[np.ix_(S, S)], AtQA)
    seconds["recovery"] = time.perf_counter() - t0
    return Spectral(A=A, prevalence=prevalence, R=R, p=p, anchors=res,
                    n_candidates=int(cand.size), solver=solver, rectification=rect_info,
                    start=A.T, core=None)


# --------------------------------------------------------------------- the whole-store path


def spectral_store(plan: FitPlan, store: CooccurrenceStore, scratch: str,
                   seconds: dict[str, float], held: ExitStack,
                   seeds: Seeding | None = None) -> Spectral:
    """The spectral stages on the whole stored Q: sketch (or row statistics), anchors,
    recovery and topic-topic, by Dask graphs over Q's blocks (or on Q held in memory
    when a few V×V copies fit the budget). ``held`` keeps the rectified cache entry the
    fit reads until the fit ends."""
    s, seeds = plan.settings, seeds or Seeding()
    check_named_anchors(seeds.named, s.anchor_method, s.recover)  # refused before Q is read
    stored = stored_q(plan, store, scratch, seconds, held)
    Q, src = stored.Q, stored.blocks
    t0 = time.perf_counter()
    frequent, min_df = allowed_words(plan, store, seeds)
    points: Any = None
    if s.anchor_method == "qr":
        p, norms = row_sums_and_norms(Q, progress=plan.progress, bytes_read=stored.bytes_read)
        candidates = anchor_candidates(p, frequent)
    else:
        p, norms, candidates, points = _points(plan, Q, src, scratch, frequent)
    seconds["sketch"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    combined = named_points = None
    if seeds.named is not None and seeds.named.tandem:
        combined = named_store_rows(Q if stored.held is None else stored.held, p,
                                    seeds.named, plan.tandem, progress=plan.progress)
        named_points = _in_points(plan, src, combined, points, seeds.named)
    res, _ = choose_anchors(s, plan.n_topics, Q if stored.held is None else stored.held,
                            points, p, norms, candidates, in_memory=False,
                            memory_budget=plan.budget.bytes, cleanup=plan.cleanup,
                            progress=plan.progress, named=seeds.named,
                            named_points=named_points)
    del points
    seconds["anchors"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    # a tandem anchor is no word: its topic-topic entries come from A† Q A†ᵀ
    how = "pinv" if combined is not None else s.topic_topic
    rec = recover_by_blocks(Q, src, p, norms, res.anchors, scratch, method=s.recover,
                            topic_topic=how, tol=plan.tol, max_iter=plan.max_iter,
                            block_rows=plan.block_rows, progress=plan.progress,
                            named_columns=None if combined is None else combined.T)
    seconds["recovery"] = time.perf_counter() - t0
    R = topic_topic(how, rec.A, res.anchors, rec.Q_SS, rec.AtQA)
    return Spectral(A=rec.A, prevalence=rec.prevalence, R=R, p=p, anchors=res,
                    n_candidates=int(candidates.size), solver=rec.solver,
                    rectification=stored.rectification, start=rec.A.T, core=None,
                    anchor_min_df=min_df)


def named_store_rows(Q: Any, p: Array, named: NamedAnchors, how: str, *,
                     progress: bool = False) -> Array:
    """The named topics' rows of Q̄ (m×V) over the whole stored Q (V×V: a dask array, or
    held in memory), ``p`` (V,) its row sums: the named words' rows read (a strip of Q's
    blocks per word), scaled by 1/p and combined per topic by ``how``
    (:func:`~streamtopic.seeding.tandem_rows`)."""
    ids = np.asarray(named.ids, dtype=np.int64)
    if isinstance(Q, np.ndarray):
        rows = np.asarray(Q[ids], dtype=np.float64)
    else:
        (rows,) = compute(Q[ids], progress=progress, label="named rows")
        rows = np.asarray(rows, dtype=np.float64)
    rows = rows * safe_inverse(p)[ids][:, None]
    return tandem_rows(rows, named.topic, how)


def _in_points(plan: FitPlan, src: QBlocks, rows: Array, points: Any,
               named: NamedAnchors) -> Array:
    """The named topics' rows of Q̄ (``rows``, m×V) as points of the anchor search: as
    they are for 'qr' (rows of Q̄) and the exact points; for the sketch, a single word's
    point as the sketch holds it and a tandem's combined row projected as the sketch's
    rows were (:func:`~streamtopic.sketch.sketch_rows`)."""
    if plan.settings.anchor_method != "sketch":
        return rows
    out = np.array(points[named.first], dtype=np.float64)
    several = np.flatnonzero(np.diff(np.r_[named.starts, named.ids.size]) > 1)
    d = int(min(plan.sketch_dim, src.V))
    out[several] = sketch_rows(rows[several], src, d, plan.seed)
    return out


def _points(plan: FitPlan, Q: Any, src: QBlocks, scratch: str,
            frequent: Array | None) -> AnchorPoints:
    """Row sums p (V,), squared row norms of Q̄ (V,), the anchor candidates (sorted word
    ids) and the points anchors are chosen among, indexable by those ids: the
    candidates' rows of the sketch (n_candidates×d, the only rows read back,
    :func:`~streamtopic.sketch.sketch_points`), or Q̄ itself (V×V) in exact mode
    (:func:`~streamtopic.sketch.exact_points`)."""
    V = Q.shape[0]
    if plan.settings.anchor_method in ("exact", "lp"):
        if V > EXACT_MAX_V:
            raise ValueError(
                f"anchor_method={plan.settings.anchor_method!r} holds Q̄ densely (V={V:,}); "
                f"use it for V <= {EXACT_MAX_V}"
            )
        return exact_points(Q, frequent, progress=plan.progress)
    return sketch_points(src, int(min(plan.sketch_dim, V)), plan.seed, scratch, frequent,
                         progress=plan.progress)


def fits_in_memory(plan: FitPlan, V: int) -> bool:
    """Whether the whole V×V Q is held in memory: ``HELD_COPIES`` dense copies fit the
    budget and no distributed cluster runs the fit (its workers read the store instead:
    nothing of size V×V goes through its scheduler)."""
    return current_client() is None and plan.budget.holds(V, HELD_COPIES)


def stored_q(plan: FitPlan, store: CooccurrenceStore, scratch: str, seconds: dict[str, float],
             held: ExitStack) -> StoredQ:
    """The Q the passes over the whole vocabulary read: the stored Q or its rectified
    array (:func:`rectified_q`), held in memory when it fits (:func:`fits_in_memory`).
    Every later pass over a held Q costs arithmetic only, not reading and decompressing."""
    q_bytes = store.q_bytes()
    array: Array | None = None
    load: Callable[[], Array] = store.read_dense
    Q, src, info = store.Q, QBlocks.from_store(store), None
    if plan.settings.rectify != "none":
        t0 = time.perf_counter()
        Q, info, array = rectified_q(plan, store, scratch, held)
        seconds["rectify"] = time.perf_counter() - t0
        path = info["path"]
        q_bytes = disk_bytes(path)
        load = lambda: read_array_dense(zarr.open_array(path, mode="r"))  # noqa: E731
        src = QBlocks.from_zarr(path)
    if array is None and fits_in_memory(plan, Q.shape[0]):
        t0 = time.perf_counter()
        array = load()
        log.info("load Q: %.2f s, %.1f MiB read", time.perf_counter() - t0, q_bytes / 2**20)
    if array is None:
        return StoredQ(Q=Q, blocks=src, held=None, rectification=info, bytes_read=q_bytes)
    # a view dask does not copy (from_array copies anything with a .copy method)
    view = da.from_array(_ReadOnly(array), chunks=Q.chunks, asarray=False,
                         name=f"held-q-{uuid.uuid4().hex}")
    return StoredQ(Q=view, blocks=QBlocks.from_memory(array, src.chunk), held=array,
                   rectification=info, bytes_read=0)


def rectified_q(plan: FitPlan, store: CooccurrenceStore, scratch: str,
                held: ExitStack) -> tuple[Any, dict[str, Any], Array | None]:
    """The rectified Q (V×V dask array over its own zarr array), the rectification's
    record and, when it was computed here in memory, the V×V array itself (else None):
    computed once per store version and settings into the store's bounded cache and reused
    by later fits; computed into ``scratch`` and not kept when the cache cannot be used
    (:func:`streamtopic.workspace.rectified_target`)."""
    method, n_iter, K = plan.settings.rectify, plan.rectify_iters, plan.n_topics
    key = rectified_key(store.version, K, method, n_iter, plan.seed)
    target = rectified_target(store, key, scratch, held)
    info: dict[str, Any] = {"method": method, "iterations": n_iter, "path": target.path,
                            "cached": target.cached}
    array = None
    if target.reused:
        info["reused"] = True
    else:
        res = rectify(store, K, target.path, method=method, n_iter=n_iter, seed=plan.seed,
                      memory_budget=plan.budget.bytes,
                      scratch=os.path.join(scratch, "rectify"), progress=plan.progress,
                      keep_array=fits_in_memory(plan, store.V))
        info.update(reused=False, **rectification_record(res))
        array = res.array
    return da.from_zarr(target.path), info, array
