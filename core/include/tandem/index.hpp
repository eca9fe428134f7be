#pragma once
/// @file
/// `tandem::index`: the ordered `uint64 -> uint64` index.
///
/// What it is: a B+tree whose inner levels are kept in the Harmonia layout
/// (searched on the CPU, and on the GPU where one is used) and whose leaves
/// are buffered partitioned arrays in host memory. It is driven by batches:
/// each batch is routed to leaves, grouped, applied leaf by leaf in parallel,
/// and answered as if its ops had run one by one.
///
/// How it differs from `std::map`: there are no iterators or references into
/// the index, and results are copies. Work comes in three forms: batches of
/// any ops (`submit(batch)`), n ops of one type over the caller's arrays,
/// read and written in place (`submit(columns)`), and one key at a time
/// (`get`, `contains`, `lower_bound`, answered on the calling thread;
/// `put`, `insert`, `erase`, on the calling thread when they change no
/// leaf's shape, else one-op batches through the queue). Throughput comes
/// from large batches and columns.
///
/// Threads: every member may be called from any number of threads at once.
/// Batches (and loads) take effect one after another in the order their
/// submissions entered the queue. Reads may run at the same time as each
/// other, never beside a write (reads only, so the effect is the same): a
/// read (a point read, or a small batch of gets, lower_bounds and counts
/// submitted for a future) asked while none of the writes submitted before
/// it is left undone is answered on the asking thread, beside any number of
/// other such readers, and a write waits for the readers that began before
/// it. Readers register in per-thread slots, so they share no written
/// cache line.
/// Batches found waiting in the queue together may run as one (group commit,
/// config.group_commit_ops): each still takes effect in queue order, sees
/// the writes of the ones before it and gets its own result and sequence
/// number; if that combined run fails, each of its batches fails with the
/// same exception. Callbacks run in queue order; the futures of batches
/// run together are fulfilled on the index's worker threads while later
/// batches already run, so a later batch's callback (or future) may
/// complete before an earlier batch's future, which has taken effect all
/// the same.
///
/// Order of effect: batch_result::sequence() numbers batches in the order
/// they took effect, and a batch sees the writes of every batch numbered
/// below it and of none numbered above. Reads answered on their callers
/// share the number of the batch after them (they took effect before it);
/// every batch with writes has a number of its own.
///
/// The rule, with one-key writes on their callers (below):
/// - Single-key calls (get, contains, lower_bound's key, put, insert,
///   erase) are linearizable: each takes effect at one instant between its
///   call and its return (tests: PointWrites.SingleKeyOpsAreLinearizable*).
/// - A batch takes effect as if its ops ran one by one at one instant
///   between its submit and its answer: every one-key write happens wholly
///   before or wholly after it, however the batch is answered (on its
///   caller, directly, routed, from the leaf copies; tests:
///   Paths/PointWritesBeside.BatchesSeeEachPointWriteWhollyOrNotAtAll).
/// - A read sees every write whose call (or submit, for a batch) returned
///   before the read was called (Readers.*).
///
/// What waits: `submit` never waits for other batches; `execute`, `load`
/// and `verify` wait. A small batch of gets, lower_bounds and counts
/// submitted for a future (config.caller_runs, config.small_batch_ops) when
/// the writes submitted before it are done and no reader task of the
/// index runs is answered on the submitting thread before `submit`
/// returns: no thread is woken on the way. A callback runs on the index's dispatcher thread: it
/// may `submit` to the same index (the batch runs after the current one),
/// but `execute`, `load` and `verify` there throw tandem::error, since they
/// would wait for the callback itself, and waiting there on a future of the
/// same index never ends. A callback that blocks holds up every later batch
/// (submitting does not wait for it); one that throws is counted in
/// stats().callback_errors and the index goes on.
///
/// Destruction drains: every batch accepted before the destructor started
/// completes (its future is fulfilled, its callback runs) before it returns.
/// Calls that start once the destructor has begun (from other threads, or
/// from callbacks during the drain) are refused with tandem::error; no call
/// may start after the destructor has returned, as for any object.
///
/// Memory: a batch's working arrays and its answer columns come from pools
/// of the index, touched once and reused; a steady stream of batches of
/// similar size allocates nothing of their size. A `batch_result` gives its
/// columns back when destroyed: drop results once read (or move them into
/// the next use) and the next batches reuse their pages; kept results stay
/// valid and untouched. With a GPU these arrays are pinned host memory.
///
/// Failure: a batch takes effect whole or not at all. A batch that cannot
/// run, because the memory it needs (route arrays, answer columns, the leaf
/// phase's buffers, scan output, room for the leaves its splits create)
/// cannot be had, fails as a whole: its future throws (std::bad_alloc for
/// lack of memory) or its callback gets the exception, and none of its ops
/// took effect: the index holds exactly the keys and values it held before
/// that batch, verify() passes, and the next batches run normally. tandem
/// makes every allocation a batch can need before the batch's first write;
/// once the writes have started the batch completes. Work after them that
/// cannot get memory (rebuilding the inner levels after leaf splits) is put
/// off to the next batch (or verify), and meanwhile routing uses the inner
/// levels before the splits, which stay correct through the leaves' right
/// links. Scans whose entries would take a batch's output past
/// config.max_batch_output_bytes do not fail the batch: each such scan gets
/// status `output_limit` and the other ops run.
///
/// Durability (config.storage_dir; without it nothing outlives the index):
/// the folder holds a checkpoint (a snapshot) and a redo log. Every batch
/// with writes is appended to the log (its put, insert and erase ops, in
/// batch order) after its writes are applied and before its answer is
/// released, in queue order; config.log_sync_policy says whether the answer
/// also waits for an fdatasync. Constructing an index on the folder loads
/// the checkpoint and replays the log's later batches, so it holds every
/// batch whose answer was released (with log_sync::batch, also after a
/// crash of the machine) and, of the batches after them, a prefix in queue
/// order. A batch's writes are visible to later batches before its record
/// is written: a read may see a write that a crash then loses, one whose
/// answer was never released. `checkpoint` writes a new snapshot and drops
/// the log records it covers; `load` and `open` write one too, before any
/// later batch runs. A record that cannot be written (disk full, I/O
/// error) fails that batch (its writes stay in memory, not on disk) and
/// every later batch with writes, with tandem::error, until a
/// `checkpoint` succeeds; reads go on.
///
/// One batch, end to end: the ops are checked (one pass over the type
/// column); routed and sorted by (key, position), the GPU's share on the GPU
/// (keys up, CUB sort, descent, leaf groups found on the GPU, sorted
/// positions and keys down), the rest on the CPU workers; each leaf's ops
/// are merge-joined against the leaf on the CPU; the answers go back to
/// batch order by a scatter (on the GPU for GPU-routed batches).

