"""The refinement's compiled kernels, made ready in another process while a fit's earlier
stages run, the first time on a machine.

numba compiles :func:`streamtopic._kernels.cvb0_documents` (the E-step's loop over the
documents) and :func:`~streamtopic._kernels.add_rows` the first time they are called and keeps
the machine code in its cache (``cache=True``: ``__pycache__`` beside the module, or numba's
user cache, or ``$NUMBA_CACHE_DIR``), which later processes load in about 0.3 s. The first
compilation takes about 2.6 s of CPU in a process of its own (numpy and numba imported; the
project's 2-core machine under load). It took 6.4 s after the SQUAREM E-step was merged
(about 2 s before it): numba's slice assignment ``a[:] = b`` compiled the error messages of
its shape check (3.7 s), a helper called with the literals ``True`` and ``False`` compiled
twice, the dtype allocations inside the kernel cost 1 s (see :mod:`streamtopic._kernels`).

When the package is first imported on a machine (numba's cache lacks the kernels), or a fit
starts without them, :func:`start` compiles them in a child process, which writes the cache,
while the package's modules are imported and the fit ingests and runs its spectral stages;
:func:`wait`, called before the refinement, waits for the child, and the refinement's first
call loads the cache. With a cache (every later process) nothing is started. The child loads
the kernels' module alone (``python -c`` with :data:`_CHILD`), not the package: importing
streamtopic (Dask, zarr, scipy …) cost it 1.1 s more of CPU. Started at the import, it begins
1-1.5 s before the fit would start it, and it goes on when a short command has exited: the
``streamtopic demo-path`` of ``streamtopic fit "$(streamtopic demo-path)"`` starts it, and the
fit's own child, which compiles under the same lock (:data:`LOCK_NAME`), then only loads what
the first wrote.

Measured (the demo fit in fresh processes, "first" with an empty numba cache, "second" with
the cache the first filled, medians of 3; the project's 2-core machine, shared with other
sessions): ``benchmarks/first_fit.py`` at a load average of 1.5-2.2 gave first 4.65 s,
second 3.50 s (1.33) with the warm-up, 6.33 s and 4.41 s (1.43) without. In turns with the
code before these changes (load 2.2-3.0), the first fit's CPU went from 11.9 s to 7.7 s
against 4.5 s for the second, its wall time from 2.2 times the second's (9.8 s against
4.5 s) to 1.7 times (7.4 s against 4.3 s); at a load of 8.6 (5 repeats) from 3.2 times to
1.5. With no idle core the child gains nothing over a compilation inside the fit (at load 8
to 10: 1.67 with the warm-up, 1.56 without; CPU 9.9 s against 8.7 s, the child's imports);
the fit's log says how long it waited (``-v``: "waited … s for the EM kernel's
compilation"), 1.4 s at load 3, none for ``streamtopic fit "$(streamtopic demo-path)"``
(where ``demo-path`` starts the compilation) at load 5.

Compiling in a *thread* of the fit's own process made the first fit slower (measured before
these changes: median 8.9 s against 6.8 s without warm-up, 6 repeats), since numba's compiler
is Python code that holds the GIL and stalls the threads of the ingest and the spectral
stages; a child process needs no GIL of the fit's. On a machine with no idle core the
overlap gains little (the child's imports cost about 1 s of CPU that a compilation inside the
fit does not pay); on one with an idle core (a newcomer's laptop) the compilation leaves the
fit's path. Set ``STREAMTOPIC_WARMUP=0`` to leave the kernels to their first call.

The tokenizer's kernels (:mod:`streamtopic._tokenize`: about 14 s of CPU, in each process
that tokenises) take the other way: nothing waits for them, because Python can do their work.
A chunk builder that finds them neither compiled in its process nor in numba's cache
(:func:`compiled_or_cached`, through :func:`streamtopic._tokenize.kernels_ready`) tokenises
with the Python reference the kernels are tested against (the same tokens and chunks; on the
20 Newsgroups training set a fit's ingest takes about 0.3 s more), counts with scipy instead
of the compiled counting sort, and :func:`start_in_background` starts one child per process,
at the lowest priority (``nice`` 19), that compiles them under :data:`LOCK_NAME`'s sibling
``streamtopic-tokenizer.lock`` (a second child finding it held exits at once: one
compilation per machine). Builders made after the child has finished use the kernels; a
later process loads them from the cache. Before, a first raw-text fit's worker processes
each compiled the kernels before their first chunk: a first fit of the 20 Newsgroups
training set took 28.3 s against 9.9 s with the kernels cached; now 11.7 s against 10.4 s
(medians of 3 in turns, quiet; :mod:`streamtopic._tokenize` has the figures).

Why not at install: a wheel runs no code when installed, pip builds an sdist in an isolated
environment without numba, and the cache is specific to the machine's CPU (numba compiles
for the host) and to the installed source file (its path and modification time), so it
cannot ship in the wheel. numba's ahead-of-time compiler (``numba.pycc``) is deprecated and
would make a C compiler a requirement of the install, as the optional ``_pairs`` extension
is not.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["LOCK_NAME", "WARMUP_ENV", "cache_is_warm", "compiled_or_cached", "start",
           "start_in_background", "wait", "warm_up"]

#: ``0`` turns the warm-up off.
WARMUP_ENV = "STREAMTOPIC_WARMUP"
log = logging.getLogger("streamtopic")
_lock = threading.Lock()
_thread: threading.Thread | None = None
#: The lock file, in numba's cache directory, that one compilation at a time holds.
LOCK_NAME = "streamtopic-warmup.lock"
# The child loads the kernels' module alone, under its own name (numba's cache is keyed on
# the file): importing the package (Dask, zarr, scipy …) would cost it 1.1 s more of CPU.
# It compiles under an exclusive lock, so that a second child (a fit started while an
# earlier command's child still compiles) waits and then loads the cache the first wrote.
_CHILD = """
import fcntl, importlib.util, sys
spec = importlib.util.spec_from_file_location("streamtopic._kernels", sys.argv[1])
kernels = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = kernels
spec.loader.exec_module(kernels)
with open(sys.argv[2], "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    kernels.compile_refinement_kernels()
"""


# The background compilation of a package module's kernels (the tokenizer's): the child takes
# the lock without waiting, or leaves it to the process that holds it, lowers its priority and
# imports the module (through the package, with the warm-up at import turned off).
_BACKGROUND_CHILD = """
import fcntl, importlib, os, sys
with open(sys.argv[3], "a") as lock:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(0)
    os.nice(19)
    sys.path.insert(0, sys.argv[4])
    getattr(importlib.import_module(sys.argv[1]), sys.argv[2])()
"""
_started: set[str] = set()


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


def _kernels_file() -> str:
    from . import _kernels

    return str(_kernels.__file__)


def _em_kernels() -> tuple[Any, Any]:
    """The refinement's cached kernels (numba dispatchers)."""
    from ._kernels import add_rows, cvb0_documents

    return cvb0_documents, add_rows


def _cache_directory(dispatcher: Any) -> str | None:
    """The directory of numba's cache of ``dispatcher``; None when numba's cache cannot be
    inspected (another numba)."""
    try:
        index: str = dispatcher._cache._cache_file._index_path
    except AttributeError:
        return None
    return os.path.dirname(index)


def cache_is_warm() -> bool:
    """Whether the refinement's kernels are compiled in this process or in numba's cache
    (:func:`compiled_or_cached`: an index that matches the source, no compilation under
    way). True when numba's cache cannot be inspected."""
    return compiled_or_cached(_em_kernels(), LOCK_NAME)


def _lock_is_free(path: str) -> bool:
    """Whether no process holds the lock file ``path`` exclusively (no compilation under way);
    a missing lock is free."""
    import fcntl

    try:
        with open(path, "rb") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True
    except FileNotFoundError:
        return True


def compiled_or_cached(dispatchers: Sequence[Any], lock_name: str) -> bool:
    """Whether each of ``dispatchers`` (numba's, ``cache=True``) is compiled in this process or
    has an up-to-date index in numba's cache (one that matches its source file), with no
    compilation under way under ``lock_name`` (a lock file beside that cache). True when
    numba's cache cannot be inspected (another numba): the first call then compiles, as it
    would without a warm-up."""
    directory = None
    for dispatcher in dispatchers:
        if dispatcher.signatures:
            continue
        directory = _cache_directory(dispatcher)
        try:
            overloads = dispatcher._cache._cache_file._load_index()
        except (AttributeError, OSError, EOFError, ValueError):  # another numba, a torn index
            return True
        if not overloads:
            return False
    return directory is None or _lock_is_free(os.path.join(directory, lock_name))


def start_in_background(module: str, function: str, lock_name: str, anchor: Any) -> bool:
    """Run ``module.function()`` (it compiles the module's kernels) in a child process at the
    lowest priority, once per process, unless ``$STREAMTOPIC_WARMUP`` is ``0``; returns
    whether one was started. The child holds ``lock_name``, beside the cache of the numba
    dispatcher ``anchor``, while it compiles; a child that finds the lock held exits at once,
    so that one process per machine compiles. Nothing waits for it: the caller keeps its
    Python path until :func:`compiled_or_cached` says the kernels are there. It goes on when
    the caller has exited (a Dask worker at the end of an ingest)."""
    if os.environ.get(WARMUP_ENV, "1").strip() == "0":
        return False
    with _lock:
        if module in _started:
            return False
        _started.add(module)
    directory = _cache_directory(anchor)
    if directory is None:
        return False
    package = sys.modules[module.partition(".")[0]]
    root = os.path.dirname(os.path.dirname(str(package.__file__)))
    env = dict(os.environ, **{WARMUP_ENV: "0"})
    try:
        os.makedirs(directory, exist_ok=True)
        # detached through a shell that exits at once: nobody has to reap the child, which
        # outlives the caller (init adopts it); it stays in the caller's process group, so
        # an interrupt of the command ends it too
        subprocess.run(["/bin/sh", "-c", '"$0" "$@" &', sys.executable, "-c",
                        _BACKGROUND_CHILD, module, function,
                        os.path.join(directory, lock_name), root],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env=env, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("could not start the compilation of %s: %s", module, exc)
        return False
    log.info("compiling the kernels of %s in another process", module)
    return True


def _compile_in_child(kernels: str, lock: str) -> None:
    """Run :data:`_CHILD` on the module file ``kernels`` under the lock file ``lock``.
    Imports nothing: a thread started while the package is being imported would wait for the
    import's end at its first ``import`` of the package."""
    t0 = time.perf_counter()
    # stderr to a file, not a pipe: the child goes on when a short command (``streamtopic
    # demo-path``) has exited, and a write to a pipe without reader would end it
    with tempfile.TemporaryFile() as err:
        try:
            res = subprocess.run([sys.executable, "-c", _CHILD, kernels, lock],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=err, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.info("EM kernel warm-up failed: %s", exc)
            return
        if res.returncode:
            err.seek(0)
            log.info("EM kernel warm-up failed: %s", err.read().decode(errors="replace")[-300:])
            return
    log.info("EM kernel compiled in another process: %.2f s", time.perf_counter() - t0)


def start(at_import: bool = False) -> threading.Thread | None:
    """Compile the kernels in a child process when numba's cache lacks them, once per process
    (unless ``$STREAMTOPIC_WARMUP`` is ``0``); returns the thread that waits for the child,
    or None when nothing was started.

    Called when a fit starts, and by the package's first import (``at_import``: the child
    then compiles while the package's modules are imported, 1-1.5 s of a first fit's start;
    a command such as ``streamtopic demo-path`` leaves it running when it exits). Not at the
    import of a process that multiprocessing started (a Dask worker): its parent did."""
    global _thread
    if os.environ.get(WARMUP_ENV, "1").strip() == "0":
        return None
    if at_import and multiprocessing.parent_process() is not None:
        return None
    with _lock:
        if _thread is None and not cache_is_warm():
            # (a compilation under way elsewhere: the child waits for its lock, then loads)
            directory = _cache_directory(_em_kernels()[0])
            if directory is not None:
                _thread = threading.Thread(
                    target=_compile_in_child,
                    args=(_kernels_file(), os.path.join(directory, LOCK_NAME)),
                    name="streamtopic-warmup", daemon=True)
                _thread.start()
        return _thread


def wait(timeout: float | None = None) -> None:
    """Wait for a compilation :func:`start` began (at most ``timeout`` seconds), so that the
    caller's first call loads the kernel from the cache instead of compiling it again."""
    thread = _thread
    if thread is not None and thread.is_alive():
        t0 = time.perf_counter()
        thread.join(timeout)
        log.info("waited %.2f s for the EM kernel's compilation", time.perf_counter() - t0)
