// Snapshots and the redo log (index_impl.hpp).
//
// Snapshots: index::save writes the pairs, in key order, to a snapshot file
// (host/storage/snapshot_file.hpp) on a thread of its own that counts as a reader,
// so that batches of gets go on beside it while a batch that writes waits
// for it; index::open reads and checks a snapshot on the caller's thread
// and loads its pairs as a queued load.
//
// The redo log (config.storage_dir, host/storage/redo_log.hpp): after a batch's
// leaf phase has applied its writes, its write ops (put, insert, erase, in
// batch order; a group-commit fold's members back to back) go to the log as
// one record numbered after its last member's sequence number. The logger
// thread writes the record while the dispatcher runs the next batch's leaf
// phase, and the batch's answer waits for it (a small batch writes its
// record on the dispatcher). So the log holds the batches in queue order,
// and an answer is released only once its record is in the OS (and on
// disk, by config.log_sync_policy). Recovery loads `checkpoint.snapshot`
// and replays the later records as batches; a checkpoint is a save to that
// file followed by dropping the records it covers. A load (or open) writes
// the checkpoint before any later batch runs, so that the log's records
// always apply to the checkpoint's contents.
#include "index_impl.hpp"

#include <tandem/error.hpp>
#include <tandem/host/storage/snapshot_file.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <numeric>
#include <utility>

namespace tandem {
namespace {

host::snapshot::geometry geometry_of(const config& cfg) {
  return {static_cast<std::uint32_t>(host::bpa::capacity), static_cast<std::uint32_t>(host::bpa::log_capacity),
          static_cast<std::uint32_t>(host::bpa::num_blocks), static_cast<std::uint32_t>(host::bpa::block_capacity),
          static_cast<std::uint32_t>(cfg.fanout)};
}

/// Pairs copied from the leaves per step of a save (and written while the
/// next step copies): 64 MiB.
constexpr std::size_t save_step_pairs = std::size_t{1} << 22;

}  // namespace

void index::impl::start_save(job* j) {
  // Every batch before the save has run its leaf phase, none after it has:
  // the leaves hold exactly the state the snapshot is of.
  if (saver_.joinable()) saver_.join();  // the previous save's thread, done reading
  host::leaf_table t = sync_pending_ ? store_.table() : table_;
  const std::uint64_t sequence = sequence_;
  if (j->saved_sequence) *j->saved_sequence = sequence;
  readers_running_.fetch_add(1, std::memory_order_acq_rel);
  // No one-key write on a caller changes a value it reads.
  scheduler::reader_gate::slot* const counted = gate_.begin_batch_read();
  try {
    saver_ = std::thread([this, j, t = std::move(t), sequence, counted] {
      try {
        write_snapshot(j->path, t.ids, sequence);
        j->finished.set_value();
      } catch (...) {
        j->finished.set_exception(std::current_exception());
      }
      delete j;
      gate_.end_batch_read(counted);
      readers_running_.fetch_sub(1, std::memory_order_acq_rel);  // the thread touches nothing after this
    });
  } catch (...) {
    gate_.end_batch_read(counted);
    readers_running_.fetch_sub(1, std::memory_order_acq_rel);
    throw;
  }
}

void index::impl::write_snapshot(const std::string& path, const std::vector<leaf_id>& ids, std::uint64_t sequence) {
  const std::size_t leaves = ids.size();
  std::vector<std::uint32_t> sizes(leaves);
  std::vector<key_type> keys;
  std::vector<value_type> values;
  arena_.execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, leaves, 1024), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t i = r.begin(); i < r.end(); ++i) sizes[i] = static_cast<std::uint32_t>(store_[ids[i]].data.size());
    });
  });
  const std::uint64_t pairs = std::accumulate(sizes.begin(), sizes.end(), std::uint64_t{0});
  host::snapshot::info header;
  header.pairs = pairs;
  header.sequence = sequence;
  header.geom = geometry_of(cfg_);
  host::snapshot::writer out(path, header);
  keys.resize(std::min<std::uint64_t>(pairs, save_step_pairs + host::bpa::capacity));
  values.resize(keys.size());
  std::vector<std::size_t> offset;
  for (std::size_t first = 0; first < leaves;) {
    // Leaves [first, last) fill at most the step's arrays.
    std::size_t last = first, n = 0;
    offset.clear();
    while (last < leaves && (n == 0 || n + sizes[last] <= keys.size())) {
      offset.push_back(n);
      n += sizes[last++];
    }
    arena_.execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(first, last, 64), [&](const tbb::blocked_range<std::size_t>& r) {
        entry buffer[host::bpa::capacity];
        for (std::size_t i = r.begin(); i < r.end(); ++i) {
          const host::bpa& data = store_[ids[i]].data;
          const std::size_t m = data.copy_ordered(min_key, sizes[i], buffer);
          const std::size_t at = offset[i - first];
          for (std::size_t k = 0; k < m; ++k) {
            keys[at + k] = buffer[k].key;
            values[at + k] = buffer[k].value;
          }
        }
      });
    });
    out.append(keys.data(), values.data(), n);
    first = last;
  }
  out.commit();
}

