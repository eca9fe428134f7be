// gpu_router::route: batches routed on the GPU over random layouts of every
// fanout, every group size and every aggregation order, each routed_batch_view
// checked op by op against core's host descent (gpu_test_support.hpp): groups
// = runs of ordinal, every position once, keys/args/types gathered right,
// (key, position) or position order inside groups. Plus chunked batches,
// 2^24 keys, edge keys, pinned and pageable arrays, calibration, re-upload
// (double buffer), uploads beside routes, fault injection at each stage, bad
// use, constant memory, and the constructor's error without a GPU. Tests
// that need a GPU have "Gpu" in their name (ctest label `gpu`) and skip with
// the reason when none is usable.
#include <tandem/core/inner_layout.hpp>
#include <tandem/device/device_query.hpp>
#include <tandem/device/gpu_router.hpp>
#include <tandem/error.hpp>

#include "device/gpu_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::device;
using test::build;
using test::expect_routed;
using test::gpu_batch;
using test::make_batch;
using test::name;
using test::pattern;
using test::random_table;
using test::route_and_check;
using test::routed_arrays;
using test::table;

constexpr aggregation all_orders[] = {aggregation::full, aggregation::partial, aggregation::none};

// ---- every fanout x group size x aggregation --------------------------------

using router_param = std::tuple<int, int, aggregation>;  // fanout, group size, order

class GpuRouterTest : public ::testing::TestWithParam<router_param> {};

