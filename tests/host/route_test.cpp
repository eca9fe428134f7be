// route_sorted: batches of keys routed over random layouts, under several
// TBB arena sizes and key patterns, checked against a reference: the
// (key, position) pairs sorted, each grouped under std::upper_bound over the
// leaf table.
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
#include <utility>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::host;

using test::random_table;
using test::reference;
using test::table;

/// A routed_batch_view over owned columns.
struct route_columns {
  explicit route_columns(std::size_t n, bool extra)
      : positions(n), keys(n), args(extra ? n : 0), types(extra ? n : 0), group_begin(n + 1), group_ordinal(n) {
    view.positions = positions.data();
    view.keys = keys.data();
    view.args = extra ? args.data() : nullptr;
    view.types = extra ? types.data() : nullptr;
    view.group_begin = group_begin.data();
    view.group_ordinal = group_ordinal.data();
  }
  std::vector<std::uint32_t> positions;
  std::vector<key_type> keys;
  std::vector<std::uint64_t> args;
  std::vector<std::uint8_t> types;
  std::vector<std::uint32_t> group_begin, group_ordinal;
  routed_batch_view view;
};

/// Checks `r` against the reference route of `keys` (positions offset by
/// `first`): sorted by (key, position), grouped by leaf, args and types along.
void expect_routed(const routed_batch_view& r, const std::vector<key_type>& keys, std::uint32_t first,
                   const std::vector<std::uint64_t>& args, const std::vector<std::uint8_t>& types, const table& t) {
  const std::size_t n = keys.size();
  ASSERT_TRUE(r.key_sorted);
  std::vector<std::pair<key_type, std::uint32_t>> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = {keys[i], static_cast<std::uint32_t>(i)};
  std::sort(want.begin(), want.end());
  std::size_t g = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto [key, p] = want[i];
    ASSERT_EQ(r.keys[i], key) << "slot " << i;
    ASSERT_EQ(r.positions[i], p + first) << "slot " << i;
    if (r.args) {
      ASSERT_EQ(r.args[i], args[p]) << "slot " << i;
      ASSERT_EQ(r.types[i], types[p]) << "slot " << i;
    }
    const std::uint32_t o = reference(t, key);
    if (i == 0 || o != reference(t, want[i - 1].first)) {
      ASSERT_LT(g, r.groups) << "slot " << i;
      ASSERT_EQ(r.group_begin[g], i) << "group " << g;
      ASSERT_EQ(r.group_ordinal[g], o) << "group " << g;
      ++g;
    }
  }
  ASSERT_EQ(r.groups, g);
  ASSERT_EQ(r.group_begin[g], n);
}

enum class pattern { uniform, clustered, all_equal, edges, small_integers };

