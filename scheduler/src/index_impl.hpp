#pragma once
// index::impl: the state of one index and the stages a batch goes through.
// One file per stage implements it:
//   lifecycle.cpp    constructor and destructor, loads and barriers waited for
//   submit_queue.cpp the submit queue: enqueue on any thread, taken in order
//   caller_runs.cpp  reads answered on the calling thread, point writes
//   dispatch.cpp     the dispatcher thread: group commit, look-ahead,
//                    the pipeline of stages, reader tasks
//   validate.cpp     checking ops, status column, op counts      (step 1)
//                    (the config: config::validate, core/src/config.cpp)
//   route_stage.cpp  CPU/GPU split, sort-and-route, merge        (step 2)
//   leaf_stage.cpp   leaf phase and answers back to batch order  (steps 3, 5),
//                    or small batches of gets answered directly  (no step 2)
//   inner_sync.cpp   splits into the leaf table, layout rebuild, GPU upload,
//                    load and verify                             (step 4)
//   delivery.cpp     futures and callbacks, a fold's members answered
//   persist.cpp      snapshots, the redo log, checkpoints and recovery
//   stats.cpp        the stats snapshot
//   leaf_copies.cpp  the leaf cache; gpu_peers.cpp the GPUs past the first
// The queue's unit of work is a job (job.hpp); a batch between its route and
// its answers is a prepared batch in a route space (prepared_batch.hpp).
// Threads: the dispatcher thread owns the leaves, the leaf table and the
// layout; the look-ahead thread routes the next batch (validate + route)
// while the dispatcher runs the current one's leaf phase; the GPU thread
// runs the GPU side of a split route; the scatter thread puts the previous
// batch's answers back in batch order on the GPU meanwhile, and the logger
// thread writes its redo log record (config.storage_dir). Batches of gets
// answered directly may run as reader tasks on the arena, several at once,
// while the dispatcher goes on; any other batch's leaf phase, a load or a
// barrier first waits for them, and for the readers on callers' threads
// (reader_gate). All parallel work runs on one TBB arena of config.threads.
#include <tandem/index.hpp>

#include <tandem/core/inner_layout.hpp>
#include <tandem/core/routed_batch.hpp>
#include <tandem/device/gpu_router.hpp>
#include <tandem/host/leaf_cache.hpp>
#include <tandem/host/leaf_phase.hpp>
#include <tandem/host/leaf_store.hpp>
#include <tandem/host/shared_leaf.hpp>
#include <tandem/host/storage/redo_log.hpp>
#include <tandem/host/route.hpp>
#include <tandem/scheduler/share_policy.hpp>

#include "batch_memory.hpp"
#include "gpu_peers.hpp"
#include "held_jobs.hpp"
#include "job.hpp"
#include "point_claims.hpp"
#include "prepared_batch.hpp"
#include "reader_gate.hpp"
#include "worker_thread.hpp"

#include <boost/lockfree/queue.hpp>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tandem {

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

class index::impl {
 public:
  explicit impl(const config& cfg);
  ~impl();

