"""Benchmark: EM refinement whose cost is bounded as the corpus grows (issue #14, point 5).

1. *Corpus*: ``streamtopic synth c.h5 --docs 340000 --words 20000 --topics 50 --doc-length 300
   --poisson --seed 0`` (about 102M tokens, HDF5; timed, not counted). Kept between runs in
   the work directory (``--workdir``, under /tmp) while its settings are unchanged.
2. *Ingest*: ONE pass, ``streamtopic ingest c.h5 --store s.zarr -q`` (default options; Dask's
   threaded scheduler), in a fresh process: wall time and peak RSS.
3. *Spectral start*: ``AnchorTopicModel(n_topics=K, seed=0, method="plain").fit(store)`` (the
   paper's anchor-word algorithm, no refinement), in a fresh process; not counted.
4. *Refinement*, for each ``--sample-tokens``: in a fresh process (threaded scheduler),
   ``refine_topics(model.components_, recorded_corpus(store), store.vocab,
   sample_tokens=S)`` with the defaults otherwise (until convergence, ``tol`` =
   ``refinement.TOL``); the seconds of that call, its passes, sample, full pass, peak RSS of the
   process, and the matched L1 distance to the true topics before and after (the generator's
   topics restricted to the store's vocabulary, columns renormalised).

Reported: refinement seconds / ingest seconds (target <= 2), and whether the refined topics
are closer to the truth than the spectral ones. Wall times on a shared 2-core machine vary
with other users' load: before each measured process the script waits (up to
``--quiet-wait`` seconds) for idle CPUs and records the other processes' CPU use meanwhile.

Usage::

    python benchmarks/refinement.py [--sample-tokens N ...] [--workdir DIR] [--out PATH]
                                    [--docs N] [--words V] [--topics K] [--keep]

Prints the results as JSON and writes them to ``benchmarks/results/refinement.json`` (or
--out). The corpus stays under ``--workdir`` (default /tmp/streamtopic-refinement-bench) for
reuse; ``--clean`` removes it at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from typing import Any

import numpy as np

import fit as fitbench  # benchmarks/fit.py: child runner, RSS polling, quiet wait
from _common import machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

DEFAULT_OUT = os.path.join(HERE, "results", "refinement.json")
DEFAULT_WORKDIR = "/tmp/streamtopic-refinement-bench"
CORPUS = {"docs": 340_000, "words": 20_000, "topics": 50, "doc_length": 300, "seed": 0}
TARGET_RATIO = 2.0
TIMEOUT = 3600.0


def log(msg: str) -> None:
    print(f"[refine-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ============================================================================ children


def _child_spectral(spec: dict[str, Any]) -> None:
    from streamtopic.model import AnchorTopicModel

    t0 = time.perf_counter()
    model = AnchorTopicModel(n_topics=spec["K"], seed=0, method="plain").fit(spec["store"])
    seconds = time.perf_counter() - t0
    np.save(spec["components_out"], model.components_)
    fitbench._emit(event="result", name="spectral", seconds=seconds,
                   stages=model.diagnostics_.get("seconds"))


def _truth(topics_path: str, vocab: list[str]) -> np.ndarray:
    """The generator's topics (V×K) on ``vocab`` (the store's words), columns renormalised."""
    from streamtopic import synth

    t = synth.load_topics(topics_path)
    index = {w: i for i, w in enumerate(t["vocab"])}
    A = np.asarray(t["A"], dtype=np.float64)[[index[w] for w in vocab]]
    return A / A.sum(axis=0, keepdims=True)


def _child_refine(spec: dict[str, Any]) -> None:
    import dask

    from streamtopic import CooccurrenceStore
    from streamtopic.corpus import recorded_corpus
    from streamtopic.metrics import matched_l1
    from streamtopic.refinement import refine_topics

    store = CooccurrenceStore.open(spec["store"])
    vocab = list(store.vocab)
    start = np.load(spec["components"])
    A = _truth(spec["topics"], vocab)
    with dask.config.set(scheduler="threads"):
        fitbench._emit(event="begin", stage="refine")
        t0 = time.perf_counter()
        res = refine_topics(start, recorded_corpus(store), vocab,
                            sample_tokens=spec["sample_tokens"], scratch=spec["scratch"])
        seconds = time.perf_counter() - t0
        fitbench._emit(event="begin", stage="score")
    fields = ("passes", "converged", "sample_docs", "sample_tokens", "sample_partitions",
              "partitions", "full_pass", "corpus_docs", "corpus_tokens", "read_seconds",
              "full_pass_seconds", "full_pass_loglik_per_token", "loglik_per_token",
              "seconds", "theta_iterations")
    fitbench._emit(event="result", name="refine", refine_seconds=seconds,
                   l1_before=matched_l1(A, start.T).mean,
                   l1_after=matched_l1(A, res.components.T).mean,
                   **{f: getattr(res, f) for f in fields})


def child_main(kind: str, spec_path: str) -> None:
    with open(spec_path) as fh:
        spec = json.load(fh)
    {"spectral": _child_spectral, "refine": _child_refine}[kind](spec)


def _child(kind: str, spec: dict[str, Any], work: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one child; returns (its run record, its result event)."""
    path = os.path.join(work, f"{kind}-{time.time_ns()}.json")
    with open(path, "w") as fh:
        json.dump(spec, fh)
    quiet = fitbench.wait_for_quiet()
    run = fitbench.run_child([sys.executable, os.path.abspath(__file__), "--child", kind, path],
                             default_timeout=TIMEOUT)
    run["contention"].update(quiet)
    err = fitbench.failure(run)
    if err:
        raise RuntimeError(f"{kind} child failed: {err}")
    return run, fitbench.child_results(run)[kind]


