// gpu_router::sort_pairs, the GPU half of a bulk load, against a std::map
// model: each run it returns must hold its slice of the input sorted with the
// last pair of each key kept, and the runs merged by host::merge_sorted_runs
// must equal the model of the whole input. Sizes 0, 1, odd, around a run,
// 2^21 + 3; one run and many; two arrays and key-value entries; pinned and
// pageable memory; keys from small pools (repeats within and across runs),
// 0 and UINT64_MAX; fault injection at each stage; bad use. Tests have "Gpu"
// in their name (ctest label `gpu`) and skip without a GPU.
#include <tandem/device/gpu_router.hpp>
#include <tandem/error.hpp>
#include <tandem/host/sorted_runs.hpp>

#include "device/gpu_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::device;
using test::host_array;

/// n pairs with keys from a pool of `pool` keys (0 and UINT64_MAX in it;
/// a pool larger than n: fresh random keys, and every 64th from the pool),
/// as two arrays and as interleaved entries, in pinned or pageable memory.
struct pairs_case {
  pairs_case(std::size_t count, std::size_t pool, std::uint64_t seed, bool pinned)
      : n(count), keys(count, pinned), values(count, pinned), entries(2 * count, pinned) {
    std::mt19937_64 rng(seed);
    std::vector<key_type> keys_pool{0, max_key, 1, max_key - 1};
    while (keys_pool.size() < std::min(pool, count)) keys_pool.push_back(rng());
    for (std::size_t i = 0; i < n; ++i) {
      keys[i] = pool > count && i % 64 != 0 ? rng() : keys_pool[rng() % keys_pool.size()];
      values[i] = rng();
      entries[2 * i] = keys[i];
      entries[2 * i + 1] = values[i];
    }
  }
  std::size_t n;
  host_array<key_type> keys;
  host_array<value_type> values;
  host_array<std::uint64_t> entries;
};

/// Sorts `c` (two arrays or entries) and checks every run and the merge.
void sort_and_check(gpu_router& router, const pairs_case& c, bool as_entries, std::size_t run_pairs, bool pinned_out) {
  const std::size_t n = c.n;
  host_array<key_type> keys_out(n, pinned_out);
  host_array<value_type> values_out(n, pinned_out);
  sort_timing t;
  const std::vector<std::size_t> bounds =
      as_entries ? router.sort_pairs(c.entries.data(), c.entries.data() + 1, 2, n, keys_out.data(), values_out.data(),
                                     run_pairs, &t)
                 : router.sort_pairs(c.keys.data(), c.values.data(), 1, n, keys_out.data(), values_out.data(),
                                     run_pairs, &t);
  ASSERT_FALSE(bounds.empty());
  ASSERT_EQ(bounds.front(), 0u);
  if (n == 0) {
    ASSERT_EQ(bounds.size(), 1u);
    return;
  }
  const std::size_t run = t.run_pairs;
  ASSERT_GE(run, 1u);
  if (run_pairs > 0) {
    ASSERT_EQ(run, std::min(run_pairs, n));
  }
  ASSERT_EQ(t.runs, (n + run - 1) / run);
  ASSERT_EQ(bounds.size(), t.runs + 1);
  std::map<key_type, value_type> all;
  for (std::size_t r = 0; r < t.runs; ++r) {
    std::map<key_type, value_type> model;
    for (std::size_t i = r * run; i < std::min(n, (r + 1) * run); ++i) {
      model[c.keys[i]] = c.values[i];
      all[c.keys[i]] = c.values[i];
    }
    ASSERT_EQ(bounds[r + 1] - bounds[r], model.size()) << "run " << r;
    std::size_t i = bounds[r];
    for (const auto& [k, v] : model) {
      ASSERT_EQ(keys_out[i], k) << "run " << r << " at " << i;
      ASSERT_EQ(values_out[i], v) << "run " << r << " key " << k;
      ++i;
    }
  }
  std::vector<key_type> merged_keys(bounds.back());
  std::vector<value_type> merged_values(bounds.back());
  ASSERT_EQ(host::merge_sorted_runs(keys_out.data(), values_out.data(), bounds, merged_keys.data(),
                                    merged_values.data()),
            all.size());
  std::size_t i = 0;
  for (const auto& [k, v] : all) {
    ASSERT_EQ(merged_keys[i], k);
    ASSERT_EQ(merged_values[i++], v);
  }
  EXPECT_EQ(t.bytes_up, n * 16);
  EXPECT_EQ(t.bytes_down, bounds.back() * 16);
}

