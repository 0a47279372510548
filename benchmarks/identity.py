"""Identity check: are fitted models bit-identical before and after a change of the code?

The safety net of issue 16 ("Models are bit-identical before and after the restructuring on
the benchmark stores and on KOS, for every recovery method, rectified and not").

Usage::

    # the reference, from the code before the change (e.g. a git worktree on PYTHONPATH)
    PYTHONPATH=/tmp/refwt python benchmarks/identity.py --save /tmp/identity-ref
    # later, with the code under test
    python benchmarks/identity.py --compare /tmp/identity-ref

Stores (built once into ``--workdir``, default /tmp/identity-stores, and reused when present):

* ``acceptance``: the acceptance corpus of ``benchmarks/fit.py`` (its ``SMALL`` config and
  ``make_corpus``: V = 2,000, K = 20, 100,000 documents × 70 tokens, the same seeds),
  ingested with the fixed vocabulary of the generator's words as fit.py's child does;
* ``kos``: UCI KOS as bundled in the package (``streamtopic demo-path``), copied into the
  work directory first so that the path recorded in the store (which the refinement reads
  again) does not depend on which checkout built it.

Configurations on each store: ``AnchorTopicModel(20, method="plain", recover=R, rectify=X,
seed=0)`` for R in l2, kl, original, admm, activeset and X in none, ap; and on KOS the default
``AnchorTopicModel(20, seed=0)`` (method 'rectified': core, rectification, QR anchors,
active set, refinement). Everything else is left at its default.

Both stores are small enough that the default memory budget holds Q in memory, and the
acceptance store is a single 2048-wide block. The block-by-block engines (the sketch, the
recovery graph and the rectification over Q's blocks, written to scratch) are therefore also
exercised by a third group, ``kos-ooc``: the ten plain configurations on KOS (4×4 blocks)
with ``memory_budget=64 MiB``, which keeps Q and its rectification out of core
(``--no-out-of-core`` leaves it out).

Every fit runs in a child process under Dask's threaded scheduler, on a fresh copy of the
pristine store (so that no rectified array cached in the store by one run is reused by
another: each run rectifies with its own code). A configuration whose fit takes longer than
``--timeout`` seconds (60) is stopped and reported as dropped (with ``--compare``, one the
reference fitted in t seconds may take max(60, 4t), since the CPUs are shared, and one the
reference dropped is not refitted unless ``--retry-dropped``); one the estimator refuses is
reported as skipped, with its message. ``--only SUBSTRING`` runs some configurations only.

``--save DIR`` writes ``DIR/<config>.npz`` (``components_``, ``anchors_``,
``topic_cooccurrence_``, ``topic_prevalence_``) and ``DIR/manifest.json`` (which code ran:
``streamtopic.__file__``, its git commit and a digest of its sources; fit times; the stores'
digests). ``--compare DIR`` refits and prints, per configuration, max|ΔA| (components), whether
the anchors are equal, max|ΔR| (topic co-occurrence), max|Δp(z)| and whether every array is
bitwise equal, then ``"identical"``: true when every configuration the reference fitted was
refitted and all its arrays are bitwise equal (a configuration refused by both codes counts as
agreeing; one the reference dropped is listed in ``not_compared`` and does not count).
The stores' digests (Q and vocabulary) are compared too: with another ``--workdir`` the
stores are rebuilt by the code under test, which checks the ingest as well. Both modes print
JSON on stdout and exit 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

from _common import jsonable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EVENT = "@@identity "
K = 20
SEED = 0
RECOVERS = ("l2", "kl", "original", "admm", "activeset")
RECTIFIES = ("none", "ap")
OOC_BUDGET = 64 * 2**20  # bytes: below 3 dense copies of KOS's Q (1.1 GB) and its rectification
ARRAYS = ("components_", "anchors_", "topic_cooccurrence_", "topic_prevalence_")
BUILD_TIMEOUT = 900.0
STORES = ("acceptance", "kos")


def log(msg: str) -> None:
    print(f"[identity {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ============================================================================ configurations


def configurations(out_of_core: bool = True) -> list[dict[str, Any]]:
    """Every configuration: name, store, estimator parameters (besides n_topics and seed)."""
    configs = []
    groups: list[tuple[str, str, dict[str, Any]]] = [("acceptance", "acceptance", {}),
                                                     ("kos", "kos", {})]
    if out_of_core:
        groups.append(("kos-ooc", "kos", {"memory_budget": OOC_BUDGET}))
    for group, store, extra in groups:
        for rectify in RECTIFIES:
            for recover in RECOVERS:
                configs.append({"name": f"{group}-plain-{recover}-rect_{rectify}", "group": group,
                                "store": store,
                                "params": {"method": "plain", "recover": recover,
                                           "rectify": rectify, **extra}})
    configs.append({"name": "kos-rectified-default", "group": "kos-default", "store": "kos",
                    "params": {}})
    return configs


# ============================================================================ the child


def _emit(**ev: Any) -> None:
    sys.stdout.write(EVENT + json.dumps(ev, default=jsonable) + "\n")
    sys.stdout.flush()


def _small(o: Any, depth: int = 0) -> Any:
    """A diagnostics record without its long lists (kept: what says which path ran)."""
    if isinstance(o, dict):
        return {str(k): _small(v, depth + 1) for k, v in o.items() if depth < 3}
    if isinstance(o, (list, tuple)):
        return [_small(v, depth + 1) for v in o] if len(o) <= 8 else f"<{len(o)} items>"
    if isinstance(o, np.ndarray):
        return _small(o.tolist(), depth) if o.size <= 8 else f"<array {o.shape}>"
    return jsonable(o) if not isinstance(o, (str, int, float, bool, type(None))) else o


def store_digest(path: str) -> dict[str, Any]:
    """SHA-256 of the store's Q (as read densely, unnormalised) and of its vocabulary."""
    import streamtopic as st

    store = st.CooccurrenceStore.open(path)
    try:
        Q = np.ascontiguousarray(store.read_dense(normalised=False))
        vocab = list(store.vocab)
        return {"V": int(store.V), "n_docs": int(store.n_docs), "version": int(store.version),
                "Q_dtype": str(Q.dtype), "Q_sum": float(Q.sum()),
                "Q_sha256": hashlib.sha256(Q.tobytes()).hexdigest(),
                "vocab_sha256": hashlib.sha256("\n".join(vocab).encode()).hexdigest()}
    finally:
        store.close()


