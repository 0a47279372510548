"""Benchmark: named anchors (issue 27, :mod:`streamtopic.seeding`).

**Semi-synthetic** (``synth``): topics with planted anchors (V = 2,000, K = 20, β = 0.05,
seed 1), 20,000 documents of 70 tokens (θ ~ Dirichlet(0.1), seed 2), ingested. Fits with
``method='plain'`` (sketch anchors; and ``anchor_method='qr'``), seed 0: unseeded; with the
planted anchors of topics 0–4 named; with a wrong anchor (the most frequent word) named for
topic 0. Figures: the L1 distance of each named topic (at its index: identity, no matching)
to its true topic, against the unseeded fit's matched L1 for the same true topics; the mean
matched L1 of the other 15 true topics against the other 15 learned topics.

**20 Newsgroups** (``newsgroups``): the store of the training tar (``streamtopic fit
20news-bydate-train.tar -k 20 --store S``, default tokenizer), K = 20, default method
(rectified core, refinement), seed 0. Unseeded, then named ``space nasa orbit``, ``hockey
nhl``, ``gun firearms`` with each tandem combination (harmonic, mean, min). Key words of a
group: the 20 words of highest G² (log-likelihood ratio of the word's count in the group's
training documents vs the rest, words over-represented in the group only), over the model's
tokens (the store's vocabulary). Figures: each named topic's top-10 ∩ its group's key words
(target ≥ 6), held-out log-likelihood per token by document completion on the test tar
(``streamtopic.inference.document_completion``, seed 0; target within 0.02 of unseeded),
and the refit from the store: spectral only (``refine_passes=0`` on the fit's core, timed
from a fitted model) and with refinement.

Usage::

    python benchmarks/seeded.py --work DIR --store NG_STORE --train-bow train_all.npz
        --test-bow test.npz --train-tar 20news-bydate-train.tar [--out PATH]

(the bag-of-words files: ``benchmarks/real_corpora.py``'s ``shared_tokens`` and
``bag_of_words(..., min_tokens=0)`` of the training corpus, one row per tar member, in
order). Prints the JSON and writes ``benchmarks/results/seeded.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, machine_info, write_result  # noqa: E402

NAMED = [["space", "nasa", "orbit"], ["hockey", "nhl"], ["gun", "firearms"]]
GROUPS = ["sci.space", "rec.sport.hockey", "talk.politics.guns"]
KEY_WORDS = 20
TOP = 10


def log(msg: str) -> None:
    print(f"[seeded {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ============================================================================ semi-synthetic


def _l1(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).sum())


def semi_synthetic(work: str) -> dict[str, Any]:
    """Planted anchors named for 5 of 20 topics, against the unseeded fit."""
    import dask

    import streamtopic as st
    from streamtopic import metrics, synth

    V, K, m = 2000, 20, 5
    A, anchors = synth.dirichlet_topics_with_anchors(V, K, 0.05, seed=1)
    vocab = synth.default_vocab(V)
    os.makedirs(work, exist_ok=True)
    store = os.path.join(work, "synth.zarr")
    if not os.path.exists(store):
        synth.write_corpus(os.path.join(work, "c.h5"), A, 20000, format="hdf5", alpha=0.1,
                           doc_length=70, seed=2)
        with open(os.path.join(work, "vocab.txt"), "w") as fh:
            fh.write("\n".join(vocab) + "\n")
        with dask.config.set(scheduler="threads"):
            st.ingest(os.path.join(work, "c.h5"), store, vocab=os.path.join(work, "vocab.txt"),
                      progress=False)
    named = [[vocab[a]] for a in anchors[:m]]
    share = A / A.sum(axis=1, keepdims=True)  # the most frequent word no topic holds half of
    common = vocab[int(np.argmax(np.where(share.max(axis=1) < 0.5, A.sum(axis=1), -1.0)))]
    out: dict[str, Any] = {"V": V, "K": K, "n_docs": 20000, "doc_length": 70,
                           "named": named, "wrong_anchor": common,
                           "wrong_anchor_rule": "the most frequent word no topic holds half of"}
    for anchor_method in ("sketch", "qr"):
        kw = dict(method="plain", anchor_method=anchor_method, seed=0)
        base = st.AnchorTopicModel(K, **kw).fit(store)
        seeded = st.AnchorTopicModel(K, anchor_words=named, **kw).fit(store)
        wrong = st.AnchorTopicModel(K, anchor_words=[[common]] + named[1:], **kw).fit(store)
        mb = metrics.matched_l1(A, base.components_.T)
        rest = metrics.matched_l1(A[:, m:], seeded.components_[m:].T)
        rest_base = mb.per_topic[m:]
        named_l1 = [_l1(A[:, k], seeded.components_[k]) for k in range(m)]
        out[anchor_method] = {
            "named_l1": named_l1, "unseeded_l1_same_topics": mb.per_topic[:m].tolist(),
            "named_no_worse": bool(np.all(np.array(named_l1) <= mb.per_topic[:m] + 1e-9)),
            "named_mean": float(np.mean(named_l1)),
            "unseeded_mean_same_topics": float(mb.per_topic[:m].mean()),
            "others_mean_l1": rest.mean, "unseeded_others_mean_l1": float(rest_base.mean()),
            "unseeded_all_mean_l1": mb.mean,
            "seeded_anchors_first": seeded.anchors_[:m].tolist() == anchors[:m].tolist(),
            "wrong_topic0_l1_closest_true": float(
                np.abs(A - wrong.components_[0][:, None]).sum(axis=0).min()),
            "named_topic0_l1_closest_true": float(
                np.abs(A - seeded.components_[0][:, None]).sum(axis=0).min()),
            "wrong_topic0_top_words": wrong.top_words(10)[0],
            "wrong_others_matched_l1": metrics.matched_l1(A[:, 1:], wrong.components_[1:].T
                                                         ).mean,
        }
        log(f"synth {anchor_method}: {json.dumps(out[anchor_method])[:400]}")
    return out


# ============================================================================ 20 Newsgroups


def key_words(H: sp.csr_matrix, labels: np.ndarray, group: int, n: int) -> np.ndarray:
    """The ``n`` word ids of highest G² (group vs the rest), over-represented in the group
    only: G² = 2 Σ O ln(O/E) over the 2×2 table (word, other words) × (group, rest)."""
    counts = np.asarray(H[labels == group].sum(axis=0)).ravel().astype(np.float64)
    other = np.asarray(H[labels != group].sum(axis=0)).ravel().astype(np.float64)
    a, b = counts, other
    c, d = counts.sum() - a, other.sum() - b
    N = a + b + c + d

    def term(o: np.ndarray, e: np.ndarray) -> np.ndarray:
        return np.where(o > 0, o * np.log(np.where(o > 0, o, 1.0) / np.where(e > 0, e, 1.0)),
                        0.0)

    ea, eb = (a + b) * (a + c) / N, (a + b) * (b + d) / N
    ec, ed = (c + d) * (a + c) / N, (c + d) * (b + d) / N
    g2 = 2 * (term(a, ea) + term(b, eb) + term(c, ec) + term(d, ed))
    g2[a <= ea] = -np.inf  # under-represented in the group
    return np.argsort(-g2, kind="stable")[:n]


def group_labels(train_tar: str) -> tuple[np.ndarray, list[str]]:
    """Each training message's group (tar member order) as ids into the sorted group names."""
    with tarfile.open(train_tar) as tf:
        names = [m.name.split("/")[1] for m in tf.getmembers() if m.isfile()]
    groups = sorted(set(names))
    return np.searchsorted(groups, names), groups


