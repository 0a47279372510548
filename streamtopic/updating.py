"""``streamtopic update``: a fitted model follows new data, at the cost of the new data.

:func:`update` takes a fitted model (or its path) and new inputs:

1. the inputs are ingested into the store the model was fitted on, as a new version
   (inputs already there are skipped; a changed tokenizer or vocabulary policy is refused,
   as ingest refuses it);
2. the spectral stages run on the new Q, and their topics are put in the model's order
   (:func:`~streamtopic.drift.match_topics`), so anchors and R follow the same indices;
3. the refinement runs EM from the model's topics over the **new documents only**, with the
   expected counts of the documents the model was fitted on held fixed (incremental EM:
   :func:`~streamtopic.refinement.refine_topics`' ``prior_counts``, from the model's topics,
   prevalence and tokens), so topic k continues topic k and no pass reads the old corpus;
4. the new model records the store version it was fitted on, and is written aside, then
   renamed (:func:`~streamtopic.persistence.save_model`), so a killed update leaves the
   previous model as it was.

Each topic's change is reported (:class:`~streamtopic.drift.TopicChange`): its
Jensen–Shannon drift, its prevalence before and after, its anchor, and whether it is retired.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from .cooccurrence import IngestReport, ingest
from .corpus import recorded_corpus
from .drift import TopicChange, topic_changes
from .fitted import FittedTopics, adopt, check_is_fitted, store_record
from .inference import fitted_store
from .model import AnchorTopicModel
from .pipeline import update_store
from .seeding import anchor_groups
from .store import CooccurrenceStore

__all__ = ["UpdateResult", "old_counts", "update"]


@dataclass(frozen=True)
class UpdateResult:
    """What :func:`update` did: the updated model, the ingest, the store versions before
    and after, each topic's change and the seconds of each step."""

    model: AnchorTopicModel
    ingest: IngestReport
    version_before: int
    version_after: int
    changes: list[TopicChange] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> list[str]:
        """The report's lines: the versions, then one line per topic."""
        if not self.changes:
            return [f"nothing new: the model is fitted on store version {self.version_after}"]
        retired = sum(c.retired for c in self.changes)
        head = (f"updated from store version {self.version_before} to {self.version_after}: "
                f"{self.ingest.n_docs:,} new documents, {self.ingest.n_tokens:,} tokens; "
                f"{len(self.changes) - retired} topics continued, {retired} retired "
                f"({sum(self.seconds.values()):.1f} s)")
        added = [f"topic {k:3d}  new  prevalence {self.model.topic_prevalence_[k]:.3f}  "
                 f"anchor {self.model.anchor_words_[k]}"
                 for k in range(len(self.changes), len(self.model.anchor_words_))]
        return [head, *(c.line() for c in self.changes), *added]


def old_counts(topics: FittedTopics, n_tokens: int) -> npt.NDArray[np.float64]:
    """The expected topic-word counts (K×V) of the ``n_tokens`` tokens a model's topics were
    fitted on: topic k's share of them (its prevalence) spread over its words."""
    return np.asarray(topics.components * (topics.topic_prevalence * float(n_tokens))[:, None],
                      dtype=np.float64)


def update(
    model: AnchorTopicModel | str | os.PathLike[str],
    inputs: Sequence[str | os.PathLike[str]],
    *,
    output: str | os.PathLike[str] | None = None,
    new_topics: int = 0,
    progress: bool = True,
    **reading: Any,
) -> UpdateResult:
    """Update a fitted model with new inputs (see the module docstring).

    Parameters
    ----------
    model : AnchorTopicModel or path
        The fitted model, or a saved one.
    inputs : sequence of paths
        The new data, read as :func:`~streamtopic.cooccurrence.ingest` reads it into the
        model's store (``reading``: its reading options, e.g. ``format``, ``text_field``).
    output : path, optional
        Where the updated model is saved (written aside, then renamed; it may be the path
        of ``model`` itself).
    new_topics : int
        Topics the update may add (K grows by this many): the anchor search keeps the
        model's anchors first and finds this many more with their rows projected out, and
        the new topics take the indices after the model's.
    progress : bool
        Progress bars.

    Returns
    -------
    UpdateResult
    """
    t0 = time.perf_counter()
    previous = model if isinstance(model, AnchorTopicModel) else AnchorTopicModel.load(model)
    check_is_fitted(previous)
    store = fitted_store(previous, "an update ingests into it; fit the new data anew")
    record = store_record(previous)  # the version the model was fitted on, and its tokens
    fitted_on, n_old = int(record.get("version", 0)), int(record.get("n_tokens", 0))
    with CooccurrenceStore.open(store) as s:
        before = s.version
    report = ingest([os.fspath(p) for p in inputs], store, skip_existing=True,
                    progress=progress, memory_budget=previous.memory_budget, **reading)
    seconds = {"ingest": time.perf_counter() - t0}
    with CooccurrenceStore.open(store) as s:
        after = s.version
    if after == fitted_on:
        return UpdateResult(previous, report, before, after, seconds=seconds)
    t1 = time.perf_counter()
    params = {**previous.get_params(), "progress": progress}
    if new_topics:  # the named topics' words as named, the found ones' anchors
        named = ([] if previous.anchor_words is None
                 else [list(g) for g in anchor_groups(previous.anchor_words)])
        params.update(n_topics=previous.n_topics + int(new_topics),
                      anchor_words=named + [[w] for w in previous.anchor_words_[len(named):]])
    plan = AnchorTopicModel(**params).fit_plan()
    with CooccurrenceStore.open(store) as s:  # the documents the model has not seen
        corpus = recorded_corpus(s, after=fitted_on)
    topics = update_store(plan, store, previous.topics_, corpus,
                          old_counts(previous.topics_, n_old))
    topics.diagnostics["update"] = {"previous_version": fitted_on, "version": after,
                                    "new_topics": int(new_topics)}
    updated = AnchorTopicModel(**{**previous.get_params(), "n_topics": plan.n_topics})
    adopt(updated, topics)
    seconds["fit"] = time.perf_counter() - t1
    if output is not None:
        updated.save(output)
    K = previous.n_topics
    changes = topic_changes(previous.components_, updated.components_[:K],
                            previous.topic_prevalence_, updated.topic_prevalence_[:K],
                            previous.anchor_words_, updated.anchor_words_[:K])
    return UpdateResult(updated, report, fitted_on, after, changes, seconds)
