// gpu_router::scatter: answers back to batch order on the GPU, checked
// against a host scatter over random permutations (sizes 0, 1, odd, around
// the chunk, 2^22; pinned and pageable arrays; values, flags or both), a
// route -> scatter round trip, fault injection at each stage it reaches, bad
// use, and scatters running beside routes and uploads on other threads.
// Tests have "Gpu" in their name (ctest label `gpu`) and skip without a GPU.
#include <tandem/core/inner_layout.hpp>
#include <tandem/device/gpu_router.hpp>
#include <tandem/error.hpp>

#include "device/gpu_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iostream>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::device;
using test::host_array;

/// A random permutation of 0..n-1 with values and flags, in pinned or
/// pageable memory, and the host scatter of it.
struct scatter_case {
  scatter_case(std::size_t n, std::uint64_t seed, bool pinned)
      : positions(n, pinned), values(n, pinned), flags(n, pinned), want_values(n), want_flags(n) {
    std::vector<std::uint32_t> perm(n);
    std::iota(perm.begin(), perm.end(), 0u);
    std::mt19937_64 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (std::size_t i = 0; i < n; ++i) {
      positions[i] = perm[i];
      values[i] = rng();
      flags[i] = static_cast<std::uint8_t>(rng() & 0xffu);
      want_values[perm[i]] = values[i];
      want_flags[perm[i]] = flags[i];
    }
  }
  host_array<std::uint32_t> positions;
  host_array<value_type> values;
  host_array<std::uint8_t> flags;
  std::vector<value_type> want_values;
  std::vector<std::uint8_t> want_flags;
};

/// Scatters `c` with pinned or pageable outputs (values, flags or both) and
/// compares with the host scatter.
void scatter_and_check(gpu_router& router, const scatter_case& c, bool pinned_out, bool with_values = true,
                       bool with_flags = true, scatter_timing* timing = nullptr) {
  const std::size_t n = c.want_values.size();
  host_array<value_type> values_out(n, pinned_out);
  host_array<std::uint8_t> flags_out(n, pinned_out);
  router.scatter(c.positions.data(), with_values ? c.values.data() : nullptr, with_flags ? c.flags.data() : nullptr,
                 n, with_values ? values_out.data() : nullptr, with_flags ? flags_out.data() : nullptr, timing);
  for (std::size_t i = 0; i < n; ++i) {
    if (with_values) {
      ASSERT_EQ(values_out[i], c.want_values[i]) << "value at position " << i;
    }
    if (with_flags) {
      ASSERT_EQ(flags_out[i], c.want_flags[i]) << "flag at position " << i;
    }
  }
}

