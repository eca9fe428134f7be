// The submit queue and the dispatcher (index_impl.hpp). Takes jobs from any
// submitting thread (Boost.Lockfree MPMC queue); the dispatcher thread runs
// them strictly in queue order. While one batch runs its leaf phase on the
// dispatcher, the next queued batch is validated and routed on the
// look-ahead thread (DESIGN, pipelining), on the layout version of that
// moment, which stays correct after the first batch's splits because ops
// follow right links. Batches found waiting together (each below
// config.group_commit_ops) are folded into one job whose ops are theirs back
// to back: one run, then each gets a window of its answers (group commit).
// Finishing a batch fulfils its future or runs its callback on the
// dispatcher thread.
#include "index_impl.hpp"

#include <tandem/device/device_query.hpp>
#include <tandem/error.hpp>

#include <oneapi/tbb/info.h>

#include <cmath>
#include <stdexcept>

namespace tandem {
namespace {

void validate_config(const config& c) {
  if (c.fanout != 16 && c.fanout != 32 && c.fanout != 64) {
    throw std::invalid_argument("tandem::config.fanout must be 16, 32 or 64, got " + std::to_string(c.fanout));
  }
  if (!(c.leaf_fill > 0.0 && c.leaf_fill <= 1.0)) {
    throw std::invalid_argument("tandem::config.leaf_fill must be in (0, 1], got " + std::to_string(c.leaf_fill));
  }
  if (std::isnan(c.gpu_share) || c.gpu_share > 1.0) {
    throw std::invalid_argument("tandem::config.gpu_share must be in [0, 1] (or negative for automatic), got " +
                                std::to_string(c.gpu_share));
  }
  if (c.gpu_failure_limit < 1) {
    throw std::invalid_argument("tandem::config.gpu_failure_limit must be at least 1, got " +
                                std::to_string(c.gpu_failure_limit));
  }
  if (c.threads > 4096) {
    throw std::invalid_argument("tandem::config.threads must be at most 4096, got " + std::to_string(c.threads));
  }
}

}  // namespace

thread_local bool index::impl::serial_stage_ = false;

index::impl::impl(const config& cfg) : cfg_(cfg), queue_(128) {
  validate_config(cfg_);
  open_gpu();
  memory_ = gpu_ ? scheduler::memory_kind::pinned : scheduler::memory_kind::ordinary;
  for (route_space& s : spaces_) s.set_kind(memory_);
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
  rebuild_table_from_store();
  publish_stats(nullptr, false, 0);
  lookahead_ = std::make_unique<scheduler::worker_thread>();
  if (gpu_) {
    gpu_side_ = std::make_unique<scheduler::worker_thread>();
    scatter_ = std::make_unique<scheduler::worker_thread>();
  }
  dispatcher_ = std::thread([this] { dispatch(); });
}

index::impl::~impl() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  dispatcher_.join();
}

void index::impl::enqueue(job* j) {
  j->submitted = clock_type::now();
  queued_.fetch_add(1, std::memory_order_acq_rel);
  while (!queue_.push(j)) std::this_thread::yield();  // push fails only when memory runs out
  { std::lock_guard<std::mutex> lock(mutex_); }
  wake_.notify_one();
}

void index::impl::load_and_wait(const load_input& in) {
  auto j = std::make_unique<job>();
  j->type = job::kind::load;
  j->pairs = in;
  std::future<void> done = j->finished.get_future();
  enqueue(j.release());
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
    job* j = nullptr;
    if (queue_.pop(j)) {
      queued_.fetch_sub(1, std::memory_order_acq_rel);
      return j;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopping_ && queued_.load(std::memory_order_acquire) == 0) return nullptr;
    wake_.wait(lock, [&] { return stopping_ || queued_.load(std::memory_order_acquire) > 0; });
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
  return p;
}

job* index::impl::gather(job* first, job*& held) {
  if (!foldable(*first)) return first;
  std::size_t total = first->ops.size();
  job* combined = nullptr;
  while (job* j = try_pop()) {
    if (!foldable(*j) || total + j->ops.size() > cfg_.group_commit_ops) {
      held = j;  // runs next, after the batches folded so far
      break;
    }
    if (!combined) {
      combined = new job;
      combined->submitted = first->submitted;
      combined->ops = std::move(first->ops);
      combined->members.push_back(first);
      combined->member_begin.push_back(0);
    }
    combined->members.push_back(j);
    combined->member_begin.push_back(total);
    combined->ops.append(j->ops);
    total += j->ops.size();
  }
  if (!combined) return first;
  combined->member_begin.push_back(total);
  return combined;
}

