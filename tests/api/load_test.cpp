// index::load against a std::map model: unsorted, sorted, reverse and
// duplicate-heavy inputs (the later pair of a key wins), keys 0 and
// UINT64_MAX, sizes 0 .. 200000, one and several threads, and with a GPU the
// GPU sort and its fallback. The contents are read back by one ordered scan
// over everything and by gets of every model key and its neighbours;
// stats().last_load says which path ran.
#include <tandem/device/device_query.hpp>
#include <tandem/scheduler/testing.hpp>
#include <tandem/tandem.hpp>

#include "support/gpu.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace tandem;

enum class input { uniform, sorted, sorted_duplicates, reverse, all_equal, narrow, edges };

const char* name(input p) {
  switch (p) {
    case input::uniform: return "uniform";
    case input::sorted: return "sorted";
    case input::sorted_duplicates: return "sorted_duplicates";
    case input::reverse: return "reverse";
    case input::all_equal: return "all_equal";
    case input::narrow: return "narrow";
    case input::edges: return "edges";
  }
  return "?";
}

std::vector<entry> make_pairs(input p, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<entry> pairs(n);
  for (std::size_t i = 0; i < n; ++i) {
    key_type k = rng();
    switch (p) {
      case input::narrow: k = rng() % (n / 4 + 1); break;
      case input::all_equal: k = 42; break;
      case input::edges: k = rng() % 2 ? rng() % 8 : max_key - rng() % 8; break;
      default: break;
    }
    pairs[i] = {k, rng()};
  }
  if (n > 0 && p != input::all_equal) pairs[rng() % n].key = 0;
  if (n > 1 && p != input::all_equal) pairs[rng() % n].key = max_key;
  auto by_key = [](const entry& a, const entry& b) { return a.key < b.key; };
  if (p == input::sorted || p == input::sorted_duplicates) {
    std::stable_sort(pairs.begin(), pairs.end(), by_key);
    if (p == input::sorted) {  // strictly increasing
      pairs.erase(std::unique(pairs.begin(), pairs.end(), [](const entry& a, const entry& b) { return a.key == b.key; }),
                  pairs.end());
    } else {  // runs of repeats, each with its own value
      std::vector<entry> repeated;
      for (const entry& e : pairs) {
        const std::size_t copies = 1 + rng() % 3;
        for (std::size_t c = 0; c < copies; ++c) repeated.push_back({e.key, rng()});
      }
      pairs.swap(repeated);
    }
  }
  if (p == input::reverse) std::sort(pairs.begin(), pairs.end(), [](const entry& a, const entry& b) { return a.key > b.key; });
  return pairs;
}

/// Loads `pairs` (as entries or as two arrays) into `idx` and checks its
/// contents against the model by one scan over everything and by gets of
/// every model key and its neighbours.
void load_and_check(tandem::index& idx, const std::vector<entry>& pairs, bool as_entries) {
  std::map<key_type, value_type> model;
  for (const entry& e : pairs) model[e.key] = e.value;
  if (as_entries) {
    idx.load(pairs);
  } else {
    std::vector<key_type> k(pairs.size());
    std::vector<value_type> v(pairs.size());
    for (std::size_t i = 0; i < pairs.size(); ++i) k[i] = pairs[i].key, v[i] = pairs[i].value;
    idx.load(k.data(), v.data(), k.size());
  }
  ASSERT_EQ(idx.size(), model.size());
  ASSERT_NO_THROW(idx.verify());

  const batch_result all = idx.execute(batch{}.scan(min_key, max_key, max_scan_limit));
  const auto entries = all.scan_entries();
  ASSERT_EQ(entries.size(), model.size());
  auto it = model.begin();
  for (const entry& e : entries) {
    ASSERT_EQ(e.key, it->first);
    ASSERT_EQ(e.value, it->second) << "key " << e.key;
    ++it;
  }
  batch probes;
  std::vector<key_type> asked;
  for (const auto& [k, v] : model) {
    for (const key_type q : {k - 1, k, k + 1}) {  // wraps at the edges: still keys to ask for
      probes.get(q);
      asked.push_back(q);
    }
  }
  const batch_result got = idx.execute(probes);
  for (std::size_t i = 0; i < asked.size(); ++i) {
    const auto m = model.find(asked[i]);
    ASSERT_EQ(got.found(i), m != model.end()) << "key " << asked[i];
    if (m != model.end()) {
      ASSERT_EQ(got.value(i), m->second) << "key " << asked[i];
    }
  }
}