def _build(workdir: str, name: str) -> None:
    """Build one store (corpus, then ingest) into ``workdir/name``; ``READY`` marks it done."""
    import streamtopic as st

    base = os.path.join(workdir, name)
    if os.path.exists(base):
        shutil.rmtree(base)
    os.makedirs(base)
    store = os.path.join(base, "store.zarr")
    t0 = time.perf_counter()
    if name == "acceptance":
        sys.path.insert(0, HERE)
        from fit import SMALL, make_corpus  # benchmarks/fit.py: its generator and seeds

        data = make_corpus(SMALL, base, "acceptance")
        rep = st.ingest(data["corpus"], store, vocab=data["vocab_path"], progress=False)
        info: dict[str, Any] = {"config": SMALL, "corpus": data["corpus"],
                                "n_tokens_generated": data["n_tokens"]}
    else:
        from streamtopic.corpus import bundled_corpus

        src = bundled_corpus()
        docword = os.path.join(base, "docword.kos.txt.gz")
        shutil.copyfile(src, docword)
        shutil.copyfile(os.path.join(os.path.dirname(src), "vocab.kos.txt"),
                        os.path.join(base, "vocab.kos.txt"))
        rep = st.ingest(docword, store, progress=False)
        info = {"bundled": src, "corpus": docword}
    info.update(n_docs=rep.n_docs, n_tokens=rep.n_tokens, vocab_size=rep.vocab_size,
                build_seconds=time.perf_counter() - t0, built_by=st.__file__,
                digest=store_digest(store))
    with open(os.path.join(base, "READY.partial"), "w") as fh:
        json.dump(info, fh, indent=2, default=jsonable)
    os.replace(os.path.join(base, "READY.partial"), os.path.join(base, "READY"))


