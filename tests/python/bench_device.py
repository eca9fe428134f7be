"""Gets whose keys live in GPU memory, from Python: tandem.Index.get over an
array exposing __cuda_array_interface__ (the ctypes stand-in of
test_device.py), batches of --batch keys from --keys loaded keys, one call
at a time; prints M gets/s and the PCIe bytes a get (stats). Compare with
`tandem-bench -w C --keys-on gpu --inflight 1` at the same sizes."""

import argparse
import time

import numpy as np

import tandem
from test_device import CUDART, CudaArray


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--keys", type=int, default=1 << 27)
    p.add_argument("--batch", type=int, default=1 << 24)
    p.add_argument("--batches", type=int, default=16)
    p.add_argument("--warmup", type=int, default=4)
    a = p.parse_args()
    if CUDART is None:
        raise SystemExit("no usable GPU")
    rng = np.random.default_rng(42)
    t0 = time.perf_counter()
    keys = np.unique(rng.integers(0, 2**64 - 1, int(a.keys * 1.01), dtype=np.uint64, endpoint=True))[: a.keys]
    print(f"{len(keys)} keys made in {time.perf_counter() - t0:.1f} s", flush=True)
    with tandem.Index(device="gpu") as idx:
        t0 = time.perf_counter()
        idx.load(keys, keys ^ np.uint64(7))
        print(f"load {len(keys)} keys: {time.perf_counter() - t0:.2f} s; {idx.stats()['device']}")
        t0 = time.perf_counter()
        batches = [CudaArray(keys[rng.integers(0, len(keys), a.batch)]) for _ in range(a.warmup + a.batches)]
        print(f"batches on the GPU in {time.perf_counter() - t0:.1f} s", flush=True)
        for d in batches[: a.warmup]:
            t0 = time.perf_counter()
            idx.get(d)
            print(f"warm-up call {time.perf_counter() - t0:.4f} s", flush=True)
        before = idx.stats()
        t0 = time.perf_counter()
        hits = 0
        for d in batches[a.warmup:]:
            values, found = idx.get(d)
        seconds = time.perf_counter() - t0
        after = idx.stats()
        hits = int(found.numpy().sum())
        ops = a.batch * a.batches
        pcie = after["stage_bytes"]["pcie"] - before["stage_bytes"]["pcie"]
        looked = after["cache_lookups"] - before["cache_lookups"]
        answered = after["cache_hits"] - before["cache_hits"]
        print(f"python device gets: {ops / seconds / 1e6:.2f} M ops/s ({a.batches} calls of {a.batch}, "
              f"{seconds:.3f} s); {pcie / ops:.3f} PCIe bytes a get; {answered} of {looked} gets answered in the "
              f"leaf copies; last batch {hits} of {a.batch} found", flush=True)


if __name__ == "__main__":
    main()