TEST(GpuScatter, MatchesTheHostScatter) {
  TANDEM_REQUIRE_GPU();
  router_options options;
  options.chunk = 1000;
  gpu_router router(options);  // no layout: a scatter needs none
  std::uint64_t seed = 1;
  for (const std::size_t n : {0, 1, 2, 3, 999, 1000, 1001, 4097, 12'345}) {
    for (const bool pinned_in : {false, true}) {
      const scatter_case c(n, ++seed, pinned_in);
      for (const bool pinned_out : {false, true}) {
        for (int what = 0; what < 3; ++what) {
          SCOPED_TRACE("n " + std::to_string(n) + (pinned_in ? ", pinned in" : ", pageable in") +
                       (pinned_out ? ", pinned out" : ", pageable out") + ", what " + std::to_string(what));
          scatter_timing timing;
          ASSERT_NO_FATAL_FAILURE(scatter_and_check(router, c, pinned_out, what != 2, what != 1, &timing));
          const std::size_t down = (what != 2 ? 8 : 0) + (what != 1 ? 1 : 0);
          EXPECT_EQ(timing.bytes_up, n * (4 + down));
          EXPECT_EQ(timing.bytes_down, n * down);
          if (n > 0) {
            EXPECT_GT(timing.kernel, 0.0);
          }
        }
      }
    }
  }
}

TEST(GpuScatter, TwoToThe22AnswersInOneAndInSeveralChunks) {
  TANDEM_REQUIRE_GPU();
  const std::size_t n = std::size_t{1} << 22;
  for (const std::size_t chunk : {std::size_t{1} << 22, std::size_t{1} << 20, std::size_t{300'001}}) {
    router_options options;
    options.chunk = chunk;
    gpu_router router(options);
    for (const bool pinned : {false, true}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + (pinned ? ", pinned" : ", pageable"));
      const scatter_case c(n, chunk + (pinned ? 1 : 0), pinned);
      scatter_timing timing;
      ASSERT_NO_FATAL_FAILURE(scatter_and_check(router, c, pinned, true, true, &timing));
      std::cout << router.name() << ": scatter of 2^22 answers, chunk " << chunk << (pinned ? ", pinned" : ", pageable")
                << ": total " << timing.total * 1e3 << " ms (upload " << timing.upload * 1e3 << ", kernel "
                << timing.kernel * 1e3 << ", download " << timing.download * 1e3 << ")\n";
    }
  }
}

TEST(GpuScatter, RouteThenScatterGivesEachOpItsAnswer) {
  TANDEM_REQUIRE_GPU();
  const test::table t = test::random_table(20'000, 71, true);
  const inner_layout layout = test::build(t, 16);
  for (const aggregation order : {aggregation::full, aggregation::partial, aggregation::none}) {
    SCOPED_TRACE(test::name(order));
    router_options options;
    options.order = order;
    options.chunk = 50'000;
    gpu_router router(options);
    router.upload(layout);
    const test::gpu_batch b = test::make_batch(test::pattern::clustered, 123'457, 72, t);
    const std::size_t n = b.keys.size();
    test::routed_arrays out(n, true, true, false);
    routed_batch_view v = out.view();
    router.route(b.keys.data(), b.args.data(), nullptr, n, v);
    // The "leaf phase": answer = f(key, arg, leaf), in routed order.
    host_array<value_type> answers(n, true);
    host_array<std::uint8_t> found(n, true);
    for (std::size_t g = 0; g < v.groups; ++g) {
      for (std::uint32_t i = v.group_begin[g]; i < v.group_begin[g + 1]; ++i) {
        answers[i] = v.keys[i] * 3 + v.args[i] + v.group_ordinal[g];
        found[i] = static_cast<std::uint8_t>(v.keys[i] & 1u);
      }
    }
    std::vector<value_type> values_out(n);
    std::vector<std::uint8_t> flags_out(n);
    router.scatter(v.positions, answers.data(), found.data(), n, values_out.data(), flags_out.data());
    for (std::size_t p = 0; p < n; ++p) {
      ASSERT_EQ(values_out[p], b.keys[p] * 3 + b.args[p] + layout.find(b.keys[p])) << "op " << p;
      ASSERT_EQ(flags_out[p], static_cast<std::uint8_t>(b.keys[p] & 1u)) << "op " << p;
    }
  }
}

TEST(GpuScatter, FaultAtEachStageItReachesThrowsAndTheNextScatterIsRight) {
  TANDEM_REQUIRE_GPU();
  router_options options;
  options.chunk = 3000;
  gpu_router router(options);
  const scatter_case c(10'000, 91, false);
  for (const stage s : {stage::upload, stage::kernel, stage::download, stage::sync}) {
    for (const bool pinned_out : {false, true}) {
      SCOPED_TRACE("stage " + std::to_string(static_cast<int>(s)) + (pinned_out ? ", pinned" : ", pageable"));
      for (const int count : {1, 2}) {
        router.inject_fault(s, count);
        for (int k = 0; k < count; ++k) {
          host_array<value_type> values_out(10'000, pinned_out);
          host_array<std::uint8_t> flags_out(10'000, pinned_out);
          try {
            router.scatter(c.positions.data(), c.values.data(), c.flags.data(), 10'000, values_out.data(),
                           flags_out.data());
            ADD_FAILURE() << "no cuda_error from an injected fault";
          } catch (const cuda_error& e) {
            EXPECT_NE(std::string(e.what()).find("injected_fault_at"), std::string::npos) << e.what();
          }
        }
        ASSERT_NO_FATAL_FAILURE(scatter_and_check(router, c, pinned_out));
      }
    }
  }
  // A scatter never sorts: a fault armed there stays armed.
  router.inject_fault(stage::sort, 1);
  ASSERT_NO_FATAL_FAILURE(scatter_and_check(router, c, false));
  router.inject_fault(stage::sort, 0);
}

TEST(GpuScatter, RejectsBadUse) {
  TANDEM_REQUIRE_GPU();
  gpu_router router;
  std::vector<std::uint32_t> positions = {2, 0, 1};
  std::vector<value_type> values = {7, 8, 9};
  std::vector<value_type> out(3);
  EXPECT_THROW(router.scatter(nullptr, values.data(), nullptr, 3, out.data(), nullptr), std::invalid_argument);
  EXPECT_THROW(router.scatter(positions.data(), values.data(), nullptr, 3, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(router.scatter(positions.data(), nullptr, nullptr, 3, out.data(), nullptr), std::invalid_argument);
  router.scatter(nullptr, nullptr, nullptr, 0, nullptr, nullptr);  // nothing to do
  router.scatter(positions.data(), values.data(), nullptr, 3, out.data(), nullptr);
  EXPECT_EQ(out, (std::vector<value_type>{8, 9, 7}));
  // A position out of range is skipped.
  positions = {1, 5, 0};
  out = {0, 0, 0};
  router.scatter(positions.data(), values.data(), nullptr, 3, out.data(), nullptr);
  EXPECT_EQ(out[0], 9u);
  EXPECT_EQ(out[1], 7u);
}

TEST(GpuScatter, RunsBesideRoutesAndUploads) {
  TANDEM_REQUIRE_GPU();
  router_options options;
  options.chunk = 1 << 15;
  gpu_router router(options);
  const test::table ta = test::random_table(3000, 101, false);
  const test::table tb = test::random_table(9000, 102, true);
  const inner_layout la = test::build(ta, 32);
  const inner_layout lb = test::build(tb, 16);
  router.upload(la);
  const test::gpu_batch batch = test::make_batch(test::pattern::uniform, 200'000, 103, ta);
  const scatter_case pageable(300'000, 104, false);
  const scatter_case pinned(300'001, 105, true);

  std::atomic<bool> stop{false};
  std::atomic<int> scatters{0};
  std::atomic<int> uploads{0};
  std::thread scatterer([&] {
    for (int i = 0; !stop; ++i) {
      const scatter_case& c = i % 2 == 0 ? pageable : pinned;
      ASSERT_NO_FATAL_FAILURE(scatter_and_check(router, c, i % 3 == 0));
      ++scatters;
    }
  });
  std::thread uploader([&] {
    for (int i = 0; !stop; ++i) {
      router.upload(i % 2 == 0 ? lb : la);
      ++uploads;
    }
  });
  int routes = 0;
  for (; routes < 40; ++routes) {
    test::routed_arrays out(batch.keys.size(), routes % 2 == 0, true, true);
    routed_batch_view v = out.view();
    router.route(batch.keys.data(), batch.args.data(), batch.types.data(), batch.keys.size(), v);
    // Routed on A or on B, never a mix.
    ASSERT_LE(v.groups, batch.keys.size());
    bool on_a = true;
    for (std::size_t g = 0; g < v.groups && on_a; ++g) {
      for (std::uint32_t i = v.group_begin[g]; i < v.group_begin[g + 1] && on_a; ++i) {
        on_a = v.group_ordinal[g] == la.find(batch.keys[v.positions[i]]);
      }
    }
    ASSERT_NO_FATAL_FAILURE(test::expect_routed(v, batch, on_a ? la : lb, aggregation::full)) << "route " << routes;
  }
  stop = true;
  scatterer.join();
  uploader.join();
  std::cout << routes << " routes beside " << scatters << " scatters and " << uploads << " uploads\n";
  EXPECT_GT(scatters.load(), 0);
}

}  // namespace
