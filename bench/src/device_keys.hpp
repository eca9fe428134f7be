#pragma once
/// @file
/// --keys-on gpu: tandem given a GPU pipeline's arrays. Each batch's keys
/// and its answer arrays live in the memory of the index's GPU (uploaded
/// before timing, as a pipeline's keys already are there), and each batch
/// is handed to the index as device columns (index::submit of `columns`
/// with `device` set), up to --inflight in flight. Timed from the first
/// submit to the last future; the answers are then brought down and
/// compared with the same gets as host columns.
#include "baselines.hpp"

#include <tandem/tandem.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem_bench {

struct device_keys_figures {
  run_figures run;                 ///< ops, seconds, hits (found answers)
  std::uint64_t pcie_bytes = 0;    ///< bytes the index moved over PCIe in the run (stats)
  std::uint64_t cache_lookups = 0, cache_hits = 0;  ///< gets looked up in the leaf copies, answered there
  std::uint64_t mismatches = 0;    ///< answers unlike those of host columns (0 expected)
  double route_seconds = 0;        ///< the index's route stage, summed over the run's batches
  double last_kernel = 0, last_route = 0;  ///< the latest batch's GPU kernel time and GPU route wall time
};

/// @throws std::invalid_argument for ops that are not gets
device_keys_figures run_device_keys(tandem::index& idx, const std::vector<std::vector<tandem::op>>& batches,
                                    int device, std::size_t inflight);

}  // namespace tandem_bench
