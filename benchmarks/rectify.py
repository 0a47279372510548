"""Benchmark: rectification of the co-occurrence matrix (``streamtopic.rectification``).

Two parts:

1. *V = 2,000* (in-memory path): K = 20 topics ~ Dirichlet(0.05) with one planted anchor
   each, θ ~ Dirichlet(0.1), 70-token documents, M = 10,000 and M = 100,000 documents, written
   as HDF5 and ingested into a store (fixed vocabulary of the generator's words). On each store
   ``rectify(store.Q, 20, ...)`` runs with AP and with DR, 15 iterations each, after one
   untimed warm-up call (imports); the median wall time of ``--repeats`` runs is reported,
   with the passes over Q and the seconds per iteration, the movement, and the relative
   Frobenius distance to the exact population Q before and after rectification. One
   out-of-core AP run (forced) is timed for comparison.
2. *V = 20,000* (out-of-core path): K = 50 topics, 50,000 documents of 100 tokens (5M tokens),
   ingested with the default chunking (2048). ``rectify`` with AP and 15 iterations runs in
   a fresh subprocess whose process tree is polled with psutil every 50 ms for its peak RSS.
   Seconds per iteration are reported, and (afterwards, block by block in this process) the
   distance to the population Q before and after.

Targets (reported, never fatal): part 1 AP <= 1.5 s; part 2 peak RSS < 2 GB.

The machine is shared (2 cores, other jobs running): wall times are noisy, so the load
average before each measurement is recorded with it.

Usage::

    python benchmarks/rectify.py [--skip-large] [--repeats N] [--workdir DIR] [--keep]
                                 [--out PATH]

Prints the results as JSON and writes them to ``benchmarks/results/rectify.json`` (or
``--out``). Corpora and stores go to a new directory under /tmp (or ``--workdir``, where
existing ones are reused), removed at the end unless ``--keep`` or ``--workdir``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

from _common import machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
DEFAULT_OUT = os.path.join(HERE, "results", "rectify.json")

SMALL = {"V": 2_000, "K": 20, "beta": 0.05, "alpha": 0.1, "doc_length": 70,
         "n_docs": [10_000, 100_000], "topic_seed": 20_240_001, "doc_seed": 20_240_002,
         "n_iter": 15}
LARGE = {"V": 20_000, "K": 50, "beta": 0.05, "alpha": 0.1, "doc_length": 100,
         "n_docs": 50_000, "topic_seed": 20_240_011, "doc_seed": 20_240_012, "n_iter": 15}
TARGETS = {"small_ap_seconds": 1.5, "large_peak_rss_bytes": 2 * 10**9}
POLL_SECONDS = 0.05


def log(msg: str) -> None:
    print(f"[rectify-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ============================================================================ data


def make_store(workdir: str, name: str, V: int, K: int, beta: float, alpha: float,
               doc_length: int, n_docs: int, topic_seed: int, doc_seed: int) -> tuple[str, dict]:
    """Generate a corpus (HDF5) and ingest it; reuse both if present. Returns the store path
    and timings."""
    import dask

    import streamtopic as st
    from streamtopic import synth

    A, _ = synth.dirichlet_topics_with_anchors(V, K, beta=beta, seed=topic_seed)
    h5 = os.path.join(workdir, f"{name}.h5")
    vocab = os.path.join(workdir, f"vocab-{V}.txt")
    store = os.path.join(workdir, f"{name}.zarr")
    info: dict[str, Any] = {}
    if not os.path.exists(vocab):
        with open(vocab, "w") as fh:
            fh.write("\n".join(synth.default_vocab(V)) + "\n")
    info["reused_corpus"] = os.path.exists(h5)
    info["reused_store"] = st.CooccurrenceStore.is_store(store)
    if not os.path.exists(h5):
        t0 = time.perf_counter()
        synth.write_corpus(h5, A, n_docs, format="hdf5", alpha=alpha, doc_length=doc_length,
                           seed=doc_seed)
        info["generate_seconds"] = time.perf_counter() - t0
    if not st.CooccurrenceStore.is_store(store):
        shutil.rmtree(store, ignore_errors=True)
        t0 = time.perf_counter()
        with dask.config.set(scheduler="threads"):
            st.ingest(h5, store, vocab=vocab, progress=False)
        info["ingest_seconds"] = time.perf_counter() - t0
    s = st.CooccurrenceStore.open(store)
    info.update({"n_docs": s.n_docs, "n_tokens": s.n_tokens, "chunk": s.chunk_size,
                 "q_bytes_on_disk": s.q_bytes()})
    return store, info


# ============================================================================ part 1


def _dense_errors(C: np.ndarray, Q: np.ndarray, P: np.ndarray, K: int) -> dict[str, float]:
    nP = np.linalg.norm(P)
    w = np.linalg.eigvalsh(C)[::-1]
    return {
        "input_error": float(np.linalg.norm(Q - P) / nP),
        "output_error": float(np.linalg.norm(C - P) / nP),
        "output_sum": float(C.sum()),
        "output_min": float(C.min()),
        "eig_k_plus_1_over_eig_1": float(w[K] / w[0]),
    }


def part_small(workdir: str, repeats: int) -> dict[str, Any]:
    import zarr

    import streamtopic as st
    from streamtopic import synth
    from streamtopic.rectification import rectify

    cfg = SMALL
    V, K = cfg["V"], cfg["K"]
    A, _ = synth.dirichlet_topics_with_anchors(V, K, beta=cfg["beta"], seed=cfg["topic_seed"])
    P = synth.population_cooccurrence(A, cfg["alpha"])
    out: dict[str, Any] = {"config": cfg, "cases": []}
    for M in cfg["n_docs"]:
        name = f"small-{M}"
        log(f"part 1: {name}: corpus and store")
        path, info = make_store(workdir, name, V, K, cfg["beta"], cfg["alpha"],
                                cfg["doc_length"], M, cfg["topic_seed"], cfg["doc_seed"])
        store = st.CooccurrenceStore.open(path)
        Q = store.Q.compute()
        case: dict[str, Any] = {"n_docs": M, "store": info}
        res_path = os.path.join(workdir, f"{name}-rect.zarr")
        rectify(store.Q, K, res_path, method="ap", n_iter=1)  # warm-up: imports, page cache
        for method in ("ap", "dr"):
            runs = []
            for _ in range(repeats):
                la = load()
                t0 = time.perf_counter()
                r = rectify(store.Q, K, res_path, method=method, n_iter=cfg["n_iter"], seed=0)
                runs.append({"seconds": time.perf_counter() - t0, "loadavg_before": la,
                             "iteration_seconds": r.seconds, "passes": r.passes})
            C = np.asarray(zarr.open_array(res_path, mode="r")[:])
            secs = [x["seconds"] for x in runs]
            case[method] = {
                "median_seconds": statistics.median(secs),
                "runs": runs,
                "in_memory": r.in_memory,
                "movement": r.movement,
                "eigenvalues": r.eigenvalues.tolist(),
                **_dense_errors(C, Q, P, K),
            }
            log(f"part 1: {name}: {method}: median {statistics.median(secs):.2f} s "
                f"({', '.join(f'{s:.2f}' for s in secs)}), passes {sum(r.passes)}, "
                f"error {case[method]['input_error']:.4f} -> {case[method]['output_error']:.4f}")
        # the out-of-core path on the same store, for comparison (one run)
        la = load()
        t0 = time.perf_counter()
        r = rectify(store.Q, K, res_path, method="ap", n_iter=cfg["n_iter"], in_memory=False)
        C = np.asarray(zarr.open_array(res_path, mode="r")[:])
        case["ap_out_of_core"] = {
            "seconds": time.perf_counter() - t0, "loadavg_before": la,
            "iteration_seconds": r.seconds, "passes": r.passes,
            "output_error": float(np.linalg.norm(C - P) / np.linalg.norm(P)),
        }
        log(f"part 1: {name}: ap out of core: {case['ap_out_of_core']['seconds']:.2f} s")
        shutil.rmtree(res_path, ignore_errors=True)
        out["cases"].append(case)
    return out


# ============================================================================ part 2


def child_main(store_path: str, out_path: str, K: int, n_iter: int) -> None:
    """In the measured subprocess: rectify a store out of core; print the result as JSON."""
    import dask

    import streamtopic as st
    from streamtopic.rectification import rectify

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="[child %(asctime)s] %(message)s")
    store = st.CooccurrenceStore.open(store_path)
    with dask.config.set(scheduler="threads"):
        t0 = time.perf_counter()
        r = rectify(store.Q, K, out_path, method="ap", n_iter=n_iter, seed=0)
        wall = time.perf_counter() - t0
    print(json.dumps({
        "seconds": wall, "in_memory": r.in_memory, "iteration_seconds": r.seconds,
        "passes": r.passes, "movement": r.movement, "eigenvalues": r.eigenvalues.tolist(),
    }), flush=True)


def run_measured(cmd: list[str]) -> dict[str, Any]:
    """Run ``cmd``, polling the RSS summed over its process tree; returns the peak and the
    child's stdout."""
    import psutil

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    peak = {"rss": 0, "samples": 0}
    halt = threading.Event()

    def poll() -> None:
        while not halt.is_set():
            try:
                tree = [ps, *ps.children(recursive=True)]
                rss = 0
                for p in tree:
                    try:
                        rss += p.memory_info().rss
                    except psutil.Error:
                        pass
                peak["rss"] = max(peak["rss"], rss)
                peak["samples"] += 1
            except psutil.Error:
                pass
            halt.wait(POLL_SECONDS)

    th = threading.Thread(target=poll, daemon=True)
    t0 = time.perf_counter()
    th.start()
    stdout, _ = proc.communicate()
    halt.set()
    th.join()
    return {"returncode": proc.returncode, "wall_seconds": time.perf_counter() - t0,
            "peak_rss_bytes": peak["rss"], "rss_samples": peak["samples"], "stdout": stdout}


