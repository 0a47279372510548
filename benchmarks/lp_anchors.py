"""Benchmark: anchors by linear programs (``anchor_method="lp"``, issue 18, point 5) against V.

For each V (default 250, 500, 1,000, 2,000, 4,000): K = 10 topics ~ Dirichlet(β = 0.2) with
one planted anchor each (:func:`streamtopic.synth.dirichlet_topics_with_anchors`; at this β
no other word is as peaked as a planted anchor, so the planted anchors are *the* anchors),
θ ~ Dirichlet(0.1), 70-token documents, 40·V of them (the same tokens per word at every V,
so the rows' sampling noise stays comparable: 20,000 documents at V = 500). Q is built in
memory (:func:`streamtopic.cooccurrence.document_cooccurrence`, normalised to sum 1), and the
anchor candidates are the words with the default document-frequency threshold
(:func:`streamtopic.sketch.default_anchor_min_df`), as the estimator takes them.

Timed, in turns, ``--repeats`` times (median reported; the LP once when one run takes longer
than ``--lp-repeat-limit`` seconds):

* ``lp``: :func:`streamtopic.anchors.find_anchors_lp` on Q̄ (the rank-K projection, the noise
  estimate, one linear program per candidate and noise scale, the vertices);
* ``qr``: :func:`streamtopic.anchors.find_anchors_qr` on Q in memory (exact pivoted QR);
* ``sketch``: :func:`streamtopic.anchors.find_anchors` (FastAnchorWords, cleanup, single
  precision) on the candidates' rows of Q̄ P, P the estimator's very sparse random
  projection with d = min(1000, V); the product Q̄ P is timed apart (``sketch_product``).

For each method: how many planted anchors it recovers (``planted_found`` of K, ``all_planted``)
and how many distinct true topics its anchors belong to (``topics_covered``); for ``lp`` also
the noise scales it tried (the log lines of ``find_anchors_lp``).

The machine is shared (2 cores): wall times are noisy; the load at the start is recorded.

Usage::

    python benchmarks/lp_anchors.py [--V 250 500 1000 2000 4000] [-k 10] [--repeats 3]
                                    [--out PATH]

Prints JSON and writes ``benchmarks/results/lp_anchors.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from _common import REPO, machine_info, write_result

sys.path.insert(0, REPO)
DEFAULT_OUT = os.path.join(REPO, "benchmarks", "results", "lp_anchors.json")
CORPUS = {"beta": 0.2, "alpha": 0.1, "doc_length": 70, "docs_per_word": 40, "topic_seed": 0,
          "doc_seed": 1}


class _Lines(logging.Handler):
    """Keeps the messages logged by ``streamtopic.anchors``."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _corpus(V: int, K: int) -> dict[str, Any]:
    """Q (V×V, sum 1), its row sums, Q̄, the candidates, the topics and planted anchors."""
    from streamtopic import synth
    from streamtopic.cooccurrence import document_cooccurrence
    from streamtopic.sketch import default_anchor_min_df

    t0 = time.perf_counter()
    A, anchors = synth.dirichlet_topics_with_anchors(V, K, beta=CORPUS["beta"],
                                                     seed=CORPUS["topic_seed"])
    D = CORPUS["docs_per_word"] * V
    H = synth.sample_documents(A, D, alpha=CORPUS["alpha"], doc_length=CORPUS["doc_length"],
                               seed=CORPUS["doc_seed"])
    Q = document_cooccurrence(H)[0].toarray()
    Q /= Q.sum()
    p = Q.sum(axis=1)
    df = np.bincount(H.indices, minlength=V)
    min_df = default_anchor_min_df(D)
    cand = np.flatnonzero((df >= min_df) & (p > 0))
    Qbar = Q / np.where(p > 0, p, 1.0)[:, None]
    return {"Q": Q, "p": p, "Qbar": Qbar, "cand": cand, "A": A, "anchors": anchors,
            "n_docs": D, "n_tokens": int(H.sum()), "min_df": min_df,
            "build_seconds": time.perf_counter() - t0}


