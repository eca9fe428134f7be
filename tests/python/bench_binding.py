"""Throughput and latency of tandem.Index from Python (not a pytest file).

    python tests/python/bench_binding.py [--keys 2^22] [--batch 2^20] [--seconds 5]
        [--device auto|cpu|gpu] [--threads 0] [--tandem-bench build/release/bench/tandem-bench]
        [--rounds 1] [--settle 5]

Loads --keys uniformly random uint64 keys (0 and 2^64-1 among them), then
times idx.get over batches of --batch loaded keys (host arrays in, host arrays
out: the answers are numpy arrays the index wrote), and the one-key idx.get
(p50, p99 of single calls). With --tandem-bench, runs the C++ bench on the
same machine after each Python round (--rounds), with one batch in flight
(index::submit then future::get: execute) and the same key count, batch size
and threads, and prints the ratio of the medians and the round-by-round
ratios. A Python round starts --settle seconds after the C++ run before it
exits: the C++ run itself starts timing only after building its data set,
and a round started right after the exit (gigabytes freed) runs slower.
"""

import argparse
import re
import subprocess
import time

import numpy as np

import tandem


def count(text):
    text = text.strip()
    if text.startswith("2^"):
        return 1 << int(text[2:])
    return int(float(text))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--keys", type=count, default=1 << 22)
    p.add_argument("--batch", type=count, default=1 << 20)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--point-calls", type=int, default=200000)
    p.add_argument("--tandem-bench", default=None)
    p.add_argument("--rounds", type=int, default=1,
                   help="with --tandem-bench: alternate the Python run and the C++ run this many times")
    p.add_argument("--settle", type=float, default=5.0,
                   help="with --tandem-bench: seconds to wait after the C++ run before the next Python round")
    a = p.parse_args()

    rng = np.random.default_rng(42)
    keys = rng.integers(0, np.iinfo(np.uint64).max, a.keys, dtype=np.uint64, endpoint=True)
    keys[:2] = [0, np.iinfo(np.uint64).max]
    values = rng.integers(0, np.iinfo(np.uint64).max, a.keys, dtype=np.uint64, endpoint=True)
    batches = [keys[rng.integers(0, a.keys, a.batch)] for _ in range(8)]
    probe = keys[rng.integers(0, a.keys, a.point_calls)].tolist()
    py_rates, cpp_rates = [], []
    for r in range(a.rounds):
        if r and a.tandem_bench:
            time.sleep(a.settle)
        with tandem.Index(threads=a.threads, device=a.device) as idx:
            t = time.perf_counter()
            idx.load(keys, values)
            load_s = time.perf_counter() - t
            for b in batches[:4]:  # warm-up: the index's batch pools, the GPU
                idx.get(b)
            ops, i, t = 0, 0, time.perf_counter()
            while True:
                got, found = idx.get(batches[i % len(batches)])
                ops += a.batch
                i += 1
                elapsed = time.perf_counter() - t
                if elapsed >= a.seconds:
                    break
            assert found.all()
            py_rates.append(ops / elapsed / 1e6)
            if r == 0:
                print(f"device: {idx.stats()['device']}")
                print(f"load: {len(idx)} keys in {load_s:.2f} s")
            print(f"round {r + 1}: python idx.get, batches of {a.batch}: {py_rates[-1]:.2f} M gets/s ({i} batches)")
            if r == 0:
                lat = np.empty(len(probe), dtype=np.int64)
                get = idx.get
                clock = time.perf_counter_ns
                for j, k in enumerate(probe):
                    t0 = clock()
                    get(k)
                    lat[j] = clock() - t0
                p50, p99 = np.percentile(lat, [50, 99]) / 1e3
                print(f"python one-key idx.get: p50 {p50:.2f} us, p99 {p99:.2f} us ({len(probe)} calls)")
        if a.tandem_bench:
            cmd = [a.tandem_bench, "-w", "C", "--keys", str(a.keys), "--batch", str(a.batch),
                   "--ops", str(a.batch * 64), "--inflight", "1", "--threads", str(a.threads),
                   "--device", a.device, "--no-baselines", "--no-probe"]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            m = re.search(r"^tandem +([0-9.]+) M ops/s", out, re.M)
            if r == 0:
                print("+ " + " ".join(cmd))
            if m:
                cpp_rates.append(float(m.group(1)))
                print(f"round {r + 1}: C++ execute (1 batch in flight): {cpp_rates[-1]:.2f} M ops/s")
    if cpp_rates:
        py, cpp = float(np.median(py_rates)), float(np.median(cpp_rates))
        print(f"median of {a.rounds}: python {py:.2f}, C++ {cpp:.2f} M ops/s; python / C++ = {py / cpp:.3f}")
        pairs = np.array(py_rates[:len(cpp_rates)]) / np.array(cpp_rates)
        q1, med, q3 = np.percentile(pairs, [25, 50, 75])
        print(f"round by round python / C++: median {med:.3f}, quartiles {q1:.3f}-{q3:.3f}, "
              f"range {pairs.min():.3f}-{pairs.max():.3f}")


if __name__ == "__main__":
    main()
