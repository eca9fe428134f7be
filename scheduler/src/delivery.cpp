// Delivery (index_impl.hpp): finishing a batch fulfils its future or runs
// its callback on the dispatcher thread; the futures of a folded job whose
// batches have no callback are fulfilled in parallel on the arena's threads
// (each wakes a client) while the dispatcher goes on to the next batch.
#include "index_impl.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>

namespace tandem {

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

void index::impl::wait_for_answers() {
  wait_for_readers();  // their folds' fulfilments are counted before they finish
  while (answering_.load() != 0) std::this_thread::yield();
}

void index::impl::finish(job& j, batch_result&& result, const std::exception_ptr& failure) {
  if (j.in_place) {
    const std::exception_ptr e = j.then ? j.then(failure) : failure;
    if (e) {
      j.finished.set_exception(e);
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
