"""A report of a fitted topic model: one self-contained HTML file (``streamtopic report``).

The page is a Bokeh layout written with Bokeh's JavaScript and CSS inlined
(:data:`bokeh.resources.INLINE`), so it opens offline and requests nothing over the network.
It shows

* the *topic map*: the topics placed in two dimensions by classical multidimensional scaling
  of their Jensen–Shannon distances (:func:`topic_map`), each point sized by its prevalence
  p(z) and labelled by its anchor word; hovering shows its top words;
* the *topic correlation*: the Pearson correlation of the topic proportions θ implied by the
  topic-topic matrix R (:func:`topic_correlation`), as a heatmap whose rows and columns are
  ordered so that correlated topics sit together (:func:`similarity_order`: average-linkage
  clustering with the optimal leaf ordering);
* the *prevalence* p(z) of every topic (with the Dirichlet α when the model has one);
* each topic's *top words* as horizontal bars of p(w | z), its anchor word in another colour
  and named in the panel's title;
* a table of the topics, and the *provenance*: the model's record (K, V, settings, seconds per
  stage, solver and refinement figures, intrinsic metrics) and its store's (inputs,
  documents, tokens, tokenizer), the manifest read from the store when it still exists.

:func:`write_report` writes the file; :func:`report_layout` builds the layout.
"""

from __future__ import annotations

import errno
import html
import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from bokeh.embed import file_html
from bokeh.layouts import column, gridplot, row
from bokeh.models import (
    BasicTicker,
    ColumnDataSource,
    CustomJS,
    DataRange1d,
    FactorRange,
    HoverTool,
    LinearColorMapper,
    NumeralTickFormatter,
    Range1d,
)
from bokeh.models.annotations import ColorBar, LabelSet, Title
from bokeh.models.widgets import DataTable, Div, NumberFormatter, Select, TableColumn
from bokeh.palettes import Category20, RdBu11
from bokeh.plotting import figure
from bokeh.resources import INLINE

from . import metrics
from ._io import written_aside
from .fitted import FittedModel, Slice, SliceWords, check_is_fitted
from .metrics import top_word_ids
from .seeding import excluded_ids
from .store import CooccurrenceStore, StoreError

if TYPE_CHECKING:
    from bokeh.models import LayoutDOM

__all__ = [
    "topic_correlation",
    "similarity_order",
    "topic_distances",
    "classical_mds",
    "topic_map",
    "label_boxes",
    "place_labels",
    "provenance",
    "report_layout",
    "write_report",
]

#: Colours of the bars: a topic's words, and its anchor word.
WORD_COLOUR = "#4c78a8"
ANCHOR_COLOUR = "#e45756"
#: Width of the page's panels in CSS pixels, and topic panels per row.
PAGE_WIDTH = 1280
TOPIC_COLUMNS = 4
#: Sections of the provenance: a title, the column headers (None: rows of name and value)
#: and the rows.
Section = tuple[str, "list[str] | None", "list[list[str]]"]


# ----------------------------------------------------------------------------- the numbers


def topic_correlation(R: np.ndarray) -> np.ndarray:
    """The Pearson correlation of the topic proportions θ implied by the topic-topic matrix.

    R (normalised to sum 1) is read as E[θ θᵀ] and its row sums m as E[θ], so that
    Cov(θ) = R − m mᵀ and corr_ij = Cov_ij / sqrt(Cov_ii Cov_jj). A topic whose implied
    variance is not positive (a degenerate row of R) correlates 0 with the others.

    Parameters
    ----------
    R : array_like of shape (K, K)
        A model's ``topic_cooccurrence_`` (symmetrised here).

    Returns
    -------
    ndarray of shape (K, K)
        Correlations in [-1, 1], ones on the diagonal.
    """
    R = np.asarray(R, dtype=np.float64)
    R = (R + R.T) / 2.0
    total = R.sum()
    if not np.isfinite(total) or total <= 0:
        raise ValueError("topic_cooccurrence_ must have a positive, finite sum")
    R = R / total
    m = R.sum(axis=1)
    C = R - np.outer(m, m)
    var = np.diagonal(C)
    ok = var > 0
    sd = np.sqrt(np.where(ok, var, 1.0))
    corr = np.clip(C / np.outer(sd, sd), -1.0, 1.0)
    corr[~ok, :] = 0.0
    corr[:, ~ok] = 0.0
    np.fill_diagonal(corr, 1.0)
    return cast("np.ndarray", corr)