  /// Queues `j`. @throws tandem::error once destruction has begun.
  void enqueue(std::unique_ptr<job> j);
  /// @throws tandem::error naming `what` on the dispatcher thread (a callback): it would wait for itself.
  void refuse_on_dispatcher(const char* what) const;
  /// Queues a load of pairs read in place and waits for it (so they outlive it).
  void load_and_wait(const load_input& in);
  /// Queues `work` to run on the dispatcher after every job before it (no batch in flight, no reader
  /// running) and waits for it.
  void run_barrier(std::function<void()> work);
  std::size_t size() const { return keys_.load(std::memory_order_acquire); }
  /// index::open: reads and checks the snapshot here, then loads it in
  /// queue order. @return the snapshot's sequence number
  std::uint64_t open_snapshot(const std::string& path);
  /// config.storage_dir: opens the redo log, loads the checkpoint and
  /// replays the log's later batches. Called once, by index's constructor,
  /// before the index is handed out.
  void recover();
  /// index::checkpoint: a snapshot to the checkpoint file, then the log records it covers dropped.
  void checkpoint();
  void set_share(double share);
  void set_auto_share() { auto_share_.store(true); }
  /// index::get, contains, lower_bound: on the calling thread as a reader, after every write submitted before.
  std::optional<value_type> point_get(key_type key);
  std::optional<entry> point_lower_bound(key_type key);
  /// index::put, insert, erase: a one-op batch through the queue (folded with others), waited for on this thread.
  batch_result write_point(op_type type, key_type key, value_type value);
  /// index::put, insert, erase on this thread when they change no leaf's shape (caller_runs.cpp
  /// says which): @return whether it was (then `previous` is the answer), else write_point runs it.
  bool write_on_caller(op_type type, key_type key, value_type value, std::optional<value_type>& previous);
  bool inject_gpu_fault(device::stage s, int count);
  bool inject_peer_fault(std::size_t gpu, device::stage s, int count);  // gpu_peers.cpp
  tandem::stats snapshot() const;
  void verify_all(), verify_copies();  // verify_copies: leaf_copies.cpp
  bool keeps_device_keys(const columns& c) const;  // leaf_copies.cpp

 private:
  // submit_queue.cpp
  /// Whether `j` counts as a write for reader_gate (job::writes).
  static bool may_write(const job& j) noexcept;
  job* pop_or_wait();
  job* try_pop();

  // caller_runs.cpp
  /// config.caller_runs: answers `j` on this thread, as a reader beside
  /// any others, when it is a small batch of gets, lower_bounds and counts
  /// for a future, no reader task runs, and the writes submitted before it
  /// are done with none running (reader_gate::try_enter).
  /// @return whether it ran (and `j` is gone).
  bool run_on_caller(std::unique_ptr<job>& j);
  /// A point read on this thread: waits for the writes submitted before
  /// it (reader_gate::enter), then read(layout).
  /// @throws tandem::error on the dispatcher thread (from a callback: the
  ///         writes it waits for may queue behind the callback), and once
  ///         the index's destruction has begun
  template <class Read>
  auto point_read(const char* what, Read&& read);
  /// Most leaves past its first that a count of a batch answered on its
  /// caller may span (run_on_caller); longer ones go through the queue.
  static constexpr std::size_t max_caller_count_leaves = 8;

  // dispatch.cpp
  void dispatch();
  void run(job* j);
  prepared* take_slot(job* j);
  /// Folds the batches queued behind `first` (each below config.group_commit_ops, together at most
  /// that many ops and max_group_members batches) into one job; returns `first` when there is nothing
  /// to fold or no memory to fold with (then they run one by one).
  job* gather(job* first);
  /// The job to run next: a held one, else one from the queue (or nullptr).
  job* take_next() { return held_.empty() ? try_pop() : held_.pop_front(); }
  /// Hands a prepared batch of gets answered directly (no callback, not small) to a reader task,
  /// which answers and delivers it beside the dispatcher and other readers. @return false (nothing
  /// done) when the batch must run on the dispatcher.
  bool launch_reader(prepared& p);
  /// Waits until no reader task runs (before writes to leaves, the leaf table or the layout).
  void wait_for_readers() const;
  void prepare(prepared& p);
  void route_and_claim(prepared& p);  // prepare's route, then the claims of its writes
  void leaf_stage(prepared& p);

  // delivery.cpp
  void deliver(prepared& p, bool on_worker = false);
  /// Makes p.member_results for a group-commit job, each holding its member's error messages and
  /// room for its keys. Runs before the batch's first write, where failing for lack of memory fails
  /// the batch whole.
  static void make_member_results(prepared& p);
  /// on_worker: the caller is a reader task on the arena, which fulfils the members' futures itself.
  void deliver_members(prepared& p, bool on_worker);
  /// The answers of a folded job, moved out of its slot for delivery.
  struct fold_answers {
    std::vector<job*> members;
    std::vector<std::size_t> member_begin;
    std::vector<batch_result> results;  // empty when the job failed
    tandem::detail::column<key_type> keys;
    std::exception_ptr failure;
    std::uint64_t first_sequence = 0;
  };
  /// Fulfils member m's future or runs its callback, and deletes the member.
  void answer_member(fold_answers& a, std::size_t m);
  /// Waits until every reader task has finished and every fold handed to
  /// the arena has been answered.
  void wait_for_answers();
  void finish(job& j, batch_result&& result, const std::exception_ptr& failure);
  void note_callback_error(const char* what) noexcept;

