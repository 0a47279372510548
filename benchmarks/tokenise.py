"""Benchmark: tokenising 20 Newsgroups from raw bytes to DocChunks (issue 24, point 1).

The 11,314 training messages of ``20news-bydate.tar.gz`` are read into memory first (whole
files, 22 MB, and their bodies as the ``files`` reader strips them). Then, in one process on
one core, each message goes from its raw bytes to :class:`~streamtopic.corpus.DocChunk` s of
``CHUNK_DOCS`` documents with the default tokenizer:

* *python*: today's path, as ``main`` runs it: UTF-8 decoding, ``Tokenizer.tokens_and_length``
  (regular expressions), a dict lookup per token, ``csr_matrix`` and ``sum_duplicates``;
* *kernel*: ``ChunkBuilder.add_bytes``, which queues a chunk's documents and tokenises and
  counts them in one call of the compiled kernel (``streamtopic/_tokenize.py``).

The two are timed in turns, ``--rounds`` times, and their chunks are checked to be equal.
Reported: medians of wall and CPU seconds, raw words per second (whitespace-separated words
of the bytes) and in-vocabulary tokens per second: the tokens kept by the vocabulary that
``streamtopic ingest`` builds from these documents (term statistics of documents of input
length >= 2, pruned with ingest's defaults min_df 5, max_df 0.5, keep_n 100,000).

Also measured: where the kernel path's time goes (the kernel, the canonical CSR, decoding
new terms, the Python per-document loop), JSON Lines decoding for the same documents, and
the kernel's first call in a fresh process (numba loading its cache; and compiling it, in a
scratch cache directory).

Usage::

    python benchmarks/tokenise.py [--rounds 3] [--tar PATH] [--out PATH]

(Not ``tokenize.py``: run as a script, that name would shadow the standard library's module.)

Prints JSON and writes ``benchmarks/results/tokenize.json`` (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import scipy.sparse as sp

from _common import REPO, machine_info, write_result

TAR = os.path.join(os.environ.get("STREAMTOPIC_SHARED_DATA",
                                  os.path.join(os.path.dirname(REPO), "shared", "data")),
                   "20newsgroups", "20news-bydate.tar.gz")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_messages(path: str) -> list[bytes]:
    """The training messages' raw bytes, in archive order."""
    with tarfile.open(path, "r:gz") as tar:
        return [tar.extractfile(m).read() for m in tar
                if m.isfile() and "-train/" in m.name]


def python_chunks(messages: list[bytes], tokenizer: Any) -> list[Any]:
    """Today's path (``main``'s ``ChunkBuilder`` with ``_decode``), written out."""
    from streamtopic.corpus import CHUNK_DOCS, DocChunk

    chunks = []
    for start in range(0, len(messages), CHUNK_DOCS):
        index: dict[str, int] = {}
        ids: list[int] = []
        indptr, lengths, replaced = [0], [], 0
        for raw in messages[start:start + CHUNK_DOCS]:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("utf-8", errors="replace")
                replaced += len(raw) - len(raw.decode("utf-8", errors="ignore").encode())
            tokens, length = tokenizer.tokens_and_length(text)
            ids.extend([index.setdefault(t, len(index)) for t in tokens])
            indptr.append(len(ids))
            lengths.append(length)
        m = sp.csr_matrix((np.ones(len(ids), np.int32), np.asarray(ids, np.int32),
                           np.asarray(indptr, np.int64)), shape=(len(lengths), len(index)))
        m.sum_duplicates()
        chunks.append(DocChunk(m, list(index), "<memory>", start, replaced,
                               lengths=np.asarray(lengths, np.int64)))
    return chunks


def kernel_chunks(messages: list[bytes], tokenizer: Any) -> list[Any]:
    from streamtopic.corpus import ChunkBuilder

    builder = ChunkBuilder("<memory>", 0, tokenizer)
    for raw in messages:
        builder.add_bytes(raw)
    builder.flush()
    return builder.chunks


def same_chunks(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        list(x.terms) == list(y.terms) and (x.counts != y.counts).nnz == 0
        and np.array_equal(x.counts.indices, y.counts.indices)
        and np.array_equal(x.lengths, y.lengths) and x.n_replaced == y.n_replaced
        and x.first_doc == y.first_doc for x, y in zip(a, b, strict=True))


