"""Tokenisation and the streaming vocabulary pass.

Tokenisation follows scikit-learn's ``CountVectorizer`` conventions (lowercase, token pattern
``(?u)\\b\\w\\w+\\b``, optional stop words); pruning follows gensim's
``Dictionary.filter_extremes`` (``min_df`` documents, ``max_df`` fraction of documents, then the
``keep_n`` terms of highest document frequency).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._stopwords import ENGLISH_STOP_WORDS

__all__ = [
    "ENGLISH_STOP_WORDS",
    "DEFAULT_TOKEN_PATTERN",
    "Tokenizer",
    "TermStats",
    "Vocabulary",
    "read_vocab_file",
]

DEFAULT_TOKEN_PATTERN = r"(?u)\b\w\w+\b"


def read_vocab_file(path: str | os.PathLike[str]) -> list[str]:
    """Read a vocabulary file: one term per line (UTF-8), blank trailing line allowed.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If a line is empty or a term is repeated; the message names the file and line.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: vocabulary file not found")
    with open(path, "rb") as fh:
        raw = fh.read()
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    seen: dict[str, int] = {}
    terms: list[str] = []
    for lineno, line in enumerate(lines, start=1):
        term = line.rstrip("\r")
        if not term.strip():
            raise ValueError(f"{path}:{lineno}: empty term in vocabulary file")
        if term in seen:
            raise ValueError(
                f"{path}:{lineno}: term {term!r} repeats line {seen[term]} of the vocabulary file"
            )
        seen[term] = lineno
        terms.append(term)
    if not terms:
        raise ValueError(f"{path}: vocabulary file is empty")
    return terms


def _resolve_stop_words(stop_words: str | Iterable[str] | None) -> frozenset[str]:
    if stop_words is None or stop_words == "none":
        return frozenset()
    if isinstance(stop_words, str):
        if stop_words == "english":
            return ENGLISH_STOP_WORDS
        if os.path.isfile(stop_words):
            with open(stop_words, encoding="utf-8") as fh:
                return frozenset(w.strip().lower() for w in fh if w.strip())
        raise ValueError(
            f"stop_words={stop_words!r}: expected 'english', 'none', a file path or a list of words"
        )
    return frozenset(stop_words)


@dataclass(frozen=True)
class Tokenizer:
    """Split text into tokens, scikit-learn style.

    Parameters
    ----------
    lowercase : bool
        Lowercase the text before matching.
    token_pattern : str
        Regular expression whose matches are the tokens (default: words of 2+ characters).
    stop_words : {'english', 'none'}, path, iterable of str or None
        Tokens to drop: scikit-learn's English list, the words of a file (one per line), or
        an explicit collection.
    analyzer : callable, optional
        A user function ``str -> list[str]`` that replaces lowercasing and the pattern
        (stop words are still removed). It must be picklable (a module-level function) to run
        on process-based schedulers.
    """

    lowercase: bool = True
    token_pattern: str = DEFAULT_TOKEN_PATTERN
    stop_words: str | tuple[str, ...] | None = None
    analyzer: Callable[[str], list[str]] | None = None
    _stops: frozenset[str] = field(init=False, repr=False, compare=False)
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sw = self.stop_words
        if sw is not None and not isinstance(sw, str):
            object.__setattr__(self, "stop_words", tuple(sorted(sw)))
        object.__setattr__(self, "_stops", _resolve_stop_words(self.stop_words))
        try:
            regex = re.compile(self.token_pattern)
        except re.error as exc:
            raise ValueError(f"token_pattern={self.token_pattern!r} is not a valid regex: {exc}")
        object.__setattr__(self, "_regex", regex)

    def __call__(self, text: str) -> list[str]:
        """Return the tokens of ``text`` in order."""
        if self.analyzer is not None:
            tokens = list(self.analyzer(text))
        else:
            if self.lowercase:
                text = text.lower()
            tokens = self._regex.findall(text)
        if self._stops:
            stops = self._stops
            tokens = [t for t in tokens if t not in stops]
        return tokens

    def config(self) -> dict[str, Any]:
        """A JSON-serialisable description, stored with a co-occurrence store."""
        sw = self.stop_words
        return {
            "lowercase": self.lowercase,
            "token_pattern": self.token_pattern,
            "stop_words": list(sw) if isinstance(sw, tuple) else sw,
            "analyzer": None if self.analyzer is None else getattr(
                self.analyzer, "__qualname__", repr(self.analyzer)
            ),
        }

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Tokenizer:
        """Rebuild a tokenizer from :meth:`config` (a user analyzer cannot be rebuilt)."""
        sw = cfg.get("stop_words")
        return cls(
            lowercase=bool(cfg.get("lowercase", True)),
            token_pattern=cfg.get("token_pattern", DEFAULT_TOKEN_PATTERN),
            stop_words=tuple(sw) if isinstance(sw, list) else sw,
        )


