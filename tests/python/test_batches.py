"""tandem.Batch, Index.execute / submit / execute_async: mixed batches against
the model, many Python threads at once, asyncio, failures that stay local."""

import asyncio
import concurrent.futures
import threading

import numpy as np
import pytest

import tandem
from model import EDGE_KEYS, Model, random_keys, u64


def run_model(model, ops):
    """The answers (found, value, key) a batch of `ops` gives, in order."""
    out = []
    for op in ops:
        kind = op[0]
        if kind == "get":
            v = model.get(op[1])
            out.append((v is not None, v or 0, op[1]))
        elif kind in ("put", "insert", "erase"):
            before = model.get(op[1])
            if kind == "put":
                model.put(op[1], op[2])
            elif kind == "insert":
                model.insert(op[1], op[2])
            else:
                model.erase(op[1])
            out.append((before is not None, before or 0, op[1]))
        elif kind == "lower_bound":
            e = model.lower_bound(op[1])
            out.append((e is not None, e[1] if e else 0, e[0] if e else 0))
        elif kind == "scan":
            ks, _ = model.scan(op[1], op[2], op[3])
            out.append((len(ks) > 0, len(ks), op[1]))
        else:
            c = model.count(op[1], op[2])
            out.append((c > 0, c, op[1]))
    return out


def random_batch(rng, universe, n):
    b = tandem.Batch()
    ops = []
    keys = random_keys(rng, n, universe).tolist()
    his = random_keys(rng, n, universe).tolist()
    for k, h in zip(keys, his):
        kind = rng.choice(["get", "put", "insert", "erase", "lower_bound", "scan", "count"])
        if kind in ("put", "insert"):
            v = int(rng.integers(0, 1 << 62))
            getattr(b, kind)(k, v)
            ops.append((kind, k, v))
        elif kind in ("scan", "count"):
            lo, hi = min(k, h), max(k, h)
            if kind == "scan":
                b.scan(lo, hi, limit=20)
                ops.append(("scan", lo, hi, 20))
            else:
                b.count(lo, hi)
                ops.append(("count", lo, hi))
        else:
            getattr(b, kind)(k)
            ops.append((kind, k))
    return b, ops


def check_result(r, ops, want, model_scans):
    assert len(r) == len(ops)
    assert (r.status == 0).all() and r.invalid_count == 0
    assert r.found.tolist() == [w[0] for w in want]
    assert r.values.tolist() == [w[1] for w in want]
    assert r.keys.tolist() == [w[2] for w in want]
    for i, scan in model_scans.items():
        k, v = r.scan(i)
        assert (k.tolist(), v.tolist()) == scan


def scans_of(model_before, ops):
    """Scan answers need the state at their own point in the batch."""
    m = Model()
    m.d = dict(model_before.d)
    m.keys = list(model_before.keys)
    scans = {}
    for i, op in enumerate(ops):
        if op[0] == "scan":
            scans[i] = m.scan(op[1], op[2], op[3])
        run_model(m, [op])
    return scans


@pytest.mark.parametrize("seed", range(8))
def test_mixed_batches_match_the_model(seed):
    rng = np.random.default_rng(100 + seed)
    universe = np.unique(np.concatenate([rng.integers(0, 400, 300, dtype=np.uint64), u64(EDGE_KEYS)]))
    model = Model()
    with tandem.Index(threads=2) as idx:
        for _ in range(25):
            b, ops = random_batch(rng, universe, int(rng.choice([1, 10, 200])))
            scans = scans_of(model, ops)
            want = run_model(model, ops)
            check_result(idx.execute(b), ops, want, scans)
        idx.verify()
        assert idx.scan()[0].tolist() == model.keys


def test_bulk_batch_forms_and_chaining():
    with tandem.Index(threads=2) as idx:
        keys = np.arange(10, dtype=np.uint64)
        b = tandem.Batch().put(keys, keys * np.uint64(2)).get(keys[::2]).insert(u64([3, 30]), u64([0, 1]))
        b.erase(u64([9])).lower_bound(u64([9])).count(0, 100).scan(0, 4, limit=10)
        assert len(b) == 10 + 5 + 2 + 1 + 1 + 1 + 1
        r = idx.execute(b)
        assert r.values[10:15].tolist() == [0, 4, 8, 12, 16]
        assert r.found[15:17].tolist() == [True, False]
        assert r.keys[18] == 30 and r.values[19] == 10
        assert r.scan(20)[0].tolist() == [0, 1, 2, 3, 4]
        assert r.scan_entries()[1].tolist() == [0, 2, 4, 6, 8]
        assert idx.execute(tandem.Batch().get(1)).sequence > r.sequence
        # A batch is copied on submit: reusing it runs it again.
        b2 = tandem.Batch().get(3)
        assert idx.execute(b2).values[0] == 6
        b2.clear()
        assert len(b2) == 0 and repr(b2) == "tandem.Batch(0 ops)"


