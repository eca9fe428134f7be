#pragma once
/// @file
/// `tandem::config`: how an index is built and run. Every field has a
/// sensible default; `index`'s constructor checks the values and throws
/// std::invalid_argument naming the field that is out of range.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

/// Where the inner-level descent (routing) runs.
enum class device_kind : std::uint8_t {
  automatic,  ///< a GPU when one works, else the CPU (stats say which)
  cpu,        ///< the CPU only
  gpu,        ///< a GPU is required: construction fails when none is usable
};

/// How the GPU orders a batch's keys before the inner-level descent.
enum class gpu_query_order : std::uint8_t {
  full_sort,     ///< sort (key, position) on all 64 key bits: the GPU also
                 ///< hands back each leaf's ops in key order (the host sorts nothing)
  partial_sort,  ///< sort on the top log2(keys / 8) key bits (Harmonia's PSA);
                 ///< the host sorts each leaf's ops by key
  none,          ///< batch order; the host sorts each leaf's ops by key
};

/// Tag for `index::set_gpu_share(tandem::auto_share)`: let the index pick the
/// share so that the GPU and the CPU finish routing a batch together.
struct auto_share_t {
  explicit constexpr auto_share_t() = default;
};
inline constexpr auto_share_t auto_share{};

/// When the redo log (config.storage_dir) makes a batch's record durable.
/// Every policy writes the record to the operating system before the batch's
/// answer is released, so a crash of the process (SIGKILL included) loses no
/// acknowledged batch under any of them; they differ in what a crash of the
/// machine (power loss, kernel panic) may lose.
enum class log_sync : std::uint8_t {
  none,   ///< never fdatasync while running (the OS writes back when it
          ///< likes; closing the index syncs): a machine crash may lose
          ///< any acknowledged batch not yet written back
  group,  ///< answers wait for the write only; the index's syncer thread
          ///< fdatasyncs what was written once per config.log_group_us:
          ///< a machine crash may lose the acknowledged batches of about
          ///< the last window (and of a sync under way)
  batch,  ///< each answer waits for an fdatasync that covers its record (one
          ///< sync covers every record written before it: batches folded by
          ///< group commit, or written while the previous sync ran, share
          ///< it): a machine crash loses nothing acknowledged
};

/// config::gpu_cache_bytes chosen from the GPU's free memory.
inline constexpr std::size_t gpu_cache_auto = ~std::size_t{0};