std::uint64_t index::impl::open_snapshot(const std::string& path) {
  const host::snapshot::info header = host::snapshot::read_info(path);
  scheduler::host_array<key_type> keys;
  scheduler::host_array<value_type> values;
  const std::size_t n = static_cast<std::size_t>(header.pairs);
  key_type* k = keys.get(n);
  value_type* v = values.get(n);
  (void)host::snapshot::read_into(path, k, v, n);
  load_input in{k, v, 1, n};
  in.sequence = header.sequence;
  load_and_wait(in);
  return header.sequence;
}

// ---- the redo log -------------------------------------------------------------

namespace {

std::uint64_t write_ops(const prepared& p) noexcept {
  const auto& by_type = p.info.ops_by_type;
  return by_type[static_cast<std::size_t>(op_type::put)] + by_type[static_cast<std::size_t>(op_type::insert)] +
         by_type[static_cast<std::size_t>(op_type::erase)];
}

bool is_write(op_type t) noexcept { return t == op_type::put || t == op_type::insert || t == op_type::erase; }

}  // namespace

bool index::impl::needs_log(const prepared& p) const noexcept {
  return !cfg_.storage_dir.empty() && !recovering_.load(std::memory_order_relaxed) && !p.failure &&
         write_ops(p) != 0;
}

void index::impl::gather_log_ops(prepared& p) {
  // Only the writes of a batch that has other ops too: copied out in
  // parallel, in batch order (a batch of writes only is logged from its own
  // columns).
  const std::size_t writes = static_cast<std::size_t>(write_ops(p));
  if (cfg_.storage_dir.empty() || recovering_.load(std::memory_order_relaxed) || writes == 0 || writes == p.n) return;
  const batch& b = p.j->ops;
  const op_type* types = b.types();
  const key_type* keys = b.keys();
  const std::uint64_t* args = b.args();
  constexpr std::size_t chunk = std::size_t{1} << 16;
  const std::size_t chunks = (p.n + chunk - 1) / chunk;
  std::vector<std::size_t> at(chunks + 1, 0);
  route_space& sp = *p.space;
  op_type* out_types = sp.log_types.get(writes);
  key_type* out_keys = sp.log_keys.get(writes);
  value_type* out_args = sp.log_args.get(writes);
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    std::size_t w = 0;
    for (std::size_t i = c * chunk, e = std::min(p.n, i + chunk); i < e; ++i) w += is_write(types[i]) ? 1 : 0;
    at[c + 1] = w;
  });
  std::partial_sum(at.begin(), at.end(), at.begin());
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    std::size_t w = at[c];
    for (std::size_t i = c * chunk, e = std::min(p.n, i + chunk); i < e; ++i) {
      if (!is_write(types[i])) continue;
      out_types[w] = types[i];
      out_keys[w] = keys[i];
      out_args[w] = args[i];
      ++w;
    }
  });
  p.log_gathered = true;
}

