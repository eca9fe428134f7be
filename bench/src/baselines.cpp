#include "baselines.hpp"

#include <absl/container/btree_map.h>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/concurrent_map.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_sort.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>

namespace tandem_bench {
namespace {

using tandem::entry;
using tandem::key_type;
using tandem::op;
using tandem::op_type;
using tandem::value_type;
using clock_type = std::chrono::steady_clock;

/// The answer a baseline gives to one op (what a caller would read).
struct answer {
  value_type value = 0;
  key_type key = 0;
  bool found = false;
};

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// Runs every batch as one parallel_for in `arena`; `apply(op, answer&,
/// std::vector<entry>& scan_buffer)` answers one op and returns the number of
/// scan entries it produced.
template <class Apply>
run_figures run_batches(tbb::task_arena& arena, const std::vector<std::vector<op>>& batches,
                        const progress_fn& progress, Apply&& apply) {
  std::size_t largest = 0;
  for (const auto& b : batches) largest = std::max(largest, b.size());
  std::vector<answer> answers(largest);
  tbb::enumerable_thread_specific<std::vector<entry>> buffers;
  tbb::enumerable_thread_specific<std::uint64_t> entries(0);
  // Touch the answer array once so the first batch does not pay page faults.
  std::fill(answers.begin(), answers.end(), answer{});

  run_figures fig;
  const auto t0 = clock_type::now();
  for (std::size_t bi = 0; bi < batches.size(); ++bi) {
    const std::vector<op>& ops = batches[bi];
    const std::size_t n = ops.size();
    std::size_t grain = 512;
    if (n != 0 && ops[0].type == op_type::scan)
      grain = std::max<std::size_t>(1, 2048 / std::max<std::uint64_t>(1, ops[0].limit));
    arena.execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, grain), [&](const tbb::blocked_range<std::size_t>& r) {
        std::vector<entry>& buf = buffers.local();
        std::uint64_t e = 0;
        for (std::size_t i = r.begin(); i < r.end(); ++i) e += apply(ops[i], answers[i], buf);
        entries.local() += e;
      });
    });
    std::uint64_t hits = 0;
    for (std::size_t i = 0; i < n; ++i) hits += answers[i].found;
    fig.hits += hits;
    fig.ops += n;
    if (progress) progress(bi + 1, batches.size());
  }
  fig.seconds = seconds_since(t0);
  for (std::uint64_t e : entries) fig.entries += e;
  return fig;
}

/// Answers `ops` one after another on the calling thread; returns the hits.
template <class Apply>
std::uint64_t answer_serially(const std::vector<op>& ops, Apply&& apply) {
  thread_local std::vector<entry> buffer;
  std::uint64_t hits = 0;
  for (const op& o : ops) {
    answer a;
    apply(o, a, buffer);
    hits += a.found;
  }
  return hits;
}

/// What every baseline here shares: its arena of T threads, and run and
/// answer_here over Derived::apply(op, answer&, std::vector<entry>& scan
/// buffer), which answers one op and returns the scan entries it produced.
template <class Derived>
class batch_baseline : public baseline {
 public:
  explicit batch_baseline(std::size_t threads) : arena_(static_cast<int>(threads)) {}

  run_figures run(const std::vector<std::vector<op>>& batches, const progress_fn& progress) final {
    return run_batches(arena_, batches, progress,
                       [this](const op& o, answer& a, std::vector<entry>& buf) { return self().apply(o, a, buf); });
  }

  std::uint64_t answer_here(const std::vector<op>& ops) final {
    return answer_serially(ops,
                           [this](const op& o, answer& a, std::vector<entry>& buf) { return self().apply(o, a, buf); });
  }

 protected:
  tbb::task_arena arena_;

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
};

// ---- absl::btree_map, key-range sharded, shared_mutex per shard -------------

class absl_baseline final : public batch_baseline<absl_baseline> {
 public:
  absl_baseline(std::size_t threads, std::size_t shard_count) : batch_baseline(threads), shards_(shard_count) {
    if (shard_count == 0 || (shard_count & (shard_count - 1)) != 0 || shard_count > (1u << 16)) {
      throw std::invalid_argument("absl shards must be a power of two in [1, 65536]");
    }
    while ((std::size_t{1} << bits_) < shard_count) ++bits_;
  }

