"""Topics over time (streamtopic.timeline): per-slice prevalence against known trajectories."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic as st
from streamtopic.cli import main
from streamtopic.drift import match_topics
from streamtopic.timeline import timeline

from ._corpora import TERMS

K, SLICES, DOCS, LENGTH = 5, 10, 800, 100


def _planted() -> np.ndarray:
    return np.random.default_rng(777).dirichlet(np.full(len(TERMS), 0.05), size=K)


def _trajectories() -> np.ndarray:
    """(SLICES, K) true mean topic shares: topic 0 rises, topic 1 falls, the rest hold."""
    t = np.linspace(0.0, 1.0, SLICES)
    base = np.tile([0.1, 0.4, 0.2, 0.15, 0.15], (SLICES, 1))
    base[:, 0] += 0.3 * t
    base[:, 1] -= 0.3 * t
    return base


def _write_slice(path, shares, rng) -> np.ndarray:
    """DOCS documents of LENGTH tokens, θ ~ Dirichlet(2 · shares); returns the realised
    token share of each topic (K,)."""
    topics, terms = _planted(), np.array(TERMS)
    per_topic = np.zeros(K)
    with open(path, "w") as fh:
        for _ in range(DOCS):
            n = rng.multinomial(LENGTH, rng.dirichlet(2 * shares))
            per_topic += n
            counts = sum(rng.multinomial(n[k], topics[k]) for k in range(K))
            fh.write(" ".join(np.repeat(terms, counts)) + "\n")
    return per_topic / per_topic.sum()


@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    """A store of 10 slices (one ingest each) with known prevalence, and its model."""
    d = tmp_path_factory.mktemp("timeline")
    rng = np.random.default_rng(0)
    truth = []
    for s, shares in enumerate(_trajectories()):
        path = d / f"slice{s}.txt"
        truth.append(_write_slice(path, shares, rng))
        first = dict(min_df=1, max_df=1.0) if s == 0 else {}
        st.ingest(str(path), d / "s.zarr", progress=False, **first)
    model = st.AnchorTopicModel(K, seed=0).fit(d / "s.zarr")
    model.save(d / "m.zarr")
    return d, model, np.array(truth)


def test_per_slice_prevalence_follows_the_truth(sliced):
    """Every topic's prevalence in every slice is within 0.02 of its planted share there."""
    _, model, truth = sliced
    slices = timeline(model)
    assert [s.version for s in slices] == list(range(1, SLICES + 1))
    assert all(s.n_docs == DOCS for s in slices)
    planted = _planted()[:, [TERMS.index(w) for w in model.vocab_]]
    order = match_topics(planted / planted.sum(axis=1, keepdims=True), model.components_)
    got = np.array([s.prevalence[order] for s in slices])
    assert np.abs(got - truth).max() < 0.02, np.abs(got - truth).max()
    assert got[-1, 0] - got[0, 0] > 0.2 and got[0, 1] - got[-1, 1] > 0.2  # rising, falling


def test_the_command_line_timeline(sliced, tmp_path):
    d, model, _ = sliced
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr")])
    assert r.exit_code == 0, r.output
    assert len(r.output.strip().splitlines()) == 1 + SLICES
    out = tmp_path / "t.csv"
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = out.read_text().strip().splitlines()
    assert rows[0].startswith("version,n_docs,n_tokens,topic_0") and len(rows) == 1 + SLICES
    shares = np.array([[float(x) for x in row.split(",")[3:]] for row in rows[1:]])
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, atol=1e-5)
