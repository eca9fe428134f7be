// The submit queue and the dispatcher (index_impl.hpp). Takes jobs from any
// submitting thread (Boost.Lockfree MPMC queue); the dispatcher thread runs
// them strictly in queue order. While one batch runs its leaf phase on the
// dispatcher, the next queued batch is validated and routed on the
// look-ahead thread (DESIGN, pipelining), on the layout version of that
// moment, which stays correct after the first batch's splits because ops
// follow right links. Batches found waiting together (each below
// config.group_commit_ops) are folded into one job whose ops are theirs back
// to back: one run, then each gets a window of its answers (group commit).
// A batch of gets answered directly may go to a reader task on the arena,
// which answers and delivers it while the dispatcher takes up the next;
// readers run beside each other, and a batch that may write waits for them.
// Finishing a batch fulfils its future or runs its callback on the
// dispatcher thread; the futures of a folded job whose batches have no
// callback are fulfilled in parallel on the arena's threads (each wakes a
// client) while the dispatcher goes on to the next batch. Reads (point
// reads, small batches of gets, lower_bounds and counts) are answered on
// the threads that ask, beside each other and beside the dispatcher, while
// no write runs and the writes submitted before them are done
// (reader_gate): no hand-over, no wake-up either way.
#include "index_impl.hpp"

#include <tandem/device/current_device.hpp>
#include <tandem/device/pinned.hpp>
#include <tandem/error.hpp>

#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <new>
#include <optional>
#include <stdexcept>