def _score(model: Any, test: sp.csr_matrix, keys: dict[str, list[str]]) -> dict[str, Any]:
    from streamtopic.inference import document_completion

    dc = document_completion(model, test, seed=0)
    top = model.top_words(TOP)
    out: dict[str, Any] = {"heldout_per_token": dc.per_token}
    named = (model.diagnostics_.get("seeding") or {}).get("named") or []
    hits = {}
    for k, words in enumerate(named):
        group = GROUPS[NAMED.index(words)]
        hits[" ".join(words)] = {"topic": k, "top10": top[k],
                                 "key_hits": len(set(top[k]) & set(keys[group]))}
    # the unseeded model: its best topic per group
    for group, kw in keys.items():
        best = max(range(len(top)), key=lambda t: len(set(top[t]) & set(kw)))
        out.setdefault("best_topic_per_group", {})[group] = {
            "topic": best, "key_hits": len(set(top[best]) & set(kw)), "top10": top[best]}
    out["named"] = hits
    out["seconds"] = model.diagnostics_["seconds"]
    return out


def newsgroups(store: str, train_bow: str, test_bow: str, train_tar: str) -> dict[str, Any]:
    import streamtopic as st

    H = sp.load_npz(train_bow).tocsr()
    test = sp.load_npz(test_bow).tocsr()
    labels, groups = group_labels(train_tar)
    if labels.size != H.shape[0]:
        raise RuntimeError(f"{labels.size} tar members but {H.shape[0]} documents")
    with st.CooccurrenceStore.open(store) as s:
        vocab = list(s.vocab)
    keys = {g: [vocab[i] for i in key_words(H, labels, groups.index(g), KEY_WORDS)]
            for g in GROUPS}
    log(f"key words: {keys}")
    out: dict[str, Any] = {"store": store, "V": len(vocab), "key_words": keys}
    t0 = time.perf_counter()
    base = st.AnchorTopicModel(20, seed=0).fit(store)
    out["unseeded"] = dict(_score(base, test, keys), wall=time.perf_counter() - t0)
    log(f"unseeded: {out['unseeded']['heldout_per_token']:.4f}")
    for how in ("harmonic", "mean", "min"):
        t0 = time.perf_counter()
        m = st.AnchorTopicModel(20, seed=0, anchor_words=NAMED, tandem=how).fit(store)
        rec = dict(_score(m, test, keys), wall=time.perf_counter() - t0)
        rec["heldout_minus_unseeded"] = rec["heldout_per_token"] - out["unseeded"][
            "heldout_per_token"]
        rec["all_named_reach_6"] = all(v["key_hits"] >= 6 for v in rec["named"].values())
        out[f"seeded_{how}"] = rec
        log(f"{how}: {json.dumps({k: v['key_hits'] for k, v in rec['named'].items()})} "
            f"held-out {rec['heldout_per_token']:.4f}")
    out["refit"] = refit_times(base, store)
    return out


