"""Arguments in, answer arrays out: every check of a key, a value, a column or
a config keyword, and every message it raises, for tandem.Index, Batch and
tandem.distributed.ShardedIndex alike.

One rule for keys and values, whatever holds them: an integer in
[0, 2^64). A Python int, a numpy integer, a sequence, a buffer or an array
of integers (any integer dtype; signed ones are checked for negative
numbers and copied to uint64, as are other widths) are accepted; bools,
floats and strings are not (TypeError). An integer outside the range raises
ValueError naming the argument.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Dict, List

import numpy as np

from . import _tandem

if TYPE_CHECKING:
    import numpy.typing as npt

U64_MAX = (1 << 64) - 1
_RANGE = "[0, 2^64)"

# Answer arrays of this many elements or more come from the extension's
# reused memory (no page faults as the index writes them; page-locked where
# a GPU driver is found); smaller ones from numpy.
_POOLED = 1 << 14

_DEVICES = {"auto": 0, "automatic": 0, "cpu": 1, "gpu": 2}
_GPU_ORDERS = {"full_sort": 0, "partial_sort": 1, "none": 2}
_LOG_SYNCS = {"none": 0, "group": 1, "batch": 2}
_CHOICES = {"device": _DEVICES, "gpu_order": _GPU_ORDERS, "log_sync_policy": _LOG_SYNCS}
CONFIG_FIELDS = frozenset(name for name in dir(_tandem.Config) if not name.startswith("_"))


def is_scalar(x: Any) -> bool:
    """Whether `x` is one key (or one value) rather than a column: a number of
    any kind, a string or None (so that a float, a bool or a string is
    refused as a key, not read as a column of one)."""
    return isinstance(x, (int, float, complex, str, bytes, np.generic)) or x is None


def key(x: Any, name: str = "key") -> int:
    """`x` as an int in [0, 2^64), or TypeError / ValueError naming `name`."""
    if type(x) is int and 0 <= x <= U64_MAX:
        return x
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name}: expected an int in {_RANGE}, got a bool ({x!r})")
    try:
        k = operator.index(x)
    except TypeError:
        raise TypeError(f"{name}: expected an int in {_RANGE}, got {type(x).__name__}") from None
    if k < 0 or k > U64_MAX:
        raise ValueError(f"{name}: {k} is outside {_RANGE}")
    return k


def _outside(name: str, where: int, value: Any) -> ValueError:
    return ValueError(f"{name}: element {where} is {value}, outside {_RANGE}")


def column(data: Any, name: str) -> "npt.NDArray[np.uint64]":
    """A contiguous, aligned, native-endian 1-D uint64 array over `data` (no
    copy when it already is one; a copy of other integer dtypes and of
    non-contiguous or misaligned input)."""
    if isinstance(data, np.ndarray):
        a = data
        if a.dtype.kind == "O" and a.ndim == 1:
            a = _python_ints(list(a), name)  # Python ints held as objects: as a list of them
    elif hasattr(data, "__dlpack__"):
        a = np.from_dlpack(data)
    else:
        try:
            a = np.asarray(data)
        except (TypeError, ValueError, OverflowError) as e:
            raise TypeError(f"{name}: expected an array of ints in {_RANGE}, got {type(data).__name__}: {e}") from None
        if a.ndim == 1 and not isinstance(data, memoryview) and (
                a.dtype.kind in "fO" or (a.dtype.kind in "iu" and isinstance(data, (list, tuple))
                                         and any(isinstance(x, (bool, np.bool_)) for x in data))):
            # ints past uint64 or past int64 with negative ones, no ints, or
            # bools among ints (which numpy would take as 0 and 1)
            a = _python_ints(list(data), name)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {a.shape}")
    dt = a.dtype
    if dt.kind == "u" and dt.itemsize == 8 and dt.isnative:
        if not (a.flags.c_contiguous and a.flags.aligned):
            a = np.array(a, order="C", copy=True)  # strided or misaligned: one copy, aligned
        return a
    if dt.kind not in "iu":
        raise TypeError(f"{name}: expected an array of ints in {_RANGE} (uint64 is used as is), got dtype {dt}")
    if dt.kind == "i" and a.size:
        negative = np.flatnonzero(a < 0)
        if negative.size:
            i = int(negative[0])
            raise _outside(name, i, int(a[i]))
    return np.ascontiguousarray(a, dtype=np.uint64)


def _python_ints(items: List[Any], name: str) -> "npt.NDArray[np.uint64]":
    for i, x in enumerate(items):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise TypeError(f"{name}: expected an array of ints in {_RANGE}, got a {type(x).__name__} at {i}")
        if x < 0 or x > U64_MAX:
            raise _outside(name, i, int(x))
    return np.array([int(x) for x in items], dtype=np.uint64)


def values_for(values: Any, n: int, name: str = "values") -> "npt.NDArray[np.uint64]":
    """The values of n pairs: a column of n, or one value for every key."""
    if is_scalar(values):
        return np.full(n, key(values, name[:-1]), dtype=np.uint64)
    v = column(values, name)
    if v.shape[0] != n:
        raise ValueError(f"keys and {name} differ in length: {n} and {v.shape[0]}")
    return v


def same_length(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{name_a} and {name_b} differ in length: {a.shape[0]} and {b.shape[0]}")


def answers_u64(n: int) -> "npt.NDArray[np.uint64]":
    """An uninitialised uint64 answer array of n elements."""
    return _tandem.answer_u64(n) if n >= _POOLED else np.empty(n, dtype=np.uint64)


def answers_bool(n: int) -> "npt.NDArray[np.bool_]":
    """An uninitialised bool answer array of n elements."""
    return _tandem.answer_bool(n) if n >= _POOLED else np.empty(n, dtype=np.bool_)


def config(options: Dict[str, Any], who: str = "tandem.Index()") -> "_tandem.Config":
    """A tandem::config from keyword arguments, checked: unknown names and
    wrong types raise TypeError, a value out of its field's range (a
    negative number of threads, ``leaf_fill=5.0``) ValueError, the message
    from tandem::config::validate where the field holds the value."""
    cfg = _tandem.Config()
    for name, value in options.items():
        if name not in CONFIG_FIELDS:
            raise TypeError(f"{who} got an unexpected keyword argument {name!r} "
                            f"(the config fields are: {', '.join(sorted(CONFIG_FIELDS))})")
        if name in _CHOICES:
            value = _choice(who, name, value, _CHOICES[name])
        elif name == "gpu_share" and (value is None or value == "auto"):
            value = -1.0
        elif name == "storage_dir":
            value = "" if value is None else str(value)
        try:
            setattr(cfg, name, value)
        except TypeError:
            expected = type(getattr(cfg, name))
            if expected is int and isinstance(value, int) and not isinstance(value, bool):
                raise ValueError(f"{who}: {name}={value!r} is out of the range of tandem::config.{name}") from None
            raise TypeError(f"{who}: {name}={value!r} has the wrong type (expected {expected.__name__})") from None
    cfg.validate()
    return cfg


def _choice(who: str, name: str, value: Any, names: Dict[str, int]) -> int:
    if isinstance(value, str):
        if value not in names:
            raise ValueError(f"{who}: {name} must be one of {sorted(names)}, got {value!r}")
        return names[value]
    raise TypeError(f"{who}: {name} must be one of {sorted(names)}, got {value!r}")

