"""Tokenisation (scikit-learn conventions) and pruning (gensim semantics)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from streamtopic._stopwords import SKLEARN_STOP_WORDS
from streamtopic.corpus import DocChunk
from streamtopic.vocabulary import (
    ENGLISH_STOP_WORDS,
    LEGACY_TOKEN_PATTERN,
    TermStats,
    Tokenizer,
    Vocabulary,
    read_vocab_file,
)

from ._reference import count_matrix


def test_legacy_pattern_follows_scikit_learn():
    tok = Tokenizer(token_pattern=LEGACY_TOKEN_PATTERN, stop_words="none")
    # one-character tokens ("a", "I", "m") are dropped; unicode word characters are kept
    assert tok("Hello, World! a bb I'm x2 naïve Ünïcode_42") == [
        "hello", "world", "bb", "x2", "naïve", "ünïcode_42"
    ]


def test_tokenizer_defaults_letters_only_without_stop_words():
    # also one-character tokens are dropped, and so are runs with digits or underscores
    assert Tokenizer()("Hello, World! a bb I'm x2 naïve Ünïcode_42 the") == [
        "hello", "world", "bb", "naïve"
    ]


def test_tokenizer_stop_words_and_options(tmp_path):
    assert "the" in ENGLISH_STOP_WORDS and len(SKLEARN_STOP_WORDS) == 318
    assert {"don", "ve", "ll"} <= ENGLISH_STOP_WORDS - SKLEARN_STOP_WORDS  # contractions
    assert Tokenizer(stop_words="english")("The cat and the hat") == ["cat", "hat"]
    (tmp_path / "stops.txt").write_text("cat\nHAT\n")
    assert Tokenizer(stop_words=str(tmp_path / "stops.txt"))("the cat hat") == ["the"]
    assert Tokenizer(stop_words=["the"])("The cat") == ["cat"]
    assert Tokenizer(lowercase=False)("Cat cat") == ["Cat", "cat"]
    assert Tokenizer(token_pattern=r"\w+", stop_words="none")("a b") == ["a", "b"]
    assert Tokenizer(analyzer=str.split, stop_words=["x"])("A x B") == ["A", "B"]
    with pytest.raises(ValueError, match="stop_words"):
        Tokenizer(stop_words="klingon")
    with pytest.raises(ValueError, match="token_pattern"):
        Tokenizer(token_pattern="(")


def test_tokenizer_config_roundtrip():
    tok = Tokenizer(stop_words=("bb", "aa"), lowercase=False)
    again = Tokenizer.from_config(tok.config())
    assert again == tok and again("AA bb aa Cc") == ["AA", "Cc"]


def _stats(docs: list[list[str]]) -> TermStats:
    H, terms = count_matrix(docs)
    return DocChunk(sp.csr_matrix(H, dtype=np.int32), terms, "mem").term_stats()


def test_pruning_has_gensim_semantics():
    docs = [["a", "b", "c", "common"], ["a", "b", "common"], ["a", "d", "common"],
            ["e", "common", "a"], ["b", "b", "b"]]
    stats = _stats(docs)
    assert stats.n_docs == 5
    # df: a=4, common=4, b=3, c=1, d=1, e=1 ; max_df 0.7 -> at most 3.5 documents
    v = Vocabulary.from_stats(stats, min_df=1, max_df=0.7, keep_n=None)
    assert v.terms == ["b", "c", "d", "e"]  # df descending, ties by term
    np.testing.assert_array_equal(v.doc_freq, [3, 1, 1, 1])
    np.testing.assert_array_equal(v.token_counts, [5, 1, 1, 1])
    v = Vocabulary.from_stats(stats, min_df=2, max_df=1.0, keep_n=None)
    assert v.terms == ["a", "common", "b"]
    v = Vocabulary.from_stats(stats, min_df=1, max_df=1.0, keep_n=2)
    assert v.terms == ["a", "common"]  # keep_n keeps the highest document frequencies


def test_term_stats_merge_is_a_sum():
    a = _stats([["x", "y"], ["x"]])
    b = _stats([["x", "z", "z"]])
    total = TermStats.sum([a, b])
    df, tf = total.totals()
    assert total.n_docs == 3
    assert df == {"x": 3, "y": 1, "z": 1} and tf == {"x": 3, "y": 1, "z": 2}


def test_term_stats_of_several_processes_sum_by_string(monkeypatch):
    """Partitions counted in other processes (other tables of term ids, pickled to the
    reducer) sum by their strings: the same totals as one Counter of every document."""
    import pickle
    from collections import Counter

    from streamtopic import vocabulary

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(300)]
    docs = [[words[i] for i in rng.zipf(1.5, size=30) % 300] for _ in range(400)]
    parts = []
    for k in range(8):  # each partition in a process of its own: a fresh table of ids
        monkeypatch.setattr(vocabulary, "_IDS", vocabulary._ProcessIds())
        parts.append(pickle.loads(pickle.dumps(_stats(docs[k * 50 : (k + 1) * 50]))))
    monkeypatch.setattr(vocabulary, "_IDS", vocabulary._ProcessIds())
    half = [TermStats.sum(parts[:4]), _stats(docs[200:])]  # also the reducer's own process
    df, tf = TermStats.sum(half).totals()
    assert df == Counter(w for d in docs for w in set(d))
    assert tf == Counter(w for d in docs for w in d)


@pytest.mark.parametrize("bad", [{"min_df": 0}, {"max_df": 0.0}, {"max_df": 1.5}, {"keep_n": 0}])
def test_pruning_parameters_validated(bad):
    kw = {"min_df": 1, "max_df": 0.5, "keep_n": None} | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        Vocabulary.from_stats(TermStats(), **kw)


def test_vocab_file_errors(tmp_path):
    (tmp_path / "v.txt").write_text("a\nb\na\n")
    with pytest.raises(ValueError, match=r"v.txt:3: term 'a' repeats line 1"):
        read_vocab_file(tmp_path / "v.txt")
    (tmp_path / "e.txt").write_text("a\n\nb\n")
    with pytest.raises(ValueError, match=r"e.txt:2: empty term"):
        read_vocab_file(tmp_path / "e.txt")
    with pytest.raises(FileNotFoundError):
        read_vocab_file(tmp_path / "missing.txt")
