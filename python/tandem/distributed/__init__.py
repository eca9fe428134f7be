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

The methods are :class:`tandem.Index`'s, from the same base
(:class:`tandem.IndexAPI`: columns in and out, the one-key forms, mapping
habits and ordered iteration, :meth:`~ShardedIndex.execute` of a
:class:`tandem.Batch`, futures and asyncio), with the same argument checks
and errors; ``ShardedIndex(...)`` checks the index configuration before any
actor starts.

Modules
    ``_routing`` (which shard holds a key; cutting columns and ranges at
    shard bounds), ``_shard`` (the shard actor), ``_directory`` (the
    directory actor: the map, shard creation, splits), ``_channel`` (the
    shared-memory buffer of a client and a shard), ``_merge`` (pieces'
    answers put back in input order; :class:`ShardedResult`), ``_calls``
    (the client's calls: call order, gathering the shards' answers, the
    one retry loop for refused calls), ``_ops`` (the base's primitives over
    the shards), ``_client`` (:class:`ShardedIndex`, :class:`ShardMap`),
    ``_common`` (op codes, errors, the map's files).

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

from ._client import ShardedIndex, ShardMap
from ._common import ShardLost, ShardMapChanged
from ._merge import ShardedResult

__all__ = ["ShardedIndex", "ShardedResult", "ShardMap", "ShardMapChanged", "ShardLost"]

# The public classes live in private modules; they name this package, their
# public import path, as their home, so that reprs, docs and pickles (the
# errors shards raise, clients passed to Ray tasks) use it.
for _cls in (ShardedIndex, ShardedResult, ShardMap, ShardMapChanged, ShardLost):
    _cls.__module__ = __name__
del _cls
