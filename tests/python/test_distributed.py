"""tandem.distributed.ShardedIndex on a local Ray cluster: 3 to 4 shards
against the model and against one tandem.Index, splits during a stream of
writes (and clients whose map is out of date), cross-shard scans, counts and
lower_bounds, mixed batches, and shards whose actor is killed."""

import asyncio
import threading
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tandem  # noqa: E402
from model import EDGE_KEYS, U64_MAX, Model, apply_random_call, check_contents, random_keys, u64  # noqa: E402
from tandem.distributed import ShardedIndex, ShardLost, ShardMapChanged  # noqa: E402


@pytest.fixture(scope="session")
def ray_cluster():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def shared(ray_cluster):
    """Four shards reused by the tests that load their own contents."""
    with ShardedIndex(4, threads=1) as idx:
        yield idx


def make_universe(rng, n=3000):
    """Keys over the whole uint64 range (so every shard gets some), plus the edges."""
    keys = rng.integers(0, U64_MAX, n, dtype=np.uint64, endpoint=True)
    return np.unique(np.concatenate([keys, u64(EDGE_KEYS)]))


def load_both(idx, model, rng, universe, n):
    keys = random_keys(rng, n, universe)
    values = rng.integers(0, 1 << 62, n, dtype=np.uint64)
    idx.load(keys, values)
    model.load(keys, values)


@pytest.mark.parametrize("seed", range(4))
def test_random_mixes_match_the_model(shared, seed):
    rng = np.random.default_rng(seed)
    universe = make_universe(rng)
    model = Model()
    load_both(shared, model, rng, universe, 2000)
    assert len(shared.shard_map()) == 4
    for _ in range(40):
        apply_random_call(shared, model, rng, universe)
    check_contents(shared, model)
    shared.verify()


def test_edge_keys_and_empty_inputs(shared):
    model = Model()
    shared.load(u64(EDGE_KEYS), u64([10, 11, 12, 13]))
    model.load(u64(EDGE_KEYS), u64([10, 11, 12, 13]))
    # 0 and 2^64-1 live in the first and the last shard
    assert shared.get(0) == 10 and shared.get(U64_MAX) == 13
    assert shared.lower_bound(2) == (U64_MAX - 1, 12)
    assert shared.lower_bound(U64_MAX) == (U64_MAX, 13)
    assert shared.count(0, U64_MAX) == 4
    ks, vs = shared.scan()
    assert ks.tolist() == EDGE_KEYS
    assert shared.erase(U64_MAX) and shared.lower_bound(U64_MAX) is None
    empty = np.zeros(0, dtype=np.uint64)
    assert shared.get(empty)[0].shape == (0,)
    assert shared.lower_bound(empty)[0].shape == (0,)
    assert shared.count(empty, empty).shape == (0,)
    offsets, ks, _ = shared.scans(empty, empty)
    assert offsets.tolist() == [0] and ks.shape == (0,)
    assert len(shared.execute(tandem.Batch())) == 0
    shared.load(empty, empty)
    assert len(shared) == 0 and shared.scan()[0].shape == (0,)
    assert shared.lower_bound(0) is None


# ---- arguments: the same checks and messages as tandem.Index ---------------------------

BAD_CALLS = [
    lambda i: i.get(-1), lambda i: i.get(2 ** 64), lambda i: i.get(np.int64(-1)), lambda i: i.get(True),
    lambda i: i.get(1.0), lambda i: i.get("x"), lambda i: i[None], lambda i: i.put(5, -1),
    lambda i: i.insert(5, 2 ** 64), lambda i: i.pop(-1), lambda i: i.lower_bound(-1),
    lambda i: i.get(np.arange(3, dtype=np.float32)), lambda i: i.get(np.array([1, -2], dtype=np.int64)),
    lambda i: i.put(u64([1, 2]), u64([1])), lambda i: i.put(u64([1, 2]), -3),
    lambda i: i.get(np.zeros((2, 2), dtype=np.uint64)), lambda i: i.get(u64([1]), 7),
    lambda i: i.scan(5, 4), lambda i: i.scan(0, 10, limit=tandem.max_scan_limit + 1), lambda i: i.scan(-1, 4),
    lambda i: i.count(5, 4), lambda i: i.count(u64([1, 5]), u64([2, 4])), lambda i: i.count(u64([1]), u64([2, 3])),
    lambda i: i.scans(u64([1, 5]), u64([2, 4])), lambda i: i.scans(u64([1]), u64([2]), limit=tandem.max_scan_limit + 1),
    lambda i: list(i.keys(5, -1)),
]


