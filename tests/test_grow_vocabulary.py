"""A vocabulary that grows with the data (issue 17, point 3): ``ingest(..., grow=True)`` adds
words the store has never read, with rows and columns of Q equal to those of a single ingest
of every input over the grown vocabulary; words read before and not kept stay out."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import streamtopic as st
from streamtopic.store import CooccurrenceStore, StoreError


def word(i: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return "w" + letters[i // 26 % 26] + letters[i % 26]


def write_docs(path, n_docs: int, ids: np.ndarray, seed: int, extra: dict[int, int] | None = None
               ) -> str:
    """``n_docs`` documents of 3 to 20 words drawn from ``ids``; ``extra`` {word id: number
    of documents} puts those words into that many documents (the first ones)."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        for d in range(n_docs):
            words = [word(int(i)) for i in rng.choice(ids, size=int(rng.integers(3, 21)))]
            words += [word(w) for w, n in (extra or {}).items() if d < n]
            fh.write(" ".join(words) + "\n")
    return str(path)


@pytest.fixture
def corpora(tmp_path):
    old, new = np.arange(0, 50), np.arange(0, 80)
    a = write_docs(tmp_path / "a.txt", 300, old, seed=1, extra={200: 1})  # read, not kept
    b = write_docs(tmp_path / "b.txt", 300, new, seed=2, extra={200: 5, 201: 1})
    return a, b


def _new(path, inputs, **kw):
    return st.ingest(inputs, path, min_df=2, max_df=1.0, stop_words="none", chunk_size=16,
                     progress=False, **kw)


def test_grown_store_equals_a_single_ingest_over_the_grown_vocabulary(tmp_path, corpora):
    a, b = corpora
    grown = str(tmp_path / "grown.zarr")
    _new(grown, a)
    with CooccurrenceStore.open(grown) as s:
        V1 = s.V
        assert V1 == 50 and V1 % 16  # the last block row is partial: old blocks get padded
        assert word(200) in s.unkept_words
    report = st.ingest(b, grown, grow=True, progress=False)
    with CooccurrenceStore.open(grown) as s:
        vocab = s.vocab
        assert report.words_added == 30 and s.V == 80
        assert set(vocab[:50]) == {word(i) for i in range(50)}  # the new words come after
        # the rule: read before and not kept (word 200), or below min_df here (word 201)
        assert word(200) not in vocab and word(201) not in vocab
        assert {word(200), word(201)} <= set(s.unkept_words)
        (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
        joint = str(tmp_path / "joint.zarr")
        st.ingest([a, b], joint, vocab=str(tmp_path / "vocab.txt"), stop_words="none",
                  chunk_size=16, progress=False)
        with CooccurrenceStore.open(joint) as j:
            assert j.vocab == vocab
            np.testing.assert_allclose(s.read_dense(normalised=False),
                                       j.read_dense(normalised=False), rtol=1e-13, atol=0)
            np.testing.assert_allclose(s.Q.compute(), j.Q.compute(), rtol=1e-12, atol=0)
            np.testing.assert_array_equal(s.word_counts, j.word_counts)
            np.testing.assert_array_equal(s.doc_freq, j.doc_freq)
            assert (s.n_docs, s.n_tokens) == (j.n_docs, j.n_tokens)
            assert s.q_total == pytest.approx(j.q_total, rel=1e-13)
        assert s.verify() == [] and s.missing_blocks() == []


def test_models_and_readers_of_the_old_version_are_unaffected(tmp_path, corpora):
    a, b = corpora
    path = str(tmp_path / "s.zarr")
    _new(path, a)
    model = st.AnchorTopicModel(3, method="plain", seed=0, progress=False).fit(path)
    model.save(tmp_path / "m.zarr")
    reader = CooccurrenceStore.open(path)  # pinned to version 1
    before = reader.read_dense()
    st.ingest(b, path, grow=True, progress=False)
    assert reader.V == 50 and len(reader.vocab) == 50
    np.testing.assert_array_equal(reader.read_dense(), before)
    reader.close()
    loaded = st.AnchorTopicModel.load(tmp_path / "m.zarr")
    assert loaded.vocab_ == model.vocab_
    X = np.ones((2, len(loaded.vocab_)))
    np.testing.assert_allclose(loaded.transform(X), model.transform(X))
    refit = st.AnchorTopicModel(3, method="plain", seed=0, progress=False).fit(path)
    assert refit.components_.shape == (3, 80)


def test_growth_is_refused_where_it_cannot_be_exact(tmp_path, corpora):
    a, b = corpora
    fixed = str(tmp_path / "fixed.zarr")
    (tmp_path / "v.txt").write_text("\n".join(word(i) for i in range(50)) + "\n")
    st.ingest(a, fixed, vocab=str(tmp_path / "v.txt"), stop_words="none", progress=False)
    with pytest.raises(StoreError, match="fixed"):
        st.ingest(b, fixed, grow=True, progress=False)
    old = str(tmp_path / "old.zarr")
    _new(old, a)
    with CooccurrenceStore.open(old) as s:  # as a store written before the record existed
        import zarr

        from ._legacy import downgrade_to_format4

        downgrade_to_format4(old)  # (and before digests)
        zarr.open_group(old, mode="r+")[f"versions/v{s.version:06d}"].attrs.pop("n_unkept")
    with pytest.raises(StoreError, match="does not record the words"):
        st.ingest(b, old, grow=True, progress=False)
    with CooccurrenceStore.open(old) as s:
        assert s.version == 1 and s.V == 50  # nothing was written


def test_without_growth_new_words_stay_out_and_are_recorded(tmp_path, corpora):
    a, b = corpora
    path = str(tmp_path / "s.zarr")
    _new(path, a)
    st.ingest(b, path, progress=False)
    with CooccurrenceStore.open(path) as s:
        assert s.V == 50
        assert {word(i) for i in range(50, 80)} <= set(s.unkept_words)
    c = write_docs(tmp_path / "c.txt", 50, np.arange(0, 80), seed=3)
    report = st.ingest(c, path, grow=True, progress=False)
    assert report.words_added == 0  # all of them were read (by b) and not kept


def test_cli_grow_vocab(tmp_path, corpora):
    a, b = corpora
    path = str(tmp_path / "s.zarr")
    _new(path, a)
    r = subprocess.run([sys.executable, "-m", "streamtopic", "ingest", b, "--store", path,
                        "--grow-vocab", "--local", "threads", "-q"],
                       capture_output=True, text=True, cwd=os.getcwd())
    assert r.returncode == 0, r.stderr
    assert "30 new words added to the vocabulary" in r.stdout
    with CooccurrenceStore.open(path) as s:
        assert s.V == 80
