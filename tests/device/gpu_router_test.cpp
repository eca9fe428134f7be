// gpu_router: batches routed on the GPU over random layouts of every fanout,
// every group size, every aggregation order, checked op by op against
// std::upper_bound over the leaf table, plus the grouping invariant, re-upload
// (double buffer), fault injection at each stage, and the constructor's error
// without a GPU. Tests that need a GPU have "Gpu" in their name (ctest label
// `gpu`) and skip with the reason when none is usable.
#include <tandem/core/inner_layout.hpp>
#include <tandem/device/device_query.hpp>
#include <tandem/device/gpu_router.hpp>
#include <tandem/error.hpp>

#include "support/keys.hpp"

#include "support/tables.hpp"

#include <gtest/gtest.h>

#if defined(TANDEM_HAS_CUDA)
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::device;

#define TANDEM_REQUIRE_GPU()                                                     \
  do {                                                                           \
    const device_report tandem_report_ = query_devices();                        \
    if (tandem_report_.devices.empty()) {                                        \
      GTEST_SKIP() << "no usable GPU: " << tandem_report_.reason;                \
    }                                                                            \
  } while (0)

using test::build;
using test::random_table;
using test::reference;
using test::table;

enum class pattern { uniform, clustered, all_equal, edges, separators };

const char* name(pattern p) {
  switch (p) {
    case pattern::uniform: return "uniform";
    case pattern::clustered: return "clustered";
    case pattern::all_equal: return "all_equal";
    case pattern::edges: return "edges";
    case pattern::separators: return "separators";
  }
  return "?";
}

/// n keys of a pattern; every pattern but all_equal includes 0 and UINT64_MAX
/// often; `separators` hits low keys and their neighbours.
std::vector<key_type> make_keys(pattern p, std::size_t n, std::uint64_t seed, const table& t) {
  std::vector<key_type> keys(n);
  std::mt19937_64 rng(seed);
  switch (p) {
    case pattern::all_equal: {
      const key_type k = seed % 3 == 0 ? max_key : seed % 3 == 1 ? min_key : rng();
      std::fill(keys.begin(), keys.end(), k);
      return keys;
    }
    case pattern::separators: {
      for (key_type& k : keys) {
        const key_type s = t.low_keys[rng() % t.low_keys.size()];
        const int d = static_cast<int>(rng() % 3) - 1;
        k = d < 0 ? (s == min_key ? s : s - 1) : d > 0 ? (s == max_key ? s : s + 1) : s;
      }
      return keys;
    }
    default: break;
  }
  const test::key_pattern kp = p == pattern::uniform     ? test::key_pattern::uniform
                               : p == pattern::clustered ? test::key_pattern::clustered
                                                         : test::key_pattern::edges;
  test::key_source source(kp, std::max<std::size_t>(n, 16), seed);
  for (key_type& k : keys) k = source();
  return keys;
}

/// The grouping invariant and every op against the reference: each position
/// once, ordinals non-decreasing, positions increasing inside a group, each
/// op's ordinal = upper_bound - 1.
void expect_grouped(const std::vector<std::uint32_t>& positions, const std::vector<std::uint32_t>& ordinals,
                    const std::vector<key_type>& keys, const table& t) {
  const std::size_t n = keys.size();
  ASSERT_EQ(positions.size(), n);
  ASSERT_EQ(ordinals.size(), n);
  std::vector<char> seen(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t p = positions[i];
    ASSERT_LT(p, n) << "entry " << i;
    ASSERT_EQ(seen[p], 0) << "position " << p << " twice";
    seen[p] = 1;
    ASSERT_LT(ordinals[i], t.size()) << "entry " << i;
    if (i > 0) {
      ASSERT_LE(ordinals[i - 1], ordinals[i]) << "ordinals decrease at entry " << i;
      if (ordinals[i - 1] == ordinals[i]) {
        ASSERT_LT(positions[i - 1], p) << "positions not increasing in the group of ordinal " << ordinals[i];
      }
    }
    ASSERT_EQ(ordinals[i], reference(t, keys[p])) << "op " << p << " key " << keys[p];
  }
}

