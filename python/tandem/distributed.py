"""tandem.distributed: :class:`ShardedIndex`, tandem's interface over range shards on Ray.

The key space [0, 2^64) is cut into ranges; each range is held by one Ray
actor that owns a :class:`tandem.Index`. A client cuts every column by the
shard map (a search of the shards' lower bounds, as ``np.searchsorted``),
calls every shard it needs at once, and puts the answers back in input order::

    import ray, numpy as np
    from tandem.distributed import ShardedIndex

    ray.init()
    with ShardedIndex(num_shards=4, max_shard_keys=50_000_000, threads=4) as idx:
        keys = np.arange(0, 2_000_000, 2, dtype=np.uint64)
        idx.load(keys, keys * 10)            # split points sampled from the keys
        values, found = idx.get(keys[:10])
        idx.scan(0, 100, limit=10)           # merged across shards, in key order

Methods mirror :class:`tandem.Index` (columns in and out, the one-key forms,
:meth:`~ShardedIndex.execute` of a :class:`tandem.Batch`, futures and asyncio).

Placement and lifetime
    Every shard is an actor with ``num_cpus=num_cpus_per_shard`` (0 by
    default: shards share the CPUs) and ``num_gpus=num_gpus_per_shard``; Ray
    places it, and a GPU it gives the actor is the index's GPU 0 (Ray sets
    ``CUDA_VISIBLE_DEVICES``). A small actor, the *directory*, holds the shard
    map and creates the shards; it is owned by the process that created the
    ShardedIndex, and the shards by the directory, so all of them go away with
    that process (or :meth:`~ShardedIndex.close`). If Ray is not initialized,
    the constructor calls ``ray.init()`` with its defaults.

Data path
    Columns go to shards as numpy arrays through Ray's object store (read
    in place by the shard). For the column forms of get, contains, put,
    insert and erase, a shard's part of 4096 keys or more goes instead
    through a buffer in shared memory that the client and the shard both
    map when they run on the same node (one per client and shard, reused
    by every call: no object store, no copies beyond the cut and the
    scatter); ``shared_memory=False`` turns this off.

Splits
    When a write leaves a shard with more than ``max_shard_keys`` keys, the
    directory splits it: the upper half of its keys moves to a new actor (the
    old shard narrows its range first, so no write reaches the moved half
    there any more), the moved keys are erased from the old shard, and the map
    is published with its version raised by one. Every call to a shard
    carries the range the client believes the shard holds; a shard whose range
    differs refuses the call before applying any of it
    (:class:`ShardMapChanged`), and the client fetches the map again and
    sends the refused part anew. So calls in flight during a split are
    retried, never lost and never applied twice.

Order and atomicity
    * The ops sent to one shard by one call run together, in op order, with
      nothing else in between (a shard runs one call at a time).
    * One client's calls take effect in the order the client issued them, on
      every shard: a call (or a :meth:`~ShardedIndex.submit`\\ ted batch)
      starts only when the client's previous one has finished everywhere;
      several threads sharing one client are served in the order they called.
    * Across clients there is no cross-shard atomicity: batches of different
      clients interleave per shard, possibly in different orders on different
      shards, and a batch spanning shards can be seen half applied by another
      client. What a call wrote is visible to every call (of any client)
      that starts after it returned.
    * A scan, count or lower_bound that spans shards reads each shard at its
      own moment, not one snapshot.

Durability
    With ``storage_dir``, shard ``i`` keeps its index in
    ``<storage_dir>/shard-<i>`` (tandem's checkpoint and redo log; every
    acknowledged write is in it before its answer comes back, see
    ``log_sync_policy``) and the map in ``<storage_dir>/shards.json``. Shard
    actors are then restarted by Ray when they die (``max_restarts=-1``) and
    reopen their folder; the client waits for the restart and sends the call
    again (state ends as if it ran once: a batch of puts, inserts and erases
    applied twice leaves each key as once; the returned flags of such a
    repeated write may differ, e.g. ``inserted`` False where the first,
    unanswered, attempt already inserted). A new ShardedIndex on the same
    ``storage_dir`` reopens the shards that are there. ``storage_dir`` must be
    a folder every node running shards can reach. Without ``storage_dir`` a
    dead shard cannot come back: calls that need it raise :class:`ShardLost`
    (a tandem.Error) rather than answer from an empty index.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import json
import mmap
import os
import re
import shutil
import threading
import time
import uuid
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import Batch, Error, InvariantError, max_scan_limit
from . import Index as _Index
from . import _column, _config, _is_scalar, _key, _same_length

try:  # Ray is an optional dependency of the package
    import ray
    from ray.exceptions import RayActorError, RayTaskError
except ImportError:  # pragma: no cover - exercised only without ray
    ray = None
    RayActorError = RayTaskError = None

__all__ = ["ShardedIndex", "ShardedResult", "ShardMap", "ShardMapChanged", "ShardLost"]

U64_MAX = (1 << 64) - 1
_GET, _PUT, _INSERT, _ERASE, _LOWER_BOUND, _SCAN, _COUNT = range(7)
_MAP_FILE = "shards.json"
_SHARD_FILE = "shard.json"
_EMPTY = np.empty(0, dtype=np.uint64)
#: A shard's part of a column call with at least this many keys goes
#: through the client's shared-memory channel to that shard (same node).
_SHM_MIN_KEYS = 1 << 12
#: Channels a shard keeps (least recently used ones are dropped beyond).
_SHM_MAX_CHANNELS = 16
_SHM_DIR = "/dev/shm"
_POINT_TYPES = {"get": _GET, "contains": _GET, "put": _PUT, "insert": _INSERT, "erase": _ERASE}


class ShardMapChanged(Error):
    """Raised by a shard asked about a range it no longer holds (the caller's
    shard map is out of date). Nothing of the refused call was applied; the
    client refreshes its map and sends the call again, so users see this only
    if the map keeps changing for longer than ``retry_timeout``."""


class ShardLost(Error):
    """A shard's actor died and cannot come back (no ``storage_dir``, or it did
    not restart within ``retry_timeout``); its keys are not available."""


def _require_ray() -> None:
    if ray is None:
        raise ImportError("tandem.distributed needs Ray: pip install 'ray>=2.9'")


# ---------------------------------------------------------------------------
# Small helpers shared by the client and the actors


def _write_json(path: str, obj: Any) -> None:
    """Writes `obj` to `path` atomically (a temporary file, fsync, rename)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_json(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _shard_folder(storage_dir: str, shard_id: int) -> str:
    return os.path.join(storage_dir, f"shard-{shard_id}")


def _shard_ids(lows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The shard (position in the map) of each key: the last shard whose lower
    bound is <= the key. uint8/uint16 for few shards (cheap to group)."""
    s = lows.shape[0]
    if s == 1:
        return np.zeros(keys.shape[0], dtype=np.uint8)
    if s <= 8:
        # a compare per bound beats a binary search per key for few bounds
        sid = np.greater_equal(keys, lows[1]).view(np.uint8)
        if s > 2:
            sid = sid.copy()
            for b in lows[2:]:
                sid += np.greater_equal(keys, b).view(np.uint8)
        return sid
    sid = np.searchsorted(lows, keys, side="right") - 1
    return sid.astype(np.uint8 if s <= 256 else np.uint16 if s <= 65536 else np.intp)


def _group(sid: np.ndarray, s: int) -> List[Optional[np.ndarray]]:
    """Positions of each shard's elements, in input order (None: every element
    belongs to that shard, no gather needed)."""
    n = sid.shape[0]
    counts = np.bincount(sid, minlength=s)
    full = np.flatnonzero(counts == n)
    if n and full.size:
        return [None if j == full[0] else np.empty(0, np.intp) for j in range(s)]
    order = np.argsort(sid, kind="stable")  # radix sort for uint8/uint16
    ends = np.cumsum(counts)
    return [order[e - c:e] for c, e in zip(counts.tolist(), ends.tolist())]


def _route_ranges(lo: np.ndarray, hi: np.ndarray, lows: np.ndarray, highs: np.ndarray):
    """Cuts ranges [lo[i], hi[i]] at shard bounds. Returns (rep, shard, plo,
    phi): piece p is the part of range rep[p] in shard shard[p], clamped to
    [plo[p], phi[p]]; pieces come in (range, key) order."""
    s_lo = _shard_ids(lows, lo).astype(np.intp)
    s_hi = _shard_ids(lows, hi).astype(np.intp)
    span = s_hi - s_lo + 1
    n = lo.shape[0]
    if n == 0 or int(span.max()) == 1:
        return np.arange(n), s_lo, lo, hi
    total = int(span.sum())
    rep = np.repeat(np.arange(n), span)
    first = np.repeat(np.cumsum(span) - span, span)
    shard = s_lo[rep] + (np.arange(total) - first)
    plo = np.maximum(lo[rep], lows[shard])
    phi = np.minimum(hi[rep], highs[shard])
    return rep, shard, plo, phi


def _take_scans(n: int, op: np.ndarray, cnt: np.ndarray, src: np.ndarray, limit: np.ndarray):
    """Merges scan pieces (sorted by (op, key)) into per-op answers of at most
    `limit` entries, in key order. Returns (offsets[n+1], gather index into
    the concatenated piece entries, entries taken per piece)."""
    c = cnt.astype(np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    if c.size == 0:
        return offsets, np.empty(0, np.int64), c
    before = np.cumsum(c) - c
    newop = np.ones(op.shape[0], dtype=bool)
    newop[1:] = op[1:] != op[:-1]
    starts = np.flatnonzero(newop)
    runs = np.diff(np.append(starts, op.shape[0]))
    within = before - np.repeat(before[starts], runs)
    take = np.clip(limit.astype(np.int64) - within, 0, c)
    out_start = np.cumsum(take) - take
    total = int(take.sum())
    gather = np.repeat(src.astype(np.int64) - out_start, take) + np.arange(total, dtype=np.int64)
    per_op = np.zeros(n, dtype=np.int64)
    np.add.at(per_op, op, take)
    np.cumsum(per_op, out=offsets[1:])
    return offsets, gather, take


def _batch_from_ops(types, keys, args, limits, ordered) -> Batch:
    """A tandem.Batch with the given op columns (runs of one point op type go
    in as one column call)."""
    b = Batch()
    n = int(types.shape[0])
    if n == 0:
        return b
    b.reserve(n)
    cut = (np.flatnonzero(types[1:] != types[:-1]) + 1).tolist()
    starts = [0] + cut
    ends = cut + [n]
    for s, e, t in zip(starts, ends, types[starts].tolist()):
        if t == _GET:
            b._get_many(keys[s:e])
        elif t == _PUT:
            b._put_many(keys[s:e], args[s:e])
        elif t == _INSERT:
            b._insert_many(keys[s:e], args[s:e])
        elif t == _ERASE:
            b._erase_many(keys[s:e])
        elif t == _LOWER_BOUND:
            b._lower_bound_many(keys[s:e])
        elif t == _SCAN:
            for lo, hi, lim, o in zip(keys[s:e].tolist(), args[s:e].tolist(),
                                      limits[s:e].tolist(), ordered[s:e].tolist()):
                b._scan(lo, hi, lim, bool(o))
        elif t == _COUNT:
            for lo, hi in zip(keys[s:e].tolist(), args[s:e].tolist()):
                b._count(lo, hi)
        else:
            raise ValueError(f"unknown op type {t}")
    return b


# ---------------------------------------------------------------------------
# The shard actor


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
        self.channels: "collections.OrderedDict[str, tuple]" = collections.OrderedDict()

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
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return False
        try:
            buf = mmap.mmap(fd, 17 * capacity)
        finally:
            os.close(fd)
        self.channels[token] = (buf, capacity)
        while len(self.channels) > _SHM_MAX_CHANNELS:  # a client that never said goodbye
            self.detach(next(iter(self.channels)))
        return True

    def detach(self, token: str) -> None:
        got = self.channels.pop(token, None)
        if got is not None:
            with contextlib.suppress(BufferError):
                got[0].close()

    def columns_shm(self, rng, token: str, op: int, n: int) -> int:
        """Runs n point ops of one type over the keys (and values) in a
        client's channel, writing the answers there; returns the size."""
        self._check(rng)
        got = self.channels.get(token)
        if got is None:
            raise _ChannelGone(f"shard {self.id} holds no channel {token}")
        self.channels.move_to_end(token)
        keys, values, flags = (a[:n] for a in _channel_views(*got))
        if op == _GET:
            self.ix._ix.columns(op, keys, None, values, flags, None)
        elif op == _PUT:
            self.ix._ix.columns(op, keys, values, None, None, None)
        elif op == _INSERT:
            self.ix._ix.columns(op, keys, values, None, flags, None)
        elif op == _ERASE:
            self.ix._ix.columns(op, keys, None, None, flags, None)
        else:
            raise ValueError(f"columns_shm: op {op}")
        del keys, values, flags
        return len(self.ix)

    # ---- data

    def load(self, rng, keys, values) -> int:
        self._check(rng)
        self.ix.load(keys, values)
        return len(self.ix)

    def get(self, rng, keys, _values=None):
        self._check(rng)
        return self.ix.get(keys)

    def contains(self, rng, keys, _values=None):
        self._check(rng)
        return (self.ix.contains(keys),)

    def put(self, rng, keys, values):
        self._check(rng)
        self.ix.put(keys, values)
        return len(self.ix)

    def insert(self, rng, keys, values):
        self._check(rng)
        return self.ix.insert(keys, values), len(self.ix)

    def erase(self, rng, keys, _values=None):
        self._check(rng)
        return self.ix.erase(keys), len(self.ix)

    def lower_bound(self, rng, keys):
        """lower_bound of each key (none past this shard's hi), and the shard's
        first entry (key, value) or None."""
        self._check(rng)
        found, k, v = self.ix.lower_bound(keys)
        if self.hi < U64_MAX and k.shape[0]:
            past = found & (k > np.uint64(self.hi))
            if past.any():
                found[past] = False
                k[past] = 0
                v[past] = 0
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
        r = self.ix.execute(_batch_from_ops(types, keys, args, limits, ordered))
        found = np.array(r.found)
        out_keys = np.array(r.keys)
        values = np.array(r.values)
        status = np.array(r.status)
        if self.hi < U64_MAX:
            past = (types == _LOWER_BOUND) & found & (out_keys > np.uint64(self.hi))
            if past.any():
                found[past] = False
                out_keys[past] = 0
                values[past] = 0
        ek, ev = r.scan_entries()
        errors = {int(i): r.error(int(i)) for i in np.flatnonzero(status)}
        return {"values": values, "found": found, "keys": out_keys, "status": status,
                "entry_keys": np.ascontiguousarray(ek), "entry_values": np.ascontiguousarray(ev),
                "errors": errors, "sequence": r.sequence, "size": len(self.ix)}


# ---------------------------------------------------------------------------
# The directory actor: the shard map, shard creation and splits


class _Directory:
    """Holds the shard map (and, with storage_dir, its file), creates the
    shard actors (which it owns) and performs splits. Its methods run one at
    a time, so map changes are serialized and a client asking for the map
    during a split gets the map after it."""

    def __init__(self, num_shards: int, index_config: dict, storage_dir: Optional[str],
                 shard_options: dict, max_shard_keys: Optional[int]) -> None:
        self.num_shards = num_shards
        self.index_config = index_config
        self.storage_dir = storage_dir
        self.shard_options = shard_options
        self.max_shard_keys = max_shard_keys
        self.version = 0
        self.next_id = 0
        self.splits = 0
        self.shards: List[list] = []  # [id, lo, hi, handle], in key order
        self.actor_cls = ray.remote(_Shard)

    # ---- internals

    def _save(self) -> None:
        if self.storage_dir:
            _write_json(os.path.join(self.storage_dir, _MAP_FILE), {
                "version": self.version, "next_id": self.next_id,
                "shards": [[s[0], s[1], s[2]] for s in self.shards]})

    def _create(self, shard_id: int, lo: int, hi: int):
        folder = _shard_folder(self.storage_dir, shard_id) if self.storage_dir else None
        return self.actor_cls.options(**self.shard_options).remote(
            shard_id, lo, hi, self.version, self.index_config, folder)

    def _call(self, handle: Any, method: str, *args: Any) -> Any:
        """Calls a shard; while a durable shard restarts, calls again."""
        deadline = time.monotonic() + 120
        while True:
            try:
                return ray.get(getattr(handle, method).remote(*args))
            except RayActorError as e:
                if not self.storage_dir:
                    raise ShardLost(f"a shard died and had no storage_dir: {e}") from None
                if time.monotonic() > deadline:
                    raise ShardLost(f"a shard did not come back: {e}") from None
                time.sleep(0.1)

    def _started(self, handles: Sequence[Any]) -> None:
        try:
            ray.get([h.ping.remote() for h in handles])
        except RayActorError as e:
            raise Error(f"a shard actor could not start: {e}") from None

    def _retire(self, shards: Sequence[list]) -> None:
        """Closes and kills shards no longer in the map (and removes their folders)."""
        for s in shards:
            with contextlib.suppress(Exception):
                ray.get(s[3].close.remote())
            with contextlib.suppress(Exception):
                ray.kill(s[3], no_restart=True)
            if self.storage_dir:
                shutil.rmtree(_shard_folder(self.storage_dir, s[0]), ignore_errors=True)

    # ---- called by clients

    def start(self):
        """Creates the shards (or reopens those of storage_dir) and returns the map."""
        saved = _read_json(os.path.join(self.storage_dir, _MAP_FILE)) if self.storage_dir else None
        if saved is not None:
            self.version = saved["version"] + 1
            self.next_id = saved["next_id"]
            self.shards = [[i, lo, hi, None] for i, lo, hi in saved["shards"]]
            for s in self.shards:
                s[3] = self._create(s[0], s[1], s[2])
            self._started([s[3] for s in self.shards])
            for s in self.shards:
                self._call(s[3], "adopt", s[1], s[2], self.version)
            known = {f"shard-{s[0]}" for s in self.shards}
            for name in os.listdir(self.storage_dir):
                if re.fullmatch(r"shard-\d+", name) and name not in known:  # an interrupted split's
                    shutil.rmtree(os.path.join(self.storage_dir, name), ignore_errors=True)
        else:
            if self.storage_dir:
                os.makedirs(self.storage_dir, exist_ok=True)
                for name in os.listdir(self.storage_dir):  # left by a start that never saved its map
                    if re.fullmatch(r"shard-\d+", name):
                        shutil.rmtree(os.path.join(self.storage_dir, name), ignore_errors=True)
            n = self.num_shards
            lows = [(j << 64) // n for j in range(n)]
            for j in range(n):
                hi = lows[j + 1] - 1 if j + 1 < n else U64_MAX
                self.shards.append([self.next_id, lows[j], hi, self._create(self.next_id, lows[j], hi)])
                self.next_id += 1
            self._started([s[3] for s in self.shards])
        self._save()
        return self.get_map()

    def get_map(self):
        return self.version, [tuple(s) for s in self.shards]

    def info(self) -> dict:
        return {"version": self.version, "splits": self.splits, "shards": len(self.shards)}

    def set_ranges(self, lows: List[int]):
        """A new map with these lower bounds (load): the first shards are
        reused (emptied), missing ones created, extra ones retired."""
        n = len(lows)
        highs = [lows[j + 1] - 1 for j in range(n - 1)] + [U64_MAX]
        self.version += 1
        keep, extra = self.shards[:n], self.shards[n:]
        for s, lo, hi in zip(keep, lows, highs):
            s[1], s[2] = lo, hi
        for s in keep:
            self._call(s[3], "reset", s[1], s[2], self.version)
        fresh = []
        for j in range(len(keep), n):
            s = [self.next_id, lows[j], highs[j], None]
            self.next_id += 1
            s[3] = self._create(s[0], s[1], s[2])
            fresh.append(s)
        self._started([s[3] for s in fresh])
        self.shards = keep + fresh
        self._save()
        self._retire(extra)
        return self.get_map()

    def split(self, shard_id: int, lo: int, hi: int):
        """Splits the shard (and the halves, while above max_shard_keys) if it
        still holds [lo, hi]; returns the map."""
        work = [shard_id]
        first = True
        while work:
            sid = work.pop()
            pos = next((p for p, s in enumerate(self.shards) if s[0] == sid), None)
            if pos is None:
                continue
            s = self.shards[pos]
            if first and (s[1], s[2]) != (lo, hi):
                break  # another client split it already
            first = False
            got = self._call(s[3], "split_off", (s[1], s[2]), self.version + 1, self.max_shard_keys)
            if got is None:
                continue
            mid, keys, values = got
            old_hi = s[2]
            self.version += 1
            new = [self.next_id, mid, old_hi, None]
            self.next_id += 1
            new[3] = self._create(new[0], mid, old_hi)
            self._started([new[3]])
            size_new = self._call(new[3], "load", (mid, old_hi), keys, values)
            s[2] = mid - 1
            self.shards.insert(pos + 1, new)
            self._save()
            size_old = self._call(s[3], "drop", mid, old_hi)
            self.splits += 1
            if size_old > self.max_shard_keys:
                work.append(s[0])
            if size_new > self.max_shard_keys:
                work.append(new[0])
        return self.get_map()

    def close(self) -> None:
        shards, self.shards = self.shards, []
        for s in shards:
            with contextlib.suppress(Exception):
                ray.get(s[3].close.remote())
            with contextlib.suppress(Exception):
                ray.kill(s[3], no_restart=True)


# ---------------------------------------------------------------------------
# The client


@dataclasses.dataclass(frozen=True)
class ShardMap:
    """A version of the shard map: shard ``i`` (id ``ids[i]``, actor
    ``actors[i]``) holds the keys of ``bounds[i] = (lo, hi)``; the bounds
    cover [0, 2^64-1] in key order."""

    version: int
    bounds: Tuple[Tuple[int, int], ...]
    ids: Tuple[int, ...]
    actors: Tuple[Any, ...] = dataclasses.field(repr=False, compare=False)

    @property
    def num_shards(self) -> int:
        """The number of shards (actors)."""
        return len(self.bounds)

    def __len__(self) -> int:
        return len(self.bounds)


class _Ref:
    __slots__ = ("id", "lo", "hi", "handle", "rng")

    def __init__(self, shard_id: int, lo: int, hi: int, handle: Any) -> None:
        self.id, self.lo, self.hi, self.handle = shard_id, lo, hi, handle
        self.rng = (lo, hi)


class _Map:
    def __init__(self, version: int, shards: Sequence[tuple]) -> None:
        self.version = version
        self.refs = [_Ref(*s) for s in shards]
        self.lows = np.array([s[1] for s in shards], dtype=np.uint64)
        self.highs = np.array([s[2] for s in shards], dtype=np.uint64)

    def __len__(self) -> int:
        return len(self.refs)

    def home(self, key: int) -> _Ref:
        return self.refs[int(np.searchsorted(self.lows, np.uint64(key), side="right")) - 1]


class _Refused:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Turns:
    """Serves a client's calls one at a time in the order they were issued."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._next = 0
        self._serving = 0

    def ticket(self) -> int:
        with self._cv:
            t = self._next
            self._next += 1
            return t

    @contextlib.contextmanager
    def turn(self, ticket: int):
        with self._cv:
            self._cv.wait_for(lambda: self._serving == ticket)
        try:
            yield
        finally:
            with self._cv:
                self._serving += 1
                self._cv.notify_all()


class ShardedResult:
    """The answers of a batch run by :meth:`ShardedIndex.execute`: the same
    attributes as :class:`tandem.Result` (one answer per op, in batch order).

    ``sequence`` is a tuple of ``(shard id, sequence)`` pairs, the batch's
    place in the queue of each shard it touched (there is no order across
    shards to give one number)."""

    def __init__(self, values, found, keys, status, errors, scan_offsets, entry_keys,
                 entry_values, sequence) -> None:
        for a in (values, found, keys, status, entry_keys, entry_values):
            a.flags.writeable = False
        self._values, self._found, self._keys, self._status = values, found, keys, status
        self._errors = errors
        self._offsets = scan_offsets
        self._ek, self._ev = entry_keys, entry_values
        self._sequence = sequence

    def __len__(self) -> int:
        return self._values.shape[0]

    @property
    def values(self) -> np.ndarray:
        """uint64 per op: get: the value; put/insert/erase: the value
        replaced/kept/erased; lower_bound: the entry's value; scan: entries
        returned; count: the count."""
        return self._values

    @property
    def found(self) -> np.ndarray:
        """bool per op: get: key present; put/insert/erase: key was present;
        lower_bound: an entry >= key exists; scan/count: non-empty."""
        return self._found

    @property
    def keys(self) -> np.ndarray:
        """uint64 per op: the op's key (lower_bound: the entry's key)."""
        return self._keys

    @property
    def status(self) -> np.ndarray:
        """uint8 per op: 0 ok, 1 invalid, 2 output_limit (see :meth:`error`)."""
        return self._status

    @property
    def sequence(self) -> Tuple[Tuple[int, int], ...]:
        """``(shard id, sequence)`` of each shard the batch ran on."""
        return self._sequence

    @property
    def invalid_count(self) -> int:
        """Ops whose status is not ok."""
        return int(np.count_nonzero(self._status))

    def error(self, i: int) -> str:
        """The message of op i when its status is not ok, else ''."""
        if not 0 <= i < len(self):
            raise IndexError("op index out of range")
        return self._errors.get(i, "")

    def scan(self, i: int) -> Tuple[np.ndarray, np.ndarray]:
        """(keys, values) of scan op i (empty for another op or a failed scan)."""
        if not 0 <= i < len(self):
            raise IndexError("op index out of range")
        a, b = self._offsets[i], self._offsets[i + 1]
        return self._ek[a:b], self._ev[a:b]

    def scan_entries(self) -> Tuple[np.ndarray, np.ndarray]:
        """(keys, values) of every ok scan's entries, scan after scan in op order."""
        return self._ek, self._ev

    def __repr__(self) -> str:
        return f"tandem.distributed.ShardedResult({len(self)} ops)"


def _unwrap(e: BaseException) -> BaseException:
    """The exception a shard raised, without Ray's wrapper."""
    if RayTaskError is not None and isinstance(e, RayTaskError) and e.cause is not None:
        return e.cause
    return e


_OP_PREFIX = re.compile(r"^op \d+")


class _ChannelGone(Exception):
    """Raised by a shard asked to use a channel it does not hold (it was
    restarted, or dropped the channel): the client sends the part again."""


def _channel_views(buf: Any, capacity: int):
    """keys, values (uint64) and flags (uint8) regions of a channel buffer."""
    return (np.frombuffer(buf, np.uint64, capacity, 0), np.frombuffer(buf, np.uint64, capacity, 8 * capacity),
            np.frombuffer(buf, np.uint8, capacity, 16 * capacity))


class _Channel:
    """A buffer in shared memory between one client and one shard on the same
    node: the client writes a call's keys (and values) into it, the shard's
    index reads them and writes its answers there, the client reads those
    back. Calls of one client are one at a time, so one buffer serves all."""

    def __init__(self, handle: Any, token: str, buf: mmap.mmap, capacity: int) -> None:
        self.handle, self.token, self.buf, self.capacity = handle, token, buf, capacity
        self.keys, self.values, self.flags = _channel_views(buf, capacity)

    @classmethod
    def open(cls, handle: Any, capacity: int, node_id: str) -> Optional["_Channel"]:
        token = uuid.uuid4().hex
        path = os.path.join(_SHM_DIR, f"tandem-{token}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # reserves the memory now: a full /dev/shm fails here (OSError: the
            # object store is used) instead of faulting when the buffer is written
            os.posix_fallocate(fd, 0, 17 * capacity)
            buf = mmap.mmap(fd, 17 * capacity)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        attached = False
        try:
            attached = ray.get(handle.attach.remote(token, path, capacity, node_id))
        finally:
            os.unlink(path)  # the memory lives on while the two sides map it
            if not attached:
                buf.close()
        if not attached:
            return None
        return cls(handle, token, buf, capacity)

    def fill(self, keys: np.ndarray, values: Optional[np.ndarray], pos: Optional[np.ndarray], n: int) -> None:
        if pos is None:
            self.keys[:n] = keys
            if values is not None:
                self.values[:n] = values
        else:
            np.take(keys, pos, out=self.keys[:n])
            if values is not None:
                np.take(values, pos, out=self.values[:n])

    def answers(self, method: str, outs: Sequence[np.ndarray], pos: Optional[np.ndarray], n: int) -> None:
        at = Ellipsis if pos is None else pos
        flags = self.flags[:n].view(np.bool_)
        if method == "get":
            outs[0][at] = self.values[:n]
            outs[1][at] = flags
        elif method == "insert":  # the index reports "was present"
            outs[0][at] = ~flags
        elif method in ("contains", "erase"):
            outs[0][at] = flags

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.handle.detach.remote(self.token)
        self.keys = self.values = self.flags = None
        with contextlib.suppress(BufferError, ValueError):
            self.buf.close()


def _close_channels(channels: Dict[int, Any]) -> None:
    for ch in list(channels.values()):
        if ch:
            ch.close()
    channels.clear()


class ShardedIndex:
    """An ordered uint64 -> uint64 index over range shards, one Ray actor per
    key range, each holding a :class:`tandem.Index`. The interface is
    :class:`tandem.Index`'s: column methods take and return numpy uint64
    arrays (answers in input order), one-key forms take and return ints.

    Args:
        num_shards: shards to start with (the key space cut evenly until
            :meth:`load` samples split points from the keys).
        max_shard_keys: a shard holding more keys after a write is split in
            two (None: never split). :meth:`load` makes at least
            ``ceil(2 n / max_shard_keys)`` shards, so they start half full.
        num_gpus_per_shard: Ray's ``num_gpus`` of each shard actor.
        num_cpus_per_shard: Ray's ``num_cpus`` of each shard actor (0: the
            shards share the CPUs Ray has).
        storage_dir: a folder (shared by every node) that makes the shards
            durable: shard i keeps its index in ``<storage_dir>/shard-<i>``,
            restarts from it when its actor dies, and a new ShardedIndex on the
            folder reopens it. See the module's docstring.
        shard_options: more Ray actor options for the shards (resources,
            scheduling_strategy, runtime_env, ...).
        retry_timeout: seconds a call keeps retrying while a shard restarts or
            the map changes before it raises.
        shared_memory: columns of get, contains, put, insert and erase for
            shards on this client's node go through a shared-memory buffer
            per (client, shard) instead of Ray's object store (a file in
            /dev/shm, unlinked once both sides mapped it); False: always the
            object store.
        **index_config: the shards' tandem.Index configuration (``threads``,
            ``device``, ``log_sync_policy``, ...).

    One ShardedIndex object is one client: its calls take effect in the order
    they were made (see the module docstring for what holds across clients).
    :meth:`client` gives another client of the same shards (e.g. for another
    thread), and a ShardedIndex can be passed to Ray tasks and actors (it
    pickles as a client of the same shards). The client that created the
    shards owns them: its :meth:`close` (or the end of its process) ends them.
    """

    def __init__(self, num_shards: int = 2, *, max_shard_keys: Optional[int] = None,
                 num_gpus_per_shard: float = 0, num_cpus_per_shard: float = 0,
                 storage_dir: Optional[Union[str, os.PathLike]] = None,
                 shard_options: Optional[dict] = None, retry_timeout: float = 60.0,
                 shared_memory: bool = True, **index_config: Any) -> None:
        _require_ray()
        if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
            raise ValueError(f"num_shards must be an int >= 1, got {num_shards!r}")
        if max_shard_keys is not None and (not isinstance(max_shard_keys, int) or max_shard_keys < 2):
            raise ValueError(f"max_shard_keys must be None or an int >= 2, got {max_shard_keys!r}")
        if "storage_dir" in index_config:
            raise TypeError("storage_dir is ShardedIndex's own argument")
        _config(index_config)  # unknown names and wrong types raise here, as tandem.Index() does
        if not ray.is_initialized():
            ray.init()
        storage = os.path.abspath(os.fspath(storage_dir)) if storage_dir is not None else None
        options = {"num_cpus": num_cpus_per_shard, "num_gpus": num_gpus_per_shard,
                   "max_restarts": -1 if storage else 0, "max_task_retries": 0}
        options.update(shard_options or {})
        directory = ray.remote(_Directory).options(num_cpus=0, max_restarts=0).remote(
            num_shards, dict(index_config), storage, options, max_shard_keys)
        self._setup(directory, True, num_shards, max_shard_keys, storage is not None, retry_timeout,
                    shared_memory)
        try:
            self._set_map(self._directory_call("start"))
        except BaseException:
            with contextlib.suppress(Exception):
                ray.kill(directory)
            self._closed = True
            raise

    def _setup(self, directory: Any, owner: bool, num_shards: int, max_shard_keys: Optional[int],
               durable: bool, retry_timeout: float, use_shm: bool) -> None:
        self._directory = directory
        self._owner = owner
        self._num_shards = num_shards
        self._max_keys = max_shard_keys
        self._durable = durable
        self._retry_timeout = float(retry_timeout)
        self._turns = _Turns()
        self._pool_lock = threading.Lock()
        self._jobs: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._done: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._closed = False
        self._map: Optional[_Map] = None
        self._counters = {"stale_retries": 0, "restart_retries": 0, "split_requests": 0}
        self._use_shm = use_shm and os.path.isdir(_SHM_DIR)
        self._node_id = ray.get_runtime_context().get_node_id()
        self._channels: Dict[int, Any] = {}  # shard id -> _Channel, or False: not on this node
        # a client dropped without close() still gives its channels back
        self._finalizer = weakref.finalize(self, _close_channels, self._channels)

    @classmethod
    def _attach(cls, directory: Any, num_shards: int, max_shard_keys: Optional[int], durable: bool,
                retry_timeout: float, use_shm: bool = True) -> "ShardedIndex":
        self = cls.__new__(cls)
        self._setup(directory, False, num_shards, max_shard_keys, durable, retry_timeout, use_shm)
        self._refresh()
        return self

    def client(self) -> "ShardedIndex":
        """Another client of the same shards (its own call order; it does not
        own the shards: its close() leaves them running)."""
        self._check_open()
        return ShardedIndex._attach(self._directory, self._num_shards, self._max_keys, self._durable,
                                    self._retry_timeout, self._use_shm)

    def __reduce__(self):
        return (ShardedIndex._attach, (self._directory, self._num_shards, self._max_keys, self._durable,
                                       self._retry_timeout, self._use_shm))

    # ---- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        """Waits for the batches submitted, then (for the client that created
        the shards) closes every shard's index and ends the actors. Later calls
        raise tandem.Error. Idempotent."""
        if self._closed:
            return
        self._closed = True  # later calls raise; those issued before finish first
        with self._turns.turn(self._turns.ticket()):
            pass
        with self._pool_lock:
            jobs, done = self._jobs, self._done
        if jobs is not None:
            jobs.shutdown(wait=True)
        if done is not None:
            done.shutdown(wait=True)
        self._finalizer()
        if self._owner:
            with contextlib.suppress(Exception):
                ray.get(self._directory.close.remote())
            with contextlib.suppress(Exception):
                ray.kill(self._directory)

    def __enter__(self) -> "ShardedIndex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise Error("tandem.distributed.ShardedIndex: the index is closed")

    def _sync(self, fn: Callable[[], Any]) -> Any:
        self._check_open()
        with self._turns.turn(self._turns.ticket()):
            return fn()

    # ---- talking to the directory and the shards ---------------------------------------

    def _directory_call(self, method: str, *args: Any) -> Any:
        try:
            return ray.get(getattr(self._directory, method).remote(*args))
        except RayTaskError as e:
            raise _unwrap(e) from None
        except RayActorError as e:
            raise Error(f"the shard directory of this ShardedIndex died: {e}") from None

    def _set_map(self, got: Tuple[int, Sequence[tuple]]) -> None:
        self._map = _Map(*got)

    def _refresh(self) -> None:
        self._set_map(self._directory_call("get_map"))

    def _deadline(self) -> float:
        return time.monotonic() + self._retry_timeout

    def _after_refusal(self, deadline: float, refused: Sequence[_Refused]) -> None:
        self._counters["stale_retries"] += 1
        old = self._map.version
        self._refresh()
        if self._map.version == old:
            if time.monotonic() > deadline:
                raise refused[0].error
            time.sleep(0.01)

    def _gather(self, calls: Sequence[Tuple[_Ref, str, tuple]], deadline: float) -> List[Any]:
        """Calls every (shard, method, args) at once and returns the answers in
        order, a _Refused in place of each call a shard refused. Calls to a
        shard that died are sent again once it restarted (storage_dir), or
        raise ShardLost."""
        answers: List[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        pause = 0.02
        while todo:
            refs = [getattr(calls[i][0].handle, calls[i][1]).remote(*calls[i][2]) for i in todo]
            try:
                for i, a in zip(todo, ray.get(refs)):
                    answers[i] = a
                return answers
            except (RayTaskError, RayActorError):
                pass
            again = []
            for i, ref in zip(todo, refs):
                try:
                    answers[i] = ray.get(ref)
                except RayTaskError as e:
                    cause = _unwrap(e)
                    if isinstance(cause, (ShardMapChanged, _ChannelGone)):
                        answers[i] = _Refused(cause)
                    elif isinstance(cause, RayActorError):
                        again.append(i)
                    else:
                        raise cause from None
                except RayActorError as e:
                    shard = calls[i][0]
                    if not self._durable:
                        raise ShardLost(
                            f"shard {shard.id} [{shard.lo}, {shard.hi}] died and had no storage_dir: "
                            f"its keys are lost ({type(e).__name__})") from None
                    if time.monotonic() > deadline:
                        raise ShardLost(
                            f"shard {shard.id} [{shard.lo}, {shard.hi}] died and did not come back "
                            f"within {self._retry_timeout} s: {e}") from None
                    again.append(i)
            if again:
                self._counters["restart_retries"] += 1
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
            todo = again
        return answers

    def _split_if_needed(self, sizes: Dict[int, int]) -> None:
        if self._max_keys is None:
            return
        for shard_id, size in sizes.items():
            if size <= self._max_keys:
                continue
            ref = next((r for r in self._map.refs if r.id == shard_id), None)
            if ref is None:
                continue
            self._counters["split_requests"] += 1
            self._set_map(self._directory_call("split", shard_id, ref.lo, ref.hi))

    # ---- point columns ---------------------------------------------------------------

    def _points(self, method: str, keys: np.ndarray, values: Optional[np.ndarray],
                outs: Sequence[np.ndarray]) -> None:
        """Runs a point method over the keys, shard by shard, and puts the
        answers (flags or values and flags) into `outs` in input order. A
        shard's part of at least _SHM_MIN_KEYS keys goes through the shared
        memory channel to that shard when it runs on this node."""
        deadline = self._deadline()
        todo: Optional[np.ndarray] = None  # None: every key
        sizes: Dict[int, int] = {}
        while True:
            m = self._map
            sub = keys if todo is None else keys[todo]
            groups = _group(_shard_ids(m.lows, sub), len(m))
            calls, where = [], []
            for ref, g in zip(m.refs, groups):
                if g is None:
                    pos = todo
                elif g.shape[0] == 0:
                    continue
                else:
                    pos = g if todo is None else todo[g]
                count = keys.shape[0] if pos is None else pos.shape[0]
                ch = self._channel(ref, count) if count >= _SHM_MIN_KEYS else None
                if ch is not None:
                    ch.fill(keys, values, pos, count)
                    calls.append((ref, "columns_shm", (ref.rng, ch.token, _POINT_TYPES[method], count)))
                else:
                    k = keys if pos is None else keys[pos]
                    v = None if values is None else (values if pos is None else values[pos])
                    calls.append((ref, method, (ref.rng, k, v)))
                where.append((pos, ch, count))
            if not calls:
                break
            answers = self._gather(calls, deadline)
            refused, again = [], []
            for (ref, _, _), (pos, ch, count), a in zip(calls, where, answers):
                if isinstance(a, _Refused):
                    if isinstance(a.error, ShardMapChanged):
                        refused.append((pos, a))
                    else:  # the shard lost the channel (restarted): send the part again
                        self._drop_channel(ref.id)
                        again.append(pos)
                    continue
                if ch is not None:
                    sizes[ref.id] = a
                    ch.answers(method, outs, pos, count)
                    continue
                if isinstance(a, (int, np.integer)):  # put: only the size
                    sizes[ref.id] = int(a)
                    continue
                if method in ("insert", "erase"):
                    a, sizes[ref.id] = a[0], a[1]
                    a = (a,)
                for out, col in zip(outs, a):
                    if pos is None:
                        out[...] = col
                    else:
                        out[pos] = col
            if not refused and not again:
                break
            if refused:
                self._after_refusal(deadline, [r for _, r in refused])
            todo = np.concatenate([np.arange(keys.shape[0]) if p is None else p
                                   for p in [r[0] for r in refused] + again])
        if method not in ("get", "contains"):
            self._split_if_needed(sizes)

    def _channel(self, ref: _Ref, count: int) -> Optional["_Channel"]:
        """The shared-memory channel to a shard for `count` keys (made or
        grown on demand), or None when the shard is on another node or
        channels are off."""
        ch = self._channels.get(ref.id)
        if ch is False:
            return None
        if ch is not None and ch.capacity >= count:
            return ch
        if ch is not None:
            self._drop_channel(ref.id)
        if not self._use_shm:
            return None
        try:
            ch = _Channel.open(ref.handle, max(1 << 16, 1 << (count - 1).bit_length()), self._node_id)
        except (RayTaskError, RayActorError, OSError):
            ch = None
        self._channels[ref.id] = ch if ch is not None else False
        return ch

    def _drop_channel(self, shard_id: int) -> None:
        ch = self._channels.pop(shard_id, None)
        if ch:
            ch.close()

    def _one(self, op: str, key: int, value: int = 0) -> Any:
        deadline = self._deadline()
        while True:
            ref = self._map.home(key)
            (a,) = self._gather([(ref, "one", (ref.rng, op, key, value))], deadline)
            if not isinstance(a, _Refused):
                break
            self._after_refusal(deadline, [a])
        if op != "get":
            self._split_if_needed({ref.id: a[1]})
        return a[0]

    # ---- state ---------------------------------------------------------------------

    def shard_map(self) -> ShardMap:
        """The current shard map (fetched from the directory): bounds, shard
        ids, actors and version."""
        def run():
            self._refresh()
            m = self._map
            return ShardMap(m.version, tuple((r.lo, r.hi) for r in m.refs), tuple(r.id for r in m.refs),
                            tuple(r.handle for r in m.refs))
        return self._sync(run)

    def _each_shard(self, method: str, with_range: bool = True) -> List[Any]:
        deadline = self._deadline()
        while True:
            m = self._map
            answers = self._gather([(r, method, (r.rng,) if with_range else ()) for r in m.refs], deadline)
            refused = [a for a in answers if isinstance(a, _Refused)]
            if not refused:
                return answers
            self._after_refusal(deadline, refused)

    def __len__(self) -> int:
        return self._sync(lambda: sum(self._each_shard("size")))

    def stats(self) -> dict:
        """``{"version", "splits", "shards": [per shard: id, lo, hi, restarted,
        folder, pid and its tandem.Index stats], "totals": {sums of the numeric
        fields}, "client": {this client's retry counters}}``."""
        def run():
            self._refresh()
            shards = self._each_shard("stats", with_range=False)
            totals: Dict[str, Any] = {}
            for s in shards:
                for name, v in s.items():
                    if name in ("id", "lo", "hi", "version", "restarted", "folder", "pid"):
                        continue
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        totals[name] = totals.get(name, 0) + v
            info = self._directory_call("info")
            return {"version": info["version"], "splits": info["splits"], "shards": shards,
                    "totals": totals, "client": dict(self._counters)}
        return self._sync(run)

    def verify(self) -> None:
        """Checks that the map covers [0, 2^64-1] without gaps, then each
        shard's index invariants and that it holds no key outside its range;
        raises tandem.InvariantError naming the first problem."""
        def run():
            self._refresh()
            m = self._map
            if int(m.lows[0]) != 0 or int(m.highs[-1]) != U64_MAX:
                raise InvariantError(f"shard map v{m.version} does not span [0, 2^64-1]")
            for a, b in zip(m.refs, m.refs[1:]):
                if a.hi + 1 != b.lo:
                    raise InvariantError(f"shard map v{m.version}: shard {a.id} ends at {a.hi}, "
                                         f"shard {b.id} starts at {b.lo}")
            self._each_shard("verify")
        self._sync(run)

    # ---- columns ---------------------------------------------------------------------

    def load(self, keys: Any, values: Any) -> None:
        """Replaces the contents with the pairs (any order; for a key given
        twice the later pair wins). Split points are sampled from the keys so
        that the shards start with about as many keys each; the shards are
        ``max(num_shards, ceil(2 n / max_shard_keys))`` (fewer when the keys
        have fewer distinct values; with no keys, the key space is cut
        evenly). Not atomic: other clients may see the
        shards emptied before they are filled."""
        k, v = _column(keys, "keys"), _column(values, "values")
        _same_length(k, v, "keys", "values")
        self._sync(lambda: self._load(k, v))

    def _load(self, k: np.ndarray, v: np.ndarray) -> None:
        n = k.shape[0]
        want = self._num_shards
        if self._max_keys is not None:
            want = max(want, -(-2 * n // self._max_keys))
        if n == 0:  # nothing to sample: the key space cut evenly
            lows = [(j << 64) // want for j in range(want)]
        else:
            rng = np.random.default_rng(0x7A9D)
            m = min(n, max(1 << 16, 64 * want))
            sample = np.sort(k if m == n else k[rng.integers(0, n, m)])
            cuts = sample[(np.arange(1, want) * m) // want]
            lows = [0] + [int(c) for c in np.unique(cuts) if int(c) > 0]
        self._set_map(self._directory_call("set_ranges", lows))
        deadline = self._deadline()
        while True:
            m = self._map
            groups = _group(_shard_ids(m.lows, k), len(m))
            calls = []
            for ref, g in zip(m.refs, groups):
                calls.append((ref, "load", (ref.rng, k, v) if g is None else (ref.rng, k[g], v[g])))
            answers = self._gather(calls, deadline)
            refused = [a for a in answers if isinstance(a, _Refused)]
            if not refused:  # another client changed the map: load again on the new one
                break
            self._after_refusal(deadline, refused)
        self._split_if_needed({c[0].id: a for c, a in zip(calls, answers)})

    def get(self, keys: Any) -> Any:
        """``values, found = idx.get(keys)``: uint64 values (0 where absent) and
        bool found flags. With one int key: its value, or None."""
        if _is_scalar(keys):
            key = _key(keys, "key")
            return self._sync(lambda: self._one("get", key))
        k = _column(keys, "keys")
        values = np.zeros(k.shape[0], dtype=np.uint64)
        found = np.zeros(k.shape[0], dtype=np.bool_)
        self._sync(lambda: self._points("get", k, None, (values, found)))
        return values, found

    def contains(self, keys: Any) -> Any:
        """Bool flags: whether each key is present (one int key: a bool)."""
        if _is_scalar(keys):
            key = _key(keys, "key")
            return self._sync(lambda: self._one("get", key)) is not None
        return self._key_flags("contains", keys)

    def put(self, keys: Any, values: Any) -> Any:
        """Sets each key to its value. With one int key: returns the value it
        replaced, or None."""
        if _is_scalar(keys):
            key, value = _key(keys, "key"), _key(values, "value")
            return self._sync(lambda: self._one("put", key, value))
        k, v = _column(keys, "keys"), _column(values, "values")
        _same_length(k, v, "keys", "values")
        self._sync(lambda: self._points("put", k, v, ()))
        return None

    def insert(self, keys: Any, values: Any) -> Any:
        """Sets each key that is absent; returns bool flags, True where it
        inserted (a present key keeps its value). One int key: a bool."""
        if _is_scalar(keys):
            key, value = _key(keys, "key"), _key(values, "value")
            return self._sync(lambda: self._one("insert", key, value))
        k, v = _column(keys, "keys"), _column(values, "values")
        _same_length(k, v, "keys", "values")
        inserted = np.zeros(k.shape[0], dtype=np.bool_)
        self._sync(lambda: self._points("insert", k, v, (inserted,)))
        return inserted

    def erase(self, keys: Any) -> Any:
        """Removes each key; returns bool flags, True where it was present.
        One int key: a bool."""
        if _is_scalar(keys):
            key = _key(keys, "key")
            return self._sync(lambda: self._one("erase", key)) is not None
        return self._key_flags("erase", keys)

    def _key_flags(self, method: str, keys: Any) -> np.ndarray:
        """A bool per key from `method` (contains, erase) over a column of keys."""
        k = _column(keys, "keys")
        flags = np.zeros(k.shape[0], dtype=np.bool_)
        self._sync(lambda: self._points(method, k, None, (flags,)))
        return flags

    def pop(self, key: int, default: Any = None) -> Any:
        """Removes one key and returns its value (or `default` when absent)."""
        k = _key(key, "key")
        old = self._sync(lambda: self._one("erase", k))
        return default if old is None else old

    def lower_bound(self, keys: Any) -> Any:
        """``found, keys, values``: for each key, the entry with the smallest
        key >= it, looked for in the key's shard and then in the next ones
        (found False, key and value 0 where there is none). One int key: a
        (key, value) tuple or None."""
        if _is_scalar(keys):
            k = np.array([_key(keys, "key")], dtype=np.uint64)
            found, ks, vs = self._sync(lambda: self._lower_bound(k))
            return (int(ks[0]), int(vs[0])) if found[0] else None
        k = _column(keys, "keys")
        return self._sync(lambda: self._lower_bound(k))

    def _lower_bound(self, k: np.ndarray):
        n = k.shape[0]
        if n == 0:
            return np.zeros(0, np.bool_), np.zeros(0, np.uint64), np.zeros(0, np.uint64)
        deadline = self._deadline()
        while True:
            m = self._map
            sid = _shard_ids(m.lows, k)
            groups = _group(sid, len(m))
            calls = [(ref, "lower_bound", (ref.rng, k if g is None else k[g]))
                     for ref, g in zip(m.refs, groups)]
            answers = self._gather(calls, deadline)
            refused = [a for a in answers if isinstance(a, _Refused)]
            if not refused:
                break
            self._after_refusal(deadline, refused)
        found = np.zeros(n, dtype=np.bool_)
        out_keys = np.zeros(n, dtype=np.uint64)
        values = np.zeros(n, dtype=np.uint64)
        for g, a in zip(groups, answers):
            if g is None:
                found[...], out_keys[...], values[...] = a[0], a[1], a[2]
            elif g.shape[0]:
                found[g], out_keys[g], values[g] = a[0], a[1], a[2]
        # nothing left in its shard: the first entry of the next shard that has one
        nxt: List[Optional[Tuple[int, int]]] = [None] * len(m)
        cur = None
        for j in range(len(m) - 1, -1, -1):
            nxt[j] = cur
            if answers[j][3] is not None:
                cur = answers[j][3]
        missing = np.flatnonzero(~found)
        if missing.size:
            homes = sid[missing]
            for j in np.unique(homes).tolist():
                if nxt[j] is None:
                    continue
                pos = missing[homes == j]
                found[pos] = True
                out_keys[pos] = nxt[j][0]
                values[pos] = nxt[j][1]
        return found, out_keys, values

    def scan(self, lo: int = 0, hi: int = U64_MAX, limit: Optional[int] = None,
             ordered: bool = True) -> Tuple[np.ndarray, np.ndarray]:
        """``keys, values`` of the entries with lo <= key <= hi in key order,
        at most `limit` of them (None: all of them), merged across the
        shards the range spans."""
        lo, hi = _key(lo, "lo"), _key(hi, "hi")
        if lo > hi:
            raise ValueError(f"scan: lo ({lo}) > hi ({hi})")
        if limit is not None:
            limit = _key(limit, "limit")
            if limit > max_scan_limit:
                raise ValueError(f"scan: limit {limit} exceeds max_scan_limit {max_scan_limit}")
        return self._sync(lambda: self._scan(lo, hi, limit, bool(ordered)))

    def _scan(self, lo: int, hi: int, limit: Optional[int], ordered: bool):
        deadline = self._deadline()
        while True:
            m = self._map
            refs = [r for r in m.refs if r.hi >= lo and r.lo <= hi]
            if len(refs) > 1:
                ordered = True
            calls = [(r, "scan", (r.rng, max(lo, r.lo), min(hi, r.hi), limit, ordered)) for r in refs]
            answers = self._gather(calls, deadline)
            refused = [a for a in answers if isinstance(a, _Refused)]
            if not refused:
                break
            self._after_refusal(deadline, refused)
        if len(answers) == 1:
            keys, values = (np.array(a) for a in answers[0])  # writable copies of the shard's answer
        else:
            keys = np.concatenate([a[0] for a in answers])
            values = np.concatenate([a[1] for a in answers])
        if limit is not None and keys.shape[0] > limit:
            keys, values = keys[:limit].copy(), values[:limit].copy()
        return keys, values

    def scans(self, los: Any, his: Any, limit: int = 4096,
              ordered: bool = True) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Many scans at once: ``offsets, keys, values`` where scan i's entries
        are ``keys[offsets[i]:offsets[i+1]]`` (and the same of values), each
        at most `limit` long, in key order across shards. Raises ValueError
        for lo > hi or a limit above :data:`tandem.max_scan_limit`."""
        lo, hi = _column(los, "los"), _column(his, "his")
        _same_length(lo, hi, "los", "his")
        limit = _key(limit, "limit")
        if limit > max_scan_limit:
            raise ValueError(f"scans: limit {limit} exceeds max_scan_limit {max_scan_limit}")
        bad = np.flatnonzero(lo > hi)
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"scans: scan {i} has lo {int(lo[i])} > hi {int(hi[i])}")
        return self._sync(lambda: self._scans(lo, hi, limit, bool(ordered)))

    def _scans(self, lo: np.ndarray, hi: np.ndarray, limit: int, ordered: bool):
        n = lo.shape[0]
        deadline = self._deadline()
        while True:
            m = self._map
            rep, shard, plo, phi = _route_ranges(lo, hi, m.lows, m.highs)
            if rep.shape[0] != n:
                ordered = True  # pieces are cut at the limit in key order
            groups = _group(shard.astype(np.uint16 if len(m) < 65536 else np.intp), len(m))
            calls, where = [], []
            for ref, g in zip(m.refs, groups):
                if g is not None and g.shape[0] == 0:
                    continue
                g = np.arange(rep.shape[0]) if g is None else g
                calls.append((ref, "scans", (ref.rng, plo[g], phi[g], limit, ordered)))
                where.append(g)
            answers = self._gather(calls, deadline) if calls else []
            refused = [a for a in answers if isinstance(a, _Refused)]
            if not refused:
                break
            self._after_refusal(deadline, refused)
        cnt = np.zeros(rep.shape[0], dtype=np.int64)
        src = np.zeros(rep.shape[0], dtype=np.int64)
        base = 0
        for g, a in zip(where, answers):
            off = a[0]
            cnt[g] = np.diff(off)
            src[g] = off[:-1] + base
            base += a[1].shape[0]
        offsets, gather, _ = _take_scans(n, rep, cnt, src, np.full(rep.shape[0], limit, dtype=np.int64))
        if answers:
            all_keys = np.concatenate([a[1] for a in answers])
            all_values = np.concatenate([a[2] for a in answers])
        else:
            all_keys = all_values = _EMPTY
        return offsets, all_keys[gather], all_values[gather]

    def count(self, los: Any, his: Any) -> Any:
        """The number of keys in each [lo, hi] (uint64 array), summed over the
        shards the range spans. Two ints: an int. Raises ValueError for lo > hi."""
        if _is_scalar(los):
            lo = np.array([_key(los, "lo")], dtype=np.uint64)
            hi = np.array([_key(his, "hi")], dtype=np.uint64)
            if lo[0] > hi[0]:
                raise ValueError(f"count: lo ({int(lo[0])}) > hi ({int(hi[0])})")
            return int(self._sync(lambda: self._count(lo, hi))[0])
        lo, hi = _column(los, "los"), _column(his, "his")
        _same_length(lo, hi, "los", "his")
        bad = np.flatnonzero(lo > hi)
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"count: range {i} has lo {int(lo[i])} > hi {int(hi[i])}")
        return self._sync(lambda: self._count(lo, hi))

    def _count(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        n = lo.shape[0]
        deadline = self._deadline()
        while True:
            m = self._map
            rep, shard, plo, phi = _route_ranges(lo, hi, m.lows, m.highs)
            groups = _group(shard.astype(np.uint16 if len(m) < 65536 else np.intp), len(m))
            calls, where = [], []
            for ref, g in zip(m.refs, groups):
                if g is not None and g.shape[0] == 0:
                    continue
                calls.append((ref, "counts", (ref.rng, plo if g is None else plo[g],
                                              phi if g is None else phi[g])))
                where.append(g)
            answers = self._gather(calls, deadline) if calls else []
            refused = [a for a in answers if isinstance(a, _Refused)]
            if not refused:
                break
            self._after_refusal(deadline, refused)
        piece = np.zeros(rep.shape[0], dtype=np.uint64)
        for g, a in zip(where, answers):
            if g is None:
                piece[...] = a
            else:
                piece[g] = a
        if rep.shape[0] == n:
            return piece
        out = np.zeros(n, dtype=np.uint64)
        np.add.at(out, rep, piece)
        return out

    # ---- the mapping protocol, one key at a time ----------------------------------------

    def __getitem__(self, key: int) -> int:
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def __setitem__(self, key: int, value: int) -> None:
        self.put(key, value)

    def __delitem__(self, key: int) -> None:
        if not self.erase(key):
            raise KeyError(key)

    def __contains__(self, key: Any) -> bool:
        return _is_scalar(key) and 0 <= key <= U64_MAX and self.get(int(key)) is not None

    # ---- batches -------------------------------------------------------------------

    def execute(self, batch: Batch) -> ShardedResult:
        """Runs a :class:`tandem.Batch` and returns its :class:`ShardedResult`.

        The batch is cut into one sub-batch per shard, op order kept within
        each; scans and counts that span shards run on each and are merged (a
        scan's limit counts across shards, in key order); a lower_bound with
        nothing left in its shard is answered by the next shards (as of the
        same point of the batch). Raises when a shard's sub-batch failed as a
        whole; the other shards' sub-batches may have taken effect."""
        ops = batch.ops()
        return self._sync(lambda: self._execute(ops))

    def submit(self, batch: Batch) -> "concurrent.futures.Future[ShardedResult]":
        """Queues a batch; the future's result is its :class:`ShardedResult`
        (or the exception it failed with). The batch is copied: it may be
        changed or reused at once. It takes effect after every call this
        client made before and before every later one."""
        self._check_open()
        ops = batch.ops()
        with self._pool_lock:
            if self._jobs is None:
                self._jobs = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tandem-sharded")
                self._done = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tandem-sharded-done")
            jobs, done = self._jobs, self._done
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        ticket = self._turns.ticket()

        def job() -> None:
            try:
                with self._turns.turn(ticket):
                    result = self._execute(ops)
            except BaseException as e:  # noqa: BLE001 - handed to the future
                done.submit(future.set_exception, e)
            else:
                # futures resolve on another thread, so callbacks may call the index
                done.submit(future.set_result, result)

        jobs.submit(job)
        return future

    async def execute_async(self, batch: Batch) -> ShardedResult:
        """``await idx.execute_async(b)``: :meth:`submit` for asyncio."""
        return await asyncio.wrap_future(self.submit(batch))

    def _execute(self, ops) -> ShardedResult:
        types, keys, args, limits, ordered = (np.asarray(c) for c in ops)
        n = types.shape[0]
        if n == 0:
            z = np.zeros(0, dtype=np.uint64)
            return ShardedResult(z, np.zeros(0, np.bool_), z.copy(), np.zeros(0, np.uint8), {},
                                 np.zeros(1, np.int64), z.copy(), z.copy(), ())
        ranged_scan = (types == _SCAN) & (keys <= args) & (limits <= np.uint64(max_scan_limit))
        ranged = (types == _LOWER_BOUND) | ranged_scan | ((types == _COUNT) & (keys <= args))
        pieces = {
            "op": np.arange(n, dtype=np.int64),
            "typ": types.astype(np.uint8),
            "plo": keys.copy(),
            "phi": np.where(types == _LOWER_BOUND, np.uint64(U64_MAX), np.where(ranged, args, keys)).astype(np.uint64),
            "key": keys,
            "arg": args,
            "limit": limits,
            "ordered": ordered.astype(np.bool_),
            "ranged": ranged,
        }
        chunks = []
        sizes: Dict[int, int] = {}
        sequence = []
        deadline = self._deadline()
        pending: Optional[dict] = pieces
        has_writes = bool(((types >= _PUT) & (types <= _ERASE)).any())
        while pending is not None:
            m = self._map
            routed, shard = _route_pieces(pending, m.lows, m.highs)
            groups = _group(shard.astype(np.uint16 if len(m) < 65536 else np.intp), len(m))
            calls, subs = [], []
            for j, (ref, g) in enumerate(zip(m.refs, groups)):
                if g is not None and g.shape[0] == 0:
                    continue
                sub = routed if g is None else {name: col[g] for name, col in routed.items()}
                sent, answer_of = _dedupe_follow_ups(sub["typ"], sub["key"], m.lows[j])
                cols = tuple(sub[c] if sent is None else sub[c][sent]
                             for c in ("typ", "key", "arg", "limit", "ordered"))
                calls.append((ref, "execute", (ref.rng,) + cols))
                subs.append((sub, answer_of, cols[0]))
            answers = self._gather(calls, deadline)
            refused = []
            for (ref, _, _), (sub, answer_of, sent_types), a in zip(calls, subs, answers):
                if isinstance(a, _Refused):
                    refused.append((sub, a))
                    continue
                sizes[ref.id] = a["size"]
                sequence.append((ref.id, a["sequence"]))
                chunks.append((sub, answer_of, sent_types, a))
            if not refused:
                break
            self._after_refusal(deadline, [a for _, a in refused])
            pending = {name: np.concatenate([s[name] for s, _ in refused]) for name in pieces}
        result = _merge_execute(n, types, keys, limits, chunks, tuple(sequence))
        if has_writes:
            self._split_if_needed(sizes)
        return result

    def __repr__(self) -> str:
        if self._closed:
            return "tandem.distributed.ShardedIndex(closed)"
        m = self._map
        return f"tandem.distributed.ShardedIndex({len(m)} shards, map v{m.version})"


def _route_pieces(p: dict, lows: np.ndarray, highs: np.ndarray):
    """Cuts the ranged pieces (lower_bound, valid scans and counts) at shard
    bounds; returns (pieces, shard of each)."""
    rep, shard, plo, phi = _route_ranges(p["plo"], p["phi"], lows, highs)
    if rep.shape[0] == p["plo"].shape[0]:
        return p, shard
    q = {name: col[rep] for name, col in p.items()}
    multi = np.zeros(rep.shape[0], dtype=bool)
    multi[1:] = rep[1:] == rep[:-1]
    multi[:-1] |= rep[:-1] == rep[1:]
    ranged = q["ranged"]
    q["plo"], q["phi"] = plo, phi
    q["key"] = np.where(ranged, plo, q["key"])
    q["arg"] = np.where(ranged & (q["typ"] >= _SCAN), phi, q["arg"])
    q["ordered"] = q["ordered"] | multi  # a cut scan is merged in key order
    return q, shard


def _dedupe_follow_ups(typ: np.ndarray, key: np.ndarray, shard_lo: np.uint64):
    """lower_bound pieces that ask a shard for its first entry (key = the
    shard's lower bound) with no write of the sub-batch between them get the
    same answer: sends one of each run. Returns (positions sent, answer index
    of each piece), or (None, None) to send every piece."""
    f = (typ == _LOWER_BOUND) & (key == shard_lo)
    fp = np.flatnonzero(f)
    if fp.size <= 1:
        return None, None
    epoch = np.cumsum((typ >= _PUT) & (typ <= _ERASE))[fp]
    leader = np.ones(fp.size, dtype=bool)
    leader[1:] = epoch[1:] != epoch[:-1]
    if leader.all():
        return None, None
    keep = ~f
    keep[fp[leader]] = True
    sent = np.flatnonzero(keep)
    index = np.cumsum(keep) - 1
    answer_of = index.copy()
    answer_of[fp] = index[fp[leader][np.cumsum(leader) - 1]]
    return sent, answer_of


def _merge_execute(n: int, types: np.ndarray, keys: np.ndarray, limits: np.ndarray, chunks,
                   sequence) -> ShardedResult:
    """Puts the pieces' answers back into one answer per op."""
    cols: Dict[str, list] = {c: [] for c in ("op", "typ", "plo", "ranged", "v", "f", "k", "s", "cnt", "src", "err")}
    entry_keys, entry_values = [], []
    base = 0
    for sub, answer_of, sent_types, a in chunks:
        ai = np.arange(sent_types.shape[0]) if answer_of is None else answer_of
        status = a["status"]
        cnt = np.where((sent_types == _SCAN) & (status == 0), a["values"], 0).astype(np.int64)
        off = np.cumsum(cnt) - cnt
        for name in ("op", "typ", "plo", "ranged"):
            cols[name].append(sub[name])
        cols["v"].append(a["values"][ai])
        cols["f"].append(a["found"][ai])
        cols["k"].append(a["keys"][ai])
        cols["s"].append(status[ai])
        cols["cnt"].append(cnt[ai])
        cols["src"].append(off[ai] + base)
        errs = np.empty(ai.shape[0], dtype=object)
        bad = np.flatnonzero(status[ai])
        for p in bad.tolist():
            errs[p] = a["errors"].get(int(ai[p]), "")
        cols["err"].append(errs)
        entry_keys.append(a["entry_keys"])
        entry_values.append(a["entry_values"])
        base += a["entry_keys"].shape[0]
    c = {name: np.concatenate(v) for name, v in cols.items()}
    order = np.lexsort((c["plo"], c["op"]))
    c = {name: v[order] for name, v in c.items()}
    op, typ = c["op"], c["typ"]
    first = np.ones(op.shape[0], dtype=bool)
    first[1:] = op[1:] != op[:-1]
    fi = np.flatnonzero(first)  # one per op, in op order
    values = c["v"][fi].copy()
    found = c["f"][fi].copy()
    out_keys = c["k"][fi].copy()
    status = c["s"][fi].copy()
    errors: Dict[int, str] = {}
    # ops cut into several pieces
    if fi.shape[0] != op.shape[0]:
        multi = np.flatnonzero(np.diff(np.append(fi, op.shape[0])) > 1)
        # status: the first piece that failed
        bad = np.flatnonzero(c["s"])
        if bad.size:
            uo, ui = np.unique(op[bad], return_index=True)
            status[uo] = c["s"][bad[ui]]
        lb = typ[fi] == _LOWER_BOUND
        lb_multi = multi[lb[multi]]
        if lb_multi.size:
            found[lb_multi] = False
            out_keys[lb_multi] = 0
            values[lb_multi] = 0
            hit = np.flatnonzero(c["f"] & (typ == _LOWER_BOUND))
            if hit.size:
                uo, ui = np.unique(op[hit], return_index=True)
                found[uo] = True
                out_keys[uo] = c["k"][hit[ui]]
                values[uo] = c["v"][hit[ui]]
        counts = np.flatnonzero((typ == _COUNT) & c["ranged"])
        if counts.size:
            sums = np.zeros(n, dtype=np.uint64)
            np.add.at(sums, op[counts], c["v"][counts])
            cm = multi[typ[fi][multi] == _COUNT]
            values[cm] = sums[cm]
            found[cm] = sums[cm] > 0
    for p in np.flatnonzero(c["s"]).tolist():
        i = int(op[p])
        if i not in errors and status[i] == c["s"][p]:
            errors[i] = _OP_PREFIX.sub(f"op {i}", c["err"][p] or "")
    # scans: entries in key order, at most the limit, across the pieces
    sp = np.flatnonzero(typ == _SCAN)
    failed = status[op[sp]] != 0
    cnt = np.where(failed, 0, c["cnt"][sp])
    offsets, gather, _ = _take_scans(n, op[sp], cnt, c["src"][sp], limits[op[sp]].astype(np.int64))
    if sp.size:
        per_op = np.diff(offsets)
        scan_ops = np.flatnonzero(types == _SCAN)
        values[scan_ops] = per_op[scan_ops].astype(np.uint64)
        found[scan_ops] = per_op[scan_ops] > 0
    ek = np.concatenate(entry_keys) if entry_keys else _EMPTY
    ev = np.concatenate(entry_values) if entry_values else _EMPTY
    return ShardedResult(values, found, out_keys, status, errors, offsets, ek[gather], ev[gather], sequence)
