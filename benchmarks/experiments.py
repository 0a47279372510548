"""Experiments: the shape of Arora et al. 2013's results, rerun at this machine's scale.

Each experiment writes JSON (and a PNG plot when matplotlib is installed) into
``benchmarks/results/``:

* ``size``        L1 against corpus size (10k, 30k, 100k, 300k documents and infinite data)
                  for the original Recover, RecoverL2 and RecoverKL, with topics fit on
                  20 Newsgroups (K = 50, V = 5,000) as the semi-synthetic model (their Fig. 2),
                  and the time of each stage against corpus size (their Fig. 1);
* ``anchors``     the same with planted anchors in random Dirichlet topics (V = 5,000, K = 50),
                  where the error should go to about zero with infinite data (their Fig. 3);
* ``correlated``  correlated topics (logistic-normal θ, within-group correlation ρ = 0, 0.05
                  and 0.1) with the 20 Newsgroups topics (their Fig. 4), for the original
                  Recover and RecoverL2 (RecoverKL at K = 50 costs minutes per fit here). σ
                  of the logistic normal matches the Dirichlet(0.1) of the other experiments
                  (``LogisticNormal.matching_dirichlet``: the same E[θθᵀ] at ρ = 0), so
                  that ρ is the only change; see benchmarks/README.md.

Usage (one command each)::

    python benchmarks/experiments.py size
    python benchmarks/experiments.py anchors
    python benchmarks/experiments.py correlated
    python benchmarks/experiments.py all

Documents have 100 tokens, θ ~ Dirichlet(0.1) unless correlated; each corpus is generated
with :mod:`streamtopic.synth`, ingested with the store's fixed vocabulary and fitted with
seed 0 on Dask's threaded scheduler. Infinite data is the exact population
Q = A E[θθᵀ] Aᵀ (Monte Carlo E[θθᵀ] for the logistic normal).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from typing import Any

import numpy as np

from _common import machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
SHARED = os.environ.get("STREAMTOPIC_SHARED_DATA",
                        os.path.join(os.path.dirname(ROOT), "shared", "data"))
SIZES = (10_000, 30_000, 100_000, 300_000)
DOC_LENGTH = 100
ALPHA = 0.1
SEED = 0


def newsgroups_topics(workdir: str) -> tuple[np.ndarray, list[str]]:
    """Topics fit on 20 Newsgroups (K = 50, V = 5,000, English stop words removed): the
    semi-synthetic model, as the paper fits its models on real corpora."""
    from streamtopic.model import AnchorTopicModel

    model_path = os.path.join(workdir, "ng50.zarr")
    if not os.path.exists(model_path):
        subprocess.run(
            [sys.executable, "-m", "streamtopic", "fit",
             os.path.join(SHARED, "20newsgroups", "20news-bydate.tar.gz"),
             "-k", "50", "--method", "rectified", "-o", model_path,
             "--store", os.path.join(workdir, "ng.zarr"),
             "--keep-n", "5000", "--stop-words", "english", "-q"],
            check=True, stdout=subprocess.DEVNULL,
        )
    m = AnchorTopicModel.load(model_path)
    A = m.components_.T.copy()
    return A / A.sum(axis=0, keepdims=True), list(m.vocab_)


def run_sizes(
    name: str, A: np.ndarray, vocab: list[str], methods: list[str], sizes: tuple[int, ...],
    workdir: str, theta: Any = None, anchors: np.ndarray | None = None,
) -> dict[str, Any]:
    """Generate, ingest and fit one corpus per size, plus infinite data; L1 and stage times."""
    import dask

    import streamtopic as st
    from streamtopic import synth
    from streamtopic.metrics import matched_l1
    from streamtopic.model import AnchorTopicModel

    K = A.shape[1]
    vocab_file = os.path.join(workdir, f"{name}-vocab.txt")
    with open(vocab_file, "w") as fh:
        fh.write("\n".join(vocab) + "\n")
    rows: list[dict[str, Any]] = []
    extra = {} if theta is None else {"theta": theta}
    for M in list(sizes) + ["infinite"]:
        store = os.path.join(workdir, f"{name}-{M}.zarr")
        shutil.rmtree(store, ignore_errors=True)
        row: dict[str, Any] = {"n_docs": M}
        t0 = time.perf_counter()
        with dask.config.set(scheduler="threads"):
            if M == "infinite":
                if theta is None:
                    Q = synth.population_cooccurrence(A, ALPHA)
                    row["second_moment"] = "exact (Dirichlet)"
                else:
                    M2, exact = synth.second_moment(theta, K, seed=SEED)
                    Q = A @ M2 @ A.T
                    row["second_moment"] = "exact" if exact else "Monte Carlo"
                st.CooccurrenceStore.from_array(Q, vocab, store, n_docs=10**9)
                row["seconds_ingest"] = time.perf_counter() - t0
            else:
                corpus = os.path.join(workdir, f"{name}-{M}.h5")
                synth.write_corpus(corpus, A, M, format="hdf5", vocab=vocab, alpha=ALPHA,
                                   doc_length=DOC_LENGTH, seed=SEED + 1, **extra)
                row["seconds_generate"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                st.ingest(corpus, store, vocab=vocab_file, progress=False)
                row["seconds_ingest"] = time.perf_counter() - t0
                os.remove(corpus)
            for method in methods:
                t0 = time.perf_counter()
                m = AnchorTopicModel(K, method="plain", recover=method, seed=SEED).fit(store)
                res = matched_l1(A, m.components_.T)
                row[method] = {
                    "l1": res.mean,
                    "seconds": time.perf_counter() - t0,
                    "stages": m.diagnostics_["seconds"],
                    "converged": m.n_converged_, "fitted": m.n_fitted_,
                }
                if anchors is not None:
                    found = set(m.anchors_.tolist()) & set(anchors.tolist())
                    row[method]["anchors_found"] = len(found)
                print(f"{name} M={M} {method}: L1 {res.mean:.4f} ({row[method]['seconds']:.1f} s)",
                      flush=True)
        shutil.rmtree(store, ignore_errors=True)
        rows.append(row)
    return {"experiment": name, "K": K, "V": A.shape[0], "doc_length": DOC_LENGTH,
            "alpha": ALPHA, "methods": methods, "rows": rows}


def trends(result: dict[str, Any]) -> dict[str, Any]:
    """The paper's qualitative claims, checked on this run."""
    rows = [r for r in result["rows"] if r["n_docs"] != "infinite"]
    inf = [r for r in result["rows"] if r["n_docs"] == "infinite"][0]
    out: dict[str, Any] = {}
    for m in result["methods"]:
        l1 = [r[m]["l1"] for r in rows]
        out[f"{m}_falls_with_size"] = bool(l1[-1] < l1[0])
        out[f"{m}_monotone"] = bool(all(b <= a + 1e-3 for a, b in pairwise(l1)))
        out[f"{m}_infinite"] = inf[m]["l1"]
    if "original" in result["methods"]:
        out["original_worst"] = bool(all(
            r["original"]["l1"] >= max(r[m]["l1"] for m in result["methods"]) - 1e-9
            for r in rows
        ))
    return out


