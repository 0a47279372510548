"""``AnchorTopicModel``: the anchor-word topic model as a scikit-learn style estimator.

A thin estimator, as scikit-learn's are over their module-level solvers: :meth:`fit`
validates the parameters, resolves them once into a frozen
:class:`~streamtopic.spectral.FitPlan` (the method's choices filled in, the seed and the
memory budget resolved), calls the fit's stage functions
(:func:`streamtopic.pipeline.fit_store`, or :func:`~streamtopic.pipeline.fit_matrix` for
counts in memory) and adopts the typed :class:`~streamtopic.fitted.FittedTopics` they return
(:func:`~streamtopic.fitted.adopt`, the one place the fitted attributes are set, on a load
too). Nothing of a run lives on the estimator.

The default ``method='rectified'`` reads the core vocabulary's block of Q into memory once
and runs the spectral stages there on threads
(:func:`~streamtopic.spectral.spectral_in_memory`): rectification, exact anchors, the fits
and the topic-topic matrix; then EM over the corpus (:mod:`streamtopic.refinement`) refines
the topics and gives every other word its row. On the whole vocabulary (``method='plain'``,
or ``core_size='all'``) the stages run Dask graphs over the stored Q, whose tasks read the
blocks of Q they use themselves (:func:`~streamtopic.spectral.spectral_store`). Objects of
size V×K or V×d move between workers and the client only through a scratch zarr group, never
through the scheduler.
"""

from __future__ import annotations

import inspect
import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import replace
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._params import Constraint, Interval, Options, validate_params
from ._random import resolve_seed
from .cluster import client_blas
from .corpus import Corpus, recorded_corpus
from .fitted import FittedTopics, ModelError, adopt, check_is_fitted
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
from .persistence import load_model, save_model
from .pipeline import fit_matrix, fit_store, is_count_matrix, opened_store
from .recovery import RECOVER_METHODS, anchor_topic_cooccurrence
from .rectification import RECTIFY_METHODS
from .seeding import DEFAULT_TANDEM, TANDEM_METHODS, anchor_groups, excluded_ids
from .selection import Selection
from .spectral import (
    ANCHOR_METHODS,
    METHODS,
    RECTIFY_ITERS,
    TOPIC_TOPIC_METHODS,
    FitPlan,
    FitSettings,
)
from .workspace import FIT_PREFIX as FIT_PREFIX  # the name of a fit's scratch directory

__all__ = ["AnchorTopicModel", "ModelError", "anchor_topic_cooccurrence", "is_count_matrix",
           "top_words_table"]