def child_main(spec_path: str) -> None:
    """Subprocess entry. Spec: {"build": [store names], "workdir": W} or {"store": path,
    "fits": [{name, params, out}]}. Under Dask's threaded scheduler."""
    with open(spec_path) as fh:
        spec = json.load(fh)
    import dask

    import streamtopic as st

    _emit(event="hello", streamtopic_file=st.__file__,
          streamtopic_version=getattr(st, "__version__", None),
          sources_sha256=sources_digest(os.path.dirname(st.__file__)))
    with dask.config.set(scheduler="threads"):
        for name in spec.get("build", []):
            _emit(event="begin", stage=f"build:{name}")
            _build(spec["workdir"], name)
            _emit(event="end", stage=f"build:{name}")
        for fit in spec.get("fits", []):
            _emit(event="begin", stage=fit["name"])
            model = st.AnchorTopicModel(K, seed=SEED, **fit["params"])
            t0 = time.perf_counter()
            try:
                model.fit(spec["store"])
            except Exception as exc:  # refused (ValueError and kin) or failed: reported
                _emit(event="end", stage=fit["name"], status="skipped",
                      error_type=type(exc).__name__, message=str(exc),
                      seconds=time.perf_counter() - t0)
                continue
            seconds = time.perf_counter() - t0
            arrays: dict[str, Any] = {a: np.asarray(getattr(model, a)) for a in ARRAYS}
            np.savez(fit["out"], **arrays)
            _emit(event="end", stage=fit["name"], status="fitted", seconds=seconds,
                  diagnostics=_small({k: model.diagnostics_.get(k) for k in
                                      ("seconds", "settings", "rectification", "core")}))


# ============================================================================ the parent


def run_child(spec: dict[str, Any], spec_path: str, timeout: float,
              on_event: Any, limits: dict[str, float] | None = None) -> dict[str, Any]:
    """Run one child on ``spec``; a stage longer than ``limits[stage]`` (else ``timeout``)
    seconds gets the child's process group killed. Returns {returncode, killed (stage or
    None), stderr tail}."""
    limits = limits or {}
    with open(spec_path, "w") as fh:
        json.dump(spec, fh)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", spec_path]
    err_path = spec_path + ".stderr"
    state: dict[str, Any] = {"stage": None, "since": time.perf_counter()}
    lock = threading.Lock()
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True, bufsize=1)

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not line.startswith(EVENT):
                    continue
                ev = json.loads(line[len(EVENT):])
                with lock:
                    if ev.get("event") == "begin":
                        state["stage"], state["since"] = ev["stage"], time.perf_counter()
                    elif ev.get("event") == "end":
                        state["stage"] = None
                on_event(ev)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        killed = None
        while proc.poll() is None:
            with lock:
                stage, since = state["stage"], state["since"]
            limit = limits.get(stage, timeout) if stage is not None else 0.0
            if stage is not None and time.perf_counter() - since > limit:
                killed = {"stage": stage, "after_seconds": time.perf_counter() - since,
                          "limit_seconds": limit}
                log(f"{stage}: over {limit:.0f} s, stopping child {proc.pid}")
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                break
            time.sleep(0.1)
        rc = proc.wait()
        reader.join(timeout=10)
    with open(err_path, errors="replace") as fh:
        stderr = fh.read()
    return {"returncode": rc, "killed": killed, "stderr_tail": stderr[-2000:]}


def ensure_stores(workdir: str, names: list[str], scratch: str) -> tuple[dict[str, Any], str]:
    """Build the missing stores (in a child); return their READY records and the child's
    ``streamtopic.__file__``."""
    missing = [n for n in names if not os.path.exists(os.path.join(workdir, n, "READY"))]
    hello: dict[str, Any] = {}
    if missing:
        log(f"building stores {missing} in {workdir}")
        run = run_child({"build": missing, "workdir": workdir}, os.path.join(scratch, "build.json"),
                        BUILD_TIMEOUT, lambda ev: hello.update(ev) if ev["event"] == "hello"
                        else log(f"{ev['event']} {ev.get('stage')}"))
        if run["returncode"] != 0:
            raise SystemExit(f"building the stores failed: {run}")
    out = {}
    for n in names:
        with open(os.path.join(workdir, n, "READY")) as fh:
            out[n] = json.load(fh)
        out[n]["reused"] = n not in missing
    return out, hello.get("streamtopic_file", "")


