"""Independent in-memory reference computations for the tests (dense, whole corpus)."""

from __future__ import annotations

import gzip
import re
import tarfile

import numpy as np
import scipy.sparse as sp

TOKEN = re.compile(r"(?u)\b\w\w+\b")


def dense_cooccurrence_sum(H: sp.spmatrix) -> np.ndarray:
    """Σ_d (h hᵀ − diag h)/(n(n−1)) over rows with n >= 2, as a dense V×V array."""
    H = sp.csr_matrix(H, dtype=np.float64)
    n = np.asarray(H.sum(axis=1)).ravel()
    H = H[n >= 2]
    n = n[n >= 2]
    w = 1.0 / (n * (n - 1))
    Hd = H.toarray()
    Q = (Hd.T * w) @ Hd
    Q -= np.diag((Hd.T * w).sum(axis=1))
    return Q


def read_uci(docword: str, vocab: str) -> tuple[sp.csr_matrix, list[str]]:
    opener = gzip.open if docword.endswith(".gz") else open
    with opener(docword, "rt") as fh:
        D = int(fh.readline())
        W = int(fh.readline())
        fh.readline()
        data = np.loadtxt(fh, dtype=np.int64).reshape(-1, 3)
    H = sp.csr_matrix((data[:, 2], (data[:, 0] - 1, data[:, 1] - 1)), shape=(D, W))
    with open(vocab) as fh:
        terms = fh.read().split("\n")[:W]
    return H, terms


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


def read_tar_docs(path: str) -> list[str]:
    docs = []
    with tarfile.open(path, "r:gz") as tar:
        for m in tar.getmembers():
            if m.isfile():
                docs.append(tar.extractfile(m).read().decode("utf-8", errors="replace"))
    return docs


def prune(H: sp.csr_matrix, terms: list[str], min_df: int, max_df: float, keep_n: int | None):
    """gensim filter_extremes, written directly: returns (H restricted, kept terms in order)."""
    D = H.shape[0]
    df = np.asarray((H > 0).sum(axis=0)).ravel()
    ok = [i for i in range(len(terms)) if df[i] >= min_df and df[i] <= max_df * D]
    ok.sort(key=lambda i: (-df[i], terms[i]))
    if keep_n is not None:
        ok = ok[:keep_n]
    return sp.csr_matrix(H)[:, ok], [terms[i] for i in ok]


def count_matrix(docs: list[list[str]]) -> tuple[sp.csr_matrix, list[str]]:
    index: dict[str, int] = {}
    rows, cols = [], []
    for d, toks in enumerate(docs):
        for t in toks:
            cols.append(index.setdefault(t, len(index)))
            rows.append(d)
    H = sp.csr_matrix(
        (np.ones(len(rows)), (rows, cols)), shape=(len(docs), len(index))
    )
    H.sum_duplicates()
    return H, list(index)