#include <tandem/batch.hpp>
#include <tandem/batch_result.hpp>
#include <tandem/config.hpp>
#include <tandem/core/types.hpp>
#include <tandem/stats.hpp>

#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

namespace detail {
struct index_access;  // test hooks, tandem/scheduler/testing.hpp
}  // namespace detail

/// n ops of one type over arrays the caller keeps: `index::submit(const
/// columns&)` reads the inputs and writes the outputs where they are, with
/// no copy on the calling thread (cuco's bulk `find(first, last, out)`).
///
/// | type        | values (in) | values_out          | found_out      | keys_out |
/// |-------------|-------------|---------------------|----------------|----------|
/// | get         | -           | the value           | key present    | -        |
/// | put         | required    | the value replaced  | was present    | -        |
/// | insert      | required    | the value kept      | was present    | -        |
/// | erase       | -           | the value erased    | was present    | -        |
/// | lower_bound | -           | the entry's value   | an entry found | its key (0 if none) |
///
/// Where found is 0, values_out is 0. An output left null is not written.
/// Scans and counts take batches.
///
/// Lifetime: every array must stay valid until the future is ready; the
/// inputs must not change meanwhile and the outputs are written any time
/// before it is ready (read them after). Arrays must be aligned to their
/// element (8 bytes for keys and values), and no output may overlap an
/// input or another output: `submit` refuses them (std::invalid_argument),
/// since the index reads the inputs again after it has begun writing
/// answers (the redo log, the GPU's staged chunks). The same array may be
/// given as both `keys` and `values` of a put (read only).
struct columns {
  op_type type = op_type::get;
  const key_type* keys = nullptr;      ///< n keys (required when n > 0)
  const value_type* values = nullptr;  ///< n values of put and insert
  std::size_t n = 0;
  value_type* values_out = nullptr;  ///< n answers' values, or null
  std::uint8_t* found_out = nullptr;  ///< n answers' found flags (0 or 1), or null
  key_type* keys_out = nullptr;      ///< lower_bound: n entries' keys, or null
  /// -1: every array is in host memory. Else the CUDA ordinal of the GPU
  /// whose memory (device or managed) holds keys, values and every output:
  /// the call waits for the work queued on `stream` before it (the inputs
  /// are then read as they are), and the answers are in the outputs when
  /// the future is ready (written on streams of the index's own, never
  /// behind work queued on `stream` later). Checked at the call: an array
  /// that is not that GPU's memory is refused, naming it.
  int device = -1;
  /// With `device` >= 0: the caller's cudaStream_t (null: the legacy
  /// default stream), as void* so that this header shows no CUDA type.
  void* stream = nullptr;
};

