"""Column methods over arrays in GPU memory: a small array class over
cudaMalloc'd memory (ctypes on libcudart) that exposes
``__cuda_array_interface__`` stands in for cupy; cupy and torch themselves
where installed. Answers against the same calls on numpy arrays; wrong
dtypes and shapes named; without a GPU, a clear error."""

import ctypes
import ctypes.util

import numpy as np
import pytest

import tandem
from model import EDGE_KEYS, U64_MAX, u64


def _cudart():
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12", ctypes.util.find_library("cudart")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        if lib.cudaGetDeviceCount(ctypes.byref(count)) == 0 and count.value > 0:
            return lib
    return None


CUDART = _cudart()
needs_gpu = pytest.mark.skipif(CUDART is None or not tandem.built_with_cuda,
                               reason="no usable GPU (libcudart with a device) or a build without CUDA")


class CudaArray:
    """A 1-D array in GPU 0's memory with __cuda_array_interface__ v3."""

    def __init__(self, host, typestr=None, shape=None):
        host = np.ascontiguousarray(host)
        self.nbytes = host.nbytes
        self.ptr = ctypes.c_void_p()
        assert CUDART.cudaMalloc(ctypes.byref(self.ptr), ctypes.c_size_t(max(self.nbytes, 1))) == 0
        assert CUDART.cudaMemcpy(self.ptr, host.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(self.nbytes), 1) == 0
        self.typestr = typestr or host.dtype.str
        self.shape = shape or host.shape

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr.value or 0, False), "version": 3,
                "strides": None, "stream": 1}

    def __del__(self):
        CUDART.cudaFree(self.ptr)


def to_host(array, dtype):
    """A host copy of an answer array (ours, the stand-in's kind, cupy's or torch's)."""
    if isinstance(array, tandem.DeviceArray):
        return array.numpy().view(dtype)
    cai = array.__cuda_array_interface__
    out = np.empty(cai["shape"], dtype)
    assert CUDART.cudaMemcpy(out.ctypes.data_as(ctypes.c_void_p), ctypes.c_void_p(cai["data"][0]),
                             ctypes.c_size_t(out.nbytes), 2) == 0
    return out