  std::string name() const override { return "absl"; }
  std::string description() const override {
    return "absl::btree_map, " + std::to_string(shards_.size()) +
           (shards_.size() == 1 ? " map behind one std::shared_mutex" : " key-range shards, std::shared_mutex each") +
           " (shared: reads, exclusive: writes)";
  }

  double load(const key_type* keys, const value_type* values, std::size_t n) override {
    for (shard& s : shards_) s.map.clear();
    const auto t0 = clock_type::now();
    std::vector<entry> pairs(n);
    arena_.execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) pairs[i] = {keys[i], values[i]};
      });
      tbb::parallel_sort(pairs.begin(), pairs.end(), [](const entry& a, const entry& b) { return a.key < b.key; });
      tbb::parallel_for(std::size_t{0}, shards_.size(), [&](std::size_t s) {
        const auto lo =
            std::partition_point(pairs.begin(), pairs.end(), [&](const entry& e) { return shard_of(e.key) < s; });
        const auto hi = std::partition_point(lo, pairs.end(), [&](const entry& e) { return shard_of(e.key) <= s; });
        auto& m = shards_[s].map;
        for (auto it = lo; it != hi; ++it) m.emplace_hint(m.end(), it->key, it->value);
      });
    });
    return seconds_since(t0);
  }

  std::size_t size() const override {
    std::size_t n = 0;
    for (const shard& s : shards_) n += s.map.size();
    return n;
  }

  void for_each(const std::function<void(key_type, value_type)>& f) const override {
    for (const shard& s : shards_) {
      for (const auto& [k, v] : s.map) f(k, v);
    }
  }

 private:
  friend class batch_baseline<absl_baseline>;

  struct alignas(64) shard {
    mutable std::shared_mutex mutex;
    absl::btree_map<key_type, value_type> map;
  };

  std::size_t shard_of(key_type k) const noexcept {
    return bits_ == 0 ? 0 : static_cast<std::size_t>(k >> (64 - bits_));
  }
  key_type shard_high(std::size_t s) const noexcept {
    return bits_ == 0 ? tandem::max_key : ((static_cast<key_type>(s) + 1) << (64 - bits_)) - 1;
  }

  std::uint64_t apply(const op& o, answer& a, std::vector<entry>& buf) {
    a = answer{};
    switch (o.type) {
      case op_type::get: {
        shard& s = shards_[shard_of(o.key)];
        std::shared_lock<std::shared_mutex> lock(s.mutex);
        const auto it = s.map.find(o.key);
        if (it != s.map.end()) {
          a.found = true;
          a.value = it->second;
        }
        return 0;
      }
      case op_type::put: {
        shard& s = shards_[shard_of(o.key)];
        std::unique_lock<std::shared_mutex> lock(s.mutex);
        const auto [it, inserted] = s.map.try_emplace(o.key, o.arg);
        if (!inserted) {
          a.found = true;
          a.value = it->second;
          it->second = o.arg;
        }
        return 0;
      }
      case op_type::insert: {
        shard& s = shards_[shard_of(o.key)];
        std::unique_lock<std::shared_mutex> lock(s.mutex);
        const auto [it, inserted] = s.map.try_emplace(o.key, o.arg);
        a.found = !inserted;
        a.value = inserted ? 0 : it->second;
        return 0;
      }
      case op_type::erase: {
        shard& s = shards_[shard_of(o.key)];
        std::unique_lock<std::shared_mutex> lock(s.mutex);
        const auto it = s.map.find(o.key);
        if (it != s.map.end()) {
          a.found = true;
          a.value = it->second;
          s.map.erase(it);
        }
        return 0;
      }
      case op_type::lower_bound:
        for (std::size_t si = shard_of(o.key); si < shards_.size(); ++si) {
          shard& s = shards_[si];
          std::shared_lock<std::shared_mutex> lock(s.mutex);
          const auto it = s.map.lower_bound(o.key);
          if (it != s.map.end()) {
            a.found = true;
            a.key = it->first;
            a.value = it->second;
            return 0;
          }
        }
        return 0;
      case op_type::scan:
      case op_type::count: {
        if (o.key > o.arg) return 0;
        const bool is_scan = o.type == op_type::scan;
        buf.clear();
        std::uint64_t c = 0;
        for (std::size_t si = shard_of(o.key); si < shards_.size(); ++si) {
          shard& s = shards_[si];
          {
            std::shared_lock<std::shared_mutex> lock(s.mutex);
            for (auto it = s.map.lower_bound(o.key); it != s.map.end() && it->first <= o.arg; ++it) {
              if (is_scan) {
                if (c == o.limit) break;
                buf.push_back({it->first, it->second});
              }
              ++c;
            }
          }
          if ((is_scan && c == o.limit) || shard_high(si) >= o.arg) break;
        }
        a.found = c != 0;
        a.value = c;
        return c;  // scan entries, or keys counted
      }
    }
    return 0;
  }

  std::vector<shard> shards_;
  int bits_ = 0;
};

