"""Tokenising a batch of documents in one compiled call (numba, ``nogil``, cached).

Contract
--------
:class:`BatchTokenizer` gives, for a batch of documents, exactly what
:meth:`~streamtopic.vocabulary.Tokenizer.tokens_and_length` (the reference) gives for each:
the tokens kept after stop words, in order, and the input length (matches before stop words
are removed). It covers every tokenizer built from options (:func:`kernel_flags`): the
default pattern ``(?u)\\b[^\\W\\d_]{2,15}\\b`` or the legacy ``(?u)\\b\\w\\w+\\b``, with or
without ``lowercase``, ``drop_encoded``, ``drop_addresses``, and any stop words. A custom
``token_pattern`` or an ``analyzer`` keeps the Python path (:func:`kernel_flags` is None).

* An ASCII document (``bytes.isascii()``: most of them) goes to the kernel as its raw bytes,
  and the kernel does everything: the dropping rules, lowercasing, matching, counting.
* Any other document is cleaned by Python (:meth:`Tokenizer.clean`, then ``str.lower``), as
  the reference does, and the kernel matches the tokens of its code points (UTF-32).
* Token lists (documents given as their matches) are looked up as they are.

Tokens are counted in one hash table of term ids (open addressing, FNV-1a over the token's
UTF-8 bytes, compared byte by byte on a hash match, grown inside the kernel), shared by the
three kinds of documents. Its first entries are the stop words, marked *not kept*; with a
fixed vocabulary, its words follow with their column, and a token not in the table is
dropped (counted in the length only). Otherwise a new token gets the next id, and each
chunk numbers its terms in order of first occurrence, as the Python builder does. A term's
string is decoded from the table once, when it is first added.

Cost
----
One pass over the bytes per rule that can apply to the document (a rule whose trigger,
"@", "In article", "writes:", "wrote:", "://" or "www.", does not occur is skipped), one
pass to find the tokens, and one hash lookup per token: about 15 to 20 M raw words per
second on one core (the Python path: about 2.5 M), see ``benchmarks/tokenize.py``. The
kernel's first call in a process loads it from numba's cache beside this module (about
1 s; compiling it the first time on a machine takes about 20 s).

Exactness
---------
The rules are regular expressions applied one after another (``vocabulary._drop_encoded``,
``vocabulary._drop_addresses``); the kernel applies each as a pass from one buffer to the
next, in the same order, each pass seeing the previous one's output, and (for ASCII text)
produces the very string Python produces (:func:`clean_ascii`, tested for equality). Every
character class is computed from Python's ``re`` on the 128 ASCII characters (note that
``\\s`` on ``str`` includes ``\\x1c``-``\\x1f``), and for code points from ``re`` over all
of Unicode (:func:`unicode_classes`). Each regex is deterministic once its greedy parts
are read as below, so a pass decides each match by direct scanning:

* encoded lines ``\\n(?:[ \\t]*[!-~]{30,}|(?:[>:|] ?)*M(?=[ -`]*[#...`])[ -`]{40,60})``
  ``[ \\t]*(?=\\r?\\n|\\Z)`` on ``"\\n" + text``: a match consumes the newline before a line
  but not the one after it, so every line is judged on its own. The match ends before a
  final ``"\\r"`` if a newline follows it (neither alternative can consume ``"\\r"``), else at
  the end of the line; a last line ending in ``"\\r"`` is never dropped. First alternative:
  the body is blanks, a run of 30 or more characters of ``[!-~]``, blanks (the classes are
  disjoint, so there is one parse). Second: the quote prefix is read greedily (a shorter
  parse ends before a quote character or a space, never before "M"), then "M"; the
  lookahead holds if a symbol occurs in the run of ``[ -`]`` after "M"; the rest, B, must
  be ``[ -`]{n}`` then ``[ \\t]*`` for some n in [40, 60]: with w the start of B's trailing
  blanks, B[:w] must be in ``[ -`]`` and n can be any of w .. w + (spaces after w), so the
  line matches iff max(w, 40) <= min(60, len(B), w + spaces).
* ``In article\\s*<[^>\\s]*>``: each greedy run stops at a character the next item cannot
  match, so the match is the literal, the maximal ``\\s`` run, "<", the maximal run of
  ``[^>\\s]``, and ">" if that is what follows; scanning resumes after a match.
* Reply lines, matched on the reversed ``text + "\\n"`` by ``\\n\\r?[ \\t]*:(?:setirw|etorw)
  \\b[^\\n]*``: read forwards, a line (every line ends in a newline there) ending in
  "writes" or "wrote", ":", blanks and at most one "\\r", whose "w" starts the string or
  follows a non-word character, loses its content (its newline stays). Matches never
  overlap: each stops before the previous line's newline.
* Local parts ``@[\\w.+%=!$-]+`` on the reversed text: for each "@", the maximal run of
  that class just before it is deleted. "@" is not in the class, so runs of different "@"s
  are disjoint and the reversed scan's order does not matter.
* ``@[\\w-]+(?:\\.[\\w-]+)*``: "@", a maximal ``[\\w-]`` run, then while a "." is followed
  by a ``[\\w-]`` character, the "." and the next maximal run; replaced by a space.
* URLs ``\\b(?:[A-Za-z][\\w+.-]*://|www\\.)\\S*``: at a position that starts a word (a
  letter after a non-word character or at 0), the first alternative holds iff the maximal
  ``[\\w+.-]`` run after the letter is followed by "://" (":" is outside the class, so
  backtracking cannot help), else the second iff "www." follows; the match runs to the next
  ``\\s``. The run's end is shared by every start inside it, so the scan stays linear.
* The gates of ``_drop_addresses`` (``"@" in text`` and so on) only skip rules that could
  not match, except the one that appends a newline before reversing: the kernel evaluates
  it on the text as it is at that point.
* Tokens: ``\\b[^\\W\\d_]{2,15}\\b`` matches at the start of a maximal ``\\w`` run (the
  ``\\b`` before it) iff the run is made only of letters and has 2 to 15 of them (a shorter
  match would end between two word characters); ``\\b\\w\\w+\\b`` iff the run has 2 or more
  characters. So the tokens are those runs, in order.
* Lowercasing ASCII is ``A-Z`` to ``a-z``, as ``str.lower`` on ASCII text; other text is
  lowercased by ``str.lower`` itself. Byte equality of UTF-8 (with ``surrogatepass``) is
  string equality, so the table's stop words and vocabulary behave as Python's sets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np
from numba import njit

from .vocabulary import DEFAULT_TOKEN_PATTERN, LEGACY_TOKEN_PATTERN, Tokenizer

__all__ = [
    "BatchTokenizer",
    "TermTable",
    "TokenizedBatch",
    "ascii_classes",
    "clean_ascii",
    "kernel_flags",
    "preloaded_table",
    "unicode_classes",
]

# ----------------------------------------------------------------------------- classes

WORD, LETTER, SPACE, PRINTABLE = 1, 2, 4, 8
UU, UU_SYMBOL, LOCAL, DOMAIN = 16, 32, 64, 128
SCHEME, ALPHA, QUOTE, BLANK = 256, 512, 1024, 2048

#: Each class bit and the regex class it stands for, as written in the patterns of
#: :mod:`streamtopic.vocabulary` (``str`` patterns: Unicode semantics).
CLASSES: dict[int, str] = {
    WORD: r"\w", LETTER: r"[^\W\d_]", SPACE: r"\s", PRINTABLE: r"[!-~]", UU: r"[ -`]",
    UU_SYMBOL: r"[#%*+<=>@\[\\\]^_`]", LOCAL: r"[\w.+%=!$-]", DOMAIN: r"[\w-]",
    SCHEME: r"[\w+.-]", ALPHA: r"[A-Za-z]", QUOTE: r"[>:|]", BLANK: r"[ \t]",
}


def ascii_classes() -> np.ndarray:
    """The class bits of each ASCII character, shape (128,) uint16, from Python's ``re``."""
    table = np.zeros(128, np.uint16)
    for bit, cls in CLASSES.items():
        rx = re.compile(cls)
        for c in range(128):
            if rx.fullmatch(chr(c)):
                table[c] |= bit
    return table


