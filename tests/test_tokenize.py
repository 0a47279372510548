"""The compiled tokenizer (``streamtopic._tokenize``) against the Python rules it replaces.

The reference is :meth:`Tokenizer.tokens_and_length` (and :meth:`Tokenizer.clean` for the text
the rules leave): every 20 Newsgroups message with the default tokenizer, a sample with the
other configurations, adversarial documents from hypothesis, and the :class:`DocChunk` s of
the readers with the kernel and with the Python path (``kernel_flags`` patched to None).
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import streamtopic as st_
from streamtopic import _tokenize as kt
from streamtopic.inference import document_counts
from streamtopic.vocabulary import DEFAULT_TOKEN_PATTERN, LEGACY_TOKEN_PATTERN, Tokenizer

CONFIGS = {
    "default": Tokenizer(),
    "legacy": Tokenizer(token_pattern=LEGACY_TOKEN_PATTERN, stop_words="none",
                        drop_encoded=False, drop_addresses=False),
    "legacy-dropping": Tokenizer(token_pattern=LEGACY_TOKEN_PATTERN),
    "no-drop": Tokenizer(drop_encoded=False, drop_addresses=False),
    "no-lowercase": Tokenizer(lowercase=False, stop_words=("The", "the", "and")),
    "encoded-only": Tokenizer(drop_addresses=False, stop_words="none"),
    "addresses-only": Tokenizer(drop_encoded=False),
}


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def kernel_tokens(tokenizer: Tokenizer, docs: Sequence[bytes | str | list[str]],
                  batch: int = 2048) -> tuple[list[tuple[list[str], int]], list[list[str]]]:
    """Each document's kept tokens in order and input length from the kernel, in batches
    of ``batch`` documents as a chunk builder makes them (one table for all batches),
    and each batch's terms; bytes go in as a reader gives them."""
    kernel = kt.BatchTokenizer(tokenizer)
    out: list[tuple[list[str], int]] = []
    terms: list[list[str]] = []
    for start in range(0, len(docs), batch):
        for doc in docs[start:start + batch]:
            if isinstance(doc, bytes) and doc.isascii():
                kernel.add_ascii(doc)
            elif isinstance(doc, bytes):
                kernel.add_text(_decode(doc))
            elif isinstance(doc, str):
                kernel.add_text(doc)
            else:
                kernel.add_tokens(doc)
        res = kernel.run()
        terms.append(list(res.terms))
        for d in range(res.lengths.size):
            ids = res.ids[res.indptr[d]:res.indptr[d + 1]]
            out.append(([res.terms[i] for i in ids.tolist()], int(res.lengths[d])))
    return out, terms


def reference(tokenizer: Tokenizer, doc: bytes | str | list[str]) -> tuple[list[str], int]:
    if isinstance(doc, list):
        stops = tokenizer.stop_word_set
        return [t for t in doc if t not in stops], len(doc)
    return tokenizer.tokens_and_length(_decode(doc) if isinstance(doc, bytes) else doc)


def assert_same_as_reference(tokenizer: Tokenizer, docs: Sequence[bytes | str | list[str]],
                             batch: int = 2048) -> None:
    got, terms = kernel_tokens(tokenizer, docs, batch)
    for i, doc in enumerate(docs):
        assert got[i] == reference(tokenizer, doc), f"document {i}: {doc[:300]!r}"
    # each batch's terms: the kept tokens in order of first occurrence
    for b, batch_terms in enumerate(terms):
        seen = dict.fromkeys(t for toks, _ in got[b * batch:(b + 1) * batch] for t in toks)
        assert batch_terms == list(seen)


def assert_same_clean(tokenizer: Tokenizer, raw: bytes) -> None:
    if raw.isascii():
        got = kt.clean_ascii(raw, tokenizer.drop_encoded, tokenizer.drop_addresses)
        assert got == tokenizer.clean(raw.decode("ascii")).encode("ascii"), raw[:300]


# ----------------------------------------------------------------------------- classes