TEST(GpuSort, RunsAndTheirMergeEqualTheModel) {
  TANDEM_REQUIRE_GPU();
  gpu_router router;
  std::uint64_t seed = 1;
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{1001}, std::size_t{65537}}) {
    for (const std::size_t pool : {std::size_t{4}, std::size_t{500}, std::size_t{1} << 40}) {
      for (const std::size_t run : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4096}}) {
        if (run > 0 && run < 10 && n > 2000) continue;  // thousands of runs: slow, and no new case
        for (const bool entries : {false, true}) {
          for (const bool pinned : {false, true}) {
            SCOPED_TRACE("n " + std::to_string(n) + " pool " + std::to_string(pool) + " run " + std::to_string(run) +
                         (entries ? " entries" : " arrays") + (pinned ? " pinned" : " pageable"));
            const pairs_case c(n, pool, seed++, pinned);
            ASSERT_NO_FATAL_FAILURE(sort_and_check(router, c, entries, run, !pinned));
          }
        }
      }
    }
  }
}

TEST(GpuSort, LargeInputsInOneRunAndInSeveral) {
  TANDEM_REQUIRE_GPU();
  gpu_router router;
  const std::size_t held = router.device_bytes();
  const std::size_t n = (std::size_t{1} << 21) + 3;
  for (const bool pinned : {false, true}) {
    const pairs_case c(n, n / 2, 77 + pinned, pinned);
    for (const std::size_t run : {std::size_t{0}, std::size_t{1} << 19}) {
      SCOPED_TRACE(std::string(pinned ? "pinned" : "pageable") + " run " + std::to_string(run));
      ASSERT_NO_FATAL_FAILURE(sort_and_check(router, c, !pinned, run, pinned));
    }
  }
  EXPECT_EQ(router.device_bytes(), held) << "the sort's device memory outlived the call";
}

TEST(GpuSort, InjectedFaultsThrowAndTheNextCallSorts) {
  TANDEM_REQUIRE_GPU();
  gpu_router router;
  const pairs_case c(100'000, 30'000, 5, false);
  for (const stage s : {stage::upload, stage::sort, stage::kernel, stage::download, stage::sync}) {
    SCOPED_TRACE("stage " + std::to_string(static_cast<int>(s)));
    router.inject_fault(s, 1);
    std::vector<key_type> k(c.n);
    std::vector<value_type> v(c.n);
    try {
      (void)router.sort_pairs(c.keys.data(), c.values.data(), 1, c.n, k.data(), v.data(), 40'000);
      ADD_FAILURE() << "no cuda_error from an injected fault";
    } catch (const cuda_error& e) {
      EXPECT_NE(std::string(e.what()).find("injected_fault_at"), std::string::npos) << e.what();
    }
    ASSERT_NO_FATAL_FAILURE(sort_and_check(router, c, false, 40'000, false));
  }
}

TEST(GpuSort, RejectsBadUse) {
  TANDEM_REQUIRE_GPU();
  gpu_router router;
  std::vector<key_type> k{3, 1, 2};
  std::vector<value_type> v{30, 10, 20};
  std::vector<key_type> ko(3);
  std::vector<value_type> vo(3);
  EXPECT_THROW((void)router.sort_pairs(nullptr, v.data(), 1, 3, ko.data(), vo.data()), std::invalid_argument);
  EXPECT_THROW((void)router.sort_pairs(k.data(), v.data(), 1, 3, nullptr, vo.data()), std::invalid_argument);
  EXPECT_THROW((void)router.sort_pairs(k.data(), v.data(), 2, 1, ko.data(), vo.data()), std::invalid_argument);
  EXPECT_THROW((void)router.sort_pairs(k.data(), v.data(), 3, 1, ko.data(), vo.data()), std::invalid_argument);
  EXPECT_EQ(router.sort_pairs(nullptr, nullptr, 1, 0, nullptr, nullptr), std::vector<std::size_t>{0});
  EXPECT_EQ(router.sort_pairs(k.data(), v.data(), 1, 3, ko.data(), vo.data()), (std::vector<std::size_t>{0, 3}));
  EXPECT_EQ(ko, (std::vector<key_type>{1, 2, 3}));
  EXPECT_EQ(vo, (std::vector<value_type>{10, 20, 30}));
}

}  // namespace
