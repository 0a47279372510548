"""Topics over time (streamtopic.timeline): per-slice prevalence against known trajectories."""

from __future__ import annotations

import os

import numpy as np
import pytest
from click.testing import CliRunner

import streamtopic as st
from streamtopic.cli import main
from streamtopic.drift import match_topics
from streamtopic.timeline import timeline

from ._corpora import TERMS

K, SLICES, DOCS, LENGTH = 5, 10, 800, 100


def _planted() -> np.ndarray:
    return np.random.default_rng(777).dirichlet(np.full(len(TERMS), 0.05), size=K)


def _trajectories() -> np.ndarray:
    """(SLICES, K) true mean topic shares: topic 0 rises, topic 1 falls, the rest hold."""
    t = np.linspace(0.0, 1.0, SLICES)
    base = np.tile([0.1, 0.4, 0.2, 0.15, 0.15], (SLICES, 1))
    base[:, 0] += 0.3 * t
    base[:, 1] -= 0.3 * t
    return base


def _write_slice(path, shares, rng) -> np.ndarray:
    """DOCS documents of LENGTH tokens, θ ~ Dirichlet(2 · shares); returns the realised
    token share of each topic (K,)."""
    topics, terms = _planted(), np.array(TERMS)
    per_topic = np.zeros(K)
    with open(path, "w") as fh:
        for _ in range(DOCS):
            n = rng.multinomial(LENGTH, rng.dirichlet(2 * shares))
            per_topic += n
            counts = sum(rng.multinomial(n[k], topics[k]) for k in range(K))
            fh.write(" ".join(np.repeat(terms, counts)) + "\n")
    return per_topic / per_topic.sum()


@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    """A store of 10 slices (one ingest each) with known prevalence, and its model."""
    d = tmp_path_factory.mktemp("timeline")
    rng = np.random.default_rng(0)
    truth = []
    for s, shares in enumerate(_trajectories()):
        path = d / f"slice{s}.txt"
        truth.append(_write_slice(path, shares, rng))
        first = dict(min_df=1, max_df=1.0) if s == 0 else {}
        st.ingest(str(path), d / "s.zarr", progress=False, **first)
    model = st.AnchorTopicModel(K, seed=0).fit(d / "s.zarr")
    model.save(d / "m.zarr")
    return d, model, np.array(truth)


def test_per_slice_prevalence_follows_the_truth(sliced):
    """Every topic's prevalence in every slice is within 0.02 of its planted share there."""
    _, model, truth = sliced
    slices = timeline(model)
    assert [s.version for s in slices] == list(range(1, SLICES + 1))
    assert all(s.n_docs == DOCS for s in slices)
    planted = _planted()[:, [TERMS.index(w) for w in model.vocab_]]
    order = match_topics(planted / planted.sum(axis=1, keepdims=True), model.components_)
    got = np.array([s.prevalence[order] for s in slices])
    assert np.abs(got - truth).max() < 0.02, np.abs(got - truth).max()
    assert got[-1, 0] - got[0, 0] > 0.2 and got[0, 1] - got[-1, 1] > 0.2  # rising, falling


def test_the_command_line_timeline(sliced, tmp_path):
    d, model, _ = sliced
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr")])
    assert r.exit_code == 0, r.output
    assert len(r.output.strip().splitlines()) == 1 + SLICES
    out = tmp_path / "t.csv"
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = out.read_text().strip().splitlines()
    assert rows[0].startswith("version,n_docs,n_tokens,topic_0") and len(rows) == 1 + SLICES
    shares = np.array([[float(x) for x in row.split(",")[3:]] for row in rows[1:]])
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, atol=1e-5)


# ----------------------------------------------------------------------------- by a time field


def _dated_documents(shares, rng):
    """DOCS documents as :func:`_write_slice` draws them, as (text, token counts per topic)."""
    topics, terms = _planted(), np.array(TERMS)
    for _ in range(DOCS):
        n = rng.multinomial(LENGTH, rng.dirichlet(2 * shares))
        counts = sum(rng.multinomial(n[k], topics[k]) for k in range(K))
        yield " ".join(np.repeat(terms, counts)), n


