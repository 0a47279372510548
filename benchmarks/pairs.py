"""Benchmark: the rate of ingest's pair counting against the machine's GEMM (issue 24).

On a long-document corpus (``python benchmarks/rawtext_corpora.py longdocs DIR --words
8000000``), the script

1. measures a plain numpy GEMM (2048 × 2048 × 2048, float64) on one BLAS thread and on all;
2. ingests the corpus once (in this process) for its store, then reads every partition's
   weighted documents (:func:`streamtopic.cooccurrence._partition_partial`) into memory;
3. times the pair counting alone: every group's chain of accumulation links
   (:func:`~streamtopic.cooccurrence._accumulate_piece`, dense and sparse running sums as in
   ingest) in one process on one thread, BLAS pinned to one thread, for the two ways of
   counting (``scalar``: every pair one multiply-add; ``blas``: the tiled kernel) and the
   two link sizes (one partition a link, as before; ``LINK_BYTES``), in turns, the median of
   ``--repeats``;
4. measures a ceiling (:func:`ceiling`): the most frequent words' pairs at the full GEMM
   rate, every other pair by scipy.sparse's product, at the best split;
5. times ``streamtopic -v ingest`` as a whole (a subprocess: the default local cluster of
   worker processes) before (``STREAMTOPIC_PAIRS=scalar STREAMTOPIC_LINK_BYTES=0``) and after
   (the defaults), in turns, on the long documents and on short ones (20 Newsgroups, a
   semi-synthetic HDF5 corpus as in ``benchmarks/ingest.py``).

The work is Σ_d u_d² (u_d: the document's distinct words in the vocabulary), the
multiply-adds of the full Σ_d w_d h_d h_dᵀ; the links compute the upper triangle of Q's blocks
(the diagonal blocks whole), ``pairs_in_rectangles`` of them. The achieved rate is work ÷ the
pair counting's time, and its ratio to the one-thread GEMM rate is reported.

Usage::

    python benchmarks/pairs.py [--corpus PATH] [--short PATH,...] [--repeats 3]
                               [--ingest-repeats 3] [--sweep 0.05,0.1,0.2]
                               [--ceiling 0,1000,2000,4000,8000] [--out PATH]

Prints the results as JSON and writes them to ``benchmarks/results/pairs.json`` (or --out).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from _common import machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "pairs.json")
#: the long-document corpus of issue 24 (``rawtext_corpora.py longdocs``), built in the
#: work directory unless ``--corpus`` names one
LONGDOCS_WORDS = 60_000_000
SHARED = os.environ.get("STREAMTOPIC_SHARED_DATA",
                        os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data")))
DEFAULT_SHORT = [os.path.join(SHARED, "20newsgroups", "20news-bydate.tar.gz"), "synth:4000000"]
BEFORE = {"STREAMTOPIC_PAIRS": "scalar", "STREAMTOPIC_LINK_BYTES": "0"}
AFTER: dict[str, str] = {}
_COOC = re.compile(r"co-occurrence: ([0-9.]+) s, ([0-9]+) tasks")


def gemm_rate(threads: int | None, n: int = 2048, repeats: int = 5) -> float:
    """Multiply-adds per second of numpy's n × n × n float64 matrix product, the median of
    ``repeats``, on ``threads`` BLAS threads (None: the BLAS default, all cores)."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a, b = rng.random((n, n)), rng.random((n, n))
    out = np.empty((n, n))
    times = []
    with threadpool_limits(threads, "blas") if threads else _nothing():
        np.matmul(a, b, out=out)
        for _ in range(repeats):
            t0 = time.perf_counter()
            np.matmul(a, b, out=out)
            times.append(time.perf_counter() - t0)
    return n**3 / statistics.median(times)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def load_partitions(corpus_path: str, store_path: str) -> tuple[Any, list[Any], int]:
    """The store's grid, each partition's weighted documents (None for a partition without
    any), read in this process, and how many partitions ingest puts in one link."""
    import dask

    from streamtopic import cooccurrence as co
    from streamtopic.corpus import read_corpus
    from streamtopic.store import CooccurrenceStore

    store = CooccurrenceStore.open(store_path)
    grid = co._make_grid(store.V, store.chunk_size, store.doc_freq, store.n_docs)
    corpus = read_corpus(corpus_path)
    bag = corpus.to_bag().map_partitions(co._partition_partial, store.path, store.uid, grid,
                                         store.doc_length)
    with dask.config.set(scheduler="threads"):
        parts = dask.compute(*bag.to_delayed())
    return grid, [p[0][0] for p in parts], co._partitions_per_link(corpus)


