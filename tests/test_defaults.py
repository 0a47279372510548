"""The default pipeline: rectified anchor words on a core vocabulary, then EM over the corpus;
the plain algorithm one option away; the memory budget that follows the machine; the
scheduler per stage of ``streamtopic fit``."""

from __future__ import annotations

import numpy as np
import pytest

import streamtopic as st
from streamtopic import synth
from streamtopic.metrics import matched_l1
from streamtopic.model import AnchorTopicModel
from streamtopic.spectral import METHODS, FitSettings, spectral_in_memory

V, K = 600, 8


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, make_semi_synthetic_store):
    """A semi-synthetic corpus with known topics (planted anchors), ingested with its
    vocabulary, so that the refinement can read it back."""
    A, _ = synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=5)
    d = tmp_path_factory.mktemp("defaults")
    return A, make_semi_synthetic_store(d, A, 4000, doc_length=80, seed=6)


def test_default_is_the_rectified_pipeline_on_a_core_then_refined(corpus):
    A, store_path = corpus
    store = st.CooccurrenceStore.open(store_path)
    m = AnchorTopicModel(K, seed=0, core_size=250).fit(store_path)
    d = m.diagnostics_
    assert d["settings"] == {**METHODS["rectified"], "method": "rectified", "core_size": 250,
                             "memory_budget": d["settings"]["memory_budget"]}
    assert d["core"]["size"] == 250 and 0 < d["core"]["share_of_tokens"] < 1
    assert d["rectification"]["method"] == "ap" and d["refinement"]["passes"] >= 1
    # the core is the most frequent words; the anchors are among them
    core = np.sort(np.argsort(-np.asarray(store.doc_freq), kind="stable")[:250])
    assert np.isin(m.anchors_, core).all()
    # ground truth: close to the known topics, on every word, and closer than the plain
    # algorithm on the whole vocabulary
    l1 = matched_l1(A, m.components_.T).mean
    plain = AnchorTopicModel(K, method="plain", seed=0).fit(store_path)
    assert l1 < 0.06 and l1 < 0.6 * matched_l1(A, plain.components_.T).mean, l1
    # a word outside the core got its row from the refinement: as peaked as in the truth
    outside = np.setdiff1d(np.arange(V), core)
    learned = m.components_[:, outside] / m.components_[:, outside].sum(axis=0)
    assert np.median(learned.max(axis=0)) > 0.5  # uninformative rows would be 1/K
    np.testing.assert_allclose(m.components_.sum(axis=1), 1.0, rtol=1e-10)


def test_the_default_rectification_runs_five_iterations_and_recovers_as_fifteen(corpus):
    """The default fit rectifies with ``RECTIFY_ITERS`` (5) alternating projections, the
    command line too, and the refined topics are as close to the known ones as after 15."""
    from click.testing import CliRunner

    from streamtopic.cli import main
    from streamtopic.spectral import RECTIFY_ITERS

    A, store_path = corpus
    assert RECTIFY_ITERS == 5
    m = AnchorTopicModel(K, seed=0).fit(store_path)
    assert m.diagnostics_["rectification"]["iterations"] == 5
    fifteen = AnchorTopicModel(K, seed=0, rectify_iters=15).fit(store_path)
    assert fifteen.diagnostics_["rectification"]["iterations"] == 15
    l1, l1_15 = (matched_l1(A, x.components_.T).mean for x in (m, fifteen))
    assert l1 < 0.06 and l1 <= l1_15 + 0.003, (l1, l1_15)
    help_text = CliRunner().invoke(main, ["fit", "--help"]).output
    assert "--rectify-iters" in help_text and "[default: 5" in help_text.replace("\n", " ")


def test_plain_is_one_option_away(corpus):
    _, store_path = corpus
    m = AnchorTopicModel(K, method="plain", seed=0).fit(store_path)
    explicit = AnchorTopicModel(K, method="rectified", recover="l2", rectify="none",
                                anchor_method="sketch", topic_topic="pinv", refine_passes=0,
                                core_size="all", seed=0).fit(store_path)
    assert m.diagnostics_["refinement"] is None and m.diagnostics_["core"] is None
    assert m.diagnostics_["rectification"] is None
    np.testing.assert_array_equal(m.components_, explicit.components_)


