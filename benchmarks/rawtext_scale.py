"""Benchmark: raw text at scale (issue 24), figures in ``results/rawtext_scale.json``.

Three parts, each ``streamtopic`` run a fresh process timed from its start to its exit (its
whole process tree polled for the peak of its summed RSS, ``benchmarks/fit.py``):

* **longdocs**: the long-document corpus (``rawtext_corpora.py longdocs``: 20 Newsgroups
  training messages joined by newsgroup and thread into documents of 2,000 to 50,000 words,
  repeated in shuffled order to 60M words, one ``.jsonl.gz``), K = 50, defaults:
  ``benchmarks/real_corpora.py --corpora longdocs`` runs streamtopic's whole ``fit`` from the
  raw file and gensim ``LdaMulticore`` (5 passes, workers = cores, ``eval_every=None``, the
  documents as lists of (id, count) tuples) on the same tokens (the store's), in turns, and
  scores both with one scorer (held-out log-likelihood per token on the test documents, by
  document completion). Medians of ``--repeats`` rounds.
* **scale**: 20 Newsgroups (train and test messages, one file each) repeated in tar files
  (``rawtext_corpora.py repeated``) to 100M and to 300M words; ``streamtopic -v fit`` of each
  from the raw files, K = 50, defaults, in turns: the whole run, each stage's seconds and
  share (the ingest's stages from its log, the fit's from the model), the tokenising rate
  (in-vocabulary tokens per second per core of the ingest's reading stage), refinement
  against ingest, and the peak memory at both sizes.
* **pairs**: ``benchmarks/pairs.py`` (pair counting against the machine's GEMM rate).

Usage::

    python benchmarks/rawtext_scale.py [--parts longdocs,scale,pairs] [--repeats 3]
        [--workdir /tmp/streamtopic-rawtext] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

import fit as fitbench
import rawtext_corpora
from _common import machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "rawtext_scale.json")
K = 50
SIZES = {"100M": 100_000_000, "300M": 300_000_000}
#: a ``streamtopic -v`` log line of a stage: "<time> streamtopic <label>: <seconds> s..."
STAGE = re.compile(r"^\S+ \S+ streamtopic (?P<label>[^:]+): (?P<seconds>[0-9.]+) s", re.M)
READING = ("reading the corpus", "vocabulary pass")


def log(msg: str) -> None:
    print(f"[rawtext-scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _median(xs: list[float]) -> float | None:
    return float(statistics.median(xs)) if xs else None


# ============================================================================ longdocs


def part_longdocs(work: str, repeats: int) -> dict[str, Any]:
    """streamtopic against gensim on the long documents, through real_corpora.py."""
    out = os.path.join(work, "longdocs.json")
    cmd = [sys.executable, os.path.join(HERE, "real_corpora.py"), "--corpora", "longdocs",
           "--topics", str(K), "--repeats", str(repeats), "--methods",
           "streamtopic,gensim-5pass", "--workdir", os.path.join(work, "real"), "--out", out]
    log(" ".join(cmd[1:]))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as fh:
        res = json.load(fh)
    entry = res["corpora"]["longdocs"]
    summary = entry["summary"][str(K)]
    st, gs = summary["streamtopic"], summary["gensim-5pass"]
    return {
        "command": "python benchmarks/real_corpora.py " + " ".join(cmd[2:-4]),
        "corpus": entry.get("corpus"), "tokens": entry.get("tokens"),
        "summary": summary, "verdicts": entry.get("verdicts", {}).get(str(K)),
        "acceptance": {
            "streamtopic_whole_run_seconds": st.get("seconds_median"),
            "gensim_5pass_training_seconds": gs.get("seconds_median"),
            "time_ok": _le(st.get("seconds_median"), gs.get("seconds_median")),
            "streamtopic_heldout": st.get("heldout_per_token"),
            "gensim_heldout": gs.get("heldout_per_token"),
            "heldout_ok": _le(gs.get("heldout_per_token"),
                              st.get("heldout_per_token")),
        },
        "runs": entry["runs"],
    }


def _le(a: float | None, b: float | None) -> bool | None:
    return None if a is None or b is None else a <= b


# ============================================================================ scale


def corpus_dirs(work: str) -> dict[str, str]:
    """The repeated corpus (300M words) and a directory of links to its first copies that
    make at least 100M words."""
    full = os.path.join(work, "repeated")
    stats = rawtext_corpora.build_repeated(full, SIZES["300M"], 0)
    per_copy = stats["words"] // stats["copies"]
    small = os.path.join(work, "repeated-100M")
    os.makedirs(small, exist_ok=True)
    for c in range(-(-SIZES["100M"] // per_copy)):
        name = f"copy-{c:04d}.tar"
        if not os.path.lexists(os.path.join(small, name)):
            os.symlink(os.path.join(full, name), os.path.join(small, name))
    return {"100M": small, "300M": full}


def stage_seconds(stderr: str) -> dict[str, float]:
    """Seconds of each stage a ``streamtopic -v`` run logged (repeated labels summed)."""
    out: dict[str, float] = {}
    for m in STAGE.finditer(stderr):
        label = re.sub(r" \d+$", "", m.group("label"))  # "refine pass 3" -> "refine pass"
        out[label] = out.get(label, 0.0) + float(m.group("seconds"))
    return out


def one_scale_run(size: str, folder: str, work: str) -> dict[str, Any]:
    """``streamtopic -v fit "FOLDER/copy-*.tar" -k 50`` into a fresh store."""
    from streamtopic import CooccurrenceStore
    from streamtopic.model import AnchorTopicModel

    tag = f"{size}-{time.time_ns()}"
    store, model = os.path.join(work, f"{tag}.store"), os.path.join(work, f"{tag}.model")
    cmd = [*fitbench.streamtopic_cmd(), "-v", "fit", os.path.join(folder, "copy-*.tar"),
           "-k", str(K), "--seed", "0", "-o", model, "--store", store]
    log(f"{size}: streamtopic {' '.join(cmd[len(fitbench.streamtopic_cmd()):])}")
    run = fitbench.run_child(cmd, default_timeout=7200.0, cwd=work)
    rec: dict[str, Any] = {"wall_seconds": run["wall_seconds"],
                           "peak_rss_bytes": run["peak_rss_bytes"],
                           "contention": run["contention"]}
    err = fitbench.failure(run)
    if err:
        rec["error"] = err
        return rec
    stages = stage_seconds(run["stderr"])
    m = AnchorTopicModel.load(model)
    fit_stages = {k: float(v) for k, v in m.diagnostics_.get("seconds", {}).items()}
    with CooccurrenceStore.open(store) as s:
        cache = s.info()["token_cache"]
        rec["store"] = {"V": s.V, "n_docs": s.n_docs, "input_tokens": s.n_tokens,
                        "in_vocabulary_tokens": cache["n_tokens"], "nnz_docs": cache["nnz"],
                        "bytes_of_q": s.q_bytes()}
    reading = sum(stages.get(k, 0.0) for k in READING)
    # the ingest: the whole run but the fit's stages (the model's own record of them); the
    # "persist"/"compute" lines of -v belong to the fit's passes
    ingest = run["wall_seconds"] - sum(fit_stages.values())
    stages = {k: v for k, v in stages.items() if k not in ("persist", "compute")}
    cores = os.cpu_count() or 1
    rec.update(
        ingest_stage_seconds={k: v for k, v in stages.items() if not k.startswith("refine")},
        tokenise_note="reading and tokenising, inside the ingest's reading and vocabulary "
                      "stages (decompression, JSON/tar parsing and term counting included)",
        fit_stage_seconds=fit_stages,
        tokenise={"stage_seconds": reading, "cores": cores,
                  "in_vocabulary_tokens_per_second_per_core":
                      cache["n_tokens"] / max(reading * cores, 1e-9)},
        refine_seconds=fit_stages.get("refine"), ingest_seconds=ingest,
        shares={k: v / run["wall_seconds"] for k, v in {**stages, **fit_stages}.items()},
    )
    for p in (store, model):
        shutil.rmtree(p, ignore_errors=True)
    return rec


def part_scale(work: str, repeats: int) -> dict[str, Any]:
    """Both sizes in turns, ``repeats`` rounds; medians and the acceptance."""
    dirs = corpus_dirs(work)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SIZES}
    for _ in range(repeats):
        for size, folder in dirs.items():
            fitbench.wait_for_quiet()
            runs[size].append(one_scale_run(size, folder, work))
    return summarise(runs)


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians per size and the acceptance, from the runs (``python rawtext_scale.py
    --resummarise`` redoes it on the stored runs)."""
    med: dict[str, dict[str, Any]] = {}
    for size, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        med[size] = {
            "wall_seconds": _median([r["wall_seconds"] for r in ok]),
            "ingest_seconds": _median([r["ingest_seconds"] for r in ok]),
            "refine_seconds": _median([r["refine_seconds"] or 0.0 for r in ok]),
            "peak_rss_bytes": _median([r["peak_rss_bytes"] for r in ok]),
            "tokens_per_second_per_core": _median(
                [r["tokenise"]["in_vocabulary_tokens_per_second_per_core"] for r in ok]),
        }
    big, small = med["300M"], med["100M"]
    return {
        "command": 'streamtopic -v fit "DIR/copy-*.tar" -k 50 --seed 0 -o M --store S',
        "runs": runs, "medians": med,
        "acceptance": {
            "tokenise_3M_per_core": all((m["tokens_per_second_per_core"] or 0) >= 3e6
                                        for m in med.values()),
            "refine_le_ingest": {s: (m["refine_seconds"] or 0) <= (m["ingest_seconds"] or 0)
                                 for s, m in med.items()},
            "peak_rss_ratio_300M_to_100M": (big["peak_rss_bytes"] or 0)
            / max(small["peak_rss_bytes"] or 1, 1),
        },
    }