def _methods(c: dict[str, Any], K: int) -> dict[str, Callable[[], np.ndarray]]:
    """Each method as a call returning its anchors (K,), on the corpus ``c``."""
    from streamtopic.anchors import find_anchors, find_anchors_lp, find_anchors_qr
    from streamtopic.sketch import projection_block

    V = c["Q"].shape[0]
    d = min(1000, V)
    P = projection_block(0, 0, V, d, V)  # V×d, the estimator's projection (seed 0)
    points: dict[str, np.ndarray] = {}

    def sketch_product() -> np.ndarray:
        points["X"] = np.asarray((P.T @ c["Qbar"][c["cand"]].T).T)  # candidates × d
        return np.empty(0, dtype=np.int64)

    def sketch() -> np.ndarray:
        X = np.zeros((V, d))
        X[c["cand"]] = points["X"]
        return find_anchors(X, K, c["cand"]).anchors

    return {
        "lp": lambda: find_anchors_lp(c["Qbar"], K, c["cand"], seed=0).anchors,
        "qr": lambda: find_anchors_qr(c["Q"], c["p"], K, c["cand"], in_memory=True).anchors,
        "sketch_product": sketch_product,
        "sketch": sketch,
    }


def _quality(c: dict[str, Any], found: np.ndarray) -> dict[str, Any]:
    planted = set(c["anchors"].tolist())
    topic = np.argmax(c["A"][found], axis=1)  # the topic each anchor's word belongs to most
    return {"anchors": sorted(found.tolist()),
            "planted_found": len(planted & set(found.tolist())),
            "all_planted": sorted(found.tolist()) == sorted(planted),
            "topics_covered": len(set(topic.tolist()))}


def _run_size(V: int, K: int, repeats: int, lp_limit: float, lines: _Lines) -> dict[str, Any]:
    c = _corpus(V, K)
    methods = _methods(c, K)
    seconds: dict[str, list[float]] = {m: [] for m in methods}
    found: dict[str, np.ndarray] = {}
    lp_log: list[str] = []
    for r in range(repeats):  # in turns: the machine's load drifts
        for name, call in methods.items():
            if name == "lp" and r > 0 and seconds["lp"][0] > lp_limit:
                continue
            del lines.lines[:]
            t0 = time.perf_counter()
            out = call()
            seconds[name].append(time.perf_counter() - t0)
            if name == "lp" and r == 0:
                lp_log = list(lines.lines)
            if out.size:
                found[name] = out
    row: dict[str, Any] = {
        "V": V, "K": K, "n_docs": c["n_docs"], "n_tokens": c["n_tokens"],
        "anchor_min_df": c["min_df"], "n_candidates": int(c["cand"].size),
        "corpus_build_seconds": round(c["build_seconds"], 3),
        "planted_anchors": sorted(c["anchors"].tolist()),
        "seconds": {m: [round(t, 4) for t in ts] for m, ts in seconds.items()},
        "median_seconds": {m: round(statistics.median(ts), 4) for m, ts in seconds.items()},
        "quality": {m: _quality(c, a) for m, a in found.items()},
        "lp_log": lp_log,
    }
    print(f"V={V}: {row['n_candidates']} candidates, median s {row['median_seconds']}, "
          f"planted found { {m: q['planted_found'] for m, q in row['quality'].items()} }",
          file=sys.stderr, flush=True)
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--V", type=int, nargs="+", default=[250, 500, 1000, 2000, 4000])
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lp-repeat-limit", type=float, default=20.0,
                    help="Run the LP once when its first run takes longer (seconds).")
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    machine = machine_info()  # (the load before the runs)
    lines = _Lines()
    logger = logging.getLogger("streamtopic.anchors")
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    sizes = [_run_size(V, args.k, args.repeats, args.lp_repeat_limit, lines) for V in args.V]
    result = {
        "benchmark": "lp_anchors", "corpus": CORPUS, "k": args.k, "repeats": args.repeats,
        "sizes": sizes,
        "lp_finds_all_planted": all(s["quality"]["lp"]["all_planted"] for s in sizes),
        "machine": machine,
    }
    print(json.dumps(result, indent=2))
    write_result(result, args.out)
    return result


if __name__ == "__main__":
    main()