TEST_P(GpuRouterTest, MatchesTheHostDescent) {
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
  const std::size_t sizes[] = {0, 1, 2, 7, options.chunk - 1, options.chunk, options.chunk + 1, 2500, 4000};
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
    int variant = 0;
    for (const std::size_t n : sizes) {
      for (const pattern p : patterns) {
        // Rotate over output placement and what is asked for.
        const bool pinned_out = variant % 2 == 1;
        const bool with_args = variant % 3 != 2;
        const bool with_types = variant % 3 != 1;
        ++variant;
        SCOPED_TRACE("n " + std::to_string(n) + ", " + name(p) + (pinned_out ? ", pinned" : ", pageable") +
                     (with_args ? ", args" : "") + (with_types ? ", types" : ""));
        const gpu_batch b = make_batch(p, n, seed * 31 + n, t);
        ASSERT_NO_FATAL_FAILURE(route_and_check(router, b, layout, options.order, pinned_out, with_args, with_types));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Routes, GpuRouterTest,
                         ::testing::Combine(::testing::Values(16, 32, 64), ::testing::Values(1, 2, 4, 8, 16, 32),
                                            ::testing::Values(aggregation::full, aggregation::partial,
                                                              aggregation::none)),
                         [](const ::testing::TestParamInfo<router_param>& p) {
                           return "f" + std::to_string(std::get<0>(p.param)) + "_g" +
                                  std::to_string(std::get<1>(p.param)) + "_" + name(std::get<2>(p.param));
                         });

// ---- batches, edge keys, placement -------------------------------------------------

TEST(GpuRouter, ChunkedBatchesSortAndGroupAsAWhole) {
  TANDEM_REQUIRE_GPU();
  const table t = random_table(60'000, 7, true);
  const inner_layout layout = build(t, 16);
  for (const int streams : {1, 2, 3}) {
    for (const aggregation order : all_orders) {
      SCOPED_TRACE(std::to_string(streams) + " streams, " + name(order));
      router_options options;
      options.chunk = std::size_t{1} << 16;
      options.streams = streams;
      options.order = order;
      options.copy_threads = 3;
      gpu_router router(options);
      router.upload(layout);
      for (const std::size_t n : {3 * options.chunk + 17, 10 * options.chunk}) {
        const gpu_batch b = make_batch(pattern::uniform, n, n + 5, t);
        for (const bool pinned_out : {false, true}) {
          route_timing timing;
          routed_arrays out(n, pinned_out, true, true);
          routed_batch_view v = out.view();
          router.route(b.keys.data(), b.args.data(), b.types.data(), n, v, &timing);
          ASSERT_NO_FATAL_FAILURE(expect_routed(v, b, layout, order));
          EXPECT_EQ(timing.chunks, (n + options.chunk - 1) / options.chunk);
          EXPECT_GT(timing.total, 0.0);
          EXPECT_GT(timing.kernel, 0.0);
          EXPECT_GT(timing.sort, 0.0);
          EXPECT_GT(timing.upload, 0.0);
          EXPECT_GT(timing.download, 0.0);
          EXPECT_GE(timing.grouping, 0.0);
          EXPECT_EQ(timing.bytes_up, n * 17);
          EXPECT_EQ(timing.bytes_down, n * 21 + v.groups * 8 + 4);
          if (order == aggregation::full) {
            EXPECT_EQ(timing.group_sort, 0.0);
          }
          if (!pinned_out) {
            EXPECT_GT(timing.host_out, 0.0);
          }
          EXPECT_GT(timing.host_in, 0.0);  // the batch's vectors are pageable
        }
      }
    }
  }
  // Default options (aggregation::full): 2 chunks of 2^22 keys, the staging
  // copies split over threads; keys, no args or types.
  gpu_router router;
  router.upload(layout);
  const gpu_batch b = make_batch(pattern::clustered, (std::size_t{1} << 22) + 12345, 99, t);
  ASSERT_NO_FATAL_FAILURE(route_and_check(router, b, layout, aggregation::full, false, false, false));
}

TEST(GpuRouter, RoutesTwoToThe24KeysInOneBatch) {
  TANDEM_REQUIRE_GPU();
  const table t = random_table(175'000, 8, true);
  const inner_layout layout = build(t, 16);
  const std::size_t n = std::size_t{1} << 24;
  const gpu_batch b = make_batch(pattern::uniform, n, 81, t);
  for (const aggregation order : {aggregation::full, aggregation::partial}) {
    SCOPED_TRACE(name(order));
    router_options options;
    options.order = order;
    gpu_router router(options);
    router.upload(layout);
    route_timing timing;
    // full: pinned outputs with args and types; partial: pageable, keys only.
    const bool full = order == aggregation::full;
    ASSERT_NO_FATAL_FAILURE(route_and_check(router, b, layout, order, full, full, full, &timing));
    std::cout << router.name() << ", " << name(order) << ", 2^24 keys, " << layout.leaf_count()
              << " leaves: total " << timing.total * 1e3 << " ms (upload " << timing.upload * 1e3 << ", sort "
              << timing.sort * 1e3 << ", kernel " << timing.kernel * 1e3 << ", grouping " << timing.grouping * 1e3
              << ", download " << timing.download * 1e3 << "; host in " << timing.host_in * 1e3 << ", out "
              << timing.host_out * 1e3 << "), " << timing.bytes_up << " B up, " << timing.bytes_down << " B down\n";
  }
}

TEST(GpuRouter, EdgeKeysAndOneKeyRepeatedKeepBatchOrder) {
  TANDEM_REQUIRE_GPU();
  const table t = random_table(5000, 9, true);  // a leaf starts at UINT64_MAX
  const inner_layout layout = build(t, 32);
  const std::size_t n = 100'000;
  std::vector<gpu_batch> batches;
  for (const key_type k : {min_key, max_key, max_key - 1, t.low_keys[2500]}) {
    gpu_batch b = make_batch(pattern::uniform, n, k, t);
    std::fill(b.keys.begin(), b.keys.end(), k);
    batches.push_back(std::move(b));
  }
  gpu_batch mixed = make_batch(pattern::uniform, n, 10, t);
  for (std::size_t i = 0; i < n; ++i) mixed.keys[i] = i % 3 == 0 ? min_key : i % 3 == 1 ? max_key : 1;
  batches.push_back(std::move(mixed));
  for (const aggregation order : all_orders) {
    router_options options;
    options.order = order;
    options.chunk = 30'000;
    gpu_router router(options);
    router.upload(layout);
    for (std::size_t k = 0; k < batches.size(); ++k) {
      SCOPED_TRACE(std::string(name(order)) + ", batch " + std::to_string(k));
      const gpu_batch& b = batches[k];
      routed_arrays out(n, k % 2 == 0, true, true);
      routed_batch_view v = out.view();
      router.route(b.keys.data(), b.args.data(), b.types.data(), n, v);
      ASSERT_NO_FATAL_FAILURE(expect_routed(v, b, layout, order));
      if (k < 4) {  // one key: one group, positions in batch order
        ASSERT_EQ(v.groups, 1u);
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(v.positions[i], i);
      }
    }
  }
}

TEST(GpuRouter, PinnedAndPageableArraysInAnyMix) {
  TANDEM_REQUIRE_GPU();
  const table t = random_table(10'000, 61, false);
  const inner_layout layout = build(t, 32);
  const std::size_t n = 100'003;
  const gpu_batch b = make_batch(pattern::clustered, n, 62, t);
  test::host_array<key_type> keys(n, true);
  test::host_array<value_type> args(n, true);
  test::host_array<std::uint8_t> types(n, true);
  std::copy(b.keys.begin(), b.keys.end(), keys.data());
  std::copy(b.args.begin(), b.args.end(), args.data());
  std::copy(b.types.begin(), b.types.end(), types.data());
  for (const aggregation order : all_orders) {
    router_options options;
    options.chunk = 1 << 14;
    options.order = order;
    gpu_router router(options);
    router.upload(layout);
    for (int mix = 0; mix < 8; ++mix) {
      SCOPED_TRACE(std::string(name(order)) + ", mix " + std::to_string(mix));
      // bit 0: pinned keys, bit 1: pinned args/types, bit 2: pinned outputs
      const key_type* k = (mix & 1) != 0 ? keys.data() : b.keys.data();
      const value_type* a = (mix & 2) != 0 ? args.data() : b.args.data();
      const std::uint8_t* ty = (mix & 2) != 0 ? types.data() : b.types.data();
      routed_arrays out(n, (mix & 4) != 0, true, true);
      // Mixed outputs too: keys always pageable when the rest is pinned.
      test::host_array<key_type> pageable_keys(n, false);
      routed_batch_view v = out.view();
      if ((mix & 4) != 0) v.keys = pageable_keys.data();
      route_timing timing;
      router.route(k, a, ty, n, v, &timing);
      ASSERT_NO_FATAL_FAILURE(expect_routed(v, b, layout, order));
      if ((mix & 3) == 3) {
        EXPECT_EQ(timing.host_in, 0.0);  // every input pinned: no staging
      }
    }
  }
}

// ---- calibration, versions ---------------------------------------------------------

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
    const gpu_batch b = make_batch(pattern::uniform, 100'000, 3, t);
    ASSERT_NO_FATAL_FAILURE(route_and_check(router, b, layout, aggregation::full));
  }
}

TEST(GpuRouter, ReuploadBetweenRoutesAnswersForTheNewLayout) {
  TANDEM_REQUIRE_GPU();
  const table a = random_table(5000, 21, false);
  const table b = random_table(20'000, 22, true);
  const table c = random_table(1, 23, false);
  const inner_layout la = build(a, 16);
  const inner_layout lb = build(b, 64);
  const inner_layout lc = build(c, 32);
  for (const aggregation order : all_orders) {
    router_options options;
    options.chunk = 5000;
    options.order = order;
    gpu_router router(options);
    std::uint64_t version = 0;
    const std::vector<std::pair<const inner_layout*, const table*>> sequence = {
        {&la, &a}, {&lb, &b}, {&lc, &c}, {&la, &a}, {&lb, &b}};
    for (const auto& [layout, t] : sequence) {
      router.upload(*layout);
      EXPECT_EQ(router.version(), ++version);
      EXPECT_EQ(router.layout_bytes(), layout->key_region().size() * 8 + layout->child_prefix().size() * 4 +
                                           layout->leaf_ids().size() * 4);
      const gpu_batch batch = make_batch(pattern::separators, 12'345, version, *t);
      ASSERT_NO_FATAL_FAILURE(route_and_check(router, batch, *layout, order))
          << name(order) << ", version " << version;
    }
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
  const gpu_batch batch = make_batch(pattern::uniform, 20'000, 33, a);
  const std::size_t n = batch.keys.size();
  std::vector<std::uint32_t> want_a(n);
  std::vector<std::uint32_t> want_b(n);
  for (std::size_t i = 0; i < n; ++i) {
    want_a[i] = la.find(batch.keys[i]);
    want_b[i] = lb.find(batch.keys[i]);
  }
  std::atomic<bool> stop{false};
  std::thread uploader([&] {
    for (int i = 0; i < 60 && !stop; ++i) router.upload(i % 2 == 0 ? lb : la);
  });
  int seen_a = 0;
  int seen_b = 0;
  routed_arrays out(n, false, false, false);
  for (int r = 0; r < 60; ++r) {
    routed_batch_view v = out.view();
    router.route(batch.keys.data(), nullptr, nullptr, n, v);
    bool is_a = true;
    bool is_b = true;
    for (std::size_t g = 0; g < v.groups; ++g) {
      for (std::uint32_t i = v.group_begin[g]; i < v.group_begin[g + 1]; ++i) {
        is_a = is_a && v.group_ordinal[g] == want_a[v.positions[i]];
        is_b = is_b && v.group_ordinal[g] == want_b[v.positions[i]];
      }
    }
    ASSERT_TRUE(is_a || is_b) << "route " << r << " mixes layout versions";
    ASSERT_NO_FATAL_FAILURE(expect_routed(v, batch, is_a ? la : lb, aggregation::full));
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
  for (const aggregation order : all_orders) {
    router_options options;
    options.chunk = 3000;
    options.order = order;
    gpu_router router(options);
    router.upload(la);
    const gpu_batch batch = make_batch(pattern::uniform, 10'000, 43, a);
    for (const stage s : {stage::upload, stage::sort, stage::kernel, stage::download, stage::sync}) {
      for (const bool pinned_out : {false, true}) {
        SCOPED_TRACE(std::string(name(order)) + ", stage " + std::to_string(static_cast<int>(s)) +
                     (pinned_out ? ", pinned" : ", pageable"));
        for (const int count : {1, 2}) {
          router.inject_fault(s, count);
          for (int k = 0; k < count; ++k) {
            routed_arrays out(batch.keys.size(), pinned_out, true, true);
            routed_batch_view v = out.view();
            try {
              router.route(batch.keys.data(), batch.args.data(), batch.types.data(), batch.keys.size(), v);
              ADD_FAILURE() << "no cuda_error from an injected fault";
            } catch (const cuda_error& e) {
              EXPECT_NE(e.code(), 0);
              EXPECT_NE(std::string(e.what()).find("injected_fault_at"), std::string::npos) << e.what();
            }
          }
          ASSERT_NO_FATAL_FAILURE(route_and_check(router, batch, la, order, pinned_out));
        }
      }
    }
    // An upload that fails leaves the current version in use.
    for (const stage s : {stage::upload, stage::sync}) {
      router.inject_fault(s);
      EXPECT_THROW(router.upload(lb), cuda_error);
      ASSERT_NO_FATAL_FAILURE(route_and_check(router, batch, la, order));
    }
    router.upload(lb);
    const gpu_batch batch_b = make_batch(pattern::edges, 5000, 44, b);
    ASSERT_NO_FATAL_FAILURE(route_and_check(router, batch_b, lb, order));
    router.inject_fault(stage::kernel, 0);  // disarmed: nothing fails
    router.upload(la);
    ASSERT_NO_FATAL_FAILURE(route_and_check(router, batch, la, order));
  }
}

TEST(GpuRouter, RejectsBadUse) {
  TANDEM_REQUIRE_GPU();
  gpu_router router;
  const std::vector<key_type> keys = {1, 2, 3};
  const std::vector<value_type> args = {4, 5, 6};
  routed_arrays out(3, false, true, true);
  routed_batch_view v = out.view();
  EXPECT_THROW(router.route(keys.data(), args.data(), nullptr, keys.size(), v), std::logic_error);
  EXPECT_THROW(router.route(keys.data(), nullptr, nullptr, 0, v), std::logic_error);
  EXPECT_THROW(router.upload(inner_layout{}), std::invalid_argument);
  const table t = random_table(100, 1, false);
  const inner_layout layout = build(t, 16);
  router.upload(layout);
  // out.args / out.types asked for without their inputs.
  EXPECT_THROW(router.route(keys.data(), nullptr, nullptr, keys.size(), v), std::invalid_argument);
  v.types = nullptr;
  EXPECT_THROW(router.route(keys.data(), nullptr, nullptr, keys.size(), v), std::invalid_argument);
  v.args = nullptr;
  routed_batch_view no_positions = v;
  no_positions.positions = nullptr;
  EXPECT_THROW(router.route(keys.data(), nullptr, nullptr, keys.size(), no_positions), std::invalid_argument);
  EXPECT_THROW(router.route(nullptr, nullptr, nullptr, keys.size(), v), std::invalid_argument);
  // n == 0 needs nothing but group_begin.
  routed_batch_view empty;
  std::uint32_t begin0 = 77;
  empty.group_begin = &begin0;
  router.route(nullptr, nullptr, nullptr, 0, empty);
  EXPECT_EQ(empty.groups, 0u);
  EXPECT_EQ(begin0, 0u);
  EXPECT_TRUE(empty.key_sorted);  // the default order is full
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
  EXPECT_EQ(router_options{}.order, aggregation::full);
}

// ---- memory placement -------------------------------------------------------------

TEST(GpuRouter, ConstantMemoryHoldsTheTopLevelsAndChangesNoAnswer) {
  TANDEM_REQUIRE_GPU();
  const table t = random_table(60'000, 51, true);
  const inner_layout layout = build(t, 16);  // 5 levels: 1 + 15 + 235 + 3750 nodes, then the bottom
  const gpu_batch b = make_batch(pattern::uniform, 50'000, 52, t);
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
  for (auto& r : routers) ASSERT_NO_FATAL_FAILURE(route_and_check(*r, b, layout, aggregation::full));
  routers.clear();
  router_options options;
  options.constant_prefix = false;
  gpu_router plain(options);
  plain.upload(layout);
  EXPECT_EQ(plain.constant_levels(), 0);
  EXPECT_EQ(plain.constant_prefix_entries(), 0u);
  ASSERT_NO_FATAL_FAILURE(route_and_check(plain, b, layout, aggregation::full));
  // Slots are given back: a new router gets one again.
  gpu_router again;
  again.upload(layout);
  EXPECT_GT(again.constant_levels(), 0);
}

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

// route_range: key ranges that end at leaf bounds, routed one after another
// into consecutive parts of one set of arrays (as the index does under a
// memory budget), concatenate into a route of the whole batch; a range
// holding more ops than its limit says so; set_key_bound keeps the batch
// arrays within batch_bytes.
TEST(GpuRouter, KeyRangesConcatenateIntoTheBatchsRoute) {
  TANDEM_REQUIRE_GPU();
  const table t = random_table(30'000, 17, true);
  const inner_layout layout = build(t, 32);
  router_options options;
  options.chunk = std::size_t{1} << 14;
  gpu_router router(options);
  router.upload(layout);
  for (const pattern p : {pattern::uniform, pattern::separators, pattern::edges, pattern::clustered}) {
    for (const std::size_t ranges : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{64}}) {
      const std::size_t n = 100'003;
      SCOPED_TRACE(std::string(name(p)) + ", " + std::to_string(ranges) + " ranges");
      const gpu_batch b = make_batch(p, n, 11 + ranges, t);
      // Range r starts at the low key of leaf r * L / ranges (range 0 at 0).
      std::vector<key_type> lows = {0};
      for (std::size_t r = 1; r < ranges; ++r) lows.push_back(t.low_keys[r * t.low_keys.size() / ranges]);
      for (const bool with_args : {false, true}) {
        routed_arrays out(n, ranges % 2 == 0, with_args, with_args);
        routed_batch_view all = out.view();
        std::size_t at = 0;
        std::size_t groups = 0;
        for (std::size_t r = 0; r < lows.size(); ++r) {
          routed_batch_view v = all;
          v.positions += at;
          v.keys += at;
          if (with_args) {
            v.args += at;
            v.types += at;
          }
          v.group_begin += groups;
          v.group_ordinal += groups;
          const key_type hi = r + 1 < lows.size() ? lows[r + 1] - 1 : max_key;
          const std::size_t got = router.route_range(b.keys.data(), with_args ? b.args.data() : nullptr,
                                                     with_args ? b.types.data() : nullptr, n, lows[r], hi, n, v);
          const std::size_t want = static_cast<std::size_t>(std::count_if(
              b.keys.begin(), b.keys.end(), [&](key_type k) { return k >= lows[r] && k <= hi; }));
          ASSERT_EQ(got, want) << "range " << r;
          ASSERT_TRUE(v.key_sorted);
          for (std::size_t g = 0; g < v.groups; ++g) v.group_begin[g] += static_cast<std::uint32_t>(at);
          at += got;
          groups += v.groups;
        }
        all.groups = groups;
        all.group_begin[groups] = static_cast<std::uint32_t>(n);
        all.key_sorted = true;
        ASSERT_EQ(at, n);
        ASSERT_NO_FATAL_FAILURE(expect_routed(all, b, layout, aggregation::full));
      }
    }
  }
  // More ops in the range than the limit; an empty range; limit 0.
  const gpu_batch b = make_batch(pattern::all_equal, 5000, 4, t);  // one key, 5000 times
  routed_arrays out(5000, false, true, true);
  routed_batch_view v = out.view();
  EXPECT_EQ(router.route_range(b.keys.data(), b.args.data(), b.types.data(), 5000, 0, max_key, 4999, v), 5000u);
  v = out.view();
  const key_type k = b.keys[0];
  const key_type lo = k == max_key ? 0 : k + 1;
  const key_type hi = k == max_key ? k - 1 : max_key;
  EXPECT_EQ(router.route_range(b.keys.data(), b.args.data(), b.types.data(), 5000, lo, hi, 5000, v), 0u);
  EXPECT_EQ(v.groups, 0u);
  EXPECT_EQ(v.group_begin[0], 0u);
  v = out.view();
  EXPECT_EQ(router.route_range(b.keys.data(), b.args.data(), b.types.data(), 5000, 0, max_key, 0, v), 1u);
  v = out.view();
  EXPECT_EQ(router.route_range(b.keys.data(), b.args.data(), b.types.data(), 5000, lo, hi, 0, v), 0u);
  v = out.view();
  EXPECT_EQ(router.route_range(b.keys.data(), b.args.data(), b.types.data(), 5000, 0, max_key, 5000, v), 5000u);
  ASSERT_NO_FATAL_FAILURE(expect_routed(v, b, layout, aggregation::full));

  // A bound: routes and scatters of at most `bound` keys stay within
  // batch_bytes(bound) beside the two layout versions, and arrays grown
  // past it before are freed.
  const gpu_batch big = make_batch(pattern::uniform, 300'000, 9, t);
  routed_arrays whole(300'000, true, true, true);
  routed_batch_view w = whole.view();
  router.route(big.keys.data(), big.args.data(), big.types.data(), big.keys.size(), w);
  const std::size_t unbounded = router.device_bytes();
  const std::size_t bound = 40'000;
  router.set_key_bound(bound, bound);
  std::vector<key_type> lows = {0};
  for (std::size_t r = 1; r < 16; ++r) lows.push_back(t.low_keys[r * t.low_keys.size() / 16]);
  routed_arrays ranged(300'000, true, true, true);
  for (std::size_t r = 0; r < lows.size(); ++r) {
    routed_batch_view part = ranged.view();
    const key_type top = r + 1 < lows.size() ? lows[r + 1] - 1 : max_key;
    const auto want = static_cast<std::size_t>(std::count_if(
        big.keys.begin(), big.keys.end(), [&](key_type x) { return x >= lows[r] && x <= top; }));
    EXPECT_EQ(router.route_range(big.keys.data(), big.args.data(), big.types.data(), big.keys.size(), lows[r], top,
                                 bound, part),
              want <= bound ? want : bound + 1)
        << "range " << r;
  }
  std::vector<value_type> values(bound), values_out(bound);
  std::vector<std::uint8_t> flags(bound), flags_out(bound);
  std::vector<std::uint32_t> positions(bound);
  for (std::uint32_t i = 0; i < bound; ++i) positions[i] = static_cast<std::uint32_t>(bound) - 1 - i;
  router.scatter(positions.data(), values.data(), flags.data(), bound, values_out.data(), flags_out.data());
  const std::size_t layouts = 2 * (router.layout_bytes() + router.layout_bytes() / 8);
  EXPECT_LE(router.device_bytes(), layouts + router.batch_bytes(bound, bound, true));
  EXPECT_LT(router.device_bytes(), unbounded) << "arrays sized for 300000 keys were freed";
  EXPECT_GT(gpu_router::sort_bytes(std::size_t{1} << 20), std::size_t{1} << 20);
}
