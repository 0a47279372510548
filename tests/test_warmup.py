"""The EM kernel compiled in the background (:mod:`streamtopic._warmup`): the warm-up compiles
exactly the specialisation the refinement calls, so the refinement compiles nothing more."""

from __future__ import annotations

import numpy as np

import streamtopic as st
from streamtopic import _warmup, synth
from streamtopic._kernels import cvb0_estep
from streamtopic.corpus import read_corpus
from streamtopic.refinement import refine_topics


def test_warm_up_compiles_what_the_refinement_runs(tmp_path):
    _warmup.warm_up()
    compiled = list(cvb0_estep.signatures)
    assert compiled
    A, _ = synth.dirichlet_topics_with_anchors(100, 3, beta=0.05, seed=1)
    H = synth.sample_documents(A, 200, alpha=0.1, doc_length=30, seed=2)
    vocab = synth.default_vocab(100)
    with st.corpus.HDF5CorpusWriter(tmp_path / "c.h5") as w:
        w.append(H, vocab)
    res = refine_topics(A.T, read_corpus(str(tmp_path / "c.h5")), vocab, passes=2)
    assert res.passes == 2 and np.isfinite(res.loglik_per_token).all()
    assert list(cvb0_estep.signatures) == compiled  # nothing new was compiled


def test_start_runs_once_per_process_and_can_be_turned_off(monkeypatch):
    monkeypatch.setenv(_warmup.WARMUP_ENV, "0")
    assert _warmup.start() is None
    monkeypatch.setenv(_warmup.WARMUP_ENV, "1")
    thread = _warmup.start()
    assert thread is not None and _warmup.start() is thread
    thread.join(timeout=120)
    assert not thread.is_alive()
