"""``streamtopic update``: a fitted model follows new data (streamtopic.updating)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic as st
from streamtopic import pipeline, refinement, synth
from streamtopic.cli import main
from streamtopic.drift import js_distances, match_topics, topic_changes
from streamtopic.updating import update

from ._corpora import write_docs

K = 5
PLANTED_V = 260  # words of the six planted topics (synth.default_vocab)


@pytest.fixture
def fitted(tmp_path):
    """A model of 5 planted topics fitted on 1,500 documents, its store kept."""
    old = write_docs(tmp_path / "old.txt", 1500, seed=1)
    model = st.fit(old, K, store=tmp_path / "s.zarr", min_df=1, seed=0, progress=False)
    model.save(tmp_path / "m.zarr")
    return tmp_path


def test_js_distances_and_matching_against_scipy():
    """The distances are scipy's Jensen–Shannon (base 2); matching undoes a permutation."""
    from scipy.spatial.distance import jensenshannon

    rng = np.random.default_rng(0)
    P, Q = rng.dirichlet(np.ones(30), size=4), rng.dirichlet(np.ones(30), size=6)
    want = [[jensenshannon(p, q, base=2) for q in Q] for p in P]
    np.testing.assert_allclose(js_distances(P, Q), want, atol=1e-12)
    perm = np.array([3, 0, 5, 1])
    noisy = Q.copy()
    noisy[perm] = P * 0.95 + 0.05 / 30
    np.testing.assert_array_equal(match_topics(P, noisy), perm)
    (c,) = topic_changes(P[:1], Q[:1], [0.5], [0.4], ["a"], ["b"])
    assert c.distance == pytest.approx(want[0][0]) and c.retired == (want[0][0] > 0.6)


def test_update_continues_each_topic_from_the_new_documents_only(fitted, monkeypatch):
    """The update ingests the new documents as a new version, refines over them alone
    (the old documents enter as fixed counts), keeps every topic at its index, and records
    the store version it is fitted on; the saved model is the returned one."""
    seen = []
    real = refinement.refine_topics

    def recorded(components, corpus, vocab, **kw):
        out = real(components, corpus, vocab, **kw)
        seen.append((out.corpus_docs, kw.get("prior_counts") is not None))
        return out

    monkeypatch.setattr(pipeline, "refine_topics", recorded)
    new = write_docs(fitted / "new.txt", 150, seed=2)
    before = st.AnchorTopicModel.load(fitted / "m.zarr")
    res = update(fitted / "m.zarr", [new], output=fitted / "m2.zarr", progress=False)
    assert seen == [(150, True)]
    assert (res.version_before, res.version_after) == (1, 2)
    assert res.model.diagnostics_["store"]["version"] == 2
    assert res.model.diagnostics_["update"] == {"previous_version": 1, "version": 2,
                                                "new_topics": 0}
    assert len(res.changes) == K and not any(c.retired for c in res.changes)
    assert max(c.distance for c in res.changes) < 0.2
    # identity: each topic's best match among the updated topics is itself
    np.testing.assert_array_equal(match_topics(before.components_, res.model.components_),
                                  np.arange(K))
    again = st.AnchorTopicModel.load(fitted / "m2.zarr")
    np.testing.assert_array_equal(again.components_, res.model.components_)


def test_update_is_close_to_a_refit_on_all_the_data(fitted):
    """The updated topics match a full refit on the old and new documents (matched L1)."""
    new = write_docs(fitted / "new.txt", 500, seed=3)
    res = update(fitted / "m.zarr", [new], output=fitted / "m2.zarr", progress=False)
    refit = st.AnchorTopicModel(K, seed=0).fit(fitted / "s.zarr")
    order = match_topics(res.model.components_, refit.components_)
    l1 = np.abs(res.model.components_ - refit.components_[order]).sum(axis=1)
    assert l1.max() < 0.06, l1  # without the old counts held fixed: 0.07–0.12


def test_the_command_line_update_and_nothing_new(fitted):
    new = write_docs(fitted / "new.txt", 100, seed=4)
    r = CliRunner().invoke(main, ["update", str(fitted / "m.zarr"), new, "--local", "threads",
                                  "-q"])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert lines[0].startswith("updated from store version 1 to 2: 100 new documents")
    assert len(lines) == 1 + K and all("drift" in x for x in lines[1:])
    assert st.AnchorTopicModel.load(fitted / "m.zarr").diagnostics_["store"]["version"] == 2
    r = CliRunner().invoke(main, ["update", str(fitted / "m.zarr"), new, "--local", "threads",
                                  "-q"])
    assert r.exit_code == 0 and r.output.startswith("nothing new"), r.output


def test_an_update_without_its_store_is_one_clear_error(fitted):
    import shutil

    shutil.rmtree(fitted / "s.zarr")
    new = write_docs(fitted / "new.txt", 10, seed=5)
    r = CliRunner().invoke(main, ["update", str(fitted / "m.zarr"), new, "--local", "threads"])
    assert r.exit_code == 1 and "the store the model was fitted on" in r.output
    assert "Traceback" not in r.output