@pytest.fixture(scope="module")
def dated(tmp_path_factory):
    """One JSON Lines file of 10 years of documents (2000 to 2009, each on a random day of
    its year) in random order, ingested at once, and its model; the true token share of each
    topic per year (10×K)."""
    import json

    d = tmp_path_factory.mktemp("dated")
    rng = np.random.default_rng(1)
    records, per_topic = [], np.zeros((SLICES, K))
    for s, shares in enumerate(_trajectories()):
        for text, n in _dated_documents(shares, rng):
            day = np.datetime64(f"{2000 + s}-01-01") + rng.integers(0, 365)
            records.append(json.dumps({"date": str(day), "text": text}))
            per_topic[s] += n
    path = d / "dated.jsonl"
    path.write_text("\n".join(records[i] for i in rng.permutation(len(records))) + "\n")
    st.ingest(str(path), d / "s.zarr", progress=False, min_df=1, max_df=1.0)
    model = st.AnchorTopicModel(K, seed=0).fit(d / "s.zarr")
    model.save(d / "m.zarr")
    return d, model, per_topic / per_topic.sum(axis=1, keepdims=True)


def _in_planted_order(model):
    planted = _planted()[:, [TERMS.index(w) for w in model.vocab_]]
    return match_topics(planted / planted.sum(axis=1, keepdims=True), model.components_)


def test_prevalence_by_a_time_field_follows_the_truth(dated):
    """Sliced by the documents' ``date`` (years, found by ``by='auto'``), every topic's
    prevalence in every year is within 0.02 of its planted share there, though the file
    holds the years shuffled; ten slices of equal documents are the same years."""
    d, model, truth = dated
    slices = timeline(model, time_field="date")  # the store's recorded input
    assert [s.label for s in slices] == [str(2000 + s) for s in range(SLICES)]
    assert [(s.start, s.end) for s in slices] == [
        (f"{2000 + s}-01-01", f"{2001 + s}-01-01") for s in range(SLICES)]
    assert all(s.n_docs == DOCS and s.version == 0 for s in slices)
    got = np.array([s.prevalence[_in_planted_order(model)] for s in slices])
    assert np.abs(got - truth).max() < 0.02, np.abs(got - truth).max()
    assert got[-1, 0] - got[0, 0] > 0.2 and got[0, 1] - got[-1, 1] > 0.2  # rising, falling
    equal = timeline(model, d / "dated.jsonl", time_field="date", n_slices=SLICES)
    np.testing.assert_allclose([s.prevalence for s in equal], [s.prevalence for s in slices])
    months = timeline(model, time_field="date", by="month")
    assert 100 < len(months) <= 12 * SLICES and sum(s.n_docs for s in months) == SLICES * DOCS
    by_year = np.array([s.prevalence * s.n_tokens for s in slices]).sum(axis=0)
    by_month = np.array([s.prevalence * s.n_tokens for s in months]).sum(axis=0)
    np.testing.assert_allclose(by_month, by_year, rtol=1e-9)


def test_a_time_column_of_hdf5_gives_the_same_timeline(dated, tmp_path):
    """The same documents as HDF5 counts with a ``date`` column (ISO strings) and a ``year``
    column (integers): the same slices, the same prevalence."""
    import json

    import h5py

    from streamtopic.corpus import convert, read_corpus

    d, model, _ = dated
    h5 = tmp_path / "dated.h5"
    convert(read_corpus(str(d / "dated.jsonl")), h5, progress=False)
    with open(d / "dated.jsonl") as fh:
        dates = [json.loads(line)["date"] for line in fh]
    with h5py.File(h5, "a") as f:
        f["date"] = np.array(dates, dtype="S10")
        f["year"] = np.array([int(x[:4]) for x in dates])
    text = timeline(model, d / "dated.jsonl", time_field="date")
    for field in ("date", "year"):
        counts = timeline(model, h5, time_field=field)
        assert [s.label for s in counts] == [s.label for s in text]
        np.testing.assert_allclose([s.prevalence for s in counts],
                                   [s.prevalence for s in text], atol=1e-9)


