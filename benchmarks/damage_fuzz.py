"""Damage fuzzing of a store and of a model (issue 30): random flipped bytes, truncated and
deleted files, each followed by the commands that read them.

A small store (two text ingests, 64-word blocks: dense, sparse and mirrored blocks, a token
cache, unkept words; format 5) and a plain model of it are made once. Each trial copies the
pristine store (or model), damages one file chosen at random among all of its files
(``flip``: one random bit of one random byte; ``truncate``: a random prefix kept;
``delete``), then runs, in a forked child process (so that a crash is a signal, not the end
of the run):

* store: ``streamtopic verify``, ``streamtopic info`` and ``streamtopic fit -k 4 --method
  plain`` (sync scheduler);
* model: ``streamtopic topics`` and the model loaded through the API.

Each command's outcome is one of: ``refused`` (exit status 1, no traceback), ``correct``
(exit status 0 and the same result as on the pristine copy: the store's Q, vocabulary,
counts and manifest read back equal after a successful ``verify``; ``info``'s summary equal
but for sizes on disk; the fitted model's components bit-identical; ``topics``' output and the
loaded arrays equal), ``wrong`` (exit status 0, another result), ``traceback``, ``crash``
(killed by a signal) or ``hang`` (no end within the timeout). The acceptance: no wrong
result, traceback, crash or hang.

Usage::

    python benchmarks/damage_fuzz.py [--trials 200] [--seed 0] [--out PATH]

Prints the summary as JSON and writes it to ``benchmarks/results/damage_fuzz.json``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "damage_fuzz.json")
N_TERMS = 260
K = 4
TIMEOUT = 120.0
DAMAGES = ("flip", "truncate", "delete")
BAD = ("wrong", "traceback", "crash", "hang")


def write_docs(path: str, n_docs: int, seed: int, length: int = 40) -> str:
    """Text documents (one a line) from 5 Dirichlet topics over ``N_TERMS`` letter-only
    words (:func:`streamtopic.synth.write_corpus`)."""
    from streamtopic import synth

    topics = np.random.default_rng(12345).dirichlet(np.full(N_TERMS, 0.05), size=5)
    synth.write_corpus(path, topics.T, n_docs, format="text", alpha=0.3, doc_length=length,
                       seed=seed)
    return path


def make_pristine(root: str) -> dict[str, str]:
    """The store (two versions) and the model every trial starts from."""
    import dask

    import streamtopic as st

    store, model = os.path.join(root, "s.zarr"), os.path.join(root, "m.zarr")
    with dask.config.set(scheduler="sync"):
        st.ingest(write_docs(os.path.join(root, "a.txt"), 400, seed=1), store, min_df=2,
                  max_df=1.0, chunk_size=64, progress=False)
        st.ingest(write_docs(os.path.join(root, "b.txt"), 100, seed=2), store, progress=False)
    run_cli(["fit", store, "-k", str(K), "--method", "plain", "-q", "--local", "sync",
             "-o", model])
    return {"store": store, "model": model}


def run_cli(args: list[str]) -> tuple[int, str]:
    """``streamtopic ARGS`` in this process: exit status and output (an exception that
    escapes the command line's handling is reported as a traceback, status 99)."""
    from streamtopic.cli import main

    buf = io.StringIO()
    code: Any = 0
    with redirect_stdout(buf), redirect_stderr(buf):
        try:
            main.main(args=args, prog_name="streamtopic", standalone_mode=True)
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:  # noqa: BLE001 - what the fuzzing looks for
            import traceback

            buf.write("Traceback (escaped the command line)\n" + "".join(
                traceback.format_exception(exc)))
            code = 99
    return (0 if code is None else int(code) if isinstance(code, int) else 1), buf.getvalue()


def store_state(path: str) -> dict[str, Any]:
    """What a store reads back as (for comparison with the pristine store's)."""
    import streamtopic as st

    with st.CooccurrenceStore.open(path) as s:
        return {"Q": s.read_dense(), "vocab": s.vocab, "counts": s.word_counts,
                "df": s.doc_freq, "sources": s.sources, "n": (s.n_docs, s.n_tokens, s.V),
                "unkept": s.unkept_words}


def same_state(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k]
               for k in a)


def model_state(path: str) -> dict[str, Any]:
    from streamtopic.model import AnchorTopicModel
    from streamtopic.persistence import ARRAYS

    m = AnchorTopicModel.load(path)
    out: dict[str, Any] = {name: np.asarray(getattr(m, attr)) for name, attr in ARRAYS.items()}
    out["vocab"] = list(m.vocab_)
    out["params"] = m.get_params()
    return out


def info_lines(text: str) -> list[str]:
    """``info``'s output without what damage may change and not matter: sizes on disk."""
    return [ln for ln in text.splitlines()
            if not ln.startswith(("size on disk", "token cache", "rectified cache"))]


def store_commands(path: str, work: str) -> list[tuple[str, list[str]]]:
    return [("verify", ["verify", path]), ("info", ["info", path]),
            ("fit", ["fit", path, "-k", str(K), "--method", "plain", "-q", "--local", "sync",
                     "-o", os.path.join(work, "fitted.zarr")])]


def judge(kind: str, name: str, code: int, out: str, path: str, work: str,
          ref: dict[str, Any]) -> str:
    """The outcome of one command (see the module docstring)."""
    if "Traceback" in out or code not in (0, 1):
        return "traceback"
    if code == 1:
        return "refused"
    try:
        if kind == "model":
            ok = (out == ref["topics"]) if name == "topics" else same_state(model_state(path),
                                                                            ref["state"])
        elif name == "verify":
            ok = same_state(store_state(path), ref["state"])
        elif name == "info":
            ok = info_lines(out) == ref["info"]
        else:
            fitted = model_state(os.path.join(work, "fitted.zarr"))
            ok = np.array_equal(fitted["components"], ref["components"])
    except Exception:  # it succeeded, and what it vouched for does not read back
        return "wrong"
    return "correct" if ok else "wrong"


