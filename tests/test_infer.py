"""Inference at scale: the θ estimator, transform on raw text, `infer_corpus` and
`streamtopic infer` (issue 18, point 1)."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from click.testing import CliRunner
from scipy.optimize import minimize

import streamtopic as st
from streamtopic.cli import main as cli_main
from streamtopic.corpus import _decode, _strip_header_block, read_corpus
from streamtopic.inference import (
    DEFAULT_ALPHA,
    InferenceError,
    infer_corpus,
    infer_topics,
    model_tokenizer,
    with_token_cache,
)
from streamtopic.model import AnchorTopicModel
from streamtopic.vocabulary import Tokenizer

N_NEWS = 1500  # documents of 20 Newsgroups the small model is fitted on


def _news_texts(tar_path: Path, n: int | None = None) -> list[str]:
    """Documents of the 20 Newsgroups tar in its order, headers stripped as the reader does."""
    docs = []
    with tarfile.open(tar_path, "r:gz") as tar:
        for m in tar:
            if m.isfile():
                raw = tar.extractfile(m).read()
                docs.append(_decode(_strip_header_block(raw, True))[0])
                if n is not None and len(docs) == n:
                    break
    return docs


@pytest.fixture(scope="module")
def news_model(newsgroups_tar: Path, tmp_path_factory) -> dict:
    """A model fitted (plain, K = 8) on the first documents of 20 Newsgroups, saved."""
    d = tmp_path_factory.mktemp("infer")
    texts = _news_texts(newsgroups_tar, N_NEWS)
    corpus = d / "news.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    st.ingest(str(corpus), d / "news.zarr", progress=False, min_df=3, max_df=0.5)
    model = AnchorTopicModel(n_topics=8, method="plain", seed=0).fit(d / "news.zarr")
    model.save(d / "model")
    return {"dir": d, "corpus": corpus, "texts": texts, "model": d / "model",
            "store": d / "news.zarr"}


def _reference_counts(texts: list[str], vocab: list[str], tokenizer: Tokenizer) -> sp.csr_matrix:
    """Counts by a plain loop: the tokenizer's tokens, counted when in the vocabulary."""
    index = {w: i for i, w in enumerate(vocab)}
    rows, cols, vals = [], [], []
    for d, text in enumerate(texts):
        c = Counter(t for t in tokenizer(text) if t in index)
        for w, n in c.items():
            rows.append(d)
            cols.append(index[w])
            vals.append(n)
    return sp.csr_matrix((vals, (rows, cols)), shape=(len(texts), len(vocab)), dtype=float)


# ----------------------------------------------------------------------------- the estimator


def test_theta_is_the_map_solved_by_scipy():
    """θ is the maximiser of Σ h log(θA) + Σ α log θ on the simplex (the MAP under
    Dirichlet(α + 1)), checked against SLSQP."""
    rng = np.random.default_rng(3)
    K, V = 4, 30
    comp = rng.dirichlet(np.full(V, 0.3), size=K)
    h = rng.integers(0, 4, size=V).astype(float)
    alpha = np.array([0.5, 0.1, 2.0, 0.3])
    est = infer_topics(comp, sp.csr_matrix(h), alpha=alpha, tol=1e-13, max_iter=200_000)[0]

    def neg(t):
        return -(h @ np.log(t @ comp) + alpha @ np.log(t))

    res = minimize(neg, np.full(K, 1 / K), method="SLSQP", bounds=[(1e-9, 1)] * K,
                   constraints=[{"type": "eq", "fun": lambda t: t.sum() - 1}],
                   options={"ftol": 1e-14, "maxiter": 1000})
    assert res.success
    np.testing.assert_allclose(est, res.x, atol=1e-5)
    assert neg(est) <= res.fun + 1e-9


def test_rows_do_not_depend_on_the_batch():
    """Each document is solved on its own: any batching or order gives the same bits."""
    rng = np.random.default_rng(0)
    comp = rng.dirichlet(np.full(200, 0.1), size=6)
    H = sp.random(300, 200, density=0.05, random_state=1, format="csr") * 10
    H.data = np.ceil(H.data)
    whole = infer_topics(comp, H)
    parts = np.vstack([infer_topics(comp, H[i : i + 37]) for i in range(0, 300, 37)])
    order = rng.permutation(300)
    shuffled = infer_topics(comp, H[order])
    assert np.array_equal(whole, parts)
    assert np.array_equal(whole[order], shuffled)