const char* name(pattern p) {
  switch (p) {
    case pattern::uniform: return "uniform";
    case pattern::clustered: return "clustered";
    case pattern::all_equal: return "all_equal";
    case pattern::edges: return "edges";
    case pattern::small_integers: return "small_integers";
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
  if (p == pattern::small_integers) {  // every key shares its 40 high bits
    std::mt19937_64 rng(seed);
    for (key_type& k : keys) k = rng() % (n + 10);
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

class RouteSortedTest : public ::testing::TestWithParam<route_param> {};

TEST_P(RouteSortedTest, SortsAndGroupsEveryOpUnderItsLeaf) {
  const std::size_t n = std::get<0>(GetParam());
  const pattern pat = std::get<1>(GetParam());
  const int threads = std::get<2>(GetParam());
  struct shape {
    std::size_t leaves;
    int fanout;
    bool with_max;
  };
  const shape shapes[] = {{1, 16, false}, {7, 64, true}, {1000, 32, false}, {60'000, 16, true}};
  tbb::task_arena arena(threads);
  route_workspace reused;  // one workspace across calls: capacity is reused
  std::uint64_t seed = 100 * n + 10 * static_cast<std::uint64_t>(pat) + static_cast<std::uint64_t>(threads);
  for (const shape& s : shapes) {
    ++seed;
    SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(s.leaves) + " leaves, fanout " +
                 std::to_string(s.fanout));
    const table t = random_table(s.leaves, seed, s.with_max);
    const inner_layout layout = inner_layout::build(t.low_keys.data(), t.ids.data(), s.leaves, s.fanout);
    const std::vector<key_type> keys = make_keys(pat, n, seed);
    std::vector<std::uint64_t> args(n);
    std::vector<std::uint8_t> types(n);
    for (std::size_t i = 0; i < n; ++i) {
      args[i] = keys[i] ^ (i * 0x9E3779B97F4A7C15ull);
      types[i] = static_cast<std::uint8_t>(i % 7);
    }
    for (const bool extra : {false, true}) {
      const std::uint32_t first = extra ? 12345u : 0u;
      route_columns out(n, extra);
      arena.execute([&] {
        route_sorted(layout.view(), keys.data(), args.data(), types.data(), n, first, out.view, reused);
      });
      ASSERT_NO_FATAL_FAILURE(expect_routed(out.view, keys, first, args, types, t));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Batches, RouteSortedTest,
    ::testing::Combine(::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000},
                                         std::size_t{200'000}),
                       ::testing::Values(pattern::uniform, pattern::clustered, pattern::all_equal, pattern::edges,
                                         pattern::small_integers),
                       ::testing::Values(1, 2, 4)),
    [](const ::testing::TestParamInfo<route_param>& p) {
      return "n" + std::to_string(std::get<0>(p.param)) + "_" + name(std::get<1>(p.param)) + "_t" +
             std::to_string(std::get<2>(p.param));
    });

// merge_routes: a batch cut into k parts (slices of random length, some
// empty), each routed by route_sorted, numbered from 0 (a base to add, as the
// GPU's slices) or from its first position (base 0, as the CPU's share), and
// merged: the result equals the reference route of the whole batch.
TEST(MergeRoutes, PartsMergeToTheRouteOfTheWholeBatch) {
  route_workspace ws;
  merge_workspace mw;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed);
    const pattern pat = static_cast<pattern>(seed % 5);
    const std::size_t n = seed % 7 == 0 ? rng() % 5 : 1 + rng() % 150'000;
    const std::size_t k = seed % 4 == 0 ? 17 + rng() % 20 : 1 + rng() % 9;  // beyond 16: the heap path
    const std::size_t leaves = seed % 3 == 0 ? 1 + rng() % 10 : 1 + rng() % 200'000;
    SCOPED_TRACE("seed " + std::to_string(seed) + " " + name(pat) + " n " + std::to_string(n) + " parts " +
                 std::to_string(k) + " leaves " + std::to_string(leaves));
    const table t = random_table(leaves, seed, seed % 2 == 0);
    const inner_layout layout = inner_layout::build(t.low_keys.data(), t.ids.data(), leaves, 32);
    const std::vector<key_type> keys = make_keys(pat, n, seed);
    const bool extra = seed % 2 == 1;
    std::vector<std::uint64_t> args(n);
    std::vector<std::uint8_t> types(n);
    for (std::size_t i = 0; i < n; ++i) {
      args[i] = rng();
      types[i] = static_cast<std::uint8_t>(rng() % 7);
    }
    std::vector<std::size_t> cuts{0, n};
    for (std::size_t i = 1; i < k; ++i) cuts.push_back(n == 0 ? 0 : rng() % (n + 1));
    std::sort(cuts.begin(), cuts.end());
    std::vector<route_columns> columns;
    columns.reserve(k);
    std::vector<routed_batch_view> parts;
    std::vector<std::uint32_t> bases;
    for (std::size_t i = 0; i < k; ++i) {
      const std::size_t at = cuts[i], m = cuts[i + 1] - cuts[i];
      const bool from_zero = rng() % 2 == 0;
      columns.emplace_back(m, extra);
      route_sorted(layout.view(), keys.data() + at, args.data() + at, types.data() + at, m,
                   from_zero ? 0 : static_cast<std::uint32_t>(at), columns.back().view, ws);
      parts.push_back(columns.back().view);
      bases.push_back(from_zero ? static_cast<std::uint32_t>(at) : 0);
    }
    route_columns out(n, extra);
    merge_routes(parts.data(), bases.data(), k, n, out.view, mw);
    ASSERT_NO_FATAL_FAILURE(expect_routed(out.view, keys, 0, args, types, t));
  }
  route_columns out(10, false);
  route_columns empty(0, false);  // a route of no ops, said to hold 10
  const std::uint32_t base = 0;
  EXPECT_THROW(merge_routes(&empty.view, &base, 1, 10, out.view, mw), std::logic_error);
}

TEST(RouteSorted, DescentSpansMatchTheReference) {
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
    for (const key_type k : keys) {
      const std::uint32_t o = reference(t, k);
      ASSERT_EQ(descend(layout.view(), k), o) << "key " << k;
      const leaf_span span = fanout == 16   ? descend_span<16>(layout.view(), k)
                             : fanout == 32 ? descend_span<32>(layout.view(), k)
                                            : descend_span<64>(layout.view(), k);
      ASSERT_EQ(span.ordinal, o) << "key " << k;
      ASSERT_EQ(span.bounded, o + 1 < t.low_keys.size()) << "key " << k;
      ASSERT_EQ(span.low, o == 0 ? min_key : t.low_keys[o]) << "key " << k;
      if (span.bounded) {
        ASSERT_EQ(span.next_low, t.low_keys[o + 1]) << "key " << k;
      }
    }
  }
}

TEST(RouteSorted, EmptyLayoutAndOversizedBatches) {
  const inner_layout empty;
  route_workspace ws;
  route_columns out(1, false);
  EXPECT_NO_THROW(route_sorted(empty.view(), nullptr, nullptr, nullptr, 0, 0, out.view, ws));
  EXPECT_EQ(out.view.groups, 0u);
  EXPECT_EQ(out.group_begin[0], 0u);
  const key_type k = 5;
  EXPECT_THROW(route_sorted(empty.view(), &k, nullptr, nullptr, 1, 0, out.view, ws), std::invalid_argument);
  const table t = random_table(10, 1, false);
  const inner_layout layout = inner_layout::build(t.low_keys.data(), t.ids.data(), 10, 16);
  // Positions are u32: a batch that reaches 2^32 is refused before any key is read.
  EXPECT_THROW(route_sorted(layout.view(), nullptr, nullptr, nullptr, std::size_t{1} << 32, 0, out.view, ws),
               std::length_error);
  EXPECT_THROW(route_sorted(layout.view(), nullptr, nullptr, nullptr, 10, UINT32_MAX - 5, out.view, ws),
               std::length_error);
}

// sort_keys (the routing sort alone) over strided keys: (key, index) order,
// equal keys in input order, for each key pattern and several sizes.
TEST(SortKeys, StridedKeysInKeyThenIndexOrder) {
  using test::key_pattern;
  for (const key_pattern pattern :
       {key_pattern::uniform, key_pattern::narrow, key_pattern::clustered, key_pattern::edges}) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{3000},
                                std::size_t{300000}}) {
      test::key_source source(pattern, std::max<std::size_t>(n / 3, 4), n + 1);
      std::vector<key_type> pairs(2 * n);  // (key, value) words: stride 2
      for (std::size_t i = 0; i < n; ++i) pairs[2 * i] = source(), pairs[2 * i + 1] = ~key_type{0};
      std::vector<std::uint32_t> want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<std::uint32_t>(i);
      std::stable_sort(want.begin(), want.end(),
                       [&](std::uint32_t a, std::uint32_t b) { return pairs[2 * a] < pairs[2 * b]; });
      std::vector<key_type> keys(n);
      std::vector<std::uint32_t> positions(n);
      route_workspace ws;
      sort_keys(pairs.data(), 2, n, keys.data(), positions.data(), ws);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(positions[i], want[i]) << test::name(pattern) << " n " << n << " at " << i;
        ASSERT_EQ(keys[i], pairs[2 * want[i]]) << test::name(pattern) << " n " << n << " at " << i;
      }
    }
  }
}

}  // namespace