ASCII_CLASSES = ascii_classes()


@cache
def unicode_classes() -> np.ndarray:
    """The bits ``WORD`` (``\\w``) and ``LETTER`` (``[^\\W\\d_]``) of every code point, shape
    (0x110000,) uint16, from Python's ``re`` over all of them (about 0.2 s, once per process);
    ASCII characters carry all their bits, as in :data:`ASCII_CLASSES`."""
    every = "".join(map(chr, range(0x110000)))
    table = np.zeros(0x110000, np.uint16)
    for bit, cls in ((WORD, r"\w+"), (LETTER, r"[^\W\d_]+")):
        for m in re.finditer(cls, every):
            table[m.start():m.end()] |= bit
    if not np.array_equal(table[:128], ASCII_CLASSES & (WORD | LETTER)):
        raise AssertionError("re's Unicode classes disagree with its ASCII classes")
    table[:128] = ASCII_CLASSES
    return table


# kernel flags
LETTERS_ONLY, LOWERCASE, DROP_ENCODED, DROP_ADDRESSES, FIXED = 1, 2, 4, 8, 16
# document kinds
ASCII_DOC, CODE_POINTS, TOKEN_LIST = 0, 1, 2
# triggers found in a text (_features)
HAS_AT, HAS_REPLY, HAS_IN_ARTICLE, HAS_URL = 1, 2, 4, 8


def _literal(s: str) -> np.ndarray:
    return np.frombuffer(s.encode("ascii"), np.uint8).copy()


_IN_ARTICLE = _literal("In article")
_WRITES = _literal("writes")
_WROTE = _literal("wrote")
_WWW = _literal("www.")
# 1: a character that starts or ends a trigger ("@", ":", "I", "w"); 2: a newline
_TRIGGERS = np.zeros(128, np.uint8)
_TRIGGERS[np.frombuffer(b"@:Iw", np.uint8)] = 1
_TRIGGERS[10] = 2


def kernel_flags(tokenizer: Tokenizer) -> int | None:
    """The kernel's flags for ``tokenizer``, or None when only Python can run it (an
    ``analyzer`` or a ``token_pattern`` other than the default and the legacy one)."""
    if tokenizer.analyzer is not None:
        return None
    if tokenizer.token_pattern == DEFAULT_TOKEN_PATTERN:
        flags = LETTERS_ONLY
    elif tokenizer.token_pattern == LEGACY_TOKEN_PATTERN:
        flags = 0
    else:
        return None
    if tokenizer.lowercase:
        flags |= LOWERCASE
    if tokenizer.drop_encoded:
        flags |= DROP_ENCODED
    if tokenizer.drop_addresses:
        flags |= DROP_ADDRESSES
    return flags


# ----------------------------------------------------------------------------- small helpers


@njit(nogil=True, cache=True, inline="always")
def _starts_with(src: np.ndarray, n: int, i: int, lit: np.ndarray) -> bool:
    """src[i : i + len(lit)] == lit, within src[:n]."""
    if i + lit.size > n:
        return False
    for k in range(lit.size):
        if src[i + k] != lit[k]:
            return False
    return True


@njit(nogil=True, cache=True, inline="always")
def _ends_with(src: np.ndarray, a: int, e: int, lit: np.ndarray) -> bool:
    """src[e - len(lit) : e] == lit, within src[a:e]."""
    if e - lit.size < a:
        return False
    return _starts_with(src, e, e - lit.size, lit)


@njit(nogil=True, cache=True)
def _grow(arr: np.ndarray, need: int, fill: int) -> np.ndarray:
    """``arr`` if it holds ``need`` items, else a copy at least twice as long, the new
    items set to ``fill``."""
    if arr.size >= need:
        return arr
    out = np.empty(max(need, 2 * arr.size), arr.dtype)
    out[:arr.size] = arr
    out[arr.size:] = fill
    return out