namespace tandem {

thread_local bool index::impl::serial_stage_ = false;

index::impl::impl(const config& cfg) : cfg_(cfg), queue_(128) {
  validate_config(cfg_);
  open_gpu();
  // The GPU's calls below (the first upload) run on the caller's thread:
  // its own current device comes back when the constructor returns.
  std::optional<device::device_scope> caller_device;
  if (gpu_) caller_device.emplace(gpu_->device_ordinal());
  memory_ = gpu_ ? scheduler::memory_kind::pinned : scheduler::memory_kind::ordinary;
  // From now on large batch columns are pinned: the GPU reads a batch's
  // keys (args, types) where the caller built them.
  if (gpu_) tandem::detail::use_column_source(device::pinned_column_source());
  for (route_space& s : spaces_) s.set_kind(memory_);
  guides_.set_kind(memory_);
  answers_ = std::make_shared<scheduler::answer_pool>(memory_);
  auto_share_.store(cfg_.gpu_share < 0);
  fixed_share_.store(cfg_.gpu_share < 0 ? 0.0 : cfg_.gpu_share);
  const int threads = cfg_.threads ? static_cast<int>(cfg_.threads) : tbb::info::default_concurrency();
  // Two slots for application threads: the dispatcher (leaf phase) and the
  // look-ahead thread (validate and route of the next batch) both join the
  // arena at once, so the look-ahead never waits for the leaf phase's tasks
  // to leave it a slot; threads - 1 workers serve both.
  arena_.initialize(threads + 1, 2);
  threads_ = static_cast<std::size_t>(threads);
  rebuild_table_from_store({});
  publish_stats(nullptr, false, 0);
  // The threads the index owns make its GPU current once (cudaSetDevice
  // is per thread): whatever CUDA call they make goes to that device.
  const auto on_gpu = [this] { use_gpu_device(); };
  lookahead_ = std::make_unique<scheduler::worker_thread>(on_gpu);
  if (gpu_) {
    gpu_side_ = std::make_unique<scheduler::worker_thread>(on_gpu);
    scatter_ = std::make_unique<scheduler::worker_thread>(on_gpu);
  }
  if (!cfg_.storage_dir.empty()) logger_ = std::make_unique<scheduler::worker_thread>();  // log_: recover()
  dispatcher_ = std::thread([this] {
    use_gpu_device();
    dispatch();
  });
  dispatcher_id_ = dispatcher_.get_id();  // before any job: the queue orders it before every callback
}

index::impl::~impl() {
  // Refuse new jobs, let enqueue calls under way finish (each one either
  // saw closing_ or is counted in its thread's slot: both are sequentially
  // consistent), then drain the queue.
  closing_.store(true);
  gate_.wait_for_callers();
  gate_.wait_for_readers();  // point reads under way (they look at closing_ once in)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  dispatcher_.join();
  gate_.close();  // point reads under way finish; later ones are refused
  if (saver_.joinable()) saver_.join();
  stop_syncer();
  // Every answered batch's record is in the OS; closing makes them durable
  // under every log_sync policy.
  if (log_ && !log_failed_.load()) {
    try {
      log_->sync();
    } catch (...) {  // a destructor cannot report it; log_sync::batch had synced them
    }
  }
}

void index::impl::enqueue(std::unique_ptr<job> j) {
  // Counted in this thread's slot (no line shared with other submitters).
  struct caller {
    std::atomic<std::uint32_t>& n;
    explicit caller(std::atomic<std::uint32_t>& c) : n(c) { n.fetch_add(1); }
    ~caller() { n.fetch_sub(1, std::memory_order_release); }
  } const counted(gate_.mine().callers);
  if (closing_.load()) {
    throw error(j->type == job::kind::batch ? "tandem::index: submit after the index's destruction began"
                                            : "tandem::index: load or verify after the index's destruction began");
  }
  j->submitted = clock_type::now();
  if (run_on_caller(j)) return;
  // A write its caller waits for inside the call (execute, the point
  // writes) is not counted: no read can be asked after its submit returned
  // and before it is done, so readers need not wait for it.
  j->writes = !j->awaited && may_write(*j) ? 1 : 0;
  // Read before the push: from then on the dispatcher may run and delete
  // the job.
  const bool is_write = j->writes != 0;
  queued_.fetch_add(1);
  {
    // Writes enter the queue in the order they are counted (under one
    // lock), so a reader that finds as many done as it saw counted finds
    // every write counted before it done (reader_gate).
    std::unique_lock<std::mutex> counted_in_order(write_order_, std::defer_lock);
    if (is_write) counted_in_order.lock();
    if (!queue_.push(j.get())) {  // fails only when a queue node cannot be allocated
      queued_.fetch_sub(1, std::memory_order_acq_rel);
      throw std::bad_alloc();
    }
    if (is_write) gate_.write_submitted();
  }
  j.release();
  if (sleeping_.load()) {  // else it finds the job without a wake-up (queued_ is counted first)
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_one();
  }
}

void index::impl::refuse_on_dispatcher(const char* what) const {
  if (std::this_thread::get_id() == dispatcher_id_) {
    throw error(std::string("tandem::index::") + what +
                " called from a callback of the same index: it would wait for the callback itself "
                "(submit without waiting instead)");
  }
}

void index::impl::load_and_wait(const load_input& in) {
  auto j = std::make_unique<job>();
  j->type = job::kind::load;
  j->pairs = in;
  std::future<void> done = j->finished.get_future();
  enqueue(std::move(j));
  done.get();
}

void index::impl::run_barrier(std::function<void()> work) {
  auto j = std::make_unique<job>();
  j->type = job::kind::barrier;
  j->barrier_work = std::move(work);
  std::future<void> done = j->finished.get_future();
  enqueue(std::move(j));
  done.get();
}

void index::impl::set_share(double share) {
  if (std::isnan(share) || share < 0.0 || share > 1.0) {
    throw std::invalid_argument("tandem::index::set_gpu_share: the share must be in [0, 1], got " +
                                std::to_string(share));
  }
  fixed_share_.store(share);
  auto_share_.store(false);
}

bool index::impl::inject_gpu_fault(device::stage s, int count) {
  if (!gpu_) return false;
  gpu_->inject_fault(s, count);
  return true;
}

bool index::impl::may_write(const job& j) noexcept {
  if (j.type == job::kind::save) return false;
  if (j.type != job::kind::batch) return true;
  // Past this many ops a batch counts as a write unread: the pass over its
  // types would cost its submitter more than readers gain.
  constexpr std::size_t classified_ops = std::size_t{1} << 20;
  const std::size_t n = j.ops.size();
  if (n > classified_ops) return true;
  const op_type* t = j.ops.types();
  bool writes = false;
  for (std::size_t i = 0; i < n; ++i) {
    writes |= t[i] == op_type::put || t[i] == op_type::insert || t[i] == op_type::erase;
  }
  return writes;
}

bool index::impl::run_on_caller(std::unique_ptr<job>& j) {
  if (!cfg_.caller_runs || cfg_.verify_each_batch || j->type != job::kind::batch || j->done) return false;
  const std::size_t n = j->ops.size();
  if (n == 0 || n > cfg_.small_batch_ops || n > cfg_.direct_get_ops || !j->ops.scans().empty()) return false;
  const op_type* types = j->ops.types();
  const key_type* keys = j->ops.keys();
  const std::uint64_t* args = j->ops.args();
  bool gets_only = true;
  for (std::size_t i = 0; i < n; ++i) {
    if (types[i] == op_type::get) continue;
    gets_only = false;
    if (types[i] == op_type::lower_bound || (types[i] == op_type::count && keys[i] <= args[i])) continue;
    return false;  // writes, and counts that fail validation, go through the queue
  }
  // Not beside the index's reader tasks: a caller that loses its core to
  // them waits for it, where a client blocked on its future is woken with
  // a sleeper's priority (the tail of 16 clients of 64 gets grew 2.4 to 11
  // times at p99.9 on 16 cores).
  if (readers_running_.load(std::memory_order_acquire) != 0) return false;
  scheduler::reader_gate::slot& slot = gate_.mine();
  if (!gate_.try_enter(slot, gate_.ticket())) return false;  // a write ahead of it: it queues behind
  if (!gets_only) {
    // A count over many leaves would hold every write up while it walks
    // them: such a batch goes through the queue (its counts run in
    // parallel there).
    const inner_layout& l = *layout_;
    for (std::size_t i = 0; i < n; ++i) {
      if (types[i] == op_type::count && l.find(args[i]) - l.find(keys[i]) > max_caller_count_leaves) {
        gate_.leave(slot);
        return false;
      }
    }
  }
  const std::uint64_t sequence = gate_.sequence();
  batch_result result;
  std::exception_ptr failure;
  try {
    // Every stage on this thread, no arena, no stats lock: the answers go
    // straight into the result's columns (or the caller's arrays).
    // Columns of their own, not the pool's: its lock would be a line every
    // caller shares.
    std::shared_ptr<tandem::detail::answer_columns> columns = scheduler::small_answer_columns(n);
    std::fill(columns->status, columns->status + n, op_status::ok);
    tandem::detail::column<key_type> result_keys = j->ops.take_keys();  // empty when in place
    value_type* values = j->in_place && j->values_out ? j->values_out : columns->values;
    std::uint8_t* found = j->in_place && j->found_out ? j->found_out : columns->found;
    key_type* found_keys = j->in_place ? j->keys_out : result_keys.data();
    const key_type* asked = j->in_place ? keys : result_keys.data();
    const inner_layout& l = *layout_;  // no write runs while this reader is in
    if (gets_only) {
      (void)answer_gets(l, asked, n, values, found, false);
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        const key_type key = asked[i];
        value_type value = 0;
        bool hit = false;
        if (types[i] == op_type::get) {
          const std::optional<value_type> v = get_on(l, key);
          hit = v.has_value();
          value = v.value_or(0);
        } else if (types[i] == op_type::lower_bound) {
          const std::optional<entry> e = lower_bound_on(l, key);
          hit = e.has_value();
          value = hit ? e->value : 0;
          if (found_keys) found_keys[i] = hit ? e->key : 0;
        } else {
          value = count_on(l, key, args[i]);
          hit = value != 0;
        }
        values[i] = value;
        found[i] = hit ? 1 : 0;
      }
    }
    if (!j->in_place) result = batch_result(std::move(columns), 0, n, std::move(result_keys));
  } catch (...) {
    failure = std::current_exception();
  }
  gate_.leave(slot);
  std::array<std::uint64_t, op_type_count> by_type{};
  for (std::size_t i = 0; i < n; ++i) ++by_type[static_cast<std::size_t>(types[i])];
  slot.batches.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t t = 0; t < op_type_count; ++t) {
    if (by_type[t] != 0) slot.ops[t].fetch_add(by_type[t], std::memory_order_relaxed);
  }
  result.set_sequence(sequence);
  finish(*j, std::move(result), failure);
  j.reset();
  return true;
}

