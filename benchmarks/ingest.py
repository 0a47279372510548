"""Benchmark: streaming ingestion (``streamtopic ingest``) against the in-memory baseline.

For each corpus size (tokens), the script

1. generates a semi-synthetic HDF5 corpus with :mod:`streamtopic.synth` (V = 5,000 words,
   K = 50 Dirichlet(0.05) topics, θ ~ Dirichlet(0.1), documents of exactly 100 tokens);
2. runs ``streamtopic ingest CORPUS --store STORE -q --min-df 1 --max-df 1.0`` as a
   subprocess (default local cluster of worker processes; no pruning, so that the store
   holds the same Q as the baseline);
3. runs the in-memory baseline in a subprocess: the whole corpus loaded from the HDF5 file as
   one CSR matrix H (h5py), then S = Hᵀ diag(w) H − diag(Hᵀ w), w_d = 1 / (n_d (n_d − 1)),
   with scipy;

and records wall time, tokens per second and the peak RSS of each subprocess' whole tree (the
process and all its descendants, their RSS summed, polled every 50 ms). Each side runs
``--repeats`` times (default 3), the two sides interleaved; the median wall time counts, and
the peak RSS is the highest of the runs. On the smallest size it checks that the store's Q
equals the baseline's.

Targets (reported, never fatal): peak RSS of the streaming run at the largest size within
1.3× of that at the smallest; streaming tokens/s ÷ baseline tokens/s ≥ 1.0 at every size.

Usage::

    python benchmarks/ingest.py [--sizes 1e6,4e6,16e6] [--repeats 3] [--out PATH] [--workdir DIR]
                                [--keep]

Prints the results as JSON and writes them to ``benchmarks/results/ingest.json`` (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

from _common import machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "ingest.json")

V = 5_000
K = 50
BETA = 0.05
ALPHA = 0.1
DOC_LENGTH = 100
SEED = 20_261_121
POLL_SECONDS = 0.05
RSS_TARGET = 1.3
RATIO_TARGET = 1.0


# ----------------------------------------------------------------------------- measuring


class TreeMonitor:
    """Poll a process and all its descendants; keep the peak of their summed RSS (bytes)."""

    def __init__(self, pid: int, interval: float = POLL_SECONDS) -> None:
        import psutil

        self._root = psutil.Process(pid)
        self.interval = interval
        self.peak_rss = 0
        self.peak_processes = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        import psutil

        try:
            procs = [self._root] + self._root.children(recursive=True)
        except psutil.Error:
            return
        total = 0
        alive = 0
        for p in procs:
            try:
                total += p.memory_info().rss
                alive += 1
            except psutil.Error:  # exited between listing and reading
                pass
        self.samples += 1
        self.peak_rss = max(self.peak_rss, total)
        self.peak_processes = max(self.peak_processes, alive)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def run_measured(cmd: list[str], cwd: str | None = None) -> dict[str, Any]:
    """Run ``cmd``; return its wall time, peak tree RSS, exit status and output."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd)
        with TreeMonitor(proc.pid) as mon:
            rc = proc.wait()
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {rc}:\n{stderr[-4000:]}")
    return {
        "wall_seconds": wall,
        "peak_rss_bytes": mon.peak_rss,
        "peak_processes": mon.peak_processes,
        "rss_samples": mon.samples,
        "stdout": stdout,
    }


# ----------------------------------------------------------------------------- the baseline


def load_csr(path: str) -> Any:
    """The whole HDF5 corpus as one (D × V) float64 CSR matrix."""
    import h5py
    import scipy.sparse as sp

    with h5py.File(path, "r") as f:
        indptr = f["indptr"][:]
        indices = f["indices"][:]
        data = f["data"][:].astype(np.float64)
        n_words = int(f["vocab"].shape[0])
    return sp.csr_matrix((data, indices, indptr), shape=(indptr.size - 1, n_words))


def baseline_sum(H: Any) -> Any:
    """S = Σ_d (h_d h_dᵀ − diag h_d) / (n_d (n_d − 1)) over documents with n_d ≥ 2 (V × V
    CSR): Hᵀ diag(w) H − diag(Hᵀ w)."""
    import scipy.sparse as sp

    n = np.asarray(H.sum(axis=1)).ravel()
    w = np.zeros_like(n)
    ok = n >= 2
    w[ok] = 1.0 / (n[ok] * (n[ok] - 1.0))
    S = H.T.tocsr() @ (sp.diags(w) @ H)
    return (S - sp.diags(H.T @ w)).tocsr()


def baseline_main(path: str) -> None:
    """Subprocess entry: time the baseline on ``path``; print a JSON line."""
    t0 = time.perf_counter()
    H = load_csr(path)
    t1 = time.perf_counter()
    S = baseline_sum(H)
    t2 = time.perf_counter()
    print(json.dumps({
        "load_seconds": t1 - t0,
        "compute_seconds": t2 - t1,
        "n_docs": int(H.shape[0]),
        "n_tokens": int(H.sum()),
        "nnz_S": int(S.nnz),
    }))


