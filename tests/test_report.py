"""The HTML report (``streamtopic report``, :mod:`streamtopic.report`): its numbers against
exact answers, its contents, and the file rendered in headless Chromium (Debian's
``/usr/bin/chromium`` driven by Playwright; CI installs both) with no network access."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
from bokeh.models import ColumnDataSource
from click.testing import CliRunner
from scipy.spatial.distance import pdist, squareform

import streamtopic as st
from streamtopic import report
from streamtopic.cli import main

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "benchmarks" / "results" / "report.png"
TIMELINE_SCREENSHOT = ROOT / "benchmarks" / "results" / "timeline.png"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
K = 10


@pytest.fixture(scope="module")
def kos_model(tmp_path_factory, kos_docword) -> Path:
    """A K = 10 model of UCI KOS ('plain': a second), saved; its store beside it."""
    d = tmp_path_factory.mktemp("report")
    with dask.config.set(scheduler="threads"):
        st.ingest(kos_docword, d / "kos.zarr", progress=False)
        model = st.AnchorTopicModel(n_topics=K, method="plain", progress=False, seed=0)
        model.fit(d / "kos.zarr")
    model.save(d / "model.zarr")
    return d / "model.zarr"


# ----------------------------------------------------------------------------- the numbers


def _correlated_theta(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """θ (n×6) from a logistic normal whose topics form two groups, {0, 2, 4} and
    {1, 3, 5}, positively correlated within a group; and the group of each topic."""
    rng = np.random.default_rng(seed)
    group = np.array([0, 1, 0, 1, 0, 1])
    cov = np.where(group[:, None] == group[None, :], 0.8, 0.0) + 0.2 * np.eye(6)
    eta = rng.multivariate_normal(np.zeros(6), cov, size=n)
    theta = np.exp(eta)
    return theta / theta.sum(axis=1, keepdims=True), group


def test_correlation_is_the_pearson_correlation_of_theta():
    theta, _ = _correlated_theta(20000, 0)
    R = theta.T @ theta / len(theta)  # E[θ θᵀ], whose row sums are E[θ]
    corr = report.topic_correlation(R * 3.7)  # any scale
    np.testing.assert_allclose(corr, np.corrcoef(theta.T), atol=1e-10)


def test_similarity_order_puts_correlated_topics_together():
    theta, group = _correlated_theta(20000, 1)
    order = report.similarity_order(report.topic_correlation(theta.T @ theta))
    assert sorted(order) == list(range(6))
    # each group is one contiguous run of the order
    assert np.count_nonzero(np.diff(group[order])) == 1


def test_topic_distances_and_map():
    W = np.array([[0.5, 0.5, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.2, 0.8]])
    D = report.topic_distances(W * [[1.0], [3.0], [2.0]])  # rows renormalised
    # identical topics: 0; disjoint supports: the largest Jensen–Shannon distance, 1 (base 2)
    np.testing.assert_allclose(D, [[0, 0, 1], [0, 0, 1], [1, 1, 0]], atol=1e-7)
    # classical MDS of points in a plane gives them back up to a rigid motion
    pts = np.random.default_rng(2).normal(size=(12, 2))
    X = report.classical_mds(squareform(pdist(pts)))
    np.testing.assert_allclose(squareform(pdist(X)), squareform(pdist(pts)), atol=1e-9)


def _chosen_boxes(centres, radii, widths, height, frame):
    choice = report.place_labels(centres, radii, widths, height, frame)
    boxes = report.label_boxes(centres, radii, widths, height)
    return choice, boxes[np.flatnonzero(choice >= 0), choice[choice >= 0]]


def test_labels_are_placed_without_overlaps():
    # five points 30 px apart on a line, labels 60 px wide: to the right of each they would
    # overlap their neighbours'
    centres = np.column_stack([100.0 + 30.0 * np.arange(5), np.full(5, 100.0)])
    radii, widths = np.full(5, 6.0), np.full(5, 60.0)
    choice, boxes = _chosen_boxes(centres, radii, widths, 14.0, (400.0, 200.0))
    assert (choice >= 0).all()
    assert np.allclose(report._overlap(boxes, boxes)[~np.eye(5, dtype=bool)], 0.0)
    dots = np.hstack([centres - radii[:, None], centres + radii[:, None]])
    assert np.allclose(report._overlap(boxes, dots), 0.0)
    # twenty points in one place: the labels that fit (the largest points'), none overlapping
    radii = np.linspace(4.0, 10.0, 20)
    choice, boxes = _chosen_boxes(np.full((20, 2), 100.0), radii, np.full(20, 40.0), 14.0,
                                  (400.0, 200.0))
    shown = np.flatnonzero(choice >= 0)
    assert 2 <= len(shown) <= len(report._LABEL_DIRECTIONS) and 19 in shown
    n = len(shown)
    assert np.allclose(report._overlap(boxes, boxes)[~np.eye(n, dtype=bool)], 0.0)


# ----------------------------------------------------------------------------- contents


def _word_sources(layout) -> list[dict]:
    """The data of the topics' bar charts, in topic order."""
    found = [s.data for s in layout.select({"type": ColumnDataSource}) if "word" in s.data]
    return sorted(found, key=lambda data: data["topic"][0])


