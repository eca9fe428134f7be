"""The shard actor: one range of the key space and the tandem.Index that
holds it. Every data method takes the range the caller believes the shard
holds and refuses the call (ShardMapChanged) when it differs."""

from __future__ import annotations

import os
import warnings
from typing import Optional, Tuple

import numpy as np

from .. import Batch, InvariantError, OpType, max_scan_limit
from .. import Index as _Index
from ._channel import _ChannelEnds
from ._common import (_EMPTY, _GET, _INSERT, _LOWER_BOUND, _PUT, _SHARD_FILE, U64_MAX, ShardMapChanged,
                      _read_json, _write_json, ray)


class _Shard:
    """One range [lo, hi] of the key space and the tandem.Index holding it.
    Every data method takes the range the caller believes this shard holds
    and refuses (ShardMapChanged) when it differs, before doing anything."""

    def __init__(self, shard_id: int, lo: int, hi: int, version: int, config: dict,
                 folder: Optional[str]) -> None:
        self.id = shard_id
        self.lo, self.hi, self.version = lo, hi, version
        self.folder = folder
        cfg = dict(config)
        if folder:
            os.makedirs(folder, exist_ok=True)
            saved = _read_json(os.path.join(folder, _SHARD_FILE))
            if saved is not None:  # a restart, or a reopen: the folder knows the current range
                self.lo, self.hi, self.version = saved["lo"], saved["hi"], saved["version"]
            else:
                self._save_range()
            cfg["storage_dir"] = folder
        with warnings.catch_warnings():  # the property reads a deprecated field inside Ray
            warnings.simplefilter("ignore")
            self.restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        self.ix = _Index(**cfg)
        self.channels = _ChannelEnds()

    def _save_range(self) -> None:
        if self.folder:
            _write_json(os.path.join(self.folder, _SHARD_FILE),
                        {"id": self.id, "lo": self.lo, "hi": self.hi, "version": self.version})

    def _check(self, rng: Tuple[int, int]) -> None:
        if rng[0] != self.lo or rng[1] != self.hi:
            raise ShardMapChanged(
                f"shard {self.id} holds [{self.lo}, {self.hi}] (map version {self.version}), "
                f"not [{rng[0]}, {rng[1]}]")

    def _drop(self, lo: int, hi: int) -> None:
        """Erases every key in [lo, hi]."""
        while lo <= hi:
            keys, _ = self.ix.scan(lo, hi, limit=max_scan_limit)
            if keys.shape[0] == 0:
                return
            self.ix.erase(np.ascontiguousarray(keys))

    def _none_past_hi(self, found, keys, values, which=True) -> None:
        """lower_bound answers past this shard's hi belong to the next shards:
        none here (found False, key and value 0)."""
        if self.hi < U64_MAX and keys.shape[0]:
            past = which & found & (keys > np.uint64(self.hi))
            if past.any():
                found[past] = False
                keys[past] = 0
                values[past] = 0

    # ---- state

    def ping(self) -> int:
        return self.id

    def size(self, rng: Optional[Tuple[int, int]] = None) -> int:
        if rng is not None:
            self._check(rng)
        return len(self.ix)

    def stats(self) -> dict:
        d = {"id": self.id, "lo": self.lo, "hi": self.hi, "version": self.version,
             "restarted": self.restarted, "folder": self.folder, "pid": os.getpid()}
        d.update(self.ix.stats())
        return d

    def verify(self, rng: Tuple[int, int]) -> int:
        self._check(rng)
        self.ix.verify()
        outside = 0
        if self.lo > 0:
            outside += self.ix.count(0, self.lo - 1)
        if self.hi < U64_MAX:
            outside += self.ix.count(self.hi + 1, U64_MAX)
        if outside:
            raise InvariantError(f"shard {self.id} [{self.lo}, {self.hi}] holds {outside} keys outside its range")
        return len(self.ix)

    def close(self) -> None:
        self.ix.close()

    # ---- map changes (called by the directory)

    def reset(self, lo: int, hi: int, version: int) -> int:
        """Takes the range [lo, hi] and empties the index (load follows)."""
        self.lo, self.hi, self.version = lo, hi, version
        self._save_range()
        self.ix.load(_EMPTY, _EMPTY)
        return 0

    def adopt(self, lo: int, hi: int, version: int) -> int:
        """Takes the range the map gives (on reopen) and drops keys outside it."""
        self.lo, self.hi, self.version = lo, hi, version
        self._save_range()
        if lo > 0:
            self._drop(0, lo - 1)
        if hi < U64_MAX:
            self._drop(hi + 1, U64_MAX)
        return len(self.ix)

    def split_off(self, rng: Tuple[int, int], version: int, max_keys: int):
        """When above max_keys: narrows the range to its lower half (from now
        on calls for the upper half are refused) and returns (mid, keys,
        values) of the upper half [mid, old hi]; else None."""
        self._check(rng)
        n = len(self.ix)
        if n <= max_keys or n < 2:
            return None
        keys, values = self.ix.scan(self.lo, self.hi)
        n = keys.shape[0]
        mid = int(keys[n // 2])
        self.hi, self.version = mid - 1, version
        self._save_range()
        return mid, np.ascontiguousarray(keys[n // 2:]), np.ascontiguousarray(values[n // 2:])

    def drop(self, lo: int, hi: int) -> int:
        """Erases the keys of [lo, hi] (the half moved away by a split)."""
        self._drop(lo, hi)
        return len(self.ix)

    # ---- shared-memory channels of clients on this node

    def attach(self, token: str, path: str, capacity: int, node_id: str) -> bool:
        """Maps a client's channel buffer; False when the client is on
        another node (or the file cannot be opened)."""
        if node_id != ray.get_runtime_context().get_node_id():
            return False
        return self.channels.attach(token, path, capacity)

    def detach(self, token: str) -> None:
        self.channels.detach(token)

    def columns_shm(self, rng, token: str, op: OpType, n: int) -> int:
        """Runs n point ops of one type over the keys (and values) in a
        client's channel, writing the answers there (values and flags: the
        key was present); returns the size."""
        self._check(rng)
        keys, values, flags = self.channels.views(token, n, self.id)
        self.ix._column_op(op, keys, values if op in (_PUT, _INSERT) else None,
                           values if op == _GET else None, None if op == _PUT else flags.view(np.bool_), None)
        del keys, values, flags
        return len(self.ix)

    # ---- data

    def load(self, rng, keys, values) -> int:
        self._check(rng)
        self.ix.load(keys, values)
        return len(self.ix)

    def columns(self, rng, op: OpType, keys, values, want_values: bool, want_found: bool):
        """Runs point ops of one type (get, put, insert, erase) over columns;
        returns ((values, found flags: was present) as wanted, size)."""
        self._check(rng)
        n = keys.shape[0]
        values_out = np.empty(n, dtype=np.uint64) if want_values else None
        found_out = np.empty(n, dtype=np.bool_) if want_found else None
        self.ix._column_op(op, keys, values, values_out, found_out, None)
        return tuple(a for a in (values_out, found_out) if a is not None), len(self.ix)

    def lower_bound(self, rng, keys):
        """lower_bound of each key (none past this shard's hi), and the shard's
        first entry (key, value) or None."""
        self._check(rng)
        found, k, v = self.ix.lower_bound(keys)
        self._none_past_hi(found, k, v)
        first = self.ix.lower_bound(self.lo)
        if first is not None and first[0] > self.hi:
            first = None
        return found, k, v, first

    def one(self, rng, op: str, key: int, value: int = 0):
        """One-key ops; returns (answer, size)."""
        self._check(rng)
        ix = self.ix
        if op == "get":
            return ix.get(key), 0
        if op == "put":
            return ix.put(key, value), len(ix)
        if op == "insert":
            return ix.insert(key, value), len(ix)
        if op == "erase":
            return ix.pop(key), len(ix)
        raise ValueError(op)

    def scan(self, rng, lo: int, hi: int, limit: Optional[int], ordered: bool):
        self._check(rng)
        keys, values = self.ix.scan(lo, hi, limit=limit, ordered=ordered)
        return np.ascontiguousarray(keys), np.ascontiguousarray(values)

    def scans(self, rng, los, his, limit: int, ordered: bool):
        self._check(rng)
        offsets, keys, values = self.ix.scans(los, his, limit, ordered)
        return offsets, np.ascontiguousarray(keys), np.ascontiguousarray(values)

    def counts(self, rng, los, his):
        self._check(rng)
        return np.array(self.ix.count(los, his))

    def execute(self, rng, types, keys, args, limits, ordered) -> dict:
        """Runs the ops as one batch; returns its answer columns (copies),
        the entries of its scans, the messages of failed ops and the size."""
        self._check(rng)
        r = self.ix.execute(Batch.from_ops(types, keys, args, limits, ordered))
        found = np.array(r.found)
        out_keys = np.array(r.keys)
        values = np.array(r.values)
        status = np.array(r.status)
        self._none_past_hi(found, out_keys, values, types == _LOWER_BOUND)
        ek, ev = r.scan_entries()
        errors = {int(i): r.error(int(i)) for i in np.flatnonzero(status)}
        return {"values": values, "found": found, "keys": out_keys, "status": status,
                "entry_keys": np.ascontiguousarray(ek), "entry_values": np.ascontiguousarray(ev),
                "errors": errors, "sequence": r.sequence, "size": len(self.ix)}