# ----------------------------------------------------------------------------- one size


def streamtopic_cmd() -> list[str]:
    exe = shutil.which("streamtopic")
    return [exe] if exe else [sys.executable, "-m", "streamtopic"]


_SECONDS = re.compile(r"^\s+([0-9.]+) s\s*$", re.MULTILINE)


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median wall time, with every run's wall time and the peak RSS over all."""
    ordered = sorted(runs, key=lambda r: r["wall_seconds"])
    out = dict(ordered[(len(ordered) - 1) // 2])
    out["wall_seconds_runs"] = [r["wall_seconds"] for r in runs]
    out["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in runs)
    return out


def bench_size(
    tokens: int, workdir: str, A: np.ndarray, verify: bool, repeats: int
) -> dict[str, Any]:
    from streamtopic import read_corpus
    from streamtopic.synth import write_corpus

    n_docs = max(1, int(round(tokens / DOC_LENGTH)))
    tag = f"{n_docs * DOC_LENGTH / 1e6:g}M"
    corpus = os.path.join(workdir, f"synth-{tag}.h5")
    store = os.path.join(workdir, f"store-{tag}.zarr")
    shutil.rmtree(store, ignore_errors=True)
    t0 = time.perf_counter()
    gen = write_corpus(
        corpus, A, n_docs, format="hdf5", alpha=ALPHA, doc_length=DOC_LENGTH, seed=SEED
    )
    gen_seconds = time.perf_counter() - t0
    n_tokens = int(gen["n_tokens"])
    print(f"[{tag}] corpus: {n_docs:,} documents, {n_tokens:,} tokens, "
          f"{os.path.getsize(corpus) / 2**20:.1f} MiB ({gen_seconds:.1f} s)", file=sys.stderr)

    cmd = streamtopic_cmd() + [
        "ingest", corpus, "--store", store, "-q", "--min-df", "1", "--max-df", "1.0",
    ]
    streams, bases = [], []
    for rep in range(repeats):  # interleaved, so that the machine's drift hits both alike
        shutil.rmtree(store, ignore_errors=True)
        stream = run_measured(cmd)
        m = _SECONDS.search(stream.pop("stdout"))
        stream["ingest_reported_seconds"] = float(m.group(1)) if m else None
        streams.append(stream)
        base = run_measured([sys.executable, os.path.abspath(__file__), "--baseline", corpus])
        base.update(json.loads(base.pop("stdout").strip().splitlines()[-1]))
        bases.append(base)
        print(f"[{tag}] run {rep + 1}: ingest {stream['wall_seconds']:.2f} s "
              f"(peak RSS {stream['peak_rss_bytes'] / 2**20:.0f} MiB), baseline "
              f"{base['wall_seconds']:.2f} s (peak RSS {base['peak_rss_bytes'] / 2**20:.0f} MiB)",
              file=sys.stderr)
    stream, base = _median_run(streams), _median_run(bases)
    stream["tokens_per_second"] = n_tokens / stream["wall_seconds"]
    stream["command"] = " ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd))
    base["tokens_per_second"] = n_tokens / base["wall_seconds"]

    ratio = stream["tokens_per_second"] / base["tokens_per_second"]
    inner_base = base["load_seconds"] + base["compute_seconds"]
    result: dict[str, Any] = {
        "target_tokens": tokens,
        "n_docs": n_docs,
        "n_tokens": n_tokens,
        "corpus_bytes": os.path.getsize(corpus),
        "ingest_partitions": read_corpus(corpus).npartitions,
        "nnz_H": int(gen["nnz"]),
        "generate_seconds": gen_seconds,
        "streaming": stream,
        "baseline": base,
        "ratio": ratio,
        "ratio_target_pass": bool(ratio >= RATIO_TARGET),
        "ratio_excluding_startup": (
            inner_base / stream["ingest_reported_seconds"]
            if stream["ingest_reported_seconds"] else None
        ),
    }
    if verify:
        result["verification"] = verify_store(store, corpus)
    shutil.rmtree(store, ignore_errors=True)
    return result


def verify_store(store_path: str, corpus: str) -> dict[str, Any]:
    """Compare the store's Q with the baseline's, term by term."""
    import dask
    import h5py

    from streamtopic.store import CooccurrenceStore

    H = load_csr(corpus)
    S = baseline_sum(H)
    D = H.shape[0]
    with h5py.File(corpus, "r") as f:
        terms = np.asarray(f["vocab"].asstr()[:], dtype=str)  # (V,)
    store = CooccurrenceStore.open(store_path)
    order = np.argsort(terms)
    pos = np.searchsorted(terms[order], np.asarray(store.vocab, dtype=str))
    ids = order[pos]  # corpus id of each store term
    with dask.config.set(scheduler="threads"):
        Qs = np.asarray(store.Q.compute())
    Qb = S[ids][:, ids].toarray() / D
    absent = np.setdiff1d(np.arange(len(terms)), ids)
    diff = np.abs(Qs - Qb)
    nz = Qb != 0
    return {
        "size": "smallest",
        "n_docs_store": store.n_docs,
        "n_docs_baseline": int(D),
        "vocab_store": store.V,
        "terms_absent_from_store": int(absent.size),
        "absent_terms_all_zero_in_baseline": bool(S[absent].nnz == 0),
        "max_abs_diff": float(diff.max()),
        "max_rel_diff": float(diff.max() / np.abs(Qb).max()),
        "max_elementwise_rel_diff": float((diff[nz] / np.abs(Qb[nz])).max()) if nz.any() else 0.0,
        "zero_pattern_equal": bool(np.array_equal(Qs != 0, nz)),
        "Q_sum_store": float(Qs.sum()),
    }


# ----------------------------------------------------------------------------- main


def parse_sizes(text: str) -> list[int]:
    sizes = [int(float(s)) for s in text.split(",") if s.strip()]
    if not sizes or min(sizes) < DOC_LENGTH:
        raise argparse.ArgumentTypeError(f"--sizes {text!r}: token counts >= {DOC_LENGTH}")
    return sorted(sizes)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1e6,4e6,16e6"),
                        help="Corpus sizes in tokens, comma-separated (default 1e6,4e6,16e6).")
    parser.add_argument("--out", default=DEFAULT_OUT, help="JSON output file.")
    parser.add_argument("--workdir", default=None,
                        help="Where corpora and stores go (default: a new directory in /tmp).")
    parser.add_argument("--keep", action="store_true", help="Keep the generated corpora.")
    parser.add_argument("--repeats", type=int, default=3,
                        help="Runs of each side per size, interleaved; the median counts "
                             "(default 3).")
    parser.add_argument("--baseline", metavar="HDF5", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline:
        baseline_main(args.baseline)
        return {}

    from streamtopic.synth import dirichlet_topics

    own_workdir = args.workdir is None
    workdir = args.workdir or tempfile.mkdtemp(prefix="streamtopic-bench-", dir="/tmp")
    os.makedirs(workdir, exist_ok=True)
    A = dirichlet_topics(V, K, BETA, seed=SEED)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    runs = []
    try:
        for i, tokens in enumerate(args.sizes):
            runs.append(bench_size(tokens, workdir, A, verify=(i == 0), repeats=args.repeats))
    finally:
        if not args.keep:
            for name in os.listdir(workdir):
                if name.startswith(("synth-", "store-")):
                    p = os.path.join(workdir, name)
                    shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
            if own_workdir:
                shutil.rmtree(workdir, ignore_errors=True)

    small, large = runs[0], runs[-1]
    verification = small.pop("verification", None)
    rss_ratio = large["streaming"]["peak_rss_bytes"] / small["streaming"]["peak_rss_bytes"]
    result = {
        "benchmark": "ingest",
        "started_at": started,
        "machine": machine_info(),
        "corpus": {
            "generator": "streamtopic.synth.write_corpus(format='hdf5')",
            "V": V, "K": K, "beta": BETA, "alpha": ALPHA, "doc_length": DOC_LENGTH,
            "seed": SEED,
        },
        "baseline_method": "h5py load to one CSR H; S = H.T.tocsr() @ (diags(w) @ H) "
                           "- diags(H.T @ w), w = 1/(n(n-1)) (scipy.sparse)",
        "rss_method": f"sum of RSS over the process and all descendants, polled every "
                      f"{POLL_SECONDS * 1000:.0f} ms; peak",
        "ratio_definition": "streaming tokens/s / baseline tokens/s, both from subprocess wall "
                            "time (startup included), each the median of --repeats runs "
                            "interleaved with the other side's",
        "repeats": args.repeats,
        "runs": runs,
        "targets": {
            "rss": {
                "definition": f"streaming peak RSS at {large['n_tokens']:,} tokens <= "
                              f"{RSS_TARGET} x that at {small['n_tokens']:,} tokens",
                "value": rss_ratio,
                "pass": bool(rss_ratio <= RSS_TARGET),
            },
            "ratio": {
                "definition": f"ratio >= {RATIO_TARGET} at every size",
                "values": {str(r["n_tokens"]): r["ratio"] for r in runs},
                "pass": all(r["ratio_target_pass"] for r in runs),
            },
        },
        "verification": verification,
    }
    print(write_result(result, args.out))
    return result


if __name__ == "__main__":
    main()