def similarity_order(corr: np.ndarray) -> np.ndarray:
    """An order of the topics that puts correlated topics next to each other.

    Average-linkage hierarchical clustering on the distances 1 − corr, its leaves in the
    optimal leaf ordering (``scipy.cluster.hierarchy``: adjacent leaves as similar as
    possible).

    Parameters
    ----------
    corr : array_like of shape (K, K)
        Correlations (:func:`topic_correlation`).

    Returns
    -------
    ndarray of int64, shape (K,)
        A permutation of the topics.
    """
    from scipy.cluster.hierarchy import leaves_list, linkage, optimal_leaf_ordering
    from scipy.spatial.distance import squareform

    corr = np.asarray(corr, dtype=np.float64)
    K = corr.shape[0]
    if K < 3:
        return np.arange(K, dtype=np.int64)
    D = np.clip(1.0 - (corr + corr.T) / 2.0, 0.0, 2.0)
    np.fill_diagonal(D, 0.0)
    d = squareform(D, checks=False)
    Z = optimal_leaf_ordering(linkage(d, method="average"), d)
    return np.asarray(leaves_list(Z), dtype=np.int64)


def topic_distances(components: np.ndarray) -> np.ndarray:
    """The Jensen–Shannon distances between topics (base 2: in [0, 1]).

    Parameters
    ----------
    components : array_like of shape (K, V)
        Topic-word distributions p(w | z), one per row (renormalised here).

    Returns
    -------
    ndarray of shape (K, K)
        Symmetric, zero diagonal.
    """
    from scipy.spatial.distance import pdist, squareform

    W = np.clip(np.asarray(components, dtype=np.float64), 0.0, None)
    W = W / W.sum(axis=1, keepdims=True)
    # scipy's distance uses natural logarithms: sqrt(ln 2) is the largest
    return cast("np.ndarray", squareform(pdist(W, "jensenshannon") / math.sqrt(math.log(2.0))))


def classical_mds(D: np.ndarray, dims: int = 2) -> np.ndarray:
    """Classical (Torgerson) multidimensional scaling of a distance matrix.

    The points are the top ``dims`` eigenvectors of the doubly centred −D²/2, scaled by the
    square roots of their eigenvalues (0 for an eigenvalue not above 1e-9 of the largest:
    rounding); each axis' sign is
    chosen so that its largest coordinate is positive (deterministic output).

    Parameters
    ----------
    D : array_like of shape (K, K)
        Symmetric distances.
    dims : int
        Dimensions of the embedding.

    Returns
    -------
    ndarray of shape (K, dims)
    """
    D = np.asarray(D, dtype=np.float64)
    K = D.shape[0]
    J = np.eye(K) - 1.0 / K
    B = -0.5 * J @ (D**2) @ J
    vals, vecs = np.linalg.eigh((B + B.T) / 2.0)
    top = np.argsort(vals)[::-1][:dims]
    kept = np.where(vals[top] > 1e-9 * max(float(vals.max()), 0.0), vals[top], 0.0)
    X = vecs[:, top] * np.sqrt(kept)
    if X.shape[1] < dims:
        X = np.hstack([X, np.zeros((K, dims - X.shape[1]))])
    big = np.abs(X).argmax(axis=0)
    return X * np.where(X[big, np.arange(dims)] < 0, -1.0, 1.0)


def topic_map(components: np.ndarray) -> np.ndarray:
    """The topics' positions on a 2-D map: :func:`classical_mds` of their
    :func:`topic_distances`.

    Parameters
    ----------
    components : array_like of shape (K, V)

    Returns
    -------
    ndarray of shape (K, 2)
    """
    return classical_mds(topic_distances(components), 2)


# ----------------------------------------------------------------------------- provenance


def _fmt(value: Any) -> str:
    """A value of a record as table text."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items() if v is not None)
    if isinstance(value, (list, tuple)):
        return f"[{len(value)} items]" if len(value) > 8 else ", ".join(_fmt(v) for v in value)
    return str(value)


def _model_rows(model: FittedModel, model_path: str | None) -> list[list[str]]:
    """The model's record: where it is, its size, settings and solver figures."""
    diag = model.diagnostics_
    rows = [["model", os.path.abspath(model_path) if model_path else "(not saved)"],
            ["topics (K)", _fmt(int(model.n_topics))],
            ["vocabulary (V)", _fmt(len(model.vocab_))],
            ["settings", _fmt(diag.get("settings") or {"method": model.method})],
            ["seed", _fmt(model.seed)]]
    core = diag.get("core")
    if core:
        rows.append(["core vocabulary", f"{core['size']:,} words, "
                     f"{core['share_of_tokens']:.1%} of the tokens"])
    chosen = diag.get("vocabulary")
    if chosen:
        rows.append(["vocabulary chosen at fit time", f"{chosen['V']:,} of the store's "
                     f"{chosen['store_V']:,} words ({_fmt(chosen)})"])
    rows.append(["word rows converged", f"{model.n_converged_:,} of {model.n_fitted_:,}"])
    rows.append(["anchor cleanup", f"{diag.get('cleanup_changed', 0)} anchors changed"])
    rect = diag.get("rectification")
    if rect:
        rows.append(["rectification", "reused from the store's cache" if rect.get("reused")
                     else f"{rect.get('method', '')}, {rect.get('iterations', '?')} iterations"])
    refine = diag.get("refinement")
    if refine:
        ll = refine.get("loglik_per_token") or [float("nan")]
        rows.append(["refinement", f"{refine.get('passes')} passes, converged "
                     f"{refine.get('converged')}, training log-likelihood "
                     f"{ll[-1]:.4f} nats/token"])
    alpha = getattr(model, "alpha_", None)
    if alpha is not None:
        a = np.asarray(alpha, dtype=np.float64)
        rows.append(["Dirichlet α", f"sum {a.sum():.4g}, from {a.min():.4g} to {a.max():.4g}"])
    return rows


