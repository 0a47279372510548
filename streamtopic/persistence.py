"""Saving and loading a fitted :class:`~streamtopic.model.AnchorTopicModel`.

A model is a zarr group (default) or an HDF5 file holding the fitted arrays of
:data:`ARRAYS`, the vocabulary (``vocab``) and, as the JSON attribute
``streamtopic_model``, the format, the constructor parameters, the anchor words, the solver
counts and the diagnostics. It is written aside (:func:`~streamtopic._io.written_aside`) and
renamed into place, so a reader never sees half a model; an existing path is replaced only
when it is a model itself.

Every array and the vocabulary carry a digest of their content in the JSON attribute, which
carries a digest of itself (:mod:`streamtopic.integrity`; format 2), and each zarr chunk a
CRC-32C checksum: a flipped byte, a truncated or deleted chunk (which zarr reads as zeros) or
an edited attribute is a :class:`~streamtopic.model.ModelError` naming the file and the
array, never a model. Shapes are checked against the vocabulary and the topics before any
array is used. Models of format 1 (no digests) load with the shape checks only.

Models saved before an array of :data:`OPTIONAL` existed load too: ``alpha_`` is then
estimated from the saved topic-topic matrix and prevalence
(:func:`~streamtopic.hyperparameters.estimate_alpha`; a refined model's own ``alpha_`` comes
from the refined topics instead, so the two may differ a little).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from ._io import written_aside
from .fitted import FittedModel, FittedTopics, ModelError, adopt, check_is_fitted
from .hyperparameters import estimate_alpha
from .integrity import array_digest, seal, unsealed
from .store import checksum_codecs

__all__ = ["ARRAYS", "FORMATS", "MODEL_FORMAT", "OPTIONAL", "is_model", "load_model",
           "save_model"]

MODEL_FORMAT = "streamtopic-model"
#: 2: digests of the arrays, the vocabulary and the attribute itself
FORMAT_VERSION = 2
#: File formats of a saved model.
FORMATS = ("zarr", "hdf5")
#: The fitted arrays a model saves: their names in the file, and the estimator's attribute.
ARRAYS = {
    "components": "components_",
    "anchors": "anchors_",
    "topic_prevalence": "topic_prevalence_",
    "topic_cooccurrence": "topic_cooccurrence_",
    "word_probability": "word_probability_",
    "alpha": "alpha_",
}
#: Arrays of :data:`ARRAYS` that older models lack, and are derived from the others on loading.
OPTIONAL = ("alpha",)


def _meta(model: FittedModel) -> dict[str, Any]:
    """The model's JSON attribute: its format, parameters, anchor words and record."""
    meta = {
        "format": MODEL_FORMAT,
        "format_version": FORMAT_VERSION,
        "params": model.get_params(),
        "anchor_words": model.anchor_words_,
        "n_converged": model.n_converged_,
        "n_fitted": model.n_fitted_,
        "diagnostics": model.diagnostics_,
    }
    plain: dict[str, Any] = json.loads(json.dumps(meta, default=_json_default))
    return plain


def _json_default(o: Any) -> Any:
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _write_zarr(path: str, arrays: dict[str, np.ndarray], vocab: list[str],
                meta: dict[str, Any]) -> None:
    import zarr

    root = zarr.open_group(path, mode="w-")
    for name, arr in arrays.items():
        root.create_array(name, data=arr, compressors=checksum_codecs())
    v = root.create_array("vocab", shape=(len(vocab),), dtype=str,
                          compressors=checksum_codecs())
    v[:] = np.asarray(vocab, dtype=str)
    root.attrs["streamtopic_model"] = meta


def _write_hdf5(path: str, arrays: dict[str, np.ndarray], vocab: list[str],
                meta: dict[str, Any]) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        for name, arr in arrays.items():
            f.create_dataset(name, data=arr)
        f.create_dataset("vocab", data=np.array(vocab, dtype=object), dtype=h5py.string_dtype())
        f.attrs["streamtopic_model"] = json.dumps(meta)


