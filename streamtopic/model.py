"""``AnchorTopicModel``: the anchor-word topic model as a scikit-learn style estimator.

The default ``method='rectified'`` reads the core vocabulary's block of Q into memory once
(:meth:`~streamtopic.store.CooccurrenceStore.read_submatrix`) and runs the spectral stages
there on threads (:func:`spectral_in_memory`): rectification, exact anchors, the fits and
the topic-topic matrix; then EM over the corpus (:mod:`streamtopic.refinement`) refines the
topics and gives every other word its row.

On the whole vocabulary (``method='plain'``, or ``core_size='all'``) ``fit`` runs two Dask
graphs over the stored Q, whose tasks read the blocks of Q they use themselves
(:class:`~streamtopic.store.QBlocks`):

1. *sketch*: row sums p and the projected sketch Q̄ P (V×d), from the blocks on and above
   the diagonal (Q is symmetric), written by the workers to a scratch zarr group
   (``scratch_dir``; never inside the store, which may be read-only);
2. *recovery*, one graph of coarse tasks: the anchor columns Y = Q_{:,S} (V×K) and their
   K×K Gram; for RecoverL2 (and its ADMM and active-set solvers) the cross-products
   B = Q̄ Q̄_Sᵀ (V×K) and the simplex fits, by pieces of row blocks; RecoverKL fits full
   rows of Q̄; then *topic-topic*: Aᵀ Q A (K×K) from the fitted rows as they arrive, for
   R = A† Q A†ᵀ. The original Recover uses Q_{:,S} Q_SS⁻¹ on the client.

Anchor selection runs in the client on the sketch rows of the candidates. Objects of size V×K
or V×d move between workers and the client only through the scratch zarr group, never through
the scheduler.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .anchors import (
    AnchorResult,
    default_anchor_min_df,
    find_anchors,
    find_anchors_qr,
    write_sketch,
)
from .recovery import (
    RECOVER_METHODS,
    recover_original,
    solve_active_set,
    solve_admm,
    solve_kl,
    solve_l2,
)
from .store import (
    CooccurrenceStore,
    QBlocks,
    StoreError,
    read_array_dense,
    row_block_sums,
    sum_arrays,
    sum_sides,
    upper_blocks,
)

__all__ = ["AnchorTopicModel", "ModelError", "anchor_topic_cooccurrence"]

MODEL_FORMAT = "streamtopic-model"
EXACT_MAX_V = 8000  # exact (unprojected) anchors hold Q̄ densely: only for small V
#: Name prefix of a fit's scratch directory (owned by the fit: see ``streamtopic._scratch``).
FIT_PREFIX = ".streamtopic-fit-"
ANCHOR_METHODS = ("sketch", "qr")
TOPIC_TOPIC_METHODS = ("pinv", "anchor")
RECTIFY_METHODS = ("none", "ap", "dr")
KERNEL_SOLVERS = {"l2": solve_l2, "admm": solve_admm, "activeset": solve_active_set}

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
CORE_PER_TOPIC = 40
#: Dense n×n copies of the core that its stages hold at once (rectification's three).
CORE_COPIES = 4


@dataclass(frozen=True)
class _Settings:
    """The parameters a fit runs with, the method's choices filled in."""

    recover: str
    rectify: str
    anchor_method: str
    topic_topic: str
    refine_passes: int | str
    core_size: int | str


log = logging.getLogger("streamtopic")


@dataclass
class _Spectral:
    """What the spectral stages give the estimator.

    ``A`` (V×K, columns sum to 1; zero rows outside a core), ``prevalence`` (K,), ``R``
    (K×K), ``p`` (V,) word probabilities, the anchor search's result (global word ids), the
    candidates' count, solver statistics, the rectification's record, ``start`` (K×V) the
    topics the refinement starts from, and the core vocabulary's record (None: whole
    vocabulary)."""

    A: np.ndarray
    prevalence: np.ndarray
    R: np.ndarray
    p: np.ndarray
    anchors: AnchorResult
    n_candidates: int
    solver: dict[str, Any]
    rectification: dict[str, Any] | None
    start: np.ndarray
    core: dict[str, Any] | None