def _seconds_rows(model: FittedModel) -> list[list[str]]:
    """Seconds per stage of the fit, and their total."""
    seconds = model.diagnostics_.get("seconds") or {}
    rows = [[str(k), f"{float(v):.2f} s"] for k, v in seconds.items()]
    rows.append(["total", f"{sum(float(v) for v in seconds.values()):.2f} s"])
    return rows


def _metric_rows(model: FittedModel, top_words: int) -> list[list[str]]:
    """Intrinsic metrics of the model (Lee et al.'s), computed from its arrays."""
    B = np.asarray(model.components_, dtype=np.float64).T
    rows = [[f"dissimilarity (unique words of the top {top_words})",
             f"{metrics.dissimilarity(B, top_words):.2f}"],
            ["sparsity (Hoyer)", f"{metrics.sparsity(B):.3f}"],
            ["dominancy of R", f"{metrics.dominancy(np.asarray(model.topic_cooccurrence_)):.3f}"]]
    p = np.asarray(getattr(model, "word_probability_", ()), dtype=np.float64)
    if p.shape == (B.shape[0],) and p.sum() > 0:
        rows.append(["specificity (KL to p(w), nats)", f"{metrics.specificity(B, p):.3f}"])
    return rows


def _store_sections(record: dict[str, Any]) -> list[Section]:
    """The store's record in the model, and its manifest (inputs) when the store is still
    there (opened read-only, without a reader's lease)."""
    path = record.get("path")
    rows = [["store", str(path)], ["version fitted", _fmt(record.get("version"))],
            ["documents", _fmt(record.get("n_docs"))], ["store vocabulary", _fmt(record.get("V"))]]
    try:
        store = CooccurrenceStore.open(path, lease=False) if path else None
    except (StoreError, OSError) as exc:
        rows.append(["manifest", f"not available ({exc})"])
        return [("Corpus (store)", None, rows)]
    if store is None:
        return [("Corpus (store)", None, rows)]
    fitted = record.get("version", store.version)
    same = store.version == fitted
    rows.append(["tokens", _fmt(store.n_tokens) if same else
                 f"(the store is now at version {store.version})"])
    rows.append(["tokenizer", _fmt(store.config.get("tokenizer") or {})])
    rows.append(["pruning at ingest", _fmt(store.config.get("pruning") or {})])
    sources = [s for s in store.sources if s.version <= int(fitted)]
    table = [[s.path, str(s.get("format")), _fmt(s.get("n_docs")),
              _fmt(s.get("n_tokens")), s.sha256[:12], _fmt(s.get("version"))]
             for s in sources]
    header = ["input", "format", "documents", "tokens", "sha256", "version"]
    return [("Corpus (store)", None, rows), ("Corpus inputs", header, table)]


def provenance(model: FittedModel, model_path: str | os.PathLike[str] | None = None,
               top_words: int = 10) -> list[Section]:
    """The report's record of where a model comes from, as tables.

    Parameters
    ----------
    model : FittedModel
        A fitted model.
    model_path : path, optional
        Where it was loaded from.
    top_words : int
        Top words per topic compared by the dissimilarity.

    Returns
    -------
    list of (title, header, rows)
        ``header`` None: rows of a name and a value.
    """
    path = os.fspath(model_path) if model_path is not None else None
    sections: list[Section] = [("Model", None, _model_rows(model, path))]
    sections += _store_sections(model.diagnostics_.get("store") or {})
    sections += [("Seconds per stage", None, _seconds_rows(model)),
                 ("Metrics (intrinsic)", None, _metric_rows(model, top_words))]
    return sections


# ----------------------------------------------------------------------------- the panels


def _labels(model: FittedModel) -> list[str]:
    """A topic's name on the axes: its number and anchor word (a named topic's words)."""
    named = _named(model)
    return [f"{k} {' '.join(named[k]) if k < len(named) else w}"
            for k, w in enumerate(model.anchor_words_)]


def _named(model: FittedModel) -> list[list[str]]:
    """The named topics' anchor words, in order (the first topics; issue 27)."""
    return list((model.diagnostics_.get("seeding") or {}).get("named") or [])


