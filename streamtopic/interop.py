"""A fitted model in other tools: pandas, gensim's coherence, pyLDAvis and scikit-learn.

* :func:`topic_word_frame` and :func:`doc_topic_frame`: the topic-word matrix (K×V) and the
  documents' topic proportions (n_docs×K, from an array or from the output of
  ``streamtopic infer``) as pandas DataFrames.
* :func:`coherence_topics`: each topic's top words, the ``topics=`` argument of gensim's
  ``CoherenceModel``.
* :func:`pyldavis_data`, :func:`pyldavis_html` and :func:`save_pyldavis`: pyLDAvis' prepared
  data and its HTML page, which works offline and shows every word as text
  (``pip install streamtopic[interop]``).
* scikit-learn: :class:`~streamtopic.model.AnchorTopicModel` follows the estimator API
  (``get_params``/``set_params``, ``fit`` on a document-term count matrix, ``transform``), so
  ``Pipeline([("counts", CountVectorizer()), ("topics", AnchorTopicModel(n_topics=20))])``
  fits in-memory corpora; ``feature_names`` passed to ``fit`` names the words.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any, cast

import numpy as np

from ._io import written_aside
from .fitted import FittedModel, check_is_fitted
from .inference import MARK
from .store import CooccurrenceStore

__all__ = ["coherence_topics", "doc_topic_frame", "pyldavis_data", "pyldavis_html",
           "save_pyldavis", "script_safe_json", "topic_labels", "topic_word_frame",
           "term_frequency"]


class InteropError(ValueError):
    """An optional library is missing, or an input is not what a converter reads."""


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError as exc:
        raise InteropError("pandas is needed: pip install pandas "
                           "(or streamtopic[interop])") from exc
    return pd


def topic_labels(model: FittedModel) -> list[str]:
    """``topic_0`` … ``topic_{K−1}``: the names of the topics' rows and columns."""
    return [f"topic_{k}" for k in range(model.components_.shape[0])]


def topic_word_frame(model: FittedModel) -> Any:
    """p(w | z) as a DataFrame (K×V): one row per topic (``topic_k``), one column per word,
    with the topic's anchor word and prevalence p(z) in the frame's ``attrs``."""
    pd = _pandas()
    check_is_fitted(model)
    frame = pd.DataFrame(model.components_, index=topic_labels(model),
                         columns=list(model.vocab_))
    frame.attrs["anchor_words"] = list(model.anchor_words_)
    frame.attrs["prevalence"] = np.asarray(model.topic_prevalence_).tolist()
    return frame


def doc_topic_frame(source: Any, model: FittedModel | None = None) -> Any:
    """Documents' topic proportions as a DataFrame (n_docs×K).

    Parameters
    ----------
    source : ndarray of shape (n_docs, K), or path
        θ (e.g. from ``transform``), or the output of ``streamtopic infer``: a zarr group
        (read whole), a CSV or a Parquet file. From an output, the frame is indexed by
        (source, position) and has the documents' names in a ``name`` column.
    model : FittedModel, optional
        Names the columns of an array (``topic_k``).
    """
    pd = _pandas()
    if not isinstance(source, (str, os.PathLike)):
        theta = np.asarray(source)
        K = theta.shape[1]
        cols = topic_labels(model) if model is not None else [f"topic_{k}" for k in range(K)]
        return pd.DataFrame(theta, columns=cols)
    path = os.fspath(source)
    if os.path.isdir(path):
        frame = _zarr_frame(pd, path)
    elif path.lower().endswith((".parquet", ".pq")):
        frame = pd.read_parquet(path)
    else:
        frame = pd.read_csv(path, keep_default_na=False)
    return frame.set_index(["source", "position"])


def _zarr_frame(pd: Any, path: str) -> Any:
    import zarr

    g: Any = zarr.open_group(path, mode="r")
    meta = g.attrs.get(MARK)
    if meta is None:
        raise InteropError(f"{path}: not an output of streamtopic infer")
    theta = g["theta"][:]
    frame = pd.DataFrame(theta, columns=meta["topics"])
    sources = np.asarray(meta["sources"], dtype=object)
    frame.insert(0, "name", np.asarray(g["name"][:], dtype=object))
    frame.insert(0, "position", g["position"][:])
    frame.insert(0, "source", sources[g["source"][:]])
    return frame


def coherence_topics(model: FittedModel, n: int = 10) -> list[list[str]]:
    """Each topic's ``n`` most probable words, most probable first: the ``topics=`` of
    ``gensim.models.CoherenceModel`` (with a gensim ``Dictionary`` that knows the words)."""
    return model.top_words(n)


