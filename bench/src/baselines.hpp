#pragma once
/// @file
/// The systems tandem-bench compares tandem with, run on the same keys, the
/// same batches and the same number of threads:
///
/// - absl: absl::btree_map split by key range into S shards (S a power of
///   two; shard = top log2(S) bits of the key), each shard behind its own
///   std::shared_mutex: shared lock for get/lower_bound/scan/count, exclusive
///   lock for put/insert/erase. S = 1 is one map behind one shared_mutex.
///   Scans and lower_bounds that run past a shard's key range continue in
///   the next shard. Bulk load: parallel sort of the pairs, then each shard
///   is built from its sorted run (insert with an end hint), shards in
///   parallel.
/// - tbb: tbb::concurrent_map<uint64, std::atomic<uint64>> (a lock-free skip
///   list); values are atomics so a put racing a get of the same key is not a
///   data race. Its erase is not concurrency-safe (the workloads never erase;
///   an erase op throws). Bulk load: parallel inserts of the unsorted pairs.
///
/// Each batch runs as tbb::parallel_for over its ops inside a
/// tbb::task_arena of T threads; batches run one after another. Unlike
/// tandem, ops of one batch run concurrently in no particular order, so a
/// read may or may not see a write of the same batch: the baselines do not
/// give batch-sequential semantics. Scan entries are copied into per-thread
/// buffers (reused), as a caller would copy them out.

#include <tandem/batch.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem_bench {

/// What one timed run of batches measured.
struct run_figures {
  double seconds = 0;
  std::uint64_t ops = 0;
  std::uint64_t hits = 0;     ///< ops whose answer had found = true
  std::uint64_t entries = 0;  ///< scan entries returned, plus the answers of counts
};

/// Called after each batch with (batches done, batches in all).
using progress_fn = std::function<void(std::size_t, std::size_t)>;

class baseline {
 public:
  virtual ~baseline() = default;
  /// Short name for tables: "absl", "tbb".
  [[nodiscard]] virtual std::string name() const = 0;
  /// What it is and how it is guarded, one line.
  [[nodiscard]] virtual std::string description() const = 0;
  /// Bulk-loads `n` distinct pairs in any order; returns the seconds it took.
  virtual double load(const tandem::key_type* keys, const tandem::value_type* values, std::size_t n) = 0;
  /// Runs the batches one after another, each in parallel; timed inside.
  virtual run_figures run(const std::vector<std::vector<tandem::op>>& batches, const progress_fn& progress) = 0;
  /// Answers one batch on the calling thread, op after op (a client of the
  /// latency sweep; any number of threads at once). @return its hits
  virtual std::uint64_t answer_here(const std::vector<tandem::op>& ops) = 0;
  [[nodiscard]] virtual std::size_t size() const = 0;
  /// Visits every pair in key order (not timed; for --verify).
  virtual void for_each(const std::function<void(tandem::key_type, tandem::value_type)>& f) const = 0;
};

/// @param shards a power of two in [1, 2^16]
[[nodiscard]] std::unique_ptr<baseline> make_absl_baseline(std::size_t threads, std::size_t shards);
[[nodiscard]] std::unique_ptr<baseline> make_tbb_baseline(std::size_t threads);

}  // namespace tandem_bench
