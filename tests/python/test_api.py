"""What a numpy user meets at tandem.Index's edges: one message for a bad key
or value wherever it comes from, config values out of range, ordered
iteration, get with a default, broadcast values, Result's repr and r[i],
signed arrays. ShardedIndex inherits these from the same base (tandem._api)."""

import array

import numpy as np
import pytest

import tandem
from model import EDGE_KEYS, U64_MAX, Model, check_contents, u64


@pytest.fixture
def idx():
    with tandem.Index(threads=2) as index:
        yield index


def filled(index, n=50):
    """`index` and a model with keys 0, 3, 6, ... (value 10 k) and the edge keys."""
    model = Model()
    keys = np.concatenate([np.arange(0, 3 * n, 3, dtype=np.uint64), u64(EDGE_KEYS)])
    values = keys * np.uint64(10)
    index.load(keys, values)
    model.load(keys, values)
    return model


# ---- one message for a bad key or value, from one place -----------------------------

@pytest.mark.parametrize("call", [
    lambda i: i.get(2 ** 64), lambda i: i.get(-1), lambda i: i.get(np.int64(-1)),
    lambda i: i.contains(-1), lambda i: i.erase(-5), lambda i: i.pop(-1), lambda i: i.lower_bound(-1),
    lambda i: i[-1], lambda i: i.__delitem__(2 ** 64), lambda i: tandem.Batch().get(-1),
])
def test_a_key_outside_the_range_is_one_value_error(idx, call):
    with pytest.raises(ValueError, match=r"^key: -?\d+ is outside \[0, 2\^64\)$"):
        call(idx)


@pytest.mark.parametrize("call", [
    lambda i: i.put(5, -1), lambda i: i.insert(5, 2 ** 64), lambda i: i.__setitem__(5, -1),
    lambda i: tandem.Batch().put(5, -1), lambda i: i.put(u64([1, 2]), -3),
])
def test_a_value_outside_the_range_is_one_value_error(idx, call):
    with pytest.raises(ValueError, match=r"^value: -?\d+ is outside \[0, 2\^64\)$"):
        call(idx)


@pytest.mark.parametrize("bad", [True, False, np.True_, 1.0, 2.5, np.float64(3), None, "x", b"k", 1j])
def test_a_key_that_is_no_int_is_one_type_error(idx, bad):
    idx.put(1, 1)
    for call in (lambda: idx[bad], lambda: idx.put(bad, 1), lambda: idx.erase(bad),
                 lambda: tandem.Batch().get(bad)):
        with pytest.raises(TypeError, match=r"^key(s)?: expected "):
            call()
    with pytest.raises(TypeError, match=r"^key: expected an int in \[0, 2\^64\), got "):
        idx.get(bad)
    with pytest.raises(TypeError, match=r"^value: expected "):
        idx.put(1, bad)
    assert bad not in idx  # as a dict answers
    assert idx.get(1) == 1  # True was not taken as key 1


def test_numpy_integers_are_keys(idx):
    idx.put(np.uint64(U64_MAX), np.int32(7))
    assert idx.get(np.int64(5)) is None and idx[np.uint64(U64_MAX)] == 7
    assert np.uint8(3) not in idx and idx.pop(np.uint64(U64_MAX)) == 7


# ---- signed buffers and numpy integer arrays: one rule ---------------------------------

@pytest.mark.parametrize("make", [
    lambda xs: np.array(xs, dtype=np.int64), lambda xs: array.array("q", xs), lambda xs: list(xs),
    lambda xs: memoryview(array.array("q", xs)), lambda xs: np.array(xs, dtype=np.int32),
    lambda xs: np.array(xs, dtype=np.uint32), lambda xs: np.array(xs, dtype=">u8"),
    lambda xs: np.repeat(np.array(xs, dtype=np.int64), 2)[::2],
])
def test_every_integer_column_is_accepted_when_it_holds_no_negative_number(idx, make):
    model = filled(idx)
    keys = [0, 3, 4, 3, 147]
    got, found = idx.get(make(keys))
    assert found.tolist() == [model.get(k) is not None for k in keys]
    assert got.tolist() == [model.get(k) or 0 for k in keys]
    idx.put(make([1, 2]), make([5, 6]))
    assert idx.get(1) == 5 and idx.get(2) == 6


