"""Benchmark: memory of ingesting one gzip text input, against its size (issue 17, point 4).

For each target compressed size, the script

1. generates a text corpus, one document per line, 100 tokens each, drawn from a Zipfian
   distribution over V = 2,000 letters-only words (seeded; generated in blocks, so with
   bounded memory), written as one gzip file (compression level 1);
2. runs ``python -m streamtopic ingest FILE --store STORE -q`` in a fresh subprocess (the
   default local cluster of worker processes), polling the peak summed RSS of its whole
   process tree every 50 ms with ``benchmarks/fit.py``'s ``run_child``;
3. plans the same file with :func:`streamtopic.read_corpus` (as the ingest does) for its number
   of partitions.

It records per size: compressed and decompressed bytes, tokens, ingest wall time, peak RSS,
partitions, and the ratios of the largest size to the smallest (peak RSS: target ≤ 1.3;
wall time against bytes: linear means a time ratio about equal to the size ratio).

Usage::

    python benchmarks/gzip_memory.py [--sizes-mb 100,1000] [--out PATH] [--workdir DIR] [--keep]

Prints the results as JSON and writes them to ``benchmarks/results/gzip_memory.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np

from _common import REPO, machine_info, write_result
from fit import run_child

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "gzip_memory.json")
V = 2_000
DOC_TOKENS = 100
DOCS_PER_BLOCK = 20_000
SEED = 17_004
RSS_TARGET = 1.3


def _words(rng: np.random.Generator) -> np.ndarray:
    """V distinct letters-only words of 4 to 10 letters."""
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    seen: dict[bytes, None] = {}
    while len(seen) < V:
        n = int(rng.integers(4, 11))
        seen.setdefault(letters[rng.integers(0, 26, n)].tobytes(), None)
    return np.array(list(seen), dtype=object)


def make_corpus(path: str, compressed_bytes: int, seed: int = SEED) -> dict[str, Any]:
    """Write documents to the gzip file ``path`` until it holds ``compressed_bytes``."""
    rng = np.random.default_rng(seed)
    words = _words(rng)
    with_space = np.array([w + b" " for w in words], dtype=object)
    with_nl = np.array([w + b"\n" for w in words], dtype=object)
    p = 1.0 / np.arange(1, V + 1)
    p /= p.sum()
    t0 = time.perf_counter()
    docs = tokens = raw = 0
    with open(path, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1) as gz:
        while out.tell() < compressed_bytes:
            ids = rng.choice(V, size=(DOCS_PER_BLOCK, DOC_TOKENS), p=p)
            block = with_space[ids]
            block[:, -1] = with_nl[ids[:, -1]]
            data = b"".join(block.ravel().tolist())
            gz.write(data)
            docs += DOCS_PER_BLOCK
            tokens += ids.size
            raw += len(data)
    return {"path": path, "compressed_bytes": os.path.getsize(path), "decompressed_bytes": raw,
            "documents": docs, "tokens": tokens,
            "generate_seconds": time.perf_counter() - t0}


def ingest(path: str, store: str) -> dict[str, Any]:
    env = {"PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "streamtopic", "ingest", path, "--store", store, "-q"]
    run = run_child(cmd, default_timeout=1800.0, env=env)
    if run["returncode"] != 0:
        raise RuntimeError(f"ingest failed ({run['returncode']}): {run['stderr'][-2000:]}")
    return {"wall_seconds": run["wall_seconds"], "peak_rss_bytes": run["peak_rss_bytes"],
            "peak_processes": run["peak_processes"], "contention": run["contention"]}


def partitions(path: str) -> dict[str, Any]:
    import streamtopic as st
    from streamtopic import _gzindex

    corpus = st.read_corpus(path)
    index = corpus.parts[0].opt("gzip_index")
    return {"partitions": corpus.npartitions,
            "largest_partition_bytes": max(p.stop - p.start for p in corpus.parts),
            "gzip_index_bytes": os.path.getsize(index) if index else None,
            "gzip_index_dir": _gzindex.index_dir()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes-mb", default="100,1000", help="compressed sizes, MB (10^6 bytes)")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    args = ap.parse_args(argv)
    sizes = [int(float(s) * 1e6) for s in args.sizes_mb.split(",")]
    workdir = args.workdir or tempfile.mkdtemp(prefix="gzip-memory-")
    os.makedirs(workdir, exist_ok=True)
    runs: list[dict[str, Any]] = []
    try:
        for size in sizes:
            path = os.path.join(workdir, f"corpus-{size // 10**6}MB.txt.gz")
            rec: dict[str, Any] = {"target_compressed_bytes": size, **make_corpus(path, size)}
            print(f"generated {json.dumps(rec)}", file=sys.stderr, flush=True)
            rec["ingest"] = ingest(path, os.path.join(workdir, f"store-{size // 10**6}MB.zarr"))
            rec.update(partitions(path))
            print(f"ingested {json.dumps(rec)}", file=sys.stderr, flush=True)
            runs.append(rec)
            shutil.rmtree(os.path.join(workdir, f"store-{size // 10**6}MB.zarr"),
                          ignore_errors=True)
            if not args.keep:
                os.remove(path)
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    small, large = runs[0], runs[-1]
    result = {
        "benchmark": "gzip_memory",
        "machine": machine_info(),
        "settings": {"V": V, "doc_tokens": DOC_TOKENS, "zipf_exponent": 1.0, "seed": SEED,
                     "compresslevel": 1, "command": "python -m streamtopic ingest FILE "
                     "--store STORE -q (defaults: local cluster)", "rss_poll_seconds": 0.05},
        "runs": runs,
        "ratios": {
            "compressed_size": large["compressed_bytes"] / small["compressed_bytes"],
            "peak_rss": large["ingest"]["peak_rss_bytes"] / small["ingest"]["peak_rss_bytes"],
            "wall_time": large["ingest"]["wall_seconds"] / small["ingest"]["wall_seconds"],
            "seconds_per_decompressed_GB": [
                r["ingest"]["wall_seconds"] / (r["decompressed_bytes"] / 1e9) for r in runs],
        },
        "rss_target": RSS_TARGET,
    }
    result["rss_target_met"] = result["ratios"]["peak_rss"] <= RSS_TARGET
    print(write_result(result, args.out))
    return result


if __name__ == "__main__":
    main()
