"""Benchmark: the store's document weights (issue 28), per token against per document.

For each case, the input is ingested twice with the defaults, into a store weighted per
token (``doc_weight='tokens'``, w_d = 1/(n_d − 1), the default) and into one weighted per
document (w_d = 1/(n_d(n_d − 1)), the stores built before; ``streamtopic.cooccurrence.
DOC_WEIGHT`` set for that ingest). Each store is fitted with the defaults,
``AnchorTopicModel(n_topics=K, seed=S).fit(store)``, for every K and seed, and each model is
scored by ``benchmarks/real_corpora.py``'s one scorer (held-out log-likelihood per token by
document completion, NPMI of the top 10 words on the training documents) on the shared
tokens that ``real_corpora.py --keep`` left (``TOKENS/train.npz``, ``test.npz``,
``vocab.txt``; the stores' vocabulary must be theirs). The seed moves NPMI by about ±0.007,
so the means over seeds are what to compare.

Usage::

    python benchmarks/doc_weight.py --case NAME=INPUT,TOKENS_DIR [--case ...]
        [--topics 20,50] [--seeds 0,1,2,3,4] [--workdir DIR] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import real_corpora as rc
from _common import load_shared_tokens, machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "doc_weight.json")
WEIGHTS = ("tokens", "documents")


def build_store(source: str, path: str, weight: str) -> float:
    """Ingest ``source`` into a new store at ``path`` weighted by ``weight``; its seconds."""
    import streamtopic as st
    import streamtopic.cooccurrence as cooccurrence

    saved = cooccurrence.DOC_WEIGHT
    cooccurrence.DOC_WEIGHT = weight
    try:
        t0 = time.perf_counter()
        st.ingest(source, path, progress=False)
        return time.perf_counter() - t0
    finally:
        cooccurrence.DOC_WEIGHT = saved


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--case", action="append", required=True, metavar="NAME=INPUT,TOKENS_DIR")
    p.add_argument("--topics", default="20,50")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--workdir", default=None, help="Stores (default: a temporary directory).")
    p.add_argument("--out", default=DEFAULT_OUT)
    args = p.parse_args(argv)
    from streamtopic import AnchorTopicModel, CooccurrenceStore

    topics = [int(k) for k in args.topics.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    work = args.workdir or tempfile.mkdtemp(prefix="doc-weight-")
    result: dict[str, Any] = {"benchmark": "doc_weight", "machine": machine_info(),
                              "settings": {"topics": topics, "seeds": seeds},
                              "cases": {}}
    try:
        for case in args.case:
            name, _, rest = case.partition("=")
            source, tokens = rest.split(",")
            train, test, vocab = load_shared_tokens(tokens)
            out: dict[str, Any] = {"input": source, "tokens": tokens, "runs": {}}
            for weight in WEIGHTS:
                store = os.path.join(work, f"{name}-{weight}.zarr")
                shutil.rmtree(store, ignore_errors=True)
                out.setdefault("ingest_seconds", {})[weight] = build_store(source, store, weight)
                s = CooccurrenceStore.open(store)
                if list(s.vocab) != list(vocab) or s.doc_weight != weight:
                    raise SystemExit(f"{name}: the store's vocabulary is not the shared "
                                     f"tokens' ({s.V} against {len(vocab)} words)")
                for K in topics:
                    runs = out["runs"].setdefault(str(K), {}).setdefault(weight, [])
                    for seed in seeds:
                        t0 = time.perf_counter()
                        model = AnchorTopicModel(n_topics=K, seed=seed).fit(store)
                        seconds = time.perf_counter() - t0
                        sc = rc.score(model.components_, vocab, test, train)
                        refine = model.diagnostics_.get("refinement") or {}
                        runs.append({"seed": seed, "seconds": seconds,
                                     "heldout_per_token": sc["heldout_per_token"],
                                     "npmi_mean": sc["npmi_mean"],
                                     "passes": refine.get("passes"),
                                     "anchor_words": list(model.anchor_words_)})
                        print(f"{name} K={K} {weight} seed {seed}: held-out "
                              f"{sc['heldout_per_token']:.4f}, NPMI {sc['npmi_mean']:.4f}",
                              file=sys.stderr, flush=True)
            for K, by in out["runs"].items():
                out.setdefault("means", {})[K] = {
                    w: {"heldout_per_token": statistics.fmean(r["heldout_per_token"]
                                                              for r in by[w]),
                        "npmi_mean": statistics.fmean(r["npmi_mean"] for r in by[w]),
                        "npmi_min": min(r["npmi_mean"] for r in by[w]),
                        "npmi_max": max(r["npmi_mean"] for r in by[w])}
                    for w in WEIGHTS}
            result["cases"][name] = out
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(write_result(result, args.out))
    for name, case in result["cases"].items():
        for K, m in case["means"].items():
            print(f"{name} K={K}: " + "; ".join(
                f"{w} NPMI {m[w]['npmi_mean']:.4f} [{m[w]['npmi_min']:.3f}, "
                f"{m[w]['npmi_max']:.3f}], held-out {m[w]['heldout_per_token']:.4f}"
                for w in WEIGHTS), file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
