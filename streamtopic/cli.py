"""The ``streamtopic`` command line.

Options that several commands share are declared once, as groups: where the work runs
(:data:`_scheduler_options`), how input files are read (:data:`_reader_options`: ``convert``,
``split``) and how raw input becomes a store (:data:`_ingest_options`: ``ingest`` and
``fit``). Each group reaches its command as one object (:class:`_Scheduler`,
:class:`_Reader`, :class:`_Ingest`), so an option has the same name, meaning and help on every
command. The commands call the library (``fit``: the estimator, ``evaluate``:
:func:`streamtopic.evaluation.evaluate`) and format what it returns.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import logging
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import click

from .cluster import SCHEDULER_ENV
from .cluster import scheduler as scheduler_context
from .corpus import FORMATS, CorpusError, bundled_corpus, detect_format
from .store import StoreError

__all__ = ["main", "run"]


def _grouped(name: str, cls: type, options: Sequence[Callable[..., Any]]) -> Callable[..., Any]:
    """A decorator that adds ``options`` to a command and hands their values to it as one
    ``cls`` object (a dataclass whose fields are the options' names), keyword ``name``."""
    names = [f.name for f in dataclasses.fields(cls)]

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            kwargs[name] = cls(**{k: kwargs.pop(k) for k in names})
            return f(*args, **kwargs)

        for option in reversed(options):
            command = option(command)
        return command

    return decorate


@dataclass(frozen=True)
class _Scheduler:
    """Where a command's Dask work runs (:func:`streamtopic.cluster.scheduler`)."""

    scheduler_address: str | None
    scheduler_file: str | None
    n_workers: int | None
    local_mode: str
    quiet: bool
    performance_report: str | None

    def __call__(self, numeric: bool) -> Any:
        """The scheduler's context for work that is numerical (threads suffice) or not."""
        return scheduler_context(
            self.scheduler_address, self.scheduler_file, n_workers=self.n_workers,
            local=self.local_mode, numeric=numeric, quiet=self.quiet,
            performance_report=self.performance_report,
        )

    def light(self, inputs: Sequence[str], fmt: str) -> bool:
        """Whether ``inputs`` are read on threads: under ``--local auto``, numerical inputs,
        or little text (``SMALL_INGEST_BYTES``) unless ``--workers`` asks for worker
        processes."""
        if self.chosen:
            return False
        if _numeric_inputs(inputs, fmt):
            return True
        return self.n_workers is None and _little_text(inputs, fmt)

    @property
    def chosen(self) -> bool:
        """Whether the user chose the scheduler (named one, or a local kind), so that every
        stage runs on it."""
        named = self.scheduler_address or self.scheduler_file or os.environ.get(SCHEDULER_ENV)
        return bool(named) or self.local_mode != "auto"


_scheduler_options = _grouped("sched", _Scheduler, [
    click.option(
        "--scheduler", "scheduler_address", metavar="ADDRESS", default=None,
        help="Address of a running Dask scheduler (else $STREAMTOPIC_SCHEDULER, else local).",
    ),
    click.option(
        "--scheduler-file", type=click.Path(dir_okay=False), default=None,
        help="Scheduler file written by 'dask scheduler --scheduler-file'.",
    ),
    click.option(
        "--workers", "n_workers", type=click.IntRange(min=1), default=None,
        help="Worker processes of the local cluster (default: one per core).",
    ),
    click.option(
        "--local", "local_mode",
        type=click.Choice(["auto", "cluster", "inproc", "threads", "sync"]),
        default="auto", show_default=True,
        help="What runs when no scheduler is named: 'auto' uses threads for numerical inputs "
             "(UCI, HDF5, stores) and text below 256 MiB, and a local cluster of processes "
             "(with dashboard) for more text.",
    ),
    click.option("--quiet", "-q", is_flag=True, help="No progress bars or dashboard link."),
    click.option(
        "--performance-report", type=click.Path(dir_okay=False), default=None,
        help="Write Dask's standalone HTML performance report of the run to this file.",
    ),
])

_strip_headers_option = click.option(
    "--strip-headers/--keep-headers", default=True, show_default=True,
    help="One document per file (directories, tar archives): drop each document's leading "
         "mail/news header block (everything before the first empty line, if each line of "
         "it is a header field), keeping the Subject's text. --keep-headers reads files "
         "whole. (evaluate: for --corpus and --heldout; the recorded training inputs are "
         "read as they were ingested.)",
)

_stop_words_option = click.option(
    "--stop-words", default=None, metavar="english|none|FILE",
    help="Stop words removed from text input: 'english' (scikit-learn's list, the default "
         "for a new store), 'none', or a file with one word per line. Without it, an "
         "existing store keeps its own (evaluate: as the model's store was built). UCI and "
         "HDF5 input is not tokenised. fit: also words left out of the model's vocabulary "
         "at fit time (documents keep their lengths).",
)


@dataclass(frozen=True)
class _Reader:
    """How a command reads its input files (:func:`streamtopic.corpus.read_corpus`)."""

    fmt: str
    vocab: str | None
    stop_words: str | None
    text_field: str
    strip_headers: bool
    max_line_bytes: int | None

    def read(self, inputs: Sequence[str]) -> Any:
        from .corpus import read_corpus
        from .vocabulary import Tokenizer

        return read_corpus(list(inputs), format=self.fmt, vocab=self.vocab,
                           text_field=self.text_field,
                           tokenizer=Tokenizer(stop_words=self.stop_words),
                           strip_headers=self.strip_headers,
                           max_line_bytes=self.max_line_bytes)


_READER_OPTIONS = [
    click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto",
                 show_default=True, help="Reader of the inputs (see the README's 'Inputs')."),
    click.option("--vocab", type=click.Path(dir_okay=False), default=None,
                 help="Vocabulary file, one term per line: the UCI vocabulary if none lies "
                      "beside the docword file; for ingest and fit also the fixed vocabulary "
                      "of a new store."),
    _stop_words_option,
    click.option("--text-field", default="text", show_default=True,
                 help="JSON Lines text field."),
    _strip_headers_option,
    click.option("--max-line-bytes", type=click.IntRange(min=1), default=None,
                 envvar="STREAMTOPIC_MAX_LINE_BYTES", show_envvar=True,
                 help="The longest line (text, JSON Lines, UCI) or document (a file, an "
                      "archive member) read, in decompressed bytes; a longer one is refused. "
                      "Default 64 MiB."),
]

_reader_options = _grouped("reader", _Reader, _READER_OPTIONS)


@dataclass(frozen=True)
class _Ingest(_Reader):
    """How ``ingest`` and ``fit`` read raw input and build a store
    (:func:`streamtopic.cooccurrence.ingest`)."""

    min_df: int | None
    max_df: float | None
    keep_n: int | None
    blocksize: int | None
    chunk_size: int | None
    max_doc_tokens: int | None

    def ingest(self, inputs: Sequence[str], store: str, *, skip_existing: bool,
               progress: bool, grow: bool = False, memory_budget: int | None = None) -> Any:
        """Ingest ``inputs`` into ``store`` (``streamtopic ingest``) within ``memory_budget``
        bytes (None: the automatic budget)."""
        from .cooccurrence import ingest

        return ingest(
            list(inputs), store, format=self.fmt, vocab=self.vocab, min_df=self.min_df,
            max_df=self.max_df, keep_n="default" if self.keep_n is None else self.keep_n,
            stop_words=self.stop_words, text_field=self.text_field,
            skip_existing=skip_existing, blocksize=self.blocksize, chunk_size=self.chunk_size,
            progress=progress, strip_headers=self.strip_headers, grow=grow,
            max_doc_tokens=self.max_doc_tokens, max_line_bytes=self.max_line_bytes,
            memory_budget=memory_budget,
        )


