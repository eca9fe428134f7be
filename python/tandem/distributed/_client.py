"""The client: :class:`ShardedIndex`, tandem.Index's interface over the
shards, and :class:`ShardMap`, a version of the map it routes by."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import threading
import weakref
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np

from .. import Batch, InvariantError, max_scan_limit
from .. import _column, _config, _is_scalar, _key, _same_length
from ._calls import _Turns
from ._channel import _SHM_DIR, _close_channels
from ._common import U64_MAX, _require_ray, ray
from ._directory import _Directory
from ._merge import ShardedResult
from ._ops import _ShardOps
from ._routing import _Map



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



class ShardedIndex(_ShardOps):
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

    def __repr__(self) -> str:
        if self._closed:
            return "tandem.distributed.ShardedIndex(closed)"
        m = self._map
        return f"tandem.distributed.ShardedIndex({len(m)} shards, map v{m.version})"
