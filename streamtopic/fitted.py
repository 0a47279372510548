"""What a fitted topic model is to the modules that use one without fitting it.

Saving and loading (:mod:`~streamtopic.persistence`), inference, the report, the notebook view
and the bridges to other libraries (:mod:`~streamtopic.interop`) take a fitted model. They sit
below the estimator (:mod:`~streamtopic.model`, which calls them), so they name the model by
the :class:`FittedModel` protocol of this module, never by importing the estimator, and check
it with :func:`check_is_fitted`. :class:`ModelError` is raised by all of them.

A fit and a load both end in one :class:`FittedTopics` record, the typed result of a fit
(topics, vocabulary, anchors, R, p, α, the solver's counts and the fit's record, which says
where the model came from and how its text was tokenised); :func:`adopt` sets an estimator's
fitted attributes from it, the one place they are set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["ATTRIBUTES", "FittedModel", "FittedTopics", "ModelError", "Slice", "SliceWords",
           "adopt", "check_is_fitted", "store_record"]


class ModelError(ValueError):
    """A path that is not a saved model, or a model used before ``fit``."""


class FittedModel(Protocol):
    """A fitted :class:`~streamtopic.model.AnchorTopicModel` as its users read it: its
    parameters and fitted attributes (see the estimator for their meaning)."""

    n_topics: int
    method: str
    seed: int | None
    components_: np.ndarray
    anchors_: np.ndarray
    anchor_words_: list[str]
    topic_prevalence_: np.ndarray
    topic_cooccurrence_: np.ndarray
    word_probability_: np.ndarray
    alpha_: np.ndarray
    vocab_: list[str]
    n_converged_: int
    n_fitted_: int
    diagnostics_: dict[str, Any]
    #: Where the model was last saved or loaded from, and that file's mtime; None while it
    #: is only in memory (:mod:`~streamtopic.persistence`).
    saved_at: tuple[str, int] | None

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's parameters."""
        ...

    def top_words(self, n: int = 10) -> list[list[str]]:
        """The ``n`` most probable words of each topic."""
        ...


def check_is_fitted(model: Any) -> None:
    """Raise :class:`ModelError` unless ``model`` is fitted (has ``components_``)."""
    if not hasattr(model, "components_"):
        raise ModelError(f"this {type(model).__name__} is not fitted yet; call fit first")


@dataclass(frozen=True)
class FittedTopics:
    """What a fit produces, and what a saved model holds: the typed record that crosses from
    the fit's stages (:mod:`~streamtopic.pipeline`) and from a file
    (:mod:`~streamtopic.persistence`) to the estimator.

    Attributes
    ----------
    components : ndarray of shape (K, V)
        p(w | z), rows summing to 1.
    vocab : list of str
        The V words.
    anchors : ndarray of int64, shape (K,)
        Anchor word ids.
    topic_prevalence : ndarray of shape (K,)
        p(z).
    topic_cooccurrence : ndarray of shape (K, K)
        R.
    word_probability : ndarray of shape (V,)
        p(w).
    alpha : ndarray of shape (K,)
        The documents' Dirichlet parameter.
    n_converged, n_fitted : int
        Word rows whose solver met its tolerance, out of those fitted.
    diagnostics : dict
        The fit's JSON record: seconds per stage, settings, solver statistics and the store
        fitted (``store``: path, version, documents, tokenizer).
    """

    components: npt.NDArray[np.float64]
    vocab: list[str]
    anchors: npt.NDArray[np.int64]
    topic_prevalence: npt.NDArray[np.float64]
    topic_cooccurrence: npt.NDArray[np.float64]
    word_probability: npt.NDArray[np.float64]
    alpha: npt.NDArray[np.float64]
    n_converged: int
    n_fitted: int
    diagnostics: dict[str, Any]

    @property
    def anchor_words(self) -> list[str]:
        """The K anchor words."""
        return [self.vocab[int(i)] for i in self.anchors]


#: The estimator's fitted attributes (scikit-learn's trailing underscore) and the fields of
#: :class:`FittedTopics` they hold.
ATTRIBUTES = {"components_": "components", "anchor_words_": "anchor_words",
              "topic_prevalence_": "topic_prevalence",
              "topic_cooccurrence_": "topic_cooccurrence",
              "word_probability_": "word_probability", "alpha_": "alpha",
              "n_converged_": "n_converged", "n_fitted_": "n_fitted",
              "diagnostics_": "diagnostics"}


def adopt(model: Any, topics: FittedTopics) -> None:
    """Set ``model``'s fitted attributes (:data:`ATTRIBUTES`, and ``vocab_``, ``anchors_``,
    ``n_features_in_``) from ``topics``: the only place they are set, after a fit and after
    a load. The model is then only in memory (``saved_at`` None) until it is saved."""
    model.topics_ = topics
    for attr, name in ATTRIBUTES.items():
        setattr(model, attr, getattr(topics, name))
    model.vocab_ = list(topics.vocab)
    model.anchors_ = np.asarray(topics.anchors, dtype=np.int64)
    model.n_features_in_ = len(topics.vocab)
    model.saved_at = None


def store_record(model: Any) -> dict[str, Any]:
    """The record of the store ``model`` was fitted on (path, version, documents, V, tokens,
    tokenizer settings; empty when unknown), from its diagnostics."""
    record = (getattr(model, "diagnostics_", None) or {}).get("store") or {}
    return dict(record)


@dataclass(frozen=True)
class Slice:
    """One slice of a model's corpus (the documents a store version added, or those of a
    span of time): its documents, its tokens in the model's vocabulary and each topic's
    prevalence there (K,): the share of the slice's tokens the topic explains
    (:func:`streamtopic.timeline.timeline`).

    ``version`` is the store version (0 for a span of time); ``start`` and ``end`` the span's
    first day and the day after its last (ISO dates, UTC; None for a version); ``label`` its
    name ("version 3", "1861", "2001-09", "2001-09-11…2001-10-02")."""

    version: int
    n_docs: int
    n_tokens: int
    prevalence: npt.NDArray[np.float64]
    start: str | None = None
    end: str | None = None
    label: str = ""


@dataclass(frozen=True)
class SliceWords:
    """Each topic's top words within one slice (a store version or a span of time), its
    anchors fixed and the recovery run on the slice's part of Q
    (:func:`streamtopic.timeline.slice_topics`).

    Attributes
    ----------
    version : int
        The store version (0 for a span of time).
    label : str
    prevalence : ndarray of shape (K,)
        Each topic's share of the slice's part of Q (0: its anchor word is absent there).
    words : list of K lists of n str
        Each topic's n most probable words in the slice, most probable first ("" past the
        words it has).
    probabilities : ndarray of shape (K, n)
        Their p(w | z) within the slice.
    """

    version: int
    label: str
    prevalence: npt.NDArray[np.float64]
    words: list[list[str]]
    probabilities: npt.NDArray[np.float64]
