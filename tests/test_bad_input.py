"""Malformed input, bad parameters and bad store paths.

Every case checks three things: the error type, that the message names the file (and the line,
where there is one), and that a store which existed before is exactly as it was afterwards.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re

import dask
import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic
from streamtopic import CooccurrenceStore, CorpusError, StoreError
from streamtopic.cli import main as cli_main
from streamtopic.cooccurrence import DuplicateInputError

# Terms of the stores and corpora below: all survive tokenisation (2+ word characters).
WORDS = [
    "apple", "brook", "cedar", "delta", "ember", "fjord", "grove", "heron",
    "inlet", "juniper", "kelp", "lichen", "maple", "nectar", "orchid", "pebble",
]
W = len(WORDS)
LOOSE = {"min_df": 1, "max_df": 1.0}  # no pruning on tiny corpora
SPLIT_BLOCKSIZE = 200  # bytes per partition: a few hundred-line file becomes many partitions


# ----------------------------------------------------------------------------- helpers


def run_ingest(inputs, store, **kwargs):
    """The Python API on the threaded scheduler, quietly."""
    kwargs.setdefault("progress", False)
    with dask.config.set(scheduler="threads"):
        return streamtopic.ingest(inputs, store, **kwargs)


def write_text_corpus(path, n_docs, seed, words=WORDS, per_doc=(3, 9)):
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as fh:
        for _ in range(n_docs):
            n = int(rng.integers(*per_doc))
            fh.write(" ".join(rng.choice(words, n)) + "\n")
    return str(path)


def tree_digest(root):
    """Relative path -> SHA-256 of every file below ``root``."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def snapshot(path):
    with CooccurrenceStore.open(path) as s, dask.config.set(scheduler="threads"):
        out = {
            "version": s.version,
            "n_docs": s.n_docs,
            "n_tokens": s.n_tokens,
            "Q_sum": s.Q_sum.compute(),
            "sources": s.sources,
            "vocab": list(s.vocab),
            "word_counts": s.word_counts.tolist(),
        }
    out["files"] = tree_digest(path)  # the reader's lease is gone once it is closed
    return out


def assert_unchanged(path, before):
    after = snapshot(path)
    assert after["version"] == before["version"]
    assert after["n_docs"] == before["n_docs"]
    assert after["n_tokens"] == before["n_tokens"]
    np.testing.assert_array_equal(after["Q_sum"], before["Q_sum"])
    assert float(after["Q_sum"].sum()) == float(before["Q_sum"].sum())
    assert after["sources"] == before["sources"]
    assert after["vocab"] == before["vocab"]
    assert after["word_counts"] == before["word_counts"]
    # no staging version, no writer lock, nothing else left behind
    assert after["files"] == before["files"]


def assert_names(err, path, line=None):
    """The error names ``path`` and, if given, ``line`` as 'path:line: ...'."""
    msg = str(err)
    assert str(path) in msg
    assert err.path == str(path)
    if line is not None:
        assert err.line == line, msg
        assert f"{path}:{line}:" in msg, msg


def no_debris(parent, name):
    """No temporary store of ``name`` is left in ``parent``."""
    return [e for e in os.listdir(parent) if e.startswith(f".{name}.tmp")]


@pytest.fixture
def base_store(tmp_path):
    """A good store (version 1) built from a small text corpus, and its snapshot."""
    corpus = write_text_corpus(tmp_path / "good.txt", 40, seed=1)
    store = str(tmp_path / "store")
    report = run_ingest([corpus], store, **LOOSE)
    assert report.version == 1 and report.n_docs == 40
    return store, snapshot(store)


# ----------------------------------------------------------------------------- UCI


def uci_lines(n_docs=80, seed=3):
    """A valid UCI docword as a list of lines (header + entries, sorted by docID)."""
    rng = np.random.default_rng(seed)
    body = []
    for d in range(1, n_docs + 1):
        ws = np.sort(rng.choice(np.arange(1, W + 1), size=int(rng.integers(3, 7)), replace=False))
        for w in ws:
            body.append(f"{d} {w} {int(rng.integers(1, 4))}")
    return [str(n_docs), str(W), str(len(body))] + body


