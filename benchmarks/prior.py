"""Benchmark: the refinement's prior of θ_d (issue 28), on real corpora.

For each store and K, one ``AnchorTopicModel(n_topics=K, seed=S).fit(store)`` per prior
(``streamtopic.refinement.PRIOR``: 'fixed', the symmetric α = ``ALPHA``; 'spectral', the
asymmetric α estimated from the spectral moments; '+learn': then re-estimated after each
pass, ``learn_alpha``), and optionally per η
(``streamtopic.refinement.ETA``), each scored by ``benchmarks/real_corpora.py``'s one scorer
(held-out log-likelihood per token by document completion, NPMI of the top 10 words on the
training documents, unique words) on the shared tokens that ``real_corpora.py --keep`` left
(``TOKENS/train.npz``, ``test.npz``, ``vocab.txt``). Variants run in turns, in this process;
fit seconds are wall times (the machine is shared: compare in turns).

Usage::

    python benchmarks/prior.py --case NAME=STORE,TOKENS_DIR [--case ...] [--topics 20]
        [--priors fixed,spectral] [--etas 0.1] [--repeats 1] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import real_corpora as rc
from _common import load_shared_tokens, machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "prior.json")


def one_fit(store: str, K: int, seed: int, prior: str, eta: float,
            extra: dict[str, Any] | None = None, params: dict[str, Any] | None = None
            ) -> tuple[Any, float]:
    """A default fit with the refinement's prior and η set; the model and its seconds.
    ``prior``: 'fixed' or 'spectral' (``refinement.PRIOR``), '+learn' appended to learn α
    during refinement (``learn_alpha``); ``extra``: other defaults of ``refine_topics``."""
    import streamtopic.refinement as refinement
    from streamtopic import AnchorTopicModel

    base, _, learn = prior.partition("+")
    wrapped = refinement.refine_topics.__wrapped__  # the function under @validated
    kw, saved = dict(wrapped.__kwdefaults__), refinement.PRIOR
    refinement.PRIOR = base
    wrapped.__kwdefaults__ = {**kw, "eta": eta, "learn_alpha": learn == "learn", **(extra or {})}
    try:
        t0 = time.perf_counter()
        model = AnchorTopicModel(n_topics=K, seed=seed, **(params or {})).fit(store)
        return model, time.perf_counter() - t0
    finally:
        refinement.PRIOR = saved
        wrapped.__kwdefaults__ = kw


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--case", action="append", required=True, metavar="NAME=STORE,TOKENS")
    p.add_argument("--topics", default="20")
    p.add_argument("--priors", default="fixed,spectral")
    p.add_argument("--etas", default="0.1")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="Another default of refine_topics (a number), e.g. tol=1e-4.")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="A parameter of AnchorTopicModel (an integer or a string).")
    a = p.parse_args(argv)
    extra = {k: float(v) if "." in v or "e" in v else int(v)
             for k, _, v in (x.partition("=") for x in a.set)}
    params = {k: int(v) if v.isdigit() else v
              for k, _, v in (x.partition("=") for x in a.param)}
    variants = [(pr, float(e)) for pr in a.priors.split(",") for e in a.etas.split(",")]
    result: dict[str, Any] = {"benchmark": "prior", "machine": machine_info(),
                              "argv": sys.argv, "runs": []}
    for case in a.case:
        name, _, paths = case.partition("=")
        store, tokens = paths.split(",")
        train, test, vocab = load_shared_tokens(tokens)
        for K in (int(k) for k in a.topics.split(",")):
            for r in range(a.repeats):
                for prior, eta in variants:
                    model, sec = one_fit(store, K, a.seed, prior, eta, extra, params)
                    if list(model.vocab_) != vocab:
                        raise RuntimeError(f"{store}: vocabulary differs from {tokens}")
                    s = rc.score(model.components_, vocab, test, train)
                    refine = model.diagnostics_.get("refinement") or {}
                    run = {"corpus": name, "K": K, "repeat": r, "prior": prior, "eta": eta,
                           **extra, **params,
                           "fit_seconds": sec, "heldout": s["heldout_per_token"],
                           "npmi": s["npmi_mean"], "unique": s["unique_words_mean"],
                           "passes": refine.get("passes"),
                           "alpha0_estimate": model.diagnostics_.get("alpha", {}).get("alpha0"),
                           "refine_alpha0": sum(refine.get("alpha") or [0.0])}
                    print(json.dumps(run), file=sys.stderr, flush=True)
                    result["runs"].append(run)
                    write_result(result, a.out)
    result["summary"] = summary(result["runs"])
    write_result(result, a.out)
    return result


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per (corpus, K, prior, eta)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["corpus"], r["K"], r["prior"], r["eta"]), []).append(r)
    return [{"corpus": c, "K": K, "prior": pr, "eta": e, "n": len(rs),
             **{m: statistics.median(x[m] for x in rs)
                for m in ("heldout", "npmi", "unique", "fit_seconds")}}
            for (c, K, pr, e), rs in groups.items()]


if __name__ == "__main__":
    main()