@njit(nogil=True, cache=True)
def _copy(src: np.ndarray, a: int, b: int, dst: np.ndarray, m: int) -> int:
    """dst[m : m + b - a] = src[a:b]; the new end of dst."""
    dst[m:m + b - a] = src[a:b]
    return m + b - a


# ----------------------------------------------------------------------------- encoded lines


@njit(nogil=True, cache=True)
def _printable_line(src: np.ndarray, a: int, b: int, ct: np.ndarray) -> bool:
    """src[a:b] is ``[ \\t]*[!-~]{30,}[ \\t]*``."""
    k = a
    while k < b and ct[src[k]] & BLANK:
        k += 1
    p = k
    while k < b and ct[src[k]] & PRINTABLE:
        k += 1
    if k - p < 30:
        return False
    while k < b and ct[src[k]] & BLANK:
        k += 1
    return k == b


@njit(nogil=True, cache=True)
def _uuencoded_line(src: np.ndarray, a: int, b: int, ct: np.ndarray) -> bool:
    """src[a:b] is ``(?:[>:|] ?)*M(?=[ -`]*[#%*+<=>@\\[\\\\\\]^_`])[ -`]{40,60}[ \\t]*``."""
    k = a
    while k < b and ct[src[k]] & QUOTE:
        k += 1
        if k < b and src[k] == 32:
            k += 1
    if k >= b or src[k] != 77:  # "M"
        return False
    m0 = k + 1
    q = m0
    while q < b and ct[src[q]] & UU and not ct[src[q]] & UU_SYMBOL:
        q += 1
    if q == b or not ct[src[q]] & UU_SYMBOL:  # the lookahead
        return False
    w = b
    while w > m0 and ct[src[w - 1]] & BLANK:
        w -= 1
    for q in range(m0, w):
        if not ct[src[q]] & UU:
            return False
    s = w
    while s < b and src[s] == 32:
        s += 1
    return max(w - m0, 40) <= min(60, b - m0, s - m0)


@njit(nogil=True, cache=True)
def _encoded_line(src: np.ndarray, a: int, j: int, ct: np.ndarray) -> int:
    """Where the content of the line src[a:j] (a newline at j, or the end) that
    ``_ENCODED_LINE`` removes ends (before a final "\r" followed by a newline), or -1 if it
    is not an encoded line."""
    e = j - 1 if j < src.size and j > a and src[j - 1] == 13 else j
    if e - a >= 30 and (_printable_line(src, a, e, ct) or _uuencoded_line(src, a, e, ct)):
        return e
    return -1


@njit(nogil=True, cache=True)
def _drop_encoded(src: np.ndarray, dst: np.ndarray, ct: np.ndarray) -> tuple[int, int]:
    """dst[:m] = ``_ENCODED_LINE.sub("\n", "\n" + src)``; returns m and the triggers
    (``HAS_*``) of the result: those of the lines kept (no trigger spans a newline, and a
    dropped line leaves at most its "\r")."""
    n = src.size
    dst[0] = 10
    m = 1
    a = 0  # the current line's start
    last = 0  # src[last:] is not yet copied
    found = 0
    line = 0
    for i in range(n):
        t = _TRIGGERS[src[i]]
        if t == 0:
            continue
        if t == 1:
            line |= _trigger(src, n, i)
            continue
        e = _encoded_line(src, a, i, ct)
        if e >= 0:
            m = _copy(src, last, a, dst, m)
            last = e
        else:
            found |= line
        line = 0
        a = i + 1
    e = _encoded_line(src, a, n, ct)
    if e >= 0:
        m = _copy(src, last, a, dst, m)
        last = e
    else:
        found |= line
    return _copy(src, last, n, dst, m), found


# ----------------------------------------------------------------------------- addresses


@njit(nogil=True, cache=True)
def _trigger(src: np.ndarray, n: int, i: int) -> int:
    """The trigger (``HAS_*`` bits) that starts or ends at src[i] (one of "@:Iw"), or 0."""
    c = src[i]
    if c == 64:  # "@"
        return HAS_AT
    if c == 58:  # ":"
        f = 0
        if i + 2 < n and src[i + 1] == 47 and src[i + 2] == 47:
            f |= HAS_URL
        if _ends_with(src, 0, i, _WRITES) or _ends_with(src, 0, i, _WROTE):
            f |= HAS_REPLY
        return f
    if c == 73 and _starts_with(src, n, i, _IN_ARTICLE):
        return HAS_IN_ARTICLE
    if c == 119 and _starts_with(src, n, i, _WWW):
        return HAS_URL
    return 0


@njit(nogil=True, cache=True)
def _features(src: np.ndarray, n: int) -> int:
    """Which triggers of the address rules occur in src[:n] (``HAS_*`` bits)."""
    f = 0
    for i in range(n):
        if _TRIGGERS[src[i]] == 1:
            f |= _trigger(src, n, i)
    return f


@njit(nogil=True, cache=True)
def _in_article_end(src: np.ndarray, n: int, i: int, ct: np.ndarray) -> int:
    """The end of the match of ``In article\\s*<[^>\\s]*>`` at src[i] ("I"), or -1."""
    if not _starts_with(src, n, i, _IN_ARTICLE):
        return -1
    q = i + _IN_ARTICLE.size
    while q < n and ct[src[q]] & SPACE:
        q += 1
    if q == n or src[q] != 60:  # "<"
        return -1
    q += 1
    while q < n and src[q] != 62 and not ct[src[q]] & SPACE:
        q += 1
    return q + 1 if q < n and src[q] == 62 else -1  # ">"


@njit(nogil=True, cache=True)
def _drop_in_article(src: np.ndarray, n: int, dst: np.ndarray, ct: np.ndarray) -> int:
    """dst[:m] = ``_IN_ARTICLE.sub(" ", src[:n])``; returns m."""
    m = 0
    last = 0
    i = 0
    while i < n:
        if src[i] == 73:  # "I"
            q = _in_article_end(src, n, i, ct)
            if q >= 0:
                m = _copy(src, last, i, dst, m)
                dst[m] = 32
                m += 1
                i = last = q
                continue
        i += 1
    return _copy(src, last, n, dst, m)


