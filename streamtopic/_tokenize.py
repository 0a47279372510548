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

Tokens are counted in one hash table of terms, shared by the three kinds of documents and
by the chunks of a :class:`BatchTokenizer` (open addressing with linear probing, grown
inside the kernel, at most half full). A key is the token's UTF-8 bytes; its hash mixes
its 8-byte words (multiply and xor-shift), and a slot is a 32-byte row holding the hash's
high half, the key's length, its first 16 bytes and the term's id and state, so that the
lookup of a key of up to 16 bytes reads one row and compares three words; longer keys are
also compared byte by byte. The table's first terms are the stop words, *not kept*; with a
fixed vocabulary, its words follow with their column, and a token not in the table is
dropped (counted in the input length only). Otherwise a new token becomes a new term, and
each batch numbers its terms in order of first occurrence, as the Python builder does; a
term's string is decoded from the table once, when it is first added.

Cost
----
Per ASCII document: a copy, then one pass per rule (each finds its trigger bytes, a
newline, "I", ":" or "@", eight bytes at a time, and copies the text between matches),
one branch-free pass to find the tokens, and one lookup per token (its bytes read as two
words and lowercased eight at a time). On the 20 Newsgroups training messages (22 MB,
3.25 M words) the path from raw bytes to document chunks does about 11 M words and 4.7 M
in-vocabulary tokens per second on one core, the regular expressions 3 M words; of its
0.29 s, 0.24 s are the kernel (0.06 s of them the dropping rules), 0.02 s the canonical
CSR, 0.01 s the terms' strings, 0.02 s Python per document (``benchmarks/tokenise.py``).
Compiling the kernels takes about 14 s of CPU once per machine (32 s before the helpers lost
their wrappers, cache files and literal specialisations and their slice assignments: see
:func:`streamtopic._kernels.helper_jit`); numba caches :func:`tokenize_batch`,
:func:`_new_table`, :func:`_canonical` and :func:`_clean_one` beside this module. A first
``streamtopic ingest`` of the 20 Newsgroups training set takes 23 s against 40.5 s before
(6.6 s with the kernels cached, as before; medians of 3 in turns at a load average of
1.1-2.2 on 2 CPUs; 42 s against 76 s at 3.3-4.5), its two worker processes each compiling
the kernels.
So no ingest waits for them any more: where they are neither compiled nor cached,
:func:`kernels_ready` starts their compilation in a background process (at the lowest
priority, one per machine, :func:`streamtopic._warmup.start_in_background`) and the chunk
builders tokenise in Python meanwhile (the reference: 3 M words per second, the same
tokens), counting with scipy (:func:`count_matrix` with ``compiled=False``). A first ``streamtopic
fit`` of the 20 Newsgroups training set (K = 20, an empty numba cache, the EM kernels
compiling at the same time) took 11.7 s against 28.3 s with the code before, the second fit
10.4 s and 9.9 s (medians of 3 in turns on 2 CPUs, quiet; 21.0 s against 53.5 s with another
job on one CPU). ``benchmarks/first_fit.py --corpus`` then gave first 11.4 s, second 10.1 s
(1.13; with ``STREAMTOPIC_WARMUP=0`` 28.9 s and 10.4 s); with text below 256 MiB on threads
(``cli.SMALL_INGEST_BYTES``), first 8.9 s, second 7.1 s (1.27; 24.4 s and 7.2 s), the
Python path now sharing one process's GIL.
A new process loads them in about 0.4 s, and builds the class table of all code points
(0.2 s) at its first non-ASCII document.

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
* URLs ``\\b(?:[A-Za-z][\\w+.-]*://|www\\.)\\S*`` (run only where "://" or "www."
  occurs): at a position that starts a word (a word character at 0 or after a non-word
  character), the first alternative holds iff the character there is a letter and the
  maximal ``[\\w+.-]`` run after it is followed by "://" (":" is outside the class, so
  backtracking cannot help), else the second iff "www." follows; the match runs to the next
  ``\\s``. The run's end is shared by every start inside it, so the scan stays linear.
* The gates of ``_drop_addresses`` (``"@" in text`` and so on) only skip rules that could
  not match: the kernel runs every rule (one without a match copies the text unchanged),
  except that it appends the newline that Python appends before reversing, and runs the
  two reversed rules, only if "@", "writes:" or "wrote:" occurs in the text at that point,
  as Python does.
* Tokens: ``\\b[^\\W\\d_]{2,15}\\b`` matches at the start of a maximal ``\\w`` run (the
  ``\\b`` before it) iff the run is made only of letters and has 2 to 15 of them (a shorter
  match would end between two word characters); ``\\b\\w\\w+\\b`` iff the run has 2 or more
  characters. So the tokens are those runs, in order.
* Lowercasing ASCII is ``A-Z`` to ``a-z``, as ``str.lower`` on ASCII text; other text is
  lowercased by ``str.lower`` itself. Byte equality of UTF-8 (with ``surrogatepass``) is
  string equality, so the table's stop words and vocabulary behave as Python's sets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, cast

import numpy as np
import scipy.sparse as sp
from numba import njit

from . import _warmup
from ._kernels import helper_jit
from .vocabulary import DEFAULT_TOKEN_PATTERN, LEGACY_TOKEN_PATTERN, Tokenizer

