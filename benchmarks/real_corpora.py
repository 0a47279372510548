"""Benchmark: streamtopic against LDA baselines on real corpora (UCI KOS, 20 Newsgroups).

For each corpus, ONE fixed, seeded train/test split of the documents is made and cached in the
work directory; every method learns K topics from the training documents, and every model is
scored in the same way by the project's own scorer, from its saved topic-word matrix
(K × V over the shared vocabulary):

* coherence: :func:`streamtopic.metrics.coherence` of each topic's top 20 words, document
  frequencies counted over the training corpus (mean over topics);
* unique words: :func:`streamtopic.metrics.unique_words` among the top 20 (mean over topics);
* held-out log-likelihood per token (nats) by document completion on the test split:
  :func:`streamtopic.inference.document_completion` (seed 0), with the topics fixed.

Data preparation (once per corpus, cached in ``WORKDIR/data/NAME``):

* KOS: ``docword.kos.txt.gz`` split by :func:`streamtopic.corpus.split` (test fraction 0.1,
  seed 0), both halves rewritten over KOS's own vocabulary (V = 6,906);
* 20 Newsgroups: the whole archive (train and test folders, 18,846 messages), news headers
  stripped (``strip_headers=True``: everything up to the first empty line), scikit-learn's
  English stop words, the same seeded split; the vocabulary is learned on the training
  documents only (gensim ``filter_extremes`` semantics, see ``NEWS_PRUNING``) and both halves
  are rewritten over it; held-out tokens outside it are dropped (counted).

In both, documents with fewer than 2 in-vocabulary tokens are dropped from both halves (the
co-occurrence store skips them, and document completion cannot score them), and counted.
Train and test are HDF5 CSR corpora over the same vocabulary (``train.h5``, ``test.h5``,
``vocab.txt``); the training matrix is also saved as ``train.npz`` (scipy CSR) for the
baselines.

Methods, each trained in a FRESH subprocess whose whole process tree is polled with psutil
(every 50 ms) for the peak of its summed RSS, after waiting for a quiet machine (see
``benchmarks/fit.py``, whose measuring code this script uses):

* streamtopic configurations (``STREAMTOPIC_CONFIGS``, or ``--streamtopic-configs FILE``: a JSON
  list of ``{"name": ..., **AnchorTopicModel keyword parameters}``; ``seed`` defaults to 0).
  Time = ``streamtopic.ingest`` of ``train.h5`` into a fresh store (fixed vocabulary) + ``fit``
  of ``AnchorTopicModel(n_topics=K, **params)``, both under Dask's threaded scheduler; both
  parts are reported.
* gensim: ``LdaMulticore(corpus, id2word, num_topics=K, workers=2, passes=5, random_state=0)``,
  other parameters gensim's defaults; the corpus is ``Sparse2Corpus(H, documents_columns=False)``
  of the training CSR matrix. Loading (``load_npz``, corpus and ``id2word``) is reported
  apart from training. Topics: ``get_topics()``.
* tomotopy (optional): ``LDAModel(k=K, seed=0)`` (collapsed Gibbs sampling; alpha 0.1, eta 0.01,
  its defaults), documents added as token lists (loading), then ``train(step, workers=2)``
  until ``TOMOTOPY_ITERATIONS`` (training). Topics: ``get_topic_word_dist``, mapped back to
  the shared vocabulary by word.

gensim and tomotopy are only needed for the benchmark (``pip install gensim tomotopy``). If
one is missing, its runs are skipped with a note. ``--gensim-python`` / ``--tomotopy-python``
run that baseline's child with another interpreter (e.g. a venv whose gensim needs another
NumPy); such a child needs numpy and scipy only, never streamtopic.

Usage::

    python benchmarks/real_corpora.py [--corpora kos,20ng] [--topics 20,50]
        [--methods streamtopic,streamtopic-rectified,gensim,tomotopy] [--workdir DIR] [--keep]
        [--quick] [--out PATH] [--quiet-wait SECONDS] [--streamtopic-configs FILE]
        [--gensim-python PATH] [--tomotopy-python PATH]

``--quick`` is a smoke run: gensim 1 pass, tomotopy 100 iterations, K = 20 unless --topics,
no waiting for a quiet machine; its figures are not comparable to a full run.

Prints the results as JSON and writes them to ``benchmarks/results/real_corpora.json`` (or
--out), after every method (so a partial run leaves its results). Prepared data is kept in the
work directory (default ``/tmp/streamtopic-real-corpora``) for the next run; stores, models and
topic matrices of this run are removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from types import SimpleNamespace
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import fit as fitbench  # benchmarks/fit.py: child runner, RSS polling, quiet wait

DEFAULT_OUT = os.path.join(HERE, "results", "real_corpora.json")
DEFAULT_WORKDIR = "/tmp/streamtopic-real-corpora"
SHARED = os.path.normpath(os.path.join(REPO, "..", "shared", "data"))

SPLIT = {"test_fraction": 0.1, "seed": 0}
MIN_DOC_TOKENS = 2  # documents with fewer in-vocabulary tokens are dropped from both halves
NEWS_PRUNING = {"min_df": 10, "max_df": 0.5, "keep_n": 10_000}  # on the training documents

CORPORA: dict[str, dict[str, Any]] = {
    "kos": {
        "title": "UCI KOS blog entries",
        "input": os.path.join(SHARED, "uci-kos", "docword.kos.txt.gz"),
        "read": {"format": "uci"},
        "stop_words": None,
        "vocabulary": {"fixed": os.path.join(SHARED, "uci-kos", "vocab.kos.txt")},
    },
    "20ng": {
        "title": "20 Newsgroups (bydate, train + test folders), headers stripped",
        "input": os.path.join(SHARED, "20newsgroups", "20news-bydate.tar.gz"),
        "read": {"format": "files", "strip_headers": True},
        "stop_words": "english",
        "vocabulary": {"learned_on_train": NEWS_PRUNING},
    },
}

STREAMTOPIC_CONFIGS: list[dict[str, Any]] = [
    {"name": "streamtopic"},
    # the RAW pipeline; the memory budget asks for the in-memory paths (V ≤ 10,000 here)
    # (the exact active-set solver: the same least-squares optimum ADMM approaches, 10× faster)
    {"name": "streamtopic-rectified", "rectify": "ap", "rectify_iters": 15,
     "recover": "activeset", "anchor_method": "qr", "topic_topic": "anchor",
     "memory_budget": 6 * 2**30},
    # the same, then EM passes over the training corpus from the rectified topics
    {"name": "streamtopic-rectified-refined", "rectify": "ap", "rectify_iters": 15,
     "recover": "activeset", "anchor_method": "qr", "topic_topic": "anchor",
     "memory_budget": 6 * 2**30, "refine_passes": 20},
]
GENSIM = {"workers": 2, "passes": 5, "random_state": 0}
TOMOTOPY = {"iterations": 1000, "step": 100, "workers": 2, "seed": 0}
QUICK = {"gensim_passes": 1, "tomotopy_iterations": 100, "tomotopy_step": 50}
TOP_N = 20
HELDOUT_SEED = 0

TIMEOUTS = {"ingest": 1800.0, "fit": 3600.0, "load": 1800.0, "train": 3600.0}


def log(msg: str) -> None:
    print(f"[real-corpora {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ============================================================================ data preparation


def _input_id(path: str) -> dict[str, Any]:
    st = os.stat(path)
    return {"path": path, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def prepare(name: str, datadir: str) -> dict[str, Any]:
    """The corpus' split, over one vocabulary, cached in ``datadir``: returns the paths and
    the statistics (recomputed only when the settings or the input changed)."""
    cfg = CORPORA[name]
    settings = {
        "input": _input_id(cfg["input"]), "read": cfg["read"], "stop_words": cfg["stop_words"],
        "vocabulary": cfg["vocabulary"], "split": SPLIT, "min_doc_tokens": MIN_DOC_TOKENS,
        "prep_version": 1,
    }
    os.makedirs(datadir, exist_ok=True)
    meta_path = os.path.join(datadir, "prep.json")
    paths = {k: os.path.join(datadir, f) for k, f in
             (("train", "train.h5"), ("test", "test.h5"), ("vocab", "vocab.txt"),
              ("train_npz", "train.npz"))}
    if os.path.exists(meta_path):
        with open(meta_path) as fh:
            meta = json.load(fh)
        if meta.get("settings") == settings and all(os.path.exists(p) for p in paths.values()):
            log(f"{name}: prepared data cached in {datadir}")
            meta["cached"] = True
            return meta
    log(f"{name}: preparing the split in {datadir}")
    t0 = time.perf_counter()
    # streamtopic's UCI reader toggles warning filters inside threads (warnings.catch_warnings
    # is not thread-safe): restore this process' filters afterwards
    with warnings.catch_warnings():
        stats = _prepare(cfg, datadir, paths)
    meta = {"settings": settings, "paths": paths, "stats": stats,
            "prep_seconds": time.perf_counter() - t0,
            "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(meta_path, "w") as fh:
        json.dump(meta, fh, indent=2)
    meta["cached"] = False
    log(f"{name}: V = {stats['V']:,}; train {stats['train']['n_docs']:,} docs, "
        f"{stats['train']['n_tokens']:,} tokens; test {stats['test']['n_docs']:,} docs, "
        f"{stats['test']['n_tokens']:,} tokens ({meta['prep_seconds']:.0f} s)")
    return meta


def _prepare(cfg: dict[str, Any], datadir: str, paths: dict[str, str]) -> dict[str, Any]:
    import dask
    import numpy as np
    import scipy.sparse as sp

    from streamtopic.corpus import HDF5CorpusWriter, read_corpus, split
    from streamtopic.vocabulary import TermStats, Tokenizer, Vocabulary, read_vocab_file

    raw_train = os.path.join(datadir, "raw.train.h5")
    raw_test = os.path.join(datadir, "raw.test.h5")
    for p in (raw_train, raw_test, *paths.values()):
        if os.path.exists(p):
            os.remove(p)
    corpus = read_corpus(cfg["input"], tokenizer=Tokenizer(stop_words=cfg["stop_words"]),
                         **cfg["read"])
    # tokenising holds the GIL: processes for text, threads for UCI
    scheduler = "threads" if cfg["read"]["format"] == "uci" else "processes"
    with dask.config.set(scheduler=scheduler):
        out = split(corpus, raw_train, raw_test, progress=False, **SPLIT)
    stats: dict[str, Any] = {"split": out}
    voc = cfg["vocabulary"]
    with dask.config.set(scheduler="threads"):
        if "fixed" in voc:
            terms = read_vocab_file(voc["fixed"])
            stats["vocabulary"] = {"fixed": voc["fixed"]}
        else:
            pruning = voc["learned_on_train"]
            ts = TermStats.sum(ch.term_stats() for ch in read_corpus(raw_train).iter_chunks())
            terms = Vocabulary.from_stats(ts, **pruning).terms
            df, _ = ts.totals()
            stats["vocabulary"] = {
                "learned_on": "training documents", **pruning,
                "terms_before_pruning": len(df),
                "terms_with_df_at_least_min_df": sum(1 for d in df.values()
                                                     if d >= pruning["min_df"]),
            }
    stats["V"] = len(terms)
    with open(paths["vocab"], "w", encoding="utf-8") as fh:
        fh.write("\n".join(terms) + "\n")
    index = {t: i for i, t in enumerate(terms)}
    train_words = None
    for half, src in (("train", raw_train), ("test", raw_test)):
        kept_rows, n_in, tok_in, tok_oov, dropped, dropped_tok = [], 0, 0, 0, 0, 0
        with HDF5CorpusWriter(paths[half], vocab=terms) as writer:
            for ch in read_corpus(src).iter_chunks():
                cols = np.array([index.get(t, -1) for t in ch.terms], dtype=np.int64)
                inv = np.flatnonzero(cols >= 0)
                c = sp.csr_matrix(ch.counts)
                n_in += c.shape[0]
                tok_in += int(c.sum())
                c_in = c[:, inv]
                tok_oov += int(c.sum()) - int(c_in.sum())
                length = np.asarray(c_in.sum(axis=1)).ravel()
                keep = length >= MIN_DOC_TOKENS
                dropped += int((~keep).sum())
                dropped_tok += int(length[~keep].sum())
                rows = c_in[np.flatnonzero(keep)]
                writer.append(rows, [ch.terms[i] for i in inv.tolist()])
                # the same rows over the global vocabulary, for the npz and the statistics
                g = sp.csr_matrix((rows.data, cols[inv][rows.indices], rows.indptr),
                                  shape=(rows.shape[0], len(terms)), dtype=np.int32)
                g.sum_duplicates()
                kept_rows.append(g)
        H = sp.vstack(kept_rows, format="csr") if kept_rows else sp.csr_matrix((0, len(terms)))
        words_used = np.asarray((H > 0).sum(axis=0)).ravel()
        s = {"n_docs": int(H.shape[0]), "n_tokens": int(H.sum()), "nnz": int(H.nnz),
             "docs_before_vocabulary": n_in, "tokens_before_vocabulary": tok_in,
             "tokens_outside_vocabulary_dropped": tok_oov,
             f"docs_dropped_under_{MIN_DOC_TOKENS}_tokens": dropped,
             "tokens_in_dropped_docs": dropped_tok,
             "words_occurring": int((words_used > 0).sum()),
             "mean_doc_length": float(H.sum() / max(H.shape[0], 1))}
        if half == "train":
            sp.save_npz(paths["train_npz"], H, compressed=False)
            train_words = words_used > 0
        else:
            unseen = ~train_words
            s["tokens_of_words_absent_from_train"] = int(H[:, np.flatnonzero(unseen)].sum())
        stats[half] = s
    for p in (raw_train, raw_test):
        os.remove(p)
    return stats


# ============================================================================ children


def child_main(spec_path: str) -> None:
    """Subprocess entry: one method trained on one corpus, its topic-word matrix saved."""
    with open(spec_path) as fh:
        spec = json.load(fh)
    {"streamtopic": _child_streamtopic, "gensim": _child_gensim,
     "tomotopy": _child_tomotopy}[spec["kind"]](spec)
    fitbench._emit(event="begin", stage="done")


def _child_streamtopic(spec: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    import dask
    import numpy as np

    import streamtopic
    from streamtopic.model import AnchorTopicModel

    fitbench._emit(event="result", name="imports", seconds=time.perf_counter() - t0,
                   versions={"streamtopic": streamtopic.__version__})
    params = {"seed": 0, **spec["params"]}
    model = AnchorTopicModel(n_topics=spec["K"], **params)  # unknown parameters fail here
    with dask.config.set(scheduler="threads"):
        fitbench._emit(event="begin", stage="ingest")
        t0 = time.perf_counter()
        rep = streamtopic.ingest(spec["train"], spec["store"], vocab=spec["vocab"],
                                 progress=False)
        seconds = time.perf_counter() - t0
        fitbench._emit(event="result", name="ingest", seconds=seconds, n_docs=rep.n_docs,
                       n_tokens=rep.n_tokens, vocab_size=rep.vocab_size,
                       n_skipped_docs=rep.n_skipped_docs, n_oov_tokens=rep.n_oov_tokens)
        fitbench._emit(event="begin", stage="fit")
        t0 = time.perf_counter()
        model.fit(spec["store"])
        seconds = time.perf_counter() - t0
    fitbench._emit(event="begin", stage="save")
    np.save(spec["components_out"], np.asarray(model.components_, dtype=np.float64))
    with open(spec["vocab_out"], "w", encoding="utf-8") as fh:
        fh.write("\n".join(model.vocab_) + "\n")
    d = model.diagnostics_
    fitbench._emit(event="result", name="fit", seconds=seconds, stage_seconds=d.get("seconds"),
                   anchor_words=list(model.anchor_words_),
                   converged_rows=f"{model.n_converged_}/{model.n_fitted_}",
                   params=params)


def _load_train(path: str) -> Any:
    import scipy.sparse as sp

    return sp.load_npz(path).tocsr()


def _read_vocab(path: str) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return fh.read().split("\n")[:-1]


def _child_gensim(spec: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    import gensim
    import numpy as np
    from gensim.matutils import Sparse2Corpus
    from gensim.models import LdaMulticore

    fitbench._emit(event="result", name="imports", seconds=time.perf_counter() - t0,
                   versions={"gensim": gensim.__version__, "numpy": np.__version__})
    fitbench._emit(event="begin", stage="load")
    t0 = time.perf_counter()
    H = _load_train(spec["train_npz"])
    vocab = _read_vocab(spec["vocab"])
    id2word = dict(enumerate(vocab))
    corpus = Sparse2Corpus(H, documents_columns=False)
    fitbench._emit(event="result", name="load", seconds=time.perf_counter() - t0,
                   n_docs=len(corpus), V=len(vocab))
    p = spec["params"]
    fitbench._emit(event="begin", stage="train")
    t0 = time.perf_counter()
    lda = LdaMulticore(corpus=corpus, id2word=id2word, num_topics=spec["K"],
                       workers=p["workers"], passes=p["passes"], random_state=p["random_state"])
    seconds = time.perf_counter() - t0
    fitbench._emit(event="begin", stage="save")
    topics = np.asarray(lda.get_topics(), dtype=np.float64)  # K × V, rows sum to 1
    np.save(spec["components_out"], topics)
    fitbench._emit(event="result", name="train", seconds=seconds, params=p,
                   defaults={"chunksize": lda.chunksize, "iterations": lda.iterations,
                             "eval_every": lda.eval_every, "alpha": "symmetric (1/K)",
                             "eta": "symmetric (1/K)"})


def _child_tomotopy(spec: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    import numpy as np
    import tomotopy as tp

    fitbench._emit(event="result", name="imports", seconds=time.perf_counter() - t0,
                   versions={"tomotopy": tp.__version__, "isa": tp.isa})
    p = spec["params"]
    fitbench._emit(event="begin", stage="load")
    t0 = time.perf_counter()
    H = _load_train(spec["train_npz"])
    vocab = _read_vocab(spec["vocab"])
    words = np.array(vocab, dtype=object)
    model = tp.LDAModel(k=spec["K"], seed=p["seed"])
    n_added = 0
    for d in range(H.shape[0]):
        a, b = H.indptr[d], H.indptr[d + 1]
        if b > a:
            model.add_doc(np.repeat(words[H.indices[a:b]], H.data[a:b]).tolist())
            n_added += 1
    fitbench._emit(event="result", name="load", seconds=time.perf_counter() - t0,
                   n_docs=n_added, V=len(vocab))
    fitbench._emit(event="begin", stage="train")
    t0 = time.perf_counter()
    trace = []
    done = 0
    while done < p["iterations"]:
        step = min(p["step"], p["iterations"] - done)
        model.train(step, workers=p["workers"])
        done += step
        trace.append({"iterations": done, "seconds": time.perf_counter() - t0,
                      "ll_per_word": float(model.ll_per_word)})
    seconds = time.perf_counter() - t0
    fitbench._emit(event="begin", stage="save")
    index = {w: i for i, w in enumerate(vocab)}
    cols = np.array([index[w] for w in model.used_vocabs], dtype=np.int64)
    topics = np.zeros((spec["K"], len(vocab)))
    for k in range(spec["K"]):
        topics[k, cols] = model.get_topic_word_dist(k)
    np.save(spec["components_out"], topics)
    fitbench._emit(event="result", name="train", seconds=seconds, params=p, trace=trace,
                   defaults={"alpha": float(np.mean(model.alpha)), "eta": float(model.eta)})


# ============================================================================ running a method


def _probe(python: str, module: str) -> tuple[str | None, str | None]:
    """(version, None) if ``python`` can import ``module`` (and scipy), else (None, why)."""
    code = f"import scipy, {module}; print({module}.__version__)"
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300,
                           check=False)
    except OSError as exc:
        return None, str(exc)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["import failed"])[-1]
    return r.stdout.strip(), None


def run_method(
    method: dict[str, Any], corpus: str, K: int, prep: dict[str, Any], work: str,
    python: str,
) -> dict[str, Any]:
    """Train one method on one corpus in a fresh child, then score its topics."""
    name, kind = method["name"], method["kind"]
    tag = f"{corpus}-K{K}-{name}"
    paths = prep["paths"]
    spec = {"kind": kind, "K": K, "train": paths["train"], "train_npz": paths["train_npz"],
            "vocab": paths["vocab"], "params": method["params"],
            "components_out": os.path.join(work, f"{tag}.components.npy"),
            "vocab_out": os.path.join(work, f"{tag}.vocab.txt"),
            "store": os.path.join(work, f"{tag}.store")}
    spec_path = os.path.join(work, f"{tag}.spec.json")
    with open(spec_path, "w") as fh:
        json.dump(spec, fh)
    cmd = [python, os.path.abspath(__file__), "--child", spec_path]
    log(f"{tag}: training ({' '.join(os.path.basename(c) for c in cmd[:2])})")
    quiet = fitbench.wait_for_quiet()
    run = fitbench.run_child(cmd, stage_timeouts=TIMEOUTS, default_timeout=3600.0, cwd=work)
    run["contention"].update(quiet)
    res = fitbench.child_results(run)
    out: dict[str, Any] = {"kind": kind, "params": method["params"]}
    if "imports" in res:
        out["versions"] = res["imports"].get("versions")
        out["imports_seconds"] = res["imports"]["seconds"]
    sec: dict[str, Any] = {}
    if kind == "streamtopic":
        if "ingest" in res:
            sec["ingest"] = res["ingest"]["seconds"]
            out["store"] = {k: res["ingest"][k] for k in ("n_docs", "n_tokens", "vocab_size",
                                                          "n_skipped_docs", "n_oov_tokens")}
        if "fit" in res:
            f = res["fit"]
            sec["fit"] = f["seconds"]
            sec["fit_stages"] = f.get("stage_seconds")
            out["anchor_words"] = f.get("anchor_words")
            out["converged_rows"] = f.get("converged_rows")
            out["params"] = f.get("params", out["params"])
        if "ingest" in sec and "fit" in sec:
            sec["train"] = sec["ingest"] + sec["fit"]
    else:
        if "load" in res:
            sec["load"] = res["load"]["seconds"]
        if "train" in res:
            sec["train"] = res["train"]["seconds"]
            out["defaults"] = res["train"].get("defaults")
            if "trace" in res["train"]:
                out["trace"] = res["train"]["trace"]
    out["seconds"] = sec
    out["process_wall_seconds"] = run["wall_seconds"]
    out["peak_rss_bytes"] = run["peak_rss_bytes"]
    out["peak_rss_bytes_by_stage"] = run["peak_rss_bytes_by_stage"]
    out["peak_processes"] = run["peak_processes"]
    out["contention"] = run["contention"]
    err = fitbench.failure(run)
    if err or not os.path.exists(spec["components_out"]):
        out["error"] = err or {"reason": "no topics saved", "stderr_tail": run["stderr"][-3000:]}
        log(f"{tag}: FAILED: {json.dumps(out['error'])[:600]}")
        return out
    t0 = time.perf_counter()
    own_vocab = spec["vocab_out"] if kind == "streamtopic" else None
    out["scores"] = score(spec["components_out"], prep, own_vocab)
    out["scoring_seconds"] = time.perf_counter() - t0
    s = out["scores"]
    out["top_words"] = s.pop("top_words")
    log(f"{tag}: train {sec.get('train', float('nan')):.1f} s, peak RSS "
        f"{fitbench.mib(run['peak_rss_bytes'])}, coherence {s['coherence_mean']:.1f}, unique "
        f"{s['unique_words_mean']:.2f}, held-out {s['heldout_per_token']:.4f} nats/token")
    return out


def score(components_path: str, prep: dict[str, Any], vocab_path: str | None) -> dict[str, Any]:
    """The project's scorer, identical for every method: from the K × V topic-word matrix
    over the shared vocabulary."""
    import dask
    import numpy as np

    from streamtopic import metrics
    from streamtopic.inference import document_completion

    vocab = _read_vocab(prep["paths"]["vocab"])
    comp = np.load(components_path).astype(np.float64)
    if vocab_path is not None:  # a model's own vocabulary order: map onto the shared one
        own = _read_vocab(vocab_path)
        if own != vocab:
            pos = {w: i for i, w in enumerate(vocab)}
            full = np.zeros((comp.shape[0], len(vocab)))
            full[:, [pos[w] for w in own]] = comp
            comp = full
    if comp.shape[1] != len(vocab):
        raise ValueError(f"{components_path}: {comp.shape[1]} columns, V = {len(vocab)}")
    sums = comp.sum(axis=1, keepdims=True)
    comp = comp / np.where(sums > 0, sums, 1.0)
    obj = SimpleNamespace(components_=comp, vocab_=vocab)
    top = metrics.top_word_ids(comp, TOP_N)
    with dask.config.set(scheduler="threads"):
        coh = metrics.coherence(top, prep["paths"]["train"], vocab=vocab)
        dc = document_completion(obj, prep["paths"]["test"], seed=HELDOUT_SEED)
    uniq = metrics.unique_words(comp, top_n=TOP_N)
    return {
        "coherence_mean": float(np.mean(coh)),
        "coherence_per_topic": coh.tolist(),
        "unique_words_mean": float(np.mean(uniq)),
        "unique_words_per_topic": uniq.tolist(),
        "heldout_per_token": dc.per_token,
        "heldout_docs": dc.n_docs,
        "heldout_tokens_scored": dc.n_tokens,
        "heldout_oov_tokens": dc.n_oov_tokens,
        "top_words": [" ".join(vocab[i] for i in row[:10]) for row in top.tolist()],
    }


# ============================================================================ main


def _methods(args: argparse.Namespace) -> list[dict[str, Any]]:
    configs = STREAMTOPIC_CONFIGS
    if args.streamtopic_configs:
        with open(args.streamtopic_configs) as fh:
            configs = json.load(fh)
    passes = QUICK["gensim_passes"] if args.quick else GENSIM["passes"]
    iters = QUICK["tomotopy_iterations"] if args.quick else TOMOTOPY["iterations"]
    step = QUICK["tomotopy_step"] if args.quick else TOMOTOPY["step"]
    methods = [{"name": c["name"], "kind": "streamtopic",
                "params": {k: v for k, v in c.items() if k != "name"}} for c in configs]
    methods.append({"name": "gensim", "kind": "gensim", "params": {**GENSIM, "passes": passes}})
    methods.append({"name": "tomotopy", "kind": "tomotopy",
                    "params": {**TOMOTOPY, "iterations": iters, "step": step}})
    return methods


def _table(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for corpus, c in result["corpora"].items():
        for K, by_method in c.get("runs", {}).items():
            for name, r in by_method.items():
                s, sec = r.get("scores", {}), r.get("seconds", {})
                rows.append({
                    "corpus": corpus, "K": int(K), "method": name,
                    "train_seconds": sec.get("train"), "ingest_seconds": sec.get("ingest"),
                    "fit_seconds": sec.get("fit"), "load_seconds": sec.get("load"),
                    "peak_rss_mib": (r["peak_rss_bytes"] / 2**20 if r.get("peak_rss_bytes")
                                     else None),
                    "coherence_mean": s.get("coherence_mean"),
                    "unique_words_mean": s.get("unique_words_mean"),
                    "heldout_nats_per_token": s.get("heldout_per_token"),
                    "note": r.get("skipped") or (r.get("error") or {}).get("reason"),
                })
    return rows


def _write(result: dict[str, Any], path: str) -> str:
    result["table"] = _table(result)
    text = json.dumps(result, indent=2, default=fitbench._jsonable)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".partial"
    with open(tmp, "w") as fh:
        fh.write(text + "\n")
    os.replace(tmp, path)
    return text


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpora", default="kos,20ng", help="Comma-separated: kos, 20ng.")
    parser.add_argument("--topics", default=None, help="Comma-separated K values (default "
                                                       "20,50; --quick: 20).")
    parser.add_argument("--methods", default=None,
                        help="Comma-separated method names (default: every streamtopic "
                             "configuration, gensim, tomotopy).")
    parser.add_argument("--workdir", default=DEFAULT_WORKDIR,
                        help=f"Prepared data (cached), stores and models (default "
                             f"{DEFAULT_WORKDIR}).")
    parser.add_argument("--keep", action="store_true",
                        help="Keep this run's stores, models and topic matrices.")
    parser.add_argument("--quick", action="store_true", help="Smoke run (smaller settings).")
    parser.add_argument("--out", default=DEFAULT_OUT, help="JSON output file.")
    parser.add_argument("--quiet-wait", type=float, default=None, metavar="SECONDS",
                        help="Longest wait for idle CPUs before each training process "
                             "(default 120; --quick: 0).")
    parser.add_argument("--streamtopic-configs", default=None, metavar="FILE",
                        help="JSON list of streamtopic configurations "
                             '[{"name": ..., **AnchorTopicModel parameters}].')
    parser.add_argument("--gensim-python", default=sys.executable, metavar="PATH",
                        help="Interpreter for the gensim child (default: this one).")
    parser.add_argument("--tomotopy-python", default=sys.executable, metavar="PATH",
                        help="Interpreter for the tomotopy child (default: this one).")
    parser.add_argument("--child", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(args.child)
        return {}

    corpora = [c.strip() for c in args.corpora.split(",") if c.strip()]
    for c in corpora:
        if c not in CORPORA:
            parser.error(f"--corpora: unknown corpus {c!r} (known: {', '.join(CORPORA)})")
    topics_arg = args.topics or ("20" if args.quick else "20,50")
    try:
        topics = [int(k) for k in topics_arg.split(",") if k.strip()]
    except ValueError:
        parser.error(f"--topics {topics_arg!r}: expected comma-separated integers")
    all_methods = _methods(args)
    if args.methods:
        wanted = [m.strip() for m in args.methods.split(",") if m.strip()]
        known = {m["name"] for m in all_methods}
        for m in wanted:
            if m not in known:
                parser.error(f"--methods: unknown method {m!r} (known: {', '.join(sorted(known))})")
        methods = [m for m in all_methods if m["name"] in wanted]
    else:
        methods = all_methods
    wait = args.quiet_wait if args.quiet_wait is not None else (0.0 if args.quick else 120.0)
    fitbench.QUIET_WAIT["seconds"] = max(0.0, wait)

    workdir = os.path.abspath(args.workdir)
    if os.path.commonpath([workdir, REPO]) == REPO:
        parser.error(f"--workdir {workdir} is inside the repository; use a directory outside it")
    work = os.path.join(workdir, f"run-{os.getpid()}")
    os.makedirs(work)

    # which baselines can run, and with which interpreter
    interpreters = {"streamtopic": sys.executable, "gensim": args.gensim_python,
                    "tomotopy": args.tomotopy_python}
    available: dict[str, dict[str, Any]] = {}
    for kind in sorted({m["kind"] for m in methods} - {"streamtopic"}):
        version, why = _probe(interpreters[kind], kind)
        available[kind] = {"python": interpreters[kind], "version": version}
        if version is None:
            available[kind]["missing"] = (
                f"{kind} cannot be imported by {interpreters[kind]} ({why}); install it with "
                f"'{interpreters[kind]} -m pip install {kind}', or pass --{kind}-python PATH of "
                "an environment that has it"
            )
            log(f"{kind}: not available; its runs are skipped. To install: pip install {kind}")

    t_start = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "real_corpora",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": fitbench.machine_info(),
        "command": [os.path.basename(sys.executable), *sys.argv],
        "quick": args.quick,
        "settings": {
            "split": SPLIT, "min_doc_tokens": MIN_DOC_TOKENS, "top_n": TOP_N,
            "heldout_seed": HELDOUT_SEED, "topics": topics,
            "methods": methods, "baselines": available,
            "scorer": "streamtopic.metrics.coherence (top 20, training corpus), "
                      "metrics.unique_words (top 20), inference.document_completion "
                      "(test split, seed 0), all from the saved K×V topic-word matrix "
                      "(rows renormalised to sum to 1)",
            "timing": "seconds inside the fresh child process, imports excluded: streamtopic "
                      "train = ingest + fit; gensim/tomotopy train excludes load",
            "quiet_wait_seconds": fitbench.QUIET_WAIT["seconds"],
        },
        "rss_method": f"sum of RSS over the child process and all its descendants, polled "
                      f"every {fitbench.POLL_SECONDS * 1000:.0f} ms with psutil; peak over the "
                      "child's lifetime (load/ingest included)",
        "workdir": workdir,
        "corpora": {},
    }
    try:
        for corpus in corpora:
            cfg = CORPORA[corpus]
            entry: dict[str, Any] = {"title": cfg["title"], "input": cfg["input"]}
            result["corpora"][corpus] = entry
            if not os.path.exists(cfg["input"]):
                entry["skipped"] = "input not found"
                log(f"{corpus}: {cfg['input']} not found; skipped")
                continue
            prep = prepare(corpus, os.path.join(workdir, "data", corpus))
            entry["prep"] = {k: prep[k] for k in ("settings", "stats", "prep_seconds",
                                                  "prepared_at", "cached")}
            entry["runs"] = {}
            for K in topics:
                by_method: dict[str, Any] = {}
                entry["runs"][str(K)] = by_method
                for m in methods:
                    if m["kind"] != "streamtopic" and available[m["kind"]]["version"] is None:
                        by_method[m["name"]] = {"kind": m["kind"],
                                                "skipped": available[m["kind"]]["missing"]}
                        continue
                    by_method[m["name"]] = run_method(m, corpus, K, prep, work,
                                                      interpreters[m["kind"]])
                    _write({**result, "benchmark_seconds": time.perf_counter() - t_start,
                            "complete": False}, args.out)
                    for p in os.listdir(work):  # stores are large; topics are kept on --keep
                        if p.endswith(".store") and not args.keep:
                            shutil.rmtree(os.path.join(work, p), ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result["benchmark_seconds"] = time.perf_counter() - t_start
    result["complete"] = True
    text = _write(result, args.out)
    print(text)
    _print_table(result["table"])
    return result


def _print_table(rows: list[dict[str, Any]]) -> None:
    def f(x: Any, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    head = (f"{'corpus':6} {'K':>3} {'method':24} {'train s':>8} {'ingest':>7} {'fit':>7} "
            f"{'load':>6} {'RSS MiB':>8} {'coher.':>8} {'unique':>6} {'heldout':>8}")
    print(head, file=sys.stderr)
    for r in rows:
        print(f"{r['corpus']:6} {r['K']:>3} {r['method']:24} {f(r['train_seconds'], '8.1f')} "
              f"{f(r['ingest_seconds'], '7.1f')} {f(r['fit_seconds'], '7.1f')} "
              f"{f(r['load_seconds'], '6.1f')} {f(r['peak_rss_mib'], '8.0f')} "
              f"{f(r['coherence_mean'], '8.1f')} {f(r['unique_words_mean'], '6.2f')} "
              f"{f(r['heldout_nats_per_token'], '8.4f')}"
              + (f"  [{r['note']}]" if r["note"] else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