_ingest_options = _grouped("reader", _Ingest, [
    *_READER_OPTIONS,
    click.option("--min-df", type=click.IntRange(min=1), default=None,
                 help="Keep terms in at least N documents (a new store's vocabulary; "
                      "default 5). fit: also the model's words, chosen among the store's "
                      "at fit time without reading the corpus again."),
    click.option("--max-df", type=float, default=None,
                 help="Keep terms in at most this fraction of documents (a new store's "
                      "vocabulary; default 0.5). fit: also at fit time, as --min-df."),
    click.option("--keep-n", type=click.IntRange(min=1), default=None,
                 help="Keep the N terms of highest document frequency (a new store's "
                      "vocabulary; default 100000). fit: also at fit time, as --min-df."),
    click.option("--blocksize", type=click.IntRange(min=1), default=None,
                 help="Bytes of input per partition (default: about 2 MiB; HDF5 16 MiB)."),
    click.option("--chunk-size", type=click.IntRange(min=1), default=None,
                 help="Rows/columns per zarr block of Q (new store; default min(V, 2048))."),
    click.option("--max-doc-tokens", type=click.IntRange(min=2), default=None, metavar="N",
                 help="Cut each text document into windows of N tokens (before stop words), "
                      "each counted as a document: a modelling choice for very long "
                      "documents (pairs of words far apart no longer co-occur), off by "
                      "default. A new store records it; more text for it is cut the same."),
])


def _auto_or_int(value: str | None, option: str, words: tuple[str, ...]) -> int | str | None:
    """A CLI value that is one of ``words`` or a non-negative integer (None: unset)."""
    if value is None or value in words:
        return value
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise click.BadParameter(f"{value!r}: expected {' or '.join(words)} or an integer >= 0",
                                 param_hint=option)
    return n


def _numeric_inputs(inputs: Sequence[str], fmt: str) -> bool:
    """Whether every input is numerical (UCI or HDF5): no tokenising, threads suffice."""
    from .corpus import expand_inputs

    try:
        return all(f in ("uci", "hdf5") for _, f in expand_inputs(list(inputs), fmt))
    except (CorpusError, OSError):
        return False  # the ingest itself reports the error


#: ``infer`` reads text below this many (decompressed) bytes on threads in its own process
#: under ``--local auto``: about 3 s of one core's work, which a local cluster of worker
#: processes takes to start and load the model (measured: 20 Newsgroups, 36 MB, 2.6 s in the
#: process against 3.5 s on two worker processes).
SMALL_TEXT_BYTES = 64 * 2**20

#: ``ingest``, ``update`` and ``fit`` read text below this many bytes (on disk) on threads in
#: their own process under ``--local auto``: a local cluster of worker processes takes 2 to
#: 3 s to start and stop and pickles every chunk it hands on, while the compiled tokenizer
#: and pair counting release the GIL, so threads tokenise in parallel too. Measured (``fit
#: -k 20`` of the 20 Newsgroups training messages as JSON Lines, repeated 1, 2, 4 and 8 times:
#: 21.8, 43.6, 87 and 174 MiB; medians of 3 in turns on 2 CPUs, quiet): threads 6.9, 10.4,
#: 18.8 and 33.3 s against 9.7, 13.3, 22.8 and 38.0 s on the process cluster, with 15-30%
#: less CPU. Above 256 MiB (a run of a minute or more, unmeasured here) the cluster stays, and
#: with it the dashboard. A 1% batch of 20 Newsgroups (113 documents) took 19 s on it.
SMALL_INGEST_BYTES = 256 * 2**20


def _little_text(inputs: Sequence[str], fmt: str) -> bool:
    """Whether ``inputs`` hold less than ``SMALL_INGEST_BYTES`` on disk."""
    from .corpus import expand_inputs

    try:
        size = sum(os.path.getsize(path) for path, _ in expand_inputs(list(inputs), fmt))
    except (CorpusError, OSError):
        return False  # the ingest itself reports the error
    return size < SMALL_INGEST_BYTES


#: Errors of writing that an OS error may carry without a file name (a full disk, a quota, a
#: read-only file system, a file size limit): the message names what the command writes.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


def _writing(*paths: str | None) -> None:
    """Declare what the running command writes, for an OS error that names no file."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta["streamtopic.writes"] = [p for p in paths if p]


def _os_error_message(exc: OSError) -> str:
    """One line for an OS error: ``PATH: reason`` (``x.store/zarr.json: Permission denied``).

    An error of writing that names no file (zarr raises a full disk so) names the paths the
    command declared it writes (:func:`_writing`)."""
    paths = [os.fsdecode(p) for p in (exc.filename, exc.filename2) if p is not None]
    if exc.strerror is None:  # raised with a message of its own (numpy's short write)
        ctx = click.get_current_context(silent=True)
        declared = list(ctx.meta.get("streamtopic.writes", [])) if ctx is not None else []
        short = " (a short write: is the disk full?)" if "written" in str(exc) else ""
        where = ", ".join(paths or declared)
        return f"{where}: {exc}{short}" if where else f"{exc}{short}"
    if not paths and exc.errno in _WRITE_ERRNOS:
        ctx = click.get_current_context(silent=True)
        paths = list(ctx.meta.get("streamtopic.writes", [])) if ctx is not None else []
    return f"{', '.join(paths)}: {exc.strerror}" if paths else exc.strerror


#: Control characters (C0 but tab and newline, DEL, C1): a word or a path holding them
#: could retitle, recolour or rewrite the user's terminal
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with its control characters written as ``\\xNN`` escapes: what the command
    line prints of words, paths and messages, which may come from anyone's files."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _echo(message: str = "", *, err: bool = False) -> None:
    """``click.echo`` of :func:`printable` text."""
    click.echo(printable(message), err=err)


class _PrintableFormatter(logging.Formatter):
    """Log records as :func:`printable` text (a warning may quote a path or a word)."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