__all__ = [
    "BatchTokenizer",
    "TermTable",
    "TokenizedBatch",
    "ascii_classes",
    "clean_ascii",
    "compile_kernels",
    "count_matrix",
    "kernel_flags",
    "kernels_ready",
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


def _literal(s: str) -> np.ndarray:
    return cast("np.ndarray", np.frombuffer(s.encode("ascii"), np.uint8).copy())


_IN_ARTICLE = _literal("In article")
_WRITES = _literal("writes")
_WROTE = _literal("wrote")
_WWW = _literal("www.")


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

# The helpers, which only the kernels call (:func:`tokenize_batch`, :func:`_new_table`,
# :func:`_clean_one`; LLVM inlines them there), have no wrappers and no cache files of their
# own (:func:`streamtopic._kernels.helper_jit`). Their callers pass no literal constants
# where a helper takes a value (``np.int64(58)``, ``np.bool_(True)``: numba compiles a helper
# once for each literal it is called with), and they copy arrays with loops rather than
# slice assignment (which compiles its shape checks' error messages).
_helper = helper_jit()
#: For helpers with one or two call sites in a kernel, inlined by numba itself: their
#: callers then finalize (optimize) one module less (about 2 s of a first compilation).
_inline = helper_jit(inline="always")


@_helper
def _starts_with(src: np.ndarray, n: int, i: int, lit: np.ndarray) -> bool:
    """src[i : i + len(lit)] == lit, within src[:n]."""
    if i + lit.size > n:
        return False
    for k in range(lit.size):
        if src[i + k] != lit[k]:
            return False
    return True


@_helper
def _ends_with(src: np.ndarray, a: int, e: int, lit: np.ndarray) -> bool:
    """src[e - len(lit) : e] == lit, within src[a:e]."""
    if e - lit.size < a:
        return False
    return _starts_with(src, e, e - lit.size, lit)


@_helper
def _grow(arr: np.ndarray, need: int, fill: int) -> np.ndarray:
    """``arr`` if it holds ``need`` items, else a copy at least twice as long, the new
    items set to ``fill``."""
    if arr.size >= need:
        return arr
    out = np.empty(max(need, 2 * arr.size), arr.dtype)
    for k in range(arr.size):
        out[k] = arr[k]
    for k in range(arr.size, out.size):
        out[k] = fill
    return out


@_helper
def _copy(src: np.ndarray, a: int, b: int, dst: np.ndarray, m: int) -> int:
    """dst[m : m + b - a] = src[a:b]; the new end of dst."""
    for k in range(b - a):
        dst[m + k] = src[a + k]
    return m + b - a


_ONES = 0x0101010101010101
_HIGH = 0x8080808080808080
_LOW7 = 0x7F7F7F7F7F7F7F7F
_DEBRUIJN = 0x03F79D71B4CB0A89
_BIT_INDEX = np.zeros(64, np.int64)  # the index of a single set bit b: (b * _DEBRUIJN) >> 58
for _k in range(64):
    _BIT_INDEX[((1 << _k) * _DEBRUIJN % 2**64) >> 58] = _k


@_helper
def _positions(src: np.ndarray, n: int, byte: int, out: np.ndarray) -> int:
    """out[:k] = where ``byte`` occurs in src[:n], in order; returns k. ``src`` (a row of the
    work buffers, its length a multiple of 8) is read 8 bytes at a time: with y a word
    XOR the byte repeated, ~(((y & 0x7F..) + 0x7F..) | y) & 0x80..80 has the high bit of
    exactly the bytes of y that are zero, and each such bit's index comes from a de Bruijn
    multiplication."""
    words = src.view(np.uint64)
    pattern = np.uint64(byte * _ONES)
    k = 0
    for w in range((n + 7) >> 3):
        y = words[w] ^ pattern
        z = ~(((y & np.uint64(_LOW7)) + np.uint64(_LOW7)) | y) & np.uint64(_HIGH)
        while z:
            bit = z & (~z + np.uint64(1))
            i = 8 * w + (_BIT_INDEX[(bit * np.uint64(_DEBRUIJN)) >> np.uint64(58)] >> 3)
            if i >= n:
                break
            out[k] = i
            k += 1
            z ^= bit
    return k


# ----------------------------------------------------------------------------- encoded lines


@njit(nogil=True, cache=True, inline="always")
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


@_helper
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


@njit(nogil=True, cache=True, inline="always")
def _encoded_line(src: np.ndarray, n: int, a: int, j: int, ct: np.ndarray) -> int:
    """Where the content of the line src[a:j] (a newline at j < n, or j = n) that
    ``_ENCODED_LINE`` removes ends (before a final "\r" followed by a newline), or -1 if it
    is not an encoded line."""
    e = j - 1 if j < n and j > a and src[j - 1] == 13 else j
    if e - a >= 30 and (_printable_line(src, a, e, ct) or _uuencoded_line(src, a, e, ct)):
        return e
    return -1


@_helper
def _drop_encoded(src: np.ndarray, n: int, dst: np.ndarray, ct: np.ndarray,
                  pos: np.ndarray) -> int:
    """dst[:m] = ``_ENCODED_LINE.sub("\n", "\n" + src[:n])``; returns m (``pos``:
    scratch for n positions)."""
    k = _positions(src, n, np.int64(10), pos)
    dst[0] = 10
    m = 1
    a = 0  # the current line's start
    last = 0  # src[last:] is not yet copied
    for q in range(k + 1):
        j = pos[q] if q < k else n
        if j - a >= 30:
            e = _encoded_line(src, n, a, j, ct)
            if e >= 0:
                m = _copy(src, last, a, dst, m)
                last = e
        a = j + 1
    return _copy(src, last, n, dst, m)


# ----------------------------------------------------------------------------- addresses


@_helper
def _has_reply(src: np.ndarray, n: int, pos: np.ndarray) -> bool:
    """ "writes:" or "wrote:" occurs in src[:n]."""
    for q in range(_positions(src, n, np.int64(58), pos)):
        if _ends_with(src, 0, pos[q], _WRITES) or _ends_with(src, 0, pos[q], _WROTE):
            return True
    return False


@_helper
def _has_url(src: np.ndarray, n: int, pos: np.ndarray) -> bool:
    """ "://" or "www." occurs in src[:n]."""
    for q in range(_positions(src, n, np.int64(58), pos)):
        p = pos[q]
        if p + 2 < n and src[p + 1] == 47 and src[p + 2] == 47:
            return True
    for q in range(_positions(src, n, np.int64(119), pos)):
        if _starts_with(src, n, pos[q], _WWW):
            return True
    return False


@_helper
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


@_helper
def _drop_in_article(src: np.ndarray, n: int, dst: np.ndarray, ct: np.ndarray,
                     pos: np.ndarray) -> int:
    """dst[:m] = ``_IN_ARTICLE.sub(" ", src[:n])``; returns m."""
    m = 0
    last = 0
    for q in range(_positions(src, n, np.int64(73), pos)):  # "I"
        i = pos[q]
        if i < last:  # inside the previous match
            continue
        end = _in_article_end(src, n, i, ct)
        if end >= 0:
            m = _copy(src, last, i, dst, m)
            dst[m] = 32
            m += 1
            last = end
    return _copy(src, last, n, dst, m)


@_helper
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


@_helper
def _drop_reply_lines(src: np.ndarray, n: int, dst: np.ndarray, ct: np.ndarray,
                      pos: np.ndarray) -> int:
    """dst[:m] = ``_WRITES_LINE_REVERSED.sub("\n", src[:n][::-1])[::-1]``: the content of
    every reply line deleted (its newline kept); returns m. A line holds at most one ":"
    followed only by blanks, "\r" and its newline, so scanning the colons finds each line
    once."""
    m = 0
    last = 0
    for q in range(_positions(src, n, np.int64(58), pos)):  # ":"
        p = pos[q]
        end = _reply_line_end(src, n, p, ct)
        if end >= 0:
            a = p
            while a > 0 and src[a - 1] != 10:
                a -= 1
            m = _copy(src, last, a, dst, m)
            last = end
    return _copy(src, last, n, dst, m)


@_helper
def _drop_local_parts(src: np.ndarray, n: int, dst: np.ndarray, ct: np.ndarray,
                      pos: np.ndarray) -> int:
    """dst[:m] = ``_LOCAL_PART_REVERSED.sub("@", src[:n][::-1])[::-1]``: the run of
    ``[\\w.+%=!$-]`` before each "@" deleted; returns m. The run lies between the "@" and
    the previous one (not in the class), so it is found in dst, copied verbatim."""
    m = 0
    last = 0
    for q in range(_positions(src, n, np.int64(64), pos)):
        i = pos[q]
        m = _copy(src, last, i, dst, m)
        while m > 0 and ct[dst[m - 1]] & LOCAL:
            m -= 1
        dst[m] = 64
        m += 1
        last = i + 1
    return _copy(src, last, n, dst, m)


@_helper
def _at_domain_end(src: np.ndarray, n: int, i: int, ct: np.ndarray) -> int:
    """The end of the match of ``@[\\w-]+(?:\\.[\\w-]+)*`` at src[i] ("@"), or -1."""
    if i + 1 == n or not ct[src[i + 1]] & DOMAIN:
        return -1
    q = i + 1
    while q < n and ct[src[q]] & DOMAIN:
        q += 1
    while q + 1 < n and src[q] == 46 and ct[src[q + 1]] & DOMAIN:
        q += 1
        while q < n and ct[src[q]] & DOMAIN:
            q += 1
    return q


@_helper
def _drop_at_domains(src: np.ndarray, n: int, dst: np.ndarray, ct: np.ndarray,
                     pos: np.ndarray) -> int:
    """dst[:m] = ``_AT_DOMAIN.sub(" ", src[:n])``; returns m."""
    m = 0
    last = 0
    for q in range(_positions(src, n, np.int64(64), pos)):
        i = pos[q]
        end = _at_domain_end(src, n, i, ct)  # a match holds no "@": i >= last
        if end >= 0:
            m = _copy(src, last, i, dst, m)
            dst[m] = 32
            m += 1
            last = end
    return _copy(src, last, n, dst, m)


@_helper
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


@_helper
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


@_helper
def _drop_addresses(bufs: np.ndarray, cur: int, n: int, ct: np.ndarray,
                    pos: np.ndarray) -> tuple[int, int]:
    """``vocabulary._drop_addresses`` on bufs[cur, :n], passing between the two rows of
    ``bufs`` (each at least n + 1 long); returns the row and length of the result. A rule
    runs whether its trigger occurs or not (it then changes nothing), except that text
    + "\n" is reversed only if "@", "writes:" or "wrote:" occurs, as in Python."""
    n = _drop_in_article(bufs[cur], n, bufs[1 - cur], ct, pos)
    cur = 1 - cur
    at = _positions(bufs[cur], n, np.int64(64), pos) > 0
    if at or _has_reply(bufs[cur], n, pos):  # Python reverses text + "\n"
        bufs[cur, n] = 10
        n = _drop_reply_lines(bufs[cur], n + 1, bufs[1 - cur], ct, pos)
        n = _drop_local_parts(bufs[1 - cur], n, bufs[cur], ct, pos)
        if at:
            n = _drop_at_domains(bufs[cur], n, bufs[1 - cur], ct, pos)
            cur = 1 - cur
    if _has_url(bufs[cur], n, pos):
        n = _drop_urls(bufs[cur], n, bufs[1 - cur], ct)
        cur = 1 - cur
    return cur, n


@_inline
def _clean(src: np.ndarray, bufs: np.ndarray, ct: np.ndarray, flags: int,
           pos: np.ndarray) -> tuple[int, int]:
    """The ASCII text ``src`` as the tokenizer's rules leave it, in one row of ``bufs``
    (shape (2, w), w a multiple of 8 and at least len(src) + 2); returns the row and the
    length (``pos``: scratch for w positions)."""
    n = _copy(src, 0, src.size, bufs[0], 0)
    cur = 0
    if flags & DROP_ENCODED:
        n = _drop_encoded(bufs[0], n, bufs[1], ct, pos)
        cur = 1
    if flags & DROP_ADDRESSES:
        return _drop_addresses(bufs, cur, n, ct, pos)
    return cur, n


# ----------------------------------------------------------------------------- tokens


@_helper
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
    mixed: np.uint64 = h ^ (h >> np.uint64(29))
    return mixed


_SEED = 0xCBF29CE484222325


@njit(nogil=True, cache=True, inline="always")
def _finalize(h: np.uint64, n: int) -> np.uint64:
    final: np.uint64 = _mix(h, np.uint64(n)) * np.uint64(0xFF51AFD7ED558CCD)
    return final


@njit(nogil=True, cache=True, inline="always")
def _hash2(w0: np.uint64, w1: np.uint64, n: int) -> np.uint64:
    """The hash of a key of n <= 16 bytes whose words are w0, w1 (:func:`_hash_words`)."""
    return _finalize(_mix(_mix(np.uint64(_SEED), w0), w1), n)


@_helper
def _hash_words(kw: np.ndarray, n: int) -> np.uint64:
    """The hash of a key of n bytes whose words (8 bytes each, little-endian, zero-padded,
    at least two) are ``kw``."""
    h = np.uint64(_SEED)
    for j in range(max(2, (n + 7) >> 3)):
        h = _mix(h, kw[j])
    return _finalize(h, n)


@njit(nogil=True, cache=True, inline="always")
def _mask(n: int) -> np.uint64:
    """The low n bytes of a word (0 <= n <= 8)."""
    if n >= 8:
        full: np.uint64 = np.uint64(0xFFFFFFFFFFFFFFFF)
        return full
    low: np.uint64 = (np.uint64(1) << np.uint64(8 * n)) - np.uint64(1)
    return low


@njit(nogil=True, cache=True, inline="always")
def _lower_word(x: np.uint64) -> np.uint64:
    """The bytes "A" to "Z" of a word of ASCII bytes lowered."""
    upper = (x + np.uint64(0x3F * _ONES)) & ~(x + np.uint64(0x25 * _ONES)) & np.uint64(_HIGH)
    lowered: np.uint64 = x | (upper >> np.uint64(2))
    return lowered


@njit(nogil=True, cache=True, inline="always")
def _short_ascii(buf: np.ndarray, a: int, n: int, lower: bool) -> tuple[np.uint64, np.uint64]:
    """The words of the ASCII token buf[a:a + n], n <= 16 (buf readable to a + 16): 16
    loads and masks instead of a loop per byte; lowercased 8 bytes at a time (a byte of
    "A" to "Z" gets 0x20: b + 0x3F has its high bit from "A" up, b + 0x25 from "[" up)."""
    w0 = np.uint64(0)
    w1 = np.uint64(0)
    for j in range(8):
        w0 |= np.uint64(buf[a + j]) << np.uint64(8 * j)
        w1 |= np.uint64(buf[a + 8 + j]) << np.uint64(8 * j)
    w0 &= _mask(n)
    w1 &= _mask(max(n - 8, 0))
    if lower:
        return _lower_word(w0), _lower_word(w1)
    return w0, w1


@_helper
def _pack(key: np.ndarray, n: int, kw: np.ndarray) -> None:
    """kw[:max(2, words)] = the words of key[:n], zero-padded."""
    for j in range(max(2, (n + 7) >> 3)):
        kw[j] = 0
    for j in range(n):
        kw[j >> 3] |= np.uint64(key[j]) << np.uint64(8 * (j & 7))


@_helper
def _key_bytes(buf: np.ndarray, a: int, b: int, lower: bool, key: np.ndarray,
               kw: np.ndarray) -> int:
    """key[:m] = the UTF-8 bytes of the token buf[a:b] (ASCII bytes, A-Z lowered if
    ``lower``; or code points, surrogates as ``surrogatepass``), kw their words
    (:func:`_pack`); returns m."""
    m = 0
    for i in range(a, b):
        c = np.int64(buf[i])
        if c < 0x80:
            key[m] = c + 32 if lower and 65 <= c <= 90 else c
            m += 1
        elif c < 0x800:
            key[m], key[m + 1] = 0xC0 | (c >> 6), 0x80 | (c & 0x3F)
            m += 2
        elif c < 0x10000:
            key[m], key[m + 1] = 0xE0 | (c >> 12), 0x80 | ((c >> 6) & 0x3F)
            key[m + 2] = 0x80 | (c & 0x3F)
            m += 3
        else:
            key[m], key[m + 1] = 0xF0 | (c >> 18), 0x80 | ((c >> 12) & 0x3F)
            key[m + 2], key[m + 3] = 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)
            m += 4
    _pack(key, m, kw)
    return m