  // validate.cpp
  void validate(prepared& p);

  // route_stage.cpp
  void route(prepared& p);
  /// Ops [0, m) of the batch into `part` on the GPU, in key ranges of at
  /// most `slice` ops that end at leaf bounds, routed one after another
  /// (the GPU holds the arrays of one range); they concatenate into the
  /// route of the m ops, with batch positions. @return false when a range
  /// held more than `slice` ops (part unspecified; nothing counted; the
  /// next range_cooldown_batches sliced batches go by position)
  /// @throws what gpu_router::route_range throws
  bool route_gpu_ranges(prepared& p, routed_batch_view& part, std::size_t m, std::size_t slice);
  // leaf_copies.cpp, the leaf cache (each function says what it does there):
  bool route_from_copies(prepared& p, double share);  // false: the copies were not used
  bool copies_take_gets(const prepared& p) const;
  void note_heat(prepared& p), reroute_after_writes(prepared& p), keys_to_host(prepared& p);
  void fail_copies(const char* what);
  void claim_writes(prepared& p);
  void forget_patches(prepared* next);
  void sync_copies(prepared& p, bool reshaped);
  void refill_copies(), open_cache();
  /// Adds a GPU route's timing and keys to the batch's report and bytes.
  void note_gpu_route(prepared& p, const device::route_timing& t, std::size_t keys, double seconds);
  static void add_gpu_route(route_report& info, const device::route_timing& t, std::size_t keys, double seconds);
  std::uint32_t route_gpu(prepared& p, const routed_batch_view& want, routed_batch_view& out, std::size_t first,
                          std::size_t m);
  void observe_rates(route_report& info);

  // leaf_stage.cpp
  void run_leaves(prepared& p, std::uint64_t& split_count);
  void get_directly(prepared& p);
  /// The gets keys[0, n) on layout `l`, answers to values and found, in a
  /// software pipeline of chunks (get_directly's core, also run by readers
  /// on callers). @return the leaf lines of one get in
  /// host::line_sample_groups, with `sample` (none without)
  host::leaf_line_count answer_gets(const inner_layout& l, const key_type* keys, std::size_t n, value_type* values,
                                    std::uint8_t* found, bool sample) const;
  /// The leaf that owns `key`, found on layout `l` (right links from there).
  leaf_id owner_id(const inner_layout& l, key_type key) const noexcept;
  const host::leaf& owner(const inner_layout& l, key_type key) const noexcept { return store_[owner_id(l, key)]; }
  /// One get, lower_bound or count on layout `l`, on the calling thread.
  std::optional<value_type> get_on(const inner_layout& l, key_type key) const noexcept;
  std::optional<entry> lower_bound_on(const inner_layout& l, key_type key) const noexcept;
  std::uint64_t count_on(const inner_layout& l, key_type lo, key_type hi) const noexcept;
  /// config.verify_each_batch: verify_all after a batch (an invariant_error
  /// fails the batch; no memory for the check does not).
  void verify_if_asked();
  void scatter_on_gpu(prepared& p);

