"""Progress output (:mod:`streamtopic.progress`): one display per stage, one bar over the EM
passes with the log-likelihood beside it, plain lines (no carriage-return frames) when
standard error is no terminal, nothing with ``progress=False`` / ``-q``."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading

import dask
import numpy as np
import pytest

import streamtopic as st
from streamtopic import synth
from streamtopic.cluster import n_workers
from streamtopic.corpus import read_corpus
from streamtopic.progress import PROGRESS_ENV, Passes, Stage, display_mode
from streamtopic.refinement import refine_topics

V, K = 300, 5


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A semi-synthetic HDF5 corpus (1,500 documents of 40 tokens) in about 15 partitions,
    its true topics (K×V) and vocabulary."""
    A, _ = synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=7)
    H = synth.sample_documents(A, 1500, alpha=0.1, doc_length=40, seed=8)
    d = tmp_path_factory.mktemp("progress")
    vocab = synth.default_vocab(V)
    with st.corpus.HDF5CorpusWriter(d / "c.h5") as w:
        w.append(H, vocab)
    start = 0.5 * A.T + 0.5 * np.random.default_rng(0).dirichlet(np.ones(V), K)
    return str(d / "c.h5"), start, vocab, int(H.sum())


def _corpus(path):
    return read_corpus(path, blocksize=20_000)


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)


# ----------------------------------------------------------------------------- the displays


def test_mode_follows_the_stream_and_the_environment(monkeypatch, no_env):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert display_mode(io.StringIO()) == "lines"
    assert display_mode(Terminal()) == "bar"
    monkeypatch.setenv(PROGRESS_ENV, "lines")
    assert display_mode(Terminal()) == "lines"
    monkeypatch.setenv(PROGRESS_ENV, "off")
    assert Stage("x", stream=io.StringIO()).mode == "off"
    assert Stage("x", enabled=False, mode="bar").mode == "off"


def test_lines_mode_writes_one_line_at_the_end_and_nothing_on_failure():
    out = io.StringIO()
    with Stage("counting", stream=out, mode="lines") as stage:
        stage.update(0.5, "half")
        assert out.getvalue() == ""  # nothing while the stage runs
    assert re.fullmatch(r"counting: half; \d+\.\d\d s\n", out.getvalue())
    out = io.StringIO()
    with pytest.raises(RuntimeError), Stage("failing", stream=out, mode="lines"):
        raise RuntimeError
    assert out.getvalue() == ""


def test_bar_mode_redraws_one_line_and_stops_its_thread():
    out = io.StringIO()
    with Stage("co-occurrence", stream=out, mode="bar") as stage, stage.tasks():
        dask.compute(*[dask.delayed(np.ones)(3) for _ in range(8)], scheduler="threads")
    # the redrawing thread ended
    assert not [t for t in threading.enumerate() if t.name == "streamtopic-progress"]
    text = out.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    frames = [f.rstrip() for f in text.rstrip("\n").split("\r") if f]
    assert frames and all(f.startswith("co-occurrence [") for f in frames)
    assert re.match(r"co-occurrence \[#{24}\] 100% \d+\.\d\d s$", frames[-1]), frames[-1]


def test_passes_bar_reaches_the_end_on_convergence_never_going_back():
    bar = Passes("refine", max_passes=50, tol=1e-3, stream=io.StringIO(), mode="bar")
    shown = []
    for value in (-8.0, -7.5, -7.4, -7.37, -7.362, -7.3605):
        bar.done_pass(value)
        shown.append(bar.fraction)
    assert shown == sorted(shown) and shown[-1] == 1.0 and shown[-2] < 1.0
    assert bar.note.startswith("pass 6 (<=50) loglik/token -7.3605 (+")
    fixed = Passes("refine", passes=4, stream=io.StringIO(), mode="bar")
    fixed.done_pass(-8.0)
    assert fixed.fraction == 0.25 and fixed.note == "pass 1/4 loglik/token -8.0000"


# ----------------------------------------------------------------------------- refinement


