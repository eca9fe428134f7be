"""Result merging: the answers of a call's pieces on several shards put
back into one answer per op, in input order (scans merged in key order up to
their limit), and :class:`ShardedResult`, a batch's answers."""

from __future__ import annotations

import re
from typing import Dict, Tuple

import numpy as np

from .. import OpResult
from ._common import _COUNT, _EMPTY, _LOWER_BOUND, _SCAN


def _take_scans(n: int, op: np.ndarray, cnt: np.ndarray, src: np.ndarray, limit: np.ndarray):
    """Merges scan pieces (sorted by (op, key)) into per-op answers of at most
    `limit` entries, in key order. Returns (offsets[n+1], gather index into
    the concatenated piece entries, entries taken per piece)."""
    c = cnt.astype(np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    if c.size == 0:
        return offsets, np.empty(0, np.int64), c
    before = np.cumsum(c) - c
    newop = np.ones(op.shape[0], dtype=bool)
    newop[1:] = op[1:] != op[:-1]
    starts = np.flatnonzero(newop)
    runs = np.diff(np.append(starts, op.shape[0]))
    within = before - np.repeat(before[starts], runs)
    take = np.clip(limit.astype(np.int64) - within, 0, c)
    out_start = np.cumsum(take) - take
    total = int(take.sum())
    gather = np.repeat(src.astype(np.int64) - out_start, take) + np.arange(total, dtype=np.int64)
    per_op = np.zeros(n, dtype=np.int64)
    np.add.at(per_op, op, take)
    np.cumsum(per_op, out=offsets[1:])
    return offsets, gather, take


class ShardedResult:
    """The answers of a batch run by :meth:`ShardedIndex.execute`: the same
    attributes as :class:`tandem.Result` (one answer per op, in batch order).

    ``sequence`` is a tuple of ``(shard id, sequence)`` pairs, the batch's
    place in the queue of each shard it touched (there is no order across
    shards to give one number)."""

    def __init__(self, values, found, keys, status, errors, scan_offsets, entry_keys,
                 entry_values, sequence) -> None:
        for a in (values, found, keys, status, entry_keys, entry_values):
            a.flags.writeable = False
        self._values, self._found, self._keys, self._status = values, found, keys, status
        self._errors = errors
        self._offsets = scan_offsets
        self._ek, self._ev = entry_keys, entry_values
        self._sequence = sequence

    def __len__(self) -> int:
        return self._values.shape[0]

    @property
    def values(self) -> np.ndarray:
        """uint64 per op: get: the value; put/insert/erase: the value
        replaced/kept/erased; lower_bound: the entry's value; scan: entries
        returned; count: the count."""
        return self._values

    @property
    def found(self) -> np.ndarray:
        """bool per op: get: key present; put/insert/erase: key was present;
        lower_bound: an entry >= key exists; scan/count: non-empty."""
        return self._found

    @property
    def keys(self) -> np.ndarray:
        """uint64 per op: the op's key (lower_bound: the entry's key)."""
        return self._keys

    @property
    def status(self) -> np.ndarray:
        """uint8 per op: 0 ok, 1 invalid, 2 output_limit (see :meth:`error`)."""
        return self._status

    @property
    def sequence(self) -> Tuple[Tuple[int, int], ...]:
        """``(shard id, sequence)`` of each shard the batch ran on."""
        return self._sequence

    @property
    def invalid_count(self) -> int:
        """Ops whose status is not ok."""
        return int(np.count_nonzero(self._status))

    def _op(self, i: int) -> int:
        """Op index i in [0, len) (i < 0 counts from the end)."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError("op index out of range")
        return i + n if i < 0 else i

    def error(self, i: int) -> str:
        """The message of op i when its status is not ok, else ''."""
        return self._errors.get(self._op(i), "")

    def scan(self, i: int) -> Tuple[np.ndarray, np.ndarray]:
        """(keys, values) of scan op i (empty for another op or a failed scan)."""
        i = self._op(i)
        a, b = self._offsets[i], self._offsets[i + 1]
        return self._ek[a:b], self._ev[a:b]

    def scan_entries(self) -> Tuple[np.ndarray, np.ndarray]:
        """(keys, values) of every ok scan's entries, scan after scan in op order."""
        return self._ek, self._ev

    def __getitem__(self, i: int) -> OpResult:
        """Op i's answer: ``OpResult(found, value, key, status)`` (i < 0 counts
        from the end)."""
        i = self._op(i)
        return OpResult(bool(self._found[i]), int(self._values[i]), int(self._keys[i]), int(self._status[i]))

    def __repr__(self) -> str:
        return (f"tandem.distributed.ShardedResult({len(self)} ops, {self.invalid_count} invalid, "
                f"{len(self._sequence)} shards)")


_OP_PREFIX = re.compile(r"^op \d+")


def _merge_execute(n: int, types: np.ndarray, keys: np.ndarray, limits: np.ndarray, chunks,
                   sequence) -> ShardedResult:
    """Puts the pieces' answers back into one answer per op."""
    cols: Dict[str, list] = {c: [] for c in ("op", "typ", "plo", "ranged", "v", "f", "k", "s", "cnt", "src", "err")}
    entry_keys, entry_values = [], []
    base = 0
    for sub, answer_of, sent_types, a in chunks:
        ai = np.arange(sent_types.shape[0]) if answer_of is None else answer_of
        status = a["status"]
        cnt = np.where((sent_types == _SCAN) & (status == 0), a["values"], 0).astype(np.int64)
        off = np.cumsum(cnt) - cnt
        for name in ("op", "typ", "plo", "ranged"):
            cols[name].append(sub[name])
        cols["v"].append(a["values"][ai])
        cols["f"].append(a["found"][ai])
        cols["k"].append(a["keys"][ai])
        cols["s"].append(status[ai])
        cols["cnt"].append(cnt[ai])
        cols["src"].append(off[ai] + base)
        errs = np.empty(ai.shape[0], dtype=object)
        bad = np.flatnonzero(status[ai])
        for p in bad.tolist():
            errs[p] = a["errors"].get(int(ai[p]), "")
        cols["err"].append(errs)
        entry_keys.append(a["entry_keys"])
        entry_values.append(a["entry_values"])
        base += a["entry_keys"].shape[0]
    c = {name: np.concatenate(v) for name, v in cols.items()}
    order = np.lexsort((c["plo"], c["op"]))
    c = {name: v[order] for name, v in c.items()}
    op, typ = c["op"], c["typ"]
    first = np.ones(op.shape[0], dtype=bool)
    first[1:] = op[1:] != op[:-1]
    fi = np.flatnonzero(first)  # one per op, in op order
    values = c["v"][fi].copy()
    found = c["f"][fi].copy()
    out_keys = c["k"][fi].copy()
    status = c["s"][fi].copy()
    errors: Dict[int, str] = {}
    # ops cut into several pieces
    if fi.shape[0] != op.shape[0]:
        multi = np.flatnonzero(np.diff(np.append(fi, op.shape[0])) > 1)
        # status: the first piece that failed
        bad = np.flatnonzero(c["s"])
        if bad.size:
            uo, ui = np.unique(op[bad], return_index=True)
            status[uo] = c["s"][bad[ui]]
        lb = typ[fi] == _LOWER_BOUND
        lb_multi = multi[lb[multi]]
        if lb_multi.size:
            found[lb_multi] = False
            out_keys[lb_multi] = 0
            values[lb_multi] = 0
            hit = np.flatnonzero(c["f"] & (typ == _LOWER_BOUND))
            if hit.size:
                uo, ui = np.unique(op[hit], return_index=True)
                found[uo] = True
                out_keys[uo] = c["k"][hit[ui]]
                values[uo] = c["v"][hit[ui]]
        counts = np.flatnonzero((typ == _COUNT) & c["ranged"])
        if counts.size:
            sums = np.zeros(n, dtype=np.uint64)
            np.add.at(sums, op[counts], c["v"][counts])
            cm = multi[typ[fi][multi] == _COUNT]
            values[cm] = sums[cm]
            found[cm] = sums[cm] > 0
    for p in np.flatnonzero(c["s"]).tolist():
        i = int(op[p])
        if i not in errors and status[i] == c["s"][p]:
            errors[i] = _OP_PREFIX.sub(f"op {i}", c["err"][p] or "")
    # scans: entries in key order, at most the limit, across the pieces
    sp = np.flatnonzero(typ == _SCAN)
    failed = status[op[sp]] != 0
    cnt = np.where(failed, 0, c["cnt"][sp])
    offsets, gather, _ = _take_scans(n, op[sp], cnt, c["src"][sp], limits[op[sp]].astype(np.int64))
    if sp.size:
        per_op = np.diff(offsets)
        scan_ops = np.flatnonzero(types == _SCAN)
        values[scan_ops] = per_op[scan_ops].astype(np.uint64)
        found[scan_ops] = per_op[scan_ops] > 0
    ek = np.concatenate(entry_keys) if entry_keys else _EMPTY
    ev = np.concatenate(entry_values) if entry_values else _EMPTY
    return ShardedResult(values, found, out_keys, status, errors, offsets, ek[gather], ev[gather], sequence)
