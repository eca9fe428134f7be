#pragma once
/// @file
/// The host memory probe of tandem-bench: with the bench's thread count,
/// sequential read and write bandwidth and the rate of random independent
/// 8-byte reads over one array, measured before the timed runs (not timed
/// with them), so tandem's host bytes per op can be set against what the
/// machine's memory delivers.
///
/// The array holds min(1 GiB, keys * 16 bytes) rounded up to a power of two
/// (at least 1 MiB), and at most a quarter of the memory the system reports
/// available; it is ordinary heap memory, like the index's leaves. It is
/// filled before timing for at most `fill_seconds`: where first-touch page
/// faults are slow (VMs) only the filled prefix, rounded down to a power of
/// two, is used, and probe_figures::array_bytes says how much. Each
/// measurement then runs for `seconds_each`, work handed out in 1 MiB slices
/// (random reads: 64K reads per unit), so the probe takes about
/// fill_seconds + 3 * seconds_each at most, whatever the array size.

#include <cstddef>
#include <cstdint>

namespace tandem_bench {

struct probe_figures {
  std::size_t array_bytes = 0;  ///< the part of the array measured
  std::size_t threads = 0;
  double read_gbs = 0;         ///< sequential read, GB/s (1e9 bytes)
  double write_gbs = 0;        ///< sequential write, GB/s
  double random_reads_s = 0;   ///< random independent 8-byte reads per second
  double seconds = 0;          ///< the probe's whole time, allocation and fill included
};

/// @param keys the run's loaded keys (sizes the array)
/// @throws std::bad_alloc when even the smallest array cannot be had
[[nodiscard]] probe_figures run_memory_probe(std::size_t threads, std::uint64_t keys, double seconds_each = 0.25,
                                             double fill_seconds = 0.5);

}  // namespace tandem_bench