void route_and_check(gpu_router& router, const std::vector<key_type>& keys, const table& t,
                     route_timing* timing = nullptr) {
  std::vector<std::uint32_t> positions(keys.size(), 0xdeadbeef);
  std::vector<std::uint32_t> ordinals(keys.size(), 0xdeadbeef);
  router.route(keys.data(), keys.size(), positions.data(), ordinals.data(), timing);
  ASSERT_NO_FATAL_FAILURE(expect_grouped(positions, ordinals, keys, t));
}

const char* name(aggregation a) {
  switch (a) {
    case aggregation::partial: return "partial";
    case aggregation::full: return "full";
    case aggregation::none: return "none";
  }
  return "?";
}

// ---- every fanout x group size x aggregation --------------------------------

using router_param = std::tuple<int, int, aggregation>;  // fanout, group size, order

class GpuRouterTest : public ::testing::TestWithParam<router_param> {};

TEST_P(GpuRouterTest, MatchesTheCpuDescent) {
  TANDEM_REQUIRE_GPU();
  const int fanout = std::get<0>(GetParam());
  const int g = std::get<1>(GetParam());
  router_options options;
  options.chunk = 1000;
  options.group_sizes = {g};
  options.order = std::get<2>(GetParam());
  gpu_router router(options);
  struct shape {
    std::size_t leaves;
    bool with_max;
  };
  const shape shapes[] = {{1, false}, {2, true}, {7, true}, {5000, false}, {60'000, true}};
  const std::size_t sizes[] = {0, 1, 7, options.chunk - 1, options.chunk, options.chunk + 1, 2500, 4000};
  const pattern patterns[] = {pattern::uniform, pattern::clustered, pattern::all_equal, pattern::edges,
                              pattern::separators};
  std::uint64_t seed = 1000 * static_cast<std::uint64_t>(fanout) + 10 * static_cast<std::uint64_t>(g) +
                       static_cast<std::uint64_t>(options.order);
  for (const shape& s : shapes) {
    ++seed;
    SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(s.leaves) + " leaves, fanout " +
                 std::to_string(fanout) + ", g " + std::to_string(g) + ", " + name(options.order));
    const table t = random_table(s.leaves, seed, s.with_max);
    const inner_layout layout = build(t, fanout);
    router.upload(layout);
    ASSERT_EQ(router.group_sizes(), std::vector<int>(static_cast<std::size_t>(layout.height()), g));
    for (const std::size_t n : sizes) {
      for (const pattern p : patterns) {
        SCOPED_TRACE("n " + std::to_string(n) + ", " + name(p));
        const std::vector<key_type> keys = make_keys(p, n, seed * 31 + n, t);
        ASSERT_NO_FATAL_FAILURE(route_and_check(router, keys, t));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Routes, GpuRouterTest,
                         ::testing::Combine(::testing::Values(16, 32, 64), ::testing::Values(1, 2, 4, 8, 16, 32),
                                            ::testing::Values(aggregation::partial, aggregation::full,
                                                              aggregation::none)),
                         [](const ::testing::TestParamInfo<router_param>& p) {
                           return "f" + std::to_string(std::get<0>(p.param)) + "_g" +
                                  std::to_string(std::get<1>(p.param)) + "_" + name(std::get<2>(p.param));
                         });

// ---- batches, calibration, versions ---------------------------------------------

TEST(GpuRouter, MultiChunkBatchesAreGroupedAcrossChunks) {
  TANDEM_REQUIRE_GPU();
  const table t = random_table(60'000, 7, true);
  const inner_layout layout = build(t, 16);
  for (const int streams : {1, 2, 3}) {
    for (const aggregation order : {aggregation::partial, aggregation::full, aggregation::none}) {
      SCOPED_TRACE(std::to_string(streams) + " streams, " + name(order));
      router_options options;
      options.chunk = std::size_t{1} << 16;
      options.streams = streams;
      options.order = order;
      options.copy_threads = 3;
      gpu_router router(options);
      router.upload(layout);
      for (const std::size_t n : {3 * options.chunk + 17, 10 * options.chunk}) {
        const std::vector<key_type> keys = make_keys(pattern::uniform, n, n + 5, t);
        route_timing timing;
        ASSERT_NO_FATAL_FAILURE(route_and_check(router, keys, t, &timing));
        EXPECT_EQ(timing.chunks, (n + options.chunk - 1) / options.chunk);
        EXPECT_GT(timing.total, 0.0);
        EXPECT_GT(timing.kernel, 0.0);
      }
    }
  }
  // Default options: 2 chunks of 2^22 keys, the staging copies split over threads.
  gpu_router router;
  router.upload(layout);
  const std::vector<key_type> keys = make_keys(pattern::clustered, (std::size_t{1} << 22) + 12345, 99, t);
  ASSERT_NO_FATAL_FAILURE(route_and_check(router, keys, t));
}

TEST(GpuRouter, CalibratesOneGroupSizePerLevel) {
  TANDEM_REQUIRE_GPU();
  for (const int fanout : {16, 32, 64}) {
    const table t = random_table(60'000, 11 + static_cast<std::uint64_t>(fanout), false);
    const inner_layout layout = build(t, fanout);
    gpu_router router;
    EXPECT_TRUE(router.group_sizes().empty());
    router.upload(layout);
    const std::vector<int> groups = router.group_sizes();
    ASSERT_EQ(groups.size(), static_cast<std::size_t>(layout.height()));
    std::string chosen;
    for (const int g : groups) {
      EXPECT_TRUE(g >= 1 && g <= 32 && (g & (g - 1)) == 0 && g <= fanout) << g;
      chosen += " " + std::to_string(g);
    }
    std::cout << router.name() << ": fanout " << fanout << ", " << layout.leaf_count() << " leaves: g per level"
              << chosen << " (calibration " << router.last_calibration_seconds() * 1e3 << " ms, upload "
              << router.last_upload_seconds() * 1e3 << " ms, " << router.constant_levels()
              << " constant levels)\n";
    const std::vector<key_type> keys = make_keys(pattern::uniform, 100'000, 3, t);
    ASSERT_NO_FATAL_FAILURE(route_and_check(router, keys, t));
  }
}

TEST(GpuRouter, ReuploadBetweenRoutesAnswersForTheNewLayout) {
  TANDEM_REQUIRE_GPU();
  router_options options;
  options.chunk = 5000;
  gpu_router router(options);
  const table a = random_table(5000, 21, false);
  const table b = random_table(20'000, 22, true);
  const table c = random_table(1, 23, false);
  const inner_layout la = build(a, 16);
  const inner_layout lb = build(b, 64);
  const inner_layout lc = build(c, 32);
  std::uint64_t version = 0;
  const std::vector<std::pair<const inner_layout*, const table*>> sequence = {
      {&la, &a}, {&lb, &b}, {&lc, &c}, {&la, &a}, {&lb, &b}};
  for (const auto& [layout, t] : sequence) {
    router.upload(*layout);
    EXPECT_EQ(router.version(), ++version);
    EXPECT_EQ(router.layout_bytes(), layout->key_region().size() * 8 + layout->child_prefix().size() * 4 +
                                         layout->leaf_ids().size() * 4);
    const std::vector<key_type> keys = make_keys(pattern::separators, 12'345, version, *t);
    ASSERT_NO_FATAL_FAILURE(route_and_check(router, keys, *t)) << "version " << version;
  }
}

TEST(GpuRouter, UploadsBesideRoutesNeverMixVersions) {
  TANDEM_REQUIRE_GPU();
  router_options options;
  options.chunk = 4096;
  gpu_router router(options);
  const table a = random_table(3000, 31, false);
  const table b = random_table(9000, 32, true);
  const inner_layout la = build(a, 32);
  const inner_layout lb = build(b, 16);
  router.upload(la);
  std::vector<key_type> keys = make_keys(pattern::uniform, 20'000, 33, a);
  std::vector<std::uint32_t> want_a(keys.size());
  std::vector<std::uint32_t> want_b(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    want_a[i] = reference(a, keys[i]);
    want_b[i] = reference(b, keys[i]);
  }
  std::atomic<bool> stop{false};
  std::thread uploader([&] {
    for (int i = 0; i < 60 && !stop; ++i) router.upload(i % 2 == 0 ? lb : la);
  });
  int seen_a = 0;
  int seen_b = 0;
  for (int r = 0; r < 60; ++r) {
    std::vector<std::uint32_t> positions(keys.size());
    std::vector<std::uint32_t> ordinals(keys.size());
    router.route(keys.data(), keys.size(), positions.data(), ordinals.data());
    bool is_a = true;
    bool is_b = true;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      is_a = is_a && ordinals[i] == want_a[positions[i]];
      is_b = is_b && ordinals[i] == want_b[positions[i]];
    }
    ASSERT_TRUE(is_a || is_b) << "route " << r << " mixes layout versions";
    seen_a += is_a ? 1 : 0;
    seen_b += is_b ? 1 : 0;
  }
  stop = true;
  uploader.join();
  std::cout << "routes on A: " << seen_a << ", on B: " << seen_b << "\n";
}

// ---- faults and bad use ------------------------------------------------------------

TEST(GpuRouter, FaultAtEveryStageThrowsAndTheNextRouteIsRight) {
  TANDEM_REQUIRE_GPU();
  const table a = random_table(5000, 41, true);
  const table b = random_table(777, 42, false);
  const inner_layout la = build(a, 16);
  const inner_layout lb = build(b, 64);
  for (const aggregation order : {aggregation::partial, aggregation::none}) {
    router_options options;
    options.chunk = 3000;
    options.order = order;
    gpu_router router(options);
    router.upload(la);
    const std::vector<key_type> keys = make_keys(pattern::uniform, 10'000, 43, a);
    for (const stage s : {stage::upload, stage::sort, stage::kernel, stage::download, stage::sync}) {
      SCOPED_TRACE(std::string(name(order)) + ", stage " + std::to_string(static_cast<int>(s)));
      for (const int count : {1, 2}) {
        router.inject_fault(s, count);
        for (int k = 0; k < count; ++k) {
          std::vector<std::uint32_t> positions(keys.size());
          std::vector<std::uint32_t> ordinals(keys.size());
          try {
            router.route(keys.data(), keys.size(), positions.data(), ordinals.data());
            ADD_FAILURE() << "no cuda_error from an injected fault";
          } catch (const cuda_error& e) {
            EXPECT_NE(e.code(), 0);
            EXPECT_NE(std::string(e.what()).find("injected_fault_at"), std::string::npos) << e.what();
          }
        }
        ASSERT_NO_FATAL_FAILURE(route_and_check(router, keys, a));
      }
    }
    // An upload that fails leaves the current version in use.
    for (const stage s : {stage::upload, stage::sync}) {
      router.inject_fault(s);
      EXPECT_THROW(router.upload(lb), cuda_error);
      ASSERT_NO_FATAL_FAILURE(route_and_check(router, keys, a));
    }
    router.upload(lb);
    const std::vector<key_type> keys_b = make_keys(pattern::edges, 5000, 44, b);
    ASSERT_NO_FATAL_FAILURE(route_and_check(router, keys_b, b));
    router.inject_fault(stage::kernel, 0);  // disarmed: nothing fails
    router.upload(la);
    ASSERT_NO_FATAL_FAILURE(route_and_check(router, keys, a));
  }
}

TEST(GpuRouter, RejectsBadUse) {
  TANDEM_REQUIRE_GPU();
  gpu_router router;
  std::vector<key_type> keys = {1, 2, 3};
  std::vector<std::uint32_t> out(3);
  EXPECT_THROW(router.route(keys.data(), keys.size(), out.data(), out.data()), std::logic_error);
  EXPECT_THROW(router.route(keys.data(), 0, out.data(), out.data()), std::logic_error);
  EXPECT_THROW(router.upload(inner_layout{}), std::invalid_argument);
  router_options bad;
  bad.group_sizes = {4, 3};
  EXPECT_THROW(gpu_router{bad}, std::invalid_argument);
  bad = {};
  bad.chunk = 0;
  EXPECT_THROW(gpu_router{bad}, std::invalid_argument);
  bad = {};
  bad.device_ordinal = 1000;
  EXPECT_THROW(gpu_router{bad}, tandem::error);
  EXPECT_FALSE(router.name().empty());
}

// ---- memory placement -------------------------------------------------------------

TEST(GpuRouter, ConstantMemoryHoldsTheTopLevelsAndChangesNoAnswer) {
  TANDEM_REQUIRE_GPU();
  const table t = random_table(60'000, 51, true);
  const inner_layout layout = build(t, 16);  // 5 levels: 1 + 15 + 235 + 3750 nodes, then the bottom
  const std::vector<key_type> keys = make_keys(pattern::uniform, 50'000, 52, t);
  // Three routers at once: two get constant slots, the third reads global memory.
  std::vector<std::unique_ptr<gpu_router>> routers;
  for (int i = 0; i < 3; ++i) {
    routers.push_back(std::make_unique<gpu_router>());
    routers.back()->upload(layout);
  }
  EXPECT_GT(routers[0]->constant_levels(), 0);
  EXPECT_LE(routers[0]->constant_prefix_entries(), constant_slot_entries);
  EXPECT_EQ(routers[0]->constant_prefix_entries(),
            std::size_t{layout.level_start()[static_cast<std::size_t>(routers[0]->constant_levels())]} + 1);
  EXPECT_EQ(routers[2]->constant_levels(), 0);
  for (auto& r : routers) ASSERT_NO_FATAL_FAILURE(route_and_check(*r, keys, t));
  routers.clear();
  router_options options;
  options.constant_prefix = false;
  gpu_router plain(options);
  plain.upload(layout);
  EXPECT_EQ(plain.constant_levels(), 0);
  EXPECT_EQ(plain.constant_prefix_entries(), 0u);
  ASSERT_NO_FATAL_FAILURE(route_and_check(plain, keys, t));
  // Slots are given back: a new router gets one again.
  gpu_router again;
  again.upload(layout);
  EXPECT_GT(again.constant_levels(), 0);
}

#if defined(TANDEM_HAS_CUDA)
TEST(GpuRouter, PinnedCallerArraysSkipTheStaging) {
  TANDEM_REQUIRE_GPU();
  const table t = random_table(10'000, 61, false);
  const inner_layout layout = build(t, 32);
  router_options options;
  options.chunk = 1 << 14;
  gpu_router router(options);
  router.upload(layout);
  const std::size_t n = 100'000;
  const std::vector<key_type> keys = make_keys(pattern::clustered, n, 62, t);
  key_type* pinned_keys = nullptr;
  std::uint32_t* pinned_positions = nullptr;
  std::uint32_t* pinned_ordinals = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned_keys), n * sizeof(key_type)), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned_positions), n * sizeof(std::uint32_t)), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned_ordinals), n * sizeof(std::uint32_t)), cudaSuccess);
  std::copy(keys.begin(), keys.end(), pinned_keys);
  router.route(pinned_keys, n, pinned_positions, pinned_ordinals);
  const std::vector<std::uint32_t> positions(pinned_positions, pinned_positions + n);
  const std::vector<std::uint32_t> ordinals(pinned_ordinals, pinned_ordinals + n);
  (void)cudaFreeHost(pinned_keys);
  (void)cudaFreeHost(pinned_positions);
  (void)cudaFreeHost(pinned_ordinals);
  ASSERT_NO_FATAL_FAILURE(expect_grouped(positions, ordinals, keys, t));
}
#endif

// ---- without a GPU (runs everywhere) ----------------------------------------------
// Its name has no "Gpu" on purpose: ctest labels it `cpu`, so CI runs it.

TEST(DeviceRouter, ConstructorWithoutDeviceNamesTheProblem) {
  const device_report report = query_devices();
  if (!report.devices.empty()) GTEST_SKIP() << "a GPU is present: " << describe(report);
  try {
    gpu_router router;
    FAIL() << "gpu_router was constructed without a usable GPU";
  } catch (const tandem::error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("GPU"), std::string::npos) << what;
    EXPECT_NE(what.find(report.reason), std::string::npos) << what;
  }
}

}  // namespace
