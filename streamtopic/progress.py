"""Progress displays: one per stage, a bar on a terminal and one plain line anywhere else.

Every stage of a command (``vocabulary pass``, ``co-occurrence``, ``refine``, ...) shows one
display on standard error, chosen by where standard error goes:

* a terminal: one line redrawn in place, ``co-occurrence [########------] 57% 1.2 s``, ended
  by a newline when the stage ends;
* anything else (a file, a pipe, a CI log, a notebook): nothing while the stage runs, then one
  line ``co-occurrence: 1.23 s`` (with the stage's figures, when it has some) when it ends,
  so a log holds no carriage-return frames.

``$STREAMTOPIC_PROGRESS`` overrides the choice: ``bar``, ``lines`` or ``off``. The command
line's ``-q`` turns every display off (the library's ``progress=False``); ``-v`` adds the
log lines of :mod:`logging` (logger ``streamtopic``), one per stage and one per EM pass.

:class:`Stage` is one stage's display; :class:`Passes` is one display over the passes of an
iterative stage (EM), with the pass count and the current log-likelihood per token beside
the bar. Both follow Dask's local schedulers through a scheduler callback
(:meth:`Stage.tasks`) and a distributed cluster through its progress plugin
(:meth:`Stage.watch`).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TextIO, TypeVar

__all__ = ["MODES", "PROGRESS_ENV", "Passes", "Stage", "display_mode"]

#: The environment variable that chooses the display: one of :data:`MODES`.
PROGRESS_ENV = "STREAMTOPIC_PROGRESS"
#: ``bar``: redrawn in place (a terminal); ``lines``: one line per stage; ``off``: nothing.
MODES = ("bar", "lines", "off")
#: Seconds between two redraws of a bar.
REDRAW = 0.1
BAR_WIDTH = 24
log = logging.getLogger("streamtopic")
_S = TypeVar("_S", bound="Stage")


def display_mode(stream: TextIO | None = None) -> str:
    """The display for ``stream`` (default: standard error): ``$STREAMTOPIC_PROGRESS`` when
    set, else ``bar`` on a terminal and ``lines`` elsewhere.

    Parameters
    ----------
    stream : file object, optional
        Where the display goes.

    Returns
    -------
    str
        One of :data:`MODES`.

    Examples
    --------
    >>> import io
    >>> from streamtopic.progress import display_mode
    >>> display_mode(io.StringIO())  # not a terminal ($STREAMTOPIC_PROGRESS unset)
    'lines'
    """
    chosen = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if chosen in MODES:
        return chosen
    stream = sys.stderr if stream is None else stream
    try:
        return "bar" if stream.isatty() else "lines"
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return "lines"


def _seconds(t: float) -> str:
    return f"{t:.2f} s" if t < 60 else f"{int(t // 60)} min {t % 60:04.1f} s"


class Stage:
    """The progress display of one stage, used as a context manager.

    Parameters
    ----------
    label : str
        The stage's name, first on its line.
    enabled : bool
        False: no display at all (``progress=False``, ``-q``).
    stream : file object, optional
        Where to write (default: standard error, looked up when the stage starts).
    mode : {'bar', 'lines', 'off'}, optional
        Default: :func:`display_mode` of the stream.

    Examples
    --------
    >>> import io
    >>> from streamtopic.progress import Stage
    >>> out = io.StringIO()
    >>> with Stage("counting", stream=out, mode="lines") as stage:
    ...     stage.update(1.0, "3 words")
    >>> out.getvalue().startswith("counting: 3 words; ")
    True
    """

    def __init__(self, label: str, *, enabled: bool = True, stream: TextIO | None = None,
                 mode: str | None = None) -> None:
        self.label = label or "compute"
        self.enabled = enabled
        self._stream = stream
        self._mode = mode
        self.fraction = 0.0
        self.note = ""
        self.seconds = 0.0
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._running = False
        self._ticker: threading.Thread | None = None

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def mode(self) -> str:
        """The display in use: ``off`` when disabled."""
        if not self.enabled:
            return "off"
        return self._mode if self._mode is not None else display_mode(self.stream)

    def __enter__(self: _S) -> _S:
        self._t0 = time.perf_counter()
        if self.mode == "bar":
            self._running = True
            self._ticker = threading.Thread(target=self._tick, daemon=True,
                                            name="streamtopic-progress")
            self._ticker.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.seconds = time.perf_counter() - self._t0
        self._running = False
        if self._ticker is not None:
            self._ticker.join()
        if self.mode == "bar":
            self._draw(final=True)
        elif self.mode == "lines" and kind is None:
            note = f"{self.note}; " if self.note else ""
            self._write(f"{self.label}: {note}{_seconds(self.seconds)}\n")

    def update(self, fraction: float | None = None, note: str | None = None) -> None:
        """Set the share done (0 to 1) and the figures shown beside the bar."""
        if fraction is not None:
            self.fraction = min(1.0, max(0.0, float(fraction)))
        if note is not None:
            self.note = note

    def follow(self, fraction: float) -> None:
        """The share of the running computation's tasks done (:meth:`tasks`)."""
        self.update(fraction)

    def line(self) -> str:
        """The bar's line as drawn now."""
        filled = int(BAR_WIDTH * self.fraction)
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        note = f" {self.note}" if self.note else ""
        elapsed = _seconds(time.perf_counter() - self._t0)
        return f"{self.label} [{bar}] {int(100 * self.fraction)}%{note} {elapsed}"

    def _tick(self) -> None:
        while self._running:
            self._draw()
            time.sleep(REDRAW)

    def _draw(self, final: bool = False) -> None:
        width = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
        text = self.line()[:width]
        self._write(f"\r{text:<{width}}" + ("\n" if final else ""))

    def _write(self, text: str) -> None:
        with self._lock:
            try:
                self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError):  # a closed stream: the display is not the work
                pass

    @contextmanager
    def tasks(self) -> Iterator[None]:
        """Follow the tasks of Dask's local schedulers (threads, processes, synchronous) run
        inside: the share done is the share of the graph's tasks finished."""
        if self.mode != "bar":
            yield
            return
        from dask.callbacks import Callback

        stage = self

        class Follow(Callback):
            def _posttask(self, key: Any, result: Any, dsk: Any, state: dict[str, Any],
                          worker_id: Any) -> None:
                done = len(state["finished"])
                left = sum(len(state[k]) for k in ("ready", "waiting", "running"))
                stage.follow(done / max(done + left, 1))

        with Follow():  # type: ignore[no-untyped-call]  # dask's __init__: no hints
            yield

    def watch(self, futures: Sequence[Any] | Any) -> None:
        """Follow ``futures`` (or persisted collections) of a distributed client until they
        finish (so that the stage's time is theirs), through the scheduler's progress plugin
        when a bar is shown; returns at once when the display is off."""
        if self.mode == "off":
            return
        from distributed import futures_of, wait
        from distributed.diagnostics.progressbar import TextProgressBar

        stage = self

        class Follow(TextProgressBar):
            def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:
                stage.update((1 - remaining / all) if all else 1.0)

            def _draw_stop(self, **kwargs: Any) -> None:
                pass

        found = futures_of(futures if isinstance(futures, (list, tuple)) else [futures])
        if found and self.mode == "bar":
            Follow(found, complete=True)  # type: ignore[no-untyped-call]  # the same, in distributed
        elif found:
            wait(found)


