// route_cpu: batches of keys routed over random layouts, under several TBB
// arena sizes, key patterns and both grouping methods, checked op by op
// against std::upper_bound over the leaf table.
#include <tandem/core/inner_layout.hpp>
#include <tandem/host/route.hpp>

#include "support/keys.hpp"

#include "support/tables.hpp"

#include <gtest/gtest.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::host;

using test::random_table;
using test::reference;
using test::table;

/// Checks every invariant of routed_batch and every op against the reference.
void expect_routed(const routed_batch& r, const std::vector<key_type>& keys, const table& t) {
  const std::size_t n = keys.size();
  ASSERT_EQ(r.size(), n);
  ASSERT_EQ(r.ordinals.size(), n);
  const std::size_t groups = r.group_count();
  ASSERT_EQ(r.group_begin.size(), groups + 1);
  ASSERT_EQ(r.group_leaf.size(), groups);
  ASSERT_EQ(r.group_begin.front(), 0u);
  ASSERT_EQ(r.group_begin.back(), n);
  std::vector<char> seen(n, 0);
  for (std::size_t g = 0; g < groups; ++g) {
    const std::uint32_t o = r.group_ordinal[g];
    ASSERT_LT(o, t.ids.size());
    ASSERT_LT(r.group_begin[g], r.group_begin[g + 1]) << "empty group " << g;
    if (g > 0) {
      ASSERT_GT(o, r.group_ordinal[g - 1]) << "groups out of ordinal order at " << g;
    }
    ASSERT_EQ(r.group_leaf[g], t.ids[o]) << "group " << g;
    for (std::uint32_t i = r.group_begin[g]; i < r.group_begin[g + 1]; ++i) {
      const std::uint32_t p = r.positions[i];
      ASSERT_LT(p, n);
      ASSERT_EQ(seen[p], 0) << "position " << p << " twice";
      seen[p] = 1;
      if (i > r.group_begin[g]) {
        ASSERT_GT(p, r.positions[i - 1]) << "positions not increasing in group " << g;
      }
      ASSERT_EQ(o, reference(t, keys[p])) << "op " << p << " key " << keys[p];
      ASSERT_EQ(r.ordinals[p], o) << "op " << p;
    }
  }
}

enum class pattern { uniform, clustered, all_equal, edges };

const char* name(pattern p) {
  switch (p) {
    case pattern::uniform: return "uniform";
    case pattern::clustered: return "clustered";
    case pattern::all_equal: return "all_equal";
    case pattern::edges: return "edges";
  }
  return "?";
}

std::vector<key_type> make_keys(pattern p, std::size_t n, std::uint64_t seed) {
  std::vector<key_type> keys(n);
  if (p == pattern::all_equal) {
    std::mt19937_64 rng(seed);
    const key_type k = seed % 3 == 0 ? max_key : rng();
    std::fill(keys.begin(), keys.end(), k);
    return keys;
  }
  const test::key_pattern kp = p == pattern::uniform     ? test::key_pattern::uniform
                               : p == pattern::clustered ? test::key_pattern::clustered
                                                         : test::key_pattern::edges;
  test::key_source source(kp, std::max<std::size_t>(n, 16), seed);
  for (key_type& k : keys) k = source();
  return keys;
}

using route_param = std::tuple<std::size_t, pattern, int>;  // batch size, key pattern, arena threads

class RouteCpuTest : public ::testing::TestWithParam<route_param> {};

