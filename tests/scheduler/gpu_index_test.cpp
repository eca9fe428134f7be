// The index with GPU routing: the differential and concurrency checks of the
// CPU index rerun at GPU shares 0, 0.5, 1 and auto and with the share changed
// between batches; inner sync under heavy splitting; a CUDA failure at each
// stage. Tests named *Gpu* need a GPU (ctest label gpu) and skip without one.
#include <tandem/device/device_query.hpp>
#include <tandem/scheduler/testing.hpp>
#include <tandem/tandem.hpp>

#include "support/batches.hpp"
#include "support/gpu.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <thread>

namespace {

using namespace tandem;
using test::key_pattern;

config gpu_config() {
  config c;
  c.device = device_kind::gpu;
  c.min_gpu_batch = 1;  // let even tiny batches use the GPU
  return c;
}

/// Runs random batches against the model; `before_batch(i)` may change the share.
template <class Hook>
void run_against_model(tandem::index& idx, key_pattern pattern, std::uint64_t seed, std::size_t batches, Hook before_batch) {
  test::index_model model;
  test::key_source keys(pattern, 50'000, seed);
  auto& rng = keys.rng();
  model.load(idx, keys.pairs(20'000));
  for (std::size_t b = 0; b < batches; ++b) {
    before_batch(b);
    const batch bt = test::random_batch(keys, test::random_batch_size(rng, 100'000));
    ASSERT_EQ(model.check(bt, idx.execute(bt), "batch " + std::to_string(b)), 0u);
    if (b % 4 == 0) {
      ASSERT_NO_THROW(idx.verify());
    }
  }
  batch all;
  all.scan(min_key, max_key, max_scan_limit);
  EXPECT_EQ(model.check(all, idx.execute(all), "final"), 0u);
}

class GpuShares : public ::testing::TestWithParam<double> {};

TEST_P(GpuShares, DifferentialAtFixedOrAutoShare) {
  TANDEM_REQUIRE_GPU();
  for (int fanout : {16, 32, 64}) {
    config c = gpu_config();
    c.fanout = fanout;
    tandem::index idx(c);
    if (GetParam() < 0) {
      idx.set_gpu_share(auto_share);
    } else {
      idx.set_gpu_share(GetParam());
    }
    for (key_pattern p : {key_pattern::uniform, key_pattern::clustered, key_pattern::edges}) {
      SCOPED_TRACE(::testing::Message() << "fanout " << fanout << " pattern " << test::name(p));
      run_against_model(idx, p, 77 + static_cast<std::uint64_t>(fanout), 12, [](std::size_t) {});
    }
    const stats s = idx.stats();
    EXPECT_EQ(s.gpu_failures, 0u);
    if (GetParam() > 0) {
      EXPECT_GT(s.gpu_keys, 0u);
    }
    if (GetParam() == 0) {
      EXPECT_EQ(s.gpu_keys, 0u);
    }
    if (GetParam() == 1) {
      EXPECT_EQ(s.cpu_keys, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shares, GpuShares, ::testing::Values(0.0, 0.5, 1.0, -1.0),
                         [](const auto& param_info) {
                           const double v = param_info.param;
                           return v < 0 ? std::string("auto") : "s" + std::to_string(static_cast<int>(v * 100));
                         });

TEST(GpuIndex, EveryKeyOrderAndScatterPlaceGivesTheModelsAnswers) {
  TANDEM_REQUIRE_GPU();
  for (gpu_query_order order : {gpu_query_order::full_sort, gpu_query_order::partial_sort, gpu_query_order::none}) {
    for (bool gpu_scatter : {true, false}) {
      for (double share : {1.0, 0.5}) {
        SCOPED_TRACE(::testing::Message() << "order " << static_cast<int>(order) << " gpu_scatter " << gpu_scatter
                                          << " share " << share);
        config c = gpu_config();
        c.gpu_order = order;
        c.gpu_scatter = gpu_scatter;
        tandem::index idx(c);
        idx.set_gpu_share(share);
        run_against_model(idx, key_pattern::clustered, 5 + static_cast<std::uint64_t>(order), 6, [](std::size_t) {});
        const stats s = idx.stats();
        EXPECT_EQ(s.gpu_failures, 0u);
        EXPECT_GT(s.gpu_keys, 0u);
        if (gpu_scatter) {
          EXPECT_GT(s.gpu_scatters, 0u);
        } else {
          EXPECT_EQ(s.gpu_scatters, 0u);
        }
      }
    }
  }
}

// config.max_gpu_route_keys: the GPU's share goes in key ranges (full sort)
// or in slices (partial sort) that the host merges with each other and with
// the CPU's share; a fault re-routes that range set (slice) on the CPU;
// batches above the bound scatter on the host.
TEST(GpuIndex, SlicedGpuRoutesGiveTheModelsAnswers) {
  TANDEM_REQUIRE_GPU();
  {  // an empty index (one leaf): no key ranges to cut
    config c = gpu_config();
    c.max_gpu_route_keys = 256;
    tandem::index idx(c);
    idx.set_gpu_share(1.0);
    test::index_model model;
    test::key_source keys(key_pattern::edges, 3000, 5);
    const batch bt = test::random_batch(keys, 5000);
    ASSERT_EQ(model.check(bt, idx.execute(bt), "empty index"), 0u);
  }
  for (const std::size_t slice : {std::size_t{777}, std::size_t{20'000}}) {
    for (const double share : {1.0, 0.6, -1.0}) {
      for (const gpu_query_order order : {gpu_query_order::full_sort, gpu_query_order::partial_sort}) {
      SCOPED_TRACE(::testing::Message() << "slice " << slice << " share " << share << " order "
                                        << static_cast<int>(order));
      config c = gpu_config();
      c.max_gpu_route_keys = slice;
      c.gpu_order = order;
      c.gpu_failure_limit = 1000;
      tandem::index idx(c);
      if (share < 0) {
        idx.set_gpu_share(auto_share);
      } else {
        idx.set_gpu_share(share);
      }
      run_against_model(idx, key_pattern::clustered, 900 + slice, 8, [&](std::size_t b) {
        if (b == 2) {
          ASSERT_TRUE(detail::index_access::inject_gpu_fault(idx, device::stage::kernel, 1));
        }
      });
      const stats s = idx.stats();
      EXPECT_GT(s.gpu_keys, 0u);
      EXPECT_EQ(s.gpu_failures, 1u);
      EXPECT_GT(s.host_scatters, 0u) << "batches above the bound scatter on the host";
      }
    }
  }
}

// config.max_gpu_bytes: the index holds at most the budget on the GPU after
// every batch and load, drops the leaf guides, routes batches larger than
// what the budget leaves in key ranges (or, when one range would hold too
// many ops, on the CPU), and answers as the model does, gets and writes,
// at each key order; a budget that cannot hold the layout leaves the GPU
// unused and says why.
TEST(GpuIndex, MemoryBudgetHoldsAndAnswersLikeTheModel) {
  TANDEM_REQUIRE_GPU();
  const std::size_t budget = std::size_t{16} << 20;
  for (const gpu_query_order order : {gpu_query_order::full_sort, gpu_query_order::partial_sort}) {
    SCOPED_TRACE(order == gpu_query_order::full_sort ? "full sort" : "partial sort");
    config c = gpu_config();
    c.max_gpu_bytes = budget;
    c.gpu_order = order;
    tandem::index idx(c);
    idx.set_gpu_share(1.0);
    run_against_model(idx, key_pattern::clustered, 4242, 10, [&](std::size_t) {
      ASSERT_LE(idx.stats().gpu_bytes, budget);
    });
    stats s = idx.stats();
    EXPECT_LE(s.gpu_bytes, budget);
    EXPECT_EQ(s.gpu_budget_bytes, budget);
    EXPECT_GE(s.gpu_route_keys, std::size_t{1} << 16);
    EXPECT_TRUE(s.guides_dropped);
    EXPECT_GT(s.gpu_keys, 0u);
    EXPECT_EQ(s.gpu_failures, 0u);
    EXPECT_EQ(s.device.rfind("gpu ", 0), 0u) << s.device;

    // A load (sorted on the GPU in at most 4 runs that fit beside the route
    // arrays, else on the CPU), then batches crowded on a few leaves (one
    // range holds more ops than a route may take: the CPU routes them),
    // then batches spread over every leaf.
    test::index_model model;
    test::key_source keys(key_pattern::uniform, 400'000, 99);
    model.load(idx, keys.pairs(200'000));
    EXPECT_LE(idx.stats().gpu_bytes, budget);
    std::mt19937_64 rng(5);
    const std::vector<entry> some = keys.pairs(8);
    for (int round = 0; round < 3; ++round) {
      batch crowded;
      for (std::size_t i = 0; i < 300'000; ++i) {
        const key_type k = some[rng() % (1 + 3 * static_cast<std::size_t>(round))].key + (rng() % 3);
        if (i % 5 == 0) {
          crowded.put(k, rng());
        } else {
          crowded.get(k);
        }
      }
      ASSERT_EQ(model.check(crowded, idx.execute(crowded), "crowded " + std::to_string(round)), 0u);
      const batch spread = test::random_batch(keys, 250'000);
      ASSERT_EQ(model.check(spread, idx.execute(spread), "spread " + std::to_string(round)), 0u);
      ASSERT_LE(idx.stats().gpu_bytes, budget);
    }
    EXPECT_NO_THROW(idx.verify());
    s = idx.stats();
    EXPECT_LE(s.gpu_bytes, budget);
    EXPECT_LT(s.gpu_route_keys, std::size_t{250'000}) << "the batches of 250000 and 300000 ops went in key ranges";
    EXPECT_GT(s.host_scatters, 0u) << "a budget this small leaves no room to scatter 250000 answers on the GPU";
  }
  // Too small for the layout and a route of 2^16 keys: the CPU routes.
  config c = gpu_config();
  c.max_gpu_bytes = std::size_t{1} << 20;
  tandem::index idx(c);
  idx.set_gpu_share(1.0);
  run_against_model(idx, key_pattern::uniform, 7, 4, [](std::size_t) {});
  const stats s = idx.stats();
  EXPECT_EQ(s.gpu_keys, 0u);
  EXPECT_NE(s.device.find("max_gpu_bytes"), std::string::npos) << s.device;
  EXPECT_LE(s.gpu_bytes, c.max_gpu_bytes);
}

// A budget that holds compact leaf guides beside routes of 2^20 keys, but
// not full ones beside routes of 2^22: the GPU keeps compact guides, most
// gets are answered at their hints, and every answer is the model's through
// writes and splits that leave guides stale.
TEST(GpuIndex, TightBudgetKeepsCompactLeafGuides) {
  TANDEM_REQUIRE_GPU();
  config c = gpu_config();
  c.max_gpu_bytes = std::size_t{120} << 20;
  tandem::index idx(c);
  idx.set_gpu_share(1.0);
  test::index_model model;
  test::key_source keys(key_pattern::uniform, 3'000'000, 61);
  model.load(idx, keys.pairs(2'000'000));
  for (int round = 0; round < 12; ++round) {
    batch gets;  // sparse over the leaves: hints are asked for
    for (std::size_t i = 0; i < 20'000; ++i) gets.get(keys());
    ASSERT_EQ(model.check(gets, idx.execute(gets), "gets " + std::to_string(round)), 0u);
    const batch mixed = test::random_batch(keys, 20'000);
    ASSERT_EQ(model.check(mixed, idx.execute(mixed), "mixed " + std::to_string(round)), 0u);
  }
  EXPECT_NO_THROW(idx.verify());
  const stats s = idx.stats();
  EXPECT_TRUE(s.guides_compact);
  EXPECT_FALSE(s.guides_dropped);
  EXPECT_LE(s.gpu_bytes, c.max_gpu_bytes);
  EXPECT_GT(s.hinted_ops, 4 * s.stale_hints) << "most gets were answered at their compact hint";
  EXPECT_GT(s.hinted_ops, 100'000u);
  EXPECT_EQ(s.gpu_failures, 0u);
}

TEST(GpuIndex, BatchesOfOneToSixteenMillionEqualTheCpuIndex) {
  TANDEM_REQUIRE_GPU();
  config gc = gpu_config();
  config cc;
  cc.device = device_kind::cpu;
  tandem::index on_gpu(gc), on_cpu(cc);
  on_gpu.set_gpu_share(1.0);
  std::mt19937_64 rng(99);
  std::vector<entry> pairs(1u << 22);
  for (auto& e : pairs) e = {rng() >> (rng() % 3 == 0 ? 40 : 0), rng()};
  pairs.push_back({0, 1});
  pairs.push_back({max_key, 2});
  on_gpu.load(pairs);
  on_cpu.load(pairs);
  for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{1000}, std::size_t{1} << 16,
                        std::size_t{1} << 20, std::size_t{1} << 24}) {
    SCOPED_TRACE(::testing::Message() << "batch of " << n);
    std::vector<key_type> keys(n);
    for (std::size_t i = 0; i < n; ++i) {
      keys[i] = i % 5 == 0 ? pairs[rng() % pairs.size()].key : (i % 97 == 0 ? max_key : rng());
    }
    std::vector<value_type> values(n / 4);
    for (auto& v : values) v = rng();
    batch b;
    b.get(keys).put(keys.data(), values.data(), values.size()).get(keys.data(), n / 2);
    const batch_result g = on_gpu.execute(b);
    const batch_result c = on_cpu.execute(b);
    ASSERT_EQ(g.size(), c.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      bad += g.values()[i] != c.values()[i] || g.found_flags()[i] != c.found_flags()[i] || g.keys()[i] != c.keys()[i];
    }
    EXPECT_EQ(bad, 0u);
  }
  const stats s = on_gpu.stats();
  EXPECT_GT(s.gpu_scatters, 0u);
  EXPECT_EQ(s.gpu_failures, 0u);
  // Device memory: the layout (up to two versions) and the work arrays of
  // the largest batch (1.5 x 2^24 ops: under 200 bytes an op with headroom).
  EXPECT_GE(s.gpu_bytes, s.inner_bytes);
  EXPECT_LE(s.gpu_bytes, 3 * s.inner_bytes + 200 * (std::size_t{3} << 23));
  EXPECT_EQ(on_cpu.stats().gpu_bytes, 0u);
  EXPECT_NO_THROW(on_gpu.verify());
  EXPECT_EQ(on_gpu.size(), on_cpu.size());
}

TEST(GpuIndex, ShareChangedBetweenBatches) {
  TANDEM_REQUIRE_GPU();
  tandem::index idx(gpu_config());
  const double shares[] = {0.0, 1.0, 0.3, 0.9, 0.5};
  run_against_model(idx, key_pattern::uniform, 5, 20, [&](std::size_t b) {
    if (b % 6 == 5) {
      idx.set_gpu_share(auto_share);
    } else {
      idx.set_gpu_share(shares[b % 5]);
    }
  });
  const stats s = idx.stats();
  EXPECT_GT(s.gpu_keys, 0u);
  EXPECT_GT(s.cpu_keys, 0u);
}

TEST(GpuIndex, ConcurrentSubmittersAtHalfShare) {
  TANDEM_REQUIRE_GPU();
  tandem::index idx(gpu_config());
  idx.set_gpu_share(0.5);
  test::answered_batches done;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      test::key_source keys(key_pattern::narrow, 4000, 500 + static_cast<std::uint64_t>(t));
      for (int i = 0; i < 15; ++i) {
        batch b = test::random_batch(keys, 1 + keys.rng()() % 5000);
        batch_result r = idx.execute(b);
        done.add(std::move(b), std::move(r));
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(done.in_sequence().size(), 8u * 15u);
  test::index_model model;
  ASSERT_EQ(done.check_in_sequence(model), 0u);
  EXPECT_GT(idx.stats().gpu_keys, 0u);
}

TEST(GpuIndex, InnerSyncUnderHeavySplittingWithRoutesInFlight) {
  TANDEM_REQUIRE_GPU();
  for (gpu_query_order order : {gpu_query_order::partial_sort, gpu_query_order::full_sort, gpu_query_order::none}) {
    SCOPED_TRACE(::testing::Message() << "gpu order " << static_cast<int>(order));
    config c = gpu_config();
    c.gpu_order = order;
    tandem::index idx(c);
    idx.set_gpu_share(0.7);
    std::mt19937_64 rng(9);
    // All batches are queued at once, so each one is routed (on the layout
    // of that moment) while the one before splits leaves and syncs.
    std::vector<batch> batches;
    std::vector<std::future<batch_result>> results;
    for (int b = 0; b < 30; ++b) {
      batch bt;
      // Mostly inserts of new keys, clustered so that leaves split many times per batch.
      const key_type base = rng();
      for (int i = 0; i < 40'000; ++i) {
        const key_type k = rng() % 3 ? base + static_cast<key_type>(i) * 3 : rng();
        if (i % 10 == 9) {
          bt.get(k);
        } else {
          bt.insert(k, static_cast<value_type>(i));
        }
      }
      results.push_back(idx.submit(bt));
      batches.push_back(std::move(bt));
    }
    test::index_model model;
    for (std::size_t b = 0; b < batches.size(); ++b) {
      ASSERT_EQ(model.check(batches[b], results[b].get(), "batch " + std::to_string(b)), 0u);
    }
    ASSERT_NO_THROW(idx.verify());
    const stats s = idx.stats();
    EXPECT_GT(s.splits, 1000u);
    EXPECT_GT(s.inner_syncs, 20u);
    EXPECT_EQ(s.gpu_failures, 0u);
    EXPECT_GT(s.gpu_keys, 0u);
  }
}

// Each small batch splits a full leaf while the big batch queued behind it is
// being routed on the GPU: the GPU's ordinals must be read in the layout
// version the GPU used, whatever the upload of the new one does meanwhile.
// config.gpu_leaf_hints: gets of GPU-routed batches sparse over the leaves
// are answered from hints, as the model answers, while writes between them
// split leaves and leave the GPU's guides stale; stale hints bring a
// refresh. With hints off nothing is answered from a hint.
TEST(GpuIndex, LeafHintsAnswerGetsLikeTheModelThroughWritesAndSplits) {
  TANDEM_REQUIRE_GPU();
  for (const bool hints : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "gpu_leaf_hints " << hints);
    config c = gpu_config();
    c.gpu_leaf_hints = hints;
    c.direct_get_ops = 0;  // every batch is routed
    c.leaf_fill = 0.98;    // inserts split leaves within a few rounds
    tandem::index idx(c);
    idx.set_gpu_share(1.0);
    test::index_model model;
    std::mt19937_64 rng(23);
    std::vector<entry> pairs = {{min_key, 1}, {max_key, 2}, {1, 3}, {max_key - 1, 4}};
    while (pairs.size() < (std::size_t{1} << 19)) pairs.push_back({rng(), rng()});
    model.load(idx, pairs);
    const std::size_t leaves = idx.stats().leaves;
    for (int round = 0; round < 12; ++round) {
      // About 4 gets a leaf: present keys, absent neighbours, edge keys.
      batch gets;
      gets.get(min_key).get(max_key).get(1).get(max_key - 1).get(2);
      while (gets.size() < 4 * leaves) {
        const key_type k = pairs[rng() % pairs.size()].key;
        gets.get(rng() % 5 == 0 ? k + 1 : k);
      }
      ASSERT_EQ(model.check(gets, idx.execute(gets), "gets, round " + std::to_string(round)), 0u);
      // Writes that move the blocks (inserts, erases) and split leaves.
      batch writes;
      for (int i = 0; i < 20000; ++i) {
        const key_type k = rng();
        switch (rng() % 3) {
          case 0: writes.insert(k, k); pairs.push_back({k, k}); break;
          case 1: writes.erase(pairs[rng() % pairs.size()].key); break;
          default: writes.put(pairs[rng() % pairs.size()].key, k); break;
        }
      }
      if (round % 4 == 3) writes.erase(min_key).erase(max_key).put(min_key, 9);
      ASSERT_EQ(model.check(writes, idx.execute(writes), "writes, round " + std::to_string(round)), 0u);
      if (round % 4 == 0) {
        ASSERT_NO_THROW(idx.verify());
      }
    }
    const stats s = idx.stats();
    EXPECT_EQ(s.gpu_failures, 0u);
    EXPECT_GT(s.splits, 0u);
    if (hints) {
      EXPECT_GT(s.hinted_ops, 0u);
      EXPECT_GE(s.guide_refreshes, 2u) << "the load's, then one after stale hints";
      EXPECT_GE(s.guide_bytes, leaves * sizeof(leaf_guide));  // the load's leaves at least
    } else {
      EXPECT_EQ(s.hinted_ops + s.stale_hints + s.guide_refreshes + s.guide_bytes, 0u);
    }
  }
}

TEST(GpuIndex, RoutesStayRightWhenTheBatchBeforeSplits) {
  TANDEM_REQUIRE_GPU();
  config c = gpu_config();
  c.leaf_fill = 1.0;  // every insert of a new key splits its leaf
  tandem::index idx(c);
  idx.set_gpu_share(1.0);
  std::vector<key_type> keys(1u << 20);
  std::vector<value_type> values(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    keys[i] = 2 * static_cast<key_type>(i);
    values[i] = i;
  }
  idx.load(keys.data(), values.data(), keys.size());
  batch gets;
  for (std::size_t i = 0; i < keys.size(); ++i) gets.get(keys[(i * 7919) % keys.size()]);
  std::mt19937_64 rng(17);
  for (int round = 0; round < 12; ++round) {
    std::vector<std::future<batch_result>> pending;
    for (int k = 0; k < 4; ++k) {
      batch split;
      split.insert(2 * (rng() % keys.size()) + 1, 1);  // an odd key: new, splits a full leaf
      pending.push_back(idx.submit(split));
      pending.push_back(idx.submit(gets));
    }
    for (std::size_t k = 0; k < pending.size(); ++k) {
      const batch_result r = pending[k].get();
      if (k % 2 == 0) continue;
      std::size_t missing = 0;
      for (std::size_t i = 0; i < r.size(); ++i) missing += !r.found(i);
      ASSERT_EQ(missing, 0u) << "round " << round << " batch " << k;
    }
  }
  EXPECT_NO_THROW(idx.verify());
  EXPECT_GT(idx.stats().splits, 40u);
  EXPECT_EQ(idx.stats().gpu_failures, 0u);
}

TEST(GpuIndex, FaultAtEachStageKeepsAnswersRight) {
  TANDEM_REQUIRE_GPU();
  for (device::stage st : {device::stage::upload, device::stage::sort, device::stage::kernel,
                           device::stage::download, device::stage::sync}) {
    SCOPED_TRACE(::testing::Message() << "stage " << static_cast<int>(st));
    config c = gpu_config();
    c.gpu_failure_limit = 3;
    tandem::index idx(c);
    idx.set_gpu_share(1.0);
    std::size_t injected = 0;
    run_against_model(idx, key_pattern::uniform, 31 + static_cast<std::uint64_t>(st), 8, [&](std::size_t b) {
      if (b == 2) {
        ASSERT_TRUE(detail::index_access::inject_gpu_fault(idx, st, 1));
        ++injected;
      }
    });
    const stats s = idx.stats();
    EXPECT_GE(s.gpu_failures, injected) << "the fault was seen";
    EXPECT_FALSE(s.gpu_degraded) << "one failure does not degrade";
    EXPECT_GT(s.gpu_keys, 0u) << "the GPU routes again after the fault";
  }
}

TEST(GpuIndex, RepeatedFailuresDegradeToCpu) {
  TANDEM_REQUIRE_GPU();
  config c = gpu_config();
  c.gpu_failure_limit = 2;
  tandem::index idx(c);
  idx.set_gpu_share(1.0);
  ASSERT_TRUE(detail::index_access::inject_gpu_fault(idx, device::stage::kernel, 2));
  run_against_model(idx, key_pattern::clustered, 3, 6, [](std::size_t) {});
  const stats s = idx.stats();
  EXPECT_TRUE(s.gpu_degraded);
  EXPECT_EQ(s.gpu_failures, 2u);
  EXPECT_EQ(s.gpu_share, 0.0);
  EXPECT_NE(s.device.find("degraded"), std::string::npos) << s.device;
}

// Runs everywhere.
TEST(DeviceSelection, SetGpuShareRejectsBadValues) {
  tandem::index idx;
  EXPECT_THROW(idx.set_gpu_share(std::numeric_limits<double>::quiet_NaN()), std::invalid_argument);
  EXPECT_THROW(idx.set_gpu_share(-0.01), std::invalid_argument);
  EXPECT_THROW(idx.set_gpu_share(1.01), std::invalid_argument);
  EXPECT_NO_THROW(idx.set_gpu_share(0.0));
  EXPECT_NO_THROW(idx.set_gpu_share(1.0));
  EXPECT_NO_THROW(idx.set_gpu_share(auto_share));
  config c;
  c.gpu_share = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(tandem::index{c}, std::invalid_argument);
  c.gpu_share = 2;
  EXPECT_THROW(tandem::index{c}, std::invalid_argument);
}

TEST(DeviceSelection, AutoWithoutGpuRunsOnCpuAndSaysSo) {
  std::string why;
  if (test::have_gpu(why)) GTEST_SKIP() << "a GPU is present";
  tandem::index idx;  // device = automatic
  idx.set_gpu_share(1.0);
  test::key_source keys(key_pattern::uniform, 1000, 1);
  test::index_model model;
  const batch b = test::random_batch(keys, 50'000);
  EXPECT_EQ(model.check(b, idx.execute(b)), 0u);
  const stats s = idx.stats();
  EXPECT_EQ(s.gpu_share, 0.0);
  EXPECT_EQ(s.gpu_keys, 0u);
  EXPECT_NE(s.device.find("cpu"), std::string::npos) << s.device;
  EXPECT_NE(s.device.find("no GPU"), std::string::npos) << s.device;
}

// Runs everywhere: a GPU budget on an index that routes on the CPU changes
// nothing but what stats report.
TEST(DeviceSelection, GpuBudgetOnTheCpuIsReportedAndHoldsNothing) {
  config c;
  c.device = device_kind::cpu;
  c.max_gpu_bytes = std::size_t{1} << 28;
  tandem::index idx(c);
  run_against_model(idx, key_pattern::edges, 12, 4, [](std::size_t) {});
  const stats s = idx.stats();
  EXPECT_EQ(s.gpu_budget_bytes, std::size_t{1} << 28);
  EXPECT_EQ(s.gpu_bytes, 0u);
  EXPECT_EQ(s.gpu_keys, 0u);
  EXPECT_FALSE(s.guides_dropped);
}

}  // namespace
