"""Benchmark of ``streamtopic update`` (issue 26) on 20 Newsgroups: cost, identity, quality.

The bydate split is by date: the training set is fitted first (K = 20, defaults), then the
test set's first 80% (in archive order) arrives as new data, and its last 20% is held out.
Each step runs as its own process (``python -m streamtopic ...``), timed from outside:

* ``fit``: ``streamtopic fit train.jsonl -k 20 -o m.zarr`` (the store kept beside it);
* ``ingest-alone``: ``streamtopic ingest new.jsonl`` into a copy of the training store (the
  time to ingest the new data alone);
* ``update``: ``streamtopic update m.zarr new.jsonl`` (on a copy of the model and store);
* ``refit``: ``streamtopic fit STORE -k 20`` on the updated store (a full refit on all the
  data, the reference for quality).

* ``small batch``: 1% of the training store's documents (the new data's first 113) ingested
  into a copy of the training store, against the same batch ingested into a fresh store of
  its own (the time its own tokens take to count), both as whole processes, in turns.

Reported: the times (medians of ``--repeats`` runs, in turns), the update's time against
``2 × ingest-alone + spectral stages`` (the issue's bound: the spectral stages' seconds are
read from the updated model's record), the share of topics that keep their index (each
previous topic's Hungarian match among the updated ones is itself), the matched topics' L1
change, and the held-out log-likelihood per token (document completion, one scorer) of the
updated model and of the full refit.

Usage::

    python benchmarks/update.py [--workdir DIR] [--repeats 3] > benchmarks/results/update.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from typing import Any

import numpy as np

K = 20
SPECTRAL = ("read_core", "rectify", "anchors", "recovery", "sketch")


def _shared() -> str:
    env = os.environ.get("STREAMTOPIC_SHARED_DATA")
    here = os.path.dirname(os.path.abspath(__file__))
    return env or os.path.join(here, "..", "..", "shared", "data")


def write_splits(workdir: str) -> dict[str, str]:
    """train.jsonl, new.jsonl (the test set's first 80%) and heldout.jsonl (its last 20%)."""
    paths = {n: os.path.join(workdir, f"{n}.jsonl") for n in ("train", "new", "heldout")}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    tar = os.path.join(_shared(), "20newsgroups", "20news-bydate.tar.gz")
    train, test = [], []
    with tarfile.open(tar) as tf:
        for m in tf:
            if m.isfile():
                f = tf.extractfile(m)
                assert f is not None
                text = f.read().decode("latin-1")
                (train if "20news-bydate-train" in m.name else test).append(text)
    cut = int(0.8 * len(test))
    for name, docs in (("train", train), ("new", test[:cut]), ("heldout", test[cut:])):
        with open(paths[name], "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"text": d}) + "\n" for d in docs)
    return paths


def small_batch(w: str, paths: dict[str, str], repeats: int) -> dict[str, Any]:
    """The small-batch acceptance: an incremental ingest of 1% of the store's documents
    against the same documents ingested alone into a fresh store (medians, in turns)."""
    import streamtopic as st

    with st.CooccurrenceStore.open(os.path.join(w, "m.zarr.store")) as s:
        n = max(1, round(0.01 * s.n_docs))
    batch = os.path.join(w, "batch.jsonl")
    with open(paths["new"]) as src, open(batch, "w") as out:
        out.writelines(line for _, line in zip(range(n), src, strict=False))
    rounds = []
    for _ in range(repeats):
        fresh_store = os.path.join(w, "batch-alone.zarr")
        shutil.rmtree(fresh_store, ignore_errors=True)
        alone = run(["ingest", batch, "-s", fresh_store, "-q"])
        store = fresh(os.path.join(w, "m.zarr.store"), os.path.join(w, "inc.zarr"))
        incremental = run(["ingest", batch, "-s", store, "-q"])
        rounds.append({"alone": alone, "incremental": incremental})
    with st.CooccurrenceStore.open(os.path.join(w, "inc.zarr")) as s:
        deltas = s.block_deltas
        stored = int((s.block_versions > 0).sum())
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    return {
        "documents": n, "rounds": rounds, "median_seconds": med,
        "extra_seconds": med["incremental"] - med["alone"],
        "within_3s": med["incremental"] - med["alone"] <= 3.0,
        "blocks_stored": stored,
        "blocks_written_as_deltas": sum(1 for i, j in deltas if i <= j),
    }


def run(args: list[str]) -> float:
    """Seconds of ``python -m streamtopic ARGS`` as a whole process."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "streamtopic", *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t0


def fresh(src: str, dst: str) -> str:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


def one_round(w: str, paths: dict[str, str]) -> dict[str, Any]:
    """One run of each step, in turns, on fresh copies."""
    base_store = os.path.join(w, "m.zarr.store")
    out: dict[str, Any] = {}
    store = fresh(base_store, os.path.join(w, "alone.zarr"))
    out["ingest_alone"] = run(["ingest", paths["new"], "-s", store, "-q"])
    fresh(base_store, os.path.join(w, "u.zarr.store"))
    model = fresh(os.path.join(w, "m.zarr"), os.path.join(w, "u.zarr"))
    _repoint(model, os.path.join(w, "u.zarr.store"))
    out["update"] = run(["update", model, paths["new"], "-q"])
    refit = os.path.join(w, "refit.zarr")
    shutil.rmtree(refit, ignore_errors=True)
    out["refit"] = run(["fit", os.path.join(w, "u.zarr.store"), "-k", str(K), "--seed", "0",
                        "-o", refit, "-q"])
    return out


def _repoint(model_path: str, store: str) -> None:
    """Make the copied model name the copied store (its record holds the store's path)."""
    import streamtopic as st

    m = st.AnchorTopicModel.load(model_path)
    m.diagnostics_["store"]["path"] = os.path.abspath(store)
    m.save(model_path)


def quality(w: str, paths: dict[str, str]) -> dict[str, Any]:
    """Identity, L1 change and held-out likelihood of the last round's models."""
    import streamtopic as st
    from streamtopic.drift import match_topics
    from streamtopic.evaluation import evaluate

    before = st.AnchorTopicModel.load(os.path.join(w, "m.zarr"))
    after = st.AnchorTopicModel.load(os.path.join(w, "u.zarr"))
    refit = st.AnchorTopicModel.load(os.path.join(w, "refit.zarr"))
    order = match_topics(before.components_, after.components_)
    l1 = np.abs(before.components_ - after.components_).sum(axis=1)
    ll = {name: evaluate(m, corpus=None, heldout=paths["heldout"])["heldout"]
          for name, m in (("before", before), ("update", after), ("refit", refit))}
    # the refit's own spread: its anchors, and so its likelihood, move with the seed
    seeds = {}
    for seed in (1, 2):
        out = os.path.join(w, f"refit-seed{seed}.zarr")
        shutil.rmtree(out, ignore_errors=True)
        run(["fit", os.path.join(w, "u.zarr.store"), "-k", str(K), "--seed", str(seed),
             "-o", out, "-q"])
        seeds[seed] = evaluate(st.AnchorTopicModel.load(out), corpus=None,
                               heldout=paths["heldout"])["heldout"]["per_token"]
    seeds[0] = ll["refit"]["per_token"]
    seconds = after.diagnostics_["seconds"]
    return {
        "kept_index_share": float(np.mean(order == np.arange(K))),
        "l1_change": {"median": float(np.median(l1)), "max": float(l1.max())},
        "heldout": ll,
        "refit_heldout_by_seed": {str(k): seeds[k] for k in sorted(seeds)},
        "spectral_seconds": float(sum(seconds.get(k, 0.0) for k in SPECTRAL)),
        "update_fit_seconds": seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="/tmp/streamtopic-update-bench")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    paths = write_splits(args.workdir)
    w = args.workdir
    if not os.path.isdir(os.path.join(w, "m.zarr")):
        t_fit = run(["fit", paths["train"], "-k", str(K), "--seed", "0", "-o",
                     os.path.join(w, "m.zarr"), "-q"])
    else:
        t_fit = None
    batch = small_batch(w, paths, max(5, args.repeats))
    rounds = [one_round(w, paths) for _ in range(args.repeats)]
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    q = quality(w, paths)
    bound = 2 * med["ingest_alone"] + q["spectral_seconds"]
    ll = q["heldout"]
    print(json.dumps({
        "corpus": "20 Newsgroups bydate: train fitted; test's first 80% as the update, "
                  "its last 20% held out",
        "K": K, "fit_seconds": t_fit, "rounds": rounds, "median_seconds": med,
        "bound_seconds": bound, "update_within_bound": med["update"] <= bound,
        **q,
        "heldout_gap_to_refit": (ll["update"]["per_token"]
                                 - ll["refit"]["per_token"]),
        "heldout_gap_to_best_refit_seed": (ll["update"]["per_token"]
                                           - max(q["refit_heldout_by_seed"].values())),
        "small_batch": batch,
    }, indent=2, default=float))


if __name__ == "__main__":
    main()