  // gpu_peers.cpp, the GPUs past the first (config.gpu_devices; each function says what it does there):
  void open_peers(const device::router_options& first, const device::device_report& devices);
  void drop_peer(scheduler::peer_gpu& peer, const char* what) noexcept;
  std::size_t peers_on() const noexcept;
  void for_each_peer(const std::function<void(device::gpu_router&)>& call);
  std::optional<std::size_t> route_cached_split(prepared& p, value_type* values, std::uint8_t* found,
                                                routed_batch_view& out, device::route_timing& sum);
  // inner_sync.cpp
  void open_gpu();
  /// Makes config.gpu_device current on the calling thread (one the index
  /// owns) when the index uses a GPU.
  void use_gpu_device() const noexcept;
  void sync_gpu();
  /// config.max_gpu_bytes: from the layout to upload and room for GPU scatters of `scatter` answers, the
  /// keys a route may take (route_keys_), which leaf guides fit (guide_kind_, guides_dropped_), the scatter room
  /// kept (scatter_keys_: 0 when routes of min_budget_route_keys do not fit beside it) and whether the GPU
  /// fits at all (over_budget_). Dispatcher thread. @return false: it does not
  bool fit_gpu_budget(std::size_t scatter);
  /// Whether a batch of n ops may put its answers back on the GPU: always
  /// within max_gpu_route_keys without a budget; under max_gpu_bytes, when
  /// the scatter room holds n or can grow to it (fit_gpu_budget) while
  /// routes of scatter_min_route_keys still fit. Dispatcher thread.
  bool gpu_scatter_fits(std::size_t n);
  /// Copies every leaf's guide to the GPU (config.gpu_leaf_hints). Without
  /// the host memory the GPU keeps the guides it had; a GPU failure leaves it
  /// none (routes give no hints) until the next refresh.
  void refresh_guides();
  void note_gpu_failure();
  std::shared_ptr<const inner_layout> layout_snapshot() const;
  std::shared_ptr<const inner_layout> gpu_layout_snapshot() const;
  void set_layout(std::shared_ptr<const inner_layout> l);
  /// Splits into the leaf table, merges of the leaves offered (underfull),
  /// then a new layout (adopt_table).
  void inner_sync(std::vector<host::split_record>& splits, const std::vector<leaf_id>& underfull);
  /// Merges each leaf of `underfull` still in `t` and at most
  /// leaf_store::merge_below keys with its left neighbour, else its right
  /// one, when they fit (leaf_store::merge_fill), and drops the dead from
  /// `t`. Without memory for its plan it merges nothing. Allocates nothing
  /// once it merges.
  void merge_underfull(host::leaf_table& t, const std::vector<leaf_id>& underfull);
  /// The table from the chain of leaves (after merging `underfull`) and a
  /// new layout, unless the table is the chain already.
  void rebuild_table_from_store(const std::vector<leaf_id>& underfull);
  void adopt_table(host::leaf_table&& t);
  /// A layout over `t`, stamped with the next version number and
  /// `leaves_made` (leaf_store::made() of the store it indexes).
  std::shared_ptr<const inner_layout> build_layout(const host::leaf_table& t, std::uint64_t leaves_made);
  /// The oldest layout version a route may use from now on: `p`'s (the
  /// batch in its leaf phase; later ones take newer ones) or the GPU's.
  std::uint64_t oldest_routable_version(const prepared& p) const;
 public:
  /// index::compact: dead leaves dropped (store_.compact), the batch arrays
  /// released, the allocator's free memory given back. A barrier job.
  void compact();

 private:
  /// Gives the allocator's free pages back to the system (glibc's
  /// malloc_trim; elsewhere nothing).
  static void release_free_memory() noexcept;
  void load(const load_input& in);

  // stats.cpp
  void publish_stats(const prepared* p, bool failed, std::uint64_t splits);

  config cfg_;
  tbb::task_arena arena_;
  /// Runs f in the arena, isolated: while the calling thread waits for f's
  /// tasks it takes no task of another stage. Without it the look-ahead's
  /// validate, waiting for a stolen slice, picks up leaf-phase work of the
  /// batch before and the next route starts late (and the dispatcher picks up
  /// route work the other way round).
  /// On the dispatcher thread while it runs a small batch (config.
  /// small_batch_ops), f runs in serial_arena_ instead: one slot, no
  /// workers, so parallel algorithms run inline on the caller.
  template <class F>
  void run_in_arena(F&& f) {
    if (serial_stage_) {
      serial_arena_.execute([&] { tbb::this_task_arena::isolate(f); });
    } else {
      arena_.execute([&] { tbb::this_task_arena::isolate(f); });
    }
  }
  tbb::task_arena serial_arena_{1, 1};
  /// Folds whose futures the arena's workers are fulfilling while the
  /// dispatcher goes on.
  std::atomic<std::size_t> answering_{0};
  static thread_local bool serial_stage_;
  /// Sets serial_stage_ for a scope on the dispatcher thread.
  class serial_scope {
   public:
    explicit serial_scope(bool on) noexcept : saved_(serial_stage_) { serial_stage_ = on; }
    ~serial_scope() { serial_stage_ = saved_; }
    serial_scope(const serial_scope&) = delete;
    serial_scope& operator=(const serial_scope&) = delete;

