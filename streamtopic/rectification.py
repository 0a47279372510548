"""Rectification of the co-occurrence matrix (JSMF, the "rectified anchor word" algorithm).

The estimated co-occurrence matrix Q (V×V) is noisy: it is indefinite, of full rank, and may
have negative entries, while the model's Q = A R Aᵀ is positive semidefinite of rank K,
non-negative and sums to 1. Rectification (Lee, Bindel and Mimno 2015, joint stochastic matrix
factorization; the rectified anchor word algorithm) moves Q towards the intersection of

* A = {rank ≤ K, positive semidefinite}: projection by the top-K eigenpairs, negative
  eigenvalues set to 0;
* N = {entries sum to 1}: add (1 − ΣC)/V² to every entry;
* P = {entries ≥ 0}: max(C, 0).

Methods
-------
``"none"``
    The input, normalised to sum 1 (so ``out`` is comparable across methods).
``"ap"``
    Alternating projection, iterated ``n_iter`` times from C₀ = Q::

        (U, Λ)  = top-K eigenpairs of C_{t−1} (largest algebraic), Λ⁺ = max(Λ, 0)
        C_t     = max(U Λ⁺ Uᵀ + s_t, 0),      s_t = (1 − Σ U Λ⁺ Uᵀ) / V²

    and the output is C_T / ΣC_T. ``movement[t−1]`` is ‖C_t − C_{t−1}‖_F / ‖C_{t−1}‖_F,
    exactly (every entry of both matrices takes part).
``"dr"``
    Douglas–Rachford splitting between A and B = N ∩ P (the scaled simplex
    {C ≥ 0, ΣC = 1}, whose Euclidean projection is max(Y − τ, 0) with τ such that the
    result sums to 1), from z₀ = Q::

        L_k = Π_A(z_k)                          (top-K eigenpairs, as above)
        x_k = Π_B(2 L_k − z_k)                  (exact simplex projection)
        z_{k+1} = z_k + x_k − L_k

    for k = 0, …, T−1. The output is the last *B-shadow* x_{T−1} (non-negative and summing to
    1 by construction; it is divided by its sum once more against rounding). ``movement[k]``
    is the relative change of the governing sequence, ‖z_{k+1} − z_k‖_F / ‖z_k‖_F
    = ‖x_k − L_k‖_F / ‖z_k‖_F (the fixed-point residual of DR), exactly. The threshold τ
    is exact on both paths: in memory by Michelot's active-set iteration; out of core by
    histogram passes (Σ max(Y − τ, 0) is known exactly at every bin edge) that narrow a
    bracket until its bin holds few values, which are gathered and solved for exactly.

Two paths compute the same iterations (to rounding):

* **in memory** (small V): Q is loaded densely; the AP iterates are formed only for the
  output: in each pass their blocks are rebuilt from the factors, in cache-sized panels,
  in a thread pool (BLAS pinned to one thread, which on a loaded machine is much faster
  than threaded BLAS); the DR iterate is a dense array;
* **out of core** (large V): every pass over a matrix is a Dask graph with one task per block
  (I ≤ J) of the upper triangle (the matrices are symmetric), the AP iterate is implicit,
  C_t = max(G Gᵀ + s, 0) with G = U Λ⁺^{1/2} (V×K) in a scratch zarr array that the tasks
  read; the DR iterate z (of full rank) lives in a scratch zarr array on disk. Objects of
  size V×K or V×m move between the client and the workers only through scratch zarr arrays.
  Memory is bounded by a few blocks per worker thread plus the eigensolver's basis in the
  client (V×m blocks, at most ``KRYLOV_BYTES``).

On both paths AP's movement for iteration t is measured in the first pass of iteration
t + 1, which forms the blocks of C_t anyway (and then those of C_{t−1} alongside); that of
the last iteration when C_T is formed for the output. DR's is measured in its update.

The top-K eigenpairs come from passes Y = C X over the matrix (X: V×m, m = K + 10): block
Krylov with Rayleigh–Ritz (see ``_Eigensolver``). The first pass of an eigenproblem is
Rayleigh–Ritz on the warm start X alone; each further pass adds the newest product's new
directions to the basis. It stops when every kept Ritz pair has a residual
‖C u − λ u‖ ≤ 1e-7 · max|λ|. The first eigenproblem starts from a Gaussian basis (seeded:
results are deterministic under ``seed``); each later one from the power step of the last
Ritz vectors, so it typically needs two passes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from numbers import Integral
from typing import Any, cast

import numpy as np

from ._io import written_aside
from ._locking import FileLock, owner_record
from ._params import Constraint, Interval, Options, check_param, validated
from ._scratch import collect as _collect_debris
from ._scratch import hold as _hold
from ._scratch import owned_dir as _owned_dir
from ._scratch import owner_of as _owner_of
from ._scratch import release_owner as _release_owner
from .cluster import MemoryBudget, blas_pinned, compute, current_client, usable_cores
from .passes import PassGraph, scratch_array, upper_blocks
from .progress import Stage
from .store import DEFAULT_CHUNK, CooccurrenceStore, checksum_codecs

__all__ = ["RECTIFY_METHODS", "RectifyResult", "rectify"]

RECTIFY_METHODS = ("none", "ap", "dr")

log = logging.getLogger("streamtopic")

OVERSAMPLE = 10  # basis vectors of the eigensolver beyond K
EIG_TOL = 1e-5  # relative residual of the Ritz pairs that ends an eigen step
EIG_TOL_STEP = 0.1  # AP: … or this fraction of the last iteration's movement, if larger
EIG_TOL_FIRST = 1e-2  # AP: … and at most this (the first iteration)
MAX_STEPS = 30  # passes per eigen step at most (warns when reached)
MAX_BLOCKS = 8  # blocks of the Krylov basis before a restart
KRYLOV_BYTES = 128 * 2**20  # client memory for the basis and its products
DENSE_COPIES = 6  # V×V float64 arrays the in-memory path may hold at once (DR)
AP_DENSE_COPIES = 3  # the same for AP: the input, the result and transient blocks
DENSE_BLOCK = 1024  # block size of the in-memory path's tasks (rows panelled within)
PANEL = 256  # rows of the panels a block is processed in (a few MB: cache sized)
HIST_BINS = 4096  # bins of one histogram pass of the out-of-core simplex threshold
GATHER_MAX = 1 << 16  # values gathered to the client to solve the threshold exactly
MAX_REFINE = 6  # histogram refinements before the threshold is solved by interpolation

# stats vectors: [Σ cur, ‖cur‖², ‖cur − prev‖², ‖prev‖², min cur, max cur]
_SUM, _SQ, _DIFF, _PREVSQ, _MIN, _MAX = range(6)


@dataclass
class RectifyResult:
    """What :func:`rectify` did.

    Attributes
    ----------
    method : str
        ``"none"``, ``"ap"`` or ``"dr"``.
    n_iter : int
        Iterations run.
    movement : list of float, length ``n_iter``
        Per iteration, the relative Frobenius change of the iterate: for AP
        ‖C_t − C_{t−1}‖_F / ‖C_{t−1}‖_F (C₀ = Q); for DR ‖z_{k+1} − z_k‖_F / ‖z_k‖_F. Exact.
    seconds : list of float, length ``n_iter``
        Wall time per iteration (its passes over the matrix and the client's work).
    eigenvalues : ndarray of shape (K,)
        The eigenvalues kept by the last projection onto rank-K PSD matrices (negative ones
        set to 0), in decreasing order; shape (0,) when none was made.
    in_memory : bool
        Whether the in-memory path ran.
    path : str
        The zarr array written (V×V float64, chunks as Q's).
    passes : list of int, length ``n_iter``
        Passes over a V×V matrix per iteration (eigen products, and for out-of-core DR the
        threshold and update passes).
    total_seconds : float
        Wall time of the whole call, reading Q and writing the result included.
    array : ndarray of shape (V, V), optional
        The result in memory (in-memory path with ``keep_array`` only).
    """

    method: str
    n_iter: int
    movement: list[float]
    seconds: list[float]
    eigenvalues: np.ndarray
    in_memory: bool
    path: str | None
    passes: list[int] = field(default_factory=list)
    total_seconds: float = 0.0
    array: np.ndarray | None = None


# ============================================================================ block kernels
#
# A *source* says how to obtain a block (rows r, columns q) of a matrix. Sources are small
# tuples, cheap to pickle (the factors travel as zarr paths out of core):
#   ("input",)                  the block handed to the task (a block of the input Q)
#   ("dense", array)            a slice of an in-memory array (in-memory path only)
#   ("zarr", path)              a read from a V×V zarr array
#   ("lowrank", G, s, clip)     G_r G_qᵀ + s, then max(·, 0) if clip; G an array or a zarr path

#: A source (above), in type hints.
Source = tuple[Any, ...]


def _slice(i: int, c: int, V: int) -> slice:
    return slice(i * c, min(V, (i + 1) * c))


def _rows(obj: Any, sl: slice) -> np.ndarray:
    """Rows ``sl`` of an in-memory array or of a zarr array given by its path."""
    if isinstance(obj, str):
        import zarr

        return np.asarray(zarr.open_array(obj, mode="r")[sl], dtype=np.float64)
    return cast("np.ndarray", obj[sl])


def _form(src: Source, qblk: Any, r: slice, q: slice, writable: bool = False) -> np.ndarray:
    """Block (r, q) of the matrix ``src``; a fresh array when ``writable``."""
    kind = src[0]
    if kind == "lowrank":
        return _Panels(src, None, r, q).panel(slice(0, None))
    if kind == "input":
        B = np.asarray(qblk, dtype=np.float64)
    elif kind == "dense":
        B = src[1][r, q]
    elif kind == "zarr":
        import zarr

        return np.asarray(zarr.open_array(src[1], mode="r")[r, q], dtype=np.float64)
    else:  # pragma: no cover
        raise ValueError(f"unknown source {kind!r}")
    return np.array(B, dtype=np.float64, order="C") if writable else B


def _sq(B: np.ndarray) -> float:
    """‖B‖_F² without a temporary when B is contiguous."""
    if B.flags.c_contiguous:
        d = B.ravel()
        return float(np.dot(d, d))
    return float(np.einsum("ij,ij->", B, B))


def _new_stats() -> np.ndarray:
    return np.array([0.0, 0.0, 0.0, 0.0, np.inf, -np.inf])


def _combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = a + b
    out[_MIN] = min(a[_MIN], b[_MIN])
    out[_MAX] = max(a[_MAX], b[_MAX])
    return cast("np.ndarray", out)


def _combine_all(parts: Sequence[np.ndarray]) -> np.ndarray:
    acc = _new_stats()
    for p in parts:
        acc = _combine(acc, p)
    return acc


class _Panels:
    """Row panels of block (r, q) of a source. Array-backed sources are read once and
    sliced; a low-rank source forms each panel with one GEMM, the shift s folded in as an
    extra column ([G_r, a·1] [G_q, b·1]ᵀ with a·b = s), then clips it in place, so a panel
    is made in cache and never in memory-bound passes over the whole block."""

    def __init__(self, src: Source, qblk: Any, r: slice, q: slice) -> None:
        self.kind = src[0]
        if self.kind == "lowrank":
            _, G, s, self.clip = src
            left, right = _rows(G, r), _rows(G, q)
            if s != 0.0:
                a = math.sqrt(abs(s))
                left = np.hstack([left, np.full((left.shape[0], 1), a)])
                right = np.hstack([right, np.full((right.shape[0], 1), math.copysign(a, s))])
            self.left, self.right_t = left, np.ascontiguousarray(right.T)
        else:
            self.block = _form(src, qblk, r, q)

    def panel(self, rows: slice, writable: bool = False) -> np.ndarray:
        if self.kind == "lowrank":
            B = self.left[rows] @ self.right_t
            if self.clip:
                np.maximum(B, 0.0, out=B)
            return cast("np.ndarray", B)
        B = self.block[rows]
        return np.array(B, dtype=np.float64, order="C") if writable else B


def _product_block(
    qblk: Any, I: int, J: int, V: int, c: int, cur: Source, prev: Source | None, X: Any,
    want: tuple[str, ...],
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray]:
    """Block (I, J), I ≤ J, of the symmetric matrix ``cur``: its share of ``cur @ X``.

    Returns ``(B X_J, Bᵀ X_I or None on the diagonal, stats)``: B X_J goes to rows I, Bᵀ X_I
    to rows J. Stats (see ``_SUM`` …) count the block twice off the diagonal (for its mirror
    image); ``want`` picks ``"sum"``, ``"sumsq"``, ``"minmax"``, ``"diff"`` (needs ``prev``).
    The block is processed in panels of ``PANEL`` rows.
    """
    r, q = _slice(I, c, V), _slice(J, c, V)
    nr = r.stop - r.start
    w = 1.0 if I == J else 2.0
    cb = _Panels(cur, qblk, r, q)
    pb = _Panels(prev, qblk, r, q) if prev is not None and "diff" in want else None
    PI = PJ = XI = XJ = None
    if X is not None:
        XJ = _rows(X, q)
        PI = np.empty((nr, XJ.shape[1]))
        if I != J:
            XI = _rows(X, r)
            PJ = np.zeros((q.stop - q.start, XJ.shape[1]))
    st = _new_stats()
    for a in range(0, nr, PANEL):
        rows = slice(a, min(nr, a + PANEL))
        B = cb.panel(rows)
        if PI is not None:
            PI[rows] = B @ XJ
            if PJ is not None:
                assert XI is not None
                PJ += B.T @ XI[rows]
        if "sum" in want:
            st[_SUM] += w * float(B.sum())
        if "sumsq" in want:
            st[_SQ] += w * _sq(B)
        if "minmax" in want:
            st[_MIN] = min(st[_MIN], float(B.min()))
            st[_MAX] = max(st[_MAX], float(B.max()))
        if pb is not None:
            P = pb.panel(rows, writable=True)
            st[_PREVSQ] += w * _sq(P)
            np.subtract(P, B, out=P)
            st[_DIFF] += w * _sq(P)
    return PI, PJ, st


def _reduce_row(
    I: int, V: int, c: int, ypath: str, which: Sequence[int], *parts: Any
) -> np.ndarray:
    """Sum the contributions to rows I of ``C @ X``, ``parts[k][which[k]]``, write them to the
    scratch array ``ypath`` (this task is the only writer of that chunk) and return the
    stats of the blocks owned by row I (those with J ≥ I, side 0)."""
    import zarr

    Y = None
    st = _new_stats()
    for k, part in zip(which, parts, strict=True):
        blk = part[k]
        if Y is None:
            Y = np.array(blk, dtype=np.float64)
        else:
            Y += blk
        if k == 0:
            st = _combine(st, part[2])
    assert Y is not None  # (every row block receives a share)
    zarr.open_array(ypath, mode="r+")[_slice(I, c, V)] = Y
    return st


def _write_block(
    qblk: Any, I: int, J: int, V: int, c: int, cur: Source, scale: float, path: str
) -> None:
    """Write block (I, J) of ``scale · cur`` and its mirror (J, I) to the zarr array ``path``
    (the only writer of both chunks)."""
    import zarr

    r, q = _slice(I, c, V), _slice(J, c, V)
    B = _form(cur, qblk, r, q, writable=True)
    if scale != 1.0:
        B *= scale
    arr = zarr.open_array(path, mode="r+")
    arr[r, q] = B
    if I != J:
        arr[q, r] = B.T


def _dr_shadow(
    qblk: Any, I: int, J: int, V: int, c: int, z: Source, G: str
) -> tuple[np.ndarray, np.ndarray]:
    """Blocks (I, J) of z and of L = G Gᵀ."""
    r, q = _slice(I, c, V), _slice(J, c, V)
    Z = _form(z, qblk, r, q)
    L = _form(("lowrank", G, 0.0, False), None, r, q)
    return Z, L


def _dr_hist_block(
    qblk: Any, I: int, J: int, V: int, c: int, z: Source, G: str, lo: float, width: float,
    nbins: int, gather: int,
) -> tuple[np.ndarray, ...]:
    """Histogram of Y = 2 G Gᵀ − z on block (I, J) (counted twice off the diagonal).

    Bins are (lo + b·width, lo + (b+1)·width], b < ``nbins``. Returns (counts, sums, count
    above, sum above) per bin; with ``gather`` ≥ 0, instead the values of bin ``gather`` and
    their multiplicities. The bin of a value is computed identically in both modes.
    """
    Z, L = _dr_shadow(qblk, I, J, V, c, z, G)
    L *= 2.0
    L -= Z
    y = L.ravel()
    w = 1.0 if I == J else 2.0
    t = y - lo
    t /= width
    if gather >= 0:
        sel = (t > gather) & (t <= gather + 1)
        inr = np.flatnonzero(sel)
        idx = np.ceil(t[inr]).astype(np.int64) - 1
        keep = inr[idx == gather]
        return y[keep].copy(), np.full(keep.size, w)
    above = t > nbins
    n_above = w * float(np.count_nonzero(above))
    s_above = w * float(y.sum(where=above))
    inr = np.flatnonzero((t > 0) & ~above)
    idx = np.ceil(t[inr]).astype(np.int64) - 1
    np.clip(idx, 0, nbins - 1, out=idx)
    counts = w * np.bincount(idx, minlength=nbins).astype(np.float64)
    sums = w * np.bincount(idx, weights=y[inr], minlength=nbins)
    return counts, sums, np.array([n_above, s_above])


def _dr_update_block(
    qblk: Any, I: int, J: int, V: int, c: int, z: Source, G: str, tau: float, path: str,
    final: bool, scale: float,
) -> np.ndarray:
    """One DR step on block (I, J): x = max(2L − z − τ, 0); writes z + x − L (``final``
    False) or ``scale`` · x (``final``) to ``path``, block and mirror. Returns stats:
    [Σ written, ‖z‖², ‖x − L‖², 0, min written, max written]."""
    import zarr

    Z, L = _dr_shadow(qblk, I, J, V, c, z, G)
    w = 1.0 if I == J else 2.0
    x = 2.0 * L
    x -= Z
    x -= tau
    np.maximum(x, 0.0, out=x)
    st = _new_stats()
    st[_SQ] = w * _sq(Z)
    if final:
        np.subtract(x, L, out=L)
        st[_DIFF] = w * _sq(L)
        res = x
        if scale != 1.0:
            res *= scale
    else:
        np.subtract(x, L, out=x)  # x − L
        st[_DIFF] = w * _sq(x)
        x += Z
        res = x
    st[_SUM] = w * float(res.sum())
    st[_MIN], st[_MAX] = float(res.min()), float(res.max())
    arr = zarr.open_array(path, mode="r+")
    r, q = _slice(I, c, V), _slice(J, c, V)
    arr[r, q] = res
    if I != J:
        arr[q, r] = res.T
    return st


def _collect(*items: Any) -> list[Any]:
    return list(items)


# ============================================================================ engines


class _DenseEngine:
    """Passes over in-memory matrices, block by block in a thread pool."""

    in_memory = True

    def __init__(self, Q: np.ndarray, pool: ThreadPoolExecutor, label: str) -> None:
        self.Q = Q
        self.V = Q.shape[0]
        self.c = min(self.V, DENSE_BLOCK)
        self.nb = -(-self.V // self.c)
        self.pool = pool
        self.passes = 0
        self.input: Source = ("dense", Q)
        self.label = label

    def _blocks(self) -> list[tuple[int, int]]:
        return upper_blocks(self.nb)

    def products(
        self, cur: Source, prev: Source | None, X: np.ndarray | None, want: tuple[str, ...],
        label: str = "",
    ) -> tuple[np.ndarray | None, np.ndarray]:
        V, c = self.V, self.c
        jobs = self._blocks()
        res = list(self.pool.map(
            lambda ij: _product_block(None, ij[0], ij[1], V, c, cur, prev, X, want), jobs
        ))
        self.passes += 1
        Y = None if X is None else np.zeros((V, X.shape[1]))
        for (I, J), (PI, PJ, _) in zip(jobs, res, strict=True):
            if Y is not None and PI is not None:
                Y[_slice(I, c, V)] += PI
                if PJ is not None:
                    Y[_slice(J, c, V)] += PJ
        return Y, _combine_all([r[2] for r in res])

    def lowrank(self, G: np.ndarray, s: float, clip: bool = True) -> Source:
        return ("lowrank", np.ascontiguousarray(G), float(s), clip)

    def release(self, src: Source | None) -> None:
        pass

    def materialize(
        self, cur: Source, prev: Source | None, out: np.ndarray
    ) -> np.ndarray:
        """Form ``cur`` into ``out`` (V×V); stats with the sum and, given ``prev``, the
        change from it."""
        V, c = self.V, self.c

        def job(ij: tuple[int, int]) -> np.ndarray:
            I, J = ij
            r, q = _slice(I, c, V), _slice(J, c, V)
            B = _form(cur, None, r, q)
            out[r, q] = B
            if I != J:
                out[q, r] = B.T
            w = 1.0 if I == J else 2.0
            st = _new_stats()
            st[_SUM] = w * float(B.sum())
            if prev is not None:
                P = _form(prev, None, r, q, writable=True)
                st[_PREVSQ] = w * _sq(P)
                np.subtract(P, B, out=P)
                st[_DIFF] = w * _sq(P)
            return st

        stats = list(self.pool.map(job, self._blocks()))
        self.passes += 1
        return _combine_all(stats)

    def rows_map(self, fn: Callable[[slice], Any]) -> list[Any]:
        """``fn`` on row panels of the V rows, in the pool."""
        step = max(1, self.c)
        panels = [slice(i, min(self.V, i + step)) for i in range(0, self.V, step)]
        return list(self.pool.map(fn, panels))


class _DaskEngine:
    """Passes over the input Q (a Dask array) and implicit or scratch matrices, as Dask
    graphs (:class:`~streamtopic.passes.PassGraph`) with one task per block of the upper
    triangle; a task of a pass that reads the input receives its block of Q."""

    in_memory = False

    def __init__(self, Q: Any, scratch: str, progress: bool, label: str) -> None:
        self.Q = Q
        self.V = Q.shape[0]
        self.c = int(Q.chunks[0][0])
        self.nb = len(Q.chunks[0])
        self.scratch = scratch
        self.progress = progress
        self.label = label
        self.passes = 0
        self.input: Source = ("input",)
        self._qblocks: Any = None
        self._n = 0

    # ------------------------------------------------------------------ scratch

    def _name(self, stem: str) -> str:
        self._n += 1
        return os.path.join(self.scratch, f"{stem}{self._n:05d}")

    def save(self, stem: str, arr: np.ndarray) -> str:
        """Write a V×k array to a new scratch zarr array (chunks of c rows); its path."""
        path = self._name(stem)
        scratch_array(path, arr.shape, (self.c, arr.shape[1]), data=arr)
        return path

    def _empty(self, stem: str, width: int | None) -> str:
        """A new scratch zarr array, V×V (``width`` None) or V×width, chunked by row blocks
        (and column blocks); its path."""
        path = self._name(stem)
        if width is None:
            scratch_array(path, (self.V, self.V), (self.c, self.c))
        else:
            scratch_array(path, (self.V, width), (self.c, width))
        return path

    @staticmethod
    def drop(path: str | None) -> None:
        if path:
            shutil.rmtree(path, ignore_errors=True)

    def lowrank(self, G: np.ndarray, s: float, clip: bool = True) -> Source:
        return ("lowrank", self.save("G", G), float(s), clip)

    def release(self, src: Source | None) -> None:
        """Remove the scratch arrays behind a source no longer needed."""
        if src is not None and src[0] in ("lowrank", "zarr") and isinstance(src[1], str):
            self.drop(src[1])

    # ------------------------------------------------------------------ graphs

    def _blocks(
        self, fn: Callable[..., Any], srcs: Sequence[Source | None], *args: Any
    ) -> tuple[PassGraph, Any]:
        """A new pass: a task per block (I, J), I ≤ J, running
        ``fn(block, I, J, V, c, *args)``, where ``block`` is block (I, J) of the input Q
        when one of the sources ``srcs`` is the input, else None."""
        g = PassGraph(self.nb)
        needs_q = any(s is not None and s[0] == "input" for s in srcs)
        deps: list[Any] = []
        if needs_q:
            if self._qblocks is None:
                self._qblocks = self.Q.to_delayed()
            deps = [self._qblocks.flat[0]]  # (they share one graph)
        qblocks, V, c = self._qblocks, self.V, self.c

        def task_args(I: int, J: int) -> tuple[Any, ...]:
            return (qblocks[I, J].key if needs_q else None, I, J, V, c, *args)

        return g, g.blocks("st-rectify-parts", fn, task_args, deps)

    def _run(self, g: PassGraph, layer: Any, label: str) -> list[Any]:
        """Compute a pass: the results of the tasks of ``layer``, in order."""
        (res,) = compute(g.result(g.total("st-rectify", _collect, layer)),
                         progress=self.progress, label=f"{self.label}: {label}")
        self.passes += 1
        return cast("list[Any]", res)

    def products(
        self, cur: Source, prev: Source | None, X: np.ndarray | None, want: tuple[str, ...],
        label: str = "",
    ) -> tuple[np.ndarray | None, np.ndarray]:
        import zarr

        xpath = None if X is None else self.save("X", X)
        g, parts = self._blocks(_product_block, (cur, prev), cur, prev, xpath, want)
        if X is None:
            stats = self._run(g, parts, label or "stats")
            return None, _combine_all([t[2] for t in stats])
        ypath = self._empty("Y", X.shape[1])
        # the shares of rows I in the order of Q's column blocks, as they were always summed
        rows = g.row_sums("st-rectify-rows", parts, _reduce_row,
                          lambda I: (I, self.V, self.c, ypath), column_order=True)
        stats = self._run(g, rows, label or "products")
        Y = np.asarray(zarr.open_array(ypath, mode="r")[:])
        self.drop(xpath)
        self.drop(ypath)
        return Y, _combine_all(stats)

    def write(self, cur: Source, scale: float, path: str, label: str) -> None:
        self._run(*self._blocks(_write_block, (cur,), cur, float(scale), path), label)

    def dr_hist(
        self, z: Source, G: str, lo: float, width: float, gather: int, label: str
    ) -> list[Any]:
        return self._run(*self._blocks(_dr_hist_block, (z,), z, G, lo, width, HIST_BINS,
                                       gather), label)

    def dr_update(
        self, z: Source, G: str, tau: float, path: str, final: bool, scale: float, label: str
    ) -> np.ndarray:
        stats = self._run(*self._blocks(_dr_update_block, (z,), z, G, tau, path, final,
                                        scale), label)
        return _combine_all(stats)


# ============================================================================ eigensolver


class _Eigensolver:
    """Top-K eigenpairs (largest algebraic) of a symmetric matrix seen only through passes
    Y = C X: block Krylov with Rayleigh–Ritz and thick restarts, warm-started.

    ``solve(apply)`` calls ``apply(X, step)`` → C X once per pass. The basis B = [X₀, X₁, …]
    (orthonormal, at most ``max_blocks`` blocks of m = K + ``OVERSAMPLE`` columns) and the
    products C B are kept in the client. After each pass: Rayleigh–Ritz on span(B)
    (T = Bᵀ C B, from the stored products), residuals ‖C u − λ u‖ of the top K Ritz pairs
    (from C B, no extra pass); it stops when every pair with λ > 0 (the ones the projection
    keeps) has a residual ≤ ``EIG_TOL`` · max|λ|. Otherwise the next block is the part of
    the newest product orthogonal to B (two Gram–Schmidt sweeps); when B is full, it
    restarts from the top m Ritz vectors, whose products are known. The first pass is thus
    Rayleigh–Ritz on the warm start alone, the second on [X, C X] (⊇ a power step), and so
    on. The next call starts from orth(C U_m), U_m the top m Ritz vectors: one more power
    step for free.
    """

    def __init__(self, V: int, K: int, rng: np.random.Generator) -> None:
        self.K = K
        self.m = m = min(K + OVERSAMPLE, V)
        self.max_blocks = max(1, min(MAX_BLOCKS, V // m, KRYLOV_BYTES // (16 * V * m)))
        self.X = np.linalg.qr(rng.standard_normal((V, m)))[0]

    @staticmethod
    def _orth(Z: np.ndarray, B: np.ndarray) -> np.ndarray:
        """An orthonormal basis of the part of span(Z) orthogonal to span(B) (B
        orthonormal); sweeps again after normalising, so near-dependent columns (an
        exhausted Krylov space) still give vectors orthogonal to B."""
        for _ in range(2):
            Z = Z - B @ (B.T @ Z)
        Z = np.linalg.qr(Z)[0]
        Z = Z - B @ (B.T @ Z)
        return np.linalg.qr(Z)[0]

    def solve(
        self, apply: Callable[[np.ndarray, int], np.ndarray],
        tol: Callable[[], float] = lambda: EIG_TOL,
    ) -> tuple[np.ndarray, np.ndarray, int, bool]:
        """Returns (λ (K,) descending, U (V×K), passes, converged). ``tol()`` is the relative
        residual to reach, asked after every pass (a pass may change it)."""
        K, m = self.K, self.m
        V = self.X.shape[0]
        cap = self.max_blocks * m
        B = np.empty((V, cap))
        CB = np.empty((V, cap))
        T = np.empty((cap, cap))
        B[:, :m] = self.X
        d = m  # columns of B in use
        done = 0  # columns of C B known
        theta = W = None
        ok = False
        step = 0
        for step in range(MAX_STEPS):
            Y = apply(np.ascontiguousarray(B[:, done:d]), step)
            if not np.all(np.isfinite(Y)):
                raise ValueError("Q: contains NaN or infinite values")
            CB[:, done:d] = Y
            T[:d, done:d] = B[:, :d].T @ Y
            T[done:d, :done] = T[:done, done:d].T
            done = d
            Ts = T[:d, :d]
            theta, W = np.linalg.eigh(0.5 * (Ts + Ts.T))
            theta, W = theta[::-1], W[:, ::-1]
            Wk = W[:, :K]
            U = B[:, :d] @ Wk
            R = CB[:, :d] @ Wk - U * theta[:K]
            res = np.sqrt(np.einsum("ij,ij->j", R, R))
            scale = float(np.abs(theta).max())
            keep = theta[:K] > 0
            ok = scale == 0 or bool(np.all(res[keep] <= tol() * scale))
            if ok or step == MAX_STEPS - 1:
                break
            if d + m <= cap:  # extend the Krylov space by the newest product
                B[:, d:d + m] = self._orth(Y, B[:, :d])
                d += m
                continue
            # thick restart from the top m Ritz vectors (their products are known)
            Wm = W[:, :m]
            Um, CUm = B[:, :d] @ Wm, CB[:, :d] @ Wm
            B[:, :m], CB[:, :m] = Um, CUm
            T[:m, :m] = np.diag(theta[:m])
            if self.max_blocks == 1:  # no room: a plain power step
                B[:, :m] = np.linalg.qr(CUm)[0]
                d, done = m, 0
            else:
                B[:, m:2 * m] = self._orth(CUm, Um)
                d, done = 2 * m, m
        assert theta is not None and W is not None
        CUm = CB[:, :done] @ W[:, :m]
        self.X = np.linalg.qr(CUm)[0]
        return theta[:K].copy(), B[:, :done] @ W[:, :K], step + 1, ok


# ============================================================================ iterations


def _rel(st: np.ndarray) -> float:
    """‖cur − prev‖ / ‖prev‖ from stats."""
    den = math.sqrt(max(st[_PREVSQ], 0.0))
    num = math.sqrt(max(st[_DIFF], 0.0))
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def _factor(theta: np.ndarray, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lam = np.maximum(theta, 0.0)
    return U * np.sqrt(lam), lam


class _Run:
    """Bookkeeping shared by the iterations: timings, passes, movement, logging."""

    def __init__(self, method: str, n_iter: int, where: str) -> None:
        self.method = method
        self.n_iter = n_iter
        self.where = where
        self.movement: list[float] = []
        self.seconds: list[float] = []
        self.passes: list[int] = []
        self.eigenvalues = np.zeros(0)

    def done(self, t: int, seconds: float, passes: int, converged: bool) -> None:
        self.seconds.append(seconds)
        self.passes.append(passes)
        if not converged:
            log.warning("rectify %s: iteration %d: eigenpairs not converged in %d passes "
                        "(tolerance %.0e)", self.method, t, MAX_STEPS, EIG_TOL)

    def moved(self, t: int, value: float) -> None:
        self.movement.append(value)
        log.info("rectify %s (%s): iteration %d/%d: movement %.3e, %.2f s, %d passes",
                 self.method, self.where, t, self.n_iter, value, self.seconds[t - 1],
                 self.passes[t - 1])


def _ap(engine: Any, K: int, n_iter: int, rng: np.random.Generator, run: _Run) -> tuple[Any, ...]:
    """Alternating projection; returns (cur, prev): the sources of C_T and C_{T−1}, whose
    movement is still to be measured."""
    V = engine.V
    eig = _Eigensolver(V, K, rng)
    cur: Source = engine.input
    prev: Source | None = None
    for t in range(1, n_iter + 1):
        t0, p0 = time.perf_counter(), engine.passes
        state = {"cur": cur, "prev": prev}

        def apply(
            X: np.ndarray, step: int, t: int = t, state: dict[str, Any] = state
        ) -> np.ndarray:
            if step == 0 and state["prev"] is not None:
                # the movement of iteration t − 1, in the first pass over its result
                Y, st = engine.products(state["cur"], state["prev"], X, ("diff",),
                                        f"iteration {t}, pass 1")
                run.moved(t - 1, _rel(st))
                return cast("np.ndarray", Y)
            Y, _ = engine.products(state["cur"], None, X, (), f"iteration {t}, pass {step + 1}")
            return cast("np.ndarray", Y)

        last = t == n_iter
        def tol(last: bool = last) -> float:
            return _ap_tol(run.movement, last)

        theta, U, _, ok = eig.solve(apply, tol)
        G, lam = _factor(theta, U)
        run.eigenvalues = lam
        total = float(np.square(G.sum(axis=0)).sum())  # Σ G Gᵀ = ‖Gᵀ1‖²
        s = (1.0 - total) / float(V) ** 2
        engine.release(prev)
        prev, cur = cur, engine.lowrank(G, s)
        run.done(t, time.perf_counter() - t0, engine.passes - p0, ok)
    return cur, prev


def _ap_tol(movement: Sequence[float], last: bool) -> float:
    """Eigen tolerance of an AP iteration: ``EIG_TOL_STEP`` times the last movement (the
    projection need not be more exact than the step it takes; "inexact" AP), never below
    ``EIG_TOL`` nor above ``EIG_TOL_FIRST`` (the first iteration, from a random basis). The
    last iteration, whose projection is the result, is solved to ``EIG_TOL``."""
    if last:
        return EIG_TOL
    if not movement:
        return EIG_TOL_FIRST
    return float(min(EIG_TOL_FIRST, max(EIG_TOL, EIG_TOL_STEP * movement[-1])))


def _simplex_tau_dense(y: np.ndarray) -> float:
    """τ with Σ max(y − τ, 0) = 1, exactly (Michelot's active-set iteration, from below)."""
    y = y.ravel()
    tau = (float(y.sum()) - 1.0) / y.size
    for _ in range(10_000):
        mask = y > tau
        cnt = int(np.count_nonzero(mask))
        if cnt == 0:
            break
        new = (float(y.sum(where=mask)) - 1.0) / cnt
        if new <= tau:
            break
        tau = new
    return tau


def _solve_tau(values: np.ndarray, weights: np.ndarray, s_above: float, n_above: float) -> float:
    """τ with s_above − τ n_above + Σ w max(v − τ, 0) = 1 (the values above the bracket
    are summarised by their sum and count)."""
    order = np.argsort(values)[::-1]
    v, w = values[order], weights[order]
    S = s_above + np.concatenate([[0.0], np.cumsum(w * v)])
    N = n_above + np.concatenate([[0.0], np.cumsum(w)])
    upper = np.concatenate([[np.inf], v])  # with j values active, τ ≤ v_{j}
    lower = np.concatenate([v, [-np.inf]])  # and τ ≥ v_{j+1}
    best, best_err = None, np.inf
    for j in range(len(S)):
        if N[j] <= 0:
            continue
        tau = (S[j] - 1.0) / N[j]
        err = max(lower[j] - tau, tau - upper[j], 0.0)
        if err == 0.0:
            return float(tau)
        if err < best_err:
            best, best_err = float(tau), err
    if best is None:
        raise ValueError("Q: cannot normalise (no positive mass)")
    return best


def _simplex_tau_ooc(engine: _DaskEngine, z: Source, G: str, lo: float, hi: float,
                     label: str) -> float:
    """τ of the simplex projection of Y = 2 G Gᵀ − z, out of core: histogram passes narrow a
    bracket [lo, hi] ∋ τ (f(τ) = Σ max(Y − τ, 0) is known exactly at every bin edge), then
    the values of the last bin are gathered and τ is solved exactly."""
    for it in range(MAX_REFINE + 4):
        width = (hi - lo) / HIST_BINS
        parts = engine.dr_hist(z, G, lo, width, -1, f"{label}, threshold pass {it + 1}")
        counts = np.sum([p[0] for p in parts], axis=0)
        sums = np.sum([p[1] for p in parts], axis=0)
        n_above = float(sum(p[2][0] for p in parts))
        s_above = float(sum(p[2][1] for p in parts))
        Ns = n_above + np.concatenate([np.cumsum(counts[::-1])[::-1], [0.0]])
        Ss = s_above + np.concatenate([np.cumsum(sums[::-1])[::-1], [0.0]])
        edges = lo + width * np.arange(HIST_BINS + 1)
        F = Ss - edges * Ns  # f at the edges, decreasing
        if F[0] < 1.0:  # the bracket's lower end was not low enough: widen downwards
            lo, hi = lo - 2.0 * (hi - lo), lo
            continue
        if F[-1] >= 1.0:  # the upper end was too low: widen upwards
            lo, hi = hi, hi + 2.0 * (hi - lo)
            continue
        b = int(np.flatnonzero(F >= 1.0)[-1])
        if counts[b] <= GATHER_MAX:
            got = engine.dr_hist(z, G, lo, width, b, f"{label}, threshold gather")
            vals = np.concatenate([g[0] for g in got]) if got else np.zeros(0)
            wts = np.concatenate([g[1] for g in got]) if got else np.zeros(0)
            return _solve_tau(vals, wts, float(Ss[b + 1]), float(Ns[b + 1]))
        if it >= MAX_REFINE:
            # the bin is below the resolution of float64: its values are equal to rounding
            mid = np.array([0.5 * (edges[b] + edges[b + 1])])
            return _solve_tau(mid, np.array([counts[b]]), float(Ss[b + 1]), float(Ns[b + 1]))
        lo, hi = float(edges[b]), float(edges[b + 1])
    raise RuntimeError("rectify: the simplex threshold did not converge")  # pragma: no cover


def _dr_dense(engine: _DenseEngine, K: int, n_iter: int, rng: np.random.Generator, run: _Run,
              z: np.ndarray) -> np.ndarray:
    """Douglas–Rachford in memory; ``z`` (the symmetric input, owned) is overwritten. Returns
    the last B-shadow x_{T−1}."""
    V = engine.V
    eig = _Eigensolver(V, K, rng)
    a = np.empty_like(z)
    b = np.empty_like(z)
    zsrc = ("dense", z)
    for k in range(n_iter):
        t0, p0 = time.perf_counter(), engine.passes
        G, ok = _dr_factor(eig, _z_products(engine, zsrc, k), run)
        engine.materialize(engine.lowrank(G, 0.0, clip=False), None, a)  # L
        zz = engine.rows_map(partial(_dr_rows_in, a, b, z))
        tau = _simplex_tau_dense(b)
        last = k == n_iter - 1
        dd = engine.rows_map(partial(_dr_rows_out, a, b, z, tau, last))
        run.done(k + 1, time.perf_counter() - t0, engine.passes - p0 + 1, ok)
        norm = math.sqrt(sum(zz))
        run.moved(k + 1, math.sqrt(sum(dd)) / norm if norm > 0 else 0.0)
    return b


def _z_products(engine: Any, z: Source, k: int,
                stats: dict[str, float] | None = None) -> Callable[[np.ndarray, int], np.ndarray]:
    """The product X ↦ z X (V×m) of Douglas–Rachford's iteration ``k``, for the eigensolver;
    with ``stats``, its first pass of the first iteration also records Σ and min of z₀ = Q
    (the threshold's bracket)."""

    def apply(X: np.ndarray, step: int) -> np.ndarray:
        if stats is not None and step == 0 and k == 0:
            Y, st = engine.products(z, None, X, ("sum", "minmax"), "iteration 1, pass 1")
            stats["sum"], stats["min"] = float(st[_SUM]), float(st[_MIN])
        else:
            Y, _ = engine.products(z, None, X, (), f"iteration {k + 1}, pass {step + 1}")
        assert Y is not None
        return cast("np.ndarray", Y)

    return apply


def _dr_factor(eig: _Eigensolver, apply: Callable[[np.ndarray, int], np.ndarray],
               run: _Run) -> tuple[np.ndarray, bool]:
    """The rank-K PSD part of z as G (V×K, z ≈ G Gᵀ), and whether its eigensolver
    converged; the eigenvalues go to ``run``."""
    theta, U, _, ok = eig.solve(apply)
    G, lam = _factor(theta, U)
    run.eigenvalues = lam
    return G, ok


def _dr_rows_in(L: np.ndarray, out: np.ndarray, z: np.ndarray, r: slice) -> float:
    """Rows r: out = 2L − z; returns ‖z_r‖²."""
    np.multiply(L[r], 2.0, out=out[r])
    out[r] -= z[r]
    return _sq(z[r])


def _dr_rows_out(L: np.ndarray, x: np.ndarray, z: np.ndarray, tau: float, last: bool,
                 r: slice) -> float:
    """Rows r: x = max(x − τ, 0) (the B-shadow), L = x − L, z += x − L unless ``last``;
    returns ‖x_r − L_r‖²."""
    x[r] -= tau
    np.maximum(x[r], 0.0, out=x[r])
    np.subtract(x[r], L[r], out=L[r])
    if not last:
        z[r] += L[r]
    return _sq(L[r])


def _dr_ooc(engine: _DaskEngine, K: int, n_iter: int, rng: np.random.Generator, run: _Run,
            out_tmp: str) -> None:
    """Douglas–Rachford out of core: z in scratch zarr arrays, the output written by the last
    update pass."""
    V = engine.V
    eig = _Eigensolver(V, K, rng)
    z: Source = engine.input
    zstats: dict[str, float] = {}
    for k in range(n_iter):
        t0, p0 = time.perf_counter(), engine.passes

        G, ok = _dr_factor(eig, _z_products(engine, z, k, zstats), run)
        gsrc = engine.lowrank(G, 0.0, clip=False)
        gpath = gsrc[1]
        # a bracket of τ: f(τ) ≥ Σ(Y − τ) gives τ ≥ (ΣY − 1)/V²; τ ≤ max Y ≤ 2 max‖G_i‖² − min z
        sum_y = 2.0 * float(np.square(G.sum(axis=0)).sum()) - zstats["sum"]
        lo = (sum_y - 1.0) / float(V) ** 2
        lo -= 1e-6 * abs(lo) + 1e-300
        hi = 2.0 * float(np.einsum("ij,ij->i", G, G).max()) - zstats["min"]
        hi += 1e-6 * abs(hi) + 1e-300
        if hi <= lo:
            hi = lo + 1.0
        label = f"iteration {k + 1}"
        tau = _simplex_tau_ooc(engine, z, gpath, lo, hi, label)
        final = k == n_iter - 1
        if final:
            path = out_tmp
        else:
            path = engine._empty("z", None)
        st = engine.dr_update(z, gpath, tau, path, final, 1.0, f"{label}, update")
        zstats["sum"], zstats["min"] = float(st[_SUM]), float(st[_MIN])
        engine.release(gsrc)
        if z[0] == "zarr":
            engine.release(z)
        if not final:
            z = ("zarr", path)
        run.done(k + 1, time.perf_counter() - t0, engine.passes - p0, ok)
        norm = math.sqrt(max(st[_SQ], 0.0))
        run.moved(k + 1, math.sqrt(max(st[_DIFF], 0.0)) / norm if norm > 0 else 0.0)
    # the output sums to 1 by the choice of τ; rescale against rounding only if it drifted
    total = zstats["sum"]
    if not total > 0:
        raise ValueError("Q: the rectified matrix sums to 0")
    if abs(total - 1.0) > 1e-12:
        engine.write(("zarr", out_tmp), 1.0 / total, out_tmp, "normalise")


# ============================================================================ entry point

#: Prefix of the out-of-core path's scratch directories (owned: see :mod:`._scratch`).
WORK_PREFIX = ".rectify-scratch-"
WORK_PATTERN = re.escape(WORK_PREFIX) + r"[0-9a-f]{12}"


def _partial_re(out: str) -> str:
    return re.escape(os.path.basename(out)) + r"\.partial-[0-9a-f]{8}"


def _collect_partials(out: str) -> int:
    """Remove the partial arrays of ``out`` that dead processes left beside it; bytes freed."""
    pattern = _partial_re(out)
    return _collect_debris(os.path.dirname(out), lambda n: re.fullmatch(pattern, n) is not None)


def _owned_partial(out: str) -> tuple[str, FileLock]:
    """A new partial path for ``out`` and its owner lock, held (the array is not created)."""
    for _ in range(5):
        tmp = f"{out}.partial-{uuid.uuid4().hex[:8]}"
        lock = _hold(_owner_of(tmp), record=owner_record())
        if lock is None and not os.path.exists(_owner_of(tmp)):
            os.close(os.open(_owner_of(tmp), os.O_CREAT | os.O_RDWR, 0o644))  # the OS's error
        if lock is not None and not os.path.exists(tmp):
            return tmp, lock
        if lock is not None:  # pragma: no cover - a random name already taken
            _release_owner(lock)
    raise OSError(f"{os.path.dirname(out)}: cannot take the owner lock of a partial array")



def is_zarr_array(path: str) -> bool:
    try:
        with open(os.path.join(path, "zarr.json")) as fh:
            return cast("bool", json.load(fh).get("node_type") == "array")
    except (OSError, ValueError, AttributeError):
        return False


def _chunk_files(path: str) -> int:
    """Chunk files of the zarr array at ``path``."""
    return sum(len(files) for _, _, files in os.walk(os.path.join(path, "c")))


def is_complete_array(path: str) -> bool:
    """Whether the rectified array at ``path`` still holds every chunk it was written with
    (a lost chunk would read as zeros; a corrupted one fails its checksum when read)."""
    try:
        with open(os.path.join(path, "zarr.json")) as fh:
            meta = json.load(fh)["attributes"]["streamtopic_rectified"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return cast("bool", meta.get("chunks_stored") == _chunk_files(path))


def _store_data(path: str) -> bool:
    """Whether ``path`` lies in a co-occurrence store's own data (its versions or vocab)."""
    parent = os.path.dirname(path)
    while parent and parent != os.path.dirname(parent):
        if os.path.isfile(os.path.join(parent, "zarr.json")) and CooccurrenceStore.is_store(
            parent
        ):
            first = os.path.relpath(path, parent).split(os.sep)[0]
            return first in ("versions", "vocab")
        parent = os.path.dirname(parent)
    return False


def _as_input(Q: Any) -> tuple[Any, bool, int]:
    """(Q, is_dask, chunk) with Q square; dask inputs get square regular chunks."""
    try:
        import dask.array as da

        is_dask = isinstance(Q, da.Array)
    except ImportError:  # pragma: no cover
        is_dask = False
    if not is_dask:
        if hasattr(Q, "toarray"):
            Q = Q.toarray()
        Q = np.asarray(Q)
    if Q.ndim != 2 or Q.shape[0] != Q.shape[1]:
        raise ValueError(f"Q has shape {Q.shape}: must be a square matrix")
    if not np.issubdtype(Q.dtype, np.number) or np.issubdtype(Q.dtype, np.complexfloating):
        raise ValueError(f"Q has dtype {Q.dtype}: must be real")
    V = Q.shape[0]
    if V < 2:
        raise ValueError(f"Q has shape {Q.shape}: needs V >= 2")
    if not is_dask:
        return Q, False, min(V, DEFAULT_CHUNK)
    rows, cols = Q.chunks
    c = int(rows[0])
    regular = rows == cols and all(x == c for x in rows[:-1]) and rows[-1] <= c
    if not regular:
        c = int(max(rows))
        Q = Q.rechunk((c, c))
    return Q, True, c


#: The constraints of :func:`rectify`'s parameters (:mod:`streamtopic._params`);
#: ``n_topics < V`` is checked once V is known.
_PARAMS: dict[str, list[Constraint]] = {
    "n_topics": [Interval(Integral, 1, None)],
    "out": ["path"],
    "method": [Options(*RECTIFY_METHODS)],
    "n_iter": [Interval(Integral, 0, None)],
    "memory_budget": [Interval(Integral, 1, None)],
    "in_memory": ["boolean", None],
    "scratch": ["path", None],
    "progress": ["boolean"],
    "keep_array": ["boolean"],
}


def _check_rank(n_topics: int, V: int) -> int:
    """K, checked to be below V (a rank-V projection changes nothing)."""
    check_param("n_topics", n_topics, [Interval(Integral, 1, V, closed="left")])
    return int(n_topics)


@dataclass
class _Source:
    """The matrix :func:`rectify` reads: ``Q`` (V×V, a dask array with square regular chunks
    or an ndarray), the store it is the Q of (None: an array), and the chunk size."""

    Q: Any
    store: Any
    is_dask: bool
    chunk: int

    @classmethod
    def of(cls, Q: Any) -> _Source:
        store = Q if isinstance(Q, CooccurrenceStore) else None
        arr, is_dask, chunk = _as_input(store.Q if store is not None else Q)
        return cls(arr, store, is_dask, chunk)

    @property
    def V(self) -> int:
        return int(self.Q.shape[0])


def _target(out: str | os.PathLike[str]) -> str:
    """``out`` as an absolute path, refused when it is anything but a zarr array, or part of
    a store's own data."""
    out = os.path.abspath(os.fspath(out))
    if os.path.exists(out) and not is_zarr_array(out):
        raise ValueError(f"out={out}: exists and is not a zarr array; not overwritten")
    if _store_data(out):
        raise ValueError(f"out={out}: is part of a co-occurrence store's data; not overwritten")
    return out


def _scratch_dir(scratch: str | os.PathLike[str] | None) -> str | None:
    """``scratch`` as an absolute path (None stays None), refused when it is a file."""
    if scratch is None:
        return None
    path = os.path.abspath(os.fspath(scratch))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"scratch={path}: is not a directory")
    return path


def _rng(seed: Any) -> np.random.Generator:
    try:
        return np.random.default_rng(seed)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"seed={seed!r}: not a valid seed ({exc})") from None


def _chooses_in_memory(in_memory: bool | None, method: str, V: int, memory_budget: int) -> bool:
    """``in_memory`` when given, else whether the in-memory path's dense copies fit
    ``memory_budget`` and no distributed client runs the work."""
    if in_memory is not None:
        return bool(in_memory)
    copies = DENSE_COPIES if method == "dr" else AP_DENSE_COPIES
    return current_client() is None and MemoryBudget(memory_budget).holds(V, copies)


@contextlib.contextmanager
def _partial(out: str) -> Iterator[str]:
    """A partial array path beside ``out`` (``out.partial-XXXXXXXX``), owned by this process
    through its lock file while the block runs (the partials of dead processes are removed
    first); renamed to ``out`` when the block succeeds, removed when it fails."""
    os.makedirs(os.path.dirname(out), exist_ok=True)
    _collect_partials(out)
    tmp, owner = _owned_partial(out)
    try:
        with written_aside(out, tmp=tmp):
            yield tmp
    finally:
        _release_owner(owner)


def _rectify_into(tmp: str, src: _Source, K: int, method: str, n_iter: int,
                  rng: np.random.Generator, run: _Run, in_memory: bool, scratch: str | None,
                  progress: bool) -> np.ndarray | None:
    """Rectify ``src`` into the new zarr array ``tmp`` (V×V, chunks as Q's), in memory or
    out of core; returns the result when it was computed in memory."""
    import zarr

    V, chunk = src.V, src.chunk
    zarr.create_array(store=tmp, shape=(V, V), chunks=(chunk, chunk), dtype="f8",
                      fill_value=0.0, compressors=checksum_codecs())
    if in_memory and src.store is not None:  # the store's blocks decoded straight into place
        return _run_in_memory(src.store.read_dense(), False, K, method, n_iter, rng, run, tmp,
                              progress)
    if in_memory:
        return _run_in_memory(src.Q, src.is_dask, K, method, n_iter, rng, run, tmp, progress)
    base = scratch or os.path.dirname(tmp)
    _collect_debris(base, lambda n: re.fullmatch(WORK_PATTERN, n) is not None)
    with _owned_dir(base, WORK_PREFIX) as workdir:
        Q = src.Q
        if not src.is_dask:
            import dask.array as da

            Q = da.from_array(np.asarray(Q, dtype=np.float64), chunks=(chunk, chunk))
        engine = _DaskEngine(Q, workdir, progress, f"rectify {method}")
        _run_out_of_core(engine, K, method, n_iter, rng, run, tmp)
    return None


@validated(_PARAMS)
def rectify(
    Q: Any,
    n_topics: int,
    out: str | os.PathLike[str],
    *,
    method: str = "ap",
    n_iter: int = 15,
    seed: Any = 0,
    memory_budget: int = 512 * 2**20,
    in_memory: bool | None = None,
    scratch: str | os.PathLike[str] | None = None,
    progress: bool = False,
    keep_array: bool = False,
) -> RectifyResult:
    """Rectify a co-occurrence matrix and write the result to a zarr array.

    Parameters
    ----------
    Q : CooccurrenceStore, dask.array or ndarray of shape (V, V)
        The symmetric co-occurrence estimate, normalised to sum 1: a store (its ``Q``; the
        in-memory path reads it with :meth:`~CooccurrenceStore.read_dense`) or an array. It
        is taken as symmetric: only its blocks on and above the diagonal are read (blocks of
        the chunk size out of core, of ``DENSE_BLOCK`` in memory).
    n_topics : int
        K, the rank of the PSD projection (1 <= K < V).
    out : path
        The zarr array to create: V×V float64, uncompressed, chunks as Q's (c×c;
        ``min(V, 2048)`` for an ndarray). It is written beside ``out``
        (``out.partial-XXXXXXXX``, owned by this process through the lock file
        ``out.partial-XXXXXXXX.owner``; the partials of dead processes are removed) and
        renamed into place, replacing an existing zarr array there (any other existing path
        is refused). Q is never modified.
    method : {'ap', 'dr', 'none'}
        Alternating projection, Douglas–Rachford, or no rectification (the input normalised
        to sum 1). See the module documentation for the exact iterations.
    n_iter : int
        Iterations (>= 0; 0 behaves as ``'none'``).
    seed : int, Generator or None
        Seed of the starting basis of the eigensolver; equal seeds give equal results.
    memory_budget : int
        Bytes the in-memory path may use; it runs when ``AP_DENSE_COPIES`` (3, AP) or
        ``DENSE_COPIES`` (6, DR) V×V float64 arrays fit.
    in_memory : bool, optional
        Force the in-memory (True) or out-of-core (False) path; None chooses by
        ``memory_budget``, and out of core whenever a distributed client is active (its
        workers read the blocks; nothing V×V goes to the client).
    scratch : path, optional
        Directory for the out-of-core path's scratch arrays (a unique subdirectory,
        ``.rectify-scratch-*``, is made and removed; those of dead processes are removed).
        Default: beside ``out``. Workers must be able to read it. Out-of-core
        AP needs O(V·K) bytes there; out-of-core DR holds its iterate, two V×V arrays.
    progress : bool
        Show a progress bar for every pass (out of core).
    keep_array : bool
        In memory only: also return the result as ``RectifyResult.array`` (V×V), so that a
        caller that works in memory need not read it back.

    Returns
    -------
    RectifyResult
        Movement and time per iteration, the last kept eigenvalues (K,), the path written.

    Raises
    ------
    ValueError
        For a bad parameter (the message names it), a non-finite Q or one that cannot be
        normalised.
    """
    t_start = time.perf_counter()
    src = _Source.of(Q)
    K = _check_rank(n_topics, src.V)
    out, scratch = _target(out), _scratch_dir(scratch)
    rng = _rng(seed)
    in_memory = _chooses_in_memory(in_memory, method, src.V, memory_budget)
    n_iter = 0 if method == "none" else int(n_iter)
    where = "in memory" if in_memory else "out of core"
    run = _Run(method, n_iter, where)
    import zarr

    with _partial(out) as tmp:
        dense = _rectify_into(tmp, src, K, method, n_iter, rng, run, in_memory, scratch,
                              progress)
        meta = {
            "method": method, "n_iter": n_iter, "n_topics": K, "V": src.V,
            "seed": _seed_attr(seed), "movement": run.movement,
            "eigenvalues": [float(x) for x in run.eigenvalues], "in_memory": in_memory,
            "chunks_stored": _chunk_files(tmp),
        }
        zarr.open_array(tmp, mode="r+").attrs["streamtopic_rectified"] = meta
    total = time.perf_counter() - t_start
    log.info("rectify %s (%s): %d iterations, %.2f s in all", method, where, n_iter, total)
    return RectifyResult(
        method=method, n_iter=n_iter, movement=run.movement, seconds=run.seconds,
        eigenvalues=np.asarray(run.eigenvalues, dtype=np.float64), in_memory=in_memory,
        path=out, passes=run.passes, total_seconds=total,
        array=dense if keep_array else None,
    )


def _seed_attr(seed: Any) -> Any:
    return int(seed) if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) else None


@validated({name: _PARAMS[name] for name in ("n_topics", "method", "n_iter")})
def rectify_in_memory(
    Q: np.ndarray, n_topics: int, *, method: str = "ap", n_iter: int = 15, seed: Any = 0,
) -> RectifyResult:
    """Rectify a co-occurrence matrix held in memory, and return the result in memory only
    (``RectifyResult.array``, n×n, summing to 1; ``path`` is None). The same iterations as
    :func:`rectify`'s in-memory path, for a core vocabulary's block of Q: nothing is written.

    Parameters
    ----------
    Q : ndarray of shape (n, n)
        Symmetric, normalised to sum 1; only read.
    n_topics : int
        K, the rank of the PSD projection (1 <= K < n).
    method : {'ap', 'dr', 'none'}
    n_iter : int
    seed : int, Generator or None
    """
    t_start = time.perf_counter()
    Q, _, _ = _as_input(Q)
    K = _check_rank(n_topics, int(Q.shape[0]))
    n_iter = 0 if method == "none" else int(n_iter)
    run = _Run(method, n_iter, "in memory")
    dense = _run_in_memory(Q, False, K, method, n_iter, np.random.default_rng(seed), run, None,
                           False)
    return RectifyResult(
        method=method, n_iter=n_iter, movement=run.movement, seconds=run.seconds,
        eigenvalues=np.asarray(run.eigenvalues, dtype=np.float64), in_memory=True, path=None,
        passes=run.passes, total_seconds=time.perf_counter() - t_start, array=dense,
    )


def _run_in_memory(Q: Any, is_dask: bool, K: int, method: str, n_iter: int,
                   rng: np.random.Generator, run: _Run, tmp: str | None,
                   progress: bool) -> np.ndarray:
    import zarr
    if is_dask and current_client() is None:
        # each block straight into its place: no concatenated copy
        import dask.array as da

        t0 = time.perf_counter()
        Qd = np.empty(Q.shape, dtype=np.float64)
        with Stage(f"rectify {method}: load Q", enabled=progress) as stage, stage.tasks():
            da.store(Q, Qd, lock=False, compute=True)
        log.info("rectify %s: load Q: %.2f s", method, time.perf_counter() - t0)
    elif is_dask:
        (Qd,) = compute(Q, progress=progress, label=f"rectify {method}: load Q")
    else:
        Qd = Q
    Qd = np.asarray(Qd, dtype=np.float64)  # read only: only its upper-triangle blocks are used
    if not np.all(np.isfinite(Qd)):
        raise ValueError("Q: contains NaN or infinite values")
    with blas_pinned(), ThreadPoolExecutor(usable_cores()) as pool:
        engine = _DenseEngine(Qd, pool, f"rectify {method}")
        res = np.empty(Qd.shape)
        if method == "dr" and n_iter > 0:
            engine.materialize(engine.input, None, res)  # z₀: the symmetric input, owned
            res = _dr_dense(engine, K, n_iter, rng, run, res)
        elif n_iter > 0:
            cur, prev = _ap(engine, K, n_iter, rng, run)
            st = engine.materialize(cur, prev, res)
            run.moved(n_iter, _rel(st))
        else:
            engine.materialize(engine.input, None, res)
        del engine, Qd
        total = float(np.sum(res))
        if not (total > 0 and math.isfinite(total)):
            raise ValueError(f"Q: cannot normalise the result (it sums to {total!r})")
        res *= 1.0 / total
        if tmp is None:
            return res
        # one writer per chunk, chunks written in parallel (no two tasks share a chunk)
        arr = zarr.open_array(tmp, mode="r+")
        c = int(tuple(arr.chunks)[0])
        V = len(res)
        chunks = [(_slice(i, c, V), _slice(j, c, V))
                  for i in range(-(-V // c)) for j in range(-(-V // c))]
        list(pool.map(lambda rq: arr.__setitem__(rq, res[rq]), chunks))
    return res


def _run_out_of_core(engine: _DaskEngine, K: int, method: str, n_iter: int,
                     rng: np.random.Generator, run: _Run, tmp: str) -> None:
    if method == "dr" and n_iter > 0:
        _dr_ooc(engine, K, n_iter, rng, run, tmp)
        return
    if n_iter > 0:
        cur, prev = _ap(engine, K, n_iter, rng, run)
        _, st = engine.products(cur, prev, None, ("sum", "diff"), "final movement and sum")
        run.moved(n_iter, _rel(st))
    else:
        cur = engine.input
        _, st = engine.products(cur, None, None, ("sum",), "sum")
    total = float(st[_SUM])
    if not (total > 0 and math.isfinite(total)):
        raise ValueError(f"Q: cannot normalise the result (it sums to {total!r})")
    engine.write(cur, 1.0 / total, tmp, "write")
    if n_iter > 0:
        engine.release(cur)
        engine.release(prev)