@pytest.mark.parametrize("recover", ["activeset", "original"])
def test_core_stages_in_memory_equal_the_store_path(corpus, recover):
    """On the whole vocabulary, the in-memory stages (the core's) give the store path's
    rectified model: the same anchors, the same topics."""
    _, store_path = corpus
    store = st.CooccurrenceStore.open(store_path)
    kw = dict(rectify="ap", anchor_method="qr", recover=recover, topic_topic="anchor")
    ref = AnchorTopicModel(K, method="plain", seed=0, anchor_min_df=0, **kw).fit(store_path)
    Q = store.read_dense()
    Q /= Q.sum()
    s = FitSettings(**kw, refine_passes=0, core_size="all")
    got = spectral_in_memory(Q, K, s, seed=0, seconds={})
    np.testing.assert_array_equal(got.anchors.anchors, ref.anchors_)
    np.testing.assert_allclose(got.A.T, ref.components_, atol=1e-9)
    np.testing.assert_allclose(got.prevalence, ref.topic_prevalence_, atol=1e-9)
    np.testing.assert_allclose(got.R, ref.topic_cooccurrence_, atol=1e-9)


def test_read_submatrix_is_the_dense_restriction(tmp_path):
    rng = np.random.default_rng(0)
    n = 70
    X = rng.random((n, n))
    Q = X + X.T
    Q /= Q.sum()
    store = st.CooccurrenceStore.from_array(Q, [f"t{i}" for i in range(n)], tmp_path / "q.zarr",
                                            n_docs=10, chunk_size=16)
    ids = np.sort(rng.choice(n, 29, replace=False))
    np.testing.assert_allclose(store.read_submatrix(ids), Q[np.ix_(ids, ids)], rtol=1e-12)
    np.testing.assert_allclose(store.read_submatrix(np.arange(10)), Q[:10, :10], rtol=1e-12)
    with pytest.raises(ValueError, match="sorted"):
        store.read_submatrix(ids[::-1])


def test_core_size_follows_the_memory_budget(corpus):
    _, store_path = corpus
    budget = 4 * 8 * 300**2  # CORE_COPIES dense 300×300 copies
    m = AnchorTopicModel(K, seed=0, memory_budget=budget, refine_passes=1).fit(store_path)
    assert m.diagnostics_["core"]["size"] == 300
    assert m.diagnostics_["settings"]["memory_budget"] == budget


def test_refinement_auto_is_skipped_without_a_corpus(tmp_path, caplog):
    """A population Q has no documents to refine on: the default fits the whole vocabulary
    and says so; an explicit number of passes is an error."""
    A, _ = synth.dirichlet_topics_with_anchors(120, 4, beta=0.05, seed=1)
    Q = synth.population_cooccurrence(A, 0.1)
    st.CooccurrenceStore.from_array(Q, synth.default_vocab(120), tmp_path / "p.zarr",
                                    n_docs=1000)
    with caplog.at_level("WARNING", logger="streamtopic"):
        m = AnchorTopicModel(4, seed=0).fit(tmp_path / "p.zarr")
    assert "not refined" in caplog.text
    assert m.diagnostics_["refinement"] is None and m.diagnostics_["core"] is None
    with pytest.raises(st.model.ModelError, match="refine_passes=2"):
        AnchorTopicModel(4, refine_passes=2).fit(tmp_path / "p.zarr")


@pytest.mark.parametrize("kw, match", [
    ({"method": "fast"}, "method="),
    ({"core_size": 1}, "core_size="),
    ({"core_size": "some"}, "core_size="),
    ({"refine_passes": "often"}, "refine_passes="),
    ({"memory_budget": 0}, "memory_budget="),
    ({"exact_anchors": True, "anchor_method": "qr"}, "exact_anchors"),  # two exact methods
    ({"core_size": 300, "refine_passes": 0}, "needs refinement"),
    ({"core_size": K}, "core_size="),
])
def test_bad_parameters_are_named(corpus, kw, match):
    _, store_path = corpus
    with pytest.raises(ValueError, match=match):
        AnchorTopicModel(K, **kw).fit(store_path)


def test_memory_budget_follows_the_machine(monkeypatch):
    import psutil

    from streamtopic import cluster

    class Mem:
        available = 6 * 2**30
        total = 8 * 2**30

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Mem)
    assert cluster.memory_budget() == int(cluster.MEMORY_SHARE * 6 * 2**30)


