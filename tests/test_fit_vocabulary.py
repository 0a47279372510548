"""Issue 17, point 2: the vocabulary chosen at fit time.

A fit that selects words from a generous store (``min_df``, ``max_df``, ``keep_n``,
``stop_words``) equals, to 1e-10, a fit on a store ingested with that pruning: for text
(document lengths counted before stop words are removed) and for UCI counts (row sums over
all of the file's words), with ``method='plain'`` and the default 'rectified' (whose
refinement reads the corpus again). The estimator normalises each document by its input
length; stores built before keep their own definition and refuse a selection.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from click.testing import CliRunner

import streamtopic as st
from streamtopic import CooccurrenceStore
from streamtopic.cli import main as cli_main
from streamtopic.model import AnchorTopicModel
from streamtopic.selection import Selection, select_words, selected_store
from streamtopic.store import StoreError
from streamtopic.vocabulary import ENGLISH_STOP_WORDS, Tokenizer

from ._reference import dense_cooccurrence_sum, read_uci

K = 5
N_NEWS = 400  # 20 Newsgroups documents of the small text corpus
CHUNK = 256  # several blocks per store, so that the selection gathers from many
TEXT_PRUNING = {"min_df": 3, "max_df": 0.5, "keep_n": 800}
KOS_PRUNING = {"min_df": 10, "max_df": 0.2, "keep_n": 1500}
GENEROUS = {"min_df": 1, "max_df": 1.0, "keep_n": None}


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


# ----------------------------------------------------------------------------- corpora


@pytest.fixture(scope="module")
def news_texts(newsgroups_tar: Path) -> list[str]:
    """The first ``N_NEWS`` documents of 20 Newsgroups, as text."""
    docs = []
    with tarfile.open(newsgroups_tar, "r:gz") as tar:
        for member in tar:
            if member.isfile():
                docs.append(tar.extractfile(member).read().decode("utf-8", "replace"))
                if len(docs) == N_NEWS:
                    break
    return docs


@pytest.fixture(scope="module")
def news(news_texts: list[str], tmp_path_factory) -> dict[str, Path]:
    """The text corpus (JSON Lines), a generous store of it, and a store ingested with
    ``TEXT_PRUNING``."""
    d = tmp_path_factory.mktemp("news")
    corpus = d / "news.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in news_texts))
    out = {"corpus": corpus, "generous": d / "generous.zarr", "pruned": d / "pruned.zarr"}
    st.ingest(str(corpus), out["generous"], chunk_size=CHUNK, progress=False, **GENEROUS)
    st.ingest(str(corpus), out["pruned"], chunk_size=CHUNK, progress=False, **TEXT_PRUNING)
    return out


@pytest.fixture(scope="module")
def kos(kos_docword: str, tmp_path_factory) -> dict[str, Path]:
    """UCI KOS: a generous store and one ingested with ``KOS_PRUNING``."""
    d = tmp_path_factory.mktemp("kos")
    out = {"generous": d / "generous.zarr", "pruned": d / "pruned.zarr"}
    st.ingest(kos_docword, out["generous"], progress=False, **GENEROUS)
    st.ingest(kos_docword, out["pruned"], progress=False, **KOS_PRUNING)
    return out


def _same_fit(a: AnchorTopicModel, b: AnchorTopicModel) -> None:
    assert a.vocab_ == b.vocab_
    np.testing.assert_allclose(a.components_, b.components_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(a.topic_prevalence_, b.topic_prevalence_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(a.topic_cooccurrence_, b.topic_cooccurrence_, rtol=0,
                               atol=1e-10)


# ----------------------------------------------------------------------------- 1. acceptance


@pytest.mark.parametrize("method", ["plain", "rectified"])
def test_text_selection_equals_pruned_ingest(news, method, tmp_path):
    """20 Newsgroups text: selecting ``TEXT_PRUNING`` at fit time from the generous store is
    the fit of the store ingested with it (the default rectified method: the whole
    vocabulary rectified, then EM over the corpus read again)."""
    selected = AnchorTopicModel(K, method=method, seed=0, scratch_dir=tmp_path,
                                **TEXT_PRUNING).fit(str(news["generous"]))
    pruned = AnchorTopicModel(K, method=method, seed=0, scratch_dir=tmp_path).fit(
        str(news["pruned"]))
    _same_fit(selected, pruned)
    generous = CooccurrenceStore.open(news["generous"])
    assert len(selected.vocab_) == TEXT_PRUNING["keep_n"] < generous.V
    record = selected.diagnostics_["vocabulary"]
    assert record == dict(TEXT_PRUNING, stop_words=None, store_V=generous.V,
                          V=len(selected.vocab_))
    assert selected.diagnostics_["store"]["path"] == generous.path
    assert selected.diagnostics_["store"]["version"] == generous.version
    if method == "rectified":
        assert selected.diagnostics_["refinement"]["passes"] > 0
    assert pruned.diagnostics_["vocabulary"] is None


def test_stop_words_selection_equals_ingest_with_them(news, news_texts, tmp_path):
    """Extra stop words at fit time are a store ingested with them as stop words too: the
    documents' lengths count stop words either way."""
    generous = CooccurrenceStore.open(news["generous"])
    extra = generous.vocab[:4] + generous.vocab[40:43]  # frequent words
    stops = sorted(ENGLISH_STOP_WORDS | set(extra))
    st.ingest(str(news["corpus"]), tmp_path / "stopped.zarr", chunk_size=CHUNK,
              stop_words=stops, progress=False, **TEXT_PRUNING)
    selected = AnchorTopicModel(K, seed=0, scratch_dir=tmp_path, stop_words=extra,
                                **TEXT_PRUNING).fit(str(news["generous"]))
    pruned = AnchorTopicModel(K, seed=0, scratch_dir=tmp_path).fit(str(tmp_path / "stopped.zarr"))
    _same_fit(selected, pruned)
    assert not set(extra) & set(selected.vocab_)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["plain", "rectified"])
