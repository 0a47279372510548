"""Readers: format detection, partitions, document order and decoding."""

from __future__ import annotations

import gzip
import json
import tarfile

import numpy as np
import pytest

import streamtopic as st
from streamtopic.corpus import detect_format


def test_detect_format_by_name_and_content(tmp_path, kos_docword):
    assert detect_format(kos_docword) == "uci"
    (tmp_path / "doc.txt").write_text("one document\n")
    for name in ("docs.tar.gz", "docs.bin"):  # a tarball by its name, then by its content
        with tarfile.open(tmp_path / name, "w:gz") as tf:
            tf.add(tmp_path / "doc.txt", arcname="doc.txt")
        assert detect_format(str(tmp_path / name)) == "files", name
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    assert detect_format(str(tmp_path / "a.jsonl")) == "jsonl"
    (tmp_path / "noext").write_text('{"text": "hello"}\n')
    assert detect_format(str(tmp_path / "noext")) == "jsonl"
    (tmp_path / "uci_noname").write_text("2\n3\n1\n1 2 3\n")
    assert detect_format(str(tmp_path / "uci_noname")) == "uci"
    (tmp_path / "plain.dat").write_text("some words here\n")
    assert detect_format(str(tmp_path / "plain.dat")) == "text"
    with gzip.open(tmp_path / "g.txt.gz", "wt") as fh:
        fh.write("hello there\n")
    assert detect_format(str(tmp_path / "g.txt.gz")) == "text"
    assert detect_format(str(tmp_path)) == "files"
    with st.corpus.HDF5CorpusWriter(tmp_path / "x.bin") as w:
        import scipy.sparse as sp
        w.append(sp.csr_matrix(np.ones((1, 2), np.int32)), ["ab", "cd"])
    assert detect_format(str(tmp_path / "x.bin")) == "hdf5"


def test_explicit_format_overrides(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "one.txt").write_text("alpha beta\ngamma delta\n")
    (tmp_path / "d" / "two.txt").write_text("eps zeta\n")
    files = st.read_corpus(str(tmp_path / "d"))
    assert sum(c.n_docs for c in files.iter_chunks()) == 2  # one document per file
    lines = st.read_corpus(str(tmp_path / "d"), format="text")
    assert sum(c.n_docs for c in lines.iter_chunks()) == 3  # one document per line


def test_globs_and_bag_partitions(tmp_path):
    for i in range(3):
        (tmp_path / f"part{i}.txt").write_text("\n".join(f"aa{i} bb{j}" for j in range(50)) + "\n")
    corpus = st.read_corpus(str(tmp_path / "part*.txt"), blocksize=200)
    assert [s.path for s in corpus.sources] == sorted(str(p) for p in tmp_path.glob("part*.txt"))
    assert corpus.npartitions >= 6
    bag = corpus.to_bag()
    assert bag.npartitions == corpus.npartitions
    chunks = bag.compute()
    assert sum(c.n_docs for c in chunks) == 150
    assert all(c.n_docs <= 50 for c in chunks)  # partitions hold a bounded number of docs


def test_documents_keep_their_order_and_counts(tmp_path):
    (tmp_path / "c.jsonl").write_text(
        "\n".join(json.dumps({"text": t}) for t in ["xx yy xx", "", "zz"]) + "\n"
    )
    (chunk,) = list(st.read_corpus(str(tmp_path / "c.jsonl")).iter_chunks())
    dense = chunk.counts.toarray()
    col = {t: i for i, t in enumerate(chunk.terms)}
    assert dense.shape[0] == 3
    assert dense[0, col["xx"]] == 2 and dense[0, col["yy"]] == 1
    assert dense[1].sum() == 0 and dense[2, col["zz"]] == 1