#: Candidate places of a point's label on the map, as directions from the point (x, y):
#: right, left, above, below, then the diagonals.
_LABEL_DIRECTIONS = np.array([(1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (1, -1), (-1, 1),
                              (-1, -1)], dtype=np.float64)


def _overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Areas of intersection of boxes a (m×4) and b (n×4), rows (x0, y0, x1, y1): m×n."""
    w = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    h = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    return cast("np.ndarray", np.clip(w, 0.0, None) * np.clip(h, 0.0, None))


def label_boxes(centres: np.ndarray, radii: np.ndarray, widths: np.ndarray,
                height: float) -> np.ndarray:
    """The candidate boxes of the points' labels, one per direction of
    :data:`_LABEL_DIRECTIONS`, 3 pixels off the point's edge.

    Parameters
    ----------
    centres : ndarray of shape (K, 2)
        The points, in pixels (y up).
    radii, widths : ndarray of shape (K,)
        The points' radii and the labels' widths, in pixels.
    height : float
        A label's height in pixels.

    Returns
    -------
    ndarray of shape (K, C, 4)
        Per point and direction, the box (x0, y0, x1, y1).
    """
    anchor = centres[:, None, :] + (radii + 3.0)[:, None, None] * _LABEL_DIRECTIONS[None]
    sx, sy = _LABEL_DIRECTIONS[:, 0], _LABEL_DIRECTIONS[:, 1]
    x0 = anchor[..., 0] - widths[:, None] * (sx < 0) - widths[:, None] / 2 * (sx == 0)
    y0 = anchor[..., 1] - height * (sy < 0) - height / 2 * (sy == 0)
    return np.stack([x0, y0, x0 + widths[:, None], y0 + height], axis=-1)


def place_labels(centres: np.ndarray, radii: np.ndarray, widths: np.ndarray, height: float,
                 frame: tuple[float, float]) -> np.ndarray:
    """Where each point's label goes: greedily, largest point first, the candidate box
    (:func:`label_boxes`) that overlaps the other points least and stays in the frame; a
    label that would overlap a label placed before is left out (the hover names the point).

    Parameters
    ----------
    centres : ndarray of shape (K, 2)
        The points, in pixels (y up).
    radii, widths : ndarray of shape (K,)
        The points' radii and the labels' widths, in pixels.
    height : float
        A label's height in pixels.
    frame : (float, float)
        The plot area's width and height in pixels.

    Returns
    -------
    ndarray of int64, shape (K,)
        Per point, the row of :data:`_LABEL_DIRECTIONS` chosen, or -1: no label.
    """
    K = len(centres)
    boxes = label_boxes(centres, radii, widths, height)  # K × C × 4
    dots = np.hstack([centres - radii[:, None], centres + radii[:, None]])
    inside = _overlap(boxes.reshape(-1, 4), np.array([[0.0, 0.0, *frame]]))[:, 0]
    outside = (widths[:, None] * height - inside.reshape(K, -1)) * 2.0
    choice = np.full(K, -1, dtype=np.int64)
    placed = np.zeros((0, 4))
    for i in np.argsort(-radii, kind="stable"):
        clash = _overlap(boxes[i], placed).sum(axis=1)
        cost = (_overlap(boxes[i], np.delete(dots, i, axis=0)).sum(axis=1) + outside[i]
                + 1e-3 * np.arange(len(_LABEL_DIRECTIONS)) + np.where(clash > 0, np.inf, 0.0))
        best = int(np.argmin(cost))
        if np.isfinite(cost[best]):
            choice[i] = best
            placed = np.vstack([placed, boxes[i, best]])
    return choice


def _map_figure(model: FittedModel, top: list[list[str]], width: int,
                height: int) -> Any:
    """The topic map: MDS of the Jensen–Shannon distances, points sized by p(z), labels
    placed by :func:`place_labels`."""
    xy = topic_map(model.components_)
    p = np.asarray(model.topic_prevalence_, dtype=np.float64)
    size = 10.0 + 30.0 * np.sqrt(np.clip(p, 0.0, None) / max(float(p.max()), 1e-300))
    labels = _labels(model)
    lo, hi = xy.min(axis=0), xy.max(axis=0)
    pad = np.full(2, max(float((hi - lo).max()), 1e-9) * 0.15)
    frame = (width - 110.0, height - 90.0)  # the plot area: without axes, toolbar, title
    scale = np.array(frame) / (hi - lo + 2 * pad)
    choice = place_labels((xy - lo + pad) * scale, size / 2,
                          np.array([6.5 * len(t) for t in labels]), 14.0, frame)
    d = np.where(choice[:, None] >= 0, _LABEL_DIRECTIONS[choice], 0.0)
    src = ColumnDataSource({
        "x": xy[:, 0], "y": xy[:, 1], "size": size, "p": p, "label": labels,
        "words": [" ".join(w) for w in top],
        "shown": [t if c >= 0 else "" for t, c in zip(labels, choice, strict=True)],
        "dx": d[:, 0] * (size / 2 + 3), "dy": d[:, 1] * (size / 2 + 3),
        "align": np.array(["right", "center", "left"])[d[:, 0].astype(int) + 1].tolist(),
        "baseline": np.array(["top", "middle", "bottom"])[d[:, 1].astype(int) + 1].tolist()})
    fig = figure(width=width, height=height,
                 title="Topic map: MDS of Jensen–Shannon distances, size p(z)",
                 tools="pan,wheel_zoom,reset,save", toolbar_location="right",
                 x_range=Range1d(lo[0] - pad[0], hi[0] + pad[0]),
                 y_range=Range1d(lo[1] - pad[1], hi[1] + pad[1]))
    fig.scatter("x", "y", size="size", source=src, fill_color=WORD_COLOUR, fill_alpha=0.5,
                line_color="#1f3b5a")
    fig.add_layout(LabelSet(x="x", y="y", text="shown", source=src, x_offset="dx",
                            y_offset="dy", text_align="align", text_baseline="baseline",
                            text_font_size="11px", text_color="#222222"))
    fig.add_tools(HoverTool(tooltips=[("topic", "@label"), ("p(z)", "@p{0.000}"),
                                      ("top words", "@words")]))
    fig.xaxis.axis_label, fig.yaxis.axis_label = "MDS 1", "MDS 2"
    return fig


def _heatmap_figure(model: FittedModel, size: int) -> Any:
    """The topic correlation heatmap, topics in :func:`similarity_order`."""
    corr = topic_correlation(model.topic_cooccurrence_)
    order = similarity_order(corr)
    labels = _labels(model)
    names = [labels[i] for i in order]
    ii, jj = np.meshgrid(order, order, indexing="ij")
    src = ColumnDataSource({"x": [labels[i] for i in ii.ravel()],
                            "y": [labels[j] for j in jj.ravel()],
                            "corr": corr[ii.ravel(), jj.ravel()]})
    off = np.abs(corr[~np.eye(len(corr), dtype=bool)])
    lim = float(off.max()) if off.size and off.max() > 0 else 1.0
    mapper = LinearColorMapper(palette=list(RdBu11), low=-lim, high=lim)
    fig = figure(width=size + 90, height=size, x_range=FactorRange(*names),
                 y_range=FactorRange(*reversed(names)), toolbar_location=None, tools="",
                 title="Topic correlation (of θ, from R; ordered by clustering)")
    fig.rect("x", "y", 1, 1, source=src, line_color=None,
             fill_color={"field": "corr", "transform": mapper})
    fig.add_tools(HoverTool(tooltips=[("topics", "@x × @y"), ("correlation", "@corr{0.000}")]))
    fig.add_layout(ColorBar(color_mapper=mapper, ticker=BasicTicker(desired_num_ticks=6),
                            width=12, formatter=NumeralTickFormatter(format="0.00")), "right")
    fig.xaxis.major_label_orientation = math.pi / 2.8
    fig.grid.grid_line_color = None
    fig.axis.axis_line_color = None
    fig.axis.major_tick_line_color = None
    if len(names) > 40:  # unreadable: the hover names the cells
        fig.axis.major_label_text_font_size = "0px"
    return fig


def _prevalence_figure(model: FittedModel, width: int) -> Any:
    """p(z) of each topic, most prevalent first (α_k in the hover when the model has α)."""
    p = np.asarray(model.topic_prevalence_, dtype=np.float64)
    order = np.argsort(-p, kind="stable")
    labels = _labels(model)
    data: dict[str, Any] = {"label": [labels[i] for i in order], "p": p[order]}
    tips = [("topic", "@label"), ("p(z)", "@p{0.0000}")]
    alpha = getattr(model, "alpha_", None)
    if alpha is not None and np.shape(alpha) == p.shape:
        data["alpha"] = np.asarray(alpha, dtype=np.float64)[order]
        tips.append(("Dirichlet α", "@alpha{0.0000}"))
    fig = figure(width=width, height=240, x_range=FactorRange(*data["label"]),
                 y_range=DataRange1d(start=0), title="Topic prevalence p(z)",
                 toolbar_location=None, tools="")
    fig.vbar(x="label", top="p", width=0.8, source=ColumnDataSource(data),
             fill_color=WORD_COLOUR, line_color=None)
    fig.add_tools(HoverTool(tooltips=tips))
    if 7.0 * sum(len(t) + 2 for t in data["label"]) > width - 60:  # no room side by side
        fig.xaxis.major_label_orientation = math.pi / 2.8
    fig.xgrid.grid_line_color = None
    if len(order) > 60:
        fig.xaxis.major_label_text_font_size = "0px"
    return fig


def _timeline_figure(model: FittedModel, slices: Sequence[Slice], width: int) -> Any:
    """Each topic's prevalence per slice as a line: over store versions, or over time (a
    slice of time at its middle, on a date axis); the hover names the topic, the slice and
    the share."""
    labels = _labels(model)
    dated = all(s.start is not None and s.end is not None for s in slices)
    P = np.array([s.prevalence for s in slices], dtype=np.float64)  # slices×K
    if dated:
        start = np.array([s.start for s in slices], dtype="datetime64[D]")
        end = np.array([s.end for s in slices], dtype="datetime64[D]")
        middle = start + (end - start) // 2
        x: list[Any] = middle.astype("datetime64[ms]").astype(np.int64).astype(float).tolist()
    else:
        x = [s.version for s in slices]
    names = [s.label or f"version {s.version}" for s in slices]
    data = {"xs": [x] * P.shape[1], "ys": [P[:, k] for k in range(P.shape[1])],
            "names": [names] * P.shape[1], "label": labels,
            "colour": [Category20[20][k % 20] for k in range(P.shape[1])]}
    title = "Topic prevalence over time" if dated else "Topic prevalence per store version"
    fig = figure(width=width, height=300, title=title,
                 x_axis_label="time" if dated else "store version",
                 x_axis_type="datetime" if dated else "linear",
                 y_axis_label="share of the tokens", y_range=DataRange1d(start=0),
                 toolbar_location=None, tools="")
    fig.multi_line(xs="xs", ys="ys", line_color="colour", line_width=2,
                   source=ColumnDataSource(data))
    where = ("slice", "$x{%F}") if dated else ("version", "$x{0}")
    hover = HoverTool(tooltips=[("topic", "@label"), where, ("share", "$y{0.000}")])
    if dated:
        hover.formatters = {"$x": "datetime"}
    fig.add_tools(hover)
    if not dated:
        fig.xaxis.ticker = x
    return fig


def _words_panel(model: FittedModel, words: Sequence[SliceWords], width: int) -> Any:
    """The top words of a chosen topic in each slice (store versions or spans of time): a
    topic chooser (a Bokeh ``Select``) over a table of the slices (name, the topic's
    prevalence there, its top words)."""
    K = int(model.n_topics)
    labels = _labels(model)
    every: dict[str, list[Any]] = {"slice": [w.label for w in words]}
    for k in range(K):
        every[f"words_{k}"] = [" ".join(t for t in w.words[k] if t) or "(its anchor is absent)"
                               for w in words]
        every[f"prevalence_{k}"] = [float(w.prevalence[k]) for w in words]
    table_data = {"slice": every["slice"], "prevalence": every["prevalence_0"],
                  "words": every["words_0"]}
    every_source = ColumnDataSource(every)
    shown = ColumnDataSource(table_data)
    table = DataTable(source=shown, width=width, height=min(40 + 26 * len(words), 420),
                      index_position=None, reorderable=False, columns=[
                          TableColumn(field="slice", title="slice", width=120),
                          TableColumn(field="prevalence", title="prevalence", width=90,
                                      formatter=NumberFormatter(format="0.000")),
                          TableColumn(field="words", title="top words (p(w | z) in the slice)",
                                      width=width - 210)])
    options: list[str | tuple[Any, str]] = [(str(k), f"topic {labels[k]}")
                                            for k in range(K)]
    choose = Select(title="Topic", value="0", width=320, options=options)
    choose.js_on_change("value", CustomJS(args={"every": every_source, "shown": shown,
                                                        "table": table}, code="""
        const k = cb_obj.value
        shown.data = {slice: every.data["slice"], prevalence: every.data["prevalence_" + k],
                      words: every.data["words_" + k]}
        table.view.change.emit()  // the rows are as many as before: redraw them
    """))
    dated = bool(words) and words[0].version == 0
    what = ("slice of time", "Each slice's part of Q (the sum over its documents)") if dated \
        else ("store version", "Each version's part of Q (the documents its ingest added)")
    head = Div(text=_CSS + f"<h2 class='st'>Top words of a topic per {what[0]}</h2>"
               f"<p style='font:13px system-ui,sans-serif;margin:0'>{what[1]}, the model's "
               "anchors fixed.</p>", width=width)
    return column(head, choose, table)


def _topic_figure(model: FittedModel, k: int, ids: np.ndarray, n_rows: int,
                  width: int) -> Any:
    """Topic k's top words (ids, most probable first) as horizontal bars of p(w | z), its
    anchor word in :data:`ANCHOR_COLOUR` (added below the top words when not among them)."""
    anchor = int(model.anchors_[k])
    outside = anchor not in ids
    shown = np.append(ids, anchor) if outside else ids
    words = [model.vocab_[i] for i in shown]
    probs = np.asarray(model.components_[k], dtype=np.float64)[shown]
    is_anchor = shown == anchor
    src = ColumnDataSource({"word": words, "p": probs, "topic": [k] * len(words),
                            "colour": np.where(is_anchor, ANCHOR_COLOUR, WORD_COLOUR).tolist(),
                            "role": np.where(is_anchor, "anchor word", "").tolist()})
    where = "outside the top words" if outside else f"rank {int(np.flatnonzero(is_anchor)[0]) + 1}"
    fig = figure(width=width, height=64 + 19 * n_rows, toolbar_location=None, tools="",
                 y_range=FactorRange(*reversed(words)), x_range=DataRange1d(start=0),
                 title=Title(text=f"Topic {k} · " + (
                     f"named: {' '.join(_named(model)[k])}" if k < len(_named(model))
                     else f"anchor: {model.anchor_words_[k]}"), text_font_size="13px"))
    fig.add_layout(Title(text=f"p(z) {model.topic_prevalence_[k]:.3f} · anchor {where}",
                         text_font_style="normal", text_font_size="11px",
                         text_color="#555555"), "above")
    fig.hbar(y="word", right="p", height=0.72, fill_color="colour", line_color=None,
             source=src)
    fig.add_tools(HoverTool(tooltips=[("word", "@word"), ("p(w|z)", "@p{0.0000}"),
                                      ("", "@role")]))
    fig.xaxis.ticker = BasicTicker(desired_num_ticks=4)
    fig.ygrid.grid_line_color = None
    fig.yaxis.major_label_text_font_size = "12px"
    fig.min_border_left = 10
    return fig


def _topics_grid(model: FittedModel, top_ids: np.ndarray) -> Any:
    """Every topic's :func:`_topic_figure`, :data:`TOPIC_COLUMNS` a row."""
    outside = [int(model.anchors_[k]) not in top_ids[k] for k in range(len(top_ids))]
    n_rows = top_ids.shape[1] + int(any(outside))
    width = PAGE_WIDTH // TOPIC_COLUMNS
    figs = [_topic_figure(model, k, top_ids[k], n_rows, width) for k in range(len(top_ids))]
    return gridplot(figs, ncols=TOPIC_COLUMNS, toolbar_location=None)