# ----------------------------------------------------------------------------- the term table
# table = (slots, info, hashes, pool, meta):
#   slots  uint64 (2^k, 4), at most half full; a row per term: [0] the hash's high half and
#          the key's length, [1], [2] its first 16 bytes as two words, [3] the term id + 1
#          (0: an empty slot) and, in the high half, its state (int32): with a fixed
#          vocabulary the column (-1: not kept); else -2 (not kept), -1 (kept, not yet
#          numbered in this batch: the state after every batch) or its number in the batch.
#          A lookup of a key of up to 16 bytes reads one row.
#   info   int64 (≥ n_terms, 2): each term's offset and length in pool
#   hashes uint64 (≥ n_terms,): each term's hash (for rehashing)
#   pool   uint8: the terms' UTF-8 bytes one after another, each followed by a NUL byte
#   meta   int64 (2,): terms, bytes of pool used

#: A table, or another tuple of arrays (``out``, ``scratch`` below), in type hints.
Arrays = tuple[Any, ...]


@njit(nogil=True, cache=True, inline="always")
def _state(e: np.uint64) -> np.int32:
    state: np.int32 = np.int32(e >> np.uint64(32))  # truncated: the high half read as int32
    return state


@njit(nogil=True, cache=True, inline="always")
def _with_state(e: np.uint64, state: int) -> np.uint64:
    out: np.uint64 = (e & np.uint64(0xFFFFFFFF)) | (np.uint64(state & 0xFFFFFFFF) << np.uint64(32))
    return out


