"""Digests of what a store or a model records, so that damage is found, never read as data.

Every chunk of a zarr array can carry a CRC-32C checksum, but a *deleted* chunk reads as the
array's fill value without any error: a lost chunk of word counts reads as zeros. What an
array must hold is therefore recorded beside it as a digest of its content
(:func:`array_digest`), and checked when it is read; the JSON metadata that holds these
digests and the other scalars (counts, the vocabulary size, the chunk size, the head
version) carries a digest of itself (:func:`json_digest`, :func:`seal`, :func:`unsealed`).

Digests guard against damage and accidental edits, not against someone who rewrites a file
and recomputes them; structural checks (:mod:`streamtopic.store`) keep even a crafted file
from reaching native code with impossible shapes or indices.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["DIGEST_KEY", "array_digest", "chain_digest", "json_digest", "seal", "unsealed"]

#: The key under which a JSON object holds the digest of the rest of itself
DIGEST_KEY = "digest"


def array_digest(values: Any) -> str:
    """SHA-256 of an array's dtype, shape and content (strings: their UTF-8 text, whatever
    the string dtype they are read back as).

    Parameters
    ----------
    values : array_like of any shape
        Numbers or strings.

    Returns
    -------
    str
        64 hexadecimal digits.
    """
    a = np.asarray(values)
    h = hashlib.sha256()
    if a.dtype.kind in "USOT":
        h.update(f"str{a.shape}\0".encode())
        words = [str(x) for x in a.ravel().tolist()]
        h.update(json.dumps(words, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    else:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}\0".encode())
        h.update(a.reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def json_digest(value: Any, key: str = "") -> str:
    """SHA-256 of a JSON value in canonical form (sorted keys, no spaces), prefixed by
    ``key`` (a store's uid: a value copied from another store does not match)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str,
                      ensure_ascii=True)
    return hashlib.sha256(f"{key}\0{text}".encode()).hexdigest()


def seal(obj: Mapping[str, Any], key: str = "") -> dict[str, Any]:
    """A copy of a JSON object with the digest of the rest of it under :data:`DIGEST_KEY`."""
    out = {k: v for k, v in obj.items() if k != DIGEST_KEY}
    out[DIGEST_KEY] = json_digest(out, key)
    return out


def unsealed(obj: Any, key: str = "", *, required: bool = True) -> bool | None:
    """Whether a JSON object sealed by :func:`seal` still matches its digest: True, False
    when it does not (damaged or edited), None when it carries none and ``required`` is
    false (written before digests existed)."""
    if not isinstance(obj, Mapping):
        return False
    recorded = obj.get(DIGEST_KEY)
    if recorded is None:
        return False if required else None
    rest = {k: v for k, v in obj.items() if k != DIGEST_KEY}
    return bool(recorded == json_digest(rest, key))


def chain_digest(previous: str, data: bytes) -> str:
    """The next link of a hash chain: SHA-256 of the previous link and ``data``. A record
    that only grows (a manifest, the list of cached partitions) is checked link by link,
    and appending to it costs the new part only."""
    return hashlib.sha256(previous.encode() + b"\0" + data).hexdigest()