def fit_all(configs: list[dict[str, Any]], workdir: str, scratch: str, outdir: str,
            timeout: float, limits: dict[str, float]) -> tuple[dict[str, Any], str]:
    """Fit every configuration, one child per group on its own fresh copy of the pristine
    store; a child stopped for time is restarted on the group's remaining configurations.
    Returns the results by name and the children's ``streamtopic.__file__``."""
    results: dict[str, Any] = {}
    files: set[str] = set()
    digests: set[str] = set()
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in configs:
        groups.setdefault(c["group"], []).append(c)
    for group, todo in groups.items():
        store_copy = os.path.join(scratch, f"{group}.zarr")
        shutil.copytree(os.path.join(workdir, todo[0]["store"], "store.zarr"), store_copy,
                        symlinks=True)
        attempt = 0
        while todo:
            attempt += 1

            def on_event(ev: dict[str, Any]) -> None:
                if ev["event"] == "hello":
                    files.add(ev["streamtopic_file"])
                    digests.add(ev.get("sources_sha256", ""))
                elif ev["event"] == "begin":
                    log(f"fit {ev['stage']}")
                elif ev["event"] == "end":
                    r = {k: v for k, v in ev.items() if k not in ("event", "stage")}
                    results[ev["stage"]] = r
                    log(f"  {ev['stage']}: {r['status']} in {r['seconds']:.2f} s"
                        + (f" ({r['error_type']}: {r['message']})" if r["status"] != "fitted"
                           else ""))

            spec = {"store": store_copy,
                    "fits": [{"name": c["name"], "params": c["params"],
                              "out": os.path.join(outdir, c["name"] + ".npz")} for c in todo]}
            run = run_child(spec, os.path.join(scratch, f"{group}-{attempt}.json"), timeout,
                            on_event, limits)
            if run["killed"]:
                name = run["killed"]["stage"]
                results[name] = {"status": "dropped",
                                 "message": f"fit over {run['killed']['limit_seconds']:.0f} s: "
                                            f"stopped after "
                                            f"{run['killed']['after_seconds']:.0f} s"}
            elif run["returncode"] != 0:
                for c in todo:
                    if c["name"] not in results:
                        results[c["name"]] = {"status": "error",
                                              "message": f"child exited {run['returncode']}",
                                              "stderr_tail": run["stderr_tail"]}
            todo = [c for c in todo if c["name"] not in results]
        shutil.rmtree(store_copy, ignore_errors=True)
    if len(digests) > 1:
        log(f"the sources changed during the run: {len(digests)} different digests")
    results["__code__"] = {"sources_sha256_seen_by_children": sorted(digests)}
    return results, ";".join(sorted(files))


def code_identity(streamtopic_file: str) -> dict[str, Any]:
    """Which code ran: the package's directory, its git commit and dirty files, and the
    SHA-256 of its sources (*.py, *.c, sorted by path)."""
    pkg = os.path.dirname(streamtopic_file) if streamtopic_file else ""
    out: dict[str, Any] = {"streamtopic_file": streamtopic_file}
    if not pkg or not os.path.isdir(pkg):
        return out

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", "-C", pkg, *args], capture_output=True, text=True,
                                  timeout=30, check=True).stdout.rstrip()
        except (OSError, subprocess.SubprocessError):
            return None

    out["git_commit"] = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--", ".")
    out["git_dirty_files"] = status.splitlines() if status else []
    out["sources_sha256"] = sources_digest(pkg)
    return out


