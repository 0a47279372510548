"""The member listing of an uncompressed tar archive, read straight from its headers.

:mod:`tarfile` builds a ``TarInfo`` per member, decoding every field of its header and
checking it twice; on 20 Newsgroups' training archive (11,314 members, 20 MB) listing took
0.49 s of a 7 s fit, more than reading the documents. :func:`plain_members` reads only
what a listing needs (type, name, size, checksum) from the memory-mapped file: about 0.03 s
on the same archive, the same listing.

It handles the common case, and only it: ustar and V7 headers (POSIX and GNU magic) of
regular files, directories, links, devices and FIFOs. An archive holding anything else
(GNU long names, pax extended headers, sparse files, base-256 numbers, a bad checksum, an
unparsable number, data past the end of the file) gives None, and the caller lists it with
:mod:`tarfile`, whose verdicts (an error, or the end of the archive) stand. Where it
answers, the listing equals :mod:`tarfile`'s: the same member names (prefix and name
joined, V7 directories recognised, decoded as ``tarfile`` decodes them), the same data
offsets and sizes, the same end (the first all-zero block, or the end of the file).
"""

from __future__ import annotations

import mmap
import os
import sys

import numpy as np

__all__ = ["plain_members"]

BLOCK = 512
#: Member types listed here: regular files (REGTYPE, AREGTYPE, CONTTYPE), then hard and
#: symbolic links, character and block devices, directories and FIFOs; any other type
#: leaves the archive to :mod:`tarfile`
FILE_TYPES = frozenset(b"0\x007")
OTHER_TYPES = frozenset(b"123456")
#: The header's numeric fields that :mod:`tarfile` parses besides the size and the checksum,
#: which the walk reads itself (mode, uid, gid, mtime, devmajor, devminor): one that does
#: not parse ends tarfile's listing, so it ends this one
NUMBER_FIELDS = ((100, 108), (108, 116), (116, 124), (136, 148), (329, 337), (337, 345))
ZERO_BLOCK = bytes(BLOCK)


def plain_members(path: str | os.PathLike[str]) -> tuple[tuple[str, int, int], ...] | None:
    """(name, offset of the data, size) of each regular file of the uncompressed tar archive
    at ``path``, in archive order, as ``tarfile`` lists them; None when the archive holds a
    header this reader leaves to :mod:`tarfile` (see the module docstring), or is empty."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < BLOCK:
            return None
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _walk(mm, size)


def _walk(mm: mmap.mmap, size: int) -> tuple[tuple[str, int, int], ...] | None:
    """Walk the headers (name, type and size read here), then check every header's checksum
    and numbers at once (:func:`_headers_valid`)."""
    encoding = sys.getfilesystemencoding()  # tarfile's default, with surrogateescape
    members: list[tuple[str, int, int]] = []
    headers: list[int] = []
    stated: list[int] = []
    offset = 0
    while offset + BLOCK <= size:
        header = mm[offset:offset + BLOCK]
        if header == ZERO_BLOCK:
            break
        kind = header[156]
        length = _number(header[124:136])
        checksum = _number(header[148:156])
        if ((kind not in FILE_TYPES and kind not in OTHER_TYPES) or length is None
                or checksum is None):
            return None
        headers.append(offset)
        stated.append(checksum)
        name = _text(header[0:100], encoding)
        data = offset + BLOCK
        # a V7 directory is a regular file's header whose name ends in "/"
        regular = kind in FILE_TYPES and not (kind == 0 and name.endswith("/"))
        offset = data + -(-length // BLOCK) * BLOCK if regular else data
        if offset > size:
            return None  # tarfile: "unexpected end of data"
        if regular:
            prefix = _text(header[345:500], encoding)
            members.append((prefix + "/" + name if prefix else name, data, length))
    # a partial block at the end ends tarfile's listing too
    return tuple(members) if _headers_valid(mm, headers, stated) else None


def _headers_valid(mm: mmap.mmap, offsets: list[int], stated: list[int]) -> bool:
    """Whether every header at ``offsets`` passes ``tarfile``'s checks: the checksum it
    states (``stated``) is its bytes' sum, as unsigned or as signed bytes, the field itself
    counted as spaces (``tarfile.calc_chksums``), and its numbers parse
    (:data:`NUMBER_FIELDS`); vectorised over the headers, a header whose numbers are not
    plain octal checked one field at a time."""
    if not offsets:
        return True
    blocks = np.frombuffer(mm, dtype=np.uint8, count=len(mm) // BLOCK * BLOCK)
    got = blocks.reshape(-1, BLOCK)[np.asarray(offsets, dtype=np.int64) // BLOCK]  # n×512
    del blocks  # no view of the map outlives it
    body = got.copy()
    body[:, 148:156] = 0
    unsigned = 256 + body.sum(axis=1, dtype=np.int64)
    signed = unsigned - 256 * (body >= 128).sum(axis=1, dtype=np.int64)
    plain = np.ones(len(offsets), dtype=bool)
    for a, b in NUMBER_FIELDS:
        plain &= _plain_octal(got[:, a:b])
    for i in np.flatnonzero(~plain).tolist():  # not plain: exactly as tarfile parses it
        header = bytes(got[i])
        if any(_number(header[a:b]) is None for a, b in NUMBER_FIELDS):
            return False
    says = np.asarray(stated, dtype=np.int64)
    return bool(np.all((says == unsigned) | (says == signed)))


def _plain_octal(fields: np.ndarray) -> np.ndarray:
    """Whether each row of ``fields`` (n×w bytes) is a plain octal number as tar writes it
    (spaces, octal digits without a gap, spaces, then a NUL or the field's end, anything
    after the NUL), which ``int(text.strip() or "0", 8)`` reads as ``tarfile`` does (n,)."""
    w = fields.shape[1]
    before = np.cumsum(fields == 0, axis=1) == 0  # before the first NUL
    digit = (fields >= ord("0")) & (fields <= ord("7")) & before
    space = (fields == ord(" ")) & before
    count = digit.sum(axis=1)
    first = np.where(count > 0, digit.argmax(axis=1), 0)
    last = np.where(count > 0, w - 1 - digit[:, ::-1].argmax(axis=1), -1)
    plain: np.ndarray = np.all(digit | space | ~before, axis=1) & (
        (count == 0) | (last - first + 1 == count))  # no gap between the digits
    return plain


def _number(field: bytes) -> int | None:
    """A numeric field as ``tarfile.nti`` reads it; None for base-256 or unparsable ones."""
    if field[0] in (0o200, 0o377):
        return None
    end = field.find(b"\0")
    try:
        text = (field if end < 0 else field[:end]).decode("ascii")
        return int(text.strip() or "0", 8)
    except ValueError:  # UnicodeDecodeError included
        return None


def _text(field: bytes, encoding: str) -> str:
    end = field.find(b"\0")
    return (field if end < 0 else field[:end]).decode(encoding, "surrogateescape")
