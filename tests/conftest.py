"""Shared fixtures: the real corpora, both pair-kernel implementations, small semi-synthetic
stores, and a fast in-process scheduler.

The real corpora are read from ``../shared/data`` (or ``$STREAMTOPIC_SHARED_DATA``). Without
it, UCI KOS falls back to the copy bundled in the package, and the tests that need 20
Newsgroups are skipped, naming the missing path. CI always has ``../shared``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace

import dask
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("STREAMTOPIC_SHARED_DATA", ROOT.parent / "shared" / "data"))
NEWSGROUPS_TAR = SHARED_DATA / "20newsgroups" / "20news-bydate.tar.gz"


def _kos_dir() -> Path:
    """The directory holding ``docword.kos.txt.gz`` and ``vocab.kos.txt``: the shared
    corpora's, else the package's bundled copy (the same files)."""
    shared = SHARED_DATA / "uci-kos"
    if (shared / "docword.kos.txt.gz").is_file() and (shared / "vocab.kos.txt").is_file():
        return shared
    from streamtopic.corpus import bundled_corpus

    return Path(bundled_corpus()).parent


@pytest.fixture(scope="session")
def kos_dir() -> Path:
    """UCI KOS: the directory of ``docword.kos.txt.gz`` and ``vocab.kos.txt``."""
    return _kos_dir()


@pytest.fixture(scope="session")
def kos_docword(kos_dir: Path) -> str:
    """UCI KOS' ``docword.kos.txt.gz``, as a string path."""
    return str(kos_dir / "docword.kos.txt.gz")


@pytest.fixture(scope="session")
def newsgroups_tar() -> Path:
    """The 20 Newsgroups archive (not bundled: tests that need it skip without it)."""
    if not NEWSGROUPS_TAR.is_file():
        pytest.skip(f"20 Newsgroups not found at {NEWSGROUPS_TAR} (set STREAMTOPIC_SHARED_DATA)")
    return NEWSGROUPS_TAR


@pytest.fixture(scope="session")
def sotu_jsonl() -> Path:
    """The State of the Union paragraphs (JSON Lines, gzip; ``year`` field; not bundled)."""
    path = SHARED_DATA / "sotu" / "sotu.jsonl.gz"
    if not path.is_file():
        pytest.skip(f"the State of the Union paragraphs not found at {path} "
                    "(set STREAMTOPIC_SHARED_DATA)")
    return path


# ----------------------------------------------------------------------------- pair kernels


def _compiled_pairs() -> ModuleType | None:
    """The C extension ``streamtopic._pairs``, or None when it was not built."""
    try:
        return importlib.import_module("streamtopic._pairs")
    except ImportError:
        return None


NO_C_KERNELS = "streamtopic._pairs not built (no C compiler at install): ingest uses numba's"


@pytest.fixture(scope="session")
def compiled_pairs() -> ModuleType:
    """The C pair kernels ``streamtopic._pairs``; a test that needs them skips without them."""
    module = _compiled_pairs()
    if module is None:
        pytest.skip(NO_C_KERNELS)
    return module


@pytest.fixture(params=[
    pytest.param("c", marks=pytest.mark.skipif(_compiled_pairs() is None, reason=NO_C_KERNELS)),
    "numba",
])
def pair_kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """One implementation of the ingest pair kernels, the C extension (when built) or the
    numba fallback, as ``.add_pairs_dense``, ``.count_pairs`` and ``.name``. In-process
    ingests inside the test use it: with the C extension, dense running sums take its tiled
    kernel (BLAS for dense documents, ``PAIR_METHOD = "blas"``); with numba, the scalar
    kernel (``PAIR_METHOD = "scalar"``)."""
    module: ModuleType | None
    if request.param == "c":
        module = _compiled_pairs()
        assert module is not None
    else:
        from streamtopic import _kernels as module
    kernels = (module.add_pairs_dense, module.count_pairs)
    monkeypatch.setattr("streamtopic.cooccurrence.pair_kernels", lambda: kernels)
    monkeypatch.setattr("streamtopic.cooccurrence.PAIR_METHOD",
                        "blas" if request.param == "c" else "scalar")
    return SimpleNamespace(name=request.param, add_pairs_dense=kernels[0],
                           count_pairs=kernels[1])


# ----------------------------------------------------------------------------- small stores


@pytest.fixture(scope="session")
def make_semi_synthetic_store() -> Callable[..., Path]:
    """A factory: ``make(directory, A, n_docs, *, doc_length, seed, alpha=0.1)`` writes an
    HDF5 corpus drawn from the topics ``A`` (V×K; θ ~ Dirichlet(alpha)) to ``directory/c.h5``,
    its vocabulary to ``directory/vocab.txt``, ingests it (threads) with that vocabulary into
    ``directory/s.zarr`` and returns that path."""
    import streamtopic as st
    from streamtopic import synth

    def make(directory: Path, A: np.ndarray, n_docs: int, *, doc_length: int, seed: int,
             alpha: float = 0.1) -> Path:
        synth.write_corpus(str(directory / "c.h5"), A, n_docs, format="hdf5", alpha=alpha,
                           doc_length=doc_length, seed=seed)
        (directory / "vocab.txt").write_text("\n".join(synth.default_vocab(A.shape[0])) + "\n")
        with dask.config.set(scheduler="threads"):
            st.ingest(str(directory / "c.h5"), directory / "s.zarr",
                      vocab=str(directory / "vocab.txt"), progress=False)
        return directory / "s.zarr"

    return make


@pytest.fixture(scope="session")
def make_population_store() -> Callable[..., Path]:
    """A factory: ``make(path, A, alpha=0.1, n_docs=10**6)`` writes the store of the population
    co-occurrence A E[θθᵀ] Aᵀ (θ ~ Dirichlet(alpha); no ingest) to ``path`` and returns it."""
    from streamtopic import synth
    from streamtopic.store import CooccurrenceStore

    def make(path: Path, A: np.ndarray, alpha: float = 0.1, n_docs: int = 10**6) -> Path:
        Q = synth.population_cooccurrence(A, alpha)
        CooccurrenceStore.from_array(Q, synth.default_vocab(A.shape[0]), path, n_docs=n_docs)
        return path

    return make


@pytest.fixture(autouse=True)
def _threaded_scheduler():
    """API tests run on Dask's threaded scheduler (fast, in process); tests of the local
    cluster and of real processes start their own."""
    with dask.config.set(scheduler="threads"):
        yield


@pytest.fixture(autouse=True, scope="session")
def _gzip_index_dir(tmp_path_factory):
    """Indexes of gzip inputs go to a directory of this test session (inherited by the
    subprocesses tests start), not to the machine's temporary directory."""
    old = os.environ.get("STREAMTOPIC_GZIP_INDEX_DIR")
    os.environ["STREAMTOPIC_GZIP_INDEX_DIR"] = str(tmp_path_factory.mktemp("gzip-index"))
    yield
    if old is None:
        os.environ.pop("STREAMTOPIC_GZIP_INDEX_DIR", None)
    else:
        os.environ["STREAMTOPIC_GZIP_INDEX_DIR"] = old
