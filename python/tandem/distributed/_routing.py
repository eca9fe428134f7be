"""Routing: which shard holds each key, and how columns and ranges are cut
at the shards' bounds (a search of the lower bounds, as ``np.searchsorted``)."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np

from ._common import _ERASE, _LOWER_BOUND, _PUT, _SCAN


def _shard_ids(lows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The shard (position in the map) of each key: the last shard whose lower
    bound is <= the key. uint8/uint16 for few shards (cheap to group)."""
    s = lows.shape[0]
    if s == 1:
        return np.zeros(keys.shape[0], dtype=np.uint8)
    if s <= 8:
        # a compare per bound beats a binary search per key for few bounds
        sid = np.greater_equal(keys, lows[1]).view(np.uint8)
        if s > 2:
            sid = sid.copy()
            for b in lows[2:]:
                sid += np.greater_equal(keys, b).view(np.uint8)
        return sid
    sid = np.searchsorted(lows, keys, side="right") - 1
    return sid.astype(np.uint8 if s <= 256 else np.uint16 if s <= 65536 else np.intp)


def _group(sid: np.ndarray, s: int) -> List[Optional[np.ndarray]]:
    """Positions of each shard's elements, in input order (None: every element
    belongs to that shard, no gather needed)."""
    n = sid.shape[0]
    counts = np.bincount(sid, minlength=s)
    full = np.flatnonzero(counts == n)
    if n and full.size:
        return [None if j == full[0] else np.empty(0, np.intp) for j in range(s)]
    order = np.argsort(sid, kind="stable")  # radix sort for uint8/uint16
    ends = np.cumsum(counts)
    return [order[e - c:e] for c, e in zip(counts.tolist(), ends.tolist())]


def _route_ranges(lo: np.ndarray, hi: np.ndarray, lows: np.ndarray, highs: np.ndarray):
    """Cuts ranges [lo[i], hi[i]] at shard bounds. Returns (rep, shard, plo,
    phi): piece p is the part of range rep[p] in shard shard[p], clamped to
    [plo[p], phi[p]]; pieces come in (range, key) order."""
    s_lo = _shard_ids(lows, lo).astype(np.intp)
    s_hi = _shard_ids(lows, hi).astype(np.intp)
    span = s_hi - s_lo + 1
    n = lo.shape[0]
    if n == 0 or int(span.max()) == 1:
        return np.arange(n), s_lo, lo, hi
    total = int(span.sum())
    rep = np.repeat(np.arange(n), span)
    first = np.repeat(np.cumsum(span) - span, span)
    shard = s_lo[rep] + (np.arange(total) - first)
    plo = np.maximum(lo[rep], lows[shard])
    phi = np.minimum(hi[rep], highs[shard])
    return rep, shard, plo, phi


def _route_pieces(p: dict, lows: np.ndarray, highs: np.ndarray):
    """Cuts the ranged pieces (lower_bound, valid scans and counts) at shard
    bounds; returns (pieces, shard of each)."""
    rep, shard, plo, phi = _route_ranges(p["plo"], p["phi"], lows, highs)
    if rep.shape[0] == p["plo"].shape[0]:
        return p, shard
    q = {name: col[rep] for name, col in p.items()}
    multi = np.zeros(rep.shape[0], dtype=bool)
    multi[1:] = rep[1:] == rep[:-1]
    multi[:-1] |= rep[:-1] == rep[1:]
    ranged = q["ranged"]
    q["plo"], q["phi"] = plo, phi
    q["key"] = np.where(ranged, plo, q["key"])
    q["arg"] = np.where(ranged & (q["typ"] >= _SCAN), phi, q["arg"])
    q["ordered"] = q["ordered"] | multi  # a cut scan is merged in key order
    return q, shard


def _dedupe_follow_ups(typ: np.ndarray, key: np.ndarray, shard_lo: np.uint64):
    """lower_bound pieces that ask a shard for its first entry (key = the
    shard's lower bound) with no write of the sub-batch between them get the
    same answer: sends one of each run. Returns (positions sent, answer index
    of each piece), or (None, None) to send every piece."""
    f = (typ == _LOWER_BOUND) & (key == shard_lo)
    fp = np.flatnonzero(f)
    if fp.size <= 1:
        return None, None
    epoch = np.cumsum((typ >= _PUT) & (typ <= _ERASE))[fp]
    leader = np.ones(fp.size, dtype=bool)
    leader[1:] = epoch[1:] != epoch[:-1]
    if leader.all():
        return None, None
    keep = ~f
    keep[fp[leader]] = True
    sent = np.flatnonzero(keep)
    index = np.cumsum(keep) - 1
    answer_of = index.copy()
    answer_of[fp] = index[fp[leader][np.cumsum(leader) - 1]]
    return sent, answer_of


class _Ref:
    """One shard as a client's map has it: id, range and actor handle."""

    __slots__ = ("id", "lo", "hi", "handle", "rng")

    def __init__(self, shard_id: int, lo: int, hi: int, handle: Any) -> None:
        self.id, self.lo, self.hi, self.handle = shard_id, lo, hi, handle
        self.rng = (lo, hi)


class _Map:
    """A client's copy of one version of the shard map, with the shards'
    bounds as arrays to cut columns by."""

    def __init__(self, version: int, shards: Sequence[tuple]) -> None:
        self.version = version
        self.refs = [_Ref(*s) for s in shards]
        self.lows = np.array([s[1] for s in shards], dtype=np.uint64)
        self.highs = np.array([s[2] for s in shards], dtype=np.uint64)

    def __len__(self) -> int:
        return len(self.refs)

    def home(self, key: int) -> _Ref:
        return self.refs[int(np.searchsorted(self.lows, np.uint64(key), side="right")) - 1]