def test_class_tables_are_those_of_python():
    table = kt.unicode_classes()
    word = np.zeros(0x110000, bool)
    letter = np.zeros(0x110000, bool)
    for c in range(0x110000):
        ch = chr(c)
        word[c] = ch.isalnum() or ch == "_"
        letter[c] = word[c] and not ch.isdecimal() and ch != "_"
    assert np.array_equal(table & kt.WORD != 0, word)
    assert np.array_equal(table & kt.LETTER != 0, letter)
    for bit, cls in kt.CLASSES.items():  # ASCII: every class as re reads it
        rx = re.compile(cls)
        assert [bool(kt.ASCII_CLASSES[c] & bit) for c in range(128)] == [
            rx.fullmatch(chr(c)) is not None for c in range(128)], cls
    assert kt.ASCII_CLASSES[0x1C] & kt.SPACE  # \s on str includes the separators


def test_kernel_flags_cover_option_tokenizers_only():
    assert all(kt.kernel_flags(t) is not None for t in CONFIGS.values())
    assert kt.kernel_flags(Tokenizer(token_pattern=DEFAULT_TOKEN_PATTERN + "(?:)")) is None
    assert kt.kernel_flags(Tokenizer(analyzer=str.split)) is None
    with pytest.raises(ValueError, match="Python path"):
        kt.BatchTokenizer(Tokenizer(analyzer=str.split))


# ----------------------------------------------------------------------------- 20 Newsgroups


@pytest.fixture(scope="module")
def news(newsgroups_tar: Path) -> list[bytes]:
    """Every 20 Newsgroups message (train and test), whole and without its header block."""
    from streamtopic.corpus import _strip_header_block

    with tarfile.open(newsgroups_tar, "r:gz") as tar:
        raws = [tar.extractfile(m).read() for m in tar if m.isfile()]
    assert len(raws) == 18846
    return raws + [_strip_header_block(r, True) for r in raws]


@pytest.mark.slow
def test_default_tokenizer_equals_reference_on_every_newsgroups_message(news):
    tokenizer = Tokenizer()
    assert_same_as_reference(tokenizer, news)
    assert sum(not r.isascii() for r in news) > 40  # both paths were taken


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CONFIGS if n != "default"])
def test_other_tokenizers_equal_reference_on_newsgroups_sample(news, name):
    sample = [r for i, r in enumerate(news) if i % 10 == 0 or not r.isascii()]
    assert_same_as_reference(CONFIGS[name], sample, batch=500)


@pytest.mark.slow
def test_cleaned_text_is_byte_for_byte_pythons(news):
    sample = news[::3]
    for name in ("default", "encoded-only", "addresses-only", "no-drop"):
        for raw in sample:
            assert_same_clean(CONFIGS[name], raw)


# ----------------------------------------------------------------------------- adversarial


PIECES = [
    "@", ".", ":", "/", "//", "://", "w", "www.", "http", "In article", "In article <",
    "<", ">", "> ", "writes:", "wrote:", " writes:", "M", "`", "#", "[", "\\", "^", "|",
    "\n", "\r", "\r\n", "\t", " ", "  ", "\x1c", "\x0b", "\x0c", "_", "-", "+", "%", "=",
    "!", "$", "0", "7", "42", "A", "Z", "Q", "ab", "xy", "The", "and", "a" * 15, "b" * 16,
    "é", "İ", "ß", "²", "𝐀", "K", "ǅ", "\ud800", "\x85", "\u2028",
]
UU = [chr(c) for c in range(32, 97)]
uu_lines = st.builds(
    lambda quotes, body, tail: quotes + "M" + body + tail,
    st.sampled_from(["", ">", "> ", ">>", ": ", "|", " "]),
    st.lists(st.sampled_from([*UU, "a", "\t"]), min_size=36, max_size=64).map("".join),
    st.sampled_from(["", " ", "\t", " \t ", "\r", "  "]),
)
printable_lines = st.lists(st.sampled_from(["!", "~", "a", "Z", "0", "@", ".", " ", "\t"]),
                           min_size=25, max_size=40).map("".join)
documents = st.lists(st.one_of(st.sampled_from(PIECES), uu_lines, printable_lines),
                     max_size=40).map("".join)