class _ReadOnly:
    """An in-memory V×V array seen through indexing only, so that ``da.from_array`` wraps it
    without the defensive copy it makes of anything with a ``copy`` method."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array
        self.shape = array.shape
        self.dtype = array.dtype
        self.ndim = array.ndim

    def __getitem__(self, key: Any) -> np.ndarray:
        return self._array[key]


class _CandidateRows:
    """The points of some words only: ``rows`` (n×d) of the sorted word ids ``ids`` (n,),
    indexed by word ids as the full V×d array would be."""

    def __init__(self, ids: np.ndarray, rows: np.ndarray) -> None:
        self.ids = ids
        self.rows = rows

    def __getitem__(self, words: np.ndarray) -> np.ndarray:
        words = np.asarray(words)
        pos = np.minimum(np.searchsorted(self.ids, words), max(self.ids.size - 1, 0))
        if self.ids.size == 0 or not np.array_equal(self.ids[pos], words):
            raise KeyError("only the candidates' points are held")
        return self.rows[pos]


class ModelError(ValueError):
    """A path that is not a saved model, or a model used before ``fit``."""


def _open_store(X: Any) -> CooccurrenceStore:
    if isinstance(X, CooccurrenceStore):
        return X
    if isinstance(X, (str, os.PathLike)):
        return CooccurrenceStore.open(X)
    raise TypeError(
        f"fit expects a CooccurrenceStore or a store path, got {type(X).__name__}; "
        "ingest a corpus first (streamtopic.ingest)"
    )


class AnchorTopicModel:
    """Topic model learned by anchor words (Arora et al. 2013) from a co-occurrence store.

    Parameters
    ----------
    n_topics : int
        Number of topics K (>= 2).
    method : {'rectified', 'plain'}
        The pipeline; each stage's parameter below left at None takes the method's choice.

        * ``'rectified'`` (default; the best on real text): the spectral stages run on a
          *core vocabulary*, the most frequent words (``core_size``). Their block of Q is
          read once into memory, rectified (JSMF/RAW: alternating projection, 15
          iterations), its anchors are the exact pivoted QR's, every core word's row is the
          exact active-set fit, and R is the anchor formula. EM over the training corpus
          then refines the topics until the training likelihood converges, and gives every
          word outside the core its row (it starts uninformative, at the word's unigram
          probability in every topic). Without a recorded corpus (e.g. a population Q) the
          stages take the whole vocabulary and nothing is refined (a warning says so).
        * ``'plain'``: Arora et al. (2013) as published, on the whole stored Q:
          FastAnchorWords on a random projection, RecoverL2, R = A† Q A†ᵀ, no refinement.
          What the semi-synthetic benchmarks and the papers' experiments use.
    recover : {'l2', 'kl', 'original', 'admm', 'activeset'}, optional
        Recovery: RecoverL2 (kernel form, accelerated projected gradient), RecoverKL, the
        original Recover, or the same least squares as RecoverL2 solved by ADMM (the RAW
        paper's choice) or by an exact active-set method. Method's choice: 'activeset'
        (rectified), 'l2' (plain).
    rectify : {'none', 'ap', 'dr'}, optional
        Rectify Q before anchor finding (Lee et al.'s JSMF/RAW): alternating projection or
        Douglas–Rachford onto rank-K PSD, normalised, non-negative matrices. On the whole
        vocabulary the rectified Q is written to its own array in the store's cache (the raw
        Q is untouched; the cache is bounded, see
        :func:`~streamtopic.rectification.cache_limit`) and reused by later fits with the
        same settings; in a read-only store it is written to ``scratch_dir`` and not kept.
        A core's is rectified in memory. Method's choice: 'ap' (rectified), 'none' (plain).
    rectify_iters : int
        Rectification iterations (the paper: 5 often enough, 15–20 close to 150).
    anchor_method : {'sketch', 'qr'}, optional
        FastAnchorWords on a random projection of Q̄ ('sketch'; exact rows of Q̄ on a
        core), or exact anchors by the implicit pivoted QR of Q̄ ('qr'; K passes over Q when
        the whole Q does not fit ``memory_budget``). Method's choice: 'qr' (rectified),
        'sketch' (plain).
    topic_topic : {'pinv', 'anchor'}, optional
        Topic-topic matrix: R = A† Q A†ᵀ ('pinv'), or the anchor formula
        R = diag(1/A_S) Q_SS diag(1/A_S) with A_S the anchors' own topic probabilities
        ('anchor', the RAW paper's; no pass over Q). Method's choice: 'anchor'
        (rectified), 'pinv' (plain).
    memory_budget : int, optional
        Bytes the in-memory stages may use. Default: half the memory available when the fit
        starts, or half the smallest worker memory limit on a distributed cluster
        (:func:`streamtopic.cluster.memory_budget`). It sizes the automatic core, and
        decides whether the whole Q is held in memory (when a few dense V×V copies fit and
        no distributed cluster runs the fit).
    refine_passes : 'auto' or int, optional
        EM over the training corpus after the spectral fit (:mod:`streamtopic.refinement`):
        'auto' runs until the training likelihood converges, working on a sample of the
        corpus plus at most one full pass; a number runs exactly that many passes (on the
        sample too, then the full pass when the corpus is larger); 0 none.
        The corpus is read from the inputs recorded in the store. Method's choice: 'auto'
        (rectified), 0 (plain).
    core_size : 'auto', 'all' or int, optional
        Words the spectral stages work on: the most frequent (by document frequency).
        'auto': ``max(2000, 40·K)`` words, fewer if ``CORE_COPIES`` dense n×n copies would
        not fit the memory budget; 'all': the whole vocabulary. Used only with refinement, which
        gives the other words their rows. Method's choice: 'auto' (rectified), 'all'
        (plain).
    sketch_dim : int
        Dimension d of the random projection used to find anchors (``min(d, V)``).
    anchor_min_df : int, optional
        Document frequency an anchor candidate needs; default
        :func:`~streamtopic.anchors.default_anchor_min_df` (4% of documents, 10 to 400).
    exact_anchors : bool
        Find anchors on Q̄ itself instead of the sketch (holds Q̄ in memory: V ≤ 8000).
    cleanup : bool
        Run FastAnchorWords' cleanup pass.
    tol : float, optional
        Solver tolerance on the duality gap (default 1e-7 relative for L2, 1e-10 for the
        active set, 1e-6 nats for KL).
    max_iter : int, optional
        Solver iteration cap (default 5000 for L2, 3K + 10 for the active set, 1000 for KL).
    block_rows : int, optional
        Word rows per recovery task (default: from the store's chunk size and V).
    seed : int, optional
        Seed of the random projection, of the rectification's eigensolver and of the
        refinement's sample; the fit is deterministic given it (an automatic core depends on
        the memory budget only when the budget is below ``CORE_COPIES`` copies of its
        max(2000, 40·K) words: set ``memory_budget`` or ``core_size`` to pin it).
    progress : bool
        Show Dask progress bars.
    scratch_dir : path, optional
        Directory for the fit's scratch arrays (a subdirectory ``.streamtopic-fit-*`` is
        made, owned by the fit and removed when it ends; those of killed fits are removed
        by later fits). Nothing is written into the store but the bounded cache of
        rectified arrays, so a read-only store can be fitted. Default: a temporary
        directory (``tempfile.gettempdir()``) when the fit runs on this machine (no
        distributed client, or one whose workers all run on this host), else the directory
        containing the store, which a cluster's workers share.

    Attributes
    ----------
    components_ : ndarray of shape (K, V)
        Topic-word distributions p(w | z); rows sum to 1.
    anchors_ : ndarray of shape (K,)
        Anchor word ids; ``anchor_words_`` the words.
    topic_prevalence_ : ndarray of shape (K,)
        p(z).
    topic_cooccurrence_ : ndarray of shape (K, K)
        R, the topic-topic co-occurrence (sums to 1), by ``topic_topic``.
    vocab_ : list of str
        The V words.
    n_converged_ : int
        Word rows whose solver met the tolerance (out of ``n_fitted_``).
    diagnostics_ : dict
        Seconds per stage, greedy anchors before cleanup, solver statistics.
    """

    def __init__(
        self,
        n_topics: int = 20,
        *,
        method: str = "rectified",
        recover: str | None = None,
        rectify: str | None = None,
        rectify_iters: int = 15,
        anchor_method: str | None = None,
        topic_topic: str | None = None,
        memory_budget: int | None = None,
        refine_passes: int | str | None = None,
        core_size: int | str | None = None,
        sketch_dim: int = 1000,
        anchor_min_df: int | None = None,
        exact_anchors: bool = False,
        cleanup: bool = True,
        tol: float | None = None,
        max_iter: int | None = None,
        block_rows: int | None = None,
        seed: int | None = None,
        progress: bool = False,
        scratch_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.n_topics = n_topics
        self.method = method
        self.recover = recover
        self.rectify = rectify
        self.rectify_iters = rectify_iters
        self.anchor_method = anchor_method
        self.topic_topic = topic_topic
        self.memory_budget = memory_budget
        self.refine_passes = refine_passes
        self.core_size = core_size
        self.sketch_dim = sketch_dim
        self.anchor_min_df = anchor_min_df
        self.exact_anchors = exact_anchors
        self.cleanup = cleanup
        self.tol = tol
        self.max_iter = max_iter
        self.block_rows = block_rows
        self.seed = seed
        self.progress = progress
        self.scratch_dir = scratch_dir

    # ----------------------------------------------------------------- parameters

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor parameters (scikit-learn convention)."""
        return {
            k: getattr(self, k)
            for k in (
                "n_topics", "method", "recover", "rectify", "rectify_iters", "anchor_method",
                "topic_topic", "memory_budget", "refine_passes", "core_size", "sketch_dim",
                "anchor_min_df", "exact_anchors", "cleanup",
                "tol", "max_iter", "block_rows", "seed", "progress", "scratch_dir",
            )
        }

    def set_params(self, **params: Any) -> AnchorTopicModel:
        valid = self.get_params()
        for k, v in params.items():
            if k not in valid:
                raise ValueError(f"invalid parameter {k!r} for AnchorTopicModel")
            setattr(self, k, v)
        return self

    def _validate(self) -> None:
        """Check the parameters and resolve the method's choices into ``self._s``."""
        K = self.n_topics
        if not isinstance(K, (int, np.integer)) or isinstance(K, bool) or K < 2:
            raise ValueError(f"n_topics={K!r}: must be an integer >= 2")
        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r}: expected one of {', '.join(METHODS)}")
        chosen = {name: getattr(self, name) for name in METHODS[self.method]}
        if self.exact_anchors and chosen["anchor_method"] is None:
            chosen["anchor_method"] = "sketch"  # FastAnchorWords on the exact rows of Q̄
        s = _Settings(**{k: (METHODS[self.method][k] if v is None else v)
                         for k, v in chosen.items()})
        if s.recover not in RECOVER_METHODS:
            raise ValueError(f"recover={s.recover!r}: expected one of {', '.join(RECOVER_METHODS)}")
        for name, allowed in (("rectify", RECTIFY_METHODS), ("anchor_method", ANCHOR_METHODS),
                              ("topic_topic", TOPIC_TOPIC_METHODS)):
            if getattr(s, name) not in allowed:
                raise ValueError(
                    f"{name}={getattr(s, name)!r}: expected one of {', '.join(allowed)}"
                )
        it = self.rectify_iters
        if not isinstance(it, (int, np.integer)) or isinstance(it, bool) or it < 1:
            raise ValueError(f"rectify_iters={it!r}: must be an integer >= 1")
        rp = s.refine_passes
        if rp != "auto" and (not isinstance(rp, (int, np.integer)) or isinstance(rp, bool)
                             or rp < 0):
            raise ValueError(f"refine_passes={rp!r}: must be 'auto' or an integer >= 0")
        cs = s.core_size
        if cs not in ("auto", "all") and (not isinstance(cs, (int, np.integer))
                                          or isinstance(cs, bool) or cs <= K):
            raise ValueError(f"core_size={cs!r}: must be 'auto', 'all' or an integer > n_topics")
        if self.core_size not in (None, "all") and rp == 0:
            raise ValueError(f"core_size={self.core_size!r} needs refinement, which gives the "
                             "words outside the core their rows: refine_passes must not be 0")
        mb = self.memory_budget
        if mb is not None and (not isinstance(mb, (int, np.integer)) or isinstance(mb, bool)
                               or mb < 1):
            raise ValueError(f"memory_budget={mb!r}: must be a positive int (bytes) or None")
        if self.exact_anchors and s.anchor_method == "qr":
            raise ValueError("exact_anchors and anchor_method='qr' are two exact methods; "
                             "choose one")
        if not isinstance(self.sketch_dim, (int, np.integer)) or self.sketch_dim < 1:
            raise ValueError(f"sketch_dim={self.sketch_dim!r}: must be a positive integer")
        if self.anchor_min_df is not None and (
            not isinstance(self.anchor_min_df, (int, np.integer)) or self.anchor_min_df < 0
        ):
            raise ValueError(f"anchor_min_df={self.anchor_min_df!r}: must be an integer >= 0")
        if self.tol is not None and not self.tol > 0:
            raise ValueError(f"tol={self.tol!r}: must be positive")
        if self.max_iter is not None and self.max_iter < 1:
            raise ValueError(f"max_iter={self.max_iter!r}: must be >= 1")
        if self.block_rows is not None and self.block_rows < 1:
            raise ValueError(f"block_rows={self.block_rows!r}: must be >= 1")
        sd = self.scratch_dir
        if sd is not None:
            if isinstance(sd, bytes) or not isinstance(sd, (str, os.PathLike)) or not str(sd):
                raise ValueError(f"scratch_dir={sd!r}: must be a directory path or None")
            if os.path.exists(sd) and not os.path.isdir(sd):
                raise ValueError(f"scratch_dir={os.fspath(sd)}: is not a directory")
        self._s = s

    # ----------------------------------------------------------------- fit

    def fit(
        self, X: CooccurrenceStore | str | os.PathLike[str], y: None = None, *, client: Any = None
    ) -> AnchorTopicModel:
        """Learn topics from a co-occurrence store.

        Parameters
        ----------
        X : CooccurrenceStore or path
            The store (see :func:`streamtopic.ingest`).
        y : None
            Ignored (scikit-learn convention).
        client : distributed.Client, optional
            Run on this client's cluster (default: the current client, else the configured
            Dask scheduler, else threads).

        Returns
        -------
        self
        """
        if client is not None:
            with client.as_current():
                return self.fit(X, y)
        from .cluster import client_blas

        with client_blas():
            return self._fit(X)

    def _fit(self, X: CooccurrenceStore | str | os.PathLike[str]) -> AnchorTopicModel:
        self._validate()
        store = _open_store(X)
        try:
            return self._fit_store(store)
        finally:
            if store is not X:  # opened here: release its lease on the version it read
                store.close()

    def _fit_store(self, store: CooccurrenceStore) -> AnchorTopicModel:
        from .cluster import memory_budget

        if store.n_docs == 0:
            raise StoreError(f"{store.path}: the store is empty (no documents ingested)")
        self._budget = (int(self.memory_budget) if self.memory_budget is not None
                        else memory_budget())
        corpus = self._training_corpus(store)
        core = self._core_words(store, refining=corpus is not None)
        root = self._scratch_root(store)
        _collect_fit_debris(root, store.path)
        seconds: dict[str, float] = {}
        refined = None
        self._held: list[Any] = []  # cache entries this fit uses, held until it ends
        try:
            with _owned_scratch(root) as scratch:
                if core is None:
                    fit = self._spectral_store(store, scratch, seconds)
                else:
                    fit = self._spectral_core(store, core, seconds)
                if corpus is not None:
                    refined = self._refine(fit.start, corpus, store, scratch, seconds)
        finally:
            for held in self._held:
                held.release()
            self._held = []
        self._set_results(store, fit, refined, seconds)
        return self

    def _scratch_root(self, store: CooccurrenceStore) -> str:
        """The directory the fit's scratch directory is made in: ``scratch_dir``, else a
        temporary directory when the fit runs on this machine, else the directory that
        contains the store (shared by a cluster's workers)."""
        if self.scratch_dir is not None:
            return os.path.abspath(os.fspath(self.scratch_dir))
        if _runs_on_this_host():
            return tempfile.gettempdir()
        return os.path.dirname(os.path.abspath(store.path))

    def _training_corpus(self, store: CooccurrenceStore) -> Any | None:
        """The corpus the refinement reads (the inputs recorded in the store), or None when
        there is no refinement. ``refine_passes='auto'`` skips it, with a warning, when no
        recorded input exists any more (e.g. a population Q); a number of passes needs it."""
        rp = self._s.refine_passes
        if rp == 0:
            return None
        from .corpus import recorded_corpus

        corpus = recorded_corpus(store)  # StoreError: an input missing or changed
        if corpus is None:
            if rp == "auto":
                log.warning("%s: no recorded input can be read again, so the topics are not "
                            "refined (the spectral stages use the whole vocabulary)",
                            store.path)
                return None
            raise ModelError(
                f"refine_passes={rp}: {store.path} records no input that can be read again "
                "(a population Q, or text tokenised by a custom analyzer); refinement reads "
                "the training corpus"
            )
        return corpus

    def _core_words(self, store: CooccurrenceStore, refining: bool) -> np.ndarray | None:
        """The core vocabulary (sorted word ids): the ``n`` words of highest document
        frequency, ``n`` from ``core_size`` ('auto': ``max(CORE_MIN, CORE_PER_TOPIC · K)``, fewer
        when ``CORE_COPIES`` dense n×n copies would not fit the memory budget). None when the spectral
        stages take the whole vocabulary: ``core_size='all'``, no refinement (only the
        refinement gives the other words their rows), no document frequencies, or a core
        that would hold every word."""
        size = self._s.core_size
        if size == "all" or not refining or not store.counts_known:
            return None
        K = int(self.n_topics)
        if size == "auto":  # the core is held here, so this process' memory sizes it
            from .cluster import MEMORY_SHARE, local_memory

            budget = (int(self.memory_budget) if self.memory_budget is not None
                      else int(MEMORY_SHARE * local_memory()))
            size = max(2 * K, min(max(CORE_MIN, CORE_PER_TOPIC * K),
                                  int(np.sqrt(budget / (8 * CORE_COPIES)))))
        df = np.asarray(store.doc_freq)
        if size >= int((df > 0).sum()):
            return None
        order = np.argsort(-df, kind="stable")[:size]
        return np.sort(order)

    def _spectral_store(
        self, store: CooccurrenceStore, scratch: str, seconds: dict[str, float]
    ) -> _Spectral:
        """The spectral stages on the whole stored Q: sketch (or row statistics), anchors,
        recovery and topic-topic, by Dask graphs over Q's blocks (or on Q held in memory
        when a few V×V copies fit the budget)."""
        import zarr

        s, K = self._s, int(self.n_topics)
        self._q_bytes = store.q_bytes()
        rect_info: dict[str, Any] | None = None
        self._in_memory_q = None
        Q, load = store.Q, store.read_dense
        src = QBlocks.from_store(store)
        if s.rectify != "none":
            t0 = time.perf_counter()
            Q, rect_info = self._rectified(store, scratch)
            seconds["rectify"] = time.perf_counter() - t0
            path = rect_info["path"]
            load = lambda: read_array_dense(zarr.open_array(path, mode="r"))  # noqa: E731
            src = QBlocks.from_zarr(path)

        Q, Q_held = self._maybe_in_memory(Q, load)
        if Q_held is not None:
            src = QBlocks.from_memory(Q_held, src.chunk)
        t0 = time.perf_counter()
        if s.anchor_method == "qr":
            p, norms = self._row_stats(Q)
            candidates = self._candidates(p, self._frequent(store))
            X_points = None
        else:
            p, norms, candidates, X_points = self._sketch(Q, src, store, scratch)
        seconds["sketch"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        if s.anchor_method == "qr":
            res = find_anchors_qr(Q if Q_held is None else Q_held, p, K, candidates,
                                  norms=norms, memory_budget=self._budget,
                                  progress=self.progress)
        else:
            res = find_anchors(X_points, K, candidates, cleanup=self.cleanup,
                               precision="double" if self.exact_anchors else "single")
        del X_points
        seconds["anchors"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        A, prevalence, solver, Q_SS, AtQA = self._recover(Q, src, p, norms, res.anchors,
                                                          scratch)
        seconds["recovery"] = time.perf_counter() - t0
        # (the pass over Q for Aᵀ Q A runs within the recovery's graph)
        R = (anchor_topic_cooccurrence(A, res.anchors, Q_SS) if s.topic_topic == "anchor"
             else pinv_topic_cooccurrence(A, AtQA))
        return _Spectral(A=A, prevalence=prevalence, R=R, p=p, anchors=res,
                         n_candidates=int(candidates.size), solver=solver,
                         rectification=rect_info, start=A.T, core=None)

    def _spectral_core(
        self, store: CooccurrenceStore, core: np.ndarray, seconds: dict[str, float]
    ) -> _Spectral:
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
        frequent = self._frequent(store)
        cand = np.flatnonzero(np.isin(core, frequent)) if frequent is not None else None
        fit = spectral_in_memory(
            Qc, int(self.n_topics), self._s, candidates=cand, rectify_iters=int(self.rectify_iters),
            seed=self.seed, cleanup=self.cleanup, tol=self.tol, max_iter=self.max_iter,
            seconds=seconds)
        del Qc
        counts = np.asarray(store.word_counts, dtype=np.float64)
        unigram = counts / counts.sum()
        share = unigram[core].sum()
        start = np.tile(unigram, (fit.A.shape[1], 1))
        start[:, core] = fit.A.T * share
        p = unigram.copy()
        res = replace(fit.anchors, anchors=core[fit.anchors.anchors],
                      greedy=core[fit.anchors.greedy],
                      history=[core[h] for h in fit.anchors.history])
        A = np.zeros((store.V, fit.A.shape[1]))
        A[core] = fit.A
        return _Spectral(A=A, prevalence=fit.prevalence, R=fit.R, p=p, anchors=res,
                         n_candidates=fit.n_candidates, solver=fit.solver,
                         rectification=fit.rectification, start=start,
                         core={"size": int(core.size), "share_of_tokens": float(share)})

    def _refine(self, start: np.ndarray, corpus: Any, store: CooccurrenceStore, scratch: str,
                seconds: dict[str, float]) -> Any:
        """EM over the corpus from ``start`` (K×V): until it converges ('auto'), or a set
        number of passes."""
        from .refinement import refine_topics

        rp = self._s.refine_passes
        t0 = time.perf_counter()
        refined = refine_topics(start, corpus, list(store.vocab),
                                passes=None if rp == "auto" else int(rp),
                                seed=self.seed if self.seed is not None else 0,
                                scratch=scratch, progress=self.progress)
        seconds["refine"] = time.perf_counter() - t0
        return refined

    def _set_results(self, store: CooccurrenceStore, fit: _Spectral, refined: Any,
                     seconds: dict[str, float]) -> None:
        A, prevalence = fit.A, fit.prevalence
        if refined is not None:
            A, prevalence = refined.components.T, refined.prevalence
        res = fit.anchors
        self.vocab_ = list(store.vocab)
        self.components_ = np.ascontiguousarray(A.T)
        self.anchors_ = np.asarray(res.anchors, dtype=np.int64)
        self.anchor_words_ = [self.vocab_[i] for i in self.anchors_]
        self.topic_prevalence_ = prevalence
        self.topic_cooccurrence_ = fit.R
        self.word_probability_ = fit.p
        self.n_converged_ = int(fit.solver["converged"])
        self.n_fitted_ = int(fit.solver["fitted"])
        self.n_features_in_ = store.V
        s = self._s
        self.diagnostics_ = {
            "seconds": seconds,
            "settings": {"method": self.method, "recover": s.recover, "rectify": s.rectify,
                         "anchor_method": s.anchor_method, "topic_topic": s.topic_topic,
                         "refine_passes": s.refine_passes, "core_size": s.core_size,
                         "memory_budget": int(self._budget)},
            "core": fit.core,
            "greedy_anchors": np.asarray(res.greedy).tolist(),
            "cleanup_changed": int(res.changed),
            "cleanup_sweeps": int(res.sweeps),
            "n_candidates": int(fit.n_candidates),
            "anchor_min_df": int(self._min_df_used),
            "solver": fit.solver,
            "rectification": fit.rectification,
            "refinement": None if refined is None else _refine_diagnostics(refined),
            "topic_topic": s.topic_topic,
            "store": {"path": store.path, "version": store.version, "n_docs": store.n_docs},
        }

    def _rectified(self, store: CooccurrenceStore, scratch: str) -> tuple[Any, dict[str, Any]]:
        """The rectified Q (V×V dask array over its own zarr array), computed once per store
        version and settings into the store's bounded cache and reused by later fits
        (:func:`~streamtopic.rectification.open_cache_entry`); computed into ``scratch``
        and not kept when the cache cannot be used (a read-only store, or another fit
        writing the same entry)."""
        import dask.array as da

        from .rectification import cache_limit, open_cache_entry, rectify

        K = int(self.n_topics)
        key = (f"v{store.version:06d}-K{K}-{self._s.rectify}-{int(self.rectify_iters)}"
               f"-seed{self.seed if self.seed is not None else 'none'}")
        entry = open_cache_entry(store.path, key, version=store.version,
                                 limit=cache_limit(store.q_bytes()),
                                 reserve=8 * store.V * store.V)
        if entry is not None:
            self._held.append(entry)  # released when the fit ends: no one removes it before
            path = entry.path
        else:
            path = os.path.join(scratch, "rectified", key)
        info: dict[str, Any] = {"method": self._s.rectify, "iterations": int(self.rectify_iters),
                                "path": path, "cached": entry is not None}
        if entry is not None and entry.reused:
            info["reused"] = True
        else:
            res = rectify(store, K, path, method=self._s.rectify, n_iter=int(self.rectify_iters),
                          seed=self.seed if self.seed is not None else 0,
                          memory_budget=self._budget,
                          scratch=os.path.join(scratch, "rectify"), progress=self.progress,
                          keep_array=self._fits_in_memory(store.V))
            info.update(reused=False, movement=[float(m) for m in res.movement],
                        seconds=[float(t) for t in res.seconds], in_memory=bool(res.in_memory),
                        eigenvalues=np.asarray(res.eigenvalues).tolist())
        self._q_bytes = _disk_bytes(path)
        if not info["reused"] and res.array is not None:
            self._in_memory_q = res.array  # the fit need not read it back
        return da.from_zarr(path), info

    def _maybe_in_memory(
        self, Q: Any, load: Callable[[], np.ndarray]
    ) -> tuple[Any, np.ndarray | None]:
        """Q read once into memory when three dense V×V copies fit ``memory_budget`` and no
        distributed cluster runs the fit (a cluster's workers read the store instead:
        nothing of size V×V goes through its scheduler). Every later pass then costs
        arithmetic only, not reading and decompressing Q.

        ``load`` reads Q into memory. Returns the Q the passes use (a dask array, over the
        held array when held) and the held V×V array itself (None when Q stays in the
        store)."""
        import dask.array as da

        held = getattr(self, "_in_memory_q", None)
        self._in_memory_q = None
        if held is None:
            if not self._fits_in_memory(Q.shape[0]):
                return Q, None
            t0 = time.perf_counter()
            held = load()
            log.info("load Q: %.2f s, %.1f MiB read", time.perf_counter() - t0,
                     self._q_bytes / 2**20)
        self._q_bytes = 0
        # a view dask does not copy (from_array copies anything with a .copy method)
        return da.from_array(_ReadOnly(held), chunks=Q.chunks, asarray=False,
                             name=f"held-q-{uuid.uuid4().hex}"), held

    def _fits_in_memory(self, V: int) -> bool:
        from .cluster import current_client

        return current_client() is None and 3 * 8 * V * V <= self._budget

    def _row_stats(self, Q: Any) -> tuple[np.ndarray, np.ndarray]:
        """Row sums p (V,) and squared row norms of Q̄ (V,), in one pass over Q."""
        from .cluster import compute

        s, sq = compute(Q.sum(axis=1), (Q * Q).sum(axis=1), progress=self.progress,
                        label="row sums", bytes_read=self._q_bytes)
        p = np.asarray(s, dtype=np.float64)
        inv = _inverse(p)
        return p, np.asarray(sq, dtype=np.float64) * inv * inv

    def _sketch(
        self, Q: Any, src: QBlocks, store: CooccurrenceStore, scratch: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
        """Row sums p (V,), squared row norms of Q̄ (V,), the anchor candidates (sorted word
        ids) and the points anchors are chosen among, indexable by those ids: the
        candidates' rows of the sketch (n_candidates×d, the only rows read back), or Q̄
        itself (V×V) in exact mode."""
        import zarr

        from .cluster import compute

        V = Q.shape[0]
        if self.exact_anchors:
            if V > EXACT_MAX_V:
                raise ValueError(
                    f"exact_anchors holds Q̄ ({V}×{V}) in memory; use it for V <= {EXACT_MAX_V}"
                )
            (Qn,) = compute(Q, progress=self.progress, label="sketch (exact)")
            p = Qn.sum(axis=1)
            inv = _inverse(p)
            Qbar = Qn * inv[:, None]
            candidates = self._candidates(p, self._frequent(store))
            return p, np.einsum("ij,ij->i", Qbar, Qbar), candidates, Qbar
        d = int(min(self.sketch_dim, V))
        xpath, spath = os.path.join(scratch, "sketch"), os.path.join(scratch, "sketch-stats")
        frequent = self._frequent(store)  # the candidates, but for words without mass
        # unoptimised: the graph is already coarse, and optimising it drops the parts'
        # priority annotations
        compute(write_sketch(src, d, self.seed, xpath, spath, rows=frequent),
                progress=self.progress, label="sketch",
                bytes_read=src.stored_bytes(upper_blocks(src.n_blocks)), optimize_graph=False)
        sums = zarr.open_array(spath, mode="r")[:]
        p = sums[:, 0].copy()
        inv = _inverse(p)
        norms = sums[:, 1] * inv * inv
        candidates = self._candidates(p, frequent)
        # PᵀQ is d×V: the candidates' columns, scaled by 1/p, are their rows of Q̄ P
        cols = zarr.open_array(xpath, mode="r").get_orthogonal_selection(
            (slice(None), candidates))
        rows = np.ascontiguousarray(cols.T, dtype=np.float64)
        rows *= inv[candidates, None]
        return p, norms, candidates, _CandidateRows(candidates, rows)

    def _frequent(self, store: CooccurrenceStore) -> np.ndarray | None:
        """The words whose document frequency reaches ``anchor_min_df`` (sorted ids; None if
        no threshold applies). Sets ``_min_df_used``."""
        min_df = self.anchor_min_df
        if min_df is None:
            min_df = default_anchor_min_df(store.n_docs) if store.counts_known else 0
        self._min_df_used = min_df
        if store.counts_known and min_df > 0:
            return np.flatnonzero(store.doc_freq >= min_df)
        return None

    @staticmethod
    def _candidates(p: np.ndarray, frequent: np.ndarray | None) -> np.ndarray:
        """Anchor candidates: the words of ``frequent`` (:meth:`_frequent`; None: all) with
        co-occurrence mass (p > 0), as sorted ids."""
        if frequent is None:
            return np.flatnonzero(p > 0)
        return frequent[p[frequent] > 0]

    def _rows_per_block(self, V: int, chunk: int, width: int) -> int:
        """Rows per recovery task: ``block_rows`` if given, else Q's chunk size halved until
        there are about 8 tasks per worker (for balance: rows differ in cost) and a task's
        (rows × width) input stays under 64 MiB. A power-of-two fraction of the chunk size
        splits Q's row blocks without merging any two, so a task waits for one row block of
        the product only."""
        if self.block_rows is not None:
            return int(self.block_rows)
        from .cluster import n_workers

        budget = max(64, int(64 * 2**20 / (8 * max(width, 1))))
        target = min(budget, max(64, -(-V // (8 * n_workers()))))
        rows = chunk
        while rows > target and rows % 2 == 0 and rows // 2 >= 64:
            rows //= 2
        return int(rows)

    def _recover(
        self, Q: Any, src: QBlocks, p: np.ndarray, norms: np.ndarray, anchors: np.ndarray,
        scratch: str,
    ) -> tuple[np.ndarray, np.ndarray, dict[str, Any], np.ndarray, np.ndarray | None]:
        """A (V×K), p(z) (K,), solver statistics, Q_SS (K×K, the anchors' entries of Q) and,
        for ``topic_topic='pinv'``, Aᵀ Q A (K×K; else None).

        ``Q`` is the dask array of Q and ``src`` reads its blocks inside tasks. For the
        simplex solvers this is one Dask graph of coarse tasks, so that no stage waits for a
        round trip through the client and few tasks wait for the scheduler: per block of Q
        the anchor columns Y = Q_{:,S} (V×K); the Gram YᵀY and Q_SS (K×K); per block the
        products B = Q Y; the fits, by pieces of a row block; and, as row blocks of the fit
        arrive, (C diag p)ᵀ Q (C diag p) for Aᵀ Q A. Every task reads the blocks of Q it
        uses itself, so no decoded block waits in memory for a consumer."""
        import zarr

        from .cluster import compute

        V, K = Q.shape[0], anchors.size
        c = src.chunk
        method = self._s.recover
        rows_path = os.path.join(scratch, "rows")
        zarr.create_array(rows_path, shape=(V, 2), chunks=(c, 2), dtype="f8",
                          compressors=None)[:] = np.column_stack([p, norms])
        g = _RecoveryGraph(src, anchors, rows_path)
        if method == "original":
            ypath = os.path.join(scratch, "Y")
            _, gram = compute(_to_scratch(g.Y(), ypath), g.anchor_block(),
                              progress=self.progress, label="anchor rows",
                              bytes_read=src.stored_bytes(g.y_blocks()))
            Q_SS = np.asarray(gram)[:, K:]
            A, prevalence = _original_topics(
                recover_original(zarr.open_array(ypath, mode="r")[:], Q_SS, p[anchors])[0], p)
            n_fit = int((p > 0).sum())
            AtQA = None
            if self._s.topic_topic != "anchor":
                import dask.array as da

                # the workers read A (V×K) from scratch, by row blocks
                apath = os.path.join(scratch, "A")
                zarr.create_array(apath, shape=A.shape, chunks=(c, K), dtype="f8",
                                  compressors=None)[:] = A
                (AtQA,) = compute(g.topic_topic(da.from_zarr(apath)), progress=self.progress,
                                  label="topic-topic",
                                  bytes_read=src.stored_bytes(g.upper_blocks()))
                AtQA = np.asarray(AtQA)
            return A, prevalence, {"method": "original", "converged": n_fit, "fitted": n_fit,
                                   "max_gap": 0.0}, Q_SS, AtQA
        tol = self.tol
        max_iter = self.max_iter
        if method in KERNEL_SOLVERS:
            tol = (1e-10 if method == "activeset" else 1e-7) if tol is None else tol
            if max_iter is None:
                max_iter = 3 * K + 10 if method == "activeset" else 5000
            width = (K + 1) ** 2 if method == "activeset" else K
            rows = self._rows_per_block(V, c, width)
            fitted = g.kernel_fit(rows, _inverse(p)[anchors], method=method, tol=tol,
                                  max_iter=max_iter)
        else:
            import dask.array as da
            from dask.graph_manipulation import clone

            tol = 1e-6 if tol is None else tol
            max_iter = 1000 if max_iter is None else max_iter
            rows = self._rows_per_block(V, c, V)
            inv = _inverse(p)
            inv_d = da.from_array(inv, chunks=(Q.chunks[0],))
            Qbar = (clone(Q) * inv_d[:, None]).rechunk((rows, V))
            R = (g.Y() * inv[anchors][None, :]).T.rechunk((K, V))
            out = da.blockwise(
                _kl_block, "ik", Qbar, "ij", R, "kj",
                dtype=np.float64, concatenate=True, adjust_chunks={"k": K + 2},
                tol=tol, max_iter=max_iter,
            ).rechunk((c, K + 2))
            fitted = g.row_blocks_of(out)
        cpath = os.path.join(scratch, "C")
        zarr.create_array(cpath, shape=(V, K + 2), chunks=(c, K + 2), dtype="f8",
                          compressors=None)
        joined = g.join(fitted, cpath)
        last = g.topic_topic(joined) if self._s.topic_topic != "anchor" else g.done(joined)
        passes = 1 + (self._s.topic_topic != "anchor")  # B = Q Y (or Q̄'s rows), Aᵀ Q A
        gram, tail = compute(g.anchor_block(), last, progress=self.progress, label="recovery",
                             bytes_read=src.stored_bytes(g.y_blocks())
                             + passes * src.stored_bytes(g.upper_blocks()),
                             optimize_graph=method not in KERNEL_SOLVERS)
        Q_SS = np.asarray(gram)[:, K:]
        Cext = zarr.open_array(cpath, mode="r")[:]
        C, conv, gap = Cext[:, :K], Cext[:, K] > 0.5, Cext[:, K + 1]
        fitted_rows = p > 0
        # Bayes' rule: p(w | z) ∝ p(z | w) p(w)
        weighted = C * p[:, None]
        mass = weighted.sum(axis=0)
        scale = 1.0 / np.where(mass > 0, mass, 1.0)
        A = weighted * scale[None, :]
        prevalence = mass / mass.sum()
        AtQA = None
        if self._s.topic_topic != "anchor":
            # Aᵀ Q A = diag(1/π) (C diag p)ᵀ Q (C diag p) diag(1/π)
            AtQA = np.asarray(tail) * np.outer(scale, scale)
        solver = {
            "method": method,
            "tol": tol,
            "converged": int((conv & fitted_rows).sum()),
            "fitted": int(fitted_rows.sum()),
            "max_gap": float(gap[fitted_rows].max()) if fitted_rows.any() else 0.0,
        }
        return A, prevalence, solver, Q_SS, AtQA

    # ----------------------------------------------------------------- results

    def _check_fitted(self) -> None:
        if not hasattr(self, "components_"):
            raise ModelError("this AnchorTopicModel is not fitted yet; call fit first")

    def top_words(self, n: int = 10) -> list[list[str]]:
        """The ``n`` most probable words of each topic, most probable first."""
        self._check_fitted()
        if n < 1:
            raise ValueError(f"n={n!r}: must be >= 1")
        order = np.argsort(-self.components_, axis=1, kind="stable")[:, :n]
        return [[self.vocab_[i] for i in row] for row in order]

    def transform(self, X: Any) -> np.ndarray:
        """Topic proportions of documents, topics fixed (see :mod:`streamtopic.inference`).

        Parameters
        ----------
        X : sparse matrix or array of shape (n_docs, V)
            Word counts over the model's vocabulary.

        Returns
        -------
        ndarray of shape (n_docs, K)
            Rows on the simplex.
        """
        import scipy.sparse as sp

        from .inference import infer_topics

        self._check_fitted()
        X = sp.csr_matrix(X)
        if X.shape[1] != self.components_.shape[1]:
            raise ValueError(
                f"X has {X.shape[1]} columns; the model's vocabulary has "
                f"{self.components_.shape[1]} words"
            )
        return infer_topics(self.components_, X)

    # ----------------------------------------------------------------- persistence

    def _meta(self) -> dict[str, Any]:
        return {
            "format": MODEL_FORMAT,
            "format_version": 1,
            "params": self.get_params(),
            "anchor_words": self.anchor_words_,
            "n_converged": self.n_converged_,
            "n_fitted": self.n_fitted_,
            "diagnostics": self.diagnostics_,
        }

    def save(self, path: str | os.PathLike[str], format: str = "zarr") -> None:
        """Save to a zarr group (default) or an HDF5 file; written aside, then renamed."""
        import zarr

        self._check_fitted()
        path = os.fspath(path)
        if format not in ("zarr", "hdf5"):
            raise ValueError(f"format={format!r}: expected 'zarr' or 'hdf5'")
        if os.path.exists(path) and not AnchorTopicModel._is_model(path):
            raise ModelError(f"{path}: exists and is not a streamtopic model; not overwritten")
        tmp = f"{path}.partial-{uuid.uuid4().hex[:8]}"
        arrays = {
            "components": self.components_,
            "anchors": self.anchors_,
            "topic_prevalence": self.topic_prevalence_,
            "topic_cooccurrence": self.topic_cooccurrence_,
            "word_probability": self.word_probability_,
        }
        meta = json.loads(json.dumps(self._meta(), default=_json_default))
        try:
            if format == "zarr":
                root = zarr.open_group(tmp, mode="w-")
                for name, arr in arrays.items():
                    root.create_array(name, data=np.asarray(arr))
                v = root.create_array("vocab", shape=(len(self.vocab_),), dtype=str)
                v[:] = np.asarray(self.vocab_, dtype=str)
                root.attrs["streamtopic_model"] = meta
            else:
                import h5py

                with h5py.File(tmp, "w") as f:
                    for name, arr in arrays.items():
                        f.create_dataset(name, data=np.asarray(arr))
                    f.create_dataset(
                        "vocab", data=np.array(self.vocab_, dtype=object),
                        dtype=h5py.string_dtype(),
                    )
                    f.attrs["streamtopic_model"] = json.dumps(meta)
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
            os.rename(tmp, path)
        finally:
            if os.path.isdir(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
            elif os.path.exists(tmp):
                os.remove(tmp)

    @staticmethod
    def _is_model(path: str) -> bool:
        try:
            AnchorTopicModel.load(path)
        except ModelError:
            return False
        return True

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AnchorTopicModel:
        """Load a model saved by :meth:`save` (zarr group or HDF5 file)."""
        path = os.fspath(path)
        if not os.path.exists(path):
            raise ModelError(f"{path}: no such model")
        arrays: dict[str, np.ndarray] = {}
        try:
            if os.path.isdir(path):
                import zarr

                root = zarr.open_group(path, mode="r")
                meta = root.attrs.get("streamtopic_model")
                if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
                    raise ModelError(f"{path}: not a streamtopic model")
                for name in ("components", "anchors", "topic_prevalence",
                             "topic_cooccurrence", "word_probability"):
                    arrays[name] = np.asarray(root[name][:])
                vocab = [str(t) for t in root["vocab"][:]]
            else:
                import h5py

                with h5py.File(path, "r") as f:
                    raw = f.attrs.get("streamtopic_model")
                    meta = json.loads(raw) if isinstance(raw, str) else None
                    if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
                        raise ModelError(f"{path}: not a streamtopic model")
                    for name in ("components", "anchors", "topic_prevalence",
                                 "topic_cooccurrence", "word_probability"):
                        arrays[name] = f[name][:]
                    vocab = [x.decode() if isinstance(x, bytes) else str(x) for x in f["vocab"][:]]
        except ModelError:
            raise
        except Exception as exc:  # foreign files: zarr/h5py raise many kinds
            raise ModelError(f"{path}: not a streamtopic model ({exc})") from exc
        params = dict(meta["params"])
        params.setdefault("method", "plain")  # saved before methods existed: what ran then
        model = cls(**params)
        model.components_ = arrays["components"]
        model.anchors_ = arrays["anchors"].astype(np.int64)
        model.topic_prevalence_ = arrays["topic_prevalence"]
        model.topic_cooccurrence_ = arrays["topic_cooccurrence"]
        model.word_probability_ = arrays["word_probability"]
        model.vocab_ = vocab
        model.anchor_words_ = [vocab[i] for i in model.anchors_]
        model.n_converged_ = int(meta["n_converged"])
        model.n_fitted_ = int(meta["n_fitted"])
        model.n_features_in_ = len(vocab)
        model.diagnostics_ = meta["diagnostics"]
        return model


def _json_default(o: Any) -> Any:
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


@contextmanager
def _owned_scratch(root: str) -> Iterator[str]:
    """The fit's own scratch directory under ``root``: owned by this process while the fit
    runs, then removed. A directory that cannot be written is a one-line error naming it."""
    from ._scratch import owned_dir

    with ExitStack() as stack:
        try:
            path = stack.enter_context(owned_dir(root, FIT_PREFIX))
        except OSError as exc:
            raise ValueError(
                f"{root}: cannot write the fit's scratch there ({exc.strerror or exc}); "
                "choose another directory (scratch_dir, or --scratch)"
            ) from None
        yield path


def _collect_fit_debris(root: str, store_path: str) -> int:
    """Remove what killed fits left: their scratch directories under ``root`` (owner lock
    free), and in the store (when writable) the scratch of fits of earlier versions
    (``.scratch/fit-*``, an hour old) and partial rectified arrays. Bytes freed."""
    from ._scratch import collect

    freed = collect(root, lambda n: n.startswith(FIT_PREFIX))
    legacy = os.path.join(store_path, ".scratch")
    if os.path.isdir(legacy):
        freed += collect(legacy, lambda n: n.startswith("fit-"))
        with suppress(OSError):  # left if not empty (or read-only)
            os.rmdir(legacy)
    from .rectification import CACHE_DIR, _collect_cache

    cache = os.path.join(store_path, CACHE_DIR)
    if os.path.isdir(cache):
        freed += _collect_cache(cache)
    if freed:
        log.info("removed %.1f MiB left by killed fits", freed / 2**20)
    return freed


def _local_hosts() -> set[str]:
    """Names and addresses of this host."""
    hosts = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"}
    for name in (socket.gethostname(), socket.getfqdn()):
        hosts.add(name)
        try:
            hosts.update(socket.gethostbyname_ex(name)[2])
        except OSError:
            pass
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            hosts.update(a.address.split("%")[0] for a in addrs if a.address)
    except (ImportError, OSError):  # pragma: no cover - psutil missing or unsupported here
        log.debug("cannot list this host's addresses")
    return hosts


def _runs_on_this_host() -> bool:
    """Whether the fit's work runs on this machine: no distributed client, or a client whose
    workers all run on this host (their scratch can then be a local temporary directory)."""
    from .cluster import _workers, current_client

    client = current_client()
    if client is None:
        return True
    addresses = list(_workers(client))
    if not addresses:
        return False
    from distributed.comm import get_address_host

    local = _local_hosts()
    for addr in addresses:
        if addr.startswith("inproc://"):
            continue
        try:
            host = get_address_host(addr)
        except ValueError:  # pragma: no cover - an address we cannot parse
            return False
        if host not in local and not host.startswith("127."):
            return False
    return True


def _to_scratch(arr: Any, path: str) -> Any:
    """The delayed write of ``arr`` (a dask array with regular chunks) to a new zarr array
    at ``path`` with the same chunks, uncompressed: scratch arrays are read back once, and
    their floats do not compress, so a compressor only costs time on both sides."""
    import dask.array as da

    return da.to_zarr(arr, path, compute=False, overwrite=True, compressors=None)


def _inverse(p: np.ndarray) -> np.ndarray:
    """1/p where p > 0, else 0 (words never seen have zero rows: never divide by zero)."""
    return np.where(p > 0, 1.0 / np.where(p > 0, p, 1.0), 0.0)


def _disk_bytes(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total


def spectral_in_memory(
    Q: np.ndarray,
    n_topics: int,
    settings: _Settings,
    *,
    candidates: np.ndarray | None = None,
    rectify_iters: int = 15,
    seed: int | None = None,
    cleanup: bool = True,
    tol: float | None = None,
    max_iter: int | None = None,
    seconds: dict[str, float],
) -> _Spectral:
    """Rectification, anchors, recovery and topic-topic on a co-occurrence matrix held in
    memory (a core vocabulary's), with threads and no Dask graph.

    Parameters
    ----------
    Q : ndarray of shape (n, n)
        Symmetric, non-negative, summing to 1. Not modified.
    n_topics : int
        K.
    settings : _Settings
        The stages' choices (``recover``, ``rectify``, ``anchor_method``, ``topic_topic``).
    candidates : ndarray of int, optional
        Rows that may become anchors (default: every row with mass).
    seconds : dict
        Receives each stage's wall time.

    Returns
    -------
    _Spectral
        With row ids of ``Q`` for the anchors; ``start`` is ``A.T``.
    """
    from .rectification import rectify_in_memory

    K = int(n_topics)
    rect_info = None
    t0 = time.perf_counter()
    if settings.rectify != "none":
        res_r = rectify_in_memory(Q, K, method=settings.rectify, n_iter=rectify_iters,
                                  seed=seed if seed is not None else 0)
        Q = res_r.array
        rect_info = {"method": settings.rectify, "iterations": rectify_iters, "reused": False,
                     "in_memory": True, "movement": [float(m) for m in res_r.movement],
                     "seconds": [float(x) for x in res_r.seconds],
                     "eigenvalues": np.asarray(res_r.eigenvalues).tolist()}
        seconds["rectify"] = time.perf_counter() - t0
    p = Q.sum(axis=1)
    inv = _inverse(p)
    cand = np.flatnonzero(p > 0) if candidates is None else candidates[p[candidates] > 0]
    t0 = time.perf_counter()
    Qbar = Q * inv[:, None]
    norms = np.einsum("ij,ij->i", Qbar, Qbar)
    if settings.anchor_method == "qr":
        res = find_anchors_qr(Q, p, K, cand, in_memory=True, norms=norms, memory_budget=2**62)
    else:
        res = find_anchors(Qbar, K, cand, cleanup=cleanup, precision="double")
    seconds["anchors"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    S = res.anchors
    if settings.recover == "original":
        A, prevalence, solver = _recover_original_in_memory(Q, p, S)
    else:
        C, solver = _recover_in_memory(Q, Qbar, norms, p, S, settings.recover, tol, max_iter)
        weighted = C * p[:, None]  # Bayes' rule: p(w | z) ∝ p(z | w) p(w)
        mass = weighted.sum(axis=0)
        A = weighted / np.where(mass > 0, mass, 1.0)[None, :]
        prevalence = mass / mass.sum()
    if settings.topic_topic == "anchor":
        R = anchor_topic_cooccurrence(A, S, Q[np.ix_(S, S)])
    else:
        R = pinv_topic_cooccurrence(A, A.T @ (Q @ A))
    seconds["recovery"] = time.perf_counter() - t0
    return _Spectral(A=A, prevalence=prevalence, R=R, p=p, anchors=res,
                     n_candidates=int(cand.size), solver=solver, rectification=rect_info,
                     start=A.T, core=None)


def _recover_in_memory(
    Q: np.ndarray, Qbar: np.ndarray, norms: np.ndarray, p: np.ndarray, S: np.ndarray,
    method: str, tol: float | None, max_iter: int | None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """p(z | w) for every row (n×K) and the solver's statistics, from Q (n×n) held in memory:
    the kernel solvers on B = Q̄ Q̄_Sᵀ and the Gram Q̄_S Q̄_Sᵀ, by row blocks on threads;
    RecoverKL on the full rows; the original Recover."""
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    from .cluster import usable_cores

    K = S.size
    fitted = p > 0
    if method in KERNEL_SOLVERS:
        tol = (1e-10 if method == "activeset" else 1e-7) if tol is None else tol
        max_iter = (3 * K + 10 if method == "activeset" else 5000) if max_iter is None \
            else max_iter
        B = Qbar @ Qbar[S].T
        G = Qbar[S] @ Qbar[S].T
        fit = lambda r: _kernel_block(B[r], norms[r], G, tol=tol,  # noqa: E731
                                      max_iter=max_iter, method=method)
    else:
        tol = 1e-6 if tol is None else tol
        max_iter = 1000 if max_iter is None else max_iter
        fit = lambda r: _kl_block(Qbar[r], Qbar[S], tol=tol, max_iter=max_iter)  # noqa: E731
    n = Q.shape[0]
    step = -(-n // (4 * usable_cores()))
    pieces = [slice(r, min(n, r + step)) for r in range(0, n, step)]
    with threadpool_limits(limits=1, user_api="blas"), \
            ThreadPoolExecutor(usable_cores()) as pool:
        out = np.vstack(list(pool.map(fit, pieces)))
    C, conv, gap = out[:, :K], out[:, K] > 0.5, out[:, K + 1]
    C[~fitted] = 0.0
    return C, {"method": method, "tol": tol, "converged": int((conv & fitted).sum()),
               "fitted": int(fitted.sum()),
               "max_gap": float(gap[fitted].max()) if fitted.any() else 0.0}


def _original_topics(A_un: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A (V×K) and p(z) (K,) from the original Recover's unnormalised A_un (V×K): its columns
    normalised, and p(z) the simplex weights that best explain p(w) = Σ_k A_wk p(z=k) (NNLS)."""
    from scipy.optimize import nnls

    col = A_un.sum(axis=0)
    A = A_un / np.where(col > 0, col, 1.0)
    w, _ = nnls(A, p)
    K = A.shape[1]
    return A, (w / w.sum() if w.sum() > 0 else np.full(K, 1.0 / K))


def _recover_original_in_memory(
    Q: np.ndarray, p: np.ndarray, S: np.ndarray
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The original Recover on Q (n×n) held in memory: A (n×K), p(z) and the record."""
    A, prevalence = _original_topics(recover_original(Q[:, S], Q[np.ix_(S, S)], p[S])[0], p)
    n = int((p > 0).sum())
    return A, prevalence, {"method": "original", "converged": n, "fitted": n, "max_gap": 0.0}


def _refine_diagnostics(refined: Any) -> dict[str, Any]:
    """The refinement's record in ``diagnostics_``."""
    out = {"passes": len(refined.loglik_per_token),
           "loglik_per_token": refined.loglik_per_token,
           "seconds": refined.seconds, "theta_iterations": refined.theta_iterations}
    for name in ("converged", "sample_docs", "sample_tokens", "full_pass"):
        if hasattr(refined, name):
            out[name] = getattr(refined, name)
    return out


def pinv_topic_cooccurrence(A: np.ndarray, AtQA: np.ndarray) -> np.ndarray:
    """R = A† Q A†ᵀ (K×K) with A† = (AᵀA)⁻¹Aᵀ, from A (V×K) and Aᵀ Q A (K×K); symmetrised."""
    Minv = np.linalg.pinv(A.T @ A, hermitian=True)
    R = Minv @ np.asarray(AtQA) @ Minv
    return 0.5 * (R + R.T)


def anchor_topic_cooccurrence(A: np.ndarray, anchors: np.ndarray, Q_SS: np.ndarray) -> np.ndarray:
    """The anchor formula for the topic-topic matrix (Lee et al.): R = diag(1/a) Q_SS diag(1/a).

    With Q = A R Aᵀ and anchor s_k occurring in topic k only, Q_SS = diag(a) R diag(a) where
    a_k = A[s_k, k]; so R follows from the anchors' block of Q alone. Symmetrised and
    normalised to sum 1.

    Parameters
    ----------
    A : ndarray of shape (V, K)
        Topic-word probabilities p(w | z) (columns sum to 1).
    anchors : ndarray of shape (K,)
        Anchor word of each topic.
    Q_SS : ndarray of shape (K, K)
        Q at the anchors' rows and columns, in the same order.

    Returns
    -------
    ndarray of shape (K, K)
    """
    a = A[np.asarray(anchors), np.arange(A.shape[1])]
    inv = _inverse(a)
    R = inv[:, None] * np.asarray(Q_SS, dtype=np.float64) * inv[None, :]
    R = 0.5 * (R + R.T)
    total = R.sum()
    return R / total if total > 0 else R


#: Bytes of one (rows × K) float64 array in a solver's inner loop: sub-blocks of a task's rows
#: are solved in turn so that the loop's temporaries stay below glibc's default mmap threshold
#: (128 KiB). Dask's worker processes set ``MALLOC_TRIM_THRESHOLD_``, which freezes that
#: threshold, so every larger temporary is a fresh mmap and its pages fault in again on each
#: iteration: with 1,250-row blocks at K = 50, RecoverL2 ran 4× slower in a worker than in
#: this process. Rows are independent problems, so the split changes no result.
SOLVE_BYTES = 96 * 2**10


class _RecoveryGraph:
    """The recovery's Dask graph, built task by task over the blocks of Q (nb×nb blocks of
    ``src.chunk`` rows; K anchors). Outputs are dask arrays whose chunks are one row block
    (V×K arrays) or one K×K array; every task reads its own blocks of Q through ``src``."""

    def __init__(self, src: QBlocks, anchors: np.ndarray, rows_path: str) -> None:
        self.src = src
        self.anchors = np.asarray(anchors, dtype=np.int64)
        self.K = int(self.anchors.size)
        self.nb = src.n_blocks
        self.sizes = src.sizes
        self.rows_path = rows_path
        self.token = uuid.uuid4().hex[:16]
        self._y: Any = None
        self._gram: Any = None

    def _array(self, prefix: str, dsk: dict, deps: list[Any], chunks: tuple) -> Any:
        import dask.array as da
        from dask.highlevelgraph import HighLevelGraph

        name = f"{prefix}-{self.token}"
        dsk = {(name,) + k: v for k, v in dsk.items()}
        graph = HighLevelGraph.from_collections(name, dsk, dependencies=deps)
        return da.Array(graph, name, chunks=chunks, dtype=np.float64,
                        meta=np.empty((0,) * len(chunks)))

    def upper_blocks(self) -> list[tuple[int, int]]:
        """The blocks on and above the diagonal: all that a pass over the symmetric Q
        reads (what :meth:`kernel_fit`'s products and :meth:`topic_topic` read)."""
        return upper_blocks(self.nb)

    def y_blocks(self) -> list[tuple[int, int]]:
        """The blocks on and above the diagonal whose rows or columns hold anchors (what
        :meth:`Y` reads: by symmetry, Q_{:,S} is the transpose of the anchors' rows)."""
        owners = set((self.anchors // self.src.chunk).tolist())
        return [(i, j) for i, j in self.upper_blocks() if i in owners or j in owners]

    def Y(self) -> Any:
        """Y = Q_{:,S} (V×K), columns in the anchors' order: a task per block on and above
        the diagonal that holds anchor rows or columns, then a sum per row block. Block
        (i, j) gives row block i its anchor columns and, Q being symmetric, row block j the
        transposes of its anchor rows."""
        import dask

        if self._y is not None:
            return self._y
        c, K = self.src.chunk, self.K
        owner = self.anchors // c
        ks = [np.flatnonzero(owner == b) for b in range(self.nb)]
        offsets = [self.anchors[k] - b * c for b, k in enumerate(ks)]
        parts = {(i, j): (_anchor_columns, self.src, i, j, offsets[j], ks[j], offsets[i],
                          ks[i], K)
                 for i, j in self.y_blocks()}
        # the largest blocks first: every later task waits for Y
        sizes = self.sizes
        with dask.annotate(priority=lambda k: sizes[k[1]] * sizes[k[2]]):
            P = self._array("st-yparts", parts, [], (self.sizes, (K,) * self.nb))
        dsk = {}
        for r in range(self.nb):
            # row block r: the columns of (r, j), j >= r, at anchors in j; the transposed
            # rows of (i, r), i < r, at anchors in i
            mine = [((P.name, r, j), 0) for j in range(r, self.nb) if ks[j].size]
            mine += [((P.name, i, r), 1) for i in range(r) if ks[i].size]
            # (never empty: every anchor's column reaches every row block)
            dsk[(r, 0)] = (sum_sides, tuple(side for _, side in mine), *[k for k, _ in mine])
        self._y = self._array("st-y", dsk, [P], (self.sizes, (K,)))
        return self._y

    def anchor_block(self) -> Any:
        """[YᵀY | Q_SS] (K×2K): the anchors' Gram and their entries of Q, in their order."""
        if self._gram is not None:
            return self._gram
        Y = self.Y()
        parts = {(i, 0): (_anchor_gram, self.anchors, self.src.chunk, i, (Y.name, i, 0))
                 for i in range(self.nb)}
        P = self._array("st-gram-parts", parts, [Y], ((self.K,) * self.nb, (2 * self.K,)))
        dsk = {(0, 0): (sum_arrays, *[(P.name, i, 0) for i in range(self.nb)])}
        self._gram = self._array("st-gram", dsk, [P], ((self.K,), (2 * self.K,)))
        return self._gram

    def times(self, X: Any) -> Any:
        """Q X (V×K) for X (V×K, chunked by Q's row blocks), by row blocks: a task per block
        on and above the diagonal (Q is symmetric: block (i, j) also gives Q_ji X_i), then a
        sum per row block."""
        import dask

        src = self.src
        parts = {(i, j): (_block_times, src, i, j, (X.name, i, 0), (X.name, j, 0))
                 for i, j in self.upper_blocks()}
        with dask.annotate(priority=lambda k: src.pass_cost(k[1], k[2])):  # largest first
            P = self._array("st-qy-parts", parts, [X], (self.sizes, (self.K,) * self.nb))
        dsk = {k[1:]: v for k, v in row_block_sums(P.name, "", self.nb).items()}
        return self._array("st-qy", dsk, [P], (self.sizes, (self.K,)))

    def kernel_fit(
        self, rows: int, inv_S: np.ndarray, *, method: str, tol: float, max_iter: int
    ) -> tuple[list[list[tuple]], Any]:
        """The keys of the fitted pieces (n×(K+2) each) of every row block, and the dask
        array holding them: B = Q Y per block of Q, summed per row block, then the simplex
        fits by pieces of ``rows`` rows (``inv_S``: 1/p at the anchors)."""
        Y, gram = self.Y(), self.anchor_block()
        B = self.times(Y)
        pieces: dict = {}
        keys: list[list] = []
        piece_rows: list[int] = []
        n = 0
        for i, size in enumerate(self.sizes):
            keys.append([])
            r0 = self.src.span(i).start
            for a in range(0, size, rows):
                b = min(size, a + rows)
                pieces[(n, 0)] = (_solve_piece, (B.name, i, 0), (gram.name, 0, 0),
                                  self.rows_path, r0, a, b, inv_S, method, tol, max_iter)
                keys[i].append(n)
                piece_rows.append(b - a)
                n += 1
        F = self._array("st-fit", pieces, [B, gram], (tuple(piece_rows), (self.K + 2,)))
        return [[(F.name, k, 0) for k in ks] for ks in keys], F

    def row_blocks_of(self, out: Any) -> tuple[list[list[tuple]], Any]:
        """The keys of a V×(K+2) dask array chunked by row blocks (one piece per block),
        and the array."""
        return [[(out.name, i, 0)] for i in range(self.nb)], out

    def join(self, fitted: tuple[list[list[tuple]], Any], cpath: str) -> Any:
        """C (V×(K+2)) written to ``cpath`` by row blocks (each task owns its zarr chunk);
        returns C diag p (V×K) by row blocks."""
        blocks, dep = fitted
        dsk = {(i, 0): (_join_rows, cpath, self.rows_path, self.src.span(i).start,
                        self.K, *blocks[i])
               for i in range(self.nb)}
        return self._array("st-cp", dsk, [dep], (self.sizes, (self.K,)))

    def topic_topic(self, Cp: Any) -> Any:
        """Cpᵀ Q Cp (K×K) for Cp (V×K, chunked by Q's row blocks), e.g. C diag p or A: a
        task per block of Q, then their sum."""
        parts = {(i, j): (_topic_part, self.src, i, j, (Cp.name, i, 0), (Cp.name, j, 0))
                 for i, j in self.upper_blocks()}
        P = self._array("st-tt-parts", parts, [Cp], ((self.K,) * self.nb,) * 2)
        dsk = {(0, 0): (sum_arrays, *[(P.name, i, j) for i, j in self.upper_blocks()])}
        return self._array("st-tt", dsk, [P], ((self.K,), (self.K,)))

    def done(self, Cp: Any) -> Any:
        """A 1×1 array that depends on every row block of ``Cp`` (so that C is written)."""
        dsk = {(0, 0): (_count_rows, *[(Cp.name, i, 0) for i in range(self.nb)])}
        return self._array("st-done", dsk, [Cp], ((1,), (1,)))


def _anchor_columns(
    src: QBlocks, i: int, j: int, cols: np.ndarray, ks: np.ndarray, rows: np.ndarray,
    ks_rows: np.ndarray, K: int,
) -> tuple[np.ndarray | None, ...]:
    """Block (i, j), i <= j, of Q at its anchor columns ``cols`` (offsets in block j),
    placed at columns ``ks`` of an n_i×K array; for i < j also the transposes of its anchor
    rows ``rows`` (offsets in block i), at columns ``ks_rows`` of an n_j×K array (Q_ji at
    the anchor columns of block i). Zeros elsewhere; None for a side without anchors."""
    block = src.block(i, j)
    left = right = None
    if ks.size:
        left = np.zeros((block.shape[0], K))
        left[:, ks] = block[:, cols]
    if i != j and ks_rows.size:
        right = np.zeros((block.shape[1], K))
        right[:, ks_rows] = block[rows, :].T
    return left, right


def _anchor_gram(anchors: np.ndarray, chunk: int, i: int, Y: np.ndarray) -> np.ndarray:
    """Row block i's share of [YᵀY | Q_SS] (K×2K): Y_iᵀY_i, and the rows of Q_SS of the
    anchors that fall in row block i."""
    K = anchors.size
    out = np.zeros((K, 2 * K))
    out[:, :K] = Y.T @ Y
    ks = np.flatnonzero(anchors // chunk == i)
    out[ks, K:] = Y[anchors[ks] - i * chunk]
    return out


def _block_times(
    src: QBlocks, i: int, j: int, X_i: np.ndarray, X_j: np.ndarray
) -> tuple[np.ndarray, ...]:
    """What block (i, j), i <= j, of the symmetric Q adds to Q X: Q_ij X_j (n_i×K) to row
    block i and, for i < j, Q_ji X_i = Q_ijᵀ X_i (n_j×K) to row block j. One read serves
    both."""
    block = src.block(i, j)
    if i == j:
        return (block @ X_j,)
    return block @ X_j, (X_i.T @ block).T


def _scratch_rows(rows_path: str, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
    """p and the squared norms of Q̄'s rows r0:r1, from the scratch array the client wrote."""
    from .store import _open_read_only

    stats = np.asarray(_open_read_only(rows_path)[r0:r1])
    return stats[:, 0], stats[:, 1]


def _solve_piece(
    B: np.ndarray, gram: np.ndarray, rows_path: str, r0: int, a: int, b: int,
    inv_S: np.ndarray, method: str, tol: float, max_iter: int,
) -> np.ndarray:
    """The simplex fits of rows a:b of a row block starting at row r0 (n×(K+2)), from
    B = Q Y for the block (n_i×K), [YᵀY | Q_SS] (K×2K) and 1/p at the anchors (K,)."""
    K = inv_S.size
    p, norms = _scratch_rows(rows_path, r0 + a, r0 + b)
    inv = _inverse(p)
    G = gram[:, :K] * np.outer(inv_S, inv_S)
    Bs = B[a:b] * inv[:, None] * inv_S[None, :]
    return _kernel_block(Bs, norms, G, tol=tol, max_iter=max_iter, method=method)


def _join_rows(cpath: str, rows_path: str, r0: int, K: int, *pieces: np.ndarray) -> np.ndarray:
    """Writes the fitted rows of one row block to C (its own zarr chunk) and returns
    C diag p for them (n×K)."""
    import zarr

    block = np.concatenate(pieces, axis=0) if len(pieces) > 1 else pieces[0]
    zarr.open_array(cpath, mode="r+")[r0:r0 + block.shape[0]] = block
    p, _ = _scratch_rows(rows_path, r0, r0 + block.shape[0])
    return block[:, :K] * p[:, None]


def _topic_part(src: QBlocks, i: int, j: int, Cp_i: np.ndarray, Cp_j: np.ndarray) -> np.ndarray:
    """What block (i, j), i <= j, of the symmetric Q adds to Cpᵀ Q Cp (K×K): M = Cp_iᵀ Q_ij
    Cp_j, plus, for i < j, Mᵀ = Cp_jᵀ Q_ji Cp_i."""
    M = Cp_i.T @ (src.block(i, j) @ Cp_j)
    return M if i == j else M + M.T


def _count_rows(*blocks: np.ndarray) -> np.ndarray:
    return np.array([[float(sum(b.shape[0] for b in blocks))]])


def _kernel_block(
    B: np.ndarray, norms: np.ndarray, G: np.ndarray, *, tol: float, max_iter: int,
    method: str = "l2",
) -> np.ndarray:
    """Solve a block of rows (B: n×K) by sub-blocks of ``SOLVE_BYTES``; returns n×(K+2):
    the simplex rows, converged (0/1) and the duality gap."""
    n, K = B.shape
    step = max(16, SOLVE_BYTES // (8 * max(K, 1)))
    step = -(-n // -(-n // step))  # equal sub-blocks: no small remainder pays a full solve
    out = np.empty((n, K + 2))
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        res = KERNEL_SOLVERS[method](G, B[r0:r1], norms[r0:r1], tol=tol, max_iter=max_iter)
        out[r0:r1, :K] = res.C
        out[r0:r1, K] = res.converged
        out[r0:r1, K + 1] = res.gap
    return out


def _kl_block(Qbar: np.ndarray, R: np.ndarray, *, tol: float, max_iter: int) -> np.ndarray:
    # warm start from the L2 fit of the same rows (kernel form: cheap)
    start = solve_l2(
        R @ R.T, Qbar @ R.T, np.einsum("ij,ij->i", Qbar, Qbar), tol=1e-6, max_iter=500
    ).C
    res = solve_kl(R, Qbar, tol=tol, max_iter=max_iter, C0=start)
    return np.column_stack([res.C, res.converged.astype(np.float64), res.gap])


def top_words_table(model: AnchorTopicModel, n: int = 10) -> Sequence[str]:
    """One line per topic: its top words, the anchor marked with ``*``."""
    lines = []
    for k, words in enumerate(model.top_words(n)):
        anchor = model.anchor_words_[k]
        shown = [f"*{w}*" if w == anchor else w for w in words]
        if anchor not in words:
            shown.append(f"(anchor *{anchor}*)")
        lines.append(f"topic {k:3d} ({model.topic_prevalence_[k]:.3f}): " + " ".join(shown))
    return lines