class TermStats:
    """Document frequencies and token counts per term, mergeable across partitions.

    Id-based sources (UCI, HDF5) accumulate dense arrays over their own vocabulary, keyed by
    that vocabulary; text sources accumulate counters keyed by the term string. Merging two
    ``TermStats`` is a sum, so a tree reduction over a ``dask.bag`` builds the corpus' counts.
    """

    def __init__(self) -> None:
        self.n_docs = 0
        self.df: Counter[str] = Counter()
        self.tf: Counter[str] = Counter()
        # vocab key -> (terms, df array, tf array)
        self.by_vocab: dict[str, tuple[Sequence[str], np.ndarray, np.ndarray]] = {}

    def add_terms(self, terms: Sequence[str], df: np.ndarray, tf: np.ndarray) -> None:
        """Add per-term counts for the string terms ``terms``."""
        for t, d, f in zip(terms, df.tolist(), tf.tolist()):
            self.df[t] += d
            self.tf[t] += f

    def add_ids(
        self, key: str, vocab: Sequence[str], ids: np.ndarray, df: np.ndarray, tf: np.ndarray
    ) -> None:
        """Add per-term counts for term ids ``ids`` of the source vocabulary ``vocab``."""
        if key not in self.by_vocab:
            n = len(vocab)
            self.by_vocab[key] = (vocab, np.zeros(n, np.int64), np.zeros(n, np.int64))
        _, dfa, tfa = self.by_vocab[key]
        np.add.at(dfa, ids, df)
        np.add.at(tfa, ids, tf)

    def merge(self, other: TermStats) -> TermStats:
        """Add ``other`` into ``self`` and return ``self``."""
        self.n_docs += other.n_docs
        self.df.update(other.df)
        self.tf.update(other.tf)
        for key, (vocab, dfa, tfa) in other.by_vocab.items():
            if key in self.by_vocab:
                _, d0, t0 = self.by_vocab[key]
                d0 += dfa
                t0 += tfa
            else:
                self.by_vocab[key] = (vocab, dfa.copy(), tfa.copy())
        return self

    @staticmethod
    def sum(parts: Iterable[TermStats]) -> TermStats:
        """Sum an iterable of ``TermStats`` (the aggregate of a bag reduction)."""
        total = TermStats()
        for p in parts:
            total.merge(p)
        return total

    def totals(self) -> tuple[Counter[str], Counter[str]]:
        """Document frequency and token count per term string, all sources combined."""
        df = Counter(self.df)
        tf = Counter(self.tf)
        for vocab, dfa, tfa in self.by_vocab.values():
            nz = np.flatnonzero(tfa)
            for i in nz.tolist():
                df[vocab[i]] += int(dfa[i])
                tf[vocab[i]] += int(tfa[i])
        return df, tf


@dataclass
class Vocabulary:
    """An ordered vocabulary with per-term statistics.

    Attributes
    ----------
    terms : list of str
        The V terms; term ``i`` is row and column ``i`` of the co-occurrence matrix.
    doc_freq : ndarray of shape (V,)
        Documents that contain each term (in the pass that built the vocabulary).
    token_counts : ndarray of shape (V,)
        Occurrences of each term.
    """

    terms: list[str]
    doc_freq: np.ndarray
    token_counts: np.ndarray

    def __len__(self) -> int:
        return len(self.terms)

    @property
    def index(self) -> dict[str, int]:
        """Mapping term -> id."""
        return {t: i for i, t in enumerate(self.terms)}

    @classmethod
    def fixed(cls, terms: Sequence[str]) -> Vocabulary:
        """A vocabulary given by the user, without statistics."""
        n = len(terms)
        if len(set(terms)) != n:
            raise ValueError("vocabulary has repeated terms")
        return cls(list(terms), np.zeros(n, np.int64), np.zeros(n, np.int64))

    @classmethod
    def from_stats(
        cls,
        stats: TermStats,
        *,
        min_df: int = 5,
        max_df: float = 0.5,
        keep_n: int | None = 100_000,
    ) -> Vocabulary:
        """Prune corpus statistics with gensim's ``filter_extremes`` semantics.

        Keeps terms in at least ``min_df`` documents and in at most ``max_df`` × (documents)
        documents, then the ``keep_n`` terms of highest document frequency. The result is
        ordered by decreasing document frequency, ties broken by term, so it is deterministic.

        Parameters
        ----------
        stats : TermStats
            Counts from the vocabulary pass.
        min_df : int
            Minimum document frequency (absolute, >= 1).
        max_df : float
            Maximum document frequency as a fraction of documents, in (0, 1].
        keep_n : int or None
            Keep at most this many terms (None: no limit).
        """
        validate_pruning(min_df, max_df, keep_n)
        df, tf = stats.totals()
        n_docs = stats.n_docs
        max_abs = max_df * n_docs
        kept = [t for t, d in df.items() if d >= min_df and d <= max_abs]
        kept.sort(key=lambda t: (-df[t], t))
        if keep_n is not None:
            kept = kept[:keep_n]
        return cls(
            kept,
            np.array([df[t] for t in kept], dtype=np.int64),
            np.array([tf[t] for t in kept], dtype=np.int64),
        )


def validate_pruning(min_df: int, max_df: float, keep_n: int | None) -> None:
    """Check the pruning parameters; raise ``ValueError`` naming the bad one."""
    if not isinstance(min_df, (int, np.integer)) or min_df < 1:
        raise ValueError(f"min_df={min_df!r}: must be an integer >= 1 (a document count)")
    if not (0.0 < float(max_df) <= 1.0):
        raise ValueError(f"max_df={max_df!r}: must be a fraction of documents in (0, 1]")
    if keep_n is not None and (not isinstance(keep_n, (int, np.integer)) or keep_n < 1):
        raise ValueError(f"keep_n={keep_n!r}: must be a positive integer or None")