bool index::impl::refuse_if_log_failed(prepared& p) noexcept {
  if (cfg_.storage_dir.empty() || write_ops(p) == 0) return false;
  // Counted before the flag is read, as fail_log sets the flag before it
  // reads the count: a batch that runs is counted in what a failure may
  // have lost (or refused).
  const std::uint64_t through = p.sequence + (p.j->members.empty() ? 1 : p.j->members.size());
  if (through > applied_through_.load()) applied_through_.store(through);
  if (!log_failed_.load()) return false;
  try {
    p.failure = std::make_exception_ptr(error(log_failure() + "; this batch did not run"));
  } catch (...) {  // no memory for the message
    p.failure = std::current_exception();
  }
  return true;
}

void index::impl::fail_log(const std::string& why) noexcept {
  {
    std::lock_guard<std::mutex> lock(log_failure_mutex_);
    if (log_failed_.load(std::memory_order_relaxed)) return;  // the first reason stands
    try {
      log_failure_ = "tandem::index: the redo log in " + cfg_.storage_dir + " failed (" + why +
                     "): batches with writes are refused until index::checkpoint() succeeds";
    } catch (...) {  // no memory for the message: the flag still stands
      log_failure_.clear();
    }
    log_failed_.store(true);
    // Every batch that applied writes, or may still, is below this; a
    // checkpoint whose snapshot holds them all ends the failure.
    lost_before_ = applied_through_.load();
  }
  { std::lock_guard<std::mutex> lock(sync_mutex_); }
  durable_cv_.notify_all();  // deliveries waiting for a sync give up
}

std::exception_ptr index::impl::unlogged_batch_error(std::uint64_t sequence, const char* why) const noexcept {
  try {
    const std::string reason = why != nullptr ? std::string(why) : log_failure();
    return std::make_exception_ptr(
        error("tandem::index: batch " + std::to_string(sequence) +
              " was applied, but its redo log record could not be made durable, so a crash may lose it (" + reason +
              "); batches with writes are refused until index::checkpoint() succeeds"));
  } catch (...) {  // no memory for the message
    return std::current_exception();
  }
}

void index::impl::write_log(prepared& p) {
  const std::uint64_t sequence = p.sequence + (p.j->members.empty() ? 1 : p.j->members.size());
  try {
    if (log_failed_.load(std::memory_order_acquire) || !log_) throw error("the log failed before this batch's record");
    const batch& b = p.j->ops;
    if (p.log_gathered) {
      const route_space& sp = *p.space;
      log_->append(sequence, sp.log_types.data(), sp.log_keys.data(), sp.log_args.data(),
                   static_cast<std::size_t>(write_ops(p)));
    } else {
      // Writes only: the batch's own columns, borrowed (the keys went to
      // the answer's column).
      const key_type* keys = p.result_keys.size() == p.n ? p.result_keys.data() : b.keys();
      log_->append(sequence, b.types(), keys, b.args(), p.n);
    }
    log_->flush();
    log_records_.fetch_add(1, std::memory_order_relaxed);
    log_bytes_.store(log_->bytes(), std::memory_order_relaxed);
    if (cfg_.log_sync_policy != log_sync::none) {
      {
        std::lock_guard<std::mutex> lock(sync_mutex_);
        written_sequence_ = sequence;
      }
      sync_wake_.notify_one();
      if (cfg_.log_sync_policy == log_sync::batch) p.log_sequence = sequence;  // its answer waits for the sync
    }
  } catch (const std::exception& e) {
    if (!log_failed_.load(std::memory_order_acquire)) fail_log(e.what());
    p.log_failure = unlogged_batch_error(sequence - 1, e.what());
  }
}