@_helper
def _same_tail(info: np.ndarray, pool: np.ndarray, t: int, key: np.ndarray, n: int) -> bool:
    """Term t's bytes from the 17th on are key[16:n]."""
    o = info[t, 0]
    for k in range(16, n):
        if pool[o + k] != key[k]:
            return False
    return True


@njit(nogil=True, cache=True, inline="always")
def _probe(slots: np.ndarray, info: np.ndarray, pool: np.ndarray, key: np.ndarray, n: int,
           w0: np.uint64, w1: np.uint64, h: np.uint64) -> int:
    """The slot of the key of n bytes (words w0, w1 first, the rest in ``key``; hash h), or
    the empty slot where it goes."""
    mask = np.uint64(slots.shape[0] - 1)
    head = (h >> np.uint64(32) << np.uint64(32)) | np.uint64(n)
    i = h & mask
    while True:
        e = slots[i, 3]
        if e == 0:
            slot: int = np.int64(i)
            return slot
        if slots[i, 0] == head and slots[i, 1] == w0 and slots[i, 2] == w1 and (
                n <= 16 or _same_tail(info, pool, np.int64(e & np.uint64(0xFFFFFFFF)) - 1,
                                      key, n)):
            slot = np.int64(i)
            return slot
        i = (i + np.uint64(1)) & mask