def sources_digest(pkg: str) -> str:
    """SHA-256 of a package's sources (*.py, *.c, by relative path)."""
    digest = hashlib.sha256()
    for root, dirs, names in sorted(os.walk(pkg)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for n in sorted(names):
            if n.endswith((".py", ".c")):
                p = os.path.join(root, n)
                digest.update(os.path.relpath(p, pkg).encode() + b"\0")
                with open(p, "rb") as fh:
                    digest.update(fh.read())
    return digest.hexdigest()


def _max_abs(a: np.ndarray, b: np.ndarray) -> float | None:
    if a.shape != b.shape:
        return None
    if a.size == 0:
        return 0.0
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return float(np.nanmax(d)) if not np.isnan(d).all() else 0.0


def compare_arrays(ref_path: str, new_path: str) -> dict[str, Any]:
    with np.load(ref_path) as f:
        ref = {k: f[k] for k in f.files}
    with np.load(new_path) as f:
        new = {k: f[k] for k in f.files}
    out: dict[str, Any] = {}
    bitwise = {}
    for a in ARRAYS:
        x, y = ref.get(a), new.get(a)
        if x is None or y is None:
            bitwise[a] = False
            continue
        same_shape = x.shape == y.shape and x.dtype == y.dtype
        bitwise[a] = bool(same_shape and x.tobytes() == y.tobytes())
        if not same_shape:
            out.setdefault("shape_mismatch", {})[a] = [f"{x.dtype}{list(x.shape)}",
                                                       f"{y.dtype}{list(y.shape)}"]
    out["max_abs_dA"] = _max_abs(ref["components_"], new["components_"])
    out["anchors_equal"] = bool(np.array_equal(ref["anchors_"], new["anchors_"]))
    out["max_abs_dR"] = _max_abs(ref["topic_cooccurrence_"], new["topic_cooccurrence_"])
    out["max_abs_dp"] = _max_abs(ref["topic_prevalence_"], new["topic_prevalence_"])
    out["bitwise_equal"] = bitwise
    out["identical"] = all(bitwise.values())
    if not out["anchors_equal"] and ref["anchors_"].shape == new["anchors_"].shape:
        out["anchors"] = {"reference": ref["anchors_"].tolist(), "now": new["anchors_"].tolist()}
    return out


def _environment() -> dict[str, Any]:
    import dask

    return {"python": platform.python_version(), "numpy": np.__version__,
            "dask": dask.__version__, "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "thread_env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                      "MKL_NUM_THREADS", "PYTHONPATH")
                           if k in os.environ}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", metavar="DIR", help="Fit every configuration and save the "
                      "models' arrays to DIR/<config>.npz (the reference).")
    mode.add_argument("--compare", metavar="DIR", help="Refit and compare with DIR's models.")
    mode.add_argument("--child", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default="/tmp/identity-stores",
                        help="Where the stores are built and reused (default "
                             "/tmp/identity-stores).")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="Seconds a single fit may take before it is dropped (default 60).")
    parser.add_argument("--only", default=None, metavar="SUBSTRING",
                        help="Only the configurations whose name contains SUBSTRING.")
    parser.add_argument("--retry-dropped", action="store_true",
                        help="With --compare: refit the configurations the reference dropped "
                             "for time too (they are left out by default).")
    parser.add_argument("--no-out-of-core", action="store_true",
                        help="Leave out the kos-ooc group (plain fits with Q out of core).")
    args = parser.parse_args(argv)
    if args.child:
        child_main(args.child)
        return 0

    t_start = time.perf_counter()
    workdir = os.path.abspath(args.workdir)
    if os.path.commonpath([workdir, REPO]) == REPO:
        parser.error(f"--workdir {workdir} is inside the repository")
    os.makedirs(workdir, exist_ok=True)
    configs = configurations(out_of_core=not args.no_out_of_core)
    if args.only:
        configs = [c for c in configs if args.only in c["name"]]
    dropped_in_ref: dict[str, Any] = {}
    limits: dict[str, float] = {}
    if args.compare:
        with open(os.path.join(os.path.abspath(args.compare), "manifest.json")) as fh:
            ref_configs = json.load(fh).get("configs", {})
        # a fit the reference made in t s may take up to max(timeout, 4t) here (shared CPUs)
        limits = {n: max(args.timeout, 4.0 * float(r["seconds"]))
                  for n, r in ref_configs.items() if r.get("status") == "fitted"}
        if not args.retry_dropped:  # nothing to compare them with: not refitted
            dropped_in_ref = {c["name"]: {"params": c["params"], "status": "not run",
                                          "message": "dropped in the reference "
                                                     "(--retry-dropped refits it)"}
                              for c in configs
                              if ref_configs.get(c["name"], {}).get("status") == "dropped"}
            configs = [c for c in configs if c["name"] not in dropped_in_ref]
    scratch = os.path.join(workdir, f"run-{os.getpid()}")
    os.makedirs(scratch)
    try:
        stores, build_file = ensure_stores(workdir, sorted({c["store"] for c in configs}),
                                           scratch)
        if args.save:
            outdir = os.path.abspath(args.save)
            os.makedirs(outdir, exist_ok=True)
        else:
            outdir = os.path.join(scratch, "models")
            os.makedirs(outdir)
        results, st_file = fit_all(configs, workdir, scratch, outdir, args.timeout, limits)
        seen = results.pop("__code__")["sources_sha256_seen_by_children"]
        record: dict[str, Any] = {
            "mode": "save" if args.save else "compare",
            "code": code_identity(st_file.split(";")[0]),
            "sources_sha256_seen_by_children": seen,
            "code_changed_during_run": len(seen) > 1,
            "streamtopic_file": st_file,
            "environment": _environment(),
            "workdir": workdir,
            "stores": stores,
            "stores_built_by": build_file or "(reused)",
            "fit_params_common": {"n_topics": K, "seed": SEED, "scheduler": "threads"},
            "timeout_seconds": args.timeout,
            "configs": {**{c["name"]: {"params": c["params"], **results.get(c["name"], {})}
                           for c in configs}, **dropped_in_ref},
        }
        for status in ("skipped", "dropped", "error"):
            record[status] = {n: r.get("message") for n, r in record["configs"].items()
                              if r.get("status") == status}
        if args.save:
            record["reference_dir"] = outdir
            with open(os.path.join(outdir, "manifest.json.partial"), "w") as fh:
                json.dump(record, fh, indent=2, default=jsonable)
            os.replace(os.path.join(outdir, "manifest.json.partial"),
                       os.path.join(outdir, "manifest.json"))
        else:
            record = compare(record, os.path.abspath(args.compare), outdir)
        record["total_seconds"] = time.perf_counter() - t_start
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(record, indent=2, default=jsonable))
    return 0