def test_memory_budget_follows_the_workers_limit():
    from distributed import Client, LocalCluster

    from streamtopic import cluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      memory_limit="1GiB", dashboard_address=":0") as lc, Client(lc):
        assert cluster.memory_budget() == int(cluster.MEMORY_SHARE * 2**30)


def _schedulers(monkeypatch) -> list[dict]:
    """Record each scheduler context's arguments of the commands run next (the work itself
    runs on the in-process default)."""
    import contextlib

    from streamtopic import cli

    calls: list[dict] = []

    @contextlib.contextmanager
    def fake(*args, **kw):
        calls.append(kw)
        yield None

    monkeypatch.setattr(cli, "scheduler_context", fake)
    monkeypatch.delenv("STREAMTOPIC_SCHEDULER", raising=False)
    return calls


def _recorded_schedulers(monkeypatch, tmp_path, extra):
    """Run ``streamtopic fit`` on a small text file, recording each scheduler context's
    arguments."""
    from click.testing import CliRunner

    from streamtopic import cli

    calls = _schedulers(monkeypatch)
    rng = np.random.default_rng(0)
    words = [f"{a}{b}" for a in "bcdfghjklm" for b in "aeiouy"]
    lines = [" ".join(rng.choice(words[:30] if i % 2 else words[30:], 30)) for i in range(300)]
    (tmp_path / "docs.txt").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(cli.main, ["fit", str(tmp_path / "docs.txt"), "-k", "2", "-q",
                                        "-o", str(tmp_path / "m.zarr"), "--min-df", "1",
                                        *extra])
    assert res.exit_code == 0, res.output
    return calls


def test_fit_of_text_ingests_on_processes_and_fits_on_threads(monkeypatch, tmp_path):
    from streamtopic import cli

    monkeypatch.setattr(cli, "SMALL_INGEST_BYTES", 10)
    calls = _recorded_schedulers(monkeypatch, tmp_path, [])
    assert [c["numeric"] for c in calls] == [False, True]  # cluster, then threads
    assert all(c["local"] == "auto" for c in calls)


def test_fit_of_little_text_runs_on_threads(monkeypatch, tmp_path):
    """Below ``SMALL_INGEST_BYTES`` the ingest of ``fit`` stays on threads, as ``ingest``
    does: a process cluster takes longer to start and stop than it saves."""
    calls = _recorded_schedulers(monkeypatch, tmp_path, [])
    assert [c["numeric"] for c in calls] == [True, True]


def test_workers_ask_for_the_process_cluster(monkeypatch, tmp_path):
    """``--workers N`` names the local cluster's worker processes: little text then goes to
    them too."""
    calls = _recorded_schedulers(monkeypatch, tmp_path, ["--workers", "2"])
    assert [c["numeric"] for c in calls] == [False, True]
    assert all(c["n_workers"] == 2 for c in calls)


def test_a_small_text_ingest_runs_on_threads(monkeypatch, tmp_path):
    """``ingest`` of little text (below ``SMALL_INGEST_BYTES``) stays in its process on
    threads: a cluster of worker processes takes longer to start than the work; more text
    goes to the cluster."""
    from click.testing import CliRunner

    from streamtopic import cli

    calls = _schedulers(monkeypatch)
    docs = tmp_path / "docs.txt"
    docs.write_text("".join(f"alpha{'beta' * (i % 7)} gamma delta\n" for i in range(200)))
    for i, limit in enumerate((cli.SMALL_INGEST_BYTES, 10)):
        monkeypatch.setattr(cli, "SMALL_INGEST_BYTES", limit)
        res = CliRunner().invoke(cli.main, ["ingest", str(docs), "-s", str(tmp_path / f"{i}.zarr"),
                                            "--min-df", "1", "--max-df", "1.0", "-q"])
        assert res.exit_code == 0, res.output
    assert [c["numeric"] for c in calls] == [True, False]


def test_a_named_scheduler_runs_every_stage(monkeypatch, tmp_path):
    calls = _recorded_schedulers(monkeypatch, tmp_path, ["--local", "cluster"])
    assert [c["numeric"] for c in calls] == [False, False]
    assert all(c["local"] == "cluster" for c in calls)


