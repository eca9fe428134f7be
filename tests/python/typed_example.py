"""A typed use of tandem, checked by mypy in test_typing.py (not run): the
annotations say what each form of a call returns."""

import concurrent.futures
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import numpy.typing as npt

import tandem
from tandem.distributed import ShardedIndex, ShardedResult

U64 = npt.NDArray[np.uint64]
Flags = npt.NDArray[np.bool_]


def columns(idx: tandem.Index) -> None:
    keys: U64 = np.arange(10, dtype=np.uint64)
    idx.load(keys, keys * np.uint64(2))
    values, found = idx.get(keys)
    got: Tuple[U64, Flags] = (values, found)
    present: Flags = idx.contains(keys)
    inserted: Flags = idx.insert(keys, 7)
    erased: Flags = idx.erase([1, 2, 3])
    lb: Tuple[Flags, U64, U64] = idx.lower_bound(np.array([4], dtype=np.int64))
    counts: U64 = idx.count(keys, keys)
    offsets, ks, vs = idx.scans(keys, keys, limit=4)
    entries: Tuple[U64, U64] = idx.scan(0, 100, limit=10)
    assert idx.put(keys, keys) is None
    print(got, present, inserted, erased, lb, counts, offsets, ks, vs, entries)


def one_key(idx: tandem.Index) -> None:
    value: Optional[int] = idx.get(5)
    value_or_zero: int = idx.get(np.uint64(5), 0)
    replaced: Optional[int] = idx.put(5, 6)
    inserted: bool = idx.insert(5, 6)
    erased: bool = idx.erase(5)
    entry: Optional[Tuple[int, int]] = idx.lower_bound(3)
    n: int = idx.count(0, 10)
    idx[7] = 8
    eight: int = idx[7]
    there: bool = 7 in idx
    print(value, value_or_zero, replaced, inserted, erased, entry, n, eight, there)


def iteration(idx: tandem.Index) -> Dict[int, int]:
    keys: List[int] = list(idx)
    values: Iterator[int] = idx.values()
    items: Iterator[Tuple[int, int]] = idx.items(0, 10)
    print(keys, values)
    return dict(items)


def batches(idx: tandem.Index) -> None:
    b: tandem.Batch = tandem.Batch().put(1, 10).get(np.arange(3, dtype=np.uint64)).scan(0, 9, limit=5)
    r: tandem.Result = idx.execute(b)
    vals: U64 = r.values
    future: "concurrent.futures.Future[tandem.Result]" = idx.submit(b)
    copy: tandem.Batch = tandem.Batch.from_ops(*b.ops())
    print(vals, future.result().found, len(copy), r[0], r.scan(2)[0])


def sharded(idx: ShardedIndex) -> None:
    keys: U64 = np.arange(10, dtype=np.uint64)
    values, found = idx.get(keys)
    got: Tuple[U64, Flags] = (values, found)
    value: Optional[int] = idx.get(5)
    inserted: bool = idx.insert(5, 6)
    r: ShardedResult = idx.execute(tandem.Batch().get(keys))
    future: "concurrent.futures.Future[ShardedResult]" = idx.submit(tandem.Batch().put(keys, 1))
    items: Iterator[Tuple[int, int]] = idx.items()
    print(got, value, inserted, r, future, items)


def either(idx: "tandem.IndexAPI[object]") -> int:
    """Code written once for a tandem.Index or a ShardedIndex."""
    return idx.count(0, 10) + len(idx.scan(0, 10, limit=5)[0])


def main() -> None:
    with tandem.Index(threads=2) as idx:
        columns(idx)
        one_key(idx)
        iteration(idx)
        batches(idx)
        either(idx)
