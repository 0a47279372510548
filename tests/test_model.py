"""AnchorTopicModel against ground truth: semi-synthetic corpora with known topics."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic as st
from streamtopic import synth
from streamtopic.cli import main
from streamtopic.metrics import matched_l1
from streamtopic.model import AnchorTopicModel, ModelError

V, K = 2000, 20


@pytest.fixture(scope="module")
def truth():
    return synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=0)


@pytest.fixture(scope="module")
def semi_store(truth, tmp_path_factory):
    """The acceptance corpus: planted anchors, θ ~ Dir(0.1), 70 tokens, M = 100,000."""
    import dask

    A, _ = truth
    d = tmp_path_factory.mktemp("semi")
    synth.write_corpus(str(d / "c.h5"), A, 100_000, format="hdf5", alpha=0.1, doc_length=70,
                       seed=1)
    (d / "vocab.txt").write_text("\n".join(synth.default_vocab(V)) + "\n")
    with dask.config.set(scheduler="threads"):
        st.ingest(str(d / "c.h5"), d / "s.zarr", vocab=str(d / "vocab.txt"), progress=False)
    return d / "s.zarr"


@pytest.fixture(scope="module")
def population_store(truth, tmp_path_factory):
    A, _ = truth
    d = tmp_path_factory.mktemp("pop")
    Q = synth.population_cooccurrence(A, 0.1)
    st.CooccurrenceStore.from_array(Q, synth.default_vocab(V), d / "pop.zarr", n_docs=10**6)
    return d / "pop.zarr"


@pytest.mark.slow
def test_semi_synthetic_accuracy(truth, semi_store):
    A, _ = truth
    l1 = {}
    for rec in ("l2", "kl", "original"):
        m = AnchorTopicModel(K, method="plain", recover=rec, seed=0).fit(semi_store)
        l1[rec] = matched_l1(A, m.components_.T).mean
        assert m.n_fitted_ == V
        # every L2 row meets its gap tolerance; KL's EM may stop a few rows at max_iter
        assert m.n_converged_ >= (V if rec != "kl" else 0.99 * V), rec
    assert l1["l2"] <= 0.09  # the paper authors' code: 0.093
    assert l1["kl"] <= 0.17  # the paper authors' code: 0.167
    assert l1["original"] > l1["l2"]  # the original Recover is the worst


def test_infinite_data_recovers_planted_anchors_and_topics(truth, population_store):
    A, anchors = truth
    for kw in ({}, {"anchor_method": "exact"}, {"recover": "original"}):
        m = AnchorTopicModel(K, method="plain", seed=0, **kw).fit(population_store)
        assert sorted(m.anchors_.tolist()) == sorted(anchors.tolist()), kw
        assert matched_l1(A, m.components_.T).mean <= 0.01, kw


def test_infinite_data_topic_cooccurrence_and_prevalence(truth, population_store):
    A, _ = truth
    m = AnchorTopicModel(K, method="plain", seed=0).fit(population_store)
    match = matched_l1(A, m.components_.T).matching  # true k -> learned matching[k]
    R_true = synth.dirichlet_second_moment(0.1, K)
    R_hat = m.topic_cooccurrence_[np.ix_(match, match)]
    # exact up to the solver's tolerance (duality gap 1e-7 relative)
    np.testing.assert_allclose(R_hat, R_true, rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(m.topic_prevalence_[match], R_true.sum(axis=1), rtol=1e-4)
    np.testing.assert_allclose(m.topic_cooccurrence_.sum(), 1.0, rtol=1e-6)


def test_estimator_api_and_persistence(semi_store, tmp_path):
    m = AnchorTopicModel(K, method="plain", seed=3)
    assert m.fit(semi_store) is m
    assert m.components_.shape == (K, V)
    np.testing.assert_allclose(m.components_.sum(axis=1), 1.0)
    assert (m.components_ >= 0).all()
    assert m.anchor_words_ == [m.vocab_[i] for i in m.anchors_]
    assert m.topic_prevalence_.shape == (K,) and abs(m.topic_prevalence_.sum() - 1) < 1e-12
    assert m.topic_cooccurrence_.shape == (K, K)
    top = m.top_words(5)
    assert len(top) == K and all(len(t) == 5 for t in top)
    assert m.get_params()["n_topics"] == K and m.set_params(seed=4).seed == 4
    for fmt, name in (("zarr", "m.zarr"), ("hdf5", "m.h5")):
        m.save(tmp_path / name, format=fmt)
        again = AnchorTopicModel.load(tmp_path / name)
        np.testing.assert_array_equal(again.components_, m.components_)
        np.testing.assert_array_equal(again.anchors_, m.anchors_)
        np.testing.assert_array_equal(again.topic_cooccurrence_, m.topic_cooccurrence_)
        assert again.vocab_ == m.vocab_ and again.top_words(5) == top
        assert again.get_params() == m.get_params()


def test_fit_is_deterministic_under_a_seed(semi_store):
    a = AnchorTopicModel(K, method="plain", seed=11).fit(semi_store)
    b = AnchorTopicModel(K, method="plain", seed=11).fit(semi_store)
    np.testing.assert_array_equal(a.anchors_, b.anchors_)
    np.testing.assert_array_equal(a.components_, b.components_)


@pytest.mark.parametrize(
    "recover", ["l2", pytest.param("kl", marks=pytest.mark.slow), "original"])
def test_fit_from_the_store_equals_the_fit_in_memory(semi_store, recover):
    """memory_budget=1 keeps Q in the store: the graphs' tasks read its blocks themselves
    (the cluster's path); the default holds Q in memory. The models agree."""
    held = AnchorTopicModel(K, method="plain", seed=2, recover=recover).fit(semi_store)
    stored = AnchorTopicModel(K, method="plain", seed=2, recover=recover,
                              memory_budget=1).fit(semi_store)
    np.testing.assert_array_equal(stored.anchors_, held.anchors_)
    np.testing.assert_allclose(stored.components_, held.components_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(stored.topic_cooccurrence_, held.topic_cooccurrence_,
                               rtol=0, atol=1e-12)


def test_recovery_pieces_do_not_change_the_fit(semi_store):
    """Rows are independent problems: pieces of 37 rows (not dividing the chunks) give the
    default fit."""
    a = AnchorTopicModel(K, method="plain", seed=0).fit(semi_store)
    b = AnchorTopicModel(K, method="plain", seed=0, block_rows=37).fit(semi_store)
    np.testing.assert_allclose(b.components_, a.components_, rtol=0, atol=1e-13)
    np.testing.assert_allclose(b.topic_cooccurrence_, a.topic_cooccurrence_, rtol=0,
                               atol=1e-13)


def test_fit_graphs_are_coarse(truth, tmp_path, caplog):
    """Tasks per pass grow with the blocks of Q and the pieces of the fit, not with
    dask.array's bookkeeping: the sketch has a task per block on and above the diagonal and
    one per row block; the recovery (anchor columns, products, fits, topic-topic) at most
    three per block, four per row block and one per piece."""
    import logging
    import re

    Q = synth.population_cooccurrence(truth[0], 0.1)
    store = st.CooccurrenceStore.from_array(Q, synth.default_vocab(V), tmp_path / "q.zarr",
                                            n_docs=10**6, chunk_size=512)
    nb = 4
    with caplog.at_level(logging.INFO, logger="streamtopic"):
        AnchorTopicModel(K, method="plain", seed=0, memory_budget=1, block_rows=100).fit(store)
    tasks = {m.group(1): int(m.group(2)) for m in
             (re.match(r"(\w[\w ]*): [\d.]+ s, (\d+) tasks", r.getMessage())
              for r in caplog.records) if m}
    pieces = -(-store.V // 100) + nb
    assert tasks["sketch"] <= nb * (nb + 1) // 2 + nb + 1
    assert tasks["recovery"] <= 3 * nb * nb + 4 * nb + pieces + 2


def test_passes_over_q_read_the_blocks_on_and_above_the_diagonal(truth, tmp_path, monkeypatch):
    """Q is symmetric: the sketch, the products Q Y and Aᵀ Q A read each block on and above
    the diagonal once, the anchor columns' pass those of them that hold anchor rows or
    columns, and no pass reads a block below the diagonal. The fit is the one of a dense Q
    held in memory."""
    from collections import Counter

    from streamtopic.passes import QBlocks

    Q = synth.population_cooccurrence(truth[0], 0.1)
    store = st.CooccurrenceStore.from_array(Q, synth.default_vocab(V), tmp_path / "q.zarr",
                                            n_docs=10**6, chunk_size=512)
    nb = 4
    reads: Counter = Counter()
    block = QBlocks.block

    def counted(self, i, j):
        reads[i, j] += 1
        return block(self, i, j)

    monkeypatch.setattr(QBlocks, "block", counted)
    m = AnchorTopicModel(K, method="plain", seed=0, memory_budget=1).fit(store)
    owners = set((m.anchors_ // 512).tolist())
    assert set(reads) == {(i, j) for i in range(nb) for j in range(i, nb)}
    for (i, j), n in reads.items():
        # sketch, products and topic-topic; plus the anchor columns' pass
        assert n == 3 + (i in owners or j in owners), (i, j, n)
    monkeypatch.setattr(QBlocks, "block", block)
    held = AnchorTopicModel(K, method="plain", seed=0).fit(store)
    np.testing.assert_allclose(m.components_, held.components_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(m.topic_cooccurrence_, held.topic_cooccurrence_, rtol=0,
                               atol=1e-12)


def test_recovery_products_from_the_upper_blocks_equal_the_dense_ones(tmp_path):
    """Q X and Xᵀ Q X from the blocks on and above the diagonal equal the dense products,
    with a partial last block; so do the anchor columns Q_{:,S} and their Gram."""
    import dask
    import dask.array as da
    import zarr

    from streamtopic.passes import QBlocks
    from streamtopic.recovery import _RecoveryGraph

    rng = np.random.default_rng(3)
    M = rng.random((1100, 1100))
    Q = M + M.T
    X = rng.random((1100, 6))
    path = str(tmp_path / "q.zarr")
    zarr.create_array(path, shape=Q.shape, chunks=(400, 400), dtype="f8")[:] = Q
    rows = str(tmp_path / "rows.zarr")
    zarr.create_array(rows, shape=(1100, 2), chunks=(400, 2), dtype="f8")[:] = 1.0
    for src in (QBlocks.from_zarr(path), QBlocks.from_memory(Q, 400)):
        g = _RecoveryGraph(src, np.arange(6) * 150, rows)
        Xd = da.from_array(X, chunks=(400, 6))
        np.testing.assert_allclose(g.q_product(Xd).compute(scheduler="sync"), Q @ X,
                                   rtol=1e-12)
        np.testing.assert_allclose(g.topic_topic(Xd).compute(scheduler="sync"), X.T @ Q @ X,
                                   rtol=1e-12)
        # the anchor columns from the upper blocks, in the anchors' order, with anchors in
        # the first and the last (partial) row blocks only: block (1, 1) is not read
        S = np.array([1050, 3, 399, 820, 1099])
        g = _RecoveryGraph(src, S, rows)
        assert g.y_blocks() == [(0, 0), (0, 1), (0, 2), (1, 2), (2, 2)]
        Y, gram = dask.compute(g.Y(), g.anchor_block(), scheduler="sync")
        np.testing.assert_array_equal(Y, Q[:, S])
        np.testing.assert_allclose(gram, np.hstack([Q[:, S].T @ Q[:, S], Q[np.ix_(S, S)]]),
                                   rtol=1e-12)


def test_zero_rows_get_zero_mass_and_are_never_anchors(tmp_path):
    rng = np.random.default_rng(0)
    A = rng.dirichlet(np.full(40, 0.3), size=4).T
    A[[5, 17]] = 0.0  # two words that never occur
    A /= A.sum(axis=0)
    Q = synth.population_cooccurrence(A, 0.5)
    st.CooccurrenceStore.from_array(Q, [f"w{i:02d}" for i in range(40)], tmp_path / "z.zarr",
                                    n_docs=1000)
    m = AnchorTopicModel(4, method="plain", seed=0, anchor_method="exact").fit(tmp_path / "z.zarr")
    assert not {5, 17} & set(m.anchors_.tolist())
    assert (m.components_[:, [5, 17]] == 0).all()
    assert np.isfinite(m.components_).all()


def test_bad_parameters_give_clear_errors(semi_store, tmp_path):
    with pytest.raises(ValueError, match="n_topics=1"):
        AnchorTopicModel(1, method="plain").fit(semi_store)
    with pytest.raises(ValueError, match="recover='nope'"):
        AnchorTopicModel(5, method="plain", recover="nope").fit(semi_store)
    with pytest.raises(ValueError, match="exceeds the .* anchor candidates"):
        AnchorTopicModel(5, method="plain", anchor_min_df=10**9).fit(semi_store)
    empty = st.CooccurrenceStore.create(tmp_path / "empty.zarr", ["aa", "bb", "cc"])
    with pytest.raises(st.StoreError, match="empty"):
        AnchorTopicModel(2, method="plain").fit(empty)
    (tmp_path / "junk").mkdir()
    with pytest.raises(ModelError, match="not a streamtopic model"):
        AnchorTopicModel.load(tmp_path / "junk")
    with pytest.raises(ModelError, match="no such model"):
        AnchorTopicModel.load(tmp_path / "missing")
    with pytest.raises(ModelError, match="not fitted"):
        AnchorTopicModel(3).top_words()


def test_cli_fit_and_topics(kos_docword, tmp_path):
    runner = CliRunner()
    out = tmp_path / "kos-model"
    res = runner.invoke(main, ["fit", kos_docword,
                               "-k", "20", "-o", str(out), "-q", "--seed", "1"])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("topic")]
    assert len(lines) == 20 and all("*" in ln for ln in lines)  # the anchor is marked
    assert (tmp_path / "kos-model.store").is_dir()  # raw input was ingested beside the model
    res2 = runner.invoke(main, ["topics", str(out), "--top", "5"])
    assert res2.exit_code == 0
    assert len(res2.output.splitlines()) == 20
    # a second fit reuses the store (the input is already in its manifest)
    res3 = runner.invoke(main, ["fit", str(tmp_path / "kos-model.store"), "-k", "2", "-o",
                                str(tmp_path / "m2"), "-q"])
    assert res3.exit_code == 0, res3.output
    bad = runner.invoke(main, ["fit", str(tmp_path / "kos-model.store"), "-k", "1", "-o",
                               str(tmp_path / "m3"), "-q"])
    assert bad.exit_code != 0 and "n_topics=1" in bad.output
    bad = runner.invoke(main, ["topics", str(tmp_path)])
    assert bad.exit_code != 0 and "not a streamtopic model" in bad.output