@_helper
def _insert(table: Arrays, i: int, key: np.ndarray, n: int, w0: np.uint64, w1: np.uint64,
            h: np.uint64, state: int) -> None:
    """Add the key of n bytes (the first 16 in w0, w1, the rest in ``key``) at the empty
    slot ``i`` (room reserved)."""
    slots, info, hashes, pool, meta = table
    t, o = meta[0], meta[1]
    for j in range(min(n, 16)):
        pool[o + j] = ((w0 if j < 8 else w1) >> np.uint64(8 * (j & 7))) & np.uint64(0xFF)
    for j in range(16, n):
        pool[o + j] = key[j]
    pool[o + n] = 0
    info[t, 0], info[t, 1] = o, n
    hashes[t] = h
    slots[i, 0] = (h >> np.uint64(32) << np.uint64(32)) | np.uint64(n)
    slots[i, 1], slots[i, 2] = w0, w1
    slots[i, 3] = _with_state(np.uint64(t + 1), state)
    meta[0], meta[1] = t + 1, o + n + 1


@_helper
def _rehash(slots: np.ndarray, hashes: np.ndarray, size: int, numbered: np.ndarray,
            renumber: bool | np.bool_) -> np.ndarray:
    """The rows of ``slots`` in ``size`` (a power of two) slots; with ``renumber``,
    numbered[s] follows the slot of the term numbered s."""
    out = np.zeros((size, 4), np.uint64)
    mask = np.uint64(size - 1)
    for r in range(slots.shape[0]):
        e = slots[r, 3]
        if e == 0:
            continue
        i = hashes[np.int64(e & np.uint64(0xFFFFFFFF)) - 1] & mask
        while out[i, 3] != 0:
            i = (i + np.uint64(1)) & mask
        for c in range(4):
            out[i, c] = slots[r, c]
        if renumber and _state(e) >= 0:
            numbered[_state(e)] = i
    return out


@_helper
def _grow_rows(info: np.ndarray, need: int) -> np.ndarray:
    if info.shape[0] >= need:
        return info
    out = np.empty((max(need, 2 * info.shape[0]), info.shape[1]), info.dtype)
    for r in range(info.shape[0]):
        for c in range(info.shape[1]):
            out[r, c] = info[r, c]
    return out


@_helper
def _reserve(table: Arrays, n_new: int, n_bytes: int, numbered: np.ndarray,
             renumber: bool | np.bool_) -> Arrays:
    """``table`` with room for ``n_new`` more terms of ``n_bytes`` in all, its slots at
    most half full (see :func:`_rehash` for the other arguments)."""
    slots, info, hashes, pool, meta = table
    need = meta[0] + n_new
    if 2 * need > slots.shape[0]:
        size = slots.shape[0]
        while 2 * need > size:
            size *= 2
        slots = _rehash(slots, hashes, size, numbered, renumber)
    return (slots, _grow_rows(info, need), _grow(hashes, need, 0),
            _grow(pool, meta[1] + n_new + n_bytes, 0), meta)


