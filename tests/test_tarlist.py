"""The fast member listing of uncompressed tar archives (streamtopic._tarlist) against
tarfile's, which it must equal wherever it answers."""

from __future__ import annotations

import io
import os
import tarfile

import numpy as np
import pytest

import streamtopic as st
from streamtopic._tarlist import plain_members


def _tarfile_listing(path: str) -> tuple[tuple[str, int, int], ...]:
    with tarfile.open(path, mode="r:*") as tar:
        return tuple((m.name, m.offset_data, m.size) for m in tar if m.isfile())


def _documents(path: str) -> list[dict[str, int]]:
    """Each document of the corpus at ``path`` as its terms' counts."""
    docs = []
    for chunk in st.read_corpus(path).iter_chunks():
        rows = chunk.counts.tocsr()
        for d in range(rows.shape[0]):
            row = rows[d]
            pairs = zip(row.indices, row.data, strict=True)
            docs.append({chunk.terms[j]: int(c) for j, c in pairs})
    return docs


def _archive(path: str, fmt: int, long_names: bool = False) -> None:
    """Files of sizes around the block size, a directory, links and a FIFO."""
    with tarfile.open(path, "w", format=fmt) as tf:
        d = tarfile.TarInfo("group")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
        for i, size in enumerate((0, 1, 511, 512, 513, 1024, 5000)):
            top = "x" * 120 if long_names else "group"  # ustar: a prefix and a name
            info = tarfile.TarInfo(f"{top}/doc{i}.txt")
            info.size = size
            info.mtime = 1_700_000_000
            tf.addfile(info, io.BytesIO((f"word{chr(97 + i)} " * size).encode()[:size]))
        for kind, name in ((tarfile.SYMTYPE, "group/link"), (tarfile.LNKTYPE, "group/hard"),
                           (tarfile.FIFOTYPE, "group/fifo")):
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "group/doc1.txt"
            tf.addfile(info)


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_plain_archives_list_as_tarfile_lists_them(tmp_path, fmt):
    path = str(tmp_path / "a.tar")
    _archive(path, fmt)
    got = plain_members(path)
    assert got is not None  # the common case is the fast one
    assert got == _tarfile_listing(path)
    assert len(got) == 7


def test_ustar_prefix_names_are_joined(tmp_path):
    path = str(tmp_path / "a.tar")
    _archive(path, tarfile.USTAR_FORMAT, long_names=True)  # > 100 bytes: prefix + name
    got = plain_members(path)
    assert got is not None and got == _tarfile_listing(path)
    assert got[0][0] == "x" * 120 + "/doc0.txt"


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_extended_headers_are_left_to_tarfile(tmp_path, fmt):
    path = str(tmp_path / "a.tar")
    _archive(path, fmt, long_names=True)  # GNU "L" and pax "x" headers
    assert plain_members(path) is None


def test_a_v7_directory_is_not_a_file(tmp_path):
    path = str(tmp_path / "a.tar")
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        info = tarfile.TarInfo("old/")
        info.type = tarfile.AREGTYPE  # V7: a regular header whose name ends in "/"
        tf.addfile(info)
        info = tarfile.TarInfo("old/a.txt")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"abc"))
    got = plain_members(path)
    assert got == _tarfile_listing(path) == (("old/a.txt", 1024, 3),)


def test_damaged_headers_equal_tarfile_or_defer_to_it(tmp_path):
    """Flip bytes of a plain archive's headers at random: wherever the fast listing answers,
    tarfile lists the same members; where tarfile fails, the fast listing defers."""
    path = str(tmp_path / "a.tar")
    _archive(path, tarfile.USTAR_FORMAT)
    clean = open(path, "rb").read()
    headers = [0] + [off - 512 for _, off, _ in _tarfile_listing(path)]
    rng = np.random.default_rng(1)
    answered = deferred = 0
    for trial in range(400):
        raw = bytearray(clean)
        h = int(rng.choice(headers))
        for _ in range(int(rng.integers(1, 4))):
            at = h + int(rng.choice([int(rng.integers(0, 512)), 100, 124, 130, 136, 148, 156]))
            raw[at] = int(rng.choice([0, 32, 48, 55, 56, 95, 43, 255, int(rng.integers(256))]))
        if trial % 2:  # keep the checksum right, so that the other fields are what differ
            body = raw[h:h + 148] + b" " * 8 + raw[h + 156:h + 512]
            raw[h + 148:h + 156] = b"%06o\0 " % sum(body)
        damaged = str(tmp_path / "d.tar")
        with open(damaged, "wb") as fh:
            fh.write(raw)
        try:
            want = _tarfile_listing(damaged)
        except (tarfile.TarError, ValueError):  # ValueError: a size past any seek offset
            want = None
        got = plain_members(damaged)
        if got is not None:
            answered += 1
            assert got == want, trial
        else:
            deferred += 1
    assert answered > 50 and deferred > 50  # both sides were exercised


