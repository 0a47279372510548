"""The text defaults for topic models: letters-only tokens, encoded lines, stop words,
mail/news headers, addresses, and stores built before these defaults."""

from __future__ import annotations

import base64
import binascii
import random
import tarfile

import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic as st
from streamtopic.cli import main
from streamtopic.vocabulary import (
    DEFAULT_TOKEN_PATTERN,
    LEGACY_TOKEN_PATTERN,
    Tokenizer,
)

# a store's tokenizer config as written before these defaults
OLD_CONFIG = {"lowercase": True, "token_pattern": LEGACY_TOKEN_PATTERN, "stop_words": None,
              "analyzer": None}


def _doc_terms(corpus: st.Corpus) -> list[dict[str, int]]:
    out = []
    for ch in corpus.iter_chunks():
        for row in ch.counts:
            out.append({ch.terms[i]: int(c) for i, c in zip(row.indices, row.data, strict=True)})
    return out


# ----------------------------------------------------------------------------- tokens


def test_numbers_and_letter_digit_mixtures_give_no_token():
    tok = Tokenizer(stop_words="none")
    text = "0d _o 145 a86 mu 2di 34u x2 c_ w7 10 00 ok_go naïve Straße 3rd ünïcode_42 I'm"
    assert tok(text) == ["mu", "naïve", "straße"]
    # a run of more than 15 letters is no token at all, 15 letters is one
    assert tok("supercalifragilistic abcdefghijklmno") == ["abcdefghijklmno"]
    # the pattern before: every word-character run of 2 or more
    old = Tokenizer.from_config(OLD_CONFIG)
    assert old("a86 2di 145 mu") == ["a86", "2di", "145", "mu"]


def test_ascii_fast_path_matches_the_unicode_pattern():
    rng = random.Random(0)
    alphabet = "abcXYZ019_ -.,'@\n\t"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(200))) for _ in range(300)]
    fast = Tokenizer(stop_words="none", drop_encoded=False, drop_addresses=False)
    # the same pattern spelled differently takes the general (Unicode) path
    general = Tokenizer(token_pattern=DEFAULT_TOKEN_PATTERN + "(?:)", stop_words="none",
                        drop_encoded=False, drop_addresses=False)
    assert fast._ascii_regex is not None and general._ascii_regex is None
    for text in texts:
        assert fast(text) == general(text)
    assert fast(" ".join(texts)) != []


# ----------------------------------------------------------------------------- encoded lines


def _uuencoded(data: bytes) -> str:
    lines = ["begin 644 picture.bmp"]
    lines += [binascii.b2a_uu(data[i:i + 45]).decode().rstrip("\n")
              for i in range(0, len(data), 45)]
    return "\n".join([*lines, "`", "end"])


ENCODED_BLOCKS = {
    # uuencode with spaces (zero bytes) and without
    "uuencode": lambda data: _uuencoded(data),
    "uuencode quoted": lambda data: "\n".join("> " + ln for ln in _uuencoded(data).split("\n")),
    "base64": lambda data: base64.encodebytes(data).decode(),
    "pgp": lambda data: ("-----BEGIN PGP SIGNATURE-----\nVersion: 2.2\n\n"
                         + base64.encodebytes(data[:96]).decode()
                         + "=ck3S\n-----END PGP SIGNATURE-----"),
}


@pytest.mark.parametrize("kind", sorted(ENCODED_BLOCKS))
def test_encoded_lines_give_no_tokens(kind):
    rng = np.random.default_rng(1)
    data = bytes(rng.integers(0, 256, 900, dtype=np.uint8))
    data = data[:300] + bytes(90) + data[300:]  # zero bytes: uuencode lines with spaces
    block = ENCODED_BLOCKS[kind](data)
    text = f"Here is the picture you wanted.\n{block}\nEnjoy the picture, everybody!\n"
    tok = Tokenizer(stop_words="none")
    kept = {"here", "is", "the", "picture", "you", "wanted", "enjoy", "everybody",
            "begin", "bmp", "end", "pgp", "signature", "version"}
    assert set(tok(text)) <= kept
    # without the rule the block gives tokens (fragments between digits and symbols)
    assert set(Tokenizer(stop_words="none", drop_encoded=False)(text)) - kept


def test_plain_lines_are_not_taken_for_encoded():
    tok = Tokenizer(stop_words="none")
    text = ("MICROPHONE PRE-AMP/LOW NOISE/PHANTOM POWERED\n"
            "MOTOROLA EXPO VHF 2WATT/2CHAN. HT--------------------$1200.00\n"
            "    MARINER (VENUS, MARS, & MERCURY FLYBYS AND ORBITERS)\n"
            "short/path/to/a/file.txt is fine\n")
    assert {"microphone", "motorola", "mariner", "short", "fine"} <= set(tok(text))