@njit(nogil=True, cache=True)
def _reply_line_end(src: np.ndarray, n: int, p: int, ct: np.ndarray) -> int:
    """If the ":" at src[p] ends a reply line (below), the position of its newline, else -1.

    The line ends in "writes" or "wrote", ":", blanks and at most one "\r", then a
    newline, and its "w" starts the text or follows a non-word character."""
    q = p + 1
    while q < n and (src[q] == 32 or src[q] == 9):
        q += 1
    if q < n and src[q] == 13:
        q += 1
    if q == n or src[q] != 10:
        return -1
    if _ends_with(src, 0, p, _WRITES):
        c = p - _WRITES.size
    elif _ends_with(src, 0, p, _WROTE):
        c = p - _WROTE.size
    else:
        return -1
    return q if c == 0 or not ct[src[c - 1]] & WORD else -1


@njit(nogil=True, cache=True)
def _drop_reply_lines(src: np.ndarray, n: int, dst: np.ndarray, ct: np.ndarray) -> int:
    """dst[:m] = ``_WRITES_LINE_REVERSED.sub("\n", src[:n][::-1])[::-1]``: the content of
    every reply line deleted (its newline kept); returns m. A line holds at most one ":"
    followed only by blanks, "\r" and its newline, so scanning the colons finds each line
    once."""
    m = 0
    last = 0
    for p in range(n):
        if src[p] == 58:  # ":"
            q = _reply_line_end(src, n, p, ct)
            if q >= 0:
                a = p
                while a > 0 and src[a - 1] != 10:
                    a -= 1
                m = _copy(src, last, a, dst, m)
                last = q
    return _copy(src, last, n, dst, m)


@njit(nogil=True, cache=True)
def _drop_local_parts(src: np.ndarray, n: int, dst: np.ndarray, ct: np.ndarray) -> int:
    """dst[:m] = ``_LOCAL_PART_REVERSED.sub("@", src[:n][::-1])[::-1]``: the run of
    ``[\\w.+%=!$-]`` before each "@" deleted; returns m. The run lies between the "@" and
    the previous one (not in the class), so it is found in dst, copied verbatim."""
    m = 0
    last = 0
    for i in range(n):
        if src[i] == 64:
            m = _copy(src, last, i, dst, m)
            while m > 0 and ct[dst[m - 1]] & LOCAL:
                m -= 1
            dst[m] = 64
            m += 1
            last = i + 1
    return _copy(src, last, n, dst, m)


@njit(nogil=True, cache=True)
def _drop_at_domains(src: np.ndarray, n: int, dst: np.ndarray, ct: np.ndarray) -> int:
    """dst[:m] = ``_AT_DOMAIN.sub(" ", src[:n])``; returns m."""
    m = 0
    last = 0
    i = 0
    while i < n:
        if src[i] == 64 and i + 1 < n and ct[src[i + 1]] & DOMAIN:
            q = i + 1
            while q < n and ct[src[q]] & DOMAIN:
                q += 1
            while q + 1 < n and src[q] == 46 and ct[src[q + 1]] & DOMAIN:
                q += 1
                while q < n and ct[src[q]] & DOMAIN:
                    q += 1
            m = _copy(src, last, i, dst, m)
            dst[m] = 32
            m += 1
            i = last = q
            continue
        i += 1
    return _copy(src, last, n, dst, m)


@njit(nogil=True, cache=True)
def _url_end(src: np.ndarray, n: int, i: int, ct: np.ndarray, run_end: int) -> tuple[int, int]:
    """Where a URL starting at ``i`` (a word start) ends, or -1; and the end of the
    ``[\\w+.-]`` run after ``i`` (``run_end`` when it is still that run's: i < run_end)."""
    end = -1
    if ct[src[i]] & ALPHA:
        if i >= run_end:
            run_end = i + 1
            while run_end < n and ct[src[run_end]] & SCHEME:
                run_end += 1
        e = run_end
        if e + 2 < n and src[e] == 58 and src[e + 1] == 47 and src[e + 2] == 47:
            end = e + 3
    if end < 0 and _starts_with(src, n, i, _WWW):
        end = i + _WWW.size
    if end >= 0:
        while end < n and not ct[src[end]] & SPACE:
            end += 1
    return end, run_end


@njit(nogil=True, cache=True)
def _drop_urls(src: np.ndarray, n: int, dst: np.ndarray, ct: np.ndarray) -> int:
    """dst[:m] = ``_URL.sub(" ", src[:n])``; returns m."""
    m = 0
    i = 0
    run_end = -1
    while i < n:
        c = src[i]
        if ct[c] & WORD and (i == 0 or not ct[src[i - 1]] & WORD):
            end, run_end = _url_end(src, n, i, ct, run_end)
            if end >= 0:
                dst[m] = 32
                m += 1
                i = end
                continue
        dst[m] = c
        m += 1
        i += 1
    return m


@njit(nogil=True, cache=True)
def _drop_addresses(bufs: np.ndarray, cur: int, n: int, ct: np.ndarray,
                    f: int) -> tuple[int, int]:
    """``vocabulary._drop_addresses`` on bufs[cur, :n], whose triggers are ``f``, passing
    between the two rows of ``bufs`` (each at least n + 1 long); returns the row and length
    of the result."""
    if f & HAS_IN_ARTICLE:
        m = _drop_in_article(bufs[cur], n, bufs[1 - cur], ct)
        cur = 1 - cur
        if m != n:
            f = _features(bufs[cur], m)
        n = m
    if f & (HAS_REPLY | HAS_AT):  # Python reverses text + "\n"
        bufs[cur, n] = 10
        n += 1
        if f & HAS_REPLY:
            n = _drop_reply_lines(bufs[cur], n, bufs[1 - cur], ct)
            cur = 1 - cur
        n = _drop_local_parts(bufs[cur], n, bufs[1 - cur], ct)
        cur = 1 - cur
        if f & HAS_AT:
            n = _drop_at_domains(bufs[cur], n, bufs[1 - cur], ct)
            cur = 1 - cur
    if f & HAS_URL:
        n = _drop_urls(bufs[cur], n, bufs[1 - cur], ct)
        cur = 1 - cur
    return cur, n