TEST_P(RouteCpuTest, GroupsEveryOpUnderItsLeaf) {
  const std::size_t n = std::get<0>(GetParam());
  const pattern pat = std::get<1>(GetParam());
  const int threads = std::get<2>(GetParam());
  struct shape {
    std::size_t leaves;
    int fanout;
    bool with_max;
  };
  const shape shapes[] = {{1, 16, false}, {7, 64, true}, {1000, 32, false}, {60'000, 16, true}};
  struct method {
    descent_method descent;
    grouping_method grouping;
  };
  const method methods[] = {{descent_method::grouped, grouping_method::automatic},
                            {descent_method::grouped, grouping_method::counting_sort},
                            {descent_method::grouped, grouping_method::pair_sort},
                            {descent_method::grouped_no_prefetch, grouping_method::counting_sort},
                            {descent_method::plain, grouping_method::automatic}};
  tbb::task_arena arena(threads);
  routed_batch reused;  // one output object across calls: capacity is reused
  std::uint64_t seed = 100 * n + 10 * static_cast<std::uint64_t>(pat) + static_cast<std::uint64_t>(threads);
  for (const shape& s : shapes) {
    ++seed;
    SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(s.leaves) + " leaves, fanout " +
                 std::to_string(s.fanout));
    const table t = random_table(s.leaves, seed, s.with_max);
    const inner_layout layout = inner_layout::build(t.low_keys.data(), t.ids.data(), s.leaves, s.fanout);
    const std::vector<key_type> keys = make_keys(pat, n, seed);
    for (const method& m : methods) {
      SCOPED_TRACE("descent " + std::to_string(static_cast<int>(m.descent)) + ", grouping " +
                   std::to_string(static_cast<int>(m.grouping)));
      arena.execute([&] {
        route_cpu(layout.view(), keys.data(), n, reused, route_options{m.descent, m.grouping});
      });
      ASSERT_NO_FATAL_FAILURE(expect_routed(reused, keys, t));
    }
    routed_batch fresh;
    arena.execute([&] { fresh = route_cpu(layout, keys.data(), n); });
    ASSERT_NO_FATAL_FAILURE(expect_routed(fresh, keys, t));
    EXPECT_EQ(fresh.positions, reused.positions);
    EXPECT_EQ(fresh.group_begin, reused.group_begin);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Batches, RouteCpuTest,
    ::testing::Combine(::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000},
                                         std::size_t{200'000}),
                       ::testing::Values(pattern::uniform, pattern::clustered, pattern::all_equal, pattern::edges),
                       ::testing::Values(1, 2, 4)),
    [](const ::testing::TestParamInfo<route_param>& p) {
      return "n" + std::to_string(std::get<0>(p.param)) + "_" + name(std::get<1>(p.param)) + "_t" +
             std::to_string(std::get<2>(p.param));
    });

TEST(RouteCpu, RouteOneAndDescendBatchMatchTheReference) {
  for (const int fanout : {16, 32, 64}) {
    const std::uint64_t seed = static_cast<std::uint64_t>(fanout);
    SCOPED_TRACE("seed " + std::to_string(seed) + " fanout " + std::to_string(fanout));
    const table t = random_table(5000, seed, true);
    const inner_layout layout = inner_layout::build(t.low_keys.data(), t.ids.data(), t.low_keys.size(), fanout);
    std::vector<key_type> keys = {min_key, max_key, 1, max_key - 1};
    for (const key_type s : t.low_keys) {
      keys.push_back(s);
      if (s > 0) keys.push_back(s - 1);
      if (s < max_key) keys.push_back(s + 1);
    }
    for (const key_type k : keys) ASSERT_EQ(route_one(layout.view(), k), reference(t, k)) << "key " << k;
    for (const descent_method m :
         {descent_method::grouped, descent_method::grouped_no_prefetch, descent_method::plain}) {
      std::vector<std::uint32_t> ordinals(keys.size(), UINT32_MAX);
      descend_batch(layout.view(), keys.data(), keys.size(), ordinals.data(), m);
      for (std::size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(ordinals[i], reference(t, keys[i])) << "key " << keys[i];
    }
  }
}

TEST(RouteCpu, GroupByLeafFromOrdinals) {
  const table t = random_table(50, 3, false);
  const inner_layout layout = inner_layout::build(t.low_keys.data(), t.ids.data(), 50, 16);
  for (const grouping_method g :
       {grouping_method::automatic, grouping_method::counting_sort, grouping_method::pair_sort}) {
    routed_batch r;
    r.ordinals = {49, 0, 7, 7, 0, 49, 3};
    group_by_leaf(layout.view(), r, g);
    EXPECT_EQ(r.positions, (std::vector<std::uint32_t>{1, 4, 6, 2, 3, 0, 5}));
    EXPECT_EQ(r.group_begin, (std::vector<std::uint32_t>{0, 2, 3, 5, 7}));
    EXPECT_EQ(r.group_ordinal, (std::vector<std::uint32_t>{0, 3, 7, 49}));
    EXPECT_EQ(r.group_leaf, (std::vector<leaf_id>{t.ids[0], t.ids[3], t.ids[7], t.ids[49]}));
  }
}

TEST(RouteCpu, GroupByLeafOverMillionsOfLeaves) {
  // Grouping reads only the leaf count and ids of the view: a synthetic view
  // reaches the two-pass counting sort with a wide ordinal range, with dense
  // and sparse buckets.
  const std::uint32_t leaves = 3'000'017;
  std::vector<leaf_id> ids(leaves);
  for (std::uint32_t o = 0; o < leaves; ++o) ids[o] = leaves - o;
  inner_layout_view v;
  v.leaf_ids = ids.data();
  v.leaf_count = leaves;
  v.height = 1;
  v.fanout = 16;
  for (const std::size_t n : {std::size_t{3000}, std::size_t{1'000'000}}) {
    for (const int threads : {1, 4}) {
      const std::uint64_t seed = n + static_cast<std::uint64_t>(threads);
      SCOPED_TRACE("seed " + std::to_string(seed) + " n " + std::to_string(n) + " threads " + std::to_string(threads));
      std::mt19937_64 rng(seed);
      routed_batch r;
      r.ordinals.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        // Half the ops in a narrow band (dense buckets), the rest anywhere,
        // and the first and last ordinals.
        r.ordinals[i] = i == 0       ? 0u
                        : i == n - 1 ? leaves - 1
                        : i % 2 == 0 ? static_cast<std::uint32_t>(1'500'000 + rng() % 5000)
                                     : static_cast<std::uint32_t>(rng() % leaves);
      }
      std::vector<std::uint64_t> want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = (std::uint64_t{r.ordinals[i]} << 32) | i;
      std::sort(want.begin(), want.end());
      tbb::task_arena arena(threads);
      arena.execute([&] { group_by_leaf(v, r, grouping_method::counting_sort); });
      ASSERT_EQ(r.positions.size(), n);
      std::size_t g = 0;
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(r.positions[i], static_cast<std::uint32_t>(want[i])) << "slot " << i;
        const auto o = static_cast<std::uint32_t>(want[i] >> 32);
        if (i == 0 || o != static_cast<std::uint32_t>(want[i - 1] >> 32)) {
          ASSERT_LT(g, r.group_count());
          ASSERT_EQ(r.group_begin[g], i);
          ASSERT_EQ(r.group_ordinal[g], o);
          ASSERT_EQ(r.group_leaf[g], ids[o]);
          ++g;
        }
      }
      ASSERT_EQ(g, r.group_count());
      ASSERT_EQ(r.group_begin.back(), n);
    }
  }
}

TEST(RouteCpu, EmptyLayoutAndOversizedBatches) {
  const inner_layout empty;
  routed_batch r;
  EXPECT_NO_THROW(route_cpu(empty.view(), nullptr, 0, r));
  EXPECT_EQ(r.size(), 0u);
  EXPECT_EQ(r.group_begin, (std::vector<std::uint32_t>{0}));
  const key_type k = 5;
  EXPECT_THROW(route_cpu(empty.view(), &k, 1, r), std::invalid_argument);
  const table t = random_table(10, 1, false);
  const inner_layout layout = inner_layout::build(t.low_keys.data(), t.ids.data(), 10, 16);
  // Positions are u32: a batch of 2^32 ops is refused before any key is read.
  EXPECT_THROW(route_cpu(layout.view(), nullptr, std::size_t{1} << 32, r), std::length_error);
}

}  // namespace