def in_vocabulary_tokens(chunks: list[Any]) -> tuple[int, int]:
    """Tokens kept by the vocabulary ingest builds from these chunks, and its size."""
    from streamtopic.cooccurrence import DEFAULT_KEEP_N, DEFAULT_MAX_DF, DEFAULT_MIN_DF
    from streamtopic.vocabulary import TermStats, Vocabulary

    stats = TermStats.sum(ch.term_stats(min_length=2) for ch in chunks)
    vocab = Vocabulary.from_stats(stats, min_df=DEFAULT_MIN_DF, max_df=DEFAULT_MAX_DF,
                                  keep_n=DEFAULT_KEEP_N)
    kept = set(vocab.terms)
    total = 0
    for ch in chunks:
        cols = [i for i, t in enumerate(ch.terms) if t in kept]
        total += int(ch.counts[:, cols].sum())
    return total, len(vocab)


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def compare(messages: list[bytes], tokenizer: Any, rounds: int) -> dict[str, Any]:
    """Both paths in turns; medians, rates and the corpus' counts."""
    fast = kernel_chunks(messages, tokenizer)  # warm: numba's cache loaded
    if not same_chunks(python_chunks(messages, tokenizer), fast):
        raise SystemExit("the kernel's chunks differ from the Python path's")
    words = sum(len(raw.split()) for raw in messages)
    in_vocab, n_vocab = in_vocabulary_tokens(fast)
    times: dict[str, list[tuple[float, float]]] = {"python": [], "kernel": []}
    for r in range(rounds):
        for name, fn in (("python", python_chunks), ("kernel", kernel_chunks)):
            times[name].append(timed(lambda fn=fn: fn(messages, tokenizer)))
            log(f"round {r + 1}: {name} {times[name][-1][0]:.3f} s")
    out: dict[str, Any] = {
        "documents": len(messages), "bytes": sum(map(len, messages)), "raw_words": words,
        "matches": int(sum(int(ch.lengths.sum()) for ch in fast)),
        "kept_tokens": int(sum(int(ch.counts.sum()) for ch in fast)),
        "in_vocabulary_tokens": in_vocab, "vocabulary_size": n_vocab,
        "non_ascii_documents": sum(not m.isascii() for m in messages),
    }
    for name, ts in times.items():
        wall = statistics.median(t[0] for t in ts)
        cpu = statistics.median(t[1] for t in ts)
        out[name] = {
            "wall_s": [round(t[0], 4) for t in ts], "cpu_s": [round(t[1], 4) for t in ts],
            "median_wall_s": round(wall, 4), "median_cpu_s": round(cpu, 4),
            "raw_words_per_s": round(words / wall), "raw_words_per_cpu_s": round(words / cpu),
            "in_vocabulary_tokens_per_s": round(in_vocab / wall),
            "in_vocabulary_tokens_per_cpu_s": round(in_vocab / cpu),
        }
    out["speedup_wall"] = round(out["python"]["median_wall_s"] / out["kernel"]["median_wall_s"],
                                2)
    return out


