"""The public methods tandem.Index and tandem.distributed.ShardedIndex share,
written once: argument handling (tandem._convert), the one-key and column
forms, the mapping protocol, ordered iteration and their docstrings, over a
few primitives each class implements (see IndexAPI)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Generic, Iterator, Optional, Tuple, TypeVar, Union, overload

import numpy as np

from . import _tandem
from ._batch import Batch
from ._convert import U64_MAX, answers_bool, answers_u64, column, is_scalar, same_length, values_for
from ._convert import key as as_key
from ._device import DeviceColumn, device_column, empty_like, pointer
from ._types import BoolArray, Column, I64Array, Key, U64Array

_R = TypeVar("_R", covariant=True)  # an IndexAPI[Result] is an IndexAPI[object]
_D = TypeVar("_D")
_Self = TypeVar("_Self", bound="IndexAPI[Any]")

_GET, _PUT, _INSERT = _tandem.OpType.get, _tandem.OpType.put, _tandem.OpType.insert
_ERASE, _LOWER_BOUND = _tandem.OpType.erase, _tandem.OpType.lower_bound
#: Entries fetched per piece by scan(limit=None).
PIECE = _tandem.max_scan_limit
#: Iteration's first piece; each next one twice as large, up to PIECE, so a
#: loop that stops early reads little and a long one few pieces.
FIRST_PIECE = 4096


class IndexAPI(Generic[_R]):
    """An ordered uint64 -> uint64 index: the interface of tandem.Index and
    ShardedIndex (``_R``: the type of a batch's result).

    Keys and values are ints in [0, 2^64). Column methods take 1-D arrays of
    them (numpy, or anything the buffer protocol or DLPack gives, read-only
    ones included; uint64 is used in place, other integer dtypes are checked
    and copied, non-contiguous ones copied once) and return numpy arrays;
    one-key forms take and return ints. A bool, float or string key raises
    TypeError, an int outside [0, 2^64) ValueError, both naming the argument;
    mismatched lengths or shapes raise ValueError.

    A subclass implements the primitives below; arguments reach them checked
    and converted (ints in range, contiguous uint64 columns of equal length).
    What the index itself checks (a scan or count with lo > hi, a scan limit
    above max_scan_limit) is left to it.
    """

    # ---- primitives ---------------------------------------------------------------

    def _column_op(self, op: _tandem.OpType, keys: U64Array, values: Optional[U64Array],
                   values_out: Optional[U64Array], found_out: Optional[BoolArray],
                   keys_out: Optional[U64Array]) -> None:
        """Runs one op of type `op` (get, put, insert, erase or lower_bound) per
        key, in order, writing each given output (all elements): get: value (0
        when absent) and found; put/insert/erase: found = the key was present;
        lower_bound: found, keys_out and values_out = the first entry >= key
        (0 where none)."""
        raise NotImplementedError

    def _device_op(self, op: _tandem.OpType, keys: DeviceColumn, values: int, values_out: int, found_out: int,
                   keys_out: int) -> None:
        """_column_op over arrays in GPU memory (device pointers as ints, 0:
        none), on the GPU keys.device, after keys.stream's queued work."""
        raise TypeError(f"{type(self).__name__}: arrays in GPU memory are taken by tandem.Index only")

    def _get_one(self, key: int) -> Optional[int]:
        """The key's value, or None."""
        raise NotImplementedError

    def _put_one(self, key: int, value: int) -> Optional[int]:
        """Sets the key; the value it replaced, or None."""
        raise NotImplementedError

    def _insert_one(self, key: int, value: int) -> bool:
        """Sets the key if absent; True when it did."""
        raise NotImplementedError

    def _erase_one(self, key: int) -> Optional[int]:
        """Removes the key; the value it had, or None."""
        raise NotImplementedError

    def _lower_bound_one(self, key: int) -> Optional[Tuple[int, int]]:
        """(key, value) of the first entry with key >= `key`, or None."""
        raise NotImplementedError

    def _load(self, keys: U64Array, values: U64Array) -> None:
        """Replaces the contents with the pairs."""
        raise NotImplementedError

    def _scan(self, lo: int, hi: int, limit: Optional[int], ordered: bool) -> Tuple[U64Array, U64Array]:
        """(keys, values) of the entries in [lo, hi], at most `limit` (None:
        all of them; see _scan_in_pieces)."""
        raise NotImplementedError

    def _scans(self, los: U64Array, his: U64Array, limit: int,
               ordered: bool) -> Tuple[I64Array, U64Array, U64Array]:
        """(offsets, keys, values) of many scans (see scans)."""
        raise NotImplementedError

    def _counts(self, los: U64Array, his: U64Array) -> U64Array:
        """The number of keys in each [lo, hi]."""
        raise NotImplementedError

    def _execute(self, batch: Batch) -> _R:
        """Runs the batch; its result."""
        raise NotImplementedError

    def _submit(self, batch: Batch) -> "concurrent.futures.Future[_R]":
        """Queues the batch (copied); a future of its result."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def _scan_in_pieces(self, lo: int, hi: int) -> Iterator[Tuple[U64Array, U64Array]]:
        """(keys, values) of the entries in [lo, hi] in key order, in pieces of
        FIRST_PIECE entries doubling up to PIECE (each piece read at its own
        moment), by _scan."""
        piece = FIRST_PIECE
        while True:
            keys, values = self._scan(lo, hi, piece, True)
            if keys.shape[0]:
                yield keys, values
            if keys.shape[0] < piece or int(keys[-1]) >= hi:
                return
            lo = int(keys[-1]) + 1
            piece = min(2 * piece, PIECE)

    # ---- lifetime ------------------------------------------------------------------

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- columns -------------------------------------------------------------------

    def load(self, keys: Column, values: Union[Key, Column]) -> None:
        """Replaces the contents with the pairs (any order; for a key given
        twice the later pair wins; one value: every key's)."""
        k = column(keys, "keys")
        self._load(k, values_for(values, k.shape[0]))

    def _on_device(self, op: _tandem.OpType, keys: DeviceColumn, values: Any, found: bool = False,
                   out_keys: bool = False, out_values: bool = False) -> Tuple[Any, ...]:
        """Runs `op` over keys in GPU memory; the answers asked for (found
        flags, keys, values, in that order) as arrays of the keys' kind on
        their GPU."""
        v = 0
        if op in (_PUT, _INSERT):
            dv = device_column(values, "values")
            if dv is None:
                raise TypeError("values: the keys are in GPU memory, so must the values be (an array as long as keys)")
            if dv.n != keys.n:
                raise ValueError(f"keys and values differ in length: {keys.n} and {dv.n}")
            v = dv.ptr
        like, n, dev = keys.owner, keys.n, keys.device
        flags = empty_like(like, n, "bool", dev) if found else None
        ks = empty_like(like, n, "uint64", dev) if out_keys else None
        vs = empty_like(like, n, "uint64", dev) if out_values else None
        self._device_op(op, keys, v, pointer(vs) if vs is not None else 0, pointer(flags) if flags is not None else 0,
                        pointer(ks) if ks is not None else 0)
        return tuple(a for a in (flags, ks, vs) if a is not None)

    @overload
    def get(self, keys: Key) -> Optional[int]: ...
    @overload
    def get(self, keys: Key, default: _D) -> Union[int, _D]: ...
    @overload
    def get(self, keys: Column) -> Tuple[U64Array, BoolArray]: ...

    def get(self, keys: Any, default: Any = None) -> Any:
        """``values, found = idx.get(keys)``: uint64 values (0 where absent) and
        bool found flags. With one int key: its value, or `default` (None).
        Keys in GPU memory (cupy, torch, __cuda_array_interface__, CUDA DLPack)
        give answers there, as arrays of the same kind."""
        if type(keys) is int and 0 <= keys <= U64_MAX:
            v = self._get_one(keys)
            return default if v is None else v
        if is_scalar(keys):
            v = self._get_one(as_key(keys))
            return default if v is None else v
        if default is not None:
            raise TypeError("get: a default is for one key (an array of keys gets found flags)")
        d = device_column(keys, "keys")
        if d is not None:
            found, values = self._on_device(_GET, d, None, found=True, out_values=True)
            return values, found
        k = column(keys, "keys")
        values, found = answers_u64(k.shape[0]), answers_bool(k.shape[0])
        self._column_op(_GET, k, None, values, found, None)
        return values, found

    @overload
    def contains(self, keys: Key) -> bool: ...
    @overload
    def contains(self, keys: Column) -> BoolArray: ...

    def contains(self, keys: Any) -> Any:
        """Bool flags: whether each key is present (one int key: a bool)."""
        if is_scalar(keys):
            return self._get_one(as_key(keys)) is not None
        d = device_column(keys, "keys")
        if d is not None:
            return self._on_device(_GET, d, None, found=True)[0]
        k = column(keys, "keys")
        found = answers_bool(k.shape[0])
        self._column_op(_GET, k, None, None, found, None)
        return found

    @overload
    def put(self, keys: Key, values: Key) -> Optional[int]: ...
    @overload
    def put(self, keys: Column, values: Union[Key, Column]) -> None: ...

    def put(self, keys: Any, values: Any) -> Any:
        """Sets each key to its value (one value: every key's). With one int
        key: returns the value it replaced, or None."""
        if is_scalar(keys):
            return self._put_one(as_key(keys), as_key(values, "value"))
        d = device_column(keys, "keys")
        if d is not None:
            self._on_device(_PUT, d, values)
            return None
        k = column(keys, "keys")
        self._column_op(_PUT, k, values_for(values, k.shape[0]), None, None, None)
        return None

    @overload
    def insert(self, keys: Key, values: Key) -> bool: ...
    @overload
    def insert(self, keys: Column, values: Union[Key, Column]) -> BoolArray: ...

    def insert(self, keys: Any, values: Any) -> Any:
        """Sets each key that is absent (one value: every key's); returns bool
        flags, True where it inserted (a present key keeps its value). One int
        key: a bool."""
        if is_scalar(keys):
            return self._insert_one(as_key(keys), as_key(values, "value"))
        d = device_column(keys, "keys")
        if d is not None:
            inserted = self._on_device(_INSERT, d, values, found=True)[0]
            _tandem.invert_flags(pointer(inserted), d.n, d.device)  # present -> inserted
            return inserted
        k = column(keys, "keys")
        present = answers_bool(k.shape[0])
        self._column_op(_INSERT, k, values_for(values, k.shape[0]), None, present, None)
        np.logical_not(present, out=present)
        return present

    @overload
    def erase(self, keys: Key) -> bool: ...
    @overload
    def erase(self, keys: Column) -> BoolArray: ...

    def erase(self, keys: Any) -> Any:
        """Removes each key; returns bool flags, True where it was present.
        One int key: a bool."""
        if is_scalar(keys):
            return self._erase_one(as_key(keys)) is not None
        d = device_column(keys, "keys")
        if d is not None:
            return self._on_device(_ERASE, d, None, found=True)[0]
        k = column(keys, "keys")
        erased = answers_bool(k.shape[0])
        self._column_op(_ERASE, k, None, None, erased, None)
        return erased

    @overload
    def pop(self, key: Key) -> Optional[int]: ...
    @overload
    def pop(self, key: Key, default: _D) -> Union[int, _D]: ...

    def pop(self, key: Key, default: Any = None) -> Any:
        """Removes one key and returns its value (or `default` when absent)."""
        old = self._erase_one(as_key(key))
        return default if old is None else old

    @overload
    def lower_bound(self, keys: Key) -> Optional[Tuple[int, int]]: ...
    @overload
    def lower_bound(self, keys: Column) -> Tuple[BoolArray, U64Array, U64Array]: ...

    def lower_bound(self, keys: Any) -> Any:
        """``found, keys, values``: for each key, the entry with the smallest
        key >= it (found False, key and value 0 where there is none). One int
        key: a (key, value) tuple or None."""
        if is_scalar(keys):
            return self._lower_bound_one(as_key(keys))
        d = device_column(keys, "keys")
        if d is not None:
            return self._on_device(_LOWER_BOUND, d, None, found=True, out_keys=True, out_values=True)
        k = column(keys, "keys")
        n = k.shape[0]
        found, out_keys, values = answers_bool(n), answers_u64(n), answers_u64(n)
        self._column_op(_LOWER_BOUND, k, None, values, found, out_keys)
        return found, out_keys, values

    def scan(self, lo: Key = 0, hi: Key = U64_MAX, limit: Optional[Key] = None,
             ordered: bool = True) -> Tuple[U64Array, U64Array]:
        """``keys, values`` of the entries with lo <= key <= hi in key order,
        at most `limit` of them (None: all of them, fetched in pieces of
        :data:`max_scan_limit`; ``ordered=False``: the same entries in any
        order). Raises ValueError for lo > hi or a limit above max_scan_limit."""
        return self._scan(as_key(lo, "lo"), as_key(hi, "hi"), None if limit is None else as_key(limit, "limit"),
                          bool(ordered))

    def scans(self, los: Column, his: Column, limit: Key = 4096,
              ordered: bool = True) -> Tuple[I64Array, U64Array, U64Array]:
        """Many scans at once: ``offsets, keys, values`` where scan i's entries
        are ``keys[offsets[i]:offsets[i+1]]`` (and the same of values), each
        at most `limit` long. Raises ValueError for lo > hi or a limit above
        :data:`max_scan_limit`, tandem.Error when the entries pass the
        index's max_batch_output_bytes."""
        lo, hi = column(los, "los"), column(his, "his")
        same_length(lo, hi, "los", "his")
        return self._scans(lo, hi, as_key(limit, "limit"), bool(ordered))

    @overload
    def count(self, los: Key, his: Key) -> int: ...
    @overload
    def count(self, los: Column, his: Column) -> U64Array: ...

    def count(self, los: Any, his: Any) -> Any:
        """The number of keys in each [lo, hi] (uint64 array). Two ints: an
        int. Raises ValueError for lo > hi."""
        if is_scalar(los):
            lo = np.array([as_key(los, "lo")], dtype=np.uint64)
            return int(self._counts(lo, np.array([as_key(his, "hi")], dtype=np.uint64))[0])
        lo, hi = column(los, "los"), column(his, "his")
        same_length(lo, hi, "los", "his")
        return self._counts(lo, hi)

    # ---- the mapping protocol, one key at a time --------------------------------------

    def __getitem__(self, k: Key) -> int:
        v = self._get_one(as_key(k))
        if v is None:
            raise KeyError(k)
        return v

    def __setitem__(self, k: Key, value: Key) -> None:
        self._put_one(as_key(k), as_key(value, "value"))

    def __delitem__(self, k: Key) -> None:
        if self._erase_one(as_key(k)) is None:
            raise KeyError(k)

    def __contains__(self, k: object) -> bool:
        if type(k) is not int or not 0 <= k <= U64_MAX:
            try:
                k = as_key(k)
            except (TypeError, ValueError):
                return False  # as a dict answers for a key it cannot hold
        return self._get_one(k) is not None

    # ---- ordered iteration, fetched in pieces like scan -------------------------------

    def __iter__(self) -> Iterator[int]:
        """The keys in ascending order, fetched in pieces (4096 keys, then
        twice as many each time, up to max_scan_limit; each piece reads the
        index at its own moment: writes made while iterating show in the
        pieces not yet fetched)."""
        for keys, _ in self._scan_in_pieces(0, U64_MAX):
            yield from keys.tolist()

    def keys(self, lo: Key = 0, hi: Key = U64_MAX) -> Iterator[int]:
        """The keys in [lo, hi] in ascending order, fetched in pieces (as iter)."""
        for keys, _ in self._scan_in_pieces(as_key(lo, "lo"), as_key(hi, "hi")):
            yield from keys.tolist()

    def values(self, lo: Key = 0, hi: Key = U64_MAX) -> Iterator[int]:
        """The values of the keys in [lo, hi], in key order, fetched in pieces."""
        for _, values in self._scan_in_pieces(as_key(lo, "lo"), as_key(hi, "hi")):
            yield from values.tolist()

    def items(self, lo: Key = 0, hi: Key = U64_MAX) -> Iterator[Tuple[int, int]]:
        """(key, value) pairs of the keys in [lo, hi], in key order, fetched in
        pieces."""
        for keys, values in self._scan_in_pieces(as_key(lo, "lo"), as_key(hi, "hi")):
            yield from zip(keys.tolist(), values.tolist())

    # ---- batches -----------------------------------------------------------------------

    def execute(self, batch: Batch) -> _R:
        """Runs a :class:`tandem.Batch` and returns its result; raises when the
        batch failed as a whole."""
        return self._execute(batch)

    def submit(self, batch: Batch) -> "concurrent.futures.Future[_R]":
        """Queues a batch; the future's result is its result (or the exception
        it failed with). The batch is copied: it may be changed or reused at
        once. It takes effect after every call made before it."""
        return self._submit(batch)

    async def execute_async(self, batch: Batch) -> _R:
        """``await idx.execute_async(b)``: :meth:`submit` for asyncio."""
        return await asyncio.wrap_future(self.submit(batch))