def save_model(model: FittedModel, path: str | os.PathLike[str],
               format: str = "zarr") -> None:
    """Save a fitted model to a zarr group or an HDF5 file, written aside then renamed.

    Parameters
    ----------
    model : FittedModel
        A fitted model.
    path : path
        Where to write it; an existing model there is replaced.
    format : {'zarr', 'hdf5'}

    Raises
    ------
    ModelError
        When the model is not fitted, or ``path`` exists and is not a model.
    ValueError
        For another ``format``.
    """
    check_is_fitted(model)
    path = os.fspath(path)
    if format not in FORMATS:
        raise ValueError(f"format={format!r}: expected 'zarr' or 'hdf5'")
    if os.path.exists(path) and not is_model(path):
        raise ModelError(f"{path}: exists and is not a streamtopic model; not overwritten")
    arrays = {name: np.asarray(getattr(model, attr)) for name, attr in ARRAYS.items()}
    vocab = [str(w) for w in model.vocab_]
    meta = _meta(model)
    meta["digests"] = {name: array_digest(a) for name, a in arrays.items()}
    meta["digests"]["vocab"] = array_digest(np.asarray(vocab, dtype=str))
    write = _write_zarr if format == "zarr" else _write_hdf5
    with written_aside(path) as tmp:
        write(tmp, arrays, vocab, seal(meta))
    _mark_saved(model, path)


def _mark_saved(model: FittedModel, path: str) -> None:
    """Remember where the model is on disk (and that file's mtime), so that inference tasks
    load it from there instead of shipping its V×K arrays."""
    model.saved_at = (os.path.abspath(path), os.stat(path).st_mtime_ns)


