"""Models in Jupyter: a fitted model shows its topics as an HTML table, and its report
(:mod:`streamtopic.report`) shows inline.

In a notebook, a cell that ends with a fitted :class:`~streamtopic.AnchorTopicModel` shows
:func:`topics_html` (through the model's ``_repr_html_``), and one that ends with
``model.report()`` shows the whole report, the page Bokeh draws, in an ``<iframe>`` whose
``srcdoc`` holds it: nothing is fetched, so it works offline and in a saved notebook.
``model.report("report.html")`` also writes the file, which
``IPython.display.IFrame("report.html", width="100%", height=900)`` shows as well.
"""

from __future__ import annotations

import html
import os
import tempfile

from .fitted import FittedModel

__all__ = ["Report", "report", "topics_html"]

#: Height in CSS pixels of the report's frame in a notebook.
FRAME_HEIGHT = 900


def topics_html(model: FittedModel, n: int = 10) -> str:
    """A fitted model's topics as an HTML table: for each topic its number, prevalence p(z),
    anchor word and ``n`` most probable words (the anchor in bold when among them). Words are
    escaped. An unfitted model gives one line naming its settings.

    Parameters
    ----------
    model : FittedModel
    n : int
        Top words per topic.

    Returns
    -------
    str

    Examples
    --------
    >>> from streamtopic import AnchorTopicModel
    >>> from streamtopic.notebook import topics_html
    >>> topics_html(AnchorTopicModel(n_topics=5))
    '<p><code>AnchorTopicModel(n_topics=5)</code>: not fitted</p>'
    """
    if not hasattr(model, "components_"):
        return f"<p><code>AnchorTopicModel(n_topics={model.n_topics})</code>: not fitted</p>"
    rows = []
    for k, words in enumerate(model.top_words(n)):
        anchor = model.anchor_words_[k]
        shown = " ".join(f"<b>{html.escape(w)}</b>" if w == anchor else html.escape(w)
                         for w in words)
        rows.append(f"<tr><td>{k}</td><td>{model.topic_prevalence_[k]:.3f}</td>"
                    f"<td><b>{html.escape(anchor)}</b></td>"
                    f"<td style='text-align:left'>{shown}</td></tr>")
    caption = (f"AnchorTopicModel: K = {model.n_topics} topics over V = {len(model.vocab_):,} "
               f"words, method {html.escape(str(model.method))}")
    return ("<table class='streamtopic-topics'>"
            f"<caption style='text-align:left'>{caption}</caption>"
            "<thead><tr><th>topic</th><th>p(z)</th><th>anchor</th>"
            f"<th style='text-align:left'>top {n} words</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


class Report:
    """A model's HTML report: shown inline in a notebook, saved as one self-contained file.

    Parameters
    ----------
    html : str
        The page (Bokeh's resources inlined).
    path : str, optional
        The file it was written to.

    Attributes
    ----------
    html : str
    path : str or None
    """

    def __init__(self, html: str, path: str | None = None) -> None:
        self.html = html
        self.path = path

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the page to ``path``; returns its absolute path (also kept in ``path``)."""
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(self.html)
        self.path = os.path.abspath(path)
        return self.path

    def _repr_html_(self) -> str:
        """The page in an ``<iframe>`` (its ``srcdoc``), for Jupyter."""
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" width="100%" '
                f'height="{FRAME_HEIGHT}" style="border:none"></iframe>')

    def __repr__(self) -> str:
        where = f", written to {self.path}" if self.path else ""
        return f"<streamtopic report: {len(self.html):,} characters of HTML{where}>"


def report(model: FittedModel, path: str | os.PathLike[str] | None = None, *,
           top_words: int = 10, model_path: str | os.PathLike[str] | None = None) -> Report:
    """The HTML report of a fitted model (:func:`streamtopic.report.write_report`), written
    to ``path`` when given.

    Parameters
    ----------
    model : FittedModel
        A fitted model.
    path : path, optional
        Also write the page there.
    top_words : int
        Words shown per topic.
    model_path : path, optional
        Where the model was loaded from (named in the page).

    Returns
    -------
    Report
    """
    from .report import write_report

    if path is not None:
        out = write_report(model, path, top_words=top_words, model_path=model_path)
        with open(out, encoding="utf-8") as fh:
            return Report(fh.read(), out)
    with tempfile.TemporaryDirectory(prefix="streamtopic-report-") as d:
        out = write_report(model, os.path.join(d, "report.html"), top_words=top_words,
                           model_path=model_path)
        with open(out, encoding="utf-8") as fh:
            return Report(fh.read())
