"""Named anchors: topics the user seeds by their anchor words (issue 27).

The user names the anchors of some topics, ``[["space", "nasa", "orbit"], ["hockey"]]``:
one list of words per topic. Those topics come first, in the given order; the other K − m
anchors are found automatically, *conditioned* on the named ones: the pivoted QR
(:func:`~streamtopic.anchors.find_anchors_qr`) or FastAnchorWords
(:func:`~streamtopic.anchors.find_anchors`) starts with the named rows in its basis, so
every candidate's residual has their span projected out before the first free pick, and the
cleanup never re-picks a named anchor. The named words themselves are no candidates.

A *tandem* anchor (several words, Lund et al. 2017, "Tandem Anchoring: a Multiword Anchor
Approach for Interactive Topic Modeling") is a pseudo-word whose row of Q̄ combines its
words' rows (:func:`tandem_rows`), renormalised to sum 1 (a distribution p(w₂ | pseudo-word)
as every row of Q̄, so that the recovery's convex fits of the other rows stay on the
simplex). Lund et al. compare the vector average, the element-wise minimum and the
element-wise harmonic mean (which keeps a co-occurrence only as large as every word of the
tandem supports it) and favour the harmonic mean on their tasks. ``benchmarks/seeded.py``
measured the three here, on 20 Newsgroups at K = 20 with "space nasa orbit", "hockey nhl"
and "gun firearms" named (default method, refined; ``benchmarks/results/seeded.json``):
key words of the three groups among the named topics' top 10, 10 + 8 + 8 with each of the
three; held-out log-likelihood −8.0289 (mean), −8.0292 (harmonic) and −8.0297 (min)
nats/token (unseeded −8.0475). Before the refinement read named topics as mixtures with
their named words (:data:`~streamtopic.refinement.NAMED_SHARE`) the gun topic held 2 key
words with the average and 1 with the others (held out −8.030, −8.044, −8.046). The
average is the default (:data:`DEFAULT_TANDEM`); the margins are small, and ``tandem=``
chooses.

Where a named topic's start comes from: a named word is rarely a true anchor (a vertex of
the rows of Q̄), and its row, mostly its documents' common words, lies inside the others'
hull. The recovery then fits the common words largely on it: on 20 Newsgroups' core the
spectral gun topic held 18% of the tokens (space 16%; the groups' documents hold 3.0% and
2.8%), p(gun topic | "people") = 0.53, and its top 10 held no key word (the preview of a
refit without refinement shows this start). The refinement corrects it, but only with the
mixture above: from this start EM alone ended at 2 key words, and at 2 also from the
groups' own word frequencies as the named topics' start.

The recovery then fits every word's row against the K anchor rows: for a tandem anchor, its
combined row (:func:`~streamtopic.spectral.choose_anchors`). On a core vocabulary the rows
are in memory; over the whole stored Q the tandem's words' rows are read (a strip of Q per
word), combined, and given to the anchor search (projected like the sketch's rows for
``anchor_method='sketch'``) and to the recovery as the first anchor columns
(:func:`~streamtopic.recovery.recover_by_blocks`' ``named_columns``).

Words are checked before anything runs (:func:`name_anchors`): a word outside the vocabulary,
below the anchor document-frequency threshold, named twice or also excluded is one
``ValueError`` naming every such word. Exclusions (:func:`excluded_ids`) take words out of
the anchor candidates, and out of the top words shown, without re-ingesting.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .rectification import RectifyResult, rectify_in_memory

__all__ = ["DEFAULT_TANDEM", "NAMED_MIN_DF", "TANDEM_METHODS", "NamedAnchors", "anchor_groups",
           "check_named_anchors", "excluded_ids", "lookup_words", "name_anchors",
           "pinned_entries", "read_anchor_words", "rectified_core", "settings_record",
           "tandem_rows", "without"]

#: Documents a named anchor word needs unless ``anchor_min_df`` is given: the floor of the
#: automatic candidates' rule (:func:`~streamtopic.sketch.default_anchor_min_df`). That rule
#: (4% of the documents, up to 400) keeps noisy rare rows from winning the automatic search,
#: whose picks are the most extreme rows; a named word is the user's choice, and its row only
#: needs to be an average over enough documents (on 20 Newsgroups "nasa" is in 202 of 11,314
#: documents, "hockey" in 246: below the automatic 400).
NAMED_MIN_DF = 10

#: How a tandem anchor's row combines its words' rows (:func:`tandem_rows`).
TANDEM_METHODS = ("harmonic", "mean", "min")
DEFAULT_TANDEM = "mean"


@dataclass(frozen=True)
class NamedAnchors:
    """Named anchors, resolved to word ids.

    Attributes
    ----------
    words : tuple of tuple of str
        Each named topic's words, in the given order (m topics).
    ids : ndarray of int64, shape (n,)
        Their word ids, flat, topic after topic.
    topic : ndarray of int64, shape (n,)
        The named topic (0 … m−1) of each id: non-decreasing.
    """

    words: tuple[tuple[str, ...], ...]
    ids: np.ndarray
    topic: np.ndarray

    @property
    def m(self) -> int:
        """The number of named topics."""
        return len(self.words)

    @property
    def first(self) -> np.ndarray:
        """Each named topic's first word id (m,): its anchor in ``anchors_``."""
        first: np.ndarray = self.ids[self.starts]
        return first

    @property
    def starts(self) -> np.ndarray:
        """Where each named topic's ids start in ``ids`` (m,)."""
        return np.flatnonzero(np.r_[True, self.topic[1:] != self.topic[:-1]])

    @property
    def tandem(self) -> bool:
        """Whether some named topic has several words."""
        return self.ids.size > self.m

    def local(self, words: np.ndarray) -> NamedAnchors:
        """The same anchors as positions in ``words`` (sorted word ids holding them all, e.g.
        a core vocabulary)."""
        words = np.asarray(words, dtype=np.int64)
        pos = np.searchsorted(words, self.ids)
        if np.any(pos >= words.size) or np.any(words[np.minimum(pos, words.size - 1)]
                                                != self.ids):
            raise ValueError("named anchors outside the words the spectral stages use")
        return NamedAnchors(self.words, pos.astype(np.int64), self.topic)

    def record(self) -> list[list[str]]:
        """The named topics' words as JSON (the model's diagnostics)."""
        return [list(w) for w in self.words]


