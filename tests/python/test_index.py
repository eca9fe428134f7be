"""tandem.Index against a Python model: every method, random mixes, edge keys,
input forms and the errors of wrong ones."""

import gc

import numpy as np
import pytest

import tandem
from model import EDGE_KEYS, U64_MAX, Model, apply_random_call, check_contents, random_keys, u64


def make_index(**kw):
    kw.setdefault("threads", 2)
    return tandem.Index(**kw)


@pytest.mark.parametrize("seed", range(12))
def test_random_mixes_match_the_model(seed):
    rng = np.random.default_rng(seed)
    # A narrow universe so that ops hit each other, a wide one so that leaves split.
    universe = np.unique(np.concatenate([
        rng.integers(0, 3000, 2000, dtype=np.uint64),
        rng.integers(0, U64_MAX, 3000, dtype=np.uint64, endpoint=True),
        u64(EDGE_KEYS),
    ]))
    with make_index(device="cpu" if seed % 2 else "auto") as idx:
        model = Model()
        if seed % 3 == 0:
            keys = random_keys(rng, 4000, universe)
            values = rng.integers(0, U64_MAX, 4000, dtype=np.uint64, endpoint=True)
            idx.load(keys, values)
            model.load(keys, values)
        for _ in range(40):
            apply_random_call(idx, model, rng, universe, sizes=(0, 1, 7, 64, 300, 5000))
        check_contents(idx, model)
        idx.verify()


def test_edge_keys_everywhere():
    with make_index() as idx:
        model = Model()
        keys = u64(EDGE_KEYS)
        idx.put(keys, keys)
        for k in EDGE_KEYS:
            model.put(k, k)
        check_contents(idx, model)
        assert idx.get(U64_MAX) == U64_MAX and idx.get(0) == 0
        assert idx.lower_bound(U64_MAX) == (U64_MAX, U64_MAX)
        assert idx.lower_bound(2) == (U64_MAX - 1, U64_MAX - 1)
        assert idx.count(0, U64_MAX) == 4
        assert idx.scan(U64_MAX, U64_MAX)[0].tolist() == [U64_MAX]
        assert idx.erase(u64([0, U64_MAX, 5])).tolist() == [True, True, False]
        assert idx.lower_bound(U64_MAX) is None
        idx.verify()


def test_empty_arrays_and_empty_index():
    with make_index() as idx:
        e = u64([])
        values, found = idx.get(e)
        assert values.shape == (0,) and found.shape == (0,) and found.dtype == np.bool_
        assert idx.put(e, e) is None
        assert idx.insert(e, e).shape == (0,)
        assert idx.erase(e).shape == (0,)
        f, k, v = idx.lower_bound(e)
        assert f.shape == k.shape == v.shape == (0,)
        assert idx.count(e, e).shape == (0,)
        offsets, k, v = idx.scans(e, e)
        assert offsets.tolist() == [0] and k.shape == (0,)
        assert idx.scan()[0].shape == (0,)
        assert idx.get(5) is None and idx.lower_bound(0) is None and len(idx) == 0
        idx.load(e, e)
        assert len(idx) == 0


def test_point_api_matches_the_columns():
    rng = np.random.default_rng(7)
    with make_index() as idx:
        model = Model()
        keys = list(rng.integers(0, 500, 3000).tolist()) + EDGE_KEYS * 10
        rng.shuffle(keys)
        for i, k in enumerate(keys):
            op = i % 6
            if op == 0:
                assert idx.put(k, i) == model.put(k, i)
            elif op == 1:
                assert idx.insert(k, i) == model.insert(k, i)
            elif op == 2:
                assert idx.erase(k) == (model.erase(k) is not None)
            elif op == 3:
                assert idx.get(k) == model.get(k)
                assert idx.contains(k) == (model.get(k) is not None)
                assert (k in idx) == (model.get(k) is not None)
            elif op == 4:
                assert idx.lower_bound(k) == model.lower_bound(k)
            else:
                assert idx.pop(k, "none") == (lambda v: "none" if v is None else v)(model.erase(k))
        check_contents(idx, model)
        idx[17] = 4
        assert idx[17] == 4
        del idx[17]
        with pytest.raises(KeyError):
            idx[17]
        with pytest.raises(KeyError):
            del idx[17]
        assert np.uint64(3) in idx or np.uint64(3) not in idx  # numpy integers are keys too
        assert -1 not in idx and "x" not in idx
        idx.verify()


