"""``AnchorTopicModel``: the anchor-word topic model as a scikit-learn style estimator.

The default ``method='rectified'`` reads the core vocabulary's block of Q into memory once
(:meth:`~streamtopic.store.CooccurrenceStore.read_submatrix`) and runs the spectral stages
there on threads (:func:`spectral_in_memory`): rectification, exact anchors, the fits and
the topic-topic matrix; then EM over the corpus (:mod:`streamtopic.refinement`) refines the
topics and gives every other word its row.

On the whole vocabulary (``method='plain'``, or ``core_size='all'``) ``fit`` runs two Dask
graphs over the stored Q, whose tasks read the blocks of Q they use themselves
(:class:`~streamtopic.passes.QBlocks`):

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

import inspect
import logging
import os
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np

from . import _warmup
from ._numeric import safe_inverse
from ._params import Constraint, Interval, Options, validate_params
from ._random import DEFAULT_SEED, resolve_seed
from ._scratch import disk_bytes
from .anchors import AnchorResult, find_anchors, find_anchors_lp, find_anchors_qr
from .cluster import MEMORY_SHARE, MemoryBudget, client_blas, current_client, local_memory
from .cooccurrence import ingest
from .corpus import Corpus, HDF5CorpusWriter, recorded_corpus
from .fitted import ModelError, check_is_fitted
from .hyperparameters import estimate_alpha, topic_cooccurrence_from_topics
from .inference import (
    chunk_counts,
    document_counts,
    infer_topics,
    model_prior,
    model_tokenizer,
    plugin_loglik,
)
from .interop import pyldavis_data, save_pyldavis
from .notebook import Report, topics_html
from .notebook import report as notebook_report
from .passes import QBlocks
from .persistence import load_model, save_model
from .recovery import (
    RECOVER_METHODS,
    anchor_topic_cooccurrence,
    pinv_topic_cooccurrence,
    recover_by_blocks,
    recover_in_memory,
    recover_original_in_memory,
)
from .rectification import RECTIFY_METHODS, rectify, rectify_in_memory
from .refinement import prior_alpha, refine_topics
from .selection import Selection, selected_store
from .sketch import (
    AnchorPoints,
    anchor_candidates,
    exact_points,
    frequent_words,
    row_sums_and_norms,
    sketch_points,
)
from .store import CooccurrenceStore, StoreError, read_array_dense
from .workspace import FIT_PREFIX as FIT_PREFIX  # the name of a fit's scratch directory
from .workspace import fit_scratch, rectified_key, rectified_target, scratch_root

__all__ = ["AnchorTopicModel", "ModelError", "anchor_topic_cooccurrence"]

EXACT_MAX_V = 8000  # exact (unprojected) anchors hold Q̄ densely: only for small V
#: Anchor finding: FastAnchorWords on a random projection of Q̄ ('sketch') or on Q̄'s exact
#: rows ('exact'), or the exact pivoted QR ('qr').
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
CORE_PER_TOPIC = 40
#: Dense n×n copies of the core that its stages hold at once (rectification's three).
CORE_COPIES = 4


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


log = logging.getLogger("streamtopic")


@dataclass
class _Spectral:
    """What the spectral stages give the estimator.

    ``A`` (V×K, columns sum to 1; zero rows outside a core), ``prevalence`` (K,), ``R``
    (K×K), ``p`` (V,) word probabilities, the anchor search's result (global word ids), the
    candidates' count, solver statistics, the rectification's record, ``start`` (K×V) the
    topics the refinement starts from, the core vocabulary's record (None: whole
    vocabulary) and its words (sorted ids; None: whole vocabulary)."""

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
    core_words: np.ndarray | None = None


@dataclass
class _StoredQ:
    """The Q that the spectral stages on the whole vocabulary read: ``Q`` (V×V dask array),
    ``blocks`` (its blocks, read inside tasks), ``held`` (the V×V array when Q is held in
    memory, else None) and the rectification's record (None: the raw Q)."""

    Q: Any
    blocks: QBlocks
    held: np.ndarray | None
    rectification: dict[str, Any] | None


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