def test_kos_selection_equals_pruned_ingest(kos, method, tmp_path):
    """UCI KOS (counts: lengths over all of the file's words), the rectified method on a
    core vocabulary of 500 words, refined over the corpus."""
    extra = {"core_size": 500} if method == "rectified" else {}
    selected = AnchorTopicModel(K, method=method, seed=0, scratch_dir=tmp_path, **extra,
                                **KOS_PRUNING).fit(str(kos["generous"]))
    pruned = AnchorTopicModel(K, method=method, seed=0, scratch_dir=tmp_path, **extra).fit(
        str(kos["pruned"]))
    _same_fit(selected, pruned)
    assert len(selected.vocab_) == KOS_PRUNING["keep_n"]


# ----------------------------------------------------------------------------- 2. Q itself


def _text_reference(texts: list[str], vocab: list[str]) -> tuple[sp.csr_matrix, np.ndarray]:
    """The documents' counts over ``vocab`` (D×V) and their input lengths (D,): the tokens
    of the default tokenizer, and how many tokens it finds before removing stop words."""
    kept, everything = Tokenizer(), Tokenizer(stop_words="none")
    index = {t: i for i, t in enumerate(vocab)}
    rows, cols, lengths = [], [], []
    for d, text in enumerate(texts):
        lengths.append(len(everything(text)))
        for tok in kept(text):
            if tok in index:
                rows.append(d)
                cols.append(index[tok])
    H = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(texts), len(vocab)))
    H.sum_duplicates()
    return H, np.asarray(lengths, dtype=np.float64)


def _check_derived(derived: CooccurrenceStore, pruned: CooccurrenceStore, H: sp.csr_matrix,
                   n: np.ndarray) -> None:
    """The derived store is the pruned store, and both are the reference Σ_d Q_d."""
    assert derived.vocab == pruned.vocab
    assert (derived.n_docs, derived.n_tokens) == (pruned.n_docs, pruned.n_tokens)
    np.testing.assert_array_equal(derived.word_counts, pruned.word_counts)
    np.testing.assert_array_equal(derived.doc_freq, pruned.doc_freq)
    q_derived, q_pruned = derived.Q_sum.compute(), pruned.Q_sum.compute()
    assert rel_err(q_derived, q_pruned) <= 1e-12
    assert rel_err(derived.Q.compute(), pruned.Q.compute()) <= 1e-12
    assert abs(derived.q_total - pruned.q_total) <= 1e-12 * pruned.q_total
    ref = dense_cooccurrence_sum(H, n)
    assert rel_err(q_pruned, ref) <= 1e-12 and rel_err(q_derived, ref) <= 1e-12
    used = n >= 2
    assert pruned.n_docs == int(used.sum()) and pruned.n_tokens == int(n[used].sum())
    np.testing.assert_array_equal(pruned.doc_freq, np.asarray((H[used] > 0).sum(axis=0)).ravel())
    np.testing.assert_allclose(derived.Q.sum().compute(), 1.0, rtol=1e-12)
    assert derived.verify() == [] and pruned.verify() == []


