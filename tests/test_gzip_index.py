"""Gzip inputs read through an index of seek points (issue 17, point 4): normal-sized
partitions whatever the file's size, each decompressing only near its own range, and stores
bit-identical to those of the same data uncompressed."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pytest

import streamtopic as st
from streamtopic import _gzindex
from streamtopic import corpus as corpus_mod

WORDS = [w * k for w in ("alpha", "beta", "gamma", "delta", "omega", "sigma") for k in (1, 2)]


def _text_lines(n_docs: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    words = np.array(WORDS + [f"w{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}x" for i in range(300)])
    lines = [" ".join(words[rng.integers(0, len(words), 60)]) for _ in range(n_docs)]
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def index_dir(tmp_path, monkeypatch):
    d = tmp_path / "gzidx"
    monkeypatch.setenv(_gzindex.INDEX_DIR_ENV, str(d))
    return d


@pytest.fixture
def big_text_gz(tmp_path, index_dir):
    """About 12 MB of text (incompressible enough that the seek points are many), gzipped,
    and its plain copy."""
    raw = _text_lines(30_000)
    plain = tmp_path / "docs.txt"
    plain.write_bytes(raw)
    gz = tmp_path / "docs.txt.gz"
    gz.write_bytes(gzip.compress(raw, compresslevel=1))
    return gz, plain, raw


def _no_stream_from_start(monkeypatch):
    """Make decompressing a gzip input from its start an error (today's way to a range)."""
    real = corpus_mod._open_stream

    def guarded(path):
        if corpus_mod._compression(path) == "gzip":
            raise AssertionError(f"{path} decompressed from its start")
        return real(path)

    monkeypatch.setattr(corpus_mod, "_open_stream", guarded)


def test_gzip_partitions_not_capped(big_text_gz):
    """More than COMPRESSED_MAX_PARTS (8) partitions, each about the requested size, and the
    same ranges as the plain file's splits (same documents, same order)."""
    gz, plain, raw = big_text_gz
    blocksize = 2**20
    c = st.read_corpus(str(gz), blocksize=blocksize)
    assert c.npartitions > corpus_mod.COMPRESSED_MAX_PARTS
    assert c.npartitions >= len(raw) // blocksize
    assert max(p.stop - p.start for p in c.parts) < 2 * blocksize
    index = c.parts[0].opt("gzip_index")
    assert index is not None and index.startswith(str(_gzindex.index_dir()))
    cp = st.read_corpus(str(plain), blocksize=blocksize)
    assert [(p.start, p.stop) for p in c.parts] == [(p.start, p.stop) for p in cp.parts]


def test_each_partition_reads_only_its_range(big_text_gz, monkeypatch):
    """A partition seeks through the index: it never inflates the stream from its start (the
    index has a seek point about ``spacing`` bytes or less before every partition's start), and its
    bytes are exactly its range of the decompressed content."""
    import indexed_gzip

    gz, _, raw = big_text_gz
    c = st.read_corpus(str(gz), blocksize=2**20)
    index = c.parts[0].opt("gzip_index")
    spacing = _gzindex.spacing_for(str(gz), len(raw))
    with indexed_gzip.IndexedGzipFile(str(gz), index_file=index, auto_build=False) as fh:
        points = [0] + [int(u) for u, _ in fh.raw.seek_points()]
    assert len(points) >= len(raw) // spacing
    for p in c.parts:
        nearest = max(u for u in points if u <= p.start)
        assert p.start - nearest <= 2 * spacing  # points fall on deflate block bounds
    _no_stream_from_start(monkeypatch)
    for p in c.parts:
        got = corpus_mod._read_range(str(gz), p.start, p.stop, p.opt("gzip_index"))
        assert got == raw[p.start : p.stop]
    chunks = list(c.iter_chunks())
    assert sum(ch.counts.shape[0] for ch in chunks) == 30_000


def test_stale_or_missing_index_falls_back(big_text_gz, monkeypatch):
    """A worker without the planned index (another machine) decompresses from the start and
    gets the same bytes."""
    gz, _, raw = big_text_gz
    c = st.read_corpus(str(gz), blocksize=2**20)
    p = c.parts[-1]
    monkeypatch.setattr(corpus_mod._gzindex, "index_path", lambda path: "/nonexistent")
    assert corpus_mod._read_range(str(gz), p.start, p.stop, p.opt("gzip_index")) == \
        raw[p.start : p.stop]


def test_no_index_keeps_the_capped_plan(big_text_gz, monkeypatch):
    """Without indexed_gzip (or a writable index directory), the earlier plan: at most
    COMPRESSED_MAX_PARTS partitions, no index option."""
    gz, _, _ = big_text_gz
    monkeypatch.setattr(corpus_mod._gzindex, "available", lambda: False)
    c = st.read_corpus(str(gz), blocksize=2**20)
    assert c.npartitions <= corpus_mod.COMPRESSED_MAX_PARTS
    assert all(p.opt("gzip_index") is None for p in c.parts)


def test_index_not_saved_coarsens(big_text_gz, monkeypatch):
    """If the index cannot be saved after the scan, the fine splits are merged into the few
    large partitions of a gzip read without one."""
    gz, _, raw = big_text_gz
    monkeypatch.setattr(corpus_mod._gzindex, "save", lambda fh, path: None)
    c = st.read_corpus(str(gz), blocksize=2**20)
    assert c.npartitions <= corpus_mod.COMPRESSED_MAX_PARTS + 1
    assert c.parts[0].start == 0 and c.parts[-1].stop == len(raw)
    assert all(a.stop == b.start for a, b in zip(c.parts, c.parts[1:], strict=False))


def _q(store_path):
    store = st.CooccurrenceStore.open(store_path)
    return store.vocab, store.Q_sum.compute(), store.n_docs


def test_text_gz_store_equals_plain(big_text_gz, tmp_path):
    """A .gz ingested through its index gives exactly the Q of its plain copy."""
    gz, plain, _ = big_text_gz
    st.ingest(str(gz), tmp_path / "gz.zarr", blocksize=2**20, progress=False)
    st.ingest(str(plain), tmp_path / "plain.zarr", blocksize=2**20, progress=False)
    (vg, qg, ng), (vp, qp, n_p) = _q(tmp_path / "gz.zarr"), _q(tmp_path / "plain.zarr")
    assert vg == vp and ng == n_p
    assert np.array_equal(qg, qp)


def test_uci_gz_store_equals_plain(kos_dir, tmp_path, index_dir):
    """UCI KOS gzipped, split into many small partitions through its index, gives exactly
    the Q of its decompressed copy (documents never cut between partitions)."""
    plain_dir = tmp_path / "kos"
    plain_dir.mkdir()
    with gzip.open(kos_dir / "docword.kos.txt.gz", "rb") as src, \
            open(plain_dir / "docword.kos.txt", "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(kos_dir / "vocab.kos.txt", plain_dir / "vocab.kos.txt")
    gz = str(kos_dir / "docword.kos.txt.gz")
    c = st.read_corpus(gz, blocksize=2**18)
    assert c.npartitions > corpus_mod.COMPRESSED_MAX_PARTS
    assert c.parts[0].opt("gzip_index") is not None
    st.ingest(gz, tmp_path / "gz.zarr", blocksize=2**18, progress=False)
    st.ingest(str(plain_dir / "docword.kos.txt"), tmp_path / "plain.zarr", blocksize=2**18,
              progress=False)
    (vg, qg, ng), (vp, qp, n_p) = _q(tmp_path / "gz.zarr"), _q(tmp_path / "plain.zarr")
    assert vg == vp and ng == n_p
    assert np.array_equal(qg, qp)


def test_index_file_keyed_by_version(tmp_path, index_dir):
    """A changed input gets a new index file, and the older one is removed."""
    path = tmp_path / "a.txt.gz"
    path.write_bytes(gzip.compress(_text_lines(200)))
    first = st.read_corpus(str(path)).parts[0].opt("gzip_index")
    path.write_bytes(gzip.compress(_text_lines(300, seed=1)))
    second = st.read_corpus(str(path)).parts[0].opt("gzip_index")
    assert first != second
    assert sorted(p.name for p in index_dir.iterdir()) == [second.rsplit("/", 1)[1]]


def test_truncated_gzip_is_an_error(tmp_path, index_dir):
    """indexed_gzip reads a truncated stream to its end silently: the scan still refuses it."""
    blob = gzip.compress(_text_lines(3000))
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(corpus_mod.CorpusError, match="cannot decompress gzip data"):
        st.read_corpus(str(path), blocksize=2**20)


def test_multi_member_gzip(tmp_path, index_dir):
    """Concatenated members (pigz, bgzip) read through the index as one stream."""
    raw = _text_lines(20_000)
    half = raw.index(b"\n", len(raw) // 2) + 1
    path = tmp_path / "two.txt.gz"
    path.write_bytes(gzip.compress(raw[:half]) + gzip.compress(raw[half:]))
    c = st.read_corpus(str(path), blocksize=2**20)
    assert c.npartitions > 4 and c.parts[0].opt("gzip_index") is not None
    got = b"".join(corpus_mod._read_range(str(path), p.start, p.stop, p.opt("gzip_index"))
                   for p in c.parts)
    assert got == raw


def _tar_gz(tmp_path, n_docs: int = 400):
    """A .tar.gz of one text file per document (mail headers included), and the texts."""
    import io
    import tarfile

    texts = [f"Subject: doc {i}\n\n" + _text_lines(3, seed=i).decode() for i in range(n_docs)]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i, t in enumerate(texts):
            data = t.encode()
            info = tarfile.TarInfo(f"g{i % 4}/{i:04d}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "docs.tar.gz"
    path.write_bytes(buf.getvalue())
    return path, texts


def test_tar_gz_members_read_through_the_index(tmp_path, index_dir, monkeypatch):
    """A gzip archive is listed once, through the seek-point reader: its partitions then
    enter the stream near their members (never decompressing from the start), the listing
    is kept beside the index and read back by a later process (here: with the in-process
    cache cleared), and the documents are the archive's."""
    import tarfile

    path, texts = _tar_gz(tmp_path)
    corpus_mod._archive_listing_cached.cache_clear()
    c = st.read_corpus(str(path), blocksize=4000, strip_headers=False)
    assert c.npartitions > 8  # not capped as a gzip read from its start is
    assert all(p.opt("gzip_index") for p in c.parts)
    with tarfile.open(path) as tar:
        expected = [(m.name, m.offset_data, m.size) for m in tar if m.isfile()]
    listing, index = corpus_mod._archive_listing(str(path))
    assert list(listing) == expected and index is not None
    assert len(list(index_dir.glob("*.members.json"))) == 1

    corpus_mod._archive_listing_cached.cache_clear()
    monkeypatch.setattr(corpus_mod.tarfile, "open", None)  # a second listing would fail
    _no_stream_from_start(monkeypatch)
    c2 = st.read_corpus(str(path), blocksize=4000, strip_headers=False)
    docs = [d for ch in c2.iter_chunks() for d in range(ch.n_docs)]
    assert len(docs) == len(texts)
    assert corpus_mod.document_names(c2.sources[0]) == [e[0] for e in expected]


def test_a_changed_archive_is_listed_again(tmp_path, index_dir):
    path, _ = _tar_gz(tmp_path, 50)
    corpus_mod._archive_listing_cached.cache_clear()
    first, _ = corpus_mod._archive_listing(str(path))
    (tmp_path / "other").mkdir()
    path2, _ = _tar_gz(tmp_path / "other", 60)
    shutil.copy(path2, path)  # new size and mtime: the saved listing is not this file's
    corpus_mod._archive_listing_cached.cache_clear()
    second, _ = corpus_mod._archive_listing(str(path))
    assert len(first) == 50 and len(second) == 60
    assert len(list(index_dir.glob("*.members.json"))) == 1  # the stale one removed