@needs_gpu
@pytest.mark.parametrize("seed", range(3))
def test_device_columns_answer_as_host_columns(seed):
    rng = np.random.default_rng(seed)
    loaded = np.unique(np.concatenate([rng.integers(0, U64_MAX, 50_000, dtype=np.uint64, endpoint=True),
                                       u64(EDGE_KEYS)]))
    with tandem.Index(threads=4, device="gpu") as on_gpu, tandem.Index(threads=4, device="cpu") as on_host:
        on_gpu.load(loaded, loaded ^ np.uint64(5))
        on_host.load(loaded, loaded ^ np.uint64(5))
        for n in (1, 3, 5000, 1 << 16):
            keys = np.concatenate([rng.choice(loaded, n // 2), rng.integers(0, U64_MAX, n - n // 2, dtype=np.uint64,
                                                                            endpoint=True)])
            keys[0] = 0
            keys[-1] = U64_MAX
            d = CudaArray(keys)
            values, found = on_gpu.get(d)
            want_values, want_found = on_host.get(keys)
            assert isinstance(values, tandem.DeviceArray)
            np.testing.assert_array_equal(to_host(found, np.bool_), want_found)
            np.testing.assert_array_equal(to_host(values, np.uint64), want_values)
            np.testing.assert_array_equal(to_host(on_gpu.contains(d), np.bool_), want_found)
            f, k, v = on_gpu.lower_bound(d)
            wf, wk, wv = on_host.lower_bound(keys)
            np.testing.assert_array_equal(to_host(f, np.bool_), wf)
            np.testing.assert_array_equal(to_host(k, np.uint64), wk)
            np.testing.assert_array_equal(to_host(v, np.uint64), wv)
            new_values = keys * np.uint64(3)
            np.testing.assert_array_equal(to_host(on_gpu.insert(d, CudaArray(new_values)), np.bool_),
                                          on_host.insert(keys, new_values))
            on_gpu.put(d, CudaArray(new_values + np.uint64(1)))
            on_host.put(keys, new_values + np.uint64(1))
            np.testing.assert_array_equal(to_host(on_gpu.get(d)[0], np.uint64), on_host.get(keys)[0])
            gone = keys[: n // 3]
            np.testing.assert_array_equal(to_host(on_gpu.erase(CudaArray(gone)), np.bool_), on_host.erase(gone))
        on_gpu.verify()
        assert len(on_gpu) == len(on_host)


@needs_gpu
def test_wrong_device_arrays_are_named():
    with tandem.Index(threads=2, device="gpu") as idx:
        idx.load(np.arange(10, dtype=np.uint64), np.arange(10, dtype=np.uint64))
        with pytest.raises(TypeError, match="keys: expected uint64"):
            idx.get(CudaArray(np.arange(4, dtype=np.int32)))
        with pytest.raises(ValueError, match="keys: expected a 1-D array"):
            idx.get(CudaArray(np.arange(4, dtype=np.uint64), shape=(2, 2)))
        with pytest.raises(TypeError, match="values: the keys are in GPU memory"):
            idx.put(CudaArray(np.arange(4, dtype=np.uint64)), np.arange(4, dtype=np.uint64))
        with pytest.raises(ValueError, match="differ in length"):
            idx.put(CudaArray(np.arange(4, dtype=np.uint64)), CudaArray(np.arange(3, dtype=np.uint64)))


@needs_gpu
def test_gets_from_gpu_memory_cross_no_link():
    keys = np.arange(0, 1 << 22, 2, dtype=np.uint64)
    with tandem.Index(threads=4, device="gpu") as idx:
        idx.load(keys, keys)
        idx.get(keys)  # warm
        before = idx.stats()["stage_bytes"]["pcie"]
        d = CudaArray(keys[: 1 << 20])
        values, found = idx.get(d)
        assert to_host(found, np.bool_).all()
        moved = idx.stats()["stage_bytes"]["pcie"] - before
        assert moved <= (1 << 20), f"{moved} bytes over PCIe for 2^20 gets in GPU memory"
        before = idx.stats()["stage_bytes"]["pcie"]
        assert to_host(idx.contains(d), np.bool_).all()
        moved = idx.stats()["stage_bytes"]["pcie"] - before
        assert moved <= (1 << 20), f"{moved} bytes over PCIe for 2^20 contains in GPU memory"


def test_a_device_array_without_a_usable_gpu_says_why():
    if CUDART is not None and tandem.built_with_cuda:
        pytest.skip("a GPU is usable here")

    class Fake:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<u8", "data": (4096, False), "version": 3,
                                    "strides": None, "stream": None}

    with tandem.Index(threads=2) as idx:
        with pytest.raises((ValueError, tandem.Error), match="GPU"):
            idx.get(Fake())


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_cupy_and_torch_in_and_out(lib):
    mod = pytest.importorskip(lib, reason=f"{lib} is not installed")
    if CUDART is None or not tandem.built_with_cuda:
        pytest.skip("no usable GPU")
    keys = np.arange(0, 20_000, 2, dtype=np.uint64)
    with tandem.Index(threads=2, device="gpu") as idx:
        idx.load(keys, keys * np.uint64(10))
        asked = np.array([0, 1, 2, 19_998, 19_999], dtype=np.uint64)
        if lib == "cupy":
            d = mod.asarray(asked)
        else:
            d = mod.from_numpy(asked.astype(np.int64)).to(dtype=mod.uint64, device="cuda")
        values, found = idx.get(d)
        assert type(values).__module__.split(".")[0] == lib
        host_values = values.get() if lib == "cupy" else values.cpu().numpy()
        host_found = found.get() if lib == "cupy" else found.cpu().numpy()
        np.testing.assert_array_equal(host_found, [True, False, True, True, False])
        np.testing.assert_array_equal(host_values, [0, 0, 20, 199_980, 0])
