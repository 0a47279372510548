"""Large raw-text corpora built from 20 Newsgroups, for ``rawtext_scale.py``.

* **Long documents** (``longdocs``): the bydate training messages, their mail headers dropped
  (the Subject's text kept, as streamtopic's one-document-per-file reader does), grouped by
  newsgroup and thread (the Subject without "Re:"), concatenated into documents of 2,000 to
  50,000 whitespace words (log-normal lengths, median 4,400: the held-out technical corpus of
  issue 24), in a thread order shuffled per repetition, repeated until ``--words`` words, as
  one ``train.jsonl.gz`` (fields ``id``, ``group``, ``text``). The test messages, built the
  same way once, are ``test.jsonl.gz``: the held-out documents.
* **Repeated messages** (``repeated``): all 18,846 messages (train and test) as they are, one
  file each, in an uncompressed tar per copy (``copy-0000.tar`` ...), the member order shuffled
  per copy, until ``--words`` words.

Deterministic under ``--seed``; rebuilt only when its recorded parameters change.

Usage::

    python benchmarks/rawtext_corpora.py longdocs DIR [--words 60000000] [--seed 0]
    python benchmarks/rawtext_corpora.py repeated DIR [--words 300000000] [--seed 0]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import sys
import tarfile
from collections import defaultdict
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))
NEWS_ARCHIVE = os.environ.get(
    "STREAMTOPIC_NEWS_ARCHIVE", os.path.join(SHARED, "20newsgroups", "20news-bydate.tar.gz"))

MIN_WORDS, MAX_WORDS, MEDIAN_WORDS, SIGMA = 2_000, 50_000, 4_400, 0.8
_FIELD = re.compile(rb"^[!-9;-~]+:")
_RE = re.compile(r"^(?:\s*re\s*:\s*)+", re.I)


def messages(split: str) -> list[tuple[str, str, bytes]]:
    """(group, file name, raw bytes) of every message of ``split`` (train or test), in
    archive order."""
    out = []
    with tarfile.open(NEWS_ARCHIVE, "r:gz") as tf:
        for m in tf:
            parts = m.name.split("/")
            if m.isfile() and len(parts) == 3 and parts[0] == f"20news-bydate-{split}":
                fh = tf.extractfile(m)
                assert fh is not None
                out.append((parts[1], parts[2], fh.read()))
    return out


def body_and_subject(raw: bytes) -> tuple[str, str]:
    """The message's body and its thread (Subject without "Re:"), headers dropped."""
    head, sep, body = raw.partition(b"\n\n")
    if not sep or not all(_FIELD.match(x) or x[:1] in (b" ", b"\t") for x in head.split(b"\n")):
        return raw.decode("utf-8", "replace"), ""
    subject = ""
    for line in head.split(b"\n"):
        if line.lower().startswith(b"subject:"):
            subject = line[8:].decode("utf-8", "replace").strip()
    thread = _RE.sub("", subject).strip().lower()
    return (subject + "\n" + body.decode("utf-8", "replace")), thread


def _lengths(rng: np.random.Generator) -> int:
    x = float(np.exp(rng.normal(np.log(MEDIAN_WORDS), SIGMA)))
    return int(min(MAX_WORDS, max(MIN_WORDS, x)))


def long_documents(msgs: list[tuple[str, str, bytes]], rng: np.random.Generator
                   ) -> list[tuple[str, str, int]]:
    """(group, text, words) of documents made of whole threads of one newsgroup, shuffled."""
    threads: dict[str, dict[str, list[tuple[str, int]]]] = defaultdict(dict)
    for group, _, raw in msgs:
        text, thread = body_and_subject(raw)
        threads[group].setdefault(thread or f"#{len(threads[group])}", []).append(
            (text, len(text.split())))
    docs: list[tuple[str, str, int]] = []
    for group in sorted(threads):
        items = list(threads[group].values())
        order = rng.permutation(len(items))
        target, texts, words = _lengths(rng), [], 0
        for t in order:
            for text, n in items[t]:
                if words >= MIN_WORDS and words + n > MAX_WORDS:
                    docs.append((group, "\n\n".join(texts), words))
                    target, texts, words = _lengths(rng), [], 0
                texts.append(text)
                words += n
                if words >= target:
                    docs.append((group, "\n\n".join(texts), words))
                    target, texts, words = _lengths(rng), [], 0
        if texts:
            if words < MIN_WORDS and docs and docs[-1][0] == group:
                g, prev, n = docs.pop()
                docs.append((g, prev + "\n\n" + "\n\n".join(texts), n + words))
            else:
                docs.append((group, "\n\n".join(texts), words))
    return [docs[i] for i in rng.permutation(len(docs))]