line_ends = st.sampled_from(["\n", "\r\n", "\r\r\n", "\n\n", "", " ", "\r"])
line_documents = st.lists(
    st.tuples(st.one_of(uu_lines, printable_lines,
                        st.lists(st.sampled_from(PIECES), max_size=8).map("".join)),
              line_ends),
    max_size=8).map(lambda lines: "".join(a + b for a, b in lines))


def edge_documents() -> list[str]:
    """Documents at the edges of each rule: encoded lines of every length around the limits
    with every kind of tail, reply lines with every ending, message ids, addresses, URLs."""
    docs = []
    body = "AB#C D1$E=F,G`H"
    for size in range(28, 64):
        for prefix in ("", ">", "> ", ">>", "> > ", ">  ", " >", " ", "\t", "x"):
            for tail in ("", " ", "  ", "\t", " \t", "\t ", "a"):
                for end in ("\n", "\r\n", "\r\r\n", "", "\r"):
                    line = (body * 5)[:size]
                    docs.append(f"one line\n{prefix}M{line}{tail}{end}two words")
                    docs.append(f"{prefix}{'=' * size}{tail}{end}x")
    for before in ("", "x ", "x_", "xx", "a\n", "(", "\u00e9 ", "1"):
        for word in ("writes:", "wrote:", "writes", "write:", "Writes:", "wrote::"):
            for tail in ("", " ", "\t", " \t ", "\r", "\r ", " \r", "\r\r", "\x0b"):
                for end in ("\n", "", "\nnext line"):
                    docs.append(f"first\n{before}{word}{tail}{end}")
    docs += [f"a {x} b" for x in (
        "In article <a@b>", "In article<a>", "In article  \t<>", "In article <a b>",
        "In article <a", "In article \x1c<x>", "In articleX <a>", "in article <a>",
        "In article <<a>>", "In article <a>In article <b>", "In article <a writes:>",
        "InIn article<x>article <y>", "a@b", "a.b@c.d", "@b", "a@", "a@@b", "x.y+z@d-e.f.",
        "@a..b", "a@b.c.d-e_f.g", "a!b@c$d", "(a@b)", "a@b@c", "a%b=c@d", "a@.b", "a@-b.-c",
        "http://x y", "xhttp://y", "_http://y", "1http://y", "h://", "a+b.c-d://e f", "www.x",
        "xwww.y", "awww.", "www", ":// x", "x://", "http:/x", "ftp://a\x1cb", "HTTP://X",
        "a.http://b", "-http://c", "www.www.x", "w://", "\u00e9http://x", "a" * 15, "b" * 16,
        "ab1", "a_b", "x\u00b2", "\u00e9t\u00e9", "K\u212a", "Stra\u00dfe", "\u0130ki")]
    return docs


@pytest.mark.parametrize("name", list(CONFIGS))
def test_kernel_equals_reference_at_the_edges_of_each_rule(name):
    tokenizer = CONFIGS[name]
    docs = edge_documents()
    assert_same_as_reference(tokenizer, docs, batch=997)
    for doc in docs:
        assert_same_clean(tokenizer, doc.encode("utf-8"))


@pytest.mark.parametrize("name", list(CONFIGS))
@settings(max_examples=100, deadline=None)
@given(doc=st.one_of(documents, line_documents))
def test_kernel_equals_reference_on_adversarial_text(name, doc):
    tokenizer = CONFIGS[name]
    assert_same_as_reference(tokenizer, [doc])
    assert_same_clean(tokenizer, doc.encode("utf-8", "surrogatepass"))


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(st.one_of(documents, documents.map(lambda d: d.encode("ascii", "ignore")),
                               st.lists(st.sampled_from(["the", "fox", "Fox", "é", "a\0b",
                                                         "x" * 40, ""]))),
                     max_size=12))
def test_batches_mix_ascii_code_points_and_token_lists(docs):
    for name in ("default", "legacy", "no-lowercase"):
        assert_same_as_reference(CONFIGS[name], docs, batch=5)


# ----------------------------------------------------------------------------- DocChunks


