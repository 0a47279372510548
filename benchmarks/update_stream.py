"""Benchmark of ``streamtopic update`` on a semi-synthetic stream (issue 26).

Planted topics (``synth.dirichlet_topics_with_anchors``: V words, K + 1 topics, one anchor
each); ``--batches`` daily batches of ``--batch-tokens`` tokens (HDF5, ``synth.write_corpus``,
Dirichlet θ); the last topic is absent from the batches before ``--emerge`` and present
from it on. Batch 0 is ingested and fitted (K topics, the default method); every later batch
is one update of the saved model (:func:`streamtopic.updating.update`, each as it would run
from the command line). Per update: its seconds (ingest and fit), the share of topics that
keep their index (each previous topic's Hungarian match among the updated ones is itself),
the updated topics' matched L1 to the K planted topics that exist from the start, and the
drift of the topics. The update time should stay flat as the store grows.

Usage::

    python benchmarks/update_stream.py [--batch-tokens 10000000] [--batches 10] > out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time

import numpy as np

V, K, DOC_LENGTH, ALPHA, BETA = 5000, 20, 100, 0.1, 0.05


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="/tmp/streamtopic-update-stream")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--batch-tokens", type=int, default=10_000_000)
    ap.add_argument("--emerge", type=int, default=5)
    args = ap.parse_args()
    import dask

    import streamtopic as st
    from streamtopic import synth
    from streamtopic.drift import match_topics
    from streamtopic.metrics import matched_l1
    from streamtopic.updating import update

    dask.config.set(scheduler="threads")
    w = args.workdir
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    A, _ = synth.dirichlet_topics_with_anchors(V, K + 1, BETA, seed=26)
    vocab = synth.default_vocab(V)
    vocab_file = os.path.join(w, "vocab.txt")
    with open(vocab_file, "w") as fh:
        fh.writelines(f"{t}\n" for t in vocab)
    docs = args.batch_tokens // DOC_LENGTH
    rows = []
    model_path, store = os.path.join(w, "m.zarr"), os.path.join(w, "s.zarr")
    for b in range(args.batches):
        alpha = np.full(K + 1, ALPHA)
        if b < args.emerge:
            alpha[K] = 1e-9  # the emerging topic: absent before its batch
        path = os.path.join(w, f"batch{b}.h5")
        synth.write_corpus(path, A, docs, alpha=alpha, doc_length=DOC_LENGTH, seed=100 + b,
                           vocab=vocab)
        t0 = time.perf_counter()
        if b == 0:
            st.ingest(path, store, vocab=vocab_file, progress=False)
            model = st.AnchorTopicModel(K, seed=0).fit(store)
            model.save(model_path)
            row = {"batch": 0, "fit_seconds": time.perf_counter() - t0}
        else:
            before = st.AnchorTopicModel.load(model_path)
            res = update(model_path, [path], output=model_path, progress=False)
            model = res.model
            order = match_topics(before.components_, model.components_)
            row = {"batch": b, "update_seconds": time.perf_counter() - t0,
                   "steps": res.seconds,
                   "kept_index_share": float(np.mean(order == np.arange(K))),
                   "max_drift": max(c.distance for c in res.changes),
                   "retired": sum(c.retired for c in res.changes)}
        l1 = matched_l1(A[:, :K], model.components_.T)
        row["matched_l1_to_truth"] = l1.mean
        row["store_tokens"] = st.CooccurrenceStore.open(store).n_tokens
        rows.append(row)
        print(json.dumps(row), flush=True)
    times = [r["update_seconds"] for r in rows[1:]]
    print(json.dumps({"V": V, "K": K, "batch_tokens": args.batch_tokens,
                      "batches": rows, "update_seconds_first_last": [times[0], times[-1]]
                      if times else None}, indent=2))


if __name__ == "__main__":
    main()