// ---- tbb::concurrent_map ----------------------------------------------------

class tbb_baseline final : public batch_baseline<tbb_baseline> {
 public:
  explicit tbb_baseline(std::size_t threads) : batch_baseline(threads) {}

  std::string name() const override { return "tbb"; }
  std::string description() const override {
    return "tbb::concurrent_map<uint64, std::atomic<uint64>> (lock-free skip list)";
  }

  double load(const key_type* keys, const value_type* values, std::size_t n) override {
    map_.clear();
    const auto t0 = clock_type::now();
    arena_.execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 1024), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) map_.emplace(keys[i], values[i]);
      });
    });
    return seconds_since(t0);
  }

  std::size_t size() const override { return map_.size(); }

  void for_each(const std::function<void(key_type, value_type)>& f) const override {
    for (const auto& kv : map_) f(kv.first, kv.second.load(std::memory_order_relaxed));
  }

 private:
  friend class batch_baseline<tbb_baseline>;

  std::uint64_t apply(const op& o, answer& a, std::vector<entry>& buf) {
    a = answer{};
    switch (o.type) {
      case op_type::get: {
        const auto it = map_.find(o.key);
        if (it != map_.end()) {
          a.found = true;
          a.value = it->second.load(std::memory_order_relaxed);
        }
        return 0;
      }
      case op_type::put: {
        auto it = map_.find(o.key);
        if (it == map_.end()) {
          const auto [pos, inserted] = map_.emplace(o.key, o.arg);
          if (inserted) return 0;
          it = pos;  // another thread inserted it in between
        }
        a.found = true;
        a.value = it->second.exchange(o.arg, std::memory_order_relaxed);
        return 0;
      }
      case op_type::insert: {
        const auto [it, inserted] = map_.emplace(o.key, o.arg);
        a.found = !inserted;
        a.value = inserted ? 0 : it->second.load(std::memory_order_relaxed);
        return 0;
      }
      case op_type::erase:
        throw std::logic_error("tbb::concurrent_map has no concurrency-safe erase; tandem-bench does not run it there");
      case op_type::lower_bound: {
        const auto it = map_.lower_bound(o.key);
        if (it != map_.end()) {
          a.found = true;
          a.key = it->first;
          a.value = it->second.load(std::memory_order_relaxed);
        }
        return 0;
      }
      case op_type::scan:
      case op_type::count: {
        if (o.key > o.arg) return 0;
        const bool is_scan = o.type == op_type::scan;
        buf.clear();
        std::uint64_t c = 0;
        for (auto it = map_.lower_bound(o.key); it != map_.end() && it->first <= o.arg; ++it) {
          if (is_scan) {
            if (c == o.limit) break;
            buf.push_back({it->first, it->second.load(std::memory_order_relaxed)});
          }
          ++c;
        }
        a.found = c != 0;
        a.value = c;
        return c;  // scan entries, or keys counted
      }
    }
    return 0;
  }

  tbb::concurrent_map<key_type, std::atomic<value_type>> map_;
};

}  // namespace

std::unique_ptr<baseline> make_absl_baseline(std::size_t threads, std::size_t shards) {
  return std::make_unique<absl_baseline>(threads, shards);
}

std::unique_ptr<baseline> make_tbb_baseline(std::size_t threads) { return std::make_unique<tbb_baseline>(threads); }

}  // namespace tandem_bench
