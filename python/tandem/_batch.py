"""tandem.Batch: a list of ops run together by an index's execute or submit."""

from __future__ import annotations

from typing import Type, TypeVar, Union

import numpy as np
import numpy.typing as npt

from . import _tandem
from ._convert import column, is_scalar, key, values_for
from ._types import BoolArray, Column, Key, U64Array

_B = TypeVar("_B", bound="Batch")


class Batch(_tandem.NativeBatch):
    """A list of ops run together by :meth:`Index.execute` or :meth:`Index.submit`.

    Each method appends one op (int arguments) or one op per element (array
    arguments) and returns the batch, so calls chain::

        b = tandem.Batch().put(1, 10).get(1).scan(0, 100, limit=10)

    Ops take effect as if run one by one in the order added; an op that
    cannot run (a scan or count with lo > hi, a scan limit above
    :data:`max_scan_limit`) gets status 1 (invalid) in the result while the
    others run. Keys and values follow the rule of :class:`Index`.
    """

    @classmethod
    def from_ops(cls: Type[_B], types: npt.NDArray[np.uint8], keys: U64Array, args: U64Array,
                 limits: U64Array, ordered: BoolArray) -> _B:
        """The batch whose op columns are these, as :meth:`ops` returns them:
        ``Batch.from_ops(*b.ops())`` is a copy of b (rebuilt in C++)."""
        b = cls()
        b.append_ops(types, keys, args, limits, ordered)
        return b

    def get(self: _B, keys: Union[Key, Column]) -> _B:
        """Appends a get of each key."""
        if is_scalar(keys):
            self._get(key(keys))
        else:
            self._get_many(column(keys, "keys"))
        return self

    def put(self: _B, keys: Union[Key, Column], values: Union[Key, Column]) -> _B:
        """Appends a put (set, replacing any value) of each (key, value); one
        value for an array of keys is every key's value."""
        if is_scalar(keys):
            self._put(key(keys), key(values, "value"))
        else:
            k = column(keys, "keys")
            self._put_many(k, values_for(values, k.shape[0]))
        return self

    def insert(self: _B, keys: Union[Key, Column], values: Union[Key, Column]) -> _B:
        """Appends an insert (set only where the key is absent) of each pair;
        one value for an array of keys is every key's value."""
        if is_scalar(keys):
            self._insert(key(keys), key(values, "value"))
        else:
            k = column(keys, "keys")
            self._insert_many(k, values_for(values, k.shape[0]))
        return self

    def erase(self: _B, keys: Union[Key, Column]) -> _B:
        """Appends an erase of each key."""
        if is_scalar(keys):
            self._erase(key(keys))
        else:
            self._erase_many(column(keys, "keys"))
        return self

    def lower_bound(self: _B, keys: Union[Key, Column]) -> _B:
        """Appends a lower_bound (first entry with key >= the key) of each key."""
        if is_scalar(keys):
            self._lower_bound(key(keys))
        else:
            self._lower_bound_many(column(keys, "keys"))
        return self

    def scan(self: _B, lo: Key, hi: Key, limit: Key = 4096, ordered: bool = True) -> _B:
        """Appends a scan of the entries with lo <= key <= hi, at most `limit`
        of them (ascending keys; ``ordered=False``: the same entries in any
        order)."""
        self._scan(key(lo, "lo"), key(hi, "hi"), key(limit, "limit"), bool(ordered))
        return self

    def count(self: _B, lo: Key, hi: Key) -> _B:
        """Appends a count of the keys in [lo, hi]."""
        self._count(key(lo, "lo"), key(hi, "hi"))
        return self

    def __repr__(self) -> str:
        return f"tandem.Batch({len(self)} ops)"
