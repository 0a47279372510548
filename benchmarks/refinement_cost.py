"""Benchmark: the refinement's cost and held-out likelihood on real corpora (issue 24).

For each case (a store ingested once with ``streamtopic ingest``, its held-out documents and
K), every *variant* of the code fits ``AnchorTopicModel(K, seed=0).fit(STORE)`` (the defaults,
Dask's threaded scheduler, as ``streamtopic fit STORE -k K --seed 0`` runs) in a fresh
process, the variants taking turns (in reverse order every other round), ``--repeats``
times. A variant (``--variant NAME=DIR``) is the ``streamtopic`` package of a source tree,
e.g. one made by ``git archive COMMIT streamtopic | tar -x -C DIR``; its child runs with
``PYTHONPATH=DIR`` (``NAME=.``: the installed package, this checkout). Before the runs each
variant fits the first case once, not counted (numba compiles its kernels into its own
tree's cache).

Recorded per run: the refinement's wall seconds (``diagnostics_["seconds"]["refine"]``),
the CPU seconds of the process during ``refine_topics`` (``time.process_time``, all
threads: less sensitive than wall time to other users' load on a shared 2-core machine), the
passes, the E-step iterations (``theta_iterations``, summed) and a digest of the topics
(the same seed gives the same bits: checked across repeats). The topics of each variant are
scored once by ``real_corpora.score``: held-out log-likelihood per token by document
completion (the test documents read as the store's training input was, over its
vocabulary). Reported: medians over the repeats.

Usage::

    python benchmarks/refinement_cost.py --case NAME:STORE:TEST:K [--case ...]
        --variant NAME=DIR [--variant ...] [--repeats N] [--quiet-wait SECONDS]
        [--out PATH] [--workdir DIR]

Prints a table to stderr and writes JSON to ``benchmarks/results/refinement_cost.json`` (or
--out).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import fit as fitbench  # benchmarks/fit.py: child runner, quiet wait
from _common import machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, "results", "refinement_cost.json")
TIMEOUT = 3600.0


def log(msg: str) -> None:
    print(f"[refinement-cost {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ============================================================================ the child


def child_main(spec_path: str) -> None:
    """Fit the store with the defaults on threads; report the refinement's record."""
    with open(spec_path) as fh:
        spec = json.load(fh)
    import dask
    import numpy as np

    import streamtopic.refinement as refinement
    from streamtopic import AnchorTopicModel

    cpu: list[float] = []
    real = refinement.refine_topics

    def timed(*args: Any, **kwargs: Any) -> Any:
        c0 = time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            cpu.append(time.process_time() - c0)

    refinement.refine_topics = timed  # the model imports it at call time
    with dask.config.set(scheduler="threads"):
        model = AnchorTopicModel(spec["K"], seed=0).fit(spec["store"])
    comp = np.ascontiguousarray(model.components_)
    np.save(spec["components_out"], comp)
    info = model.diagnostics_["refinement"]
    fitbench._emit(event="result", name="fit", refine_seconds=model.diagnostics_["seconds"]
                   ["refine"], refine_cpu_seconds=sum(cpu), passes=info["passes"],
                   theta_iterations=int(sum(info["theta_iterations"])),
                   pass_seconds=info["seconds"], loglik_per_token=info["loglik_per_token"],
                   digest=hashlib.sha256(comp.tobytes()).hexdigest()[:16],
                   module=refinement.__file__)


# ============================================================================ the parent


def _run(variant: str, src: str | None, case: dict[str, Any], work: str) -> dict[str, Any]:
    """One fit in a fresh process; returns its result event and the topics' path."""
    comp = os.path.join(work, f"{case['name']}-K{case['K']}-{variant}.npy")
    spec = {"store": case["store"], "K": case["K"], "components_out": comp}
    path = os.path.join(work, f"spec-{time.time_ns()}.json")
    with open(path, "w") as fh:
        json.dump(spec, fh)
    quiet = fitbench.wait_for_quiet()
    env = {"PYTHONPATH": src} if src else None  # benchmarks/ itself is the script's path
    run = fitbench.run_child([sys.executable, os.path.abspath(__file__), "--child", path],
                             default_timeout=TIMEOUT, env=env)
    err = fitbench.failure(run)
    if err:
        raise RuntimeError(f"{variant} on {case['name']}: {err}")
    res = fitbench.child_results(run)["fit"]
    res.update(components=comp, contention=run["contention"], quiet=quiet,
               wall_seconds=run["wall_seconds"])
    return res