def test_invalid_ops_come_back_per_op():
    with tandem.Index(threads=2) as idx:
        r = idx.execute(tandem.Batch().put(1, 1).scan(5, 4).count(9, 2).get(1)
                        .scan(0, 9, limit=tandem.max_scan_limit + 1))
        assert r.status.tolist() == [0, 1, 1, 0, 1]
        assert r.invalid_count == 3
        assert "lo" in r.error(1) and r.error(0) == ""
        assert r.values[3] == 1
        with pytest.raises(IndexError):
            r.error(5)
        with pytest.raises(ValueError):
            tandem.Batch().get(-1)
        with pytest.raises(TypeError, match="keys"):
            tandem.Batch().get(np.arange(3, dtype=np.float32))


def test_result_outlives_index_and_views_keep_it_alive():
    idx = tandem.Index(threads=2)
    r = idx.execute(tandem.Batch().put(5, 6).get(5))
    values = r.values
    idx.close()
    del r
    assert values.tolist() == [0, 6]
    assert not values.flags.writeable


def test_many_threads_submitting_futures():
    threads, batches = 8, 40
    errors = []
    with tandem.Index(threads=2) as idx:
        def client(t):
            try:
                base = t << 32
                futures = []
                for i in range(batches):
                    keys = np.arange(base + i * 50, base + (i + 1) * 50, dtype=np.uint64)
                    b = tandem.Batch().put(keys, keys + np.uint64(1)).get(keys)
                    futures.append(idx.submit(b))
                # Each client's batches take effect in the order it sent them.
                seq = [f.result(timeout=60).sequence for f in futures]
                assert seq == sorted(seq) and len(set(seq)) == len(seq)
                for i, f in enumerate(futures):
                    r = f.result()
                    keys = np.arange(base + i * 50, base + (i + 1) * 50, dtype=np.uint64)
                    assert r.values[50:].tolist() == (keys + np.uint64(1)).tolist()
                    assert r.found[:50].sum() == 0
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        ts = [threading.Thread(target=client, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors
        assert len(idx) == threads * batches * 50
        idx.verify()


def test_asyncio_gathers_many_batches():
    async def main(idx):
        async def one(i):
            r = await idx.execute_async(tandem.Batch().put(i, i * 7).get(i))
            return int(r.values[1])
        return await asyncio.gather(*(one(i) for i in range(200)))

    with tandem.Index(threads=2) as idx:
        assert asyncio.run(main(idx)) == [i * 7 for i in range(200)]


def test_a_failing_call_does_not_poison_the_next():
    with tandem.Index(threads=2, max_batch_output_bytes=16 * 10) as idx:
        idx.put(np.arange(100, dtype=np.uint64), np.arange(100, dtype=np.uint64))
        f1 = idx.submit(tandem.Batch().scan(0, 99, limit=50).get(3))
        f2 = idx.submit(tandem.Batch().get(4))
        r1 = f1.result(timeout=60)
        assert r1.status.tolist() == [2, 0] and "output" in r1.error(0)
        assert f2.result(timeout=60).values[0] == 4
        with pytest.raises(tandem.Error):
            idx.scans(u64([0]), u64([99]), limit=50)
        assert idx.get(5) == 5
    with pytest.raises(tandem.Error, match="closed"):
        idx.submit(tandem.Batch().get(1))


def test_futures_of_batches_in_flight_resolve_on_close():
    idx = tandem.Index(threads=2)
    futures = [idx.submit(tandem.Batch().put(i, i)) for i in range(500)]
    idx.close()
    assert all(f.done() for f in futures)
    assert [f.result().found[0] for f in futures] == [False] * 500


def test_futures_are_concurrent_futures():
    with tandem.Index(threads=2) as idx:
        f = idx.submit(tandem.Batch().get(1))
        assert isinstance(f, concurrent.futures.Future)
        assert not f.cancel()  # running from the start
        concurrent.futures.wait([f], timeout=60)
        assert f.result().found[0] == False  # noqa: E712
