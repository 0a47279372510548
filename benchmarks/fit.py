"""Benchmark: learning a topic model end to end (ingest + ``AnchorTopicModel.fit``).

Three parts, all measured in fresh subprocesses whose whole process tree is polled with
psutil every 50 ms for the peak of its summed RSS:

1. *Acceptance corpus* (semi-synthetic, 7M tokens): K = 20 topics over V = 2,000 words,
   topics ~ Dirichlet(0.05) with one planted anchor each, θ ~ Dirichlet(0.1), 70 tokens per
   document, 100,000 documents, written as HDF5 (generation timed, not counted). One child
   process runs, under Dask's threaded scheduler, ``streamtopic.ingest`` (fixed vocabulary of
   the 2,000 generator words) and ``AnchorTopicModel(20, recover="l2", seed=0).fit``; the wall
   time of each stage, the total (ingest + fit) and the peak RSS are recorded. Further fresh
   children refit the same store with ``recover="kl"``, ``recover="original"`` and RecoverL2
   without the cleanup pass (each timed alone, outside the total), and, as a diagnostic of
   nested threading, RecoverKL once more with OpenBLAS limited to one thread. Every fit is
   scored with the matched L1 distance to the true topics and the number of planted anchors it
   found.
2. *Large case*: V = 15,000, K = 100 topics (Dirichlet(0.05), planted anchors),
   θ ~ Dirichlet(0.1), 300-token documents, 100,000 documents (30M tokens); ingest and fit
   with RecoverL2 in one child, with a time limit on each stage (ingest: 10 minutes).
3. *Real data*: the ``streamtopic fit`` command line, default options, K = 20, on UCI KOS and
   on 20 Newsgroups (``--stop-words english``); wall time, peak RSS and the printed topics.

Targets (reported as pass/fail, never fatal) for part 1: total <= 5 s, peak RSS <= 1 GB,
matched L1 of RecoverL2 <= 0.09 and of RecoverKL <= 0.17.

Usage::

    python benchmarks/fit.py [--skip-large] [--skip-real] [--out PATH] [--workdir DIR]
                             [--repeats N] [--quiet-wait SECONDS] [--skip-acceptance] [--keep]

Wall times on a shared machine vary with other users' load: the acceptance ingest+fit runs
``--repeats`` times (3 by default, each a fresh process and a fresh store) and its median is
judged; before each measured process the script waits (up to ``--quiet-wait`` seconds, 120 by
default) for the CPUs to be idle, and it records the CPU time other processes used meanwhile
(``contention``).

Prints the results as JSON and writes them to ``benchmarks/results/fit.json`` (or --out).
Corpora, stores and models go to a new directory under /tmp (or --workdir), removed at the end
unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

from _common import jsonable, machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, "results", "fit.json")
POLL_SECONDS = 0.05
EVENT = "@@fitbench "  # prefix of the child's progress lines on stdout

# part 1: the acceptance corpus
SMALL = {"V": 2_000, "K": 20, "beta": 0.05, "alpha": 0.1, "doc_length": 70, "n_docs": 100_000,
         "topic_seed": 20_130_001, "doc_seed": 20_130_002, "fit_seed": 0}
TARGETS = {"total_seconds": 5.0, "peak_rss_bytes": 10**9, "l1_l2": 0.09, "l1_kl": 0.17}
REFERENCES = {
    "note": "quoted reference figures for other codes on the acceptance corpus, measured "
            "earlier on this machine (as given in the task); NOT measured by this script",
    "paper_authors_code_seconds": [54, 63],
    "pyJSMF-RAW_seconds": 21,
    "ankura_seconds": 110,
}

# part 2: the large case
LARGE = {"V": 15_000, "K": 100, "beta": 0.05, "alpha": 0.1, "doc_length": 300,
         "n_docs": 100_000, "topic_seed": 20_130_011, "doc_seed": 20_130_012, "fit_seed": 0}
LARGE_INGEST_TIMEOUT = 600.0
LARGE_FIT_TIMEOUT = 1800.0
LARGE_MIN_FREE_BYTES = 12 * 2**30  # corpus (~0.3 GB) + dense store (up to 1.8 GB) + margin

# part 3: real data
KOS = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "uci-kos", "docword.kos.txt.gz"))
NEWS = os.path.normpath(
    os.path.join(REPO, "..", "shared", "data", "20newsgroups", "20news-bydate.tar.gz")
)
CLI_TIMEOUT = 1800.0

RSS_KILL_BYTES = 18 * 2**30  # a child whose tree passes this is stopped (24 GB machine)


def log(msg: str) -> None:
    print(f"[fit-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ============================================================================ measuring


class _Watch:
    """Peak summed RSS of a process and all its descendants, overall and per stage.

    A daemon thread samples every ``interval`` seconds; ``stage`` (set by the caller) names
    the stage the samples are charged to.
    """

    def __init__(self, pid: int, interval: float = POLL_SECONDS) -> None:
        import psutil

        self.proc = psutil.Process(pid)
        self.interval = interval
        self.stage = "startup"
        self.peak = 0
        self.peak_by_stage: dict[str, int] = {}
        self.max_procs = 0
        self.n_samples = 0
        self.last = 0
        self._cpu: dict[int, float] = {}  # pid -> last seen user+system seconds
        self._sys0 = _busy_cpu_seconds()
        self._t0 = time.perf_counter()
        self.contention: dict[str, float] = {}
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        import psutil

        try:
            tree = [self.proc, *self.proc.children(recursive=True)]
        except psutil.Error:
            return
        rss, alive = 0, 0
        for p in tree:
            try:
                rss += p.memory_info().rss
                t = p.cpu_times()
                self._cpu[p.pid] = t.user + t.system
                alive += 1
            except psutil.Error:  # gone since the listing
                continue
        if alive == 0:
            return
        self.n_samples += 1
        self.last = rss
        self.peak = max(self.peak, rss)
        stage = self.stage
        self.peak_by_stage[stage] = max(self.peak_by_stage.get(stage, 0), rss)
        self.max_procs = max(self.max_procs, alive)

    def _loop(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def start(self) -> _Watch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        self._thread.join()
        wall = time.perf_counter() - self._t0
        busy = _busy_cpu_seconds() - self._sys0
        own = sum(self._cpu.values())
        self.contention = {
            "wall_seconds": wall,
            "child_cpu_seconds": own,
            "machine_busy_cpu_seconds": busy,
            # CPU time used by everything else on the machine meanwhile, in cores
            "other_load_cores": max(0.0, busy - own) / wall if wall > 0 else 0.0,
        }


def _busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy (not idle or waiting on I/O)."""
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


