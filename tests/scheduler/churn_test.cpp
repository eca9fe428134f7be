// Churn: batches that empty regions of the key space and fill others. The
// leaves they empty merge into their neighbours, the dead ones are reused by
// later splits, and index::compact gives their memory back; every batch is
// checked against the std::map model and verify() runs after each one.
// Shapes: a sliding window (inserts at the right end, erases of the oldest),
// erasing every key, ranges erased through scans, random erase-heavy mixes
// with the edge keys 0 and UINT64_MAX. Tests named *Gpu* need a GPU (label
// gpu) and skip without one.
#include <tandem/host/leaf.hpp>
#include <tandem/tandem.hpp>

#include "support/gpu.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace tandem;

config churn_config(int fanout, std::size_t threads) {
  config c;
  c.fanout = fanout;
  c.threads = threads;
  c.device = device_kind::cpu;
  return c;
}

/// Runs `b`, checks it against the model and verifies the index.
void run_checked(tandem::index& idx, test::index_model& model, const batch& b, const std::string& where) {
  const batch_result r = idx.execute(b);
  ASSERT_EQ(model.check(b, r, where), 0u);
  ASSERT_EQ(idx.size(), model.data.size()) << where;
  ASSERT_NO_THROW(idx.verify()) << where;
}

/// Leaves of a fresh load of the model's keys at the config's fill.
std::uint64_t fresh_leaves(const config& cfg, const test::index_model& model) {
  std::vector<entry> pairs;
  pairs.reserve(model.data.size());
  for (const auto& [k, v] : model.data) pairs.push_back({k, v});
  tandem::index fresh(cfg);
  fresh.load(pairs);
  return fresh.stats().leaves;
}

/// A sliding window of `window` keys, `step` apart: each round inserts the
/// next window/16 keys at the right end and erases the oldest window/16,
/// beside gets, lower_bounds, counts and scans over the window. Leaves and
/// leaf memory must stay within 1.3x of a fresh load of the window.
void sliding_window(const config& cfg, std::size_t window, std::size_t rounds, key_type step, std::uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "window " << window << " fanout " << cfg.fanout << " seed " << seed);
  tandem::index idx(cfg);
  test::index_model model;
  std::mt19937_64 rng(seed);
  std::vector<entry> pairs;
  for (std::size_t i = 0; i < window; ++i) pairs.push_back({i * step, rng()});
  model.load(idx, pairs);
  const std::size_t slide = window / 16;
  key_type oldest = 0, next = window * step;
  std::uint64_t peak_bytes = 0;
  for (std::size_t round = 0; round < rounds; ++round) {
    if (round == rounds / 4) peak_bytes = 0;  // from the first rounds on (splits of the loaded leaves)
    batch b;
    for (std::size_t i = 0; i < slide; ++i) b.insert(next + i * step, rng());
    for (std::size_t i = 0; i < slide; ++i) b.erase(oldest + i * step);
    for (int i = 0; i < 64; ++i) {
      const key_type k = oldest + rng() % (next - oldest + slide * step);
      switch (rng() % 4) {
        case 0: b.get(k); break;
        case 1: b.lower_bound(k); break;
        case 2: b.count(k, k + rng() % (window * step / 8)); break;
        default: b.scan(k, k + rng() % (window * step / 64), 1 + rng() % 200); break;
      }
    }
    next += slide * step;
    oldest += slide * step;
    ASSERT_NO_FATAL_FAILURE(run_checked(idx, model, b, "round " + std::to_string(round)));
    peak_bytes = std::max<std::uint64_t>(peak_bytes, idx.stats().leaf_bytes);
  }
  const stats s = idx.stats();
  const std::uint64_t fresh = fresh_leaves(cfg, model);
  EXPECT_GT(s.merges, 0u);
  EXPECT_LE(s.leaves * 10, fresh * 13) << "live leaves against a fresh load of " << fresh;
  // Leaf memory counts the dead leaves too, which wait a batch or two to be
  // reused.
  EXPECT_LE(peak_bytes / sizeof(host::leaf) * 10, fresh * 13 + 40)
      << "leaf memory against a fresh load of " << fresh << " leaves (dead now: " << s.dead_leaves << ")";
}

TEST(Churn, SlidingWindowStaysWithinAFreshLoad) {
  for (const int fanout : {16, 64}) {
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
      sliding_window(churn_config(fanout, 2 + seed), 20'000, 96, 3, seed);
      if (HasFailure()) return;
    }
  }
}

