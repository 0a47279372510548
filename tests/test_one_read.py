"""Text is read and tokenised once by a first ingest (issue 17, point 5): the vocabulary pass
keeps the documents in memory, or, for a corpus too large for that, spills each partition's
documents to a scratch directory that the counting then reads back."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

import streamtopic as st
from streamtopic import cooccurrence, corpus, fitting
from streamtopic.store import CooccurrenceStore


def write_docs(path, n_docs: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    words = [f"w{a}{b}" for a in "abcdefgh" for b in "abcdefghij"]
    with open(path, "w") as fh:
        for _ in range(n_docs):
            fh.write(" ".join(rng.choice(words, size=int(rng.integers(2, 30)))) + "\n")
    return str(path)


@pytest.fixture
def counted_reads(monkeypatch):
    """How many times each partition of the corpus is read and tokenised."""
    reads: list[int] = []
    real = corpus._read_part

    def read_part(part, *rest):
        reads.append(1)
        return real(part, *rest)

    monkeypatch.setattr(corpus, "_read_part", read_part)
    return reads


@pytest.mark.parametrize("kept_in_memory", [True, False])
def test_a_first_ingest_reads_the_corpus_once(tmp_path, monkeypatch, counted_reads,
                                              kept_in_memory):
    docs = write_docs(tmp_path / "a.txt", 3000, seed=1)
    n_parts = st.read_corpus(docs, blocksize=20_000).npartitions
    assert n_parts > 3
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp")
    if not kept_in_memory:
        monkeypatch.setattr(cooccurrence, "CACHE_SHARE", 0.0)  # too large to keep
    st.ingest(docs, tmp_path / "s.zarr", blocksize=20_000, min_df=1, progress=False)
    assert len(counted_reads) == n_parts
    assert os.listdir(tmp_path / "tmp") == []  # the spilled partitions are gone
    monkeypatch.setattr(cooccurrence, "CACHE_SHARE", 0.25)
    st.ingest(docs, tmp_path / "ref.zarr", blocksize=20_000, min_df=1, progress=False)
    with CooccurrenceStore.open(tmp_path / "s.zarr") as a, \
            CooccurrenceStore.open(tmp_path / "ref.zarr") as b:
        assert a.vocab == b.vocab and a.n_docs == b.n_docs
        np.testing.assert_array_equal(a.read_dense(), b.read_dense())


def test_a_failed_spilled_ingest_leaves_no_scratch(tmp_path, monkeypatch):
    docs = write_docs(tmp_path / "a.txt", 500, seed=2)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp")
    monkeypatch.setattr(cooccurrence, "CACHE_SHARE", 0.0)

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cooccurrence, "_accumulate", fail)
    with pytest.raises(OSError):
        st.ingest(docs, tmp_path / "s.zarr", min_df=1, progress=False)
    assert os.listdir(tmp_path / "tmp") == []
    assert not os.path.exists(tmp_path / "s.zarr")


@pytest.fixture
def kept(monkeypatch):
    """Whether each ingest kept its corpus in memory between the passes (else spilled)."""
    seen: list[bool] = []
    real = corpus.Corpus.cached

    def cached(self, *args, **kwargs):
        seen.append(True)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(corpus.Corpus, "cached", cached)
    return seen


def test_ingest_follows_the_memory_budget(tmp_path, monkeypatch, kept):
    """``memory_budget`` (``--memory-budget``) decides whether the text is kept in memory."""
    docs = write_docs(tmp_path / "a.txt", 300, seed=3)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp")
    st.ingest(docs, tmp_path / "small.zarr", min_df=1, progress=False, memory_budget=1)
    assert kept == []  # 1 byte: spilled
    st.ingest(docs, tmp_path / "large.zarr", min_df=1, progress=False, memory_budget=2**40)
    assert kept == [True]


def test_fit_ingests_within_its_memory_budget(tmp_path, monkeypatch):
    """``streamtopic fit RAW --memory-budget MiB`` gives the ingest that budget."""
    from click.testing import CliRunner

    from streamtopic.cli import main

    asked = []

    def ingest(*args, memory_budget=None, **kwargs):
        asked.append(memory_budget)
        raise SystemExit(3)  # the budget is what this test wants: no fit

    monkeypatch.setattr(fitting, "ingest", ingest)
    docs = write_docs(tmp_path / "a.txt", 30, seed=4)
    r = CliRunner().invoke(main, ["fit", docs, "-k", "3", "--memory-budget", "5",
                                  "-o", str(tmp_path / "m.zarr")])
    assert r.exit_code == 3 and asked == [5 * 2**20], r.output


def test_ingest_command_follows_its_memory_budget(tmp_path, monkeypatch, kept):
    """``streamtopic ingest --memory-budget MiB``: the ingest gets that budget, in bytes, and
    keeps to it (1 MiB spills these documents' text, 1 TiB keeps it in memory)."""
    from click.testing import CliRunner

    from streamtopic.cli import main

    asked: list[int | None] = []
    real = cooccurrence.ingest

    def ingest(*args, memory_budget=None, **kwargs):
        asked.append(memory_budget)
        return real(*args, memory_budget=memory_budget, **kwargs)

    monkeypatch.setattr(cooccurrence, "ingest", ingest)
    monkeypatch.setattr(cooccurrence, "CACHE_SHARE", 1e-3)  # 1 MiB keeps ~1 KiB of text
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp")
    docs = write_docs(tmp_path / "a.txt", 300, seed=5)
    for name, mib in (("small", "1"), ("large", str(2**20))):
        r = CliRunner().invoke(main, ["ingest", "-q", docs, "-s", str(tmp_path / f"{name}.zarr"),
                                      "--min-df", "1", "--memory-budget", mib])
        assert r.exit_code == 0, r.output
    assert asked == [2**20, 2**40]
    assert kept == [True]  # the small budget spilled, the large kept the text
