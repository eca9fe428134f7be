"""tandem: an ordered uint64 -> uint64 index for numpy columns.

The index's inner levels are searched on the GPU where one is found and on the
CPU otherwise (same answers); its leaves live in host memory. Work goes in as
columns (numpy ``uint64`` arrays, or anything the buffer protocol or DLPack
gives) and answers come out as numpy arrays the index wrote directly::

    import numpy as np, tandem

    idx = tandem.Index(threads=4)
    keys = np.arange(0, 2_000_000, 2, dtype=np.uint64)
    idx.load(keys, keys * 10)
    values, found = idx.get(np.array([4, 5], dtype=np.uint64))   # [40, 0], [True, False]
    idx.put(np.array([5], dtype=np.uint64), np.array([7], dtype=np.uint64))
    idx.get(5)                                                   # 7 (one key: an int or None)

Mixed batches (:class:`Batch`) run with :meth:`Index.execute`, or
asynchronously with :meth:`Index.submit` (a ``concurrent.futures.Future``) and
:meth:`Index.execute_async` (asyncio). Batches take effect one after another in
the order they were submitted; ops of one batch as if run one by one. The GIL
is released while the index works, so many Python threads can use one index.

:mod:`tandem.distributed` holds :class:`~tandem.distributed.ShardedIndex`,
the same interface over range shards on Ray.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import operator
import weakref
from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _tandem
from ._tandem import Error, InvariantError, Result

__all__ = ["Index", "Batch", "Result", "Error", "InvariantError", "max_scan_limit", "__version__"]

__version__: str = _tandem.__version__
#: Most entries one scan op may return (a larger limit is an invalid op).
max_scan_limit: int = _tandem.max_scan_limit
#: Whether this build of the package can use a GPU.
built_with_cuda: bool = _tandem.built_with_cuda

_GET, _PUT, _INSERT, _ERASE, _LOWER_BOUND = (_tandem.OpType.get, _tandem.OpType.put, _tandem.OpType.insert,
                                           _tandem.OpType.erase, _tandem.OpType.lower_bound)
_U64_MAX = (1 << 64) - 1

_DEVICES = {"auto": 0, "automatic": 0, "cpu": 1, "gpu": 2}
_GPU_ORDERS = {"full_sort": 0, "partial_sort": 1, "none": 2}
_LOG_SYNCS = {"none": 0, "group": 1, "batch": 2}
# Indexes still open when the interpreter exits are closed while it can
# still resolve their batches' futures.
_open_indexes: "weakref.WeakSet[Index]" = weakref.WeakSet()


@atexit.register
def _close_open_indexes() -> None:
    for idx in list(_open_indexes):
        idx.close()


_CONFIG_FIELDS = frozenset(
    name for name in dir(_tandem.Config) if not name.startswith("_")
)


def _config(options: dict) -> "_tandem.Config":
    cfg = _tandem.Config()
    for name, value in options.items():
        if name not in _CONFIG_FIELDS:
            raise TypeError(
                f"tandem.Index() got an unexpected keyword argument {name!r} "
                f"(the config fields are: {', '.join(sorted(_CONFIG_FIELDS))})"
            )
        if name == "device":
            value = _choice(name, value, _DEVICES)
        elif name == "gpu_order":
            value = _choice(name, value, _GPU_ORDERS)
        elif name == "log_sync_policy":
            value = _choice(name, value, _LOG_SYNCS)
        elif name == "gpu_share" and (value is None or value == "auto"):
            value = -1.0
        elif name == "storage_dir":
            value = "" if value is None else str(value)
        try:
            setattr(cfg, name, value)
        except TypeError:
            raise TypeError(
                f"tandem.Index(): {name}={value!r} has the wrong type "
                f"(expected {type(getattr(cfg, name)).__name__})"
            ) from None
    return cfg


def _choice(name: str, value: Any, names: dict) -> int:
    if isinstance(value, str):
        if value not in names:
            raise ValueError(f"tandem.Index(): {name} must be one of {sorted(names)}, got {value!r}")
        return names[value]
    raise TypeError(f"tandem.Index(): {name} must be one of {sorted(names)}, got {value!r}")


def _column(data: Any, name: str) -> np.ndarray:
    """A contiguous, aligned, native-endian 1-D uint64 array over `data`
    (no copy when it already is one; a copy of non-contiguous or misaligned
    input)."""
    if isinstance(data, np.ndarray):
        a = data
    elif hasattr(data, "__dlpack__"):
        a = np.from_dlpack(data)
    else:
        try:
            a = np.asarray(data)
        except (TypeError, ValueError, OverflowError) as e:
            raise TypeError(f"{name}: expected a uint64 array, got {type(data).__name__}: {e}") from None
        if not hasattr(data, "__array_interface__") and not isinstance(data, memoryview) and a.dtype.kind in "iub":
            # Python sequences of ints: uint64 when every element fits.
            if a.size and a.dtype.kind == "i" and a.min() < 0:
                raise ValueError(f"{name}: keys and values are uint64; got a negative number")
            try:
                a = np.asarray(data, dtype=np.uint64)
            except OverflowError as e:
                raise ValueError(f"{name}: {e}") from None
    dt = a.dtype
    if dt.kind != "u" or dt.itemsize != 8 or not dt.isnative:
        raise TypeError(f"{name}: expected a native-endian uint64 array, got dtype {dt}")
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {a.shape}")
    if not (a.flags.c_contiguous and a.flags.aligned):
        a = np.array(a, order="C", copy=True)  # strided or misaligned: one copy, aligned
    return a


# Answer arrays of this many elements or more come from the extension's
# reused memory (no page faults as the index writes them; page-locked where
# a GPU driver is found); smaller ones from numpy.
_POOLED = 1 << 14


def _answers_u64(n: int) -> np.ndarray:
    return _tandem.answer_u64(n) if n >= _POOLED else np.empty(n, dtype=np.uint64)


def _answers_bool(n: int) -> np.ndarray:
    return _tandem.answer_bool(n) if n >= _POOLED else np.empty(n, dtype=np.bool_)


def _same_length(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{name_a} and {name_b} differ in length: {a.shape[0]} and {b.shape[0]}")


def _is_scalar(x: Any) -> bool:
    return isinstance(x, (int, np.integer))


def _key(x: Any, name: str) -> int:
    try:
        k = operator.index(x)
    except TypeError:
        raise TypeError(f"{name}: expected an int in [0, 2^64), got {type(x).__name__}") from None
    if k < 0 or k > _U64_MAX:
        raise ValueError(f"{name}: {k} is outside [0, 2^64)")
    return k


class Batch(_tandem.NativeBatch):
    """A list of ops run together by :meth:`Index.execute` or :meth:`Index.submit`.

    Each method appends one op (int arguments) or one op per element (array
    arguments) and returns the batch, so calls chain::

        b = tandem.Batch().put(1, 10).get(1).scan(0, 100, limit=10)

    Ops take effect as if run one by one in the order added; an op that
    cannot run (a scan or count with lo > hi, a scan limit above
    :data:`max_scan_limit`) gets status 1 (invalid) in the result while the
    others run.
    """

    def get(self, keys: Any) -> "Batch":
        """Appends a get of each key."""
        if _is_scalar(keys):
            self._get(_key(keys, "key"))
        else:
            self._get_many(_column(keys, "keys"))
        return self

    def put(self, keys: Any, values: Any) -> "Batch":
        """Appends a put (set, replacing any value) of each (key, value)."""
        if _is_scalar(keys):
            self._put(_key(keys, "key"), _key(values, "value"))
        else:
            k, v = _column(keys, "keys"), _column(values, "values")
            _same_length(k, v, "keys", "values")
            self._put_many(k, v)
        return self

    def insert(self, keys: Any, values: Any) -> "Batch":
        """Appends an insert (set only where the key is absent) of each pair."""
        if _is_scalar(keys):
            self._insert(_key(keys, "key"), _key(values, "value"))
        else:
            k, v = _column(keys, "keys"), _column(values, "values")
            _same_length(k, v, "keys", "values")
            self._insert_many(k, v)
        return self

    def erase(self, keys: Any) -> "Batch":
        """Appends an erase of each key."""
        if _is_scalar(keys):
            self._erase(_key(keys, "key"))
        else:
            self._erase_many(_column(keys, "keys"))
        return self

    def lower_bound(self, keys: Any) -> "Batch":
        """Appends a lower_bound (first entry with key >= the key) of each key."""
        if _is_scalar(keys):
            self._lower_bound(_key(keys, "key"))
        else:
            self._lower_bound_many(_column(keys, "keys"))
        return self

    def scan(self, lo: int, hi: int, limit: int = 4096, ordered: bool = True) -> "Batch":
        """Appends a scan of the entries with lo <= key <= hi, at most `limit`
        of them (ascending keys; ``ordered=False``: the same entries in any
        order)."""
        self._scan(_key(lo, "lo"), _key(hi, "hi"), _key(limit, "limit"), bool(ordered))
        return self

    def count(self, lo: int, hi: int) -> "Batch":
        """Appends a count of the keys in [lo, hi]."""
        self._count(_key(lo, "lo"), _key(hi, "hi"))
        return self

    def __repr__(self) -> str:
        return f"tandem.Batch({len(self)} ops)"


class Index:
    """An ordered uint64 -> uint64 index.

    Keyword arguments are the fields of ``tandem::config`` (see the C++ header
    config.hpp or docs/tuning.md), for example ``threads`` (0: one per
    hardware thread), ``device`` ("auto", "cpu" or "gpu"), ``gpu_device``
    (the GPU's ordinal), ``gpu_share`` (a float in [0, 1] or "auto"),
    ``leaf_fill``, ``storage_dir`` (a folder that makes the index durable:
    reopening it restores every acknowledged write), ``log_sync_policy``
    ("none", "group", "batch"). An unknown name raises TypeError, a value out
    of range ValueError naming the field.

    Column methods take 1-D uint64 arrays (numpy, or anything the buffer
    protocol or DLPack gives, read-only ones included; non-contiguous ones
    are copied once) and return numpy arrays; other dtypes raise TypeError,
    other shapes or mismatched lengths ValueError, naming the argument. The
    one-key forms take and return ints. Every method may be called from any
    number of threads; the GIL is released while the index works.

    Use it as a context manager, or call :meth:`close`, to wait for the
    batches in flight and free the index at a known point.
    """

    def __init__(self, **config: Any) -> None:
        self._ix = _tandem.NativeIndex(_config(config))
        _open_indexes.add(self)

    # ---- lifetime and state -----------------------------------------------------

    def close(self) -> None:
        """Waits for every batch in flight, then frees the index (and, with
        storage_dir, releases its folder). Later calls raise tandem.Error."""
        self._ix.close()

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return self._ix.size()

    def stats(self) -> dict:
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

    # ---- columns -----------------------------------------------------------------

    def load(self, keys: Any, values: Any) -> None:
        """Replaces the contents with the pairs (any order; for a key given
        twice the later pair wins)."""
        k, v = _column(keys, "keys"), _column(values, "values")
        _same_length(k, v, "keys", "values")
        self._ix.load(k, v)

    def get(self, keys: Any) -> Any:
        """``values, found = idx.get(keys)``: uint64 values (0 where absent) and
        bool found flags. With one int key: its value, or None."""
        if _is_scalar(keys):
            return self._ix.get_one(keys)
        k = _column(keys, "keys")
        values = _answers_u64(k.shape[0])
        found = _answers_bool(k.shape[0])
        self._ix.columns(_GET, k, None, values, found.view(np.uint8), None)
        return values, found

    def contains(self, keys: Any) -> Any:
        """Bool flags: whether each key is present (one int key: a bool)."""
        if _is_scalar(keys):
            return self._ix.get_one(keys) is not None
        k = _column(keys, "keys")
        found = _answers_bool(k.shape[0])
        self._ix.columns(_GET, k, None, None, found.view(np.uint8), None)
        return found

    def put(self, keys: Any, values: Any) -> Any:
        """Sets each key to its value. With one int key: returns the value it
        replaced, or None."""
        if _is_scalar(keys):
            return self._ix.put_one(keys, values)
        k, v = _column(keys, "keys"), _column(values, "values")
        _same_length(k, v, "keys", "values")
        self._ix.columns(_PUT, k, v, None, None, None)
        return None

    def insert(self, keys: Any, values: Any) -> Any:
        """Sets each key that is absent; returns bool flags, True where it
        inserted (a present key keeps its value). One int key: a bool."""
        if _is_scalar(keys):
            return self._ix.insert_one(keys, values)
        k, v = _column(keys, "keys"), _column(values, "values")
        _same_length(k, v, "keys", "values")
        present = _answers_bool(k.shape[0])
        self._ix.columns(_INSERT, k, v, None, present.view(np.uint8), None)
        np.logical_not(present, out=present)
        return present

    def erase(self, keys: Any) -> Any:
        """Removes each key; returns bool flags, True where it was present.
        One int key: a bool."""
        if _is_scalar(keys):
            return self._ix.erase_one(keys) is not None
        k = _column(keys, "keys")
        erased = _answers_bool(k.shape[0])
        self._ix.columns(_ERASE, k, None, None, erased.view(np.uint8), None)
        return erased

    def pop(self, key: int, default: Any = None) -> Any:
        """Removes one key and returns its value (or `default` when absent)."""
        old = self._ix.erase_one(key)
        return default if old is None else old

    def lower_bound(self, keys: Any) -> Any:
        """``found, keys, values``: for each key, the entry with the smallest
        key >= it (found False, key and value 0 where there is none). One int
        key: a (key, value) tuple or None."""
        if _is_scalar(keys):
            return self._ix.lower_bound_one(keys)
        k = _column(keys, "keys")
        n = k.shape[0]
        found = _answers_bool(n)
        out_keys = _answers_u64(n)
        values = _answers_u64(n)
        self._ix.columns(_LOWER_BOUND, k, None, values, found.view(np.uint8), out_keys)
        return found, out_keys, values

    def scan(self, lo: int = 0, hi: int = _U64_MAX, limit: Optional[int] = None,
             ordered: bool = True) -> Tuple[np.ndarray, np.ndarray]:
        """``keys, values`` of the entries with lo <= key <= hi in key order,
        at most `limit` of them (None: all of them, fetched in pieces of
        :data:`max_scan_limit`)."""
        lo, hi = _key(lo, "lo"), _key(hi, "hi")
        if lo > hi:
            raise ValueError(f"scan: lo ({lo}) > hi ({hi})")
        if limit is not None:
            _, keys, values = self._ix.scans(np.array([lo], np.uint64), np.array([hi], np.uint64),
                                             _key(limit, "limit"), bool(ordered))
            return keys, values
        pieces = []
        while True:
            _, keys, values = self._ix.scans(np.array([lo], np.uint64), np.array([hi], np.uint64),
                                             max_scan_limit, True)
            pieces.append((keys, values))
            if keys.shape[0] < max_scan_limit or int(keys[-1]) >= hi:
                break
            lo = int(keys[-1]) + 1
        if len(pieces) == 1:
            return pieces[0]
        return (np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]))

    def scans(self, los: Any, his: Any, limit: int = 4096,
              ordered: bool = True) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Many scans at once: ``offsets, keys, values`` where scan i's entries
        are ``keys[offsets[i]:offsets[i+1]]`` (and the same of values), each
        at most `limit` long. Raises ValueError for lo > hi or a limit above
        :data:`max_scan_limit`, tandem.Error when the entries pass the
        index's max_batch_output_bytes."""
        l, h = _column(los, "los"), _column(his, "his")
        _same_length(l, h, "los", "his")
        return self._ix.scans(l, h, _key(limit, "limit"), bool(ordered))

    def count(self, los: Any, his: Any) -> Any:
        """The number of keys in each [lo, hi] (uint64 array). Two ints: an int."""
        if _is_scalar(los):
            counts = self._ix.counts(np.array([_key(los, "lo")], np.uint64), np.array([_key(his, "hi")], np.uint64))
            return int(counts[0])
        l, h = _column(los, "los"), _column(his, "his")
        _same_length(l, h, "los", "his")
        return self._ix.counts(l, h)

    # ---- the mapping protocol, one key at a time ----------------------------------------

    def __getitem__(self, key: int) -> int:
        v = self._ix.get_one(key)
        if v is None:
            raise KeyError(key)
        return v

    def __setitem__(self, key: int, value: int) -> None:
        self._ix.put_one(key, value)

    def __delitem__(self, key: int) -> None:
        if self._ix.erase_one(key) is None:
            raise KeyError(key)

    def __contains__(self, key: Any) -> bool:
        return _is_scalar(key) and 0 <= key <= _U64_MAX and self._ix.get_one(key) is not None

    # ---- batches -------------------------------------------------------------------

    def execute(self, batch: Batch) -> Result:
        """Runs a batch and returns its :class:`Result`; raises when the batch
        failed as a whole (then it took no effect)."""
        return self._ix.execute(batch)

    def submit(self, batch: Batch) -> "concurrent.futures.Future[Result]":
        """Queues a batch; the future's result is its :class:`Result` (or the
        exception it failed with). The batch is copied: it may be changed or
        reused at once."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # runs from now on: it cannot be cancelled
        self._ix.submit(batch, future)
        return future

    async def execute_async(self, batch: Batch) -> Result:
        """``await idx.execute_async(b)``: :meth:`submit` for asyncio."""
        return await asyncio.wrap_future(self.submit(batch))

    def __repr__(self) -> str:
        try:
            return f"tandem.Index({len(self)} keys)"
        except Error:
            return "tandem.Index(closed)"
