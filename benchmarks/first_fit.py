"""A newcomer's first fit against the second: the README's demo command, each run in a fresh
process with a fresh store, "first" with an empty numba cache (its own ``NUMBA_CACHE_DIR``,
which takes precedence over ``__pycache__``), "second" with the cache the first one filled.

    python benchmarks/first_fit.py [--repeats 3] [--out benchmarks/results/first_fit.json]
        [--corpus PATH]

``--corpus`` fits raw text instead of the demo (for example the 20 Newsgroups training set as
JSON Lines): the tokenizer's kernels then compile too, in a background process when warm-up
is on (the default; the ingest tokenises in Python meanwhile), in the ingest's worker
processes before their first chunk when it is off (``STREAMTOPIC_WARMUP=0``, as before
issue 29's last change). Before the second run the script waits until no background
compilation holds its lock in the cache directory (a newcomer's second fit comes later than
a benchmark's), and records that wait.

Runs with the background compilation of the EM kernels (the default: it starts at the
package's import) and without it (``STREAMTOPIC_WARMUP=0``: the first refinement pass
compiles them), taking turns; prints and records the wall and CPU times, their medians and
the ratio first / second. The fit alone is timed: ``streamtopic demo-path`` runs with the
default numba cache, so a compilation that its import would start (the newcomer's
``streamtopic fit "$(streamtopic demo-path)"``) does not help the measured first fit.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def demo_path() -> str:
    out = subprocess.run([sys.executable, "-m", "streamtopic", "demo-path"], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def wait_for_background(cache: str) -> float:
    """Wait until no process holds a compilation lock (``streamtopic-*.lock``) in the numba
    cache directory ``cache``; returns the seconds waited."""
    t0 = time.perf_counter()
    for lock_path in Path(cache).glob("**/streamtopic-*.lock"):
        with open(lock_path, "rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)
    return time.perf_counter() - t0


def one_fit(cache: str, warmup: bool, k: int, corpus: str | None = None) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of ``streamtopic fit CORPUS -k K -o ... --store
    ...`` in a new process (CORPUS: the demo by default)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, STREAMTOPIC_WARMUP="1" if warmup else "0")
    with tempfile.TemporaryDirectory() as d:
        source = corpus or demo_path()
        cmd = [sys.executable, "-m", "streamtopic", "fit", source, "-k", str(k), "-o",
               f"{d}/kos-model.zarr", "--store", f"{d}/kos.zarr", "-q"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("-k", type=int, default=20)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "first_fit.json"))
    ap.add_argument("--corpus", default=None, help="raw input to fit instead of the demo")
    args = ap.parse_args()
    runs: dict[str, dict[str, list[float]]] = {
        name: {"first": [], "second": [], "first_cpu": [], "second_cpu": [],
               "background_wait": []}
        for name in ("no_warmup", "warmup")}
    for r in range(args.repeats):
        for name, warmup in (("no_warmup", False), ("warmup", True)):
            with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
                first, first_cpu = one_fit(cache, warmup, args.k, args.corpus)
                waited = wait_for_background(cache)
                second, second_cpu = one_fit(cache, warmup, args.k, args.corpus)
            for key, value in (("first", first), ("second", second),
                               ("first_cpu", first_cpu), ("second_cpu", second_cpu),
                               ("background_wait", waited)):
                runs[name][key].append(value)
            print(f"repeat {r + 1} {name}: first {first:.2f} s (CPU {first_cpu:.2f} s), "
                  f"second {second:.2f} s (CPU {second_cpu:.2f} s); waited {waited:.2f} s "
                  "for background compilation in between", flush=True)
    summary: dict[str, dict[str, Any]] = {}
    for name, t in runs.items():
        med = {key: statistics.median(v) for key, v in t.items()}
        summary[name] = {f"{key}_median_s": round(v, 2) for key, v in med.items()}
        summary[name].update(ratio=round(med["first"] / med["second"], 3), runs=t)
        print(f"{name}: first {med['first']:.2f} s, second {med['second']:.2f} s, ratio "
              f"{med['first'] / med['second']:.2f}; CPU {med['first_cpu']:.2f} s and "
              f"{med['second_cpu']:.2f} s")
    record = {"command": f"streamtopic fit {args.corpus or 'DEMO'} -k {args.k} -o OUT "
                         "--store STORE -q",
              "cpus": os.cpu_count(), "load_average": os.getloadavg(), **summary}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
