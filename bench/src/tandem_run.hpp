#pragma once
/// @file
/// One timed run of tandem in tandem-bench: the batches go through
/// `index::submit(batch, callback)` with up to K in flight, timed from the
/// first submit to the last result. The callback runs on the index's
/// dispatcher right after the batch's stats were published and before the
/// next batch starts, so `index::stats()` read there belongs to exactly that
/// batch: that is how the per-batch GPU route fields (gpu_upload, gpu_sort,
/// gpu_kernel, gpu_download, gpu_route, cpu_route: "of the latest batch" in
/// tandem::stats) are summed over a run.

#include "alloc_count.hpp"
#include "baselines.hpp"

#include <tandem/tandem.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem_bench {

/// tandem::stats' per-batch routing fields, summed over a run's batches
/// (seconds). The four GPU stages are GPU event times whose chunks overlap;
/// gpu_route and cpu_route are the wall times of the two sides of the route
/// stage, which run at the same time.
struct route_sums {
  double gpu_upload = 0, gpu_sort = 0, gpu_kernel = 0, gpu_download = 0;
  double gpu_route = 0, cpu_route = 0;
};

struct tandem_figures {
  run_figures run;
  tandem::stage_times stages;  ///< summed over the run's batches
  tandem::stage_bytes bytes;   ///< summed over the run's batches (stats().total_bytes difference)
  std::uint64_t batches = 0;   ///< batches completed in the run (stats().batches difference)
  route_sums route;            ///< summed over the run's batches
  std::uint64_t gpu_keys = 0;  ///< keys routed on the GPU in the run
  std::uint64_t cpu_keys = 0;  ///< keys routed on the CPU in the run (GPU failures re-routed included)
  double last_share = 0;       ///< stats().gpu_share after the last batch
  std::uint64_t splits = 0;
  std::uint64_t gpu_failures = 0;  ///< GPU routes that failed in the run
  std::uint64_t gpu_scatters = 0;  ///< batches whose answers went back to batch order on the GPU
  std::uint64_t host_scatters = 0; ///< ... on the host
  std::uint64_t direct_batches = 0; ///< batches of gets answered directly (no route, no scatter)
  std::uint64_t hinted_ops = 0;    ///< point ops answered at their route's hint (config.gpu_leaf_hints)
  std::uint64_t stale_hints = 0;    ///< point ops whose hint was missing or stale
  std::uint64_t cache_lookups = 0;  ///< gets looked up in the leaf copies (config.gpu_cache_bytes)
  std::uint64_t cache_hits = 0;     ///< ... and answered there
  std::uint64_t cache_synced_bytes = 0;  ///< bytes of entries copied into the leaf cache
  std::uint64_t cache_evictions = 0;
  std::uint64_t cache_patched = 0;  ///< leaf copies kept current by writes written into them
  std::uint64_t guide_refreshes = 0; ///< refreshes of the GPU's leaf guides in the run
  std::uint64_t range_ops = 0;     ///< lower_bounds, scans and counts in the run
  /// Sampled point ops of the run and the leaf lines they moved
  /// (stats().leaf_line_ops and leaf_lines differences).
  std::uint64_t leaf_line_ops = 0, leaf_lines = 0;
  /// Heap allocations of the whole process during the timed run (the
  /// bench's own bookkeeping in the completion callback excepted); valid
  /// when allocs_counted (not in sanitizer builds).
  alloc_count::counts allocs;
  bool allocs_counted = false;
  tandem::stats after;             ///< the index's stats after the run
  std::vector<tandem::batch_result> kept;  ///< every result, when asked to keep them

  /// Host bytes (the stages' bytes less those that crossed PCIe).
  [[nodiscard]] std::uint64_t host_bytes() const noexcept {
    std::uint64_t all = 0;  // the stages' bytes (pcie is a part of them, not a stage)
    tandem::stage_bytes::for_each_field([&](const char*, auto field) {
      if (field != &tandem::stage_bytes::pcie) all += bytes.*field;
    });
    return all > bytes.pcie ? all - bytes.pcie : 0;
  }

  /// Leaf lines a point op moved, from the sample; 0 when none was counted.
  [[nodiscard]] double leaf_lines_per_op() const noexcept {
    return leaf_line_ops ? static_cast<double>(leaf_lines) / static_cast<double>(leaf_line_ops) : 0.0;
  }

  /// Share of the run's keys routed on the GPU: the batch-size-weighted mean
  /// of stats().gpu_share over the run's batches.
  [[nodiscard]] double share_used() const noexcept {
    const std::uint64_t all = gpu_keys + cpu_keys;
    return all ? static_cast<double>(gpu_keys) / static_cast<double>(all) : 0.0;
  }
};

/// @brief Runs `batches` on `idx` (tandem::batch objects are built from them
///        before timing, with the bulk appends where a batch is of one op
///        type) with at most `inflight` batches queued. Each result is
///        destroyed once counted (its answer columns go back to the index's
///        pools for later batches) unless `keep_results`.
/// @param label progress-bar label
/// @throws std::runtime_error naming the first batch that failed, once every
///         batch in flight has completed
[[nodiscard]] tandem_figures run_tandem(tandem::index& idx, const std::vector<std::vector<tandem::op>>& batches,
                                        std::size_t inflight, bool keep_results, const std::string& label);

/// `a - b`, field by field (tandem::stage_times or tandem::stage_bytes).
template <class Stages>
[[nodiscard]] Stages stage_difference(const Stages& a, const Stages& b) {
  Stages d;
  Stages::for_each_field([&](const char*, auto field) { d.*field = a.*field - b.*field; });
  return d;
}

/// Appends `ops` to `b`: whole columns (get/put/insert/erase/lower_bound of
/// arrays) when every op has one type, else op by op.
void build_batch(const std::vector<tandem::op>& ops, tandem::batch& b);

}  // namespace tandem_bench