def _reader_gone() -> NoReturn:
    """Stop quietly because the reader of the output has gone (``streamtopic info | head -1``),
    as Unix tools do: no message, and the exit status of a process ended by SIGPIPE (141).
    Standard output goes to the null device, so that the flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (a test runner's stream)
        pass
    raise SystemExit(128 + signal.SIGPIPE)


def _errors(f: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the library's errors and OS errors (permission denied, a full disk, a read-only
    file system, ...) into clear one-line messages that name the path, and exit status 1;
    a closed output pipe ends the command quietly (:func:`_reader_gone`)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except BrokenPipeError:
            _reader_gone()
        except click.ClickException as exc:
            exc.message = printable(exc.message)  # type: ignore[misc]
            raise
        except (CorpusError, StoreError, ValueError, ConnectionError, TypeError) as exc:
            raise click.ClickException(printable(str(exc))) from None
        except OSError as exc:
            raise click.ClickException(printable(_os_error_message(exc))) from None

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="streamtopic")
@click.option("-v", "--verbose", is_flag=True, help="Log each stage's time and task count.")
def main(verbose: bool) -> None:
    """Out-of-core anchor-word topic models on Dask and zarr."""
    handler = logging.StreamHandler()
    handler.setFormatter(_PrintableFormatter("%(asctime)s %(name)s %(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        handlers=[handler])


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--store", "-s", "store_path", required=True, type=click.Path(),
              help="Store directory.")
@click.option("--skip-existing", is_flag=True, help="Skip inputs already in the store.")
@click.option("--grow-vocab", is_flag=True,
              help="Add words the store has never read (and that pass its pruning on these "
                   "inputs) to its vocabulary, with exact rows. Words it read before and did "
                   "not keep stay out.")
@click.option("--memory-budget", type=click.IntRange(min=1), default=None, metavar="MiB",
              help="Memory the ingest may hold: the text kept between its passes (else "
                   "spilled to scratch) and the running sums of Q (else counted in bands). "
                   "[default: half the available memory, or of the smallest worker's memory "
                   "limit on a cluster]")
@_ingest_options
@_scheduler_options
@_errors
def ingest(inputs: tuple[str, ...], store_path: str, skip_existing: bool, grow_vocab: bool,
           memory_budget: int | None, reader: _Ingest, sched: _Scheduler) -> None:
    """Add INPUTS to the co-occurrence store (created if missing).

    INPUTS are files, globs or directories: UCI docword files, plain text (one document per
    line), directory trees or tar archives (one document per file), JSON Lines or HDF5.

    Text is tokenised for topic models: lowercased words of 2 to 15 letters (numbers and
    letter-digit mixtures give no token), English stop words removed, and e-mail addresses,
    URLs, reply attribution lines and lines of encoded binary (uuencode, base64) dropped. A
    new store records these settings; an existing store reads new input as it was built.
    """
    _writing(store_path)
    with sched(numeric=sched.light(inputs, reader.fmt)):
        report = reader.ingest(inputs, store_path, skip_existing=skip_existing,
                               progress=not sched.quiet, grow=grow_vocab,
                               memory_budget=None if memory_budget is None
                               else memory_budget * 2**20)
    _echo(report.summary())


@main.command()
@click.argument("store_path", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_errors
def info(store_path: str, as_json: bool) -> None:
    """Describe a co-occurrence store: V, documents, tokens, density, size, sources."""
    from .store import CooccurrenceStore
    from .workspace import cache_bytes, cache_entries

    summary = CooccurrenceStore.open(store_path).info()
    summary["cache_bytes"] = cache_bytes(store_path)
    n_cached = len(cache_entries(store_path))
    if as_json:
        _echo(json.dumps(summary, indent=2))
        _fail_if_missing(summary)
        return
    rows = [
        ("store", summary["path"]),
        ("version", summary["version"]),
        ("vocabulary (V)", f"{summary['V']:,}"),
        ("documents", f"{summary['n_docs']:,}"),
        ("tokens", f"{summary['n_tokens']:,}"),
        ("skipped documents", f"{summary['n_skipped_docs']:,}"),
        ("out-of-vocabulary tokens", f"{summary['n_oov_tokens']:,}"),
        ("replaced bytes", f"{summary['n_replaced_bytes']:,}"),
        ("nonzeros of Q", f"{summary['nnz']:,}"),
        ("density", f"{summary['density']:.4f}"),
        ("blocks stored", f"{summary['blocks_stored']} of {summary['blocks_total']} "
                          f"({summary['chunk_size']}×{summary['chunk_size']})"),
        ("size on disk", _human(summary["bytes_on_disk"])),
        ("token cache", (f"{summary['token_cache']['n_docs']:,} text documents, "
                         f"{summary['token_cache']['nnz']:,} (document, word) pairs, "
                         f"{_human(summary['token_cache']['bytes'])}")),
        ("rectified cache", (f"{_human(summary['cache_bytes'])} in {n_cached} "
                             f"array{'' if n_cached == 1 else 's'} (clear-cache frees it)")),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        _echo(f"{k:<{width}}  {v}")
    _echo("sources:")
    for s in summary["sources"]:
        _echo(
            f"  v{s['version']}  {s['path']}  [{s['format']}]  {s['n_docs']:,} docs, "
            f"{s['n_tokens']:,} tokens, sha256 {s['sha256'][:12]}"
        )
    _fail_if_missing(summary)


def _fail_if_missing(summary: dict[str, Any]) -> None:
    """Exit 1, after the summary, when blocks the store recorded are gone, or a chunk or an
    array fails its checksum or digest
    (:meth:`~streamtopic.store.CooccurrenceStore.check_chunks`)."""
    missing = summary["missing_blocks"]
    if missing:
        i, j, v = missing[0]
        raise click.ClickException(
            f"{summary['path']}: damaged: {len(missing)} block(s) of Q recorded with non-zeros "
            f"are missing (first: block ({i}, {j}) of version {v}); run `streamtopic verify`"
        )
    problems = summary.get("problems", [])
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise click.ClickException(f"{summary['path']}: damaged: {problems[0]}{more}; run "
                                   "`streamtopic verify`")


@main.command()
@click.argument("store_path", type=click.Path())
@click.option("--inputs", "check_inputs", is_flag=True,
              help="Also check that every recorded input exists with its recorded content.")
@_errors
def verify(store_path: str, check_inputs: bool) -> None:
    """Check a co-occurrence store for damage: read and checksum every stored block of Q,
    compare its non-zeros with the store's record, check the counts, that Q sums to the
    document count, and the manifest's digest. Exits 1 if anything is wrong."""
    from .corpus import input_problems
    from .store import CooccurrenceStore

    with CooccurrenceStore.open(store_path) as store:
        problems = store.verify()
        if check_inputs:
            problems += input_problems(store)
        blocks = int((store.block_versions > 0).sum())
        what = f"{store.path} (version {store.version}, {blocks} stored blocks)"
    if not problems:
        _echo(f"ok: {what}")
        return
    _echo(f"damaged: {what}")
    for p in problems:
        _echo(f"  {p}")
    raise SystemExit(1)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)  # pragma: no cover


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
              help="HDF5 file to write.")
@_reader_options
@_scheduler_options
@_errors
def convert(inputs: tuple[str, ...], output: str, reader: _Reader, sched: _Scheduler) -> None:
    """Write any readable corpus into streamtopic's HDF5 CSR form (streaming)."""
    from .corpus import convert as do_convert

    if os.path.exists(output):
        raise click.ClickException(f"{output}: already exists")
    _writing(output)
    corpus = reader.read(inputs)
    with sched(numeric=_numeric_inputs(inputs, reader.fmt)):
        out = do_convert(corpus, output, progress=not sched.quiet)
    _echo(
        f"{output}: {out['n_docs']:,} documents, {out['n_tokens']:,} tokens, "
        f"V = {out['vocab_size']:,}"
    )


@main.command()
@click.argument("model_path", type=click.Path())
@click.argument("inputs", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Where the updated model is written [default: MODEL itself, replaced "
                   "only when the update succeeds].")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto",
              show_default=True, help="Reader of the inputs (see the README's 'Inputs').")
@click.option("--text-field", default="text", show_default=True, help="JSON Lines text field.")
@click.option("--new-topics", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N", help="Let N new topics in (K grows by N): the model's anchors are "
                                "kept first and N more are found with them projected out.")