# ----------------------------------------------------------------------------- addresses


def test_addresses_urls_and_attributions_are_dropped():
    tok = Tokenizer(stop_words="none")
    text = (
        "In article <1993Apr5.123456.7@cs.cmu.edu>, jsmith@cs.cmu.edu (John Smith) writes:\n"
        "> quoted words stay\n"
        "arromdee@jyusenkyou.cs.jhu.edu (Ken Arromdee) wrote:\r\n"
        "Mail pwiseman@salmon.usd.edu or see http://www.ncsa.uiuc.edu/x.html and\n"
        "www.example.org/path or ftp://ftp.uu.net/pub for details. He rewrites: twice\n"
    )
    assert tok(text) == ["quoted", "words", "stay", "mail", "or", "see", "and", "or", "for",
                         "details", "he", "rewrites", "twice"]
    legacy = Tokenizer(stop_words="none", drop_addresses=False)(text)
    assert {"edu", "cmu", "uiuc", "smith", "writes", "http", "www"} <= set(legacy)


# ----------------------------------------------------------------------------- stop words


def test_stop_words_removed_by_default_for_text(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text("the cat and the hat\nthe dog is on the mat\n")
    assert _doc_terms(st.read_corpus(str(path))) == [{"cat": 1, "hat": 1},
                                                     {"dog": 1, "mat": 1}]
    none = st.read_corpus(str(path), tokenizer=Tokenizer(stop_words="none"))
    assert _doc_terms(none)[0] == {"the": 2, "cat": 1, "and": 1, "hat": 1}
    assert Tokenizer(stop_words=None) == Tokenizer() and Tokenizer().stop_words == "english"


def test_stop_words_default_in_ingest_and_cli(tmp_path):
    docs = ["the cat and the hat sat", "the dog and the cat sat", "a cat is on the mat"] * 3
    path = tmp_path / "docs.txt"
    path.write_text("\n".join(docs) + "\n")
    st.ingest(str(path), str(tmp_path / "a.zarr"), min_df=1, max_df=1.0, progress=False)
    store = st.CooccurrenceStore.open(str(tmp_path / "a.zarr"))
    assert "the" not in store.vocab and "cat" in store.vocab
    assert store.config["tokenizer"]["stop_words"] == "english"
    res = CliRunner().invoke(main, ["ingest", str(path), "--store", str(tmp_path / "b.zarr"),
                                    "--min-df", "1", "--max-df", "1.0", "--stop-words", "none",
                                    "-q", "--local", "sync"])
    assert res.exit_code == 0, res.output
    store = st.CooccurrenceStore.open(str(tmp_path / "b.zarr"))
    assert {"the", "and", "cat"} <= set(store.vocab)
    assert store.config["tokenizer"]["stop_words"] == "none"
    # convert (no store) follows the same default
    res = CliRunner().invoke(main, ["convert", str(path), "-o", str(tmp_path / "c.h5"), "-q",
                                    "--local", "sync"])
    assert res.exit_code == 0, res.output
    import h5py

    with h5py.File(tmp_path / "c.h5") as f:
        vocab = {v.decode() for v in f["vocab"][:]}
    assert "the" not in vocab and "cat" in vocab


# ----------------------------------------------------------------------------- headers

MAIL = (
    "From: pwiseman@salmon.usd.edu (Cliff)\n"
    "Subject: Re: Gazebo bitmap\n"
    "Organization: University of South Dakota\n"
    "Path: cs.utexas.edu!geraldo.cc.utexas.edu\n"
    " !portal.austin.ibm.com\n"
    "Lines: 3\n"
    "\n"
    "A marbled gazebo.\n\nIn the desert.\n"
)
CRLF_MAIL = "Organization: Nowhere\r\nSubject: crlf subject\r\n\r\nbody crlf\r\n"
PLAIN = "Chapter One\n\nA plain essay whose first paragraph is a title.\n"  # no header block


def _mail_tree(tmp_path):
    src = tmp_path / "src"
    (src / "grp").mkdir(parents=True)
    for name, text in {"a": MAIL, "b": CRLF_MAIL, "c": PLAIN}.items():
        (src / "grp" / name).write_bytes(text.encode())
    with tarfile.open(tmp_path / "t.tar.gz", "w:gz") as tf:
        for name in "abc":
            tf.add(src / "grp" / name, arcname=f"train/grp/{name}")
    return [src, tmp_path / "t.tar.gz"]


def test_headers_stripped_by_default_for_files_subject_kept(tmp_path):
    for path in _mail_tree(tmp_path):
        corpus = st.read_corpus(str(path))
        assert [(s.strip_headers, s.keep_subject) for s in corpus.sources] == [(True, True)]
        a, b, c = _doc_terms(corpus)
        assert a == {"gazebo": 2, "bitmap": 1, "marbled": 1, "desert": 1}
        assert b == {"crlf": 2, "subject": 1, "body": 1}
        assert c == {"chapter": 1, "plain": 1, "essay": 1, "paragraph": 1, "title": 1}
        kept = _doc_terms(st.read_corpus(str(path), strip_headers=False))
        assert {"organization", "dakota", "lines", "path"} <= set(kept[0])
        no_subject = _doc_terms(st.read_corpus(str(path), keep_subject=False))
        assert no_subject[0] == {"gazebo": 1, "marbled": 1, "desert": 1}


def test_headers_only_for_files_and_keep_headers_in_cli(tmp_path):
    (tmp_path / "mail.txt").write_text(MAIL.replace("\n\n", "\n"))  # text: read as it is
    corpus = st.read_corpus(str(tmp_path / "mail.txt"))
    assert [s.strip_headers for s in corpus.sources] == [False]
    src = _mail_tree(tmp_path)[1]
    args = ["ingest", str(src), "--min-df", "1", "--max-df", "1.0", "-q", "--local", "sync"]
    for flag, name in (([], "s.zarr"), (["--keep-headers"], "k.zarr")):
        res = CliRunner().invoke(main, [*args, "--store", str(tmp_path / name), *flag])
        assert res.exit_code == 0, res.output
    stripped = st.CooccurrenceStore.open(str(tmp_path / "s.zarr"))
    kept = st.CooccurrenceStore.open(str(tmp_path / "k.zarr"))
    assert stripped.sources[0]["strip_headers"] is True
    assert stripped.sources[0]["keep_subject"] is True
    assert kept.sources[0]["strip_headers"] is False
    assert "organization" not in stripped.vocab and "bitmap" in stripped.vocab
    assert {"organization", "bitmap"} <= set(kept.vocab)
    help_text = CliRunner().invoke(main, ["ingest", "--help"]).output
    assert "--keep-headers" in help_text and "--stop-words" in help_text


# ----------------------------------------------------------------------------- old stores


def test_old_config_reads_with_the_old_tokenizer():
    old = Tokenizer.from_config(OLD_CONFIG)
    assert old.token_pattern == LEGACY_TOKEN_PATTERN and old.stop_words == "none"
    assert not old.drop_encoded and not old.drop_addresses
    assert old("The a86 xy@host.edu 145") == ["the", "a86", "xy", "host", "edu", "145"]
    # a config without even a pattern is older still: scikit-learn's, too
    assert Tokenizer.from_config({}).token_pattern == LEGACY_TOKEN_PATTERN
    new = Tokenizer()
    assert Tokenizer.from_config(new.config()) == new


def test_old_store_keeps_its_tokenizer_on_update(tmp_path):
    docs = ["the a86 unit and x2 part", "the a86 unit and the x2 part", "a86 and x2 part"]
    first, second = tmp_path / "one.txt", tmp_path / "two.txt"
    first.write_text("\n".join(docs) + "\n")
    second.write_text("\n".join(reversed(docs)) + "\n")
    st.ingest(str(first), str(tmp_path / "s.zarr"), tokenizer=Tokenizer.from_config(OLD_CONFIG),
              min_df=1, max_df=1.0, progress=False)
    store = st.CooccurrenceStore.open(str(tmp_path / "s.zarr"))
    assert {"the", "a86", "x2"} <= set(store.vocab)
    assert store.config["tokenizer"]["stop_words"] == "none"
    # a later ingest reads as the store was built: nothing out of vocabulary; other stop
    # words would count the store's words unlike before, so they are refused (issue 15)
    report = st.ingest(str(second), str(tmp_path / "s.zarr"), progress=False)
    assert report.n_oov_tokens == 0
    third = tmp_path / "three.txt"
    third.write_text("the a86 unit\n")
    with pytest.raises(st.StoreError, match="stop_words differ"):
        st.ingest(str(third), str(tmp_path / "s.zarr"), stop_words="english", progress=False)
    report = st.ingest(str(third), str(tmp_path / "s.zarr"), progress=False)
    assert report.n_oov_tokens == 0 and report.n_tokens == 3
