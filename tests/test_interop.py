"""A fitted model in other tools: scikit-learn pipelines, pandas, gensim's coherence and
pyLDAvis (issue 18, point 3)."""

from __future__ import annotations

import tarfile
from pathlib import Path

# the test extra installs the interop extra: pandas, pyLDAvis, scikit-learn, gensim
import gensim.models.coherencemodel as gensim_cm
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import sklearn.feature_extraction.text as sklearn_text
import sklearn.pipeline as sklearn_pipeline
from click.testing import CliRunner

import streamtopic as st
from streamtopic import synth
from streamtopic.cli import main as cli_main
from streamtopic.corpus import HDF5CorpusWriter, _decode, _strip_header_block
from streamtopic.interop import (
    coherence_topics,
    doc_topic_frame,
    term_frequency,
    topic_word_frame,
)
from streamtopic.metrics import matched_l1
from streamtopic.model import AnchorTopicModel

N_DOCS = 1200


@pytest.fixture(scope="module")
def news_docs(newsgroups_tar: Path) -> list[str]:
    docs = []
    with tarfile.open(newsgroups_tar, "r:gz") as tar:
        for m in tar:
            if m.isfile():
                docs.append(_decode(_strip_header_block(tar.extractfile(m).read(), True))[0])
                if len(docs) == N_DOCS:
                    break
    return docs


@pytest.fixture(scope="module")
def pipeline(news_docs):
    """CountVectorizer → AnchorTopicModel (the defaults), fitted on raw texts."""
    pipe = sklearn_pipeline.Pipeline([
        ("counts", sklearn_text.CountVectorizer(min_df=3, max_df=0.5, stop_words="english")),
        ("topics", AnchorTopicModel(n_topics=8, seed=0)),
    ])
    theta = pipe.fit_transform(news_docs)
    return pipe, theta


def test_pipeline_fits_and_transforms(pipeline, news_docs):
    pipe, theta = pipeline
    model = pipe.named_steps["topics"]
    X = pipe.named_steps["counts"].transform(news_docs)
    assert theta.shape == (N_DOCS, 8)
    np.testing.assert_array_equal(theta, model.transform(X))
    np.testing.assert_array_equal(pipe.transform(news_docs[:10]), theta[:10])
    assert model.components_.shape[1] == X.shape[1]  # every column is a word of the model
    assert model.vocab_[:2] == ["x0", "x1"]  # unnamed features, as scikit-learn names them
    from sklearn.base import clone

    fresh = clone(model)
    assert fresh.get_params() == model.get_params() and not hasattr(fresh, "components_")


def test_a_matrix_fit_equals_the_fit_of_its_store(tmp_path):
    """fit(X) is the fit of a store ingested from the same counts with every column kept,
    and on a semi-synthetic corpus it recovers the planted topics."""
    A, _ = synth.dirichlet_topics_with_anchors(300, 5, beta=0.05, seed=2)
    H = synth.sample_documents(A, 4000, alpha=0.3, doc_length=80, seed=3)
    names = [f"w{i:03d}" for i in range(300)]
    model = AnchorTopicModel(n_topics=5, method="plain", seed=0)
    model.fit(H, feature_names=names)
    assert model.vocab_ == names
    with HDF5CorpusWriter(tmp_path / "c.h5", names) as w:
        w.append(H, names)
    (tmp_path / "vocab.txt").write_text("".join(f"{w}\n" for w in names))
    st.ingest(str(tmp_path / "c.h5"), tmp_path / "c.zarr", vocab=str(tmp_path / "vocab.txt"),
              progress=False)
    ref = AnchorTopicModel(n_topics=5, method="plain", seed=0).fit(tmp_path / "c.zarr")
    np.testing.assert_array_equal(model.components_, ref.components_)
    l1 = matched_l1(A, model.components_.T).mean
    assert l1 < 0.25, l1


def test_a_matrix_fit_refuses_weights_and_bad_names():
    X = sp.random(20, 10, density=0.5, random_state=0, format="csr")  # fractions
    with pytest.raises(ValueError, match="counts"):
        AnchorTopicModel(n_topics=2).fit(X)
    with pytest.raises(ValueError, match="feature_names"):
        AnchorTopicModel(n_topics=2).fit(sp.csr_matrix(np.ones((4, 3))), feature_names=["a"])


def test_pipeline_words_named(pipeline, news_docs):
    pipe, _ = pipeline
    vec = pipe.named_steps["counts"]
    X = vec.transform(news_docs)
    model = AnchorTopicModel(n_topics=8, seed=0).fit(X, feature_names=vec.get_feature_names_out())
    assert model.vocab_ == list(vec.get_feature_names_out())
    words = {w for topic in model.top_words(10) for w in topic}
    assert words <= set(vec.vocabulary_) and not any(w.startswith("x") and w[1:].isdigit()
                                                     for w in words)