def _block_errors(store_path: str, out_path: str, A: np.ndarray, alpha: float) -> dict:
    """‖Q − P‖/‖P‖ and ‖C − P‖/‖P‖ block by block (P the population Q, never dense)."""
    import zarr

    import streamtopic as st
    from streamtopic import synth

    store = st.CooccurrenceStore.open(store_path)
    C = zarr.open_array(out_path, mode="r")
    V, c = store.V, store.chunk_size
    R = synth.dirichlet_second_moment(alpha, A.shape[1])
    nb = store.n_blocks
    acc = {"pp": 0.0, "qp": 0.0, "cp": 0.0, "csum": 0.0, "cmin": np.inf}
    Qd = store.Q
    for i in range(nb):
        r = slice(i * c, min(V, (i + 1) * c))
        AR = A[r] @ R
        for j in range(i, nb):
            q = slice(j * c, min(V, (j + 1) * c))
            w = 1.0 if i == j else 2.0
            Pb = AR @ A[q].T
            Qb = np.asarray(Qd[r, q].compute(scheduler="sync"))
            Cb = np.asarray(C[r, q])
            acc["pp"] += w * float(np.sum(Pb * Pb))
            acc["qp"] += w * float(np.sum((Qb - Pb) ** 2))
            acc["cp"] += w * float(np.sum((Cb - Pb) ** 2))
            acc["csum"] += w * float(Cb.sum())
            acc["cmin"] = min(acc["cmin"], float(Cb.min()))
    return {"input_error": (acc["qp"] / acc["pp"]) ** 0.5,
            "output_error": (acc["cp"] / acc["pp"]) ** 0.5,
            "output_sum": acc["csum"], "output_min": acc["cmin"]}


