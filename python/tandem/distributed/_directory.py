"""The directory actor: the shard map (and, with storage_dir, its file),
the creation of the shard actors, and splits."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from typing import Any, List, Optional, Sequence, Set

from .. import Error
from ._calls import _gather
from ._common import (_MAP_FILE, U64_MAX, RayActorError, _Refused, _read_json, _shard_folder, _write_json,
                      ray)
from ._routing import _Ref
from ._shard import _Shard


class _Directory:
    """Holds the shard map (and, with storage_dir, its file), creates the
    shard actors (which it owns) and performs splits. Its methods run one at
    a time, so map changes are serialized and a client asking for the map
    during a split gets the map after it."""

    def __init__(self, num_shards: int, index_config: dict, storage_dir: Optional[str],
                 shard_options: dict, max_shard_keys: Optional[int]) -> None:
        self.num_shards = num_shards
        self.index_config = index_config
        self.storage_dir = storage_dir
        self.shard_options = shard_options
        self.max_shard_keys = max_shard_keys
        self.version = 0
        self.next_id = 0
        self.splits = 0
        self.shards: List[list] = []  # [id, lo, hi, handle], in key order
        self.actor_cls = ray.remote(_Shard)

    # ---- internals

    def _save(self) -> None:
        if self.storage_dir:
            _write_json(os.path.join(self.storage_dir, _MAP_FILE), {
                "version": self.version, "next_id": self.next_id,
                "shards": [[s[0], s[1], s[2]] for s in self.shards]})

    def _create(self, shard_id: int, lo: int, hi: int):
        folder = _shard_folder(self.storage_dir, shard_id) if self.storage_dir else None
        return self.actor_cls.options(**self.shard_options).remote(
            shard_id, lo, hi, self.version, self.index_config, folder)

    def _call(self, shard: list, method: str, *args: Any) -> Any:
        """Calls a shard; while a durable shard restarts, calls again."""
        (a,) = _gather([(_Ref(*shard), method, args)], time.monotonic() + 120, bool(self.storage_dir), 120)
        if isinstance(a, _Refused):
            raise a.error
        return a

    def _started(self, handles: Sequence[Any]) -> None:
        try:
            ray.get([h.ping.remote() for h in handles])
        except RayActorError as e:
            raise Error(f"a shard actor could not start: {e}") from None

    def _retire(self, shards: Sequence[list], remove_folders: bool = True) -> None:
        """Closes and kills shards no longer in the map (and removes their folders)."""
        for s in shards:
            with contextlib.suppress(Exception):
                ray.get(s[3].close.remote())
            with contextlib.suppress(Exception):
                ray.kill(s[3], no_restart=True)
            if remove_folders and self.storage_dir:
                shutil.rmtree(_shard_folder(self.storage_dir, s[0]), ignore_errors=True)

    @staticmethod
    def _remove_stray_folders(storage_dir: str, keep: Set[str]) -> None:
        """Removes the shard folders not in `keep`: those of an interrupted
        split, or of a start that never saved its map."""
        for name in os.listdir(storage_dir):
            if re.fullmatch(r"shard-\d+", name) and name not in keep:
                shutil.rmtree(os.path.join(storage_dir, name), ignore_errors=True)

    # ---- called by clients

    def start(self):
        """Creates the shards (or reopens those of storage_dir) and returns the map."""
        storage = self.storage_dir
        saved = _read_json(os.path.join(storage, _MAP_FILE)) if storage else None
        if storage and saved is not None:
            self.version = saved["version"] + 1
            self.next_id = saved["next_id"]
            self.shards = [[i, lo, hi, None] for i, lo, hi in saved["shards"]]
            for s in self.shards:
                s[3] = self._create(s[0], s[1], s[2])
            self._started([s[3] for s in self.shards])
            for s in self.shards:
                self._call(s, "adopt", s[1], s[2], self.version)
            self._remove_stray_folders(storage, {f"shard-{s[0]}" for s in self.shards})
        else:
            if storage:
                os.makedirs(storage, exist_ok=True)
                self._remove_stray_folders(storage, set())
            n = self.num_shards
            lows = [(j << 64) // n for j in range(n)]
            for j in range(n):
                hi = lows[j + 1] - 1 if j + 1 < n else U64_MAX
                self.shards.append([self.next_id, lows[j], hi, self._create(self.next_id, lows[j], hi)])
                self.next_id += 1
            self._started([s[3] for s in self.shards])
        self._save()
        return self.get_map()

    def get_map(self):
        return self.version, [tuple(s) for s in self.shards]

    def info(self) -> dict:
        return {"version": self.version, "splits": self.splits, "shards": len(self.shards)}

    def set_ranges(self, lows: List[int]):
        """A new map with these lower bounds (load): the first shards are
        reused (emptied), missing ones created, extra ones retired."""
        n = len(lows)
        highs = [lows[j + 1] - 1 for j in range(n - 1)] + [U64_MAX]
        self.version += 1
        keep, extra = self.shards[:n], self.shards[n:]
        for s, lo, hi in zip(keep, lows, highs):
            s[1], s[2] = lo, hi
        for s in keep:
            self._call(s, "reset", s[1], s[2], self.version)
        fresh = []
        for j in range(len(keep), n):
            s = [self.next_id, lows[j], highs[j], None]
            self.next_id += 1
            s[3] = self._create(s[0], s[1], s[2])
            fresh.append(s)
        self._started([s[3] for s in fresh])
        self.shards = keep + fresh
        self._save()
        self._retire(extra)
        return self.get_map()

    def split(self, shard_id: int, lo: int, hi: int):
        """Splits the shard (and the halves, while above max_shard_keys) if it
        still holds [lo, hi]; returns the map."""
        work = [shard_id]
        first = True
        while work:
            sid = work.pop()
            pos = next((p for p, s in enumerate(self.shards) if s[0] == sid), None)
            if pos is None:
                continue
            s = self.shards[pos]
            if first and (s[1], s[2]) != (lo, hi):
                break  # another client split it already
            first = False
            got = self._call(s, "split_off", (s[1], s[2]), self.version + 1, self.max_shard_keys)
            if got is None:
                continue
            mid, keys, values = got
            old_hi = s[2]
            self.version += 1
            new = [self.next_id, mid, old_hi, None]
            self.next_id += 1
            new[3] = self._create(new[0], mid, old_hi)
            self._started([new[3]])
            size_new = self._call(new, "load", (mid, old_hi), keys, values)
            s[2] = mid - 1
            self.shards.insert(pos + 1, new)
            self._save()
            size_old = self._call(s, "drop", mid, old_hi)
            self.splits += 1
            if size_old > self.max_shard_keys:
                work.append(s[0])
            if size_new > self.max_shard_keys:
                work.append(new[0])
        return self.get_map()

    def close(self) -> None:
        shards, self.shards = self.shards, []
        self._retire(shards, remove_folders=False)
