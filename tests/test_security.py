"""Nothing shared with other users unguarded (issue 30, cases 1–4): words are data in every
HTML page and on the terminal, the store's ``readers/`` folder and the gzip index cache
cannot be used by another local user to hang or to falsify an ingest."""

from __future__ import annotations

import os
import re
import stat
import threading
from pathlib import Path

import dask
import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic as st
from streamtopic.cli import main

from .test_report import CHROMIUM_ARGS, _chromium, _local

SCRIPT = "</script><script>document.title=31337</script>"
IMG = "<img src=x onerror=alert(1)>"
IFRAME = "<iframe src=about:blank></iframe>"
TITLE_ESCAPE = "\x1b]0;pwned\x07bell"
EVIL = [SCRIPT, IMG, IFRAME, TITLE_ESCAPE, "\x9b31mcsi", "tab\there"]


def write_evil_uci(directory: Path, n_docs: int = 300, V: int = 60, seed: int = 0) -> Path:
    """A UCI corpus whose most frequent words are ``EVIL`` (markup and terminal escapes)."""
    rng = np.random.default_rng(seed)
    words = [f"word{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(V)]
    words[: len(EVIL)] = EVIL
    A = rng.dirichlet(np.full(V, 0.1), size=3)
    A[:, : len(EVIL)] += 0.1
    A /= A.sum(axis=1, keepdims=True)
    lines = []
    for d in range(n_docs):
        counts = rng.multinomial(40, rng.dirichlet(np.full(3, 0.3)) @ A)
        lines += [f"{d + 1} {w + 1} {counts[w]}" for w in np.flatnonzero(counts)]
    docword = directory / "docword.evil.txt"
    docword.write_text(f"{n_docs}\n{V}\n{len(lines)}\n" + "\n".join(lines) + "\n")
    (directory / "vocab.evil.txt").write_text("\n".join(words) + "\n")
    return docword


@pytest.fixture(scope="module")
def evil_model(tmp_path_factory) -> Path:
    """A saved K = 3 model whose top words are ``EVIL``; its store beside it."""
    d = tmp_path_factory.mktemp("evil")
    docword = write_evil_uci(d)
    with dask.config.set(scheduler="threads"):
        st.ingest(str(docword), d / "s.zarr", min_df=1, max_df=1.0, progress=False)
        model = st.AnchorTopicModel(n_topics=3, method="plain", seed=0, progress=False)
        model.fit(d / "s.zarr")
    assert set(EVIL) <= set(model.vocab_)
    model.save(d / "m.zarr")
    return d / "m.zarr"


# ----------------------------------------------------------------------------- 1: HTML


def test_pyldavis_page_escapes_words_and_is_offline(evil_model, tmp_path):
    """Case 1, statically: the pyLDAvis page loads nothing from elsewhere and holds every
    word as script-safe JSON (no ``</script`` but the page's own)."""
    out, lda = tmp_path / "r.html", tmp_path / "lda.html"
    res = CliRunner().invoke(main, ["report", str(evil_model), "-o", str(out),
                                    "--pyldavis", str(lda)])
    assert res.exit_code == 0, res.output
    page = lda.read_text()
    assert not re.search(r"<(script|link)\b[^>]*\b(src|href)\s*=", page)
    assert "cdn.jsdelivr.net" not in page  # (d3's licence names d3js.org)
    assert page.count("</script>") == 3  # d3, LDAvis and the call: nothing from the data
    assert SCRIPT not in page and IMG not in page and IFRAME not in page
    assert "\\u003c/script\\u003e\\u003cscript\\u003edocument.title=31337" in page


def _open_in_chromium(path: Path) -> dict:
    """Load a page in headless Chromium without network; what it did."""
    sync_playwright = _chromium()
    seen: dict = {"errors": [], "requests": [], "dialogs": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on("pageerror", lambda e: seen["errors"].append(str(e)))
            page.on("request", lambda r: seen["requests"].append(r.url))
            page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
            page.goto(path.as_uri())
            page.wait_for_timeout(1500)
            seen["title"] = page.title()
            seen["injected"] = page.evaluate(
                "() => document.querySelectorAll('img, iframe').length")
            seen["svg"] = page.evaluate("() => document.querySelectorAll('svg').length")
            seen["text"] = page.evaluate("() => document.body.innerText")
        finally:
            browser.close()
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("which", ["report", "pyldavis"])
def test_words_stay_words_in_chromium(evil_model, tmp_path, which):
    """Case 1 in the browser: neither page runs a word, fires an alert or gains an element,
    both render offline, and the pyLDAvis page shows the words as text."""
    out, lda = tmp_path / "r.html", tmp_path / "lda.html"
    res = CliRunner().invoke(main, ["report", str(evil_model), "-o", str(out),
                                    "--pyldavis", str(lda)])
    assert res.exit_code == 0, res.output
    seen = _open_in_chromium(out if which == "report" else lda)
    assert seen["title"] != "31337" and seen["dialogs"] == []
    assert seen["injected"] == 0
    assert [u for u in seen["requests"] if not _local(u)] == []
    assert seen["errors"] == []
    if which == "pyldavis":
        assert seen["svg"] > 0 and seen["title"] == "Topics of lda.html"
        assert IMG in seen["text"]


# ----------------------------------------------------------------------------- 4: terminal


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_terminal_output_has_no_control_characters(evil_model, tmp_path):
    """Case 4: ``topics`` and ``fit`` print a word's control characters escaped, never raw."""
    res = CliRunner().invoke(main, ["topics", str(evil_model)])
    assert res.exit_code == 0, res.output
    assert not CONTROL.search(res.output)
    assert "\\x1b]0;pwned\\x07bell" in res.output and "\\x9b31mcsi" in res.output
    res = CliRunner().invoke(main, ["fit", str(evil_model.parent / "s.zarr"), "-k", "3",
                                    "--method", "plain", "-q", "-o", str(tmp_path / "m2")])
    assert res.exit_code == 0, res.output
    assert not CONTROL.search(res.output)
    assert "\\x1b]0;pwned\\x07bell" in res.output


def test_error_messages_have_no_control_characters(tmp_path):
    """Case 4: a path with an escape in an error message is printed escaped."""
    bad = tmp_path / "evil\x1b]0;x\x07.zarr"
    res = CliRunner().invoke(main, ["info", str(bad)])
    assert res.exit_code == 1
    assert not CONTROL.search(res.output) and "\\x1b]0;x\\x07" in res.output


def test_notebook_table_escapes_words(evil_model):
    """Every HTML output escapes words: the notebook's table of topics too."""
    from streamtopic.notebook import topics_html

    page = topics_html(st.AnchorTopicModel.load(evil_model))
    assert SCRIPT not in page and IMG not in page and "&lt;img src=x" in page


# ----------------------------------------------------------------------------- 2: readers/


def _text_store(tmp_path: Path) -> str:
    docs = tmp_path / "docs.txt"
    rng = np.random.default_rng(0)
    words = [f"w{chr(97 + i)}{chr(97 + j)}" for i in range(6) for j in range(6)]
    docs.write_text("\n".join(" ".join(rng.choice(words, 12)) for _ in range(60)) + "\n")
    store = str(tmp_path / "s.zarr")
    with dask.config.set(scheduler="threads"):
        st.ingest(str(docs), store, min_df=1, max_df=1.0, progress=False)
    return store


def test_readers_folder_follows_the_umask(tmp_path):
    """Case 2: ``readers/`` is made with the umask, never world-writable (it was 1777)."""
    store = _text_store(tmp_path)
    old = os.umask(0o022)
    try:
        with st.CooccurrenceStore.open(store):
            mode = stat.S_IMODE(os.stat(os.path.join(store, "readers")).st_mode)
    finally:
        os.umask(old)
    assert mode & 0o002 == 0 and not mode & stat.S_ISVTX


@pytest.mark.parametrize("kind", ["fifo", "symlink-to-fifo", "directory", "socket", "big"])
def test_no_lease_can_hang_or_stop_an_ingest(tmp_path, kind):
    """Case 2: a FIFO (or a link to one, a directory, a socket, a huge file) dropped in
    ``readers/`` neither hangs the next ingest nor keeps it from collecting; it is removed."""
    import socket

    store = _text_store(tmp_path)
    readers = os.path.join(store, "readers")
    os.makedirs(readers, exist_ok=True)
    planted = os.path.join(readers, "x.json")
    if kind == "fifo":
        os.mkfifo(planted)
    elif kind == "symlink-to-fifo":
        os.mkfifo(tmp_path / "fifo")
        os.symlink(tmp_path / "fifo", planted)
    elif kind == "directory":
        os.mkdir(planted)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(planted)
    else:
        with open(planted, "wb") as fh:
            fh.truncate(2**30)
    docs = tmp_path / "more.txt"
    docs.write_text("wa wb wc wd\nwe wf wa wb\n")
    done: list = []

    def run() -> None:
        with dask.config.set(scheduler="threads"):
            done.append(st.ingest(str(docs), store, progress=False))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=60)
    if worker.is_alive():  # unblock the hung open, then fail
        if "fifo" in kind:
            fd = os.open(tmp_path / "fifo" if kind != "fifo" else planted,
                         os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        pytest.fail(f"the ingest hangs on a {kind} in readers/")
    assert done and done[0].version == 2
    if kind != "directory":  # a directory is no lease, and is left alone
        assert not os.path.lexists(planted)
    with st.CooccurrenceStore.open(store) as s:
        assert s.version == 2 and s.verify() == []


# ----------------------------------------------------------------------------- 3: gzip index


def _tar_gz(path: Path, n_docs: int = 300) -> Path:
    import io
    import tarfile

    rng = np.random.default_rng(1)
    words = [f"w{chr(97 + i)}{chr(97 + j)}x" for i in range(20) for j in range(20)]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(n_docs):
            data = (" ".join(rng.choice(words, int(rng.integers(20, 200)))) + "\n").encode()
            info = tarfile.TarInfo(f"d/{i:04d}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return path


def _counts(store: str) -> tuple[int, int, int]:
    with st.CooccurrenceStore.open(store) as s:
        return s.n_docs, s.n_tokens, s.V


@pytest.fixture
def fresh_listings(monkeypatch):
    """No listing cached in this process (as in a new process)."""
    from streamtopic import corpus as corpus_mod

    corpus_mod._archive_listing_cached.cache_clear()
    yield corpus_mod
    corpus_mod._archive_listing_cached.cache_clear()


def test_gzip_index_dir_is_per_user_and_private(tmp_path, monkeypatch, fresh_listings):
    """Case 3: the default index directory is the user's own (its name carries the uid,
    mode 0700); one owned by another user, or writable by others, is not used."""
    from streamtopic import _gzindex

    monkeypatch.delenv(_gzindex.INDEX_DIR_ENV, raising=False)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    root = _gzindex.index_dir()
    assert root == str(tmp_path / f"streamtopic-gzip-index-{os.geteuid()}")
    assert _gzindex.available()
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    os.chmod(root, 0o1777)  # as a shared /tmp directory would be
    assert not _gzindex.available()
    os.chmod(root, 0o700)
    if os.geteuid() == 0:  # someone else's directory
        os.chown(root, 65534, 65534)
        assert not _gzindex.available()


def test_a_tampered_member_listing_is_not_trusted(tmp_path, monkeypatch, fresh_listings):
    """Case 3: halving the member sizes in the saved listing (which made an ingest count
    two thirds of the tokens, digest unchanged) is detected: the archive is listed again
    and the counts are right."""
    import json

    from streamtopic import _gzindex

    monkeypatch.setenv(_gzindex.INDEX_DIR_ENV, str(tmp_path / "gzidx"))
    archive = _tar_gz(tmp_path / "docs.tar.gz")
    with dask.config.set(scheduler="threads"):
        st.ingest(str(archive), tmp_path / "a.zarr", min_df=1, max_df=1.0, progress=False)
    (listing,) = (tmp_path / "gzidx").glob("*.members.json")
    saved = json.loads(listing.read_text())
    rows = saved["members"] if isinstance(saved, dict) else saved
    for row in rows:
        row[2] //= 2
    listing.write_text(json.dumps(saved))
    fresh_listings._archive_listing_cached.cache_clear()
    with dask.config.set(scheduler="threads"):
        st.ingest(str(archive), tmp_path / "b.zarr", min_df=1, max_df=1.0, progress=False)
    assert _counts(str(tmp_path / "b.zarr")) == _counts(str(tmp_path / "a.zarr"))


def test_a_replaced_index_is_not_used(tmp_path, monkeypatch, fresh_listings):
    """Case 3: an index file swapped after planning (another file's index) fails the digest
    the plan recorded: the partition reads the stream from its start, with the same bytes."""
    import gzip as gz_mod

    from streamtopic import _gzindex

    monkeypatch.setenv(_gzindex.INDEX_DIR_ENV, str(tmp_path / "gzidx"))
    rng = np.random.default_rng(2)
    raw = ("\n".join(" ".join(rng.choice(["aa", "bb", "cc", "dd"], 50)) for _ in range(40_000))
           + "\n").encode()
    path = tmp_path / "t.txt.gz"
    path.write_bytes(gz_mod.compress(raw, compresslevel=1))
    corpus = st.read_corpus(str(path), blocksize=2**20)
    part = corpus.parts[-1]
    index = part.opt("gzip_index")
    assert index is not None and part.opt("gzip_index_sha256")
    with open(index, "r+b") as fh:  # damage the seek points' windows
        fh.seek(os.path.getsize(index) // 2)
        fh.write(b"\xff" * 4096)
    got = fresh_listings._read_range(str(path), part.start, part.stop, index,
                                     part.opt("gzip_index_sha256"))
    assert got == raw[part.start : part.stop]