# ----------------------------------------------------------------------------- HTML parts

_CSS = (
    "<style>"
    "table.st{border-collapse:collapse;font:13px/1.4 system-ui,sans-serif;margin:4px 0 14px;}"
    "table.st th,table.st td{border-bottom:1px solid #ddd;padding:3px 10px;text-align:left;"
    "vertical-align:top;}"
    "table.st th{background:#f3f5f8;}"
    "h2.st{font:600 16px system-ui,sans-serif;margin:14px 0 4px;}"
    ".anchor{color:" + ANCHOR_COLOUR + ";font-weight:600;}"
    "</style>"
)


def _table(header: Sequence[str] | None, rows: Sequence[Sequence[str]]) -> str:
    """An HTML table (cells escaped); without a header, the first column is a heading."""
    head = ("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
            if header else "")

    def cells(r: Sequence[str]) -> str:
        if header:
            return "".join(f"<td>{html.escape(c)}</td>" for c in r)
        return f"<th>{html.escape(r[0])}</th>" + "".join(f"<td>{html.escape(c)}</td>"
                                                          for c in r[1:])

    return f"<table class='st'>{head}" + "".join(f"<tr>{cells(r)}</tr>" for r in rows) + \
        "</table>"


def _header_div(model: FittedModel, model_path: str | None) -> Div:
    """The page's title, a one-line summary and the key to the colours."""
    store = model.diagnostics_.get("store") or {}
    name = os.path.basename(os.path.normpath(model_path)) if model_path else "topic model"
    docs = f"{store['n_docs']:,} documents, " if store.get("n_docs") is not None else ""
    text = (f"<h1 style='font:600 22px system-ui,sans-serif;margin:6px 0'>streamtopic report: "
            f"{html.escape(name)}</h1><p style='font:14px system-ui,sans-serif;margin:0'>"
            f"{int(model.n_topics)} topics, {len(model.vocab_):,} words, {docs}method "
            f"{html.escape(str(model.method))}. Bars: p(w | z) of a topic's top words; "
            f"<span style='color:{ANCHOR_COLOUR};font-weight:600'>the anchor word</span> "
            f"in red. Hover over any panel for the figures.</p>")
    return Div(text=text, width=PAGE_WIDTH)


