"""IndexAPI's primitives over the shards: each cuts its columns or ranges by
the shard map, calls the shards through the retry loop, merges the answers,
and runs in the client's call order."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .. import Batch, Error, OpType, max_scan_limit
from .._convert import answers_u64
from .._types import BoolArray, I64Array, U64Array
from ._calls import Call, _in_turn, _ShardCalls
from ._common import _COUNT, _EMPTY, _ERASE, _LOWER_BOUND, _PUT, _SCAN, U64_MAX
from ._merge import ShardedResult, _merge_execute, _take_scans
from ._routing import _dedupe_follow_ups, _group, _Map, _route_pieces, _route_ranges, _shard_ids


def _by_shard(m: _Map, shard: np.ndarray) -> List[Optional[np.ndarray]]:
    """The positions of the pieces of each shard of the map (see _group)."""
    return _group(shard.astype(np.uint16 if len(m) < 65536 else np.intp), len(m))


class _ShardOps(_ShardCalls):
    """What ShardedIndex does across shards: the primitives of
    tandem.IndexAPI (arguments arrive checked)."""

    _num_shards: int

    # ---- one key ---------------------------------------------------------------------

    @_in_turn
    def _get_one(self, key: int) -> Optional[int]:
        return self._one("get", key)

    @_in_turn
    def _put_one(self, key: int, value: int) -> Optional[int]:
        return self._one("put", key, value)

    @_in_turn
    def _insert_one(self, key: int, value: int) -> bool:
        return self._one("insert", key, value)

    @_in_turn
    def _erase_one(self, key: int) -> Optional[int]:
        return self._one("erase", key)

    @_in_turn
    def _lower_bound_one(self, key: int) -> Optional[Tuple[int, int]]:
        found, keys, values = np.empty(1, np.bool_), np.empty(1, np.uint64), np.empty(1, np.uint64)
        self._lower_bound(np.array([key], dtype=np.uint64), found, keys, values)
        return (int(keys[0]), int(values[0])) if found[0] else None

    # ---- columns ---------------------------------------------------------------------

    @_in_turn
    def _column_op(self, op: OpType, keys: U64Array, values: Optional[U64Array],
                   values_out: Optional[U64Array], found_out: Optional[BoolArray],
                   keys_out: Optional[U64Array]) -> None:
        if op == _LOWER_BOUND:
            assert found_out is not None and keys_out is not None and values_out is not None
            self._lower_bound(keys, found_out, keys_out, values_out)
        else:
            self._points(op, keys, values, values_out, found_out)

    @_in_turn
    def _load(self, k: U64Array, v: U64Array) -> None:
        n = k.shape[0]
        want = self._num_shards
        if self._max_keys is not None:
            want = max(want, -(-2 * n // self._max_keys))
        if n == 0:  # nothing to sample: the key space cut evenly
            lows = [(j << 64) // want for j in range(want)]
        else:
            rng = np.random.default_rng(0x7A9D)
            m = min(n, max(1 << 16, 64 * want))
            sample = np.sort(k if m == n else k[rng.integers(0, n, m)])
            cuts = sample[(np.arange(1, want) * m) // want]
            lows = [0] + [int(c) for c in np.unique(cuts) if int(c) > 0]
        self._set_map(self._directory_call("set_ranges", lows))

        def plan(m: _Map, _: Any) -> List[Call]:
            # refused: another client changed the map; load again on the new one
            return [(ref, "load", (ref.rng, k, v) if g is None else (ref.rng, k[g], v[g]))
                    for ref, g in zip(m.refs, _group(_shard_ids(m.lows, k), len(m)))]

        _, calls, answers = self._call_shards(plan)
        self._split_if_needed({c[0].id: a for c, a in zip(calls, answers)})

    def _lower_bound(self, k: U64Array, found: BoolArray, out_keys: U64Array, values: U64Array) -> None:
        """lower_bound of each key into the outputs: looked for in the key's
        shard, then (nothing left there) in the next shards that hold any."""
        if k.shape[0] == 0:
            return
        sid: np.ndarray = _EMPTY
        groups: List[Optional[np.ndarray]] = []

        def plan(m: _Map, _: Any) -> List[Call]:
            nonlocal sid, groups
            sid = _shard_ids(m.lows, k)
            groups = _group(sid, len(m))
            return [(ref, "lower_bound", (ref.rng, k if g is None else k[g]))
                    for ref, g in zip(m.refs, groups)]

        m, _, answers = self._call_shards(plan)
        for g, a in zip(groups, answers):
            if g is None or g.shape[0]:
                at = Ellipsis if g is None else g
                found[at], out_keys[at], values[at] = a[0], a[1], a[2]
        # nothing left in its shard: the first entry of the next shard that has one
        nxt: List[Optional[Tuple[int, int]]] = [None] * len(m)
        cur = None
        for j in range(len(m) - 1, -1, -1):
            nxt[j] = cur
            if answers[j][3] is not None:
                cur = answers[j][3]
        missing = np.flatnonzero(~found)
        if missing.size:
            homes = sid[missing]
            for j in np.unique(homes).tolist():
                first = nxt[j]
                if first is None:
                    continue
                pos = missing[homes == j]
                found[pos] = True
                out_keys[pos] = first[0]
                values[pos] = first[1]

    # ---- ranges ----------------------------------------------------------------------
    # A range the index refuses (lo > hi, a scan limit above max_scan_limit)
    # is not cut at shard bounds: one shard gets the call as it is and
    # raises the index's own error.

    def _refused_by_the_index(self, method: str, *args: Any) -> None:
        self._call_shards(lambda m, _: [(m.refs[0], method, (m.refs[0].rng,) + args)])
        raise Error(f"{method}: a shard took a call tandem.Index refuses")

    @_in_turn
    def _scan(self, lo: int, hi: int, limit: Optional[int], ordered: bool) -> Tuple[U64Array, U64Array]:
        if lo > hi or (limit is not None and limit > max_scan_limit):
            self._refused_by_the_index("scan", lo, hi, limit, ordered)

        def plan(m: _Map, _: Any) -> List[Call]:
            refs = [r for r in m.refs if r.hi >= lo and r.lo <= hi]
            cut = ordered or len(refs) > 1
            return [(r, "scan", (r.rng, max(lo, r.lo), min(hi, r.hi), limit, cut)) for r in refs]

        answers = self._call_shards(plan)[2]
        if len(answers) == 1:
            keys, values = (np.array(a) for a in answers[0])  # writable copies of the shard's answer
        else:
            keys = np.concatenate([a[0] for a in answers])
            values = np.concatenate([a[1] for a in answers])
        if limit is not None and keys.shape[0] > limit:
            keys, values = keys[:limit].copy(), values[:limit].copy()
        return keys, values

    def _ranges(self, lo: U64Array, hi: U64Array, method: str,
                extra: Callable[[bool], tuple] = lambda cut: ()):
        """Sends each range's pieces (the range cut at shard bounds) to their
        shards as ``method(rng, los, his, *extra(cut))``, `cut` telling
        whether any range was cut; returns (the range of each piece, the
        positions of each call's pieces, answers)."""
        rep: np.ndarray = _EMPTY

        def plan(m: _Map, _: Any) -> List[Call]:
            nonlocal rep
            rep, shard, plo, phi = _route_ranges(lo, hi, m.lows, m.highs)
            more = extra(rep.shape[0] != lo.shape[0])
            calls = []
            for ref, g in zip(m.refs, _by_shard(m, shard)):
                if g is not None and g.shape[0] == 0:
                    continue
                calls.append((ref, method, (ref.rng, plo if g is None else plo[g],
                                            phi if g is None else phi[g]) + more, g))
            return calls

        _, calls, answers = self._call_shards(plan)
        return rep, [c[3] for c in calls], answers

    @_in_turn
    def _scans(self, lo: U64Array, hi: U64Array, limit: int,
               ordered: bool) -> Tuple[I64Array, U64Array, U64Array]:
        if limit > max_scan_limit or bool((lo > hi).any()):
            self._refused_by_the_index("scans", lo, hi, limit, ordered)
        # the pieces of a cut range are cut at the limit in key order
        rep, where, answers = self._ranges(lo, hi, "scans", lambda cut: (limit, ordered or cut))
        cnt = np.zeros(rep.shape[0], dtype=np.int64)
        src = np.zeros(rep.shape[0], dtype=np.int64)
        base = 0
        for g, a in zip(where, answers):
            off = a[0]
            at = Ellipsis if g is None else g
            cnt[at] = np.diff(off)
            src[at] = off[:-1] + base
            base += a[1].shape[0]
        offsets, gather, _ = _take_scans(lo.shape[0], rep, cnt, src,
                                         np.full(rep.shape[0], limit, dtype=np.int64))
        if not answers:
            return offsets, _EMPTY.copy(), _EMPTY.copy()
        keys, values = answers_u64(gather.shape[0]), answers_u64(gather.shape[0])
        np.take(np.concatenate([a[1] for a in answers]), gather, out=keys)
        np.take(np.concatenate([a[2] for a in answers]), gather, out=values)
        return offsets, keys, values

    @_in_turn
    def _counts(self, lo: U64Array, hi: U64Array) -> U64Array:
        if bool((lo > hi).any()):
            self._refused_by_the_index("counts", lo, hi)
        n = lo.shape[0]
        rep, where, answers = self._ranges(lo, hi, "counts")
        piece = answers_u64(rep.shape[0])
        for g, a in zip(where, answers):
            piece[Ellipsis if g is None else g] = a
        if rep.shape[0] == n:
            return piece
        out = np.zeros(n, dtype=np.uint64)
        np.add.at(out, rep, piece)
        return out

    # ---- batches ---------------------------------------------------------------------

    @_in_turn
    def _execute(self, batch: Batch) -> ShardedResult:
        return self._run_batch(batch.ops())

    def _run_batch(self, ops) -> ShardedResult:
        """Runs a batch's op columns: cut into one sub-batch per shard, op order
        kept within each; ranges that span shards run on each and are merged."""
        types, keys, args, limits, ordered = (np.asarray(c) for c in ops)
        n = types.shape[0]
        if n == 0:
            z = np.zeros(0, dtype=np.uint64)
            return ShardedResult(z, np.zeros(0, np.bool_), z.copy(), np.zeros(0, np.uint8), {},
                                 np.zeros(1, np.int64), z.copy(), z.copy(), ())
        ranged_scan = (types == _SCAN) & (keys <= args) & (limits <= np.uint64(max_scan_limit))
        ranged = (types == _LOWER_BOUND) | ranged_scan | ((types == _COUNT) & (keys <= args))
        pieces = {
            "op": np.arange(n, dtype=np.int64),
            "typ": types.astype(np.uint8),
            "plo": keys.copy(),
            "phi": np.where(types == _LOWER_BOUND, np.uint64(U64_MAX), np.where(ranged, args, keys)).astype(np.uint64),
            "key": keys,
            "arg": args,
            "limit": limits,
            "ordered": ordered.astype(np.bool_),
            "ranged": ranged,
        }
        chunks = []
        sizes: Dict[int, int] = {}
        sequence = []

        def plan(m: _Map, redo: Optional[List[Call]]) -> List[Call]:
            pending = pieces if redo is None else {
                name: np.concatenate([c[3][0][name] for c in redo]) for name in pieces}
            routed, shard = _route_pieces(pending, m.lows, m.highs)
            calls = []
            for j, (ref, g) in enumerate(zip(m.refs, _by_shard(m, shard))):
                if g is not None and g.shape[0] == 0:
                    continue
                sub = routed if g is None else {name: col[g] for name, col in routed.items()}
                sent, answer_of = _dedupe_follow_ups(sub["typ"], sub["key"], m.lows[j])
                cols = tuple(sub[c] if sent is None else sub[c][sent]
                             for c in ("typ", "key", "arg", "limit", "ordered"))
                calls.append((ref, "execute", (ref.rng,) + cols, (sub, answer_of, cols[0])))
            return calls

        def take(call: Call, a: Any) -> None:
            sizes[call[0].id] = a["size"]
            sequence.append((call[0].id, a["sequence"]))
            chunks.append(call[3] + (a,))

        self._call_shards(plan, take)
        result = _merge_execute(n, types, keys, limits, chunks, tuple(sequence))
        if bool(((types >= _PUT) & (types <= _ERASE)).any()):
            self._split_if_needed(sizes)
        return result
