"""Benchmark: a store whose cost follows the data, not V² (issue 17, point 1).

The same corpus (20 Newsgroups' tar of raw messages by default) is ingested with two
vocabularies, ``--min-df 1 --max-df 1.0`` and ``--keep-n`` the small size (20,000) or every
word (100,000, which on 20 Newsgroups keeps all 82,392), in turns, ``--rounds`` times each,
with ``python -m streamtopic ingest`` in a fresh subprocess (the default local cluster), its
whole process tree's peak RSS polled by ``benchmarks/fit.py``'s ``run_child``. The large store
is then fitted with the defaults (``streamtopic fit STORE -k K``) and with ``--method plain``
(every pass over all of Q's blocks), each measured the same way.

It records, per vocabulary: ingest times (each round and the median), peak RSS, the store's
non-zeros, its blocks (stored, sparse), the bytes of Q on disk and per non-zero, against the
12 bytes a non-zero needs in COO form (a 32-bit index pair… at least 8 for its value); then the
ratios large/small (targets: ingest time ≤ 2×; peak RSS of ingest and fit ≤ 6 GB; Q's bytes
within 2× of what its non-zeros need).

Usage::

    python benchmarks/large_vocab.py [--corpus PATH] [--rounds 3] [-k 20] [--out PATH]

Prints JSON and writes ``benchmarks/results/large_vocab.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from typing import Any

from _common import REPO, machine_info, write_result
from fit import run_child

DEFAULT_CORPUS = os.path.join(REPO, "..", "shared", "data", "20newsgroups",
                              "20news-bydate.tar.gz")
#: bytes a non-zero needs in the leanest general form: a float64 value and a 32-bit index
NEED_PER_NNZ = 12


def _ingest(corpus: str, store: str, keep_n: int) -> dict[str, Any]:
    shutil.rmtree(store, ignore_errors=True)
    run = run_child([sys.executable, "-m", "streamtopic", "ingest", corpus, "--store", store,
                     "--min-df", "1", "--max-df", "1.0", "--keep-n", str(keep_n), "-q"],
                    cwd=REPO)
    if run["returncode"] != 0:
        raise SystemExit(f"ingest failed: {run['stderr'][-2000:]}")
    return {"seconds": run["wall_seconds"], "peak_rss_bytes": run["peak_rss_bytes"]}


def _store_figures(store: str) -> dict[str, Any]:
    from streamtopic.store import CooccurrenceStore

    with CooccurrenceStore.open(store) as s:
        info = s.info()
    return {k: info[k] for k in ("V", "n_docs", "n_tokens", "nnz", "density", "blocks_stored",
                                 "blocks_sparse", "bytes_of_q", "bytes_per_nnz",
                                 "bytes_on_disk")} | {
        "q_bytes_over_need": info["bytes_of_q"] / (NEED_PER_NNZ * max(1, info["nnz"]))}


def _fit(store: str, k: int, workdir: str, *extra: str) -> dict[str, Any]:
    out = os.path.join(workdir, "model.zarr")
    shutil.rmtree(out, ignore_errors=True)
    run = run_child([sys.executable, "-m", "streamtopic", "fit", store, "-k", str(k), "-o", out,
                     "-q", "--seed", "0", *extra], cwd=REPO)
    if run["returncode"] != 0:
        raise SystemExit(f"fit {' '.join(extra)} failed: {run['stderr'][-2000:]}")
    return {"seconds": run["wall_seconds"], "peak_rss_bytes": run["peak_rss_bytes"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=DEFAULT_CORPUS)
    ap.add_argument("--small", type=int, default=20_000)
    ap.add_argument("--large", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-k", type=int, default=20)
    ap.add_argument("--workdir")
    ap.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results",
                                                  "large_vocab.json"))
    args = ap.parse_args(argv)
    work = args.workdir or tempfile.mkdtemp(prefix="st-large-vocab-")
    stores = {n: os.path.join(work, f"v{n}.zarr") for n in (args.small, args.large)}
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in stores}
    for _ in range(args.rounds):  # in turns: the machine's load drifts
        for n, path in stores.items():
            runs[n].append(_ingest(args.corpus, path, n))
    sizes = {}
    for n, path in stores.items():
        times = [r["seconds"] for r in runs[n]]
        sizes[str(n)] = {"ingest_seconds": times, "ingest_median_seconds":
                         statistics.median(times), "ingest_peak_rss_bytes":
                         max(r["peak_rss_bytes"] for r in runs[n]), **_store_figures(path)}
    large, small = sizes[str(args.large)], sizes[str(args.small)]
    large["fit_default"] = _fit(stores[args.large], args.k, work)
    large["fit_plain"] = _fit(stores[args.large], args.k, work, "--method", "plain")
    result = {
        "benchmark": "large_vocab", "corpus": os.path.abspath(args.corpus), "k": args.k,
        "rounds": args.rounds, "sizes": sizes,
        "ingest_time_ratio": large["ingest_median_seconds"] / small["ingest_median_seconds"],
        "paired_time_ratios": [a["seconds"] / b["seconds"] for a, b in
                               zip(runs[args.large], runs[args.small], strict=True)],
        "machine": machine_info(),
    }
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    write_result(result, args.out)
    return result


if __name__ == "__main__":
    main()