TEST(Churn, SlidingWindowUpToTheTopKey) {
  // The window's right end reaches UINT64_MAX: keys step * i counted down
  // from the top.
  config cfg = churn_config(16, 2);
  tandem::index idx(cfg);
  test::index_model model;
  const std::size_t window = 8'192, slide = 512;
  const key_type step = key_type{1} << 49;  // 2^15 keys reach the top
  std::vector<entry> pairs;
  for (std::size_t i = 0; i < window; ++i) pairs.push_back({i * step, i});
  model.load(idx, pairs);
  key_type oldest = 0, next = window * step;
  for (int round = 0; round < 64; ++round) {
    batch b;
    for (std::size_t i = 0; i < slide && next != 0; ++i, next += step) b.put(next, i);  // next wraps to 0 past the top
    b.put(max_key, 7);
    for (std::size_t i = 0; i < slide && oldest < max_key - step; ++i, oldest += step) b.erase(oldest);
    b.scan(0, max_key, 100).count(0, max_key).lower_bound(max_key).get(max_key).get(0);
    ASSERT_NO_FATAL_FAILURE(run_checked(idx, model, b, "round " + std::to_string(round)));
  }
}

TEST(Churn, EraseEveryKeyThenCompactThenRefill) {
  for (const bool in_one_batch : {true, false}) {
    SCOPED_TRACE(in_one_batch ? "one batch" : "many batches");
    const config cfg = churn_config(32, 3);
    tandem::index idx(cfg);
    test::index_model model;
    std::vector<entry> pairs;
    std::mt19937_64 rng(11);
    for (std::size_t i = 0; i < 100'000; ++i) pairs.push_back({rng(), i});
    pairs.push_back({0, 1});
    pairs.push_back({max_key, 2});
    model.load(idx, pairs);
    const std::uint64_t loaded_bytes = idx.stats().leaf_bytes;
    std::vector<key_type> keys;
    for (const auto& [k, v] : model.data) keys.push_back(k);
    std::shuffle(keys.begin(), keys.end(), rng);
    const std::size_t per = in_one_batch ? keys.size() : keys.size() / 7 + 1;
    for (std::size_t i = 0; i < keys.size(); i += per) {
      batch b;
      b.erase(keys.data() + i, std::min(per, keys.size() - i));
      b.count(0, max_key).scan(0, max_key, 10).lower_bound(0);
      ASSERT_NO_FATAL_FAILURE(run_checked(idx, model, b, "erase from " + std::to_string(i)));
    }
    stats s = idx.stats();
    EXPECT_EQ(s.keys, 0u);
    EXPECT_EQ(s.leaves, 1u);
    EXPECT_EQ(s.leaf_bytes, loaded_bytes) << "dead leaves stay until compact()";
    idx.compact();
    ASSERT_NO_THROW(idx.verify());
    s = idx.stats();
    EXPECT_EQ(s.leaf_bytes, sizeof(host::leaf)) << "one leaf after compact()";
    EXPECT_EQ(s.dead_leaves, 0u);
    EXPECT_EQ(s.compactions, 1u);
    // And it works as before: refill, churn, compact again.
    batch refill;
    for (std::size_t i = 0; i < 50'000; ++i) refill.put(rng() | 1, i);
    refill.put(0, 3).put(max_key, 4);
    ASSERT_NO_FATAL_FAILURE(run_checked(idx, model, refill, "refill"));
    batch half;
    std::size_t n = 0;
    for (const auto& [k, v] : model.data) {
      if (n++ % 2 == 0) half.erase(k);
    }
    ASSERT_NO_FATAL_FAILURE(run_checked(idx, model, half, "erase half"));
    idx.compact();
    ASSERT_NO_THROW(idx.verify());
    batch all;
    all.scan(0, max_key, max_scan_limit);
    ASSERT_NO_FATAL_FAILURE(run_checked(idx, model, all, "after compact"));
  }
}

TEST(Churn, RangesErasedThroughScans) {
  // Scan a random range, then erase what it returned in the next batch
  // (beside inserts elsewhere): regions empty and fill in turn.
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    tandem::index idx(churn_config(seed % 2 ? 16 : 64, 2));
    test::index_model model;
    std::mt19937_64 rng(seed);
    const key_type span = key_type{1} << 24;
    std::vector<entry> pairs;
    for (int i = 0; i < 60'000; ++i) pairs.push_back({rng() % span, rng()});
    model.load(idx, pairs);
    for (int round = 0; round < 40; ++round) {
      const key_type lo = rng() % span, hi = lo + rng() % (span / 4);
      batch scan;
      scan.scan(lo, hi, max_scan_limit);
      const batch_result r = idx.execute(scan);
      ASSERT_EQ(model.check(scan, r, "scan"), 0u);
      batch b;
      for (const entry& e : r.scan(0)) b.erase(e.key);
      for (int i = 0; i < 3'000; ++i) b.insert(rng() % span, rng());
      b.count(0, max_key).scan(lo > 100 ? lo - 100 : 0, hi + 100, 50);
      ASSERT_NO_FATAL_FAILURE(run_checked(idx, model, b, "round " + std::to_string(round)));
    }
    EXPECT_GT(idx.stats().merges, 0u);
  }
}

TEST(Churn, EraseHeavyRandomMixesWithEdgeKeys) {
  // Puts, inserts and erases in every proportion over a small key space
  // holding 0 and UINT64_MAX, with reads among them; leaves merge, die,
  // get reused by splits and are compacted away now and then.
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    tandem::index idx(churn_config(seed % 3 == 0 ? 32 : 16, 1 + seed % 4));
    test::index_model model;
    std::mt19937_64 rng(seed);
    auto any_key = [&]() -> key_type {
      const unsigned d = static_cast<unsigned>(rng() % 100);
      if (d < 2) return 0;
      if (d < 4) return max_key;
      if (d < 6) return max_key - rng() % 64;
      return rng() % 40'000;
    };
    for (int round = 0; round < 30; ++round) {
      const unsigned erase_share = static_cast<unsigned>(rng() % 100);
      batch b;
      const std::size_t n = 1 + rng() % 20'000;
      for (std::size_t i = 0; i < n; ++i) {
        const unsigned d = static_cast<unsigned>(rng() % 100);
        const key_type k = any_key();
        if (d < erase_share) {
          b.erase(k);
        } else if (d < erase_share + (100 - erase_share) / 2) {
          b.put(k, rng());
        } else if (d % 5 == 0) {
          b.insert(k, rng());
        } else if (d % 5 == 1) {
          b.lower_bound(k);
        } else if (d % 5 == 2) {
          b.count(k, k + rng() % 1000);
        } else if (d % 5 == 3) {
          b.scan(k, k + rng() % 1000, 1 + rng() % 50);
        } else {
          b.get(k);
        }
      }
      ASSERT_NO_FATAL_FAILURE(run_checked(idx, model, b, "round " + std::to_string(round)));
      if (rng() % 8 == 0) {
        idx.compact();
        ASSERT_NO_THROW(idx.verify());
      }
    }
  }
}

TEST(GpuChurn, SlidingWindowRoutedOnTheGpu) {
  TANDEM_REQUIRE_GPU();
  for (const double share : {1.0, 0.5}) {
    config cfg = churn_config(32, 4);
    cfg.device = device_kind::gpu;
    cfg.gpu_share = share;
    cfg.min_gpu_batch = 1;
    sliding_window(cfg, 40'000, 64, 5, 3);
    if (HasFailure()) return;
  }
}

TEST(GpuChurn, EraseEveryKeyAndCompactRoutedOnTheGpu) {
  TANDEM_REQUIRE_GPU();
  config cfg = churn_config(32, 4);
  cfg.device = device_kind::gpu;
  cfg.gpu_share = 1.0;
  cfg.min_gpu_batch = 1;
  tandem::index idx(cfg);
  test::index_model model;
  std::mt19937_64 rng(5);
  std::vector<entry> pairs;
  for (int i = 0; i < 200'000; ++i) pairs.push_back({rng(), rng()});
  model.load(idx, pairs);
  std::vector<key_type> keys;
  for (const auto& [k, v] : model.data) keys.push_back(k);
  for (std::size_t i = 0; i < keys.size(); i += 50'000) {
    batch b;
    b.erase(keys.data() + i, std::min<std::size_t>(50'000, keys.size() - i));
    for (int g = 0; g < 1000; ++g) b.get(keys[rng() % keys.size()]);
    ASSERT_NO_FATAL_FAILURE(run_checked(idx, model, b, "erase from " + std::to_string(i)));
  }
  idx.compact();
  batch refill;
  for (int i = 0; i < 100'000; ++i) refill.put(rng(), rng());
  ASSERT_NO_FATAL_FAILURE(run_checked(idx, model, refill, "refill"));
  batch gets;
  for (int i = 0; i < 100'000; ++i) gets.get(i % 2 ? rng() : keys[rng() % keys.size()]);
  ASSERT_NO_FATAL_FAILURE(run_checked(idx, model, gets, "gets"));
  EXPECT_GT(idx.stats().gpu_keys, 0u);
}

}  // namespace
