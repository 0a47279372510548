"""What the benchmarks share: the record of the machine they ran on, and how their JSON
results are written (aside, then renamed into place)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def git(*args: str) -> str | None:
    """``git -C REPO ARGS...``'s output, or None (no git, not a checkout)."""
    try:
        return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _sources_digest() -> str:
    """SHA-256 of the streamtopic package's Python sources that ran (names and contents)."""
    import streamtopic

    pkg = os.path.dirname(os.path.abspath(streamtopic.__file__))
    digest = hashlib.sha256()
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), "rb") as fh:
                digest.update(name.encode() + b"\0" + fh.read())
    return digest.hexdigest()


def _blas() -> dict[str, Any] | None:
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:  # older NumPy: no dict mode
        return None
    return {k: blas.get(k) for k in ("name", "version", "openblas configuration")}


def machine_info() -> dict[str, Any]:
    """The machine, the library versions and the code a benchmark ran on, and the load when
    it started (the machine is shared: wall times are read with it)."""
    import dask
    import distributed
    import h5py
    import psutil
    import scipy
    import zarr

    import streamtopic

    status = git("status", "--porcelain")
    threads_env = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                              "MKL_NUM_THREADS") if k in os.environ}
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count_logical": psutil.cpu_count(logical=True),
        "cpu_count_physical": psutil.cpu_count(logical=False),
        "memory_total_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "zarr": zarr.__version__,
        "h5py": h5py.__version__,
        "psutil": psutil.__version__,
        "streamtopic": streamtopic.__version__,
        "blas": _blas(),
        "blas_thread_env": threads_env,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty_files": status.splitlines() if status else [],
        "streamtopic_sources_sha256": _sources_digest(),
    }


def jsonable(o: Any) -> Any:
    """``json.dumps``'s ``default``: numpy scalars and arrays as numbers and lists."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def write_result(result: dict[str, Any], path: str) -> str:
    """Write a benchmark's JSON record to ``path`` (aside, then renamed; its directory made)
    and return its text."""
    from streamtopic._io import written_aside  # here: identity.py runs this module on older code

    text = json.dumps(result, indent=2, default=jsonable)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with written_aside(path) as tmp, open(tmp, "w") as fh:
        fh.write(text + "\n")
    return text


def load_shared_tokens(tokens: str) -> tuple[Any, Any, list[str]]:
    """The shared tokens ``real_corpora.py --keep`` leaves in the directory ``tokens``: the
    training and test documents (CSR, documents × words) and the vocabulary."""
    import scipy.sparse as sp

    train = sp.load_npz(os.path.join(tokens, "train.npz")).tocsr()
    test = sp.load_npz(os.path.join(tokens, "test.npz")).tocsr()
    with open(os.path.join(tokens, "vocab.txt"), encoding="utf-8") as fh:
        vocab = fh.read().split("\n")[:-1]
    return train, test, vocab