def test_derived_q_is_the_pruned_stores_q_text(news, news_texts, tmp_path):
    generous = CooccurrenceStore.open(news["generous"])
    pruned = CooccurrenceStore.open(news["pruned"])
    derived, record = selected_store(generous, Selection(**TEXT_PRUNING, explicit=True),
                                     str(tmp_path), K)
    assert derived.path != generous.path and record["V"] == pruned.V
    assert derived.config["tokenizer"] == generous.config["tokenizer"]
    assert [s["sha256"] for s in derived.sources] == [s["sha256"] for s in generous.sources]
    H, n = _text_reference(news_texts, pruned.vocab)
    assert (n > np.asarray(H.sum(axis=1)).ravel()).any()  # stop words count in n
    _check_derived(derived, pruned, H, n)


@pytest.mark.slow
def test_derived_q_is_the_pruned_stores_q_kos(kos, kos_dir, tmp_path):
    generous = CooccurrenceStore.open(kos["generous"])
    pruned = CooccurrenceStore.open(kos["pruned"])
    derived, _ = selected_store(generous, Selection(**KOS_PRUNING, explicit=True),
                                str(tmp_path), K)
    H, terms = read_uci(str(kos_dir / "docword.kos.txt.gz"), str(kos_dir / "vocab.kos.txt"))
    n = np.asarray(H.sum(axis=1), dtype=np.float64).ravel()  # over every word of the file
    pos = {t: i for i, t in enumerate(terms)}
    Hs = H[:, [pos[t] for t in pruned.vocab]]
    _check_derived(derived, pruned, Hs, n)


def test_selection_has_gensim_semantics(news):
    """``select_words`` keeps what ``Vocabulary.from_stats`` keeps from the same counts."""
    generous = CooccurrenceStore.open(news["generous"])
    pruned = CooccurrenceStore.open(news["pruned"])
    ids = select_words(generous, Selection(**TEXT_PRUNING))
    assert [generous.vocab[i] for i in ids] == pruned.vocab
    df = generous.doc_freq
    assert np.all(np.diff(ids) > 0) and df[ids].min() >= 3
    assert df[ids].max() <= 0.5 * generous.n_docs
    assert select_words(generous, Selection()).size == generous.V


# ----------------------------------------------------------------------------- 3. the estimator


