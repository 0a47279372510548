"""Small text corpora shared by the tests of damaged stores and of operations."""

from __future__ import annotations

import os

import numpy as np

#: 260 letter-only words ("waa" … "wjz")
TERMS = [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(260)]


def write_docs(path: str | os.PathLike[str], n_docs: int, seed: int, length: int = 40) -> str:
    """Text documents (one a line) from 5 Dirichlet topics over :data:`TERMS`; returns the
    path."""
    topics = np.random.default_rng(12345).dirichlet(np.full(len(TERMS), 0.05), size=5)
    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        for _ in range(n_docs):
            p = rng.dirichlet(np.full(5, 0.3)) @ topics
            fh.write(" ".join(TERMS[w] for w in rng.choice(len(TERMS), size=length, p=p))
                     + "\n")
    return os.fspath(path)