# ============================================================================ main


def part_pairs(work: str, repeats: int) -> dict[str, Any]:
    """``benchmarks/pairs.py`` on the long documents, its JSON taken in."""
    out = os.path.join(work, "pairs.json")
    cmd = [sys.executable, os.path.join(HERE, "pairs.py"), "--repeats", str(repeats),
           "--workdir", os.path.join(work, "pairs"), "--out", out]
    log(" ".join(cmd[1:]))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as fh:
        return dict(json.load(fh))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="longdocs,scale,pairs")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/streamtopic-rawtext")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--resummarise", action="store_true",
                    help="recompute the scale part's medians from the runs in --out")
    a = ap.parse_args(argv)
    if a.resummarise:
        with open(a.out) as fh:
            result = json.load(fh)
        seconds = result["scale"].get("seconds")
        result["scale"] = {**summarise(result["scale"]["runs"]), "seconds": seconds}
        write_result(result, a.out)
        return result
    work = os.path.abspath(a.workdir)
    os.makedirs(work, exist_ok=True)
    result: dict[str, Any] = {"benchmark": "rawtext_scale", "machine": machine_info(),
                              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "argv": sys.argv}
    if os.path.exists(a.out):  # parts run separately keep each other's figures
        with open(a.out) as fh:
            result = {**json.load(fh), **{k: result[k] for k in ("machine", "argv")}}
    parts = {"longdocs": part_longdocs, "scale": part_scale, "pairs": part_pairs}
    for name in a.parts.split(","):
        t0 = time.perf_counter()
        result[name] = parts[name](work, a.repeats)
        result[name]["seconds"] = time.perf_counter() - t0
        write_result(result, a.out)
    print(json.dumps({k: v.get("acceptance") for k, v in result.items()
                      if isinstance(v, dict) and "acceptance" in v}, indent=2))
    return result


if __name__ == "__main__":
    main()