@_scheduler_options
@_errors
def update(model_path: str, inputs: tuple[str, ...], output: str | None, fmt: str,
           text_field: str, new_topics: int, sched: _Scheduler) -> None:
    """Update the fitted MODEL with new INPUTS, at the cost of the new data.

    The inputs are ingested into the store MODEL was fitted on (as a new version; inputs
    already in it are skipped), the spectral stages run on the new Q, and EM continues
    MODEL's topics over the new documents with the old documents' counts held fixed: topic
    k stays topic k. Prints each topic's drift (Jensen-Shannon distance to its previous
    version), its prevalence before and after, and whether it is retired.
    """
    from .updating import update as do_update

    out = output or model_path
    _writing(out)
    with sched(numeric=sched.light(inputs, fmt)):
        result = do_update(model_path, list(inputs), output=out, progress=not sched.quiet,
                           new_topics=new_topics, format=fmt, text_field=text_field)
    for line in result.summary():
        _echo(line)


@main.command()
@click.argument("model_path", type=click.Path())
@click.argument("inputs", nargs=-1)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the timeline to a file instead of printing it: CSV (.csv) or "
                   "Parquet (.parquet, .pq; pip install 'streamtopic[parquet]').")
@click.option("--time-field", default=None, metavar="FIELD",
              help="Slice by time instead of by store version: the JSON Lines field FIELD, "
                   "the HDF5 dataset FIELD (one value per row), or for one document per "
                   "file 'mtime' (the file's modification time) or a header name such as "
                   "'Date'. Values: a year, Unix time, ISO 8601 or an e-mail date. Reads "
                   "INPUTS, or the inputs MODEL's store records.")
@click.option("--by", type=click.Choice(["auto", "year", "month", "day"]), default="auto",
              show_default=True,
              help="With --time-field: the calendar unit of a slice (auto: years when the "
                   "documents span at least 5, else months, else days).")
@click.option("--slices", "n_slices", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --time-field: N slices of about equal numbers of documents "
                   "instead of calendar units.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto",
              show_default=True, help="Reader of INPUTS.")
@click.option("--text-field", default="text", show_default=True,
              help="JSON Lines text field of INPUTS.")
@click.option("--words", "words_topic", type=click.IntRange(min=0), default=None,
              metavar="TOPIC",
              help="Instead of the prevalence: the top words of TOPIC in each slice (store "
                   "version, or span of time with --time-field), its anchor fixed and the "
                   "recovery run on the slice's part of Q.")
@click.option("--all-topics", is_flag=True,
              help="With --words: every topic's top words (the TOPIC given is ignored).")
@click.option("--top-words", type=click.IntRange(min=1), default=10, show_default=True,
              help="With --words: words per topic and slice.")
@_errors
def timeline(model_path: str, inputs: tuple[str, ...], output: str | None,
             time_field: str | None, by: str, n_slices: int | None, fmt: str,
             text_field: str, words_topic: int | None, all_topics: bool,
             top_words: int) -> None:
    """Each topic's prevalence per slice of MODEL's corpus, with the topics fixed.

    The slices are the versions of MODEL's store (the documents each ingest added), or with
    --time-field spans of time (calendar years, months or days, or --slices N of equal
    documents) of INPUTS' documents, or of the inputs the store records. Each document's
    topic proportions are inferred and weighted by its length: a topic's prevalence in a
    slice is the share of the slice's tokens it explains.

    With --words, the top words of a topic in each slice instead.
    """
    from .model import AnchorTopicModel
    from .timeline import output_format, write_timeline
    from .timeline import timeline as slices_of

    if output is not None:
        output_format(output)
        _writing(output)
    if inputs and time_field is None:
        raise click.UsageError("INPUTS are read for --time-field only (without it, the "
                               "slices are the store's versions)")
    if time_field is None and (n_slices is not None or by != "auto"):
        raise click.UsageError("--by and --slices slice by time: give --time-field")
    model = AnchorTopicModel.load(model_path)
    if words_topic is not None or all_topics:
        _timeline_words(model, output, words_topic, all_topics, top_words,
                        inputs=list(inputs) or None, time_field=time_field, by=by,
                        n_slices=n_slices, format=fmt, text_field=text_field)
        return
    slices = slices_of(model, list(inputs) or None, time_field=time_field, by=by,
                       n_slices=n_slices, format=fmt, text_field=text_field)
    if output is not None:
        write_timeline(slices, output)
        _echo(f"{output}: {len(slices)} slices")
        return
    K = slices[0].prevalence.size
    labels = [s.label if time_field is not None else str(s.version) for s in slices]
    width = max(7, *map(len, labels))
    name = "slice" if time_field is not None else "version"
    _echo(f"{name:>{width}}  documents     tokens  " + " ".join(f"{k:>6d}" for k in range(K)))
    for label, s in zip(labels, slices, strict=True):
        _echo(f"{label:>{width}}  {s.n_docs:9,d}  {s.n_tokens:9,d}  "
              + " ".join(f"{x:6.3f}" for x in s.prevalence))


def _timeline_words(model: Any, output: str | None, topic: int | None, all_topics: bool,
                    top_words: int, **slicing: Any) -> None:
    """``timeline --words``: the top words of a topic (or of all) per slice."""
    from .timeline import slice_topics, write_words

    K = int(model.n_topics)
    if topic is not None and not all_topics and topic >= K:
        raise click.BadParameter(f"{topic}: the model has topics 0 to {K - 1}",
                                 param_hint="--words")
    topics = list(range(K)) if all_topics else [int(topic or 0)]
    words = [s.top(model.vocab_, top_words) for s in slice_topics(model, **slicing)]
    if output is not None:
        write_words(words, output, topics)
        _echo(f"{output}: top {top_words} words of {len(topics)} topic(s) in "
              f"{len(words)} slices")
        return
    width = max((len(s.label) for s in words), default=0)
    for k in topics:
        _echo(f"topic {k} (anchor {model.anchor_words_[k]})")
        for s in words:
            shown = " ".join(w for w in s.words[k] if w) or "(its anchor word is absent)"
            _echo(f"  {s.label:>{width}}  prevalence {s.prevalence[k]:.3f}  {shown}")


@dataclass(frozen=True)
class _Estimator:
    """The ``fit`` options that set the estimator's parameters."""

    n_topics: int | None
    method: str
    recover: str | None
    rectify: str | None
    rectify_iters: int
    anchor_method: str | None
    topic_topic: str | None
    memory_budget: int | None  # MiB
    refine_passes: str | None
    core_size: str | None
    sketch_dim: int
    anchor_min_df: int | None
    exact_anchors: bool  # the hidden --exact-anchors: --anchors exact
    no_cleanup: bool
    anchor_words: str | None  # issue 27: named anchors, a file
    exclude_words: str | None  # issue 27: comma-separated words
    tandem: str
    seed: int

    def params(self, scratch_dir: str) -> dict[str, Any]:
        """The estimator's parameters (:class:`~streamtopic.model.AnchorTopicModel`)."""
        anchor_method = self.anchor_method
        if self.exact_anchors:
            if anchor_method == "qr":
                raise click.UsageError("--exact-anchors is --anchors exact; it cannot go with "
                                       "--anchors qr")
            anchor_method = "exact"
        return dict(
            n_topics=self.n_topics, method=self.method, recover=self.recover,
            rectify=self.rectify,
            rectify_iters=self.rectify_iters, anchor_method=anchor_method,
            topic_topic=self.topic_topic,
            memory_budget=None if self.memory_budget is None else self.memory_budget * 2**20,
            refine_passes=_auto_or_int(self.refine_passes, "--refine-passes", ("auto",)),
            core_size=_auto_or_int(self.core_size, "--core-size", ("auto", "all")),
            sketch_dim=self.sketch_dim, anchor_min_df=self.anchor_min_df,
            cleanup=not self.no_cleanup, seed=self.seed, scratch_dir=scratch_dir,
            anchor_words=self.anchor_words, tandem=self.tandem,
            exclude_words=None if self.exclude_words is None else [
                w for w in self.exclude_words.replace(",", " ").split() if w],
        )