   private:
    bool saved_;
  };
  /// May be folded with other queued batches (group commit).
  [[nodiscard]] bool foldable(const job& j) const noexcept {
    return j.type == job::kind::batch && !j.in_place && j.ops.size() < cfg_.group_commit_ops &&
           (j.ops.scans().empty() || scan_output_bound(j) <= fold_output_cap());
  }
  /// Most bytes of scan output a fold may return (its scans' limits):
  /// config.group_commit_output_bytes, and config.max_batch_output_bytes,
  /// so the cap, which is per batch, never refuses a scan for another
  /// batch's output.
  [[nodiscard]] std::uint64_t fold_output_cap() const noexcept {
    if (cfg_.max_batch_output_bytes == 0) return cfg_.group_commit_output_bytes;
    return std::min(cfg_.group_commit_output_bytes, cfg_.max_batch_output_bytes);
  }
  /// Most bytes of scan output the batch of `j` can return (its scans' limits).
  [[nodiscard]] static std::uint64_t scan_output_bound(const job& j) noexcept {
    std::uint64_t entries = 0;
    for (const scan_spec& s : j.ops.scans()) entries += std::min<std::uint64_t>(s.limit, max_scan_limit + 1);
    return entries * sizeof(entry);
  }
  /// Gets per leaf up to which a batch of gets is answered directly
  /// (config.direct_get_ops): with more, the sorted path's shared reads of
  /// a leaf's lines win (measured at 2^22 and 2^24 keys).
  static constexpr std::size_t direct_gets_per_leaf = 4;
  /// Scan entries per op of config.small_batch_ops up to which a batch's
  /// scans leave it small: past that, copying them on the workers in
  /// parallel outweighs the hand-offs that running alone saves.
  static constexpr std::uint64_t small_batch_scan_entries_per_op = 64;
  /// Runs every stage on the dispatcher thread (config.small_batch_ops):
  /// at most that many ops, whose scans may return at most
  /// small_batch_scan_entries_per_op entries per op of it together.
  [[nodiscard]] bool is_small(const job& j) const noexcept {
    return j.type == job::kind::batch && j.ops.size() <= cfg_.small_batch_ops &&
           scan_output_bound(j) <= cfg_.small_batch_ops * small_batch_scan_entries_per_op * sizeof(entry);
  }
  std::size_t threads_ = 0;
  std::string device_;
  scheduler::memory_kind memory_ = scheduler::memory_kind::ordinary;