def test_an_empty_document_gets_the_prior_mean():
    comp = np.random.default_rng(0).dirichlet(np.ones(20), size=3)
    alpha = np.array([0.2, 0.3, 0.5])
    theta = infer_topics(comp, sp.csr_matrix((2, 20)), alpha=alpha)
    np.testing.assert_allclose(theta, np.tile(alpha / alpha.sum(), (2, 1)))
    np.testing.assert_allclose(infer_topics(comp, sp.csr_matrix((1, 20))), 1 / 3)


def test_transform_uses_the_fitted_alpha(news_model):
    """A model's prior: its ``alpha_`` when it has one, else DEFAULT_ALPHA per topic."""
    model = AnchorTopicModel.load(news_model["model"])
    H = _reference_counts(news_model["texts"][:50], model.vocab_, model_tokenizer(model))
    K = model.components_.shape[0]
    if hasattr(model, "alpha_"):
        del model.alpha_
    np.testing.assert_array_equal(
        model.transform(H), infer_topics(model.components_, H, alpha=DEFAULT_ALPHA))
    model.alpha_ = np.linspace(0.05, 2.0, K)
    fitted = model.transform(H)
    np.testing.assert_array_equal(fitted, infer_topics(model.components_, H, alpha=model.alpha_))
    assert np.abs(fitted - infer_topics(model.components_, H, alpha=DEFAULT_ALPHA)).max() > 1e-3


# ----------------------------------------------------------------------------- transform


def test_transform_takes_raw_text_and_tokens(news_model):
    """Raw texts are tokenised as the training text was; the counts equal a plain loop's."""
    model = AnchorTopicModel.load(news_model["model"])
    texts = news_model["texts"][:200]
    tokenizer = model_tokenizer(model)
    assert tokenizer == Tokenizer()  # the store's (default) settings came with the model
    H = _reference_counts(texts, model.vocab_, tokenizer)
    expected = model.transform(H)
    np.testing.assert_array_equal(model.transform(texts), expected)
    np.testing.assert_array_equal(model.transform(iter(texts)), expected)
    tokens = [tokenizer.matches(t) for t in texts]
    np.testing.assert_array_equal(model.transform(tokens), expected)
    corpus = read_corpus(str(news_model["corpus"]), tokenizer=tokenizer)
    np.testing.assert_array_equal(model.transform(corpus)[:200], expected)
    with pytest.raises(ValueError, match="one string"):
        model.transform("a single text")
    with pytest.raises(ValueError, match="columns"):
        model.transform(sp.csr_matrix((2, 7)))


def test_score_and_perplexity(news_model):
    model = AnchorTopicModel.load(news_model["model"])
    texts = news_model["texts"][:100]
    H = _reference_counts(texts, model.vocab_, model_tokenizer(model))
    theta = model.transform(H)
    P = theta @ model.components_
    ref = float((H.multiply(np.log((1 - 1e-9) * P + 1e-9 / P.shape[1]))).sum())
    assert model.score(texts) == pytest.approx(ref, rel=1e-12)
    assert model.perplexity(texts) == pytest.approx(np.exp(-ref / H.sum()), rel=1e-12)
    assert model.perplexity(iter(texts)) == model.perplexity(texts)  # X read once
    # a better-fitting model of the same words scores higher: the uniform topics do worse
    flat = AnchorTopicModel.load(news_model["model"])
    flat.components_ = np.full_like(model.components_, 1 / model.components_.shape[1])
    assert flat.score(texts) < model.score(texts)


def test_fit_transform_of_a_store(news_model, tmp_path):
    model = AnchorTopicModel(n_topics=8, method="plain", seed=0)
    theta = model.fit_transform(news_model["store"])
    assert theta.shape == (N_NEWS, 8)
    np.testing.assert_array_equal(theta, model.transform(news_model["texts"]))