_estimator_options = _grouped("params", _Estimator, [
    click.option("-k", "--n-topics", type=int, default=None,
                 help="Number of topics K (>= 2); required but with --from-model."),
    click.option(
        "--method", type=click.Choice(["rectified", "plain"]), default="rectified",
        show_default=True,
        help="rectified (best on real text): Q's block of the core vocabulary (the most "
             "frequent words: max(2000, 40 K), fewer if --memory-budget is small) rectified "
             "as in JSMF/RAW, exact QR anchors, active-set recovery, the anchor topic-topic "
             "formula, then EM over the corpus until it converges, which also gives every "
             "other word its row. plain: Arora et al. (2013) on the whole Q (sketch anchors, "
             "RecoverL2, no refinement). The options below override single stages."),
    click.option(
        "--recover", type=click.Choice(["l2", "kl", "original", "admm", "activeset"]),
        default=None,
        help="Recovery: RecoverL2 (FISTA), RecoverKL, the original Recover, or the L2 fit by "
             "ADMM or by an exact active-set method. [default: the method's: activeset, "
             "plain: l2]"),
    click.option(
        "--rectify", type=click.Choice(["none", "ap", "dr"]), default=None,
        help="Rectify Q first (JSMF/RAW): alternating projection or Douglas-Rachford. "
             "[default: the method's: ap, plain: none]"),
    click.option("--rectify-iters", type=click.IntRange(min=1), default=5, show_default=True,
                 help="Rectification iterations (the model's default, "
                      "streamtopic.spectral.RECTIFY_ITERS)."),
    click.option(
        "--anchors", "anchor_method", type=click.Choice(["sketch", "exact", "qr", "lp"]),
        default=None,
        help="Anchor finding: FastAnchorWords on a random projection of Q̄ or on its exact "
             "rows (small V only), exact pivoted QR, or linear programs testing each row "
             "against the convex hull of the others (lp; small V only). [default: the "
             "method's: qr, plain: sketch]"),
    click.option(
        "--topic-topic", type=click.Choice(["pinv", "anchor"]), default=None,
        help="Topic-topic matrix: A+ Q A+^T, or the anchor formula. [default: the method's: "
             "anchor, plain: pinv]"),
    click.option(
        "--memory-budget", type=click.IntRange(min=1), default=None, metavar="MiB",
        help="Memory the in-memory stages may use. [default: half the available memory, or "
             "of the smallest worker's memory limit on a cluster]"),
    click.option(
        "--refine-passes", default=None, metavar="auto|N",
        help="EM passes over the training corpus after the spectral fit: 'auto' (until the "
             "training likelihood converges) or a number (0: none). [default: the method's: "
             "auto, plain: 0]"),
    click.option(
        "--core-size", default=None, metavar="auto|all|N",
        help="Words the spectral stages work on, the most frequent: 'auto' (max(2000, 40 K), "
             "fewer if the memory budget is small), 'all', or a number. Only with "
             "refinement. [default: the method's: auto, plain: all]"),
    click.option("--sketch-dim", type=click.IntRange(min=1), default=1000, show_default=True,
                 help="Dimension of the random projection used to find anchors."),
    click.option("--anchor-min-df", type=click.IntRange(min=0), default=None,
                 help="Document frequency an anchor needs (default: 4 percent of the "
                      "documents, at most 400, at least 10)."),
    click.option("--exact-anchors", is_flag=True, hidden=True, help="--anchors exact."),
    click.option("--no-cleanup", is_flag=True, help="Skip FastAnchorWords' cleanup pass."),
    click.option(
        "--anchor-words", type=click.Path(exists=True, dir_okay=False), default=None,
        metavar="FILE",
        help="Named anchors: one topic per line (several words on a line: one tandem "
             "anchor). These topics come first, in order; the others are found with them "
             "projected out. Each word must be in the vocabulary and in at least "
             "--anchor-min-df documents (default 10)."),
    click.option(
        "--exclude-words", default=None, metavar="WORDS",
        help="Words (comma- or blank-separated) that may not be anchors and are not shown "
             "among the top words, e.g. 'writes,article'."),
    click.option(
        "--tandem", type=click.Choice(["harmonic", "mean", "min"]), default="mean",
        show_default=True,
        help="How a tandem anchor's row of the co-occurrence combines its words' rows."),
    click.option("--seed", type=int, default=0, show_default=True,
                 help="Seed of the random projection, the rectification and the refinement's "
                      "sample."),
])


@main.command()
@click.argument("source")
@click.option("-o", "--output", required=True, type=click.Path(), help="Model path to write.")
@_estimator_options
@click.option("--model-format", type=click.Choice(["zarr", "hdf5"]), default="zarr",
              show_default=True, help="Model file format.")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Top words printed per topic.")
@click.option("--store", "-s", "store_path", type=click.Path(), default=None,
              help="Store for raw input (default: OUTPUT.store); reused if it exists.")
@click.option("--scratch", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Directory for the fit's scratch files (shared by the workers on a "
                   "cluster); nothing but the rectified cache is written into the store. "
                   "[default: the directory of OUTPUT]")
@click.option("--input-format", type=click.Choice(FORMATS), default=None, hidden=True,
              help="--format.")
@click.option("--from-model", type=click.Path(exists=True), default=None, metavar="MODEL",
              help="Refit with MODEL's parameters, those given here changed (e.g. "
                   "--anchor-words): SOURCE is its store, read again without re-ingesting.")
@_ingest_options
@_scheduler_options
@_errors
def fit(source: str, output: str, model_format: str, top: int, store_path: str | None,
        scratch: str | None, input_format: str | None, from_model: str | None,
        params: _Estimator, reader: _Ingest, sched: _Scheduler) -> None:
    """Fit a topic model to SOURCE: a co-occurrence store, or raw input (ingested first
    with the options of ingest).

    --min-df, --max-df, --keep-n and --stop-words choose the model's vocabulary among the
    store's words, without reading the corpus again: the model equals one fitted on a
    store ingested with that pruning.

    Prints each topic's top words, its anchor word marked *like this*.
    """
    import time

    from .fitting import fit as fit_source
    from .store import CooccurrenceStore

    reader = _fit_reader(reader, input_format, source)
    store = None
    if not CooccurrenceStore.is_store(source):
        _check_raw_input(source)
        store = store_path or f"{output.rstrip('/')}.store"
    _writing(store, output)

    def stage(name: str, numeric: bool) -> Any:
        # tokenising much text wants the process cluster, little text (SMALL_INGEST_BYTES)
        # and the numerical stages threads (they release the GIL and share memory); a chosen
        # scheduler runs both
        light = name == "ingest" and sched.light([source], reader.fmt)
        return sched(numeric=numeric or light or (name == "fit" and not sched.chosen))

    t0 = time.perf_counter()
    chosen = params.params(scratch or os.path.dirname(os.path.abspath(output)))
    chosen = _from_model(from_model, chosen)  # issue 27: a refit with changed anchors
    # the vocabulary options also choose the model's words among the store's, at fit time
    # (a store that fit builds from raw input already has them: the selection keeps it all)
    model = fit_source(
        source, **chosen,
        store=store, format=reader.fmt, vocab=reader.vocab, min_df=reader.min_df,
        max_df=reader.max_df, keep_n=reader.keep_n, stop_words=reader.stop_words,
        text_field=reader.text_field, strip_headers=reader.strip_headers,
        blocksize=reader.blocksize, chunk_size=reader.chunk_size,
        max_doc_tokens=reader.max_doc_tokens, progress=not sched.quiet, scheduler=stage,
        on_ingest=lambda report: _echo(report.summary(), err=True))
    model.save(output, format=model_format)
    _echo_fit(model, output, time.perf_counter() - t0, top)


