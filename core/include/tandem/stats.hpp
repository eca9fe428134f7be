#pragma once
/// @file
/// `tandem::stats`: counters and timings of an index, read with
/// `index::stats()` (a consistent snapshot taken between batches).

#include <tandem/batch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem {

/// Wall-clock seconds spent in each stage of a batch (DESIGN, "One batch").
struct stage_times {
  double validate = 0;  ///< checking ops, building the work arrays
  double route = 0;     ///< keys -> leaves (inner-level descent) and grouping by leaf
  double order = 0;     ///< sorting each leaf's group by (key, position)
  double read = 0;      ///< scans, counts, lower_bounds on the pre-batch state
  double leaf = 0;      ///< point ops on the leaves, splits
  double sync = 0;      ///< merging new separators, rebuilding the inner layout
  double complete = 0;  ///< patching scans, scattering results to batch order
  /// Calls f("validate", &stage_times::validate), f("route",
  /// &stage_times::route), ... once per stage, in the order above: the one
  /// list of the fields, which sums and differences of stage times (here, in
  /// tandem-bench and in the Python stats) go over.
  template <class F>
  static void for_each_field(F&& f) {
    f("validate", &stage_times::validate);
    f("route", &stage_times::route);
    f("order", &stage_times::order);
    f("read", &stage_times::read);
    f("leaf", &stage_times::leaf);
    f("sync", &stage_times::sync);
    f("complete", &stage_times::complete);
  }
  [[nodiscard]] double sum() const noexcept {
    double s = 0;
    for_each_field([&](const char*, auto field) { s += this->*field; });
    return s;
  }
  stage_times& operator+=(const stage_times& o) noexcept {
    for_each_field([&](const char*, auto field) { this->*field += o.*field; });
    return *this;
  }
};

/// Bytes each stage of a batch read and wrote in host memory or moved over
/// PCIe (DESIGN, "Batch memory"): with stage_times, how close a stage runs
/// to memory or bus bandwidth.
struct stage_bytes {
  std::uint64_t validate = 0, route = 0, order = 0, read = 0, leaf = 0, sync = 0, complete = 0;
  std::uint64_t pcie = 0;  ///< of the above, bytes that crossed PCIe (keys up, routes and answers both ways)
  /// Calls f("validate", &stage_bytes::validate), ..., f("complete",
  /// &stage_bytes::complete), f("pcie", &stage_bytes::pcie): the one list
  /// of the fields (see stage_times).
  template <class F>
  static void for_each_field(F&& f) {
    f("validate", &stage_bytes::validate);
    f("route", &stage_bytes::route);
    f("order", &stage_bytes::order);
    f("read", &stage_bytes::read);
    f("leaf", &stage_bytes::leaf);
    f("sync", &stage_bytes::sync);
    f("complete", &stage_bytes::complete);
    f("pcie", &stage_bytes::pcie);
  }
  stage_bytes& operator+=(const stage_bytes& o) noexcept {
    for_each_field([&](const char*, auto field) { this->*field += o.*field; });
    return *this;
  }
};

/// Batches counted by latency, in powers of two of microseconds: bucket 0
/// holds latencies below 2 us, bucket i in [2^i, 2^(i+1)) us, the last
/// bucket everything from 2^31 us on. Counts since the index was made;
/// subtract an earlier snapshot's counts for a window.
struct latency_histogram {
  static constexpr std::size_t bucket_count = 32;
  std::array<std::uint64_t, bucket_count> buckets{};

  /// Adds one latency of `seconds`.
  void add(double seconds) noexcept {
    const double us = seconds * 1e6;
    std::size_t b = 0;
    while (b + 1 < bucket_count && us >= static_cast<double>(std::uint64_t{2} << b)) ++b;
    ++buckets[b];
  }
  [[nodiscard]] std::uint64_t count() const noexcept {
    std::uint64_t n = 0;
    for (std::uint64_t c : buckets) n += c;
    return n;
  }
  /// Upper end, in microseconds, of the bucket holding the p-th percentile
  /// (p in [0, 100]); 0 when empty. An upper bound within a factor of two.
  [[nodiscard]] double percentile_us(double p) const noexcept {
    const std::uint64_t n = count();
    if (n == 0) return 0;
    auto rank = static_cast<std::uint64_t>(p / 100.0 * static_cast<double>(n) + 0.999999);
    if (rank < 1) rank = 1;
    std::uint64_t seen = 0;
    for (std::size_t b = 0; b < bucket_count; ++b) {
      seen += buckets[b];
      if (seen >= rank) return static_cast<double>(std::uint64_t{2} << b);
    }
    return static_cast<double>(std::uint64_t{2} << (bucket_count - 1));
  }
};

