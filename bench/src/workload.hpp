#pragma once
/// @file
/// tandem-bench workloads: the loaded key set, the key distributions and the
/// op sequence (all batches), generated up front with fixed seeds so every
/// system (tandem, the baselines, the verification model) sees exactly the
/// same keys, values and batches.

#include <tandem/batch.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tandem_bench {

/// YCSB-style mixes (see describe()).
enum class workload_kind { load, c, a, b, e, scan, count };
/// How op keys are drawn from the loaded keys (by rank in key order).
enum class key_dist { uniform, zipf, sequential };

[[nodiscard]] const char* to_string(workload_kind w) noexcept;
[[nodiscard]] const char* to_string(key_dist d) noexcept;
/// One line saying what a workload runs, e.g. "100% get".
[[nodiscard]] std::string describe(workload_kind w, std::uint64_t scan_length, tandem::scan_order order);

/// YCSB's zipfian constant.
inline constexpr double zipf_theta = 0.99;
/// Longest scan of workload E (lengths are uniform in 1..e_max_scan).
inline constexpr std::uint64_t e_max_scan = 100;

struct workload_spec {
  workload_kind kind = workload_kind::c;
  key_dist dist = key_dist::uniform;
  std::uint64_t keys = 0;   ///< keys loaded (>= 2: 0 and UINT64_MAX are always among them)
  std::uint64_t ops = 0;    ///< ops after the load
  std::uint64_t batch = 0;  ///< ops per batch (the last batch may be shorter)
  std::uint64_t seed = 0;
  std::uint64_t scan_length = 0;                           ///< entries per scan of the `scan` workload
  tandem::scan_order order = tandem::scan_order::ordered;  ///< order of the `scan` workload's scans
  bool sorted_load = false;  ///< the pairs to load come in key order (else in a random order)
};

/// Everything a run needs, built before any timing starts.
struct dataset {
  /// The pairs to load, in a random order or, with spec.sorted_load, in key
  /// order (what `index::load` gets).
  std::vector<tandem::key_type> load_keys;
  std::vector<tandem::value_type> load_values;
  /// The op sequence, batch by batch.
  std::vector<std::vector<tandem::op>> batches;
  std::uint64_t new_keys = 0;  ///< distinct keys, absent from the load, that the ops insert
};

/// Value stored with `key` by the load and by inserts.
[[nodiscard]] tandem::value_type load_value(tandem::key_type key) noexcept;
/// Value written by a put of `key` in batch `batch_no`: every put of one key
/// in one batch writes the same value, so the final contents do not depend
/// on the order in which the baselines run a batch's ops.
[[nodiscard]] tandem::value_type put_value(tandem::key_type key, std::uint64_t batch_no) noexcept;

/// Steps of make_dataset, for a progress bar: called with 1..dataset_steps.
inline constexpr std::size_t dataset_steps = 4;

/// Builds the dataset (parallel, deterministic for a given spec); calls
/// `progress` (when set) with the number of steps done.
[[nodiscard]] dataset make_dataset(const workload_spec& spec,
                                   const std::function<void(std::size_t)>& progress = {});

/// `count` batches of `batch` ops on uniformly drawn loaded keys (own seed,
/// apart from the measured ops), in the workload's mix of reads, with its
/// writes replaced by inserts of loaded keys, which are present (no
/// workload erases): C gets; A, B and load gets and such inserts, every
/// other op; E and scan their scans (E with 5% such inserts). Untimed
/// warm-up batches that go the workload's way through the index (args and
/// types, scan output) but change nothing, so they may run before a
/// measured run of any workload without changing its answers.
[[nodiscard]] std::vector<std::vector<tandem::op>> make_warmup_batches(const dataset& ds, const workload_spec& spec,
                                                                       std::uint64_t count);
/// What the warm-up batches of workload `w` hold, for the run's header.
[[nodiscard]] const char* describe_warmup(workload_kind w) noexcept;

}  // namespace tandem_bench
