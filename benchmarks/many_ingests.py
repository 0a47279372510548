"""Benchmark: small ingests as a store ages (issue 30, case 19).

A store gets ``--ingests`` (default 1,000) tiny text ingests, one after the other, in this
process (``streamtopic.ingest``, Dask's synchronous scheduler): each input is a file of 5
documents of 30 words over the store's 260 words. Every ingest is a version that adds one
input to the manifest and one partition to the token cache. Each ingest's wall time is
recorded; the acceptance compares the median of the last 100 with the median of the first
100 (target: at most 1.3 times). Before format 5 every version rewrote the whole manifest
(580 bytes per input: 582 KB at version 1,000) and the medians grew from 208 ms to 642 ms.

Usage::

    python benchmarks/many_ingests.py [--ingests 1000] [--out PATH] [--workdir DIR]

Prints the results as JSON and writes them to ``benchmarks/results/many_ingests.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "many_ingests.json")
TERMS = [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(260)]
TARGET = 1.3


def write_docs(path: str, n_docs: int, seed: int, length: int = 30) -> str:
    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        for _ in range(n_docs):
            fh.write(" ".join(rng.choice(TERMS, size=length)) + "\n")
    return path


def run(n: int, workdir: str) -> dict:
    import dask

    import streamtopic as st

    store = os.path.join(workdir, "s.zarr")
    inputs = os.path.join(workdir, "inputs")
    os.makedirs(inputs)
    times = []
    with dask.config.set(scheduler="sync"):
        st.ingest(write_docs(os.path.join(inputs, "base.txt"), 200, seed=0), store,
                  min_df=1, max_df=1.0, progress=False)
        for i in range(n):
            path = write_docs(os.path.join(inputs, f"d{i:05d}.txt"), 5, seed=i + 1)
            t0 = time.perf_counter()
            st.ingest(path, store, progress=False)
            times.append(time.perf_counter() - t0)
    with st.CooccurrenceStore.open(store) as s:
        version, n_sources = s.version, len(s.sources)
        head_meta = os.path.getsize(os.path.join(store, "versions", f"v{version:06d}",
                                                 "zarr.json"))
        problems = s.verify()
    first = statistics.median(times[:100])
    last = statistics.median(times[-100:])
    return {
        "ingests": n, "version": version, "sources": n_sources, "verify": problems,
        "median_first_100_s": round(first, 4), "median_last_100_s": round(last, 4),
        "ratio_last_to_first": round(last / first, 3), "target_ratio": TARGET,
        "within_target": last / first <= TARGET,
        "manifest_bytes": os.path.getsize(os.path.join(store, "manifest.jsonl")),
        "head_version_metadata_bytes": head_meta,
        "seconds_per_ingest_by_hundred": [round(statistics.median(times[i:i + 100]), 4)
                                          for i in range(0, n, 100)],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ingests", type=int, default=1000)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    sys.path.insert(0, HERE)
    from _common import machine_info, write_result

    workdir = tempfile.mkdtemp(prefix="st-ingests-", dir=args.workdir)
    try:
        result = {"benchmark": "many_ingests",
                  "command": " ".join(["python", "benchmarks/many_ingests.py", *sys.argv[1:]]),
                  **run(args.ingests, workdir), "machine": machine_info()}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(write_result(result, args.out))
    return 0 if result["within_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