def test_documents_are_normalised_by_their_input_length(tmp_path):
    """Hand-made text into a fixed vocabulary, then UCI counts with a word outside it: a
    document is counted when its input length is >= 2, whatever the vocabulary keeps, and
    w_d = 1/(n_d − 1) (per token, the stores built now) with n_d its input length."""
    (tmp_path / "vocab.txt").write_text("apple\nbrook\n")
    lines = ["apple the of",  # n = 3 (two stop words), one kept token: counted, Q_d = 0
             "apple apple zebra",  # n = 3 (an OOV word), diagonal (2² − 2)/(3 − 1)
             "apple brook",  # n = 2
             "brook",  # n = 1: skipped
             "of the and"]  # n = 3: counted, no kept word
    (tmp_path / "a.txt").write_text("\n".join(lines) + "\n")
    store_path = tmp_path / "s.zarr"
    rep = st.ingest(str(tmp_path / "a.txt"), store_path, vocab=str(tmp_path / "vocab.txt"),
                    progress=False)
    s = CooccurrenceStore.open(store_path)
    assert s.doc_length == "input"
    assert s.doc_weight == "tokens" and s.config["doc_weight"] == "tokens"
    assert rep.n_docs == s.n_docs == 4 and rep.n_skipped_docs == 1
    assert s.n_tokens == 3 + 3 + 2 + 3
    np.testing.assert_array_equal(s.doc_freq, [3, 1])
    np.testing.assert_array_equal(s.word_counts, [4, 1])
    H = sp.csr_matrix(np.array([[1, 0], [2, 0], [1, 1], [0, 1], [0, 0]], dtype=float))
    n = np.array([3.0, 3.0, 2.0, 1.0, 3.0])
    want = dense_cooccurrence_sum(H, n)
    np.testing.assert_allclose(want, [[1.0, 1.0], [1.0, 0.0]], rtol=1e-15)
    np.testing.assert_allclose(s.Q_sum.compute(), want, rtol=1e-14, atol=0)
    assert s.q_total == pytest.approx(3.0, rel=1e-15)  # Σ n'(n'−1) w: what Q sums to
    np.testing.assert_allclose(s.Q.compute(), want / 3.0, rtol=1e-14)
    # per document, the same documents would have given (1/3, 1/2) and a total of 4/3
    np.testing.assert_allclose(dense_cooccurrence_sum(H, n, weight="documents"),
                               [[1 / 3, 1 / 2], [1 / 2, 0.0]], rtol=1e-15)
    assert s.verify() == []

    # UCI counts into the same store: n_d is the row sum over all of the file's words
    # (zebra is outside the store's vocabulary)
    (tmp_path / "vocab.u.txt").write_text("apple\nbrook\nzebra\n")
    entries = [(1, 1, 1), (1, 3, 4), (2, 2, 2), (3, 3, 2)]  # n = 5, 2 and 2
    (tmp_path / "docword.u.txt").write_text(
        f"3\n3\n{len(entries)}\n" + "".join(f"{a} {b} {c}\n" for a, b, c in entries))
    st.ingest(str(tmp_path / "docword.u.txt"), store_path, progress=False)
    s2 = CooccurrenceStore.open(store_path)
    assert s2.n_docs == 4 + 3 and s2.n_tokens == 11 + 9
    add = dense_cooccurrence_sum(sp.csr_matrix(np.array([[1, 0], [0, 2], [0, 0]], float)),
                                 np.array([5.0, 2.0, 2.0]))
    np.testing.assert_allclose(s2.Q_sum.compute() - want, add, rtol=0, atol=1e-15)
    np.testing.assert_allclose(add, [[0.0, 0.0], [0.0, 2.0]], atol=1e-15)
    assert s2.q_total == pytest.approx(3.0 + 2.0, rel=1e-15)
    assert s2.verify() == []


def test_input_lengths_count_stop_words(tmp_path):
    """Text: the tokens before stop words are removed; counts: the row sums over every
    column of the file. The vocabulary pass counts documents of input length >= 2 only."""
    assert Tokenizer().tokens_and_length("The cat and THE dog 42 x") == (["cat", "dog"], 5)
    (tmp_path / "t.txt").write_text("the cat and the dog\nof\nbird\nthe\n\n")
    (chunk,) = st.read_corpus(str(tmp_path / "t.txt")).iter_chunks()
    np.testing.assert_array_equal(chunk.input_lengths, [5, 1, 1, 1, 0])
    np.testing.assert_array_equal(np.asarray(chunk.counts.sum(axis=1)).ravel(), [2, 0, 1, 0, 0])
    stats = chunk.term_stats(min_length=2)
    assert stats.n_docs == 1 and stats.totals()[0] == {"cat": 1, "dog": 1}
    assert chunk.term_stats().n_docs == 5 and chunk.term_stats().totals()[0]["bird"] == 1


# ----------------------------------------------------------------------------- 4. old stores


def _as_old_store(path: Path) -> None:
    """Make ``path`` look like a store written before input lengths: no ``doc_length`` nor
    ``doc_weight`` in its configuration, no ``q_mass`` in its head (and, as then, no
    digests). Ingest it with ``streamtopic.cooccurrence.DOC_WEIGHT`` set to
    ``'documents'``, as such stores were counted."""
    from ._legacy import downgrade_to_format4

    downgrade_to_format4(path)
    root = zarr.open_group(str(path), mode="r+")
    meta = dict(root.attrs["streamtopic"])
    config = dict(meta["config"])
    config.pop("doc_length")
    config.pop("doc_weight")
    root.attrs["streamtopic"] = dict(meta, config=config)
    head = zarr.open_group(str(path / "versions" / f"v{meta['head']:06d}"), mode="r+")
    attrs = dict(head.attrs)
    attrs.pop("q_mass")
    head.attrs.clear()
    head.attrs.update(attrs)


