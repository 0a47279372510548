"""Named anchors (issue 27): the conditioned anchor search, tandem rows, the checks of the
named words, the estimator's parameters, exclusions, refits and the command line."""

from __future__ import annotations

import numpy as np
import pytest

import streamtopic as st
from streamtopic import synth
from streamtopic.anchors import find_anchors, find_anchors_qr
from streamtopic.metrics import matched_l1
from streamtopic.seeding import (
    lookup_words,
    name_anchors,
    read_anchor_words,
    tandem_rows,
)

V, K, M = 600, 8, 3


def _population(seed: int = 3, V: int = 300, K: int = 8):
    A, anchors = synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=seed)
    Q = synth.population_cooccurrence(A, 0.1)
    p = Q.sum(axis=1)
    return A, anchors, Q, p, Q / p[:, None]


# ----------------------------------------------------------------------------- the search


@pytest.mark.parametrize("how", ["qr", "exact"])
def test_named_planted_anchors_come_first_and_the_rest_are_found(how):
    """On a population Q the search conditioned on 3 planted anchors finds the other 5."""
    _, anchors, Q, p, Qbar = _population()
    named = anchors[[4, 0, 6]]
    cand = np.arange(Q.shape[0])
    if how == "qr":
        res = find_anchors_qr(Q, p, K, cand, in_memory=True, named=named)
    else:
        res = find_anchors(Qbar, K, cand, named=named, precision="double")
    assert res.anchors[:M].tolist() == named.tolist()
    assert sorted(res.anchors.tolist()) == sorted(anchors.tolist())
    assert res.distances.shape == (K,) and (res.distances > 0).all()


def test_free_picks_are_farthest_from_the_named_span():
    """The first free pick maximises the residual after projecting out the named rows (a
    word that is not an anchor, named, still conditions the search), checked against a
    least-squares projection."""
    _, anchors, Q, p, Qbar = _population(seed=4)
    named = np.array([0, 1])  # two ordinary words, not anchors
    cand = np.arange(2, Q.shape[0])
    res = find_anchors_qr(Q, p, 3, cand, in_memory=True, named=named)
    B = Qbar[named].T
    coef, *_ = np.linalg.lstsq(B, Qbar[cand].T, rcond=None)
    resid = np.linalg.norm(Qbar[cand].T - B @ coef, axis=0)
    assert res.anchors[2] == cand[np.argmax(resid)]
    assert not np.isin(res.anchors[2:], named).any()


def test_cleanup_never_replaces_a_named_anchor():
    """A wrong (common) word named stays first through the cleanup sweeps; the named rows
    are never candidates."""
    _, anchors, Q, p, Qbar = _population(seed=5)
    common = int(np.argmax(p))
    res = find_anchors(Qbar, K, np.arange(Q.shape[0]), named=[common], precision="double",
                       max_sweeps=10)
    assert res.anchors[0] == common and res.greedy[0] == common
    assert all(h[0] == common for h in res.history)
    assert np.unique(res.anchors).size == K


def test_tandem_rows_replace_the_named_rows():
    """``named_rows`` (a tandem's combined row) conditions the search instead of the named
    word's own row."""
    _, anchors, Q, p, Qbar = _population(seed=6)
    row = Qbar[anchors[[0, 1]]].mean(axis=0)[None, :]  # a point between two vertices
    res = find_anchors_qr(Q, p, K, np.arange(Q.shape[0]), in_memory=True, named=anchors[:1],
                          named_rows=row)
    plain = find_anchors_qr(Q, p, K, np.arange(Q.shape[0]), in_memory=True,
                            named=anchors[:1])
    assert res.anchors[0] == anchors[0]
    assert res.distances[0] == pytest.approx(np.linalg.norm(row))
    assert plain.distances[0] == pytest.approx(np.linalg.norm(Qbar[anchors[0]]))