def is_model(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a model that loads."""
    try:
        load_model(path)
    except ModelError:
        return False
    return True


def _read_zarr(path: str) -> tuple[Any, dict[str, np.ndarray], list[str]]:
    import zarr

    root: Any = zarr.open_group(path, mode="r")
    meta = root.attrs.get("streamtopic_model")
    _check_format(path, meta)
    names = [n for n in ARRAYS if n not in OPTIONAL or n in root]
    arrays = {name: np.asarray(_named_read(path, name, lambda n: root[n][:])) for name in names}
    vocab = _named_read(path, "vocab", lambda n: root[n][:])
    return meta, arrays, [str(t) for t in vocab]


def _named_read(path: str, name: str, read: Any) -> Any:
    """``read(name)``, its failure (a chunk that fails its checksum or to decode, a missing
    array) a :class:`~streamtopic.model.ModelError` naming the file and the array."""
    try:
        return read(name)
    except Exception as exc:  # zarr, h5py and the codecs raise many kinds
        raise ModelError(f"{path}: damaged: {name} cannot be read ({exc})") from exc


def _read_hdf5(path: str) -> tuple[Any, dict[str, np.ndarray], list[str]]:
    import h5py

    with h5py.File(path, "r") as f:
        raw = f.attrs.get("streamtopic_model")
        meta = json.loads(raw) if isinstance(raw, str) else None
        _check_format(path, meta)
        names = [n for n in ARRAYS if n not in OPTIONAL or n in f]
        arrays = {name: _named_read(path, name, lambda n: f[n][:]) for name in names}
        vocab = [x.decode() if isinstance(x, bytes) else str(x)
                 for x in _named_read(path, "vocab", lambda n: f[n][:])]
    return meta, arrays, vocab


def _check_format(path: str, meta: Any) -> None:
    if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
        raise ModelError(f"{path}: not a streamtopic model")
    version = meta.get("format_version", 1)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ModelError(f"{path}: written by a newer streamtopic (model format {version!r}, "
                         f"this one reads up to {FORMAT_VERSION}); upgrade")
    if unsealed(meta, required=version >= 2) is False:
        raise ModelError(f"{path}: damaged: its attributes do not match their digest")


def _check_arrays(path: str, meta: dict[str, Any], arrays: dict[str, np.ndarray],
                  vocab: list[str]) -> None:
    """Check what a model file holds before anything uses it: each array's (and the
    vocabulary's) digest (format 2), then the shapes, types and anchor ids. Raises
    :class:`~streamtopic.model.ModelError` naming the file and the array."""
    digests = meta.get("digests") or {}
    named = dict(arrays, vocab=np.asarray(vocab, dtype=str))
    for name, digest in digests.items():
        if name not in named:
            raise ModelError(f"{path}: damaged: {name} is missing")
        if array_digest(named[name]) != digest:
            raise ModelError(f"{path}: damaged: {name} does not match its digest (a chunk is "
                             "missing or altered)")
    V, K = len(vocab), int(np.asarray(arrays["topic_prevalence"]).size)
    expected = {"components": (K, V), "anchors": (K,), "topic_prevalence": (K,),
                "topic_cooccurrence": (K, K), "word_probability": (V,), "alpha": (K,)}
    for name, shape in expected.items():
        a = arrays.get(name)
        if a is None:
            continue
        if a.shape != shape or a.dtype.kind not in ("iu" if name == "anchors" else "f"):
            raise ModelError(f"{path}: damaged: {name} is a {a.shape} array of {a.dtype}; "
                             f"a model of {K} topics over {V} words has {shape}")
    anchors = arrays["anchors"]
    if anchors.size and (int(anchors.min()) < 0 or int(anchors.max()) >= V):
        raise ModelError(f"{path}: damaged: anchors name words outside its {V} words")


def _saved_params(params: dict[str, Any]) -> dict[str, Any]:
    """The constructor parameters of a saved model, in today's terms: a model saved before
    methods existed ran what ``method='plain'`` runs now, and the deprecated
    ``exact_anchors=True`` is ``anchor_method='exact'``."""
    params = dict(params)
    params.setdefault("method", "plain")
    if params.get("exact_anchors"):
        params["exact_anchors"] = False
        if params.get("anchor_method") in (None, "sketch"):
            params["anchor_method"] = "exact"
    return params


def load_model(path: str | os.PathLike[str],
               estimator: Callable[..., Any] = SimpleNamespace) -> Any:
    """Load a model saved by :func:`save_model` (zarr group or HDF5 file): ``estimator``
    called with the saved parameters, its fitted attributes set from the file.

    ``estimator`` is the class to build: :meth:`AnchorTopicModel.load
    <streamtopic.model.AnchorTopicModel.load>` passes itself (this module sits below the
    estimator and does not import it). The default, ``types.SimpleNamespace``, gives the
    saved parameters and fitted attributes as a plain record.

    Raises
    ------
    ModelError
        When ``path`` is missing or holds no streamtopic model.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ModelError(f"{path}: no such model")
    try:
        meta, arrays, vocab = (_read_zarr if os.path.isdir(path) else _read_hdf5)(path)
        _check_arrays(path, meta, arrays, vocab)
        return _built(path, meta, arrays, vocab, estimator)
    except ModelError:
        raise
    except Exception as exc:  # foreign files: zarr/h5py raise many kinds
        raise ModelError(f"{path}: not a streamtopic model, or a damaged one ({exc})"
                         ) from exc


def _built(path: str, meta: dict[str, Any], arrays: dict[str, np.ndarray],
           vocab: list[str], estimator: Callable[..., Any]) -> Any:
    """The model of a loaded (and checked) file's contents: ``estimator`` called with the
    saved parameters, its fitted attributes set."""
    model = estimator(**_saved_params(meta["params"]))
    if "alpha" not in arrays:  # saved before alpha_ existed
        arrays["alpha"] = estimate_alpha(arrays["topic_cooccurrence"],
                                         arrays["topic_prevalence"])
    adopt(model, FittedTopics(
        components=arrays["components"], vocab=vocab,
        anchors=arrays["anchors"].astype(np.int64),
        topic_prevalence=arrays["topic_prevalence"],
        topic_cooccurrence=arrays["topic_cooccurrence"],
        word_probability=arrays["word_probability"], alpha=arrays["alpha"],
        n_converged=int(meta["n_converged"]), n_fitted=int(meta["n_fitted"]),
        diagnostics=meta["diagnostics"]))
    _mark_saved(model, path)
    return model
