"""Rectification (AP and DR): feasibility, accuracy, the out-of-core path, the store."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import scipy.sparse.linalg as spla
import zarr

import streamtopic as st
from streamtopic import synth
from streamtopic.rectification import RECTIFY_METHODS, RectifyResult, rectify

from ._reference import dense_cooccurrence_sum

V, K = 300, 6  # 300 = 4·64 + 44: ragged blocks at chunk 64


@pytest.fixture(scope="module")
def population():
    A, _ = synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=0)
    return synth.population_cooccurrence(A, 0.1)


@pytest.fixture(scope="module")
def sampled():
    """The unbiased estimator from 2,000 sampled documents of 50 tokens: non-negative but
    indefinite and of full rank."""
    A, _ = synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=0)
    H = synth.sample_documents(A, 2000, alpha=0.1, doc_length=50, seed=1)
    S = dense_cooccurrence_sum(H)
    return S / S.sum()


@pytest.fixture(scope="module")
def noisy(population):
    """The population plus symmetric Gaussian noise (entries of both signs), renormalised."""
    rng = np.random.default_rng(7)
    E = rng.standard_normal((V, V)) * population.mean() * 0.5
    Q = population + 0.5 * (E + E.T)
    return Q / Q.sum()


def _store(Q, path):
    return st.CooccurrenceStore.from_array(Q, synth.default_vocab(V), path, n_docs=1000,
                                           chunk_size=64)


@pytest.fixture(scope="module")
def noisy_store(noisy, tmp_path_factory):
    return _store(noisy, tmp_path_factory.mktemp("noisy") / "s.zarr")


@pytest.fixture(scope="module")
def population_store(population, tmp_path_factory):
    return _store(population, tmp_path_factory.mktemp("pop") / "s.zarr")


def _read(path) -> np.ndarray:
    return np.asarray(zarr.open_array(str(path), mode="r")[:])


def _rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("in_memory", [True, False])
def test_population_is_a_fixed_point(population, population_store, tmp_path, in_memory):
    n_iter = 15 if in_memory else 3
    r = rectify(population_store.Q, K, tmp_path / "r.zarr", n_iter=n_iter, in_memory=in_memory)
    assert r.in_memory is in_memory and len(r.movement) == n_iter
    assert _rel(_read(tmp_path / "r.zarr"), population) < 1e-8
    assert max(r.movement) < 1e-8


def test_ap_on_sampled_documents(population, sampled, tmp_path):
    r = rectify(sampled, K, tmp_path / "r.zarr", method="ap")
    C = _read(tmp_path / "r.zarr")
    assert isinstance(r, RectifyResult) and r.method == "ap" and r.n_iter == 15
    assert r.in_memory and r.path == str(tmp_path / "r.zarr")
    assert len(r.movement) == len(r.seconds) == len(r.passes) == 15
    np.testing.assert_array_equal(C, C.T)
    assert C.min() >= 0
    assert abs(C.sum() - 1) < 1e-12
    w = np.linalg.eigvalsh(C)[::-1]
    assert w[K] < 1e-4 * w[0]  # numerically of rank K
    assert np.linalg.eigvalsh(sampled)[0] < -1e-4 * w[0]  # the input was indefinite
    assert _rel(C, population) < _rel(sampled, population)
    assert r.movement[-1] < 1e-2 * r.movement[0]
    assert r.eigenvalues.shape == (K,) and np.all(np.diff(r.eigenvalues) <= 0)


def test_ap_and_dr_on_noisy_store(population, noisy, noisy_store, tmp_path):
    before = _rel(noisy, population)
    for method in ("ap", "dr"):
        r = rectify(noisy_store.Q, K, tmp_path / f"{method}.zarr", method=method)
        C = _read(tmp_path / f"{method}.zarr")
        np.testing.assert_allclose(C, C.T, rtol=0, atol=1e-15 * np.abs(C).max())
        assert C.min() >= 0, method
        assert abs(C.sum() - 1) < 1e-12, method
        assert _rel(C, population) < 0.5 * before, method
        assert r.movement[-1] < r.movement[0], method
    assert noisy.min() < 0


@pytest.mark.parametrize("method", ["ap", "dr"])
def test_out_of_core_equals_in_memory(noisy_store, tmp_path, method):
    kw = {"method": method, "n_iter": 4, "seed": 3}
    a = rectify(noisy_store.Q, K, tmp_path / "a.zarr", in_memory=True, **kw)
    b = rectify(noisy_store.Q, K, tmp_path / "b.zarr", in_memory=False, scratch=tmp_path / "s",
                **kw)
    assert a.in_memory and not b.in_memory
    A, B = _read(tmp_path / "a.zarr"), _read(tmp_path / "b.zarr")
    assert zarr.open_array(str(tmp_path / "b.zarr")).chunks == (64, 64)
    assert _rel(B, A) < 1e-6
    np.testing.assert_allclose(b.movement, a.movement, rtol=1e-6)
    np.testing.assert_allclose(b.eigenvalues, a.eigenvalues, rtol=1e-8)
    assert os.listdir(tmp_path / "s") == []  # scratch cleaned up


def test_first_projection_matches_eigsh(sampled, noisy_store, noisy, tmp_path):
    for Q, kw in ((sampled, {}), (noisy_store.Q, {"in_memory": False})):
        dense = Q if isinstance(Q, np.ndarray) else noisy
        r = rectify(Q, K, tmp_path / "r.zarr", n_iter=1, **kw)
        ref = np.sort(spla.eigsh(dense, k=K, which="LA", tol=1e-12)[0])[::-1]
        np.testing.assert_allclose(r.eigenvalues, np.maximum(ref, 0), rtol=1e-8)


def test_store_untouched_and_output_replaced(noisy_store, noisy, tmp_path):
    before = noisy_store.Q.compute()
    files = sorted(os.listdir(noisy_store.path))
    out = tmp_path / "sub" / "rect.zarr"
    rectify(noisy_store.Q, K, out, method="none")
    np.testing.assert_allclose(_read(out), noisy / noisy.sum(), rtol=1e-12, atol=1e-18)
    r = rectify(noisy_store.Q, K, out, n_iter=2, in_memory=False)  # replaces it
    C = _read(out)
    assert C.min() >= 0 and abs(C.sum() - 1) < 1e-12
    attrs = zarr.open_array(str(out)).attrs["streamtopic_rectified"]
    assert attrs["method"] == "ap" and attrs["n_iter"] == 2 and attrs["n_topics"] == K
    assert attrs["movement"] == r.movement
    np.testing.assert_array_equal(noisy_store.Q.compute(), before)
    assert sorted(os.listdir(noisy_store.path)) == files
    assert os.listdir(tmp_path / "sub") == ["rect.zarr"]  # no partial or scratch left


def test_failure_keeps_previous_output(sampled, tmp_path):
    out = tmp_path / "r.zarr"
    rectify(sampled, K, out, n_iter=1)
    good = _read(out)
    bad = sampled.copy()
    bad[3, 5] = bad[5, 3] = np.nan
    for kw in ({}, {"in_memory": False}):
        with pytest.raises(ValueError, match="Q"):
            rectify(bad, K, out, **kw)
        np.testing.assert_array_equal(_read(out), good)
        assert os.listdir(tmp_path) == ["r.zarr"]


def test_bad_parameters(sampled, tmp_path):
    out = tmp_path / "r.zarr"
    cases = [
        ({"method": "svd"}, "method"),
        ({"n_iter": -1}, "n_iter"),
        ({"n_iter": 2.5}, "n_iter"),
        ({"n_topics": 0}, "n_topics"),
        ({"n_topics": V}, "n_topics"),
        ({"memory_budget": 0}, "memory_budget"),
        ({"in_memory": "yes"}, "in_memory"),
        ({"seed": "abc"}, "seed"),
    ]
    for kw, name in cases:
        args = {"n_topics": K, **kw}
        with pytest.raises(ValueError, match=name):
            rectify(sampled, args.pop("n_topics"), out, **args)
    with pytest.raises(ValueError, match="Q"):
        rectify(sampled[:, :-1], K, out)
    (tmp_path / "file").write_text("not zarr")
    with pytest.raises(ValueError, match="out"):
        rectify(sampled, K, tmp_path / "file")
    assert (tmp_path / "file").read_text() == "not zarr"
    store = st.CooccurrenceStore.from_array(sampled, synth.default_vocab(V), tmp_path / "s.zarr",
                                            n_docs=10)
    q_path = tmp_path / "s.zarr" / "versions" / "v000001" / "Q"
    with pytest.raises(ValueError, match="out"):  # never over the store's own arrays
        rectify(store.Q, K, q_path)
    np.testing.assert_allclose(store.Q.compute(), sampled, rtol=1e-12)
    assert not out.exists()
    assert RECTIFY_METHODS == ("none", "ap", "dr")


def test_deterministic_logged_and_budget(sampled, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="streamtopic"):
        a = rectify(sampled, K, tmp_path / "a.zarr", n_iter=3, seed=5)
    lines = [m for m in caplog.messages if "movement" in m]
    assert len(lines) == 3 and "iteration 3/3" in lines[-1]
    b = rectify(sampled, K, tmp_path / "b.zarr", n_iter=3, seed=5)
    np.testing.assert_array_equal(_read(tmp_path / "a.zarr"), _read(tmp_path / "b.zarr"))
    assert a.movement == b.movement
    # the automatic choice follows the memory budget
    c = rectify(sampled, K, tmp_path / "c.zarr", n_iter=0, memory_budget=V * V * 8)
    assert not c.in_memory and c.n_iter == 0 and c.movement == [] and c.eigenvalues.shape == (0,)
    np.testing.assert_allclose(_read(tmp_path / "c.zarr"), sampled / sampled.sum(), rtol=1e-12)