def test_old_store_keeps_its_definition_and_refuses_a_selection(tmp_path, monkeypatch):
    import streamtopic.cooccurrence as cooccurrence

    words = ["apple", "brook", "cedar", "delta", "ember"]
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(words, size=rng.integers(2, 8))) for _ in range(60)]
    (tmp_path / "a.txt").write_text("\n".join(docs) + "\n")
    path = tmp_path / "old.zarr"
    with monkeypatch.context() as m:  # stores were counted per document then
        m.setattr(cooccurrence, "DOC_WEIGHT", "documents")
        st.ingest(str(tmp_path / "a.txt"), path, min_df=1, max_df=1.0, progress=False)
    _as_old_store(path)
    old = CooccurrenceStore.open(path)
    assert old.doc_length == "vocabulary" and old.q_total == old.n_docs
    before = old.Q_sum.compute()
    old.close()
    # new documents with stop words and words outside the vocabulary: the old definition
    # counts only the vocabulary's tokens in n
    more = ["apple the brook of zebra", "cedar and unknown", "delta delta ember the"]
    (tmp_path / "b.txt").write_text("\n".join(more) + "\n")
    st.ingest(str(tmp_path / "b.txt"), path, progress=False)
    s = CooccurrenceStore.open(path)
    assert s.doc_length == "vocabulary" and "doc_length" not in s.config
    assert s.doc_weight == "documents" and "doc_weight" not in s.config  # as it was
    index = {t: i for i, t in enumerate(s.vocab)}
    H = sp.csr_matrix((len(more), s.V))
    H = sp.lil_matrix(H)
    for d, line in enumerate(more):
        for tok in Tokenizer()(line):
            if tok in index:
                H[d, index[tok]] += 1
    # n: tokens in the vocabulary; w_d = 1/(n(n − 1)), per document
    add = dense_cooccurrence_sum(sp.csr_matrix(H), weight="documents")
    np.testing.assert_allclose(s.Q_sum.compute() - before, add, rtol=0, atol=1e-14)
    assert s.n_docs == 60 + 2  # "cedar and unknown" has one token in the vocabulary
    assert s.q_total == s.n_docs and abs(float(s.Q.sum().compute()) - 1.0) < 1e-12
    assert s.verify() == []
    # a selection is refused in one line; one that keeps every word is no selection
    with pytest.raises(StoreError) as err:
        AnchorTopicModel(2, method="plain", keep_n=3).fit(str(path))
    msg = str(err.value)
    assert str(path) in msg and "keep_n=3" in msg and "re-ingest" in msg
    assert len(msg.splitlines()) == 1
    model = AnchorTopicModel(2, method="plain", min_df=1, seed=0).fit(str(path))
    assert model.vocab_ == s.vocab and model.diagnostics_["vocabulary"]["V"] == s.V


def test_models_of_older_versions_still_load(news, tmp_path):
    """A model saved without the selection's parameters and record loads, with them None."""
    model = AnchorTopicModel(K, method="plain", seed=0).fit(str(news["pruned"]))
    model.save(tmp_path / "m.zarr")
    root = zarr.open_group(str(tmp_path / "m.zarr"), mode="r+")
    meta = dict(root.attrs["streamtopic_model"])
    for name in ("min_df", "max_df", "keep_n", "stop_words"):
        meta["params"].pop(name)
    meta["diagnostics"].pop("vocabulary")
    for name in ("digest", "digests"):  # nor the digests of format 2
        meta.pop(name)
    meta["format_version"] = 1
    root.attrs["streamtopic_model"] = meta
    again = AnchorTopicModel.load(tmp_path / "m.zarr")
    assert again.min_df is None and again.stop_words is None
    np.testing.assert_array_equal(again.components_, model.components_)


# ----------------------------------------------------------------------------- parameters