bool index::impl::durable(const prepared& p) {
  std::lock_guard<std::mutex> lock(sync_mutex_);
  return durable_sequence_ >= p.log_sequence || log_failed_.load(std::memory_order_acquire);
}

void index::impl::wait_durable(prepared& p) {
  if (p.log_sequence == 0) return;
  {
    std::unique_lock<std::mutex> lock(sync_mutex_);
    durable_cv_.wait(lock, [&] {
      return durable_sequence_ >= p.log_sequence || log_failed_.load(std::memory_order_acquire);
    });
    if (durable_sequence_ >= p.log_sequence) {
      p.log_sequence = 0;
      return;
    }
  }
  p.log_failure = unlogged_batch_error(p.log_sequence - 1, nullptr);
  p.log_sequence = 0;
}

void index::impl::sync_loop() {
  const bool group = cfg_.log_sync_policy == log_sync::group;
  const auto window = std::chrono::microseconds(cfg_.log_group_us);
  auto last = clock_type::now();
  std::unique_lock<std::mutex> lock(sync_mutex_);
  for (;;) {
    // A failed log waits for a checkpoint to reopen it (resume_syncer).
    sync_wake_.wait(lock, [&] {
      return sync_stop_ ||
             (!sync_paused_ && !log_failed_.load(std::memory_order_acquire) && written_sequence_ > durable_sequence_);
    });
    if (sync_stop_) return;
    // log_sync::group: one fdatasync a window for what was written in it.
    if (group) {
      sync_wake_.wait_until(lock, last + window, [&] { return sync_stop_ || sync_paused_; });
      // A pause may have come and gone (reset_log): look again.
      if (sync_stop_ || sync_paused_ || log_failed_.load() || written_sequence_ <= durable_sequence_) continue;
    }
    const std::uint64_t target = written_sequence_;
    sync_busy_ = true;
    lock.unlock();
    bool synced = false;
    try {
      log_->sync_written();
      synced = true;
    } catch (const std::exception& e) {
      fail_log(e.what());
    }
    last = clock_type::now();
    lock.lock();
    sync_busy_ = false;
    if (synced) {
      durable_sequence_ = std::max(durable_sequence_, target);
      log_syncs_.fetch_add(1, std::memory_order_relaxed);
    }
    durable_cv_.notify_all();
  }
}

void index::impl::pause_syncer() {
  std::unique_lock<std::mutex> lock(sync_mutex_);
  sync_paused_ = true;
  durable_cv_.wait(lock, [&] { return !sync_busy_; });
}

void index::impl::resume_syncer() {
  {
    std::lock_guard<std::mutex> lock(sync_mutex_);
    sync_paused_ = false;
  }
  sync_wake_.notify_one();
}

void index::impl::stop_syncer() noexcept {
  if (!syncer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(sync_mutex_);
    sync_stop_ = true;
  }
  sync_wake_.notify_one();
  syncer_.join();
}

void index::impl::reset_log(std::uint64_t sequence) {
  pause_syncer();
  struct resume {
    impl* self;
    ~resume() { self->resume_syncer(); }
  } const resumed{this};
  if (log_failed_.load() || !log_) {
    {
      std::lock_guard<std::mutex> lock(log_failure_mutex_);
      if (sequence < lost_before_) {
        throw error("tandem::index::checkpoint: the redo log failed while this checkpoint's snapshot was taken, so "
                    "the snapshot may miss a batch the log lost; batches with writes stay refused: call "
                    "checkpoint() again");
      }
    }
    // Every batch with a record in the failed log (some may be damaged: the
    // kernel may have dropped unsynced pages) is in the snapshot: start an
    // empty log.
    log_.reset();
    std::error_code ec;
    const std::filesystem::path file = std::filesystem::path(cfg_.storage_dir) / "redo.log";
    if (std::filesystem::exists(file, ec)) std::filesystem::resize_file(file, 0);
    log_ = std::make_unique<host::redo_log>(cfg_.storage_dir);
    (void)log_->replay(sequence, nullptr);
  }
  log_->truncate_through(sequence);  // syncs what it keeps
  log_bytes_.store(log_->bytes(), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(sync_mutex_);
    durable_sequence_ = std::max(durable_sequence_, written_sequence_);
    std::lock_guard<std::mutex> failure(log_failure_mutex_);
    log_failed_.store(false);
    log_failure_.clear();
  }
  checkpoints_.fetch_add(1, std::memory_order_relaxed);
  publish_stats(nullptr, false, 0);
}