def test_tar_members_read_in_archive_order(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    names = ["b", "a", "c"]
    for n in names:
        (src / n).write_text(f"word{n} word{n}")
    with tarfile.open(tmp_path / "t.tar.gz", "w:gz") as tf:
        for n in names:
            tf.add(src / n, arcname=f"x/{n}")
    chunks = list(st.read_corpus(str(tmp_path / "t.tar.gz")).iter_chunks())
    terms = [chunks[0].terms[i] for i in chunks[0].counts.indices]
    assert terms == ["wordb", "worda", "wordc"]


def test_undecodable_bytes_replaced_and_counted(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9 ok\nfine words\n\xff\xfe yonder\n")
    chunks = list(st.read_corpus(str(tmp_path / "bad.txt")).iter_chunks())
    assert sum(c.n_replaced for c in chunks) == 3
    assert "caf" in chunks[0].terms and "yonder" in chunks[0].terms


def test_bundled_corpus_is_kos():
    path = st.corpus.bundled_corpus()
    assert path.endswith("docword.kos.txt.gz")
    assert detect_format(path) == "uci"
    corpus = st.read_corpus(path)
    assert sum(c.n_docs for c in corpus.iter_chunks()) == 3430


def test_unknown_format_rejected(tmp_path):
    (tmp_path / "x.txt").write_text("a b\n")
    with pytest.raises(ValueError, match="format='nope'"):
        st.read_corpus(str(tmp_path / "x.txt"), format="nope")


def test_strip_headers_drops_the_leading_header_block(tmp_path):
    docs = {
        "a": "From: alice@example.org\nSubject: hdrone\nLines: 2\n\nbody words\n\nextra body\n",
        "b": "Organization: hdrtwo\r\nSubject: hdrthree\r\n\r\nbody crlf\r\n",
        "c": "noblank line here\nsecond line words\n",  # no empty line: kept whole
    }
    src = tmp_path / "src"
    (src / "grp").mkdir(parents=True)
    for n, text in docs.items():
        (src / "grp" / n).write_bytes(text.encode())
    with tarfile.open(tmp_path / "t.tar.gz", "w:gz") as tf:
        for n in docs:
            tf.add(src / "grp" / n, arcname=f"train/grp/{n}")

    def words(path, strip, keep_subject=True):
        corpus = st.read_corpus(str(path), strip_headers=strip, keep_subject=keep_subject)
        assert all(s.strip_headers == strip for s in corpus.sources)
        out = []
        for ch in corpus.iter_chunks():
            for row in ch.counts:
                pairs = zip(row.indices, row.data, strict=True)
                out.append({ch.terms[i]: int(c) for i, c in pairs})
        return out

    for path in (src, tmp_path / "t.tar.gz"):
        kept = words(path, False)
        assert "hdrone" in kept[0] and "lines" in kept[0] and "hdrthree" in kept[1]
        a, b, c = words(path, True, keep_subject=False)
        assert a == {"body": 2, "words": 1, "extra": 1}  # an empty line in the body stays body
        assert b == {"body": 1, "crlf": 1}
        assert c == kept[2] and c["noblank"] == 1
        # the default keeps the Subject's text
        assert words(path, True)[:2] == [{**a, "hdrone": 1}, {**b, "hdrthree": 1}]


def test_strip_headers_recorded_and_reread(tmp_path):
    from streamtopic.corpus import read_as_recorded, recorded_corpus

    d = tmp_path / "docs"
    d.mkdir()
    for i in range(4):
        (d / f"m{i}").write_text(f"Subject: hdr{i}\n\nalpha beta gamma alpha beta\n")
    st.ingest(str(d), str(tmp_path / "s.zarr"), min_df=1, max_df=1.0, progress=False,
              strip_headers=True)
    store = st.CooccurrenceStore.open(str(tmp_path / "s.zarr"))
    assert sorted(store.vocab) == ["alpha", "beta", "gamma"]
    assert store.sources[0]["strip_headers"] is True
    corpus = recorded_corpus(store)  # from the token cache: the text as it was read
    assert {s.format for s in corpus.sources} == {"cache"}
    terms = {t for ch in corpus.iter_chunks() for t in ch.terms}
    assert terms == {"alpha", "beta", "gamma"}
    again = read_as_recorded(store.config, store.sources)  # the input read again
    assert [s.strip_headers for s in again.sources] == [True]
    assert {t for ch in again.iter_chunks() for t in ch.terms} == {"alpha", "beta", "gamma"}