def plot(result: dict[str, Any], path: str, title: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install '.[plot]'): no PNG written", file=sys.stderr)
        return None
    rows = [r for r in result["rows"] if r["n_docs"] != "infinite"]
    inf = [r for r in result["rows"] if r["n_docs"] == "infinite"][0]
    sizes = [r["n_docs"] for r in rows]
    series = result.get("series") or {"": result}
    two = "stages" in result
    fig, ax = plt.subplots(1, 2 if two else 1, figsize=(11 if two else 6, 4))
    axes = np.atleast_1d(ax)
    for label, res in series.items():
        rws = [r for r in res["rows"] if r["n_docs"] != "infinite"]
        infr = [r for r in res["rows"] if r["n_docs"] == "infinite"][0]
        for m in res["methods"]:
            line = axes[0].plot(sizes, [r[m]["l1"] for r in rws], marker="o",
                                label=f"{m} {label}".strip())[0]
            axes[0].axhline(infr[m]["l1"], color=line.get_color(), ls=":", lw=1)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("documents (dotted: infinite data)")
    axes[0].set_ylabel("mean L1 error (matched)")
    axes[0].set_title(title)
    axes[0].legend(fontsize=8)
    if "stages" in result:
        stages = [s for s in ("ingest", "sketch", "anchors", "recovery", "topic_cooccurrence")
                  if all(s in r["stages_l2"] for r in rows)]  # the fit's stages of its time
        for stage in stages:
            axes[1].plot(sizes, [r["stages_l2"][stage] for r in rows], marker="o", label=stage)
        axes[1].set_xscale("log")
        axes[1].set_yscale("log")
        axes[1].set_xlabel("documents")
        axes[1].set_ylabel("seconds (RecoverL2 fit)")
        axes[1].set_title("time per stage")
        axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    del inf
    return path


