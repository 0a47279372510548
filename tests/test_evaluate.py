"""`streamtopic split`, `fit` and `evaluate` on KOS with a held-out split."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic as st
from streamtopic.cli import main


def test_split_is_deterministic_and_complete(kos_docword, tmp_path):
    runner = CliRunner()
    docword = kos_docword
    res = runner.invoke(main, ["split", docword, "-o", str(tmp_path / "kos"), "--local",
                               "threads", "-q", "--test-fraction", "0.1"])
    assert res.exit_code == 0, res.output
    train = st.read_corpus(str(tmp_path / "kos.train.h5"))
    test = st.read_corpus(str(tmp_path / "kos.test.h5"))
    n_train = sum(c.n_docs for c in train.iter_chunks())
    n_test = sum(c.n_docs for c in test.iter_chunks())
    assert n_train + n_test == 3430 and 250 < n_test < 450
    # the same seed on differently partitioned input picks the same documents
    from streamtopic.corpus import read_corpus, split

    out = split(read_corpus(docword, blocksize=100_000), str(tmp_path / "b.train.h5"),
                str(tmp_path / "b.test.h5"), test_fraction=0.1, seed=0, progress=False)
    assert out["n_test"] == n_test


@pytest.mark.slow
def test_evaluate_on_kos(kos_docword, tmp_path):
    runner = CliRunner()
    docword = kos_docword
    assert runner.invoke(main, ["split", docword, "-o", str(tmp_path / "kos"), "-q"]).exit_code == 0
    res = runner.invoke(main, ["fit", str(tmp_path / "kos.train.h5"), "-k", "10", "-o",
                               str(tmp_path / "m.zarr"), "-q"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["evaluate", str(tmp_path / "m.zarr"), "--heldout",
                               str(tmp_path / "kos.test.h5"), "--json", "-q"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    V = len(st.AnchorTopicModel.load(tmp_path / "m.zarr").vocab_)
    # coherence from the training inputs recorded in the store: log-ratios, ≤ 0 on average
    coh = report["coherence"]["per_topic"]
    assert len(coh) == 10 and all(np.isfinite(coh)) and report["coherence"]["mean"] < 0
    assert all(0 <= u <= 20 for u in report["unique_words"]["per_topic"])
    held = report["heldout"]
    assert np.log(1.0 / V) < held["per_token"] < 0 and held["n_docs"] > 250
    # the table form prints the same figures
    res = runner.invoke(main, ["evaluate", str(tmp_path / "m.zarr"), "--heldout",
                               str(tmp_path / "kos.test.h5"), "-q"])
    assert res.exit_code == 0 and "held-out log-likelihood" in res.output
    assert f"{held['per_token']:.4f}" in res.output


def test_synth_cli_then_fit_recovers_the_planted_topics(tmp_path):
    from streamtopic import synth
    from streamtopic.metrics import matched_l1

    runner = CliRunner()
    out = tmp_path / "c.h5"
    res = runner.invoke(main, ["synth", str(out), "--docs", "20000", "--words", "400",
                               "--topics", "8", "--planted-anchors", "--population",
                               "--seed", "3", "-q"])
    assert res.exit_code == 0, res.output
    truth = synth.load_topics(str(out) + ".topics.npz")
    A = truth["A"]
    res = runner.invoke(main, ["fit", str(out) + ".population.zarr", "-k", "8", "-o",
                               str(tmp_path / "pop-model"), "-q"])
    assert res.exit_code == 0, res.output
    m = st.AnchorTopicModel.load(tmp_path / "pop-model")
    assert matched_l1(A, m.components_.T).mean <= 0.01  # infinite data: exact
    res = runner.invoke(main, ["fit", str(out), "-k", "8", "-o", str(tmp_path / "m"), "-q",
                               "--min-df", "1", "--max-df", "1.0"])
    assert res.exit_code == 0, res.output
    m = st.AnchorTopicModel.load(tmp_path / "m")
    pos = {w: i for i, w in enumerate(m.vocab_)}
    vocab = truth["vocab"]
    A_hat = np.zeros_like(A)
    for i, w in enumerate(vocab):
        if w in pos:
            A_hat[i] = m.components_[:, pos[w]]
    assert matched_l1(A, A_hat).mean < 0.25  # finite data: close, not exact


def test_evaluate_npmi_matches_a_direct_count(tmp_path):
    """`evaluate` reports each topic's NPMI over its top 10 words, from document
    co-occurrence in the training inputs (default) or a named corpus: the same figures as a
    direct count over the documents."""
    import math

    rng = np.random.default_rng(0)
    topics = [[f"{c}{s}" for s in ("alpha", "beta", "gamma", "delta", "omega", "sigma", "theta",
                                     "kappa", "lambda", "zeta", "iota", "rho")] for c in "pqr"]
    docs = [" ".join(rng.choice(topics[rng.integers(3)], size=12)) for _ in range(600)]
    train = tmp_path / "train.txt"
    train.write_text("\n".join(docs) + "\n")
    other = tmp_path / "other.txt"
    other.write_text("\n".join(docs[:200] + [" ".join(t[:6]) for t in topics]) + "\n")
    runner = CliRunner()
    res = runner.invoke(main, ["fit", str(train), "-k", "3", "-o", str(tmp_path / "m"), "-q",
                               "--min-df", "1", "--max-df", "1.0", "--stop-words", "none",
                               "--store", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    model = st.AnchorTopicModel.load(tmp_path / "m")
    top = [list(w) for w in model.top_words(10)]

    def direct(lines: list[str]) -> list[float]:
        sets = [set(d.split()) for d in lines]
        out = []
        for words in top:
            vals = []
            for a in range(10):
                for b in range(a + 1, 10):
                    both = sum(words[a] in s and words[b] in s for s in sets) / len(sets)
                    pa = sum(words[a] in s for s in sets) / len(sets)
                    pb = sum(words[b] in s for s in sets) / len(sets)
                    vals.append(-1.0 if both == 0 else
                                1.0 if both == 1 else math.log(both / (pa * pb)) / -math.log(both))
            out.append(sum(vals) / len(vals))
        return out

    for extra, lines in (([], docs), (["--corpus", str(other)], other.read_text().splitlines())):
        res = runner.invoke(main, ["evaluate", str(tmp_path / "m"), "--json", "-q", *extra])
        assert res.exit_code == 0, res.output
        report = json.loads(res.output)
        assert report["npmi"]["top"] == 10
        np.testing.assert_allclose(report["npmi"]["per_topic"], direct(lines), rtol=1e-10)
        assert report["npmi"]["mean"] > 0.3  # planted topics: their words occur together
    res = runner.invoke(main, ["evaluate", str(tmp_path / "m"), "-q"])
    assert res.exit_code == 0 and "NPMI, top 10" in res.output
