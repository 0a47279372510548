"""Benchmark: ``streamtopic infer`` throughput on the 20 Newsgroups text (issue 18, point 1).

1. *Model* (not timed): ``streamtopic fit 20news-bydate.tar.gz -k 20 -o model`` with the
   defaults (its store kept in the work directory).
2. *Inference*, timed from the raw tar to the output in place, as a user runs it, in a fresh
   process each time: ``streamtopic infer model 20news-bydate.tar.gz -o theta.zarr -q``
   with ``--local sync`` (one process, one core), with the default (``--local auto``: text
   below ``cli.SMALL_TEXT_BYTES`` is read on threads in the process, larger text on a local
   cluster) and with ``--local cluster`` (one worker process per core), in turns,
   ``--rounds`` times; the command's wall time
   (process start, imports and cluster start included), its own stage time (the line it
   prints), the CPU seconds of the process tree, and the peak RSS of the tree.
3. *Equality*: the rows written equal ``transform`` of the same documents (the tar's members,
   headers stripped as the reader does), compared once, to 1e-10.

Throughput per core = input tokens (the text's tokens before stop words are removed, as the
store counts a document's length) / (wall seconds × cores used). Also reported: the same per
CPU second, which does not depend on what else the shared machine runs.

Usage::

    python benchmarks/infer.py [--rounds 3] [--workdir DIR] [--out PATH]

Prints JSON and writes ``benchmarks/results/infer.json`` (or --out).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tarfile
import time
from typing import Any

import numpy as np
import psutil

from _common import REPO, machine_info, write_result

TAR = os.path.join(os.path.dirname(REPO), "shared", "data", "20newsgroups",
                   "20news-bydate.tar.gz")
STAGE = re.compile(r"([\d,]+) documents, ([\d,]+) tokens .* in ([\d.]+) s")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(cmd: list[str]) -> dict[str, Any]:
    """Run ``cmd``; its wall seconds, CPU seconds and peak RSS of its process tree, output."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root = psutil.Process(proc.pid)
    peak, cpu = 0, {}
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree))
            for p in tree:
                t = p.cpu_times()
                cpu[p.pid] = t.user + t.system
        except psutil.Error:
            pass
        time.sleep(0.02)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err}")
    return {"wall_s": wall, "cpu_s": sum(cpu.values()), "peak_rss_mib": peak / 2**20,
            "stdout": out.strip()}


def fit_model(work: str) -> str:
    model = os.path.join(work, "model")
    if not os.path.exists(model):
        log("fitting the model (defaults, K = 20) ...")
        run([sys.executable, "-m", "streamtopic", "fit", TAR, "-k", "20", "-o", model,
             "--store", os.path.join(work, "store.zarr"), "-q"])
    return model


def check_equal(model_path: str, out: str) -> float:
    """Largest |θ_infer − θ_transform| over the tar's documents."""
    import zarr

    from streamtopic.corpus import _decode, _strip_header_block
    from streamtopic.model import AnchorTopicModel

    with tarfile.open(TAR, "r:gz") as tar:
        texts = [_decode(_strip_header_block(tar.extractfile(m).read(), True))[0]
                 for m in tar if m.isfile()]
    theta = zarr.open_group(out, mode="r")["theta"][:]
    return float(np.abs(theta - AnchorTopicModel.load(model_path).transform(texts)).max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/streamtopic-infer-bench")
    ap.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "infer.json"))
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    model = fit_model(args.workdir)
    out = os.path.join(args.workdir, "theta.zarr")
    cores = psutil.cpu_count(logical=True) or 1
    modes = {"sync (1 core)": (["--local", "sync"], 1),
             f"default ({cores} cores)": ([], cores),
             f"--local cluster ({cores} worker processes)": (["--local", "cluster"], cores)}
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode, (flags, _) in modes.items():
            res = run([sys.executable, "-m", "streamtopic", "infer", model, TAR, "-o", out,
                       "-q", *flags])
            m = STAGE.search(res["stdout"])
            assert m, res["stdout"]
            res.update(n_docs=int(m[1].replace(",", "")), n_tokens=int(m[2].replace(",", "")),
                       stage_s=float(m[3]))
            runs[mode].append(res)
            log(f"round {r} {mode}: wall {res['wall_s']:.2f} s, stage {res['stage_s']:.2f} s, "
                f"cpu {res['cpu_s']:.2f} s")
    summary = {}
    for mode, (_, used) in modes.items():
        rs = runs[mode]
        tokens = rs[0]["n_tokens"]
        wall = statistics.median(x["wall_s"] for x in rs)
        stage = statistics.median(x["stage_s"] for x in rs)
        cpu = statistics.median(x["cpu_s"] for x in rs)
        summary[mode] = {
            "cores": used, "median_wall_s": wall, "median_stage_s": stage, "median_cpu_s": cpu,
            "tokens_per_s_per_core_wall": tokens / (wall * used),
            "tokens_per_s_per_core_stage": tokens / (stage * used),
            "tokens_per_cpu_s": tokens / cpu,
            "peak_rss_mib": max(x["peak_rss_mib"] for x in rs),
        }
    diff = check_equal(model, out)
    result = {
        "benchmark": "infer",
        "machine": machine_info(),
        "corpus": TAR,
        "n_docs": runs[next(iter(modes))][0]["n_docs"],
        "n_tokens": runs[next(iter(modes))][0]["n_tokens"],
        "target_tokens_per_s_per_core": 1e6,
        "summary": summary,
        "runs": runs,
        "max_abs_diff_vs_transform": diff,
        "equal_to_transform_1e-10": diff <= 1e-10,
    }
    print(write_result(result, args.out))


if __name__ == "__main__":
    main()