def test_times_of_one_document_files(tmp_path):
    """One document per file: ``mtime`` is the file's modification time, any other name a
    line of its header block; a file without that header is named in the error."""
    from streamtopic.corpus import CorpusError, read_corpus

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a").write_text("From: x@y\nDate: Tue, 11 Sep 2001 08:46:00 EDT\n\nwaa wab wac\n")
    (docs / "b").write_text("Date: 1993-04-05\nSubject: hello\n\nwad wae waf\n")
    os.utime(docs / "a", (1e9, 1e9))
    os.utime(docs / "b", (2e9, 2e9))
    times = [t for ch in read_corpus(str(docs), time_field="Date").iter_chunks()
             for t in ch.times.tolist()]
    assert times == [int(np.datetime64("2001-09-11T12:46:00", "s").astype(np.int64)),
                     int(np.datetime64("1993-04-05", "s").astype(np.int64))]
    mtimes = [t for ch in read_corpus(str(docs), time_field="mtime").iter_chunks()
              for t in ch.times.tolist()]
    assert mtimes == [1_000_000_000, 2_000_000_000]
    import tarfile

    archive = tmp_path / "docs.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(docs, arcname="docs")
    assert [t for ch in read_corpus(str(archive), time_field="Date").iter_chunks()
            for t in ch.times.tolist()] == times
    with pytest.raises(CorpusError, match=r"member 'docs/a': time field 'mtime'"):
        list(read_corpus(str(archive), time_field="mtime").iter_chunks())
    (docs / "c").write_text("no header here\n")
    with pytest.raises(CorpusError, match=r"docs/c: time field 'Date': no 'Date:' line"):
        list(read_corpus(str(docs), time_field="Date").iter_chunks())


def test_the_command_line_by_time_writes_csv_and_parquet(dated, tmp_path):
    d, _, truth = dated
    out = tmp_path / "t.csv"
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr"), "--time-field", "date",
                                  "--by", "year", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = out.read_text().strip().splitlines()
    assert rows[0].startswith("slice,start,end,n_docs,n_tokens,topic_0") and len(rows) == 11
    assert rows[1].startswith("2000,2000-01-01,2001-01-01,800,")
    pq = pytest.importorskip("pyarrow.parquet")
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr"), str(d / "dated.jsonl"),
                                  "--time-field", "date", "--slices", "5",
                                  "-o", str(tmp_path / "t.parquet")])
    assert r.exit_code == 0, r.output
    table = pq.read_table(tmp_path / "t.parquet").to_pydict()
    assert table["n_docs"] == [2 * DOCS] * 5 and table["start"][1] == "2002-01-01"
    np.testing.assert_allclose(np.sum([table[f"topic_{k}"] for k in range(K)], axis=0), 1.0)
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr"), "--time-field", "date",
                                  "-o", str(tmp_path / "t.json")])
    assert r.exit_code == 1 and "written as .csv or .parquet" in r.output


