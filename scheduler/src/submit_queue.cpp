// The submit queue (index_impl.hpp). Takes jobs from any submitting thread
// (Boost.Lockfree MPMC queue); the dispatcher thread (dispatch.cpp) takes
// them out strictly in queue order. Writes are counted as they enter it, so
// a read on a caller's thread waits for exactly the writes submitted before
// it (reader_gate); a read that may run on its caller's thread does so
// before it would be queued (caller_runs.cpp).
#include "index_impl.hpp"

#include <tandem/error.hpp>

#include <new>

namespace tandem {

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

}  // namespace tandem