QUIET_WAIT = {"seconds": 120.0}  # set from --quiet-wait


def wait_for_quiet(max_wait: float | None = None, threshold: float = 25.0) -> dict[str, Any]:
    """Wait (up to ``max_wait`` s) until the machine's CPU use over one second is below
    ``threshold`` percent: other users' jobs skew wall times on a 2-core machine."""
    import psutil

    max_wait = QUIET_WAIT["seconds"] if max_wait is None else max_wait
    t0 = time.perf_counter()
    pct = psutil.cpu_percent(interval=1.0)
    while pct >= threshold and time.perf_counter() - t0 < max_wait:
        pct = psutil.cpu_percent(interval=1.0)
    waited = time.perf_counter() - t0
    if pct >= threshold:
        log(f"machine still busy ({pct:.0f}% CPU) after {waited:.0f} s; measuring anyway")
    return {"waited_seconds": waited, "cpu_percent_before": pct,
            "loadavg_before": list(os.getloadavg())}


def run_child(
    cmd: list[str],
    stage_timeouts: dict[str, float] | None = None,
    default_timeout: float = 3600.0,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``cmd`` in its own session, measuring its tree's RSS and enforcing time limits.

    The child may announce stages on stdout with lines ``@@fitbench {"event": "begin",
    "stage": NAME}`` and report results with ``{"event": "result", ...}``; a stage that runs
    longer than ``stage_timeouts[NAME]`` (else ``default_timeout``) gets the child's process
    group killed. Returns wall time, peak RSS (overall and per stage), exit status, the events,
    the remaining stdout lines and the tail of stderr.
    """
    stage_timeouts = stage_timeouts or {}
    events: list[dict[str, Any]] = []
    plain: list[str] = []
    state = {"stage": "startup", "since": time.perf_counter()}
    lock = threading.Lock()

    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, cwd=cwd, start_new_session=True,
            env=None if env is None else {**os.environ, **env},
            text=True, encoding="utf-8", errors="replace", bufsize=1,
        )
        watch = _Watch(proc.pid).start()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip("\n")
                if line.startswith(EVENT):
                    ev = json.loads(line[len(EVENT):])
                    ev["t"] = time.perf_counter() - t0
                    with lock:
                        events.append(ev)
                        if ev.get("event") == "begin":
                            state["stage"] = ev["stage"]
                            state["since"] = time.perf_counter()
                            watch.stage = ev["stage"]
                else:
                    plain.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        killed: dict[str, Any] | None = None
        while proc.poll() is None:
            with lock:
                stage, since = state["stage"], state["since"]
            limit = stage_timeouts.get(stage, default_timeout)
            elapsed = time.perf_counter() - since
            if elapsed > limit:
                killed = {"reason": "timeout", "stage": stage, "limit_seconds": limit,
                          "elapsed_seconds": elapsed}
            elif watch.last > RSS_KILL_BYTES:
                killed = {"reason": "memory", "stage": stage, "rss_bytes": watch.last,
                          "limit_bytes": RSS_KILL_BYTES}
            if killed:
                log(f"stopping child {proc.pid}: {killed}")
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the child's own process group
                except ProcessLookupError:
                    pass
                break
            time.sleep(0.1)
        rc = proc.wait()
        wall = time.perf_counter() - t0
        reader.join(timeout=10)
        watch.stop()
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    return {
        "command": cmd,
        "returncode": rc,
        "wall_seconds": wall,
        "peak_rss_bytes": watch.peak,
        "peak_rss_bytes_by_stage": watch.peak_by_stage,
        "peak_processes": watch.max_procs,
        "rss_samples": watch.n_samples,
        "contention": watch.contention,
        "killed": killed,
        "events": events,
        "stdout_lines": plain,
        "stderr": stderr,
    }


def child_results(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The child's ``result`` events, by name."""
    return {ev["name"]: ev for ev in run["events"] if ev.get("event") == "result"}


def failure(run: dict[str, Any]) -> dict[str, Any] | None:
    """What went wrong with a child, or None."""
    if run["killed"]:
        return dict(run["killed"])
    if run["returncode"] != 0:
        return {"reason": "exit", "returncode": run["returncode"],
                "stderr_tail": run["stderr"][-3000:]}
    return None


def mib(n: float | None) -> str:
    return "?" if n is None else f"{n / 2**20:.0f} MiB"


# ============================================================================ the child


def _emit(**ev: Any) -> None:
    sys.stdout.write(EVENT + json.dumps(ev, default=jsonable) + "\n")
    sys.stdout.flush()


def child_main(spec_path: str) -> None:
    """Subprocess entry. The spec (JSON): ``store``; optional ``ingest`` {corpus, vocab};
    ``fits``: list of {name, params, components_out}. Everything runs under Dask's threaded
    scheduler. Imports are timed on their own, before any stage."""
    with open(spec_path) as fh:
        spec = json.load(fh)
    t0 = time.perf_counter()
    import dask

    import streamtopic
    from streamtopic.model import AnchorTopicModel

    _emit(event="result", name="imports", seconds=time.perf_counter() - t0)
    store = spec["store"]
    with dask.config.set(scheduler="threads"):
        if spec.get("ingest"):
            ing = spec["ingest"]
            _emit(event="begin", stage="ingest")
            t0 = time.perf_counter()
            rep = streamtopic.ingest(ing["corpus"], store, vocab=ing.get("vocab"), progress=False)
            seconds = time.perf_counter() - t0
            _emit(event="result", name="ingest", seconds=seconds, reported_seconds=rep.seconds,
                  n_docs=rep.n_docs, n_tokens=rep.n_tokens, vocab_size=rep.vocab_size,
                  n_skipped_docs=rep.n_skipped_docs, n_oov_tokens=rep.n_oov_tokens)
        for fit in spec["fits"]:
            _emit(event="begin", stage=f"fit:{fit['name']}")
            t0 = time.perf_counter()
            model = AnchorTopicModel(**fit["params"]).fit(store)
            seconds = time.perf_counter() - t0
            _emit(event="begin", stage=f"save:{fit['name']}")  # not timed
            np.save(fit["components_out"], model.components_)
            d = model.diagnostics_
            _emit(event="result", name=f"fit:{fit['name']}", seconds=seconds,
                  stage_seconds=d["seconds"], anchors=model.anchors_,
                  greedy_anchors=d["greedy_anchors"], cleanup_changed=d["cleanup_changed"],
                  cleanup_sweeps=d.get("cleanup_sweeps"), n_candidates=d.get("n_candidates"),
                  anchor_min_df=d.get("anchor_min_df"), n_converged=model.n_converged_,
                  n_fitted=model.n_fitted_, solver=d.get("solver"), vocab=model.vocab_)
    _emit(event="begin", stage="done")


# ============================================================================ scoring


def score(
    A_true: np.ndarray, planted: np.ndarray, vocab_true: list[str], res: dict[str, Any],
    components_path: str,
) -> dict[str, Any]:
    """Matched L1 and anchor statistics of one fit, against the generator's topics."""
    from streamtopic.metrics import matched_l1

    comp = np.load(components_path)  # K × V_store
    pos = {w: i for i, w in enumerate(vocab_true)}
    ids = np.array([pos[w] for w in res["vocab"]], dtype=np.int64)  # store word -> generator row
    A_hat = np.zeros_like(A_true)
    A_hat[ids] = comp.T
    m = matched_l1(A_true, A_hat)
    anchors = ids[np.asarray(res["anchors"], dtype=np.int64)]
    greedy = ids[np.asarray(res["greedy_anchors"], dtype=np.int64)]
    planted_set = set(planted.tolist())
    # how exclusive each chosen anchor is: max_k p(z = k | w) under the true model (uniform p(z),
    # as θ ~ symmetric Dirichlet); 1 for a planted anchor
    rows = A_true[anchors]
    purity = rows.max(axis=1) / np.maximum(rows.sum(axis=1), 1e-300)
    return {
        "matched_l1": m.mean,
        "matched_l1_max_topic": float(m.per_topic.max()),
        "anchors_found": len(planted_set & set(anchors.tolist())),
        "anchors_planted": int(planted.size),
        "greedy_anchors_found": len(planted_set & set(greedy.tolist())),
        "anchor_purity_mean": float(purity.mean()),
        "anchor_purity_min": float(purity.min()),
        "anchor_topics_covered": int(np.unique(rows.argmax(axis=1)).size),
        "cleanup_changed": int(res["cleanup_changed"]),
        "anchors_differing_from_greedy": len(set(anchors.tolist()) - set(greedy.tolist())),
        "fit_seconds": res["seconds"],
        "stage_seconds": res["stage_seconds"],
        "n_candidates": res.get("n_candidates"),
        "anchor_min_df": res.get("anchor_min_df"),
        "converged_rows": f"{res['n_converged']}/{res['n_fitted']}",
        "solver_max_gap": (res.get("solver") or {}).get("max_gap"),
    }


# ============================================================================ parts


def make_corpus(cfg: dict[str, Any], workdir: str, tag: str) -> dict[str, Any]:
    """Topics, HDF5 corpus and vocabulary file for one semi-synthetic case."""
    from streamtopic.synth import default_vocab, dirichlet_topics_with_anchors, write_corpus

    A, planted = dirichlet_topics_with_anchors(cfg["V"], cfg["K"], beta=cfg["beta"],
                                               seed=cfg["topic_seed"])
    vocab = default_vocab(cfg["V"])
    corpus = os.path.join(workdir, f"{tag}.h5")
    vocab_path = os.path.join(workdir, f"{tag}.vocab.txt")
    with open(vocab_path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(vocab) + "\n")
    log(f"{tag}: generating {cfg['n_docs']:,} documents × {cfg['doc_length']} tokens "
        f"(V = {cfg['V']:,}, K = {cfg['K']})")
    t0 = time.perf_counter()
    gen = write_corpus(corpus, A, cfg["n_docs"], format="hdf5", vocab=vocab, alpha=cfg["alpha"],
                       doc_length=cfg["doc_length"], seed=cfg["doc_seed"])
    seconds = time.perf_counter() - t0
    log(f"{tag}: {gen['n_tokens']:,} tokens, {os.path.getsize(corpus) / 2**20:.0f} MiB "
        f"in {seconds:.1f} s")
    return {"A": A, "planted": planted, "vocab": vocab, "corpus": corpus, "vocab_path": vocab_path,
            "generate_seconds": seconds, "n_tokens": int(gen["n_tokens"]), "nnz": int(gen["nnz"]),
            "corpus_bytes": os.path.getsize(corpus)}


def run_fits(
    workdir: str, tag: str, store: str, fits: list[tuple[str, dict[str, Any]]],
    ingest: dict[str, str] | None, timeouts: dict[str, float], env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, str]]:
    """One child: optional ingest, then the fits, in order."""
    outs = {name: os.path.join(workdir, f"{tag}-{name}.components.npy") for name, _ in fits}
    spec = {
        "store": store,
        "ingest": ingest,
        "fits": [{"name": n, "params": p, "components_out": outs[n]} for n, p in fits],
    }
    spec_path = os.path.join(workdir, f"{tag}.spec.json")
    with open(spec_path, "w") as fh:
        json.dump(spec, fh)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", spec_path]
    quiet = wait_for_quiet()
    run = run_child(cmd, stage_timeouts=timeouts, default_timeout=3600.0, env=env)
    run["contention"].update(quiet)
    return run, child_results(run), outs