@pytest.mark.parametrize("record, message", [
    ({"when": "2001-01-01"}, "time field 'date' is missing"),
    ({"date": "soon"}, "time field 'date': 'soon' is not a date"),
    ({"date": None}, "time field 'date': None is not a date"),
])
def test_a_bad_time_field_is_one_line_naming_the_file_and_line(dated, tmp_path, record,
                                                               message):
    import json

    d, _, _ = dated
    path = tmp_path / "bad.jsonl"
    good = {"date": "2003-02-01", "text": "waa wab"}
    path.write_text("\n".join(json.dumps(r) for r in [good, good, {**record, "text": "waa"}])
                    + "\n")
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr"), str(path),
                                  "--time-field", "date"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit)  # no traceback
    assert len(r.output.strip().splitlines()) == 1
    assert r.output.startswith(f"Error: {path}:3: {message}"), r.output
    text = tmp_path / "plain.txt"
    text.write_text("waa wab\n")
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr"), str(text),
                                  "--time-field", "date"])
    assert r.exit_code == 1 and "carries no time field" in r.output
    assert len(r.output.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- words per version

WORDS_K, WORDS_DOCS, WORDS_LENGTH = 4, 3000, 80


def _versioned_topics(version: int) -> np.ndarray:
    """(4, 260) over TERMS: topic k's anchor word TERMS[k] (p = 0.08, no other topic's),
    the rest of its mass on a block of 40 words of its own; in version 2 topic 0 moves to
    another block (its words change, its anchor stays)."""
    rng = np.random.default_rng(5)
    A = np.zeros((WORDS_K, len(TERMS)))
    for k in range(WORDS_K):
        first = WORDS_K + (40 * WORDS_K if k == 0 and version == 2 else 40 * k)
        A[k, first:first + 40] = rng.dirichlet(np.full(40, 0.5)) * 0.92
        A[k, k] = 0.08
    return A


def _write_version(path, version: int, rng) -> np.ndarray:
    """Documents of :func:`_versioned_topics`; topic 3 only in version 2. Returns the true
    token share of each topic (4,)."""
    A, terms = _versioned_topics(version), np.array(TERMS)
    present = np.array([True, True, True, version == 2])
    share = np.zeros(WORDS_K)
    with open(path, "w") as fh:
        for _ in range(WORDS_DOCS):
            theta = np.zeros(WORDS_K)
            theta[present] = rng.dirichlet(np.full(present.sum(), 0.5))
            n = rng.multinomial(WORDS_LENGTH, theta)
            share += n
            counts = sum(rng.multinomial(n[k], A[k]) for k in range(WORDS_K) if n[k])
            fh.write(" ".join(np.repeat(terms, counts)) + "\n")
    return share / share.sum()


@pytest.fixture(scope="module")
def versioned(tmp_path_factory):
    """A store of two versions whose topic 0 changes its words and whose topic 3 (and its
    words) appears in the second only (ingested with ``grow``), fitted with the planted
    anchors named; and a store of the first version alone."""
    d = tmp_path_factory.mktemp("versioned")
    rng = np.random.default_rng(1)
    truth = [_write_version(d / f"v{v}.txt", v, rng) for v in (1, 2)]
    st.ingest(str(d / "v1.txt"), d / "s.zarr", progress=False, min_df=1, max_df=1.0)
    st.ingest(str(d / "v2.txt"), d / "s.zarr", progress=False, grow=True)
    st.ingest(str(d / "v1.txt"), d / "first.zarr", progress=False, min_df=1, max_df=1.0)
    model = st.AnchorTopicModel(WORDS_K, seed=0,
                                anchor_words=[[TERMS[k]] for k in range(WORDS_K)]).fit(
        d / "s.zarr")
    model.save(d / "m.zarr")
    return d, model, truth


def test_words_per_version_follow_the_planted_topics(versioned):
    """Each topic's word distribution within each version, the anchors fixed: close to the
    planted one there (L1 < 0.15, where topic 0's two versions lie 1.8 apart); topic 3
    has no words and prevalence 0 in the version without it; the versions' prevalence from
    Q is within 0.03 of the truth."""
    from streamtopic.timeline import slice_topics

    _, model, truth = versioned
    assert model.anchor_words_ == TERMS[:WORDS_K]
    cols = [TERMS.index(w) for w in model.vocab_]
    got = list(slice_topics(model))
    assert [s.version for s in got] == [1, 2] and all(s.n_docs == WORDS_DOCS for s in got)
    planted = []
    for v in (1, 2):
        A = _versioned_topics(v)[:, cols]
        planted.append(A / A.sum(axis=1, keepdims=True))
    for s, A, share in zip(got, planted, truth, strict=True):
        present = share > 0
        l1 = np.abs(s.components - A).sum(axis=1)
        assert l1[present].max() < 0.15, (s.version, l1)
        assert np.abs(s.prevalence - share).max() < 0.03, (s.prevalence, share)
    assert got[0].prevalence[3] == 0 and not got[0].components[3].any()
    moved = np.abs(planted[0][0] - planted[1][0]).sum()
    assert moved > 1.5 and np.abs(got[1].components[0] - planted[0][0]).sum() > moved - 0.2
    top = got[1].top(model.vocab_, 5)
    assert top.words[0][0] == model.vocab_[int(np.argmax(planted[1][0]))]


def test_a_versions_words_are_the_recovery_on_its_part_of_q(versioned):
    """Exactness: version 1's words equal the recovery on the Q of a store of version 1
    alone, and version 2's the recovery on the difference of the two stores' Q (Q is a
    sum over documents), each solved here on the whole rows."""
    from streamtopic.recovery import solve_active_set
    from streamtopic.store import CooccurrenceStore
    from streamtopic.timeline import slice_topics

    d, model, _ = versioned
    got = list(slice_topics(model))

    def dense(path):
        with CooccurrenceStore.open(path) as s:
            Q, vocab = s.read_dense(normalised=False), s.vocab
        out = np.zeros((len(model.vocab_),) * 2)
        ids = [vocab.index(w) if w in vocab else -1 for w in model.vocab_]
        have = np.array([i >= 0 for i in ids])
        take = np.array([i for i in ids if i >= 0])
        out[np.ix_(have, have)] = Q[np.ix_(take, take)]
        return out

    first, whole = dense(d / "first.zarr"), dense(d / "s.zarr")
    S = np.asarray(model.anchors_)
    for s, Q in zip(got, (first, whole - first), strict=True):
        p = Q.sum(axis=1)
        rows, present = p > 0, p[S] > 0
        Qbar = Q[rows] / p[rows, None]
        QS = Q[S[present]] / p[S[present], None]
        C = np.zeros((Q.shape[0], S.size))
        C[np.ix_(rows, present)] = solve_active_set(
            QS @ QS.T, Qbar @ QS.T, np.einsum("ij,ij->i", Qbar, Qbar)).C
        joint = C * p[:, None]
        mass = joint.sum(axis=0)
        expected = np.divide(joint.T, mass[:, None], out=np.zeros_like(joint.T),
                             where=mass[:, None] > 0)
        np.testing.assert_allclose(s.components, expected, atol=1e-6)
        np.testing.assert_allclose(s.prevalence, mass / mass.sum(), atol=1e-9)


def test_the_command_line_words(versioned, tmp_path):
    d, model, _ = versioned
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr"), "--words", "3",
                                  "--top-words", "4"])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert lines[0] == f"topic 3 (anchor {TERMS[3]})" and len(lines) == 3
    assert "prevalence 0.000  (its anchor word is absent)" in lines[1]
    assert len(lines[2].split("  ")[-1].split()) == 4
    out = tmp_path / "w.csv"
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr"), "--all-topics", "-o",
                                  str(out)])
    assert r.exit_code == 0, r.output
    rows = out.read_text().strip().splitlines()
    assert rows[0] == "version,topic,prevalence,rank,word,p"
    assert len(rows) == 1 + 10 * (WORDS_K + WORDS_K - 1)  # topic 3 has no words in version 1
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr"), "--words", "9"])
    assert r.exit_code == 2 and "topics 0 to 3" in r.output