struct stats {
  std::uint64_t batches = 0;         ///< batches completed (failed ones included)
  std::uint64_t failed_batches = 0;  ///< batches whose future holds an exception
  std::uint64_t grouped_batches = 0; ///< batches run together with others (group commit)
  std::uint64_t ops = 0;             ///< ops in completed batches
  std::uint64_t invalid_ops = 0;     ///< ops answered with a status other than ok (invalid, output_limit)
  std::array<std::uint64_t, op_type_count> ops_by_type{};  ///< indexed by op_type
  std::uint64_t splits = 0;          ///< leaf splits
  std::uint64_t merges = 0;          ///< leaf merges (a leaf emptied into its left neighbour)
  std::uint64_t compactions = 0;     ///< index::compact calls that ran
  std::uint64_t inner_syncs = 0;     ///< inner-layout rebuilds
  /// How the latest index::load ran: pairs, seconds and how they were put
  /// in key order ("input in key order", "GPU sort in 1 run (...)", "CPU
  /// radix sort"); empty before the first load.
  std::string last_load;
  std::uint64_t callback_errors = 0; ///< exceptions thrown by user callbacks
  std::string last_callback_error;   ///< what() of the latest one

  // Durability (config.storage_dir; all 0 or empty without it).
  std::uint64_t log_bytes = 0;       ///< bytes of the redo log file
  std::uint64_t log_records = 0;     ///< records appended since the index opened (one per batch with writes)
  std::uint64_t log_syncs = 0;       ///< fdatasyncs of the log since the index opened
  std::uint64_t checkpoints = 0;     ///< checkpoints written (index::checkpoint, load, open)
  std::uint64_t replayed_batches = 0;  ///< log records replayed when the index opened
  double recovery_seconds = 0;       ///< opening: checkpoint loaded and log replayed
  /// Why the log failed (batches with writes are refused until a
  /// checkpoint succeeds); empty while it works.
  std::string log_error;

  std::uint64_t keys = 0;            ///< keys held
  std::uint64_t leaves = 0;          ///< leaves in the leaf table
  /// Leaves that merges emptied, kept until no route can reach them and
  /// then reused by splits, or dropped by index::compact (leaf_bytes counts
  /// them).
  std::uint64_t dead_leaves = 0;
  int inner_height = 0;              ///< inner levels above the leaves
  std::size_t inner_bytes = 0;       ///< size of the inner layout
  std::size_t leaf_bytes = 0;        ///< host memory of the leaves, dead ones included (keys, values, fences, BPA headers)
  /// Leaf guides (config.gpu_leaf_hints): the host's copy, and as much
  /// again on the GPU (in gpu_bytes). 0 without a GPU or with hints off.
  std::size_t guide_bytes = 0;
  /// Host memory of the index's data: leaf_bytes + inner_bytes + the
  /// inner layout's radix table (host only: low keys and 36 bytes an
  /// interval, inner_layout::radix) + guide_bytes. Batch
  /// buffers (pools sized by the largest batch, not by the data) are not
  /// counted.
  std::size_t host_bytes = 0;
  /// Device memory the index holds: its inner layout (two versions while
  /// one is re-synced), the leaf guides and the GPU's grow-only route and
  /// scatter arrays, sized by the largest batch so far (under
  /// config.max_gpu_bytes, by what the budget leaves). 0 without a GPU.
  /// With config.gpu_devices, the first GPU's (each other one holds about
  /// as much).
  std::size_t gpu_bytes = 0;
  /// config.max_gpu_bytes (0: no bound); gpu_bytes stays at or below it.
  std::size_t gpu_budget_bytes = 0;
  /// Most keys one GPU route takes now: config.max_gpu_route_keys or what
  /// the budget leaves for route arrays, the smaller (0: no bound).
  std::size_t gpu_route_keys = 0;
  /// Leaf guides left off the GPU to keep within max_gpu_bytes (no hints).
  bool guides_dropped = false;
  /// The GPU keeps compact leaf guides (56 bytes a leaf, not 304) to keep
  /// within max_gpu_bytes: a few keys a leaf get no hint.
  bool guides_compact = false;
  std::size_t threads = 0;           ///< worker threads of the arena

  std::string device;                ///< where routing runs, e.g. "cpu (no GPU: ...)"
  double gpu_share = 0;              ///< share of the last batch's keys routed on the GPU
  bool gpu_share_auto = false;       ///< the share is chosen automatically
  bool gpu_degraded = false;         ///< repeated GPU failures: routing stays on the CPU
  std::uint64_t gpu_failures = 0;    ///< GPU routes or uploads that failed (re-routed on the CPU)
  std::uint64_t gpu_keys = 0;        ///< keys routed on the GPU
  std::uint64_t cpu_keys = 0;        ///< keys routed on the CPU
  std::string gpu_group_sizes;       ///< threads per query per inner level on the GPU, root first
  double gpu_rate = 0;               ///< moving average of the GPU's routing rate, keys/s
  double cpu_rate = 0;               ///< moving average of the CPU's routing rate, keys/s
  /// GPU route stages of the latest batch, seconds: upload of keys, sorts,
  /// descent kernel, download (GPU event times; chunks overlap).
  double gpu_upload = 0, gpu_sort = 0, gpu_kernel = 0, gpu_download = 0;
  double gpu_route = 0;              ///< wall time of the GPU side of the latest route
  double cpu_route = 0;              ///< wall time of the CPU side of the latest route