def test_layout_marks_each_topic_anchor(kos_model):
    model = st.AnchorTopicModel.load(kos_model)
    layout = report.report_layout(model, top_words=7)
    sources = _word_sources(layout)
    assert len(sources) == K
    top = model.top_words(7)
    for k, data in enumerate(sources):
        assert set(data["topic"]) == {k}
        anchor = model.anchor_words_[k]
        assert data["word"][:7] == top[k]  # the top words, most probable first
        assert len(data["word"]) == 7 + (anchor not in top[k])
        colours = dict(zip(data["word"], data["colour"], strict=True))
        assert colours.pop(anchor) == report.ANCHOR_COLOUR
        assert set(colours.values()) <= {report.WORD_COLOUR}
        np.testing.assert_allclose(
            data["p"], model.components_[k, [model.vocab_.index(w) for w in data["word"]]])


def test_provenance_without_the_store_and_with_alpha(kos_model):
    model = st.AnchorTopicModel.load(kos_model)
    store = model.diagnostics_["store"]
    found = dict((t, rows) for t, _, rows in report.provenance(model, kos_model))
    assert os.path.basename(st.corpus.bundled_corpus()) in found["Corpus inputs"][0][0]
    assert ["documents", f"{store['n_docs']:,}"] in found["Corpus (store)"]
    # the store gone: its record in the model is still shown, and the report is written
    model.diagnostics_["store"] = dict(store, path=str(kos_model.parent / "gone.zarr"))
    model.alpha_ = np.linspace(0.05, 0.5, K)  # type: ignore[attr-defined]
    sections = report.provenance(model, kos_model)
    titles = [t for t, _, _ in sections]
    assert "Corpus inputs" not in titles
    rows = dict((r[0], r[1]) for r in sections[titles.index("Corpus (store)")][2])
    assert rows["documents"] == f"{store['n_docs']:,}" and "no such store" in rows["manifest"]
    assert "sum 2.75" in dict((r[0], r[1]) for r in sections[0][2])["Dirichlet α"]
    out = report.write_report(model, kos_model.parent / "no-store.html")
    assert "no such store" in Path(out).read_text()


def test_bad_model_path_is_one_line(tmp_path):
    runner = CliRunner()
    for bad in (tmp_path / "missing.zarr", ROOT / "README.md"):
        res = runner.invoke(main, ["report", str(bad), "-o", str(tmp_path / "r.html")])
        assert res.exit_code == 1
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and str(bad) in lines[0], res.output
        assert "Traceback" not in res.output
    assert not (tmp_path / "r.html").exists()


# ----------------------------------------------------------------------------- the browser


