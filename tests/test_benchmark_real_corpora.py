"""Smoke tests of benchmarks/real_corpora.py's helpers: the same-token bag of words and the
junk-topic check, on tiny inputs."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import real_corpora as rc
import streamtopic
from streamtopic.corpus import read_corpus
from streamtopic.vocabulary import Tokenizer

DOCS = ["apple banana apple cherry", "banana cherry 2024 x1", "apple", "cherry cherry durian"]


def _write(path, docs):
    path.write_text("\n".join(docs) + "\n")
    return str(path)


def test_junk_words_and_topics():
    assert not rc.junk_word("space") and not rc.junk_word("café")
    for w in ("1993", "a86", "g9v", "__", "_o", "subject", "nntp", "edu", "gt"):
        assert rc.junk_word(w), w
    clean = ["space", "nasa", "orbit", "launch", "moon", "earth", "shuttle", "lunar", "rocket"]
    five = ["subject", "lines", "1993", "edu", "com", "nasa", "orbit", "launch", "moon", "earth"]
    six = ["subject", "lines", "1993", "edu", "com", "nntp", "orbit", "launch", "moon", "earth"]
    assert rc.junk_topics([clean, five, six]) == [2]


def test_bag_of_words_restricts_to_vocabulary_and_drops_short_docs(tmp_path):
    # scikit-learn's pattern, no stop words: "2024" and "x1" are tokens, outside the vocabulary
    tokenizer = Tokenizer(token_pattern=r"(?u)\b\w\w+\b", stop_words=None)
    corpus = read_corpus(_write(tmp_path / "docs.txt", DOCS), tokenizer=tokenizer)
    vocab = ["apple", "banana", "cherry"]
    H, stats = rc.bag_of_words(corpus, vocab, scheduler="sync")
    # "apple" alone has 1 token: dropped; 2024, x1, durian are outside the vocabulary
    assert H.toarray().tolist() == [[2, 1, 1], [0, 1, 1], [0, 0, 2]]
    assert stats["docs_read"] == 4 and stats["docs_dropped"] == 1
    assert stats["tokens_outside_vocabulary"] == 3
    H_all, _ = rc.bag_of_words(corpus, vocab, min_tokens=0, scheduler="sync")
    assert H_all.shape == (4, 3)


def test_shared_tokens_match_the_store(tmp_path):
    train = _write(tmp_path / "train.txt", DOCS * 3)
    test = _write(tmp_path / "test.txt", ["banana durian apple", "zebra"])
    store = str(tmp_path / "s.zarr")
    streamtopic.ingest([train], store, min_df=1, max_df=1.0, progress=False)
    out = rc.shared_tokens(store, test, str(tmp_path / "tok"), scheduler="sync")
    assert out["same_tokens_check"]["same"], out["same_tokens_check"]
    with open(out["paths"]["vocab"], encoding="utf-8") as fh:
        vocab = fh.read().split("\n")[:-1]
    assert vocab == list(streamtopic.CooccurrenceStore.open(store).vocab)
    H_test = sp.load_npz(out["paths"]["test"])
    row = dict(zip((vocab[i] for i in H_test[0].indices), H_test[0].data, strict=True))
    assert row == {"banana": 1, "durian": 1, "apple": 1} and H_test.shape[0] == 2
    # identical tokens give an identical key whatever the ingest's time
    store2 = str(tmp_path / "s2.zarr")
    streamtopic.ingest([train], store2, min_df=1, max_df=1.0, progress=False)
    assert rc.store_identity(store)["key"] == rc.store_identity(store2)["key"]


def test_score_is_the_same_for_any_method():
    vocab = ["apple", "banana", "cherry", "2024"]
    comp = np.array([[0.7, 0.3, 0.0, 0.0], [0.0, 0.1, 0.4, 0.5]])
    test = sp.csr_matrix(np.array([[3, 1, 0, 0], [0, 0, 2, 2]]))
    s = rc.score(comp * 5, vocab, test, test)  # rows are renormalised
    assert s["heldout_docs"] == 2 and s["heldout_per_token"] < 0
    # NPMI of the top 10 words (here all 4 of each topic) over the reference documents
    from streamtopic.metrics import npmi, top_word_ids

    expected = npmi(top_word_ids(comp, 4), test)
    np.testing.assert_allclose(s["npmi_per_topic"], expected, rtol=1e-12)
    assert s["npmi_mean"] == float(np.mean(expected))
    assert s["top_words"][0].startswith("apple banana")
    assert s["junk_topics"] == 0


def test_issue28_verdicts_against_tomotopy_and_gensim():
    summary = {"streamtopic": {"n_ok": 1, "heldout_per_token": -7.005, "npmi": 0.24,
                               "seconds_median": 4.0, "unique_words_mean": 12.0,
                               "junk_topics": 0},
               "tomotopy": {"n_ok": 1, "heldout_per_token": -7.0, "npmi": 0.255,
                            "seconds_median": 30.0},
               "gensim-5pass": {"n_ok": 1, "heldout_per_token": -7.1, "seconds_median": 9.0}}
    v = rc.verdicts(summary, ["streamtopic"])["streamtopic"]
    assert v["heldout_within_0.01_of_tomotopy"] is True
    assert v["npmi_within_0.01_of_tomotopy"] is False
    assert v["time_at_most_half_gensim_5pass"] is True and v["pass"] is False
    assert v["time_over_gensim_5pass"] == round(4.0 / 9.0, 3)
    assert "library_imports_over_gensim_5pass" not in v
    start = {"library_imports_seconds": 0.9}
    w = rc.verdicts(summary, ["streamtopic"], start)["streamtopic"]
    assert w["library_imports_over_gensim_5pass"] == 0.1  # a number: not in the verdict
    assert w["pass"] is False and {k: x for k, x in w.items() if isinstance(x, bool)} == {
        k: x for k, x in v.items() if isinstance(x, bool)}


def test_startup_times_the_command_and_the_bare_library_imports(monkeypatch):
    """The benchmark's startup figures: ``streamtopic --version`` and a bare interpreter
    importing the libraries fit needs, each the median of its runs after a quiet wait."""
    ran = []

    def fake_run(cmd, **kwargs):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(rc.subprocess, "run", fake_run)
    monkeypatch.setattr(rc.fitbench, "wait_for_quiet", lambda: {})
    out = rc.startup(3)
    assert len(ran) == 6 and all(c[-1] == "--version" for c in ran[:3])
    assert all(c[1:] == ["-c", rc.FLOOR_IMPORTS] for c in ran[3:])
    assert out["repeats"] == 3 and 0 <= out["library_imports_seconds"] < 1
    assert out["streamtopic_version_seconds"] >= 0