class LoadTest : public ::testing::TestWithParam<std::tuple<input, std::size_t, std::size_t>> {};

TEST_P(LoadTest, MatchesTheModelLaterDuplicateWins) {
  const auto [pattern, n, threads] = GetParam();
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE(std::string(name(pattern)) + " n " + std::to_string(n) + " threads " + std::to_string(threads) +
                 " seed " + std::to_string(seed));
    config cfg;
    cfg.device = device_kind::cpu;
    cfg.threads = threads;
    tandem::index idx(cfg);
    idx.execute(batch{}.put(5, 5).put(max_key, 1));  // replaced by the load
    ASSERT_NO_FATAL_FAILURE(load_and_check(idx, make_pairs(pattern, n, seed), seed % 2 == 1));
    const std::string how = idx.stats().last_load;
    const bool in_order = pattern == input::sorted || pattern == input::sorted_duplicates || n < 2 ||
                          pattern == input::all_equal;
    if (in_order) {
      EXPECT_NE(how.find("input in key order"), std::string::npos) << how;
    } else if (n > 2) {  // two random keys may come in order
      EXPECT_NE(how.find("CPU radix sort"), std::string::npos) << how;
    }
  }
}

// With a GPU, unsorted loads of 2^16 pairs or more sort on it (one run at
// these sizes); a failing GPU sort falls back to the CPU's with the same
// contents.
TEST(GpuLoad, SortsOnTheGpuAndMatchesTheModel) {
  TANDEM_REQUIRE_GPU();
  config cfg;
  cfg.device = device_kind::gpu;
  tandem::index idx(cfg);
  std::uint64_t seed = 11;
  for (const input p : {input::uniform, input::reverse, input::narrow, input::edges}) {
    for (const std::size_t n : {std::size_t{70'000}, std::size_t{1'000'003}}) {
      for (const bool as_entries : {false, true}) {
        SCOPED_TRACE(std::string(name(p)) + " n " + std::to_string(n) + (as_entries ? " entries" : " arrays"));
        ASSERT_NO_FATAL_FAILURE(load_and_check(idx, make_pairs(p, n, seed++), as_entries));
        const std::string how = idx.stats().last_load;
        EXPECT_NE(how.find("GPU sort in 1 run"), std::string::npos) << how;
      }
    }
  }
  // Below the GPU's threshold the CPU sorts.
  ASSERT_NO_FATAL_FAILURE(load_and_check(idx, make_pairs(input::uniform, 1000, 3), false));
  EXPECT_NE(idx.stats().last_load.find("CPU radix sort"), std::string::npos) << idx.stats().last_load;
  const std::uint64_t failures = idx.stats().gpu_failures;
  for (const device::stage s : {device::stage::upload, device::stage::sort, device::stage::download}) {
    ASSERT_TRUE(detail::index_access::inject_gpu_fault(idx, s, 1));
    ASSERT_NO_FATAL_FAILURE(load_and_check(idx, make_pairs(input::narrow, 100'000, seed++), true));
    EXPECT_NE(idx.stats().last_load.find("CPU radix sort"), std::string::npos) << idx.stats().last_load;
  }
  EXPECT_EQ(idx.stats().gpu_failures, failures + 3);
}

TEST(Load, NullArraysAreRefusedAndChangeNothing) {
  config cfg;
  cfg.device = device_kind::cpu;
  tandem::index idx(cfg);
  idx.execute(batch{}.put(1, 10));
  const key_type k = 2;
  const value_type v = 20;
  EXPECT_THROW(idx.load(nullptr, &v, 1), std::invalid_argument);
  EXPECT_THROW(idx.load(&k, nullptr, 1), std::invalid_argument);
  EXPECT_EQ(idx.size(), 1u);
  EXPECT_NO_THROW(idx.load(nullptr, nullptr, 0));
  EXPECT_EQ(idx.size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, LoadTest,
    ::testing::Combine(::testing::Values(input::uniform, input::sorted, input::sorted_duplicates, input::reverse,
                                         input::all_equal, input::narrow, input::edges),
                       ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{1000},
                                         std::size_t{200000}),
                       ::testing::Values(std::size_t{1}, std::size_t{3})),
    [](const ::testing::TestParamInfo<LoadTest::ParamType>& p) {
      return std::string(name(std::get<0>(p.param))) + "_n" + std::to_string(std::get<1>(p.param)) + "_t" +
             std::to_string(std::get<2>(p.param));
    });

}  // namespace