@njit(nogil=True, cache=True)
def _clean(src: np.ndarray, bufs: np.ndarray, ct: np.ndarray, flags: int) -> tuple[int, int]:
    """The ASCII text ``src`` as the tokenizer's rules leave it, in one row of ``bufs``
    (shape (2, ≥ len(src) + 2)); returns the row and the length."""
    if flags & DROP_ENCODED:
        n, f = _drop_encoded(src, bufs[1], ct)
    else:
        n = _copy(src, 0, src.size, bufs[1], 0)
        f = _features(src, n) if flags & DROP_ADDRESSES else 0
    if flags & DROP_ADDRESSES:
        return _drop_addresses(bufs, 1, n, ct, f)
    return 1, n


# ----------------------------------------------------------------------------- tokens


@njit(nogil=True, cache=True)
def _find_tokens(buf: np.ndarray, n: int, ct: np.ndarray, letters_only: bool,
                 spans: np.ndarray) -> int:
    """The maximal ``\\w`` runs of buf[:n] that are tokens (2 to 15 letters, or 2 or more
    word characters), as [start, stop) pairs in spans[0::2], spans[1::2] (room for
    (n + 1) // 3 + 2 pairs); returns how many.

    Without branches on the characters (word boundaries are unpredictable): every position
    writes a candidate pair, and the count advances only where a token ends."""
    max_size = 15 if letters_only else n + 1
    strict = 1 if letters_only else 0  # a word character that is not a letter spoils a run
    k = 0
    start = 0
    spoilt = 0
    prev = 0
    for i in range(n + 1):
        cls = np.int64(ct[buf[i]]) if i < n else np.int64(0)
        word = cls & WORD
        begins = word & (prev ^ 1)
        start = i if begins else start
        spoilt = (spoilt & (begins ^ 1)) | (word & ((cls >> 1) ^ 1) & strict)  # LETTER = 2
        size = i - start
        ends = prev & (word ^ 1) & (1 if 2 <= size <= max_size else 0) & (spoilt ^ 1)
        spans[2 * k] = start
        spans[2 * k + 1] = i
        k += ends
        prev = word
    return k


@njit(nogil=True, cache=True, inline="always")
def _mix(h: np.uint64, word: np.uint64) -> np.uint64:
    h = (h ^ word) * np.uint64(0x9E3779B97F4A7C15)
    return h ^ (h >> np.uint64(29))


@njit(nogil=True, cache=True, inline="always")
def _absorb(m: int, byte: int, h: np.uint64, word: np.uint64) -> tuple[np.uint64, np.uint64]:
    """Byte ``m`` of a key into its hash: 8 bytes make a word, mixed into h."""
    word |= np.uint64(byte) << np.uint64(8 * (m & 7))
    if m & 7 == 7:
        h = _mix(h, word)
        word = np.uint64(0)
    return h, word


@njit(nogil=True, cache=True, inline="always")
def _finish(h: np.uint64, word: np.uint64, m: int) -> np.uint64:
    return _mix(h, word ^ np.uint64(m)) * np.uint64(0xFF51AFD7ED558CCD)


_SEED = 0xCBF29CE484222325


@njit(nogil=True, cache=True, inline="always")
def _key(buf: np.ndarray, a: int, b: int, lower: bool, key: np.ndarray
         ) -> tuple[int, np.uint64]:
    """key[:m] = the UTF-8 bytes of the token buf[a:b] (bytes below 128 or code points;
    ``lower``: A-Z lowered), ``surrogatepass`` style; returns m and the hash of key[:m]
    (:func:`_hash`)."""
    m = 0
    h = np.uint64(_SEED)
    word = np.uint64(0)
    for i in range(a, b):
        c = np.int64(buf[i])
        if c < 128:
            if lower and 65 <= c <= 90:
                c += 32
            key[m] = c
            h, word = _absorb(m, c, h, word)
            m += 1
            continue
        if c < 0x800:
            n, lead = 1, 0xC0
        elif c < 0x10000:
            n, lead = 2, 0xE0
        else:
            n, lead = 3, 0xF0
        for k in range(n, -1, -1):
            byte = (lead | (c >> (6 * k))) if k == n else 0x80 | ((c >> (6 * k)) & 0x3F)
            key[m] = byte
            h, word = _absorb(m, byte, h, word)
            m += 1
    return m, _finish(h, word, m)


@njit(nogil=True, cache=True)
def _hash(key: np.ndarray, n: int) -> np.uint64:
    """The hash of the bytes key[:n]."""
    h = np.uint64(_SEED)
    word = np.uint64(0)
    for m in range(n):
        h, word = _absorb(m, np.int64(key[m]), h, word)
    return _finish(h, word, n)


# ----------------------------------------------------------------------------- the term table
# table = (slots, info, hashes, pool, meta):
#   slots  uint64 (2^k,): 0 (empty) or (hash >> 32) << 32 | (term id + 1), at most half full
#   info   int64 (≥ n_terms, 4): per term its offset and length in pool, its value (column of
#          a fixed vocabulary, -1: not kept, 0: a term added by the kernel) and its number in
#          the current batch (-1: none yet; reset at the end of each batch)
#   hashes uint64 (≥ n_terms,), pool uint8 (the terms' UTF-8 bytes, in order), meta int64 (1,)


@njit(nogil=True, cache=True, inline="always")
def _probe(slots: np.ndarray, info: np.ndarray, pool: np.ndarray, key: np.ndarray, n: int,
           h: np.uint64) -> tuple[int, int]:
    """The slot of the term key[:n] (hash ``h``) and its id, or the empty slot where it
    goes and -1."""
    mask = np.uint64(slots.size - 1)
    tag = h >> np.uint64(32)
    i = h & mask
    while True:
        e = slots[i]
        if e == 0:
            return np.int64(i), -1
        if e >> np.uint64(32) == tag:
            t = np.int64(e & np.uint64(0xFFFFFFFF)) - 1
            if info[t, 1] == n:
                o = info[t, 0]
                same = True
                for k in range(n):
                    if pool[o + k] != key[k]:
                        same = False
                        break
                if same:
                    return np.int64(i), t
        i = (i + np.uint64(1)) & mask