def _stage_stats(runs: list[dict[str, Any]], keys: list[str]
                 ) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """Median and minimum over runs of each stage's seconds; a stage the fit did not run
    (None in every run, e.g. no sketch) stays None, and a run without it is left out."""
    median: dict[str, float | None] = {}
    best: dict[str, float | None] = {}
    for k in keys:
        xs = [r["seconds"][k] for r in runs if r["seconds"].get(k) is not None]
        median[k] = float(np.median(xs)) if xs else None
        best[k] = float(np.min(xs)) if xs else None
    return median, best


def _pipeline_run(
    workdir: str, data: dict[str, Any], cfg: dict[str, Any], i: int
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str]:
    """One fresh child: ingest into a new store, then RecoverL2. Returns (run summary, error,
    store path)."""
    store = os.path.join(workdir, f"acceptance-{i}.store")
    run, res, outs = run_fits(
        workdir, f"acceptance-main-{i}", store,
        [("l2", {"n_topics": cfg["K"], "method": "plain", "seed": cfg["fit_seed"],
                 "recover": "l2"})],
        ingest={"corpus": data["corpus"], "vocab": data["vocab_path"]},
        timeouts={"ingest": 600.0, "fit:l2": 1200.0},
    )
    err = failure(run)
    if err or "fit:l2" not in res:
        return None, err or {"reason": "no result", "stderr_tail": run["stderr"][-3000:]}, store
    ing, fit = res["ingest"], res["fit:l2"]
    st = fit["stage_seconds"]
    summary = {
        "seconds": {
            "ingest": ing["seconds"],
            "sketch": st.get("sketch"),
            "anchors": st.get("anchors"),
            "recovery": st.get("recovery"),
            "R_topic_cooccurrence": st.get("topic_cooccurrence"),
            "fit": fit["seconds"],
            "fit_overhead": fit["seconds"] - sum(st.values()),
            "total": ing["seconds"] + fit["seconds"],
        },
        "python_imports_seconds": res["imports"]["seconds"],
        "process_wall_seconds": run["wall_seconds"],
        "peak_rss_bytes": run["peak_rss_bytes"],
        "peak_rss_bytes_by_stage": run["peak_rss_bytes_by_stage"],
        "peak_processes": run["peak_processes"],
        "rss_samples": run["rss_samples"],
        "contention": run["contention"],
        "store": {"n_docs": ing["n_docs"], "n_tokens": ing["n_tokens"], "V": ing["vocab_size"]},
        "l2": score(data["A"], data["planted"], data["vocab"], fit, outs["l2"]),
    }
    sec = summary["seconds"]
    log(f"acceptance run {i}: ingest {sec['ingest']:.2f} s + fit {sec['fit']:.2f} s = "
        f"{sec['total']:.2f} s; peak RSS {mib(run['peak_rss_bytes'])}; other load "
        f"{run['contention']['other_load_cores']:.2f} cores; "
        f"L1(l2) {summary['l2']['matched_l1']:.4f}")
    return summary, None, store