def _write_jsonl(path: str, docs: list[tuple[str, str, int]], start: int, fh: Any) -> int:
    for i, (group, text, _) in enumerate(docs):
        fh.write(json.dumps({"id": f"{path}:{start + i}", "group": group, "text": text})
                 .encode() + b"\n")
    return start + len(docs)


def build_longdocs(outdir: str, words: int, seed: int) -> dict[str, Any]:
    """``train.jsonl.gz`` (at least ``words`` words) and ``test.jsonl.gz``; returns counts."""
    params = {"kind": "longdocs", "words": words, "seed": seed, "v": 1}
    done = _done(outdir, params)
    if done is not None:
        return done
    os.makedirs(outdir, exist_ok=True)
    train_msgs = messages("train")
    stats: dict[str, Any] = {"params": params}
    path = os.path.join(outdir, "train.jsonl.gz")
    total, ndocs, rep, lens = 0, 0, 0, []
    with open(path + ".partial", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb",
                                                              compresslevel=6, mtime=0) as gz:
        out = io.BufferedWriter(gz, 1 << 20)  # type: ignore[arg-type]
        while total < words:
            docs = long_documents(train_msgs, np.random.default_rng([seed, rep]))
            ndocs = _write_jsonl("train", docs, ndocs, out)
            total += sum(n for *_, n in docs)
            lens += [n for *_, n in docs]
            rep += 1
            print(f"longdocs: repetition {rep}, {total:,} words", file=sys.stderr)
        out.flush()
    os.replace(path + ".partial", path)
    stats["train"] = {"docs": ndocs, "words": total, "repetitions": rep,
                      "median_words": float(np.median(lens)), "max_words": int(max(lens)),
                      "bytes": os.path.getsize(path)}
    test = long_documents(messages("test"), np.random.default_rng([seed, 10**6]))
    tpath = os.path.join(outdir, "test.jsonl.gz")
    with gzip.open(tpath + ".partial", "wb", compresslevel=6) as fh:
        _write_jsonl("test", test, 0, fh)
    os.replace(tpath + ".partial", tpath)
    stats["test"] = {"docs": len(test), "words": sum(n for *_, n in test)}
    return _finish(outdir, stats)


def build_repeated(outdir: str, words: int, seed: int) -> dict[str, Any]:
    """Uncompressed tars of every message, member order shuffled per copy, until ``words``."""
    params = {"kind": "repeated", "words": words, "seed": seed, "v": 1}
    done = _done(outdir, params)
    if done is not None:
        return done
    os.makedirs(outdir, exist_ok=True)
    msgs = messages("train") + messages("test")
    per_copy = sum(len(raw.split()) for *_, raw in msgs)
    copies = -(-words // per_copy)
    for c in range(copies):
        path = os.path.join(outdir, f"copy-{c:04d}.tar")
        order = np.random.default_rng([seed, c]).permutation(len(msgs))
        with tarfile.open(path + ".partial", "w", format=tarfile.GNU_FORMAT) as tf:
            for i in order:
                group, name, raw = msgs[i]
                info = tarfile.TarInfo(f"copy-{c:04d}/{group}/{name}")
                info.size, info.mtime, info.mode = len(raw), 0, 0o644
                tf.addfile(info, io.BytesIO(raw))
        os.replace(path + ".partial", path)
    stats = {"params": params, "copies": copies, "messages_per_copy": len(msgs),
             "words": copies * per_copy, "docs": copies * len(msgs),
             "bytes": sum(os.path.getsize(os.path.join(outdir, f"copy-{c:04d}.tar"))
                          for c in range(copies))}
    return _finish(outdir, stats)


def _done(outdir: str, params: dict[str, Any]) -> dict[str, Any] | None:
    path = os.path.join(outdir, "corpus.json")
    if os.path.exists(path):
        with open(path) as fh:
            stats: dict[str, Any] = json.load(fh)
        if stats.get("params") == params:
            return stats
    return None


def _finish(outdir: str, stats: dict[str, Any]) -> dict[str, Any]:
    with open(os.path.join(outdir, "corpus.json"), "w") as fh:
        json.dump(stats, fh, indent=2)
    return stats


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=("longdocs", "repeated"))
    ap.add_argument("outdir")
    ap.add_argument("--words", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.kind == "longdocs":
        stats = build_longdocs(a.outdir, a.words or 60_000_000, a.seed)
    else:
        stats = build_repeated(a.outdir, a.words or 300_000_000, a.seed)
    print(json.dumps(stats, indent=2))
    return stats


if __name__ == "__main__":
    main()