def term_frequency(model: FittedModel) -> np.ndarray:
    """Each word's token count in the training corpus (V,): the store's counts when it is
    still there, else p(w) times the corpus' tokens as the model recorded them."""
    record = model.diagnostics_.get("store", {}) or {}
    path = record.get("path")
    if path and CooccurrenceStore.is_store(path):
        with CooccurrenceStore.open(path) as store:
            if store.counts_known:
                index = {w: i for i, w in enumerate(store.vocab)}
                counts = np.asarray(store.word_counts, dtype=np.float64)
                ids = np.array([index.get(w, -1) for w in model.vocab_])
                if (ids >= 0).all():
                    return cast("np.ndarray", counts[ids])
    tokens = float(record.get("n_tokens") or 1e6)
    p = np.asarray(model.word_probability_, dtype=np.float64)
    return cast("np.ndarray", p / p.sum() * tokens)


def pyldavis_data(model: FittedModel, **kwargs: Any) -> Any:
    """pyLDAvis' ``PreparedData`` of a model, without reading the corpus.

    pyLDAvis takes the documents' topic proportions and lengths only to weigh the topics:
    the model's prevalence p(z) times the corpus' tokens gives those weights directly, so one
    document of all the tokens with θ = p(z) stands for the corpus. Word frequencies are
    :func:`term_frequency`. ``kwargs`` go to ``pyLDAvis.prepare`` (e.g. ``R``,
    ``sort_topics``, ``n_jobs``).
    """
    try:
        import pyLDAvis
    except ImportError as exc:
        raise InteropError("pyLDAvis is needed: pip install pyLDAvis "
                           "(or streamtopic[interop])") from exc
    check_is_fitted(model)
    tf = term_frequency(model)
    used = tf > 0  # pyLDAvis divides by the words' frequencies
    topics = model.components_[:, used]
    topics = topics / topics.sum(axis=1, keepdims=True)
    prevalence = np.asarray(model.topic_prevalence_, dtype=np.float64)
    kwargs.setdefault("n_jobs", 1)
    with warnings.catch_warnings():  # pandas' log of the zero probabilities of rare words
        warnings.simplefilter("ignore", RuntimeWarning)
        return pyLDAvis.prepare(
            topic_term_dists=topics, doc_topic_dists=(prevalence / prevalence.sum())[None, :],
            doc_lengths=np.array([tf.sum()]), vocab=list(np.asarray(model.vocab_)[used]),
            term_frequency=tf[used], **kwargs)


def save_pyldavis(model: FittedModel, path: str | os.PathLike[str], **kwargs: Any) -> str:
    """pyLDAvis' HTML page of a model (:func:`pyldavis_data`, :func:`pyldavis_html`), written
    aside and renamed. The page works offline: pyLDAvis' scripts and style sheet are inlined,
    and every word is data, never markup."""
    data = pyldavis_data(model, **kwargs)
    path = os.path.abspath(os.fspath(path))
    page = pyldavis_html(data, title=f"Topics of {os.path.basename(path)}")
    with written_aside(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path


#: Characters that could end a ``<script>`` element or an HTML comment, or a line of
#: JavaScript, written as JSON escapes inside the page's data
_SCRIPT_SAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                "\u2029": "\\u2029"}


def script_safe_json(text: str) -> str:
    """JSON text made safe to embed in an HTML ``<script>`` element: ``<``, ``>``, ``&`` and
    the JavaScript line separators written as ``\\uXXXX`` escapes, which decode to the same
    strings (a word such as ``</script><script>…`` stays a word)."""
    return re.sub("[<>&\u2028\u2029]", lambda m: _SCRIPT_SAFE[m.group(0)], text)


def _inline(text: str, tag: str) -> str:
    """A script or style sheet's source inlined in a ``<tag>`` element: any ``</tag`` in it
    (inside a string) written ``<\\/tag``, which does not end the element."""
    return re.sub(f"</(?={tag})", "<\\\\/", text, flags=re.IGNORECASE)


def pyldavis_html(data: Any, title: str = "pyLDAvis") -> str:
    """A self-contained HTML page of pyLDAvis' ``PreparedData``: d3, LDAvis' script and its
    style sheet inlined from the pyLDAvis package (pyLDAvis' own pages load them from
    d3js.org and cdn.jsdelivr.net), the data as script-safe JSON (:func:`script_safe_json`),
    the title escaped.

    Parameters
    ----------
    data : pyLDAvis.PreparedData
        From :func:`pyldavis_data` or ``pyLDAvis.prepare``.
    title : str
        The page's title (plain text).

    Returns
    -------
    str
        The page.
    """
    import html

    from pyLDAvis import urls

    def read(path: str) -> str:
        with open(path, encoding="utf-8") as fh:
            return fh.read()

    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title>\n"
        f"<style>{_inline(read(urls.LDAVIS_CSS_LOCAL), 'style')}</style>\n"
        f"<script>{_inline(read(urls.D3_LOCAL), 'script')}</script>\n"
        f"<script>{_inline(read(urls.LDAVIS_LOCAL), 'script')}</script>\n"
        "</head><body>\n<div id=\"ldavis\" style=\"background-color:white;\"></div>\n"
        f"<script>new LDAvis(\"#ldavis\", {script_safe_json(data.to_json())});</script>\n"
        "</body></html>\n"
    )