def assert_same_chunks(a: list[st_.DocChunk], b: list[st_.DocChunk]) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        for arr in ("data", "indices", "indptr"):
            u, v = getattr(x.counts, arr), getattr(y.counts, arr)
            assert u.dtype == v.dtype and np.array_equal(u, v), arr
        assert x.counts.shape == y.counts.shape
        assert x.counts.has_canonical_format and y.counts.has_canonical_format
        assert list(x.terms) == list(y.terms)
        assert x.lengths.dtype == y.lengths.dtype and np.array_equal(x.lengths, y.lengths)
        for attr in ("source", "first_doc", "n_replaced", "vocab_key", "term_ids", "n_records",
                     "last_doc", "offset"):
            assert getattr(x, attr) == getattr(y, attr), attr


def python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make chunk builders take the Python path (today's) for every tokenizer."""
    monkeypatch.setattr("streamtopic.corpus.kernel_flags", lambda tokenizer: None)


def kernels(monkeypatch: pytest.MonkeyPatch, ready: bool) -> None:
    """Make chunk builders find the compiled kernels ready, or not (a first ingest on a
    machine: Python tokenises and scipy counts while another process compiles them)."""
    monkeypatch.setattr("streamtopic.corpus.kernels_ready", lambda: ready)


ODD_DOCS = [
    "Caf\u00e9 na\u00efve \u0130stanbul STRASSE stra\u00dfe x\u00b2 \U0001d400bc",  # non-ASCII
    "In article <1993Apr5.1@cs.cmu.edu> joe@cs.cmu.edu (Joe) writes:\n> quoted text\n",
    "see http://www.example.com/a?b=c and www.foo.org or ftp://x.y\n",
    "M" + "#" * 59 + "\nbegin 644 x\nM" + "`" * 45 + "\r\nend\n",
    "", "   ", "a", "the and of", "\x00\x01 nul bytes",
]


def corpus_files(tmp_path: Path, news_sample: list[bytes]) -> dict[str, Path]:
    """The same documents as a tar of files, a text file and a JSON Lines file."""
    docs = [*news_sample, *(d.encode("utf-8") for d in ODD_DOCS),
            b"bad \xff\xfe bytes caf\xe9 here", b"\xc3\x28 invalid"]
    tar_path = tmp_path / "docs.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        for i, doc in enumerate(docs):
            info = tarfile.TarInfo(f"docs/{i:05d}")
            info.size = len(doc)
            tar.addfile(info, io.BytesIO(doc))
    text_path = tmp_path / "docs.txt"
    with open(text_path, "wb") as fh:
        fh.write(b"".join(d.replace(b"\n", b" ") + b"\n" for d in docs))
    jsonl_path = tmp_path / "docs.jsonl"
    with open(jsonl_path, "w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"text": _decode(d), "n": 1}) + "\n")
        fh.write("\n" + json.dumps({"text": "lone \ud800 surrogate caf\u00e9"}) + "\n")
    return {"files": tar_path, "text": text_path, "jsonl": jsonl_path}


@pytest.fixture(scope="module")
def news_sample(news: list[bytes]) -> list[bytes]:
    raws = news[:18846]  # whole messages
    return raws[::60] + [r for r in raws if not r.isascii()][:10]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["files", "text", "jsonl"])
def test_chunks_equal_the_python_paths(tmp_path, monkeypatch, news_sample, fmt):
    monkeypatch.setattr("streamtopic.corpus.CHUNK_DOCS", 37)  # several chunks per partition
    path = str(corpus_files(tmp_path, news_sample)[fmt])
    options = [{"strip_headers": True}, {"strip_headers": False}] if fmt == "files" else [{}]
    for tokenizer in (CONFIGS["default"], CONFIGS["legacy"], CONFIGS["no-lowercase"]):
        for opts in options:
            corpus = st_.read_corpus(path, tokenizer=tokenizer, blocksize=2**16, **opts)
            assert corpus.npartitions > 1
            with monkeypatch.context() as m:
                kernels(m, True)
                fast = list(corpus.iter_chunks())
                words = sorted({t for ch in fast for t in ch.terms})
                vocab = [*words[::3], "notaword", "the", words[5], "Café"]  # stop word, repeat
                fast_onto = list(corpus.onto(vocab).iter_chunks())
            with monkeypatch.context() as m:
                python_path(m)
                assert_same_chunks(fast, list(corpus.iter_chunks()))
                assert_same_chunks(fast_onto, list(corpus.onto(vocab).iter_chunks()))
            with monkeypatch.context() as m:
                kernels(m, False)
                assert_same_chunks(fast, list(corpus.iter_chunks()))
                assert_same_chunks(fast_onto, list(corpus.onto(vocab).iter_chunks()))
            assert sum(ch.n_replaced for ch in fast) > 0 or fmt == "jsonl"


def test_document_counts_with_texts_and_token_lists(monkeypatch):
    docs: list = [*ODD_DOCS, ["caf\u00e9", "the", "fox", "Fox", "x" * 40, "a\0b", ""],
                  "the fox and the dog", ["fox"] * 3]
    vocab = ["fox", "caf\u00e9", "dog", "the", "a\0b", "", "x" * 40, "article", "joe"]
    for tokenizer in (CONFIGS["default"], CONFIGS["legacy"]):
        with monkeypatch.context() as m:
            kernels(m, True)
            fast = document_counts(docs, vocab, tokenizer)
        for path in (python_path, partial(kernels, ready=False)):
            with monkeypatch.context() as m:
                path(m)
                slow = document_counts(docs, vocab, tokenizer)
            assert (fast != slow).nnz == 0
            assert fast.shape == slow.shape == (len(docs), len(vocab))
        assert fast.sum() > 0


def test_without_the_kernels_a_builder_tokenises_in_python(monkeypatch):
    """A chunk builder that finds the kernels missing (a first ingest) makes no
    BatchTokenizer and counts with scipy: it compiles nothing in its own process."""
    monkeypatch.setattr("streamtopic.corpus.kernels_ready", lambda: False)
    calls: list[bool] = []

    def count(ids: np.ndarray, indptr: np.ndarray, n_terms: int, compiled: bool = True
              ) -> sp.csr_matrix:
        calls.append(compiled)
        return kt.count_matrix(ids, indptr, n_terms, compiled)

    monkeypatch.setattr("streamtopic.corpus.count_matrix", count)
    builder = st_.corpus.ChunkBuilder("x", 0, CONFIGS["default"])
    assert builder.kernel is None and not builder.compiled
    builder.add_bytes(b"The fox and the dog, the fox")
    builder.flush()
    (chunk,) = builder.chunks
    assert dict(zip(chunk.terms, chunk.counts.toarray()[0], strict=True)) == {"fox": 2, "dog": 1}
    assert calls == [False]


def test_count_matrix_is_csr_after_sum_duplicates():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n_docs, n_terms = int(rng.integers(0, 30)), int(rng.integers(1, 60))
        indptr = np.r_[0, np.cumsum(rng.integers(0, 40, n_docs))].astype(np.int64)
        ids = rng.integers(0, n_terms, indptr[-1]).astype(np.int32)
        want = sp.csr_matrix((np.ones(ids.size, np.int32), ids.copy(), indptr.copy()),
                             shape=(n_docs, n_terms))
        want.sum_duplicates()
        for compiled in (True, False):
            given_ids, given_indptr = ids.copy(), indptr.copy()
            got = kt.count_matrix(ids, indptr, n_terms, compiled)
            for arr in ("data", "indices", "indptr"):
                u, v = getattr(got, arr), getattr(want, arr)
                assert u.dtype == v.dtype and np.array_equal(u, v)
            assert got.has_canonical_format and got.shape == want.shape
            assert np.array_equal(ids, given_ids) and np.array_equal(indptr, given_indptr)


def test_table_grows_and_keeps_ids_across_batches():
    tokenizer = Tokenizer(stop_words="none")
    words = [f"w{''.join(chr(97 + int(d)) for d in str(i))}" for i in range(5000)]
    docs = [" ".join(words[i:i + 50]) for i in range(0, 5000, 10)]
    assert_same_as_reference(tokenizer, docs, batch=64)
    kernel = kt.BatchTokenizer(tokenizer, tuple(words[::-1]))
    kernel.add_text(docs[0])
    res = kernel.run()
    assert res.terms == tuple(words[::-1])
    assert [res.terms[i] for i in res.ids] == words[:50]
