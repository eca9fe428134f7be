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
