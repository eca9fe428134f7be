// Differential fuzz target of tandem::index (libFuzzer).
//
// The input bytes decode into a short run of batches, loads, verifies and
// share changes on one of a few small indexes (the fuzz build has leaves of
// 16 keys, TANDEM_SMALL_LEAVES, so a few dozen keys split leaves and grow
// inner levels). Every batch is replayed on a std::map model
// (support/map_model.hpp) at the moment it is submitted, so batches whose
// results come back later (futures, callbacks, group commit) are checked
// against the state their queue position saw. Every answer (status, found,
// value, key, scan entries and offsets, counts, error messages, sequence
// numbers) is compared, the results of every other batch once more at the
// end of the input (kept results must stay untouched while later batches
// reuse the index's pools), and at the end the whole contents, size(),
// stats() and verify(); any difference prints what differed and aborts.
// An input makes at most 512 ops.
//
// Input format. Every byte string decodes; past the end every byte reads 0.
//   byte 0     bits 0-1: which index (`variants` below); bits 2-7: the
//              initial load's code (see generated_pairs), byte 1 its seed.
//   then records, each one byte `t` (low nibble: what; high nibble: how)
//   followed by its operands:
//     0 get k           1 put k v          2 insert k v      3 erase k
//     4 lower_bound k   (0-4 with t >> 4 == 15: a one-key call on this
//                       thread, index::get .. lower_bound, beside the
//                       batches in flight, checked at once)
//                       5 scan f lo hi     6 count lo hi
//     7 bulk n k s v    arrays of n ops (t >> 4: get, put, insert, erase,
//                       lower_bound, put/insert from vectors of unequal
//                       length, get from a vector); keys k, k + step, ...
//     8 add type k a f  an op built field by field (any type byte: those
//                       past count are unknown types, answered invalid)
//     9 submit          the batch so far; t >> 4 picks execute, submit with
//                       a future, submit of a copy, a callback, a callback
//                       that throws
//    10 load c s        replaces the contents with generated pairs
//    11 verify          12 share b        13 drain (and check size, stats)
//    14 misuse          load(nullptr, nullptr, n > 0) and submit with an
//                       empty callback, which must throw and change
//                       nothing, or load(nullptr, nullptr, 0), which empties
//    15 append / clear  the batch appended to itself, the previous batch
//                       appended, or the batch cleared
//   Keys (k): 0-15 edge keys (0, 1, 2, 3, UINT64_MAX .. UINT64_MAX - 3,
//   2^63 - 1 .. 2^63 + 1, 2^32 - 1 .. 2^32 + 1, 999, 1001); 16-239 the pool
//   1000, 1002, ..., 1446; 240-247 eight raw bytes; 248-255 the previous key
//   plus -4 .. 3. Values (v): 255 eight raw bytes, else a byte mixed with a
//   counter. Scan flags (f): bits 0-3 the limit (0, 1, 2, 3, 4, 7, 8, 15, 16,
//   17, 100, a byte, max_scan_limit - 1, max_scan_limit, max_scan_limit + 1,
//   UINT64_MAX), bit 4 unordered, bit 5 built with batch::add.
//
// TANDEM_FUZZ_TRACE=1 in the environment prints every step (the ops of each
// batch included) to stderr: run a crashing input with it to write the
// regression test.
#include <tandem/tandem.hpp>

#include "support/map_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <future>
#include <limits>
#include <memory>
#include <memory_resource>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace tandem;
using test::expected_answer;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "tandem index fuzz: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

const bool tracing = [] {
  const char* v = std::getenv("TANDEM_FUZZ_TRACE");
  return v != nullptr && *v != '\0' && *v != '0';
}();

[[gnu::format(printf, 1, 2)]] void trace(const char* format, ...) {
  if (!tracing) return;
  std::va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
}

std::string describe(const op& o) {
  std::string s = std::string(to_string(o.type)) + "(" + std::to_string(o.key);
  switch (o.type) {
    case op_type::put:
    case op_type::insert:
    case op_type::count: s += ", " + std::to_string(o.arg); break;
    case op_type::scan:
      s += ", " + std::to_string(o.arg) + ", " + std::to_string(o.limit) +
           (o.order == scan_order::unordered ? ", unordered" : "");
      break;
    case op_type::get:
    case op_type::erase:
    case op_type::lower_bound: break;
    default: s = "op type " + std::to_string(static_cast<int>(o.type)) + "(" + std::to_string(o.key) + ", " +
                 std::to_string(o.arg);
  }
  return s + ")";
}

