"""Tokenisation and the streaming vocabulary pass.

Tokenisation (:class:`Tokenizer`) by default:

* drops lines that look like encoded binary: a run of 30 or more printable ASCII characters
  without a space (base64, BinHex, PGP signatures, long URLs and rulers), or a uuencoded line;
* drops e-mail addresses, message ids, URLs and reply attribution lines ("In article <id>",
  lines ending in "writes:" or "wrote:"), which would give tokens such as ``edu``, ``com``
  and the names of mail hosts;
* lowercases and keeps the maximal runs of word characters that consist of 2 to 15 letters
  (pattern ``(?u)\\b[^\\W\\d_]{2,15}\\b``): numbers and tokens that mix letters with digits or
  underscores (``a86``, ``w7``, ``c_``) give no token at all, and neither do longer runs;
* removes scikit-learn's English stop words.

This follows gensim's ``simple_preprocess`` (alphabetic tokens of 2 to 15 characters) and
MALLET (letters only), except that a letter run glued to a digit is dropped rather than cut.
Stores built before these defaults record ``(?u)\\b\\w\\w+\\b`` (scikit-learn's pattern) and no
stop words or dropping, and keep being read that way (:meth:`Tokenizer.from_config`).

Pruning follows gensim's ``Dictionary.filter_extremes`` (``min_df`` documents, ``max_df``
fraction of documents, then the ``keep_n`` terms of highest document frequency).
"""

from __future__ import annotations

import itertools
import os
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._stopwords import ENGLISH_STOP_WORDS

__all__ = [
    "DEFAULT_TOKEN_PATTERN",
    "ENGLISH_STOP_WORDS",
    "LEGACY_TOKEN_PATTERN",
    "TermStats",
    "Tokenizer",
    "Vocabulary",
    "read_vocab_file",
]

DEFAULT_TOKEN_PATTERN = r"(?u)\b[^\W\d_]{2,15}\b"
"""Maximal runs of word characters made of 2 to 15 letters (no digit, no underscore)."""

LEGACY_TOKEN_PATTERN = r"(?u)\b\w\w+\b"
"""scikit-learn's pattern, the default before the letters-only one (and of old stores)."""

# The default pattern on ASCII text (``str.isascii`` is O(1)): the same matches, several times
# faster than the Unicode classes. Tokenising is the ingest's hot loop.
_ASCII_DEFAULT = re.compile(r"\b[A-Za-z]{2,15}\b", re.ASCII)

# Encoded binary, one line at a time (every pattern starts with a literal newline, which the
# regex engine finds fast). A line is dropped if it is one run of 30 or more printable ASCII
# characters without a space (base64, BinHex, xxencode, PGP armour, long URLs, rulers), or a
# uuencoded line: "M" and 40-60 characters of the uuencode alphabet (space to backquote: no
# lowercase letter), one of them a symbol rare in text, after optional quote marks.
_ENCODED_LINE = re.compile(
    r"\n(?:[ \t]*[!-~]{30,}|(?:[>:|] ?)*M(?=[ -`]*[#%*+<=>@\[\\\]^_`])[ -`]{40,60})"
    r"[ \t]*(?=\r?\n|\Z)"
)
# E-mail addresses and message ids: the local part before "@" is matched on the reversed
# text (so that the pattern starts with the literal "@"), then "@domain" on the text.
_LOCAL_PART_REVERSED = re.compile(r"@[\w.+%=!$-]+")
_AT_DOMAIN = re.compile(r"@[\w-]+(?:\.[\w-]+)*")
_URL = re.compile(r"\b(?:[A-Za-z][\w+.-]*://|www\.)\S*")
# Reply attribution: "In article <message-id>", and (on the reversed text) a line that ends
# in "writes:" or "wrote:".
_IN_ARTICLE = re.compile(r"In article\s*<[^>\s]*>")
_WRITES_LINE_REVERSED = re.compile(r"\n\r?[ \t]*:(?:setirw|etorw)\b[^\n]*")


def _drop_encoded(text: str) -> str:
    """``text`` without the lines that look like encoded binary (see the module docstring),
    and with a newline in front (the patterns start with the newline before a line)."""
    return _ENCODED_LINE.sub("\n", "\n" + text)