  // Owned by the dispatcher thread.
  host::leaf_store store_;
  host::leaf_table table_;
  std::shared_ptr<const inner_layout> layout_;      // latest version
  std::shared_ptr<const inner_layout> gpu_layout_;  // version on the GPU
  host::leaf_phase_workspace leaf_ws_;              // leaf phases run one at a time
  host::leaf_phase_report leaf_report_;
  /// The leaf table and layout lag behind the leaves: an inner sync after a
  /// batch's writes could not get its memory. Routes on the older layout
  /// stay correct (right links); the next batch, verify or load rebuilds.
  bool sync_pending_ = false;
  mutable std::mutex layout_mutex_;  // guards layout_ and gpu_layout_ (the pointers)
  std::mutex gpu_turn_;              // a GPU route and an upload never overlap
  /// Batches in the pipeline: one scattering answers on the GPU, one in its leaf phase, one routed.
  static constexpr int pipeline_depth = 3;
  route_space spaces_[pipeline_depth];
  prepared slots_[pipeline_depth];
  int next_slot_ = 0;
  std::shared_ptr<scheduler::answer_pool> answers_;
  std::unique_ptr<device::gpu_router> gpu_;
  std::vector<std::unique_ptr<scheduler::peer_gpu>> peers_;  // config.gpu_devices past the first
  std::unique_ptr<host::leaf_cache> cache_;     // the leaf cache's bookkeeping (leaf_copies.cpp)
  std::unique_ptr<host::copy_target> copies_;  // the copies: on the GPU, or in host memory without one
  host::host_copies* standin_ = nullptr;  // copies_, when in host memory
  std::mutex standin_turn_;  // stand-in lookups and drains take turns
  std::atomic<std::uint64_t> copy_lookups_{0}, copy_hits_{0}, last_copy_lookups_{0}, last_copy_hits_{0},
      last_synced_bytes_{0};
  // Per mille of the last routed batch's gets that current copies held (or would have); syncs still to pass
  // over after one that found nothing to copy, and after leaves split or merged (leaf_copies.cpp).
  std::atomic<std::uint32_t> copies_rate_{0}, quiet_syncs_{0}, reshaped_syncs_{0};
  scheduler::point_claims point_claims_;  // of one-key writes on callers; versions_: their leaves' locks
  host::leaf_versions versions_;
  std::atomic<int> copies_off_{0};  // 1: a GPU drain failed (for good); 2: auto, and the leaves do not fit
  scheduler::share_policy policy_;  // routes (look-ahead) and leaf phases (dispatcher) feed it
  mutable std::mutex policy_mutex_;
  std::atomic<int> consecutive_failures_{0};
  std::atomic<bool> degraded_{false};
  /// Most keys one GPU route takes (config.max_gpu_route_keys, or what
  /// max_gpu_bytes leaves, the smaller; 0: no bound). Written by
  /// fit_gpu_budget under gpu_turn_, read by routes under it.
  std::atomic<std::size_t> route_keys_{0};
  /// Key ranges a batch's GPU share may take (each uploads all its keys);
  /// more go in slices by position.
  static constexpr std::size_t max_key_ranges = 32;
  /// Sampled keys a key range, for its bounds: a range holds its aim
  /// (9/10 of a route) within ~2.2% (one standard deviation).
  static constexpr std::size_t range_sample_keys = 2048;
  /// After a key range overflowed (ops crowded on a leaf), this many sliced
  /// batches go by position before ranges are tried again.
  static constexpr int range_cooldown_batches = 8;
  std::atomic<int> range_cooldown_{0};
  std::atomic<bool> guides_dropped_{false};  // max_gpu_bytes leaves no room for the leaf guides
  enum class guide_kind { full, compact, none };  // the leaf guides max_gpu_bytes leaves room for
  std::atomic<guide_kind> guide_kind_{guide_kind::full};
  std::atomic<bool> over_budget_{false};     // max_gpu_bytes: the GPU is not used
  std::atomic<std::size_t> budget_layout_bytes_{0};  // what the layout's two versions take, for stats().device
  std::atomic<std::size_t> scatter_keys_{0};  // max_gpu_bytes: most answers a GPU scatter takes
  std::size_t scatter_refused_ = 0;           // a scatter this large did not fit (0: none since the last fit)
  /// Under max_gpu_bytes, scatter room grows only while routes of this many
  /// keys still fit beside it.
  static constexpr std::size_t scatter_min_route_keys = std::size_t{1} << 20;
  /// Routes of at least this many keys must fit beside the leaf guides, or
  /// the guides are dropped (max_gpu_bytes).
  static constexpr std::size_t guide_min_route_keys = std::size_t{1} << 22;
  /// Compact guides take the place of full ones while routes of this many keys fit beside them.
  static constexpr std::size_t compact_min_route_keys = std::size_t{1} << 20;
  /// Under max_gpu_bytes, a GPU that cannot take routes of this many keys
  /// beside the layout is not used.
  static constexpr std::size_t min_budget_route_keys = std::size_t{1} << 16;
  std::atomic<std::uint64_t> gpu_failures_{0};
  std::string group_sizes_;
  std::atomic<bool> auto_share_{true};
  std::atomic<double> fixed_share_{0.0};
  std::uint64_t inner_syncs_ = 0;
  std::uint64_t layout_versions_ = 0;  // layouts built so far (build_layout), the newest one's stamp
  std::uint64_t compactions_ = 0;
  std::uint64_t merges_before_ = 0;  // merges of the stores loads replaced
  // The GPU's leaf guides (config.gpu_leaf_hints; dispatcher thread).
  scheduler::host_array<leaf_guide> guides_;
  scheduler::host_array<compact_guide> compact_guides_;  // in their place under a tight max_gpu_bytes
  std::uint64_t guide_refreshes_ = 0;
  /// Batches with hints asked for since the guides were refreshed; a
  /// refresh follows stale hints at most this often.
  std::size_t batches_since_guides_ = guide_refresh_batches;
  static constexpr std::size_t guide_refresh_batches = 8;
  std::string last_load_;  // how the latest load sorted, for stats
  /// Loads of fewer pairs sort on the CPU: the GPU's fixed costs (streams,
  /// allocations, pinned staging) outweigh its speed below this.
  static constexpr std::size_t gpu_load_min_pairs = std::size_t{1} << 16;
  /// Most runs a load sorts on the GPU under config.max_gpu_bytes (the host
  /// merge of k runs looks at k heads a pair); more sort on the CPU.
  static constexpr std::size_t max_load_runs = 4;
  std::uint64_t sequence_ = 0;  // batches taken up so far (dispatcher)
  /// Reader tasks: batches of gets answered directly, several at once, on
  /// the arena (launch_reader; at most a quarter of config.threads, none
  /// below 8). A slot is the dispatcher's while free and its task's while
  /// busy.
  static constexpr std::size_t max_readers = 4;
  struct reader_slot {
    prepared p;
    std::atomic<bool> busy{false};
  };
  std::array<reader_slot, max_readers> readers_;
  std::atomic<std::size_t> readers_running_{0};

