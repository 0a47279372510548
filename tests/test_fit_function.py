"""``streamtopic.fit``: the functional twin of ``streamtopic fit``, for raw input, a store or a
count matrix; the command line calls it, so both give the same model."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

import streamtopic as st
from streamtopic.cli import main


def _same(a: st.AnchorTopicModel, b: st.AnchorTopicModel) -> None:
    assert a.vocab_ == b.vocab_
    np.testing.assert_array_equal(a.anchors_, b.anchors_)
    np.testing.assert_array_equal(a.components_, b.components_)
    np.testing.assert_array_equal(a.topic_cooccurrence_, b.topic_cooccurrence_)
    np.testing.assert_array_equal(a.alpha_, b.alpha_)


def _cli_fit(source: str, output: str, *options: str) -> st.AnchorTopicModel:
    r = CliRunner().invoke(main, ["fit", source, "-o", output, "--local", "threads", "-q",
                                  *options])
    assert r.exit_code == 0, r.output
    return st.AnchorTopicModel.load(output)


@pytest.mark.slow
def test_fit_on_raw_20_newsgroups_is_the_command_line_model(newsgroups_tar, tmp_path):
    options = ["-k", "10", "--method", "plain", "--keep-n", "3000"]
    by_cli = _cli_fit(str(newsgroups_tar), str(tmp_path / "cli.zarr"), *options)
    assert (tmp_path / "cli.zarr.store").is_dir()
    by_function = st.fit(str(newsgroups_tar), 10, method="plain", keep_n=3000, seed=0,
                         store=tmp_path / "f.store", progress=False)
    _same(by_cli, by_function)
    assert by_function.diagnostics_["store"]["path"].endswith("f.store")


def test_fit_on_a_store_and_on_raw_input(kos_docword, tmp_path):
    """A store path, raw input into a new store, and into a temporary one: one model."""
    by_cli = _cli_fit(kos_docword, str(tmp_path / "m.zarr"), "-k", "5", "--method", "plain")
    store = tmp_path / "m.zarr.store"
    kw = dict(method="plain", seed=0, progress=False)
    _same(by_cli, st.fit(str(store), 5, **kw))
    _same(by_cli, st.fit(kos_docword, 5, store=tmp_path / "new.store", **kw))
    reports = []
    _same(by_cli, st.fit(kos_docword, 5, on_ingest=reports.append, **kw))
    assert len(reports) == 1 and reports[0].n_docs == 3430
    _same(by_cli, st.fit(st.read_corpus(kos_docword), 5, **kw))  # a Corpus


def test_fit_on_a_matrix_is_the_estimator_on_it():
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.poisson(0.3, size=(400, 60)))
    names = [f"w{i}" for i in range(60)]
    got = st.fit(X, 4, method="plain", seed=0, feature_names=names, progress=False)
    want = st.AnchorTopicModel(4, method="plain", seed=0, progress=False).fit(
        X, feature_names=names)
    _same(got, want)
    assert got.vocab_ == names


def test_the_estimator_keeps_no_run_state_and_adopts_one_record(tmp_path):
    """``fit`` is plan, stage functions, adopt: afterwards the estimator holds its parameters
    and the fitted attributes of one ``FittedTopics`` record, nothing else (no run state
    such as settings, budgets or held arrays); a loaded model holds the same attributes."""
    from streamtopic.fitted import FittedTopics

    rng = np.random.default_rng(1)
    X = sp.csr_matrix(rng.poisson(0.3, size=(400, 60)))
    m = st.AnchorTopicModel(4, method="plain", seed=0, progress=False)
    params = set(m.get_params())
    m.fit(X)
    fitted = {k for k in vars(m) if k not in params}
    # the fitted attributes, and where the model was saved (None: only in memory)
    assert not [k for k in fitted if not k.endswith("_") and k != "saved_at"], fitted
    assert isinstance(m.topics_, FittedTopics)
    np.testing.assert_array_equal(m.components_, m.topics_.components)
    assert m.anchor_words_ == m.topics_.anchor_words
    m.save(tmp_path / "m.zarr")
    loaded = st.AnchorTopicModel.load(tmp_path / "m.zarr")
    assert {k for k in vars(loaded) if k not in params} == fitted
    _same(loaded, m)
