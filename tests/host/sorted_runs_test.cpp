// host::merge_sorted_runs against a std::map model: runs of random length
// (empty ones too) cut from a random input, each sorted with the last pair of
// each key kept, as gpu_router::sort_pairs leaves them; keys drawn from small
// pools so that runs share keys, plus 0 and UINT64_MAX; many seeds.
#include <tandem/host/sorted_runs.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace tandem;

struct runs_case {
  std::vector<key_type> keys;
  std::vector<value_type> values;
  std::vector<std::size_t> bounds;
  std::map<key_type, value_type> model;  // the later pair of a key wins
};

/// `runs` runs cut from `n` random pairs (keys from a pool of `pool` keys,
/// 0 and UINT64_MAX among them), starting at offset `first`.
runs_case make_runs(std::size_t n, std::size_t runs, std::size_t pool, std::size_t first, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<key_type> keys_pool{0, max_key, 1, max_key - 1};
  while (keys_pool.size() < pool) keys_pool.push_back(rng());
  std::vector<std::pair<key_type, value_type>> input(n);
  for (auto& p : input) p = {keys_pool[rng() % keys_pool.size()], rng()};
  std::vector<std::size_t> cuts{0, n};
  for (std::size_t r = 1; r < runs; ++r) cuts.push_back(n == 0 ? 0 : rng() % (n + 1));
  std::sort(cuts.begin(), cuts.end());

  runs_case c;
  c.keys.assign(first, 7);  // ignored prefix
  c.values.assign(first, 7);
  c.bounds.push_back(first);
  for (std::size_t r = 0; r + 1 < cuts.size(); ++r) {
    std::map<key_type, value_type> run;
    for (std::size_t i = cuts[r]; i < cuts[r + 1]; ++i) {
      run[input[i].first] = input[i].second;
      c.model[input[i].first] = input[i].second;
    }
    for (const auto& [k, v] : run) {
      c.keys.push_back(k);
      c.values.push_back(v);
    }
    c.bounds.push_back(c.keys.size());
  }
  return c;
}

void merge_and_check(const runs_case& c) {
  const std::size_t total = c.bounds.back() - c.bounds.front();
  std::vector<key_type> keys(total + 1, 3);
  std::vector<value_type> values(total + 1, 3);
  const std::size_t m = host::merge_sorted_runs(c.keys.data(), c.values.data(), c.bounds, keys.data(), values.data());
  ASSERT_EQ(m, c.model.size());
  std::size_t i = 0;
  for (const auto& [k, v] : c.model) {
    ASSERT_EQ(keys[i], k) << "at " << i;
    ASSERT_EQ(values[i], v) << "key " << k;
    ++i;
  }
  EXPECT_EQ(keys[total], 3u) << "wrote past the pairs";
}

TEST(SortedRuns, MergeEqualsTheModelLaterRunWins) {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    const std::size_t n = seed % 5 == 0 ? rng() % 4 : rng() % 300000;
    const std::size_t runs = 1 + rng() % 9;
    const std::size_t pool = seed % 3 == 0 ? 8 : seed % 3 == 1 ? 5000 : 1000000;
    const std::size_t first = seed % 2 ? 0 : rng() % 100;
    SCOPED_TRACE("seed " + std::to_string(seed) + " n " + std::to_string(n) + " runs " + std::to_string(runs) +
                 " pool " + std::to_string(pool));
    merge_and_check(make_runs(n, runs, pool, first, seed));
  }
}

TEST(SortedRuns, OneRunIsCopiedAndNoRunsGiveNothing) {
  merge_and_check(make_runs(100000, 1, 1000000, 0, 9));
  std::vector<key_type> k;
  std::vector<value_type> v;
  EXPECT_EQ(host::merge_sorted_runs(k.data(), v.data(), {5}, k.data(), v.data()), 0u);
}

TEST(SortedRuns, BadBoundsAreRefused) {
  std::vector<key_type> k{1, 2, 3};
  std::vector<value_type> v{1, 2, 3};
  std::vector<key_type> ko(3);
  std::vector<value_type> vo(3);
  EXPECT_THROW((void)host::merge_sorted_runs(k.data(), v.data(), {}, ko.data(), vo.data()), std::invalid_argument);
  EXPECT_THROW((void)host::merge_sorted_runs(k.data(), v.data(), {0, 2, 1}, ko.data(), vo.data()),
               std::invalid_argument);
}

}  // namespace