def test_exact_anchors_under_the_default_search_exact_rows(corpus):
    _, store_path = corpus
    with pytest.warns(FutureWarning, match="exact_anchors"):
        m = AnchorTopicModel(K, seed=0, exact_anchors=True, core_size=250).fit(store_path)
    assert m.diagnostics_["settings"]["anchor_method"] == "exact"
    again = AnchorTopicModel(K, seed=0, anchor_method="exact", core_size=250).fit(store_path)
    np.testing.assert_array_equal(again.components_, m.components_)
    assert m.diagnostics_["cleanup_sweeps"] >= 1  # FastAnchorWords ran, on the exact rows


def test_a_model_saved_before_methods_existed_loads_as_plain(corpus, tmp_path):
    import zarr

    _, store_path = corpus
    m = AnchorTopicModel(K, method="plain", seed=0).fit(store_path)
    m.save(tmp_path / "m.zarr")
    root = zarr.open_group(tmp_path / "m.zarr", mode="r+")
    meta = dict(root.attrs["streamtopic_model"])
    meta["params"] = {k: v for k, v in meta["params"].items() if k not in ("method", "core_size")}
    meta["params"].update(recover="l2", rectify="none", anchor_method="sketch",
                          topic_topic="pinv", refine_passes=0, memory_budget=2 * 2**30)
    root.attrs["streamtopic_model"] = meta
    from ._legacy import downgrade_model_to_format1

    downgrade_model_to_format1(tmp_path / "m.zarr")  # (and before digests)
    old = AnchorTopicModel.load(tmp_path / "m.zarr")
    assert old.method == "plain"
    np.testing.assert_array_equal(old.fit(store_path).components_, m.components_)


def test_cli_reports_a_bad_fit_option_before_ingesting(tmp_path):
    from click.testing import CliRunner

    from streamtopic import cli

    (tmp_path / "docs.txt").write_text("alpha beta gamma\n" * 10)
    res = CliRunner().invoke(cli.main, ["fit", str(tmp_path / "docs.txt"), "-k", "20", "-q",
                                        "-o", str(tmp_path / "m.zarr"), "--core-size", "5"])
    assert res.exit_code != 0 and "core_size=5" in res.output
    assert not (tmp_path / "m.zarr.store").exists()  # nothing was ingested


def test_rows_dominated_by_one_pair_do_not_become_anchors():
    """Two-token documents put a frequent word's co-occurrence on one partner (20
    Newsgroups' "sorry test"): the core stages leave both rows out of the free anchors
    (:func:`~streamtopic.anchors.undominated`) and find the planted ones, whose peaked rows
    stay candidates. Without the rule the pair takes two anchors. (Not rectified: a
    population Q with a spike is not of rank K, and rectification rewrites it.)"""
    from streamtopic.anchors import undominated

    Vs, Ks = 300, 6
    A, planted = synth.dirichlet_topics_with_anchors(Vs, Ks, beta=0.05, seed=3)
    Q = synth.population_cooccurrence(A, 0.1)
    Q /= Q.sum()
    p = Q.sum(axis=1)
    order = [w for w in np.argsort(-p) if w not in set(np.asarray(planted).tolist())]
    w, j = int(order[0]), int(order[20])  # the most frequent word and a partner
    spiked = Q.copy()
    spiked[w, j] += p[w] / 2  # documents "w j"
    spiked[j, w] += p[w] / 2
    spiked /= spiked.sum()
    s = FitSettings(recover="activeset", rectify="none", anchor_method="qr",
                    topic_topic="anchor", refine_passes=0, core_size="all")
    got = spectral_in_memory(spiked, Ks, s, seed=0, seconds={})
    assert w not in got.anchors.anchors and j not in got.anchors.anchors
    assert sorted(got.anchors.anchors.tolist()) == sorted(np.asarray(planted).tolist())
    # the rule itself: the dominated row goes, the peaked planted rows stay
    Qbar = spiked / spiked.sum(axis=1, keepdims=True)
    kept = undominated(Qbar, np.arange(Vs), Ks)
    assert w not in kept and np.isin(planted, kept).all()
    # too few pass: the least dominated are kept, in their order
    three = np.array([w, j, int(planted[0])])
    off = Qbar[three].copy()
    off[np.arange(3), three] = 0
    least = np.sort(np.argsort(off.max(axis=1))[:2])
    assert undominated(Qbar, three, 2, share=0.0, ratio=0.0).tolist() == three[least].tolist()