@pytest.mark.parametrize("make", [
    lambda xs: np.array(xs, dtype=np.int64), lambda xs: array.array("q", xs), lambda xs: list(xs),
    lambda xs: memoryview(array.array("q", xs)), lambda xs: np.array(xs, dtype=np.int8),
])
def test_a_negative_number_in_a_column_is_refused_naming_the_argument(idx, make):
    with pytest.raises(ValueError, match=r"^keys: element 2 is -4, outside \[0, 2\^64\)$"):
        idx.get(make([1, 2, -4]))
    with pytest.raises(ValueError, match=r"^values: element 1 is -1, outside"):
        idx.put(u64([1, 2]), make([5, -1]))
    with pytest.raises(ValueError, match=r"^his: element 0"):
        idx.count(u64([1]), make([-9]))
    with pytest.raises(ValueError) as e:
        idx.get(make([-1]))
    assert "values" not in str(e.value)  # a get has no values
    assert len(idx) == 0


def test_bools_among_ints_are_refused_and_objects_holding_ints_are_taken(idx):
    for bad in ([1, True], (3, np.True_), [False]):
        with pytest.raises(TypeError, match=r"^keys: expected an array of ints in \[0, 2\^64\).*got (a bool|dtype bool)"):
            idx.get(bad)
    idx.put(np.array([1, U64_MAX], dtype=object), [5, 6])
    assert idx.get(np.array([1, U64_MAX], dtype=object))[0].tolist() == [5, 6]
    with pytest.raises(ValueError, match=r"^keys: element 0 is -1"):
        idx.get(np.array([-1], dtype=object))


def test_python_ints_past_int64_and_past_uint64(idx):
    idx.put([U64_MAX, 1 << 63], [1, 2])
    assert idx.get([U64_MAX, 1 << 63, 0])[0].tolist() == [1, 2, 0]
    with pytest.raises(ValueError, match=r"^keys: element 1 is 18446744073709551616, outside"):
        idx.get([1, 1 << 64])
    with pytest.raises(ValueError, match=r"^keys: element 0 is -1, outside"):
        idx.get([-1, 1 << 63])


# ---- config values out of range -----------------------------------------------------

@pytest.mark.parametrize("field, value", [("threads", -1), ("threads", 5000), ("fanout", 7),
                                          ("leaf_fill", 5.0), ("gpu_device", -1), ("max_gpu_bytes", -1),
                                          ("gpu_devices", [0, 0]), ("gpu_devices", [2000])])
def test_a_config_value_out_of_range_is_a_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        tandem.Index(**{field: value})


def test_gpu_devices_takes_a_list_of_ordinals():
    with pytest.raises(TypeError, match="gpu_devices"):
        tandem.Index(gpu_devices="0,1")
    with tandem.Index(gpu_devices=[0, 1], device="cpu", threads=2) as idx:  # a CPU index opens no GPU
        idx.put(0, 1)
        assert idx.get(0) == 1 and idx.stats()["device"] == "cpu (config.device = cpu)"


# ---- ordered iteration, fetched in pieces --------------------------------------------

def test_iteration_gives_keys_values_and_items_in_order(idx):
    model = filled(idx)
    assert list(idx) == model.keys
    assert list(idx.keys()) == model.keys
    assert list(idx.values()) == [model.d[k] for k in model.keys]
    assert list(idx.items()) == model.items()
    assert dict(idx) == model.d
    assert list(idx.items(4, 30)) == [(k, v) for k, v in model.items() if 4 <= k <= 30]
    assert list(idx.keys(U64_MAX, U64_MAX)) == [U64_MAX]
    with pytest.raises(ValueError, match="lo"):
        list(idx.keys(5, 4))


def test_iteration_crosses_pieces(idx, monkeypatch):
    model = filled(idx, n=1000)
    monkeypatch.setattr(tandem._api, "FIRST_PIECE", 3)
    monkeypatch.setattr(tandem._api, "PIECE", 7)
    assert list(idx) == model.keys
    assert list(idx.items(1, 100)) == [(k, v) for k, v in model.items() if 1 <= k <= 100]
    keys, values = idx.scan()
    assert keys.tolist() == model.keys and values.tolist() == [model.d[k] for k in model.keys]


