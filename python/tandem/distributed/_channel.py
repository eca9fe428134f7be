"""The shared-memory channel: a buffer in /dev/shm that one client and one
shard on the same node both map, so that large point columns reach the
shard's index and its answers come back without Ray's object store."""

from __future__ import annotations

import collections
import contextlib
import mmap
import os
import uuid
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ._common import ray

#: A shard's part of a column call with at least this many keys goes
#: through the client's shared-memory channel to that shard (same node).
_SHM_MIN_KEYS = 1 << 12
#: Channels a shard keeps (least recently used ones are dropped beyond).
_SHM_MAX_CHANNELS = 16
_SHM_DIR = "/dev/shm"


class _ChannelGone(Exception):
    """Raised by a shard asked to use a channel it does not hold (it was
    restarted, or dropped the channel): the client sends the part again."""


def _channel_views(buf: Any, capacity: int):
    """keys, values (uint64) and flags (uint8) regions of a channel buffer."""
    return (np.frombuffer(buf, np.uint64, capacity, 0), np.frombuffer(buf, np.uint64, capacity, 8 * capacity),
            np.frombuffer(buf, np.uint8, capacity, 16 * capacity))


class _Channel:
    """A buffer in shared memory between one client and one shard on the same
    node: the client writes a call's keys (and values) into it, the shard's
    index reads them and writes its answers there, the client reads those
    back. Calls of one client are one at a time, so one buffer serves all."""

    def __init__(self, handle: Any, token: str, buf: mmap.mmap, capacity: int) -> None:
        self.handle, self.token, self.buf, self.capacity = handle, token, buf, capacity
        self.keys, self.values, self.flags = _channel_views(buf, capacity)

    @classmethod
    def open(cls, handle: Any, capacity: int, node_id: str) -> Optional["_Channel"]:
        token = uuid.uuid4().hex
        path = os.path.join(_SHM_DIR, f"tandem-{token}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # reserves the memory now: a full /dev/shm fails here (OSError: the
            # object store is used) instead of faulting when the buffer is written
            os.posix_fallocate(fd, 0, 17 * capacity)
            buf = mmap.mmap(fd, 17 * capacity)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        attached = False
        try:
            attached = ray.get(handle.attach.remote(token, path, capacity, node_id))
        finally:
            os.unlink(path)  # the memory lives on while the two sides map it
            if not attached:
                buf.close()
        if not attached:
            return None
        return cls(handle, token, buf, capacity)

    def fill(self, keys: np.ndarray, values: Optional[np.ndarray], pos: Optional[np.ndarray], n: int) -> None:
        if pos is None:
            self.keys[:n] = keys
            if values is not None:
                self.values[:n] = values
        else:
            np.take(keys, pos, out=self.keys[:n])
            if values is not None:
                np.take(values, pos, out=self.values[:n])

    def answers(self, with_values: bool, n: int) -> Tuple[np.ndarray, ...]:
        """Views of the answers of a call of n keys the shard wrote: (values,
        found) or (found,) (flags: the key was present)."""
        flags = self.flags[:n].view(np.bool_)
        return (self.values[:n], flags) if with_values else (flags,)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.handle.detach.remote(self.token)
        self.keys = self.values = self.flags = None
        with contextlib.suppress(BufferError, ValueError):
            self.buf.close()


def _close_channels(channels: Dict[int, Any]) -> None:
    for ch in list(channels.values()):
        if ch:
            ch.close()
    channels.clear()


class _ChannelEnds:
    """The shard's side: the channel buffers of the clients on its node that
    it maps, by token (the least recently used beyond _SHM_MAX_CHANNELS are
    dropped: a client that never said goodbye)."""

    def __init__(self) -> None:
        self._buffers: "collections.OrderedDict[str, tuple]" = collections.OrderedDict()

    def attach(self, token: str, path: str, capacity: int) -> bool:
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return False
        try:
            buf = mmap.mmap(fd, 17 * capacity)
        finally:
            os.close(fd)
        self._buffers[token] = (buf, capacity)
        while len(self._buffers) > _SHM_MAX_CHANNELS:
            self.detach(next(iter(self._buffers)))
        return True

    def detach(self, token: str) -> None:
        got = self._buffers.pop(token, None)
        if got is not None:
            with contextlib.suppress(BufferError):
                got[0].close()

    def views(self, token: str, n: int, shard_id: int):
        """The first n keys, values and flags of a channel; raises
        _ChannelGone when this shard does not hold it."""
        got = self._buffers.get(token)
        if got is None:
            raise _ChannelGone(f"shard {shard_id} holds no channel {token}")
        self._buffers.move_to_end(token)
        return tuple(a[:n] for a in _channel_views(*got))
