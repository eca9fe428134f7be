"""How a client talks to the directory and the shards: one call at a time in
the order issued (:class:`_Turns`), every shard it needs at once
(:func:`_gather`, which waits out a durable shard's restart), and
:meth:`_ShardCalls._call_shards`, the one loop that sends a call again on a
fresh map when a shard refuses it."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, cast

import numpy as np

from .. import Error
from ._channel import _SHM_MIN_KEYS, _Channel, _ChannelGone
from ._common import _GET, RayActorError, RayTaskError, ShardLost, ShardMapChanged, _Refused, _unwrap, ray
from ._routing import _group, _Map, _Ref, _shard_ids

#: A call to one shard: (shard, method, args) and, as a fourth element, the
#: part of the work it carries, handed back to the planner when refused.
Call = Tuple[Any, ...]


class _Turns:
    """Serves a client's calls one at a time in the order they were issued."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._next = 0
        self._serving = 0

    def ticket(self) -> int:
        with self._cv:
            t = self._next
            self._next += 1
            return t

    @contextlib.contextmanager
    def turn(self, ticket: int):
        with self._cv:
            self._cv.wait_for(lambda: self._serving == ticket)
        try:
            yield
        finally:
            with self._cv:
                self._serving += 1
                self._cv.notify_all()


_F = TypeVar("_F", bound=Callable[..., Any])


def _in_turn(method: _F) -> _F:
    """Runs the method in the client's call order (its turn, see _Turns),
    after checking that the client is open."""
    @functools.wraps(method)
    def in_turn(self: "_ShardCalls", *args: Any) -> Any:
        return self._sync(lambda: method(self, *args))
    return cast(_F, in_turn)


