"""Benchmark: a large vocabulary used evenly keeps to the memory budget (issue 30, case 14).

Two semi-synthetic corpora of the same shape (``--docs`` 20,000 documents of
``--doc-length`` 300 tokens, ``-k`` 50 Dirichlet topics, β = 0.05, HDF5) over 20,000 and over
100,000 words (``streamtopic synth``) are each ingested with ``--min-df 1 --max-df 1.0
--keep-n 100000`` by ``python -m streamtopic ingest`` in a fresh subprocess (the default local
cluster), its whole process tree's RSS polled every 0.1 s and the tree killed past
``--rss-cap`` (so that the run before the fix, which outgrows any memory, ends). Unlike a
Zipfian corpus (20 Newsgroups: ``benchmarks/large_vocab.py``), every word here co-occurs with
thousands of others: Q has hundreds of millions of non-zeros, all of them in sparse blocks.

Records, per vocabulary: wall seconds, peak RSS, the exit (``ok``, ``killed at the cap`` or
the error), the store's non-zeros, blocks and bytes of Q; the ratio of the large ingest's time
to the small one's (target ≤ 2) and whether the large one's peak RSS is below 6 GB.
``--env NAME=VALUE`` runs the ingests with that environment (e.g.
``STREAMTOPIC_ACCUMULATION_BYTES=1000000000000``: one accumulation band, as before the fix).
``--write-ceiling`` also times writing each store's Q alone (:func:`write_ceiling`), a floor
under the ingest's CPU time that no faster counting can go below.

Usage::

    python benchmarks/even_vocab.py [--words 20000 100000] [--env NAME=VALUE] [--write-ceiling]
                                    [--out PATH]

Prints JSON and writes ``benchmarks/results/even_vocab.json``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import REPO, machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "even_vocab.json")
TARGET_RATIO = 2.0
TARGET_RSS = 6 * 10**9


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (0 once gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def run_capped(cmd: list[str], cap: int, env: dict[str, str]) -> dict[str, Any]:
    """Run ``cmd`` in its own session; its wall time, the part of it the process was not
    stopped (this machine may stop niced jobs while another job is timed: polled), its CPU
    time, peak tree RSS, and whether it was killed for passing ``cap`` bytes."""
    import psutil

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, killed, stopped = 0, False, 0.0
    last = time.perf_counter()
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        if peak > cap:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.1)
        now = time.perf_counter()
        try:
            if psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED or now - last > 1.0:
                stopped += now - last - (0.1 if now - last > 1.0 else 0.0)
        except psutil.NoSuchProcess:
            pass
        last = now
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": round(wall - stopped, 2), "wall_seconds": round(wall, 2),
            "stopped_seconds": round(stopped, 2), "cpu_seconds": round(cpu, 2),
            "peak_rss_bytes": peak, "returncode": proc.returncode, "killed_at_cap": killed,
            "stderr_tail": err[-600:], "stdout_tail": out[-600:]}


def make_corpus(workdir: str, words: int, args: argparse.Namespace) -> str:
    path = os.path.join(workdir, f"even-{words}.h5")
    subprocess.run([sys.executable, "-m", "streamtopic", "synth", path, "--docs",
                    str(args.docs), "--words", str(words), "-k", str(args.topics),
                    "--doc-length", str(args.doc_length), "--seed", "0", "-q", "--local",
                    "threads"], check=True, capture_output=True, cwd=REPO)
    return path


def store_figures(store: str) -> dict[str, Any]:
    from streamtopic.store import CooccurrenceStore

    with CooccurrenceStore.open(store) as s:
        info = s.info()
    return {k: info[k] for k in ("V", "n_docs", "n_tokens", "nnz", "density", "blocks_stored",
                                 "blocks_sparse", "bytes_of_q") if k in info}


def write_ceiling(store: str) -> dict[str, Any]:
    """What writing the store's Q costs alone, as ingest writes it: every block above or on
    the diagonal (a mirrored block is its mirror image's file) read (not timed), made dense
    (as a dense running sum hands it over) and written again by ``write_q_block`` into a
    scratch version of the store (count the non-zeros, encode as sparse or dense, compress,
    checksum, write the file). Records this process's CPU seconds (user + system) and the
    blocks' bytes before compression: a floor under any ingest that stores this Q."""
    import numpy as np
    import scipy.sparse as sp
    import zarr

    from streamtopic.store import (
        MIRRORED,
        MIRRORED_DENSE,
        CooccurrenceStore,
        read_q_block,
        write_q_block,
    )

    with CooccurrenceStore.open(store) as s:
        bv, kinds, c, V = s.block_versions, s.block_sparse, s.chunk_size, s.V
    src = zarr.open_array(store=store, path=f"versions/v{int(bv.max()):06d}/Q", mode="r")
    scratch = "versions/v999999"
    dense = zarr.create_array(store=store, name=f"{scratch}/Q", shape=src.shape,
                              chunks=src.chunks, dtype=src.dtype, compressors=src.compressors,
                              fill_value=0.0, config={"write_empty_chunks": True})
    cpu, raw, blocks = 0.0, 0, 0
    for i, j in zip(*np.nonzero(bv > 0), strict=True):
        if kinds[i, j] in (MIRRORED, MIRRORED_DENSE):
            continue
        rows, cols = slice(i * c, min(V, (i + 1) * c)), slice(j * c, min(V, (j + 1) * c))
        block = read_q_block(store, int(bv[i, j]), rows, cols, sparse=int(kinds[i, j]),
                             stored_form=True)
        block = block.toarray() if sp.issparse(block) else np.ascontiguousarray(block)
        before = resource.getrusage(resource.RUSAGE_SELF)
        nnz, sparse = write_q_block(store, 999999, rows, cols, block, dense)
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        raw += 24 + 10 * nnz + 4 * (rows.stop - rows.start + 1) if sparse else block.nbytes
        blocks += 1
    shutil.rmtree(os.path.join(store, *scratch.split("/")), ignore_errors=True)
    return {"cpu_seconds": round(cpu, 2), "blocks_written": blocks, "raw_bytes": raw}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--words", type=int, nargs="+", default=[20_000, 100_000])
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--doc-length", type=int, default=300)
    ap.add_argument("--topics", type=int, default=50)
    ap.add_argument("--rss-cap", type=float, default=7.5e9)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--write-ceiling", action="store_true",
                    help="also time writing each store's Q alone (write_ceiling)")
    args = ap.parse_args(argv)
    env = dict(e.split("=", 1) for e in args.env)
    workdir = tempfile.mkdtemp(prefix="st-even-", dir=args.workdir)
    sizes: dict[str, Any] = {}
    try:
        for words in args.words:
            corpus = make_corpus(workdir, words, args)
            store = os.path.join(workdir, f"s{words}.zarr")
            run = run_capped([sys.executable, "-m", "streamtopic", "ingest", corpus, "--store",
                              store, "--min-df", "1", "--max-df", "1.0", "--keep-n", "100000",
                              "-q"], int(args.rss_cap), env)
            if run["returncode"] == 0:
                run.update(store_figures(store))
                if args.write_ceiling:
                    run["write_q_alone"] = write_ceiling(store)
            sizes[str(words)] = run
            shutil.rmtree(store, ignore_errors=True)
            os.remove(corpus)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result: dict[str, Any] = {
        "benchmark": "even_vocab", "env": env,
        "command": " ".join(["python", "benchmarks/even_vocab.py", *sys.argv[1:]]),
        "corpus": {"docs": args.docs, "doc_length": args.doc_length, "topics": args.topics,
                   "beta": 0.05, "alpha": 0.1, "format": "hdf5"},
        "sizes": sizes,
    }
    small, large = (sizes.get(str(w)) for w in (min(args.words), max(args.words)))
    if small and large and small["returncode"] == 0 and large["returncode"] == 0:
        ratio = large["seconds"] / small["seconds"]
        result.update({"time_ratio": round(ratio, 3), "target_ratio": TARGET_RATIO,
                       "within_time": ratio <= TARGET_RATIO,
                       "cpu_ratio": round(large["cpu_seconds"] / small["cpu_seconds"], 3),
                       "large_peak_rss_below_6GB": large["peak_rss_bytes"] < TARGET_RSS})
        if "write_q_alone" in large and "write_q_alone" in small:
            result["write_q_alone_over_small_ingest_cpu"] = round(
                large["write_q_alone"]["cpu_seconds"] / small["cpu_seconds"], 3)
    result["machine"] = machine_info()
    print(write_result(result, args.out))
    return 0 if result.get("within_time") and result.get("large_peak_rss_below_6GB") else 1


if __name__ == "__main__":
    sys.exit(main())