void index::impl::dispatch() {
  prepared* ready = nullptr;       // routed, its leaf phase next
  prepared* scattering = nullptr;  // leaf phase done, answers on their way back on the GPU
  job* held = nullptr;             // a non-batch job popped while looking ahead
  auto deliver_scattered = [&] {
    if (!scattering) return;
    scatter_->wait();  // the task keeps its failures in the batch
    deliver(*scattering);
    scattering = nullptr;
  };
  for (;;) {
    if (!ready) {
      job* j = held ? std::exchange(held, nullptr) : try_pop();
      if (!j) {
        deliver_scattered();  // nothing else to overlap it with
        j = pop_or_wait();
      }
      if (!j) return;
      if (j->type != job::kind::batch) {
        deliver_scattered();  // loads and barriers come after every earlier batch
        run(j);
        delete j;
        continue;
      }
      j = gather(j, held);
      ready = take_slot(j);
      const serial_scope serial(is_small(*j));
      prepare(*ready);
    }
    // The next batch is validated and routed on the look-ahead thread while
    // this one runs its leaf phase; a small one on this thread afterwards.
    prepared* next = nullptr;
    bool next_small = false;
    if (job* j2 = held ? std::exchange(held, nullptr) : try_pop()) {
      if (j2->type == job::kind::batch) {
        j2 = gather(j2, held);
        next = take_slot(j2);
        next_small = is_small(*j2);
        if (!next_small) lookahead_->start([this, next] { prepare(*next); });
      } else {
        held = j2;
      }
    }
    {
      const serial_scope serial(is_small(*ready->j));
      leaf_stage(*ready);
    }
    deliver_scattered();  // the previous batch, in order
    if (ready->gpu_scatter) {
      scattering = ready;
      scatter_->start([this, p = ready] { scatter_on_gpu(*p); });
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
    run_in_arena([&] { validate(p); });
    if (p.n != 0) {
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
  if (p.failure) return;
  try {
    run_in_arena([&] { run_leaves(p, p.splits); });
  } catch (...) {
    p.failure = std::current_exception();
    p.gpu_scatter = false;
    // The batch may have split leaves before failing: bring the leaf table
    // and inner layout back in line with the leaves so the index stays
    // consistent for the next batch.
    try {
      run_in_arena([&] { rebuild_table_from_store(); });
    } catch (...) {
    }
  }
}

void index::impl::deliver(prepared& p) {
  if (!p.j->members.empty()) return deliver_members(p);
  job& j = *p.j;
  batch_result result;
  if (!p.failure) {
    if (p.result_keys.size() != p.n) p.result_keys = j.ops.take_keys();
    result = batch_result(std::move(p.columns), 0, p.n, std::move(p.result_keys));
    for (auto& [i, message] : p.errors) result.add_error(i, std::move(message));
  }
  p.columns.reset();
  result.set_sequence(sequence_++);
  publish_stats(&p, p.failure != nullptr, p.splits);
  finish(j, std::move(result), p.failure);
  delete p.j;
  p.j = nullptr;
}

void index::impl::deliver_members(prepared& p) {
  // Each member's result is a window of the whole batch's answer columns
  // (shared, nothing copied but its keys and error messages).
  job& whole = *p.j;
  if (!p.failure && p.result_keys.size() != p.n) p.result_keys = whole.ops.take_keys();
  publish_stats(&p, p.failure != nullptr, p.splits);
  auto error = p.errors.begin();
  for (std::size_t m = 0; m < whole.members.size(); ++m) {
    job* member = whole.members[m];
    const std::size_t begin = whole.member_begin[m];
    const std::size_t n = whole.member_begin[m + 1] - begin;
    batch_result result;
    std::exception_ptr failure = p.failure;
    if (!failure) {
      try {
        const auto k = p.result_keys.begin() + static_cast<std::ptrdiff_t>(begin);
        result = batch_result(p.columns, begin, n, std::vector<key_type>(k, k + static_cast<std::ptrdiff_t>(n)));
        for (; error != p.errors.end() && error->first < begin + n; ++error) {
          result.add_error(error->first - begin, std::move(error->second));
        }
      } catch (...) {
        failure = std::current_exception();
        result = batch_result();
      }
    }
    result.set_sequence(sequence_++);
    finish(*member, std::move(result), failure);
    delete member;
  }
  p.columns.reset();
  delete p.j;
  p.j = nullptr;
}

void index::impl::finish(job& j, batch_result&& result, const std::exception_ptr& failure) {
  if (j.done) {
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

void index::impl::note_callback_error(const std::string& what) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  ++stats_.callback_errors;
  stats_.last_callback_error = what;
}

}  // namespace tandem