def test_a_named_row_in_the_span_of_the_others_is_an_error():
    _, anchors, Q, p, Qbar = _population(seed=7)
    rows = np.vstack([Qbar[anchors[0]], Qbar[anchors[0]]])
    with pytest.raises(ValueError, match="named anchor 2 is a combination"):
        find_anchors_qr(Q, p, K, np.arange(Q.shape[0]), in_memory=True,
                        named=anchors[:2], named_rows=rows)


# ----------------------------------------------------------------------------- tandem rows


def test_tandem_rows_harmonic_mean_min():
    rows = np.array([[0.5, 0.3, 0.2, 0.0],
                     [0.2, 0.2, 0.2, 0.4],
                     [0.1, 0.6, 0.3, 0.0]])
    topic = np.array([0, 0, 1])
    h = tandem_rows(rows, topic, "harmonic")
    expect = np.array([2 / (1 / 0.5 + 1 / 0.2), 2 / (1 / 0.3 + 1 / 0.2), 2 / (1 / 0.2 + 1 / 0.2),
                       0.0])
    np.testing.assert_allclose(h[0], expect / expect.sum())
    np.testing.assert_array_equal(h[1], rows[2])  # a single word's row as it is
    np.testing.assert_allclose(tandem_rows(rows, topic, "mean")[0], [0.35, 0.25, 0.2, 0.2])
    m = np.array([0.2, 0.2, 0.2, 0.0])
    np.testing.assert_allclose(tandem_rows(rows, topic, "min")[0], m / m.sum())
    with pytest.raises(ValueError, match="tandem"):
        tandem_rows(rows, topic, "max")


# ----------------------------------------------------------------------------- words


def test_lookup_and_file(tmp_path):
    vocab = ["orbit", "nasa", "space", "hockey"]
    np.testing.assert_array_equal(lookup_words(vocab, ["space", "zz", "orbit"]), [2, -1, 0])
    f = tmp_path / "a.txt"
    f.write_text("# seeds\nspace nasa, orbit\n\n  hockey\n")
    assert read_anchor_words(f) == [["space", "nasa", "orbit"], ["hockey"]]
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(ValueError, match="names no anchor words"):
        read_anchor_words(tmp_path / "empty.txt")


@pytest.mark.parametrize("groups, match", [
    ([["space", "zzz", "yyy"]], "not in the vocabulary: 'zzz', 'yyy'"),
    ([["hockey"]], r"'hockey' \(in 3 documents\)"),
    ([["space"], ["space", "nasa"]], "named more than once: 'space'"),
    ([["nasa"]], "also excluded: 'nasa'"),
    ([["space"], ["nasa"], ["orbit"]], "more than n_topics=2"),
    ([[]], "has no words"),
])
def test_bad_named_words_are_one_error_naming_them(groups, match):
    vocab = ["orbit", "nasa", "space", "hockey"]
    df = np.array([50, 40, 60, 3])
    with pytest.raises(ValueError, match=match):
        name_anchors(groups, vocab, df, 10, 2, excluded=np.array([1]))


def test_named_anchors_resolved():
    named = name_anchors([["space", "nasa"], ["orbit"]], ["orbit", "nasa", "space"],
                         np.array([50, 40, 60]), 10, 4)
    assert named.ids.tolist() == [2, 1, 0] and named.topic.tolist() == [0, 0, 1]
    assert named.first.tolist() == [2, 0] and named.tandem and named.m == 2
    core = np.array([0, 1, 2, 5])
    assert named.local(core[[0, 1, 2]]).ids.tolist() == [2, 1, 0]
    with pytest.raises(ValueError, match="outside the words"):
        named.local(np.array([0, 2]))


# ----------------------------------------------------------------------------- the estimator


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, make_semi_synthetic_store):
    A, anchors = synth.dirichlet_topics_with_anchors(V, K, beta=0.05, seed=5)
    d = tmp_path_factory.mktemp("seeded")
    return A, anchors, make_semi_synthetic_store(d, A, 4000, doc_length=80, seed=6)