batch_result index::impl::write_point(op_type type, key_type key, value_type value) {
  // Its callback sets a flag this thread spins on (yielding), then sleeps
  // on in short steps: a waiter blocked on a future would wait for a
  // wake-up as well.
  struct waiter {
    std::atomic<bool> done{false};
    batch_result result;
    std::exception_ptr error;
  } w;
  auto j = std::make_unique<job>();
  j->ops.add({key, value, 0, type, scan_order::ordered});
  j->awaited = true;
  j->done = [&w](batch_result r, std::exception_ptr e) {
    w.result = std::move(r);
    w.error = e;
    w.done.store(true, std::memory_order_release);  // the last touch of w
  };
  enqueue(std::move(j));
  const auto spin_until = clock_type::now() + std::chrono::microseconds(200);
  while (!w.done.load(std::memory_order_acquire)) {
    if (clock_type::now() < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  if (w.error) std::rethrow_exception(w.error);
  return std::move(w.result);
}

template <class Read>
auto index::impl::point_read(const char* what, Read&& read) {
  refuse_on_dispatcher(what);
  scheduler::reader_gate::slot& slot = gate_.mine();
  // In (or waiting) before closing_ is looked at: the destructor sets
  // closing_ and then waits for the readers in and waiting.
  const bool in = gate_.enter(slot, gate_.ticket());
  if (!in || closing_.load()) {
    if (in) gate_.leave(slot);
    throw error(std::string("tandem::index::") + what + " after the index's destruction began");
  }
  const auto answer = read(*layout_);  // no write runs while this reader is in
  gate_.leave(slot, true);
  return answer;
}

std::optional<value_type> index::impl::point_get(key_type key) {
  return point_read("get", [&](const inner_layout& l) { return get_on(l, key); });
}

std::optional<entry> index::impl::point_lower_bound(key_type key) {
  return point_read("lower_bound", [&](const inner_layout& l) { return lower_bound_on(l, key); });
}

job* index::impl::pop_or_wait() {
  // A brief spin first: a client answered a moment ago often submits again
  // within microseconds, and a blocked dispatcher costs a wake-up (tens of
  // microseconds where the core has gone idle).
  const auto spin_until = clock_type::now() + std::chrono::microseconds(cfg_.dispatcher_spin_us);
  do {
    if (job* j = try_pop()) return j;
    std::this_thread::yield();
  } while (clock_type::now() < spin_until);
  for (;;) {
    if (job* j = try_pop()) return j;
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopping_ && queued_.load(std::memory_order_acquire) == 0) return nullptr;
    sleeping_.store(true);  // before the predicate's look at queued_ (enqueue: the other way round)
    wake_.wait(lock, [&] { return stopping_ || queued_.load() > 0; });
    sleeping_.store(false);
  }
}

job* index::impl::try_pop() {
  job* j = nullptr;
  if (!queue_.pop(j)) return nullptr;
  queued_.fetch_sub(1, std::memory_order_acq_rel);
  return j;
}

prepared* index::impl::take_slot(job* j) {
  prepared* p = &slots_[next_slot_];
  p->reset(j, &spaces_[next_slot_]);
  next_slot_ = (next_slot_ + 1) % pipeline_depth;
  // Batches are taken up in queue order: their sequence numbers are given
  // here, since a reader task may deliver before an earlier batch.
  p->sequence = sequence_;
  sequence_ += j->members.empty() ? 1 : j->members.size();
  return p;
}

job* index::impl::gather(job* first) {
  if (!foldable(*first)) return first;
  std::array<job*, max_group_members> taken;
  std::size_t count = 0;
  std::size_t total = first->ops.size();
  std::uint64_t output = scan_output_bound(*first);
  const std::uint64_t cap = fold_output_cap();
  taken[count++] = first;
  while (count < max_group_members) {
    job* j = take_next();
    if (!j) break;
    const std::uint64_t more = foldable(*j) ? scan_output_bound(*j) : 0;
    if (!foldable(*j) || total + j->ops.size() > cfg_.group_commit_ops || more > cap - output) {
      held_.push_front(j);  // runs next, after the batches folded so far
      break;
    }
    taken[count++] = j;
    total += j->ops.size();
    output += more;
  }
  if (count == 1) return first;
  try {
    // The members keep their own ops (their key columns become their
    // results' keys); the combined job gets a copy.
    auto combined = std::make_unique<job>();
    combined->submitted = first->submitted;
    combined->members.assign(taken.begin(), taken.begin() + static_cast<std::ptrdiff_t>(count));
    combined->member_begin.reserve(count + 1);
    combined->ops.reserve(total);
    for (std::size_t m = 0; m < count; ++m) {
      combined->member_begin.push_back(combined->ops.size());
      combined->ops.append(taken[m]->ops);
      combined->writes += taken[m]->writes;
    }
    combined->member_begin.push_back(total);
    return combined.release();
  } catch (const std::bad_alloc&) {
    // No memory to fold them: they run one by one, in queue order.
    for (std::size_t m = count; m-- > 1;) held_.push_front(taken[m]);
    return first;
  }
}

void index::impl::dispatch() {
  prepared* ready = nullptr;  // routed, its leaf phase next
  // Leaf phase done; its answers on their way back on the GPU, or its redo
  // log record being written (the tasks keep their failures in the batch).
  prepared* pending = nullptr;
  auto pending_done = [&] {
    return (!pending->scattering || scatter_->idle()) && (!pending->logging || logger_->idle()) &&
           (pending->log_sequence == 0 || durable(*pending));
  };
  // The logger is free for the next record once the pending one's is written.
  auto logger_free = [&] {
    if (!pending || !pending->logging) return;
    logger_->wait();
    pending->logging = false;
  };
  auto deliver_pending = [&] {
    if (!pending) return;
    if (pending->scattering) scatter_->wait();
    logger_free();
    wait_durable(*pending);
    deliver(*pending);
    pending = nullptr;
  };
  // A slot is reused every pipeline_depth batches; batches handed to reader
  // tasks go on past a pending one, whose slot must not be taken while it
  // waits.
  auto take = [&](job* j) {
    if (pending == &slots_[next_slot_]) deliver_pending();
    return take_slot(j);
  };
  for (;;) {
    if (!ready) {
      job* j = take_next();
      if (!j) {
        deliver_pending();  // nothing else to overlap it with
        j = pop_or_wait();
      }
      if (!j) {
        wait_for_answers();
        return;
      }
      if (j->type == job::kind::save) {
        // It reads the leaves beside later readers; writes wait for it.
        try {
          start_save(j);
        } catch (...) {
          j->finished.set_exception(std::current_exception());
          delete j;
        }
        continue;
      }
      if (j->type != job::kind::batch) {
        deliver_pending();  // loads and barriers come after every earlier batch
        wait_for_answers();
        gate_.begin_write();
        run(j);
        // Counted (and numbered) before readers may enter again: a reader
        // that sees the job's effect gets a number after it.
        gate_.writes_done(j->writes, sequence_);
        gate_.end_write();
        delete j;
        continue;
      }
      j = gather(j);
      ready = take(j);
      const serial_scope serial(is_small(*j));
      prepare(*ready);
    }
    // What readers on callers see once its writes are done: its writes,
    // and the number of the batch after it.
    const std::uint32_t writes = ready->j->writes;
    const std::uint64_t after = ready->sequence + (ready->j->members.empty() ? 1 : ready->j->members.size());
    if (ready->direct && launch_reader(*ready)) {
      gate_.writes_done(writes, after);  // it only reads
      ready = nullptr;  // it runs beside the dispatcher, which takes up the next
      continue;
    }
    // The next batch is validated and routed on the look-ahead thread while
    // this one runs its leaf phase; a small one on this thread afterwards.
    prepared* next = nullptr;
    bool next_small = false;
    if (job* j2 = take_next()) {
      if (j2->type == job::kind::batch) {
        j2 = gather(j2);
        next = take(j2);
        next_small = is_small(*j2);
        if (!next_small) lookahead_->start([this, next] { prepare(*next); });
      } else {
        held_.push_front(j2);
      }
    }
    // It may write (verify_each_batch: the check after it may rebuild the
    // leaf table).
    const bool exclusive = !ready->direct || cfg_.verify_each_batch;
    if (exclusive) {
      wait_for_readers();
      gate_.begin_write();
    }
    if (pending && pending_done()) deliver_pending();  // no need to keep it waiting
    const bool small = is_small(*ready->j);
    {
      const serial_scope serial(small);
      leaf_stage(*ready);
    }
    gate_.writes_done(writes, after);  // before readers may enter again (see above)
    if (exclusive) gate_.end_write();
    if (needs_log(*ready)) {
      // Records go in queue order: the previous one is written first (its
      // sync may still run beside this one's write).
      logger_free();
      if (small) {
        write_log(*ready);  // a hand-over would cost more than the write
      } else {
        ready->logging = true;
        logger_->start([this, p = ready] { write_log(*p); });
      }
    }
    deliver_pending();  // the previous batch, in order
    if (ready->gpu_scatter) {
      ready->scattering = true;
      scatter_->start([this, p = ready] { scatter_on_gpu(*p); });
    }
    if (ready->scattering || ready->logging || ready->log_sequence != 0) {
      pending = ready;
    } else {
      deliver(*ready);
    }
    ready = nullptr;
    if (next) {
      if (next_small) {
        const serial_scope serial(true);
        prepare(*next);
      } else {
        lookahead_->wait();  // prepare() keeps its exceptions in next->failure
      }
      ready = next;
    }
  }
}

void index::impl::run(job* j) {
  try {
    if (j->type == job::kind::load) {
      run_in_arena([&] { load(j->pairs); });
      publish_stats(nullptr, false, 0);  // keys, leaves and bytes of the new contents
      if (!cfg_.storage_dir.empty() && !recovering_.load()) checkpoint_after_load();
    } else if (j->type == job::kind::barrier) {
      run_in_arena([&] { j->barrier_work(); });
    }
    j->finished.set_value();
  } catch (...) {
    j->finished.set_exception(std::current_exception());
  }
}

void index::impl::prepare(prepared& p) {
  try {
    p.version = layout_snapshot();
    run_in_arena([&] {
      validate(p);
      gather_log_ops(p);
    });
    p.direct = p.gets_only && p.n != 0 && p.n <= cfg_.direct_get_ops &&
               (p.n <= cfg_.small_batch_ops || p.n <= direct_gets_per_leaf * p.version->leaf_count());
    if (p.n != 0 && !p.direct) {
      // Not inside the arena: the GPU side waits for the GPU on this thread,
      // never on a TBB worker; the CPU parts enter the arena themselves.
      const auto t0 = clock_type::now();
      route(p);
      p.times.route = seconds_since(t0);
    }
  } catch (...) {
    p.failure = std::current_exception();
  }
}

void index::impl::leaf_stage(prepared& p) {
  if (p.failure || refuse_if_log_failed(p)) return;
  try {
    run_in_arena([&] { run_leaves(p, p.splits); });
  } catch (...) {
    p.failure = std::current_exception();
    p.gpu_scatter = false;
    if (p.direct) return;  // it only read (and may run beside other readers)
    // The batch may have split leaves before failing: bring the leaf table
    // and inner layout back in line with the leaves so the index stays
    // consistent for the next batch.
    try {
      run_in_arena([&] { rebuild_table_from_store({}); });
    } catch (...) {
    }
  }
}

// Delivering allocates nothing: the batch's writes are done, and it must
// not fail now (stats are best effort).
void index::impl::deliver(prepared& p, bool on_worker) {
  if (p.log_failure) p.failure = p.log_failure;
  try {
    publish_stats(&p, p.failure != nullptr, p.splits);
  } catch (...) {
  }
  if (!p.j->members.empty()) return deliver_members(p, on_worker);
  job& j = *p.j;
  batch_result result;
  if (j.in_place) {  // the answers are in the caller's arrays already
    p.columns.reset();
    finish(j, std::move(result), p.failure);
    delete p.j;
    p.j = nullptr;
    return;
  }
  if (!p.failure) {
    if (p.result_keys.size() != p.n) p.result_keys = j.ops.take_keys();
    result = batch_result(std::move(p.columns), 0, p.n, std::move(p.result_keys));
    result.set_errors(std::move(p.errors));
  }
  p.columns.reset();
  result.set_sequence(p.sequence);
  finish(j, std::move(result), p.failure);
  delete p.j;
  p.j = nullptr;
}

void index::impl::make_member_results(prepared& p) {
  const job& whole = *p.j;
  if (whole.members.empty()) return;
  std::vector<batch_result> results;
  results.reserve(whole.members.size());
  auto error = p.errors.begin();
  for (std::size_t m = 0; m < whole.members.size(); ++m) {
    const std::size_t begin = whole.member_begin[m];
    const std::size_t n = whole.member_begin[m + 1] - begin;
    std::vector<std::pair<std::size_t, std::string>> errors;
    auto last = error;
    while (last != p.errors.end() && last->first < begin + n) ++last;
    errors.reserve(static_cast<std::size_t>(last - error));
    for (; error != last; ++error) errors.emplace_back(error->first - begin, std::move(error->second));
    // The member's own key column (its ops live on in the combined job) is
    // the right size for its answers' keys.
    results.emplace_back(p.columns, begin, n, whole.members[m]->ops.take_keys());
    results.back().set_errors(std::move(errors));
  }
  p.member_results = std::move(results);
}

void index::impl::deliver_members(prepared& p, bool on_worker) {
  // Each member's result is a window of the whole batch's answer columns
  // (shared); its keys are copied into the key column it came with. Members
  // are numbered from the job's first sequence number, in queue order. When
  // a member has a callback, all are answered here, in queue order
  // (callbacks run on the dispatcher). Otherwise the arena fulfils the
  // futures in parallel while the dispatcher goes on to the next batch (a
  // reader task fulfils them itself): each fulfilment wakes a waiting
  // client, which costs the waker microseconds.
  job& whole = *p.j;
  if (!p.failure && p.result_keys.size() != p.n) p.result_keys = whole.ops.take_keys();
  fold_answers a;
  a.members = std::move(whole.members);
  a.member_begin = std::move(whole.member_begin);
  if (!p.failure) a.results = std::move(p.member_results);
  a.keys = std::move(p.result_keys);
  a.failure = p.failure;
  a.first_sequence = p.sequence;
  const std::size_t count = a.members.size();
  p.columns.reset();
  delete p.j;
  p.j = nullptr;
  const bool callbacks = std::any_of(a.members.begin(), a.members.end(), [](const job* m) { return bool(m->done); });
  if (on_worker) {  // a reader task (no callbacks): no hand-over, no queueing behind other tasks
    tbb::parallel_for(std::size_t{0}, count, [&](std::size_t m) { answer_member(a, m); });
    return;
  }
  if (!callbacks && threads_ > 1) {  // the arena has workers to take it
    std::unique_ptr<fold_answers> handed;
    try {
      handed = std::make_unique<fold_answers>(std::move(a));
      answering_.fetch_add(1);
      fold_answers* const f = handed.get();
      // The task owns f, and frees it before the count drops: the index may
      // be destroyed as soon as the count reads 0.
      arena_.enqueue([this, f] {
        tbb::parallel_for(std::size_t{0}, f->members.size(), [&](std::size_t m) { answer_member(*f, m); });
        delete f;
        answering_.fetch_sub(1);
      });
      handed.release();
      return;
    } catch (...) {  // no memory to hand them over: they are answered here
      if (handed) {
        answering_.fetch_sub(1);
        a = std::move(*handed);
      }
    }
  }
  for (std::size_t m = 0; m < count; ++m) answer_member(a, m);
}

void index::impl::answer_member(fold_answers& a, std::size_t m) {
  job* member = a.members[m];
  batch_result result;
  if (!a.failure) {
    result = std::move(a.results[m]);
    const auto k = a.keys.begin() + static_cast<std::ptrdiff_t>(a.member_begin[m]);
    std::copy(k, k + static_cast<std::ptrdiff_t>(result.size()), result.mutable_keys().begin());
  }
  result.set_sequence(a.first_sequence + m);
  finish(*member, std::move(result), a.failure);
  delete member;
}

bool index::impl::launch_reader(prepared& p) {
  // Readers run on the arena's workers, not on the dispatcher: with few
  // threads the dispatcher's share of the work outweighs the overlap, and
  // more readers at once than a quarter of the threads stretch each one's
  // latency. Callbacks run on the dispatcher in queue order; small batches
  // are cheaper there than handed over; verify_each_batch may rebuild the
  // leaf table.
  const std::size_t most = std::min(max_readers, threads_ / 4);
  if (most < 2 || cfg_.verify_each_batch || p.failure || is_small(*p.j) || p.j->done) return false;
  for (const job* m : p.j->members) {
    if (m->done) return false;
  }
  for (;;) {
    for (std::size_t i = 0; i < most; ++i) {
      reader_slot& r = readers_[i];
      if (r.busy.load(std::memory_order_acquire)) continue;
      r.p = std::move(p);
      r.busy.store(true, std::memory_order_relaxed);
      readers_running_.fetch_add(1, std::memory_order_acq_rel);
      try {
        // The task touches nothing of the index after its count drops: the
        // index may be destroyed as soon as it reads 0.
        arena_.enqueue([this, slot = &r] {
          leaf_stage(slot->p);
          deliver(slot->p, true);
          slot->busy.store(false, std::memory_order_release);
          readers_running_.fetch_sub(1, std::memory_order_acq_rel);
        });
      } catch (...) {  // no memory for the task: it runs on the dispatcher
        p = std::move(r.p);
        r.busy.store(false, std::memory_order_relaxed);
        readers_running_.fetch_sub(1, std::memory_order_acq_rel);
        return false;
      }
      return true;
    }
    std::this_thread::yield();  // all slots busy: one frees within a batch's time
  }
}

void index::impl::wait_for_readers() const {
  while (readers_running_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void index::impl::wait_for_answers() {
  wait_for_readers();  // their folds' fulfilments are counted before they finish
  while (answering_.load() != 0) std::this_thread::yield();
}

void index::impl::finish(job& j, batch_result&& result, const std::exception_ptr& failure) {
  if (j.in_place) {
    if (failure) {
      j.finished.set_exception(failure);
    } else {
      j.finished.set_value();
    }
  } else if (j.done) {
    try {
      j.done(std::move(result), failure);
    } catch (const std::exception& e) {
      note_callback_error(e.what());
    } catch (...) {
      note_callback_error("unknown exception");
    }
  } else if (failure) {
    j.promise.set_exception(failure);
  } else {
    j.promise.set_value(std::move(result));
  }
}

void index::impl::note_callback_error(const char* what) noexcept {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  ++stats_.callback_errors;
  try {
    stats_.last_callback_error = what;
  } catch (...) {  // no memory for the message: the count stands
  }
}

}  // namespace tandem
