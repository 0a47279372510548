"""What a fitted topic model is to the modules that use one without fitting it.

Saving and loading (:mod:`~streamtopic.persistence`), inference, the report, the notebook view
and the bridges to other libraries (:mod:`~streamtopic.interop`) take a fitted model. They sit
below the estimator (:mod:`~streamtopic.model`, which calls them), so they name the model by
the :class:`FittedModel` protocol of this module, never by importing the estimator, and check
it with :func:`check_is_fitted`. :class:`ModelError` is raised by all of them.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

__all__ = ["FittedModel", "ModelError", "check_is_fitted"]


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