def _words(anchors):
    vocab = synth.default_vocab(V)
    return [[vocab[a]] for a in anchors]


@pytest.mark.parametrize("anchor_method", ["sketch", "qr"])
def test_naming_planted_anchors_recovers_those_topics(corpus, anchor_method):
    """Semi-synthetic: the named planted anchors' topics come first and are at least as
    close to the truth as the unseeded fit's matched topics (mean), the others as before."""
    A, anchors, store = corpus
    kw = dict(method="plain", anchor_method=anchor_method, seed=0)
    base = st.AnchorTopicModel(K, **kw).fit(store)
    seeded = st.AnchorTopicModel(K, anchor_words=_words(anchors[:M]), **kw).fit(store)
    assert seeded.anchors_[:M].tolist() == anchors[:M].tolist()
    named_l1 = np.abs(A[:, :M] - seeded.components_[:M].T).sum(axis=0)
    mb = matched_l1(A, base.components_.T)
    assert named_l1.mean() <= mb.per_topic[:M].mean() + 0.01, (named_l1, mb.per_topic[:M])
    rest = matched_l1(A[:, M:], seeded.components_[M:].T)
    assert rest.mean <= mb.per_topic[M:].mean() + 0.02
    assert seeded.diagnostics_["seeding"]["named"] == _words(anchors[:M])


def test_a_wrong_named_anchor_gives_a_worse_topic_not_a_crash(corpus):
    A, anchors, store = corpus
    vocab = synth.default_vocab(V)
    common = vocab[_common_word(A)]
    kw = dict(method="plain", anchor_method="qr", seed=0)
    right = st.AnchorTopicModel(K, anchor_words=_words(anchors[:1]), **kw).fit(store)
    wrong = st.AnchorTopicModel(K, anchor_words=[[common]], **kw).fit(store)
    assert wrong.anchor_words_[0] == common
    # the named topic's distance to its closest true topic
    l1 = lambda m: np.abs(A - m.components_[0][:, None]).sum(axis=0).min()  # noqa: E731
    assert l1(wrong) > 2 * l1(right), (l1(wrong), l1(right))


def _common_word(A: np.ndarray) -> int:
    """The most frequent word that no topic holds half of (a shared, common word)."""
    share = A / A.sum(axis=1, keepdims=True)
    return int(np.argmax(np.where(share.max(axis=1) < 0.5, A.sum(axis=1), -1.0)))


def test_estimator_errors_name_the_word(corpus):
    _, _, store = corpus
    with pytest.raises(ValueError, match="'nosuchword'"):
        st.AnchorTopicModel(K, method="plain", anchor_words=[["nosuchword"]]).fit(store)
    with st.CooccurrenceStore.open(store) as s:
        df = np.asarray(s.doc_freq)
        rare = synth.default_vocab(V)[int(np.argmin(np.where(df > 0, df, 10**9)))]
    with pytest.raises(ValueError, match=f"'{rare}' \\(in "):
        st.AnchorTopicModel(K, method="plain", anchor_words=[[rare]],
                            anchor_min_df=int(df.max())).fit(store)
    with pytest.raises(ValueError, match="anchor_words="):
        st.AnchorTopicModel(K, anchor_words=[1, 2]).fit(store)


def test_tandem_on_a_core_keeps_named_topics_through_refinement(corpus):
    """Default method on a core: a tandem anchor (planted anchor + the topic's next word)
    is topic 0 after refinement, and its words stay among the topic's top words."""
    A, anchors, store = corpus
    vocab = synth.default_vocab(V)
    order = np.argsort(-A[:, 0])
    second = [int(order[order != anchors[0]][0])]  # topic 0's top word but its anchor
    groups = [[vocab[anchors[0]], vocab[second[0]]], [vocab[anchors[1]]]]
    m = st.AnchorTopicModel(K, seed=0, core_size=300, refine_passes=3,
                            anchor_words=groups).fit(store)
    assert m.anchor_words_[:2] == [groups[0][0], groups[1][0]]
    top = m.top_words(10)
    assert set(groups[0]) <= set(top[0]) and groups[1][0] in top[1]
    l1 = np.abs(A[:, :2] - m.components_[:2].T).sum(axis=0)
    assert (l1 < 0.3).all(), l1
    assert m.diagnostics_["seeding"]["tandem"] == "mean"