@contextmanager
def _opened(X: Any) -> Iterator[CooccurrenceStore]:
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
        :func:`~streamtopic.workspace.cache_limit`) and reused by later fits with the
        same settings; in a read-only store it is written to ``scratch_dir`` and not kept.
        A core's is rectified in memory. Method's choice: 'ap' (rectified), 'none' (plain).
    rectify_iters : int
        Rectification iterations (the paper: 5 often enough, 15–20 close to 150).
    anchor_method : {'sketch', 'exact', 'qr', 'lp'}, optional
        FastAnchorWords on a random projection of Q̄ ('sketch'; exact rows of Q̄ on a
        core), FastAnchorWords on the exact rows of Q̄ ('exact'; holds Q̄ in memory on the
        whole vocabulary: V ≤ 8000), or exact anchors by the implicit pivoted QR of Q̄
        ('qr'; K passes over Q when the whole Q does not fit ``memory_budget``). Method's
        choice: 'qr' (rectified), 'sketch' (plain). 'lp': Arora, Ge and Moitra's (2012)
        linear programs, one per candidate, measuring how far its row of Q̄ lies outside the
        convex hull of the rows not near it, with noise thresholds from the data
        (:func:`~streamtopic.anchors.find_anchors_lp`; HiGHS); holds Q̄ in memory, for
        small V (seconds at V = 500). Its noise thresholds need the sampling noise that
        rectification removes, so with 'lp' the rectification defaults to 'none' whatever
        the method (``rectify='ap'`` still asks for it).
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
    min_df, max_df, keep_n : int, float, int, optional
        The vocabulary chosen at fit time (:mod:`streamtopic.selection`): the store's words
        in at least ``min_df`` documents and at most ``max_df`` (a fraction in (0, 1]) of
        them, then the ``keep_n`` of highest document frequency, with gensim's
        ``filter_extremes`` semantics. The fit then equals, to rounding, a fit on the store
        ingested with that pruning; the corpus is not read again for it. Default (None):
        ``streamtopic.selection.FIT_MIN_DF`` etc., which keep every word. A store built
        before input-length normalisation refuses a selection (re-ingest it).
    stop_words : {'english', 'none'}, path, list of str, optional
        Further words to leave out of the fit's vocabulary: scikit-learn's English list,
        none, the words of a file (one per line) or a list. Only the vocabulary changes:
        the documents' lengths stay those of the store. Default (None):
        ``streamtopic.selection.FIT_STOP_WORDS`` (none).
    sketch_dim : int
        Dimension d of the random projection used to find anchors (``min(d, V)``).
    anchor_min_df : int, optional
        Document frequency an anchor candidate needs; default
        :func:`~streamtopic.sketch.default_anchor_min_df` (4% of documents, 10 to 400).
    exact_anchors : bool
        Deprecated: ``anchor_method='exact'``.
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
        Seed of the random projection, of the rectification's eigensolver, of the LP anchors
        and of the refinement's sample, resolved once per fit (None: the default seed 0,
        :data:`~streamtopic._random.DEFAULT_SEED`, so that a fit with the default is
        reproducible in every stage and equal to one with ``seed=0``); the fit is
        deterministic given it (an automatic core depends on
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
    alpha_ : ndarray of shape (K,)
        The Dirichlet parameter α of the documents' topic proportions, estimated from the
        moments (:func:`~streamtopic.hyperparameters.estimate_alpha`; α₀ = Σ α in
        ``diagnostics_['alpha']``). Without refinement, from ``topic_cooccurrence_`` and
        ``topic_prevalence_``. With refinement, from the refined topics: R = Â† Q Â†ᵀ on the
        core's block of Q (or that of the most probable words of a core's size) and the
        refined prevalence, a consistent pair, and more accurate than the spectral R.
    vocab_ : list of str
        The V words (the store's, or those the fit selected: ``min_df`` …).
    n_converged_ : int
        Word rows whose solver met the tolerance (out of ``n_fitted_``).
    diagnostics_ : dict
        Seconds per stage, greedy anchors before cleanup, solver statistics, the store fitted
        (``store``: path, version, documents) and the fit's vocabulary selection
        (``vocabulary``: its settings and sizes, or None).

    See Also
    --------
    streamtopic.evaluation.evaluate : Coherence, unique words and held-out likelihood.
    streamtopic.persistence : How :meth:`save` and :meth:`load` store a model.
    """

    #: Where the model was last saved or loaded from, and that file's mtime (inference
    #: tasks read it from there); None while it is only in memory.
    saved_at: tuple[str, int] | None = None

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
        min_df: int | None = None,
        max_df: float | None = None,
        keep_n: int | None = None,
        stop_words: str | os.PathLike[str] | Sequence[str] | None = None,
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
        self.min_df = min_df
        self.max_df = max_df
        self.keep_n = keep_n
        self.stop_words = stop_words
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

    #: Each parameter's constraints (:mod:`streamtopic._params`); those that tie two
    #: parameters together are checked by :meth:`fit_settings`.
    _parameter_constraints: ClassVar[dict[str, list[Constraint]]] = {
        "n_topics": [Interval(Integral, 2, None)],
        "method": [Options(*METHODS)],
        "recover": [Options(*RECOVER_METHODS), None],
        "rectify": [Options(*RECTIFY_METHODS), None],
        "rectify_iters": [Interval(Integral, 1, None)],
        "anchor_method": [Options(*ANCHOR_METHODS), None],
        "topic_topic": [Options(*TOPIC_TOPIC_METHODS), None],
        "memory_budget": [Interval(Integral, 1, None), None],
        "refine_passes": [Options("auto"), Interval(Integral, 0, None), None],
        "core_size": [Options("auto", "all"), Interval(Integral, 1, None), None],
        "min_df": [Interval(Integral, 1, None), None],
        "max_df": [Interval(Real, 0, 1, closed="right"), None],
        "keep_n": [Interval(Integral, 1, None), None],
        "stop_words": [Options("english", "none"), "path", "words", None],
        "sketch_dim": [Interval(Integral, 1, None)],
        "anchor_min_df": [Interval(Integral, 0, None), None],
        "exact_anchors": ["boolean"],
        "cleanup": ["boolean"],
        "tol": [Interval(Real, 0, None, closed="neither"), None],
        "max_iter": [Interval(Integral, 1, None), None],
        "block_rows": [Interval(Integral, 1, None), None],
        "seed": [Interval(Integral, 0, None), None],
        "progress": ["boolean"],
        "scratch_dir": ["path", None],
    }

    @classmethod
    def _get_param_names(cls) -> list[str]:
        """The constructor's parameters, in its order (scikit-learn convention)."""
        return [p.name for p in inspect.signature(cls.__init__).parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor parameters (scikit-learn convention)."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> AnchorTopicModel:
        valid = self._get_param_names()
        for k, v in params.items():
            if k not in valid:
                raise ValueError(f"invalid parameter {k!r} for AnchorTopicModel")
            setattr(self, k, v)
        return self

    def fit_settings(self) -> FitSettings:
        """Check the parameters (:attr:`_parameter_constraints`, then the ties between
        them) and return the settings a fit runs with: the method's choices filled in."""
        validate_params(self._parameter_constraints, self.get_params())
        if self.exact_anchors:
            if self.anchor_method == "qr":
                raise ValueError("exact_anchors and anchor_method='qr' are two exact methods; "
                                 "choose one")
            warnings.warn("exact_anchors=True is deprecated; use anchor_method='exact'",
                          FutureWarning, stacklevel=4)  # the caller of fit
        choices = METHODS[self.method]
        s = FitSettings(**{k: v if getattr(self, k) is None else getattr(self, k)
                           for k, v in choices.items()}, seed=resolve_seed(self.seed))
        if self.exact_anchors:  # FastAnchorWords on the exact rows of Q̄
            s = replace(s, anchor_method="exact")
        if s.anchor_method == "lp" and self.rectify is None:  # LP's thresholds need the noise
            s = replace(s, rectify="none")
        if not isinstance(s.core_size, str) and s.core_size <= self.n_topics:
            raise ValueError(f"core_size={s.core_size!r}: must be 'auto', 'all' or an integer "
                             "> n_topics")
        if self.core_size not in (None, "all") and s.refine_passes == 0:
            raise ValueError(f"core_size={self.core_size!r} needs refinement, which gives the "
                             "words outside the core their rows: refine_passes must not be 0")
        sd = self.scratch_dir
        if sd is not None and os.path.exists(sd) and not os.path.isdir(sd):
            raise ValueError(f"scratch_dir={os.fspath(sd)}: is not a directory")
        self._selection().stop_set()  # a stop-word file that does not exist
        return s

    def _selection(self) -> Selection:
        """The fit's vocabulary selection (:mod:`streamtopic.selection`)."""
        return Selection.from_params(self.min_df, self.max_df, self.keep_n, self.stop_words)

    # ----------------------------------------------------------------- fit

    def fit(
        self, X: Any, y: None = None, *, client: Any = None,
        feature_names: Sequence[str] | None = None,
    ) -> AnchorTopicModel:
        """Learn topics from a co-occurrence store, or from a document-term count matrix.

        Parameters
        ----------
        X : CooccurrenceStore, path, or sparse matrix or array of shape (n_docs, V)
            The store (see :func:`streamtopic.ingest`); or counts in memory (e.g. from
            scikit-learn's ``CountVectorizer``), ingested into a store in the fit's scratch
            with every column kept, so that the model's words are the V columns in order
            and :meth:`transform` takes the same matrices.
        y : None
            Ignored (scikit-learn convention).
        client : distributed.Client, optional
            Run on this client's cluster (default: the current client, else the configured
            Dask scheduler, else threads).
        feature_names : sequence of str of length V, optional
            The words of a matrix's columns (e.g. ``get_feature_names_out()``); default
            ``x0`` … ``x{V−1}``, as scikit-learn names unnamed features.

        Returns
        -------
        self
        """
        if client is not None:
            with client.as_current():
                return self.fit(X, y, feature_names=feature_names)
        with client_blas():
            if is_count_matrix(X):
                return self._fit_matrix(X, feature_names)
            return self._fit(X)

    def _fit_matrix(self, X: Any, feature_names: Sequence[str] | None) -> AnchorTopicModel:
        """Fit counts held in memory: written as an HDF5 corpus and ingested with every
        column kept (the store's vocabulary fixed to the columns), in a scratch directory
        removed at the end."""
        H = _count_matrix(X)
        names = ([f"x{i}" for i in range(H.shape[1])] if feature_names is None
                 else [str(w) for w in feature_names])
        if len(names) != H.shape[1] or len(set(names)) != len(names):
            raise ValueError(f"feature_names: expected {H.shape[1]} distinct words, one per "
                             f"column of X; got {len(names)} ({len(set(names))} distinct)")
        here = os.path.join(os.getcwd(), "in-memory")  # a cluster's workers share the cwd
        with fit_scratch(scratch_root(self.scratch_dir, here), here) as scratch:
            corpus, vocab = os.path.join(scratch, "X.h5"), os.path.join(scratch, "vocab.txt")
            with HDF5CorpusWriter(corpus, names) as w:
                w.append(H, names)
            with open(vocab, "w", encoding="utf-8") as fh:
                fh.write("".join(f"{w}\n" for w in names))
            store = os.path.join(scratch, "X.zarr")
            ingest(corpus, store, vocab=vocab, progress=bool(self.progress))
            return self._fit(store)

    def _fit(self, X: CooccurrenceStore | str | os.PathLike[str]) -> AnchorTopicModel:
        """The stages: the training corpus and the core vocabulary are chosen, the spectral
        stages run on the core (in memory) or on the whole stored Q, the refinement runs
        over the corpus, and the results are set. The fit's scratch directory and the
        rectified arrays it uses from the store's cache are held until the stages end."""
        self._s = self.fit_settings()
        if self._s.refine_passes != 0:  # the EM kernel compiles while the spectral stages run
            _warmup.start()
        with _opened(X) as source:
            if int(self.n_topics) >= source.V:  # refused before anything is written
                raise ValueError(f"n_topics={self.n_topics}: must be below the {source.V:,} "
                                 f"words of {source.path}")
            self._budget = MemoryBudget.resolve(self.memory_budget).bytes
            seconds: dict[str, float] = {}
            root = self._scratch_root(source)
            with ExitStack() as held, fit_scratch(root, source.path) as scratch:
                t0 = time.perf_counter()
                store, selected = selected_store(source, self._selection(), scratch,
                                                 int(self.n_topics))
                if selected is not None:
                    seconds["select"] = time.perf_counter() - t0
                # the source's own record of its corpus (its token cache): a store derived
                # for a fit-time vocabulary holds only Q; refinement maps the words onto it
                corpus = self._training_corpus(source)
                core = self._core_words(store, refining=corpus is not None)
                spectral = (self._spectral_store(store, scratch, seconds, held) if core is None
                            else self._spectral_core(store, core, seconds))
                refined = (None if corpus is None
                           else self._refine(spectral.start, corpus, store, scratch, seconds,
                                             prior_alpha(spectral.R, spectral.prevalence)))
                self._set_results(store, spectral, refined, seconds)
            self.diagnostics_["store"] = _store_record(source)
            self.diagnostics_["vocabulary"] = selected
        return self

    def _scratch_root(self, store: CooccurrenceStore) -> str:
        """The directory the fit's scratch directory is made in
        (:func:`streamtopic.workspace.scratch_root`)."""
        return scratch_root(self.scratch_dir, store.path)

    def _training_corpus(self, store: CooccurrenceStore) -> Any | None:
        """The corpus the refinement reads (the inputs recorded in the store), or None when
        there is no refinement. ``refine_passes='auto'`` skips it, with a warning, when no
        recorded input exists any more (e.g. a population Q); a number of passes needs it."""
        rp = self._s.refine_passes
        if rp == 0:
            return None
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
        frequency, ``n`` from ``core_size`` ('auto': ``max(CORE_MIN, CORE_PER_TOPIC · K)``,
        fewer when ``CORE_COPIES`` dense n×n copies would not fit the memory budget). None
        when the spectral stages take the whole vocabulary: ``core_size='all'``, no
        refinement (only the refinement gives the other words their rows), no document
        frequencies, or a core that would hold every word."""
        size = self._s.core_size
        if size == "all" or not refining or not store.counts_known:
            return None
        if size == "auto":
            size = self._auto_core_size()
        df = np.asarray(store.doc_freq)
        if int(size) >= int((df > 0).sum()):
            return None
        order = np.argsort(-df, kind="stable")[:int(size)]
        return np.sort(order)

    def _auto_core_size(self) -> int:
        """``max(CORE_MIN, CORE_PER_TOPIC · K)`` words, fewer when ``CORE_COPIES`` dense n×n
        copies would not fit the memory budget (this process' memory, which holds the
        core), at least 2K."""
        K = int(self.n_topics)
        budget = MemoryBudget(int(self.memory_budget) if self.memory_budget is not None
                              else int(MEMORY_SHARE * local_memory()))
        return max(2 * K, min(max(CORE_MIN, CORE_PER_TOPIC * K), budget.largest(CORE_COPIES)))

    def _spectral_store(
        self, store: CooccurrenceStore, scratch: str, seconds: dict[str, float],
        held: ExitStack,
    ) -> _Spectral:
        """The spectral stages on the whole stored Q: sketch (or row statistics), anchors,
        recovery and topic-topic, by Dask graphs over Q's blocks (or on Q held in memory
        when a few V×V copies fit the budget). ``held`` keeps the rectified cache entry the
        fit reads until the fit ends."""
        s, K = self._s, int(self.n_topics)
        stored = self._stored_q(store, scratch, seconds, held)
        Q, src, Q_held = stored.Q, stored.blocks, stored.held
        t0 = time.perf_counter()
        X_points: Any = None
        if s.anchor_method == "qr":
            p, norms = self._row_stats(Q)
            candidates = self._candidates(p, self._frequent(store))
        else:
            p, norms, candidates, X_points = self._sketch(Q, src, store, scratch)
        seconds["sketch"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        if s.anchor_method == "qr":
            res = find_anchors_qr(Q if Q_held is None else Q_held, p, K, candidates,
                                  norms=norms, memory_budget=self._budget,
                                  progress=self.progress)
        elif s.anchor_method == "lp":
            res = find_anchors_lp(X_points, K, candidates, seed=s.seed)
        else:
            res = find_anchors(X_points, K, candidates, cleanup=self.cleanup,
                               precision="double" if s.anchor_method == "exact" else "single")
        del X_points
        seconds["anchors"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        A, prevalence, solver, Q_SS, AtQA = self._recover(Q, src, p, norms, res.anchors,
                                                          scratch)
        seconds["recovery"] = time.perf_counter() - t0
        if s.topic_topic == "anchor":
            R = anchor_topic_cooccurrence(A, res.anchors, Q_SS)
        else:  # the pass over Q for Aᵀ Q A ran within the recovery's graph
            assert AtQA is not None
            R = pinv_topic_cooccurrence(A, AtQA)
        return _Spectral(A=A, prevalence=prevalence, R=R, p=p, anchors=res,
                         n_candidates=int(candidates.size), solver=solver,
                         rectification=stored.rectification, start=A.T, core=None)

    def _stored_q(self, store: CooccurrenceStore, scratch: str, seconds: dict[str, float],
                  held: ExitStack) -> _StoredQ:
        """The Q the passes over the whole vocabulary read: the stored Q or its rectified
        array (:meth:`_rectified`), held in memory when it fits (:meth:`_maybe_in_memory`)."""
        import zarr

        self._q_bytes = store.q_bytes()
        self._in_memory_q: np.ndarray | None = None
        load: Callable[[], np.ndarray] = store.read_dense
        Q, src, info = store.Q, QBlocks.from_store(store), None
        if self._s.rectify != "none":
            t0 = time.perf_counter()
            Q, info = self._rectified(store, scratch, held)
            seconds["rectify"] = time.perf_counter() - t0
            path = info["path"]
            load = lambda: read_array_dense(zarr.open_array(path, mode="r"))  # noqa: E731
            src = QBlocks.from_zarr(path)
        Q, Q_held = self._maybe_in_memory(Q, load)
        if Q_held is not None:
            src = QBlocks.from_memory(Q_held, src.chunk)
        return _StoredQ(Q=Q, blocks=src, held=Q_held, rectification=info)

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
            seed=self._s.seed, cleanup=self.cleanup, tol=self.tol, max_iter=self.max_iter,
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
                         core={"size": int(core.size), "share_of_tokens": float(share)},
                         core_words=core)

    def _refine(self, start: np.ndarray, corpus: Any, store: CooccurrenceStore, scratch: str,
                seconds: dict[str, float], alpha: float | np.ndarray) -> Any:
        """EM over the corpus from ``start`` (K×V): until it converges ('auto'), or a set
        number of passes."""
        rp = self._s.refine_passes
        t0 = time.perf_counter()
        _warmup.wait()  # the EM kernel's compilation in another process (a first fit), if under way
        refined = refine_topics(start, corpus, list(store.vocab),
                                passes=None if rp == "auto" else int(rp),
                                seed=self._s.seed, alpha=alpha,
                                scratch=scratch, progress=self.progress)
        seconds["refine"] = time.perf_counter() - t0
        return refined

    def _set_results(self, store: CooccurrenceStore, fit: _Spectral, refined: Any,
                     seconds: dict[str, float]) -> None:
        A, prevalence = fit.A, fit.prevalence
        if refined is not None:
            A, prevalence = refined.components.T, refined.prevalence
        res = fit.anchors
        self.saved_at = None
        self.vocab_ = list(store.vocab)
        self.components_ = np.ascontiguousarray(A.T)
        self.anchors_ = np.asarray(res.anchors, dtype=np.int64)
        self.anchor_words_ = [self.vocab_[i] for i in self.anchors_]
        self.topic_prevalence_ = prevalence
        self.topic_cooccurrence_ = fit.R
        self.alpha_, alpha_record = self._alpha(store, fit, refined, seconds)
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
            "alpha": alpha_record,
            "store": _store_record(store),
        }

    def _alpha(self, store: CooccurrenceStore, fit: _Spectral, refined: Any,
               seconds: dict[str, float]) -> tuple[np.ndarray, dict[str, Any]]:
        """α (K,) of the documents' Dirichlet law and its record (α₀, which R it came from,
        on how many words). Without refinement: from the spectral R and prevalence. With
        refinement: from R = Â† Q Â†ᵀ for the refined topics Â on the core's block of Q (or
        the block of the most probable words of an automatic core's size), read again
        here, and the refined prevalence (:mod:`streamtopic.hyperparameters`)."""
        if refined is None:
            alpha = estimate_alpha(fit.R, fit.prevalence)
            return alpha, {"alpha0": float(alpha.sum()), "topic_cooccurrence": "spectral",
                           "words": None}
        t0 = time.perf_counter()
        words = fit.core_words
        if words is None:
            words = np.sort(np.argsort(-fit.p, kind="stable")[:self._auto_core_size()])
        R = topic_cooccurrence_from_topics(refined.components.T[words],
                                           store.read_submatrix(words))
        alpha = estimate_alpha(R, refined.prevalence)
        seconds["alpha"] = time.perf_counter() - t0
        return alpha, {"alpha0": float(alpha.sum()), "topic_cooccurrence": "refined",
                       "words": int(words.size)}

    def _rectified(self, store: CooccurrenceStore, scratch: str,
                   held: ExitStack) -> tuple[Any, dict[str, Any]]:
        """The rectified Q (V×V dask array over its own zarr array) and the rectification's
        record: computed once per store version and settings into the store's bounded cache
        and reused by later fits; computed into ``scratch`` and not kept when the cache
        cannot be used (:func:`streamtopic.workspace.rectified_target`)."""
        import dask.array as da

        method, n_iter = self._s.rectify, int(self.rectify_iters)
        key = rectified_key(store.version, int(self.n_topics), method, n_iter, self._s.seed)
        target = rectified_target(store, key, scratch, held)
        info: dict[str, Any] = {"method": method, "iterations": n_iter, "path": target.path,
                                "cached": target.cached}
        if target.reused:
            info["reused"] = True
        else:
            res = rectify(store, int(self.n_topics), target.path, method=method, n_iter=n_iter,
                          seed=self._s.seed,
                          memory_budget=self._budget,
                          scratch=os.path.join(scratch, "rectify"), progress=self.progress,
                          keep_array=self._fits_in_memory(store.V))
            info.update(reused=False, **_rectification_record(res))
            self._in_memory_q = res.array  # (when not None) the fit need not read it back
        self._q_bytes = disk_bytes(target.path)
        return da.from_zarr(target.path), info

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
        return current_client() is None and MemoryBudget(self._budget).holds(V, 3)

    def _row_stats(self, Q: Any) -> tuple[np.ndarray, np.ndarray]:
        """Row sums p (V,) and squared row norms of Q̄ (V,), in one pass over Q
        (:func:`~streamtopic.sketch.row_sums_and_norms`)."""
        return row_sums_and_norms(Q, progress=self.progress, bytes_read=self._q_bytes)

    def _sketch(self, Q: Any, src: QBlocks, store: CooccurrenceStore, scratch: str) -> AnchorPoints:
        """Row sums p (V,), squared row norms of Q̄ (V,), the anchor candidates (sorted word
        ids) and the points anchors are chosen among, indexable by those ids: the
        candidates' rows of the sketch (n_candidates×d, the only rows read back,
        :func:`~streamtopic.sketch.sketch_points`), or Q̄ itself (V×V) in exact mode
        (:func:`~streamtopic.sketch.exact_points`)."""
        V = Q.shape[0]
        frequent = self._frequent(store)  # the candidates, but for words without mass
        if self._s.anchor_method in ("exact", "lp"):
            if V > EXACT_MAX_V:
                raise ValueError(
                    f"anchor_method={self._s.anchor_method!r} holds Q̄ ({V}×{V}) in memory; "
                    f"use it for V <= {EXACT_MAX_V}"
                )
            return exact_points(Q, frequent, progress=self.progress)
        return sketch_points(src, int(min(self.sketch_dim, V)), self._s.seed, scratch, frequent,
                             progress=self.progress)

    def _frequent(self, store: CooccurrenceStore) -> np.ndarray | None:
        """The words whose document frequency reaches ``anchor_min_df`` (sorted ids; None if
        no threshold applies; :func:`~streamtopic.sketch.frequent_words`). Sets
        ``_min_df_used``."""
        frequent, self._min_df_used = frequent_words(store, self.anchor_min_df)
        return frequent

    @staticmethod
    def _candidates(p: np.ndarray, frequent: np.ndarray | None) -> np.ndarray:
        """Anchor candidates (:func:`~streamtopic.sketch.anchor_candidates`)."""
        return anchor_candidates(p, frequent)

    def _recover(
        self, Q: Any, src: QBlocks, p: np.ndarray, norms: np.ndarray, anchors: np.ndarray,
        scratch: str,
    ) -> tuple[np.ndarray, np.ndarray, dict[str, Any], np.ndarray, np.ndarray | None]:
        """A (V×K), p(z) (K,), solver statistics, Q_SS (K×K, the anchors' entries of Q) and,
        for ``topic_topic='pinv'``, Aᵀ Q A (K×K; else None), by the recovery's graph over
        Q's blocks (:func:`~streamtopic.recovery.recover_by_blocks`)."""
        res = recover_by_blocks(Q, src, p, norms, anchors, scratch, method=self._s.recover,
                                topic_topic=self._s.topic_topic, tol=self.tol,
                                max_iter=self.max_iter, block_rows=self.block_rows,
                                progress=self.progress)
        return res.A, res.prevalence, res.solver, res.Q_SS, res.AtQA

    # ----------------------------------------------------------------- results

    def __sklearn_is_fitted__(self) -> bool:
        """scikit-learn's ``check_is_fitted`` (a Pipeline's ``transform``) asks this."""
        return hasattr(self, "components_")

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's estimator tags (scikit-learn ≥ 1.6 asks every step for them): an
        unsupervised transformer of sparse, non-negative counts; imported only when
        scikit-learn asks, which it is not a dependency for."""
        from sklearn.utils import InputTags, Tags, TargetTags, TransformerTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False),
                    transformer_tags=TransformerTags(),
                    input_tags=InputTags(sparse=True, positive_only=True))

    def _repr_html_(self) -> str:
        """The topics as an HTML table, for Jupyter (:func:`streamtopic.notebook.topics_html`)."""
        return topics_html(self)

    def report(self, path: str | os.PathLike[str] | None = None, *,
               top_words: int = 10) -> Report:
        """The HTML report of the model (:func:`streamtopic.notebook.report`): shown inline
        when it ends a notebook cell, and written to ``path`` when given.

        Parameters
        ----------
        path : path, optional
            Also write the page there (one self-contained file).
        top_words : int
            Words shown per topic.

        Returns
        -------
        streamtopic.notebook.Report
        """
        check_is_fitted(self)
        return notebook_report(self, path, top_words=top_words)

    def top_words(self, n: int = 10) -> list[list[str]]:
        """The ``n`` most probable words of each topic, most probable first."""
        check_is_fitted(self)
        if n < 1:
            raise ValueError(f"n={n!r}: must be >= 1")
        order = np.argsort(-self.components_, axis=1, kind="stable")[:, :n]
        return [[self.vocab_[i] for i in row] for row in order]

    def transform(self, X: Any) -> np.ndarray:
        """Topic proportions of documents, topics fixed (:mod:`streamtopic.inference`).

        The estimate is each document's approximate posterior mean under the model's prior:
        the fixed point θ_k = (E[n_k] + α_k) / (n + α₀), where E[n_k] is the document's
        expected count of topic k given θ and the topics, with α the fitted ``alpha_``
        (:data:`~streamtopic.inference.DEFAULT_ALPHA` per topic for a model without one).
        It is also the MAP estimate under a Dirichlet(α + 1) prior.

        Parameters
        ----------
        X : sparse matrix or array of shape (n_docs, V), iterable of documents, or Corpus
            Word counts over the model's vocabulary; or documents, each a raw text (``str``,
            tokenised as the training text was) or a list of tokens; or a
            :class:`~streamtopic.corpus.Corpus` (read here, in memory; for a corpus of any
            size, :func:`streamtopic.inference.infer_corpus` writes the rows to disk).

        Returns
        -------
        ndarray of shape (n_docs, K)
            Rows on the simplex.
        """
        check_is_fitted(self)
        return infer_topics(self.components_, self._counts(X), alpha=model_prior(self))

    def _counts(self, X: Any) -> Any:
        """Documents ``X`` (see :meth:`transform`) as counts (n_docs×V, CSR)."""
        import scipy.sparse as sp

        V = self.components_.shape[1]
        if isinstance(X, (str, bytes, os.PathLike)):
            raise ValueError("X is one string or path: pass a list of documents (a corpus on "
                             "disk goes to streamtopic.inference.infer_corpus)")
        if isinstance(X, Corpus):
            vocab = tuple(self.vocab_)
            index = {w: i for i, w in enumerate(vocab)}
            blocks = [chunk_counts(ch, vocab, index)[0] for ch in X.onto(vocab).iter_chunks()]
            return sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, V))
        if sp.issparse(X) or isinstance(X, np.ndarray):
            H = sp.csr_matrix(X)
            if H.ndim != 2 or H.shape[1] != V:
                raise ValueError(f"X has {H.shape[1]} columns; the model's vocabulary has "
                                 f"{V} words")
            return H
        return document_counts(X, self.vocab_, model_tokenizer(self))

    def fit_transform(self, X: Any, y: None = None, **fit_params: Any) -> np.ndarray:
        """Fit, then the topic proportions of the training documents (n_docs×K).

        ``X`` is what :meth:`fit` takes. For a store, its training documents are the
        corpus it recorded, read again (in memory: for a corpus of any size,
        :func:`streamtopic.inference.infer_corpus`)."""
        self.fit(X, y, **fit_params)
        if is_count_matrix(X):
            return self.transform(X)
        with _opened(X) as store:
            corpus = recorded_corpus(store)
        if corpus is None:
            raise ModelError(f"{store.path}: records no training documents to transform")
        return self.transform(corpus)

    def score(self, X: Any, y: None = None) -> float:
        """Log-likelihood of documents ``X`` (see :meth:`transform`): Σ_dw h_dw log p(w | θ̂_d)
        with θ̂_d from :meth:`transform`, over the words of the model's vocabulary (the
        plug-in likelihood; higher is better). For held-out documents,
        :func:`streamtopic.inference.document_completion` scores unseen words instead."""
        check_is_fitted(self)
        return self._loglik(self._counts(X))

    def perplexity(self, X: Any) -> float:
        """exp(−:meth:`score` / tokens): the tokens of ``X`` in the model's vocabulary."""
        check_is_fitted(self)
        H = self._counts(X)  # once: ``X`` may be an iterator
        tokens = float(H.sum())
        if tokens == 0:
            raise ValueError("X has no token in the model's vocabulary")
        return float(np.exp(-self._loglik(H) / tokens))

    def _loglik(self, H: Any) -> float:
        """The plug-in log-likelihood of counts H (n_docs×V)."""
        theta = infer_topics(self.components_, H, alpha=model_prior(self))
        return plugin_loglik(self.components_, H, theta)

    def to_pyldavis(self, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> Any:
        """pyLDAvis' prepared data of the model (:func:`streamtopic.interop.pyldavis_data`;
        ``pip install streamtopic[interop]``), or with ``path`` its HTML page written there
        (returns the path)."""
        if path is None:
            return pyldavis_data(self, **kwargs)
        return save_pyldavis(self, path, **kwargs)

    # ----------------------------------------------------------------- persistence

    def save(self, path: str | os.PathLike[str], format: str = "zarr") -> None:
        """Save to a zarr group (default) or an HDF5 file; written aside, then renamed
        (:func:`streamtopic.persistence.save_model`)."""
        save_model(self, path, format=format)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AnchorTopicModel:
        """Load a model saved by :meth:`save` (zarr group or HDF5 file; see
        :func:`streamtopic.persistence.load_model`)."""
        model: AnchorTopicModel = load_model(path, cls)
        return model


def spectral_in_memory(
    Q: np.ndarray,
    n_topics: int,
    settings: FitSettings,
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
    settings : FitSettings
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
    K, seed = int(n_topics), resolve_seed(seed)
    rect_info = None
    t0 = time.perf_counter()
    if settings.rectify != "none":
        res_r = rectify_in_memory(Q, K, method=settings.rectify, n_iter=rectify_iters,
                                  seed=seed)
        assert res_r.array is not None
        Q = res_r.array
        rect_info = {"method": settings.rectify, "iterations": rectify_iters, "reused": False,
                     **_rectification_record(res_r)}
        seconds["rectify"] = time.perf_counter() - t0
    p = Q.sum(axis=1)
    inv = safe_inverse(p)
    cand = np.flatnonzero(p > 0) if candidates is None else candidates[p[candidates] > 0]
    t0 = time.perf_counter()
    Qbar = Q * inv[:, None]
    norms = np.einsum("ij,ij->i", Qbar, Qbar)
    if settings.anchor_method == "qr":
        res = find_anchors_qr(Q, p, K, cand, in_memory=True, norms=norms, memory_budget=2**62)
    elif settings.anchor_method == "lp":
        res = find_anchors_lp(Qbar, K, cand, seed=seed)
    else:
        res = find_anchors(Qbar, K, cand, cleanup=cleanup, precision="double")
    seconds["anchors"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    S = res.anchors
    if settings.recover == "original":
        A, prevalence, solver = recover_original_in_memory(Q, p, S)
    else:
        C, solver = recover_in_memory(Q, Qbar, norms, p, S, settings.recover, tol, max_iter)
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


def is_count_matrix(X: Any) -> bool:
    """Whether ``X`` is counts in memory (a scipy sparse matrix or a 2-D array)."""
    import scipy.sparse as sp

    return sp.issparse(X) or (isinstance(X, np.ndarray) and X.ndim == 2)


def _count_matrix(X: Any) -> Any:
    """``X`` as a CSR matrix of non-negative integer counts (n_docs×V)."""
    import scipy.sparse as sp

    H = sp.csr_matrix(X)
    data = H.data
    if data.size and (not np.all(np.isfinite(data)) or data.min() < 0
                      or not np.array_equal(data, np.round(data))):
        raise ValueError("X: expected word counts (non-negative integers), e.g. from "
                         "CountVectorizer; not weights such as TF-IDF")
    if H.shape[0] < 2 or H.shape[1] < 2:
        raise ValueError(f"X has shape {H.shape}: expected documents × words, at least 2 × 2")
    return H.astype(np.int64)


def _store_record(store: CooccurrenceStore) -> dict[str, Any]:
    """The store a model was fitted on, in ``diagnostics_``: its path, version, documents,
    vocabulary size (a fit-time selection is recorded apart, as ``vocabulary``) and how its
    text was tokenised (None for count inputs), which inference tokenises text with."""
    return {"path": store.path, "version": store.version, "n_docs": store.n_docs,
            "V": store.V, "n_tokens": store.n_tokens,
            "tokenizer": store.config.get("tokenizer")}


def _rectification_record(res: Any) -> dict[str, Any]:
    """A rectification's record in ``diagnostics_``: where it ran, and per iteration the
    movement and seconds, and the kept eigenvalues."""
    return {"in_memory": bool(res.in_memory), "movement": [float(m) for m in res.movement],
            "seconds": [float(x) for x in res.seconds],
            "eigenvalues": np.asarray(res.eigenvalues).tolist()}


def _refine_diagnostics(refined: Any) -> dict[str, Any]:
    """The refinement's record in ``diagnostics_``."""
    out = {"passes": len(refined.loglik_per_token),
           "loglik_per_token": refined.loglik_per_token,
           "seconds": refined.seconds, "theta_iterations": refined.theta_iterations}
    for name in ("converged", "sample_docs", "sample_tokens", "full_pass"):
        if hasattr(refined, name):
            out[name] = getattr(refined, name)
    if getattr(refined, "alpha", None) is not None:  # the prior of θ_d its E-steps used
        out["alpha"] = np.asarray(refined.alpha, dtype=float).tolist()
    return out


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


