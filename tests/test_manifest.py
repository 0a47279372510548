"""The store manifest's typed entries (streamtopic.manifest.ManifestEntry)."""

from __future__ import annotations

import json

import streamtopic as st
from streamtopic.manifest import ManifestEntry, ManifestMark, append_manifest, read_manifest

from ._corpora import write_docs


def test_entries_read_back_typed_and_byte_exact(tmp_path):
    """An entry is read back as a ManifestEntry with typed fields, and written again as the
    same JSON (a derived store's digests depend on it); an older entry's missing fields
    read as their defaults."""
    new = ManifestEntry.new(path="a.txt", sha256="ab" * 32, stat="1:2", format="text",
                            size=12, vocab_path=None, strip_headers=True, keep_subject=False,
                            text_field="body", n_docs=3, n_tokens=40, n_oov_tokens=1,
                            ingested_at="2026-01-01T00:00:00Z")
    old = {"path": "b.txt", "sha256": "cd" * 32, "version": 2}
    mark = append_manifest(str(tmp_path), ManifestMark(), [dict(new, version=1)])
    mark = append_manifest(str(tmp_path), mark, [old])
    got = read_manifest(str(tmp_path), mark)
    assert all(isinstance(e, ManifestEntry) for e in got)
    assert (got[0].path, got[0].n_docs, got[0].text_field, got[0].size, got[0].version,
            got[0].strip_headers, got[0].stat) == ("a.txt", 3, "body", 12, 1, True, "1:2")
    assert (got[1].format, got[1].text_field, got[1].size, got[1].stat, got[1].version,
            got[1].strip_headers) == ("auto", "text", 0, None, 2, False)
    assert got[1].as_json() == old and json.dumps(dict(got[1])) == json.dumps(old)
    (tmp_path / "copy").mkdir()
    again = append_manifest(str(tmp_path / "copy"), ManifestMark(), got[:1])
    again = append_manifest(str(tmp_path / "copy"), again, got[1:])
    assert again == mark  # the entries written back are the same bytes: the same chain


def test_a_store_lists_its_inputs_as_typed_entries(tmp_path):
    docs = write_docs(tmp_path / "a.txt", 40, seed=1)
    st.ingest(docs, tmp_path / "s.zarr", min_df=1, progress=False)
    with st.CooccurrenceStore.open(tmp_path / "s.zarr") as s:
        (entry,) = s.sources
        assert isinstance(entry, ManifestEntry)
        assert entry.path == str(docs) and entry.version == 1 and entry.n_docs == 40
        assert s.info()["sources"] == [entry.as_json()]
        json.dumps(s.info()["sources"])  # the info JSON stays plain JSON
