// One-key writes applied on their callers (index_impl.hpp, write_on_caller;
// index.hpp, "One-key writes"): which run there and which go through the
// queue, that single-key ops stay linearizable with them beside each other
// and beside batches (a Wing-Gong search per key), and that a batch sees
// each of them wholly or not at all, however it is answered: on its caller,
// directly, routed, or from the leaf copies.
#include <gtest/gtest.h>

#include <tandem/tandem.hpp>

#include "support/keys.hpp"
#include "support/linearizability.hpp"
#include "support/model.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace tandem;
using clock_type = std::chrono::steady_clock;
constexpr std::size_t leaf_bytes = 1024 * sizeof(entry);  // a leaf cache slot (leaves of 1024 entries)

std::vector<entry> every_third(std::size_t n) {
  std::vector<entry> pairs;
  for (key_type k = 0; k < n; ++k) pairs.push_back({k * 3, k});
  pairs.push_back({max_key, 7});
  return pairs;
}

// Which writes the callers apply: those that change no leaf's shape (the
// edge keys 0 and UINT64_MAX among them): puts, inserts into a log with
// room, erases that leave the leaf above the merge threshold, and those
// that change nothing.
TEST(PointWrites, WritesThatChangeNoShapeRunOnTheCaller) {
  tandem::index idx;
  idx.load(every_third(10'000));
  const stats s0 = idx.stats();
  EXPECT_EQ(idx.put(0, 11), std::optional<value_type>(0));
  EXPECT_EQ(idx.put(max_key, 12), std::optional<value_type>(7));
  EXPECT_EQ(idx.put(300, 13), std::optional<value_type>(100));
  EXPECT_FALSE(idx.insert(3, 99));
  EXPECT_EQ(idx.erase(1), std::nullopt);
  EXPECT_EQ(idx.erase(max_key - 1), std::nullopt);
  const stats s1 = idx.stats();
  EXPECT_EQ(s1.point_writes - s0.point_writes, 6u);
  EXPECT_EQ(s1.batches, s0.batches) << "a write that changes no shape went through the queue";
  EXPECT_EQ(idx.get(0), std::optional<value_type>(11));
  EXPECT_EQ(idx.get(max_key), std::optional<value_type>(12));
  EXPECT_EQ(idx.get(300), std::optional<value_type>(13));
  EXPECT_EQ(idx.get(3), std::optional<value_type>(1));
  // New keys into the leaves' logs, and an erase of a key present.
  EXPECT_EQ(idx.put(1, 5), std::nullopt);
  EXPECT_TRUE(idx.insert(2, 6));
  EXPECT_EQ(idx.erase(6), std::optional<value_type>(2));
  const stats s2 = idx.stats();
  EXPECT_EQ(s2.point_writes - s1.point_writes, 3u);
  EXPECT_EQ(s2.batches, s1.batches);
  EXPECT_EQ(idx.get(1), std::optional<value_type>(5));
  EXPECT_EQ(idx.get(2), std::optional<value_type>(6));
  EXPECT_EQ(idx.get(6), std::nullopt);
  EXPECT_EQ(idx.size(), 10'001u + 2 - 1);
  // Through the queue: an insert into a leaf whose log is full (the batch
  // flushes it, and the next ones go on the caller again).
  for (key_type k = 3001; k < 3061; ++k) {
    if (k % 3 != 0) {
      EXPECT_TRUE(idx.insert(k, k));  // 40 keys of one leaf
    }
  }
  const stats s3 = idx.stats();
  EXPECT_GE(s3.batches - s2.batches, 1u);
  EXPECT_GE(s3.point_writes - s2.point_writes, 32u);
  EXPECT_EQ(s3.point_writes - s2.point_writes + s3.batches - s2.batches, 40u);
  EXPECT_EQ(idx.size(), 10'002u + 40);
  EXPECT_NO_THROW(idx.verify());
  // Through the queue: inserts into full leaves, which split.
  for (key_type k = 6000; k < 9000; ++k) {
    if (k % 3 != 0) {
      EXPECT_TRUE(idx.insert(k, k));
    }
  }
  EXPECT_GT(idx.stats().splits, 0u);
  EXPECT_EQ(idx.size(), 10'042u + 2000);
  EXPECT_NO_THROW(idx.verify());
  // Through the queue: erases that would leave a leaf to merge (and do).
  tandem::index one;
  one.load(every_third(299));  // one leaf of 300 keys
  for (key_type k = 0; k < 299; ++k) EXPECT_EQ(one.erase(k * 3), std::optional<value_type>(k));
  const stats o = one.stats();
  EXPECT_GT(o.point_writes, 0u);
  EXPECT_GT(o.batches, 0u);
  EXPECT_EQ(one.size(), 1u);
  EXPECT_NO_THROW(one.verify());
}

// Readers beside writers that move keys around them: the writers erase
// and insert again keys of sorted blocks (each erase shifts the block's
// later keys, each insert fills the leaf's log, and through the queue the
// logs flush, leaves split and merge), while readers ask for keys no one
// writes: each must be found, with its value, every time (a read that
// did not validate its leaf's version would miss a key a shift moved).
// Dropping the version check failed it in every run.
TEST(PointWrites, ReadersBesideWritersThatMoveKeysFindEveryKey) {
  tandem::index idx;
  std::vector<entry> pairs;
  for (key_type k = 0; k < 18'000; k += 3) pairs.push_back({k, k + 7});  // 6000 keys, a few leaves
  idx.load(pairs);
  std::atomic<bool> stop{false};
  std::atomic<key_type> window{0};  // where a writer works now: the readers ask there mostly
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937_64 rng(w + 1);
      for (int round = 0; !stop.load(std::memory_order_relaxed); ++round) {
        if (round % 4 != 3) {  // a narrow window: keys 3 mod 6 out, new keys in, then back
          const key_type base = rng() % 17'400;
          window.store(base, std::memory_order_relaxed);
          for (key_type k = base - base % 6 + 3; k < base + 600; k += 6) idx.erase(k);
          for (key_type k = base - base % 3 + 1; k < base + 600; k += 3) idx.insert(k, k);
          for (key_type k = base - base % 6 + 3; k < base + 600; k += 6) idx.insert(k, k + 7);
          for (key_type k = base - base % 3 + 1; k < base + 600; k += 3) idx.erase(k);
          continue;
        }
        // A window a few leaves wide: new keys in (its leaves split), the
        // loaded keys but those 0 mod 12 out (leaves fall below the merge
        // threshold), then back.
        const key_type base = rng() % 15'600 / 12 * 12;
        const key_type end = base + 2400;
        window.store(base, std::memory_order_relaxed);
        for (key_type k = base; k < end; ++k) {
          if (k % 3 != 0) idx.insert(k, k);
        }
        for (key_type k = base; k < end; k += 3) {
          if (k % 12 != 0) idx.erase(k);
        }
        for (key_type k = base; k < end; k += 3) {
          if (k % 12 != 0) idx.insert(k, k + 7);
        }
        for (key_type k = base; k < end; ++k) {
          if (k % 3 != 0) idx.erase(k);
        }
      }
    });
  }
  std::atomic<std::uint64_t> missed{0}, reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(100 + r);
      while (!stop.load(std::memory_order_relaxed)) {
        // 0 mod 12: never written; 7 in 8 where a writer works.
        const key_type near = window.load(std::memory_order_relaxed) / 12 * 12 + (rng() % 50) * 12;
        const key_type k = rng() % 8 != 0 && near < 18'000 ? near : (rng() % 1'500) * 12;
        const std::optional<value_type> v = idx.get(k);
        const std::optional<entry> e = idx.lower_bound(k);
        if (v != std::optional<value_type>(k + 7)) missed.fetch_add(1);
        if (!e || e->key != k || e->value != k + 7) missed.fetch_add(1);
        reads.fetch_add(2, std::memory_order_relaxed);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  stop.store(true);
  for (auto& t : writers) t.join();
  for (auto& t : readers) t.join();
  const stats s = idx.stats();
  EXPECT_EQ(missed.load(), 0u) << "of " << reads.load() << " reads";
  EXPECT_GT(s.point_writes, 0u);
  EXPECT_GT(s.merges, 0u) << "no leaf merged";
  EXPECT_NO_THROW(idx.verify());
}

// With caller_runs off, or a redo log (a put must be in the log first),
// puts go through the queue; a log takes no record for what changes
// nothing, so an insert of a key present still runs on the caller.
TEST(PointWrites, QueueWithoutCallerRunsOrWithARedoLog) {
  config off;
  off.caller_runs = false;
  tandem::index a(off);
  a.load(every_third(1000));
  EXPECT_EQ(a.put(3, 9), std::optional<value_type>(1));
  EXPECT_EQ(a.stats().point_writes, 0u);
  EXPECT_EQ(a.get(3), std::optional<value_type>(9));

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tandem_point_writes_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    config logged;
    logged.storage_dir = dir.string();
    tandem::index b(logged);
    b.load(every_third(1000));
    EXPECT_EQ(b.put(3, 9), std::optional<value_type>(1));
    EXPECT_FALSE(b.insert(6, 4));
    EXPECT_EQ(b.stats().point_writes, 1u) << "the put did not go through the queue, or the insert did";
  }
  {
    config logged;
    logged.storage_dir = dir.string();
    tandem::index b(logged);  // recovers the put from the log
    EXPECT_EQ(b.get(3), std::optional<value_type>(9));
  }
  std::filesystem::remove_all(dir);
}

// Threads calling get, put, insert and erase on a few hundred keys (0 and
// UINT64_MAX among them), one of them submitting batches of those ops too:
// every key's history (each op of a batch with the batch's span) must be
// linearizable.
void single_key_ops_are_linearizable(const config& cfg, std::uint64_t seed) {
  constexpr std::size_t keys = 300;
  constexpr int threads = 4;
  constexpr int calls_each = 1500;
  tandem::index idx(cfg);
  std::vector<key_type> pool;
  pool.push_back(0);
  pool.push_back(max_key);
  for (key_type k = 1; pool.size() < keys; ++k) pool.push_back(k * 1000);
  std::vector<entry> pairs;
  std::map<key_type, value_type> initial;
  for (std::size_t i = 0; i < keys; i += 2) {
    pairs.push_back({pool[i], i});
    initial[pool[i]] = i;
  }
  for (key_type k = 1; k < 20'000; ++k) pairs.push_back({k * 1000 + 1, k});  // many leaves around them
  idx.load(pairs);
  std::vector<std::map<key_type, std::vector<test::key_call>>> histories(threads);
  std::vector<std::thread> pool_threads;
  for (int t = 0; t < threads; ++t) {
    pool_threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 31 + t);
      auto& mine = histories[t];
      std::uint64_t counter = 0;
      auto next_value = [&] { return (std::uint64_t(t + 1) << 40) | ++counter; };
      for (int c = 0; c < calls_each; ++c) {
        if (t == 0 && c % 10 == 0) {  // a batch of a few point ops
          batch b;
          std::vector<test::key_call> made;
          for (int i = 0; i < 6; ++i) {
            const key_type k = pool[rng() % keys];
            test::key_call call;
            call.type = static_cast<op_type>(rng() % 4);  // get, put, insert, erase
            call.arg = next_value();
            b.add({k, call.type == op_type::put || call.type == op_type::insert ? call.arg : 0, 0, call.type});
            made.push_back(call);
          }
          const auto begin = clock_type::now();
          const batch_result r = idx.execute(b);
          const auto end = clock_type::now();
          for (std::size_t i = 0; i < made.size(); ++i) {
            made[i].begin = begin;
            made[i].end = end;
            made[i].found = r.found(i);
            made[i].value = r.found(i) ? r.value(i) : 0;
            mine[b.keys()[i]].push_back(made[i]);
          }
          continue;
        }
        const key_type k = pool[rng() % keys];
        test::key_call call;
        call.type = static_cast<op_type>(rng() % 4);
        call.arg = next_value();
        call.begin = clock_type::now();
        std::optional<value_type> answer;
        switch (call.type) {
          case op_type::get: answer = idx.get(k); break;
          case op_type::put: answer = idx.put(k, call.arg); break;
          case op_type::insert:
            call.any_value = !idx.insert(k, call.arg);  // present: its value is not said
            if (call.any_value) answer = 0;
            break;
          default: answer = idx.erase(k); break;
        }
        call.end = clock_type::now();
        call.found = answer.has_value();
        call.value = answer.value_or(0);
        mine[k].push_back(call);
      }
    });
  }
  for (auto& th : pool_threads) th.join();
  std::size_t checked = 0;
  for (const key_type k : pool) {
    std::vector<test::key_call> calls;
    for (const auto& h : histories) {
      const auto it = h.find(k);
      if (it != h.end()) calls.insert(calls.end(), it->second.begin(), it->second.end());
    }
    std::string why;
    const auto it = initial.find(k);
    const std::optional<value_type> start = it == initial.end() ? std::nullopt : std::optional<value_type>(it->second);
    EXPECT_TRUE(test::linearizable(calls, start, &why)) << "key " << k << ": " << why;
    checked += calls.size();
  }
  EXPECT_EQ(checked, std::size_t{threads} * calls_each + (calls_each / 10) * 5);
  EXPECT_GT(idx.stats().point_writes, 0u);
  EXPECT_NO_THROW(idx.verify());
}