  std::atomic<std::size_t> keys_{0};
  mutable std::mutex stats_mutex_;
  tandem::stats stats_;

  /// Most batches one group commit folds.
  static constexpr std::size_t max_group_members = 256;
  scheduler::held_jobs<max_group_members + 1> held_;  // owned by the dispatcher thread

  boost::lockfree::queue<job*> queue_;
  std::atomic<std::size_t> queued_{0};
  /// Readers on callers' threads (run_on_caller, point reads): they enter
  /// while no write runs and the writes submitted before them are done;
  /// the dispatcher raises it around everything that changes leaves, leaf
  /// table or layout (begin_write / end_write), and counts the writes done.
  scheduler::reader_gate gate_;
  std::mutex write_order_;  // writes enter the queue and are counted under it (enqueue)
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  /// Set when destruction begins: enqueue refuses from then on. Each
  /// thread's reader_gate slot counts its enqueue calls under way, which
  /// the destructor lets finish.
  std::atomic<bool> closing_{false};
  /// The dispatcher sleeps on wake_: enqueue notifies only then.
  std::atomic<bool> sleeping_{false};
  std::unique_ptr<scheduler::worker_thread> lookahead_;  // routes the next batch
  std::unique_ptr<scheduler::worker_thread> gpu_side_;   // GPU share of a split route
  std::unique_ptr<scheduler::worker_thread> scatter_;    // answers of the previous batch, on the GPU
  std::thread dispatcher_;
  std::thread::id dispatcher_id_;  // dispatcher_'s, kept apart: its join() rewrites dispatcher_
  std::thread saver_;  // the latest save (start_save); joined before the next one and by the destructor

