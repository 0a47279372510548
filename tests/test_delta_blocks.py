"""Delta blocks (issue 26, small batches): a round whose part of a block is small writes that
part alone, as a delta, instead of rewriting the block. Every reader returns the sum a
rewrite would have stored, bit for bit; a block's deltas stay bounded (``MAX_DELTAS``,
``DELTA_SHARE``) and are merged by the round that would exceed them; damage to a delta is
found; superseded deltas are collected, and kept while a reader's version reads them."""

from __future__ import annotations

import os

import numpy as np
import pytest

import streamtopic as st
from streamtopic import cooccurrence
from streamtopic import store as store_mod
from streamtopic.passes import QBlocks
from streamtopic.store import CooccurrenceStore, StoreError, delta_files

from .test_sparse_store import zipf_docs

CHUNK = 64


def _grow(path: str, batches: list[str], **kw: object) -> CooccurrenceStore:
    """A store built from ``batches`` (the first fixes the vocabulary), one ingest each."""
    first = not os.path.exists(path)
    for k, batch in enumerate(batches):
        extra = dict(min_df=1, max_df=1.0, stop_words="none", chunk_size=CHUNK) \
            if first and k == 0 else {}
        st.ingest(batch, path, progress=False, **extra, **kw)
    return CooccurrenceStore.open(path)


@pytest.fixture()
def batches(tmp_path) -> list[str]:
    """A base of 600 documents and twelve batches of 4 (under 1% each)."""
    out = [zipf_docs(tmp_path / "base.txt", 600, 400, seed=1)]
    out += [zipf_docs(tmp_path / f"b{k}.txt", 4, 400, seed=10 + k) for k in range(12)]
    return out


def _rewritten(tmp_path, batches, monkeypatch) -> CooccurrenceStore:
    """The same store with every round rewriting its blocks whole (no deltas)."""
    with monkeypatch.context() as m:
        m.setattr(cooccurrence, "DELTA_SHARE", 0.0)
        return _grow(str(tmp_path / "rewritten.zarr"), batches)


def test_small_batches_write_deltas_that_read_as_the_rewritten_sum(tmp_path, batches,
                                                                   monkeypatch):
    s = _grow(str(tmp_path / "delta.zarr"), batches[:4])
    ref = _rewritten(tmp_path, batches[:4], monkeypatch)
    deltas = s.block_deltas
    assert deltas, "a batch of 4 documents should be written as deltas"
    assert not ref.block_deltas
    # the deltas' versions are the batches'; most base blocks stay those of version 1 (a
    # batch rewrites the few blocks, of rare words, where its part is not small), and
    # every delta is newer than its block's base
    assert {v for chain in deltas.values() for v, _ in chain} <= {2, 3, 4}
    bv = s.block_versions
    assert (bv == 1).sum() > 2 * (bv > 1).sum()
    assert all(v > bv[i, j] for (i, j), chain in deltas.items() for v, _ in chain)
    full = ref.read_dense(normalised=False)
    assert np.array_equal(s.read_dense(normalised=False), full)
    assert np.array_equal(s.Q_sum.compute(scheduler="threads"), full)
    ids = np.array([0, 5, 63, 64, 200, 399])
    assert np.array_equal(s.read_submatrix(ids), ref.read_submatrix(ids))
    blocks = QBlocks.from_store(s)
    for i, j in [(0, 0), (0, 3), (3, 0), (2, 5)]:
        want = ref.read_dense()[blocks.span(i), blocks.span(j)]
        assert np.array_equal(blocks.block(i, j), want)
    assert s.verify() == [] and s.missing_blocks() == [] and s.check_chunks() == []
    # what a pass reads: the base block's file and its deltas'
    (i, j), chain = min(deltas.items())
    own = delta_files(s.path, *s.block_slices(i, j), chain)
    base = store_mod.block_files(s.path, int(bv[i, j]), *s.block_slices(i, j), CHUNK,
                                 int(s.block_sparse[i, j]))
    assert blocks.stored_bytes([(i, j)]) == sum(os.path.getsize(f) for f in own + base)


def test_a_blocks_deltas_stay_bounded_and_are_merged(tmp_path, batches, monkeypatch):
    monkeypatch.setattr(cooccurrence, "MAX_DELTAS", 3)
    s = _grow(str(tmp_path / "delta.zarr"), batches)
    ref = _rewritten(tmp_path, batches, monkeypatch)
    chains = s.block_deltas
    assert chains and max(len(c) for c in chains.values()) <= 3
    # twelve batches, at most three deltas each: blocks were rewritten with theirs merged
    assert (s.block_versions > 1).any()
    base = s.block_nnz
    assert base is not None
    for (i, j), chain in chains.items():
        assert sum(n for _, n in chain) <= store_mod.DELTA_SHARE * base[i, j]
    assert np.array_equal(s.read_dense(normalised=False), ref.read_dense(normalised=False))
    assert s.verify() == []


def test_a_large_batch_rewrites_its_blocks(tmp_path, batches):
    s = _grow(str(tmp_path / "delta.zarr"), batches[:3])
    assert s.block_deltas
    big = zipf_docs(tmp_path / "big.txt", 600, 400, seed=99)
    s = _grow(str(tmp_path / "delta.zarr"), [big])
    # the big round's parts are as large as the blocks: rewritten, deltas merged
    assert not s.block_deltas
    assert s.verify() == []


def test_a_lost_or_corrupted_delta_is_found(tmp_path, batches):
    s = _grow(str(tmp_path / "delta.zarr"), batches[:2])
    (i, j), chain = next((k, c) for k, c in sorted(s.block_deltas.items()) if k[0] < k[1])
    f = delta_files(s.path, *s.block_slices(i, j), chain)[0]
    with open(f, "r+b") as fh:
        fh.seek(os.path.getsize(f) // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0xFF]))
    fresh = CooccurrenceStore.open(s.path)
    problems = fresh.verify()
    assert problems and any("delta" in p for p in problems)
    with pytest.raises(StoreError, match="damaged"):
        fresh.read_dense()
    os.remove(f)
    assert [i, j, chain[0][0]] in CooccurrenceStore.open(s.path).missing_blocks()


def test_superseded_deltas_are_kept_for_a_reader_then_collected(tmp_path, batches):
    path = str(tmp_path / "delta.zarr")
    s = _grow(path, batches[:3])
    reader = CooccurrenceStore.open(path)
    before = reader.read_dense(normalised=False)
    delta_versions = {v for chain in reader.block_deltas.values() for v, _ in chain}
    big = zipf_docs(tmp_path / "big.txt", 600, 400, seed=99)
    _grow(path, [big])  # rewrites every block, merging the deltas
    # the reader's version still reads its deltas
    assert np.array_equal(reader.read_dense(normalised=False), before)
    reader.close()
    s.close()
    s = _grow(path, [batches[5]])  # the next writer's cleanup collects what no one reads
    files = [f for (i, j), chain in s.block_deltas.items()
             for f in delta_files(path, *s.block_slices(i, j), chain)]
    assert all(os.path.exists(f) for f in files)
    assert delta_versions
    for v in delta_versions:  # only the group's metadata is left of their blocks
        where = os.path.join(path, "versions", f"v{v:06d}", "S")
        assert not os.path.isdir(where) or os.listdir(where) == ["zarr.json"]
    assert s.verify() == []