def _drop_addresses(text: str) -> str:
    """``text`` without e-mail addresses, message ids, URLs and reply attribution lines.

    Each rule runs only if a substring it needs occurs (``in`` is fast), so text without
    any of them costs almost nothing.
    """
    if "In article" in text:
        text = _IN_ARTICLE.sub(" ", text)
    reverse = "writes:" in text or "wrote:" in text
    if reverse or "@" in text:
        rev = (text + "\n")[::-1]
        if reverse:
            rev = _WRITES_LINE_REVERSED.sub("\n", rev)
        text = _LOCAL_PART_REVERSED.sub("@", rev)[::-1]
        if "@" in text:
            text = _AT_DOMAIN.sub(" ", text)
    if "://" in text or "www." in text:
        text = _URL.sub(" ", text)
    return text


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


def resolve_stop_words(stop_words: str | Iterable[str] | None) -> frozenset[str]:
    if stop_words is None or stop_words == "english":
        return ENGLISH_STOP_WORDS
    if isinstance(stop_words, str):
        if stop_words == "none":
            return frozenset()
        if os.path.isfile(stop_words):
            with open(stop_words, encoding="utf-8") as fh:
                return frozenset(w.strip().lower() for w in fh if w.strip())
        raise ValueError(
            f"stop_words={stop_words!r}: expected 'english', 'none', a file path or a list of words"
        )
    return frozenset(stop_words)