  // persist.cpp: snapshots, the redo log, checkpoints and recovery, with
  // the redo log's state below.
  /// Takes up a save job on the dispatcher: copies the leaf table and
  /// starts saver_, counted as a reader, which writes the snapshot
  /// (write_snapshot), fulfils the job and deletes it.
  void start_save(job* j);
  void write_snapshot(const std::string& path, const std::vector<leaf_id>& ids, std::uint64_t sequence);
  [[nodiscard]] std::string checkpoint_path() const { return cfg_.storage_dir + "/checkpoint.snapshot"; }
  /// Whether the batch's writes go to the redo log: it has writes, ran,
  /// and the index is not replaying the log.
  [[nodiscard]] bool needs_log(const prepared& p) const noexcept;
  /// Copies the write ops of a batch that will be logged and has other ops
  /// too into its route space, in parallel (prepare, after validate).
  void gather_log_ops(prepared& p);
  /// Refuses a batch with writes while the log is failed (p.failure).
  /// @return whether it was refused
  bool refuse_if_log_failed(prepared& p) noexcept;
  /// Appends the batch's write ops to the log as one record and writes it
  /// to the OS; under log_sync::batch its answer then waits for the syncer
  /// (p.log_sequence). A failure goes to p.log_failure and fails the log.
  /// Logger thread, or the dispatcher for a small batch; one at a time, in
  /// queue order.
  void write_log(prepared& p);
  /// Whether p's record is synced (or the log failed): its answer may go.
  bool durable(const prepared& p);
  /// Waits until p's record is synced; if the log fails first, the batch
  /// fails (p.log_failure).
  void wait_durable(prepared& p);
  /// The syncer thread (log_sync group and batch): fdatasyncs what the
  /// logger wrote, at once (batch) or once a window (group), beside the
  /// next record's write, and wakes the deliveries waiting for it.
  void sync_loop();
  /// Keeps the syncer away from the log (reset_log), and lets it go on.
  void pause_syncer();
  void resume_syncer();
  void stop_syncer() noexcept;
  /// Fails the log: batches with writes are refused until a checkpoint.
  void fail_log(const std::string& why) noexcept;
  /// The error of batch `sequence`, applied but not durable, for `why`
  /// (null: the log's failure).
  std::exception_ptr unlogged_batch_error(std::uint64_t sequence, const char* why) const noexcept;
  /// After a snapshot at `sequence` in the checkpoint file: drops the
  /// records it covers, reopening the log when it had failed. Dispatcher
  /// thread, no record being written.
  void reset_log(std::uint64_t sequence);
  /// A load with config.storage_dir: the new contents written to the
  /// checkpoint file and the log emptied, before any later batch runs.
  void checkpoint_after_load();

  // The redo log (config.storage_dir; persist.cpp). The logger thread writes
  // one record at a time, the dispatcher waits for it before the next.
  std::unique_ptr<host::redo_log> log_;  // null without storage_dir, or after a failed reopen
  std::unique_ptr<scheduler::worker_thread> logger_;
  /// A record could not be written (or synced): batches with writes are
  /// refused, with log_failure_, until a checkpoint succeeds.
  std::atomic<bool> log_failed_{false};
  mutable std::mutex log_failure_mutex_;  // guards log_failure_ and lost_before_
  std::string log_failure_;
  /// Batches with writes that ran (or are running): every sequence number
  /// below this (dispatcher; read by fail_log on any thread).
  std::atomic<std::uint64_t> applied_through_{0};
  /// At the failure, applied_through_: a checkpoint ends the failure only
  /// when its snapshot holds every batch below it.
  std::uint64_t lost_before_ = 0;
  [[nodiscard]] std::string log_failure() const {
    std::lock_guard<std::mutex> lock(log_failure_mutex_);
    return log_failure_;
  }
  std::atomic<bool> recovering_{false};  // replaying the log (recover): nothing is appended
  // The syncer (sync_loop), guarded by sync_mutex_: the last record written
  // and the last one known synced, by sequence number.
  std::thread syncer_;
  std::mutex sync_mutex_;
  std::condition_variable sync_wake_, durable_cv_;
  std::uint64_t written_sequence_ = 0, durable_sequence_ = 0;
  bool sync_stop_ = false, sync_paused_ = false, sync_busy_ = false;
  std::atomic<std::uint64_t> log_bytes_{0}, log_records_{0}, log_syncs_{0};
  std::atomic<std::uint64_t> checkpoints_{0};
  std::uint64_t replayed_batches_ = 0;
  double recovery_seconds_ = 0;
};

}  // namespace tandem