# ----------------------------------------------------------------------------- infer_corpus


def _read_csv(path: Path) -> tuple[list[list[str]], np.ndarray]:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    return rows, np.array([[float(x) for x in r[3:]] for r in rows[1:]])


def test_infer_corpus_writes_one_row_per_document(news_model, tmp_path):
    """zarr, CSV and Parquet hold the same rows, equal to transform, with their ids."""
    model = AnchorTopicModel.load(news_model["model"])
    expected = model.transform(news_model["texts"])
    corpus = str(news_model["corpus"])
    done = infer_corpus(model, corpus, tmp_path / "t.zarr")
    assert (done.n_docs, done.format) == (N_NEWS, "zarr")
    g = zarr.open_group(tmp_path / "t.zarr", mode="r")
    np.testing.assert_array_equal(g["theta"][:], expected)
    np.testing.assert_array_equal(g["position"][:], np.arange(N_NEWS))
    assert set(g["source"][:].tolist()) == {0}
    meta = g.attrs["streamtopic_topics"]
    assert meta["sources"] == [os.path.abspath(corpus)]
    assert meta["n_docs"] == N_NEWS and meta["model"] == os.path.abspath(news_model["model"])
    assert done.n_tokens == sum(len(Tokenizer().matches(t)) for t in news_model["texts"])

    infer_corpus(model, corpus, tmp_path / "t.csv")
    rows, theta = _read_csv(tmp_path / "t.csv")
    assert rows[0][:3] == ["source", "position", "name"] and len(rows) == N_NEWS + 1
    np.testing.assert_array_equal(theta, expected)  # repr of a float reads back exactly

    import pyarrow.parquet as pq  # the test extra installs it

    infer_corpus(model, corpus, tmp_path / "t.parquet")
    table = pq.read_table(tmp_path / "t.parquet")
    np.testing.assert_array_equal(
        np.column_stack([table[f"topic_{k}"].to_numpy() for k in range(8)]), expected)
    assert table["position"].to_pylist() == list(range(N_NEWS))


def test_infer_on_the_training_text_reads_the_token_cache(news_model, tmp_path):
    """The training text is not tokenised again: its partitions come from the store's token
    cache, with the same rows, positions and sources as the text gives; a copy of the text
    at another path, or the text changed since, is read as text."""
    model = AnchorTopicModel.load(news_model["model"])
    path = str(news_model["corpus"])
    corpus = read_corpus(path, tokenizer=model_tokenizer(model))
    swapped = with_token_cache(corpus, model)
    assert {p.kind for p in swapped.parts} == {"cache"}
    assert [s.path for s in swapped.sources] == [os.path.abspath(path)]
    infer_corpus(model, swapped, tmp_path / "cache.zarr")
    infer_corpus(model, corpus, tmp_path / "text.zarr")  # a Corpus given is read as planned
    a, b = (zarr.open_group(tmp_path / n, mode="r") for n in ("cache.zarr", "text.zarr"))
    for name in ("theta", "source", "position"):
        np.testing.assert_array_equal(a[name][:], b[name][:])
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(news_model["corpus"].read_bytes())
    other = read_corpus(str(copy), tokenizer=model_tokenizer(model))
    assert {p.kind for p in with_token_cache(other, model).parts} == {"bytes"}