def part_acceptance(workdir: str, repeats: int) -> dict[str, Any]:
    cfg = SMALL
    data = make_corpus(cfg, workdir, "acceptance")
    base = {"n_topics": cfg["K"], "method": "plain", "seed": cfg["fit_seed"]}
    out: dict[str, Any] = {
        "corpus": {**cfg, "format": "hdf5",
                   "n_tokens": data["n_tokens"], "nnz": data["nnz"],
                   "corpus_bytes": data["corpus_bytes"],
                   "generate_seconds": data["generate_seconds"],
                   "generator": "streamtopic.synth.dirichlet_topics_with_anchors + write_corpus"},
    }

    # the measured pipeline: ingest + RecoverL2 in one fresh process, `repeats` times (each
    # with a new store); wall times on a shared 2-core machine vary, so the median is reported
    log(f"acceptance: ingest + fit (RecoverL2), {repeats} fresh process(es), threaded scheduler")
    runs: list[dict[str, Any]] = []
    store = ""
    for i in range(repeats):
        if store:
            _remove(store)
        summary, err, store = _pipeline_run(workdir, data, cfg, i)
        if err:
            out["error"] = {"run": i, **err}
            return out
        assert summary is not None
        runs.append(summary)
    keys = list(runs[0]["seconds"])
    median, best = _stage_stats(runs, keys)
    peak = max(r["peak_rss_bytes"] for r in runs)
    l2 = runs[-1]["l2"]
    total = median["total"]
    out["pipeline"] = {
        "what": "one fresh process per run, dask scheduler='threads': streamtopic.ingest(corpus, "
                "store, vocab=<2000 generator words>, progress=False) then "
                "AnchorTopicModel(20, recover='l2', seed=0).fit(store); seconds are wall "
                "times inside the process (interpreter start and imports excluded)",
        "repeats": repeats,
        "seconds_median": median,
        "seconds_min": best,
        "peak_rss_bytes_max": peak,
        "matched_l1_l2_per_run": [r["l2"]["matched_l1"] for r in runs],
        "runs": runs,
    }
    out["l2"] = l2

    # the other recoveries, and RecoverL2 without the cleanup pass: each in a fresh process of
    # its own on the last run's store (not in the total)
    more: dict[str, Any] = {
        "what": "each fit alone in a fresh process (threaded scheduler) on the same store; "
                "not part of the total",
    }
    # the last variant is a diagnostic: the same KL fit with OpenBLAS (and OpenMP) limited to
    # one thread per process, to show how much nested BLAS threading inside Dask's worker
    # threads costs on this machine
    one_thread = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    variants = [("kl", {**base, "recover": "kl"}, None),
                ("original", {**base, "recover": "original"}, None),
                ("l2_no_cleanup", {**base, "recover": "l2", "cleanup": False}, None),
                ("kl_blas_1_thread", {**base, "recover": "kl"}, one_thread)]
    for name, params, env in variants:
        log(f"acceptance: refit {name}")
        run2, res2, outs2 = run_fits(workdir, f"acceptance-{name}", store, [(name, params)],
                                     ingest=None, timeouts={f"fit:{name}": 1800.0}, env=env)
        r = res2.get(f"fit:{name}")
        entry: dict[str, Any] = (
            score(data["A"], data["planted"], data["vocab"], r, outs2[name]) if r else {}
        )
        entry.update(params={k: v for k, v in params.items() if k != "n_topics"},
                     env=env or "default (library and BLAS defaults)",
                     process_wall_seconds=run2["wall_seconds"],
                     peak_rss_bytes=run2["peak_rss_bytes"], contention=run2["contention"])
        err2 = failure(run2)
        if err2 or not r:
            entry["error"] = err2 or {"reason": "no result", "stderr_tail": run2["stderr"][-3000:]}
        else:
            log(f"acceptance: {name}: L1 {entry['matched_l1']:.4f}, "
                f"fit {entry['fit_seconds']:.2f} s")
        more[name] = entry
    out["other_recoveries"] = more
    _remove(store)

    nc = more["l2_no_cleanup"] if "matched_l1" in more["l2_no_cleanup"] else None
    out["cleanup_effect"] = {
        "recover": "l2",
        "cleanup_true": {k: l2[k] for k in ("matched_l1", "anchors_found", "cleanup_changed",
                                             "anchor_purity_mean", "fit_seconds")},
        "cleanup_false": (
            {k: nc[k] for k in ("matched_l1", "anchors_found", "cleanup_changed",
                                "anchor_purity_mean", "fit_seconds")} if nc else None
        ),
        "anchors_changed_by_cleanup": l2["cleanup_changed"],
    }

    kl_l1 = more["kl"].get("matched_l1")
    out["targets"] = {
        "total_seconds": {"target": f"<= {TARGETS['total_seconds']}", "value": total,
                          "pass": bool(total <= TARGETS["total_seconds"]),
                          "min_over_runs": best["total"],
                          "definition": "median over runs of ingest + fit wall time inside the "
                                        "process (interpreter start and imports excluded; see "
                                        "process_wall_seconds)"},
        "peak_rss": {"target": f"<= {TARGETS['peak_rss_bytes']} bytes (1 GB)",
                     "value": peak,
                     "pass": bool(peak <= TARGETS["peak_rss_bytes"]),
                     "definition": "largest over runs of the peak summed RSS of the ingest+fit "
                                   "process tree (whole process lifetime)"},
        "l1_l2": {"target": f"<= {TARGETS['l1_l2']}", "value": l2["matched_l1"],
                  "pass": bool(l2["matched_l1"] <= TARGETS["l1_l2"])},
        "l1_kl": {"target": f"<= {TARGETS['l1_kl']}", "value": kl_l1,
                  "pass": bool(kl_l1 is not None and kl_l1 <= TARGETS["l1_kl"])},
    }
    out["targets"]["all_pass"] = all(t["pass"] for t in out["targets"].values())
    out["references"] = REFERENCES
    return out