def _chromium():
    """Playwright's Chromium driver on Debian's browser (Playwright's own download does not
    work here); fails, naming what is missing, without them."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium "
                    "(apt-get install -y chromium; .ci/run does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright not installed: pip install -e '.[test]'")
    return sync_playwright


def _local(url: str) -> bool:
    return url.startswith(("file:", "data:", "blob:", "about:"))


@pytest.mark.slow
def test_report_renders_offline_in_chromium(kos_model, tmp_path):
    sync_playwright = _chromium()
    out = tmp_path / "report.html"
    res = CliRunner().invoke(main, ["report", str(kos_model), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"{out}: report of {K} topics"
    text = out.read_text()
    # self-contained: no script or stylesheet fetched from anywhere
    assert not re.search(r"<(script|link)\b[^>]*\b(src|href)\s*=", text)
    model = st.AnchorTopicModel.load(kos_model)
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1320, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(out.as_uri())
            page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0")
            page.locator("canvas").first.wait_for()
            page.wait_for_timeout(500)
            kinds = page.evaluate("""() => { const n = {};
                for (const m of Bokeh.documents[0].all_models) {
                    n[m.type] = (n[m.type] || 0) + 1 }
                return n }""")
            canvases = page.locator("canvas").count()
            tables = page.locator("table.st").all_inner_texts()
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert [u for u in requests if not _local(u)] == []
    # the map, the heatmap, the prevalence and one panel per topic, each drawn on a canvas
    assert kinds["Figure"] == K + 3 and canvases >= K + 3
    topics, provenance = tables[0], "\n".join(tables[1:])
    for k, anchor in enumerate(model.anchor_words_):
        assert re.search(rf"^{k}\t{re.escape(anchor)}\t", topics, re.M)
    assert "docword.kos.txt.gz" in provenance and "3,430" in provenance
    assert f"{len(model.vocab_):,}" in provenance
    assert SCREENSHOT.stat().st_size > 50_000


@pytest.fixture(scope="module")
def sotu_eras(sotu_jsonl, tmp_path_factory):
    """The State of the Union paragraphs ingested a half-century at a time (one store
    version each) and fitted (K = 10): the model's path and the number of versions."""
    import gzip
    import json

    d = tmp_path_factory.mktemp("sotu")
    eras: dict[int, list[str]] = {}
    with gzip.open(sotu_jsonl, "rt", encoding="utf-8") as fh:
        for line in fh:
            eras.setdefault(min(int(json.loads(line)["year"]), 1999) // 50, []).append(line)
    store = d / "s.zarr"
    for era in sorted(eras):
        part = d / f"era{era}.jsonl"
        part.write_text("".join(eras[era]))
        st.ingest(str(part), store, progress=False)
    st.AnchorTopicModel(K, seed=0).fit(store).save(d / "m.zarr")
    return d / "m.zarr", len(eras)


def _bokeh_models(page, kind: str) -> int:
    """How many Bokeh models of a type the page holds."""
    return page.evaluate("""(kind) => Array.from(Bokeh.documents[0].all_models)
        .filter(m => m.type === kind).length""", kind)


def _sources_with(page, column: str) -> list[dict[str, Any]]:
    """The data of the page's ColumnDataSources that have ``column``."""
    return page.evaluate("""(column) => Array.from(Bokeh.documents[0].all_models)
        .filter(m => m.type === "ColumnDataSource")
        .map(m => m.data instanceof Map ? Object.fromEntries(m.data) : m.data)
        .filter(d => column in d)
        .map(d => Object.fromEntries(Object.entries(d).map(([k, v]) => [k, Array.from(v)])))""",
                         column)


def _choose_topic(page, k: int) -> list[str]:
    """Choose topic ``k`` in the page's topic chooser; the words table's cells once it is
    redrawn (slice, prevalence, words of each visible row)."""
    before = page.locator(".slick-cell").all_inner_texts()
    page.locator("select").first.select_option(index=k)
    for _ in range(100):  # the table is redrawn when the page's callback has run
        after = page.locator(".slick-cell").all_inner_texts()
        if after != before:
            break
        page.wait_for_timeout(100)
    return after


def _open_report(p, path: Path, errors: list[str]) -> Any:
    """A Chromium page of the report at ``path``, drawn (page errors go to ``errors``)."""
    browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": 1320, "height": 900})
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0")
    page.locator("canvas").first.wait_for()
    return browser, page


def _titles(page) -> list[str]:
    return page.evaluate("""() => Array.from(Bokeh.documents[0].all_models)
        .filter(m => m.type === "Title").map(m => m.text)""")


def _check_words_table(cells: list[str], words: list[Any], k: int) -> None:
    """The table's visible rows are the slices of ``words`` in order, with topic k's
    prevalence and top words there."""
    rows = [cells[i:i + 3] for i in range(0, len(cells) - 2, 3)]
    assert rows and len(rows) <= len(words)
    for r, w in zip(rows, words, strict=False):
        assert r == [w.label, f"{w.prevalence[k]:.3f}",
                     " ".join(t for t in w.words[k] if t) or "(its anchor is absent)"]


@pytest.mark.slow
def test_a_timeline_of_a_dated_corpus_renders_in_chromium(sotu_eras, tmp_path):
    """``report --timeline`` of the State of the Union by store version: in Chromium, one
    line per topic over the versions, showing the topics moving, and the table of a chosen
    topic's top words per version, which follows the topic chosen in the page (the words
    ``streamtopic timeline --words`` recovers)."""
    from streamtopic.timeline import slice_topics, timeline

    model_path, n_versions = sotu_eras
    model = st.AnchorTopicModel.load(model_path)
    sync_playwright = _chromium()
    out = tmp_path / "timeline.html"
    with dask.config.set(scheduler="threads"):
        res = CliRunner().invoke(main, ["report", str(model_path), "-o", str(out),
                                        "--timeline", "--top-words", "6"])
    assert res.exit_code == 0, res.output
    words = [s.top(model.vocab_, 6) for s in slice_topics(model)]
    errors: list[str] = []
    with sync_playwright() as p:
        browser, page = _open_report(p, out, errors)
        try:
            lines = _bokeh_models(page, "MultiLine")
            xs = [len(d["ys"]) for d in _sources_with(page, "xs")]
            titles = _titles(page)
            first = page.locator(".slick-cell").all_inner_texts()
            chosen = _choose_topic(page, K - 1)
        finally:
            browser.close()
    assert errors == []
    assert lines >= 1 and xs == [K], (lines, xs)
    assert "Topic prevalence per store version" in titles
    assert [w.label for w in words] == [f"version {v}" for v in range(1, n_versions + 1)]
    _check_words_table(first, words, 0)
    _check_words_table(chosen, words, K - 1)
    assert len(chosen) == 3 * n_versions
    P = np.array([s.prevalence for s in timeline(model)])
    assert P.shape == (n_versions, K) and np.ptp(P, axis=0).max() > 0.1  # topics come and go


@pytest.mark.slow
def test_a_timeline_by_year_renders_in_chromium(sotu_eras, tmp_path):
    """``report --timeline --time-field year`` of the State of the Union: in Chromium, one
    line per topic over the years of the addresses on a date axis, and the table of a
    chosen topic's top words per year, which follows the topic chosen in the page."""
    from streamtopic.timeline import slice_topics, timeline

    model_path, _ = sotu_eras
    model = st.AnchorTopicModel.load(model_path)
    years = timeline(model, time_field="year")
    assert [s.label for s in years] == sorted({s.label for s in years})
    assert years[0].label == "1790" and len(years) > 200
    sync_playwright = _chromium()
    out = tmp_path / "by_year.html"
    with dask.config.set(scheduler="threads"):
        res = CliRunner().invoke(main, ["report", str(model_path), "-o", str(out),
                                        "--timeline", "--time-field", "year",
                                        "--top-words", "6"])
    assert res.exit_code == 0, res.output
    words = [s.top(model.vocab_, 6) for s in slice_topics(model, time_field="year",
                                                          slices=years)]
    errors: list[str] = []
    with sync_playwright() as p:
        browser, page = _open_report(p, out, errors)
        try:
            lines = _sources_with(page, "xs")
            titles = _titles(page)
            axes = _bokeh_models(page, "DatetimeAxis")
            tables = _bokeh_models(page, "DataTable")
            chosen = _choose_topic(page, K - 1)
            page.screenshot(path=str(TIMELINE_SCREENSHOT), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert "Topic prevalence over time" in titles and axes == 1 and tables == 1
    assert len(lines) == 1 and len(lines[0]["ys"]) == K
    assert all(len(x) == len(years) for x in lines[0]["xs"])
    assert lines[0]["names"][0] == [s.label for s in years]
    assert [w.label for w in words] == [s.label for s in years]
    _check_words_table(chosen, words, K - 1)