def run_trial(kind: str, path: str, work: str, ref: dict[str, Any]) -> dict[str, str]:
    """The commands of one trial on the damaged copy ``path`` (in this process: a child)."""
    outcomes: dict[str, str] = {}
    if kind == "store":
        for name, args in store_commands(path, work):
            code, out = run_cli(args)
            outcomes[name] = judge(kind, name, code, out.replace(path, "STORE"), path, work,
                                   ref)
    else:
        code, out = run_cli(["topics", path])
        outcomes["topics"] = judge(kind, "topics", code, out, path, work, ref)
        try:
            model_state(path)
            outcomes["load"] = judge(kind, "load", 0, "", path, work, ref)
        except Exception as exc:
            from streamtopic.model import ModelError

            outcomes["load"] = "refused" if isinstance(exc, ModelError) else "traceback"
    return outcomes


def damage(root: str, rng: np.random.Generator) -> dict[str, Any]:
    """Damage one file below ``root``, chosen at random; what was done."""
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
    target = files[int(rng.integers(len(files)))]
    how = DAMAGES[int(rng.integers(len(DAMAGES)))]
    size = os.path.getsize(target)
    record: dict[str, Any] = {"file": os.path.relpath(target, root), "damage": how,
                              "size": size}
    if how == "delete" or size == 0:
        os.remove(target)
        record["damage"] = "delete"
    elif how == "truncate":
        keep = int(rng.integers(size))
        os.truncate(target, keep)
        record["kept"] = keep
    else:
        at = int(rng.integers(size))
        with open(target, "r+b") as fh:
            fh.seek(at)
            byte = fh.read(1)[0]
            fh.seek(at)
            fh.write(bytes([byte ^ (1 << int(rng.integers(8)))]))
        record["at"] = at
    return record


def forked(kind: str, path: str, work: str, ref: dict[str, Any]) -> dict[str, str]:
    """:func:`run_trial` in a forked child; a signal or a timeout is a crash or a hang."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_fd)
        code = 0
        try:
            outcome = run_trial(kind, path, work, ref)
            os.write(write_fd, json.dumps(outcome).encode())
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    os.close(write_fd)
    # the timeout counts polls, not the clock: a machine that stops this process group for a
    # while (another job's timing) must not turn a paused trial into a hang
    status = None
    for _ in range(int(TIMEOUT / 0.02)):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_fd)
        return {"trial": "hang"}
    with os.fdopen(read_fd, "rb") as fh:
        data = fh.read()
    if os.WIFSIGNALED(status):
        return {"trial": f"crash (signal {os.WTERMSIG(status)})"}
    if os.WEXITSTATUS(status) != 0 or not data:
        return {"trial": "traceback"}
    return json.loads(data)


def references(pristine: dict[str, str], work: str) -> dict[str, dict[str, Any]]:
    """What each command gives on the undamaged store and model."""
    store = pristine["store"]
    code, info = run_cli(["info", store])
    assert code == 0, info
    code, out = run_cli(store_commands(store, work)[2][1])
    assert code == 0, out
    fitted = model_state(os.path.join(work, "fitted.zarr"))
    shutil.rmtree(os.path.join(work, "fitted.zarr"))
    code, topics = run_cli(["topics", pristine["model"]])
    assert code == 0, topics
    return {"store": {"state": store_state(store), "components": fitted["components"],
                      "info": info_lines(info.replace(store, "STORE"))},
            "model": {"state": model_state(pristine["model"]), "topics": topics}}


def fuzz(trials: int, seed: int, workdir: str) -> dict[str, Any]:
    """``trials`` trials on the store and as many on the model; the records and counts."""
    pristine = make_pristine(workdir)
    refs = references(pristine, workdir)
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for kind in ("store", "model"):
        records = []
        t0 = time.perf_counter()
        for t in range(trials):
            trial_dir = os.path.join(workdir, f"{kind}-{t}")
            os.makedirs(trial_dir)
            path = os.path.join(trial_dir, os.path.basename(pristine[kind]))
            shutil.copytree(pristine[kind], path)
            record = damage(path, rng)
            record["outcomes"] = forked(kind, path, trial_dir, refs[kind])
            records.append(record)
            shutil.rmtree(trial_dir, ignore_errors=True)
        counts = Counter(o for r in records for o in r["outcomes"].values())
        out[kind] = {"trials": trials, "seconds": round(time.perf_counter() - t0, 1),
                     "outcomes": dict(counts),
                     "bad": [r for r in records
                             if any(o.split(" ")[0] in BAD for o in r["outcomes"].values())],
                     "by_damage": dict(Counter(r["damage"] for r in records))}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    sys.path.insert(0, HERE)
    from _common import machine_info, write_result

    with tempfile.TemporaryDirectory(prefix="st-fuzz-") as workdir:
        result = fuzz(args.trials, args.seed, workdir)
    result = {"benchmark": "damage_fuzz", "trials_each": args.trials, "seed": args.seed,
              "command": " ".join(["python", "benchmarks/damage_fuzz.py", *sys.argv[1:]]),
              **result, "machine": machine_info()}
    text = write_result(result, args.out)
    print(text)
    return 0 if not any(result[k]["bad"] for k in ("store", "model")) else 1


if __name__ == "__main__":
    sys.exit(main())
