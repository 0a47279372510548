"""The refinement's compiled kernel, made ready in another process while a fit's earlier
stages run, the first time on a machine.

numba compiles :func:`streamtopic._kernels.cvb0_estep` the first time it is called and keeps
the machine code in its cache (``cache=True``: ``__pycache__`` beside the module, or numba's
user cache, or ``$NUMBA_CACHE_DIR``), which later processes load in about 0.3 s. The first
compilation takes about 2 s of CPU, and it used to happen inside the first refinement pass of
a newcomer's first fit.

So when a fit starts and the kernel has no cache yet, :func:`start` compiles it in a child
process (``python -c "...warm_up()"``), which writes the cache, while the fit ingests and runs
its spectral stages; :func:`wait`, called before the refinement, waits for the child, and the
refinement's first call loads the cache. With a cache (every later fit) nothing is started.

Measured (``benchmarks/first_fit.py``: the demo fit in fresh processes, "first" with an empty
numba cache; the project's 2-core machine while other work kept it loaded, 3 to 4 runnable
processes): without warm-up the first fit takes 1.9 s more CPU than the second (6.8 s against
4.9 s). Compiling in a *thread* of the fit's own process made the first fit slower (median
8.9 s against 6.8 s without warm-up, 6 repeats), since numba's compiler is Python code that
holds the GIL and stalls the threads of the ingest and the spectral stages. In a child
process it needs no GIL of the fit's (medians over 10 repeats: first 8.1 s, second 5.6 s, a
ratio of 1.43; without warm-up 7.7 s and 5.0 s, 1.55), but the child's imports cost 1.2 s of
CPU: on a machine with no idle core the overlap gains little, on one with an idle core (a
newcomer's laptop) the compilation leaves the fit's path. Set ``STREAMTOPIC_WARMUP=0`` to
leave the kernel to its first call.

Why not at install: a wheel runs no code when installed, and the cache is specific to the
machine's CPU (numba compiles for the host) and to the installed source file (its path and
modification time), so it cannot ship in the wheel. numba's ahead-of-time compiler
(``numba.pycc``) is deprecated and would make a C compiler a requirement of the install, as
the optional ``_pairs`` extension is not.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from typing import Any

__all__ = ["WARMUP_ENV", "cache_is_warm", "start", "wait", "warm_up"]

#: ``0`` turns the warm-up off.
WARMUP_ENV = "STREAMTOPIC_WARMUP"
log = logging.getLogger("streamtopic")
_lock = threading.Lock()
_thread: threading.Thread | None = None
# The child loads the kernels' module alone, under its own name (numba's cache is keyed on
# the file): importing the package (Dask, zarr, scipy …) would cost it 1.1 s more of CPU.
_CHILD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("streamtopic._kernels", sys.argv[1])
kernels = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = kernels
spec.loader.exec_module(kernels)
kernels.compile_refinement_kernels()
"""


def warm_up() -> float:
    """Compile (or load from numba's cache) the refinement's kernels with the argument types
    the refinement passes them (:func:`streamtopic._kernels.compile_refinement_kernels`).

    Returns
    -------
    float
        The seconds it took.
    """
    t0 = time.perf_counter()
    from ._kernels import compile_refinement_kernels

    compile_refinement_kernels()
    return time.perf_counter() - t0


def cache_is_warm() -> bool:
    """Whether numba's cache holds the E-step kernel (its index file exists; a stale one,
    after an edit of the source, counts as warm: the first call then compiles, as without
    warm-up). True when numba's cache cannot be inspected."""
    from ._kernels import cvb0_documents

    dispatcher: Any = cvb0_documents  # numba's Dispatcher: its cache is not in its type
    try:
        index = dispatcher._cache._cache_file._index_path
    except AttributeError:  # another numba: do nothing rather than guess
        return True
    return bool(dispatcher.signatures) or os.path.exists(index)


def _compile_in_child() -> None:
    from . import _kernels

    t0 = time.perf_counter()
    try:
        res = subprocess.run([sys.executable, "-c", _CHILD, _kernels.__file__],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.info("EM kernel warm-up failed: %s", exc)
        return
    if res.returncode:
        log.info("EM kernel warm-up failed: %s", res.stderr.decode(errors="replace")[-300:])
    else:
        log.info("EM kernel compiled in another process: %.2f s", time.perf_counter() - t0)


def start() -> threading.Thread | None:
    """Compile the kernel in a child process when numba's cache lacks it, once per process
    (unless ``$STREAMTOPIC_WARMUP`` is ``0``); returns the thread that waits for the child,
    or None when nothing was started."""
    global _thread
    if os.environ.get(WARMUP_ENV, "1").strip() == "0":
        return None
    with _lock:
        if _thread is None and not cache_is_warm():
            _thread = threading.Thread(target=_compile_in_child, name="streamtopic-warmup",
                                       daemon=True)
            _thread.start()
        return _thread


def wait(timeout: float | None = None) -> None:
    """Wait for a compilation :func:`start` began (at most ``timeout`` seconds), so that the
    caller's first call loads the kernel from the cache instead of compiling it again."""
    thread = _thread
    if thread is not None:
        thread.join(timeout)