log = logging.getLogger("streamtopic")



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
        Rectification iterations (the paper: 5 often enough, 15–20 close to 150); default
        :data:`~streamtopic.spectral.RECTIFY_ITERS`, 5: the refinement makes up the rest.
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
    anchor_words : path or list, optional
        Named anchors (:mod:`streamtopic.seeding`): a file of one topic per line, or a list
        with one item per topic, its words as a list or one string
        (``[["space", "nasa", "orbit"], "hockey nhl"]``; several words: a tandem anchor).
        These topics come first, in order; the other K − m anchors are found with the named
        rows' span projected out. Every word must be in the vocabulary and in at least
        ``anchor_min_df`` documents, when given, else
        :data:`~streamtopic.seeding.NAMED_MIN_DF` (else a ValueError naming it). Tandem
        anchors need the spectral stages in memory (the default method's core vocabulary).
    exclude_words : list of str, optional
        Words that may not become anchors and are left out of :meth:`top_words` and the
        report (changing it after the fit changes what is shown, without a refit).
    tandem : {'mean', 'harmonic', 'min'}
        How a tandem anchor's row of Q̄ combines its words' rows
        (:func:`~streamtopic.seeding.tandem_rows`; the measurement behind the default in
        :mod:`streamtopic.seeding`).
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
    topics_ : FittedTopics
        The fit's typed record, which every attribute above and below comes from
        (:class:`~streamtopic.fitted.FittedTopics`).
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

    # The fitted attributes, declared for type checkers; set only by
    # :func:`~streamtopic.fitted.adopt` (after a fit and a load).
    topics_: FittedTopics
    components_: npt.NDArray[np.float64]
    anchors_: npt.NDArray[np.int64]
    anchor_words_: list[str]
    topic_prevalence_: npt.NDArray[np.float64]
    topic_cooccurrence_: npt.NDArray[np.float64]
    word_probability_: npt.NDArray[np.float64]
    alpha_: npt.NDArray[np.float64]
    vocab_: list[str]
    n_converged_: int
    n_fitted_: int
    n_features_in_: int
    diagnostics_: dict[str, Any]

    def __init__(
        self,
        n_topics: int = 20,
        *,
        method: str = "rectified",
        recover: str | None = None,
        rectify: str | None = None,
        rectify_iters: int = RECTIFY_ITERS,
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
        anchor_words: str | os.PathLike[str] | Sequence[str | Sequence[str]] | None = None,
        exclude_words: Sequence[str] | None = None,
        tandem: str = DEFAULT_TANDEM,
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
        self.anchor_words = anchor_words
        self.exclude_words = exclude_words
        self.tandem = tandem
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
        "anchor_words": ["path", "word_groups", None],
        "exclude_words": ["words", None],
        "tandem": [Options(*TANDEM_METHODS)],
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

    def fit_settings(self, preview: bool = False) -> FitSettings:
        """Check the parameters (:attr:`_parameter_constraints`, then the ties between
        them) and return the settings a fit runs with: the method's choices filled in
        (``preview``: a :meth:`refit` without refinement on the model's core)."""
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
        if self.core_size not in (None, "all") and s.refine_passes == 0 and not preview:
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
            plan = self.fit_plan()
            topics = (fit_matrix(plan, X, feature_names) if is_count_matrix(X)
                      else fit_store(plan, X))
        adopt(self, topics)
        return self

    def fit_plan(self, preview: bool = False) -> FitPlan:
        """The frozen plan of a fit with these parameters (:meth:`fit_settings`, checked),
        its memory budgets resolved now: the user's ``memory_budget``, else the automatic
        one (:func:`streamtopic.cluster.memory_budget`). ``preview``: a :meth:`refit`
        without refinement on the model's core."""
        settings = self.fit_settings(preview)
        groups = None if self.anchor_words is None else anchor_groups(self.anchor_words)
        budget, local = FitPlan.budgets(self.memory_budget)
        return FitPlan(
            n_topics=int(self.n_topics), method=self.method, settings=settings, budget=budget,
            local_budget=local, selection=self._selection(),
            rectify_iters=int(self.rectify_iters), sketch_dim=int(self.sketch_dim),
            anchor_min_df=self.anchor_min_df, cleanup=bool(self.cleanup), tol=self.tol,
            max_iter=self.max_iter, block_rows=self.block_rows, progress=bool(self.progress),
            scratch_dir=self.scratch_dir,
            anchor_words=None if groups is None else tuple(tuple(g) for g in groups),
            exclude_words=None if self.exclude_words is None else tuple(self.exclude_words),
            tandem=self.tandem, preview=preview)

    def refit(self, X: Any = None, **params: Any) -> AnchorTopicModel:
        """Fit again from the store this model was fitted on (or ``X``), parameters changed
        (:meth:`set_params`): e.g. ``model.refit(anchor_words=[["space", "nasa"]])``.

        The store is not re-ingested: only Q's blocks are read, and the training corpus when
        the refinement runs. ``refine_passes=0`` on a model fitted on a core vocabulary is
        a *preview* in seconds: the spectral stages on the same core (its block of Q only),
        no refinement, and the words outside the core get probability 0 in every topic
        (a later refit with refinement gives them their rows).

        Returns
        -------
        self
        """
        check_is_fitted(self)
        preview = params.get("refine_passes") == 0 and bool(self.diagnostics_.get("core"))
        self.set_params(**params)
        source = self.diagnostics_["store"]["path"] if X is None else X
        with client_blas():
            topics = fit_store(self.fit_plan(preview), source)
        adopt(self, topics)
        return self

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
        shown = self.components_
        hidden = excluded_ids(self.vocab_, self.exclude_words)  # shown without a refit
        if hidden.size:
            shown = shown.copy()
            shown[:, hidden] = -np.inf
        order = np.argsort(-shown, axis=1, kind="stable")[:, :n]
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
        with opened_store(X) as store:
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


def top_words_table(model: AnchorTopicModel, n: int = 10) -> Sequence[str]:
    """One line per topic: its top words, the anchor marked with ``*``; a named topic
    marked ``named`` with its anchor words."""
    lines = []
    seeding = model.diagnostics_.get("seeding") or {}
    named = seeding.get("named") or []
    for k, words in enumerate(model.top_words(n)):
        anchor = model.anchor_words_[k]
        shown = [f"*{w}*" if w == anchor else w for w in words]
        if anchor not in words:
            shown.append(f"(anchor *{anchor}*)")
        mark = f" named [{' '.join(named[k])}]" if k < len(named) else ""
        lines.append(f"topic {k:3d} ({model.topic_prevalence_[k]:.3f}){mark}: "
                     + " ".join(shown))
    return lines