#: The estimator's parameters set by a ``fit`` option of another name.
_OPTION_OF = {"cleanup": "no_cleanup"}


def _from_model(path: str | None, chosen: dict[str, Any]) -> dict[str, Any]:
    """The estimator's parameters of ``fit``: ``chosen`` (the options'), or with
    ``--from-model`` the saved model's, changed by the options given on the command line
    (the scratch directory always the options')."""
    if path is None:
        if chosen["n_topics"] is None:
            raise click.UsageError("give the number of topics: -k K")
        return chosen
    from .model import AnchorTopicModel

    base = AnchorTopicModel.load(path).get_params()
    ctx = click.get_current_context()
    given = {k for k in chosen if ctx.get_parameter_source(_OPTION_OF.get(k, k))
             == click.core.ParameterSource.COMMANDLINE}
    return {k: chosen[k] if k in given or k == "scratch_dir" or k not in base else base[k]
            for k in chosen}


def _fit_reader(reader: _Ingest, input_format: str | None, source: str) -> _Ingest:
    """``fit``'s reader of raw input: ``--input-format`` (the old name) is ``--format``.
    ``--format`` on a store is refused: it named the model's format before
    ``--model-format``."""
    from .store import CooccurrenceStore

    if input_format is not None:
        return dataclasses.replace(reader, fmt=input_format)
    ctx = click.get_current_context()
    given = ctx.get_parameter_source("fmt") == click.core.ParameterSource.COMMANDLINE
    if given and CooccurrenceStore.is_store(source):
        raise click.UsageError("--format names the format of raw input, and SOURCE is a "
                               "store; the model's format is --model-format")
    if (given and reader.fmt == "hdf5" and os.path.isfile(source)
            and detect_format(source) != "hdf5"):
        raise click.UsageError(f"--format hdf5 reads SOURCE as an HDF5 corpus, and {source} "
                               "is not one; the model's file format is --model-format")
    return reader


def _echo_fit(model: Any, output: str, seconds: float, top: int) -> None:
    """``fit``'s report: the fit's figures and the rectification's on standard error, then
    the topics."""
    from .model import top_words_table

    diag = model.diagnostics_
    secs = ", ".join(f"{k} {v:.2f} s" for k, v in diag["seconds"].items())
    _echo(
        f"{output}: K = {model.n_topics}, V = {len(model.vocab_):,}, method = {model.method}; "
        f"{model.n_converged_:,}/{model.n_fitted_:,} word rows converged; "
        f"cleanup changed {diag['cleanup_changed']} anchors; {secs}; total {seconds:.2f} s",
        err=True,
    )
    chosen = diag.get("vocabulary")
    if chosen:
        shown = {k: (f"[{len(v)} words]" if isinstance(v, list) else v)
                 for k, v in chosen.items() if k in ("min_df", "max_df", "keep_n", "stop_words")}
        settings = ", ".join(f"{k} {v}" for k, v in shown.items() if v is not None)
        _echo(f"vocabulary chosen at fit time: {chosen['V']:,} of the store's "
                   f"{chosen['store_V']:,} words ({settings})", err=True)
    rect = diag.get("rectification")
    if rect and rect.get("reused"):
        _echo(f"rectified Q reused from {rect['path']}", err=True)
    elif rect:
        moved = " ".join(f"{m:.2e}" for m in rect["movement"])
        _echo(f"rectification ({rect['method']}, {rect['iterations']} iterations, "
                   f"{sum(rect['seconds']):.2f} s): relative movement per iteration {moved}",
                   err=True)
    alpha = model.alpha_
    _echo(f"Dirichlet prior of the topic proportions: alpha0 = {alpha.sum():.3g}, "
               f"alpha per topic {alpha.min():.3g} to {alpha.max():.3g}", err=True)
    for line in top_words_table(model, top):
        _echo(line)


def _check_raw_input(source: str) -> None:
    """Refuse a ``fit`` SOURCE that is no co-occurrence store but is no raw input either: a
    saved model, or a directory laid out like a store or a model that does not open. Read as
    text, their files would give a model of zarr metadata."""
    from .model import ModelError
    from .persistence import ARRAYS, is_model, load_model
    from .store import CooccurrenceStore, looks_like_store

    is_dir = os.path.isdir(source)
    maybe_model = is_dir or (os.path.isfile(source) and _hdf5_signature(source))
    if maybe_model and is_model(source):
        raise click.ClickException(
            f"{source}: is a saved topic model, not a co-occurrence store or a corpus"
        )
    arrays = [os.path.join(source, a, "zarr.json") for a in ARRAYS]
    if is_dir and any(os.path.isfile(a) for a in arrays):
        try:
            load_model(source)
        except ModelError as exc:
            raise click.ClickException(
                f"{source}: looks like a saved topic model but does not load, so it is not "
                f"read as raw input: {_reason(exc, source)}"
            ) from None
    if looks_like_store(source):
        try:
            CooccurrenceStore.open(source, lease=False)
        except StoreError as exc:
            raise click.ClickException(
                f"{source}: looks like a co-occurrence store but does not open, so it is not "
                f"read as raw input: {_reason(exc, source)}"
            ) from None


def _hdf5_signature(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(8) == b"\x89HDF\r\n\x1a\n"
    except OSError:
        return False


def _reason(exc: Exception, path: str) -> str:
    """An error's message without the path it starts with."""
    msg = str(exc)
    for p in (os.path.abspath(path), path):
        if msg.startswith(f"{p}: "):
            return msg[len(p) + 2:]
    return msg


@main.command()
@click.argument("model_path", type=click.Path())
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True)
@_errors
def topics(model_path: str, top: int) -> None:
    """Print each topic's top words, its anchor word marked *like this*."""
    from .model import AnchorTopicModel, top_words_table

    model = AnchorTopicModel.load(model_path)
    for line in top_words_table(model, top):
        _echo(line)


@main.command()
@click.argument("model_path", type=click.Path())
@click.argument("inputs", nargs=-1, required=True)
@click.option("--output", "-o", required=True, type=click.Path(),
              help="Where the topic proportions go: a zarr group, or a .csv or .parquet "
                   "file (by its ending, or --output-format).")
@click.option("--output-format", type=click.Choice(["auto", "zarr", "csv", "parquet"]),
              default="auto", show_default=True)