def test_scan_forms():
    with make_index() as idx:
        keys = np.arange(0, 20000, 2, dtype=np.uint64)
        idx.load(keys, keys + np.uint64(1))
        k, v = idx.scan(100, 120)
        assert k.tolist() == list(range(100, 121, 2)) and v.tolist() == [x + 1 for x in range(100, 121, 2)]
        assert idx.scan(100, 120, limit=3)[0].tolist() == [100, 102, 104]
        k, _ = idx.scan(101, 120, ordered=False, limit=100)
        assert sorted(k.tolist()) == list(range(102, 121, 2))
        assert idx.scan()[0].shape == (10000,)
        assert idx.count(u64([0, 1, 5]), u64([U64_MAX, 1, 9])).tolist() == [10000, 0, 2]
        with pytest.raises(ValueError, match="lo"):
            idx.scan(5, 4)
        with pytest.raises(ValueError):
            idx.count(u64([5]), u64([4]))
        with pytest.raises(ValueError):
            idx.scans(u64([0]), u64([10]), limit=tandem.max_scan_limit + 1)
        # The answers are views that keep the index's result alive.
        k, v = idx.scan(0, 10)
        del idx
        gc.collect()
        assert k.tolist() == [0, 2, 4, 6, 8, 10]


def test_scan_output_cap_raises_and_the_next_call_works():
    with make_index(max_batch_output_bytes=16 * 100) as idx:
        keys = np.arange(1000, dtype=np.uint64)
        idx.load(keys, keys)
        with pytest.raises(tandem.Error):
            idx.scans(u64([0, 0]), u64([999, 999]), limit=1000)
        assert idx.scan(0, 50, limit=60)[0].shape == (51,)


def test_input_forms():
    with make_index() as idx:
        base = np.arange(100, dtype=np.uint64)
        idx.load(base, base * np.uint64(3))
        ro = base[::-1].copy()
        ro.setflags(write=False)
        assert idx.get(ro)[0].tolist() == [x * 3 for x in range(99, -1, -1)]
        strided = base[::3]
        assert idx.get(strided)[0].tolist() == [x * 3 for x in range(0, 100, 3)]
        assert idx.get(memoryview(base[:4]))[0].tolist() == [0, 3, 6, 9]
        assert idx.get([1, 2])[0].tolist() == [3, 6]
        assert idx.get(range(3))[0].tolist() == [0, 3, 6]

        class Exported:  # a foreign array offering only DLPack
            def __init__(self, a):
                self.a = a

            def __dlpack__(self, **kw):
                return self.a.__dlpack__(**kw)

            def __dlpack_device__(self):
                return self.a.__dlpack_device__()

        assert idx.get(Exported(base[5:7]))[0].tolist() == [15, 18]
        misaligned = np.frombuffer(b"\0" + base[:3].tobytes(), dtype=np.uint64, offset=1)
        assert idx.get(misaligned)[0].tolist() == [0, 3, 6]
        # The input arrays are read, never written.
        assert base.tolist() == list(range(100))


@pytest.mark.parametrize("bad", [
    np.arange(4, dtype=np.float64), np.array([True, False, True, True]), np.array(["a", "b"]),
])
def test_wrong_dtypes_raise_type_error_naming_the_argument(bad):
    with make_index() as idx:
        with pytest.raises(TypeError, match="keys"):
            idx.get(bad)
        with pytest.raises(TypeError, match="values"):
            idx.put(u64([1, 2, 3, 4])[: len(bad)], bad)
        with pytest.raises(TypeError, match="his"):
            idx.count(u64([1] * len(bad)), bad)