class index {
 public:
  /// Called with the result of a batch, or with an exception when the batch
  /// failed as a whole (then `result` is empty). Exceptions it throws are
  /// caught, counted in stats().callback_errors and never stop the index.
  using callback = std::function<void(batch_result result, std::exception_ptr error)>;

  /// @brief An empty index, or with config.storage_dir the index kept
  ///        there: its checkpoint loaded and its redo log replayed (a torn
  ///        tail, from a crash mid-append, is cut at the last whole batch).
  /// @throws std::invalid_argument for a config value out of range
  /// @throws tandem::error when config.device is gpu and no GPU is usable
  ///         (or none has the ordinal config.gpu_device);
  ///         when the storage folder cannot be made or read, another index
  ///         holds it (the log's lock), or its checkpoint or log is
  ///         corrupt (naming the file and the fault)
  explicit index(const config& cfg = {});
  ~index();

  index(const index&) = delete;
  index& operator=(const index&) = delete;

  /// @brief Replaces the contents with `n` pairs in any order; for a key
  ///        given twice the later pair wins. Runs in queue order like a batch
  ///        and waits for it. The pairs are read where they are, not copied:
  ///        they must not change until `load` returns. Pairs already in key
  ///        order are detected (one parallel pass) and not sorted; others
  ///        are radix-sorted in parallel. With config.storage_dir the new
  ///        contents are written to the checkpoint (and the log emptied)
  ///        before `load` returns and before any later batch runs.
  /// @throws std::invalid_argument when n > 0 and keys or values is null;
  ///         std::bad_alloc when the new leaves cannot be had, and then the
  ///         index holds what it held before; tandem::error when the
  ///         checkpoint cannot be written: the pairs are loaded but not
  ///         durable, and writes are refused until a `checkpoint` succeeds.
  void load(const key_type* keys, const value_type* values, std::size_t n);
  void load(const std::vector<entry>& entries);

  /// @brief Queues a batch. Does not wait for other batches (a small batch
  ///        of gets on an idle index is answered here: config.caller_runs,
  ///        and the future is ready on return). The batch is taken by value:
  ///        `submit(std::move(b))` hands its columns over without a copy
  ///        (the result reuses its key column); `submit(b)` copies it.
  /// @return a future of the result; `get()` rethrows when the batch failed
  ///         as a whole: std::bad_alloc when it could not get the memory it
  ///         needs. A failed batch took no effect at all: the index holds
  ///         what it held before it (see "Failure" above).
  /// @throws tandem::error once the index's destruction has begun;
  ///         std::bad_alloc when the queue has no memory for it (then it
  ///         was not queued)
  std::future<batch_result> submit(batch b);

  /// @brief Queues a batch whose result goes to `done` (on the dispatcher
  ///        thread). Does not wait. When the batch fails as a whole, `done`
  ///        gets an empty result and the exception (std::bad_alloc for lack
  ///        of memory), and the batch took no effect, as for `submit(b)`.
  /// @throws std::invalid_argument for an empty callback; tandem::error
  ///         once the index's destruction has begun; std::bad_alloc when
  ///         the queue has no memory for it (then it was not queued)
  void submit(batch b, callback done);