def _topics_div(model: FittedModel, top: list[list[str]]) -> Div:
    """A table of the topics: anchor word, p(z), α (when known) and top words."""
    alpha = getattr(model, "alpha_", None)
    header = ["topic", "anchor word", "p(z)"] + (["α"] if alpha is not None else []) + \
        ["top words"]
    rows = []
    for k, words in enumerate(top):
        a = [f"{float(np.asarray(alpha)[k]):.4f}"] if alpha is not None else []
        rows.append([str(k), model.anchor_words_[k],
                     f"{model.topic_prevalence_[k]:.4f}", *a, " ".join(words)])
    return Div(text=_CSS + "<h2 class='st'>Topics</h2>" + _table(header, rows),
               width=PAGE_WIDTH)


def _provenance_div(sections: list[Section]) -> Div:
    """The provenance tables."""
    parts = [f"<h2 class='st'>{html.escape(t)}</h2>{_table(h, r)}" for t, h, r in sections]
    return Div(text=_CSS + "".join(parts), width=PAGE_WIDTH)


# ----------------------------------------------------------------------------- the report


def report_layout(model: FittedModel, *, top_words: int = 10,
                  model_path: str | os.PathLike[str] | None = None,
                  timeline: Sequence[Slice] | None = None,
                  timeline_words: Sequence[SliceWords] | None = None) -> LayoutDOM:
    """The report's Bokeh layout: header, topic map and correlation heatmap, prevalence
    (and its timeline, when ``timeline`` gives the slices), the topics' top words, the
    topics' table and the provenance.

    Parameters
    ----------
    model : FittedModel
        A fitted model (``components_`` K×V, ``topic_cooccurrence_`` K×K, ...).
    top_words : int
        Words shown per topic.
    model_path : path, optional
        Where the model was loaded from (named in the header and the provenance).
    timeline : sequence of Slice, optional
        Each topic's prevalence per slice (:func:`streamtopic.timeline.timeline`).
    timeline_words : sequence of SliceWords, optional
        Each topic's top words per slice (:func:`streamtopic.timeline.slice_topics`), shown
        for a chosen topic.

    Returns
    -------
    bokeh.models.LayoutDOM
    """
    check_is_fitted(model)
    if top_words < 1:
        raise ValueError(f"top_words={top_words!r}: must be >= 1")
    path = os.fspath(model_path) if model_path is not None else None
    shown = np.asarray(model.components_, dtype=np.float64)
    hidden = excluded_ids(model.vocab_, getattr(model, "exclude_words", None))
    if hidden.size:  # issue 27: excluded words are not shown
        shown = shown.copy()
        shown[:, hidden] = 0.0
    top_ids = top_word_ids(shown, top_words)
    top = [[model.vocab_[i] for i in ids] for ids in top_ids]
    K = int(model.n_topics)
    side = int(np.clip(16 * K + 180, 460, 700))
    heat = _heatmap_figure(model, side)
    topic_map_fig = _map_figure(model, top, PAGE_WIDTH - side - 90, side)
    over_time = [] if not timeline else [_timeline_figure(model, timeline, PAGE_WIDTH)]
    if timeline_words:
        over_time.append(_words_panel(model, timeline_words, PAGE_WIDTH))
    return column(
        _header_div(model, path),
        row(topic_map_fig, heat),
        _prevalence_figure(model, PAGE_WIDTH),
        *over_time,
        Div(text=_CSS + f"<h2 class='st'>Top {top_words} words of each topic: p(w | z)</h2>",
            width=PAGE_WIDTH),
        _topics_grid(model, top_ids),
        _topics_div(model, top),
        _provenance_div(provenance(model, path, top_words)),
    )