@_reader_options
@_scheduler_options
@_errors
def infer(model_path: str, inputs: tuple[str, ...], output: str, output_format: str,
          reader: _Reader, sched: _Scheduler) -> None:
    """Give every document of INPUTS its topic proportions under a model, streamed.

    One row per document, in the inputs' order, with its source, its position in it and
    its name (one-document-per-file inputs). Text is tokenised as the model's training text
    was (--stop-words replaces its stop words). The rows equal the model's transform of
    the same documents (:func:`streamtopic.inference.infer_corpus`)."""
    from .corpus import read_corpus
    from .inference import infer_corpus, model_tokenizer
    from .model import AnchorTopicModel

    _writing(output)
    model = AnchorTopicModel.load(model_path)
    tokenizer = model_tokenizer(model, reader.stop_words)
    corpus = read_corpus(list(inputs), format=reader.fmt, vocab=reader.vocab,
                         text_field=reader.text_field, tokenizer=tokenizer,
                         strip_headers=reader.strip_headers,
                         max_line_bytes=reader.max_line_bytes)
    # a small text corpus is read in this process: starting worker processes would cost
    # more than they save (SMALL_TEXT_BYTES)
    small = corpus.text_bytes() < SMALL_TEXT_BYTES
    with sched(numeric=small or _numeric_inputs(inputs, reader.fmt)):
        done = infer_corpus(model, corpus, output, format=output_format,
                            progress=not sched.quiet)
    _echo(f"{done.path}: {done.n_docs:,} documents, {done.n_tokens:,} tokens "
               f"({done.n_in_vocabulary:,} in the model's vocabulary) in {done.seconds:.2f} s "
               f"({done.n_tokens / max(done.seconds, 1e-9) / 1e6:.2f}M tokens/s)")


@main.command("report")
@click.argument("model_path", type=click.Path())
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
              help="The HTML file to write.")
@click.option("--top-words", type=click.IntRange(min=1), default=10, show_default=True,
              help="Words shown per topic.")
@click.option("--pyldavis", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Also write pyLDAvis' page of the model to FILE (pip install "
                   "'streamtopic[interop]').")
@click.option("--timeline", "with_timeline", is_flag=True,
              help="Also draw each topic's prevalence per store version (or per span of "
                   "time, with --time-field), and a table of a chosen topic's top words per "
                   "slice (see streamtopic timeline).")
@click.option("--time-field", default=None, metavar="FIELD",
              help="With --timeline: slice the prevalence by the time in FIELD of the inputs "
                   "the model's store records (see streamtopic timeline --time-field).")
@click.option("--by", type=click.Choice(["auto", "year", "month", "day"]), default="auto",
              show_default=True, help="With --time-field: the calendar unit of a slice.")