  /// @brief Queues n ops of one type over the caller's arrays (see
  ///        `columns`: read and written in place, lifetime and aliasing
  ///        rules). Runs in queue order like a batch of those ops, with the
  ///        same answers; a small one of gets or lower_bounds on an index
  ///        with no write ahead is answered here, as `submit(b)` would.
  ///        Never folded with other batches.
  /// @return a future that is ready once every answer is written; `get()`
  ///         rethrows when the ops failed as a whole (std::bad_alloc; then
  ///         none took effect and the outputs are unspecified).
  /// @throws std::invalid_argument for a type other than get, put, insert,
  ///         erase or lower_bound, a null input, misaligned or overlapping
  ///         arrays; std::length_error past 2^32 - 2 ops; tandem::error once
  ///         the index's destruction has begun
  std::future<void> submit(const columns& c);

  /// @brief Runs a batch and waits for its result.
  /// @throws what the batch failed with, as `submit(b).get()` would
  ///         (std::bad_alloc when it could not get its memory); then the
  ///         batch took no effect.
  batch_result execute(batch b);

  // ---- one key at a time ------------------------------------------------------
  //
  // Each call is one op with the answer of a batch of that op alone: it
  // sees every write whose submit (or point write) returned before it was
  // called (see "The rule" above). Reads run on the calling thread, beside
  // any number of other readers, with no allocation and no hand-over: a
  // read waits only for writes submitted before it that are not done yet
  // (a brief spin, then asleep), and a batch's write waits for the reads
  // that began before it.
  //
  // One-key writes: a write that changes no leaf's shape runs on the
  // calling thread too (config.caller_runs), beside one-key reads and other
  // such writes, under its leaf's version lock (writers of one leaf take
  // turns; readers read without waiting but for that leaf's writer, and
  // read again when it changed the leaf meanwhile): a put of a key present,
  // an insert (or a put) of a key absent into a leaf whose log has room,
  // an erase that leaves the leaf above the merge threshold, and an insert
  // of a key present or an erase of a key absent (they change nothing). It
  // runs after every write submitted before it, and never beside a batch's
  // write or a batch read on a thread of its own (a brief spin, then the
  // queue). stats().point_writes counts them. Every other write (a full
  // log or leaf, an erase that would leave its leaf to merge, any change
  // with config.storage_dir) goes through the queue (folded with other
  // small batches, config.group_commit_ops) and returns once applied (with
  // config.storage_dir, once logged as a batch's write is). Writes may not
  // be called from a callback (they would wait for the callback itself):
  // there they throw tandem::error, as after the destructor has begun.

  /// @return the value of `key`, or nothing when it is absent.
  [[nodiscard]] std::optional<value_type> get(key_type key);
  /// @return whether `key` is present.
  [[nodiscard]] bool contains(key_type key) { return get(key).has_value(); }
  /// @return the entry with the smallest key >= `key`, or nothing.
  [[nodiscard]] std::optional<entry> lower_bound(key_type key);
  /// Sets `key` to `value`. @return the value it replaced, if any.
  std::optional<value_type> put(key_type key, value_type value);
  /// Sets `key` to `value` if it is absent. @return whether it was (and is
  ///        now set); a present key keeps its value.
  bool insert(key_type key, value_type value);
  /// Removes `key`. @return the value it had, or nothing when it was absent.
  std::optional<value_type> erase(key_type key);

  /// @brief Sets the share of each batch's keys routed on the GPU, from the
  ///        next batch on. 0 routes on the CPU only, 1 on the GPU only.
  ///        Without a usable GPU the share is recorded but routing stays on
  ///        the CPU (stats().gpu_share says 0). Any thread, any time.
  /// @throws std::invalid_argument when `share` is NaN or outside [0, 1]
  void set_gpu_share(double share);
  /// @brief Lets the index choose the share per batch from moving averages
  ///        of the GPU's and CPU's routing rates, so both finish together.
  void set_gpu_share(auto_share_t);

  /// @return the number of keys, as of the last completed batch.
  [[nodiscard]] std::size_t size() const;

  /// @return counters and timings, as of the last completed batch.
  [[nodiscard]] tandem::stats stats() const;

