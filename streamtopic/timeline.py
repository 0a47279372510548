"""Topics over time: each topic's prevalence, and its words, in each slice of a corpus.

A slice is either

* a **store version**: the documents each ingest added (a daily batch, a month of news), read
  again from the store's token cache; or
* a **span of time**: the documents whose *time field* falls in it (``time_field``: a JSON
  Lines field, an HDF5 column, a file's modification time or a mail/news header such as
  ``Date``; values read by :func:`streamtopic._dates.parse_time`), sliced by calendar year,
  month or day (``by``), or into ``n_slices`` spans of about equal numbers of documents.

**Prevalence** (:func:`timeline`): the topic proportions θ of every document of a slice are
inferred with the model's topics fixed (:func:`~streamtopic.inference.infer_topics`, the
model's α as prior) and weighted by the documents' lengths: topic k's prevalence in a slice
is the share of the slice's tokens it explains, Σ_d n_d θ_dk / Σ_d n_d, the same measure as
the model's ``topic_prevalence_`` over the whole corpus.

**Words** (:func:`slice_topics`): each topic's word distribution within a slice, with the
model's anchor words fixed and the recovery run on that slice's part of Q. Q is a sum over
documents, Σ_d Q_d, so a version's part of it (the difference between Q after and before that
ingest) is exactly the sum over the documents it added, and a span of time's the sum over its
documents; the store keeps a version's documents (its token cache) but only the head's Q, so
the part is summed again from the documents, and only what the recovery needs of it: the
anchors' rows Q_S (K×V), the row sums p (V,) and the products Q Q̄_Sᵀ (V×K), in two passes
over the slice's documents. Each word's p(z | w) is then the simplex-constrained
least-squares fit of its row on the anchors' rows
(:func:`~streamtopic.recovery.solve_active_set`, exact), and topic k's word distribution in
the slice is p(w | z = k) ∝ p(z = k | w) p(w). A topic whose anchor word does not occur in a
slice has no words there (prevalence 0). The slice's Q is not rectified.

Cost: one pass over the slices' documents for the prevalence (for versions: the token cache,
no text is tokenised again; for a time field: the inputs, tokenised as the model's store
tokenised them), two more per version for the words; all in this process, a chunk of
documents at a time: memory of one chunk's counts and θ, plus per slice K floats (by time:
per day of the corpus until the slices are formed), plus 16·K·V bytes per slice for the
words (time slices: as many at a time as :data:`WORDS_BYTES` holds, two passes each).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from ._dates import BY, calendar_floor, next_calendar, time_label
from ._io import written_aside
from .corpus import Corpus, read_corpus, recorded_corpus, verify_recorded_inputs
from .fitted import ModelError, Slice, SliceWords, check_is_fitted, store_record
from .inference import chunk_counts, fitted_store, infer_topics, model_prior, model_tokenizer
from .recovery import solve_active_set
from .store import CooccurrenceStore

__all__ = ["BY", "Slice", "SliceTopics", "SliceWords", "TimelineError", "auto_unit",
           "output_format", "slice_topics", "timeline", "write_timeline", "write_words"]

#: Calendar units with fewer distinct values than this are too coarse for ``by='auto'``.
AUTO_MIN_SLICES = 5
_DAY = 86400


class TimelineError(ValueError):
    """A timeline that cannot be made as asked (its settings or output), in one line."""


def timeline(
    model: Any,
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    *,
    time_field: str | None = None,
    by: str = "auto",
    n_slices: int | None = None,
    format: str = "auto",
    text_field: str = "text",
) -> list[Slice]:
    """Each topic's prevalence per slice of a corpus, the model's topics fixed.

    Parameters
    ----------
    model : AnchorTopicModel
        A fitted model.
    inputs : path, glob or sequence of them, optional
        With ``time_field``: the dated documents (default: the inputs recorded by the store
        the model was fitted on, which must be unchanged). Without ``time_field``: none
        (a :class:`TimelineError`).
    time_field : str, optional
        Slice by time, read from this field (see :func:`~streamtopic.corpus.read_corpus`:
        a JSON Lines field, an HDF5 dataset, ``'mtime'`` or a header name for one document
        per file). Without it, each version of the model's store is a slice.
    by : {'auto', 'year', 'month', 'day'}
        The calendar unit of a slice; ``'auto'``: years when the documents span at least
        :data:`AUTO_MIN_SLICES` of them, else months, else days.
    n_slices : int, optional
        Instead of calendar units: this many spans of about equal numbers of documents (the
        documents of one day stay together).
    format, text_field : str
        How ``inputs`` are read (:func:`~streamtopic.corpus.read_corpus`).

    Returns
    -------
    list of Slice
        In order of version or time; slices without documents are left out. A time slice
        has ``version`` 0, its first day ``start``, the day after its last ``end`` (ISO
        dates, UTC) and its name ``label``.

    Raises
    ------
    ModelError
        The store is gone, or records no documents that can be read again.
    CorpusError
        A document without its time field, or whose time is not a date (its file and line).
    """
    check_is_fitted(model)
    if time_field is None:
        if inputs is not None:
            raise TimelineError("inputs are read for a time field only: give time_field "
                                "(without it, the slices are the store's versions)")
        return _version_timeline(model)
    if by not in ("auto", *BY):
        raise TimelineError(f"by={by!r}: expected auto, {', '.join(BY)}")
    if n_slices is not None and n_slices < 1:
        raise TimelineError(f"n_slices={n_slices!r}: must be at least 1")
    corpus = _dated_corpus(model, inputs, time_field, format, text_field)
    days, docs, tokens, weighted = _by_day(model, corpus, time_field)
    return _time_slices(days, docs, tokens, weighted, by, n_slices)


def _version_timeline(model: Any) -> list[Slice]:
    """Each topic's prevalence per version of the store ``model`` was fitted on, up to the
    one it was fitted on (a version that added no documents is left out)."""
    path = fitted_store(model, "a timeline reads its documents")
    upto = int(store_record(model).get("version", 0))
    vocab = tuple(model.vocab_)
    out = []
    with CooccurrenceStore.open(path) as store:
        for v in range(1, upto + 1):
            corpus = recorded_corpus(store, after=v - 1, upto=v)
            if corpus is None:
                continue
            docs = tokens = 0
            weighted = np.zeros(model.components_.shape[0])
            for _, lengths, theta in _inferred(model, corpus.onto(vocab)):
                weighted += lengths @ theta
                docs, tokens = docs + lengths.size, tokens + int(lengths.sum())
            if docs:
                out.append(Slice(v, docs, tokens, weighted / max(float(tokens), 1.0),
                                 label=f"version {v}"))
    if not out:
        raise ModelError(f"{path}: records no documents that can be read again")
    return out


def _inferred(model: Any, corpus: Corpus) -> Iterator[tuple[Any, np.ndarray, np.ndarray]]:
    """Each chunk of ``corpus`` (read onto the model's words, in this process), its
    documents' lengths in the model's words (n,) and their θ (n×K)."""
    vocab = tuple(model.vocab_)
    index = {w: i for i, w in enumerate(vocab)}
    alpha = model_prior(model)
    At = np.ascontiguousarray(np.asarray(model.components_, dtype=np.float64).T)
    for chunk in corpus.iter_chunks():
        H = chunk_counts(chunk, vocab, index)[0]
        lengths = np.asarray(H.sum(axis=1)).ravel()
        yield chunk, lengths, infer_topics(model.components_, H, alpha=alpha, At=At)


def _dated_corpus(model: Any, inputs: Any, time_field: str, format: str,
                  text_field: str) -> Corpus:
    """The documents a time timeline reads, with their times, onto the model's words:
    ``inputs``, or the inputs the model's store records (checked unchanged)."""
    tokenizer = model_tokenizer(model)
    if inputs is not None:
        corpus = read_corpus(inputs, format=format, text_field=text_field,
                             tokenizer=tokenizer, time_field=time_field)
        return corpus.onto(model.vocab_)
    path = fitted_store(model, "its recorded inputs are the documents a time timeline reads; "
                               "name them")
    upto = int(store_record(model).get("version", 0))
    with CooccurrenceStore.open(path) as store:
        entries = [s for s in verify_recorded_inputs(store) if s.version <= upto]
    if not entries:
        raise ModelError(f"{path}: records no inputs to read again; name them")
    parts = [read_corpus(s.path, format=s.format, vocab=s.vocab_path, tokenizer=tokenizer,
                         strip_headers=s.strip_headers, keep_subject=s.keep_subject,
                         text_field=s.text_field, time_field=time_field) for s in entries]
    return Corpus([x for c in parts for x in c.sources], [x for c in parts for x in c.parts],
                  tokenizer).onto(model.vocab_)


def _by_day(model: Any, corpus: Corpus, time_field: str
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One streamed pass: per day with documents (sorted, days since 1970 (m,) int64), its
    documents (m,), tokens (m,) and Σ_d n_d θ_d (m×K)."""
    K = int(np.shape(model.components_)[0])
    rows: dict[int, int] = {}
    docs: list[int] = []
    tokens: list[int] = []
    weighted: list[np.ndarray] = []
    for chunk, lengths, theta in _inferred(model, corpus):
        if chunk.times is None:  # every reader stamps every document when asked
            raise TimelineError(f"{chunk.source}: its documents carry no {time_field!r}")
        day = np.floor_divide(np.asarray(chunk.times, dtype=np.int64), _DAY)
        uniq, inv = np.unique(day, return_inverse=True)
        w = np.zeros((uniq.size, K))
        np.add.at(w, inv, lengths[:, None] * theta)
        n = np.bincount(inv, minlength=uniq.size)
        t = np.bincount(inv, weights=lengths, minlength=uniq.size)
        for j, d in enumerate(uniq.tolist()):
            r = rows.setdefault(d, len(rows))
            if r == len(docs):
                docs.append(0)
                tokens.append(0)
                weighted.append(np.zeros(K))
            docs[r] += int(n[j])
            tokens[r] += int(round(t[j]))
            weighted[r] += w[j]
    if not rows:
        raise ModelError("the inputs hold no documents")
    order = np.argsort(np.fromiter(rows, dtype=np.int64, count=len(rows)))
    days = np.fromiter(rows, dtype=np.int64, count=len(rows))[order]
    return (days, np.asarray(docs, dtype=np.int64)[order],
            np.asarray(tokens, dtype=np.int64)[order], np.vstack(weighted)[order])


def auto_unit(days: np.ndarray) -> str:
    """The coarsest calendar unit in which the ``days`` (since 1970) fall into at least
    :data:`AUTO_MIN_SLICES` distinct values (else 'day')."""
    for unit in ("year", "month"):
        if np.unique(calendar_floor(days * _DAY, unit)).size >= AUTO_MIN_SLICES:
            return unit
    return "day"


def _time_slices(days: np.ndarray, docs: np.ndarray, tokens: np.ndarray, weighted: np.ndarray,
                 by: str, n_slices: int | None) -> list[Slice]:
    """The slices of the per-day sums (:func:`_by_day`): calendar units, or ``n_slices``
    spans of about equal documents."""
    start_days = days.astype("datetime64[D]")
    unit: str | None
    if n_slices is not None:
        unit = None
        before = np.cumsum(docs) - docs  # documents on earlier days
        group = np.minimum(n_slices - 1, (n_slices * before) // max(int(docs.sum()), 1))
        _, group = np.unique(group, return_inverse=True)
        starts = [start_days[group == g][0] for g in range(int(group.max()) + 1)]
        ends = [start_days[group == g][-1] + np.timedelta64(1, "D")
                for g in range(int(group.max()) + 1)]
    else:
        unit = auto_unit(days) if by == "auto" else by
        floors = calendar_floor(days * _DAY, unit)
        uniq, group = np.unique(floors, return_inverse=True)
        starts = list(uniq)
        ends = [next_calendar(u, unit) for u in uniq]
    out = []
    for g, (start, end) in enumerate(zip(starts, ends, strict=True)):
        mine = group == g
        n_tok = int(tokens[mine].sum())
        out.append(Slice(0, int(docs[mine].sum()), n_tok,
                         weighted[mine].sum(axis=0) / max(float(n_tok), 1.0),
                         start=str(start), end=str(end), label=time_label(start, end, unit)))
    return out


# ----------------------------------------------------------------------------- words per slice

#: Bytes of per-slice sums the words of time slices hold at once (Q̄_S and Q Q̄_Sᵀ: 16·K·V
#: bytes a slice); more slices are summed in further pairs of passes.
WORDS_BYTES = 512 * 2**20


@dataclass(frozen=True)
class SliceTopics:
    """Each topic's word distribution within one slice (:func:`slice_topics`).

    Attributes
    ----------
    version : int
        The store version (0 for a span of time).
    label : str
        The slice's name ("version 3", "1861", ...).
    n_docs : int
        The slice's documents that add to Q (at least 2 tokens in the model's words).
    prevalence : ndarray of shape (K,)
        Each topic's share of the slice's part of Q (its recovered p(z); 0 for a topic
        whose anchor word does not occur in the slice).
    components : ndarray of shape (K, V)
        p(w | z) within the slice, rows summing to 1 (all 0 for a topic of prevalence 0).
    """

    version: int
    label: str
    n_docs: int
    prevalence: npt.NDArray[np.float64]
    components: npt.NDArray[np.float64]

    def top(self, vocab: Sequence[str], n: int = 10) -> SliceWords:
        """The ``n`` most probable words of each topic in this slice."""
        ids = np.argsort(-self.components, axis=1, kind="stable")[:, :n]
        probs = np.take_along_axis(self.components, ids, axis=1)
        words = [[vocab[int(i)] if p > 0 else "" for i, p in zip(row, prow, strict=True)]
                 for row, prow in zip(ids, probs, strict=True)]
        return SliceWords(self.version, self.label, self.prevalence, words, probs)


def slice_topics(
    model: Any,
    versions: Sequence[int] | None = None,
    *,
    time_field: str | None = None,
    slices: Sequence[Slice] | None = None,
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    by: str = "auto",
    n_slices: int | None = None,
    format: str = "auto",
    text_field: str = "text",
) -> Iterator[SliceTopics]:
    """Each topic's word distribution per slice, with the model's anchors fixed and the
    recovery run on the slice's part of Q (see the module docstring); in order.

    Parameters
    ----------
    model : AnchorTopicModel
        A fitted model (its store still there, for versions).
    versions : sequence of int, optional
        Without ``time_field``: the store versions (default: every version up to the one the
        model was fitted on that added documents).
    time_field : str, optional
        Slice by time instead (as :func:`timeline`): the documents of ``inputs`` (default:
        the store's recorded inputs), in ``slices`` (the time slices :func:`timeline` gave
        for the same documents and settings; default: made by it here, one more pass).
    by, n_slices, format, text_field :
        As for :func:`timeline`.

    Raises
    ------
    ModelError
        The store is gone.
    """
    check_is_fitted(model)
    vocab = tuple(model.vocab_)
    anchors = np.asarray(model.anchors_, dtype=np.int64)
    if time_field is not None:
        if slices is None:
            slices = timeline(model, inputs, time_field=time_field, by=by, n_slices=n_slices,
                              format=format, text_field=text_field)
        corpus = _dated_corpus(model, inputs, time_field, format, text_field)
        yield from _time_slice_topics(corpus, vocab, anchors, slices)
        return
    path = fitted_store(model, "a timeline reads its documents")
    upto = int(store_record(model).get("version", 0))
    wanted = range(1, upto + 1) if versions is None else [int(v) for v in versions]
    with CooccurrenceStore.open(path) as store:
        by_input = store.doc_length == "input"
        for v in wanted:
            if not 1 <= v <= store.version:
                raise TimelineError(f"{path}: has no version {v} (versions 1 to "
                                    f"{store.version})")
            recorded = recorded_corpus(store, after=v - 1, upto=v)
            if recorded is None:
                continue
            mine = recorded.onto(vocab)
            sums = _QSums(1, len(vocab), anchors)
            for H, w, _ in _weighted_chunks(mine, vocab, by_input):
                sums.add_anchor_rows(H, w, np.zeros(H.shape[0], dtype=np.int64))
            if sums.n_docs[0]:
                sums.normalise()
                for H, w, _ in _weighted_chunks(mine, vocab, by_input):
                    sums.add_products(H, w, np.zeros(H.shape[0], dtype=np.int64))
                yield sums.recover(0, v, f"version {v}")


def _time_slice_topics(corpus: Corpus, vocab: tuple[str, ...], anchors: np.ndarray,
                       slices: Sequence[Slice]) -> Iterator[SliceTopics]:
    """:func:`slice_topics` of time slices: as many slices at a time as
    :data:`WORDS_BYTES` holds, two passes over the dated documents for each such batch
    (a document's slice: the last whose first day is not after its day)."""
    starts = np.array([s.start for s in slices], dtype="datetime64[D]").astype(np.int64)
    V, K = len(vocab), anchors.size
    per_batch = max(1, WORDS_BYTES // (16 * K * V + 1))
    for b0 in range(0, len(slices), per_batch):
        b1 = min(len(slices), b0 + per_batch)
        sums = _QSums(b1 - b0, V, anchors)

        def groups(times: np.ndarray | None, b0: int = b0, b1: int = b1) -> np.ndarray:
            if times is None:
                raise TimelineError("the documents carry no time")
            day = np.floor_divide(np.asarray(times, dtype=np.int64), _DAY)
            g = np.searchsorted(starts, day, side="right") - 1
            return np.where((g >= b0) & (g < b1), g - b0, -1)

        for H, w, times in _weighted_chunks(corpus, vocab, True, dated=True):
            sums.add_anchor_rows(H, w, groups(times))
        sums.normalise()
        for H, w, times in _weighted_chunks(corpus, vocab, True, dated=True):
            sums.add_products(H, w, groups(times))
        for g in range(b1 - b0):
            if sums.n_docs[g]:
                yield sums.recover(g, 0, slices[b0 + g].label)


def _weighted_chunks(corpus: Corpus, vocab: tuple[str, ...], by_input: bool, *,
                     dated: bool = False) -> Iterator[tuple[sp.csr_matrix, np.ndarray, Any]]:
    """The corpus' documents that add to Q: counts H (n×V), weights w_d = 1/(n_d(n_d−1))
    (n,), n_d as the store defines it (``by_input``: input length, else tokens in its
    words: here the model's), and with ``dated`` their times (n,) (else None)."""
    index = {w: i for i, w in enumerate(vocab)}
    for chunk in corpus.iter_chunks():
        H = sp.csr_matrix(chunk_counts(chunk, vocab, index)[0], dtype=np.float64)
        kept = np.asarray(H.sum(axis=1)).ravel()
        n = chunk.input_lengths.astype(np.float64) if by_input else kept
        use = (n >= 2) & (kept >= 2)
        if use.any():
            times = None
            if dated and chunk.times is not None:
                times = np.asarray(chunk.times)[use]
            yield H[use], 1.0 / (n[use] * (n[use] - 1.0)), times


class _QSums:
    """What the recovery needs of G slices' parts of Q (Q_d = w_d (h_d h_dᵀ − diag h_d)),
    summed over their documents in two passes: first the anchors' rows Q_S (G×K×V), the
    row sums p (G×V) and Σ_d w_d h_d (G×V), then, with Q̄_S (:meth:`normalise`), the
    products Q Q̄_Sᵀ (G×V×K)."""

    def __init__(self, n_groups: int, V: int, anchors: np.ndarray) -> None:
        K = anchors.size
        self.anchors = anchors
        self.QS = np.zeros((n_groups, K, V))
        self.p = np.zeros((n_groups, V))
        self.Hw = np.zeros((n_groups, V))
        self.QQ = np.zeros((n_groups, V, K))
        self.n_docs = np.zeros(n_groups, dtype=np.int64)

    @staticmethod
    def _split(H: sp.csr_matrix, w: np.ndarray, group: np.ndarray
               ) -> Iterator[tuple[int, sp.csr_matrix, np.ndarray]]:
        for g in np.unique(group[group >= 0]).tolist():
            rows = np.flatnonzero(group == g)
            yield g, H[rows], w[rows]

    def add_anchor_rows(self, H: sp.csr_matrix, w: np.ndarray, group: np.ndarray) -> None:
        """First pass: documents H (n×V), weights w (n,), each in slice ``group`` (n,;
        −1: none of these)."""
        for g, Hg, wg in self._split(H, w, group):
            WH = sp.diags(wg) @ Hg
            self.QS[g] += (Hg[:, self.anchors].T @ WH).toarray()
            self.Hw[g] += np.asarray(WH.sum(axis=0)).ravel()
            m = np.asarray(Hg.sum(axis=1)).ravel()
            self.p[g] += np.asarray((sp.diags(m - 1.0) @ WH).sum(axis=0)).ravel()
            self.n_docs[g] += Hg.shape[0]

    def normalise(self) -> None:
        """Between the passes: the diagonal (h_i² − h_i, not h_i²) and Q̄_S = Q_S / p_S."""
        K = self.anchors.size
        for g in range(self.QS.shape[0]):
            self.QS[g, np.arange(K), self.anchors] -= self.Hw[g, self.anchors]
            pS = self.p[g, self.anchors][:, None]
            self.QS[g] = np.divide(self.QS[g], pS, out=np.zeros_like(self.QS[g]),
                                   where=pS > 0)

    def add_products(self, H: sp.csr_matrix, w: np.ndarray, group: np.ndarray) -> None:
        """Second pass: Q Q̄_Sᵀ = Σ_d w_d (h_d (h_d · Q̄_S) − h_d ∘ Q̄_S) (the diagonal's part
        is subtracted in :meth:`recover`)."""
        for g, Hg, wg in self._split(H, w, group):
            self.QQ[g] += np.asarray(Hg.T @ (wg[:, None] * (Hg @ self.QS[g].T)))

    def recover(self, g: int, version: int, label: str) -> SliceTopics:
        """Slice g's p(z | w) for every word on the anchors present in it (simplex least
        squares in kernel form, exact), then its p(w | z) and p(z)."""
        QbarS, p = self.QS[g], self.p[g]
        QQ = self.QQ[g] - self.Hw[g][:, None] * QbarS.T
        K, V = QbarS.shape
        present = p[self.anchors] > 0
        rows = p > 0
        C = np.zeros((V, K))
        if present.any() and rows.any():
            QS = QbarS[present]
            G = QS @ QS.T
            B = QQ[rows][:, present] / p[rows, None]
            diag = np.diag(G)
            # ‖q̄_i‖² only scales the stopping test; its Cauchy–Schwarz lower bound
            # max_k b_ik² / G_kk makes the test stricter, never looser (the solver is exact)
            norms = np.max(np.divide(B ** 2, diag, out=np.zeros_like(B), where=diag > 0),
                           axis=1)
            C[np.ix_(rows, present)] = solve_active_set(
                G, B, np.where(norms > 0, norms, 1e-300)).C
        joint = C * (p / p.sum())[:, None]  # p(w, z): V×K
        mass = joint.sum(axis=0)
        components = np.divide(joint.T, mass[:, None], out=np.zeros((K, V)),
                               where=mass[:, None] > 0)
        return SliceTopics(version, label, int(self.n_docs[g]),
                           mass / max(float(mass.sum()), 1e-300), components)


# ----------------------------------------------------------------------------- output

#: Output formats by the ending of the file's name.
ENDINGS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def output_format(path: str | os.PathLike[str]) -> str:
    """'csv' or 'parquet' by the ending of ``path``."""
    ending = os.path.splitext(os.fspath(path))[1].lower()
    if ending not in ENDINGS:
        raise TimelineError(f"{os.fspath(path)}: a timeline is written as .csv or .parquet "
                            f"(.pq); not {ending or 'a name without an ending'}")
    return ENDINGS[ending]


def _write_table(path: str | os.PathLike[str], columns: list[str],
                 rows: list[list[Any]]) -> None:
    """Rows as CSV or Parquet (by the name's ending), written aside and renamed."""
    fmt = output_format(path)
    if fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise TimelineError("writing Parquet needs pyarrow: pip install "
                                "'streamtopic[parquet]'") from exc
        table = pa.table({c: [r[j] for r in rows] for j, c in enumerate(columns)})
        with written_aside(os.fspath(path)) as tmp:
            pq.write_table(table, tmp)
        return
    with written_aside(os.fspath(path)) as tmp, open(tmp, "w", newline="",
                                                    encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        w.writerows([f"{x:.6f}" if isinstance(x, float) else x for x in r] for r in rows)


def write_timeline(slices: list[Slice], path: str | os.PathLike[str]) -> None:
    """The timeline as CSV or Parquet (by the ending of ``path``): one row per slice
    (version, then for time slices its label, first day and the day after its last;
    documents, tokens, then each topic's prevalence ``topic_k``), written aside and
    renamed."""
    K = slices[0].prevalence.size if slices else 0
    dated = bool(slices) and slices[0].start is not None
    head = ["slice", "start", "end"] if dated else ["version"]
    columns = [*head, "n_docs", "n_tokens", *(f"topic_{k}" for k in range(K))]
    rows = [[*([s.label, s.start, s.end] if dated else [s.version]), s.n_docs, s.n_tokens,
             *(float(x) for x in s.prevalence)] for s in slices]
    _write_table(path, columns, rows)


def write_words(words: Sequence[SliceWords], path: str | os.PathLike[str],
                topics: Sequence[int]) -> None:
    """Top words per slice as CSV or Parquet: one row per (slice, topic, rank) with the
    topic's prevalence in the slice, the word and its p(w | z) there. The slice is named by
    its ``version`` (store versions) or its ``slice`` label (spans of time)."""
    dated = bool(words) and words[0].version == 0
    rows = [[s.label if dated else s.version, k, float(s.prevalence[k]), r + 1, s.words[k][r],
             float(s.probabilities[k, r])]
            for s in words for k in topics for r in range(len(s.words[k])) if s.words[k][r]]
    _write_table(path, ["slice" if dated else "version", "topic", "prevalence", "rank", "word",
                        "p"], rows)