/// The input, front to back; past its end every byte reads as 0.
class reader {
 public:
  reader(const std::uint8_t* data, std::size_t size) : p_(data), left_(size) {}
  [[nodiscard]] bool empty() const noexcept { return left_ == 0; }
  std::uint8_t byte() noexcept {
    if (left_ == 0) return 0;
    --left_;
    return *p_++;
  }
  std::uint64_t word() noexcept {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }

 private:
  const std::uint8_t* p_;
  std::size_t left_;
};

constexpr key_type half = key_type{1} << 63;
constexpr key_type word = key_type{1} << 32;
constexpr key_type edge_keys[16] = {
    0,        1,    2,        3,        max_key, max_key - 1, max_key - 2, max_key - 3,
    half - 1, half, half + 1, word - 1, word,    word + 1,    999,         1001};
constexpr key_type pool_base = 1000;  // pool keys: 1000, 1002, ..., 1446

constexpr std::size_t max_ops_per_input = 512;  // keeps an input near a millisecond
constexpr std::size_t max_pending = 6;

// ---- the indexes -------------------------------------------------------------

/// A few shapes of index: fanouts, fills, the small-batch, direct-get and
/// group-commit thresholds, one worker thread or none, verify after every
/// batch.
struct variant {
  const char* name;
  int fanout;
  std::size_t threads;
  double fill;
  std::size_t small_batch_ops;
  std::size_t group_commit_ops;
  std::size_t direct_get_ops;
  unsigned spin_us;
  bool verify_each_batch;
  std::size_t cache_slots;  // leaf cache (host stand-in) slots: 0 off, few (constant eviction), or room for all
};

constexpr variant variants[4] = {
    {"fanout 16, defaults, no leaf cache", 16, 1, 0.75, 64, std::size_t{1} << 16, std::size_t{1} << 16, 50, false,
     0},
    {"fanout 32, full leaves, no small path, no group commit, no direct gets, leaf cache for all", 32, 1, 1.0, 0, 0,
     0, 0, false, 4096},
    {"fanout 64, 2 threads, half-full leaves, small <= 8, groups <= 40, direct <= 20, leaf cache of 3 leaves", 64, 2,
     0.5, 8, 40, 20, 50, false, 3},
    {"fanout 16, quarter-full leaves, no small path, groups <= 3, verify each batch, leaf cache of 2 leaves", 16, 1,
     0.25, 0, 3, 64, 0, true, 2},
};

/// The model's map keeps its nodes in a pool: a load puts hundreds of keys
/// into it, and a sanitizer allocation per key would cost more than the
/// index's own work.
using model_type = test::basic_map_model<std::pmr::map<key_type, value_type>>;

/// One index that lives for the whole fuzzing run (an index per input would
/// start threads and an arena per input), its model, and what it must have
/// counted so far.
struct fuzzed_index {
  std::unique_ptr<tandem::index> idx;
  std::pmr::unsynchronized_pool_resource model_nodes;
  model_type model{model_type::map_type(&model_nodes)};
  /// Sequence numbers so far (one submitting thread, in submission order):
  /// one past the highest, and one past the last batch with writes.
  std::uint64_t next_sequence = 0;
  std::uint64_t after_write = 0;
  std::uint64_t batches = 0;
  std::uint64_t ops = 0;
  std::uint64_t invalid_ops = 0;
  std::uint64_t callback_throws = 0;
  /// One-key writes so far, and their count when the last checked batch was
  /// submitted: those between may each have taken a sequence number.
  std::uint64_t point_writes = 0;
  std::uint64_t point_writes_seen = 0;
  std::uint64_t point_reads = 0;
  bool verifies_each_batch = false;  // config.verify_each_batch
};