@dataclass(frozen=True)
class Tokenizer:
    """Split text into tokens: the defaults suit topic models of English text.

    The steps, in order: drop lines of encoded binary (``drop_encoded``), drop e-mail
    addresses, URLs and reply attribution lines (``drop_addresses``), lowercase, take the
    matches of ``token_pattern`` (or call ``analyzer``), remove stop words. The module
    docstring describes each rule.

    Parameters
    ----------
    lowercase : bool
        Lowercase the text before matching.
    token_pattern : str
        Regular expression whose matches are the tokens. The default,
        :data:`DEFAULT_TOKEN_PATTERN`, keeps maximal runs of 2 to 15 letters, so numbers and
        letter-digit mixtures give no token; :data:`LEGACY_TOKEN_PATTERN` is scikit-learn's
        ``(?u)\\b\\w\\w+\\b``.
    stop_words : {'english', 'none'}, path, iterable of str or None
        Tokens to drop: scikit-learn's English list (the default; ``None`` means the default
        too), nothing (``'none'``), the words of a file (one per line), or an explicit
        collection.
    analyzer : callable, optional
        A user function ``str -> list[str]`` that replaces lowercasing and the pattern
        (addresses, encoded lines and stop words are still removed). It must be picklable (a
        module-level function) to run on process-based schedulers.
    drop_encoded : bool
        Drop lines that look like encoded binary (uuencode, base64, BinHex, PGP armour).
    drop_addresses : bool
        Drop e-mail addresses, message ids, URLs and reply attribution lines.
    max_doc_tokens : int, optional
        Cut each document into windows of this many tokens (counted before stop words are
        removed, the last window shorter), each then a document of its own: a modelling
        choice for corpora of very long documents, whose pairs of words far apart then do
        not count as co-occurring, and whose ingest costs less (a document of u distinct
        words costs u² pair updates). Off by default. Applied where documents are counted
        (ingest, and so the store's token cache and refinement); the matching methods above
        and inference see whole documents.
    """

    lowercase: bool = True
    token_pattern: str = DEFAULT_TOKEN_PATTERN
    stop_words: str | tuple[str, ...] | None = "english"
    analyzer: Callable[[str], list[str]] | None = None
    drop_encoded: bool = True
    drop_addresses: bool = True
    max_doc_tokens: int | None = None
    _stops: frozenset[str] = field(init=False, repr=False, compare=False)
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _ascii_regex: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        m = self.max_doc_tokens
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, np.integer))
                              or m < 2):
            raise ValueError(f"max_doc_tokens={m!r}: must be an integer >= 2 (tokens per "
                             "window), or None")
        sw = self.stop_words
        if sw is None:
            object.__setattr__(self, "stop_words", "english")
        elif not isinstance(sw, str):
            object.__setattr__(self, "stop_words", tuple(sorted(sw)))
        object.__setattr__(self, "_stops", resolve_stop_words(self.stop_words))
        try:
            regex = re.compile(self.token_pattern)
        except re.error as exc:
            raise ValueError(
                f"token_pattern={self.token_pattern!r} is not a valid regex: {exc}"
            ) from exc
        object.__setattr__(self, "_regex", regex)
        fast = _ASCII_DEFAULT if self.token_pattern == DEFAULT_TOKEN_PATTERN else None
        object.__setattr__(self, "_ascii_regex", fast)

    def __call__(self, text: str) -> list[str]:
        """Return the tokens of ``text`` in order."""
        return self.tokens_and_length(text)[0]

    def tokens_and_length(self, text: str) -> tuple[list[str], int]:
        """The tokens of ``text`` in order, and the document's *input length*: how many
        tokens it has before stop words are removed (the matches of the pattern, or the
        analyzer's output). The co-occurrence estimator normalises each document by its
        input length, which therefore does not depend on the vocabulary a store keeps."""
        tokens = self.matches(text)
        length = len(tokens)
        if self._stops:
            stops = self._stops
            tokens = [t for t in tokens if t not in stops]
        return tokens, length

    def clean(self, text: str) -> str:
        """``text`` without its encoded lines (``drop_encoded``), then without its
        addresses, URLs and reply attribution lines (``drop_addresses``): what the pattern
        or the analyzer sees, before lowercasing."""
        if self.drop_encoded:  # first: an "@" inside an encoded line is no address
            text = _drop_encoded(text)
        if self.drop_addresses:
            text = _drop_addresses(text)
        return text

    def matches(self, text: str) -> list[str]:
        """The tokens of ``text`` in order, before stop words are removed."""
        text = self.clean(text)
        if self.analyzer is not None:
            return list(self.analyzer(text))
        if self.lowercase:
            text = text.lower()
        fast = self._ascii_regex
        regex = fast if fast is not None and text.isascii() else self._regex
        return regex.findall(text)

    @property
    def stop_word_set(self) -> frozenset[str]:
        """The stop words removed."""
        return self._stops

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
            "drop_encoded": self.drop_encoded,
            "drop_addresses": self.drop_addresses,
            "max_doc_tokens": self.max_doc_tokens,
        }

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Tokenizer:
        """Rebuild a tokenizer from :meth:`config` (a user analyzer cannot be rebuilt).

        A setting that ``cfg`` lacks takes its value from before it existed, so a store
        written by an older version keeps being read as it was built: scikit-learn's
        pattern, no stop words (a stored ``None``), nothing dropped.
        """
        sw = cfg.get("stop_words")
        return cls(
            lowercase=bool(cfg.get("lowercase", True)),
            token_pattern=cfg.get("token_pattern", LEGACY_TOKEN_PATTERN),
            stop_words="none" if sw is None else tuple(sw) if isinstance(sw, list) else sw,
            drop_encoded=bool(cfg.get("drop_encoded", False)),
            drop_addresses=bool(cfg.get("drop_addresses", False)),
            max_doc_tokens=cfg.get("max_doc_tokens"),
        )


class _ProcessIds:
    """Ids of term strings within this process: one id per distinct string, stable for the
    process' life, made at C speed (``map`` over ``dict.setdefault`` with a counter), so
    that partitions' counts of string terms are summed as arrays. The key names the
    process (a forked child starts a table of its own)."""

    def __init__(self) -> None:
        self.key = f"{uuid.uuid4().hex}-{os.getpid()}"
        self.ids: dict[str, int] = {}
        self.counter = itertools.count()

    def of(self, terms: Sequence[str]) -> np.ndarray:
        """The id of each of ``terms`` (T,) int64, new strings taking fresh ids."""
        return np.fromiter(map(self.ids.setdefault, terms, self.counter), np.int64,
                           len(terms))


#: Distinct strings after which a process starts a new table (a new key): a long-lived
#: process that reads many corpora keeps at most this many strings alive (about 0.5 GB)
_MAX_PROCESS_IDS = 5_000_000
_IDS = _ProcessIds()