def read_anchor_words(path: str | os.PathLike[str]) -> list[list[str]]:
    """Named anchors from a file: one topic per line, its words separated by blanks or
    commas (several words: one tandem anchor); blank lines and lines starting with ``#``
    are skipped."""
    with open(path, encoding="utf-8") as fh:
        lines = [line.replace(",", " ").split() for line in fh if not line.lstrip().startswith("#")]
    groups = [g for g in lines if g]
    if not groups:
        raise ValueError(f"{os.fspath(path)}: names no anchor words (one topic per line)")
    return groups


def anchor_groups(value: str | os.PathLike[str] | Sequence[str | Sequence[str]]
                  ) -> list[list[str]]:
    """The named topics' words of ``anchor_words``: a file (:func:`read_anchor_words`), or a
    list whose items are a topic's words, as a list or as one string split on blanks
    (``["space nasa orbit", ["hockey"]]``)."""
    if isinstance(value, (str, os.PathLike)):
        return read_anchor_words(value)
    return [g.split() if isinstance(g, str) else [str(w) for w in g] for g in value]


def lookup_words(vocab: Sequence[str], words: Sequence[str] | np.ndarray) -> np.ndarray:
    """The ids of ``words`` in ``vocab`` (n,), −1 for a word not in it (vectorised: one sort
    of the vocabulary)."""
    terms = np.asarray(list(vocab), dtype=str)
    order = np.argsort(terms, kind="stable")
    wanted = np.asarray(list(words), dtype=str)
    if terms.size == 0 or wanted.size == 0:
        return np.full(wanted.size, -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(terms[order], wanted), terms.size - 1)
    found = terms[order][pos] == wanted
    return np.where(found, order[pos], -1).astype(np.int64)


def _unknown(words: np.ndarray, ids: np.ndarray, what: str) -> None:
    """ValueError naming the ``words`` whose ``ids`` are −1."""
    bad = words[ids < 0]
    if bad.size:
        shown = ", ".join(repr(str(w)) for w in bad)
        raise ValueError(f"{what} not in the vocabulary: {shown} (words are matched exactly, "
                         "as the store's tokenizer wrote them, e.g. lowercase)")