def test_refinement_in_a_log_is_one_line_per_stage(small, capsys, no_env):
    path, start, vocab, total = small
    res = refine_topics(start, _corpus(path), vocab, sample_tokens=total // 3, tol=1e-3,
                        progress=True)
    # read in two batches or more (the first takes one partition per worker, at least 2)
    assert res.sample_partitions > max(2, n_workers())
    assert res.full_pass and res.passes > 2
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert len(lines) == 3, err
    assert re.fullmatch(rf"refine: reading the sample: {res.sample_docs:,} documents, "
                        rf"{res.sample_tokens:,} tokens; \d+\.\d\d s", lines[0])
    ll = f"{res.loglik_per_token[-1]:.4f}"
    conv = ", converged" if res.converged else ""
    assert re.fullmatch(rf"refine: {res.passes} passes, log-likelihood/token {ll}{conv}; "
                        r"\d+\.\d\d s", lines[1]), lines[1]
    assert re.fullmatch(r"refine: full pass: \d+\.\d\d s", lines[2])


def test_refinement_on_a_terminal_is_one_bar_over_the_passes(small, capsys, monkeypatch):
    path, start, vocab, total = small
    monkeypatch.setenv(PROGRESS_ENV, "bar")
    res = refine_topics(start, _corpus(path), vocab, sample_tokens=None, passes=4,
                        progress=True)
    err = capsys.readouterr().err
    assert err.count("\n") == 2  # two displays: reading the sample, then the passes
    reading, passes = err.split("\n")[:2]
    assert all(f.startswith("refine: reading the sample [") for f in reading.split("\r") if f)
    frames = [f.rstrip() for f in passes.split("\r") if f]
    assert all(f.startswith("refine [") for f in frames)
    last = f"pass 4/4 loglik/token {res.loglik_per_token[-1]:.4f}"
    assert "100%" in frames[-1] and last in frames[-1], frames[-1]
    assert "refine pass" not in err


def test_no_output_without_progress(small, capsys):
    path, start, vocab, _ = small
    refine_topics(start, _corpus(path), vocab, passes=2, progress=False)
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------------------- the command


def _ingest(kos_docword: str, store: str, stderr_tty: bool) -> str:
    """``streamtopic ingest`` with standard error on a pseudo-terminal or a pipe; returns
    what it wrote there."""
    env = {k: v for k, v in os.environ.items() if k != PROGRESS_ENV}
    cmd = [sys.executable, "-m", "streamtopic", "ingest", kos_docword, "--store", store]
    if not stderr_tty:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert res.returncode == 0, res.stderr
        return res.stderr
    import pty

    parent, child = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=child, env=env)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(parent, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=300) == 0
    os.close(parent)
    return b"".join(chunks).decode()


@pytest.mark.slow
def test_command_shows_bars_on_a_terminal_and_lines_in_a_log(kos_docword, tmp_path):
    log = _ingest(kos_docword, str(tmp_path / "a.zarr"), stderr_tty=False)
    assert "\r" not in log
    for stage in ("vocabulary pass", "co-occurrence"):
        assert len(re.findall(rf"^{stage}: \d+\.\d\d s$", log, re.M)) == 1, log
    tty = _ingest(kos_docword, str(tmp_path / "b.zarr"), stderr_tty=True)
    frames = tty.replace("\r\n", "\n").split("\r")
    assert any(re.match(r"co-occurrence \[#*-*\] \d+%", f) for f in frames), tty
    assert not re.search(r"^co-occurrence: ", tty, re.M)


@pytest.mark.slow
def test_a_distributed_client_gets_one_bar_per_stage_and_a_line_in_a_log(capsys, monkeypatch):
    from distributed import Client

    from streamtopic.cluster import compute, persist

    items = [dask.delayed(np.ones)(3) for _ in range(6)]
    with Client(processes=False, n_workers=1, threads_per_worker=2,
                dashboard_address=None):
        monkeypatch.setenv(PROGRESS_ENV, "bar")
        (got,) = compute(items, label="summing")
        persist(items, label="holding")
        bar = capsys.readouterr().err
        monkeypatch.setenv(PROGRESS_ENV, "lines")
        compute(items, label="summing")
        lines = capsys.readouterr().err
    assert [x.tolist() for x in got] == [[1.0, 1.0, 1.0]] * 6
    assert bar.count("\n") == 2
    summing, holding = bar.split("\n")[:2]
    assert summing.split("\r")[-1].startswith("summing [" + "#" * 24 + "] 100%")
    assert holding.split("\r")[-1].startswith("holding [" + "#" * 24 + "] 100%")
    assert re.fullmatch(r"summing: \d+\.\d\d s\n", lines)