def part_large(workdir: str) -> dict[str, Any]:
    cfg = LARGE
    free = shutil.disk_usage(workdir).free
    out: dict[str, Any] = {
        "corpus": {**cfg, "format": "hdf5"},
        "disk_free_bytes_before": free,
    }
    if free < LARGE_MIN_FREE_BYTES:
        out["skipped"] = f"only {free / 2**30:.1f} GiB free under {workdir}"
        log(f"large: {out['skipped']}; skipped")
        return out
    data = make_corpus(cfg, workdir, "large")
    out["corpus"].update(n_tokens=data["n_tokens"], nnz=data["nnz"],
                         corpus_bytes=data["corpus_bytes"],
                         generate_seconds=data["generate_seconds"])
    store = os.path.join(workdir, "large.store")
    log(f"large: ingest (limit {LARGE_INGEST_TIMEOUT:.0f} s) + fit (RecoverL2)")
    try:
        run, res, outs = run_fits(
            workdir, "large", store,
            [("l2", {"n_topics": cfg["K"], "method": "plain", "recover": "l2",
                     "seed": cfg["fit_seed"]})],
            ingest={"corpus": data["corpus"], "vocab": data["vocab_path"]},
            timeouts={"ingest": LARGE_INGEST_TIMEOUT, "fit:l2": LARGE_FIT_TIMEOUT},
        )
        out["process_wall_seconds"] = run["wall_seconds"]
        out["peak_rss_bytes"] = run["peak_rss_bytes"]
        out["peak_rss_bytes_by_stage"] = run["peak_rss_bytes_by_stage"]
        out["contention"] = run["contention"]
        out["timeouts_seconds"] = {"ingest": LARGE_INGEST_TIMEOUT, "fit": LARGE_FIT_TIMEOUT}
        out["store_bytes_on_disk"] = _du(store)
        err = failure(run)
        if err:
            out["error"] = err
        if "ingest" in res:
            ing = res["ingest"]
            out["seconds"] = {"ingest": ing["seconds"]}
            out["store"] = {"n_docs": ing["n_docs"], "n_tokens": ing["n_tokens"],
                            "V": ing["vocab_size"]}
        if "fit:l2" in res:
            fit = res["fit:l2"]
            st = fit["stage_seconds"]
            out["seconds"].update(
                sketch=st.get("sketch"), anchors=st.get("anchors"), recovery=st.get("recovery"),
                R_topic_cooccurrence=st.get("topic_cooccurrence"), fit=fit["seconds"],
                total=out["seconds"]["ingest"] + fit["seconds"],
            )
            out["l2"] = score(data["A"], data["planted"], data["vocab"], fit, outs["l2"])
            log(f"large: ingest {out['seconds']['ingest']:.1f} s, recovery "
                f"{st.get('recovery', float('nan')):.1f} s, fit {fit['seconds']:.1f} s, peak RSS "
                f"{mib(run['peak_rss_bytes'])}, L1 {out['l2']['matched_l1']:.4f}")
    finally:
        for p in (data["corpus"], store):
            _remove(p)
    return out


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def _du(path: str) -> int | None:
    """Bytes on disk under ``path`` (None when it does not exist)."""
    from streamtopic._scratch import disk_bytes

    return disk_bytes(path) if os.path.exists(path) else None