def part_large(workdir: str, accuracy: bool) -> dict[str, Any]:
    from streamtopic import synth

    cfg = LARGE
    V, K = cfg["V"], cfg["K"]
    log("part 2: corpus and store (V = 20,000)")
    path, info = make_store(workdir, "large", V, K, cfg["beta"], cfg["alpha"],
                            cfg["doc_length"], cfg["n_docs"], cfg["topic_seed"],
                            cfg["doc_seed"])
    out_path = os.path.join(workdir, "large-rect.zarr")
    la = load()
    log("part 2: rectify (AP, out of core) in a child process")
    run = run_measured([sys.executable, os.path.abspath(__file__), "--child", path, out_path,
                        str(K), str(cfg["n_iter"])])
    res: dict[str, Any] = {"config": cfg, "store": info, "loadavg_before": la,
                           "returncode": run["returncode"], "wall_seconds": run["wall_seconds"],
                           "peak_rss_bytes": run["peak_rss_bytes"],
                           "rss_samples": run["rss_samples"]}
    if run["returncode"] == 0:
        child = json.loads(run["stdout"].strip().splitlines()[-1])
        res.update(child)
        secs = child["iteration_seconds"]
        res["seconds_per_iteration_mean"] = float(np.mean(secs))
        res["seconds_per_iteration_median_after_first"] = float(np.median(secs[1:]))
        log(f"part 2: {child['seconds']:.1f} s, peak RSS {run['peak_rss_bytes'] / 2**20:.0f} "
            f"MiB, {np.mean(secs):.2f} s per iteration")
        if accuracy:
            A, _ = synth.dirichlet_topics_with_anchors(V, K, beta=cfg["beta"],
                                                      seed=cfg["topic_seed"])
            t0 = time.perf_counter()
            res["accuracy"] = _block_errors(path, out_path, A, cfg["alpha"])
            res["accuracy"]["seconds"] = time.perf_counter() - t0
            log(f"part 2: error {res['accuracy']['input_error']:.4f} -> "
                f"{res['accuracy']['output_error']:.4f}")
    shutil.rmtree(out_path, ignore_errors=True)
    return res


# ============================================================================ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-small", action="store_true")
    parser.add_argument("--skip-accuracy", action="store_true",
                        help="skip the blockwise distance to the population Q in part 2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--child", nargs=4, metavar=("STORE", "OUT", "K", "N_ITER"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        store, out, K, n_iter = args.child
        child_main(store, out, int(K), int(n_iter))
        return
    logging.basicConfig(level=logging.WARNING)
    workdir = args.workdir or tempfile.mkdtemp(prefix="rectify-bench-")
    os.makedirs(workdir, exist_ok=True)
    results: dict[str, Any] = {
        "machine": machine_info(),
        "note": "shared 2-core machine with other jobs running: wall times are noisy; "
                "the load average before each measurement is recorded with it",
        "targets": TARGETS,
    }
    try:
        if not args.skip_small:
            results["small"] = part_small(workdir, args.repeats)
            results["small_ap_within_target"] = all(
                c["ap"]["median_seconds"] <= TARGETS["small_ap_seconds"]
                for c in results["small"]["cases"])
        if not args.skip_large:
            results["large"] = part_large(workdir, not args.skip_accuracy)
            results["large_rss_within_target"] = (
                results["large"]["peak_rss_bytes"] < TARGETS["large_peak_rss_bytes"])
    finally:
        if not (args.keep or args.workdir):
            shutil.rmtree(workdir, ignore_errors=True)
    print(write_result(results, args.out))


if __name__ == "__main__":
    main()
