"""Independent in-memory reference computations for the tests (dense, whole corpus)."""

from __future__ import annotations

import gzip
import re
import tarfile

import numpy as np
import scipy.sparse as sp
from numba import njit

TOKEN = re.compile(r"(?u)\b\w\w+\b")


def dense_cooccurrence_sum(H: sp.spmatrix, lengths: np.ndarray | None = None,
                           weight: str = "tokens") -> np.ndarray:
    """Σ_d w_d (h hᵀ − diag h) over rows with n >= 2, as a dense V×V array, w_d = 1/(n − 1)
    (``weight='tokens'``, what stores built now hold) or 1/(n(n − 1)) (``'documents'``);
    n are the documents' ``lengths`` (their input lengths), by default the row sums of
    ``H``."""
    H = sp.csr_matrix(H, dtype=np.float64)
    n = (np.asarray(H.sum(axis=1)).ravel() if lengths is None
         else np.asarray(lengths, dtype=np.float64).ravel())
    H = H[n >= 2]
    n = n[n >= 2]
    w = 1.0 / (n - 1) if weight == "tokens" else 1.0 / (n * (n - 1))
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


# EM with a point estimate of θ: the refinement's reference (it runs CVB0, cvb0_estep)


@njit(nogil=True, cache=True, fastmath=True)
def em_theta(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    beta_t: np.ndarray,
    alpha: float,
    tol: float,
    max_iter: int,
    theta: np.ndarray,
    warm: bool = False,
) -> int:
    """Topic proportions of each document with the topics fixed, by EM (in place).

    θ_d ← (θ_d ⊙ Σ_w h_dw β_w / (θ_d·β_w) + α) / (n_d + Kα), from the uniform start (or, when
    ``warm``, from the θ given), until no entry moves more than ``tol`` or ``max_iter``
    iterations; a MAP estimate under a Dirichlet(1 + α) prior, unique for α > 0, so a warm
    start changes only the work. Work is proportional to the documents' non-zeros, not to V.
    Tokens of words that every topic gives probability 0 are left out (the normaliser is the
    sum of the new entries, n_d + Kα less those tokens), so θ_d stays on the simplex.
    Returns the number of iterations run, summed over the documents.

    Parameters
    ----------
    indptr, indices, data : CSR arrays of the counts (n_docs × V).
    beta_t : ndarray of shape (V, K), C-contiguous
        The topics, word-major (β transposed).
    alpha : float
        Pseudo-count per topic.
    tol : float
    max_iter : int
    theta : ndarray of shape (n_docs, K)
        Output (and the start, when ``warm``).
    warm : bool
    """
    K = beta_t.shape[1]
    acc = np.empty(K)
    total = 0
    for d in range(indptr.size - 1):
        p0, p1 = indptr[d], indptr[d + 1]
        nd = 0.0
        for e in range(p0, p1):
            nd += data[e]
        th = theta[d]
        if not warm or nd == 0.0:
            for k in range(K):
                th[k] = 1.0 / K
        if nd == 0.0:
            continue
        for _ in range(max_iter):
            total += 1
            for k in range(K):
                acc[k] = 0.0
            for e in range(p0, p1):
                b = beta_t[indices[e]]
                m = 0.0
                for k in range(K):
                    m += th[k] * b[k]
                if m <= 1e-300:
                    continue
                r = data[e] / m
                for k in range(K):
                    acc[k] += r * b[k]
            for k in range(K):
                acc[k] = th[k] * acc[k] + alpha
            s = 0.0  # = n_d + Kα, less the tokens no topic gives a probability
            for k in range(K):
                s += acc[k]
            moved = 0.0
            for k in range(K):
                new = acc[k] / s
                moved = max(moved, abs(new - th[k]))
                th[k] = new
            if moved < tol:
                break
    return total


@njit(nogil=True, cache=True, fastmath=True)
def em_expected_counts(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    beta_t: np.ndarray,
    theta: np.ndarray,
    out_t: np.ndarray,
) -> float:
    """Add Σ_d θ_dk h_dw / (θ_d·β_w) into ``out_t[w, k]`` (in place); returns Σ log(θ_d·β_w)
    weighted by the counts (the documents' log-likelihood).

    The expected topic-word counts of EM are then ``out_t ⊙ beta_t``.

    Parameters
    ----------
    indptr, indices, data : CSR arrays of the counts (n_docs × V).
    beta_t : ndarray of shape (V, K), C-contiguous
    theta : ndarray of shape (n_docs, K)
    out_t : ndarray of shape (V, K)
    """
    K = beta_t.shape[1]
    loglik = 0.0
    for d in range(indptr.size - 1):
        th = theta[d]
        for e in range(indptr[d], indptr[d + 1]):
            w = indices[e]
            b = beta_t[w]
            m = 0.0
            for k in range(K):
                m += th[k] * b[k]
            if m <= 1e-300:
                continue
            loglik += data[e] * np.log(m)
            r = data[e] / m
            o = out_t[w]
            for k in range(K):
                o[k] += r * th[k]
    return loglik
