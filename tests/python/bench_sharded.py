"""Gets through ShardedIndex (local Ray shards) against one in-process
tandem.Index: the same keys, the same batches of random existing keys.

    python tests/python/bench_sharded.py [--keys 22] [--batch 20] [--shards 2]
        [--seconds 5] [--threads 0] [--shard-threads 0] [--no-shm] [--profile]

Prints M gets/s of each (rounds of about a second of each in turn, so that
both see the same machine) and their ratio. --profile also times, on one
batch, the client's cut by shard, a whole get, the same parts' gets through
Ray's object store, and an empty call to every shard.
"""

import argparse
import time

import numpy as np
import ray

import tandem
from tandem.distributed import ShardedIndex
from tandem.distributed._routing import _group, _shard_ids


def rate(get, batches, seconds):
    """M keys/s of `get` over the batches, for about `seconds`."""
    done = 0
    start = time.perf_counter()
    while True:
        for q in batches:
            get(q)
            done += q.shape[0]
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed / 1e6


def profile(idx, q):
    """Times the steps of one get of `q` (ms)."""
    def ms(t):
        return f"{t * 1e3:.1f} ms"

    m = idx._map
    t0 = time.perf_counter()
    groups = _group(_shard_ids(m.lows, q), len(m))
    parts = [q if g is None else q[g] for g in groups]
    t1 = time.perf_counter()
    idx.get(q)
    t2 = time.perf_counter()
    ray.get([r.handle.columns.remote(r.rng, tandem.OpType.get, p, None, True, True) for r, p in zip(m.refs, parts)])
    t3 = time.perf_counter()
    ray.get([r.handle.size.remote(r.rng) for r in m.refs])
    t4 = time.perf_counter()
    print(f"  cut by shard {ms(t1 - t0)}; whole get {ms(t2 - t1)}; the parts' gets through the object "
          f"store {ms(t3 - t2)}; an empty call to every shard {ms(t4 - t3)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=22, help="log2 of the keys loaded")
    ap.add_argument("--batch", type=int, default=20, help="log2 of the keys per get")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=0, help="threads of the in-process index")
    ap.add_argument("--shard-threads", type=int, default=0, help="threads of each shard's index")
    ap.add_argument("--no-shm", action="store_true", help="columns through Ray's object store only")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()

    rng = np.random.default_rng(42)
    n = 1 << a.keys
    keys = rng.integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
    values = keys * np.uint64(3)
    batches = [keys[rng.integers(0, n, 1 << a.batch)] for _ in range(8)]

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    local = tandem.Index(threads=a.threads)
    local.load(keys, values)
    with ShardedIndex(num_shards=a.shards, threads=a.shard_threads, shared_memory=not a.no_shm) as idx:
        idx.load(keys, values)
        for ix in (local, idx):  # answers checked, and warm
            v, f = ix.get(batches[0])
            assert f.all() and (v == batches[0] * np.uint64(3)).all()
        # rounds of each in turn, so that both see the same machine
        rounds = max(1, round(a.seconds))
        single, sharded = [], []
        for _ in range(rounds):
            single.append(rate(local.get, batches, a.seconds / rounds))
            sharded.append(rate(idx.get, batches, a.seconds / rounds))
        if a.profile:
            for _ in range(2):
                profile(idx, batches[0])
    local.close()
    ray.shutdown()

    s1, s2 = float(np.median(single)), float(np.median(sharded))
    print(f"keys 2^{a.keys}, batches of 2^{a.batch} random existing keys, {rounds} rounds of each in turn")
    print(f"tandem.Index (threads={a.threads}): {s1:7.2f} M gets/s "
          f"(median; rounds {', '.join(f'{x:.1f}' for x in single)})")
    path = "object store" if a.no_shm else "shared memory"
    print(f"ShardedIndex ({a.shards} shards, threads={a.shard_threads} each, {path}): {s2:7.2f} M gets/s "
          f"(median; rounds {', '.join(f'{x:.1f}' for x in sharded)})")
    print(f"ratio: {s2 / s1:.2f}x")


if __name__ == "__main__":
    main()
