"""Files written aside and renamed into place: a reader never sees a partial file.

One helper for every output of the package (corpora, true topics, stores, models, rectified
arrays, refinement's scratch files): write to a hidden name beside the target, in the same
directory (so the rename is atomic), rename it into place when the writing succeeded, and
remove it when it failed.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["TargetExistsError", "named_error", "temp_beside", "remove_path", "written_aside"]


class TargetExistsError(FileExistsError):
    """The target of :func:`written_aside` (``replace=False``) appeared while it was written."""


def temp_beside(path: str | os.PathLike[str], tag: str = "partial") -> str:
    """A fresh hidden name beside ``path``: ``DIR/.NAME.TAG-<12 hex digits>``. Nothing is
    created there; the caller makes a file or a directory of it."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.{tag}-{uuid.uuid4().hex[:12]}")


def remove_path(path: str | os.PathLike[str]) -> None:
    """Remove a file or a directory tree, if there is one (errors ignored)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.remove(path)
        except OSError:
            pass


@contextmanager
def written_aside(
    path: str | os.PathLike[str],
    *,
    tag: str = "partial",
    tmp: str | os.PathLike[str] | None = None,
    replace: bool = True,
) -> Iterator[str]:
    """Yield a temporary path beside ``path`` to write a file or a directory to; when the
    block ends without an error, rename it to ``path``, else remove it.

    Parameters
    ----------
    path : path
        The target.
    tag : str
        Part of the temporary name (:func:`temp_beside`): what it is, for debris collectors.
    tmp : path, optional
        Use this temporary path instead (in the same file system as ``path``).
    replace : bool
        Replace whatever is at ``path`` (a file atomically; a directory is removed first). With
        ``False``, raise :class:`TargetExistsError` if something appeared at ``path`` (the
        temporary path is removed).

    Examples
    --------
    >>> with written_aside("out.npy") as tmp, open(tmp, "wb") as fh:  # doctest: +SKIP
    ...     np.save(fh, array)
    """
    target = os.path.normpath(os.fspath(path))  # "m.zarr/" is m.zarr, not a name inside it
    aside = os.fspath(tmp) if tmp is not None else temp_beside(target, tag)
    try:
        yield aside
        _rename_into_place(aside, target, replace)
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise named_error(exc, target) from exc
    finally:
        if os.path.lexists(aside):
            remove_path(aside)


def named_error(exc: OSError, path: str) -> OSError:
    """``exc``, an error of writing that names no file (a full disk raised by ``write``, or
    numpy's ``N requested and M written`` of a short write), as the same error naming
    ``path``."""
    reason = exc.strerror
    if reason is None:  # raised with a message of its own: a short write, errno unknown
        reason = f"{exc} (a short write: is the disk full?)"
    out = OSError(exc.errno, reason, path)
    return out


def _rename_into_place(aside: str, target: str, replace: bool) -> None:
    if not replace:
        try:
            os.rename(aside, target)  # refuses a non-empty directory or a file there
        except OSError as exc:
            if os.path.lexists(target):
                raise TargetExistsError(target) from exc
            raise
        return
    if os.path.isdir(target) and not os.path.islink(target):
        _replace_directory(aside, target)
        return
    if os.path.isdir(aside) and os.path.lexists(target):
        os.remove(target)  # a directory cannot replace a file in one rename
    os.replace(aside, target)


def _replace_directory(aside: str, target: str) -> None:
    """Put the tree at ``aside`` in the place of the directory ``target``, never deleting
    inside ``target``: a process killed meanwhile leaves the old tree or the new one whole
    there, never a part of one (removing the old tree first left half a model when an
    update was killed during the removal). On Linux the two swap in one atomic step
    (``renameat2``'s ``RENAME_EXCHANGE``), and the old tree, now at ``aside``, goes with
    :func:`written_aside`'s clean-up; elsewhere the old tree is renamed aside, the new one
    into place, and the old one removed (``target`` is missing between the two renames)."""
    if _exchange(aside, target):
        return
    old = temp_beside(target, "replaced")
    os.rename(target, old)
    try:
        os.rename(aside, target)
    except BaseException:
        os.rename(old, target)
        raise
    remove_path(old)


#: ``renameat2``'s flag that swaps two paths atomically (Linux ≥ 3.15, glibc ≥ 2.28)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Swap the paths ``a`` and ``b`` atomically; False where the system or the file system
    cannot (then nothing changed)."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    return bool(renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b),
                          _RENAME_EXCHANGE) == 0)