def work(docs: list[Any], grid: Any) -> dict[str, float]:
    """Σ_d u_d² and the pairs the links count (upper triangle of blocks)."""
    from streamtopic.cooccurrence import pair_kernels

    _, count_pairs = pair_kernels()
    u = np.concatenate([np.diff(d.indptr) for d in docs if d is not None]).astype(np.float64)
    pairs = sum(count_pairs(d.indptr, d.indices, *grid.rows(i), *grid.cols(i, g))
                for i, g in grid.groups for d in docs if d is not None)
    return {"documents": int(u.size), "sum_u2": float(np.sum(u * u)),
            "median_u": float(np.median(u)), "pairs_in_rectangles": float(pairs)}


def accumulate_all(grid: Any, links: list[Any]) -> float:
    """Seconds to run every group's chain over ``links`` in this thread (BLAS pinned)."""
    from threadpoolctl import threadpool_limits

    from streamtopic import cooccurrence as co

    with threadpool_limits(1, "blas"):
        t0 = time.perf_counter()
        for i, g in grid.groups:
            acc = None
            bounds = (*grid.rows(i), *grid.cols(i, g))
            for part in links:
                acc = co._accumulate_piece(acc, part, bounds)
            del acc
        return time.perf_counter() - t0


def merged(docs: list[Any], per_link: int) -> list[Any]:
    from streamtopic import cooccurrence as co

    return [co._docs_of(*[[(d, None)] for d in docs[k : k + per_link]])
            for k in range(0, len(docs), per_link)]


def time_accumulation(grid: Any, docs: list[Any], per_link: int, repeats: int,
                      sweep: list[float]) -> dict[str, Any]:
    """Median seconds of the accumulation per (method, link size), run in turns."""
    from streamtopic import cooccurrence as co

    variants = {f"{m}/{name}": (m, links, co.BLAS_DENSITY)
                for m in ("scalar", "blas")
                for name, links in (("partition", docs), ("merged", merged(docs, per_link)))}
    for kappa in sweep:
        variants[f"blas/merged/density={kappa:g}"] = ("blas", merged(docs, per_link), kappa)
    runs: dict[str, list[float]] = {k: [] for k in variants}
    kappa0 = co.BLAS_DENSITY
    try:
        for rep in range(repeats):
            for name, (method, links, kappa) in variants.items():
                co.PAIR_METHOD, co.BLAS_DENSITY = method, kappa
                runs[name].append(accumulate_all(grid, links))
                print(f"accumulation {name} run {rep + 1}: {runs[name][-1]:.2f} s",
                      file=sys.stderr, flush=True)
    finally:
        co.PAIR_METHOD, co.BLAS_DENSITY = "blas", kappa0
    return {k: {"seconds": statistics.median(v), "runs": v,
                "links_per_group": len(variants[k][1])} for k, v in runs.items()}


