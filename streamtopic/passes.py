"""Passes over the blocks of a symmetric V×V matrix (Q, or a rectified Q), as Dask graphs.

Q is symmetric, so a pass reads only its blocks on and above the diagonal
(:func:`upper_blocks`): the task of block (i, j), i ≤ j, gives row block i its share, from
Q_ij, and for i < j row block j its share, from Q_ji = Q_ijᵀ. One read serves both. A task
per row block then sums the shares it receives (:meth:`PassGraph.row_sums`), or one task
sums them all (:meth:`PassGraph.total`).

The sketch (:mod:`streamtopic.sketch`), the recovery (:mod:`streamtopic.recovery`) and the
out-of-core rectification (:mod:`streamtopic.rectification`) each supply only their kernels:
what one block gives, and what a row block does with its sum. This module builds the graphs
(layers of coarse tasks with explicit keys, no ``dask.array`` bookkeeping), reads the blocks
inside the tasks (:class:`QBlocks`), sets the tasks' priorities and homes
(:func:`largest_first`, :func:`spread_out`) and makes the scratch arrays through which
objects of size V×K move between the client and the workers (:func:`scratch_array`).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from .cluster import annotations_by_key, n_workers, spread
from .store import Deltas, block_files, delta_files, open_read_only, read_q_block

if TYPE_CHECKING:
    from .store import CooccurrenceStore

__all__ = [
    "QBlocks",
    "PassGraph",
    "upper_blocks",
    "row_block_parts",
    "sum_sides",
    "sum_arrays",
    "largest_first",
    "spread_out",
    "scratch_array",
    "to_scratch",
]

#: Parts per worker thread, at most, that :func:`spread_out` shares out by cost.
FEW_PARTS = 4

#: A task of a graph: a tuple ``(function, *arguments)``, keys of other tasks as arguments.
Task = tuple[Any, ...]
#: The index of a task in its layer (its key without the layer's name), e.g. ``(i, j)``.
Index = tuple[int, int]


class QBlocks:
    """Reads block (i, j) of Q (V×V, square chunks of ``chunk`` rows) inside a task.

    Tasks of a pass read their blocks through this small, picklable object rather than
    depend on separate read tasks: a decoded block then lives only as long as the task that
    uses it, and never waits in memory, or travels between workers, for a consumer. Make one
    with :meth:`from_store` (a store's head, divided by its total so that it sums to 1),
    :meth:`from_zarr` (a 2-D zarr array, e.g. the rectified Q) or :meth:`from_memory` (an
    in-memory array, for Dask's threaded scheduler only: it is not sent anywhere).

    Blocks are returned as new or read-only arrays; callers must not write into them.
    """

    def __init__(
        self, V: int, chunk: int, *, root: str | None = None,
        versions: np.ndarray | None = None, scale: float = 1.0, path: str | None = None,
        array: np.ndarray | None = None, nnz: np.ndarray | None = None,
        sparse: np.ndarray | None = None, deltas: dict[tuple[int, int], Deltas] | None = None,
    ) -> None:
        self.V, self.chunk = int(V), int(chunk)
        self.root, self.versions, self.scale = root, versions, float(scale)
        self.nnz, self.sparse, self.deltas = nnz, sparse, deltas or {}
        self.path, self.array = path, array
        self._reader: Any = None  # the store whose version this reads (never pickled)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_reader"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _reader=None)

    @classmethod
    def from_store(cls, store: CooccurrenceStore) -> QBlocks:
        """The blocks of the version ``store`` reads; the object keeps ``store``, and so its
        reader's lease, alive in this process."""
        out = cls(store.V, store.chunk_size, root=store.path,
                  versions=np.asarray(store.block_versions), scale=1.0 / store.q_total,
                  nnz=store.block_nnz, sparse=store.block_sparse, deltas=store.block_deltas)
        out._reader = store
        return out

    @classmethod
    def from_zarr(cls, path: str) -> QBlocks:
        arr = zarr.open_array(path, mode="r")
        if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.chunks[0] != arr.chunks[1]:
            raise ValueError(f"{path}: expected a V×V array with square chunks")
        return cls(arr.shape[0], arr.chunks[0], path=path)

    @classmethod
    def from_memory(cls, array: np.ndarray, chunk: int) -> QBlocks:
        view = array.view()
        view.flags.writeable = False
        return cls(array.shape[0], chunk, array=view)

    @property
    def n_blocks(self) -> int:
        return -(-self.V // self.chunk)

    def span(self, i: int) -> slice:
        """The rows (or columns) of block row (or column) ``i``."""
        return slice(i * self.chunk, min(self.V, (i + 1) * self.chunk))

    @property
    def sizes(self) -> tuple[int, ...]:
        """The rows of each block row."""
        return tuple(min(self.V, (i + 1) * self.chunk) - i * self.chunk
                     for i in range(self.n_blocks))

    def pass_cost(self, i: int, j: int) -> float:
        """Relative time of a task of a pass over :func:`upper_blocks` on block (i, j): its
        area, half again off the diagonal, where the block serves two row blocks (reading
        and decoding a block costs about as much as one product with it)."""
        return float(self.sizes[i] * self.sizes[j]) * (1.5 if i != j else 1.0)

    def stored_bytes(self, blocks: Sequence[tuple[int, int]]) -> int:
        """Bytes on disk that reading ``blocks`` reads (0 for an in-memory array, and for
        blocks never written)."""
        if self.array is not None:
            return 0
        files = []
        for i, j in blocks:
            if self.path is not None:
                files.append(os.path.join(self.path, "c", str(i), str(j)))
            else:
                assert self.root is not None and self.versions is not None
                v = int(self.versions[i, j])
                if v > 0:
                    files += block_files(self.root, v, self.span(i), self.span(j), self.chunk,
                                         self._is_sparse(i, j))
                files += delta_files(self.root, self.span(i), self.span(j),
                                     self.deltas.get((i, j), ()))
        return sum(os.path.getsize(f) for f in files if os.path.exists(f))

    def _is_sparse(self, i: int, j: int) -> int:
        """How block (i, j) is stored (``store.DENSE``, ``SPARSE`` or ``MIRRORED``)."""
        return int(self.sparse[i, j]) if self.sparse is not None else 0

    def block(self, i: int, j: int) -> np.ndarray:
        rows, cols = self.span(i), self.span(j)
        if self.array is not None:
            return self.array[rows, cols]
        if self.path is not None:
            return np.asarray(open_read_only(self.path)[rows, cols], dtype=np.float64)
        assert self.root is not None and self.versions is not None
        nnz = int(self.nnz[i, j]) if self.nnz is not None else -1
        out: np.ndarray = read_q_block(self.root, int(self.versions[i, j]), rows, cols,
                                       self.scale, nnz, sparse=self._is_sparse(i, j),
                                       deltas=self.deltas.get((i, j), ()))
        return out


# ============================================================================ the blocks


def upper_blocks(nb: int) -> list[tuple[int, int]]:
    """The blocks (i, j), i <= j, of an nb×nb grid: all that a pass over the symmetric Q
    reads, since block (j, i) is the transpose of block (i, j)."""
    return [(i, j) for i in range(nb) for j in range(i, nb)]


def row_block_parts(r: int, nb: int, *, column_order: bool = False) -> list[tuple[int, int, int]]:
    """The shares row block ``r`` receives in a pass over :func:`upper_blocks`, as
    ``(i, j, side)``: side 0 of block (r, j), j >= r (from Q_rj), and side 1 of block
    (i, r), i < r (from Q_ri = Q_irᵀ).

    The order is the order of the sum, which rounding depends on: the row block's own blocks
    first, then the mirrored ones (default); or by Q's column blocks, 0 to nb − 1
    (``column_order``)."""
    own = [(r, j, 0) for j in range(r, nb)]
    mirrored = [(i, r, 1) for i in range(r)]
    return mirrored + own if column_order else own + mirrored


def sum_sides(sides: tuple[int, ...], *parts: tuple[np.ndarray, ...]) -> np.ndarray:
    """The sum of ``parts[k][sides[k]]`` (a new array, in the first one's dtype)."""
    return sum_arrays(*(part[side] for side, part in zip(sides, parts, strict=True)))


def sum_arrays(*parts: np.ndarray) -> np.ndarray:
    """The sum of the arrays (a new array, in the first one's dtype)."""
    out = np.array(parts[0], copy=True)
    for part in parts[1:]:
        out += part
    return out


# ============================================================================ annotations


def largest_first(cost: Callable[[int, int], float]) -> dict[str, Any]:
    """``dask.annotate`` arguments for a layer of block tasks (keys ``(name, i, j)``): the
    priority of each task is its ``cost(i, j)``, so the largest start first."""
    return {"priority": lambda key: cost(key[1], key[2])}


def spread_out(
    blocks: Sequence[tuple[int, int]], cost: Callable[[int, int], float]
) -> dict[str, Any]:
    """``dask.annotate`` arguments for a layer of block tasks: when there are at most
    ``FEW_PARTS`` per worker thread, priorities by cost (:func:`largest_first`) and a home
    worker each (LPT, :func:`streamtopic.cluster.spread`), so that no worker is left with a
    large part at the end while the others wait. Nothing with many parts: Dask's own order
    then runs the parts of a row block's sum close together, so that their results do not
    pile up in memory."""
    if len(blocks) > FEW_PARTS * n_workers():
        return {}
    costs = [cost(i, j) for i, j in blocks]
    homes = annotations_by_key(dict(zip(blocks, spread(costs), strict=True)))
    by_key = {name: (lambda key, f=f: f(key[1:])) for name, f in homes.items()}
    return {**largest_first(cost), **by_key}


# ============================================================================ graphs


class PassGraph:
    """One Dask graph over the nb×nb blocks of a symmetric matrix, built layer by layer.

    Each layer is a dask array (float64) named ``prefix-token``, with one random token per
    graph, whose task keys are ``(name, *index)``. Its chunks only index its tasks: a task
    may return a tuple (e.g. a block's shares of two row blocks), and a layer over the
    blocks on and above the diagonal has no tasks below it. Compute the last layer's single
    task (:meth:`result`), or a layer with real chunks as an array."""

    def __init__(self, nb: int) -> None:
        self.nb = int(nb)
        self.token = uuid.uuid4().hex[:16]
        self._index: dict[str, list[Index]] = {}

    def layer(
        self, prefix: str, tasks: Mapping[Index, Task], deps: Sequence[Any] = (),
        chunks: tuple[tuple[int, ...], ...] | None = None,
        annotations: dict[str, Any] | None = None,
    ) -> Any:
        """A layer of ``tasks`` (by index; keys of ``deps``' tasks may be arguments), as a
        dask array with ``chunks`` (default: one unit per block in each of two axes),
        created under ``annotations``."""
        import dask.array as da
        import dask.base
        from dask.highlevelgraph import HighLevelGraph

        name = f"{prefix}-{self.token}"
        chunks = chunks or ((1,) * self.nb, (1,) * self.nb)
        dsk: dict[Any, Any] = {(name, *k): v for k, v in tasks.items()}
        context = dask.base.annotate(**annotations) if annotations else contextlib.nullcontext()
        with context:
            graph = HighLevelGraph.from_collections(name, dsk, dependencies=list(deps))
        self._index[name] = list(tasks)
        return da.Array(graph, name, chunks=chunks, dtype=np.float64,
                        meta=np.empty((0,) * len(chunks)))

    def blocks(
        self, prefix: str, kernel: Callable[..., Any], args: Callable[[int, int], tuple[Any, ...]],
        deps: Sequence[Any] = (), *, blocks: Sequence[tuple[int, int]] | None = None,
        chunks: tuple[tuple[int, ...], ...] | None = None,
        annotations: dict[str, Any] | None = None,
    ) -> Any:
        """A task per block (i, j) of ``blocks`` (default: :func:`upper_blocks`), running
        ``kernel(*args(i, j))``."""
        chosen = upper_blocks(self.nb) if blocks is None else blocks
        tasks = {(i, j): (kernel, *args(i, j)) for i, j in chosen}
        return self.layer(prefix, tasks, deps, chunks, annotations)

    def row_sums(
        self, prefix: str, parts: Any, reduce: Callable[..., Any] = sum_sides,
        args: Callable[[int], tuple[Any, ...]] = lambda r: (), *,
        keep: Callable[[int, int, int], bool] | None = None, column_order: bool = False,
        chunks: tuple[tuple[int, ...], ...] | None = None,
    ) -> Any:
        """A task per row block r, ``reduce(*args(r), sides, *shares)``, over the shares of
        a block layer ``parts`` that row block r receives (:func:`row_block_parts`, in that
        order; those for which ``keep(i, j, side)`` holds): ``shares[k][sides[k]]`` is the
        k-th. The default ``reduce`` returns their sum."""
        tasks = {}
        for r in range(self.nb):
            mine = [(i, j, side) for i, j, side in row_block_parts(r, self.nb,
                                                                   column_order=column_order)
                    if keep is None or keep(i, j, side)]
            tasks[(r, 0)] = (reduce, *args(r), tuple(side for _, _, side in mine),
                             *[(parts.name, i, j) for i, j, _ in mine])
        return self.layer(prefix, tasks, [parts], chunks or ((1,) * self.nb, (1,)))

    def total(
        self, prefix: str, reduce: Callable[..., Any], parts: Any,
        chunks: tuple[tuple[int, ...], ...] = ((1,), (1,)),
    ) -> Any:
        """One task, ``reduce(*results)``, over every task of the layer ``parts`` in the
        order they were made (over its chunks, for an array made elsewhere)."""
        index = self._index.get(parts.name)
        keys = ([(parts.name, *k) for k in index] if index is not None
                else list(_flat(parts.__dask_keys__())))
        return self.layer(prefix, {(0, 0): (reduce, *keys)}, [parts], chunks)

    @staticmethod
    def result(layer: Any) -> Any:
        """The single task of a one-task layer (:meth:`total`) as a ``Delayed``."""
        from dask.delayed import Delayed

        return Delayed((layer.name, 0, 0), layer.dask, layer=layer.name)


def _flat(keys: Any) -> Iterable[Any]:
    """The keys of a dask array's nested key lists, in order."""
    if isinstance(keys, list):
        for k in keys:
            yield from _flat(k)
    else:
        yield keys


# ============================================================================ scratch


def scratch_array(
    path: str, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: str = "f8",
    data: np.ndarray | None = None,
) -> zarr.Array[Any]:
    """A new uncompressed zarr array at ``path`` for a pass's inputs or results (replacing
    any there; zeros until written): scratch arrays are read back once, and their floats do
    not compress, so a compressor only costs time on both sides. ``data`` is written to it
    whole."""
    arr = zarr.create_array(path, shape=shape, chunks=chunks, dtype=dtype, compressors=None,
                            fill_value=0.0, overwrite=True)
    if data is not None:
        arr[:] = data
    return arr


def to_scratch(arr: Any, path: str) -> Any:
    """The delayed write of ``arr`` (a dask array with regular chunks) to a new zarr array
    at ``path`` with the same chunks, uncompressed (as :func:`scratch_array`)."""
    import dask.array as da

    return da.to_zarr(arr, path, compute=False, overwrite=True, compressors=None)