  std::uint64_t gpu_scatters = 0;    ///< batches whose answers went back to batch order on the GPU
  std::uint64_t host_scatters = 0;   ///< ... on the host
  /// Batches of gets answered directly (config.direct_get_ops), those
  /// answered on the submitting thread included.
  std::uint64_t direct_batches = 0;
  std::uint64_t caller_batches = 0;  ///< batches answered on the submitting thread (config.caller_runs)
  /// One-key reads of index::get, contains and lower_bound (not counted in
  /// `batches` or `ops`).
  std::uint64_t point_reads = 0;
  /// One-key writes of index::put, insert and erase applied on their
  /// callers (those that change no leaf's shape; config.caller_runs), not
  /// counted in `batches` or `ops`; the others go through the queue as
  /// one-op batches.
  std::uint64_t point_writes = 0;
  /// Point ops of GPU-routed batches answered at the block and window their
  /// route hinted (config.gpu_leaf_hints), and those whose hint was missing
  /// or stale; refreshes of the GPU's leaf guides (loads included).
  std::uint64_t hinted_ops = 0, stale_hints = 0, guide_refreshes = 0;

  /// The leaf cache (config.gpu_cache_bytes; DESIGN, "Leaf cache").
  /// Where the copies are: "gpu", "host" (the stand-in), "off", "off
  /// (auto: the leaves do not fit)" (gpu_cache_auto with more leaves than
  /// slots at the latest load or compaction), or "off (the GPU copies
  /// failed: ...)" after a failed copy to the GPU (GPU routing goes on
  /// without them).
  std::string cache = "off";
  std::size_t cache_bytes = 0;           ///< memory the copies hold (in gpu_bytes when on the GPU; one GPU's)
  std::size_t cache_capacity_bytes = 0;  ///< bytes of the slots: at most this much of leaves is copied
  std::uint64_t cache_slots = 0;         ///< leaves the copies can hold at once
  std::uint64_t cached_leaves = 0;       ///< leaves whose copy is current
  /// Gets of batches looked up in the copies (batches of gets, or of point
  /// ops with writes), and those answered there (found or absent), in all
  /// and in the latest such batch.
  std::uint64_t cache_lookups = 0, cache_hits = 0;
  std::uint64_t cache_last_lookups = 0, cache_last_hits = 0;
  /// Share of the latest routed batch's gets whose leaf had a current copy
  /// (answered there, or would have been had the batch looked). Batches
  /// look in the copies while it is at least 0.75 (GPU); 1 after a load or
  /// compaction that copies every leaf.
  double cache_held = 0;
  std::uint64_t cache_copies = 0;        ///< leaf copies made (loads, admissions)
  std::uint64_t cache_synced_bytes = 0;  ///< bytes of entries copied for them, in all
  std::size_t cache_last_synced_bytes = 0;  ///< ... by the latest batch's sync
  std::uint64_t cache_evictions = 0;     ///< slots taken from one leaf for a hotter one
  std::uint64_t cache_claims = 0;        ///< current copies made unusable by writes
  std::uint64_t cache_patched = 0;       ///< current copies kept current: a batch's writes to the leaf, puts of
                                         ///< keys the copy held, written into it too

  /// Per batch: from submit until the dispatcher took it up (queue wait),
  /// and from then until its answer was handed over (execution).
  latency_histogram queue_wait, execution;

  /// Leaf cache lines that point ops move, counted on a sample after the
  /// ops ran (one leaf group of a routed batch in leaf_line_sample, one get
  /// answered directly in leaf_line_sample): the distinct lines of each
  /// leaf that the sampled ops' lookups read (the leaf's first line, the
  /// header entries compared, the window of entries, which holds the
  /// values) plus the lines their writes dirty, and the ops counted.
  /// leaf_lines / leaf_line_ops is what a point op moves between the leaves
  /// and the cores where no cache holds them: against a probe of random
  /// reads, the bound the leaves put on point ops. Lines of the inner
  /// layout and of batch arrays are not counted.
  std::uint64_t leaf_lines = 0, leaf_line_ops = 0;
  static constexpr std::size_t leaf_line_sample = 64;

  stage_times total;                 ///< summed over all batches
  stage_bytes total_bytes;           ///< summed over all batches
  stage_times last;                  ///< of the latest batch
  std::uint64_t last_batch_ops = 0;  ///< ops in the latest batch
};

}  // namespace tandem
