"""What every part of tandem.distributed shares: Ray (optional), the op
codes, the errors a shard raises, and the JSON files of the shard map."""

from __future__ import annotations

import json
import os
from typing import Any, Optional

import numpy as np

from .. import Error, OpType

try:  # Ray is an optional dependency of the package
    import ray
    from ray.exceptions import RayActorError, RayTaskError
except ImportError:  # pragma: no cover - exercised only without ray
    ray = None  # type: ignore[assignment]
    RayActorError = RayTaskError = None  # type: ignore[assignment,misc]

U64_MAX = (1 << 64) - 1
_GET, _PUT, _INSERT, _ERASE = OpType.get, OpType.put, OpType.insert, OpType.erase
_LOWER_BOUND, _SCAN, _COUNT = OpType.lower_bound, OpType.scan, OpType.count
_MAP_FILE = "shards.json"
_SHARD_FILE = "shard.json"
_EMPTY = np.empty(0, dtype=np.uint64)


class ShardMapChanged(Error):
    """Raised by a shard asked about a range it no longer holds (the caller's
    shard map is out of date). Nothing of the refused call was applied; the
    client refreshes its map and sends the call again, so users see this only
    if the map keeps changing for longer than ``retry_timeout``."""


class ShardLost(Error):
    """A shard's actor died and cannot come back (no ``storage_dir``, or it did
    not restart within ``retry_timeout``); its keys are not available."""


def _require_ray() -> None:
    if ray is None:
        raise ImportError("tandem.distributed needs Ray: pip install 'ray>=2.9'")


def _write_json(path: str, obj: Any) -> None:
    """Writes `obj` to `path` atomically (a temporary file, fsync, rename)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_json(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _shard_folder(storage_dir: str, shard_id: int) -> str:
    return os.path.join(storage_dir, f"shard-{shard_id}")


class _Refused:
    """In place of the answer of a call a shard refused (its range changed,
    or it lost the call's channel); the client sends that part again."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _unwrap(e: BaseException) -> BaseException:
    """The exception a shard raised, without Ray's wrapper."""
    if RayTaskError is not None and isinstance(e, RayTaskError) and e.cause is not None:
        return e.cause
    return e