def test_wrong_shapes_and_lengths_raise_value_error():
    with make_index() as idx:
        with pytest.raises(ValueError, match="keys.*1-D"):
            idx.get(np.zeros((2, 2), dtype=np.uint64))
        with pytest.raises(ValueError, match="keys.*1-D"):
            idx.get(np.zeros((), np.uint64))
        with pytest.raises(ValueError, match="keys and values"):
            idx.put(u64([1, 2]), u64([1]))
        with pytest.raises(ValueError, match="keys and values"):
            idx.load(u64([1, 2]), u64([1, 2, 3]))
        with pytest.raises(ValueError, match="los and his"):
            idx.scans(u64([1]), u64([]))
        with pytest.raises(ValueError):
            idx.get([-1])
        with pytest.raises(ValueError, match="key: -1 is outside"):
            idx.get(-1)
        with pytest.raises(ValueError):
            idx.scan(0, 1 << 64)


def test_config_keywords():
    with pytest.raises(TypeError, match="no_such_field"):
        tandem.Index(no_such_field=1)
    with pytest.raises(ValueError, match="fanout"):
        tandem.Index(fanout=7)
    with pytest.raises(ValueError, match="device"):
        tandem.Index(device="tpu")
    with pytest.raises(TypeError, match="leaf_fill"):
        tandem.Index(leaf_fill="full")
    with tandem.Index(threads=2, device="cpu", fanout=16, leaf_fill=0.5, gpu_share="auto",
                      log_sync_policy="group", gpu_order="none") as idx:
        s = idx.stats()
        assert s["threads"] == 2 and s["device"].startswith("cpu")
        idx.put(u64([1, 2]), u64([3, 4]))
        s = idx.stats()
        assert s["keys"] == 2 and s["ops_by_type"]["put"] == 2 and "route" in s["stage_seconds"]
        idx.set_gpu_share(0.5)
        idx.set_gpu_share("auto")
        with pytest.raises(ValueError):
            idx.set_gpu_share(1.5)
        with pytest.raises(ValueError):
            idx.set_gpu_share("half")
    with pytest.raises(tandem.Error, match="closed"):
        idx.get(u64([1]))
    assert repr(idx) == "tandem.Index(closed)"


def test_durable_index_reopens_with_its_writes(tmp_path):
    rng = np.random.default_rng(3)
    model = Model()
    with make_index(storage_dir=tmp_path) as idx:
        keys = rng.integers(0, U64_MAX, 5000, dtype=np.uint64, endpoint=True)
        idx.load(keys, keys)
        model.load(keys, keys)
        more = u64(EDGE_KEYS + [77])
        idx.put(more, more + np.uint64(1))
        for k in more.tolist():
            model.put(k, (k + 1) % (1 << 64))
        idx.erase(keys[:100])
        for k in keys[:100].tolist():
            model.erase(k)
        idx.checkpoint()
        idx.put(5, 6)
        model.put(5, 6)
    with make_index(storage_dir=tmp_path) as idx:
        check_contents(idx, model)
        assert idx.stats()["replayed_batches"] >= 1
        snapshot = tmp_path / "copy.snapshot"
        idx.save(snapshot)
    with make_index() as idx:
        idx.open(snapshot)
        check_contents(idx, model)


def test_compact_after_erasing_most_keys():
    with make_index() as idx:
        keys = np.arange(200000, dtype=np.uint64)
        idx.load(keys, keys)
        idx.erase(keys[1000:])
        idx.compact()
        idx.verify()
        assert len(idx) == 1000 and idx.scan()[0].tolist() == list(range(1000))


def test_help_reads_well():
    for obj in (tandem.Index, tandem.Index.get, tandem.Index.scans, tandem.Batch, tandem.Batch.scan,
                tandem.Result, tandem.Index.submit):
        assert obj.__doc__ and len(obj.__doc__) > 30, obj
    assert tandem.__version__
    import inspect
    assert "keys" in str(inspect.signature(tandem.Index.get))