# ============================================================================ stages


def make_corpus(workdir: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """The semi-synthetic corpus, generated unless a file of the same settings is there."""
    path = os.path.join(workdir, "c.h5")
    stamp_path = os.path.join(workdir, "c.stamp.json")
    cmd = [*fitbench.streamtopic_cmd(), "synth", path, "--docs", str(cfg["docs"]),
           "--words", str(cfg["words"]), "--topics", str(cfg["topics"]),
           "--doc-length", str(cfg["doc_length"]), "--poisson", "--seed", str(cfg["seed"]),
           "--format", "hdf5", "-q"]
    shown = " ".join(["streamtopic", *cmd[len(fitbench.streamtopic_cmd()):]])
    if os.path.exists(stamp_path) and os.path.exists(path):
        with open(stamp_path) as fh:
            stamp = json.load(fh)
        if stamp.get("command") == shown:
            log(f"corpus: reusing {path}")
            return stamp
    log(f"corpus: {shown}")
    run = fitbench.run_child(cmd, default_timeout=TIMEOUT)
    if fitbench.failure(run):
        raise RuntimeError(f"synth failed: {fitbench.failure(run)}")
    info = json.loads("\n".join(run["stdout_lines"]))
    stamp = {"command": shown, "path": path, "topics": info["topics_path"],
             "n_docs": info["n_docs"], "n_tokens": info["n_tokens"], "nnz": info["nnz"],
             "bytes": os.path.getsize(path), "generate_seconds": run["wall_seconds"]}
    with open(stamp_path, "w") as fh:
        json.dump(stamp, fh)
    return stamp


def ingest(corpus: dict[str, Any], store: str) -> dict[str, Any]:
    shutil.rmtree(store, ignore_errors=True)
    cmd = [*fitbench.streamtopic_cmd(), "ingest", corpus["path"], "--store", store, "-q"]
    log("ingest: " + " ".join(cmd[1:]))
    quiet = fitbench.wait_for_quiet()
    run = fitbench.run_child(cmd, default_timeout=TIMEOUT)
    run["contention"].update(quiet)
    if fitbench.failure(run):
        raise RuntimeError(f"ingest failed: {fitbench.failure(run)}")
    log(f"ingest: {run['wall_seconds']:.1f} s, peak RSS {fitbench.mib(run['peak_rss_bytes'])}")
    return {"command": " ".join(["streamtopic", *cmd[len(fitbench.streamtopic_cmd()):]]),
            "wall_seconds": run["wall_seconds"], "peak_rss_bytes": run["peak_rss_bytes"],
            "contention": run["contention"], "stderr_tail": run["stderr"][-600:]}


def refine(store: str, corpus: dict[str, Any], components: str, sample_tokens: int,
           work: str) -> dict[str, Any]:
    spec = {"store": store, "components": components, "topics": corpus["topics"],
            "sample_tokens": sample_tokens, "scratch": os.path.join(work, "scratch")}
    log(f"refine: sample_tokens={sample_tokens:,}")
    run, res = _child("refine", spec, work)
    res = {k: v for k, v in res.items() if k not in ("event", "name", "t")}
    log(f"refine: {res['refine_seconds']:.1f} s, {res['passes']} passes, sample "
        f"{res['sample_tokens']:,} tokens, full pass {res['full_pass_seconds']:.1f} s, "
        f"L1 {res['l1_before']:.4f} -> {res['l1_after']:.4f}")
    return {"sample_tokens_asked": sample_tokens, **res, "child_wall_seconds": run["wall_seconds"],
            "peak_rss_bytes": run["peak_rss_bytes"], "contention": run["contention"]}


# ============================================================================ main


def _parse(argv: list[str] | None) -> argparse.Namespace:
    from streamtopic.refinement import SAMPLE_TOKENS

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sample-tokens", type=int, nargs="+", default=[SAMPLE_TOKENS],
                   help="Sizes of the cached sample to measure (default: the library's).")
    p.add_argument("--docs", type=int, default=CORPUS["docs"])
    p.add_argument("--words", type=int, default=CORPUS["words"])
    p.add_argument("--topics", type=int, default=CORPUS["topics"])
    p.add_argument("--workdir", default=DEFAULT_WORKDIR)
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--clean", action="store_true", help="Remove the work directory at the end.")
    p.add_argument("--quiet-wait", type=float, default=120.0, metavar="SECONDS")
    p.add_argument("--child", nargs=2, metavar=("KIND", "SPEC"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parse(argv)
    if args.child:
        child_main(*args.child)
        return {}
    fitbench.QUIET_WAIT["seconds"] = max(0.0, args.quiet_wait)
    workdir = os.path.abspath(args.workdir)
    if os.path.commonpath([workdir, REPO]) == REPO:
        raise SystemExit(f"--workdir {workdir} is inside the repository; use /tmp")
    work = os.path.join(workdir, f"run-{os.getpid()}")
    os.makedirs(work)
    cfg = {**CORPUS, "docs": args.docs, "words": args.words, "topics": args.topics}
    t_start = time.perf_counter()
    result: dict[str, Any] = {"benchmark": "refinement", "argv": sys.argv[1:],
                              "machine": machine_info(),
                              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "target_ratio": TARGET_RATIO}
    try:
        corpus = result["corpus"] = make_corpus(workdir, cfg)
        store = os.path.join(work, "s.zarr")
        ing = result["ingest"] = ingest(corpus, store)
        comps = os.path.join(work, "spectral.npy")
        log("spectral: AnchorTopicModel(method='plain').fit")
        run, res = _child("spectral", {"store": store, "K": cfg["topics"],
                                       "components_out": comps}, work)
        result["spectral"] = {"fit_seconds": res["seconds"], "stages": res["stages"],
                              "peak_rss_bytes": run["peak_rss_bytes"]}
        runs = [refine(store, corpus, comps, s, work) for s in args.sample_tokens]
        for r in runs:
            r["ratio_to_ingest"] = r["refine_seconds"] / ing["wall_seconds"]
            r["ratio_pass"] = r["ratio_to_ingest"] <= TARGET_RATIO
            r["l1_improved"] = r["l1_after"] < r["l1_before"]
        result["refinement"] = runs
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if args.clean:
            shutil.rmtree(workdir, ignore_errors=True)
    result["benchmark_seconds"] = time.perf_counter() - t_start
    print(write_result(result, args.out))
    return result


if __name__ == "__main__":
    main()