def refit_times(base: Any, store: str) -> dict[str, Any]:
    """``model.refit(anchor_words=...)`` from the fitted unseeded model, timed end to end
    (three times each, the median): without refinement (``refine_passes=0``: the preview on
    the model's core, Q's core block only), then with refinement (the model's settings)."""
    changed = [["space", "nasa"], ["hockey"], ["gun"]]
    out: dict[str, Any] = {"anchor_words": changed}
    for name, extra in (("without_refinement", {"refine_passes": 0}),
                        ("with_refinement", {"refine_passes": "auto"})):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            base.refit(anchor_words=changed, **extra)
            times.append(time.perf_counter() - t0)
        out[name] = {"seconds": times, "median": float(np.median(times)),
                     "stages": base.diagnostics_["seconds"],
                     "top10_named": base.top_words(TOP)[:len(changed)]}
        log(f"refit {name}: {times}")
    out["without_refinement_within_3s"] = out["without_refinement"]["median"] <= 3.0
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--store")
    ap.add_argument("--train-bow")
    ap.add_argument("--test-bow")
    ap.add_argument("--train-tar")
    ap.add_argument("--skip-synth", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "seeded.json"))
    args = ap.parse_args(argv)
    result: dict[str, Any] = {"machine": machine_info()}
    if not args.skip_synth:
        result["semi_synthetic"] = semi_synthetic(os.path.join(args.work, "synth"))
    if args.store:
        result["newsgroups"] = newsgroups(args.store, args.train_bow, args.test_bow,
                                          args.train_tar)
    write_result(result, args.out)
    print(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
