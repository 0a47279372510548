"""The refinement's compiled kernel, made ready in a background thread while a fit's earlier
stages run.

numba compiles :func:`streamtopic._kernels.cvb0_estep` the first time it is called and keeps
the machine code in its cache (``cache=True``: ``__pycache__`` beside the module, or numba's
user cache when that is not writable), which later processes load in about 0.3 s. The first
compilation takes 2.5 s of one core (measured on the project's 2-core machine), and it used
to happen inside the first refinement pass of a newcomer's first fit: the whole first fit
took about 1.3-1.9× the second (``benchmarks/first_fit.py``).

A fit therefore starts :func:`start` before its first stage: a daemon thread calls the kernel
once on a tiny problem with the argument types the refinement uses (a read-only, memory-mapped
βᵀ included, which numba compiles apart from a writable one). Compiling or loading from the
cache then overlaps the ingest, the rectification and the recovery, which run in Dask's
threads and BLAS, mostly without the GIL. numba's compiler lock makes a refinement that
arrives before the thread is done wait for it and use its result; nothing is compiled twice.
Set ``STREAMTOPIC_WARMUP=0`` to leave the kernel to its first call.

Why not at install: a wheel runs no code when installed, and the cache is specific to the
machine's CPU (numba compiles for the host), so it cannot ship in the wheel. numba's
ahead-of-time compiler (``numba.pycc``) is deprecated and would make a C compiler a
requirement of the install, as the optional ``_pairs`` extension is not.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import numpy as np

__all__ = ["WARMUP_ENV", "start", "warm_up"]

#: ``0`` turns the background compilation off.
WARMUP_ENV = "STREAMTOPIC_WARMUP"
log = logging.getLogger("streamtopic")
_lock = threading.Lock()
_thread: threading.Thread | None = None


def warm_up() -> float:
    """Compile (or load from numba's cache) the refinement's E-step kernel with the argument
    types the refinement passes it, by one call on a two-word document.

    Returns
    -------
    float
        The seconds it took.
    """
    t0 = time.perf_counter()
    from ._kernels import cvb0_estep

    indptr = np.array([0, 2], dtype=np.int64)
    indices = np.array([0, 1], dtype=np.int32)
    data = np.ones(2)
    beta_t = np.full((2, 2), 0.5)
    beta_t.flags.writeable = False  # as the refinement's memory-mapped βᵀ
    counts, out = np.empty((1, 2)), np.zeros((2, 2))
    cvb0_estep(indptr, indices, data, beta_t, 0.01, 1e-3, 10, counts, False, out)
    seconds = time.perf_counter() - t0
    log.info("EM kernel ready: %.2f s (compiled or loaded in the background)", seconds)
    return seconds


def _run() -> None:
    try:
        warm_up()
    except Exception as exc:  # the first real call compiles, and reports any error
        log.info("EM kernel warm-up failed: %s", exc)


def start() -> threading.Thread | None:
    """Start :func:`warm_up` in a daemon thread, once per process (unless
    ``$STREAMTOPIC_WARMUP`` is ``0``); returns the thread, or None when off."""
    global _thread
    if os.environ.get(WARMUP_ENV, "1").strip() == "0":
        return None
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_run, name="streamtopic-warmup", daemon=True)
            _thread.start()
        return _thread