@njit(nogil=True, cache=True, inline="always")
def _slot_entry(h: np.uint64, t: int) -> np.uint64:
    return (h >> np.uint64(32) << np.uint64(32)) | np.uint64(t + 1)


@njit(nogil=True, cache=True, inline="always")
def _insert(table: tuple, i: int, key: np.ndarray, n: int, h: np.uint64, value: int) -> int:
    """Add the term key[:n] at the empty slot ``i`` (room reserved); returns its id."""
    slots, info, hashes, pool, meta = table
    t = meta[0]
    o = info[t - 1, 0] + info[t - 1, 1] if t > 0 else 0
    pool[o:o + n] = key[:n]
    info[t, 0] = o
    info[t, 1] = n
    info[t, 2] = value
    info[t, 3] = -1
    hashes[t] = h
    slots[i] = _slot_entry(h, t)
    meta[0] = t + 1
    return t


@njit(nogil=True, cache=True)
def _rehash(hashes: np.ndarray, n_terms: int, size: int) -> np.ndarray:
    """Slots (``size``, a power of two) for the first ``n_terms`` terms."""
    slots = np.zeros(size, np.uint64)
    mask = np.uint64(size - 1)
    for t in range(n_terms):
        i = hashes[t] & mask
        while slots[i] != 0:
            i = (i + np.uint64(1)) & mask
        slots[i] = _slot_entry(hashes[t], t)
    return slots


@njit(nogil=True, cache=True)
def _grow_rows(info: np.ndarray, need: int) -> np.ndarray:
    if info.shape[0] >= need:
        return info
    out = np.empty((max(need, 2 * info.shape[0]), info.shape[1]), info.dtype)
    out[:info.shape[0]] = info
    return out


@njit(nogil=True, cache=True)
def _reserve(table: tuple, n_new: int, n_bytes: int) -> tuple:
    """``table`` with room for ``n_new`` more terms of ``n_bytes`` in all, its slots at
    most half full."""
    slots, info, hashes, pool, meta = table
    t = meta[0]
    need = t + n_new
    if 2 * need > slots.size:
        size = slots.size
        while 2 * need > size:
            size *= 2
        slots = _rehash(hashes, t, size)
    used = info[t - 1, 0] + info[t - 1, 1] if t > 0 else 0
    return (slots, _grow_rows(info, need), _grow(hashes, need, 0),
            _grow(pool, used + n_bytes, 0), meta)


@njit(nogil=True, cache=True)
def new_table(pool: np.ndarray, offsets: np.ndarray, values: np.ndarray) -> tuple:
    """A table of the distinct terms pool[offsets[t]:offsets[t + 1]] with ``values`` (column,
    or -1: not kept)."""
    n = values.size
    table = (np.zeros(1024, np.uint64), np.empty((64, 4), np.int64), np.zeros(64, np.uint64),
             np.zeros(1024, np.uint8), np.zeros(1, np.int64))
    table = _reserve(table, n, pool.size)
    for t in range(n):
        key = pool[offsets[t]:offsets[t + 1]]
        h = _hash(key, key.size)
        i, found = _probe(table[0], table[1], table[3], key, key.size, h)
        _insert(table, i, key, key.size, h, values[t])
    return table


# ----------------------------------------------------------------------------- counting


@njit(nogil=True, cache=True)
def _count(buf: np.ndarray, spans: np.ndarray, s0: int, s1: int, lower: bool, fixed: bool,
           table: tuple, out: tuple, key: np.ndarray) -> None:
    """Count the tokens buf[spans[2s]:spans[2s + 1]], s0 <= s < s1, room reserved: the ids of
    those kept go to ``out`` = (ids, order, counters [n ids, n batch terms]), with a fixed
    vocabulary their column, else their term's number in the batch (by first occurrence;
    ``order``: the term of each number)."""
    slots, info, hashes, pool, meta = table
    ids, order, counters = out
    for s in range(s0, s1):
        n, h = _key(buf, spans[2 * s], spans[2 * s + 1], lower, key)
        i, t = _probe(slots, info, pool, key, n, h)
        if t < 0:
            if fixed:
                continue
            t = _insert(table, i, key, n, h, 0)
        v = info[t, 2]
        if v < 0:
            continue
        if not fixed:
            if info[t, 3] < 0:
                info[t, 3] = counters[1]
                order[counters[1]] = t
                counters[1] += 1
            v = info[t, 3]
        ids[counters[0]] = v
        counters[0] += 1


@njit(nogil=True, cache=True)
def _span_bytes(buf: np.ndarray, spans: np.ndarray, s0: int, s1: int) -> tuple[int, int]:
    """An upper bound on the UTF-8 bytes of the tokens s0 <= s < s1, and on the longest."""
    width = 1 if buf.itemsize == 1 else 4
    total = 0
    longest = 0
    for s in range(s0, s1):
        size = width * (spans[2 * s + 1] - spans[2 * s])
        total += size
        longest = max(longest, size)
    return total, longest


@njit(nogil=True, cache=True)
def _count_spans(buf: np.ndarray, spans: np.ndarray, s0: int, s1: int, flags: int,
                 table: tuple, out: tuple, key: np.ndarray) -> tuple:
    """Reserve room, then :func:`_count`; returns the (grown) table, out and key."""
    fixed = bool(flags & FIXED)
    n_bytes, longest = _span_bytes(buf, spans, s0, s1)
    n_new = 0 if fixed else s1 - s0
    if not fixed:  # a fixed table is only read (and may be shared)
        table = _reserve(table, n_new, n_bytes)
    ids, order, counters = out
    out = (_grow(ids, counters[0] + s1 - s0, 0), _grow(order, counters[1] + n_new, 0),
           counters)
    key = _grow(key, longest, 0)
    # a code-point document was lowercased by Python
    lower = bool(flags & LOWERCASE) and buf.itemsize == 1
    _count(buf, spans, s0, s1, lower, fixed, table, out, key)
    return table, out, key