@pytest.mark.parametrize(("anchor_method", "budget"), [("qr", None), ("sketch", None),
                                                       ("qr", 4 * 2**20)])
def test_tandem_over_the_whole_stored_q_fits_as_in_memory(corpus, anchor_method, budget):
    """Tandem anchors over the whole stored Q (``method='plain'``; Q held in memory, or read
    by blocks under a small budget): the same anchors and topics as the in-memory stages on
    the same Q and candidates."""
    from streamtopic.sketch import frequent_words
    from streamtopic.spectral import FitSettings, spectral_in_memory

    A, anchors, store = corpus
    vocab = synth.default_vocab(V)
    second = [int(next(w for w in np.argsort(-A[:, k]) if w != anchors[k])) for k in (0, 2)]
    groups = [[vocab[anchors[0]], vocab[second[0]]], [vocab[anchors[1]]],
              [vocab[anchors[2]], vocab[second[1]]]]
    m = st.AnchorTopicModel(K, method="plain", anchor_method=anchor_method, seed=0,
                            anchor_words=groups, tandem="harmonic", memory_budget=budget,
                            block_rows=64).fit(store)
    with st.CooccurrenceStore.open(store) as s:
        Q = np.asarray(s.read_dense(), dtype=np.float64)
        named = name_anchors(groups, s.vocab, None, 0, K)
        frequent, _ = frequent_words(s, None)
    settings = FitSettings(recover="l2", rectify="none", anchor_method="qr", topic_topic="pinv",
                           refine_passes=0, core_size="all", seed=0)
    fit = spectral_in_memory(Q / Q.sum(), K, settings, seconds={}, named=named,
                             tandem="harmonic", candidates=np.union1d(frequent, named.ids))
    assert m.anchors_.tolist() == fit.anchors.anchors.tolist()
    assert m.anchors_[:3].tolist() == anchors[:3].tolist()
    np.testing.assert_allclose(m.components_, fit.A.T, atol=1e-9)
    np.testing.assert_allclose(m.topic_cooccurrence_, fit.R, atol=1e-9)
    with pytest.raises(ValueError, match="tandem anchors need a recovery"):
        st.AnchorTopicModel(K, method="plain", recover="original",
                            anchor_words=groups).fit(store)


def test_exclusions_and_refit(corpus):
    A, anchors, store = corpus
    vocab = synth.default_vocab(V)
    m = st.AnchorTopicModel(K, method="plain", anchor_method="qr", seed=0).fit(store)
    gone = [m.anchor_words_[0], m.top_words(1)[1][0]]
    m.refit(exclude_words=gone)
    assert not set(gone) & set(m.anchor_words_)
    assert not set(gone) & {w for t in m.top_words(20) for w in t}
    m.refit(anchor_words=_words(anchors[2:4]))
    assert m.anchors_[:2].tolist() == anchors[2:4].tolist()
    assert m.diagnostics_["seeding"] == {"named": _words(anchors[2:4]), "tandem": None,
                                         "excluded": gone}
    with pytest.raises(ValueError, match="excluded words not in the vocabulary: 'qqq'"):
        m.refit(exclude_words=["qqq"])
    del vocab