void index::impl::checkpoint_after_load() {
  try {
    write_snapshot(checkpoint_path(), sync_pending_ ? store_.table().ids : table_.ids, sequence_);
    reset_log(sequence_);
  } catch (const std::exception& e) {
    fail_log(std::string("the checkpoint after a load failed: ") + e.what());
    throw error(std::string("tandem::index: the pairs were loaded, but writing them to the checkpoint failed, "
                            "so a crash loses them (") +
                e.what() + "); batches with writes are refused until index::checkpoint() succeeds");
  }
}

void index::impl::checkpoint() {
  if (cfg_.storage_dir.empty()) {
    throw error("tandem::index::checkpoint: the index has no config.storage_dir to write a checkpoint to");
  }
  std::uint64_t sequence = 0;
  auto j = std::make_unique<job>();
  j->type = job::kind::save;
  j->path = checkpoint_path();
  j->saved_sequence = &sequence;
  std::future<void> done = j->finished.get_future();
  enqueue(std::move(j));
  done.get();
  // Records after the snapshot stay; a failed log starts afresh.
  run_barrier([this, sequence] { reset_log(sequence); });
}

void index::impl::recover() {
  const auto t0 = clock_type::now();
  recovering_.store(true);  // before the first job: the dispatcher reads it after taking one up
  log_ = std::make_unique<host::redo_log>(cfg_.storage_dir);
  if (cfg_.log_sync_policy != log_sync::none) syncer_ = std::thread([this] { sync_loop(); });
  std::uint64_t from = 0;
  if (std::filesystem::exists(checkpoint_path())) from = open_snapshot(checkpoint_path());
  // Each record runs as a batch (queued ones fold, as a client's would); a
  // window of them in flight.
  constexpr std::size_t window = 64;
  std::deque<std::future<batch_result>> in_flight;
  std::uint64_t replayed = 0;
  const std::uint64_t last = log_->replay(from, [&](std::uint64_t sequence, const op_type* types, const key_type* keys,
                                                    const value_type* args, std::size_t n) {
    auto j = std::make_unique<job>();
    j->ops.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      switch (types[i]) {
        case op_type::put:
          j->ops.put(keys[i], args[i]);
          break;
        case op_type::insert:
          j->ops.insert(keys[i], args[i]);
          break;
        case op_type::erase:
          j->ops.erase(keys[i]);
          break;
        default:
          throw error("tandem::index: redo log record " + std::to_string(sequence) + " in " + log_->path() +
                      " holds op type " + std::to_string(static_cast<int>(types[i])) + ", not a write");
      }
    }
    in_flight.push_back(j->promise.get_future());
    enqueue(std::move(j));
    ++replayed;
    while (in_flight.size() > window) {
      (void)in_flight.front().get();
      in_flight.pop_front();
    }
  });
  for (; !in_flight.empty(); in_flight.pop_front()) (void)in_flight.front().get();
  run_barrier([&] {
    sequence_ = std::max(sequence_, last);
    recovering_.store(false);
    log_bytes_.store(log_->bytes(), std::memory_order_relaxed);
    replayed_batches_ = replayed;
    recovery_seconds_ = seconds_since(t0);
    publish_stats(nullptr, false, 0);
  });
}

}  // namespace tandem