@njit(nogil=True, cache=True)
def _tokenize_text(buf: np.ndarray, n: int, ct: np.ndarray, flags: int, table: tuple,
                   out: tuple, key: np.ndarray, spans: np.ndarray) -> tuple:
    """Find and count the tokens of buf[:n]; returns (table, out, key, spans, matches)."""
    spans = _grow(spans, 2 * ((n + 1) // 3 + 2), 0)
    k = _find_tokens(buf, n, ct, bool(flags & LETTERS_ONLY), spans)
    table, out, key = _count_spans(buf, spans, 0, k, flags, table, out, key)
    return table, out, key, spans, k


@njit(nogil=True, cache=True)
def tokenize_batch(data: np.ndarray, cps: np.ndarray, docs: np.ndarray,
                   token_spans: np.ndarray, ct: np.ndarray, utab: np.ndarray, flags: int,
                   table: tuple) -> tuple:
    """Tokenise and count a batch of documents.

    Parameters
    ----------
    data : ndarray of uint8, shape (n_bytes,)
        The ASCII documents, one after another.
    cps : ndarray of uint32, shape (n_code_points,)
        The code-point documents (cleaned and lowercased) and the tokens of token lists.
    docs : ndarray of int64, shape (n_docs, 3)
        Each document's kind (``ASCII_DOC``: data[a:b]; ``CODE_POINTS``: cps[a:b];
        ``TOKEN_LIST``: the tokens a <= s < b of ``token_spans``) and a, b.
    token_spans : ndarray of int64, shape (2 n_tokens,)
        Token s of the token lists is cps[token_spans[2s]:token_spans[2s + 1]].
    ct : ndarray of uint16, shape (128,)
        Class bits of ASCII characters (:data:`ASCII_CLASSES`).
    utab : ndarray of uint16, shape (0x110000,) or (128,)
        Class bits of code points (:func:`unicode_classes`; ASCII's without code points).
    flags : int
        ``LETTERS_ONLY | LOWERCASE | DROP_ENCODED | DROP_ADDRESSES | FIXED`` bits.
    table : tuple
        The term table (:func:`new_table`); updated in place (read only with ``FIXED``).

    Returns
    -------
    table : tuple
        The table, grown if needed.
    ids : ndarray of int32, shape (n_kept,)
        The kept tokens of the documents in order: their column (``FIXED``), else their
        term's number in the batch.
    indptr : ndarray of int64, shape (n_docs + 1,)
        Document d's tokens are ids[indptr[d]:indptr[d + 1]].
    lengths : ndarray of int64, shape (n_docs,)
        Each document's matches before stop words (and vocabulary) are dropped.
    order : ndarray of int64, shape (n_terms,)
        Without ``FIXED``: the term id of each number, in order of first occurrence.
    """
    n_docs = docs.shape[0]
    indptr = np.zeros(n_docs + 1, np.int64)
    lengths = np.zeros(n_docs, np.int64)
    out = (np.empty(1024, np.int32), np.empty(1024, np.int64), np.zeros(2, np.int64))
    key = np.empty(64, np.uint8)
    spans = np.empty(1024, np.int64)
    bufs = np.empty((2, 1024), np.uint8)
    for d in range(n_docs):
        kind, a, b = docs[d, 0], docs[d, 1], docs[d, 2]
        if kind == ASCII_DOC:
            if bufs.shape[1] < b - a + 2:
                bufs = np.empty((2, 2 * (b - a) + 2), np.uint8)
            row, n = _clean(data[a:b], bufs, ct, flags)
            table, out, key, spans, k = _tokenize_text(bufs[row], n, ct, flags, table, out,
                                                       key, spans)
        elif kind == CODE_POINTS:
            table, out, key, spans, k = _tokenize_text(cps[a:b], b - a, utab, flags, table,
                                                       out, key, spans)
        else:
            table, out, key = _count_spans(cps, token_spans, a, b, flags, table, out, key)
            k = b - a
        indptr[d + 1] = out[2][0]
        lengths[d] = k
    ids, order, counters = out
    order = order[:counters[1]]
    info = table[1]
    for t in order:  # no term is numbered outside a batch
        info[t, 3] = -1
    return table, ids[:counters[0]], indptr, lengths, order


@njit(nogil=True, cache=True)
def _clean_one(src: np.ndarray, flags: int) -> np.ndarray:
    bufs = np.empty((2, src.size + 2), np.uint8)
    row, n = _clean(src, bufs, ASCII_CLASSES, flags)
    return bufs[row, :n].copy()


def clean_ascii(raw: bytes, drop_encoded: bool = True, drop_addresses: bool = True) -> bytes:
    """The ASCII text ``raw`` as the kernel leaves it for matching: byte for byte
    ``Tokenizer.clean`` of the decoded text (before lowercasing)."""
    if not raw.isascii():
        raise ValueError("clean_ascii takes ASCII text")
    flags = (DROP_ENCODED if drop_encoded else 0) | (DROP_ADDRESSES if drop_addresses else 0)
    return bytes(_clean_one(np.frombuffer(raw, np.uint8), flags))


# ----------------------------------------------------------------------------- Python side


@dataclass
class TermTable:
    """The kernel's term table: ``arrays`` = (slots, info, hashes, pool, meta), laid out as
    the comment above :func:`_probe` says. The first ``n_preloaded`` terms are the stop
    words and vocabulary it was made with."""

    arrays: tuple[np.ndarray, ...]
    n_preloaded: int

    @property
    def n_terms(self) -> int:
        return int(self.arrays[4][0])

    def copy(self) -> TermTable:
        return TermTable(tuple(a.copy() for a in self.arrays), self.n_preloaded)

    def terms(self, start: int, stop: int) -> list[str]:
        """The strings of terms start <= t < stop (one decode for all of them)."""
        info, pool = self.arrays[1], self.arrays[3]
        if stop <= start:
            return []
        offsets = np.append(info[start:stop, 0], info[stop - 1, 0] + info[stop - 1, 1])
        bounds = offsets - offsets[0]
        seg = pool[offsets[0]:offsets[-1]]
        text = seg.tobytes().decode("utf-8", "surrogatepass")
        if len(text) != seg.size:  # character offsets: bytes less continuation bytes
            cont = np.concatenate(([0], np.cumsum((seg & 0xC0) == 0x80)))
            bounds = bounds - cont[bounds]
        b = bounds.tolist()
        return [text[i:j] for i, j in zip(b[:-1], b[1:], strict=True)]


@lru_cache(maxsize=8)
def preloaded_table(stop_words: frozenset[str],
                    vocabulary: tuple[str, ...] | None = None) -> TermTable:
    """A table of the stop words (not kept) and then the words of ``vocabulary`` (their
    column; a stop word in it is still not kept, a repeated word keeps its last column, as
    a dict of the vocabulary would)."""
    values: dict[str, int] = dict.fromkeys(sorted(stop_words), -1)
    for i, word in enumerate(vocabulary or ()):
        if word not in stop_words:
            values[word] = i
    encoded = [w.encode("utf-8", "surrogatepass") for w in values]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    pool = np.frombuffer(b"".join(encoded), np.uint8)
    arrays = new_table(pool, offsets, np.fromiter(values.values(), np.int32, len(values)))
    return TermTable(tuple(arrays), len(values))


@dataclass
class TokenizedBatch:
    """A batch of documents, counted.

    Attributes
    ----------
    ids : ndarray of int32, shape (n_kept,)
        The kept tokens of every document in order, as columns of ``terms``.
    indptr : ndarray of int64, shape (n_docs + 1,)
        Document d's tokens are ids[indptr[d]:indptr[d + 1]].
    lengths : ndarray of int64, shape (n_docs,)
        Input lengths: the matches before stop words are removed.
    terms : sequence of str, length T
        The fixed vocabulary, or the batch's terms in order of first occurrence.
    """

    ids: np.ndarray
    indptr: np.ndarray
    lengths: np.ndarray
    terms: Sequence[str]


class BatchTokenizer:
    """Documents queued, then tokenised and counted in one kernel call (:meth:`run`).

    Parameters
    ----------
    tokenizer : Tokenizer
        Its options; :func:`kernel_flags` must accept it.
    vocabulary : tuple of str, optional
        Count onto these words (columns in order); other tokens are dropped.
    """

    def __init__(self, tokenizer: Tokenizer, vocabulary: tuple[str, ...] | None = None) -> None:
        flags = kernel_flags(tokenizer)
        if flags is None:
            raise ValueError("this tokenizer needs the Python path (analyzer or custom pattern)")
        self.tokenizer = tokenizer
        self.vocabulary = vocabulary
        self.flags = flags | (FIXED if vocabulary is not None else 0)
        base = preloaded_table(tokenizer.stop_word_set, vocabulary)
        self.table = base if vocabulary is not None else base.copy()
        self._strings: list[str] = []  # term n_preloaded + i is _strings[i]
        self._reset()

    def _reset(self) -> None:
        self._data: list[bytes] = []
        self._n_data = 0
        self._cps: list[bytes] = []
        self._n_cps = 0
        self._docs: list[int] = []  # kind, a, b of each document
        self._spans: list[int] = []
        self._unicode = False

    def __len__(self) -> int:
        """Documents queued."""
        return len(self._docs) // 3

    def add_ascii(self, raw: bytes) -> None:
        """Queue an ASCII document (``raw.isascii()``), as its raw bytes."""
        a = self._n_data
        self._data.append(raw)
        self._n_data = a + len(raw)
        self._docs += (ASCII_DOC, a, self._n_data)

    def add_text(self, text: str) -> None:
        """Queue a document."""
        if text.isascii():
            self.add_ascii(text.encode("ascii"))
            return
        text = self.tokenizer.clean(text)
        if self.tokenizer.lowercase:
            text = text.lower()
        a = self._n_cps
        self._add_code_points(text)
        self._docs += (CODE_POINTS, a, self._n_cps)
        self._unicode = True

    def add_tokens(self, tokens: Sequence[str]) -> None:
        """Queue a document given as its matches (stop words are still dropped)."""
        a = len(self._spans) // 2
        for token in tokens:
            start = self._n_cps
            self._add_code_points(token)
            self._spans += (start, self._n_cps)
        self._docs += (TOKEN_LIST, a, len(self._spans) // 2)

    def _add_code_points(self, text: str) -> None:
        encoded = text.encode("utf-32-le", "surrogatepass")
        self._cps.append(encoded)
        self._n_cps += len(encoded) // 4

    def run(self) -> TokenizedBatch:
        """Tokenise and count the queued documents, and empty the queue."""
        utab = unicode_classes() if self._unicode else ASCII_CLASSES
        arrays, ids, indptr, lengths, order = tokenize_batch(
            np.frombuffer(b"".join(self._data), np.uint8),
            np.frombuffer(b"".join(self._cps), np.uint32),
            np.array(self._docs, np.int64).reshape(-1, 3), np.array(self._spans, np.int64),
            ASCII_CLASSES, utab, self.flags, self.table.arrays)
        self._reset()
        if self.vocabulary is not None:
            return TokenizedBatch(ids, indptr, lengths, self.vocabulary)
        self.table.arrays = tuple(arrays)
        return TokenizedBatch(ids, indptr, lengths, self._terms(order))

    def _terms(self, order: np.ndarray) -> list[str]:
        """The strings of the term ids ``order`` (decoding the terms added since the last
        call)."""
        known = self.table.n_preloaded + len(self._strings)
        if self.table.n_terms > known:
            self._strings += self.table.terms(known, self.table.n_terms)
        strings = self._strings
        base = self.table.n_preloaded
        return [strings[t - base] for t in order.tolist()]