_INGEST_LINE = re.compile(
    r"\+([\d,]+) documents, \+([\d,]+) tokens \(V = ([\d,]+)\)")
_FIT_LINE = re.compile(r"K = (\d+), V = ([\d,]+), recover = (\w+); ([\d,]+)/([\d,]+) word rows "
                       r"converged; cleanup changed (\d+) anchors; (.*); total ([0-9.]+) s")
_STAGE = re.compile(r"(\w+) ([0-9.]+) s")
_TOPIC_LINE = re.compile(r"topic\s+\d+ \(\d.*$")


def streamtopic_cmd() -> list[str]:
    exe = shutil.which("streamtopic")
    return [exe] if exe else [sys.executable, "-m", "streamtopic"]


def cli_fit(name: str, source: str, workdir: str, extra: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"input": source}
    if not os.path.exists(source):
        out["skipped"] = "input not found"
        log(f"real/{name}: {source} not found; skipped")
        return out
    model = os.path.join(workdir, f"{name}.model")
    cmd = streamtopic_cmd() + ["fit", source, "-k", "20", "-o", model, *extra]
    log(f"real/{name}: {' '.join(cmd[1:])}")
    quiet = wait_for_quiet()
    run = run_child(cmd, default_timeout=CLI_TIMEOUT, cwd=workdir)
    run["contention"].update(quiet)
    out["command"] = " ".join(["streamtopic", *cmd[len(streamtopic_cmd()):]])
    out["wall_seconds"] = run["wall_seconds"]
    out["peak_rss_bytes"] = run["peak_rss_bytes"]
    out["peak_processes"] = run["peak_processes"]
    out["contention"] = run["contention"]
    err = failure(run)
    if err:
        out["error"] = err
    m = _INGEST_LINE.search(run["stderr"])
    if m:
        out["store"] = {"n_docs": int(m.group(1).replace(",", "")),
                        "n_tokens": int(m.group(2).replace(",", "")),
                        "V": int(m.group(3).replace(",", ""))}
    m = _FIT_LINE.search(run["stderr"])
    if m:
        out["reported"] = {
            "converged_rows": f"{m.group(4)}/{m.group(5)}",
            "cleanup_changed": int(m.group(6)),
            "stage_seconds": {k: float(v) for k, v in _STAGE.findall(m.group(7))},
            "total_seconds": float(m.group(8)),
        }
    # distributed's progress bars also go to stdout (text input): keep the topic lines only
    out["topics"] = [m.group(0).strip() for m in map(_TOPIC_LINE.search, run["stdout_lines"]) if m]
    for p in (model, f"{model}.store"):
        _remove(p)
    log(f"real/{name}: {run['wall_seconds']:.1f} s, peak RSS {mib(run['peak_rss_bytes'])}, "
        f"{len(out['topics'])} topics")
    return out