class Passes(Stage):
    """One display over the passes of an iterative stage (EM): the pass count and the current
    log-likelihood per token beside one bar; one line at the end elsewhere, and one log line
    per pass (``-v``).

    Parameters
    ----------
    label : str
        The stage's name.
    passes : int, optional
        Exactly this many passes: the bar is the share of them done.
    max_passes : int
        Without ``passes``, the cap; the stage stops earlier once the relative change of the
        figure falls below ``tol``, and the bar then shows how far the change has come down
        towards ``tol``, on a log scale, from the first change measured (never going back).
    tol : float
        The stopping rule's relative tolerance.
    enabled, stream, mode
        As :class:`Stage`.

    Examples
    --------
    >>> import io
    >>> from streamtopic.progress import Passes
    >>> out = io.StringIO()
    >>> with Passes("refine", max_passes=50, tol=1e-3, stream=out, mode="lines") as bar:
    ...     for loglik in (-8.0, -7.5, -7.49, -7.4899):
    ...         bar.done_pass(loglik)
    >>> print(out.getvalue().split(";")[0])
    refine: 4 passes, log-likelihood/token -7.4899, converged
    """

    def __init__(self, label: str, *, passes: int | None = None, max_passes: int = 50,
                 tol: float = 0.0, enabled: bool = True, stream: TextIO | None = None,
                 mode: str | None = None) -> None:
        super().__init__(label, enabled=enabled, stream=stream, mode=mode)
        self.passes, self.max_passes, self.tol = passes, max_passes, tol
        self.values: list[float] = []
        self.within = 0.0  # the share of the running pass' tasks done
        self._first_change: float | None = None
        self._last = time.perf_counter()

    def follow(self, fraction: float) -> None:
        """The share of the running pass' tasks done, shown after the figures."""
        self.within = fraction

    def line(self) -> str:
        """The bar's line, with the running pass' share of tasks when under way."""
        text = super().line()
        if 0.0 < self.within < 1.0:
            text += f" (pass {len(self.values) + 1}: {int(100 * self.within)}%)"
        return text

    def done_pass(self, value: float) -> None:
        """Record a finished pass and its log-likelihood per token."""
        now = time.perf_counter()
        self.values.append(float(value))
        n, cap = len(self.values), self.passes or self.max_passes
        change = self.change()
        log.info("%s pass %d: log-likelihood/token %.4f, %.2f s", self.label, n, value,
                 now - self._last)
        self._last = now
        self.within = 0.0
        converged = self.passes is None and change is not None and change < self.tol
        self.update(self._fraction(n, cap, change, converged), self._note(n, cap, converged))

    def change(self) -> float | None:
        """The relative change of the figure in the last pass (None before the second)."""
        if len(self.values) < 2:
            return None
        a, b = self.values[-2], self.values[-1]
        return (b - a) / max(abs(b), 1e-300)

    def _fraction(self, n: int, cap: int, change: float | None, converged: bool) -> float:
        if converged or n >= cap:
            return 1.0
        share = n / cap
        if self.passes is not None or change is None or change <= 0 or self.tol <= 0:
            return max(self.fraction, share)
        if self._first_change is None:
            self._first_change = max(change, self.tol * 1.0001)
        span = math.log(self._first_change / self.tol)
        towards = math.log(self._first_change / max(change, self.tol)) / span
        return max(self.fraction, share, min(towards, 0.99))

    def _note(self, n: int, cap: int, converged: bool) -> str:
        figure = f"log-likelihood/token {self.values[-1]:.4f}"
        if self.mode == "bar":
            passes = f"pass {n}/{cap}" if self.passes is not None else f"pass {n} (<={cap})"
            change = self.change()
            delta = f" ({change:+.1e})" if change is not None else ""
            return f"{passes} loglik/token {self.values[-1]:.4f}{delta}"
        return f"{n} passes, {figure}" + (", converged" if converged else "")