def test_cli_anchor_words_and_from_model(corpus, tmp_path):
    from click.testing import CliRunner

    from streamtopic import cli

    _, anchors, store = corpus
    vocab = synth.default_vocab(V)
    f = tmp_path / "anchors.txt"
    f.write_text(f"{vocab[anchors[1]]}\n{vocab[anchors[5]]}\n")
    out = tmp_path / "m.zarr"
    res = CliRunner().invoke(cli.main, ["fit", str(store), "-k", str(K), "--method", "plain",
                                        "--anchor-words", str(f), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert f"named [{vocab[anchors[1]]}]" in res.output
    m = st.AnchorTopicModel.load(out)
    assert m.anchors_[:2].tolist() == [anchors[1], anchors[5]]
    bad = tmp_path / "bad.txt"
    bad.write_text("nosuchword\n")
    again = tmp_path / "m2.zarr"
    res = CliRunner().invoke(cli.main, ["fit", str(store), "--from-model", str(out),
                                        "--anchor-words", str(bad), "-o", str(again), "-q"])
    assert res.exit_code == 1 and "'nosuchword'" in res.output
    assert "Traceback" not in res.output
    f.write_text(f"{vocab[anchors[2]]}\n")
    res = CliRunner().invoke(cli.main, ["fit", str(store), "--from-model", str(out),
                                        "--anchor-words", str(f), "-o", str(again), "-q"])
    assert res.exit_code == 0, res.output
    m2 = st.AnchorTopicModel.load(again)
    assert m2.method == "plain" and m2.n_topics == K and m2.anchors_[0] == anchors[2]


def test_refit_without_refinement_previews_on_the_same_core(corpus):
    """``refit(refine_passes=0)`` of a model fitted on a core: the spectral stages on that
    core only (no corpus read), the named topics first; words outside the core get 0."""
    A, anchors, store = corpus
    m = st.AnchorTopicModel(K, seed=0, core_size=300, refine_passes=2).fit(store)
    core_before = m.diagnostics_["core"]
    m.refit(anchor_words=_words(anchors[:2]), refine_passes=0)
    assert m.diagnostics_["core"] == core_before and m.diagnostics_["refinement"] is None
    assert "refine" not in m.diagnostics_["seconds"]
    assert m.anchors_[:2].tolist() == anchors[:2].tolist()
    with st.CooccurrenceStore.open(store) as s:
        df = np.asarray(s.doc_freq)
    outside = np.argsort(-df, kind="stable")[300:]
    assert (m.components_[:, outside] == 0).all()
    np.testing.assert_allclose(m.components_.sum(axis=1), 1.0)
    # a plain fit without refinement still takes the whole vocabulary
    m2 = st.AnchorTopicModel(K, seed=0, refine_passes=0, core_size=None).fit(store)
    assert m2.diagnostics_["core"] is None


def test_report_marks_named_topics_and_hides_excluded_words(corpus, tmp_path):
    from streamtopic.model import top_words_table
    from streamtopic.report import _labels

    A, anchors, store = corpus
    words = [[synth.default_vocab(V)[anchors[3]]]]
    m = st.AnchorTopicModel(K, method="plain", anchor_method="qr", seed=0,
                            anchor_words=words).fit(store)
    hidden = m.top_words(1)[1][0]
    m.set_params(exclude_words=[hidden])  # shown words change without a refit
    assert hidden not in {w for t in m.top_words(10) for w in t}
    lines = top_words_table(m)
    assert lines[0].startswith(f"topic   0 ({m.topic_prevalence_[0]:.3f}) named [{words[0][0]}]")
    assert "named" not in lines[1]
    assert _labels(m)[0] == f"0 {words[0][0]}"
    m.report(tmp_path / "r.html")  # renders with named topics and exclusions
    assert (tmp_path / "r.html").stat().st_size > 0


@pytest.mark.parametrize("anchor_method", ["sketch", "qr"])
def test_a_named_word_below_the_automatic_threshold(corpus, anchor_method):
    """A named word needs 10 documents, not the automatic candidates' threshold: over the
    whole stored Q (the sketch holds its point too) it is the first anchor."""
    _, _, store = corpus
    with st.CooccurrenceStore.open(store) as s:
        df = np.asarray(s.doc_freq)
    auto = st.sketch.default_anchor_min_df(4000)
    word = int(np.flatnonzero((df >= 10) & (df < auto))[0])
    m = st.AnchorTopicModel(K, method="plain", anchor_method=anchor_method, seed=0,
                            anchor_words=[[synth.default_vocab(V)[word]]]).fit(store)
    assert m.anchors_[0] == word and np.unique(m.anchors_).size == K
    assert m.diagnostics_["anchor_min_df"] == auto


# ----------------------------------------------------------------------------- refinement


def test_named_mixture_mixes_each_named_topic_with_its_named_words():
    from streamtopic.refinement import named_entries, named_mixture
    from streamtopic.seeding import pinned_entries

    named = name_anchors([["c", "a"], ["d"]], ["a", "b", "c", "d", "e"], None, 0, 3)
    pinned = pinned_entries(named, 3, 5)
    words = named_entries(pinned)
    assert words.tolist() == [[True, False, True, False, False],
                              [False, False, False, True, False],
                              [False] * 5]
    beta = np.array([[0.0, 0.3, 0.1, 0.0, 0.6], [0.2, 0.2, 0.0, 0.2, 0.4],
                     [0.2, 0.2, 0.2, 0.2, 0.2]])
    mixed = named_mixture(beta, words, 0.25)
    np.testing.assert_allclose(mixed[0], 0.75 * beta[0] + 0.25 * np.array([0, 0, 1, 0, 0]))
    np.testing.assert_allclose(mixed[1], 0.75 * beta[1] + 0.25 * np.array([0, 0, 0, 1, 0]))
    np.testing.assert_array_equal(mixed[2], beta[2])  # no named words: as it is
    np.testing.assert_array_equal(named_mixture(beta, words, 0.0), beta)
    empty = beta.copy()
    empty[1, 3], empty[1, 4] = 0.0, 0.6  # a named topic without mass on its named word
    np.testing.assert_array_equal(named_mixture(empty, words, 0.25)[1], empty[1])


def test_a_named_topic_started_as_a_catch_all_ends_about_its_words(tmp_path):
    """Issue 27's gun topic in miniature: four topics of their own words and one of common
    words in every document. The named topic starts as half its true topic, half the common
    one (as the spectral stages started 20 Newsgroups' gun topic), the common topic's start
    is uninformative. Pinning its named word alone, EM keeps the common words in it; with
    the named words' share of the E-step (``named_share``) it ends at its true topic."""
    from streamtopic import read_corpus
    from streamtopic.refinement import refine_topics

    Vs, Ks = 200, 5
    rng = np.random.default_rng(0)
    A = np.zeros((Vs, Ks))
    for k in range(4):
        A[30 * k:30 * (k + 1), k] = rng.dirichlet(np.ones(30))
    A[120:, 4] = rng.dirichlet(np.full(80, 0.3))
    path = tmp_path / "c.h5"
    synth.write_corpus(path, A, 3000, alpha=np.array([0.05] * 4 + [0.2]), doc_length=60,
                       seed=1)
    start = A.T.copy()
    start[0] = (A[:, 0] + A[:, 4]) / 2
    start[4] = A.sum(axis=1) / A.sum()
    pinned = np.zeros((Ks, Vs), dtype=bool)
    pinned[1:, int(np.argmax(A[:, 0]))] = True
    vocab = synth.default_vocab(Vs)

    def named_topic(share):
        res = refine_topics(start, read_corpus(path, blocksize=20_000), vocab, pinned=pinned,
                            seed=0, **({} if share is None else {"named_share": share}))
        return res.components[0]

    focused, plain = named_topic(None), named_topic(0.0)
    common = lambda b: b[120:].sum()  # noqa: E731
    assert common(focused) < 0.1 < common(plain), (common(focused), common(plain))
    assert np.abs(focused - A[:, 0]).sum() < 0.2
    assert set(np.argsort(-focused)[:10]) <= set(range(30))