def _entry(lines, i):
    return [int(x) for x in lines[i].split()]


def _target(lines):
    """File index (0-based) of the entry to corrupt: late in the file (a later partition when
    the file is split), and not the first entry of its document."""
    i = int(len(lines) * 0.85)
    while _entry(lines, i)[0] != _entry(lines, i - 1)[0]:
        i += 1
    return i


def _set(lines, i, text):
    lines[i] = text
    return i + 1


def m_header_d(lines):
    lines[0] = "eighty"
    return 1, r"UCI header.*D \(number of documents\).*integer"


def m_header_w(lines):
    lines[1] = "16x"
    return 2, r"UCI header.*W \(vocabulary size\).*integer"


def m_header_nnz(lines):
    lines[2] = "3.5e2"
    return 3, r"UCI header.*NNZ.*integer"


def m_header_truncated(lines):
    del lines[2:]
    return 3, r"UCI header.*end of file"


def m_two_fields(lines):
    i = _target(lines)
    d, w, _ = _entry(lines, i)
    return _set(lines, i, f"{d} {w}"), r"three non-negative integers"


def m_non_numeric(lines):
    i = _target(lines)
    d, w, _ = _entry(lines, i)
    return _set(lines, i, f"{d} {w} x"), r"three non-negative integers"


def m_negative(lines):
    i = _target(lines)
    d, w, _ = _entry(lines, i)
    return _set(lines, i, f"{d} {w} -2"), r"non-negative|positive"


def m_zero(lines):
    i = _target(lines)
    d, w, _ = _entry(lines, i)
    return _set(lines, i, f"{d} {w} 0"), r"count must be a positive integer"


def m_doc_gt_d(lines):
    i = _target(lines)
    d, w, c = _entry(lines, i)
    return _set(lines, i, f"{int(lines[0]) + 1} {w} {c}"), r"docID out of range 1\.\.80"


def m_word_gt_w(lines):
    i = _target(lines)
    d, w, c = _entry(lines, i)
    return _set(lines, i, f"{d} {W + 1} {c}"), rf"wordID out of range 1\.\.{W}"


def m_word_zero(lines):
    i = _target(lines)
    d, w, c = _entry(lines, i)
    return _set(lines, i, f"{d} 0 {c}"), rf"wordID out of range 1\.\.{W}"


def m_unsorted(lines):
    # an entry of document 1 in the middle of a late document: the run breaks at line i
    i = _target(lines)
    d, w, c = _entry(lines, i)
    return _set(lines, i, f"1 {w} {c}"), r"sorted by docID"


def m_nnz_mismatch(lines):
    lines[2] = str(int(lines[2]) + 1)
    return 3, r"NNZ=\d+ .*holds \d+"


UCI_LINE_CASES = {
    "header-D-not-int": m_header_d,
    "header-W-not-int": m_header_w,
    "header-NNZ-not-int": m_header_nnz,
    "header-truncated": m_header_truncated,
    "two-fields": m_two_fields,
    "non-numeric-count": m_non_numeric,
    "negative-count": m_negative,
    "zero-count": m_zero,
    "docID-gt-D": m_doc_gt_d,
    "wordID-gt-W": m_word_gt_w,
    "wordID-zero": m_word_zero,
    "unsorted-docID": m_unsorted,
    "NNZ-mismatch": m_nnz_mismatch,
}

LAYOUTS = {
    # name: (gzip?, blocksize)
    "plain": (False, None),
    "gz": (True, None),
    "plain-split": (False, SPLIT_BLOCKSIZE),
    "gz-split": (True, SPLIT_BLOCKSIZE),
}