def ceiling(docs: list[Any], gemm_one: float, heads: list[int], kernel_pairs_per_second: float,
            block: int = 2048) -> dict[str, Any]:
    """The best rate a split of the work between dense GEMM and sparse products can reach on
    these documents, from measured parts (one thread, BLAS pinned).

    The words are ranked by document frequency. For a head of the ``h`` most frequent words,
    the pairs inside the head are counted at the full one-thread GEMM rate as D × h dense
    columns (a symmetric product: D·h²/2 multiply-adds; optimistic, since it ignores the
    packing of the dense block), and every pair with a tail word by scipy.sparse's product
    Hᵀ·H_tail, timed here on column blocks of ``block`` tail words. The rate is Σ_d u_d² ÷
    (GEMM time + sparse time), the best over ``heads``; ratio to the GEMM rate reported. The
    same with the tail's pairs at ``kernel_pairs_per_second`` (streamtopic's own kernel's
    rate, measured above on every pair) instead of scipy's. ``useful_fraction`` is the share
    of the head GEMM's multiply-adds that are pairs of the documents (the rest multiply
    zeros): the most a dense product of that block can give of the GEMM rate."""
    import scipy.sparse as sps
    from threadpoolctl import threadpool_limits

    ds = [d for d in docs if d is not None]
    V = ds[0].V
    H = sps.vstack([sps.csr_matrix((np.ones_like(d.data), d.indices, d.indptr),
                                   shape=(d.indptr.size - 1, V)) for d in ds]).tocsc()
    D = H.shape[0]
    df = np.diff(H.indptr)
    order = np.argsort(-df, kind="stable")
    u = np.diff(H.tocsr().indptr).astype(np.float64)
    total = float(np.sum(u * u))
    Ht = H.T.tocsr()  # V×D
    out: dict[str, Any] = {"sum_u2": total, "documents": D, "heads": {}}
    with threadpool_limits(1, "blas"):
        for h in heads:
            head = order[:h]
            u_head = np.asarray(H[:, head].sum(axis=1)).ravel()
            head_pairs = float(np.sum(u_head * u_head))
            tail = np.sort(order[h:])
            t_sparse = 0.0
            for k in range(0, tail.size, block):
                cols = H[:, tail[k:k + block]]
                t0 = time.perf_counter()
                prod = Ht @ cols  # V × block: every pair with one of these tail words
                t_sparse += time.perf_counter() - t0
                del prod
            t_gemm = D * h * h / 2 / gemm_one
            rate = total / (t_gemm + t_sparse)
            rate_kernel = total / (t_gemm + (total - head_pairs) / kernel_pairs_per_second)
            out["heads"][str(h)] = {
                "head_share_of_work": head_pairs / total,
                "gemm_seconds_at_peak": t_gemm, "sparse_seconds": t_sparse,
                "sparse_pairs_per_second": (total - head_pairs) / max(t_sparse, 1e-12),
                "useful_fraction": head_pairs / max(D * h * h, 1),
                "macs_per_second": rate, "ratio_to_gemm_one_thread": rate / gemm_one,
                "with_kernel_tail_ratio_to_gemm": rate_kernel / gemm_one}
            print(f"ceiling head {h}: {out['heads'][str(h)]}", file=sys.stderr, flush=True)
    best = max(out["heads"].values(), key=lambda r: r["macs_per_second"])
    out["best_macs_per_second"] = best["macs_per_second"]
    out["best_ratio_to_gemm_one_thread"] = best["ratio_to_gemm_one_thread"]
    out["best_with_kernel_tail_ratio_to_gemm"] = max(
        r["with_kernel_tail_ratio_to_gemm"] for r in out["heads"].values())
    return out


def synth_corpus(spec: str, workdir: str) -> str:
    """``synth:TOKENS``: the semi-synthetic HDF5 corpus of ``benchmarks/ingest.py`` (V =
    5,000, K = 50, documents of 100 tokens), written once into ``workdir``."""
    from ingest import ALPHA, BETA, DOC_LENGTH, SEED, K, V
    from streamtopic.synth import dirichlet_topics, write_corpus

    tokens = int(float(spec.split(":", 1)[1]))
    path = os.path.join(workdir, f"synth-{tokens}.h5")
    if not os.path.exists(path):
        write_corpus(path, dirichlet_topics(V, K, BETA, seed=SEED), tokens // DOC_LENGTH,
                     format="hdf5", alpha=ALPHA, doc_length=DOC_LENGTH, seed=SEED)
    return path