@njit(nogil=True, cache=True)
def _new_table(pool: np.ndarray, offsets: np.ndarray, states: np.ndarray) -> Arrays:
    """A table of the distinct terms pool[offsets[t]:offsets[t + 1]] with their ``states``
    (see the layout above)."""
    n = states.size
    table = (np.zeros((1024, 4), np.uint64), np.empty((64, 2), np.int64),
             np.zeros(64, np.uint64), np.zeros(1024, np.uint8), np.zeros(2, np.int64))
    table = _reserve(table, n, pool.size, np.empty(0, np.int64), np.bool_(False))
    kw = np.zeros(2, np.uint64)
    for t in range(n):
        key = pool[offsets[t]:offsets[t + 1]]
        kw = _grow(kw, key.size // 8 + 2, 0)
        _pack(key, key.size, kw)
        h = _hash_words(kw, key.size)
        i = _probe(table[0], table[1], table[3], key, key.size, kw[0], kw[1], h)
        _insert(table, i, key, key.size, kw[0], kw[1], h, states[t])
    return table


# ----------------------------------------------------------------------------- counting


@_helper
def _count(buf: np.ndarray, spans: np.ndarray, s0: int, s1: int, lower: bool, fixed: bool,
           table: Arrays, out: Arrays, scratch: Arrays) -> None:
    """Count the tokens buf[spans[2s]:spans[2s + 1]], s0 <= s < s1, room reserved: the ids of
    those kept go to ``out`` = (ids, numbered, counters [n ids, n numbered], positions),
    with a fixed vocabulary their column, else their term's number in the batch (by first
    occurrence; numbered[s]: the slot of the term numbered s), and each kept token's match
    number s − s0 to ``positions``. Whether a token is kept decides no branch: its id is
    written in any case, and the count moves on if it is kept."""
    slots, info, hashes, pool, meta = table
    ids, numbered, counters, positions = out
    key, kw = scratch
    c, nb = counters[0], counters[1]
    short = buf.itemsize == 1  # ASCII: a key of up to 16 bytes is read as two words
    for s in range(s0, s1):
        a, b = spans[2 * s], spans[2 * s + 1]
        n = b - a
        if short and n <= 16:
            w0, w1 = _short_ascii(buf, a, n, lower)
            h = _hash2(w0, w1, n)
        else:
            n = _key_bytes(buf, a, b, lower, key, kw)
            w0, w1 = kw[0], kw[1]
            h = _hash_words(kw, n)
        i = _probe(slots, info, pool, key, n, w0, w1, h)
        if slots[i, 3] == 0:
            if fixed:
                continue
            _insert(table, i, key, n, w0, w1, h, np.int64(-1))
        e = slots[i, 3]
        state = _state(e)
        if state == -1 and not fixed:  # kept, first in the batch
            state = np.int32(nb)
            slots[i, 3] = _with_state(e, nb)
            numbered[nb] = i
            nb += 1
        ids[c] = state
        positions[c] = s - s0
        c += state >= 0
    counters[0], counters[1] = c, nb


@_helper
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


@_helper
def _count_spans(buf: np.ndarray, spans: np.ndarray, s0: int, s1: int, flags: int,
                 table: Arrays, out: Arrays, scratch: Arrays) -> Arrays:
    """Reserve room, then :func:`_count`; returns the (grown) table, out and scratch (the
    key's bytes and words)."""
    fixed = bool(flags & FIXED)
    n_bytes, longest = _span_bytes(buf, spans, s0, s1)
    n_new = 0 if fixed else s1 - s0
    ids, numbered, counters, positions = out
    numbered = _grow(numbered, counters[1] + n_new, 0)
    if not fixed:  # a fixed table is only read (and may be shared)
        table = _reserve(table, n_new, n_bytes, numbered, np.bool_(True))
    out = (_grow(ids, counters[0] + s1 - s0, 0), numbered, counters,
           _grow(positions, counters[0] + s1 - s0, 0))
    key, kw = scratch
    scratch = (_grow(key, longest, 0), _grow(kw, longest // 8 + 2, 0))
    # a code-point document was lowercased by Python
    lower = bool(flags & LOWERCASE) and buf.itemsize == 1
    _count(buf, spans, s0, s1, lower, fixed, table, out, scratch)
    return table, out, scratch


@_inline
def _tokenize_text(buf: np.ndarray, n: int, ct: np.ndarray, flags: int, table: Arrays,
                   out: Arrays, scratch: Arrays, spans: np.ndarray) -> Arrays:
    """Find and count the tokens of buf[:n] (readable to n + 16); returns (table, out,
    scratch, spans, matches)."""
    spans = _grow(spans, 2 * ((n + 1) // 3 + 2), 0)
    k = _find_tokens(buf, n, ct, bool(flags & LETTERS_ONLY), spans)
    table, out, scratch = _count_spans(buf, spans, np.int64(0), k, flags, table, out, scratch)
    return table, out, scratch, spans, k


@_helper
def _end_batch(slots: np.ndarray, numbered: np.ndarray, nb: int) -> np.ndarray:
    """The term id of each number, and every numbered term back to *not yet numbered*."""
    order = np.empty(nb, np.int64)
    for s in range(nb):
        i = numbered[s]
        order[s] = np.int64(slots[i, 3] & np.uint64(0xFFFFFFFF)) - 1
        slots[i, 3] = _with_state(slots[i, 3], -1)
    return order


@njit(nogil=True, cache=True)
def tokenize_batch(data: np.ndarray, cps: np.ndarray, docs: np.ndarray,
                   token_spans: np.ndarray, ct: np.ndarray, utab: np.ndarray, flags: int,
                   table: Arrays) -> Arrays:
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
        The term table (:func:`_new_table`); updated in place (read only with ``FIXED``).

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
    positions : ndarray of int32, shape (n_kept,)
        Each kept token's number among its document's matches (0 .. length − 1).
    """
    n_docs = docs.shape[0]
    indptr = np.zeros(n_docs + 1, np.int64)
    lengths = np.zeros(n_docs, np.int64)
    out = (np.empty(1024, np.int32), np.empty(1024, np.int64), np.zeros(2, np.int64),
           np.empty(1024, np.int32))
    scratch = (np.empty(64, np.uint8), np.zeros(8, np.uint64))
    spans = np.empty(1024, np.int64)
    bufs = np.empty((2, 1024), np.uint8)
    pos = np.empty(1024, np.int64)
    for d in range(n_docs):
        kind, a, b = docs[d, 0], docs[d, 1], docs[d, 2]
        if kind == ASCII_DOC:
            if bufs.shape[1] < b - a + 18:
                bufs = np.empty((2, 2 * (b - a) + 32 & ~7), np.uint8)
                pos = np.empty(bufs.shape[1], np.int64)
            row, n = _clean(data[a:b], bufs, ct, flags, pos)
            table, out, scratch, spans, k = _tokenize_text(bufs[row], n, ct, flags, table,
                                                           out, scratch, spans)
        elif kind == CODE_POINTS:
            table, out, scratch, spans, k = _tokenize_text(cps[a:b], b - a, utab, flags,
                                                           table, out, scratch, spans)
        else:
            table, out, scratch = _count_spans(cps, token_spans, a, b, flags, table, out,
                                               scratch)
            k = b - a
        indptr[d + 1] = out[2][0]
        lengths[d] = k
    ids, numbered, counters, positions = out
    order = _end_batch(table[0], numbered, counters[1])
    return table, ids[:counters[0]], indptr, lengths, order, positions[:counters[0]]


@njit(nogil=True, cache=True)
def _clean_one(src: np.ndarray, ct: np.ndarray, flags: int) -> np.ndarray:
    bufs = np.empty((2, src.size + 16 & ~7), np.uint8)
    row, n = _clean(src, bufs, ct, flags, np.empty(bufs.shape[1], np.int64))
    cleaned: np.ndarray = bufs[row, :n].copy()
    return cleaned


def clean_ascii(raw: bytes, drop_encoded: bool = True, drop_addresses: bool = True) -> bytes:
    """The ASCII text ``raw`` as the kernel leaves it for matching: byte for byte
    ``Tokenizer.clean`` of the decoded text (before lowercasing)."""
    if not raw.isascii():
        raise ValueError("clean_ascii takes ASCII text")
    flags = (DROP_ENCODED if drop_encoded else 0) | (DROP_ADDRESSES if drop_addresses else 0)
    return bytes(_clean_one(np.frombuffer(raw, np.uint8), ASCII_CLASSES, flags))


# ----------------------------------------------------------------------------- Python side


@dataclass
class TermTable:
    """The kernel's term table: ``arrays`` = (slots, info, hashes, pool, meta), as the
    comment above :func:`_probe` says. The first ``n_preloaded`` terms are the stop words
    and vocabulary it was made with."""

    arrays: tuple[np.ndarray, ...]
    n_preloaded: int

    @property
    def n_terms(self) -> int:
        return int(self.arrays[4][0])

    def copy(self) -> TermTable:
        return TermTable(tuple(a.copy() for a in self.arrays), self.n_preloaded)

    def terms(self, start: int, stop: int) -> list[str]:
        """The strings of terms start <= t < stop (one decode for all of them)."""
        if stop <= start:
            return []
        info, pool = self.arrays[1], self.arrays[3]
        first, end = int(info[start, 0]), int(info[stop - 1, 0] + info[stop - 1, 1])
        parts = pool[first:end].tobytes().decode("utf-8", "surrogatepass").split("\0")
        if len(parts) == stop - start:
            return parts
        # a NUL inside a term (only a token list can give one): cut at the offsets
        return [pool[o:o + n].tobytes().decode("utf-8", "surrogatepass")
                for o, n in info[start:stop].tolist()]


@lru_cache(maxsize=8)
def preloaded_table(stop_words: frozenset[str],
                    vocabulary: tuple[str, ...] | None = None) -> TermTable:
    """A table of the stop words (not kept) and then the words of ``vocabulary`` (their
    column; a stop word in it is still not kept, a repeated word keeps its last column, as
    a dict of the vocabulary would)."""
    # the states of the table's layout: not kept is -1 with a vocabulary, else -2
    states: dict[str, int] = dict.fromkeys(sorted(stop_words), -2 if vocabulary is None else -1)
    for i, word in enumerate(vocabulary or ()):
        if word not in stop_words:
            states[word] = i
    encoded = [w.encode("utf-8", "surrogatepass") for w in states]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    pool = np.frombuffer(b"".join(encoded), np.uint8)
    arrays = _new_table(pool, offsets, np.fromiter(states.values(), np.int64, len(states)))
    return TermTable(tuple(arrays), len(states))


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
    positions : ndarray of int32, shape (n_kept,)
        Each kept token's number among its document's matches (0 .. its length − 1).
    """

    ids: np.ndarray
    indptr: np.ndarray
    lengths: np.ndarray
    terms: Sequence[str]
    positions: np.ndarray

    def windows(self, size: int) -> TokenizedBatch:
        """The documents cut into windows of ``size`` matches each (the last one shorter,
        a document without matches one empty window): window w of a document holds its
        kept tokens whose position p has p // size == w, and its length is the number of
        its matches. Positions restart in each window."""
        n_win = np.maximum(1, -(-self.lengths // size))
        first = np.concatenate(([0], np.cumsum(n_win)[:-1]))
        per_doc = np.diff(self.indptr)
        window = np.repeat(first, per_doc) + self.positions // size
        total = int(n_win.sum())
        indptr = np.concatenate(([0], np.cumsum(np.bincount(window, minlength=total))))
        offset = np.arange(total) - np.repeat(first, n_win)  # the window's number in its doc
        lengths = np.clip(np.repeat(self.lengths, n_win) - offset * size, 0, size)
        return TokenizedBatch(self.ids, indptr.astype(np.int64), lengths.astype(np.int64),
                              self.terms, (self.positions % size).astype(np.int32))


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
        self._strings = np.empty(0, object)  # term n_preloaded + i is _strings[i]
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
        arrays, ids, indptr, lengths, order, positions = tokenize_batch(
            np.frombuffer(b"".join(self._data), np.uint8),
            np.frombuffer(b"".join(self._cps), np.uint32),
            np.array(self._docs, np.int64).reshape(-1, 3), np.array(self._spans, np.int64),
            ASCII_CLASSES, utab, self.flags, self.table.arrays)
        self._reset()
        if self.vocabulary is not None:
            return TokenizedBatch(ids, indptr, lengths, self.vocabulary, positions)
        self.table.arrays = tuple(arrays)
        return TokenizedBatch(ids, indptr, lengths, self._terms(order), positions)

    def _terms(self, order: np.ndarray) -> list[str]:
        """The strings of the term ids ``order`` (decoding the terms added since the last
        call)."""
        known = self.table.n_preloaded + self._strings.size
        if self.table.n_terms > known:
            new = np.empty(self.table.n_terms - known, object)
            new[:] = self.table.terms(known, self.table.n_terms)
            self._strings = np.concatenate((self._strings, new))
        result: list[str] = self._strings[order - self.table.n_preloaded].tolist()
        return result


@njit(nogil=True, cache=True)
def _canonical(ids: np.ndarray, indptr: np.ndarray, n_terms: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each document's distinct ids, sorted, and how often each occurs: the distinct
    (document, id, count) entries are bucketed by id (a counting sort), then dealt back to
    their documents id by id, so that every row comes out sorted without comparisons."""
    n_docs = indptr.size - 1
    seen = np.zeros(n_terms, np.int32)
    doc = np.empty(ids.size, np.int32)
    col = np.empty(ids.size, np.int32)
    cnt = np.empty(ids.size, np.int32)
    ptr = np.zeros(n_docs + 1, np.int64)
    k = 0
    for d in range(n_docs):
        first = k
        for p in range(indptr[d], indptr[d + 1]):
            t = ids[p]
            if seen[t] == 0:
                col[k] = t
                doc[k] = d
                k += 1
            seen[t] += 1
        for q in range(first, k):
            cnt[q] = seen[col[q]]
            seen[col[q]] = 0
        ptr[d + 1] = k
    start = np.zeros(n_terms + 1, np.int64)  # bucket of each id
    for q in range(k):
        start[col[q] + 1] += 1
    start = np.cumsum(start)
    order = np.empty(k, np.int64)
    for q in range(k):
        order[start[col[q]]] = q
        start[col[q]] += 1
    nxt = ptr[:-1].copy()
    indices = np.empty(k, np.int32)
    data = np.empty(k, np.int32)
    for e in order:
        r = nxt[doc[e]]
        indices[r] = col[e]
        data[r] = cnt[e]
        nxt[doc[e]] = r + 1
    return data, indices, ptr


def count_matrix(ids: np.ndarray, indptr: np.ndarray, n_terms: int,
                 compiled: bool = True) -> sp.csr_matrix:
    """The documents' counts: the same matrix as ``csr_matrix((ones, ids, indptr))`` after
    ``sum_duplicates()`` (int32 counts, sorted column indices), built in one pass.

    Parameters
    ----------
    ids : ndarray of int32, shape (n_tokens,)
        Each document's tokens, as columns in [0, n_terms).
    indptr : ndarray of int64, shape (n_docs + 1,)
        Document d's tokens are ids[indptr[d]:indptr[d + 1]].
    n_terms : int
        Columns.
    compiled : bool
        False: scipy's ``sum_duplicates`` (no kernel to compile; about twice the time).
    """
    if compiled:
        data, indices, ptr = _canonical(ids, indptr, n_terms)
    else:
        m = sp.csr_matrix((np.ones(ids.size, np.int32), ids.copy(), indptr.copy()),
                          shape=(indptr.size - 1, n_terms))
        m.sum_duplicates()  # in place: on copies, not on the caller's arrays
        data, indices, ptr = m.data, m.indices, m.indptr
    m = sp.csr_matrix((data, indices, ptr), shape=(indptr.size - 1, n_terms))
    m.has_canonical_format = True
    return m


# ----------------------------------------------------------------------------- compilation

#: The lock file, beside numba's cache of this module, that the kernels' compilation holds.
LOCK_NAME = "streamtopic-tokenizer.lock"
_CACHED = (_new_table, tokenize_batch, _canonical)


def compile_kernels() -> None:
    """Compile (or load from numba's cache) the kernels with every argument type an ingest
    passes them: ASCII, code-point and token-list documents, with and without a fixed
    vocabulary, and the counts."""
    for vocabulary in (None, ("alpha", "omega")):
        kernel = BatchTokenizer(Tokenizer(), vocabulary)
        kernel.add_ascii(b"Alpha beta, alpha omega")
        kernel.run()
        kernel.add_ascii(b"alpha")
        kernel.add_text("\u00e9t\u00e9 alpha omega")
        kernel.add_tokens(["alpha", "beta"])
        batch = kernel.run()
        count_matrix(batch.ids, batch.indptr, len(batch.terms))


def kernels_ready() -> bool:
    """Whether the kernels are compiled in this process or in numba's cache. When they are
    not, their compilation starts in another process at the lowest priority (once per process;
    one per machine compiles, :func:`streamtopic._warmup.start_in_background`), and the caller
    tokenises in Python meanwhile: the same tokens, about 14 s of CPU sooner on a first
    ingest."""
    if os.environ.get(_warmup.WARMUP_ENV, "1").strip() == "0":
        return True  # the kernels compile at their first call, in the caller's process
    if _warmup.compiled_or_cached(_CACHED, LOCK_NAME):
        return True
    _warmup.start_in_background(__name__, "compile_kernels", LOCK_NAME, tokenize_batch)
    return False