def excluded_ids(vocab: Sequence[str], words: Sequence[str] | None) -> np.ndarray:
    """The sorted ids of the excluded ``words`` (ValueError naming any not in ``vocab``)."""
    if not words:
        return np.zeros(0, dtype=np.int64)
    wanted = np.asarray(list(words), dtype=str)
    ids = lookup_words(vocab, wanted)
    _unknown(wanted, ids, "excluded words")
    return np.unique(ids)


def without(ids: np.ndarray | None, V: int, excluded: np.ndarray) -> np.ndarray | None:
    """The word ids ``ids`` (None: all V) without ``excluded``; None when nothing is
    excluded from all V."""
    if excluded.size == 0:
        return ids
    ids = np.arange(V, dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
    return ids[~np.isin(ids, excluded)]


def name_anchors(
    groups: Sequence[Sequence[str]], vocab: Sequence[str], doc_freq: np.ndarray | None,
    min_df: int, n_topics: int, excluded: np.ndarray | None = None,
) -> NamedAnchors:
    """Resolve named anchors to word ids and check them.

    Parameters
    ----------
    groups : sequence of sequence of str
        One list of words per named topic (several: a tandem anchor).
    vocab : sequence of str, length V
    doc_freq : ndarray of shape (V,) or None
        Documents per word (None: unknown, no threshold).
    min_df : int
        The named anchors' document-frequency threshold (``anchor_min_df`` when given, else
        :data:`NAMED_MIN_DF`).
    n_topics : int
        K: at least the number of named topics.
    excluded : ndarray of int, optional
        Excluded word ids, which cannot be named.

    Raises
    ------
    ValueError
        Naming every word outside the vocabulary, below the threshold, named twice or
        excluded; or more named topics than K, or an empty one.
    """
    words = tuple(tuple(str(w) for w in g) for g in groups)
    if any(not g for g in words):
        raise ValueError("anchor_words: a named topic has no words")
    if len(words) > n_topics:
        raise ValueError(f"anchor_words names {len(words)} topics, more than "
                         f"n_topics={n_topics}")
    flat = np.asarray([w for g in words for w in g], dtype=str)
    topic = np.repeat(np.arange(len(words)), [len(g) for g in words]).astype(np.int64)
    ids = lookup_words(vocab, flat)
    _unknown(flat, ids, "anchor words")
    values, counts = np.unique(flat, return_counts=True)
    if np.any(counts > 1):
        raise ValueError("anchor words named more than once: "
                         + ", ".join(repr(str(w)) for w in values[counts > 1]))
    if excluded is not None and np.isin(ids, excluded).any():
        raise ValueError("anchor words also excluded: "
                         + ", ".join(repr(str(w)) for w in flat[np.isin(ids, excluded)]))
    if doc_freq is not None and min_df > 0:
        df = np.asarray(doc_freq)[ids]
        low = df < min_df
        if low.any():
            shown = ", ".join(f"{str(w)!r} (in {int(d):,} documents)"
                              for w, d in zip(flat[low], df[low], strict=True))
            raise ValueError(f"anchor words below the anchor document-frequency threshold "
                             f"anchor_min_df={min_df}: {shown}; name more frequent words or "
                             "lower anchor_min_df (--anchor-min-df)")
    return NamedAnchors(words, ids, topic)


def tandem_rows(rows: np.ndarray, topic: np.ndarray, how: str = DEFAULT_TANDEM) -> np.ndarray:
    """Each named topic's row of Q̄ (m×d) from its words' rows ``rows`` (n×d, grouped by
    ``topic`` (n,), non-decreasing): a single word's row as it is; a tandem's combined
    element-wise by ``how`` ('harmonic': c / Σ_w 1/x_w, 0 where a word's entry is 0;
    'mean'; 'min') and renormalised to sum 1."""
    if how not in TANDEM_METHODS:
        raise ValueError(f"tandem={how!r}: expected one of {', '.join(TANDEM_METHODS)}")
    rows = np.asarray(rows, dtype=np.float64)
    topic = np.asarray(topic, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, topic[1:] != topic[:-1]])
    count = np.diff(np.r_[starts, topic.size])[:, None].astype(np.float64)  # (m, 1)
    if how == "mean":
        out = np.add.reduceat(rows, starts, axis=0) / count
    elif how == "min":
        out = np.minimum.reduceat(rows, starts, axis=0)
    else:
        positive = rows > 0
        inv = np.where(positive, 1.0 / np.where(positive, rows, 1.0), 0.0)
        every = np.add.reduceat(positive.astype(np.int64), starts, axis=0) == count
        out = np.where(every, count / np.where(every, np.add.reduceat(inv, starts, axis=0),
                                                1.0), 0.0)
    out = np.maximum(out, 0.0)
    total = out.sum(axis=1, keepdims=True)
    out = out / np.where(total > 0, total, 1.0)
    single = count[:, 0] == 1
    out[single] = rows[starts[single]]
    combined: np.ndarray = out
    return combined