@click.option("--slices", "n_slices", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --time-field: N slices of about equal numbers of documents.")
@_errors
def report_cmd(model_path: str, output: str, top_words: int, pyldavis: str | None,
               with_timeline: bool, time_field: str | None, by: str,
               n_slices: int | None) -> None:
    """Write an HTML report of a model, one file that works offline: each topic's top words
    (its anchor word marked) and prevalence, a map of the topics, their correlation, and the
    model's and its corpus' record (:func:`streamtopic.report.write_report`)."""
    from .model import AnchorTopicModel
    from .report import write_report

    if not with_timeline and (time_field is not None or n_slices is not None or by != "auto"):
        raise click.UsageError("--time-field, --by and --slices shape the timeline: give "
                               "--timeline")
    _writing(output, pyldavis)
    model = AnchorTopicModel.load(model_path)
    slices = words = None
    if with_timeline:
        from .timeline import slice_topics, timeline

        slices = timeline(model, time_field=time_field, by=by, n_slices=n_slices)
        words = [s.top(model.vocab_, top_words) for s in slice_topics(
            model, time_field=time_field, slices=slices if time_field is not None else None)]
    path = write_report(model, output, top_words=top_words, model_path=model_path,
                        timeline=slices, timeline_words=words)
    _echo(f"{path}: report of {model.n_topics} topics")
    if pyldavis is not None:
        _echo(f"{model.to_pyldavis(pyldavis)}: pyLDAvis page")


@main.command("split")
@click.argument("inputs", nargs=-1, required=True)
@click.option("--output", "-o", "prefix", required=True,
              help="Writes PREFIX.train.h5 and PREFIX.test.h5.")
@click.option("--test-fraction", type=float, default=0.1, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@_reader_options
@_scheduler_options
@_errors
def split_cmd(inputs: tuple[str, ...], prefix: str, test_fraction: float, seed: int,
              reader: _Reader, sched: _Scheduler) -> None:
    """Split a corpus into a training and a held-out HDF5 corpus (deterministic per seed)."""
    from .corpus import split as do_split

    train, test = f"{prefix}.train.h5", f"{prefix}.test.h5"
    _writing(train, test)
    for path in (train, test):
        if os.path.exists(path):
            raise click.ClickException(f"{path}: already exists")
    corpus = reader.read(inputs)
    with sched(numeric=_numeric_inputs(inputs, reader.fmt)):
        out = do_split(corpus, train, test, test_fraction=test_fraction, seed=seed,
                       progress=not sched.quiet)
    _echo(f"{train}: {out['n_train']:,} documents; {test}: {out['n_test']:,} documents")


@main.command()
@click.argument("model_path", type=click.Path())
@click.option("--corpus", "corpus_inputs", multiple=True,
              help="Reference corpus for coherence and NPMI (default: the training inputs "
                   "recorded in the model's store).")
@click.option("--heldout", "heldout_inputs", multiple=True,
              help="Held-out documents for the log-likelihood by document completion.")
@click.option("--top", type=click.IntRange(min=2), default=20, show_default=True,
              help="Top words scored per topic.")
@click.option("--top-n", type=click.IntRange(min=2), default=None, hidden=True, help="--top.")
@click.option("--npmi-top", type=click.IntRange(min=2), default=10, show_default=True,
              help="Top words per topic whose pairs the NPMI averages.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the half split.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Also write the JSON to this file.")
@_stop_words_option
@_strip_headers_option
@_scheduler_options
@_errors
def evaluate(model_path: str, corpus_inputs: tuple[str, ...], heldout_inputs: tuple[str, ...],
             top: int, top_n: int | None, npmi_top: int, seed: int, as_json: bool,
             output: str | None,
             stop_words: str | None, strip_headers: bool, sched: _Scheduler) -> None:
    """Score a model: coherence, NPMI, unique words and held-out log-likelihood per token
    (:func:`streamtopic.evaluation.evaluate`). Text is tokenised as the model's store's was."""
    from .evaluation import evaluate as score
    from .model import AnchorTopicModel

    _writing(output)
    model = AnchorTopicModel.load(model_path)
    inputs = [*corpus_inputs, *heldout_inputs]
    with sched(numeric=_numeric_inputs(inputs, "auto") if inputs else True):
        report = score(model, corpus=list(corpus_inputs) or None,
                       heldout=list(heldout_inputs) or None, top_n=top_n or top,
                       npmi_top=npmi_top, seed=seed,
                       stop_words=stop_words, strip_headers=strip_headers,
                       progress=not sched.quiet)
    report["model"] = os.path.abspath(model_path)
    text = json.dumps(report, indent=2)
    if output:
        with open(output, "w") as fh:
            fh.write(text + "\n")
    if as_json:
        _echo(text)
    else:
        _echo_scores(report, model)


def _echo_scores(report: dict[str, Any], model: Any) -> None:
    """``evaluate``'s table: the means, then per topic its scores and top words."""
    top_n = report["top_n"]
    _echo(f"model {report['model']}: K = {report['n_topics']}, top {top_n} words")
    _echo(f"unique words per topic (mean)   {report['unique_words']['mean']:.2f}")
    coherence = report.get("coherence")
    if coherence:
        _echo(f"coherence (mean)                {coherence['mean']:.2f}")
    npmi = report.get("npmi")
    if npmi:
        _echo(f"NPMI, top {npmi['top']} (mean)            {npmi['mean']:.4f}")
    if "heldout" in report:
        h = report["heldout"]
        _echo(f"held-out log-likelihood         {h['per_token']:.4f} nats/token "
                   f"({h['n_docs']:,} documents, {h['n_tokens']:,} tokens scored)")
    unique = report["unique_words"]["per_topic"]
    for k, words in enumerate(model.top_words(min(8, top_n))):
        coh_k = f"{coherence['per_topic'][k]:9.2f}" if coherence else ""
        npmi_k = f" {npmi['per_topic'][k]:7.3f}" if npmi else ""
        _echo(f"topic {k:3d} unique {unique[k]:2d} {coh_k}{npmi_k}  {' '.join(words)}")


@main.command()
@click.argument("output", type=click.Path())
@click.option("--docs", "n_docs", type=click.IntRange(min=1), required=True,
              help="Number of documents.")
@click.option("--model", "model_path", type=click.Path(), default=None,
              help="Take the topics from a saved model (semi-synthetic).")
@click.option("--topics-file", "topics_file", type=click.Path(exists=True, dir_okay=False),
              default=None, help="Take the topics (and their words) from a topics file "
              "(another corpus' OUTPUT.topics.npz, or any .npz with A (V×K) and vocab).")
@click.option("--words", "n_words", type=click.IntRange(min=2), default=None,
              help="Random Dirichlet topics: vocabulary size V.")
@click.option("-k", "--n-topics", "--topics", "n_topics", type=click.IntRange(min=1),
              default=None, help="Random Dirichlet topics: number of topics K.")
@click.option("--beta", type=float, default=0.05, show_default=True,
              help="Dirichlet concentration of random topics.")
@click.option("--planted-anchors", is_flag=True, help="Plant one anchor word per topic.")
@click.option("--theta", default="dirichlet", show_default=True,
              help="'dirichlet', or a logistic normal 'ln:rho=0.1,group_size=10,sigma=1'.")
@click.option("--alpha", type=float, default=0.1, show_default=True,
              help="Symmetric Dirichlet concentration of θ.")
@click.option("--doc-length", type=click.IntRange(min=1), default=70, show_default=True)
@click.option("--poisson", is_flag=True, help="Poisson document lengths (mean --doc-length).")
@click.option("--format", "fmt", type=click.Choice(["hdf5", "uci", "text", "jsonl"]),
              default=None, help="Output format (default: from the file name).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--population", is_flag=True,
              help="Also write the exact population Q = A E[θθᵀ] Aᵀ as OUTPUT.population.zarr.")
@click.option("--shards", type=click.IntRange(min=1), default=None,
              help="Write OUTPUT as a directory of this many HDF5 shards (part-00000.h5, ...), "
              "one process per shard.")
@click.option("--shard-tokens", type=click.IntRange(min=1), default=None,
              help="Sharded, about this many tokens per shard (instead of --shards).")
@click.option("--processes", type=click.IntRange(min=1), default=None,
              help="Shards written at once, one process each (default: one per core).")
@click.option("--resume", is_flag=True,
              help="Sharded: keep the shards an earlier run with the same settings wrote.")
@_scheduler_options
@_errors
def synth(
    output: str, n_docs: int, model_path: str | None, topics_file: str | None,
    n_words: int | None, n_topics: int | None, beta: float, planted_anchors: bool, theta: str,
    alpha: float, doc_length: int, poisson: bool, fmt: str | None, seed: int, population: bool,
    shards: int | None, shard_tokens: int | None, processes: int | None, resume: bool,
    sched: _Scheduler,
) -> None:
    """Generate a semi-synthetic corpus with known topics (written beside it as
    OUTPUT.topics.npz), in parallel and with bounded memory. With --shards or
    --shard-tokens, OUTPUT is a directory of HDF5 shards, the same documents for a seed
    whatever the shards and processes; `streamtopic ingest OUTPUT` reads them all."""
    from . import synth as synth_mod

    if shards is not None and shard_tokens is not None:
        raise click.ClickException("give --shards or --shard-tokens, not both")
    given = [model_path is not None, topics_file is not None, n_words is not None]
    if sum(given) != 1 or (n_words is None) != (n_topics is None):
        raise click.ClickException(
            "give --model, --topics-file, or both --words and --n-topics")
    topics = synth_mod.load_topics(topics_file) if topics_file else {"A": None, "vocab": None}
    _writing(output)

    def show(done: int, total: int) -> None:
        if not sched.quiet:
            click.echo(f"\rsynth: {done:,}/{total:,} documents", nl=False, err=True)

    with sched(numeric=True):
        out = synth_mod.synthesize(
            output, n_docs=n_docs, model=model_path, A=topics["A"], vocab=topics["vocab"],
            n_words=n_words, n_topics=n_topics, beta=beta, planted_anchors=planted_anchors,
            format=fmt, theta=theta, alpha=alpha, doc_length=doc_length, poisson=poisson,
            seed=seed, population=population, progress=show, shards=shards,
            shard_tokens=shard_tokens, processes=processes, resume=resume,
        )
    if not sched.quiet:
        click.echo(err=True)
    _echo(json.dumps(out, indent=2, default=str))


@main.command("demo-path")
@_errors
def demo_path() -> None:
    """Print the path of the bundled demo corpus (UCI KOS)."""
    _echo(bundled_corpus())


@main.command("clear-cache")
@click.argument("store_path", type=click.Path())
@_errors
def clear_cache_cmd(store_path: str) -> None:
    """Remove the rectified arrays cached in the store STORE_PATH (fits running now keep
    theirs) and what killed fits left there; print what was freed."""
    from .workspace import cache_entries, clear_cache

    before = cache_entries(store_path)
    freed = clear_cache(store_path)
    left = {e["key"] for e in cache_entries(store_path)}
    for e in before:
        if e["key"] not in left:
            _echo(f"removed {e['key']} ({_human(e['bytes'])})")
    kept = f"; {len(left)} in use kept" if left else ""
    _echo(f"{store_path}: freed {_human(freed)}{kept}")


def run() -> None:
    """The console entry point: :func:`main`, then a fast exit.

    When a command has finished, its files are written and closed (a store's commit is an
    atomic rename) and any cluster it started is shut down. The exit handlers run and the
    output is flushed, then the process ends without the interpreter's teardown of every
    imported module (numpy, scipy, zarr, dask: about 0.1 s, a tenth of a small ingest).
    """
    import atexit
    import os

    try:
        main()
        code: Any = 0
    except SystemExit as exc:  # how click ends every command, successful or not
        code = exc.code
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()  # what a normal exit would run (cluster and pool shutdown)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (``| head``) or stream
            pass
    os._exit(0 if code is None else int(code))


if __name__ == "__main__":  # pragma: no cover
    run()