def test_words_per_span_of_time_are_those_of_the_same_documents_per_version(versioned,
                                                                           tmp_path):
    """The two versions' documents in one JSON Lines file, shuffled, dated 2001 and 2002:
    the words per year are the words per version (the same documents, so the same parts
    of Q), and the command line prints them by year."""
    import json

    from streamtopic.timeline import slice_topics

    d, model, _ = versioned
    rng = np.random.default_rng(3)
    records = [json.dumps({"date": f"{2000 + v}-06-{1 + i % 28:02d}", "text": line.strip()})
               for v in (1, 2) for i, line in enumerate(open(d / f"v{v}.txt"))]
    path = tmp_path / "both.jsonl"
    path.write_text("\n".join(records[i] for i in rng.permutation(len(records))) + "\n")
    by_version = list(slice_topics(model))
    by_year = list(slice_topics(model, time_field="date", inputs=path, by="year"))
    assert [s.label for s in by_year] == ["2001", "2002"] and all(s.version == 0
                                                                  for s in by_year)
    for t, v in zip(by_year, by_version, strict=True):
        assert t.n_docs == v.n_docs
        np.testing.assert_allclose(t.components, v.components, atol=1e-9)
        np.testing.assert_allclose(t.prevalence, v.prevalence, atol=1e-12)
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr"), str(path), "--time-field",
                                  "date", "--by", "year", "--words", "0",
                                  "--top-words", "3"])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert [x.split()[0] for x in lines[1:]] == ["2001", "2002"]
    assert lines[2].split()[-3:] == by_year[1].top(model.vocab_, 3).words[0]
    out = tmp_path / "w.csv"
    r = CliRunner().invoke(main, ["timeline", str(d / "m.zarr"), str(path), "--time-field",
                                  "date", "--by", "year", "--all-topics", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = out.read_text().strip().splitlines()
    assert rows[0] == "slice,topic,prevalence,rank,word,p" and rows[1].startswith("2001,0,")