  /// @brief Writes every pair to a snapshot file at `path`, as of this point
  ///        in queue order: after every batch queued before it, before any
  ///        queued after it. Waits until the file is complete.
  ///
  /// The file goes to a temporary name in `path`'s folder, is fsynced and
  /// renamed over `path` (then the folder is fsynced): a crash leaves the
  /// old file or the new one, never a mix. What it holds: a header (format
  /// version, byte order, the geometry of the index that wrote it, pair
  /// count, the sequence number of the last batch before it), the pairs in
  /// key order in chunks of 2^20, each with its own xxHash (XXH3) checksum,
  /// and a footer (host/storage/snapshot_file.hpp has the layout).
  ///
  /// What waits: the leaves are read where they are, not copied first. So
  /// batches of gets (and other saves) go on beside a save, while a batch
  /// that writes, a load, compact or verify waits until the save is done.
  /// @throws tandem::error naming the file and the system's reason when it
  ///         cannot be written (then `path` is untouched and no temporary
  ///         file is left); std::bad_alloc
  void save(const std::string& path);

  /// @brief Replaces the contents with those of the snapshot at `path` (as
  ///        `load` does, in queue order, and waits for it); later batches
  ///        are numbered after the snapshot's sequence number. The whole
  ///        file is read and checked before anything changes. Snapshots
  ///        open with any config (the pairs are rebuilt into this index's
  ///        leaves).
  /// @throws tandem::error naming the file and the fault when it is
  ///         missing or unreadable, not a snapshot, truncated, corrupted
  ///         (a checksum), from a machine of the other byte order or of a
  ///         newer format version: then the index is as it was.
  ///         std::bad_alloc when the pairs do not fit (index unchanged).
  void open(const std::string& path);

  /// @brief Gives back the memory of keys that are gone. Runs in queue
  ///        order like a batch and waits for it; lookups wait meanwhile.
  ///
  /// What happens without it: a batch whose erases leave a leaf with at
  /// most a quarter of its capacity merges it into a neighbour (when the
  /// two then fill at most three quarters, or either is empty), and the
  /// leaf table and inner layout shrink with the same batch (the GPU's
  /// copy at its next upload). The emptied leaf stays allocated until no
  /// route can reach it; then the batches' splits reuse it, so a sliding
  /// window of keys holds about as many leaves as a fresh load of them
  /// (stats().dead_leaves counts those waiting). What `compact` adds, the
  /// heavy part: the live leaves move down into the dead ones' memory (a
  /// copy of each leaf above them; leaf ids change, the inner layout is
  /// rebuilt and uploaded), the leaf memory above them goes back to the
  /// operating system, the batch arrays sized by the largest batch so far
  /// are released, and the allocator's free pages are returned
  /// (malloc_trim). Worth it after a large share of the keys went for
  /// good; cheap when nothing is dead.
  /// @throws std::bad_alloc when the new leaf table or layout cannot be
  ///         had: then nothing changed.
  void compact();

  /// @brief Makes the storage folder's checkpoint the contents as of this
  ///        point in queue order (a `save` to `<storage_dir>/
  ///        checkpoint.snapshot`), then drops the redo log's records it
  ///        covers. Waits for both. Reads go on during it, writes wait for
  ///        the snapshot (see `save`). After a failed log record, a
  ///        successful checkpoint starts a fresh log and writes are taken
  ///        again. How often to call it is the caller's trade: opening
  ///        replays every record since the last one.
  /// @throws tandem::error without config.storage_dir; naming the file
  ///         and the reason when the snapshot or the log cannot be written
  ///         (the previous checkpoint and the log stay valid); and when the
  ///         log failed while the snapshot was being taken (the snapshot may
  ///         miss a batch the log lost, so writes stay refused: call it
  ///         again)
  void checkpoint();

  /// @brief Waits for every batch queued before it, then checks every
  ///        invariant of leaves, leaf table and inner layout, and that
  ///        each leaf copy the leaf cache holds usable matches its leaf
  ///        (the copies read back: with the cache on the GPU, a download
  ///        of its pool). A GPU that fails meanwhile turns the cache off.
  /// @throws tandem::invariant_error naming the first broken invariant
  void verify();

 private:
  friend struct detail::index_access;
  class impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tandem