def _test_matrix(case: dict[str, Any], work: str) -> Any:
    """The held-out documents over the store's vocabulary (CSR), read as its input was."""
    import scipy.sparse as sp

    import real_corpora
    from streamtopic import CooccurrenceStore
    from streamtopic.corpus import read_as_recorded

    path = os.path.join(work, f"{case['name']}.test.npz")
    if not os.path.exists(path):
        store = CooccurrenceStore.open(case["store"])
        src = [{**store.sources[0], "path": os.path.abspath(case["test"])}]
        test = read_as_recorded(store.config, src)
        H, _ = real_corpora.bag_of_words(test, list(store.vocab), min_tokens=0,
                                         scheduler=real_corpora._scheduler_for(test))
        sp.save_npz(path, H)
    return sp.load_npz(path).tocsr()


def _summary(runs: list[dict[str, Any]], held_out: float) -> dict[str, Any]:
    med = statistics.median
    return {"refine_seconds": med(r["refine_seconds"] for r in runs),
            "refine_cpu_seconds": med(r["refine_cpu_seconds"] for r in runs),
            "passes": runs[0]["passes"], "theta_iterations": runs[0]["theta_iterations"],
            "heldout_per_token": held_out, "same_bits": len({r["digest"] for r in runs}) == 1,
            "runs": [{k: r[k] for k in ("refine_seconds", "refine_cpu_seconds",
                                        "wall_seconds", "pass_seconds", "quiet")}
                     for r in runs]}


def run_case(case: dict[str, Any], variants: dict[str, str | None], repeats: int,
             work: str) -> dict[str, Any]:
    import numpy as np

    import real_corpora
    from streamtopic import CooccurrenceStore

    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for rep in range(repeats):
        order = list(variants) if rep % 2 == 0 else list(variants)[::-1]
        for v in order:
            res = _run(v, variants[v], case, work)
            runs[v].append(res)
            log(f"{case['name']} K={case['K']} {v}: refine {res['refine_seconds']:.1f} s "
                f"({res['refine_cpu_seconds']:.1f} s CPU), {res['passes']} passes")
    test = _test_matrix(case, work)
    vocab = list(CooccurrenceStore.open(case["store"]).vocab)
    out = {}
    for v, rs in runs.items():
        held = real_corpora.score(np.load(rs[0]["components"]), vocab, test)
        out[v] = _summary(rs, held["heldout_per_token"])
    return out


def print_table(result: dict[str, Any]) -> None:
    print(f"{'case':<16}{'variant':<8}{'refine s':>10}{'CPU s':>9}{'passes':>8}"
          f"{'iterations':>12}{'held-out':>10}", file=sys.stderr)
    for name, by_variant in result["cases"].items():
        for v, s in by_variant.items():
            print(f"{name:<16}{v:<8}{s['refine_seconds']:>10.2f}{s['refine_cpu_seconds']:>9.2f}"
                  f"{s['passes']:>8}{s['theta_iterations']:>12,}"
                  f"{s['heldout_per_token']:>10.4f}", file=sys.stderr)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", default=[], metavar="NAME:STORE:TEST:K")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quiet-wait", type=float, default=60.0)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.child:
        child_main(args.child)
        return {}
    fitbench.QUIET_WAIT["seconds"] = args.quiet_wait
    cases = []
    for c in args.case:
        name, store, test, K = c.split(":")
        cases.append({"name": f"{name}-K{K}", "store": store, "test": test, "K": int(K)})
    variants: dict[str, str | None] = {}
    for v in args.variant or ["new=."]:
        name, src = v.split("=", 1)
        variants[name] = None if src == "." else os.path.abspath(src)
    work = args.workdir or tempfile.mkdtemp(prefix="refinement-cost-")
    os.makedirs(work, exist_ok=True)
    for v, src in variants.items():  # compile each variant's kernels: not counted
        _run(v, src, cases[0], work)
    result: dict[str, Any] = {"machine": machine_info(), "repeats": args.repeats,
                              "variants": variants, "cases": {}}
    for case in cases:
        result["cases"][case["name"]] = run_case(case, variants, args.repeats, work)
        write_result(result, args.out)
    print_table(result)
    return result


if __name__ == "__main__":
    main()
