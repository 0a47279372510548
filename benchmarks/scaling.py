"""Benchmark: ingest and fit throughput with 1 and 2 worker processes on this machine.

A semi-synthetic *text* corpus (one document per line; tokenising is the real-world cost of
ingest) is ingested, and the resulting store fitted, on a local Dask cluster of 1, then 2,
single-threaded worker processes. Times exclude cluster start-up (the cluster is started
first, then the work is timed), best of ``--repeats`` runs on the same cluster. Target: at
least 1.7× faster with 2 workers.

It also records the figures ``docs/scaling.md`` plans from: tokens per second per core for
ingest, seconds per pass over Q for fit, and the store's size.

Usage::

    python benchmarks/scaling.py [--docs 60000] [--repeats 3] [--out PATH]

Prints JSON and writes ``benchmarks/results/scaling.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def run(workers: int, corpus: str, workdir: str, K: int, repeats: int = 3) -> dict[str, Any]:
    """Ingest and fit ``repeats`` times on one cluster (a fresh store each time); the best
    time of each counts (as ``timeit`` does: the others include interference from the rest of
    the machine), and every time is recorded."""
    import logging

    from distributed import Client, LocalCluster

    import streamtopic as st

    store = os.path.join(workdir, f"store-{workers}.zarr")
    ingest_times, fit_times, stages = [], [], []
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0", silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(workers)
        for _ in range(repeats):
            shutil.rmtree(store, ignore_errors=True)
            t0 = time.perf_counter()
            rep = st.ingest(corpus, store, progress=False)
            ingest_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            model = st.AnchorTopicModel(K, seed=0).fit(store)
            fit_times.append(time.perf_counter() - t0)
            stages.append(model.diagnostics_["seconds"])
    s = st.CooccurrenceStore.open(store)
    t_ingest, t_fit = min(ingest_times), min(fit_times)
    return {
        "workers": workers,
        "ingest_seconds": t_ingest,
        "ingest_seconds_all": ingest_times,
        "ingest_tokens_per_second": rep.n_tokens / t_ingest,
        "fit_seconds": t_fit,
        "fit_seconds_all": fit_times,
        "fit_stages": stages[fit_times.index(t_fit)],
        "n_tokens": rep.n_tokens,
        "V": s.V,
        "q_bytes": s.q_bytes(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=60_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "scaling.json"))
    args = parser.parse_args()

    import numpy as np

    from streamtopic import synth

    workdir = tempfile.mkdtemp(prefix="streamtopic-scaling-")
    try:
        A = synth.dirichlet_topics(5000, 50, beta=0.05, seed=1)
        corpus = os.path.join(workdir, "corpus.txt")
        synth.write_corpus(corpus, A, args.docs, format="text", alpha=0.1, doc_length=100,
                           seed=2)
        runs = [run(w, corpus, workdir, 50, args.repeats) for w in (1, 2)]
        one, two = runs
        result = {
            "benchmark": "scaling",
            "corpus": {"format": "text", "docs": args.docs, "doc_length": 100, "V_generated": 5000},
            "runs": runs,
            "speedup": {
                "ingest": one["ingest_seconds"] / two["ingest_seconds"],
                "fit": one["fit_seconds"] / two["fit_seconds"],
            },
            "target": "at least 1.7x faster with 2 worker processes than with 1",
            "timing": f"best of {args.repeats} runs per worker count, cluster start-up excluded",
            "cpus": os.cpu_count(),
            "numpy": np.__version__,
        }
        result["pass"] = {k: v >= 1.7 for k, v in result["speedup"].items()}
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=2)
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
