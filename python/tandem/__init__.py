"""tandem: an ordered uint64 -> uint64 index for numpy columns.

The index's inner levels are searched on the GPU where one is found and on the
CPU otherwise (same answers); its leaves live in host memory. Work goes in as
columns (numpy ``uint64`` arrays, or anything the buffer protocol or DLPack
gives) and answers come out as numpy arrays the index wrote directly::

    import numpy as np, tandem

    idx = tandem.Index(threads=4)
    keys = np.arange(0, 2_000_000, 2, dtype=np.uint64)
    idx.load(keys, keys * 10)
    values, found = idx.get(np.array([4, 5], dtype=np.uint64))   # [40, 0], [True, False]
    idx.put(np.array([5], dtype=np.uint64), np.array([7], dtype=np.uint64))
    idx.get(5)                                                   # 7 (one key: an int or None)

Mixed batches (:class:`Batch`) run with :meth:`Index.execute`, or
asynchronously with :meth:`Index.submit` (a ``concurrent.futures.Future``) and
:meth:`Index.execute_async` (asyncio). Batches take effect one after another in
the order they were submitted; ops of one batch as if run one by one. The GIL
is released while the index works, so many Python threads can use one index.

Keys in GPU memory (cupy, torch, anything with ``__cuda_array_interface__``
or CUDA DLPack) are used in place, and their answers come back in GPU memory
as arrays of the same kind (:class:`DeviceArray` for kinds tandem cannot
make).

:mod:`tandem.distributed` holds :class:`~tandem.distributed.ShardedIndex`,
the same interface over range shards on Ray.
"""

from __future__ import annotations

from . import _tandem
from ._api import IndexAPI
from ._batch import Batch
from ._device import DeviceArray
from ._index import Index
from ._tandem import Error, InvariantError, OpResult, OpType, Result

__all__ = ["Index", "Batch", "Result", "OpResult", "OpType", "Error", "InvariantError", "IndexAPI", "DeviceArray",
           "max_scan_limit", "built_with_cuda", "__version__"]

__version__: str = _tandem.__version__
#: Most entries one scan op may return (a larger limit is an invalid op).
max_scan_limit: int = _tandem.max_scan_limit
#: Whether this build of the package can use a GPU.
built_with_cuda: bool = _tandem.built_with_cuda