def write_uci(directory, lines, gz, vocab=WORDS, name="bad"):
    data = ("\n".join(lines) + "\n").encode()
    path = os.path.join(directory, f"docword.{name}.txt" + (".gz" if gz else ""))
    if gz:
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        with open(path, "wb") as fh:
            fh.write(data)
    if vocab is not None:
        with open(os.path.join(directory, f"vocab.{name}.txt"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(vocab) + "\n")
    return path


def test_uci_fixture_is_valid(tmp_path, base_store):
    """The unmodified UCI file ingests in every layout (so each case below fails for its
    one defect only), and a split layout really has several partitions."""
    store, _ = base_store
    for k, (layout, (gz, blocksize)) in enumerate(LAYOUTS.items()):
        d = tmp_path / layout
        d.mkdir()
        path = write_uci(str(d), uci_lines(), gz, name=f"ok{k}")
        corpus = streamtopic.read_corpus(path, blocksize=blocksize)
        if blocksize is not None:
            assert corpus.npartitions >= 5
        report = run_ingest([path], store, blocksize=blocksize)
        assert report.n_docs == 80


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", list(UCI_LINE_CASES))
def test_uci_bad_line(tmp_path, base_store, case, layout):
    store, before = base_store
    gz, blocksize = LAYOUTS[layout]
    lines = uci_lines()
    line, pattern = UCI_LINE_CASES[case](lines)
    path = write_uci(str(tmp_path), lines, gz)
    with pytest.raises(CorpusError) as info:
        run_ingest([path], store, blocksize=blocksize)
    assert_names(info.value, path, line)
    assert re.search(pattern, str(info.value)), str(info.value)
    assert_unchanged(store, before)


@pytest.mark.parametrize("layout", ["plain", "gz-split"])
@pytest.mark.parametrize(
    "case", ["header-W-not-int", "two-fields", "wordID-gt-W", "unsorted-docID", "NNZ-mismatch"]
)
def test_uci_bad_line_new_store(tmp_path, case, layout):
    """Into a store that does not exist yet: the error surfaces in the vocabulary pass (or at
    the NNZ check) and no store is created."""
    gz, blocksize = LAYOUTS[layout]
    lines = uci_lines()
    line, pattern = UCI_LINE_CASES[case](lines)
    path = write_uci(str(tmp_path), lines, gz)
    store = tmp_path / "new"
    with pytest.raises(CorpusError) as info:
        run_ingest([path], str(store), blocksize=blocksize, **LOOSE)
    assert_names(info.value, path, line)
    assert re.search(pattern, str(info.value)), str(info.value)
    assert not store.exists()
    assert no_debris(tmp_path, "new") == []


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_uci_vocab_length_differs_from_w(tmp_path, base_store, layout):
    store, before = base_store
    gz, blocksize = LAYOUTS[layout]
    path = write_uci(str(tmp_path), uci_lines(), gz, vocab=WORDS[:-1])
    vocab_path = str(tmp_path / "vocab.bad.txt")
    with pytest.raises(CorpusError) as info:
        run_ingest([path], store, blocksize=blocksize)
    msg = str(info.value)
    assert vocab_path in msg
    assert f"{W - 1} terms" in msg and f"W={W}" in msg
    assert_unchanged(store, before)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_uci_vocab_missing(tmp_path, base_store, layout):
    store, before = base_store
    gz, blocksize = LAYOUTS[layout]
    path = write_uci(str(tmp_path), uci_lines(), gz, vocab=None)
    with pytest.raises(CorpusError) as info:
        run_ingest([path], store, blocksize=blocksize)
    assert_names(info.value, path)
    # says where it looked
    assert str(tmp_path / "vocab.bad.txt") in str(info.value)
    assert_unchanged(store, before)


def test_uci_vocab_option_missing_file(tmp_path, base_store):
    store, before = base_store
    path = write_uci(str(tmp_path), uci_lines(), False, vocab=None)
    missing = str(tmp_path / "elsewhere" / "words.txt")
    with pytest.raises(CorpusError) as info:
        run_ingest([path], store, vocab=missing)
    assert missing in str(info.value)
    assert_unchanged(store, before)


def _partition_starts(path, blocksize):
    corpus = streamtopic.read_corpus(path, blocksize=blocksize)
    return [p.start for p in corpus.parts]


def test_uci_unsorted_across_partition_boundary(tmp_path, base_store):
    """A document whose entries are split by another document, with the break exactly at a
    partition boundary. Each partition on its own is sorted; the file is not, and reading it
    as is would count one document twice. It must be refused like any unsorted file, naming
    the first out-of-order line."""
    store, before = base_store
    lines = uci_lines()
    data = ("\n".join(lines) + "\n").encode()
    plain = write_uci(str(tmp_path), lines, False, name="probe")
    starts = _partition_starts(plain, SPLIT_BLOCKSIZE)
    # line index (0-based, in ``lines``) at each partition start
    line_at = {data.count(b"\n", 0, s): s for s in starts}
    # a boundary with a two-digit docID on both sides, well inside the file
    k = next(
        i for i in sorted(line_at)
        if i > 3 and _entry(lines, i - 1)[0] >= 12 and _entry(lines, i)[0] < 99
    )
    d_prev = _entry(lines, k - 1)[0]  # last document before the boundary
    # relabel the first document after the boundary as the one before d_prev (same width):
    # document d_prev - 1 then appears on both sides of document d_prev
    d_next = _entry(lines, k)[0]
    relabeled = d_prev - 1
    j = k
    while j < len(lines) and _entry(lines, j)[0] == d_next:
        _, w, c = _entry(lines, j)
        lines[j] = f"{relabeled} {w} {c}"
        j += 1
    path = write_uci(str(tmp_path), lines, False)
    # same byte layout, so the same partition boundaries
    assert _partition_starts(path, SPLIT_BLOCKSIZE) == starts
    with pytest.raises(CorpusError) as info:
        run_ingest([path], store, blocksize=SPLIT_BLOCKSIZE)
    assert_names(info.value, path, k + 1)
    assert "sorted by docID" in str(info.value)
    assert_unchanged(store, before)


def test_uci_fixed_input_retried_in_same_process(tmp_path, base_store):
    """After an error, the user fixes the files and retries in the same Python session: the
    fixed content is read (nothing stale is kept about a file from the failed attempt)."""
    store, before = base_store
    lines = uci_lines()
    good_nnz = lines[2]
    lines[2] = str(int(good_nnz) + 5)
    path = write_uci(str(tmp_path), lines, False, vocab=WORDS[:-1])
    with pytest.raises(CorpusError, match=r"W=16"):
        run_ingest([path], store)
    # fix the vocabulary: now the NNZ header is the problem
    write_uci(str(tmp_path), lines, False, vocab=WORDS)
    with pytest.raises(CorpusError, match=r"NNZ"):
        run_ingest([path], store)
    assert_unchanged(store, before)
    # fix the header too: the ingest succeeds
    lines[2] = good_nnz
    write_uci(str(tmp_path), lines, False, vocab=WORDS)
    report = run_ingest([path], store)
    assert report.version == 2 and report.n_docs == 80


# ----------------------------------------------------------------------------- JSON Lines


def jsonl_lines(n_docs=60, seed=5):
    rng = np.random.default_rng(seed)
    return [
        json.dumps({"id": i, "text": " ".join(rng.choice(WORDS, int(rng.integers(3, 8))))})
        for i in range(n_docs)
    ]


def j_invalid(lines, i):
    lines[i] = lines[i][:-1]  # drop the closing brace
    return r"invalid JSON"


def j_not_object(lines, i):
    lines[i] = json.dumps(["apple", "brook"])
    return r"must be an object"


def j_missing(lines, i):
    lines[i] = json.dumps({"id": i, "body": "apple brook cedar"})
    return r"'text' is missing"


def j_not_string(lines, i):
    lines[i] = json.dumps({"id": i, "text": 42})
    return r"'text' is not a string"


JSONL_CASES = {
    "invalid-json": j_invalid,
    "not-an-object": j_not_object,
    "missing-text": j_missing,
    "non-string-text": j_not_string,
}


def write_jsonl(directory, lines, gz, name="docs"):
    data = ("\n".join(lines) + "\n").encode()
    path = os.path.join(directory, f"{name}.jsonl" + (".gz" if gz else ""))
    opener = gzip.open if gz else open
    with opener(path, "wb") as fh:
        fh.write(data)
    return path


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", list(JSONL_CASES))
def test_jsonl_bad_record(tmp_path, base_store, case, layout):
    store, before = base_store
    gz, blocksize = LAYOUTS[layout]
    lines = jsonl_lines()
    i = int(len(lines) * 0.8)
    pattern = JSONL_CASES[case](lines, i)
    path = write_jsonl(str(tmp_path), lines, gz)
    if blocksize is not None:
        assert streamtopic.read_corpus(path, blocksize=blocksize).npartitions >= 5
    with pytest.raises(CorpusError) as info:
        run_ingest([path], store, blocksize=blocksize)
    assert_names(info.value, path, i + 1)
    assert re.search(pattern, str(info.value)), str(info.value)
    assert_unchanged(store, before)


@pytest.mark.parametrize("case", list(JSONL_CASES))
def test_jsonl_bad_record_new_store(tmp_path, case):
    lines = jsonl_lines()
    i = int(len(lines) * 0.8)
    pattern = JSONL_CASES[case](lines, i)
    path = write_jsonl(str(tmp_path), lines, False)
    store = tmp_path / "new"
    with pytest.raises(CorpusError) as info:
        run_ingest([path], str(store), blocksize=SPLIT_BLOCKSIZE, **LOOSE)
    assert_names(info.value, path, i + 1)
    assert re.search(pattern, str(info.value))
    assert not store.exists()


def test_jsonl_custom_text_field_missing(tmp_path, base_store):
    store, before = base_store
    path = write_jsonl(str(tmp_path), jsonl_lines(), False)
    with pytest.raises(CorpusError) as info:
        run_ingest([path], store, text_field="body")
    assert_names(info.value, path, 1)
    assert "'body' is missing" in str(info.value)
    assert_unchanged(store, before)


# ----------------------------------------------------------------------------- inputs


def test_missing_input_file(tmp_path, base_store):
    store, before = base_store
    missing = str(tmp_path / "nowhere.txt")
    with pytest.raises(CorpusError) as info:
        run_ingest([missing], store)
    assert_names(info.value, missing)
    assert "no such file" in str(info.value)
    assert_unchanged(store, before)


def test_missing_input_among_good_ones(tmp_path, base_store):
    store, before = base_store
    good = write_text_corpus(tmp_path / "more.txt", 10, seed=9)
    missing = str(tmp_path / "nowhere.txt")
    with pytest.raises(CorpusError) as info:
        run_ingest([good, missing], store)
    assert_names(info.value, missing)
    assert_unchanged(store, before)


def test_glob_matching_nothing(tmp_path, base_store):
    store, before = base_store
    pattern = str(tmp_path / "corpus-*.txt")
    with pytest.raises(CorpusError) as info:
        run_ingest([pattern], store)
    assert_names(info.value, pattern)
    assert "no file matches" in str(info.value)
    assert_unchanged(store, before)


def test_empty_text_file_existing_store(tmp_path, base_store):
    store, before = base_store
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(CorpusError) as info:
        run_ingest([str(empty)], store)
    assert str(empty) in str(info.value)
    assert "empty" in str(info.value) or "no documents" in str(info.value)
    assert_unchanged(store, before)


def test_empty_text_file_new_store(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    store = tmp_path / "new"
    with pytest.raises(CorpusError) as info:
        run_ingest([str(empty)], str(store), **LOOSE)
    assert str(empty) in str(info.value)
    assert not store.exists()
    assert no_debris(tmp_path, "new") == []


def test_no_document_with_two_tokens(tmp_path):
    """Every document has fewer than 2 in-vocabulary tokens: nothing to count."""
    path = tmp_path / "singletons.txt"
    path.write_text("\n".join(WORDS) + "\n\n", encoding="utf-8")
    store = tmp_path / "new"
    with pytest.raises(CorpusError) as info:
        run_ingest([str(path)], str(store), **LOOSE)
    assert str(path) in str(info.value)
    assert "2 or more" in str(info.value)
    assert not store.exists()
    assert no_debris(tmp_path, "new") == []


def test_no_document_with_two_tokens_fixed_vocab(tmp_path):
    """Documents are long, but no two of their tokens are in the fixed vocabulary."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("apple\nzebra\n", encoding="utf-8")
    path = tmp_path / "corpus.txt"
    path.write_text("apple brook cedar\ndelta apple ember\nzebra fjord\n", encoding="utf-8")
    store = tmp_path / "new"
    with pytest.raises(CorpusError) as info:
        run_ingest([str(path)], str(store), vocab=str(vocab))
    assert str(path) in str(info.value)
    assert not store.exists()


def test_duplicate_input(tmp_path, base_store):
    store, before = base_store
    with pytest.raises(DuplicateInputError) as info:
        run_ingest([str(tmp_path / "good.txt")], store)
    assert str(tmp_path / "good.txt") in str(info.value)
    assert isinstance(info.value, StoreError)
    assert_unchanged(store, before)


# ----------------------------------------------------------------------------- store paths


def test_store_path_is_plain_directory(tmp_path):
    corpus = write_text_corpus(tmp_path / "c.txt", 10, seed=2)
    target = tmp_path / "notastore"
    target.mkdir()
    (target / "notes.txt").write_text("keep me\n")
    before = tree_digest(target)
    with pytest.raises(StoreError) as info:
        run_ingest([corpus], str(target), **LOOSE)
    assert str(target) in str(info.value)
    assert "not a streamtopic" in str(info.value)
    assert tree_digest(target) == before


def test_store_path_is_plain_file(tmp_path):
    corpus = write_text_corpus(tmp_path / "c.txt", 10, seed=2)
    target = tmp_path / "notastore.bin"
    target.write_bytes(b"some data\n")
    with pytest.raises(StoreError) as info:
        run_ingest([corpus], str(target), **LOOSE)
    assert str(target) in str(info.value)
    assert target.read_bytes() == b"some data\n"


def test_store_path_foreign_zarr_group(tmp_path):
    """A zarr group that is not a co-occurrence store is refused and left alone."""
    import zarr

    target = tmp_path / "foreign"
    g = zarr.open_group(str(target), mode="w")
    g.attrs["owner"] = "someone else"
    before = tree_digest(target)
    corpus = write_text_corpus(tmp_path / "c.txt", 10, seed=2)
    with pytest.raises(StoreError) as info:
        run_ingest([corpus], str(target), **LOOSE)
    assert str(target) in str(info.value)
    assert tree_digest(target) == before


def test_open_non_store(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(StoreError, match="not a streamtopic"):
        CooccurrenceStore.open(tmp_path / "plain")
    with pytest.raises(StoreError, match="no such store"):
        CooccurrenceStore.open(tmp_path / "missing")
    assert not CooccurrenceStore.is_store(tmp_path / "plain")


# ----------------------------------------------------------------------------- undecodable bytes


def _corpus_with_bad_bytes(path, n_docs=60):
    """A text corpus with undecodable bytes on several lines; returns the number of bytes
    that cannot be decoded."""
    rng = np.random.default_rng(11)
    lines = [" ".join(rng.choice(WORDS, 5)).encode() for _ in range(n_docs)]
    lines[3] = b"apple \xff brook cedar"  # 1 invalid start byte
    lines[17] = b"delta\xfe\xfeember fjord"  # 2 invalid bytes inside a run of letters
    lines[40] = b"grove \xe2\x82 heron inlet"  # 2: a truncated 3-byte sequence
    lines[55] = b"\x80juniper kelp lichen \xc3"  # 2: a lone continuation, a truncated lead
    with open(path, "wb") as fh:
        fh.write(b"\n".join(lines) + b"\n")
    return 7


@pytest.mark.parametrize("blocksize", [None, SPLIT_BLOCKSIZE])
def test_undecodable_bytes_are_replaced_and_counted(tmp_path, base_store, blocksize):
    store, before = base_store
    path = str(tmp_path / "latin.txt")
    n_bad = _corpus_with_bad_bytes(path)
    report = run_ingest([path], store, blocksize=blocksize)
    assert report.version == 2
    assert report.n_replaced_bytes == n_bad
    assert report.n_docs == 60  # every line is still a document of >= 2 tokens
    info = CooccurrenceStore.open(store).info()
    assert info["n_replaced_bytes"] == n_bad
    # the replacement never joins the letters around it into one token
    s = CooccurrenceStore.open(store)
    assert all("\ufffd" not in t for t in s.vocab)


def test_undecodable_bytes_new_store(tmp_path):
    path = str(tmp_path / "latin.txt")
    n_bad = _corpus_with_bad_bytes(path)
    store = str(tmp_path / "new")
    report = run_ingest([path], store, blocksize=SPLIT_BLOCKSIZE, **LOOSE)
    assert report.n_replaced_bytes == n_bad  # counted once, not once per pass
    s = CooccurrenceStore.open(store)
    assert s.info()["n_replaced_bytes"] == n_bad
    assert "delta" in s.vocab and "ember" in s.vocab
    assert all("\ufffd" not in t for t in s.vocab)


# ----------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"min_df": 0, "max_df": 1.0}, "min_df"),
        ({"min_df": 1, "max_df": 0}, "max_df"),
        ({"min_df": 1, "max_df": 0.0}, "max_df"),
        ({"min_df": 1, "max_df": 1.5}, "max_df"),
        ({"min_df": 1, "max_df": 1.0, "keep_n": 0}, "keep_n"),
        ({"min_df": 1, "max_df": 1.0, "keep_n": -3}, "keep_n"),
        ({"format": "nope"}, "format"),
    ],
)
def test_bad_parameters_new_store(tmp_path, kwargs, name):
    corpus = write_text_corpus(tmp_path / "c.txt", 10, seed=2)
    store = tmp_path / "new"
    with pytest.raises(ValueError) as info:
        run_ingest([corpus], str(store), **kwargs)
    assert not isinstance(info.value, CorpusError)
    assert name in str(info.value)
    assert not store.exists()
    assert no_debris(tmp_path, "new") == []


@pytest.mark.parametrize(
    "kwargs",
    [{"min_df": 1}, {"max_df": 0.9}, {"keep_n": 10}, {"keep_n": None}, {"format": "nope"}],
    ids=["min_df", "max_df", "keep_n", "keep_n-None", "format"],
)
def test_bad_parameters_existing_store(tmp_path, base_store, kwargs):
    """Pruning options for an existing store: its vocabulary is frozen."""
    store, before = base_store
    corpus = write_text_corpus(tmp_path / "more.txt", 10, seed=2)
    with pytest.raises(ValueError) as info:
        run_ingest([corpus], store, **kwargs)
    name = next(iter(kwargs))
    assert name in str(info.value)
    if name != "format":
        assert "frozen" in str(info.value)
    assert_unchanged(store, before)


def test_store_usable_after_failed_ingest(tmp_path, base_store):
    """A failed ingest releases the writer lock: the next good ingest goes through."""
    store, before = base_store
    lines = uci_lines()
    m_zero(lines)
    bad = write_uci(str(tmp_path), lines, False)
    with pytest.raises(CorpusError):
        run_ingest([bad], store, blocksize=SPLIT_BLOCKSIZE)
    assert_unchanged(store, before)
    good = write_text_corpus(tmp_path / "more.txt", 10, seed=4)
    report = run_ingest([good], store)
    assert report.version == 2
    s = CooccurrenceStore.open(store)
    assert s.n_docs == before["n_docs"] + report.n_docs
    assert [e["path"] for e in s.sources] == [before["sources"][0]["path"], good]


# ----------------------------------------------------------------------------- CLI


def _cli(args):
    return CliRunner().invoke(cli_main, args, catch_exceptions=True)


def _assert_clean_failure(result, *needles):
    assert result.exit_code != 0, result.output
    # a clean message, not a crash
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in result.output, result.output


def test_cli_uci_bad_line(tmp_path, base_store):
    store, before = base_store
    lines = uci_lines()
    line, _ = m_word_gt_w(lines)
    path = write_uci(str(tmp_path), lines, True)
    result = _cli([
        "ingest", path, "--store", store, "--local", "threads", "-q",
        "--blocksize", str(SPLIT_BLOCKSIZE),
    ])
    _assert_clean_failure(result, f"{path}:{line}:", "wordID out of range")
    assert_unchanged(store, before)


def test_cli_jsonl_invalid(tmp_path, base_store):
    store, before = base_store
    lines = jsonl_lines()
    j_invalid(lines, 7)
    path = write_jsonl(str(tmp_path), lines, False)
    result = _cli(["ingest", path, "--store", store, "--local", "threads", "-q"])
    _assert_clean_failure(result, f"{path}:8:", "invalid JSON")
    assert_unchanged(store, before)


def test_cli_missing_input(tmp_path, base_store):
    store, before = base_store
    missing = str(tmp_path / "nowhere.txt")
    result = _cli(["ingest", missing, "--store", store, "--local", "threads", "-q"])
    _assert_clean_failure(result, missing, "no such file")
    assert_unchanged(store, before)


def test_cli_store_is_not_a_store(tmp_path):
    corpus = write_text_corpus(tmp_path / "c.txt", 10, seed=2)
    target = tmp_path / "plain"
    target.mkdir()
    (target / "x.txt").write_text("x\n")
    result = _cli([
        "ingest", corpus, "--store", str(target), "--local", "threads", "-q",
        "--min-df", "1", "--max-df", "1.0",
    ])
    _assert_clean_failure(result, str(target))
    assert sorted(os.listdir(target)) == ["x.txt"]


def test_cli_frozen_vocabulary(tmp_path, base_store):
    store, before = base_store
    corpus = write_text_corpus(tmp_path / "more.txt", 10, seed=2)
    result = _cli(["ingest", corpus, "--store", store, "--local", "threads", "-q", "--min-df", "2"])
    _assert_clean_failure(result, "frozen", "min_df")
    assert_unchanged(store, before)


@pytest.mark.parametrize("kind", ["directory", "file", "missing"])
def test_cli_info_on_non_store(tmp_path, kind):
    target = tmp_path / "thing"
    if kind == "directory":
        target.mkdir()
        (target / "x.txt").write_text("x\n")
    elif kind == "file":
        target.write_text("x\n")
    result = _cli(["info", str(target)])
    _assert_clean_failure(result, str(target))
    assert "store" in result.output


def test_cli_info_on_store(base_store):
    """Control for the above: info on a real store succeeds."""
    store, before = base_store
    result = _cli(["info", "--json", store])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["version"] == before["version"]


def test_console_entry_point_exit_codes_and_output(base_store, tmp_path):
    """The installed command (``run``: ``main`` and a fast exit) keeps click's exit statuses
    and flushes all of its output before it ends."""
    import subprocess
    import sys

    store, before = base_store

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "streamtopic", *args],
                              capture_output=True, text=True, timeout=120)

    ok = cli("info", "--json", store)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["version"] == before["version"]  # complete, parseable
    missing = cli("info", str(tmp_path / "nothing"))
    assert missing.returncode == 1 and "no such store" in missing.stderr
    usage = cli("info")
    assert usage.returncode == 2 and "Usage" in usage.stderr
    assert cli("--help").returncode == 0