def test_an_update_keeps_named_topics_and_their_words(fitted):
    """A seeded model (a tandem anchor of two words names topic 0) updated, with a topic
    added: topic 0 is still named by both words, its anchor is the same, and the named
    words stay out of every other topic (held at 0 through the update's EM)."""
    base = st.AnchorTopicModel.load(fitted / "m.zarr")
    group = base.top_words(2)[2]
    seeded = st.AnchorTopicModel(K, seed=0, core_size=200, anchor_words=[group]).fit(
        fitted / "s.zarr")
    seeded.save(fitted / "seeded.zarr")
    ids = [seeded.vocab_.index(w) for w in group]
    assert (seeded.components_[1:, ids] == 0).all()
    new = write_docs(fitted / "new.txt", 200, seed=7)
    res = update(fitted / "seeded.zarr", [new], output=fitted / "u.zarr", new_topics=1,
                 progress=False)
    m = res.model
    assert m.n_topics == K + 1 and m.get_params()["anchor_words"] == [group]
    assert m.anchor_words_[0] == seeded.anchor_words_[0]
    assert m.diagnostics_["seeding"]["named"] == [group]
    assert (m.components_[1:, ids] == 0).all()  # without the pins: small, not zero
    assert set(group) <= set(m.top_words(10)[0])


@pytest.mark.slow  # 20 updates killed at random points (a few seconds each)
def test_a_killed_update_leaves_the_model_and_the_store_usable(fitted):
    """kill -9 of ``streamtopic update`` at 20 random points: the previous model loads as it
    was (or the updated one, when the kill came after its rename), the store verifies, and a
    rerun of the update completes."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    new = write_docs(fitted / "new.txt", 300, seed=6)
    shutil.copytree(fitted / "s.zarr", fitted / "s0.zarr")
    shutil.copytree(fitted / "m.zarr", fitted / "m0.zarr")
    before = st.AnchorTopicModel.load(fitted / "m.zarr").components_
    cmd = [sys.executable, "-m", "streamtopic", "update", str(fitted / "m.zarr"), new,
           "--local", "threads", "-q"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    whole = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    outcomes = set()
    for trial in range(20):
        for name in ("s", "m"):
            shutil.rmtree(fitted / f"{name}.zarr")
            shutil.copytree(fitted / f"{name}0.zarr", fitted / f"{name}.zarr")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        time.sleep(float(rng.uniform(0.0, whole)))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        model = st.AnchorTopicModel.load(fitted / "m.zarr")  # loads: the old or the new
        version = model.diagnostics_["store"]["version"]
        outcomes.add(version)
        if version == 1:
            np.testing.assert_array_equal(model.components_, before)
        with st.CooccurrenceStore.open(fitted / "s.zarr") as s:
            assert s.verify() == [], trial
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert st.AnchorTopicModel.load(fitted / "m.zarr").diagnostics_["store"]["version"] == 2
    assert 1 in outcomes  # some kills came before the update's end


def _six_planted() -> np.ndarray:
    return np.random.default_rng(4242).dirichlet(np.full(PLANTED_V, 0.05), size=6)


def _write_planted(path, n, alpha, seed, length=80) -> str:
    """Documents of the six planted topics, θ ~ Dirichlet(alpha) (a topic of alpha ~0 is
    absent)."""
    synth.write_corpus(path, _six_planted().T, n, format="text",
                       alpha=np.asarray(alpha, dtype=np.float64), doc_length=length, seed=seed)
    return str(path)


def test_new_topics_finds_the_topic_that_emerged(tmp_path):
    """A planted topic absent from the fitted documents and present in the new ones: with
    ``new_topics=1`` the update keeps the five topics at their indices and anchors and
    finds the sixth at index 5 (within L1 0.2 of the truth; measured 0.09)."""
    terms = synth.default_vocab(PLANTED_V)
    old = _write_planted(tmp_path / "old.txt", 2000, [0.3] * 5 + [1e-9], 1)
    new = _write_planted(tmp_path / "new.txt", 800, [0.3] * 5 + [0.6], 2)
    before = st.fit(old, K, store=tmp_path / "s.zarr", min_df=1, max_df=1.0, seed=0,
                    progress=False)
    before.save(tmp_path / "m.zarr")
    res = update(tmp_path / "m.zarr", [new], output=tmp_path / "m2.zarr", new_topics=1,
                 progress=False)
    after = res.model
    assert after.components_.shape[0] == K + 1 and after.n_topics == K + 1
    assert after.anchor_words_[:K] == before.anchor_words_
    planted = _six_planted()[:, [terms.index(w) for w in after.vocab_]]
    planted /= planted.sum(axis=1, keepdims=True)
    np.testing.assert_array_equal(match_topics(planted[:K], before.components_),
                                  match_topics(planted[:K], after.components_[:K]))
    assert np.abs(after.components_[K] - planted[5]).sum() < 0.2
    assert res.summary()[-1].startswith(f"topic {K:3d}  new")
    assert st.AnchorTopicModel.load(tmp_path / "m2.zarr").n_topics == K + 1
