"""Rectified anchor words (JSMF/RAW) in the estimator: ground truth on semi-synthetic stores."""

from __future__ import annotations

import os

import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic as st
from streamtopic import synth
from streamtopic.cli import main
from streamtopic.metrics import matched_l1, topic_topic_error
from streamtopic.model import AnchorTopicModel
from streamtopic.recovery import anchor_topic_cooccurrence

V, K = 2000, 20
# the papers' setting (no refinement after it): 15 rectification iterations, as the
# comparisons with pyJSMF-RAW ran
RAW = {"rectify": "ap", "recover": "admm", "anchor_method": "qr", "topic_topic": "anchor",
       "rectify_iters": 15}


@pytest.fixture(scope="module")
def truth():
    return synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=0)


@pytest.fixture(scope="module")
def semi_10k(truth, tmp_path_factory, make_semi_synthetic_store):
    """The acceptance corpus of the rectification issue at M = 10,000 documents."""
    return make_semi_synthetic_store(tmp_path_factory.mktemp("semi10000"), truth[0], 10_000,
                                     doc_length=70, seed=1)


@pytest.fixture(scope="module")
def semi_100k(truth, tmp_path_factory, make_semi_synthetic_store):
    return make_semi_synthetic_store(tmp_path_factory.mktemp("semi100000"), truth[0], 100_000,
                                     doc_length=70, seed=1)


def _scores(truth, m):
    A, _ = truth
    ml = matched_l1(A, m.components_.T)
    R_true = synth.dirichlet_second_moment(0.1, K)
    return ml.mean, topic_topic_error(R_true, m.topic_cooccurrence_, ml.matching)


def test_rectified_accuracy_small_corpus(truth, semi_10k):
    """M = 10k: rectified L1 <= 0.16 (pyJSMF-RAW 0.169); topic-topic error below pyJSMF-RAW's
    0.10–0.14 with the anchor formula, below 0.10 with A† Q A†ᵀ."""
    raw = AnchorTopicModel(K, method="plain", seed=0, **RAW).fit(semi_10k)
    l1, tt = _scores(truth, raw)
    print(f"rectified L1 (M = 10k): {l1:.4f}")
    assert l1 <= 0.16, l1
    assert tt < 0.14, tt
    rect = raw.diagnostics_["rectification"]
    assert rect["method"] == "ap" and len(rect["movement"]) == 15
    assert rect["movement"][-1] < rect["movement"][0]  # it settles
    pinv = AnchorTopicModel(K, method="plain", seed=0,
                            **{**RAW, "topic_topic": "pinv"}).fit(semi_10k)
    l1_pinv, tt_pinv = _scores(truth, pinv)
    assert l1_pinv == l1 and tt_pinv < 0.10, tt_pinv
    # rectification improves the topics and their correlations on few documents
    plain = AnchorTopicModel(K, method="plain", seed=0, recover="admm",
                             anchor_method="qr").fit(semi_10k)
    l1_plain, tt_plain = _scores(truth, plain)
    assert l1_plain > l1 and tt_plain > tt_pinv


def test_rectified_accuracy_large_corpus(truth, semi_100k):
    """M = 100k: rectified L1 <= 0.075 (pyJSMF-RAW 0.077)."""
    m = AnchorTopicModel(K, method="plain", seed=0, **RAW).fit(semi_100k)
    l1, tt = _scores(truth, m)
    print(f"rectified L1 (M = 100k): {l1:.4f}")
    assert l1 <= 0.075, l1
    assert tt < 0.07, tt
    # Douglas–Rachford is as good
    dr = AnchorTopicModel(K, method="plain", seed=0, **{**RAW, "rectify": "dr"}).fit(semi_100k)
    assert _scores(truth, dr)[0] <= 0.075


def test_rectified_q_is_stored_aside_and_reused(semi_10k):
    store = st.CooccurrenceStore.open(semi_10k)
    before = np.asarray(store.Q[:300, :300].compute())
    m1 = AnchorTopicModel(K, method="plain", seed=0, **RAW).fit(semi_10k)
    info = m1.diagnostics_["rectification"]
    assert os.path.isdir(info["path"]) and info["path"].startswith(str(semi_10k))
    np.testing.assert_array_equal(np.asarray(store.Q[:300, :300].compute()), before)
    m2 = AnchorTopicModel(K, method="plain", seed=0, **RAW).fit(semi_10k)
    assert m2.diagnostics_["rectification"]["reused"] is True
    np.testing.assert_array_equal(m1.components_, m2.components_)


def test_solvers_agree_on_the_same_anchors(semi_10k):
    """ADMM, the exact active set and FISTA solve the same problem: same topics."""
    fits = {
        r: AnchorTopicModel(K, method="plain", seed=0, recover=r, anchor_method="qr").fit(semi_10k)
        for r in ("l2", "admm", "activeset")
    }
    for r in ("admm", "activeset"):
        np.testing.assert_array_equal(fits[r].anchors_, fits["l2"].anchors_)
        assert np.abs(fits[r].components_ - fits["l2"].components_).sum(axis=1).max() < 1e-3
        assert fits[r].n_converged_ >= 0.995 * V  # ADMM may stop a few rows at max_iter


def test_infinite_data_anchor_formula_is_exact(truth, tmp_path):
    A, anchors = truth
    Q = synth.population_cooccurrence(A, 0.1)
    st.CooccurrenceStore.from_array(Q, synth.default_vocab(V), tmp_path / "p.zarr", n_docs=10**6)
    for kw in ({"anchor_method": "qr", "topic_topic": "anchor"}, RAW):
        m = AnchorTopicModel(K, method="plain", seed=0, **kw).fit(tmp_path / "p.zarr")
        assert sorted(m.anchors_.tolist()) == sorted(anchors.tolist()), kw
        l1, tt = _scores(truth, m)
        assert l1 <= 0.01 and tt <= 1e-3, (kw, l1, tt)
    # the formula itself, on exact inputs
    S = anchors
    R = synth.dirichlet_second_moment(0.1, K)
    np.testing.assert_allclose(anchor_topic_cooccurrence(A, S, (A @ R @ A.T)[np.ix_(S, S)]), R,
                               rtol=1e-10)


def test_bad_rectification_parameters(semi_10k):
    for kw, msg in (({"rectify": "pca"}, "rectify='pca'"),
                    ({"rectify_iters": 0}, "rectify_iters=0"),
                    ({"anchor_method": "svd"}, "anchor_method='svd'"),
                    ({"topic_topic": "x"}, "topic_topic='x'")):
        with pytest.raises(ValueError, match=msg):
            AnchorTopicModel(K, method="plain", **kw).fit(semi_10k)


def test_cli_fit_rectified(semi_10k, tmp_path):
    res = CliRunner().invoke(main, [
        "fit", str(semi_10k), "-k", str(K), "-o", str(tmp_path / "m"), "-q", "--rectify", "ap",
        "--rectify-iters", "5", "--recover", "activeset", "--anchors", "qr",
        "--topic-topic", "anchor",
    ])
    assert res.exit_code == 0, res.output
    assert "relative movement per iteration" in res.stderr
    m = AnchorTopicModel.load(tmp_path / "m")
    assert m.get_params()["rectify"] == "ap" and m.get_params()["topic_topic"] == "anchor"
    assert len(m.diagnostics_["rectification"]["movement"]) == 5