def _process_ids() -> _ProcessIds:
    """This process' table of term ids (a fresh one past ``_MAX_PROCESS_IDS`` strings)."""
    global _IDS
    if len(_IDS.ids) > _MAX_PROCESS_IDS:
        _IDS = _ProcessIds()
    return _IDS
if hasattr(os, "register_at_fork"):
    def _reset_ids() -> None:
        global _IDS
        _IDS = _ProcessIds()

    os.register_at_fork(after_in_child=_reset_ids)


@dataclass
class _TermCounts:
    """Counts of string terms under one process' ids (:class:`_ProcessIds`): ``ids`` (T,)
    int64 sorted and distinct, ``terms`` (T,) object array of the strings, ``df`` and ``tf``
    (T,) int64."""

    ids: np.ndarray
    terms: np.ndarray
    df: np.ndarray
    tf: np.ndarray

    @classmethod
    def concat(cls, parts: Sequence[_TermCounts]) -> _TermCounts:
        """The sum of ``parts`` (of one process), grouped by id with numpy (no Python loop
        over the terms)."""
        if len(parts) == 1:
            return parts[0]
        ids = np.concatenate([p.ids for p in parts])
        uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        terms = np.concatenate([p.terms for p in parts])[first]
        sums = [np.bincount(inverse, weights=np.concatenate([getattr(p, f) for p in parts]),
                            minlength=uniq.size).astype(np.int64) for f in ("df", "tf")]
        return cls(uniq, terms, sums[0], sums[1])


class TermStats:
    """Document frequencies and token counts per term, mergeable across partitions.

    Id-based sources (UCI, HDF5) accumulate dense arrays over their own vocabulary, keyed by
    that vocabulary. Text sources' terms are strings: each process gives them ids of its own
    (:class:`_ProcessIds`), and counts are summed as arrays per process; the strings of
    different processes are combined once, by :meth:`totals`. Merging two ``TermStats`` is a
    sum, so a tree reduction over a ``dask.bag`` builds the corpus' counts.
    """

    def __init__(self) -> None:
        self.n_docs = 0
        #: process key -> counts of string terms under that process' ids
        self.by_process: dict[str, list[_TermCounts]] = {}
        # vocab key -> (terms, df array, tf array)
        self.by_vocab: dict[str, tuple[Sequence[str], np.ndarray, np.ndarray]] = {}

    def add_terms(self, terms: Sequence[str], df: np.ndarray, tf: np.ndarray) -> None:
        """Add per-term counts for the distinct string terms ``terms``."""
        if not len(terms):
            return
        table = _process_ids()
        ids = table.of(terms)
        order = np.argsort(ids, kind="stable")
        part = _TermCounts(ids[order], np.array(terms, dtype=object)[order],
                           np.asarray(df, np.int64)[order], np.asarray(tf, np.int64)[order])
        self.by_process.setdefault(table.key, []).append(part)
        self._compact()

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
        for key, parts in other.by_process.items():
            self.by_process.setdefault(key, []).extend(parts)
        self._compact()
        for key, (vocab, dfa, tfa) in other.by_vocab.items():
            if key in self.by_vocab:
                _, d0, t0 = self.by_vocab[key]
                d0 += dfa
                t0 += tfa
            else:
                self.by_vocab[key] = (vocab, dfa.copy(), tfa.copy())
        return self

    def _compact(self) -> None:
        """One array of counts per process."""
        for key, parts in self.by_process.items():
            if len(parts) > 1:
                self.by_process[key] = [_TermCounts.concat(parts)]

    @staticmethod
    def sum(parts: Iterable[TermStats]) -> TermStats:
        """Sum an iterable of ``TermStats`` (the aggregate of a bag reduction)."""
        total = TermStats()
        for p in parts:
            total.merge(p)
        return total

    def totals(self) -> tuple[Counter[str], Counter[str]]:
        """Document frequency and token count per term string, all sources combined."""
        df: Counter[str] = Counter()
        tf: Counter[str] = Counter()
        for parts in self.by_process.values():
            for p in parts:
                terms = p.terms.tolist()
                df.update(dict(zip(terms, p.df.tolist(), strict=True)))
                tf.update(dict(zip(terms, p.tf.tolist(), strict=True)))
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
