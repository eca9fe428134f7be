"""tandem.Index: the shared interface (tandem._api) over one native index."""

from __future__ import annotations

import atexit
import concurrent.futures
import weakref
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np

from . import _tandem
from ._api import IndexAPI
from ._batch import Batch
from ._convert import config as make_config
from ._device import DeviceColumn
from ._tandem import Error, Result
from ._types import BoolArray, U64Array

# Indexes still open when the interpreter exits are closed while it can
# still resolve their batches' futures.
_open_indexes: "weakref.WeakSet[Index]" = weakref.WeakSet()


@atexit.register
def _close_open_indexes() -> None:
    for idx in list(_open_indexes):
        idx.close()


class Index(IndexAPI[Result]):
    """An ordered uint64 -> uint64 index.

    Keyword arguments are the fields of ``tandem::config`` (see the C++ header
    config.hpp or docs/tuning.md), for example ``threads`` (0: one per
    hardware thread), ``device`` ("auto", "cpu" or "gpu"), ``gpu_device``
    (the GPU's ordinal), ``gpu_devices`` (a list of ordinals: one index over
    several GPUs), ``gpu_share`` (a float in [0, 1] or "auto"),
    ``leaf_fill``, ``storage_dir`` (a folder that makes the index durable:
    reopening it restores every acknowledged write), ``log_sync_policy``
    ("none", "group", "batch"). An unknown name or a wrong type raises
    TypeError, a value out of range ValueError naming the field.

    Keys and values are ints in [0, 2^64). Column methods take 1-D arrays of
    them (numpy, or anything the buffer protocol or DLPack gives, read-only
    ones included; uint64 is used in place, other integer dtypes are checked
    and copied, non-contiguous ones copied once) and return numpy arrays.
    ``get``, ``contains``, ``lower_bound``, ``put``, ``insert`` and ``erase``
    also take uint64 arrays in GPU memory (cupy, torch, anything with
    ``__cuda_array_interface__`` or CUDA DLPack) in place, and answer with
    arrays of the same kind on that GPU (docs/python.md). One-key forms
    take and return ints. A bool, float or string key raises
    TypeError, an int outside [0, 2^64) ValueError, both naming the argument;
    other shapes or mismatched lengths raise ValueError. Iterating gives the
    keys in order (``keys()``, ``values()``, ``items()`` too), fetched in
    pieces like :meth:`scan`. Every method may be called from any number of
    threads; the GIL is released while the index works.

    Use it as a context manager, or call :meth:`close`, to wait for the
    batches in flight and free the index at a known point.
    """

    def __init__(self, **config: Any) -> None:
        self._ix = ix = _tandem.NativeIndex(make_config(config))
        # The one-key calls go straight to the native methods: no Python
        # frame between the caller's get(k) and the index.
        self._get_one = ix.get_one  # type: ignore[method-assign]
        self._put_one = ix.put_one  # type: ignore[method-assign]
        self._insert_one = ix.insert_one  # type: ignore[method-assign]
        self._erase_one = ix.erase_one  # type: ignore[method-assign]
        self._lower_bound_one = ix.lower_bound_one  # type: ignore[method-assign]
        _open_indexes.add(self)

    # ---- primitives of IndexAPI ------------------------------------------------------

    def _column_op(self, op: _tandem.OpType, keys: U64Array, values: Optional[U64Array],
                   values_out: Optional[U64Array], found_out: Optional[BoolArray],
                   keys_out: Optional[U64Array]) -> None:
        self._ix.columns(op, keys, values, values_out,
                         None if found_out is None else found_out.view(np.uint8), keys_out)

    def _device_op(self, op: _tandem.OpType, keys: DeviceColumn, values: int, values_out: int, found_out: int,
                   keys_out: int) -> None:
        self._ix.device_columns(op, keys.device, keys.stream, keys.n, keys.ptr, values, values_out, found_out,
                                keys_out)

    def _load(self, keys: U64Array, values: U64Array) -> None:
        self._ix.load(keys, values)

    def _scan(self, lo: int, hi: int, limit: Optional[int], ordered: bool) -> Tuple[U64Array, U64Array]:
        one_lo, one_hi = np.array([lo], np.uint64), np.array([hi], np.uint64)
        if limit is not None:
            _, keys, values = self._ix.scans(one_lo, one_hi, limit, ordered)
            return keys, values
        pieces = list(self._scan_in_pieces(lo, hi))
        if len(pieces) == 1:
            return pieces[0]
        if not pieces:
            return np.empty(0, np.uint64), np.empty(0, np.uint64)
        return np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])

    def _scans(self, los: U64Array, his: U64Array, limit: int, ordered: bool) -> Any:
        return self._ix.scans(los, his, limit, ordered)

    def _counts(self, los: U64Array, his: U64Array) -> Any:
        return self._ix.counts(los, his)

    def _execute(self, batch: Batch) -> Result:
        return self._ix.execute(batch)

    def _submit(self, batch: Batch) -> "concurrent.futures.Future[Result]":
        future: "concurrent.futures.Future[Result]" = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # runs from now on: it cannot be cancelled
        self._ix.submit(batch, future)
        return future

    # ---- lifetime and state ------------------------------------------------------------

    def close(self) -> None:
        """Waits for every batch in flight, then frees the index (and, with
        storage_dir, releases its folder). Later calls raise tandem.Error."""
        self._ix.close()

    def __len__(self) -> int:
        return self._ix.size()

    def stats(self) -> Dict[str, Any]:
        """Counters and timings as of the last completed batch (a dict of
        ``tandem::stats``' fields)."""
        return self._ix.stats()

    def set_gpu_share(self, share: Union[float, str]) -> None:
        """Share of each batch's keys routed on the GPU, from the next batch
        on: a float in [0, 1], or "auto" to let the index balance GPU and CPU."""
        if isinstance(share, str):
            if share != "auto":
                raise ValueError(f"set_gpu_share: expected a float in [0, 1] or 'auto', got {share!r}")
            self._ix.set_gpu_share_auto()
        else:
            self._ix.set_gpu_share(float(share))

    def verify(self) -> None:
        """Waits for earlier batches, then checks every invariant; raises
        tandem.InvariantError naming the first broken one."""
        self._ix.verify()

    def compact(self) -> None:
        """Gives the memory of erased keys back (see index::compact)."""
        self._ix.compact()

    def checkpoint(self) -> None:
        """Writes the storage folder's checkpoint and trims its redo log."""
        self._ix.checkpoint()

    def save(self, path: str) -> None:
        """Writes every pair to a snapshot file (atomically replaced)."""
        self._ix.save(str(path))

    def open(self, path: str) -> None:
        """Replaces the contents with those of a snapshot file."""
        self._ix.open(str(path))

    def __repr__(self) -> str:
        try:
            return f"tandem.Index({len(self)} keys)"
        except Error:
            return "tandem.Index(closed)"
