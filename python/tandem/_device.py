"""Arrays in GPU memory: keys, values and answers of the column methods that
a GPU pipeline keeps there (cupy, torch, numba, anything exposing
``__cuda_array_interface__`` v3 or DLPack on a CUDA device). They are used
in place, without a copy: the index reads the keys once the work queued on
the array's stream (CUDA array interface v3 ``stream``) is done, and the
answers come back as arrays of the caller's kind on the same GPU (cupy in,
cupy out; torch in, torch out; an array API namespace's ``empty``), or as a
:class:`DeviceArray` for kinds tandem cannot make."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from . import _tandem

_DL_CUDA, _DL_CUDA_MANAGED = 2, 13  # DLPack device types
_DL_UINT = 1  # DLPack type code of unsigned integers


class DeviceColumn(NamedTuple):
    """A 1-D uint64 (or flag) array in GPU memory, as the index takes it."""

    ptr: int
    n: int
    device: int
    stream: int
    owner: Any


class DeviceArray:
    """A 1-D array in the memory of one GPU, made by tandem for answers to
    arrays of a kind it cannot make: it exposes ``__cuda_array_interface__``
    (v3), so cupy.asarray, torch.as_tensor or numba.cuda.as_cuda_array take
    it without a copy; :meth:`numpy` copies it to the host."""

    def __init__(self, n: int, dtype: Any, device: int) -> None:
        self.dtype = np.dtype(dtype)
        self.shape = (n,)
        self.device = device
        self._buffer = _tandem.DeviceBuffer(max(n, 1) * self.dtype.itemsize, device)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self._buffer.ptr, False), "version": 3,
                "strides": None, "stream": None}

    def numpy(self) -> np.ndarray:
        """A host copy."""
        out = np.empty(self.shape, self.dtype)
        _tandem.copy_to_host(out.view(np.uint8), self._buffer.ptr, self.device)
        return out

    def __repr__(self) -> str:
        return f"tandem.DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.device})"


def device_column(data: Any, name: str) -> Optional[DeviceColumn]:
    """`data` as a DeviceColumn when it is an array in GPU memory (None for
    anything else): 1-D, contiguous, uint64, else TypeError (the dtype) or
    ValueError (the shape) naming `name`."""
    if isinstance(data, np.ndarray):
        return None
    cai = getattr(data, "__cuda_array_interface__", None)
    if cai is not None:
        shape = tuple(cai["shape"])
        typestr = cai["typestr"]
        strides = cai.get("strides")
        ptr = cai["data"][0]
        stream = _stream_of(data, cai)
        ok_type = typestr[0] in "<|=" and typestr[1:] == "u8"
        contiguous = strides is None or (len(shape) == 1 and (shape[0] <= 1 or tuple(strides) == (8,)))
        n = shape[0] if len(shape) == 1 else 0
    else:
        probe = getattr(data, "__dlpack_device__", None)
        if probe is None:
            return None
        kind, _ = probe()
        if kind not in (_DL_CUDA, _DL_CUDA_MANAGED):
            return None
        ptr, n, _, code, bits, ndim, stride = _tandem.dlpack_array(data)
        shape = (n,) if ndim == 1 else tuple(getattr(data, "shape", ())) or (n,) * ndim
        typestr = f"DLPack type code {code}, {bits} bits"
        ok_type = code == _DL_UINT and bits == 64
        strides = (stride,)
        contiguous = ndim != 1 or n <= 1 or stride == 1
        stream = 0
    if len(shape) != 1:
        raise ValueError(f"{name}: expected a 1-D array, got a {len(shape)}-D array of shape {shape} in GPU memory")
    if not ok_type:
        raise TypeError(f"{name}: expected uint64 in GPU memory, got {typestr}")
    if not contiguous:
        raise ValueError(f"{name}: the array in GPU memory is not contiguous (strides {strides})")
    device = _tandem.device_of(ptr) if n else _device_id(data)
    if n and device < 0:
        raise ValueError(f"{name}: its pointer is not memory of a GPU this process can use")
    return DeviceColumn(ptr, n, device, stream, data)


def _stream_of(data: Any, cai: dict) -> int:
    """The stream whose queued work writes `data`: the CUDA array
    interface's (v3; 1 and 2 are the legacy and per-thread default
    streams), torch's current stream on the array's GPU (its interface has
    none), else 0 (the legacy default stream)."""
    stream = cai.get("stream")
    if stream is not None:
        return int(stream)
    if type(data).__module__.split(".")[0] == "torch":
        import torch  # type: ignore[import-not-found]

        return int(torch.cuda.current_stream(data.device).cuda_stream)
    return 0


def _device_id(data: Any) -> int:
    """The GPU of an empty array (its pointer names none), 0 if it says none."""
    probe = getattr(data, "__dlpack_device__", None)
    if probe is not None:
        try:
            return int(probe()[1])
        except Exception:  # an empty array may refuse to export
            pass
    device = getattr(data, "device", None)
    return int(getattr(device, "index", None) or getattr(device, "id", None) or 0)


def empty_like(like: Any, n: int, dtype: str, device: int) -> Any:
    """An uninitialised 1-D array of `n` `dtype` ("uint64" or "bool") on GPU
    `device`, of the kind of `like`."""
    module = type(like).__module__.split(".")[0]
    if module == "cupy":
        import cupy  # type: ignore[import-not-found]

        with cupy.cuda.Device(device):
            return cupy.empty(n, dtype=dtype)
    if module == "torch":
        import torch  # type: ignore[import-not-found]

        return torch.empty(n, dtype=getattr(torch, dtype), device=f"cuda:{device}")
    namespace = getattr(like, "__array_namespace__", None)
    if namespace is not None:
        xp = namespace()
        return xp.empty(n, dtype=getattr(xp, dtype), device=like.device)
    return DeviceArray(n, dtype, device)


def pointer(array: Any) -> int:
    """The device pointer of an array empty_like made."""
    cai = getattr(array, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    if hasattr(array, "data_ptr"):  # torch
        return int(array.data_ptr())
    return int(_tandem.dlpack_array(array)[0])
