"""A chunk's terms mapped onto a vocabulary: its counts with the vocabulary's word ids as
columns.

Ingest (:mod:`~streamtopic.cooccurrence`), inference and the refinement all count a chunk of
documents (:class:`~streamtopic.corpus.DocChunk`, columns of its own terms) over a fixed
vocabulary: :func:`term_index` gives each word its id, :func:`global_ids` each of the chunk's
terms its id (-1 outside the vocabulary) and :func:`to_global` the counts over the vocabulary
with the tokens outside it; :func:`oov_terms` names those words.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

import numpy as np
import scipy.sparse as sp

from .corpus import DocChunk, source_vocabulary

__all__ = ["global_ids", "oov_terms", "term_index", "to_global"]

_INDEX_CACHE: dict[int, tuple[Sequence[str], dict[str, int]]] = {}


def term_index(vocab: Sequence[str]) -> dict[str, int]:
    """Each word's position in ``vocab``; the last vocabulary's index is kept (by identity),
    so that the chunks of one partition share it."""
    key = id(vocab)
    hit = _INDEX_CACHE.get(key)
    if hit is not None and hit[0] is vocab:
        return hit[1]
    index = {t: i for i, t in enumerate(vocab)}
    _INDEX_CACHE.clear()
    _INDEX_CACHE[key] = (vocab, index)
    return index


#: (source vocabulary key, id of a term index) -> (the index, each source id's global id):
#: chunks of a source with a vocabulary of its own (UCI, HDF5, a store's cached documents)
#: map their ids by one array lookup instead of a dictionary lookup per term
_ID_MAPS: dict[tuple[str, int], tuple[dict[str, int], np.ndarray]] = {}


def global_ids(chunk: DocChunk, index: dict[str, int]) -> np.ndarray:
    """The global id of each of the chunk's terms (T,), -1 outside ``index``."""
    if chunk.vocab_key is not None and chunk.term_ids is not None:
        key = (chunk.vocab_key, id(index))
        hit = _ID_MAPS.get(key)
        if hit is None or hit[0] is not index:  # the entry holds ``index``: no id reuse
            vocab = source_vocabulary(chunk.vocab_key)
            hit = (index, np.fromiter((index.get(t, -1) for t in vocab), np.int64, len(vocab)))
            if len(_ID_MAPS) >= 4:
                _ID_MAPS.clear()
            _ID_MAPS[key] = hit
        return hit[1][np.asarray(chunk.term_ids, dtype=np.int64)]
    return np.fromiter(map(index.get, chunk.terms, repeat(-1)), np.int64, len(chunk.terms))


def to_global(
    chunk: DocChunk, index: dict[str, int], V: int, gids: np.ndarray | None = None
) -> tuple[sp.csr_matrix, int]:
    """The chunk's counts with global term ids as columns; returns (H, OOV tokens).
    ``gids``: the chunk's :func:`global_ids`, when the caller has them."""
    gids = global_ids(chunk, index) if gids is None else gids
    c = chunk.counts
    col = gids[c.indices]
    keep = col >= 0
    oov = int(c.data[~keep].sum())
    if keep.all():
        H = sp.csr_matrix((c.data, col, c.indptr), shape=(c.shape[0], V))
    else:
        row = np.repeat(np.arange(c.shape[0]), np.diff(c.indptr))
        per_row = np.bincount(row[keep], minlength=c.shape[0])
        indptr = np.r_[0, np.cumsum(per_row)]
        H = sp.csr_matrix((c.data[keep], col[keep], indptr), shape=(c.shape[0], V))
    return H, oov


def oov_terms(chunk: DocChunk, gids: np.ndarray) -> list[str]:
    """The chunk's words that occur in it and have no global id (``gids``, its
    :func:`global_ids`)."""
    cols = chunk.counts.indices
    return [chunk.terms[k] for k in np.unique(cols[gids[cols] < 0]).tolist()]