def where_time_goes(messages: list[bytes], tokenizer: Any, rounds: int) -> dict[str, float]:
    """Seconds of the kernel path (median of ``rounds``) in its parts: the kernel call, the
    canonical CSR, decoding and gathering term strings; the rest is the Python loop over
    documents (``add_bytes``: isascii, queueing) and building chunks. And the whole path
    without the dropping rules (their share of the kernel call)."""
    import streamtopic.corpus as corpus
    from streamtopic import _tokenize

    parts: dict[str, list[float]] = {}

    def wrap(owner: Any, name: str, key: str) -> Callable[[], None]:
        original = getattr(owner, name)

        def timed_call(*args: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(*args)
            finally:
                parts[key][-1] += time.perf_counter() - t0

        setattr(owner, name, timed_call)
        return lambda: setattr(owner, name, original)

    keys = ("kernel", "canonical CSR (count_matrix)", "term strings (decode, gather)")
    parts.update({k: [] for k in keys})
    undo = [wrap(_tokenize, "tokenize_batch", keys[0]), wrap(corpus, "count_matrix", keys[1]),
            wrap(_tokenize.BatchTokenizer, "_terms", keys[2])]
    totals = []
    try:
        for _ in range(rounds):
            for v in parts.values():
                v.append(0.0)
            totals.append(timed(lambda: kernel_chunks(messages, tokenizer))[0])
    finally:
        for fn in undo:
            fn()
    out = {k: round(statistics.median(v), 4) for k, v in parts.items()}
    out["total"] = round(statistics.median(totals), 4)
    out["python per document and chunks (the rest)"] = round(
        out["total"] - sum(v for k, v in out.items() if k != "total"), 4)
    # the dropping rules' share: the same path with drop_encoded, drop_addresses off
    plain = replace(tokenizer, drop_encoded=False, drop_addresses=False)
    kernel_chunks(messages, plain)
    out["total without the dropping rules"] = round(statistics.median(
        timed(lambda: kernel_chunks(messages, plain))[0] for _ in range(rounds)), 4)
    return out


def json_lines(messages: list[bytes], tokenizer: Any, rounds: int) -> dict[str, Any]:
    """The same documents as JSON Lines through the reader (one partition), and the share of
    ``json.loads``."""
    import streamtopic as st

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.jsonl")
        with open(path, "w", encoding="utf-8") as fh:
            for raw in messages:
                fh.write(json.dumps({"text": raw.decode("utf-8", "replace")}) + "\n")
        corpus = st.read_corpus(path, tokenizer=tokenizer, blocksize=2**30)
        with open(path, "rb") as fh:
            lines = fh.read().split(b"\n")[:-1]
        list(corpus.iter_chunks())
        read = [timed(lambda: list(corpus.iter_chunks()))[0] for _ in range(rounds)]
        loads = [timed(lambda: [json.loads(line) for line in lines])[0] for _ in range(rounds)]
    return {"reader_s": round(statistics.median(read), 4),
            "json_loads_s": round(statistics.median(loads), 4), "bytes": sum(map(len, lines))}


FIRST_CALL = """
import time
t0 = time.perf_counter()
from streamtopic._tokenize import BatchTokenizer
from streamtopic.vocabulary import Tokenizer
t1 = time.perf_counter()
kernel = BatchTokenizer(Tokenizer())
kernel.add_ascii(b"In article <a@b.c> joe@x.org writes: hello world")
kernel.run()
t2 = time.perf_counter()
kernel.add_text("caf\\u00e9 na\\u00efve")
kernel.run()
t3 = time.perf_counter()
kernel.add_ascii(b"hello again")
kernel.run()
t4 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3)
"""


def first_call() -> dict[str, Any]:
    """A fresh process: importing, the first batch (numba loads the kernels from its cache
    beside the module; with a scratch cache directory it compiles them), the first
    non-ASCII document (the class table of all code points), then another batch."""
    def run(env: dict[str, str]) -> list[float]:
        out = subprocess.run([sys.executable, "-c", FIRST_CALL], capture_output=True,
                             text=True, check=True, env=env, cwd=REPO)
        return [round(float(x), 3) for x in out.stdout.split()]

    cached = run(dict(os.environ))
    with tempfile.TemporaryDirectory() as tmp:
        cold = run({**os.environ, "NUMBA_CACHE_DIR": tmp})
    keys = ("import_s", "first_ascii_batch_s", "first_non_ascii_document_s", "next_batch_s")
    return {"cached": dict(zip(keys, cached, strict=True)),
            "compiling": dict(zip(keys, cold, strict=True))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tar", default=TAR)
    parser.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results",
                                                      "tokenize.json"))
    args = parser.parse_args()
    from streamtopic.corpus import _strip_header_block
    from streamtopic.vocabulary import Tokenizer

    result: dict[str, Any] = {"machine": machine_info(), "rounds": args.rounds,
                              "tokenizer": Tokenizer().config()}
    messages = load_messages(args.tar)
    bodies = [_strip_header_block(m, True) for m in messages]
    tokenizer = Tokenizer()
    log("whole messages ...")
    result["whole_messages"] = compare(messages, tokenizer, args.rounds)
    log("bodies (headers stripped as the files reader does) ...")
    result["bodies"] = compare(bodies, tokenizer, args.rounds)
    result["kernel_path_parts_s"] = where_time_goes(messages, tokenizer, args.rounds)
    result["json_lines"] = json_lines(messages, tokenizer, args.rounds)
    result["first_call"] = first_call()
    result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(write_result(result, args.out))


if __name__ == "__main__":
    main()
