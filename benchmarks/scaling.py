"""Benchmark: ingest and fit throughput with 1 and 2 worker processes on this machine.

A semi-synthetic *text* corpus (one document per line; tokenising is the real-world cost of
ingest) is ingested, and the resulting store fitted, on a local Dask cluster of 1 and one of
2 single-threaded worker processes: the clusters ``streamtopic --local cluster --workers N``
starts, with Dask's housekeeping set by ``streamtopic.cluster.CLUSTER_CONFIG``.

Timings are *paired*. Both clusters start first and are warmed up with a small untimed ingest
and fit (the workers import and load what the runs use, as on a long-lived cluster); then,
``--repeats`` times, each cluster ingests the corpus into a fresh store, and each fits its
store ``--fits`` times, the two clusters taking turns run by run (which one goes first
alternates). On this shared machine the speed of the cores drifts by ±15 % over tens of
seconds; taking turns puts each 1-worker time next to a 2-worker time measured under the same
conditions. While one cluster runs, the other is idle (a few hundredths of a core). Both
clusters fit the same store, the one ingested last, so that every fit keeps it in the page
cache: this VM pages out (DAMON) files left untouched for a few seconds, and a fit that reads
Q from the disk instead takes 0.2–0.4 s longer on 1 worker and on 2 alike (one disk), which
would measure the disk, not the fit.

Recorded: every time; the best time of each cluster (as ``timeit``: the others include
interference from the rest of the machine) and the ratio of the best times, ``speedup``, which
the target judges; the ratio of the medians; and the median of the paired ratios. Target: at
least 1.7× faster with 2 workers. For scale, ``machine_ceiling`` is what the machine itself
gives from a second process, measured once per round: pure CPU work (tokenising) without Dask,
2 tasks on 1 process against 4 on 2. On this VM it ranges from 1.4× to 2.0× from one minute
to the next: the second vCPU is shared with the host's other load.

It also records the figures ``docs/scaling.md`` plans from: tokens per second per core for
ingest, seconds per stage of the fit, and the store's size.

Usage::

    python benchmarks/scaling.py [--docs 60000] [--vocab 5000] [--repeats 5] [--fits 3]
                                 [--out PATH]

Prints JSON and writes ``benchmarks/results/scaling.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from contextlib import ExitStack
from typing import Any

from _common import machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))


def _tokenise_rounds(rounds: int) -> float:
    """Seconds of pure CPU work like an ingest's: tokenising a fixed text ``rounds`` times."""
    from streamtopic.synth import default_vocab
    from streamtopic.vocabulary import Tokenizer

    tok = Tokenizer()
    words = default_vocab(997)
    text = " ".join(f"{words[i % 997]} {words[i % 31]}" for i in range(20_000))
    t0 = time.perf_counter()
    for _ in range(rounds):
        tok(text)
    return time.perf_counter() - t0


def ceiling_once(one: Any, two: Any, rounds: int = 120) -> float:
    """What this machine itself gives from a second process, now: the same CPU-bound work
    (no Dask, no communication) as 2 tasks on a pool of 1 process and as 4 tasks on a pool
    of 2; the ratio of throughputs is the best any two-worker job could measure."""
    t0 = time.perf_counter()
    one.map(_tokenise_rounds, [rounds] * 2)
    t1 = time.perf_counter() - t0
    t0 = time.perf_counter()
    two.map(_tokenise_rounds, [rounds] * 4, chunksize=1)
    return 2 * t1 / (time.perf_counter() - t0)


def timed_ingest(client: Any, corpus: str, store: str) -> tuple[float, Any]:
    """Seconds to ingest ``corpus`` into a new store on ``client``'s cluster, and the report."""
    import streamtopic as st

    shutil.rmtree(store, ignore_errors=True)
    t0 = time.perf_counter()
    rep = st.ingest(corpus, store, progress=False, client=client)
    return time.perf_counter() - t0, rep


def timed_fit(client: Any, store: str, K: int, **params: Any) -> tuple[float, dict[str, float]]:
    """Seconds to fit ``store`` on ``client``'s cluster, and the fit's seconds per stage."""
    import streamtopic as st

    t0 = time.perf_counter()
    model = st.AnchorTopicModel(K, method="plain", seed=0, **params).fit(store, client=client)
    return time.perf_counter() - t0, model.diagnostics_["seconds"]