def write_report(model: FittedModel, path: str | os.PathLike[str], *,
                 top_words: int = 10, model_path: str | os.PathLike[str] | None = None,
                 timeline: Sequence[Slice] | None = None,
                 timeline_words: Sequence[SliceWords] | None = None) -> str:
    """Write the HTML report of a model: one self-contained file (Bokeh's resources inlined,
    no network access needed), written aside and renamed into place.

    Parameters
    ----------
    model : FittedModel
        A fitted model.
    path : path
        The HTML file to write (replaced if it is a file).
    top_words : int
        Words shown per topic.
    model_path : path, optional
        Where the model was loaded from.
    timeline : sequence of Slice, optional
        Each topic's prevalence per slice (:func:`streamtopic.timeline.timeline`), drawn
        under the prevalence.
    timeline_words : sequence of SliceWords, optional
        Each topic's top words per slice, shown under it for a topic chosen on the page.

    Returns
    -------
    str
        The file's absolute path.

    Raises
    ------
    IsADirectoryError
        When ``path`` is a directory.
    FileNotFoundError
        When the directory of ``path`` does not exist.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(errno.ENOENT, "No such directory", folder)
    layout = report_layout(model, top_words=top_words, model_path=model_path,
                           timeline=timeline, timeline_words=timeline_words)
    name = os.path.basename(os.path.normpath(os.fspath(model_path))) if model_path else "model"
    text = file_html(layout, resources=INLINE, title=f"streamtopic report: {name}")
    with written_aside(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    return os.path.abspath(path)