# ----------------------------------------------------------------------------- pandas


def test_topic_word_frame(pipeline):
    model = pipeline[0].named_steps["topics"]
    f = topic_word_frame(model)
    assert f.shape == model.components_.shape
    assert list(f.index) == [f"topic_{k}" for k in range(8)] and list(f.columns) == model.vocab_
    np.testing.assert_array_equal(f.to_numpy(), model.components_)
    assert f.attrs["anchor_words"] == model.anchor_words_


def test_doc_topic_frame_from_every_output(tmp_path, news_docs):
    from streamtopic.inference import infer_corpus

    root = tmp_path / "docs"
    root.mkdir()
    for i, t in enumerate(news_docs[:40]):
        (root / f"{i:03d}.txt").write_text(t)
    st.ingest(str(root), tmp_path / "s.zarr", progress=False, min_df=2, max_df=0.9,
              strip_headers=False)
    model = AnchorTopicModel(n_topics=3, method="plain", seed=0).fit(tmp_path / "s.zarr")
    frames = []
    for out in ("t.zarr", "t.csv", "t.parquet"):
        infer_corpus(model, str(root), tmp_path / out, strip_headers=False)
        frames.append(doc_topic_frame(tmp_path / out))
    for f in frames[1:]:
        pd.testing.assert_frame_equal(f, frames[0], check_dtype=False)
    f = frames[0]
    assert f.index.names == ["source", "position"] and len(f) == 40
    assert list(f["name"])[:2] == ["000.txt", "001.txt"]
    np.testing.assert_array_equal(f[[f"topic_{k}" for k in range(3)]].to_numpy(),
                                  model.transform(news_docs[:40]))
    arr = doc_topic_frame(model.transform(news_docs[:5]), model)
    assert list(arr.columns) == ["topic_0", "topic_1", "topic_2"]


# ----------------------------------------------------------------------------- gensim


def test_coherence_topics_feed_gensim(pipeline, news_docs):
    """gensim's CoherenceModel scores the topics' word lists; the model's topics cohere
    better than lists of the same words shuffled across topics."""
    from gensim.corpora import Dictionary

    pipe, _ = pipeline
    vec = pipe.named_steps["counts"]
    model = AnchorTopicModel(n_topics=8, seed=0).fit(vec.transform(news_docs),
                                                     feature_names=vec.get_feature_names_out())
    topics = coherence_topics(model, 10)
    assert topics == model.top_words(10)
    analyse = vec.build_analyzer()
    texts = [analyse(t) for t in news_docs]
    dictionary = Dictionary(texts)
    corpus = [dictionary.doc2bow(t) for t in texts]

    def umass(tops):
        cm = gensim_cm.CoherenceModel(topics=tops, corpus=corpus, dictionary=dictionary,
                                      coherence="u_mass")
        return cm.get_coherence()

    rng = np.random.default_rng(0)
    flat = rng.permutation([w for t in topics for w in t])
    shuffled = [list(flat[i : i + 10]) for i in range(0, len(flat), 10)]
    assert np.isfinite(umass(topics)) and umass(topics) > umass(shuffled)


# ----------------------------------------------------------------------------- pyLDAvis


def test_pyldavis_weighs_topics_by_prevalence(tmp_path, kos_docword):
    st.ingest(kos_docword, tmp_path / "kos.zarr", progress=False)
    model = AnchorTopicModel(n_topics=6, method="plain", seed=0).fit(tmp_path / "kos.zarr")
    with st.CooccurrenceStore.open(tmp_path / "kos.zarr") as store:
        counts = dict(zip(store.vocab, store.word_counts, strict=True))
    tf = term_frequency(model)
    np.testing.assert_array_equal(tf, [counts[w] for w in model.vocab_])
    data = model.to_pyldavis()
    freq = data.topic_coordinates.sort_values("topics")["Freq"].to_numpy()
    order = np.argsort(-model.topic_prevalence_, kind="stable")  # pyLDAvis sorts topics
    np.testing.assert_allclose(freq, 100 * model.topic_prevalence_[order]
                               / model.topic_prevalence_.sum(), rtol=1e-9)
    model.save(tmp_path / "model")
    r = CliRunner().invoke(cli_main, ["report", str(tmp_path / "model"), "-o",
                                      str(tmp_path / "r.html"), "--pyldavis",
                                      str(tmp_path / "lda.html")])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "lda.html").read_text()
    assert "LDAvis" in html and model.vocab_[int(np.argmax(tf))] in html