def compare(record: dict[str, Any], refdir: str, outdir: str) -> dict[str, Any]:
    """Add the comparison with the reference in ``refdir`` to ``record``."""
    with open(os.path.join(refdir, "manifest.json")) as fh:
        ref = json.load(fh)
    record["reference"] = {"dir": refdir, "code": ref.get("code"),
                           "streamtopic_file": ref.get("streamtopic_file")}
    stores_same = {}
    for name, info in record["stores"].items():
        r = ref.get("stores", {}).get(name, {}).get("digest")
        stores_same[name] = (None if r is None else
                             {k: info["digest"].get(k) == r.get(k)
                              for k in ("Q_sha256", "vocab_sha256")})
    record["stores_equal_to_reference"] = stores_same
    summary, not_compared = {}, []
    for name, now in record["configs"].items():
        was = ref.get("configs", {}).get(name)
        row: dict[str, Any] = {"status": now.get("status"),
                               "reference_status": None if was is None else was.get("status"),
                               "fit_seconds": now.get("seconds"),
                               "reference_fit_seconds": None if was is None else was.get("seconds")}
        if was is None:
            row["note"] = "not in the reference"
        elif was.get("status") == "fitted" and now.get("status") == "fitted":
            row.update(compare_arrays(os.path.join(refdir, name + ".npz"),
                                      os.path.join(outdir, name + ".npz")))
        elif was.get("status") == "skipped" and now.get("status") == "skipped":
            row["identical"] = True  # refused by both
            row["messages"] = {"reference": was.get("message"), "now": now.get("message")}
        elif was.get("status") == "fitted":  # refused, failed or dropped now
            row["identical"] = False
            row["messages"] = {"reference": was.get("message"), "now": now.get("message")}
        else:  # no model in the reference (dropped or failed there): nothing to compare
            row["note"] = f"{was.get('status')} in the reference: not compared"
            row["messages"] = {"reference": was.get("message"), "now": now.get("message")}
        if "identical" not in row:
            not_compared.append(name)
        summary[name] = row
    missing = [n for n, r in ref.get("configs", {}).items() if n not in summary
               and r.get("status") == "fitted"]
    record["comparison"] = summary
    record["not_in_this_run"] = missing
    record["not_compared"] = not_compared
    record["max_abs_dA_overall"] = max((r["max_abs_dA"] for r in summary.values()
                                        if r.get("max_abs_dA") is not None), default=None)
    judged = [r["identical"] for r in summary.values() if "identical" in r]
    record["identical"] = bool(judged) and all(judged)
    del record["configs"]  # the comparison holds what matters; diagnostics are in the log
    return record


if __name__ == "__main__":
    sys.exit(main())