def test_infer_corpus_names_the_files_of_a_directory(news_model, tmp_path):
    model = AnchorTopicModel.load(news_model["model"])
    texts = news_model["texts"][:30]
    root = tmp_path / "docs"
    for i, t in enumerate(texts):
        (root / f"g{i % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"g{i % 3}" / f"{i:03d}.txt").write_text(t)
    infer_corpus(model, str(root), tmp_path / "d.zarr", strip_headers=False)
    g = zarr.open_group(tmp_path / "d.zarr", mode="r")
    names = g["name"][:].tolist()
    assert sorted(names) == names and len(names) == 30
    by_name = {f"g{i % 3}/{i:03d}.txt": t for i, t in enumerate(texts)}
    np.testing.assert_array_equal(g["theta"][:], model.transform([by_name[n] for n in names]))


def test_infer_corpus_of_counts_input(kos_docword, tmp_path):
    """UCI input keeps its own columns, mapped onto the model's words."""
    st.ingest(kos_docword, tmp_path / "kos.zarr", progress=False)
    model = AnchorTopicModel(n_topics=5, method="plain", seed=0).fit(tmp_path / "kos.zarr")
    infer_corpus(model, kos_docword, tmp_path / "k.zarr")
    theta = zarr.open_group(tmp_path / "k.zarr", mode="r")["theta"][:]
    corpus = read_corpus(kos_docword)
    np.testing.assert_array_equal(theta, model.transform(corpus))
    assert theta.shape == (3430, 5)


def test_infer_refuses_to_replace_a_foreign_directory(news_model, tmp_path):
    model = AnchorTopicModel.load(news_model["model"])
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("x")
    with pytest.raises(InferenceError, match="not replaced"):
        infer_corpus(model, str(news_model["corpus"]), tmp_path / "mine")
    assert (tmp_path / "mine" / "keep.txt").read_text() == "x"
    assert sorted(os.listdir(tmp_path)) == ["mine"]  # no scratch left


def test_a_failed_inference_leaves_nothing(news_model, tmp_path):
    """A reading error mid-corpus: one clear error, no output and no scratch."""
    model = AnchorTopicModel.load(news_model["model"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine words"}\n{"text": broken\n')
    infer_corpus(model, str(news_model["corpus"]), tmp_path / "out.zarr")
    before = zarr.open_group(tmp_path / "out.zarr", mode="r")["theta"][:]
    with pytest.raises(st.CorpusError, match="bad.jsonl"):
        infer_corpus(model, str(bad), tmp_path / "out.zarr")
    np.testing.assert_array_equal(zarr.open_group(tmp_path / "out.zarr", mode="r")["theta"][:],
                                  before)  # the earlier output is untouched
    assert sorted(os.listdir(tmp_path)) == ["bad.jsonl", "out.zarr"]


# ----------------------------------------------------------------------------- the command


def test_infer_command_bad_input_is_one_line(news_model, tmp_path):
    runner = CliRunner()
    r = runner.invoke(cli_main, ["infer", str(tmp_path / "nope"), str(news_model["corpus"]),
                                 "-o", str(tmp_path / "o.zarr")])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert re.search(r"nope.*no such model", r.output)
    r = runner.invoke(cli_main, ["infer", str(news_model["model"]), str(tmp_path / "none.txt"),
                                 "-o", str(tmp_path / "o.zarr")])
    assert r.exit_code == 1 and "none.txt" in r.output and "Traceback" not in r.output
    r = runner.invoke(cli_main, ["infer", str(news_model["model"]), str(news_model["corpus"]),
                                 "-o", str(tmp_path / "no" / "dir" / "o.csv")])
    assert r.exit_code == 1 and "does not exist" in r.output


@pytest.mark.slow
def test_infer_command_on_the_newsgroups_tar(news_model, newsgroups_tar, tmp_path):
    """Acceptance: `streamtopic infer` on the whole 20 Newsgroups tar (a local cluster of
    processes, as a user runs it) writes one row per document, equal to transform of the
    same documents to 1e-10 (here: exactly), named by their members."""
    out = tmp_path / "news.csv"
    env = {**os.environ, "PYTHONPATH": str(Path(st.__file__).parents[1])}
    r = subprocess.run([sys.executable, "-m", "streamtopic", "infer", str(news_model["model"]),
                        str(newsgroups_tar), "-o", str(out), "-q"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "18,846 documents" in r.stdout
    rows, theta = _read_csv(out)
    texts = _news_texts(newsgroups_tar)
    assert len(texts) == 18_846 == theta.shape[0]
    model = AnchorTopicModel.load(news_model["model"])
    np.testing.assert_allclose(theta, model.transform(texts), rtol=0, atol=1e-10)
    with tarfile.open(newsgroups_tar, "r:gz") as tar:
        members = [m.name for m in tar if m.isfile()]
    assert [r[2] for r in rows[1:]] == members
    assert {r[0] for r in rows[1:]} == {os.path.abspath(newsgroups_tar)}
