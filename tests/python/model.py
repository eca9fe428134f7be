"""The reference the binding is checked against: a dict plus its keys in order."""

import bisect

import numpy as np

U64_MAX = (1 << 64) - 1
EDGE_KEYS = [0, 1, U64_MAX - 1, U64_MAX]


class Model:
    def __init__(self):
        self.d = {}
        self.keys = []  # sorted

    def load(self, keys, values):
        self.d = {}
        for k, v in zip(keys.tolist(), values.tolist()):
            self.d[k] = v
        self.keys = sorted(self.d)

    def get(self, k):
        return self.d.get(k)

    def put(self, k, v):
        old = self.d.get(k)
        if old is None:
            bisect.insort(self.keys, k)
        self.d[k] = v
        return old

    def insert(self, k, v):
        if k in self.d:
            return False
        self.put(k, v)
        return True

    def erase(self, k):
        old = self.d.pop(k, None)
        if old is not None:
            del self.keys[bisect.bisect_left(self.keys, k)]
        return old

    def lower_bound(self, k):
        i = bisect.bisect_left(self.keys, k)
        if i == len(self.keys):
            return None
        return self.keys[i], self.d[self.keys[i]]

    def scan(self, lo, hi, limit=None):
        i = bisect.bisect_left(self.keys, lo)
        j = bisect.bisect_right(self.keys, hi)
        if limit is not None:
            j = min(j, i + limit)
        ks = self.keys[i:j]
        return ks, [self.d[k] for k in ks]

    def count(self, lo, hi):
        if lo > hi:
            return 0
        return bisect.bisect_right(self.keys, hi) - bisect.bisect_left(self.keys, lo)

    def items(self):
        return [(k, self.d[k]) for k in self.keys]


def u64(values):
    return np.array(values, dtype=np.uint64)


def random_keys(rng, n, universe):
    """n keys drawn from `universe` (a uint64 array) plus the edge keys now and then."""
    keys = universe[rng.integers(0, universe.shape[0], n)]
    if n:
        edges = rng.random(n) < 0.05
        keys[edges] = u64(EDGE_KEYS)[rng.integers(0, len(EDGE_KEYS), int(edges.sum()))]
    return keys


def check_contents(idx, model):
    """Every entry of `idx` (a tandem.Index or a ShardedIndex) in key order is the model's."""
    keys, values = idx.scan()
    assert keys.tolist() == model.keys
    assert values.tolist() == [model.d[k] for k in model.keys]
    assert len(idx) == len(model.keys)


def apply_random_call(idx, model, rng, universe, sizes=(0, 1, 9, 100, 700)):
    """One random call of `idx` (columns of one of `sizes` keys, or one key), checked against the model."""
    n = int(rng.choice(sizes))
    keys = random_keys(rng, n, universe)
    values = rng.integers(0, 1 << 63, n, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, n, dtype=np.uint64)
    what = rng.choice(["get", "contains", "put", "insert", "erase", "lower_bound", "count", "scans",
                       "scan", "one"])
    if what == "get":
        got, found = idx.get(keys)
        want = [model.get(k) for k in keys.tolist()]
        assert found.tolist() == [w is not None for w in want]
        assert got.tolist() == [0 if w is None else w for w in want]
    elif what == "contains":
        assert idx.contains(keys).tolist() == [model.get(k) is not None for k in keys.tolist()]
    elif what == "put":
        assert idx.put(keys, values) is None
        for k, v in zip(keys.tolist(), values.tolist()):
            model.put(k, v)
    elif what == "insert":
        got = idx.insert(keys, values)
        assert got.dtype == np.bool_
        assert got.tolist() == [model.insert(k, v) for k, v in zip(keys.tolist(), values.tolist())]
    elif what == "erase":
        got = idx.erase(keys)
        assert got.tolist() == [model.erase(k) is not None for k in keys.tolist()]
    elif what == "lower_bound":
        found, lk, lv = idx.lower_bound(keys)
        for i, k in enumerate(keys.tolist()):
            want = model.lower_bound(k)
            assert bool(found[i]) == (want is not None)
            assert (int(lk[i]), int(lv[i])) == (want if want else (0, 0))
    elif what == "count":
        his = random_keys(rng, n, universe)
        los, his = np.minimum(keys, his), np.maximum(keys, his)
        got = idx.count(los, his)
        assert got.tolist() == [model.count(lo, hi) for lo, hi in zip(los.tolist(), his.tolist())]
    elif what == "scans":
        m = n // 8
        a, b = random_keys(rng, m, universe), random_keys(rng, m, universe)
        los, his = np.minimum(a, b), np.maximum(a, b)
        limit = int(rng.choice([0, 1, 5, 100]))
        offsets, ks, vs = idx.scans(los, his, limit)
        assert offsets.shape[0] == m + 1 and offsets[0] == 0
        for i, (lo, hi) in enumerate(zip(los.tolist(), his.tolist())):
            wk, wv = model.scan(lo, hi, limit)
            assert ks[offsets[i]:offsets[i + 1]].tolist() == wk
            assert vs[offsets[i]:offsets[i + 1]].tolist() == wv
    elif what == "scan":
        a, b = sorted(random_keys(rng, 2, universe).tolist())
        limit = None if rng.random() < 0.5 else int(rng.integers(0, 300))
        ks, vs = idx.scan(a, b, limit=limit)
        wk, wv = model.scan(a, b, limit)
        assert (ks.tolist(), vs.tolist()) == (wk, wv)
    else:
        k = int(random_keys(rng, 1, universe)[0])
        v = int(rng.integers(0, U64_MAX, dtype=np.uint64, endpoint=True))
        form = rng.choice(["get", "put", "insert", "erase", "lower_bound", "count", "contains"])
        if form == "get":
            assert idx.get(k) == model.get(k)
        elif form == "contains":
            assert (k in idx) == (model.get(k) is not None)
        elif form == "put":
            assert idx.put(k, v) == model.put(k, v)
        elif form == "insert":
            assert idx.insert(k, v) == model.insert(k, v)
        elif form == "erase":
            assert idx.erase(k) == (model.erase(k) is not None)
        elif form == "lower_bound":
            assert idx.lower_bound(k) == model.lower_bound(k)
        else:
            assert idx.count(0, k) == model.count(0, k)