def test_selection_settings_round_trip_through_save(news, tmp_path):
    stops = tmp_path / "stops.txt"
    stops.write_text("subject\nlines\n")
    model = AnchorTopicModel(K, method="plain", seed=0, min_df=3, max_df=0.5,
                             stop_words=str(stops)).fit(str(news["generous"]))
    assert "subject" not in model.vocab_ and "lines" not in model.vocab_
    for fmt in ("zarr", "hdf5"):
        path = tmp_path / f"m.{fmt}"
        model.save(path, format=fmt)
        again = AnchorTopicModel.load(path)
        assert (again.min_df, again.max_df, again.stop_words) == (3, 0.5, str(stops))
        assert again.diagnostics_["vocabulary"] == model.diagnostics_["vocabulary"]
        assert again.diagnostics_["store"]["path"] == str(news["generous"])
        assert again.vocab_ == model.vocab_


@pytest.mark.parametrize("bad, name", [
    ({"min_df": 0}, "min_df"), ({"max_df": 1.5}, "max_df"), ({"max_df": 0.0}, "max_df"),
    ({"keep_n": 0}, "keep_n"), ({"stop_words": "no-such-list"}, "stop_words"),
    ({"stop_words": 3}, "stop_words"),
])
def test_bad_selection_parameters_name_themselves(news, bad, name):
    with pytest.raises(ValueError) as err:
        AnchorTopicModel(K, method="plain", **bad).fit(str(news["generous"]))
    assert str(err.value).startswith(f"{name}=") and len(str(err.value).splitlines()) == 1


def test_a_selection_too_small_names_store_and_settings(news, tmp_path):
    with pytest.raises(StoreError) as err:
        AnchorTopicModel(K, method="plain", keep_n=3, scratch_dir=tmp_path).fit(
            str(news["generous"]))
    msg = str(err.value)
    assert str(news["generous"]) in msg and "keep_n=3" in msg and f"n_topics={K}" in msg


def test_same_seed_same_selected_fit(news, tmp_path):
    runs = [AnchorTopicModel(K, seed=3, core_size=300, scratch_dir=tmp_path, min_df=4,
                             keep_n=600).fit(str(news["generous"])) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].components_, runs[1].components_)
    assert runs[0].vocab_ == runs[1].vocab_ and len(runs[0].vocab_) == 600


# ----------------------------------------------------------------------------- 5. command line


def test_cli_fit_selects_words_of_a_store(news, tmp_path):
    out = tmp_path / "m.zarr"
    res = CliRunner().invoke(cli_main, [
        "fit", str(news["generous"]), "-k", str(K), "--method", "plain", "--min-df", "3",
        "--max-df", "0.5", "--keep-n", "800", "-o", str(out), "-q", "--local", "threads"])
    assert res.exit_code == 0, res.output
    model = AnchorTopicModel.load(out)
    assert model.vocab_ == CooccurrenceStore.open(news["pruned"]).vocab
    assert model.diagnostics_["vocabulary"]["V"] == 800
    assert f"V = {800:,}" in res.output
    generous_V = CooccurrenceStore.open(news["generous"]).V
    assert (f"vocabulary chosen at fit time: 800 of the store's {generous_V:,} words "
            "(min_df 3, max_df 0.5, keep_n 800)") in res.output


def test_cli_fit_bad_max_df_is_one_line(news, tmp_path):
    out = tmp_path / "m.zarr"
    res = CliRunner().invoke(cli_main, [
        "fit", str(news["generous"]), "-k", str(K), "--max-df", "2", "-o", str(out), "-q",
        "--local", "threads"])
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "max_df=2.0" in lines[0] and "Traceback" not in res.output
    assert not out.exists()


def test_cli_fit_raw_input_with_pruning(news, tmp_path):
    """``fit CORPUS --min-df N``: the store it builds is pruned so (as before), and the
    fit's selection with the same settings keeps all of it."""
    out = tmp_path / "m.zarr"
    res = CliRunner().invoke(cli_main, [
        "fit", str(news["corpus"]), "-k", str(K), "--method", "plain", "--min-df", "3",
        "--max-df", "0.5", "--keep-n", "800", "--chunk-size", str(CHUNK), "-o", str(out),
        "-q", "--local", "threads"])
    assert res.exit_code == 0, res.output
    store = CooccurrenceStore.open(f"{out}.store")
    assert store.vocab == CooccurrenceStore.open(news["pruned"]).vocab
    model = AnchorTopicModel.load(out)
    assert model.vocab_ == store.vocab
    assert model.diagnostics_["vocabulary"]["V"] == store.V == 800