def raised(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 - compared below
        return type(e), str(e)
    return None


@pytest.mark.parametrize("n", range(len(BAD_CALLS)))
def test_wrong_inputs_raise_as_index_does(shared, n):
    call = BAD_CALLS[n]
    with tandem.Index(threads=1) as one:
        want = raised(lambda: call(one))
    assert want is not None and raised(lambda: call(shared)) == want


def test_signed_and_narrow_columns_are_taken_as_index_takes_them(shared):
    shared.load(u64([1, 2, 3]), u64([10, 20, 30]))
    for keys in (np.array([1, 3], dtype=np.int32), np.array([1, 3], dtype=np.uint16), [1, 3]):
        values, found = shared.get(keys)
        assert values.tolist() == [10, 30] and found.all()
    shared.put(np.array([4, 5], dtype=np.int64), 7)  # one value for every key
    assert shared.get(4) == 7 and shared.get(5) == 7 and shared.get(6, 0) == 0


def test_a_config_out_of_range_fails_in_the_caller_before_any_actor(ray_cluster, monkeypatch):
    def no_actor(*args, **kwargs):
        raise AssertionError("an actor was started")

    for bad, error in (({"leaf_fill": 5.0}, ValueError), ({"fanout": 7}, ValueError),
                       ({"threads": -1}, ValueError), ({"no_such_field": 1}, TypeError),
                       ({"threads": "4"}, TypeError)):
        with pytest.raises(error) as want:
            tandem.Index(**bad)
        monkeypatch.setattr(ray, "remote", no_actor)
        with pytest.raises(error) as got:
            ShardedIndex(2, **bad)
        monkeypatch.undo()
        assert str(got.value) == str(want.value).replace("tandem.Index()", "ShardedIndex()")


def test_a_batch_result_reads_as_index_result(shared):
    shared.load(u64([1, 1 << 63]), u64([10, 20]))
    b = tandem.Batch().get(1).put(1 << 63, 21).scan(5, 4).count(0, U64_MAX)
    r = shared.execute(b)
    assert r[0] == tandem.OpResult(True, 10, 1, 0) and r[-1] == r[3] and r[3].value == 2
    assert r[2].status == 1 and r.error(2) == tandem.Index().execute(b).error(2)
    assert r.error(-2) == r.error(2) and r.scan(-2)[0].tolist() == []
    assert repr(r) == f"tandem.distributed.ShardedResult(4 ops, 1 invalid, {len(r.sequence)} shards)"
    with pytest.raises(IndexError):
        r[4]


def test_mapping_habits(shared):
    model = Model()
    keys = u64([0, 5, 1 << 40, 1 << 63, U64_MAX])
    shared.load(keys, u64([1, 2, 3, 4, 5]))
    model.load(keys, u64([1, 2, 3, 4, 5]))
    assert list(shared) == model.keys
    assert dict(shared.items()) == model.d
    assert list(shared.values(5, 1 << 63)) == [2, 3, 4]
    assert "x" not in shared and -1 not in shared and U64_MAX in shared
    assert shared.get(7, "none") == "none"


def test_iteration_asks_one_shard_a_piece(shared, monkeypatch):
    """Iteration walks the shards in key order, a piece from one shard at a
    time, each piece twice the last (up to max_scan_limit)."""
    model = Model()
    keys = np.arange(0, 30000, dtype=np.uint64) * np.uint64(1 << 49)  # spread over every shard
    shared.load(keys, keys + np.uint64(1))
    model.load(keys, keys + np.uint64(1))
    m = shared.shard_map()
    assert m.num_shards > 1
    scans = []
    scan = shared._scan

    def spy(lo, hi, limit, ordered):
        scans.append((lo, hi, limit))
        return scan(lo, hi, limit, ordered)

    monkeypatch.setattr(shared, "_scan", spy)
    assert list(shared) == model.keys
    for lo, hi, _ in scans:
        assert any(b_lo <= lo and hi <= b_hi for b_lo, b_hi in m.bounds)
    assert scans[0][2] == tandem._api.FIRST_PIECE


def test_large_columns(shared):
    """Parts of thousands of keys per shard go through the shared-memory
    channels (the object store for the client without them)."""
    rng = np.random.default_rng(21)
    universe = make_universe(rng, 60000)
    model = Model()
    load_both(shared, model, rng, universe, 40000)
    plain = ShardedIndex._attach(shared._directory, 4, None, False, 60.0, use_shm=False)
    for step in range(6):
        client = shared if step % 2 == 0 else plain
        keys = random_keys(rng, 30000, universe)
        values = rng.integers(0, 1 << 62, keys.shape[0], dtype=np.uint64)
        got, found = client.get(keys)
        want = [model.get(k) for k in keys.tolist()]
        assert found.tolist() == [w is not None for w in want]
        assert got.tolist() == [w or 0 for w in want]
        assert client.contains(keys).tolist() == found.tolist()
        assert client.insert(keys, values).tolist() == [
            model.insert(k, v) for k, v in zip(keys.tolist(), values.tolist())]
        client.put(keys[::2], values[::2] + np.uint64(1))
        for k, v in zip(keys[::2].tolist(), (values[::2] + np.uint64(1)).tolist()):
            model.put(k, v)
        gone = keys[: 12000]
        assert client.erase(gone).tolist() == [model.erase(k) is not None for k in gone.tolist()]
    assert any(shared._channels.values()) and not any(plain._channels.values())
    check_contents(shared, model)
    shared.verify()
    plain.close()


def test_cross_shard_scans_counts_and_lower_bounds(shared):
    # dense keys around every shard bound
    rng = np.random.default_rng(7)
    universe = make_universe(rng, 400)
    model = Model()
    load_both(shared, model, rng, universe, 400)
    bounds = shared.shard_map().bounds
    assert len(bounds) == 4 and bounds[0][0] == 0 and bounds[-1][1] == U64_MAX
    near = []
    for lo, _ in bounds[1:]:
        near += [lo - 2, lo - 1, lo, lo + 1]
    near = u64(near)
    shared.put(near, near)
    for k in near.tolist():
        model.put(k, k)
    probes = sorted(set(near.tolist()) | {b[0] for b in bounds} | {b[1] for b in bounds} | {0, U64_MAX})
    found, lk, lv = shared.lower_bound(u64(probes))
    for i, k in enumerate(probes):
        want = model.lower_bound(k)
        assert (bool(found[i]), int(lk[i]), int(lv[i])) == ((True, *want) if want else (False, 0, 0))
    # every range between the probes, and with limits that cut inside a shard
    los, his = np.meshgrid(u64(probes), u64(probes))
    keep = los <= his
    los, his = los[keep], his[keep]
    assert shared.count(los, his).tolist() == [model.count(a, b) for a, b in zip(los.tolist(), his.tolist())]
    for limit in (1, 3, 150, 1000):
        offsets, ks, _ = shared.scans(los, his, limit)
        for i, (a, b) in enumerate(zip(los.tolist(), his.tolist())):
            assert ks[offsets[i]:offsets[i + 1]].tolist() == model.scan(a, b, limit)[0]
    # a lower_bound past the end of its shard, with the next shards emptied,
    # continues until a shard with keys
    (_, hi1), (lo2, hi2), (lo3, _) = bounds[1], bounds[2], bounds[3]
    gone = [k for k in model.keys if lo2 <= k <= hi2]
    assert shared.erase(u64(gone)).all()
    for k in gone:
        model.erase(k)
    probe = model.scan(0, hi1)[0][-1] + 1
    assert shared.lower_bound(probe) == model.lower_bound(probe)
    assert model.lower_bound(probe)[0] >= lo3
    ks, vs = shared.scan(probe, U64_MAX, limit=5)
    assert ks.tolist() == model.scan(probe, U64_MAX, 5)[0]
    ks, vs = shared.scan(0, U64_MAX, ordered=False)
    assert sorted(ks.tolist()) == model.keys
    shared.verify()


def random_batch(rng, universe, n):
    b = tandem.Batch()
    keys = random_keys(rng, n, universe).tolist()
    his = random_keys(rng, n, universe).tolist()
    for k, h in zip(keys, his):
        kind = rng.choice(["get", "put", "insert", "erase", "lower_bound", "scan", "count", "bad"])
        if kind in ("put", "insert"):
            getattr(b, kind)(k, int(rng.integers(0, 1 << 62)))
        elif kind == "scan":
            b.scan(min(k, h), max(k, h), limit=int(rng.choice([0, 1, 7, 40])), ordered=bool(rng.random() < 0.7))
        elif kind == "count":
            b.count(min(k, h), max(k, h))
        elif kind == "bad":
            if rng.random() < 0.5:
                b.scan(max(k, h) + (k == h), min(k, h))  # lo > hi: invalid
            else:
                b.scan(min(k, h), max(k, h), limit=tandem.max_scan_limit + 1)
        else:
            getattr(b, kind)(k)
    return b


def check_same_result(got, want, batch):
    types = batch.ops()[0]
    assert len(got) == len(want)
    assert got.status.tolist() == want.status.tolist()
    assert got.invalid_count == want.invalid_count
    assert got.found.tolist() == want.found.tolist()
    assert got.values.tolist() == want.values.tolist()
    assert got.keys.tolist() == want.keys.tolist()
    for i in range(len(got)):
        assert got.error(i) == want.error(i)
        if types[i] == 5:
            gk, gv = got.scan(i)
            wk, wv = want.scan(i)
            if batch.ops()[4][i]:
                assert (gk.tolist(), gv.tolist()) == (wk.tolist(), wv.tolist())
            else:  # unordered: the same entries
                assert sorted(zip(gk.tolist(), gv.tolist())) == sorted(zip(wk.tolist(), wv.tolist()))
    if all(batch.ops()[4]):
        assert got.scan_entries()[0].tolist() == want.scan_entries()[0].tolist()


@pytest.mark.parametrize("seed", range(4))
def test_mixed_batches_match_one_index(shared, seed):
    rng = np.random.default_rng(50 + seed)
    universe = make_universe(rng, 600)
    keys = random_keys(rng, 500, universe)
    values = rng.integers(0, 1 << 62, 500, dtype=np.uint64)
    shared.load(keys, values)
    with tandem.Index(threads=1) as one:
        one.load(keys, values)
        for _ in range(12):
            b = random_batch(rng, universe, int(rng.choice([1, 10, 300])))
            check_same_result(shared.execute(b), one.execute(b), b)
        assert shared.scan()[0].tolist() == one.scan()[0].tolist()
    shared.verify()


def test_batch_lower_bound_sees_earlier_writes_of_the_batch_in_later_shards(shared):
    shared.load(u64([]), u64([]))
    bounds = shared.shard_map().bounds
    lo1, lo2, lo3 = bounds[1][0], bounds[2][0], bounds[3][0]
    shared.put(u64([lo1, lo3 + 5]), u64([1, 2]))
    b = (tandem.Batch().lower_bound(lo1 + 1)       # nothing left in shard 1 or 2: shard 3's key
         .put(lo2 + 9, 3).lower_bound(lo1 + 1)      # now shard 2's new key
         .erase(lo2 + 9).lower_bound(lo1 + 1)       # shard 3's again
         .put(U64_MAX, 4).erase(lo3 + 5).lower_bound(lo1 + 1).lower_bound(lo1 + 2)
         .scan(0, U64_MAX, limit=2).count(lo1, U64_MAX))
    r = shared.execute(b)
    with tandem.Index(threads=1) as one:
        one.put(u64([lo1, lo3 + 5]), u64([1, 2]))
        want = one.execute(b)
    check_same_result(r, want, b)
    assert r.keys[[0, 2, 4, 7, 8]].tolist() == [lo3 + 5, lo2 + 9, lo3 + 5, U64_MAX, U64_MAX]
    assert r.sequence and all(isinstance(s, tuple) and len(s) == 2 for s in r.sequence)


def test_splits_during_a_stream_of_writes(ray_cluster):
    rng = np.random.default_rng(11)
    universe = make_universe(rng, 20000)
    model = Model()
    with ShardedIndex(2, max_shard_keys=2000, threads=1) as idx:
        stale = idx.client()  # keeps the first map until a shard refuses it
        assert stale.shard_map().version == idx.shard_map().version
        for _ in range(30):
            n = 400
            keys = random_keys(rng, n, universe)
            values = rng.integers(0, 1 << 62, n, dtype=np.uint64)
            kind = rng.choice(["insert", "put", "erase", "get", "batch"], p=[0.4, 0.25, 0.1, 0.1, 0.15])
            if kind == "insert":
                assert idx.insert(keys, values).tolist() == [
                    model.insert(k, v) for k, v in zip(keys.tolist(), values.tolist())]
            elif kind == "put":
                idx.put(keys, values)
                for k, v in zip(keys.tolist(), values.tolist()):
                    model.put(k, v)
            elif kind == "erase":
                assert idx.erase(keys[:100]).tolist() == [model.erase(k) is not None for k in keys[:100].tolist()]
            elif kind == "get":
                got, found = idx.get(keys)
                assert found.tolist() == [model.get(k) is not None for k in keys.tolist()]
            else:
                b = tandem.Batch().put(keys, values).get(keys[::7]).lower_bound(keys[::50]).scan(0, U64_MAX, limit=9)
                r = idx.execute(b)
                for k, v in zip(keys.tolist(), values.tolist()):
                    model.put(k, v)
                assert r.values[n:n + len(keys[::7])].tolist() == [model.get(k) for k in keys[::7].tolist()]
                assert r.scan(len(b) - 1)[0].tolist() == model.keys[:9]
            assert len(idx) == len(model.keys)
        m = idx.shard_map()
        assert len(m) >= 4, m
        assert all(s["keys"] <= 2000 for s in idx.stats()["shards"])
        assert idx.stats()["splits"] == len(m) - 2
        idx.verify()
        check_contents(idx, model)
        # the client with the first map: refused by the narrowed shards, it
        # refreshes its map and sends the call again
        probe = u64(model.keys[::3])
        got, found = stale.get(probe)
        assert found.all() and got.tolist() == [model.d[k] for k in probe.tolist()]
        assert stale.stats()["client"]["stale_retries"] >= 1
        check_contents(stale, model)
        # a batch with writes, refused in part by shards split since, is
        # applied once
        stale2 = idx.client()
        for _ in range(3):  # more splits behind stale2's back
            keys = random_keys(rng, 600, universe)
            assert idx.insert(keys, keys).tolist() == [model.insert(k, k) for k in keys.tolist()]
        assert len(idx.shard_map()) > len(stale2._map)
        keys = u64(model.keys[::5])
        b = tandem.Batch().insert(keys, keys).erase(keys[::2]).get(keys).lower_bound(keys + np.uint64(1))
        b.count(0, U64_MAX).scan(int(keys[3]), U64_MAX, limit=700)
        with tandem.Index(threads=1) as one:
            ks, vs = idx.scan()
            one.load(ks, vs)
            want = one.execute(b)
            check_same_result(stale2.execute(b), want, b)
            assert idx.scan()[0].tolist() == one.scan()[0].tolist()
        assert stale2.stats()["client"]["stale_retries"] >= 1
        stale2.close()
        # a shard refuses a call made with a range it no longer holds,
        # before applying any of it
        first = m.actors[0]
        with pytest.raises(ShardMapChanged):
            ray.get(first.columns.remote((0, U64_MAX), tandem.OpType.put, u64([1]), u64([2]), False, False))
        assert idx.get(1) == model.get(1)
        stale.close()


def test_concurrent_clients_during_splits(ray_cluster):
    with ShardedIndex(2, max_shard_keys=1500, threads=1) as idx:
        errors = []
        models = [Model(), Model()]

        def writer(t, client):
            try:
                rng = np.random.default_rng(100 + t)
                for _ in range(12):
                    # disjoint key sets: t is the lowest bit
                    keys = rng.integers(0, U64_MAX >> 1, 300, dtype=np.uint64) * np.uint64(2) + np.uint64(t)
                    values = keys + np.uint64(t)
                    got = client.insert(keys, values)
                    assert got.tolist() == [models[t].insert(k, v) for k, v in zip(keys.tolist(), values.tolist())]
                    v, f = client.get(keys)
                    assert f.all() and v.tolist() == [models[t].d[k] for k in keys.tolist()]
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        clients = [idx, idx.client()]
        threads = [threading.Thread(target=writer, args=(t, c)) for t, c in enumerate(clients)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        union = Model()
        union.d = {**models[0].d, **models[1].d}
        union.keys = sorted(union.d)
        check_contents(idx, union)
        assert len(idx.shard_map()) >= 4
        idx.verify()
        clients[1].close()


def test_futures_threads_and_asyncio(shared):
    shared.load(u64([]), u64([]))
    # one client's batches take effect in the order it sent them
    futures = [shared.submit(tandem.Batch().put(7, i).get(7)) for i in range(20)]
    assert [int(f.result(timeout=60).values[1]) for f in futures] == list(range(20))
    assert shared.get(7) == 19
    assert shared.submit(tandem.Batch().get(1)).result().found.tolist() == [False]

    async def main():
        async def one(i):
            r = await shared.execute_async(tandem.Batch().put(i << 40, i * 3).get(i << 40))
            return int(r.values[1])
        return await asyncio.gather(*(one(i) for i in range(30)))

    assert asyncio.run(main()) == [i * 3 for i in range(30)]
    # many threads sharing the client
    errors = []

    def worker(t):
        try:
            keys = np.arange(t * 1000, t * 1000 + 50, dtype=np.uint64) * np.uint64(1 << 44)
            shared.put(keys, keys + np.uint64(1))
            v, f = shared.get(keys)
            assert f.all() and (v == keys + np.uint64(1)).all()
        except Exception as e:  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_a_client_passed_to_a_ray_task(shared):
    shared.load(u64([5, 1 << 63]), u64([50, 60]))

    @ray.remote(num_cpus=0)
    def remote_get(idx, keys):
        return idx.get(keys)

    v, f = ray.get(remote_get.remote(shared, u64([5, 6, 1 << 63])))
    assert v.tolist() == [50, 0, 60] and f.tolist() == [True, False, True]


def kill_shard(idx, position, wait=True):
    """Kills a shard's actor (Ray restarts it when it may); with `wait`,
    returns once the old process is gone (and a new one answers, if any)."""
    actor = idx.shard_map().actors[position]
    pid = ray.get(actor.stats.remote())["pid"]
    ray.kill(actor, no_restart=False)
    deadline = time.monotonic() + 60
    while wait and time.monotonic() < deadline:
        try:
            if ray.get(actor.stats.remote())["pid"] != pid:
                return
        except ray.exceptions.RayActorError:
            if not idx._durable:
                return
        time.sleep(0.05)
    assert not wait, "the killed shard did not go away"


def test_killed_shard_with_storage_dir_comes_back_with_every_write(ray_cluster, tmp_path):
    rng = np.random.default_rng(3)
    universe = make_universe(rng, 3000)
    model = Model()
    with ShardedIndex(3, max_shard_keys=800, storage_dir=tmp_path, threads=1) as idx:
        load_both(idx, model, rng, universe, 1000)
        for _ in range(3):  # acknowledged writes after the load's checkpoint, and splits
            keys = random_keys(rng, 400, universe)
            values = rng.integers(0, 1 << 62, 400, dtype=np.uint64)
            idx.put(keys, values)
            for k, v in zip(keys.tolist(), values.tolist()):
                model.put(k, v)
            assert idx.erase(keys[:50]).tolist() == [model.erase(k) is not None for k in keys[:50].tolist()]
        shards = len(idx.shard_map())
        for position in (0, shards - 1):
            kill_shard(idx, position)
            check_contents(idx, model)  # waits for the restart, then answers from the folder
        assert sum(s["restarted"] for s in idx.stats()["shards"]) == 2
        kill_shard(idx, 1, wait=False)
        lo1 = idx.shard_map().bounds[1][0]
        idx.put(u64([lo1, U64_MAX]), u64([33, 44]))  # a write sent while its shard restarts
        model.put(lo1, 33)
        model.put(U64_MAX, 44)
        check_contents(idx, model)
        # a large get right after a kill: the restarted shard has lost the
        # client's shared-memory channel, and the call is sent again
        probe = u64(model.keys * 12)
        idx.get(probe)
        first = idx.shard_map().ids[0]
        token = idx._channels[first].token
        kill_shard(idx, 0)
        got, found = idx.get(probe)
        assert found.all() and got.tolist() == [model.d[k] for k in probe.tolist()]
        assert idx._channels[first].token != token
        idx.verify()
    # a new ShardedIndex on the folder reopens the shards
    with ShardedIndex(storage_dir=tmp_path, threads=1) as again:
        assert len(again.shard_map()) == shards
        check_contents(again, model)
        again.verify()


def test_killed_shard_without_storage_dir_raises(ray_cluster):
    with ShardedIndex(3, threads=1) as idx:
        keys = np.arange(0, 3000, dtype=np.uint64) * np.uint64(6148914691236517)
        idx.load(keys, keys)
        bounds = idx.shard_map().bounds
        kill_shard(idx, 1)
        with pytest.raises(tandem.Error, match=r"shard \d+ .* died and had no storage_dir") as e:
            idx.get(keys)
        assert isinstance(e.value, ShardLost)
        with pytest.raises(tandem.Error, match="no storage_dir"):
            idx.get(bounds[1][0])
        # the other shards still answer
        assert idx.get(int(keys[0])) == int(keys[0])
        assert idx.get(int(keys[-1])) == int(keys[-1])
