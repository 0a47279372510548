"""Models in Jupyter (:mod:`streamtopic.notebook`): the topics as an HTML table
(``AnchorTopicModel._repr_html_``) and the report shown inline (``model.report()``)."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import dask
import pytest

import streamtopic as st
from streamtopic.notebook import Report

K = 6


@pytest.fixture(scope="module")
def model(tmp_path_factory, kos_docword):
    """K = 6 topics of UCI KOS ('plain': a second)."""
    d = tmp_path_factory.mktemp("notebook")
    with dask.config.set(scheduler="threads"):
        st.ingest(kos_docword, d / "kos.zarr", progress=False)
        return st.AnchorTopicModel(n_topics=K, method="plain", seed=0).fit(d / "kos.zarr")


class _Cells(HTMLParser):
    """The text of every table cell, by row, and the bold words of each row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.bold: list[list[str]] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
            self.bold.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")
        self._in = tag if tag in ("td", "th", "b") else self._in

    def handle_endtag(self, tag):
        self._in = None if tag == "b" else self._in

    def handle_data(self, data):
        if self.rows and self.rows[-1]:
            self.rows[-1][-1] += data
            if self._in == "b":
                self.bold[-1].append(data)


def test_repr_html_is_the_topics_table(model):
    parsed = _Cells()
    parsed.feed(model._repr_html_())
    header, *rows = parsed.rows
    assert header == ["topic", "p(z)", "anchor", "top 10 words"]
    assert len(rows) == K
    for k, (cells, bold) in enumerate(zip(rows, parsed.bold[1:], strict=True)):
        anchor = model.anchor_words_[k]
        assert cells[:3] == [str(k), f"{model.topic_prevalence_[k]:.3f}", anchor]
        assert cells[3].split() == model.top_words(10)[k]
        assert set(bold) == {anchor}  # the anchor, also where it is among the top words


def test_repr_html_escapes_words_and_names_an_unfitted_model(model):
    import copy

    odd = copy.copy(model)
    odd.vocab_ = list(model.vocab_)
    top = model.top_words(1)[0][0]
    odd.vocab_[model.vocab_.index(top)] = "<script>x</script>"
    text = odd._repr_html_()
    assert "<script>" not in text and "&lt;script&gt;x&lt;/script&gt;" in text
    assert "not fitted" in st.AnchorTopicModel(n_topics=3)._repr_html_()


@pytest.mark.slow
def test_report_embeds_the_page_in_a_notebook_and_writes_the_file(model, tmp_path):
    shown = model.report(top_words=7)
    assert isinstance(shown, Report) and shown.path is None
    assert "Bokeh" in shown.html and "Top 7 words" in shown.html
    frame = shown._repr_html_()
    m = re.fullmatch(r'<iframe srcdoc="([^"]*)" width="100%" height="\d+" [^>]*></iframe>',
                     frame, re.S)
    assert m is not None  # the page, escaped into one attribute: no quote breaks out of it
    assert html.unescape(m.group(1)) == shown.html
    written = model.report(tmp_path / "r.html")
    assert written.path == str(tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text(encoding="utf-8") == written.html
    assert "r.html" in repr(written)
    with pytest.raises(st.ModelError):
        st.AnchorTopicModel(n_topics=3).report()
