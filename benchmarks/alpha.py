"""Benchmark: the Dirichlet prior α estimated by the fit (``AnchorTopicModel.alpha_``, issue 18
point 4), against the α that generated semi-synthetic corpora.

Topics: K = 20 columns of Dirichlet(0.05) over V = 2,000 words with one planted anchor each
(``synth.dirichlet_topics_with_anchors``, seed 0; the rectification benchmark's set-up). θ ~
Dirichlet(α) with α₀ = Σα in {0.1, 0.5, 1, 2, 5}, either symmetric (α_k = α₀/K) or
asymmetric (α_k ∝ 10^(−k/(K−1)): a tenfold range of prevalences, 0.013 to 0.13). For each,
corpora of M = 10k, 30k and 100k documents of 100 tokens are written as HDF5 and ingested with
the generator's vocabulary (threaded scheduler), and the population ("infinite data") store
holds the exact Q = A E[θθᵀ] Aᵀ.

On each store two fits run with seed 0: the default (``method='rectified'``: rectified core,
refinement; ``alpha_`` from the refined topics' R on the core's block of Q and the refined
prevalence) and ``method='plain'`` (``alpha_`` from its A† Q A†ᵀ and its prevalence). The
population store records no corpus, so its default fit is not refined. Reported per fit,
topics matched to the truth by :func:`~streamtopic.metrics.matched_l1`:

* ``rel_l1``: ‖α̂ − α‖₁ / ‖α‖₁ of ``alpha_``;
* ``rel_l1_spectral_R``: the same for ``estimate_alpha(topic_cooccurrence_,
  topic_prevalence_)``, α from the fit's own (spectral) R, for comparison;
* ``rel_l1_least_squares``, ``rel_l1_spectral_R_least_squares``: the same two with α₀ fitted
  by ordinary least squares (``loss='linear'``) instead of the default Cauchy loss;
* ``alpha0_hat``, ``topics_l1`` (mean matched L1 of the topics), ``seconds``.

Acceptance (issue 18): ``rel_l1`` <= 0.2 at M = 100k for symmetric α₀ = 0.5 and for the
asymmetric α (α₀ = 0.5), with the default fit.

Usage::

    python benchmarks/alpha.py [--workdir DIR] [--out PATH] [--sizes 10000 30000 ...]
                               [--alpha0 0.1 0.5 ...]

Prints the results as JSON and writes them to ``benchmarks/results/alpha.json`` (or ``--out``).
Corpora and stores go to a new directory under /tmp (or ``--workdir``), removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from typing import Any

import numpy as np

from _common import machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
DEFAULT_OUT = os.path.join(HERE, "results", "alpha.json")

SETUP = {"V": 2_000, "K": 20, "beta": 0.05, "doc_length": 100, "topic_seed": 0, "doc_seed": 1}
SIZES = (10_000, 30_000, 100_000)
ALPHA0 = (0.1, 0.5, 1.0, 2.0, 5.0)
SHAPES = ("symmetric", "asymmetric")
FITS = {"rectified": {}, "plain": {"method": "plain"}}
TARGET = 0.2


def log(msg: str) -> None:
    print(f"[alpha-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def true_alpha(shape: str, alpha0: float, K: int) -> np.ndarray:
    """α (K,) summing to ``alpha0``: flat, or geometric over a tenfold range."""
    weights = np.ones(K) if shape == "symmetric" else 10.0 ** (-np.arange(K) / (K - 1))
    return alpha0 * weights / weights.sum()


def make_store(work: str, A: np.ndarray, alpha: np.ndarray, n_docs: int | str) -> str:
    """The store of ``n_docs`` sampled documents (HDF5 corpus kept beside it: the refinement
    reads it), or of the population Q for ``'infinite'``."""
    import dask

    import streamtopic as st
    from streamtopic import synth

    vocab = synth.default_vocab(A.shape[0])
    store = os.path.join(work, "s.zarr")
    if n_docs == "infinite":
        st.CooccurrenceStore.from_array(synth.population_cooccurrence(A, alpha), vocab, store,
                                        n_docs=10**9)
        return store
    vocab_file = os.path.join(work, "vocab.txt")
    with open(vocab_file, "w") as fh:
        fh.write("\n".join(vocab) + "\n")
    corpus = os.path.join(work, "c.h5")
    with dask.config.set(scheduler="threads"):
        synth.write_corpus(corpus, A, int(n_docs), format="hdf5", vocab=vocab, alpha=alpha,
                           doc_length=SETUP["doc_length"], seed=SETUP["doc_seed"])
        st.ingest(corpus, store, vocab=vocab_file, progress=False)
    return store


def score_fit(store: str, A: np.ndarray, alpha: np.ndarray, kw: dict[str, Any]) -> dict[str, Any]:
    """Fit with ``kw`` and score ``alpha_`` (and α from the fit's own R) against ``alpha``."""
    import dask

    from streamtopic import CooccurrenceStore
    from streamtopic.hyperparameters import estimate_alpha, topic_cooccurrence_from_topics
    from streamtopic.metrics import matched_l1
    from streamtopic.model import AnchorTopicModel

    t0 = time.perf_counter()
    with dask.config.set(scheduler="threads"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = AnchorTopicModel(A.shape[1], seed=0, **kw).fit(store)
    seconds = time.perf_counter() - t0
    ml = matched_l1(A, m.components_.T)
    match = ml.matching  # learned topic of each true topic

    def rel(a_hat: np.ndarray) -> float:
        return float(np.abs(a_hat[match] - alpha).sum() / alpha.sum())

    spectral = estimate_alpha(m.topic_cooccurrence_, m.topic_prevalence_)
    record = m.diagnostics_["alpha"]
    R = m.topic_cooccurrence_
    if record["topic_cooccurrence"] == "refined":  # the fit's R of the refined topics
        assert record["words"] == A.shape[0]  # V = 2,000 <= the core's size: every word
        R = topic_cooccurrence_from_topics(m.components_.T,
                                           CooccurrenceStore.open(store).read_dense())
    return {"rel_l1": rel(m.alpha_), "rel_l1_spectral_R": rel(spectral),
            "rel_l1_least_squares": rel(estimate_alpha(R, m.topic_prevalence_, "linear")),
            "rel_l1_spectral_R_least_squares": rel(estimate_alpha(
                m.topic_cooccurrence_, m.topic_prevalence_, "linear")),
            "alpha0_hat": float(m.alpha_.sum()), "topics_l1": ml.mean,
            "alpha_from": m.diagnostics_["alpha"]["topic_cooccurrence"],
            "seconds": seconds}


def run(workdir: str, sizes: list[int], alpha0s: list[float]) -> list[dict[str, Any]]:
    from streamtopic import synth

    A, _ = synth.dirichlet_topics_with_anchors(SETUP["V"], SETUP["K"], beta=SETUP["beta"],
                                               seed=SETUP["topic_seed"])
    rows = []
    for shape in SHAPES:
        for alpha0 in alpha0s:
            alpha = true_alpha(shape, alpha0, SETUP["K"])
            for n_docs in [*sizes, "infinite"]:
                work = tempfile.mkdtemp(dir=workdir)
                t0 = time.perf_counter()
                store = make_store(work, A, alpha, n_docs)
                row: dict[str, Any] = {"shape": shape, "alpha0": alpha0, "n_docs": n_docs,
                                       "seconds_data": time.perf_counter() - t0}
                for name, kw in FITS.items():
                    row[name] = score_fit(store, A, alpha, kw)
                shutil.rmtree(work)
                log(f"{shape} alpha0={alpha0} M={n_docs}: rel L1 rectified "
                    f"{row['rectified']['rel_l1']:.3f} (spectral R "
                    f"{row['rectified']['rel_l1_spectral_R']:.3f}), plain "
                    f"{row['plain']['rel_l1']:.3f}; topics L1 "
                    f"{row['rectified']['topics_l1']:.3f}")
                rows.append(row)
    return rows


def table(rows: list[dict[str, Any]], fit: str, key: str) -> dict[str, Any]:
    """``{shape: {alpha0: {n_docs: value}}}`` of one figure."""
    out: dict[str, Any] = {}
    for r in rows:
        out.setdefault(r["shape"], {}).setdefault(str(r["alpha0"]), {})[str(r["n_docs"])] = \
            round(r[fit][key], 4)
    return out


def acceptance(rows: list[dict[str, Any]]) -> dict[str, Any]:
    got = {f"{r['shape']} alpha0=0.5": r["rectified"]["rel_l1"] for r in rows
           if r["n_docs"] == 100_000 and r["alpha0"] == 0.5}
    return {"target_rel_l1": TARGET, "at_n_docs": 100_000, "rel_l1": got,
            "met": bool(got) and all(v <= TARGET for v in got.values())}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, mean and max of each relative L1 over the finite corpora, per fit."""
    out: dict[str, Any] = {}
    finite = [r for r in rows if r["n_docs"] != "infinite"]
    for fit in FITS:
        for key in ("rel_l1", "rel_l1_spectral_R", "rel_l1_least_squares",
                    "rel_l1_spectral_R_least_squares"):
            v = np.array([r[fit][key] for r in finite])
            if v.size and not (fit == "plain" and "spectral" in key):  # plain: the same R
                out[f"{fit} {key}"] = {"median": round(float(np.median(v)), 4),
                                       "mean": round(float(v.mean()), 4),
                                       "max": round(float(v.max()), 4)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--alpha0", type=float, nargs="+", default=list(ALPHA0))
    args = parser.parse_args()
    info = machine_info()
    workdir = tempfile.mkdtemp(prefix="streamtopic-alpha-", dir=args.workdir)
    t0 = time.perf_counter()
    try:
        rows = run(workdir, args.sizes, args.alpha0)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results = {
        "benchmark": "alpha", "setup": {**SETUP, "sizes": args.sizes, "alpha0": args.alpha0,
                                        "shapes": list(SHAPES), "fits": FITS},
        "machine": info, "total_seconds": time.perf_counter() - t0,
        "acceptance": acceptance(rows),
        "rel_l1_default": table(rows, "rectified", "rel_l1"),
        "rel_l1_default_spectral_R": table(rows, "rectified", "rel_l1_spectral_R"),
        "summary": summary(rows),
        "rel_l1_plain": table(rows, "plain", "rel_l1"),
        "topics_l1_default": table(rows, "rectified", "topics_l1"),
        "rows": rows,
    }
    print(write_result(results, args.out))


if __name__ == "__main__":
    main()