def summarise(workers: int, ingest: list[float], fit: list[float],
              stages: list[dict[str, float]], rep: Any, store: Any) -> dict[str, Any]:
    """Every time, the best and the median of each, and the stages of the best fit."""
    t_ingest, t_fit = min(ingest), min(fit)
    return {
        "workers": workers,
        "ingest_seconds": t_ingest,
        "ingest_seconds_median": statistics.median(ingest),
        "ingest_seconds_all": ingest,
        "ingest_tokens_per_second": rep.n_tokens / t_ingest,
        "fit_seconds": t_fit,
        "fit_seconds_median": statistics.median(fit),
        "fit_seconds_all": fit,
        "fit_stages": stages[fit.index(t_fit)],
        "n_tokens": rep.n_tokens,
        "V": store.V,
        "q_bytes": store.q_bytes(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=60_000)
    parser.add_argument("--vocab", type=int, default=5000, help="words of the generator")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fits", type=int, default=3, help="fits timed per cluster")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "scaling.json"))
    args = parser.parse_args()


    from streamtopic import CooccurrenceStore, synth
    from streamtopic.cluster import CLUSTER_CONFIG, scheduler

    K = 50
    workdir = tempfile.mkdtemp(prefix="streamtopic-scaling-")
    try:
        A = synth.dirichlet_topics(args.vocab, K, beta=0.05, seed=1)
        corpus = os.path.join(workdir, "corpus.txt")
        synth.write_corpus(corpus, A, args.docs, format="text", alpha=0.1, doc_length=100,
                           seed=2)
        synth.write_corpus(os.path.join(workdir, "warm.txt"), A, 3000, format="text",
                           alpha=0.1, doc_length=100, seed=3)
        times: dict[int, dict[str, list[Any]]] = {
            w: {"ingest": [], "fit": [], "stages": []} for w in (1, 2)}
        reports: dict[int, Any] = {}
        stores = {w: os.path.join(workdir, f"store-{w}.zarr") for w in (1, 2)}
        ceiling: list[float] = []
        with ExitStack() as stack:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            pools = [stack.enter_context(ctx.Pool(n)) for n in (1, 2)]
            ceiling_once(*pools, rounds=1)  # warm up
            clients = {}
            for w in (1, 2):
                # the local cluster `streamtopic ingest/fit --local cluster --workers N` starts
                clients[w] = stack.enter_context(
                    scheduler(n_workers=w, local="cluster", quiet=True))
                clients[w].wait_for_workers(w)
            for w in (1, 2):  # untimed warm-up
                warm = os.path.join(workdir, f"warm-{w}.zarr")
                timed_ingest(clients[w], os.path.join(workdir, "warm.txt"), warm)
                # (a small corpus: its words rarely reach the default anchor_min_df)
                timed_fit(clients[w], warm, K, anchor_min_df=10)
            for r in range(args.repeats):
                ceiling.append(ceiling_once(*pools))
                order = (1, 2) if r % 2 == 0 else (2, 1)
                for w in order:
                    t, reports[w] = timed_ingest(clients[w], corpus, stores[w])
                    times[w]["ingest"].append(t)
                for _ in range(args.fits):
                    for w in order:
                        # both fit one store (the same bytes), which every fit keeps in the
                        # page cache: this VM pages out files untouched for a few seconds
                        t, stage = timed_fit(clients[w], stores[order[-1]], K)
                        times[w]["fit"].append(t)
                        times[w]["stages"].append(stage)
        runs = [summarise(w, times[w]["ingest"], times[w]["fit"], times[w]["stages"],
                          reports[w], CooccurrenceStore.open(stores[w])) for w in (1, 2)]
        one, two = runs
        paired = {k: statistics.median(a / b for a, b in zip(one[f"{k}_seconds_all"],
                                                              two[f"{k}_seconds_all"],
                                                              strict=True))
                  for k in ("ingest", "fit")}
        result = {
            "benchmark": "scaling",
            "corpus": {"format": "text", "docs": args.docs, "doc_length": 100,
                       "V_generated": args.vocab},
            "runs": runs,
            "speedup": {
                "ingest": one["ingest_seconds"] / two["ingest_seconds"],
                "fit": one["fit_seconds"] / two["fit_seconds"],
            },
            "speedup_of_medians": {
                "ingest": one["ingest_seconds_median"] / two["ingest_seconds_median"],
                "fit": one["fit_seconds_median"] / two["fit_seconds_median"],
            },
            "median_paired_speedup": paired,
            "machine_ceiling": {
                "speedup_best": max(ceiling), "speedup_median": statistics.median(ceiling),
                "speedup_all": ceiling,
                "work": "tokenising text, CPU only, no Dask: 2 tasks on 1 process vs 4 on 2; "
                        "measured once per round, between the rounds' runs",
            },
            "target": "at least 1.7x faster with 2 worker processes than with 1",
            "timing": f"best of {args.repeats} ingests and {args.repeats * args.fits} fits "
                      "per cluster, the 1- and 2-worker clusters taking turns run by run; "
                      "cluster start-up and a warm-up run excluded",
            "fit": f"K = {K} topics, RecoverL2, topic-topic by pinv",
            "cluster_config": CLUSTER_CONFIG,
            "machine": machine_info(),
        }
        result["pass"] = {k: v >= 1.7 for k, v in result["speedup"].items()}
        print(write_result(result, args.out))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
