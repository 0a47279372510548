"""The store's manifest of ingested inputs, appended once per version.

``STORE/manifest.jsonl`` holds one line per version that added inputs: a JSON list of their
entries (path, SHA-256, counts, the version). A version records where the manifest ends for
it and the hash chain of its lines up to there (:class:`ManifestMark`, sealed with the rest
of its metadata), so that:

* a commit writes its own line only: its cost does not grow with the inputs ingested before
  (a store used to rewrite the whole manifest at every version);
* a reader reads the first ``end`` bytes, whatever a writer appends meanwhile, and checks
  each line against the chain (:func:`read_manifest`): an edited or damaged manifest is an
  error, never a list of other inputs;
* a writer first cuts the file back to the head's end, removing the line of a round that
  died before its commit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .integrity import chain_digest

__all__ = ["MANIFEST", "ManifestEntry", "ManifestError", "ManifestMark", "append_manifest",
           "read_manifest"]

#: The manifest's file name in the store's root
MANIFEST = "manifest.jsonl"


class ManifestError(ValueError):
    """The manifest does not hold what a version recorded of it."""


@dataclass(frozen=True)
class ManifestMark:
    """What a version records of the manifest: where it ends (bytes), the hash chain of its
    lines up to there (:func:`~streamtopic.integrity.chain_digest`, from ``""``) and its
    number of entries."""

    end: int = 0
    chain: str = ""
    n: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"end": self.end, "chain": self.chain, "n": self.n}

    @classmethod
    def from_dict(cls, value: Any) -> ManifestMark:
        """A mark from a version's metadata; a malformed one is a :class:`ManifestError`."""
        try:
            end, chain, n = int(value["end"]), str(value["chain"]), int(value["n"])
        except (TypeError, KeyError, ValueError) as exc:
            raise ManifestError(f"a malformed record of the manifest ({exc})") from None
        if end < 0 or n < 0:
            raise ManifestError("a malformed record of the manifest")
        return cls(end, chain, n)


@dataclass(frozen=True)
class ManifestEntry(Mapping[str, Any]):
    """One ingested input as the manifest records it, read through typed attributes.

    The JSON object it was read from, or is written as, is kept whole (``fields``), so that
    an entry written back (a derived store, a store of an older format moving to the
    manifest file) is the same bytes and its digests hold; entries of older streamtopic
    versions lack some fields, which read as their defaults here. It is also a read-only
    mapping of those fields (``entry["path"]``), as the JSON reads."""

    fields: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def new(cls, *, path: str, sha256: str, stat: str | None, format: str, size: int,
            vocab_path: str | None, strip_headers: bool, keep_subject: bool,
            text_field: str, n_docs: int, n_tokens: int, n_oov_tokens: int,
            ingested_at: str) -> ManifestEntry:
        """The entry of an input ingested now (its ``version`` is set when it commits)."""
        return cls({"path": path, "sha256": sha256, "stat": stat, "format": format,
                    "bytes": int(size), "vocab_path": vocab_path,
                    "strip_headers": bool(strip_headers), "keep_subject": bool(keep_subject),
                    "text_field": text_field, "n_docs": int(n_docs),
                    "n_tokens": int(n_tokens), "n_oov_tokens": int(n_oov_tokens),
                    "ingested_at": ingested_at})

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    @property
    def path(self) -> str:
        """The input's path, as it was given."""
        return str(self.fields["path"])

    @property
    def sha256(self) -> str:
        """SHA-256 of the input's content (and of its UCI vocabulary)."""
        return str(self.fields["sha256"])

    @property
    def format(self) -> str:
        """Its reader (``text``, ``jsonl``, ``uci`` …; ``auto`` when not recorded)."""
        return str(self.fields.get("format") or "auto")

    @property
    def stat(self) -> str | None:
        """Its file fingerprint when ingested (size, mtime), or None."""
        stat = self.fields.get("stat")
        return None if stat is None else str(stat)

    @property
    def vocab_path(self) -> str | None:
        """A UCI input's vocabulary file, or None."""
        vp = self.fields.get("vocab_path")
        return None if vp is None else str(vp)

    @property
    def size(self) -> int:
        """Its size in bytes (0 when not recorded)."""
        return int(self.fields.get("bytes") or 0)

    @property
    def strip_headers(self) -> bool:
        return bool(self.fields.get("strip_headers"))

    @property
    def keep_subject(self) -> bool:
        return bool(self.fields.get("keep_subject"))

    @property
    def text_field(self) -> str:
        """The JSON Lines field its text was read from."""
        return str(self.fields.get("text_field") or "text")

    @property
    def n_docs(self) -> int:
        return int(self.fields.get("n_docs") or 0)

    @property
    def n_tokens(self) -> int:
        return int(self.fields.get("n_tokens") or 0)

    @property
    def version(self) -> int:
        """The store version that added it (0 when not recorded)."""
        return int(self.fields.get("version") or 0)

    def as_json(self) -> dict[str, Any]:
        """The JSON object of the entry (a copy)."""
        return dict(self.fields)


def _line(entries: Sequence[Mapping[str, Any]]) -> bytes:
    return (json.dumps([dict(e) for e in entries], sort_keys=True, separators=(",", ":"),
                       default=str) + "\n").encode("utf-8")


def append_manifest(root: str, head: ManifestMark, entries: Sequence[Mapping[str, Any]]
                    ) -> ManifestMark:
    """Append one version's ``entries`` to the manifest of the store at ``root``, after
    cutting it back to ``head.end`` (the line of a round that died before its commit goes);
    the caller holds the writer lock. Returns the new version's mark (``head`` itself when
    there is nothing to add). The line is on disk (``fsync``) before this returns."""
    if not entries:
        return head
    line = _line(entries)
    path = os.path.join(root, MANIFEST)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size < head.end:
            raise ManifestError(f"{path}: {size:,} bytes, shorter than the {head.end:,} the "
                                "head recorded")
        os.ftruncate(fd, head.end)
        os.pwrite(fd, line, head.end)
        os.fsync(fd)
    finally:
        os.close(fd)
    return ManifestMark(head.end + len(line), chain_digest(head.chain, line),
                        head.n + len(entries))


def read_manifest(root: str, mark: ManifestMark) -> list[ManifestEntry]:
    """The manifest's entries up to ``mark``, each line checked against the chain.

    Raises
    ------
    ManifestError
        The file is missing, shorter than ``mark.end``, or its lines do not match the chain
        or the count (edited or damaged).
    """
    if mark.end == 0:
        if mark.n or mark.chain:
            raise ManifestError("the manifest is recorded empty with entries")
        return []
    path = os.path.join(root, MANIFEST)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(mark.end)
    except OSError as exc:
        raise ManifestError(f"{path}: cannot be read ({exc.strerror})") from None
    if len(raw) != mark.end or not raw.endswith(b"\n"):
        raise ManifestError(f"{path}: holds {len(raw):,} of the {mark.end:,} bytes recorded")
    chain, out = "", list[ManifestEntry]()
    for line in raw.splitlines(keepends=True):
        chain = chain_digest(chain, line)
        try:
            entries = json.loads(line)
        except ValueError:
            entries = None
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ManifestError(f"{path}: a line that is not a list of entries")
        out.extend(ManifestEntry(e) for e in entries)
    if chain != mark.chain or len(out) != mark.n:
        raise ManifestError(f"{path}: does not match its recorded digest (edited or damaged)")
    return out
