"""The EM kernel compiled ahead of the refinement on a first fit (:mod:`streamtopic._warmup`):
the warm-up compiles exactly the specialisation the refinement calls, and, with an empty numba
cache, a child process fills it so that the fit's own process only loads it."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import streamtopic as st
from streamtopic import _tokenize, _warmup, synth
from streamtopic._kernels import add_rows, cvb0_documents
from streamtopic.corpus import read_corpus
from streamtopic.refinement import refine_topics


def test_warm_up_compiles_what_the_refinement_runs(tmp_path):
    _warmup.warm_up()
    compiled = [list(kernel.signatures) for kernel in (cvb0_documents, add_rows)]
    assert all(compiled)
    A, _ = synth.dirichlet_topics_with_anchors(100, 3, beta=0.05, seed=1)
    H = synth.sample_documents(A, 200, alpha=0.1, doc_length=30, seed=2)
    vocab = synth.default_vocab(100)
    with st.corpus.HDF5CorpusWriter(tmp_path / "c.h5") as w:
        w.append(H, vocab)
    res = refine_topics(A.T, read_corpus(str(tmp_path / "c.h5")), vocab, passes=2)
    assert res.passes == 2 and np.isfinite(res.loglik_per_token).all()
    # nothing new was compiled
    assert [list(kernel.signatures) for kernel in (cvb0_documents, add_rows)] == compiled


def test_nothing_starts_when_turned_off_or_compiled(monkeypatch):
    monkeypatch.setenv(_warmup.WARMUP_ENV, "0")
    assert _warmup.start() is None
    monkeypatch.setenv(_warmup.WARMUP_ENV, "1")
    _warmup.warm_up()  # compiled in this process: nothing to do
    # as in a process started with the cache warm (this one's import may have found it cold
    # and started a child: a fresh clone's first test run)
    monkeypatch.setattr(_warmup, "_thread", None)
    assert _warmup.cache_is_warm() and _warmup.start() is None


_FIRST_FIT = """
from streamtopic import _warmup
thread = _warmup.start()  # the one the package's import started: the cache was empty
assert thread is not None and _warmup.start() is thread
_warmup.wait()
from streamtopic._kernels import add_rows, cvb0_documents
_warmup.warm_up()
for kernel in (cvb0_documents, add_rows):
    print(sum(kernel.stats.cache_hits.values()), sum(kernel.stats.cache_misses.values()))
"""


@pytest.mark.slow
def test_a_first_fit_loads_what_a_child_process_compiled(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    env.pop(_warmup.WARMUP_ENV, None)
    out = subprocess.run([sys.executable, "-c", _FIRST_FIT], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "0"] * 2  # loaded from the cache, never compiled here
    again = subprocess.run([sys.executable, "-c", "from streamtopic import _warmup; "
                            "print(_warmup.cache_is_warm(), _warmup.start())"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert again.stdout.split() == ["True", "None"]


@pytest.mark.slow
def test_a_first_import_fills_the_cache_after_it_has_exited(tmp_path):
    """``import streamtopic`` on a machine without the kernels in numba's cache starts their
    compilation, which goes on when the importing process has exited (``streamtopic
    demo-path`` before a newcomer's first fit)."""
    cache = tmp_path / "numba"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    env.pop(_warmup.WARMUP_ENV, None)
    subprocess.run([sys.executable, "-c", "import streamtopic"], env=env, check=True,
                   timeout=300)
    for _ in range(600):  # the child compiles for a few seconds (more on a loaded machine)
        locks = list(cache.glob(f"**/{_warmup.LOCK_NAME}"))
        if list(cache.glob("**/_kernels.cvb0_documents-*.nbi")) and locks:
            with open(locks[0], "rb") as lock:  # and has finished: it holds the lock till then
                fcntl.flock(lock, fcntl.LOCK_SH)
            break
        time.sleep(0.5)
    env[_warmup.WARMUP_ENV] = "0"  # the check itself starts nothing
    out = subprocess.run([sys.executable, "-c", "from streamtopic import _warmup; "
                          "print(_warmup.cache_is_warm())"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.stdout.split() == ["True"], out.stderr
    assert list(cache.glob(f"**/{_warmup.LOCK_NAME}"))



_INGEST = """
import json, sys, time
from streamtopic import _tokenize as kt
from streamtopic.corpus import ChunkBuilder
from streamtopic.vocabulary import Tokenizer

def build(vocabulary):
    builder = ChunkBuilder("x", 0, Tokenizer(), vocabulary)
    builder.add_bytes(b"The fox and the dog, the fox")
    builder.add_text("Caf\\u00e9 na\\u00efve fox")
    builder.add_matches(["fox", "the", "Dog"])
    builder.flush()
    chunk = builder.chunks[0]
    return builder.kernel is not None, dict(zip(chunk.terms, chunk.counts.sum(0).A1.tolist()))

if sys.argv[1] == "first":
    print(json.dumps([build(None), build(("fox", "dog", "caf\\u00e9"))]))
    t0 = time.monotonic()
    while not kt.kernels_ready():  # the child compiles them (at the lowest priority)
        assert time.monotonic() - t0 < 900, "the kernels never reached the cache"
        time.sleep(0.5)
else:
    print(json.dumps([build(None), build(("fox", "dog", "caf\\u00e9"))]))
"""


@pytest.mark.slow
def test_a_first_ingest_tokenises_in_python_while_a_child_compiles(tmp_path):
    """With numba's cache empty, chunk builders tokenise in Python (compiling nothing in
    their own process) while one child compiles the tokenizer's kernels; the next process
    loads every kernel it calls from the cache and counts the same."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), NUMBA_DEBUG_CACHE="1")
    env.pop(_warmup.WARMUP_ENV, None)
    runs = {}
    for run in ("first", "next"):
        out = subprocess.run([sys.executable, "-c", _INGEST, run], env=env,
                             capture_output=True, text=True, timeout=1200)
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stdout.splitlines()
        runs[run] = json.loads(next(line for line in lines if line.startswith("[[")))
        # numba's cache messages of this process (not the child's, whose output is dropped)
        runs[run + " saved"] = [line for line in lines
                                if "data saved" in line and "_tokenize" in line]
        runs[run + " loaded"] = [line for line in lines
                                 if "data loaded" in line and "_tokenize" in line]
    assert [kernel for kernel, _ in runs["first"]] == [False, False]
    assert [kernel for kernel, _ in runs["next"]] == [True, True]
    assert [counts for _, counts in runs["first"]] == [counts for _, counts in runs["next"]]
    assert runs["first"][0][1] == {"fox": 4, "dog": 1, "Dog": 1, "café": 1, "naïve": 1}
    assert not runs["first saved"] and not runs["first loaded"]  # nothing compiled there
    assert not runs["next saved"] and len(runs["next loaded"]) >= 3  # all from the cache
    assert list((tmp_path / "numba").glob(f"**/{_tokenize.LOCK_NAME}"))
