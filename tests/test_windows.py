"""Long documents cut into windows of N tokens (``max_doc_tokens``, issue 24): a modelling
choice that is off by default, recorded by the store, and exact: a store ingested with
windows equals one ingested from the windows written out as documents."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic as st
from streamtopic import CooccurrenceStore
from streamtopic.cli import main as cli_main
from streamtopic.cooccurrence import StoreError
from streamtopic.corpus import read_corpus
from streamtopic.inference import model_tokenizer
from streamtopic.vocabulary import Tokenizer

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda",
         "sigma", "the", "and", "of"]  # the last three are stop words


def _long_docs(path, n_docs=40, seed=0):
    rng = np.random.default_rng(seed)
    lines = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 300)))) for _ in range(n_docs)]
    path.write_text("\n".join(lines) + "\n")
    return lines


def _windows_written_out(lines, size, path):
    """The reference: every document's matches (stop words too) cut into windows of
    ``size``, each written as a document of its own."""
    tok = Tokenizer()
    out = []
    for line in lines:
        m = tok.matches(line)
        out += [" ".join(m[i:i + size]) for i in range(0, max(len(m), 1), size)]
    path.write_text("\n".join(out) + "\n")
    return out


def test_windows_of_a_batch_follow_the_matches():
    from streamtopic._tokenize import BatchTokenizer

    tok = Tokenizer(max_doc_tokens=4)
    kernel = BatchTokenizer(tok)
    docs = ["alpha the beta gamma and delta alpha", "", "sigma", "of the and of the"]
    for d in docs:
        kernel.add_text(d)
    batch = kernel.run().windows(4)
    # 7 matches -> windows of 4 and 3; an empty document -> one empty window; 1; 5 -> 4, 1
    np.testing.assert_array_equal(batch.lengths, [4, 3, 0, 1, 4, 1])
    rows = [[batch.terms[i] for i in batch.ids[a:b]]
            for a, b in zip(batch.indptr[:-1], batch.indptr[1:], strict=True)]
    assert rows == [["alpha", "beta", "gamma"], ["delta", "alpha"], [], ["sigma"], [], []]


def test_ingest_with_windows_equals_the_windows_as_documents(tmp_path):
    lines = _long_docs(tmp_path / "long.txt")
    _windows_written_out(lines, 25, tmp_path / "windows.txt")
    kw = {"min_df": 1, "max_df": 1.0, "progress": False}
    st.ingest(str(tmp_path / "long.txt"), tmp_path / "w.zarr", max_doc_tokens=25, **kw)
    st.ingest(str(tmp_path / "windows.txt"), tmp_path / "ref.zarr", **kw)
    st.ingest(str(tmp_path / "long.txt"), tmp_path / "whole.zarr", **kw)
    with CooccurrenceStore.open(tmp_path / "w.zarr") as a, \
            CooccurrenceStore.open(tmp_path / "ref.zarr") as b, \
            CooccurrenceStore.open(tmp_path / "whole.zarr") as c:
        assert a.vocab == b.vocab
        assert (a.n_docs, a.n_tokens) == (b.n_docs, b.n_tokens)
        assert a.n_docs > c.n_docs  # the windows are the documents
        np.testing.assert_allclose(a.read_dense(normalised=False), b.read_dense(normalised=False),
                                   rtol=1e-12, atol=0)
        np.testing.assert_array_equal(a.word_counts, b.word_counts)
        assert not np.allclose(a.read_dense(), c.read_dense())  # a modelling choice
        assert a.config["tokenizer"]["max_doc_tokens"] == 25
        assert c.config["tokenizer"]["max_doc_tokens"] is None  # off by default
        # the token cache holds the windows
        assert sum(p.record.n_docs for p in a.cached_partitions()) == a.n_docs


def test_a_store_keeps_its_windows(tmp_path):
    _long_docs(tmp_path / "a.txt", seed=1)
    _long_docs(tmp_path / "b.txt", seed=2)
    _long_docs(tmp_path / "c.txt", seed=3)
    store = tmp_path / "s.zarr"
    st.ingest(str(tmp_path / "a.txt"), store, min_df=1, max_df=1.0, max_doc_tokens=30,
              progress=False)
    st.ingest(str(tmp_path / "b.txt"), store, progress=False)  # the store's own windows
    with pytest.raises(StoreError, match="max_doc_tokens"):
        st.ingest(str(tmp_path / "c.txt"), store, max_doc_tokens=50, progress=False)
    with CooccurrenceStore.open(store) as s:
        assert s.version == 2 and s.config["tokenizer"]["max_doc_tokens"] == 30


def test_inference_reads_whole_documents(tmp_path):
    lines = _long_docs(tmp_path / "a.txt", seed=4)
    st.ingest(str(tmp_path / "a.txt"), tmp_path / "s.zarr", min_df=1, max_df=1.0,
              max_doc_tokens=20, progress=False)
    model = st.AnchorTopicModel(3, method="plain", seed=0, progress=False).fit(
        tmp_path / "s.zarr")
    assert model_tokenizer(model).max_doc_tokens is None
    assert model.transform(lines).shape == (len(lines), 3)


def test_bad_window_sizes_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="max_doc_tokens"):
        Tokenizer(max_doc_tokens=1)
    with pytest.raises(ValueError, match="max_doc_tokens"):
        read_corpus(str(_long_docs_path(tmp_path)),
                    tokenizer=Tokenizer(max_doc_tokens=5, token_pattern=r"\w+")
                    ).iter_chunks().__next__()
    r = CliRunner().invoke(cli_main, ["ingest", str(_long_docs_path(tmp_path)), "--store",
                                      str(tmp_path / "s.zarr"), "--max-doc-tokens", "1"])
    assert r.exit_code != 0 and "--max-doc-tokens" in r.output
    assert "Traceback" not in r.output


def _long_docs_path(tmp_path):
    path = tmp_path / "x.txt"
    if not path.exists():
        _long_docs(path, n_docs=5, seed=9)
    return path
