"""Stores as older streamtopics wrote them, made from today's: for the tests that older
stores still read, and are upgraded by their next ingest."""

from __future__ import annotations

import os
from pathlib import Path

import zarr

from streamtopic.store import sources_digest

#: What format 5 added to the root's metadata and to each version's
_ROOT_KEYS = ("digest", "head_digest")
_VERSION_KEYS = ("digest", "arrays", "manifest", "documents_chain", "V", "chunk")


def downgrade_to_format4(path: str | os.PathLike[str]) -> None:
    """Rewrite the store at ``path`` (one version or more, of format 5) as format 4 wrote
    it: no digests, each version's whole manifest (``sources`` and ``sources_digest``) in
    its own metadata, no ``manifest.jsonl``."""
    path = Path(path)
    root = zarr.open_group(str(path), mode="r+")
    meta = {k: v for k, v in dict(root.attrs["streamtopic"]).items() if k not in _ROOT_KEYS}
    from streamtopic.manifest import ManifestMark, read_manifest

    versions = sorted(p for p in (path / "versions").iterdir() if p.name.startswith("v"))
    for vpath in versions:
        group = zarr.open_group(str(vpath), mode="r+")
        attrs = dict(group.attrs)
        sources = [e.as_json() for e in read_manifest(
            str(path), ManifestMark.from_dict(attrs["manifest"]))]
        attrs = {k: v for k, v in attrs.items() if k not in _VERSION_KEYS}
        attrs.update(sources=sources, sources_digest=sources_digest(meta["uid"], sources))
        group.attrs.clear()
        group.attrs.update(attrs)
    (path / "manifest.jsonl").unlink(missing_ok=True)
    root.attrs["streamtopic"] = dict(meta, format_version=4)


def downgrade_model_to_format1(path: str | os.PathLike[str]) -> None:
    """Rewrite the model at ``path`` (zarr or HDF5) as format 1 wrote it: no digests."""
    import json

    path = os.fspath(path)
    if os.path.isdir(path):
        root = zarr.open_group(path, mode="r+")
        meta = dict(root.attrs["streamtopic_model"])
        root.attrs["streamtopic_model"] = _format1(meta)
        return
    import h5py

    with h5py.File(path, "r+") as f:
        f.attrs["streamtopic_model"] = json.dumps(_format1(json.loads(f.attrs[
            "streamtopic_model"])))


def _format1(meta: dict) -> dict:
    meta = {k: v for k, v in meta.items() if k not in ("digest", "digests")}
    meta["format_version"] = 1
    return meta