struct config {
  /// Worker threads of the index's TBB arena (routing and leaf phase);
  /// 0 means one per hardware thread. Range: 0, or [1, 4096].
  std::size_t threads = 0;
  /// Fanout of the inner B+tree nodes. Range: 16, 32 or 64.
  int fanout = 32;
  /// Fill factor of leaves written by `index::load`: room left for inserts
  /// before leaves split. Range: [0.0625, 1]. A leaf holds 1024 keys, so
  /// the lowest fill, 1/16, still loads 64 into each (two of its 32
  /// blocks). Below it a load makes more than 16 times the leaves of a
  /// full one (0.002 puts 2 keys in a leaf: 1,502 leaves for 3,003 keys);
  /// memory, inner levels and the leaves each op reads grow with them,
  /// for room that inserts do not need.
  double leaf_fill = 0.75;
  /// Where routing runs (see device_kind). Range: the enumerators of
  /// device_kind (an integer cast to it outside them is rejected).
  device_kind device = device_kind::automatic;
  /// CUDA ordinal of the GPU the index routes on (as the CUDA runtime
  /// numbers the devices this process sees: CUDA_VISIBLE_DEVICES applies),
  /// so that one process can hold indexes on different GPUs. Every CUDA
  /// call of the index runs with this device current on its thread, and
  /// the caller's current device is put back after construction and
  /// destruction. An ordinal that no GPU has: with device = gpu the
  /// constructor throws tandem::error naming the ordinal and how many GPUs
  /// were found; with automatic the index routes on the CPU and
  /// stats().device says why. stats().device names the ordinal in use
  /// ("gpu 1: NVIDIA H200 ..."). Range: [0, 1023].
  int gpu_device = 0;
  /// Several GPUs of the host for one index (empty: gpu_device alone). The
  /// first is the index's GPU as gpu_device would be (gpu_device is not
  /// read; a first GPU that is missing is handled as gpu_device's); each of
  /// the others holds the inner levels and, with the leaf cache, the same
  /// leaf copies (config.gpu_cache_bytes on each), and a batch of gets
  /// from host arrays that the copies take is cut by position, each GPU
  /// answering its part from its own memory over its own link. Other
  /// batches (writes, with gpu_cache_writes too; device columns) route on
  /// the first. Another GPU that this process does not see or cannot open:
  /// with device = gpu the constructor throws naming its place in the list;
  /// with automatic it is left out and stats().device says so. One that
  /// fails later is dropped. Range: at most 16 ordinals, each in
  /// [0, 1023], none twice.
  std::vector<int> gpu_devices;
  /// Batches with fewer ops than this route on the CPU only. Range: any;
  /// 0 and 1 let every batch use the GPU.
  std::size_t min_gpu_batch = 1u << 14;
  /// Batches of at most this many ops run every stage on the dispatcher
  /// thread alone (no worker is woken, nothing fans out): a small batch
  /// costs less than the hand-offs to other threads would. A batch whose
  /// scans may return more than 64 entries per op of this bound together
  /// (by their limits: 4096 entries by default) is not small: its copying
  /// goes to the workers. 0: never. Range: [0, 2^32]: a batch holds at
  /// most 2^32 - 2 ops, so a larger bound says nothing more, and the scan
  /// bound (64 entries an op of it, in bytes) stays far within 64 bits.
  std::size_t small_batch_ops = 64;
  /// Batches of gets only with at most this many ops (group-commit batches
  /// counted whole) and at most 4 gets per leaf of the index (or at most
  /// small_batch_ops gets) are answered directly: each get descends the
  /// inner levels on the CPU and reads its leaf, writing its answer in batch
  /// order; no sort, no route arrays, no scatter, no GPU. Gets this few
  /// rarely share a leaf, so ordering them saves few cache misses and costs
  /// passes and hand-offs. With 8 threads or more, such batches (above
  /// small_batch_ops, without callbacks) run as tasks on the workers, as
  /// many at once as a quarter of the threads (at most 4), while the
  /// dispatcher takes up the batches behind them; a batch that writes waits
  /// for them. 0: never. Range: any.
  std::size_t direct_get_ops = std::size_t{1} << 16;
  /// Caller runs: a batch of at most small_batch_ops ops (and at most
  /// direct_get_ops), all gets, lower_bounds and counts, submitted for a
  /// future (`submit(b)`, `execute`, `submit(columns)`) when every write
  /// submitted before it is done, none runs and no reader task of the
  /// index runs, is answered on the submitting thread before `submit`
  /// returns, beside any number of other such batches: no thread is woken
  /// on the way in or out. It takes effect in its place in queue order
  /// (batch_result::sequence: the number of the batch after it). Batches
  /// with a callback, writes or scans, and batches asked while a write is
  /// ahead of them go through the queue. The point reads (index::get,
  /// contains, lower_bound) run on their callers whatever this says; the
  /// one-key writes that change no leaf's shape (index.hpp, "One-key
  /// writes") only while it is true.
  /// false: every batch and one-key write goes through the queue and the
  /// dispatcher thread. Range: any.
  bool caller_runs = true;
  /// Group commit: batches found waiting in the queue together are run as
  /// one batch of at most this many ops (each still takes effect in queue
  /// order, sees the writes of the ones before it, gets its own answers and
  /// its own sequence number), so many clients with small batches share the
  /// fixed costs of one. Batches of more ops run alone, and batches are
  /// folded only while their scans' limits fit group_commit_output_bytes
  /// and max_batch_output_bytes together (the cap stays per batch). 0:
  /// never fold. Range: [0, 2^32 - 2]: a fold runs as one batch, and a
  /// batch holds at most 2^32 - 2 ops (its positions are 32-bit).
  std::size_t group_commit_ops = std::size_t{1} << 16;
  /// Most bytes of scan entries (by the scans' limits) that batches folded
  /// by group commit may return together; a batch whose scans may return
  /// more runs alone. Such a batch already carries its fixed costs, and a
  /// fold's scan output lives in one pooled buffer, which a larger fold
  /// than any before must grow (fresh pages, first touched inside the
  /// batch). 0: batches with scans are not folded. Range: any.
  std::size_t group_commit_output_bytes = std::size_t{1} << 24;
  /// Microseconds the dispatcher keeps looking for the next batch before it
  /// sleeps: a batch submitted within it starts without a wake-up. 0:
  /// sleep at once. Range: [0, 10^6] (one second): the spin keeps a core
  /// busy, and a wake-up costs microseconds; a longer spin is a mistake.
  unsigned dispatcher_spin_us = 50;
  /// Share of each batch's keys routed on the GPU; a negative value means
  /// automatic (see index::set_gpu_share). Range: [0, 1], or any negative
  /// value; NaN is rejected.
  double gpu_share = -1;
  /// Ordering of keys before the GPU descent (all give the same answers).
  /// Range: the enumerators of gpu_query_order (an integer cast to it
  /// outside them is rejected).
  gpu_query_order gpu_order = gpu_query_order::full_sort;
  /// Put a GPU-routed batch's answers back in batch order on the GPU
  /// (sorted answers up, batch-order answers down) instead of on the host.
  /// Batches larger than max_gpu_route_keys (when set; under max_gpu_bytes,
  /// larger than the answers the budget keeps room for) scatter on the
  /// host. Range: any.
  bool gpu_scatter = true;
  /// Keep a guide of each leaf's blocks on the GPU (304 bytes a leaf,
  /// refreshed when the gets of a batch find many of them stale), so that a
  /// GPU route of a gets-only batch hands each get its block and lookup
  /// window with its leaf: the leaf phase then loads the window's lines
  /// without reading the leaf's header first. Answers are the same either way.
  /// Range: any.
  bool gpu_leaf_hints = true;
  /// Bytes of the leaf cache: copies of leaves (their entries in key
  /// order, the buffered log merged in) kept in GPU memory, from which the
  /// gets of a gets-only batch routed on the GPU are answered in the route
  /// itself; only those whose leaf has no current copy go on to the host's
  /// leaves. Host leaves stay the truth: a batch
  /// that writes a leaf makes its copy unusable before any later batch is
  /// routed (see gpu_cache_writes), and copies are (re)made after batches
  /// without writes from the host leaves, hottest missed leaves first
  /// (DESIGN, "Leaf cache"; stats().cache_*). A copy
  /// takes a slot of 16 KiB (a leaf's capacity). Everything is copied at
  /// load when it fits. gpu_cache_auto (the default): half the GPU memory
  /// free when the index is made, used while every leaf fits in it (checked
  /// at each load and compaction: with a part of the leaves cached,
  /// batches ran slower than with none), and none under max_gpu_bytes (there the
  /// budget goes to routes and guides; give a number of bytes to have a
  /// cache within it: at most half the budget, counted against it first).
  /// 0: no cache.
  /// Without a GPU, a number of bytes keeps the copies in host memory (a
  /// stand-in that answers the same way: it costs memory and time and is
  /// there to test the cache's bookkeeping; it answers lower_bounds of
  /// batches without writes as well); gpu_cache_auto means none.
  /// Range: any.
  std::size_t gpu_cache_bytes = gpu_cache_auto;
  /// With the leaf cache: batches of gets, puts, inserts and erases (on the
  /// GPU, with writes at most a quarter of their ops) are answered from the
  /// copies too, and their puts of keys a copy holds are written into the
  /// copy as well as the host leaf, so that such writes keep the copies
  /// current instead of making them unusable. Off by default: on the H200,
  /// workload A (half puts, every leaf cached) ran at 0.87x the uncached
  /// rate this way, since the host still applies every put
  /// (docs/performance.md, "The leaf cache"). Range: any.
  bool gpu_cache_writes = false;
  /// Most keys one GPU route call takes (0: no bound). A batch's GPU share
  /// beyond it goes, with gpu_order full_sort, in key ranges that end at
  /// leaf bounds and hold at most this many ops each, routed one after
  /// another (every range uploads the batch's keys and keeps its own on the
  /// GPU; the ranges' routes concatenate); with the other orders, or when a
  /// range would hold more (many ops on one leaf), in slices of this many
  /// keys by position that the host merges, or on the CPU. Bounds the device
  /// memory the index holds for batches (~60 bytes a key routed at once)
  /// apart from the inner layout and the leaf guides: 2^21 keeps batch
  /// arrays near 130 MB; max_gpu_bytes sizes it from a byte budget. Range:
  /// 0, or [256, 2^32]: each range or slice is a GPU route of its own
  /// (launches, copies), which fewer keys do not repay; a batch holds fewer
  /// than 2^32 keys, so no larger bound is needed.
  std::size_t max_gpu_route_keys = 0;
  /// Most bytes of GPU memory the index holds at any time (0: no bound;
  /// otherwise at least 1 MiB). Counted: both versions of the inner
  /// layout's mirror, the leaf guides, the route and scatter arrays and the
  /// load's sort runs. The index stays within it by giving things up in
  /// this order: the leaf guides are dropped when routes of 2^22 keys do not
  /// fit beside them (no hints; answers are the same); a GPU route takes at
  /// most as many keys as the rest allows (a larger share goes in key
  /// ranges, as with max_gpu_route_keys, the smaller bound winning); room
  /// to scatter a batch's answers on the GPU is kept while routes of 2^20
  /// keys still fit beside it (else the batch scatters on the host); a load
  /// sorts on the GPU only in at most 4 runs (else on the CPU); and when not
  /// even the two layout versions and routes of 2^16 keys fit, routing
  /// stays on the CPU (stats().device says why). Re-checked whenever the
  /// inner layout grows. stats().gpu_bytes is what the index holds,
  /// stats().gpu_budget_bytes this bound. Range: 0, or at least 2^20
  /// (1 MiB).
  std::size_t max_gpu_bytes = 0;
  /// Consecutive GPU failures after which the GPU is marked degraded and
  /// routing stays on the CPU. Range: at least 1.
  int gpu_failure_limit = 3;
  /// Most bytes of scan entries one batch may return (an entry is 16
  /// bytes), so that a batch of many or long scans cannot exhaust memory.
  /// When a batch's scans would return more, they are taken in batch order
  /// and each scan whose entries would take the total past the cap does not
  /// run: it gets status `output_limit`, an error message and no entries,
  /// while the other ops run (later scans too, when they fit). Batches run
  /// together by group commit share one cap. 0: no cap. Range: 0, or at
  /// least 16 (one entry).
  std::size_t max_batch_output_bytes = std::size_t{1} << 30;
  /// Run the full invariant check (`index::verify`) after every batch and
  /// fail the batch's future when it finds a problem. Slow; for debugging.
  /// Range: any.
  bool verify_each_batch = false;
  /// Folder that makes the index durable (empty: nothing is kept, the
  /// default). It holds `checkpoint.snapshot` (written by
  /// index::checkpoint, and by every load or open) and the redo log
  /// (`redo.log`, locked by one index at a time): every batch with writes
  /// is appended to the log, in queue order, before its answer is released.
  /// Constructing an index on a folder that has them restores the contents:
  /// the checkpoint is loaded and the log's later batches are replayed (a
  /// torn tail, from a crash mid-append, is cut at the last whole batch).
  /// The folder is created when missing. Range: any path.
  std::string storage_dir;
  /// How the redo log syncs (see log_sync). Range: the enumerators of
  /// log_sync (an integer cast to it outside them is rejected).
  log_sync log_sync_policy = log_sync::batch;
  /// log_sync::group: microseconds from one fdatasync of the log to the
  /// next while records are written (none while nothing is). Range:
  /// [0, 10^7] (ten seconds); 0 syncs as often as the disk allows, still
  /// without holding answers back.
  unsigned log_group_us = 1000;

  /// @brief Checks every field against the range its comment states (an
  ///        index does this as it is made).
  /// @throws std::invalid_argument naming the first field out of range, the
  ///         range and the value given
  void validate() const;
};

}  // namespace tandem