def run_ingest(corpus: str, store: str, env: dict[str, str], extra: list[str]) -> dict[str, Any]:
    """``streamtopic -v ingest`` in a subprocess with ``env`` added: wall seconds and the
    co-occurrence pass's logged seconds and tasks."""
    shutil.rmtree(store, ignore_errors=True)
    cmd = [sys.executable, "-m", "streamtopic", "-v", "ingest", corpus, "--store", store, "-q",
           *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    m = _COOC.findall(proc.stderr)
    return {"wall_seconds": wall, "cooccurrence_seconds": float(m[-1][0]) if m else None,
            "cooccurrence_tasks": int(m[-1][1]) if m else None}


def time_ingests(corpora: list[str], workdir: str, repeats: int) -> dict[str, Any]:
    """Before and after, in turns, on each corpus; medians."""
    out = {}
    for corpus in corpora:
        path = synth_corpus(corpus, workdir) if corpus.startswith("synth:") else corpus
        extra = ["--min-df", "1", "--max-df", "1.0"] if corpus.startswith("synth:") else []
        store = os.path.join(workdir, "ingest.zarr")
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for rep in range(repeats):
            for name, env in (("before", BEFORE), ("after", AFTER)):
                runs[name].append(run_ingest(path, store, env, extra))
                print(f"ingest {os.path.basename(path)} {name} run {rep + 1}: "
                      f"{runs[name][-1]}", file=sys.stderr, flush=True)
        out[corpus] = {name: {
            "wall_seconds": statistics.median(r["wall_seconds"] for r in rs),
            "cooccurrence_seconds": statistics.median(r["cooccurrence_seconds"] or 0.0
                                                      for r in rs),
            "cooccurrence_tasks": rs[0]["cooccurrence_tasks"], "runs": rs,
        } for name, rs in runs.items()}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=None,
                        help="a long-document corpus (default: the 60M-word one, built)")
    parser.add_argument("--short", default=",".join(DEFAULT_SHORT),
                        help="short-document corpora whose ingest is timed ('' for none)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ingest-repeats", type=int, default=3)
    parser.add_argument("--sweep", default="", help="BLAS_DENSITY values also timed")
    parser.add_argument("--ceiling", default="0,250,1000,4000,8000",
                        help="head sizes of the GEMM/sparse split measured ('' for none)")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--workdir")
    args = parser.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="streamtopic-pairs-", dir="/tmp")
    os.makedirs(workdir, exist_ok=True)
    if args.corpus is None:
        import rawtext_corpora

        folder = os.path.join(workdir, "longdocs")
        rawtext_corpora.build_longdocs(folder, LONGDOCS_WORDS, 0)
        args.corpus = os.path.join(folder, "train.jsonl.gz")
    result: dict[str, Any] = {"benchmark": "pairs", "machine": machine_info(),
                              "corpus": os.path.abspath(args.corpus),
                              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    result["gemm_macs_per_second"] = {"one_thread": gemm_rate(1), "all_threads": gemm_rate(None)}
    store = os.path.join(workdir, "long.zarr")
    if not os.path.exists(store):
        from streamtopic import ingest

        ingest(args.corpus, store, progress=False)
    grid, docs, per_link = load_partitions(args.corpus, store)
    result["work"] = work(docs, grid)
    result["groups"], result["partitions"] = len(grid.groups), len(docs)
    result["partitions_per_link"] = per_link
    sweep = [float(x) for x in args.sweep.split(",") if x]
    acc = time_accumulation(grid, docs, per_link, args.repeats, sweep)
    one = result["gemm_macs_per_second"]["one_thread"]
    for v in acc.values():
        v["macs_per_second"] = result["work"]["sum_u2"] / v["seconds"]
        v["pairs_per_second"] = result["work"]["pairs_in_rectangles"] / v["seconds"]
        v["ratio_to_gemm_one_thread"] = v["macs_per_second"] / one
    result["accumulation_one_thread"] = acc
    if args.ceiling:
        result["ceiling"] = ceiling(docs, one, [int(x) for x in args.ceiling.split(",")],
                                    acc["scalar/merged"]["macs_per_second"])
    corpora = [args.corpus] + [c for c in args.short.split(",") if c]
    if args.ingest_repeats > 0:
        result["ingest"] = time_ingests(corpora, workdir, args.ingest_repeats)
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    text = write_result(result, args.out)
    print(text)
    return result


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
