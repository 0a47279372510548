"""Benchmark: streamtopic against LDA baselines on real corpora (20 Newsgroups, UCI KOS, SOTU).

Every system is run as its users would run it, each training in a FRESH subprocess whose whole
process tree is polled with psutil (every 50 ms, ``benchmarks/fit.py``) for the peak of its
summed RSS; before each one the script waits (up to ``--quiet-wait`` s) for idle CPUs.

* **streamtopic**, from raw input, with its default flags: one command per run,
  ``streamtopic fit RAW_INPUT -k K --seed S -o MODEL --store STORE`` with a fresh store, timed
  from process start to exit (ingest, fit and saving included). ``STREAMTOPIC_METHODS`` (the
  table below) lists the configurations as (name, extra CLI arguments); the default is
  ``streamtopic`` with none; ``--add-streamtopic 'NAME=ARGS'`` adds one for an experiment.
* **gensim** ``LdaMulticore(corpus, id2word, num_topics=K, workers=CORES, passes=P,
  chunksize=2000, eval_every=None, random_state=S)``, P = 5 and P = 1 (two methods), every
  other parameter gensim's default. ``eval_every=None`` is what gensim's LDA tutorial sets:
  its default (10) spends time estimating perplexity during training. The corpus is a Python
  list of documents, each a list of (word id, count) tuples, which is what gensim's tutorials
  build (``[dictionary.doc2bow(doc) for doc in docs]``
  in "Corpora and Vector Spaces" and in the LDA tutorial, which also sets ``chunksize = 2000``,
  gensim's default: "Increasing chunksize will speed up training, at least as long as the
  chunk of documents easily fit into memory"). It is built in the child before the timer
  starts, so only training is timed. (An earlier version fed ``Sparse2Corpus``, whose
  per-document conversion doubled gensim's time.) gensim's docstring advises
  ``workers`` = physical cores − 1; this benchmark uses ``os.cpu_count()`` (``--gensim-workers``).
* **tomotopy** ``LDAModel(k=K, seed=S)`` (collapsed Gibbs sampling, its default priors),
  documents added as token lists before the timer, then ``train(1000, workers=CORES)``
  (tomotopy's README trains with ``workers`` = cores and its default parallel scheme; 1,000
  iterations is the issue's reference). ``pip install "streamtopic[bench]"`` installs
  gensim and tomotopy.

**Same tokens for everyone.** After streamtopic's first run on a corpus, its store is read:
the vocabulary, the recorded inputs and the tokenizer settings in its manifest. The training
documents are re-read with :func:`streamtopic.corpus.recorded_corpus` (the store's own reader
and tokenizer) and mapped to the store's word ids (``streamtopic.termmap.to_global``),
tokens outside the vocabulary dropped and documents with fewer than 2 tokens left out, as the
store does; the token count is checked against the store's. That bag of words (scipy CSR,
``train.npz``) is what the baselines train on. The test documents are read the same way (the
training source's manifest entry with the test path), over the same vocabulary.

**One scorer** for every model, from its K × V topic-word matrix over that vocabulary (rows
normalised): held-out log-likelihood per token by document completion on the test documents
(:func:`streamtopic.inference.document_completion`, seed 0), unique words among each topic's
top 20 (:func:`streamtopic.metrics.unique_words`), NPMI: the mean normalised PMI of the pairs
of each topic's top 10 words from document co-occurrence in the shared training documents
(:func:`streamtopic.metrics.npmi`, one pass over the words counted, no V×V matrix), and junk
topics: topics of whose top 10 words
at least 6 contain a digit or a non-letter, or are news header fields or markup (``JUNK_WORDS``).

**Corpora.** 20 Newsgroups (bydate): the training folder packed as an uncompressed tar of one
message per file (``20news-bydate-train/<group>/<id>``, made from the archive with tarfile),
streamtopic's raw input; the test folder, likewise, for scoring. UCI KOS: ``streamtopic split``
(test fraction 0.1, seed 0) of ``docword.kos.txt.gz``; the train file is streamtopic's raw
input. SOTU paragraphs (``sotu/sotu.jsonl.gz``): a seeded split (numpy ``default_rng(0)``,
each paragraph to the test set with probability 0.1) written as ``train.jsonl.gz`` and
``test.jsonl.gz`` (``id``, ``text``); the train file is streamtopic's raw input. K = 20 and 50.

**Verdicts** per corpus and K, for each streamtopic method: mean unique words ≥ 10, no junk
topic, held-out ≥ gensim (5 passes), time ≤ gensim's (5 passes) training time; and issue 28's:
held-out ≥ tomotopy's − 0.01 nats/token, NPMI ≥ tomotopy's − 0.01, time ≤ 0.5 × gensim's
(5 passes). Beside them, two numbers: the time's ratio to gensim's, and the share of gensim's
time that the machine's fixed start-up takes (``startup``, measured once per run: ``streamtopic
--version``, and a bare interpreter importing only the libraries ``fit`` needs, medians after
a quiet wait): part of streamtopic's time on every corpus, of no baseline's.

**min-df check** (``--mode min-df`` or ``both``): ``streamtopic -v fit`` on 20 Newsgroups with
``--min-df 2`` (the largest vocabulary) and with ``--keep-n 10000``: V, ingest and fit seconds
(the model's own stage timings, ``diagnostics_["seconds"]``, saved in the model), peak RSS of
the process tree and the memory budget the model reports; targets: fit(min-df 2) ≤ 2 × fit(V =
10,000), peak RSS ≤ the budget.

Usage::

    python benchmarks/real_corpora.py [--corpora 20ng,kos,sotu] [--topics 20,50] [--repeats N]
        [--methods NAME,...] [--mode compare|min-df|both] [--quick] [--seed S]
        [--add-streamtopic 'NAME=ARGS'] [--workdir DIR] [--keep] [--out PATH]
        [--quiet-wait SECONDS] [--gensim-workers N] [--baselines-from JSON]

``--baselines-from JSON`` reuses the baselines' runs (topics' scores, times, RSS) of an earlier
results file, in turn, for each corpus and K whose shared tokens are the same (V, training
documents and tokens), instead of running them again; each reused run records where it came
from (``reused_from``). Only streamtopic then runs: its verdicts are judged against those runs.

``--repeats N`` runs every method N times, in turns (one run of each method, then the next
round); times are medians. ``--quick``: the first corpus only, K = 20, 1 repeat, no waiting.
Results go to stdout (JSON) and to ``benchmarks/results/real_corpora.json`` (``--mode min-df``:
``real_corpora_min_df.json``), rewritten after every run; a table goes to stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import fit as fitbench  # benchmarks/fit.py: child runner, RSS polling, quiet wait
from _common import machine_info, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# (name, extra arguments of `streamtopic fit`): the first is the reference whose tokens the
# baselines train on. Add e.g. ("streamtopic-plain", ["--method", "plain"]) for the paper's
# algorithm.
STREAMTOPIC_METHODS: list[tuple[str, list[str]]] = [
    ("streamtopic", []),
]
BASELINES: dict[str, dict[str, Any]] = {
    "gensim-5pass": {"kind": "gensim", "passes": 5},
    "gensim-1pass": {"kind": "gensim", "passes": 1},
    "tomotopy": {"kind": "tomotopy", "iterations": 1000},
}
REFERENCE_BASELINE = "gensim-5pass"
CORES = os.cpu_count() or 1
GENSIM_CHUNKSIZE = 2000  # gensim's default, and its LDA tutorial's choice

SHARED = os.environ.get("STREAMTOPIC_SHARED_DATA",
                        os.path.normpath(os.path.join(REPO, "..", "shared", "data")))
NEWS_ARCHIVE = os.path.join(SHARED, "20newsgroups", "20news-bydate.tar.gz")
KOS_DOCWORD = os.path.join(SHARED, "uci-kos", "docword.kos.txt.gz")
SOTU_JSONL = os.path.join(SHARED, "sotu", "sotu.jsonl.gz")
SOTU_TEST_FRACTION, SOTU_SEED = 0.1, 0
CORPORA = {"20ng": "20 Newsgroups (bydate): train folder -> model, test folder -> scoring",
           "kos": "UCI KOS blog entries: streamtopic split (test fraction 0.1, seed 0)",
           "sotu": "State of the Union paragraphs 1790-2020: seeded split (test fraction 0.1, "
                   "numpy default_rng(0))",
           "longdocs": "20 Newsgroups training messages joined by newsgroup and thread into "
                       "documents of 2,000-50,000 words, repeated in shuffled order to "
                       f"{60_000_000:,} words (benchmarks/rawtext_corpora.py longdocs); the "
                       "test messages joined the same way -> scoring"}
LONGDOCS_WORDS = 60_000_000
KOS_SPLIT = ["--test-fraction", "0.1", "--seed", "0"]

TOP_N = 20
NPMI_TOP = 10  # NPMI over each topic's top 10 words (Lau et al. 2014)
TOMOTOPY_LL_MARGIN = NPMI_MARGIN = 0.01  # issue 28: within 0.01 of tomotopy's
TIME_FRACTION_OF_GENSIM = 0.5  # issue 28: whole run <= 0.5 x gensim's 5-pass training
TOMOTOPY = "tomotopy"
HELDOUT_SEED = 0
MIN_DOC_TOKENS = 2  # the store skips shorter documents; so do the baselines
JUNK_TOP, JUNK_MIN = 10, 6  # a topic is junk when >= 6 of its top 10 words are junk words
LETTERS_ONLY = re.compile(r"[^\W\d_]+")  # letters (any script), no digit, no underscore
JUNK_WORDS = frozenset((
    # news/e-mail header fields and their usual values
    "from", "subject", "lines", "organization", "nntp", "posting", "host", "writes", "wrote",
    "article", "edu", "com", "reply", "newsgroups", "sender", "distribution", "keywords",
    "references", "xref", "uucp", "gmt", "net", "org",
    # markup and entities
    "gt", "lt", "amp", "quot", "nbsp", "http", "https", "www", "html", "href",
))
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d [\d:,]+ streamtopic\b")  # `streamtopic -v` records
TIMEOUT_SECONDS = 3600.0
DEFAULT_OUT = os.path.join(HERE, "results", "real_corpora.json")
DEFAULT_OUT_MIN_DF = os.path.join(HERE, "results", "real_corpora_min_df.json")
DEFAULT_WORKDIR = "/tmp/streamtopic-real-corpora"


def log(msg: str) -> None:
    print(f"[real-corpora {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ============================================================================ corpora


def _stamp(path: str) -> dict[str, Any]:
    st = os.stat(path)
    return {"path": path, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _cached(stamp_path: str, stamp: dict[str, Any], outputs: list[str]) -> bool:
    if not (os.path.exists(stamp_path) and all(os.path.exists(p) for p in outputs)):
        return False
    with open(stamp_path) as fh:
        return json.load(fh) == stamp


def prepare_20ng(datadir: str) -> dict[str, Any]:
    """The bydate train and test folders, each an uncompressed tar of one message per file."""
    train = os.path.join(datadir, "20news-bydate-train.tar")
    test = os.path.join(datadir, "20news-bydate-test.tar")
    stamp, stamp_path = {"archive": _stamp(NEWS_ARCHIVE), "v": 1}, os.path.join(datadir, "stamp")
    if not _cached(stamp_path, stamp, [train, test]):
        log(f"20ng: packing the train and test folders into {datadir}")
        os.makedirs(datadir, exist_ok=True)
        counts = {"train": 0, "test": 0}
        with tarfile.open(NEWS_ARCHIVE, "r|gz") as src, \
                tarfile.open(train + ".partial", "w") as tr, \
                tarfile.open(test + ".partial", "w") as te:
            for m in src:
                if not m.isfile():
                    continue
                half = m.name.split("/", 1)[0].rsplit("-", 1)[-1]  # train | test
                out = {"train": tr, "test": te}.get(half)
                if out is not None:
                    out.addfile(m, src.extractfile(m))
                    counts[half] += 1
        os.replace(train + ".partial", train)
        os.replace(test + ".partial", test)
        with open(stamp_path, "w") as fh:
            json.dump(stamp, fh)
        log(f"20ng: {counts['train']:,} training and {counts['test']:,} test messages")
    return {"train_input": train, "test_input": test,
            "prepared_by": f"tarfile: members of {NEWS_ARCHIVE} under 20news-bydate-train/ "
                           "and 20news-bydate-test/, regular files only"}


def prepare_kos(datadir: str) -> dict[str, Any]:
    """``streamtopic split`` of KOS: PREFIX.train.h5 (streamtopic's raw input), PREFIX.test.h5."""
    prefix = os.path.join(datadir, "kos")
    train, test = f"{prefix}.train.h5", f"{prefix}.test.h5"
    cmd = [*fitbench.streamtopic_cmd(), "split", KOS_DOCWORD, "-o", prefix, *KOS_SPLIT, "-q"]
    stamp = {"docword": _stamp(KOS_DOCWORD), "split": KOS_SPLIT, "v": 1}
    stamp_path = os.path.join(datadir, "stamp")
    if not _cached(stamp_path, stamp, [train, test]):
        log(f"kos: {' '.join(cmd[1:])}")
        os.makedirs(datadir, exist_ok=True)
        for p in (train, test):
            if os.path.exists(p):
                os.remove(p)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(stamp_path, "w") as fh:
            json.dump(stamp, fh)
    return {"train_input": train, "test_input": test,
            "prepared_by": _shown(["streamtopic", *cmd[len(fitbench.streamtopic_cmd()):]])}


def prepare_sotu(datadir: str) -> dict[str, Any]:
    """SOTU paragraphs split at random (seeded) into train.jsonl.gz and test.jsonl.gz."""
    import gzip

    import numpy as np

    train, test = (os.path.join(datadir, f"{h}.jsonl.gz") for h in ("train", "test"))
    stamp = {"source": _stamp(SOTU_JSONL), "fraction": SOTU_TEST_FRACTION, "seed": SOTU_SEED,
             "v": 1}
    stamp_path = os.path.join(datadir, "stamp")
    if not _cached(stamp_path, stamp, [train, test]):
        os.makedirs(datadir, exist_ok=True)
        with gzip.open(SOTU_JSONL, "rt", encoding="utf-8") as fh:
            recs = [json.loads(line) for line in fh if line.strip()]
        to_test = np.random.default_rng(SOTU_SEED).random(len(recs)) < SOTU_TEST_FRACTION
        for path, want in ((train, False), (test, True)):
            with gzip.open(path + ".partial", "wt", encoding="utf-8") as out:
                for r, t in zip(recs, to_test.tolist(), strict=True):
                    if t == want:
                        out.write(json.dumps({"id": r["id"], "text": r["text"]}) + "\n")
            os.replace(path + ".partial", path)
        with open(stamp_path, "w") as fh:
            json.dump(stamp, fh)
        log(f"sotu: {int((~to_test).sum()):,} training and {int(to_test.sum()):,} test paragraphs")
    return {"train_input": train, "test_input": test,
            "prepared_by": f"numpy default_rng({SOTU_SEED}).random(n) < {SOTU_TEST_FRACTION}: "
                           f"test; records of {SOTU_JSONL} as {{id, text}}"}


def prepare_longdocs(datadir: str) -> dict[str, Any]:
    """The long-document corpus of issue 24 (``rawtext_corpora.py longdocs``), as JSON Lines."""
    import rawtext_corpora

    stats = rawtext_corpora.build_longdocs(datadir, LONGDOCS_WORDS, 0)
    return {"train_input": os.path.join(datadir, "train.jsonl.gz"),
            "test_input": os.path.join(datadir, "test.jsonl.gz"), "corpus": stats,
            "prepared_by": f"python benchmarks/rawtext_corpora.py longdocs DIR --words "
                           f"{LONGDOCS_WORDS} --seed 0"}


def _shown(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)


# ============================================================================ same tokens


def _partition_rows(chunks: list[Any], vocab: list[str]) -> list[Any]:
    """A partition's documents as rows over ``vocab`` (CSR), and the tokens outside it."""
    import numpy as np
    import scipy.sparse as sp

    from streamtopic.termmap import term_index, to_global

    index = term_index(vocab)
    rows, oov = [], 0
    for ch in chunks:
        H, o = to_global(ch, index, len(vocab))
        rows.append(H)
        oov += o
    if not rows:
        return [(sp.csr_matrix((0, len(vocab)), dtype=np.int32), 0)]
    return [(sp.vstack(rows, format="csr"), oov)]


def bag_of_words(corpus: Any, vocab: list[str], *, min_tokens: int = MIN_DOC_TOKENS,
                 scheduler: str = "threads") -> tuple[Any, dict[str, int]]:
    """Documents of ``corpus`` (a streamtopic Corpus) as a CSR matrix over ``vocab``, tokens
    outside it dropped, documents with fewer than ``min_tokens`` of them left out (0: keep
    all), in corpus order; and counts of what was dropped."""
    import numpy as np
    import scipy.sparse as sp

    parts = corpus.to_bag().map_partitions(_partition_rows, vocab).compute(scheduler=scheduler)
    H = sp.vstack([h for h, _ in parts], format="csr").astype(np.int32)
    H.sum_duplicates()
    length = np.asarray(H.sum(axis=1)).ravel()
    keep = length >= min_tokens
    stats = {"docs_read": int(H.shape[0]), "tokens_outside_vocabulary": sum(o for _, o in parts),
             "docs_dropped": int((~keep).sum()), "tokens_in_dropped_docs": int(length[~keep].sum())}
    H = H[np.flatnonzero(keep)]
    stats.update(n_docs=int(H.shape[0]), n_tokens=int(H.sum()), nnz=int(H.nnz))
    return H, stats


def _scheduler_for(corpus: Any) -> str:
    numeric = all(s.format in ("uci", "hdf5") for s in corpus.sources)
    return "threads" if numeric else "processes"  # tokenising holds the GIL


def _volatile(key: str) -> bool:
    """Manifest fields that differ between two ingests of the same tokens."""
    return key == "version" or key.endswith("_at") or "seconds" in key


def store_identity(store_path: str) -> dict[str, Any]:
    """What fixes a store's tokens: vocabulary, tokenizer settings, inputs (and a key of them)."""
    from streamtopic import CooccurrenceStore

    store = CooccurrenceStore.open(store_path)
    vocab = list(store.vocab)
    sources = [{k: v for k, v in s.items() if not _volatile(k)} for s in store.sources]
    ident = {"tokenizer": store.config.get("tokenizer"), "sources": sources}
    h = hashlib.sha256("\n".join(vocab).encode())
    h.update(json.dumps(ident, sort_keys=True, default=str).encode())
    return {"key": h.hexdigest()[:16], "V": len(vocab), "n_docs": int(store.n_docs),
            "n_tokens": int(store.n_tokens), "config": store.config, **ident}


def shared_tokens(store_path: str, test_input: str, outdir: str,
                  scheduler: str | None = None) -> dict[str, Any]:
    """The store's training documents and the test documents, tokenised as the store was and
    restricted to its vocabulary, saved as ``train.npz``, ``test.npz`` and ``vocab.txt``
    (``scheduler``: Dask's, default processes for text and threads for UCI/HDF5)."""
    import scipy.sparse as sp

    from streamtopic import CooccurrenceStore
    from streamtopic.corpus import read_as_recorded, recorded_corpus
    from streamtopic.manifest import ManifestEntry

    store = CooccurrenceStore.open(store_path)
    vocab = list(store.vocab)
    train = recorded_corpus(store)
    if train is None:
        raise RuntimeError(f"{store_path}: none of its recorded inputs exists")
    # the test file, read exactly as the (first) training source was recorded
    test_src = [ManifestEntry({**store.sources[0], "path": os.path.abspath(test_input)})]
    test = read_as_recorded(store.config, test_src)
    t0 = time.perf_counter()
    H_train, s_train = bag_of_words(train, vocab, scheduler=scheduler or _scheduler_for(train))
    H_test, s_test = bag_of_words(test, vocab, min_tokens=0,
                                  scheduler=scheduler or _scheduler_for(test))
    os.makedirs(outdir, exist_ok=True)
    paths = {k: os.path.join(outdir, f) for k, f in
             (("train", "train.npz"), ("test", "test.npz"), ("vocab", "vocab.txt"))}
    sp.save_npz(paths["train"], H_train, compressed=False)
    sp.save_npz(paths["test"], H_test, compressed=False)
    with open(paths["vocab"], "w", encoding="utf-8") as fh:
        fh.write("\n".join(vocab) + "\n")
    check = {"store_n_docs": int(store.n_docs), "store_n_tokens": int(store.n_tokens),
             "bow_n_docs": s_train["n_docs"], "bow_n_tokens": s_train["n_tokens"]}
    check["same"] = (check["store_n_docs"] == check["bow_n_docs"]
                     and check["store_n_tokens"] == check["bow_n_tokens"])
    return {"paths": paths, "V": len(vocab), "train": s_train, "test": s_test,
            "same_tokens_check": check, "seconds": time.perf_counter() - t0,
            "tokenizer": store.config.get("tokenizer"), "train_sources": store.sources,
            "test_source": test_src[0].as_json()}


# ============================================================================ scoring


def junk_word(word: str) -> bool:
    """A number, markup or a header field: not letters only, or in ``JUNK_WORDS``."""
    return LETTERS_ONLY.fullmatch(word) is None or word in JUNK_WORDS


def junk_topics(top_words: list[list[str]]) -> list[int]:
    """Indices of the topics whose top ``JUNK_TOP`` words have at least ``JUNK_MIN`` junk."""
    return [k for k, words in enumerate(top_words)
            if sum(junk_word(w) for w in words[:JUNK_TOP]) >= JUNK_MIN]


def score(components: Any, vocab: list[str], test: Any, reference: Any) -> dict[str, Any]:
    """The one scorer: held-out nats/token, NPMI of the top ``NPMI_TOP`` words from document
    co-occurrence in ``reference`` (the shared training documents, D×V CSR), unique words,
    junk topics, top words."""
    import numpy as np

    from streamtopic import metrics
    from streamtopic.inference import document_completion

    comp = np.asarray(components, dtype=np.float64)
    if comp.shape[1] != len(vocab):
        raise ValueError(f"topics have {comp.shape[1]} columns, V = {len(vocab)}")
    sums = comp.sum(axis=1, keepdims=True)
    comp = comp / np.where(sums > 0, sums, 1.0)
    top = metrics.top_word_ids(comp, TOP_N)
    words = [[vocab[i] for i in row] for row in top.tolist()]
    uniq = metrics.unique_words(comp, top_n=TOP_N)
    dc = document_completion(SimpleNamespace(components_=comp, vocab_=vocab), test,
                             seed=HELDOUT_SEED)
    junk = junk_topics(words)
    npmi = metrics.npmi(top[:, :NPMI_TOP], reference)
    return {"heldout_per_token": dc.per_token, "heldout_docs": dc.n_docs,
            "npmi_mean": float(np.mean(npmi)), "npmi_per_topic": npmi.tolist(),
            "heldout_tokens": dc.n_tokens, "unique_words_mean": float(np.mean(uniq)),
            "unique_words_per_topic": uniq.tolist(), "junk_topics": len(junk),
            "junk_topic_ids": junk, "top_words": [" ".join(w[:10]) for w in words]}


# ============================================================================ baseline children


def child_main(spec_path: str) -> None:
    """Subprocess entry: one baseline trained on the shared bag of words, its topics saved."""
    with open(spec_path) as fh:
        spec = json.load(fh)
    {"gensim": _child_gensim, "tomotopy": _child_tomotopy}[spec["kind"]](spec)
    fitbench._emit(event="begin", stage="done")


def _load_bow(spec: dict[str, Any]) -> tuple[Any, list[str]]:
    import scipy.sparse as sp

    H = sp.load_npz(spec["train"]).tocsr()
    with open(spec["vocab"], encoding="utf-8") as fh:
        vocab = fh.read().split("\n")[:-1]
    return H, vocab


def _child_gensim(spec: dict[str, Any]) -> None:
    import gensim
    import numpy as np
    from gensim.models import LdaMulticore

    fitbench._emit(event="begin", stage="load")
    t0 = time.perf_counter()
    H, vocab = _load_bow(spec)
    ptr, ids, counts = H.indptr.tolist(), H.indices.tolist(), H.data.tolist()
    corpus = [list(zip(ids[a:b], counts[a:b], strict=True)) for a, b in pairwise(ptr)]
    id2word = dict(enumerate(vocab))
    del H, ids, counts
    fitbench._emit(event="result", name="load", seconds=time.perf_counter() - t0,
                   n_docs=len(corpus), V=len(vocab), versions={"gensim": gensim.__version__})
    fitbench._emit(event="begin", stage="train")
    t0 = time.perf_counter()
    lda = LdaMulticore(corpus=corpus, id2word=id2word, num_topics=spec["K"],
                       workers=spec["workers"], passes=spec["passes"],
                       chunksize=GENSIM_CHUNKSIZE, eval_every=None,
                       random_state=spec["seed"])
    seconds = time.perf_counter() - t0
    fitbench._emit(event="begin", stage="save")
    np.save(spec["components_out"], np.asarray(lda.get_topics(), dtype=np.float64))
    fitbench._emit(event="result", name="train", seconds=seconds, settings={
        "workers": lda.workers, "passes": lda.passes, "chunksize": lda.chunksize,
        "iterations": lda.iterations, "eval_every": lda.eval_every, "decay": lda.decay,
        "offset": lda.offset, "alpha": "symmetric 1/K", "eta": "symmetric 1/K"})


def _child_tomotopy(spec: dict[str, Any]) -> None:
    import numpy as np
    import tomotopy as tp

    fitbench._emit(event="begin", stage="load")
    t0 = time.perf_counter()
    H, vocab = _load_bow(spec)
    words = np.array(vocab, dtype=object)
    model = tp.LDAModel(k=spec["K"], seed=spec["seed"])
    for d in range(H.shape[0]):
        a, b = H.indptr[d], H.indptr[d + 1]
        model.add_doc(np.repeat(words[H.indices[a:b]], H.data[a:b]).tolist())
    fitbench._emit(event="result", name="load", seconds=time.perf_counter() - t0,
                   n_docs=len(model.docs), V=len(vocab),
                   versions={"tomotopy": tp.__version__, "isa": tp.isa})
    fitbench._emit(event="begin", stage="train")
    t0 = time.perf_counter()
    model.train(spec["iterations"], workers=spec["workers"])
    seconds = time.perf_counter() - t0
    fitbench._emit(event="begin", stage="save")
    index = {w: i for i, w in enumerate(vocab)}
    cols = np.array([index[w] for w in model.used_vocabs], dtype=np.int64)
    topics = np.zeros((spec["K"], len(vocab)))
    for k in range(spec["K"]):
        topics[k, cols] = model.get_topic_word_dist(k)
    np.save(spec["components_out"], topics)
    fitbench._emit(event="result", name="train", seconds=seconds, settings={
        "iterations": spec["iterations"], "workers": spec["workers"],
        "alpha": float(np.mean(model.alpha)), "eta": float(model.eta),
        "ll_per_word": float(model.ll_per_word)})


# ============================================================================ running


def _measure(cmd: list[str], cwd: str) -> dict[str, Any]:
    quiet = fitbench.wait_for_quiet()
    run = fitbench.run_child(cmd, default_timeout=TIMEOUT_SECONDS, cwd=cwd)
    run["contention"].update(quiet)
    return run


def _run_record(run: dict[str, Any]) -> dict[str, Any]:
    return {"wall_seconds": run["wall_seconds"], "peak_rss_bytes": run["peak_rss_bytes"],
            "peak_rss_bytes_by_stage": run["peak_rss_bytes_by_stage"],
            "peak_processes": run["peak_processes"], "contention": run["contention"]}


def streamtopic_command(raw: str, K: int, seed: int, model: str, store: str,
                        extra: list[str], verbose: bool = False) -> list[str]:
    return [*fitbench.streamtopic_cmd(), *(["-v"] if verbose else []), "fit", raw,
            "-k", str(K), "--seed", str(seed), "-o", model, "--store", store, *extra]


def _ingest_seconds(stderr: str) -> float | None:
    """The ingest's own time from its summary (``store … at version …`` then ``  X.XX s``)."""
    m = re.search(r"^store .* at version \d+:.*?^  ([0-9.]+) s$", stderr, re.MULTILINE | re.DOTALL)
    return float(m.group(1)) if m else None


def _budgets(obj: Any, path: str = "") -> dict[str, Any]:
    """Every entry whose key mentions a memory budget, anywhere in ``obj``."""
    found: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            where = f"{path}.{k}" if path else str(k)
            if "budget" in str(k).lower() and not isinstance(v, dict):
                found[where] = v
            found.update(_budgets(v, where))
    return found


def run_streamtopic(name: str, extra: list[str], raw: str, K: int, seed: int, work: str,
                    verbose: bool = False) -> dict[str, Any]:
    """One ``streamtopic fit`` from raw input into a fresh store; the model and store are
    left in ``work`` for the caller (``out["model_path"]``, ``out["store_path"]``)."""
    from streamtopic.model import AnchorTopicModel

    tag = f"{name}-K{K}-{time.time_ns()}"
    model, store = os.path.join(work, f"{tag}.model"), os.path.join(work, f"{tag}.store")
    cmd = streamtopic_command(raw, K, seed, model, store, extra, verbose)
    shown = _shown(["streamtopic", *cmd[len(fitbench.streamtopic_cmd()):]])
    log(f"{name} K={K}: {shown}")
    run = _measure(cmd, work)
    out: dict[str, Any] = {"command": shown, "seconds": run["wall_seconds"], **_run_record(run),
                           "model_path": model, "store_path": store}
    err = fitbench.failure(run)
    if err or not os.path.exists(model):
        out["error"] = err or {"reason": "no model saved", "stderr_tail": run["stderr"][-3000:]}
        return out
    m = AnchorTopicModel.load(model)
    stages = m.diagnostics_.get("seconds", {})
    out.update(ingest_seconds=_ingest_seconds(run["stderr"]), fit_stage_seconds=stages,
               fit_seconds=float(sum(stages.values())), V=len(m.vocab_),
               anchor_words=list(m.anchor_words_), params=m.get_params(),
               memory_budget=_budgets({"params": m.get_params(), "diagnostics": m.diagnostics_}),
               log_lines=[ln for ln in run["stderr"].splitlines() if LOG_LINE.match(ln)])
    out["_model"] = m
    return out


def run_baseline(name: str, K: int, seed: int, tokens: dict[str, Any], work: str,
                 gensim_workers: int) -> dict[str, Any]:
    """One baseline on the shared bag of words in a fresh child; its topics in ``out``."""
    import numpy as np

    cfg = BASELINES[name]
    tag = f"{name}-K{K}-{time.time_ns()}"
    spec = {"kind": cfg["kind"], "K": K, "seed": seed, "train": tokens["paths"]["train"],
            "vocab": tokens["paths"]["vocab"],
            "workers": gensim_workers if cfg["kind"] == "gensim" else CORES,
            "components_out": os.path.join(work, f"{tag}.npy"),
            **{k: v for k, v in cfg.items() if k != "kind"}}
    spec_path = os.path.join(work, f"{tag}.json")
    with open(spec_path, "w") as fh:
        json.dump(spec, fh)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", spec_path]
    log(f"{name} K={K}: {cfg['kind']} child")
    run = _measure(cmd, work)
    res = fitbench.child_results(run)
    out: dict[str, Any] = {"command": _shown(cmd), "call": _call(spec), **_run_record(run)}
    if "load" in res:
        out.update(load_seconds=res["load"]["seconds"], versions=res["load"].get("versions"))
    if "train" in res:
        out.update(seconds=res["train"]["seconds"], settings=res["train"].get("settings"))
    err = fitbench.failure(run)
    if err or not os.path.exists(spec["components_out"]):
        out["error"] = err or {"reason": "no topics saved", "stderr_tail": run["stderr"][-3000:]}
        return out
    out["_components"] = np.load(spec["components_out"])
    for p in (spec_path, spec["components_out"]):
        os.remove(p)
    return out


def _call(spec: dict[str, Any]) -> str:
    if spec["kind"] == "gensim":
        return (f"LdaMulticore(corpus=<list of lists of (id, count)>, id2word=<dict>, "
                f"num_topics={spec['K']}, workers={spec['workers']}, passes={spec['passes']}, "
                f"chunksize={GENSIM_CHUNKSIZE}, eval_every=None, random_state={spec['seed']})")
    return (f"LDAModel(k={spec['K']}, seed={spec['seed']}); add_doc(tokens) per document; "
            f"train({spec['iterations']}, workers={spec['workers']})")


# ============================================================================ one corpus


class CorpusRun:
    """Every method on one corpus, for each K, in rounds; the shared tokens are made from
    the first streamtopic store (the reference method runs first until they exist)."""

    def __init__(self, name: str, data: dict[str, Any], args: argparse.Namespace,
                 methods: list[str], work: str) -> None:
        self.name, self.data, self.args, self.methods, self.work = name, data, args, methods, work
        self.st_methods = dict(args.streamtopic_methods)
        # the first selected streamtopic method (else the table's first: baselines are skipped)
        self.reference = next((m for m in methods if m in self.st_methods),
                              next(iter(self.st_methods)))
        self.tokens: dict[str, Any] | None = None
        self.test: Any = None
        self.train: Any = None
        self.vocab: list[str] = []
        self.entry: dict[str, Any] = {"title": CORPORA[name], **data, "runs": {}}
        self._reused: dict[tuple[str, int], int] = {}  # cached baseline runs handed out

    def order(self) -> list[str]:
        """Methods in their turn: the reference first while the shared tokens are missing."""
        if self.tokens is None and self.reference in self.methods:
            return [self.reference, *[m for m in self.methods if m != self.reference]]
        return list(self.methods)

    def run(self, K: int, repeat: int, save: Any) -> None:
        for method in self.order():
            runs = self.entry["runs"].setdefault(str(K), {}).setdefault(method, [])
            rec = self._one(method, K)
            rec["repeat"] = repeat
            runs.append(rec)
            save()

    def _one(self, method: str, K: int) -> dict[str, Any]:
        a = self.args
        if method in self.st_methods:
            rec = run_streamtopic(method, self.st_methods[method], self.data["train_input"], K,
                                  a.seed, self.work)
            self._after_streamtopic(method, rec)
            comp = rec.pop("_model").components_ if "_model" in rec else None
        elif self.tokens is None:
            return {"skipped": "no shared tokens: no streamtopic run has succeeded yet"}
        elif (cached := self._cached_baseline(method, K)) is not None:
            _log_run(self.name, K, method, cached)
            return cached
        else:
            rec = run_baseline(method, K, a.seed, self.tokens, self.work, a.gensim_workers)
            comp = rec.pop("_components", None)
        if comp is not None and "error" not in rec:
            if rec.get("own_tokens"):
                rec["scores_note"] = "vocabulary differs from the baselines': not scored"
            else:
                t0 = time.perf_counter()
                rec["scores"] = score(comp, self.vocab, self.test, self.train)
                rec["scoring_seconds"] = time.perf_counter() - t0
        _log_run(self.name, K, method, rec)
        return rec

    def _cached_baseline(self, method: str, K: int) -> dict[str, Any] | None:
        """A baseline's next run from ``--baselines-from`` (an earlier results file), in
        turn, when that file has runs of it on this corpus and K over the same tokens (the
        same V and the same training documents and tokens); else None (run it)."""
        old = (self.args.baselines_from or {}).get("corpora", {}).get(self.name, {})
        runs = [r for r in old.get("runs", {}).get(str(K), {}).get(method, [])
                if "scores" in r]
        mine, theirs = self.tokens or {}, old.get("tokens", {})
        same = (mine.get("V") == theirs.get("V")
                and mine.get("train", {}).get("n_tokens") == theirs.get("train", {}).get("n_tokens")
                and mine.get("train", {}).get("n_docs") == theirs.get("train", {}).get("n_docs"))
        if not runs or not same:
            return None
        taken = self._reused.setdefault((method, K), 0)
        self._reused[(method, K)] = taken + 1
        rec = dict(runs[taken % len(runs)])
        rec["reused_from"] = {"file": self.args.baselines_from_path,
                              "started_at": self.args.baselines_from.get("started_at"),
                              "repeat": rec.get("repeat")}
        return rec

    def _after_streamtopic(self, method: str, rec: dict[str, Any]) -> None:
        """Make the shared tokens from the first store (the reference method's, unless it
        failed); flag later stores whose tokens differ; remove the model and store."""
        store, model = rec.pop("store_path"), rec.pop("model_path")
        if "error" not in rec:
            ident = store_identity(store)
            rec["store"] = {k: ident[k] for k in ("key", "V", "n_docs", "n_tokens")}
            if self.tokens is None:  # the reference's store, or the first that succeeded
                log(f"{self.name}: tokenising the training and test documents as {store}")
                self.tokens = shared_tokens(store, self.data["test_input"],
                                            os.path.join(self.work, f"{self.name}-tokens"))
                self.tokens.update(key=ident["key"], from_method=method)
                self.tokens["store_config"] = ident["config"]
                self._load_shared()
            if self.tokens is not None and ident["key"] != self.tokens["key"]:
                rec["own_tokens"] = True
        if not self.args.keep:
            for p in (store, model):
                shutil.rmtree(p, ignore_errors=True)

    def _load_shared(self) -> None:
        import scipy.sparse as sp

        assert self.tokens is not None
        self.test = sp.load_npz(self.tokens["paths"]["test"]).tocsr()
        self.train = sp.load_npz(self.tokens["paths"]["train"]).tocsr()
        with open(self.tokens["paths"]["vocab"], encoding="utf-8") as fh:
            self.vocab = fh.read().split("\n")[:-1]
        c = self.tokens["same_tokens_check"]
        log(f"{self.name}: V = {self.tokens['V']:,}; train {c['bow_n_docs']:,} docs, "
            f"{c['bow_n_tokens']:,} tokens (store: {c['store_n_docs']:,}, "
            f"{c['store_n_tokens']:,}: {'same' if c['same'] else 'DIFFERENT'}); test "
            f"{self.tokens['test']['n_docs']:,} docs ({self.tokens['seconds']:.0f} s)")
        self.entry["tokens"] = {k: v for k, v in self.tokens.items() if k != "paths"}


def _log_run(corpus: str, K: int, method: str, rec: dict[str, Any]) -> None:
    if "error" in rec or "skipped" in rec:
        why = json.dumps(rec.get("error") or rec["skipped"])[:800]
        log(f"{corpus} K={K} {method}: FAILED {why}")
        return
    s = rec.get("scores", {})
    log(f"{corpus} K={K} {method}: {rec['seconds']:.1f} s, peak RSS "
        f"{fitbench.mib(rec['peak_rss_bytes'])}, held-out "
        f"{s.get('heldout_per_token', float('nan')):.4f}, NPMI "
        f"{s.get('npmi_mean', float('nan')):.4f}, unique "
        f"{s.get('unique_words_mean', float('nan')):.2f}, junk topics {s.get('junk_topics')}")


# ============================================================================ summary


def _median(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A method's repeats: median time and scores, peak RSS (max), first repeat's topics."""
    ok = [r for r in runs if "error" not in r and "skipped" not in r]
    if not ok:
        bad = runs[0] if runs else {}
        return {"n_ok": 0, "note": bad.get("skipped") or (bad.get("error") or {}).get("reason")}
    scored = [r["scores"] for r in ok if "scores" in r]
    out = {
        "n_ok": len(ok), "n_runs": len(runs),
        "seconds_median": _median([r.get("seconds") for r in ok]),
        "seconds_all": [r.get("seconds") for r in ok],
        "peak_rss_bytes_max": max(r["peak_rss_bytes"] for r in ok),
        "heldout_per_token": _median([s["heldout_per_token"] for s in scored]),
        "npmi": _median([s.get("npmi_mean") for s in scored]),
        "unique_words_mean": _median([s["unique_words_mean"] for s in scored]),
        "junk_topics": _median([s["junk_topics"] for s in scored]),
        "top_words": scored[0]["top_words"] if scored else None,
        "note": ok[0].get("scores_note"),
    }
    if "fit_seconds" in ok[0]:
        out["fit_seconds_median"] = _median([r.get("fit_seconds") for r in ok])
        out["ingest_seconds_median"] = _median([r.get("ingest_seconds") for r in ok])
    return out


def verdicts(summary: dict[str, dict[str, Any]], st_methods: list[str],
             start: dict[str, Any] | None = None) -> dict[str, Any]:
    """The acceptance verdicts of each streamtopic method against gensim (5 passes)."""
    ref = summary.get(REFERENCE_BASELINE, {})
    out: dict[str, Any] = {}
    for m in st_methods:
        s = summary.get(m, {})
        if not s.get("n_ok") or s.get("heldout_per_token") is None:
            out[m] = {"pass": None, "note": "no scored run"}
            continue
        v: dict[str, Any] = {
            "unique_words_at_least_10": s["unique_words_mean"] >= 10,
            "no_junk_topic": s["junk_topics"] == 0,
        }
        if ref.get("n_ok") and ref.get("heldout_per_token") is not None:
            v["heldout_at_least_gensim_5pass"] = s["heldout_per_token"] >= ref["heldout_per_token"]
            v["time_at_most_gensim_5pass"] = s["seconds_median"] <= ref["seconds_median"]
        else:
            v["note"] = f"{REFERENCE_BASELINE} did not run: its two criteria are not judged"
        v.update(_issue28(s, summary, start))
        v["pass"] = all(x for k, x in v.items() if k != "note" and isinstance(x, bool))
        out[m] = v
    return out


def _issue28(s: dict[str, Any], summary: dict[str, dict[str, Any]],
             start: dict[str, Any] | None = None) -> dict[str, Any]:
    """Issue 28's criteria: held-out and NPMI within 0.01 of tomotopy's, time at most half
    of gensim's (5 passes); a criterion whose reference did not run is left out. With the
    machine's ``start`` (:func:`startup`), the share of gensim's time that the bare imports
    of streamtopic's libraries take (a number, not a criterion)."""
    v: dict[str, Any] = {}
    tomo, ref = summary.get(TOMOTOPY, {}), summary.get(REFERENCE_BASELINE, {})
    if tomo.get("n_ok") and tomo.get("heldout_per_token") is not None:
        v["heldout_within_0.01_of_tomotopy"] = (
            s["heldout_per_token"] >= tomo["heldout_per_token"] - TOMOTOPY_LL_MARGIN)
        if s.get("npmi") is not None and tomo.get("npmi") is not None:
            v["npmi_within_0.01_of_tomotopy"] = s["npmi"] >= tomo["npmi"] - NPMI_MARGIN
    if ref.get("n_ok") and ref.get("seconds_median"):
        v["time_at_most_half_gensim_5pass"] = (
            s["seconds_median"] <= TIME_FRACTION_OF_GENSIM * ref["seconds_median"])
        v["time_over_gensim_5pass"] = round(s["seconds_median"] / ref["seconds_median"], 3)
        if start:
            v["library_imports_over_gensim_5pass"] = round(
                start["library_imports_seconds"] / ref["seconds_median"], 3)
    return v


def table(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for corpus, c in result.get("corpora", {}).items():
        for K, by_method in c.get("summary", {}).items():
            for m, s in by_method.items():
                rows.append({"corpus": corpus, "K": int(K), "method": m,
                             "seconds": s.get("seconds_median"),
                             "peak_rss_mib": (s["peak_rss_bytes_max"] / 2**20
                                              if s.get("peak_rss_bytes_max") else None),
                             "heldout": s.get("heldout_per_token"), "npmi": s.get("npmi"),
                             "unique": s.get("unique_words_mean"),
                             "junk": s.get("junk_topics"), "note": s.get("note")})
    return rows


def print_table(result: dict[str, Any]) -> None:
    def f(x: Any, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    print(f"{'corpus':6} {'K':>3} {'method':14} {'seconds':>8} {'peak MiB':>8} "
          f"{'held-out':>9} {'NPMI':>7} {'unique':>6} {'junk':>4}", file=sys.stderr)
    for r in table(result):
        print(f"{r['corpus']:6} {r['K']:>3} {r['method']:14} {f(r['seconds'], '8.1f')} "
              f"{f(r['peak_rss_mib'], '8.0f')} {f(r['heldout'], '9.4f')} "
              f"{f(r.get('npmi'), '7.4f')} "
              f"{f(r['unique'], '6.2f')} {f(r['junk'], '4g')}"
              + (f"  [{r['note']}]" if r["note"] else ""), file=sys.stderr)
    for corpus, c in result.get("corpora", {}).items():
        for K, v in c.get("verdicts", {}).items():
            for m, checks in v.items():
                print(f"verdict {corpus} K={K} {m}: {json.dumps(checks)}", file=sys.stderr)
    mdf = result.get("min_df_check", {})
    if "verdict" in mdf:
        print(f"min-df check: {json.dumps(mdf['verdict'])}", file=sys.stderr)


# ============================================================================ min-df check


MIN_DF_CASES = {"min_df_2": ["--min-df", "2"], "keep_n_10000": ["--keep-n", "10000"]}


def min_df_check(args: argparse.Namespace, raw: str, topics: list[int], work: str,
                 save: Any) -> dict[str, Any]:
    """``streamtopic -v fit`` on 20 Newsgroups at ``--min-df 2`` and at ``--keep-n 10000``."""
    out: dict[str, Any] = {"input": raw, "cases": MIN_DF_CASES, "runs": {}}
    for K in topics:
        for r in range(args.repeats):
            for case, extra in MIN_DF_CASES.items():
                rec = run_streamtopic(f"mindf-{case}", extra, raw, K, args.seed, work,
                                      verbose=True)
                rec.pop("_model", None)
                for p in (rec.pop("store_path"), rec.pop("model_path")):
                    if not args.keep:
                        shutil.rmtree(p, ignore_errors=True)
                rec["repeat"] = r
                out["runs"].setdefault(str(K), {}).setdefault(case, []).append(rec)
                log(f"min-df {case} K={K}: V = {rec.get('V')}, fit "
                    f"{rec.get('fit_seconds') or float('nan'):.1f} s, whole "
                    f"{rec['seconds']:.1f} s, peak RSS {fitbench.mib(rec['peak_rss_bytes'])}"
                    + (f" FAILED {rec['error']}" if "error" in rec else ""))
                save()
    out["verdict"] = {K: _min_df_verdict(by_case) for K, by_case in out["runs"].items()}
    return out


def _min_df_verdict(by_case: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    med = {}
    for case, runs in by_case.items():
        ok = [r for r in runs if "error" not in r]
        med[case] = {"V": ok[0]["V"] if ok else None,
                     "fit_seconds": _median([r["fit_seconds"] for r in ok]),
                     "whole_seconds": _median([r["seconds"] for r in ok]),
                     "peak_rss_bytes": max((r["peak_rss_bytes"] for r in ok), default=None),
                     "memory_budget": ok[0]["memory_budget"] if ok else None}
    big, small = med.get("min_df_2", {}), med.get("keep_n_10000", {})
    v: dict[str, Any] = {"medians": med}
    if big.get("fit_seconds") is not None and small.get("fit_seconds"):
        v["fit_ratio"] = big["fit_seconds"] / small["fit_seconds"]
        v["fit_within_2x"] = v["fit_ratio"] <= 2.0
        v["whole_process_ratio"] = big["whole_seconds"] / small["whole_seconds"]
    budgets = [b for b in (big.get("memory_budget") or {}).values() if isinstance(b, (int, float))]
    if budgets and big.get("peak_rss_bytes") is not None:
        v["budget_bytes"] = min(budgets)
        v["peak_within_budget"] = big["peak_rss_bytes"] <= v["budget_bytes"]
    return v


# ============================================================================ main


def machine() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    info = machine_info()
    info["cores"] = CORES
    try:
        with open("/proc/cpuinfo") as fh:
            info["cpu_model"] = next((ln.split(":", 1)[1].strip() for ln in fh
                                      if ln.startswith("model name")), None)
    except OSError:
        info["cpu_model"] = None
    for pkg in ("gensim", "tomotopy"):
        try:
            info[pkg] = version(pkg)
        except PackageNotFoundError:
            info[pkg] = None
    return info


def write(result: dict[str, Any], path: str) -> str:
    result["table"] = table(result)
    return write_result(result, path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpora", default="20ng,kos",
                   help="Comma-separated: 20ng, kos, sotu, longdocs.")
    p.add_argument("--topics", default="20,50", help="Comma-separated K values.")
    p.add_argument("--repeats", type=int, default=1, help="Runs per method (median time).")
    p.add_argument("--methods", default=None, help="Comma-separated method names (default all).")
    p.add_argument("--mode", choices=["compare", "min-df", "both"], default="compare")
    p.add_argument("--quick", action="store_true",
                   help="Smoke run: first corpus, K = 20, 1 repeat, no quiet wait.")
    p.add_argument("--seed", type=int, default=0, help="Seed of every method.")
    p.add_argument("--add-streamtopic", action="append", default=[], metavar="NAME=ARGS",
                   help="Another streamtopic method: NAME and its extra 'streamtopic fit' args.")
    p.add_argument("--gensim-workers", type=int, default=CORES,
                   help=f"LdaMulticore workers (default os.cpu_count() = {CORES}).")
    p.add_argument("--workdir", default=DEFAULT_WORKDIR, help="Data, stores and models.")
    p.add_argument("--keep", action="store_true", help="Keep this run's stores and models.")
    p.add_argument("--out", default=None, help="JSON output file.")
    p.add_argument("--quiet-wait", type=float, default=None, metavar="SECONDS",
                   help="Longest wait for idle CPUs before each run (default 120; quick 0).")
    p.add_argument("--baselines-from", metavar="JSON", default=None,
                   help="An earlier results file: its baseline runs (same corpus, K and "
                        "tokens) are reused, in turn, instead of running the baselines again.")
    p.add_argument("--child", metavar="SPEC", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return args
    args.corpora = [c for c in args.corpora.split(",") if c]
    args.topics = [int(k) for k in args.topics.split(",") if k]
    if args.quick:
        args.corpora, args.topics, args.repeats = args.corpora[:1], [20], 1
    bad = [c for c in args.corpora if c not in CORPORA]
    if bad or args.repeats < 1:
        p.error(f"unknown corpora {bad}" if bad else "--repeats must be >= 1")
    args.streamtopic_methods = list(STREAMTOPIC_METHODS)
    for spec in args.add_streamtopic:
        name, _, extra = spec.partition("=")
        args.streamtopic_methods.append((name.strip(), shlex.split(extra)))
    known = [n for n, _ in args.streamtopic_methods] + list(BASELINES)
    args.methods = [m for m in args.methods.split(",") if m] if args.methods else known
    if [m for m in args.methods if m not in known]:
        p.error(f"--methods: known methods are {', '.join(known)}")
    args.out = args.out or (DEFAULT_OUT_MIN_DF if args.mode == "min-df" else DEFAULT_OUT)
    args.baselines_from_path = args.baselines_from
    if args.baselines_from:
        with open(args.baselines_from) as fh:
            args.baselines_from = json.load(fh)
    wait = args.quiet_wait if args.quiet_wait is not None else (0.0 if args.quick else 120.0)
    fitbench.QUIET_WAIT["seconds"] = max(0.0, wait)
    args.workdir = os.path.abspath(args.workdir)
    if os.path.commonpath([args.workdir, REPO]) == REPO:
        p.error(f"--workdir {args.workdir} is inside the repository")
    return args


#: The libraries ``streamtopic fit`` imports on every input (numba: the EM kernels; h5py:
#: HDF5 inputs and models; scipy.optimize: α's fit), in one bare interpreter.
FLOOR_IMPORTS = ("import numpy, numba, scipy.sparse, scipy.optimize, dask.array, dask.bag, "
                 "zarr, h5py, click")


def startup(repeats: int) -> dict[str, Any]:
    """The fixed cost of every command on this machine, medians of ``repeats`` runs (each
    after the machine is quiet): ``streamtopic --version`` (the interpreter, the package's
    imports, exit) and a bare interpreter importing only :data:`FLOOR_IMPORTS`. Part of
    streamtopic's time on every corpus, and of no baseline's (their training is timed inside
    their child)."""
    def wall(cmd: list[str]) -> float:
        fitbench.wait_for_quiet()
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - t

    version = [wall([*fitbench.streamtopic_cmd(), "--version"]) for _ in range(repeats)]
    floor = [wall([sys.executable, "-c", FLOOR_IMPORTS]) for _ in range(repeats)]
    return {"streamtopic_version_seconds": statistics.median(version),
            "library_imports_seconds": statistics.median(floor),
            "library_imports": FLOOR_IMPORTS, "repeats": repeats}


def run_compare(args: argparse.Namespace, result: dict[str, Any], work: str, save: Any) -> None:
    prepare = {"20ng": prepare_20ng, "kos": prepare_kos, "sotu": prepare_sotu,
               "longdocs": prepare_longdocs}
    st_names = [n for n, _ in args.streamtopic_methods]
    result["startup"] = startup(max(3, args.repeats))
    log(f"startup: {result['startup']}")
    for corpus in args.corpora:
        data = prepare[corpus](os.path.join(args.workdir, "data", corpus))
        cr = CorpusRun(corpus, data, args, args.methods, work)
        result["corpora"][corpus] = cr.entry
        for K in args.topics:
            for r in range(args.repeats):
                cr.run(K, r, save)
            summary = {m: summarise(runs) for m, runs in cr.entry["runs"][str(K)].items()}
            cr.entry.setdefault("summary", {})[str(K)] = summary
            cr.entry.setdefault("verdicts", {})[str(K)] = verdicts(
                summary, [m for m in st_names if m in args.methods], result["startup"])
            save()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.child:
        child_main(args.child)
        return {}
    work = os.path.join(args.workdir, f"run-{os.getpid()}")
    os.makedirs(work)
    t0 = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "real_corpora", "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                 time.gmtime()),
        "machine": machine(), "argv": [os.path.basename(sys.executable), *sys.argv],
        "settings": {"mode": args.mode, "quick": args.quick, "corpora": args.corpora,
                     "topics": args.topics,
                     "repeats": args.repeats, "seed": args.seed, "methods": args.methods,
                     "streamtopic_methods": args.streamtopic_methods, "baselines": BASELINES,
                     "gensim_workers": args.gensim_workers, "tomotopy_workers": CORES,
                     "baselines_from": args.baselines_from_path,
                     "top_n": TOP_N, "npmi_top": NPMI_TOP, "heldout_seed": HELDOUT_SEED,
                     "junk": {"top": JUNK_TOP, "min": JUNK_MIN,
                              "letters_only": LETTERS_ONLY.pattern,
                              "words": sorted(JUNK_WORDS)},
                     "quiet_wait_seconds": fitbench.QUIET_WAIT["seconds"]},
        "timing": "streamtopic: the whole `streamtopic fit` process, start to exit (ingest "
                  "included); baselines: training only, in their child (loading excluded)",
        "rss": "peak of the summed RSS of the child and all its descendants (psutil, 50 ms)",
        "corpora": {},
    }

    def save() -> None:
        write({**result, "seconds": time.perf_counter() - t0, "complete": False}, args.out)

    try:
        if args.mode in ("compare", "both"):
            run_compare(args, result, work, save)
        if args.mode in ("min-df", "both"):
            raw = prepare_20ng(os.path.join(args.workdir, "data", "20ng"))["train_input"]
            result["min_df_check"] = min_df_check(args, raw, args.topics, work, save)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result.update(seconds=time.perf_counter() - t0, complete=True)
    print(write(result, args.out))
    print_table(result)
    return result


if __name__ == "__main__":
    main()