fuzzed_index& instance(int v) {
  // Destroyed at exit, so that LeakSanitizer's check at exit sees what the
  // whole run leaked (the per-input leak check of libFuzzer is off: an index
  // keeps pools and per-thread buffers from one input to the next).
  static std::unique_ptr<fuzzed_index> made[4];
  if (!made[v]) {
    const variant& w = variants[v];
    config cfg;
    cfg.device = device_kind::cpu;
    cfg.fanout = w.fanout;
    cfg.threads = w.threads;
    cfg.leaf_fill = w.fill;
    cfg.small_batch_ops = w.small_batch_ops;
    cfg.group_commit_ops = w.group_commit_ops;
    cfg.direct_get_ops = w.direct_get_ops;
    cfg.dispatcher_spin_us = w.spin_us;
    cfg.verify_each_batch = w.verify_each_batch;
    cfg.gpu_cache_bytes = w.cache_slots * 1024 * sizeof(entry);
    cfg.gpu_cache_writes = w.cache_slots > 0;
    made[v] = std::make_unique<fuzzed_index>();
    made[v]->idx = std::make_unique<tandem::index>(cfg);
    made[v]->verifies_each_batch = w.verify_each_batch;
  }
  return *made[v];
}

// ---- loads -------------------------------------------------------------------