// Many threads writing the same few keys, and readers of them: every call
// returns (no livelock: a read that keeps failing its validation reads
// under the leaf's lock), each writer reads back what it wrote to a key of
// its own, and the index stays whole.
TEST(PointWrites, ManyWritersOfAFewKeysAllFinish) {
  tandem::index idx;
  idx.load(every_third(10'000));
  constexpr int writers = 8;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < writers; ++t) {
    threads.emplace_back([&, t] {
      for (value_type i = 0; i < 3000; ++i) {
        const key_type shared_key = 300 + 3 * (i % 4);  // 4 keys of one leaf, for every writer
        idx.put(shared_key, i);
        if (i % 3 == 0) idx.erase(shared_key + 1);
        if (i % 3 == 1) idx.insert(shared_key + 1, i);
        const key_type own = 301 + 3 * (10 + t);  // a key of this writer alone, in the same leaf
        idx.put(own, i);
        if (idx.get(own) != std::optional<value_type>(i)) wrong.fetch_add(1);
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20'000; ++i) {
        if (!idx.get(300 + 3 * (i % 4))) wrong.fetch_add(1);  // put, never erased
        (void)idx.lower_bound(300);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(idx.stats().point_writes, 0u);
  EXPECT_NO_THROW(idx.verify());
}

TEST(PointWrites, SingleKeyOpsAreLinearizable) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) single_key_ops_are_linearizable(config{}, seed);
}

TEST(PointWrites, SingleKeyOpsAreLinearizableWithTheLeafCache) {
  config cfg;
  cfg.device = device_kind::cpu;
  cfg.gpu_cache_bytes = 4 * leaf_bytes;  // a few leaves: constant eviction
  cfg.gpu_cache_writes = true;
  for (std::uint64_t seed = 4; seed <= 5; ++seed) single_key_ops_are_linearizable(cfg, seed);
}

// A writer puts i into key a, then into key b, over and over: at every
// moment a holds at least what b holds. Readers' batches that get a, then
// b, must never see b ahead of a, answered on their callers (small),
// directly (gets beside many others), routed, or routed from the leaf
// copies (the host stand-in, with slots for a few leaves).
enum class batch_path { caller, direct, routed, copies };
const char* name(batch_path p) {
  switch (p) {
    case batch_path::caller: return "caller";
    case batch_path::direct: return "direct";
    case batch_path::routed: return "routed";
    default: return "copies";
  }
}

class PointWritesBeside : public ::testing::TestWithParam<batch_path> {};

TEST_P(PointWritesBeside, BatchesSeeEachPointWriteWhollyOrNotAtAll) {
  const batch_path path = GetParam();
  config cfg;
  cfg.device = device_kind::cpu;
  if (path == batch_path::routed || path == batch_path::copies) cfg.direct_get_ops = 0;
  if (path == batch_path::copies) {
    cfg.gpu_cache_bytes = 2 * leaf_bytes;
    cfg.gpu_cache_writes = true;
  }
  tandem::index idx(cfg);
  std::vector<entry> pairs;
  for (key_type k = 0; k < 100'000; ++k) pairs.push_back({k, 0});
  idx.load(pairs);
  const key_type a = 10, b = 90'000;  // in leaves far apart
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (value_type i = 1; !stop.load(std::memory_order_relaxed); ++i) {
      idx.put(a, i);
      idx.put(b, i);
    }
  });
  batch q;  // a first, b last, other gets between them (on the caller: at most small_batch_ops)
  q.get(a);
  const key_type between = path == batch_path::caller ? 50 : 300;
  for (key_type k = 0; k < between; ++k) q.get(k * 331 + 5);
  q.get(b);
  std::size_t ahead = 0;
  const auto until = clock_type::now() + std::chrono::milliseconds(1500);
  std::size_t batches = 0;
  while (clock_type::now() < until) {
    const batch_result r = idx.execute(q);
    ++batches;
    if (r.value(q.size() - 1) > r.value(0)) ++ahead;
  }
  stop.store(true);
  writer.join();
  const stats s = idx.stats();
  EXPECT_EQ(ahead, 0u) << ahead << " of " << batches << " batches saw b's put but not a's, put before it";
  EXPECT_GT(s.point_writes, 0u);
  if (path == batch_path::caller) {
    EXPECT_GT(s.caller_batches, 0u);
  } else if (path == batch_path::direct) {
    EXPECT_GT(s.direct_batches, 0u);
  } else if (path == batch_path::copies) {
    EXPECT_GT(s.cache_lookups, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, PointWritesBeside,
                         ::testing::Values(batch_path::caller, batch_path::direct, batch_path::routed,
                                           batch_path::copies),
                         [](const ::testing::TestParamInfo<batch_path>& i) { return std::string(name(i.param)); });

}  // namespace
