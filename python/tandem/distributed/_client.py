"""The client: :class:`ShardedIndex`, tandem.Index's interface over the
shards, and :class:`ShardMap`, a version of the map it routes by."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import os
import threading
import weakref
from typing import Any, Dict, Iterator, Optional, Tuple, Union

from .. import Batch, IndexAPI, InvariantError
from .._convert import config
from .._types import U64Array
from ._calls import _Turns
from ._channel import _SHM_DIR, _close_channels
from ._common import U64_MAX, _require_ray, ray
from ._directory import _Directory
from ._merge import ShardedResult
from ._ops import _ShardOps


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


class ShardedIndex(_ShardOps, IndexAPI[ShardedResult]):
    """An ordered uint64 -> uint64 index over range shards, one Ray actor per
    key range, each holding a :class:`tandem.Index`. The interface is
    :class:`tandem.Index`'s (both are a :class:`tandem.IndexAPI`: the same
    methods, arguments, checks and errors); a batch's result is a
    :class:`ShardedResult`.

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

    :meth:`execute` cuts a batch into one sub-batch per shard, op order kept
    within each; scans and counts that span shards run on each and are
    merged (a scan's limit counts across shards, in key order); a
    lower_bound with nothing left in its shard is answered by the next
    shards (as of the same point of the batch). It raises when a shard's
    sub-batch failed as a whole; the other shards' sub-batches may have
    taken effect.

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
        # What each shard's tandem.Index would raise as it starts (an unknown
        # name, a wrong type, a value out of range), here, before any actor.
        config(index_config, who="ShardedIndex()")
        if not ray.is_initialized():
            ray.init()
        storage = os.path.abspath(os.fspath(storage_dir)) if storage_dir is not None else None
        options = {"num_cpus": num_cpus_per_shard, "num_gpus": num_gpus_per_shard,
                   "max_restarts": -1 if storage else 0, "max_task_retries": 0}
        options.update(shard_options or {})
        directory: Any = ray.remote(_Directory).options(num_cpus=0, max_restarts=0).remote(
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

    # ---- batches -------------------------------------------------------------------

    def _scan_in_pieces(self, lo: int, hi: int) -> Iterator[Tuple[U64Array, U64Array]]:
        # One shard's part of [lo, hi] at a time, so that each piece's limit
        # is asked of one shard, not of every shard the range covers.
        while True:
            part_hi = min(hi, self._map.home(lo).hi)
            yield from super()._scan_in_pieces(lo, part_hi)
            if part_hi >= hi:
                return
            lo = part_hi + 1

    def _submit(self, batch: Batch) -> "concurrent.futures.Future[ShardedResult]":
        self._check_open()
        ops = batch.ops()
        with self._pool_lock:
            if self._jobs is None or self._done is None:
                self._jobs = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tandem-sharded")
                self._done = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tandem-sharded-done")
            jobs, done = self._jobs, self._done
        future: "concurrent.futures.Future[ShardedResult]" = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        ticket = self._turns.ticket()

        def job() -> None:
            try:
                with self._turns.turn(ticket):
                    result = self._run_batch(ops)
            except BaseException as e:  # noqa: BLE001 - handed to the future
                done.submit(future.set_exception, e)
            else:
                # futures resolve on another thread, so callbacks may call the index
                done.submit(future.set_result, result)

        jobs.submit(job)
        return future

    def __repr__(self) -> str:
        if self._closed:
            return "tandem.distributed.ShardedIndex(closed)"
        m = self._map
        return f"tandem.distributed.ShardedIndex({len(m)} shards, map v{m.version})"