def pinned_entries(named: NamedAnchors | None, K: int, V: int) -> np.ndarray | None:
    """The entries of the topics (K×V bool) the refinement holds at 0: each named word in
    every topic but its own (the anchor property, kept through EM: every token of a named
    word stays with its topic). The refinement also reads each named topic as a mixture
    with its named words (:data:`~streamtopic.refinement.NAMED_SHARE`), which keeps it about
    them. None without named anchors."""
    if named is None:
        return None
    pinned = np.zeros((K, V), dtype=bool)
    pinned[:, named.ids] = True
    pinned[named.topic, named.ids] = False
    return pinned


#: The largest core (bytes of its n×n float64 block) whose rectification is kept for the
#: next fit in this process (:func:`rectified_core`).
KEEP_RECTIFIED_BYTES = 256 * 2**20
_kept: dict[str, Any] = {}


def rectified_core(Q: np.ndarray, n_topics: int, *, method: str, n_iter: int,
                   seed: Any) -> RectifyResult:
    """:func:`~streamtopic.rectification.rectify_in_memory` of a core's block Q (n×n),
    the last result kept in this process and given again for the same Q (by content: a
    SHA-256 digest, 18 ms per 32 MiB on the project's machine, where the CPU's SHA
    instructions make it twice as fast as BLAKE2's 34 ms) and settings. Rectification does
    not depend on the anchors, so a refit with other named anchors (:meth:`AnchorTopicModel.refit
    <streamtopic.model.AnchorTopicModel.refit>`) skips it: on 20 Newsgroups' 2,000-word core
    it is most of a refit without refinement."""
    import hashlib

    if Q.nbytes > KEEP_RECTIFIED_BYTES or not Q.flags.c_contiguous:
        return rectify_in_memory(Q, n_topics, method=method, n_iter=n_iter, seed=seed)
    digest = hashlib.sha256(Q.view(np.uint8).data)
    digest.update(repr((Q.shape, int(n_topics), method, int(n_iter), seed)).encode())
    key = digest.hexdigest()
    if _kept.get("key") != key:
        _kept.clear()
        _kept.update(key=key, result=rectify_in_memory(Q, n_topics, method=method,
                                                       n_iter=n_iter, seed=seed))
    kept: RectifyResult = _kept["result"]
    return kept


def check_named_anchors(named: NamedAnchors | None, anchor_method: str, recover: str) -> None:
    """Refuse named anchors a fit cannot honour, before any stage runs: with the LP anchor
    search (which cannot be conditioned on them), and tandem anchors with the original
    Recover (which fits columns of Q, not rows of Q̄ against the anchors' rows)."""
    if named is None:
        return
    if anchor_method == "lp":
        raise ValueError("anchor_words needs anchor_method 'qr', 'exact' or 'sketch' "
                         "(the LP search cannot be conditioned on named anchors)")
    if named.tandem and recover == "original":
        raise ValueError("tandem anchors need a recovery that fits rows of Q̄ (recover "
                         "'l2', 'kl', 'admm' or 'activeset'), not the original Recover")


def settings_record(named: NamedAnchors | None, excluded: Sequence[str] | None,
                    tandem: str) -> dict[str, Any] | None:
    """The model's record of its named anchors and exclusions (None: neither)."""
    if named is None and not excluded:
        return None
    return {"named": None if named is None else named.record(),
            "tandem": tandem if named is not None and named.tandem else None,
            "excluded": list(excluded or [])}
