"""One seed per fit: the default ``seed=None`` is resolved once (to ``DEFAULT_SEED``), so every
stage, LP anchors included, is reproducible under it, and the rectified cache keys it as 0."""

from __future__ import annotations

import numpy as np
import pytest

import streamtopic as st
from streamtopic import synth
from streamtopic._random import DEFAULT_SEED, resolve_seed
from streamtopic.workspace import rectified_key


def _same(a: st.AnchorTopicModel, b: st.AnchorTopicModel) -> None:
    np.testing.assert_array_equal(a.anchors_, b.anchors_)
    np.testing.assert_array_equal(a.components_, b.components_)
    np.testing.assert_array_equal(a.topic_cooccurrence_, b.topic_cooccurrence_)
    np.testing.assert_array_equal(a.alpha_, b.alpha_)


@pytest.fixture(scope="module")
def noisy_store(tmp_path_factory, make_semi_synthetic_store):
    """A sampled (noisy) corpus' store: LP's noise sample and projection draw from the seed."""
    A, _ = synth.dirichlet_topics_with_anchors(400, 6, beta=0.1, seed=3)
    return make_semi_synthetic_store(tmp_path_factory.mktemp("seeds"), A, 3000,
                                     doc_length=60, seed=4)


@pytest.mark.parametrize("kw", [
    dict(method="plain", anchor_method="lp", anchor_min_df=1),  # the whole-store path
    dict(method="rectified", anchor_method="lp", refine_passes=0, core_size="all"),  # in memory
    dict(method="plain"),  # the sketch
    dict(method="rectified", refine_passes=0),  # rectification, QR anchors on the core
])
def test_two_default_fits_are_the_same_model(noisy_store, kw):
    first = st.AnchorTopicModel(6, progress=False, **kw).fit(noisy_store)
    second = st.AnchorTopicModel(6, progress=False, **kw).fit(noisy_store)
    _same(first, second)
    _same(first, st.AnchorTopicModel(6, seed=DEFAULT_SEED, progress=False, **kw)
          .fit(noisy_store))


def test_the_seed_is_resolved_once_for_the_fit():
    assert resolve_seed(None) == DEFAULT_SEED == 0 and resolve_seed(7) == 7
    assert st.AnchorTopicModel(5).fit_settings().seed == DEFAULT_SEED
    assert st.AnchorTopicModel(5, seed=11).fit_settings().seed == 11
    with pytest.raises(ValueError, match="seed"):
        resolve_seed(-1)


def test_the_rectified_cache_keys_the_default_seed_as_its_value():
    assert rectified_key(3, 20, "ap", 15, None) == rectified_key(3, 20, "ap", 15, 0) \
        == "v000003-K20-ap-15-seed0"
    assert rectified_key(3, 20, "ap", 15, 5) != rectified_key(3, 20, "ap", 15, 0)


def test_lp_anchors_draw_from_the_resolved_seed(noisy_store, monkeypatch):
    """The LP anchors' projection and noise sample are seeded under the default seed (they
    drew from ``default_rng(None)``, fresh entropy, before the seed was resolved per fit)."""
    from streamtopic import spectral as model_mod

    seeds = []
    real = model_mod.find_anchors_lp

    def recorded(*args, seed, **kwargs):
        seeds.append(seed)
        return real(*args, seed=seed, **kwargs)

    monkeypatch.setattr(model_mod, "find_anchors_lp", recorded)
    for kw in (dict(method="plain", anchor_min_df=1), dict(refine_passes=0, core_size="all")):
        st.AnchorTopicModel(6, anchor_method="lp", progress=False, **kw).fit(noisy_store)
    assert seeds == [DEFAULT_SEED, DEFAULT_SEED]
