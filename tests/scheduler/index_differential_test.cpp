// The index against a std::map model replaying every batch op by op: random
// mixed batches of 1 .. 10^5 ops, all op kinds, uniform / clustered / edge
// keys, several fanouts and arena sizes. verify() after every batch in the
// debug preset, every few batches otherwise.
#include <tandem/tandem.hpp>

#include "support/batches.hpp"
#include "support/keys.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <tuple>

namespace {

using namespace tandem;
using test::key_pattern;

#ifdef NDEBUG
constexpr std::size_t verify_every = 8;
#else
constexpr std::size_t verify_every = 1;
#endif

struct run_params {
  key_pattern pattern;
  int fanout;
  std::size_t threads;
};

std::size_t run(const run_params& p, std::uint64_t seed, std::size_t target_ops) {
  SCOPED_TRACE(::testing::Message() << "pattern " << test::name(p.pattern) << " fanout " << p.fanout << " threads "
                                    << p.threads << " seed " << seed);
  config cfg;
  cfg.fanout = p.fanout;
  cfg.threads = p.threads;
  cfg.leaf_fill = 0.5 + 0.5 * static_cast<double>(seed % 3) / 2;
  tandem::index idx(cfg);
  test::index_model model;
  test::key_source keys(p.pattern, 60'000, seed);
  auto& rng = keys.rng();

  // Load: unsorted pairs with duplicates; the later pair wins.
  model.load(idx, keys.pairs(20'000 + rng() % 20'000));
  EXPECT_EQ(idx.size(), model.data.size());

  std::size_t ops = 0;
  for (std::size_t b = 0; ops < target_ops; ++b) {
    const batch bt = test::random_batch(keys, test::random_batch_size(rng, 100'000));
    const batch_result r = idx.execute(bt);
    const std::size_t bad = model.check(bt, r, "batch " + std::to_string(b));
    if (bad) return ops;  // the first bad batch says enough
    ops += bt.size();
    EXPECT_EQ(idx.size(), model.data.size()) << "batch " << b;
    if (b % verify_every == 0) {
      EXPECT_NO_THROW(idx.verify()) << "batch " << b;
    }
  }
  // The whole content, in order.
  batch all;
  all.scan(min_key, max_key, max_scan_limit).count(min_key, max_key);
  const batch_result r = idx.execute(all);
  EXPECT_EQ(model.check(all, r, "final scan"), 0u);
  EXPECT_NO_THROW(idx.verify());
  const stats s = idx.stats();
  EXPECT_EQ(s.keys, model.data.size());
  EXPECT_GT(s.batches, 0u);
  return ops;
}

class IndexDifferential : public ::testing::TestWithParam<std::tuple<key_pattern, int>> {};

TEST_P(IndexDifferential, MatchesModel) {
  const auto [pattern, fanout] = GetParam();
  std::size_t ops = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    ops += run({pattern, fanout, static_cast<std::size_t>(1u << (seed % 3))}, seed * 7919 + fanout, 120'000);
  }
  EXPECT_GE(ops, 360'000u);  // 12 cases: over 4 * 10^6 ops in all
}

INSTANTIATE_TEST_SUITE_P(
    Patterns, IndexDifferential,
    ::testing::Combine(::testing::Values(key_pattern::uniform, key_pattern::clustered, key_pattern::narrow,
                                         key_pattern::edges),
                       ::testing::Values(16, 64)),
    [](const auto& param_info) {
      return std::string(test::name(std::get<0>(param_info.param))) + "_f" + std::to_string(std::get<1>(param_info.param));
    });

TEST(IndexDifferential, SmallBatchesFanout32) {
  test::key_source keys(key_pattern::narrow, 3000, 99);
  tandem::index idx;
  test::index_model model;
  for (std::size_t b = 0; b < 2000; ++b) {
    const batch bt = test::random_batch(keys, 1 + keys.rng()() % 8);
    ASSERT_EQ(model.check(bt, idx.execute(bt), "batch " + std::to_string(b)), 0u);
  }
  EXPECT_NO_THROW(idx.verify());
}

// Small batches (config.small_batch_ops) run every stage on the dispatcher
// thread: batches of 1 .. threshold + 1 ops of every kind, several in flight
// so that small and large batches follow each other through the pipeline,
// against the model, at thresholds 0 (never), 40 and the default.
TEST(IndexDifferential, SmallBatchPathGivesTheModelsAnswers) {
  for (const std::size_t threshold : {std::size_t{0}, std::size_t{40}, config{}.small_batch_ops}) {
    SCOPED_TRACE(::testing::Message() << "small_batch_ops " << threshold);
    config cfg;
    cfg.small_batch_ops = threshold;
    cfg.threads = 3;
    tandem::index idx(cfg);
    test::index_model model;
    test::key_source keys(key_pattern::edges, 5000, 7 + threshold);
    auto& rng = keys.rng();
    const std::size_t largest = std::max<std::size_t>(threshold, 40) + 1;
    for (std::size_t round = 0; round < 150; ++round) {
      std::vector<batch> batches;
      std::vector<std::future<batch_result>> results;
      for (int i = 0; i < 6; ++i) {
        batches.push_back(test::random_batch(keys, 1 + rng() % largest));
        results.push_back(idx.submit(batches.back()));
      }
      for (std::size_t i = 0; i < batches.size(); ++i) {
        ASSERT_EQ(model.check(batches[i], results[i].get(), "round " + std::to_string(round)), 0u);
      }
      if (round % 25 == 0) {
        ASSERT_NO_THROW(idx.verify());
      }
    }
    EXPECT_EQ(idx.size(), model.data.size());
    batch all;
    all.scan(min_key, max_key, max_scan_limit);
    EXPECT_EQ(model.check(all, idx.execute(all), "final"), 0u);
  }
}

// Batches of at most small_batch_ops ops whose scans may return more than
// 4096 entries together run on the workers, the others on the dispatcher
// alone: both, with writes before and inside the scans' ranges.
TEST(IndexDifferential, SmallBatchesWithLongScansGiveTheModelsAnswers) {
  config cfg;
  cfg.threads = 3;
  tandem::index idx(cfg);
  test::index_model model;
  test::key_source keys(key_pattern::edges, 40000, 91);
  auto& rng = keys.rng();
  model.load(idx, keys.pairs(20000));
  test::batch_mix writes_and_scans;
  writes_and_scans.scan = 30;
  std::size_t long_batches = 0;
  for (std::size_t round = 0; round < 60; ++round) {
    std::vector<batch> batches;
    std::vector<std::future<batch_result>> results;
    for (int i = 0; i < 6; ++i) {
      const std::size_t n = 1 + rng() % cfg.small_batch_ops;
      batch b = test::random_batch(keys, n - 1, writes_and_scans);
      // One scan up to UINT64_MAX with a limit that passes the bound alone
      // half the time (placed when enough keys lie above lo).
      const std::uint64_t limit = rng() % 2 ? 4097 + rng() % 4000 : rng() % 4000;
      b.scan(keys(), max_key, limit, rng() % 3 == 0 ? scan_order::unordered : scan_order::ordered);
      long_batches += limit > 4096;
      batches.push_back(b);
      results.push_back(idx.submit(std::move(b)));
    }
    for (std::size_t i = 0; i < batches.size(); ++i) {
      ASSERT_EQ(model.check(batches[i], results[i].get(), "round " + std::to_string(round)), 0u);
    }
    if (round % 20 == 0) {
      ASSERT_NO_THROW(idx.verify());
    }
  }
  EXPECT_GT(long_batches, 60u);
  EXPECT_EQ(idx.size(), model.data.size());
}

// An index of full leaves (the writes split them), 3 threads, fanout 16,
// loaded with `loaded` uniform keys of `key_space`, its model, and batches
// of gets of present, absent and edge keys with repeats.
struct gets_index {
  tandem::index idx;
  test::index_model model;
  test::key_source keys;

  static config with_full_leaves(config cfg) {
    cfg.threads = 3;
    cfg.fanout = 16;
    cfg.leaf_fill = 1.0;
    return cfg;
  }

  gets_index(const config& cfg, std::size_t key_space, std::size_t loaded, std::uint64_t seed,
             key_pattern pattern = key_pattern::uniform)
      : idx(with_full_leaves(cfg)), keys(pattern, key_space, seed) {
    model.load(idx, keys.pairs(loaded));
  }

  batch gets(std::size_t n) {
    static constexpr key_type edges[] = {min_key, 1, max_key - 1, max_key};
    batch b;
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint64_t r = keys.rng()();
      b.get(r % 16 == 0 ? edges[r / 16 % 4] : r % 16 == 1 ? r : keys());
    }
    return b;
  }
};

// Batches of gets only, up to config.direct_get_ops and 4 a leaf, are
// answered directly (each get descends and reads its leaf; no sort, no
// scatter): gets-only batches of 1 .. 3000 ops (present, absent and edge
// keys, repeats) between write batches that split leaves, six in flight, so
// that some gets descend a layout older than the leaves (right links) and
// group commit folds some, then one of at most 700 gets alone; against the
// model, at direct_get_ops 0 (never), 700 and the default. Uniform keys
// find their leaves through the layout's radix table; keys in a few tight
// clusters leave it without one, and descend.
TEST(IndexDifferential, DirectGetsGiveTheModelsAnswers) {
  const std::pair<std::size_t, key_pattern> runs[] = {{0, key_pattern::uniform},
                                                       {700, key_pattern::uniform},
                                                       {config{}.direct_get_ops, key_pattern::uniform},
                                                       {config{}.direct_get_ops, key_pattern::clustered}};
  for (const auto& [threshold, pattern] : runs) {
    const bool clustered = pattern == key_pattern::clustered;
    SCOPED_TRACE(::testing::Message() << "direct_get_ops " << threshold << (clustered ? ", clustered" : ""));
    config cfg;
    cfg.direct_get_ops = threshold;
    gets_index t(cfg, 400'000, 300'000, 31 + threshold, pattern);
    {
      // The radix table is what host_bytes holds beyond leaves, layout and
      // (where a GPU routes) leaf guides.
      const stats s = t.idx.stats();
      EXPECT_EQ(s.host_bytes - s.guide_bytes > s.leaf_bytes + s.inner_bytes, !clustered);
    }
    tandem::index& idx = t.idx;
    test::index_model& model = t.model;
    test::key_source& keys = t.keys;
    auto& rng = keys.rng();
    const auto gets = [&](std::size_t n) { return t.gets(n); };
    for (std::size_t round = 0; round < 40; ++round) {
      std::vector<batch> batches;
      std::vector<std::future<batch_result>> results;
      for (int i = 0; i < 6; ++i) {
        batches.push_back(i % 3 == 0 ? test::random_batch(keys, 1 + rng() % 3000)
                                     : gets(test::random_batch_size(rng, 3000)));
        results.push_back(idx.submit(batches.back()));
      }
      for (std::size_t i = 0; i < batches.size(); ++i) {
        ASSERT_EQ(model.check(batches[i], results[i].get(), "round " + std::to_string(round)), 0u);
      }
      const batch alone = gets(1 + rng() % 700);  // nothing to fold it with
      ASSERT_EQ(model.check(alone, idx.execute(alone), "round " + std::to_string(round) + ", alone"), 0u);
      if (round % 10 == 0) {
        ASSERT_NO_THROW(idx.verify());
      }
    }
    EXPECT_EQ(idx.size(), model.data.size());
    const stats s = idx.stats();
    if (threshold == 0) {
      EXPECT_EQ(s.direct_batches, 0u);
    } else {
      EXPECT_GT(s.direct_batches, 0u);
    }
    EXPECT_GT(s.splits, 0u);
    batch all;
    all.scan(min_key, max_key, max_scan_limit);
    EXPECT_EQ(model.check(all, idx.execute(all), "final"), 0u);
  }
}

// Routed gets-only batches are answered two ways by the leaf phase: group
// by group when they hold many gets a leaf, through a pipeline across
// groups when they hold few. Both, between write batches that split full
// leaves, several in flight (so some routes are older than the leaves),
// with present, absent and edge keys and repeats, against the model.
TEST(IndexDifferential, SparseAndDenseGetBatchesGiveTheModelsAnswers) {
  config cfg;
  cfg.direct_get_ops = 0;    // every batch routed
  cfg.group_commit_ops = 0;  // and run as submitted (gets only stay gets only)
  gets_index t(cfg, 200'000, 60'000, 97);
  for (std::size_t round = 0; round < 12; ++round) {
    // ~60 leaves: 150 gets are a few a leaf, 40'000 hundreds.
    std::vector<batch> batches = {test::random_batch(t.keys, 2000), t.gets(150), t.gets(40'000),
                                  test::random_batch(t.keys, 2000), t.gets(40'000), t.gets(150)};
    std::vector<std::future<batch_result>> results;
    for (const batch& b : batches) results.push_back(t.idx.submit(b));
    for (std::size_t i = 0; i < batches.size(); ++i) {
      ASSERT_EQ(t.model.check(batches[i], results[i].get(), "round " + std::to_string(round)), 0u);
    }
  }
  EXPECT_NO_THROW(t.idx.verify());
  EXPECT_EQ(t.idx.size(), t.model.data.size());
  EXPECT_GT(t.idx.stats().splits, 0u);
}

}  // namespace

namespace {

// Many wide counts among many writes: the count patch takes the position
// sweep rather than one lookup per written key.
TEST(IndexDifferential, WideCountsAmongManyWrites) {
  test::key_source keys(key_pattern::narrow, 20'000, 4242);
  auto& rng = keys.rng();
  tandem::index idx;
  test::index_model model;
  model.load(idx, keys.pairs(10'000));
  for (int round = 0; round < 3; ++round) {
    batch b;
    for (int i = 0; i < 20'000; ++i) {
      const key_type k = keys();
      switch (rng() % 8) {
        case 0: b.put(k, rng()); break;
        case 1: b.insert(k, rng()); break;
        case 2: case 3: b.erase(k); break;
        case 4: b.count(min_key, max_key); break;
        case 5: b.count(k, max_key); break;
        case 6: b.count(min_key, k); break;
        default: b.get(k); break;
      }
    }
    ASSERT_EQ(model.check(b, idx.execute(b), "round " + std::to_string(round)), 0u);
  }
  EXPECT_NO_THROW(idx.verify());
}

// Scans long enough to write their entries past the caches (2^16 entries
// and more, ordered and unordered), over leaves as bulk load leaves them and
// as inserts and erases leave them, from and to the edge keys, with limits
// cutting them off inside a leaf; in batches that also write outside and
// inside their ranges.
TEST(IndexDifferential, LongScansGiveTheModelsEntries) {
  test::key_source keys(key_pattern::uniform, 400'000, 5151);
  auto& rng = keys.rng();
  tandem::index idx;
  test::index_model model;
  std::vector<entry> pairs = keys.pairs(300'000);
  pairs.push_back({min_key, 1});
  pairs.push_back({max_key, 2});
  model.load(idx, pairs);
  for (int round = 0; round < 4; ++round) {
    batch b;
    for (int i = 0; i < 12; ++i) {
      const key_type lo = i % 4 == 0 ? min_key : keys();
      const key_type hi = i % 3 == 0 ? max_key : lo + (max_key - lo) / (2 + rng() % 4);
      const std::uint64_t limit = i % 2 ? max_scan_limit : (std::uint64_t{1} << 16) + rng() % 100'000;
      b.scan(lo, hi, limit, i % 4 < 2 ? scan_order::ordered : scan_order::unordered);
    }
    if (round >= 2) {  // writes in the batch: some scans see them, later ones too
      for (int i = 0; i < 5'000; ++i) {
        if (rng() % 2) {
          b.put(keys(), rng());
        } else {
          b.erase(keys());
        }
      }
      b.scan(min_key, max_key, max_scan_limit).scan(min_key, max_key, max_scan_limit, scan_order::unordered);
    }
    ASSERT_EQ(model.check(b, idx.execute(b), "round " + std::to_string(round)), 0u);
  }
  EXPECT_NO_THROW(idx.verify());
}

// Scans from lo up to UINT64_MAX return exactly their limit whenever more
// keys than the limit plus the batch's erases lie above lo: such scans are
// copied straight to their places (host/src/range_read.cpp). Here many
// start among the last keys, where the batch's erases (before and after
// them) leave fewer than their limit, and inserts near the top add keys:
// short, long and cut-off limits, both orders, many seeds.
TEST(IndexDifferential, ScansUpToTheTopAmongErasesNearIt) {
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    test::key_source keys(seed % 2 ? key_pattern::uniform : key_pattern::edges, 8'000, seed);
    auto& rng = keys.rng();
    config cfg;
    cfg.threads = 1 + seed % 4;
    tandem::index idx(cfg);
    test::index_model model;
    model.load(idx, keys.pairs(5'000));
    for (int round = 0; round < 6; ++round) {
      std::vector<key_type> top;  // the last keys, highest first
      for (auto it = model.data.rbegin(); it != model.data.rend() && top.size() < 400; ++it) top.push_back(it->first);
      auto near_top = [&] { return top[rng() % top.size()]; };
      const bool short_only = round % 2 == 0;
      const int erases = round == 0 ? 0 : 150;
      batch b;
      b.scan(near_top(), max_key, 300);
      for (int i = 0; i < 3'000; ++i) {
        const std::uint64_t pick = rng() % 3'000;
        if (pick < static_cast<std::uint64_t>(erases)) {
          b.erase(near_top());
        } else if (pick < 400) {
          b.insert(rng() % 16 ? keys() : max_key - rng() % 1'000, rng());
        } else if (pick < 600) {
          b.put(rng() % 2 ? near_top() : keys(), rng());
        } else {
          const std::uint64_t kind = short_only ? 0 : rng() % 16;
          const std::uint64_t limit = kind < 12    ? 1 + rng() % 300
                                      : kind < 14 ? std::uint64_t{1} << 12
                                      : kind < 15 ? std::uint64_t{1} << 17
                                                  : max_scan_limit;
          const key_type lo = rng() % 4 == 0 ? keys() : rng() % 8 == 0 ? max_key - rng() % 64 : near_top();
          b.scan(lo, max_key, limit, rng() % 3 ? scan_order::ordered : scan_order::unordered);
        }
      }
      ASSERT_EQ(model.check(b, idx.execute(b), "round " + std::to_string(round)), 0u);
      EXPECT_EQ(idx.size(), model.data.size());
    }
    EXPECT_NO_THROW(idx.verify());
  }
}

// The placed path at the edge keys: scans of UINT64_MAX alone, and from 0,
// with limits that the keys above them meet exactly, alone in their batch
// and beside writes to the top keys.
TEST(IndexDifferential, PlacedScansAtTheEdgeKeys) {
  tandem::index idx;
  test::index_model model;
  model.load(idx, {{min_key, 1}, {7, 2}, {max_key - 1, 3}, {max_key, 4}});
  std::vector<batch> batches(5);
  batches[0].scan(max_key, max_key, 1);
  batches[1].scan(max_key - 1, max_key, 2).scan(max_key, max_key, 1);
  batches[2].scan(min_key, max_key, 4).scan(max_key, max_key, 1, scan_order::unordered);
  batches[3].erase(max_key).scan(max_key, max_key, 1).put(max_key, 9).scan(max_key - 1, max_key, 2);
  batches[4].scan(min_key, max_key, 1).insert(max_key - 2, 5).scan(max_key - 2, max_key, 3);
  for (std::size_t i = 0; i < batches.size(); ++i) {
    ASSERT_EQ(model.check(batches[i], idx.execute(batches[i]), "batch " + std::to_string(i)), 0u);
  }
  EXPECT_NO_THROW(idx.verify());
}

}  // namespace