def experiment_size(workdir: str, sizes: tuple[int, ...], methods: list[str]) -> dict[str, Any]:
    A, vocab = newsgroups_topics(workdir)
    res = run_sizes("size", A, vocab, methods, sizes, workdir)
    for r in res["rows"]:
        if r["n_docs"] != "infinite":
            r["stages_l2"] = dict(r["l2"]["stages"], ingest=r["seconds_ingest"])
    res["stages"] = True
    res["trends"] = trends(res)
    return res


def experiment_anchors(workdir: str, sizes: tuple[int, ...], methods: list[str]) -> dict[str, Any]:
    from streamtopic import synth

    A, anchors = synth.dirichlet_topics_with_anchors(5000, 50, beta=0.05, seed=SEED)
    res = run_sizes("anchors", A, synth.default_vocab(5000), methods, sizes, workdir,
                    anchors=anchors)
    res["topics"] = "random Dirichlet(0.05) over V = 5,000 words, K = 50, one planted anchor each"
    res["trends"] = trends(res)
    res["trends"]["infinite_l2_at_most_0.02"] = bool(res["trends"]["l2_infinite"] <= 0.02)
    return res


def experiment_correlated(
    workdir: str, sizes: tuple[int, ...], methods: list[str]
) -> dict[str, Any]:
    from streamtopic import synth

    A, vocab = newsgroups_topics(workdir)
    K = A.shape[1]
    series = {}
    for rho in (0.0, 0.05, 0.1):
        # σ as concentrated as the Dirichlet(α) of the other experiments: ρ is the only change
        theta = synth.LogisticNormal.matching_dirichlet(ALPHA, K, rho=rho, seed=SEED)
        res = run_sizes(f"corr{rho}", A, vocab, methods, sizes, workdir, theta=theta)
        res["theta"] = theta.to_dict()
        res["trends"] = trends(res)
        series[f"rho={rho}"] = res
    first = next(iter(series.values()))
    return {"experiment": "correlated", "series": series, "rows": first["rows"],
            "methods": methods, "trends": {k: v["trends"] for k, v in series.items()},
            "theta": "logistic normal, block-structured covariance (groups of 10), σ matching "
                     f"Dirichlet({ALPHA}) (LogisticNormal.matching_dirichlet)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", choices=["size", "anchors", "correlated", "all"])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--methods", default="original,l2,kl")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    sizes = tuple(int(float(s)) for s in args.sizes.split(","))
    methods = args.methods.split(",")
    os.makedirs(RESULTS, exist_ok=True)
    workdir = args.workdir or tempfile.mkdtemp(prefix="streamtopic-exp-")
    todo = ["size", "anchors", "correlated"] if args.which == "all" else [args.which]
    titles = {"size": "20 Newsgroups topics (K=50)", "anchors": "planted anchors (K=50)",
              "correlated": "correlated topics, 20 Newsgroups (K=50)"}
    for name in todo:
        t0 = time.perf_counter()
        fn = {"size": experiment_size, "anchors": experiment_anchors,
              "correlated": experiment_correlated}[name]
        ms = [m for m in methods if not (name == "correlated" and m == "kl")]
        result = fn(workdir, sizes, ms)
        result["machine"] = machine_info()
        result["seconds_total"] = time.perf_counter() - t0
        result["command"] = f"python benchmarks/experiments.py {name}"
        out = os.path.join(RESULTS, f"experiment_{name}.json")
        write_result(result, out)  # first: a failed plot loses no measurement
        png = plot(result, os.path.join(RESULTS, f"experiment_{name}.png"), titles[name])
        result["plot"] = os.path.relpath(png, ROOT) if png else None
        write_result(result, out)
        print(json.dumps({"experiment": name, "trends": result.get("trends"),
                          "json": os.path.relpath(out, ROOT)}, indent=2, default=float))


if __name__ == "__main__":
    main()