def test_truncated_data_defers_to_tarfile(tmp_path):
    path = str(tmp_path / "a.tar")
    _archive(path, tarfile.USTAR_FORMAT)
    _, last_offset, last_size = _tarfile_listing(path)[-1]
    with open(path, "r+b") as fh:
        fh.truncate(last_offset + last_size // 2)
    assert plain_members(path) is None
    with pytest.raises(tarfile.ReadError):
        _tarfile_listing(path)


def test_tiny_and_empty_archives(tmp_path):
    empty = str(tmp_path / "e.tar")
    with tarfile.open(empty, "w", format=tarfile.USTAR_FORMAT):
        pass
    assert plain_members(empty) == _tarfile_listing(empty) == ()
    nothing = tmp_path / "n.tar"
    nothing.write_bytes(b"")
    assert plain_members(str(nothing)) is None


def test_read_corpus_gives_the_same_documents_by_either_listing(tmp_path):
    """A plain archive (listed from its headers) and a pax one with the same documents under
    long names (listed by tarfile) read as the same documents."""
    texts = [f"document {i} about topic {i % 3} " * (i + 1) for i in range(12)]
    paths = []
    for fmt, stem in ((tarfile.USTAR_FORMAT, "d"), (tarfile.PAX_FORMAT, "y" * 150)):
        path = str(tmp_path / f"{fmt}.tar")
        with tarfile.open(path, "w", format=fmt) as tf:
            for i, text in enumerate(texts):
                data = text.encode()
                info = tarfile.TarInfo(f"g/{stem}{i:02d}.txt")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        paths.append(path)
    assert plain_members(paths[0]) is not None and plain_members(paths[1]) is None
    read = [_documents(p) for p in paths]
    assert read[0] == read[1]
    assert len(read[0]) == len(texts)
    assert os.path.getsize(paths[1]) > os.path.getsize(paths[0])


def test_a_size_beyond_any_offset_is_one_clear_error(tmp_path):
    """tarfile raises ValueError (not a TarError) on a member size no file offset can hold;
    reading the corpus says so in one line, naming the file."""
    path = tmp_path / "a.tar"
    _archive(str(path), tarfile.USTAR_FORMAT)
    raw = bytearray(path.read_bytes())
    h = 512  # the first file's header (the directory's comes first)
    raw[h + 124:h + 136] = b"77777777777\0"
    body = raw[h:h + 148] + b" " * 8 + raw[h + 156:h + 512]
    raw[h + 148:h + 156] = b"%06o\0 " % sum(body)
    path.write_bytes(bytes(raw))
    assert plain_members(str(path)) is None
    with pytest.raises(st.CorpusError, match="a.tar.*cannot read archive"):
        list(st.read_corpus(str(path)).iter_chunks())


def test_a_plain_archive_is_listed_without_tarfile(tmp_path, monkeypatch):
    """The corpus reader lists a plain archive from its headers: with tarfile's member
    parsing broken, the plain archive still reads; a pax one (left to tarfile) does not."""
    plain, pax = str(tmp_path / "p.tar"), str(tmp_path / "x.tar")
    _archive(plain, tarfile.USTAR_FORMAT)
    _archive(pax, tarfile.PAX_FORMAT, long_names=True)

    def broken(self: tarfile.TarFile) -> None:
        raise tarfile.ReadError("tarfile was asked")

    monkeypatch.setattr(tarfile.TarFile, "next", broken)
    docs = _documents(plain)
    found = [doc.get(f"word{chr(97 + i)}", 0) > 0 for i, doc in enumerate(docs)]
    assert found == [False, False] + [True] * 5  # sizes 0 and 1 hold no whole word
    with pytest.raises(st.CorpusError, match="tarfile was asked"):
        _documents(pax)