std::uint64_t xorshift(std::uint64_t& s) noexcept {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

/// Pairs of a load. code bits 0-2: how many (0, 1, 2, 11, 12, 13, 100,
/// 400: around one leaf's worth, and tens of leaves); bits 3-4: keys ascending
/// from the pool, random over all keys, narrow with repeats (the later pair
/// wins), or edge, pool and random keys mixed; bit 5: reversed.
std::vector<entry> generated_pairs(std::uint8_t code, std::uint8_t seed) {
  constexpr std::size_t counts[8] = {0, 1, 2, 11, 12, 13, 100, 400};
  const std::size_t n = counts[code & 7];
  std::uint64_t s = 0x9E3779B97F4A7C15ULL * (std::uint64_t{seed} + 1);
  std::vector<entry> pairs(n);
  for (std::size_t i = 0; i < n; ++i) {
    key_type k = 0;
    switch ((code >> 3) & 3) {
      case 0: k = pool_base + 2 * i; break;
      case 1: k = xorshift(s); break;
      case 2: k = pool_base + xorshift(s) % (2 * n + 2); break;
      default: {
        const std::uint64_t r = xorshift(s);
        k = r % 3 == 0 ? edge_keys[(r >> 8) % 16] : r % 3 == 1 ? pool_base + 2 * ((r >> 8) % 224) : r;
      }
    }
    pairs[i] = {k, xorshift(s)};
  }
  if (code & 32) std::reverse(pairs.begin(), pairs.end());
  return pairs;
}

// ---- one input -----------------------------------------------------------------

/// A submitted batch whose result has not been checked yet.
struct pending {
  std::future<batch_result> result;
  std::vector<op> ops;
  std::vector<expected_answer> want;
  std::size_t number = 0;
  const char* how = "";
  std::uint64_t point_writes = 0;  // fuzzed_index::point_writes when it was submitted
  bool writes = false;             // it holds a put, insert or erase
};

class session {
 public:
  session(fuzzed_index& f, reader& in) : f_(f), in_(in) {}

  void run(std::uint8_t setup) {
    load(static_cast<std::uint8_t>(setup >> 2), in_.byte(), true);
    while (!in_.empty()) step(in_.byte());
    if (!cur_.empty()) submit(0);
    finish();
  }

 private:
  // ---- decoding ----
  key_type key() {
    const std::uint8_t b = in_.byte();
    key_type k;
    if (b < 16) {
      k = edge_keys[b];
    } else if (b < 240) {
      k = pool_base + 2 * key_type{static_cast<unsigned>(b - 16)};
    } else if (b < 248) {
      k = in_.word();
    } else {
      k = last_key_ + static_cast<key_type>(static_cast<int>(b) - 252);  // wraps around 0 and UINT64_MAX
    }
    last_key_ = k;
    return k;
  }
  value_type value() {
    const std::uint8_t b = in_.byte();
    if (b == 255) return in_.word();
    return std::uint64_t{b} * 0x9E3779B97F4A7C15ULL ^ ++value_salt_;
  }
  std::uint64_t limit(std::uint8_t f) {
    switch (f & 15) {
      case 0: return 0;
      case 1: return 1;
      case 2: return 2;
      case 3: return 3;
      case 4: return 4;
      case 5: return 7;
      case 6: return 8;
      case 7: return 15;
      case 8: return 16;
      case 9: return 17;
      case 10: return 100;
      case 11: return in_.byte();
      case 12: return max_scan_limit - 1;
      case 13: return max_scan_limit;
      case 14: return max_scan_limit + 1;
      default: return max_key;
    }
  }
  [[nodiscard]] bool room(std::size_t n) const { return ops_ + cur_.size() + n <= max_ops_per_input; }

  void step(std::uint8_t t) {
    const unsigned how = t >> 4;
    switch (t & 15) {
      case 0: {
        const key_type k = key();
        if (how == 15) {
          point(op{k, 0, 0, op_type::get, scan_order::ordered});
        } else if (room(1)) {
          cur_.get(k);
        }
        break;
      }
      case 1: {
        const key_type k = key();
        const value_type v = value();
        if (how == 15) {
          point(op{k, v, 0, op_type::put, scan_order::ordered});
        } else if (room(1)) {
          cur_.put(k, v);
        }
        break;
      }
      case 2: {
        const key_type k = key();
        const value_type v = value();
        if (how == 15) {
          point(op{k, v, 0, op_type::insert, scan_order::ordered});
        } else if (room(1)) {
          cur_.insert(k, v);
        }
        break;
      }
      case 3: {
        const key_type k = key();
        if (how == 15) {
          point(op{k, 0, 0, op_type::erase, scan_order::ordered});
        } else if (room(1)) {
          cur_.erase(k);
        }
        break;
      }
      case 4: {
        const key_type k = key();
        if (how == 15) {
          point(op{k, 0, 0, op_type::lower_bound, scan_order::ordered});
        } else if (room(1)) {
          cur_.lower_bound(k);
        }
        break;
      }
      case 5: {
        const std::uint8_t f = in_.byte();
        const std::uint64_t lim = limit(f);
        const key_type lo = key();
        const key_type hi = key();
        const scan_order order = f & 16 ? scan_order::unordered : scan_order::ordered;
        if (!room(1)) break;
        if (f & 32) {
          cur_.add(op{lo, hi, lim, op_type::scan, order});
        } else {
          cur_.scan(lo, hi, lim, order);
        }
        break;
      }
      case 6: {
        const key_type lo = key();
        const key_type hi = key();
        if (room(1)) cur_.count(lo, hi);
        break;
      }
      case 7: bulk(how); break;
      case 8: {
        op o;
        o.type = static_cast<op_type>(in_.byte());
        o.key = key();
        o.arg = (o.type == op_type::put || o.type == op_type::insert) ? value() : key();
        const std::uint8_t f = in_.byte();
        o.limit = limit(f);
        o.order = f & 16 ? scan_order::unordered : scan_order::ordered;
        if (room(1)) cur_.add(o);
        break;
      }
      case 9: submit(how); break;
      case 10: {
        const std::uint8_t code = in_.byte();
        load(code, in_.byte(), how & 1);
        break;
      }
      case 11: verify(); break;
      case 12: share(in_.byte()); break;
      case 13: drain_and_count(); break;
      case 14: misuse(how); break;
      default: append_or_clear(how); break;
    }
  }

  /// A one-key call (index::get, put, insert, erase, lower_bound) on this
  /// thread, beside the batches in flight: it sees every write submitted
  /// before it (the model holds them), and the batches after it see it. A
  /// write may run here or go through the queue, taking a sequence number
  /// (`point_writes`: the checks of later batches allow for it).
  void point(const op& o) {
    // A batch takes effect at one instant between its submit and its
    // answer, so a one-key write may land before a batch of reads still
    // pending: such batches are answered first (a write waits for the
    // batches with writes before it anyway), and the model's order holds.
    const bool write = o.type == op_type::put || o.type == op_type::insert || o.type == op_type::erase;
    if (write && std::any_of(pending_.begin(), pending_.end(), [](const pending& p) { return !p.writes; })) drain();
    const expected_answer want = f_.model.run(o);
    const op_result& w = want.result;
    tandem::index& idx = *f_.idx;
    trace("one-key %s\n", describe(o).c_str());
    bool found = false;
    value_type value = 0;
    key_type at = o.key;
    switch (o.type) {
      case op_type::get: {
        const std::optional<value_type> v = idx.get(o.key);
        found = v.has_value();
        value = v.value_or(0);
        break;
      }
      case op_type::put: {
        const std::optional<value_type> v = idx.put(o.key, o.arg);
        found = v.has_value();
        value = v.value_or(0);
        break;
      }
      case op_type::insert: {
        found = !idx.insert(o.key, o.arg);
        value = w.value;  // insert says only whether the key was there
        break;
      }
      case op_type::erase: {
        const std::optional<value_type> v = idx.erase(o.key);
        found = v.has_value();
        value = v.value_or(0);
        break;
      }
      default: {
        const std::optional<entry> e = idx.lower_bound(o.key);
        found = e.has_value();
        value = e ? e->value : 0;
        at = e ? e->key : 0;
        break;
      }
    }
    if (write) {
      ++f_.point_writes;
    } else {
      ++f_.point_reads;
    }
    const bool same = found == w.found && value == w.value && (o.type != op_type::lower_bound || at == w.key);
    if (!same) {
      fail("one-key " + describe(o) + ": found " + std::to_string(found) + " value " + std::to_string(value) +
           (o.type == op_type::lower_bound ? " key " + std::to_string(at) : std::string()) + ", the model: found " +
           std::to_string(w.found) + " value " + std::to_string(w.value) +
           (o.type == op_type::lower_bound ? " key " + std::to_string(w.key) : std::string()));
    }
  }

  void bulk(unsigned how) {
    std::size_t n = in_.byte();
    const key_type first = key();
    constexpr key_type steps[8] = {0, 1, 2, 3, max_key, max_key - 1, key_type{1} << 60, 7};
    const key_type step = steps[in_.byte() & 7];
    const std::uint8_t shorter = in_.byte() % 3;
    const value_type v0 = value();
    while (n > 0 && !room(n)) --n;
    std::vector<key_type> keys(n);
    std::vector<value_type> values(n);
    for (std::size_t i = 0; i < n; ++i) {
      keys[i] = first + step * i;
      values[i] = v0 + i;
    }
    switch (how & 7) {
      case 0: cur_.get(keys.data(), n); break;
      case 1: cur_.put(keys.data(), values.data(), n); break;
      case 2: cur_.insert(keys.data(), values.data(), n); break;
      case 3: cur_.erase(keys.data(), n); break;
      case 4: cur_.lower_bound(keys.data(), n); break;
      case 5:  // the shorter vector counts
        values.resize(n - std::min<std::size_t>(n, shorter));
        cur_.put(keys, values);
        break;
      case 6:
        keys.resize(n - std::min<std::size_t>(n, shorter));
        cur_.insert(keys, values);
        break;
      default: cur_.get(keys); break;
    }
  }

  // ---- batches ----
  void submit(unsigned how) {
    pending p;
    p.number = number_++;
    p.point_writes = f_.point_writes;
    p.ops.resize(cur_.size());
    for (std::size_t i = 0; i < cur_.size(); ++i) p.ops[i] = cur_[i];
    p.writes = std::any_of(p.ops.begin(), p.ops.end(), [](const op& o) {
      return o.type == op_type::put || o.type == op_type::insert || o.type == op_type::erase;
    });
    // The model runs the batch now: its place in the queue is now.
    p.want.reserve(p.ops.size());
    for (const op& o : p.ops) p.want.push_back(f_.model.run(o));
    ops_ += p.ops.size();
    f_.ops += p.ops.size();
    ++f_.batches;
    for (const expected_answer& w : p.want) f_.invalid_ops += w.result.status == op_status::invalid;
    previous_ = cur_;
    tandem::index& idx = *f_.idx;
    bool wait_now = false;
    if (how <= 5) {
      p.how = "execute";
      std::promise<batch_result> done;
      p.result = done.get_future();
      try {
        done.set_value(idx.execute(std::move(cur_)));
      } catch (...) {
        done.set_exception(std::current_exception());
      }
      wait_now = true;
    } else if (how <= 9) {
      p.how = "submit, future";
      p.result = idx.submit(std::move(cur_));
    } else if (how == 10 || how == 15) {
      // Submitted as an lvalue: the index copies it and the caller's batch
      // stays as it was.
      p.how = how == 10 ? "submit of a copy, future" : "execute of a copy";
      if (how == 10) {
        p.result = idx.submit(cur_);
      } else {
        std::promise<batch_result> done;
        p.result = done.get_future();
        try {
          done.set_value(idx.execute(cur_));
        } catch (...) {
          done.set_exception(std::current_exception());
        }
        wait_now = true;
      }
      if (cur_.size() != p.ops.size()) fail("a batch submitted as an lvalue changed size");
      for (std::size_t i = 0; i < p.ops.size(); ++i) {
        const op o = cur_[i];
        const op& w = p.ops[i];
        if (o.key != w.key || o.arg != w.arg || o.type != w.type || o.limit != w.limit || o.order != w.order) {
          fail("a batch submitted as an lvalue changed at op " + std::to_string(i));
        }
      }
    } else {
      const bool throws = how == 14;
      p.how = throws ? "submit, callback that throws" : "submit, callback";
      auto done = std::make_shared<std::promise<batch_result>>();
      p.result = done->get_future();
      idx.submit(std::move(cur_), [done, throws](batch_result r, std::exception_ptr e) {
        if (e) {
          done->set_exception(e);
        } else {
          done->set_value(std::move(r));
        }
        if (throws) throw std::runtime_error("a callback that throws");
      });
      f_.callback_throws += throws;
    }
    cur_.clear();  // a moved-from batch is valid but unspecified
    if (tracing) {
      trace("batch %zu (%s), %zu ops:\n", p.number, p.how, p.ops.size());
      for (std::size_t i = 0; i < p.ops.size(); ++i) trace("  %zu %s\n", i, describe(p.ops[i]).c_str());
    }
    pending_.push_back(std::move(p));
    if (wait_now) {
      drain();  // execute returned: every earlier batch is done too
    } else if (pending_.size() > max_pending) {
      check(pending_.front());
      pending_.pop_front();
    }
  }

  void drain() {
    while (!pending_.empty()) {
      check(pending_.front());
      pending_.pop_front();
    }
  }

  /// Compares one batch's result with the model's answers; results of
  /// even-numbered batches are kept to the end of the input and compared
  /// again then (kept results stay valid and untouched while later batches
  /// reuse the index's pools), the others are dropped at once.
  void check(pending& p) {
    batch_result r;
    try {
      r = p.result.get();
    } catch (const std::exception& e) {
      fail("batch " + std::to_string(p.number) + " (" + p.how + ") failed as a whole: " + e.what());
    }
    // Batches take effect in submission order (one submitting thread), and
    // each sees the writes of the batches numbered below it. Reads
    // answered on their caller take the number of the batch after the last
    // write done (shared with it), so a batch of reads may be numbered
    // anywhere from the last write's number + 1 up to the next number; a
    // batch with writes gets the next number (or the one a read answered on
    // its caller shared), above every earlier write.
    const bool writes = p.writes;
    const std::uint64_t s = r.sequence();
    const std::uint64_t lowest = writes ? std::max(f_.after_write, f_.next_sequence == 0 ? 0 : f_.next_sequence - 1)
                                        : f_.after_write;
    const std::uint64_t highest = f_.next_sequence + (p.point_writes - f_.point_writes_seen);
    if (r.size() == p.ops.size() && (s < lowest || s > highest)) {
      report(p, {"sequence " + std::to_string(s) + ", want " + std::to_string(lowest) + " to " +
                 std::to_string(highest)});
    }
    f_.point_writes_seen = p.point_writes;
    f_.next_sequence = std::max(f_.next_sequence, s + 1);
    if (writes) f_.after_write = s + 1;
    compare(p, r);
    if (p.number % 2 == 0) kept_.push_back({std::move(p), std::move(r)});
  }

  void compare(const pending& p, const batch_result& r) {
    std::vector<std::string> diffs;
    if (r.size() != p.ops.size()) {
      diffs.push_back("result has " + std::to_string(r.size()) + " answers for " + std::to_string(p.ops.size()) +
                      " ops");
      report(p, diffs);
    }
    std::size_t invalid = 0;
    std::vector<entry> entries;  // every ok scan's entries, in batch order
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      const op& o = p.ops[i];
      std::string d = model_type::compare(o, p.want[i], r, i);
      const std::string message = r.error(i);
      const entry_span s = r.scan(i);
      if (d.empty() && r.status(i) == op_status::invalid) {
        ++invalid;
        const std::string name = "op " + std::to_string(i);
        if (r.key(i) != o.key) d = "op " + std::to_string(i) + " invalid: key " + std::to_string(r.key(i));
        if (message.compare(0, name.size(), name) != 0 ||
            (message.size() > name.size() && message[name.size()] != ' ' && message[name.size()] != ':')) {
          d = "op " + std::to_string(i) + ": error message does not name the op: " + message;
        }
      } else if (d.empty() && !message.empty()) {
        d = "op " + std::to_string(i) + " ran but has an error message: " + message;
      }
      if (d.empty() && (o.type != op_type::scan || !r.ok(i)) && !s.empty()) {
        d = "op " + std::to_string(i) + " " + describe(o) + " is no ok scan but has " + std::to_string(s.size()) +
            " entries";
      }
      if (d.empty() && o.type == op_type::scan && r.ok(i)) {
        if (r[i].scan_offset != entries.size()) {
          d = "op " + std::to_string(i) + " " + describe(o) + ": scan_offset " + std::to_string(r[i].scan_offset) +
              ", but its entries start at " + std::to_string(entries.size()) + " of scan_entries()";
        }
        entries.insert(entries.end(), s.begin(), s.end());
      }
      if (!d.empty() && diffs.size() < 8) diffs.push_back(d);
    }
    if (r.invalid_count() != invalid) {
      diffs.push_back("invalid_count() " + std::to_string(r.invalid_count()) + ", want " + std::to_string(invalid));
    }
    const entry_span all = r.scan_entries();
    if (all.size() != entries.size() || !std::equal(all.begin(), all.end(), entries.begin())) {
      diffs.push_back("scan_entries() (" + std::to_string(all.size()) +
                      " entries) is not the scans' entries one after another (" + std::to_string(entries.size()) +
                      ")");
    }
    if (!diffs.empty()) report(p, diffs);
  }

  [[noreturn]] static void report(const pending& p, const std::vector<std::string>& diffs) {
    std::string text = "batch " + std::to_string(p.number) + " (" + p.how + ", " + std::to_string(p.ops.size()) +
                       " ops) differs from the model:\n";
    for (const std::string& d : diffs) text += "  " + d + "\n";
    text += "its ops:\n";
    for (std::size_t i = 0; i < p.ops.size() && i < 200; ++i) {
      text += "  " + std::to_string(i) + " " + describe(p.ops[i]) + "\n";
    }
    fail(text);
  }

  // ---- the rest ----
  void load(std::uint8_t code, std::uint8_t seed, bool vector_form) {
    const std::vector<entry> pairs = generated_pairs(code, seed);
    trace("load code %u seed %u: %zu pairs (%s)\n", unsigned{code}, unsigned{seed}, pairs.size(),
          vector_form ? "vector of entries" : "arrays");
    f_.model.data.clear();
    for (const entry& e : pairs) f_.model.data[e.key] = e.value;
    try {
      if (vector_form) {
        f_.idx->load(pairs);
      } else {
        std::vector<key_type> keys(pairs.size());
        std::vector<value_type> values(pairs.size());
        for (std::size_t i = 0; i < pairs.size(); ++i) {
          keys[i] = pairs[i].key;
          values[i] = pairs[i].value;
        }
        f_.idx->load(keys.data(), values.data(), pairs.size());
      }
    } catch (const std::exception& e) {
      fail(std::string("load failed: ") + e.what());
    }
    // load waited for every batch before it, so their results are in.
    drain();
    if (f_.idx->size() != f_.model.data.size()) {
      fail("size() " + std::to_string(f_.idx->size()) + " after a load of " + std::to_string(f_.model.data.size()) +
           " distinct keys");
    }
  }

  void verify() {
    trace("verify\n");
    try {
      f_.idx->verify();
    } catch (const std::exception& e) {
      fail(std::string("verify: ") + e.what());
    }
  }

  void share(std::uint8_t b) {
    tandem::index& idx = *f_.idx;
    if (b < 160) {
      trace("set_gpu_share(%u / 159)\n", unsigned{b});
      idx.set_gpu_share(b / 159.0);
    } else if (b < 200) {
      trace("set_gpu_share(auto_share)\n");
      idx.set_gpu_share(auto_share);
    } else if (b < 210) {
      trace("set_gpu_share(-0.0)\n");
      idx.set_gpu_share(-0.0);
    } else {
      constexpr double bad[5] = {std::numeric_limits<double>::quiet_NaN(), -1e-9, 1.0 + 1e-9,
                                 std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
      const double s = bad[b % 5];
      trace("set_gpu_share(%g): must throw\n", s);
      try {
        idx.set_gpu_share(s);
      } catch (const std::invalid_argument&) {
        return;
      }
      fail("set_gpu_share(" + std::to_string(s) + ") did not throw std::invalid_argument");
    }
  }

  void drain_and_count() {
    trace("drain\n");
    drain();
    if (f_.idx->size() != f_.model.data.size()) {
      fail("size() " + std::to_string(f_.idx->size()) + ", the model holds " + std::to_string(f_.model.data.size()));
    }
  }

  void misuse(unsigned how) {
    tandem::index& idx = *f_.idx;
    switch (how % 3) {
      case 0: {
        const std::size_t n = 1 + in_.byte();
        trace("load(nullptr, nullptr, %zu): must throw\n", n);
        try {
          idx.load(nullptr, nullptr, n);
        } catch (const std::invalid_argument&) {
          return;
        }
        fail("load(nullptr, nullptr, n > 0) did not throw std::invalid_argument");
      }
      case 1: {
        trace("submit(batch of %zu ops, empty callback): must throw\n", cur_.size());
        try {
          idx.submit(cur_, index::callback{});
        } catch (const std::invalid_argument&) {
          return;
        }
        fail("submit with an empty callback did not throw std::invalid_argument");
      }
      default: {
        trace("load(nullptr, nullptr, 0): empties the index\n");
        f_.model.data.clear();
        idx.load(nullptr, nullptr, 0);
        drain();
        if (idx.size() != 0) fail("size() " + std::to_string(idx.size()) + " after a load of nothing");
      }
    }
  }

  void append_or_clear(unsigned how) {
    switch (how % 3) {
      case 0:
        if (room(cur_.size())) {
          trace("the batch appended to itself\n");
          cur_.append(cur_);
        }
        break;
      case 1:
        if (room(previous_.size())) {
          trace("the previous batch appended\n");
          cur_.append(previous_);
        }
        break;
      default:
        trace("clear\n");
        cur_.clear();
    }
  }

  /// The whole contents, size(), verify() and the counters of stats().
  void finish() {
    drain();
    tandem::index& idx = *f_.idx;
    batch all;
    all.scan(min_key, max_key, max_scan_limit).count(min_key, max_key).lower_bound(min_key);
    all.scan(min_key, max_key, max_scan_limit, scan_order::unordered);
    cur_ = std::move(all);
    submit(0);
    for (const auto& [p, r] : kept_) {
      trace("batch %zu compared again\n", p.number);
      compare(p, r);
    }
    if (!f_.verifies_each_batch) verify();  // else the final batch has verified
    if (idx.size() != f_.model.data.size()) {
      fail("size() " + std::to_string(idx.size()) + ", the model holds " + std::to_string(f_.model.data.size()));
    }
    const tandem::stats s = idx.stats();
    std::string d;
    if (s.keys != f_.model.data.size()) d += " keys " + std::to_string(s.keys);
    // One-key writes not applied on their callers ran as one-op batches.
    if (s.point_writes > f_.point_writes) {
      d += " point_writes " + std::to_string(s.point_writes) + " (of " + std::to_string(f_.point_writes) + " calls)";
    }
    const std::uint64_t queued = f_.point_writes - std::min(s.point_writes, f_.point_writes);
    if (s.point_reads != f_.point_reads) {
      d += " point_reads " + std::to_string(s.point_reads) + " (want " + std::to_string(f_.point_reads) + ")";
    }
    if (s.batches != f_.batches + queued) {
      d += " batches " + std::to_string(s.batches) + " (want " + std::to_string(f_.batches + queued) + ")";
    }
    if (s.failed_batches != 0) d += " failed_batches " + std::to_string(s.failed_batches);
    if (s.ops != f_.ops + queued) d += " ops " + std::to_string(s.ops) + " (want " + std::to_string(f_.ops + queued) + ")";
    if (s.invalid_ops != f_.invalid_ops) {
      d += " invalid_ops " + std::to_string(s.invalid_ops) + " (want " + std::to_string(f_.invalid_ops) + ")";
    }
    if (s.callback_errors != f_.callback_throws) {
      d += " callback_errors " + std::to_string(s.callback_errors) + " (want " + std::to_string(f_.callback_throws) +
           ")";
    }
    if (!d.empty()) fail("stats() differ:" + d);
  }

  fuzzed_index& f_;
  reader& in_;
  batch cur_;
  batch previous_;
  std::deque<pending> pending_;
  std::vector<std::pair<pending, batch_result>> kept_;
  std::size_t number_ = 0;
  std::size_t ops_ = 0;
  key_type last_key_ = 0;
  std::uint64_t value_salt_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in(data, size);
  const std::uint8_t setup = in.byte();
  const int v = setup & 3;
  trace("index %d (%s)\n", v, variants[v].name);
  session(instance(v), in).run(setup);
  return 0;
}
