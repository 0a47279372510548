"""Benchmark: the refinement's prior on semi-synthetic corpora (issue 28): matched L1 of the
refined topics of a default fit to the true ones, fixed α against the spectral α then learned
(``benchmarks/prior.py``'s variants). V = 2,000, K = 20, 20,000 documents of 100 tokens, true
α symmetric 0.1 or asymmetric (Dirichlet(1) · 2). Usage: ``python benchmarks/prior_synthetic.py
[WORKDIR]``; one JSON line per fit on stdout (``benchmarks/results/prior.json``,
``semi_synthetic``)."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import streamtopic as st
from prior import one_fit
from streamtopic import synth
from streamtopic.metrics import matched_l1

if __name__ == "__main__":
    d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/streamtopic-prior-synthetic"
    os.makedirs(d, exist_ok=True)
    V, K, D = 2000, 20, 20000
    A, _ = synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=1)
    for alpha_kind in ("sym", "asym"):
        alpha = 0.1 if alpha_kind == "sym" else np.random.default_rng(2).dirichlet(np.ones(K)) * 2.0
        path = f"{d}/c-{alpha_kind}.h5"
        vocab = synth.default_vocab(V)
        if not os.path.exists(path):
            H = synth.sample_documents(A, D, alpha=alpha, doc_length=100, seed=3).tocsr()
            with st.corpus.HDF5CorpusWriter(path) as w:
                w.append(H, vocab)
            with open(f"{d}/vocab.txt", "w") as fh:
                fh.write("\n".join(vocab) + "\n")
            st.ingest(path, f"{d}/s-{alpha_kind}.zarr", vocab=f"{d}/vocab.txt", progress=False)
        for prior in ("fixed", "spectral+learn"):
            m, sec = one_fit(f"{d}/s-{alpha_kind}.zarr", K, 0, prior, 0.1)
            pos = {w: i for i, w in enumerate(m.vocab_)}
            Ahat = np.zeros_like(A)
            for i, w in enumerate(vocab):
                if w in pos:
                    Ahat[i] = m.components_[:, pos[w]]
            refine = m.diagnostics_["refinement"]
            print(json.dumps({"alpha": alpha_kind, "prior": prior, "seconds": sec,
                              "l1": matched_l1(A, Ahat).mean, "passes": refine["passes"],
                              "refine_alpha0": sum(refine["alpha"])}), flush=True)
