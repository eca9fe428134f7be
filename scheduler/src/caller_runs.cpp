// Work on the threads that ask (index_impl.hpp). Reads (point reads, small
// batches of gets, lower_bounds and counts) are answered there, beside each
// other and beside the dispatcher, while no write runs and the writes
// submitted before them are done (reader_gate): no hand-over, no wake-up
// either way. A one-key write that changes no leaf's shape and logs
// nothing runs there too (write_on_caller), beside the one-key reads and
// other such writes; any other point write goes through the queue (folded
// with other batches) and its caller waits for it here.
#include "device_columns.hpp"
#include "index_impl.hpp"

#include <tandem/error.hpp>
#include <tandem/host/shared_leaf.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>
#include <utility>

namespace tandem {
namespace {

/// How long a one-key write spins for a write or a batch read under way
/// before it goes through the queue instead.
constexpr int caller_write_spin_us = 20;
/// Validations a one-key read may fail (writers changing its leaf between
/// its reads) before it reads under the leaf's lock, or, walking several
/// leaves, as a batch reader: it always finishes.
constexpr int optimistic_reads = 8;

}  // namespace

void index::impl::refuse_on_dispatcher(const char* what) const {
  if (std::this_thread::get_id() == dispatcher_id_) {
    throw error(std::string("tandem::index::") + what +
                " called from a callback of the same index: it would wait for the callback itself "
                "(submit without waiting instead)");
  }
}

bool index::impl::run_on_caller(std::unique_ptr<job>& j) {
  if (!cfg_.caller_runs || cfg_.verify_each_batch || j->type != job::kind::batch || j->done) return false;
  if (keys_on_gpu(*j)) return false;  // keys in GPU memory: the copies' route reads them
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
  // No one-key write beside it: it sees each of them wholly or not at all.
  struct batch_read_end {
    scheduler::reader_gate& gate;
    scheduler::reader_gate::slot* counted;
    ~batch_read_end() { gate.end_batch_read(counted); }
  } batch_read{gate_, gate_.begin_batch_read()};
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

// One-key writes on the caller: those that change no leaf's shape, so
// that no leaf phase is needed (host/shared_leaf.hpp): a put of a key
// present (its value replaced), an insert into a leaf whose log has room
// (a put of a key absent too), an erase that leaves its leaf above the
// merge threshold, and an insert of a key present or an erase of a key
// absent (they change nothing). Under the leaf's version lock
// (versions_), as a writer of reader_gate: after every write submitted
// before it, never beside a write of the queue or a batch that reads on a
// thread of its own. Everything else goes through the queue: a write that
// changes a key with config.storage_dir (the redo log takes records in
// queue order), a full log or leaf, an erase that would leave the leaf to
// merge, verify_each_batch, caller_runs off, or a gate not entered within
// a brief spin (a write or a batch read under way).
//
// A leaf whose copy a route may read (the leaf cache) is claimed after the
// write (point_claims_, counted there after that): a batch routed
// from the copies with such a write between its drain and its leaf phase
// is routed again, the usual way (reroute_after_writes), since a copy it
// read may predate the write while its other answers do not.
bool index::impl::write_on_caller(op_type type, key_type key, value_type value,
                                  std::optional<value_type>& previous) {
  if (!cfg_.caller_runs || cfg_.verify_each_batch) return false;
  scheduler::reader_gate::slot& slot = gate_.mine();
  const std::uint64_t ticket = gate_.ticket();
  const auto spin_until = clock_type::now() + std::chrono::microseconds(caller_write_spin_us);
  while (!gate_.try_enter_writer(slot, ticket)) {
    if (clock_type::now() >= spin_until) return false;
    std::this_thread::yield();
  }
  using shared = host::shared_access<host::bpa>;
  const bool logged = !cfg_.storage_dir.empty();
  bool done = false;
  std::int64_t delta = 0;  // keys added
  bool changed = false;
  if (!closing_.load()) {  // else the queue refuses it
    const inner_layout& l = *layout_;  // no write of the queue runs while this writer is in
    const leaf_id id = owner_id(l, key);
    host::bpa& data = store_[id].data;
    versions_.lock(id);
    const host::bpa::slot at = shared::find(data, key);  // no other writer of the leaf meanwhile
    const std::optional<value_type> present =
        at.found() ? std::optional<value_type>(shared::value_at(data, at)) : std::nullopt;
    if (type == op_type::put) {
      if (present && !logged) {
        previous = shared::put_at(data, at, value);
        done = changed = true;
      } else if (!present && !logged && shared::insert(data, key, value)) {
        done = changed = true;
        delta = 1;
      }
    } else if (type == op_type::insert) {
      if (present) {
        previous = present;
        done = true;
      } else if (!logged && shared::insert(data, key, value)) {
        done = changed = true;
        delta = 1;
      }
    } else if (!present) {  // erase of a key absent
      done = true;
    } else if (!logged && data.size() > host::leaf_store::merge_below + 1) {
      previous = shared::erase_at(data, at);
      done = changed = true;
      delta = -1;
    }
    versions_.unlock(id);
    if (changed) {
      if (delta != 0) keys_.fetch_add(static_cast<std::size_t>(delta), std::memory_order_acq_rel);
      if (cache_) {
        try {
          point_claims_.add(gate_.at(slot), id, *cache_, gate_.sequence());
        } catch (const std::exception& e) {  // no memory for the claim: no copy is read again
          fail_copies(e.what());
        }
      }
    }
  }
  gate_.leave_writer(slot, done);
  return done;
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
  // No batch's write runs while this reader is in; one-key writes on
  // callers may, once one has come: then the read validates (shared).
  bool plain = false;
  const bool in = gate_.enter(slot, gate_.ticket(), &plain);
  if (!in || closing_.load()) {
    if (in) gate_.leave(slot);
    throw error(std::string("tandem::index::") + what + " after the index's destruction began");
  }
  const auto answer = read(*layout_, !plain);
  gate_.leave(slot, true);
  return answer;
}

// The validated reads are out of line (noinline lambdas): inlined, they
// slowed the plain path of a one-key get by 4% (2-core machine).
std::optional<value_type> index::impl::point_get(key_type key) {
  const auto shared_get = [&](const inner_layout& l) __attribute__((noinline)) -> std::optional<value_type> {
    for (int attempt = 0;; ++attempt) {
      const leaf_id id = owner_id(l, key);
      if (attempt == optimistic_reads) {
        versions_.lock(id);
        const std::optional<value_type> v = host::shared_access<host::bpa>::get(store_[id].data, key);
        versions_.unlock(id);
        return v;
      }
      const std::uint64_t seen = versions_.read_begin(id);
      const std::optional<value_type> v = host::shared_access<host::bpa>::get(store_[id].data, key);
      if (versions_.read_valid(id, seen)) return v;
    }
  };
  return point_read("get", [&](const inner_layout& l, bool shared) {
    return shared ? shared_get(l) : get_on(l, key);
  });
}

std::optional<entry> index::impl::point_lower_bound(key_type key) {
  const auto shared_lower_bound = [&](const inner_layout& l) __attribute__((noinline)) -> std::optional<entry> {
    // The owner's smallest key >= key, else the first key of a leaf to its
    // right; every leaf read is validated at the end, so the answer holds
    // at one instant. A walk past max_walk leaves (a run of empty ones),
    // or a read that failed optimistic_reads validations, reads as a batch
    // reader instead, with no one-key writer beside it.
    constexpr std::size_t max_walk = 32;
    std::array<std::pair<leaf_id, std::uint64_t>, max_walk> read;
    for (int attempt = 0;; ++attempt) {
      std::size_t count = 0;
      std::optional<entry> e;
      for (leaf_id id = owner_id(l, key);;) {
        if (count == max_walk || attempt == optimistic_reads) {
          scheduler::reader_gate::slot* const counted = gate_.begin_batch_read();
          e = lower_bound_on(l, key);
          gate_.end_batch_read(counted);
          return e;
        }
        read[count++] = {id, versions_.read_begin(id)};
        const host::leaf& f = store_[id];
        e = host::shared_access<host::bpa>::lower_bound(f.data, key);
        if (e || f.right == no_leaf) break;
        id = f.right;
      }
      bool valid = true;
      for (std::size_t i = 0; i < count && valid; ++i) valid = versions_.read_valid(read[i].first, read[i].second);
      if (valid) return e;
    }
  };
  return point_read("lower_bound", [&](const inner_layout& l, bool shared) {
    return shared ? shared_lower_bound(l) : lower_bound_on(l, key);
  });
}

}  // namespace tandem