def test_iteration_starts_with_a_small_piece_and_doubles(idx, monkeypatch):
    filled(idx, n=20000)
    limits = []
    scan = idx._scan

    def spy(lo, hi, limit, ordered):
        limits.append(limit)
        return scan(lo, hi, limit, ordered)

    monkeypatch.setattr(idx, "_scan", spy)
    assert next(iter(idx)) == 0
    assert limits == [tandem._api.FIRST_PIECE]
    limits.clear()
    assert len(list(idx.keys())) == len(idx)
    assert limits[:3] == [4096, 8192, 16384]


def test_an_empty_index_iterates_nothing(idx):
    assert list(idx) == [] and list(idx.items()) == [] and dict(idx) == {}


# ---- get with a default, scalar values broadcast ------------------------------------------

def test_get_with_a_default(idx):
    model = filled(idx)
    for k in [0, 1, 3, U64_MAX, 7]:
        want = model.get(k)
        assert idx.get(k, "none") == ("none" if want is None else want)
        assert idx.get(k) == want
    assert idx.get(2, default=0) == 0
    with pytest.raises(TypeError, match="default"):
        idx.get(u64([1]), 5)


def test_one_value_is_every_keys_value(idx):
    model = Model()
    keys = u64([5, 1, U64_MAX, 5])
    idx.put(keys, 9)
    for k in keys.tolist():
        model.put(k, 9)
    assert idx.insert(u64([1, 2, 3]), np.uint64(4)).tolist() == [False, True, True]
    for k in (1, 2, 3):
        model.insert(k, 4)
    check_contents(idx, model)
    idx.load(u64([7, 8]), 0)
    assert list(idx.items()) == [(7, 0), (8, 0)]
    b = tandem.Batch().put(u64([1, 2]), 3).insert([4], 5).get([1, 4])
    assert idx.execute(b).values[-2:].tolist() == [3, 5]
    with pytest.raises(ValueError, match="keys and values differ in length"):
        idx.put(u64([1, 2]), u64([1]))


# ---- Result: repr and r[i] --------------------------------------------------------------

def test_result_repr_and_item(idx):
    r = idx.execute(tandem.Batch().put(1, 10).get(1).get(2).scan(5, 4).count(0, 9))
    assert repr(r).startswith("tandem.Result(5 ops, 1 invalid, sequence ")
    assert r[0] == (False, 0, 1, 0)
    assert r[1] == tandem.OpResult(found=True, value=10, key=1, status=0)
    assert r[2].found is False and r[2].value == 0
    assert r[3].status == 1 and "lo" in r.error(3) and r[-3] == r[2]
    assert r[-1].value == 1
    with pytest.raises(IndexError):
        r[5]
    with pytest.raises(IndexError):
        r[-6]
    assert [op.key for op in r] == [1, 1, 2, 5, 0]


# ---- op codes from the extension; a batch rebuilt from its columns -------------------------

def test_op_codes_and_batch_from_ops(idx):
    assert [int(t) for t in tandem.OpType] == list(range(7))
    assert tandem.OpType.scan.name == "scan"
    b = (tandem.Batch().put(u64([1, 2, 3]), u64([4, 5, 6])).get(2).scan(0, 9, limit=2, ordered=False)
         .erase([3]).count(0, 100).insert(7, 8).lower_bound(4).scan(0, 5))
    ops = b.ops()
    assert ops[0].tolist() == [1, 1, 1, 0, 5, 3, 6, 2, 4, 5]
    assert (ops[0] == tandem.OpType.put).sum() == 3
    copy = tandem.Batch.from_ops(*ops)
    assert isinstance(copy, tandem.Batch) and len(copy) == len(b)
    for a, c in zip(ops, copy.ops()):
        assert a.tolist() == c.tolist()
    assert idx.execute(copy).values.tolist() == [0, 0, 0, 5, 2, 6, 2, 0, 8, 2]
    with pytest.raises(ValueError, match="unknown op type 9"):
        tandem.Batch.from_ops(np.array([9], np.uint8), u64([0]), u64([0]), u64([0]), np.array([True]))
    with pytest.raises(ValueError, match="args"):
        tandem.Batch.from_ops(np.array([0], np.uint8), u64([0]), u64([]), u64([0]), np.array([True]))
