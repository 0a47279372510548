"""Bounds on what an input may hold (issue 30): counts, line and document sizes, JSON depth,
the structure of an HDF5 corpus.

Every reader checks its input against these before it is counted, and refuses it with one
line naming the file (and line, row or dataset): a count never wraps, a line never grows
without bound in memory, a JSON record never exhausts the stack, an HDF5 array of the wrong
kind is never indexed with. A refusal happens before anything is committed to a store.

* :data:`MAX_COUNT`: the largest count of one word in one document (UCI ``count``, HDF5
  ``data``): 2³¹ − 1, what the counts' int32 arrays hold. Document lengths and totals are
  summed in int64 (at most 2³¹ entries of 2³¹ − 1: no overflow).
* :func:`max_line_bytes`: the largest line (text, JSON Lines, UCI) or document (one file, one
  archive member) in decompressed bytes: 64 MiB unless set, by ``max_line_bytes`` of
  :func:`streamtopic.corpus.read_corpus`, ``--max-line-bytes`` or the environment variable
  ``STREAMTOPIC_MAX_LINE_BYTES``. A gzip bomb of one endless line is refused when the
  planning scan has seen that many bytes of it.
* :func:`json_record`: a JSON Lines record decoded with its nesting bounded by
  :data:`MAX_JSON_DEPTH`.
* :func:`check_hdf5_corpus`: an HDF5 corpus' datasets (1-D, integer ``indptr`` and
  ``indices``, numeric ``data``, string ``vocab`` without repeated terms, consistent
  lengths) before a row is read.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np

__all__ = ["DEFAULT_MAX_LINE_BYTES", "MAX_COUNT", "MAX_JSON_DEPTH", "MAX_LINE_BYTES_ENV",
           "InputBoundError", "check_hdf5_corpus", "check_vocabulary", "json_record",
           "max_line_bytes", "too_long"]

#: The largest count of a word in a document (the counts are int32).
MAX_COUNT = 2**31 - 1
#: The default limit on a line or document, in decompressed bytes.
DEFAULT_MAX_LINE_BYTES = 64 * 2**20
#: The environment variable that sets the limit when no parameter does.
MAX_LINE_BYTES_ENV = "STREAMTOPIC_MAX_LINE_BYTES"
#: The deepest nesting of arrays and objects a JSON Lines record may have.
MAX_JSON_DEPTH = 256

_OPENERS = re.compile(r"[\[{]")


class InputBoundError(ValueError):
    """An input over one of the bounds; the message says which and how to raise it."""


def max_line_bytes(value: int | None = None) -> int:
    """The limit on a line or document in decompressed bytes: ``value`` when given, else
    ``$STREAMTOPIC_MAX_LINE_BYTES``, else :data:`DEFAULT_MAX_LINE_BYTES`.

    Raises
    ------
    ValueError
        When the value (or the environment variable) is not a positive integer.
    """
    if value is None:
        raw = os.environ.get(MAX_LINE_BYTES_ENV, "").strip()
        if not raw:
            return DEFAULT_MAX_LINE_BYTES
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{MAX_LINE_BYTES_ENV}={raw!r}: expected a number of "
                             f"bytes") from None
        if value < 1:
            raise ValueError(f"{MAX_LINE_BYTES_ENV}={raw!r}: must be positive")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"max_line_bytes={value!r}: must be a positive number of bytes")
    return int(value)


def too_long(what: str, size: int, limit: int, exact: bool = True) -> str:
    """The message for a line or document of ``size`` bytes (``exact``, else at least that
    many: a scan stopped there) over the limit."""
    at_least = "" if exact else "at least "
    return (f"{what} of {at_least}{size:,} bytes (decompressed) is over the limit of "
            f"{limit:,} (--max-line-bytes, {MAX_LINE_BYTES_ENV})")


def _depth(text: str) -> int:
    """The deepest nesting of arrays and objects in the JSON text ``text`` (strings
    skipped, escapes honoured): a linear scan, only for records with many brackets."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def json_record(text: str) -> Any:
    """``json.loads(text)`` with the nesting bounded by :data:`MAX_JSON_DEPTH` (checked
    before decoding, so the decoder never recurses past the stack).

    Raises
    ------
    json.JSONDecodeError
        For invalid JSON.
    InputBoundError
        For a record nested deeper than :data:`MAX_JSON_DEPTH`.
    """
    if len(_OPENERS.findall(text)) > MAX_JSON_DEPTH and _depth(text) > MAX_JSON_DEPTH:
        raise InputBoundError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except RecursionError:  # pragma: no cover - the scan above bounds the depth
        raise InputBoundError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None


def _dataset(f: Any, name: str) -> Any:
    """``f[name]``, a 1-D dataset, else an :class:`InputBoundError` naming it."""
    ds = f[name]
    if not hasattr(ds, "shape") or len(ds.shape) != 1:
        shape = getattr(ds, "shape", "a group")
        raise InputBoundError(f"dataset {name!r}: expected a 1-D array, found {shape}")
    return ds


def check_hdf5_corpus(f: Any) -> tuple[int, int]:
    """Check the structure of an open HDF5 corpus ``f`` (an ``h5py.File``): datasets
    ``indptr`` (n_rows + 1,) and ``indices`` (nnz,) of integers, ``data`` (nnz,) of integers
    or floats, ``vocab`` (W,) of strings; ``indptr`` starting at 0 and ending at nnz. Only
    shapes, dtypes and two values are read. Returns (n_rows, nnz).

    Raises
    ------
    InputBoundError
        Naming the dataset at fault.
    """
    missing = [k for k in ("indptr", "indices", "data", "vocab") if k not in f]
    if missing:
        raise InputBoundError(f"HDF5 corpus lacks dataset(s) {', '.join(missing)}")
    indptr, indices, data, vocab = (_dataset(f, k)
                                    for k in ("indptr", "indices", "data", "vocab"))
    for name, ds, kinds, what in (("indptr", indptr, "iu", "integers"),
                                  ("indices", indices, "iu", "integers"),
                                  ("data", data, "iuf", "integers or floats"),
                                  ("vocab", vocab, "SUO", "strings")):
        if ds.dtype.kind not in kinds:
            raise InputBoundError(f"dataset {name!r}: expected {what}, found dtype {ds.dtype}")
    if indptr.shape[0] < 1:
        raise InputBoundError("dataset 'indptr': empty (expected n_rows + 1 offsets)")
    first, last = int(indptr[0]), int(indptr[-1])
    if first != 0:
        raise InputBoundError(f"dataset 'indptr': starts at {first}, expected 0")
    for name, ds in (("indices", indices), ("data", data)):
        if ds.shape[0] != last:
            raise InputBoundError(f"dataset {name!r}: {ds.shape[0]:,} entries, but 'indptr' "
                                  f"ends at {last:,}")
    return indptr.shape[0] - 1, last


def check_vocabulary(words: list[str], dataset: str = "vocab") -> None:
    """Refuse a vocabulary with a repeated term (a word would silently take another's
    counts).

    Raises
    ------
    InputBoundError
        Naming the dataset and both entries.
    """
    seen: dict[str, int] = {}
    for i, w in enumerate(words):
        j = seen.setdefault(w, i)
        if j != i:
            raise InputBoundError(f"dataset {dataset!r}: term {w!r} repeated (entries {j} "
                                  f"and {i})")
