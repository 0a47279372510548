"""Saving and loading a fitted :class:`~streamtopic.model.AnchorTopicModel`.

A model is a zarr group (default) or an HDF5 file holding the fitted arrays of
:data:`ARRAYS`, the vocabulary (``vocab``) and, as the JSON attribute
``streamtopic_model``, the format, the constructor parameters, the anchor words, the solver
counts and the diagnostics. It is written aside (:func:`~streamtopic._io.written_aside`) and
renamed into place, so a reader never sees half a model; an existing path is replaced only
when it is a model itself.

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
from .fitted import FittedModel, ModelError, check_is_fitted
from .hyperparameters import estimate_alpha

__all__ = ["ARRAYS", "FORMATS", "MODEL_FORMAT", "OPTIONAL", "is_model", "load_model",
           "save_model"]

MODEL_FORMAT = "streamtopic-model"
FORMAT_VERSION = 1
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
    return json.loads(json.dumps(meta, default=_json_default))


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
        root.create_array(name, data=arr)
    v = root.create_array("vocab", shape=(len(vocab),), dtype=str)
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
    write = _write_zarr if format == "zarr" else _write_hdf5
    with written_aside(path) as tmp:
        write(tmp, arrays, list(model.vocab_), _meta(model))
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
    arrays = {name: np.asarray(root[name][:]) for name in ARRAYS
              if name not in OPTIONAL or name in root}
    return meta, arrays, [str(t) for t in root["vocab"][:]]


def _read_hdf5(path: str) -> tuple[Any, dict[str, np.ndarray], list[str]]:
    import h5py

    with h5py.File(path, "r") as f:
        raw = f.attrs.get("streamtopic_model")
        meta = json.loads(raw) if isinstance(raw, str) else None
        _check_format(path, meta)
        arrays = {name: f[name][:] for name in ARRAYS if name not in OPTIONAL or name in f}
        vocab = [x.decode() if isinstance(x, bytes) else str(x) for x in f["vocab"][:]]
    return meta, arrays, vocab


def _check_format(path: str, meta: Any) -> None:
    if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
        raise ModelError(f"{path}: not a streamtopic model")


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
    except ModelError:
        raise
    except Exception as exc:  # foreign files: zarr/h5py raise many kinds
        raise ModelError(f"{path}: not a streamtopic model ({exc})") from exc
    model = estimator(**_saved_params(meta["params"]))
    if "alpha" not in arrays:  # saved before alpha_ existed
        arrays["alpha"] = estimate_alpha(arrays["topic_cooccurrence"],
                                         arrays["topic_prevalence"])
    for name, attr in ARRAYS.items():
        setattr(model, attr, arrays[name])
    model.anchors_ = arrays["anchors"].astype(np.int64)
    model.vocab_ = vocab
    model.anchor_words_ = [vocab[i] for i in model.anchors_]
    model.n_converged_ = int(meta["n_converged"])
    model.n_fitted_ = int(meta["n_fitted"])
    model.n_features_in_ = len(vocab)
    model.diagnostics_ = meta["diagnostics"]
    _mark_saved(model, path)
    return model