def _gather(calls: Sequence[Call], deadline: float, durable: bool, retry_timeout: float,
            counters: Optional[Dict[str, int]] = None) -> List[Any]:
    """Calls every (shard, method, args) at once and returns the answers in
    order, a _Refused in place of each call a shard refused. Calls to a
    shard that died are sent again once it restarted (`durable`), or raise
    ShardLost."""
    answers: List[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    pause = 0.02
    while todo:
        refs = [getattr(calls[i][0].handle, calls[i][1]).remote(*calls[i][2]) for i in todo]
        try:
            for i, a in zip(todo, ray.get(refs)):
                answers[i] = a
            return answers
        except (RayTaskError, RayActorError):
            pass
        again = []
        for i, ref in zip(todo, refs):
            try:
                answers[i] = ray.get(ref)
            except RayTaskError as e:
                cause = _unwrap(e)
                if isinstance(cause, (ShardMapChanged, _ChannelGone)):
                    answers[i] = _Refused(cause)
                elif isinstance(cause, RayActorError):
                    again.append(i)
                else:
                    raise cause from None
            except RayActorError as e:
                shard = calls[i][0]
                if not durable:
                    raise ShardLost(
                        f"shard {shard.id} [{shard.lo}, {shard.hi}] died and had no storage_dir: "
                        f"its keys are lost ({type(e).__name__})") from None
                if time.monotonic() > deadline:
                    raise ShardLost(
                        f"shard {shard.id} [{shard.lo}, {shard.hi}] died and did not come back "
                        f"within {retry_timeout} s: {e}") from None
                again.append(i)
        if again:
            if counters is not None:
                counters["restart_retries"] += 1
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
        todo = again
    return answers


class _ShardCalls:
    """The client's side of the conversation with the directory and the
    shards (ShardedIndex's private half: its map, turns, channels and
    counters are set up by ShardedIndex._setup)."""

    _directory: Any
    _durable: bool
    _max_keys: Optional[int]
    _retry_timeout: float
    _turns: _Turns
    _closed: bool
    _map: _Map
    _counters: Dict[str, int]
    _use_shm: bool
    _node_id: str
    _channels: Dict[int, Any]

    def _check_open(self) -> None:
        if self._closed:
            raise Error("tandem.distributed.ShardedIndex: the index is closed")

    def _sync(self, fn: Callable[[], Any]) -> Any:
        self._check_open()
        with self._turns.turn(self._turns.ticket()):
            return fn()

    def _directory_call(self, method: str, *args: Any) -> Any:
        try:
            return ray.get(getattr(self._directory, method).remote(*args))
        except RayTaskError as e:
            raise _unwrap(e) from None
        except RayActorError as e:
            raise Error(f"the shard directory of this ShardedIndex died: {e}") from None

    def _set_map(self, got: Tuple[int, Sequence[tuple]]) -> None:
        self._map = _Map(*got)

    def _refresh(self) -> None:
        self._set_map(self._directory_call("get_map"))

    def _call_shards(self, plan: Callable[[_Map, Optional[List[Call]]], List[Call]],
                     take: Optional[Callable[[Call, Any], None]] = None) -> Tuple[_Map, List[Call], List[Any]]:
        """Sends the calls ``plan(map, None)`` makes on the current map to their
        shards at once and returns (map, calls, answers). When a shard refuses
        a call (the map changed: a split or a load), fetches the map and plans
        again, until every call is taken or ``retry_timeout`` passes.

        Without `take`, a refusal plans the whole call again (``plan(map,
        None)``: the answers of that round are all dropped). With `take`,
        each answer taken goes to ``take(call, answer)`` as it comes, and only
        the refused calls are planned again, as ``plan(map, refused calls)``
        (each call's fourth element says what part of the work it carried).
        A shard that lost a call's shared-memory channel (it restarted)
        refuses it too; the channel is dropped and the part sent again."""
        deadline = time.monotonic() + self._retry_timeout
        redo: Optional[List[Call]] = None
        while True:
            m = self._map
            calls = plan(m, redo)
            answers = _gather(calls, deadline, self._durable, self._retry_timeout,
                              self._counters) if calls else []
            refused = [(c, a) for c, a in zip(calls, answers) if isinstance(a, _Refused)]
            if take is not None:
                for c, a in zip(calls, answers):
                    if not isinstance(a, _Refused):
                        take(c, a)
            if not refused:
                return m, calls, answers
            stale = [a for _, a in refused if isinstance(a.error, ShardMapChanged)]
            for c, a in refused:
                if isinstance(a.error, _ChannelGone):
                    self._drop_channel(c[0].id)
            if stale:
                self._counters["stale_retries"] += 1
                self._refresh()
                if self._map.version == m.version:
                    if time.monotonic() > deadline:
                        raise stale[0].error
                    time.sleep(0.01)
            redo = [c for c, _ in refused] if take is not None else None

    def _split_if_needed(self, sizes: Dict[int, int]) -> None:
        if self._max_keys is None:
            return
        for shard_id, size in sizes.items():
            if size <= self._max_keys:
                continue
            ref = next((r for r in self._map.refs if r.id == shard_id), None)
            if ref is None:
                continue
            self._counters["split_requests"] += 1
            self._set_map(self._directory_call("split", shard_id, ref.lo, ref.hi))

    def _each_shard(self, method: str, with_range: bool = True) -> List[Any]:
        return self._call_shards(lambda m, _: [(r, method, (r.rng,) if with_range else ())
                                               for r in m.refs])[2]

    def _one(self, op: str, key: int, value: int = 0) -> Any:
        def plan(m: _Map, _: Any) -> List[Call]:
            ref = m.home(key)
            return [(ref, "one", (ref.rng, op, key, value))]

        _, calls, answers = self._call_shards(plan)
        if op != "get":
            self._split_if_needed({calls[0][0].id: answers[0][1]})
        return answers[0][0]

    # ---- point columns ---------------------------------------------------------------

    def _points(self, op: Any, keys: np.ndarray, values: Optional[np.ndarray],
                values_out: Optional[np.ndarray], found_out: Optional[np.ndarray]) -> None:
        """Runs point ops of one type (get, put, insert, erase) over the keys,
        shard by shard, writing every element of each output given in input
        order (get: value and found; insert, erase: found = was present). A
        shard's part of at least _SHM_MIN_KEYS keys goes through the shared
        memory channel to that shard when it runs on this node."""
        sizes: Dict[int, int] = {}
        outs = tuple(a for a in (values_out, found_out) if a is not None)
        wants = (values_out is not None, found_out is not None)

        def plan(m: _Map, redo: Optional[List[Call]]) -> List[Call]:
            # the positions still to do (None: every key)
            todo = None if redo is None else np.concatenate(
                [np.arange(keys.shape[0]) if c[3][0] is None else c[3][0] for c in redo])
            sub = keys if todo is None else keys[todo]
            calls: List[Call] = []
            for ref, g in zip(m.refs, _group(_shard_ids(m.lows, sub), len(m))):
                if g is None:
                    pos = todo
                elif g.shape[0] == 0:
                    continue
                else:
                    pos = g if todo is None else todo[g]
                count = keys.shape[0] if pos is None else pos.shape[0]
                ch = self._channel(ref, count) if count >= _SHM_MIN_KEYS else None
                if ch is not None:
                    ch.fill(keys, values, pos, count)
                    calls.append((ref, "columns_shm", (ref.rng, ch.token, op, count), (pos, ch, count)))
                else:
                    k = keys if pos is None else keys[pos]
                    v = None if values is None else (values if pos is None else values[pos])
                    calls.append((ref, "columns", (ref.rng, op, k, v) + wants, (pos, ch, count)))
            return calls

        def take(call: Call, a: Any) -> None:
            pos, ch, count = call[3]
            cols, sizes[call[0].id] = (ch.answers(wants[0], count), a) if ch is not None else a
            for out, col in zip(outs, cols):
                out[Ellipsis if pos is None else pos] = col

        self._call_shards(plan, take)
        if op != _GET:
            self._split_if_needed(sizes)

    def _channel(self, ref: _Ref, count: int) -> Optional[_Channel]:
        """The shared-memory channel to a shard for `count` keys (made or
        grown on demand), or None when the shard is on another node or
        channels are off."""
        ch = self._channels.get(ref.id)
        if ch is False:
            return None
        if ch is not None and ch.capacity >= count:
            return ch
        if ch is not None:
            self._drop_channel(ref.id)
        if not self._use_shm:
            return None
        try:
            ch = _Channel.open(ref.handle, max(1 << 16, 1 << (count - 1).bit_length()), self._node_id)
        except (RayTaskError, RayActorError, OSError):
            ch = None
        self._channels[ref.id] = ch if ch is not None else False
        return ch

    def _drop_channel(self, shard_id: int) -> None:
        ch = self._channels.pop(shard_id, None)
        if ch:
            ch.close()