def part_real(workdir: str) -> dict[str, Any]:
    return {
        "what": "streamtopic fit SOURCE -k 20 -o MODEL (default options: --local auto, i.e. "
                "threads for UCI, a local process cluster for text), wall time of the whole "
                "command including interpreter start",
        "kos": cli_fit("kos", KOS, workdir, []),
        "20newsgroups": cli_fit("20newsgroups", NEWS, workdir, ["--stop-words", "english"]),
    }


# ============================================================================ main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-large", action="store_true", help="Skip the V = 15,000 case.")
    parser.add_argument("--skip-real", action="store_true", help="Skip KOS and 20 Newsgroups.")
    parser.add_argument("--out", default=DEFAULT_OUT, help="JSON output file.")
    parser.add_argument("--workdir", default=None,
                        help="Where corpora, stores and models go (default: a new directory "
                             "under /tmp, removed at the end).")
    parser.add_argument("--keep", action="store_true", help="Keep the work directory's files.")
    parser.add_argument("--repeats", type=int, default=3,
                        help="Fresh-process runs of the acceptance ingest+fit (median reported; "
                             "default 3).")
    parser.add_argument("--skip-acceptance", action="store_true",
                        help="Skip the 7M-token acceptance corpus (for partial runs).")
    parser.add_argument("--quiet-wait", type=float, default=120.0, metavar="SECONDS",
                        help="Longest wait for idle CPUs before each measured process "
                             "(default 120; 0: do not wait).")
    parser.add_argument("--child", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    QUIET_WAIT["seconds"] = max(0.0, args.quiet_wait)
    if args.child:
        child_main(args.child)
        return {}

    own = args.workdir is None
    workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="streamtopic-fitbench-",
                                                               dir="/tmp"))
    if os.path.commonpath([workdir, REPO]) == REPO:
        parser.error(f"--workdir {workdir} is inside the repository; use a directory outside it")
    os.makedirs(workdir, exist_ok=True)
    work = os.path.join(workdir, f"run-{os.getpid()}")
    os.makedirs(work)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t_start = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "fit",
        "started_at": started,
        "machine": machine_info(),
        "rss_method": f"sum of RSS over the child process and all its descendants, polled "
                      f"every {POLL_SECONDS * 1000:.0f} ms with psutil; peak",
        "workdir": workdir,
    }
    try:
        if args.skip_acceptance:
            result["acceptance"] = {"skipped": "--skip-acceptance"}
        else:
            result["acceptance"] = part_acceptance(work, args.repeats)
        if args.skip_large:
            result["large"] = {"skipped": "--skip-large"}
        else:
            result["large"] = part_large(work)
        if args.skip_real:
            result["real"] = {"skipped": "--skip-real"}
        else:
            result["real"] = part_real(work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
            if own:
                shutil.rmtree(workdir, ignore_errors=True)
    result["benchmark_seconds"] = time.perf_counter() - t_start
    print(write_result(result, args.out))
    return result


if __name__ == "__main__":
    main()
