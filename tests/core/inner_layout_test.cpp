// inner_layout: shape, descent against std::upper_bound over the leaf table,
// edge keys (0, UINT64_MAX, a leaf whose low key is UINT64_MAX), and verify()
// on built and on deliberately corrupted layouts. Every test runs over the
// fanouts 16, 32 and 64.
#include <tandem/core/inner_layout.hpp>
#include <tandem/error.hpp>

#include "support/tables.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tandem::detail {
// Test-only access to the arrays, to corrupt a built layout.
struct inner_layout_access {
  static inner_layout::key_region_type& key_region(inner_layout& l) { return l.key_region_; }
  static std::vector<std::uint32_t>& child_prefix(inner_layout& l) { return l.child_prefix_; }
  static std::vector<leaf_id>& leaf_ids(inner_layout& l) { return l.leaf_ids_; }
  static std::vector<std::uint32_t>& level_start(inner_layout& l) { return l.level_start_; }
};
}  // namespace tandem::detail

namespace {

using namespace tandem;
using access = tandem::detail::inner_layout_access;
using test::build;
using test::random_table;
using test::reference;
using test::table;

table dense_table(std::size_t leaves, key_type first_after_zero = 1) {
  table t;
  t.low_keys.push_back(0);
  for (std::size_t i = 1; i < leaves; ++i) t.low_keys.push_back(first_after_zero + i - 1);
  for (std::size_t i = 0; i < leaves; ++i) t.ids.push_back(static_cast<leaf_id>(leaves - i));
  return t;
}


class InnerLayoutTest : public ::testing::TestWithParam<int> {
 protected:
  int fanout() const { return GetParam(); }

  /// Checks the descent of one key with every entry point.
  template <int F>
  static void expect_key_f(const inner_layout& l, const table& t, key_type key) {
    const inner_layout_view v = l.view();
    const std::uint32_t want = reference(t, key);
    ASSERT_EQ(descend<F>(v, key), want) << "key " << key;
    ASSERT_EQ(descend(v, key), want) << "key " << key;
    ASSERT_EQ(l.find(key), want) << "key " << key;
    const leaf_route r = descend_leaf(v, key);
    ASSERT_EQ(r.ordinal, want) << "key " << key;
    ASSERT_EQ(r.leaf, t.ids[want]) << "key " << key;
    const leaf_radix_view rx = l.radix();
    if (rx.buckets != 0) {
      ASSERT_EQ(rx.find(key), want) << "radix, key " << key;
      ASSERT_EQ(rx.leaf_of(key), t.ids[want]) << "radix bucket, key " << key;
    }
  }
  void expect_key(const inner_layout& l, const table& t, key_type key) const {
    switch (fanout()) {
      case 16: expect_key_f<16>(l, t, key); break;
      case 32: expect_key_f<32>(l, t, key); break;
      default: expect_key_f<64>(l, t, key); break;
    }
  }

  /// Builds over `t` and checks verify, the recovered table, and the descent
  /// of every separator, separator +-1, 0, UINT64_MAX and random keys.
  void check_table(const table& t, std::uint64_t seed) const {
    const inner_layout l = build(t, fanout());
    ASSERT_NO_THROW(l.verify());
    ASSERT_NO_THROW(l.verify(t.low_keys.data(), t.ids.data(), t.size()));
    ASSERT_EQ(l.low_keys(), t.low_keys);
    ASSERT_EQ(l.leaf_ids(), t.ids);
    ASSERT_EQ(l.leaf_count(), t.size());
    for (const key_type k : {min_key, key_type{1}, max_key - 1, max_key}) {
      ASSERT_NO_FATAL_FAILURE(expect_key(l, t, k));
    }
    for (const key_type s : t.low_keys) {
      ASSERT_NO_FATAL_FAILURE(expect_key(l, t, s));
      if (s > 0) {
        ASSERT_NO_FATAL_FAILURE(expect_key(l, t, s - 1));
      }
      if (s < max_key) {
        ASSERT_NO_FATAL_FAILURE(expect_key(l, t, s + 1));
      }
    }
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
    for (int i = 0; i < 20000; ++i) ASSERT_NO_FATAL_FAILURE(expect_key(l, t, rng()));
    // descend_each: groups of 1 .. 37 keys in any order, each key as descend.
    std::vector<key_type> probe = {min_key, 1, max_key - 1, max_key};
    for (const key_type s : t.low_keys) probe.insert(probe.end(), {s, s - 1, s + 1});
    for (int i = 0; i < 5000; ++i) probe.push_back(rng());
    std::shuffle(probe.begin(), probe.end(), rng);
    std::vector<std::uint32_t> got(probe.size());
    for (std::size_t at = 0, m = 1; at < probe.size(); at += m, m = m % 37 + 1) {
      const auto k = static_cast<std::uint32_t>(std::min(m, probe.size() - at));
      descend_each(l.view(), probe.data() + at, k, got.data() + at);
    }
    for (std::size_t i = 0; i < probe.size(); ++i) {
      ASSERT_EQ(got[i], descend(l.view(), probe[i])) << "descend_each, key " << probe[i];
    }
  }
};

std::vector<std::size_t> leaf_counts(int f) {
  const auto F = static_cast<std::size_t>(f);
  return {1, 2, 3, F - 1, F, F + 1, 2 * F, F * F - 1, F * F, F * F + 1, F * F * 3 + 5};
}

TEST_P(InnerLayoutTest, DescentMatchesUpperBoundAtEdgeSizes) {
  for (const std::size_t leaves : leaf_counts(fanout())) {
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
      SCOPED_TRACE("leaves " + std::to_string(leaves) + " seed " + std::to_string(seed));
      ASSERT_NO_FATAL_FAILURE(check_table(random_table(leaves, seed), seed));
    }
  }
}

TEST_P(InnerLayoutTest, DescentMatchesUpperBoundAtRandomSizes) {
  std::mt19937_64 sizes(static_cast<std::uint64_t>(fanout()));
  for (std::uint64_t seed = 11; seed <= 14; ++seed) {
    const std::size_t leaves = seed == 14 ? 200'000 : 1 + sizes() % 60'000;
    SCOPED_TRACE("leaves " + std::to_string(leaves) + " seed " + std::to_string(seed));
    ASSERT_NO_FATAL_FAILURE(check_table(random_table(leaves, seed), seed));
  }
}

/// `leaves` leaves, `packed` of them with consecutive low keys from
/// 2^40 (one interval of the radix table holds many), the rest random.
table clustered_table(std::size_t leaves, std::size_t packed, std::uint64_t seed) {
  table t = random_table(leaves - packed, seed);
  for (std::size_t i = 0; i < packed; ++i) t.low_keys.push_back((key_type{1} << 40) + i * 3);
  std::sort(t.low_keys.begin(), t.low_keys.end());
  t.low_keys.erase(std::unique(t.low_keys.begin(), t.low_keys.end()), t.low_keys.end());
  t.ids.resize(t.low_keys.size());
  for (std::size_t i = 0; i < t.ids.size(); ++i) t.ids[i] = static_cast<leaf_id>(i * 5 + 1);
  return t;
}

TEST_P(InnerLayoutTest, RadixTableFindsTheOwner) {
  // One leaf: no table (a descent has nothing to search either).
  EXPECT_EQ(build(random_table(1, 3), fanout()).radix().buckets, 0u);
  // Spread leaves get about one interval each; every key's owner is found
  // (check_table compares radix().find with the reference on every key).
  for (const std::size_t leaves : {std::size_t{2}, std::size_t{3}, std::size_t{1000}, std::size_t{50'000}}) {
    SCOPED_TRACE("leaves " + std::to_string(leaves));
    const table t = random_table(leaves, leaves + 7, leaves % 2 == 0);
    const inner_layout l = build(t, fanout());
    const leaf_radix_view rx = l.radix();
    ASSERT_NE(rx.buckets, 0u);
    EXPECT_GE(rx.buckets, leaves / 4);
    EXPECT_LE(rx.buckets, 2 * leaves);
    EXPECT_EQ(l.radix_bytes(), leaves * sizeof(key_type) + (rx.buckets + 1) * sizeof(std::uint32_t) +
                                   rx.buckets * sizeof(radix_bucket));
    ASSERT_NO_FATAL_FAILURE(check_table(t, leaves));
  }
  // Consecutive low keys: one interval a key.
  ASSERT_NO_FATAL_FAILURE(check_table(dense_table(5000), 5));
  ASSERT_NE(build(dense_table(5000), fanout()).radix().buckets, 0u);
  // A few crowded intervals (bisected): still a table, still the owner.
  const table some = clustered_table(20'000, 1'000, 9);
  const inner_layout with_some = build(some, fanout());
  ASSERT_NE(with_some.radix().buckets, 0u);
  {
    // Buckets of every width: 1, 2 and 3 candidates read alone, 4 and more
    // through find (leaf_of is checked on every key by check_table).
    const leaf_radix_view rx = with_some.radix();
    std::size_t by_width[5] = {};
    for (std::uint64_t t = 0; t < rx.buckets; ++t) {
      const std::uint32_t w = rx.first[t + 1] - rx.first[t];
      ++by_width[std::min<std::uint32_t>(w, 4)];
      ASSERT_EQ(rx.bucket_table[t].wide != 0, w > 2) << t;
    }
    for (const std::size_t n : by_width) EXPECT_GT(n, 0u);
  }
  ASSERT_NO_FATAL_FAILURE(check_table(some, 9));
  for (key_type k = (key_type{1} << 40) - 2; k < (key_type{1} << 40) + 3'010; ++k) {
    ASSERT_NO_FATAL_FAILURE(expect_key(with_some, some, k));
  }
  // Leaves crowded into a sliver of the keys: no table.
  const table crowded = clustered_table(20'000, 10'000, 10);
  const inner_layout l = build(crowded, fanout());
  EXPECT_EQ(l.radix().buckets, 0u);
  EXPECT_EQ(l.radix_bytes(), 0u);
}

TEST_P(InnerLayoutTest, MaxKeyIsAnOrdinaryLowKey) {
  // A leaf whose low key is UINT64_MAX is a valid key next to the max_key
  // padding: the padding must never pull a query into or out of it.
  const auto F = static_cast<std::size_t>(fanout());
  {
    SCOPED_TRACE("{0, max}");
    table t{{0, max_key}, {5, 9}};
    ASSERT_NO_FATAL_FAILURE(check_table(t, 1));
    const inner_layout l = build(t, fanout());
    EXPECT_EQ(l.find(max_key), 1u);
    EXPECT_EQ(l.find(max_key - 1), 0u);
  }
  {
    SCOPED_TRACE("{0, max-1, max}");
    ASSERT_NO_FATAL_FAILURE(check_table(table{{0, max_key - 1, max_key}, {1, 2, 3}}, 2));
  }
  for (const std::size_t leaves : {F - 1, F, F + 1, F * F, F * F + 1, std::size_t{5000}}) {
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
      SCOPED_TRACE("leaves " + std::to_string(leaves) + " seed " + std::to_string(seed) + " ending at max");
      ASSERT_NO_FATAL_FAILURE(check_table(random_table(leaves, seed, true), seed));
      // Dense tables ending at max_key: every key near the top is a separator.
      ASSERT_NO_FATAL_FAILURE(check_table(dense_table(leaves, max_key - (leaves - 2)), seed));
    }
  }
}

TEST_P(InnerLayoutTest, DenseSeparators) {
  const auto F = static_cast<std::size_t>(fanout());
  for (const std::size_t leaves : {F + 1, F * F + 1}) {
    SCOPED_TRACE("leaves " + std::to_string(leaves));
    ASSERT_NO_FATAL_FAILURE(check_table(dense_table(leaves), 3));
  }
}

TEST_P(InnerLayoutTest, ShapeIsBalancedBreadthFirst) {
  const int f = fanout();
  const auto F = static_cast<std::size_t>(f);
  for (const std::size_t leaves : leaf_counts(f)) {
    SCOPED_TRACE("leaves " + std::to_string(leaves));
    const table t = random_table(leaves, 5);
    const inner_layout l = build(t, f);
    // Height: the fewest levels whose capacity F^h holds the leaves.
    int height = 1;
    for (std::size_t cap = F; cap < leaves; cap *= F) ++height;
    EXPECT_EQ(l.height(), height);
    EXPECT_EQ(l.fanout(), f);
    const auto& prefix = l.child_prefix();
    const auto& levels = l.level_start();
    ASSERT_EQ(levels.size(), static_cast<std::size_t>(height) + 1);
    EXPECT_EQ(levels.front(), 0u);
    EXPECT_EQ(levels[1], 1u);
    EXPECT_EQ(levels.back(), l.node_count());
    ASSERT_EQ(prefix.size(), l.node_count() + 1);
    EXPECT_EQ(l.key_region().size(), l.node_count() * F);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(l.key_region().data()) % key_region_alignment, 0u);
    for (int lv = 0; lv < height; ++lv) {
      std::uint32_t lo = UINT32_MAX;
      std::uint32_t hi = 0;
      for (std::uint32_t x = levels[lv]; x < levels[lv + 1]; ++x) {
        const std::uint32_t children = prefix[x + 1] - prefix[x];
        lo = std::min(lo, children);
        hi = std::max(hi, children);
        EXPECT_LE(children, F);
        if (leaves > 1) {
          EXPECT_GE(children, 2u) << "node " << x;
        }
      }
      EXPECT_LE(hi - lo, 1u) << "level " << lv << " is not evenly spread";
    }
    EXPECT_EQ(l.bytes(), l.key_region().size() * 8 + prefix.size() * 4 + l.leaf_ids().size() * 4 + levels.size() * 4);
  }
}

TEST_P(InnerLayoutTest, OneLeafIsARootWithOneChildAndNoKeys) {
  const table t{{0}, {42}};
  const inner_layout l = build(t, fanout());
  EXPECT_EQ(l.height(), 1);
  EXPECT_EQ(l.node_count(), 1u);
  EXPECT_EQ(l.child_prefix(), (std::vector<std::uint32_t>{1, 2}));
  for (const key_type k : l.key_region()) EXPECT_EQ(k, max_key);
  for (const key_type k : {min_key, key_type{77}, max_key}) {
    const leaf_route r = descend_leaf(l.view(), k);
    EXPECT_EQ(r.ordinal, 0u);
    EXPECT_EQ(r.leaf, 42u);
  }
}

TEST_P(InnerLayoutTest, NodeKeysAreSubtreeMinima) {
  const table t = random_table(static_cast<std::size_t>(fanout()) * fanout() * 2 + 3, 8);
  const inner_layout l = build(t, fanout());
  const std::uint32_t nodes = static_cast<std::uint32_t>(l.node_count());
  const auto& prefix = l.child_prefix();
  // First leaf of a child index's subtree: follow first children down.
  auto first_leaf = [&](std::uint32_t c) {
    while (c < nodes) c = prefix[c];
    return c - nodes;
  };
  const auto F = static_cast<std::size_t>(fanout());
  for (std::uint32_t x = 0; x < nodes; ++x) {
    const std::uint32_t children = prefix[x + 1] - prefix[x];
    for (std::uint32_t j = 1; j < children; ++j) {
      ASSERT_EQ(l.key_region()[x * F + j - 1], t.low_keys[first_leaf(prefix[x] + j)]) << "node " << x << " key " << j;
    }
    for (std::size_t j = children - 1; j < F; ++j) ASSERT_EQ(l.key_region()[x * F + j], max_key);
  }
}

TEST_P(InnerLayoutTest, NodeRankClampsPadding) {
  // 3 valid keys, the last of them max_key, then max_key padding.
  std::vector<key_type> node(64, max_key);
  node[0] = 5;
  node[1] = 10;
  node[2] = max_key;
  auto rank = [&](std::uint32_t valid, key_type k) {
    switch (fanout()) {
      case 16: return node_rank<16>(node.data(), valid, k);
      case 32: return node_rank<32>(node.data(), valid, k);
      default: return node_rank<64>(node.data(), valid, k);
    }
  };
  EXPECT_EQ(rank(3, 0), 0u);
  EXPECT_EQ(rank(3, 5), 1u);
  EXPECT_EQ(rank(3, 9), 1u);
  EXPECT_EQ(rank(3, 10), 2u);
  EXPECT_EQ(rank(3, max_key - 1), 2u);
  EXPECT_EQ(rank(3, max_key), 3u);
  EXPECT_EQ(rank(2, max_key), 2u);
  EXPECT_EQ(rank(0, max_key), 0u);
  // A full node: F-1 valid keys, the pad slot still max_key.
  const auto F = static_cast<std::uint32_t>(fanout());
  for (std::uint32_t j = 0; j + 1 < F; ++j) node[j] = 100 + 10 * j;
  for (std::uint32_t j = 0; j + 1 < F; ++j) {
    EXPECT_EQ(rank(F - 1, 100 + 10 * j), j + 1);
    EXPECT_EQ(rank(F - 1, 99 + 10 * j), j);
  }
  EXPECT_EQ(rank(F - 1, max_key), F - 1);
}

TEST_P(InnerLayoutTest, RejectsBadInput) {
  const table t = random_table(100, 4);
  const int f = fanout();
  for (const int bad : {0, 8, 15, 17, 128}) {
    EXPECT_THROW((void)inner_layout::build(t.low_keys.data(), t.ids.data(), t.size(), bad), std::invalid_argument);
  }
  EXPECT_THROW((void)inner_layout::build(t.low_keys.data(), t.ids.data(), 0, f), std::invalid_argument);
  EXPECT_THROW((void)inner_layout::build(nullptr, t.ids.data(), t.size(), f), std::invalid_argument);
  table not_zero = t;
  not_zero.low_keys[0] = 1;
  EXPECT_THROW((void)build(not_zero, f), std::invalid_argument);
  table dup = t;
  dup.low_keys[50] = dup.low_keys[49];
  EXPECT_THROW((void)build(dup, f), std::invalid_argument);
  table down = t;
  std::swap(down.low_keys[10], down.low_keys[11]);
  EXPECT_THROW((void)build(down, f), std::invalid_argument);
}

TEST_P(InnerLayoutTest, EmptyLayout) {
  const inner_layout l;
  EXPECT_EQ(l.leaf_count(), 0u);
  EXPECT_EQ(l.height(), 0);
  EXPECT_EQ(l.view().key_region, nullptr);
  EXPECT_EQ(l.view().leaf_count, 0u);
  EXPECT_NO_THROW(l.verify());
  EXPECT_EQ(l.bytes(), 0u);
}

TEST_P(InnerLayoutTest, ViewMatchesLayout) {
  const table t = random_table(1000, 6);
  inner_layout l = build(t, fanout());
  const inner_layout_view v = l.view();
  EXPECT_EQ(v.key_region, l.key_region().data());
  EXPECT_EQ(v.child_prefix, l.child_prefix().data());
  EXPECT_EQ(v.leaf_ids, l.leaf_ids().data());
  EXPECT_EQ(v.node_count, l.node_count());
  EXPECT_EQ(v.leaf_count, 1000u);
  EXPECT_EQ(v.fanout, fanout());
  EXPECT_EQ(v.height, l.height());
  // A moved layout keeps its arrays, so views taken afterwards work.
  const inner_layout moved = std::move(l);
  EXPECT_EQ(moved.find(t.low_keys[500]), 500u);
}

/// Builds a layout, breaks it with `corrupt`, and expects verify() (or, for
/// `against_table`, verify(table)) to throw a message containing `names`.
template <class Corrupt>
void expect_broken(int fanout, std::size_t leaves, Corrupt corrupt, const std::string& names,
                   bool against_table = false) {
  SCOPED_TRACE("corruption expected to be reported as '" + names + "'");
  const table t = random_table(leaves, 9);
  inner_layout l = build(t, fanout);
  ASSERT_NO_THROW(l.verify(t.low_keys.data(), t.ids.data(), t.size()));
  corrupt(l, t);
  try {
    if (against_table) {
      l.verify(t.low_keys.data(), t.ids.data(), t.size());
    } else {
      l.verify();
    }
    ADD_FAILURE() << "verify() accepted a corrupted layout";
  } catch (const invariant_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("inner_layout"), std::string::npos) << what;
    EXPECT_NE(what.find(names), std::string::npos) << what;
  }
}

TEST_P(InnerLayoutTest, VerifyFindsCorruption) {
  const int f = fanout();
  const std::size_t big = static_cast<std::size_t>(f) * f + 7;  // height >= 3
  const auto F = static_cast<std::size_t>(f);
  // Keys out of order inside a node.
  expect_broken(f, big, [&](inner_layout& l, const table&) {
    const std::uint32_t x = l.level_start()[static_cast<std::size_t>(l.height()) - 1];
    auto& k = access::key_region(l);
    std::swap(k[x * F], k[x * F + 1]);
  }, "not strictly increasing");
  // A key that is not its child's subtree minimum: a bottom node's first key
  // moved below its own range.
  expect_broken(f, big, [&](inner_layout& l, const table&) {
    const std::uint32_t x = l.level_start()[static_cast<std::size_t>(l.height()) - 1] + 1;
    access::key_region(l)[x * F] = 0;
  }, "outside the range");
  // ... or above the next separator of its parent.
  expect_broken(f, big, [&](inner_layout& l, const table&) {
    const std::uint32_t x = l.level_start()[static_cast<std::size_t>(l.height()) - 1];
    const std::uint32_t valid = l.child_prefix()[x + 1] - l.child_prefix()[x] - 1;
    access::key_region(l)[x * F + valid - 1] = max_key - 1;
  }, "outside the range");
  // Padding that is not max_key.
  expect_broken(f, big, [&](inner_layout& l, const table&) { access::key_region(l)[F - 1] = 12345; }, "padding");
  // Prefix sums not increasing.
  expect_broken(f, big, [](inner_layout& l, const table&) {
    auto& p = access::child_prefix(l);
    p[2] = p[1];
  }, "child_prefix not strictly increasing");
  // A node with more than F children.
  expect_broken(f, big, [&](inner_layout& l, const table&) {
    auto& p = access::child_prefix(l);
    const std::uint32_t x = l.level_start().back() - 2;
    p[x + 1] = p[x] + static_cast<std::uint32_t>(F) + 1;
  }, "more than fanout");
  // The end entry: a child index past the leaves.
  expect_broken(f, big, [](inner_layout& l, const table&) { ++access::child_prefix(l).back(); },
                "child_prefix[node_count]");
  // A level whose children start at the wrong place.
  expect_broken(f, big, [](inner_layout& l, const table&) { access::child_prefix(l)[0] = 0; }, "");
  expect_broken(f, big, [](inner_layout& l, const table&) { ++access::level_start(l)[2]; }, "");
  // Leaf ids that are not the table's.
  expect_broken(f, big, [](inner_layout& l, const table&) { ++access::leaf_ids(l)[3]; }, "leaf_ids[3]", true);
  // A leaf too few: sizes disagree.
  expect_broken(f, big, [](inner_layout& l, const table&) { access::leaf_ids(l).pop_back(); }, "");
  // A wrong key region size.
  expect_broken(f, big, [](inner_layout& l, const table&) { access::key_region(l).pop_back(); }, "key_region");
  // Keys consistent in themselves but not with the table's low keys.
  expect_broken(f, 3, [](inner_layout& l, const table& t) { access::key_region(l)[0] = t.low_keys[1] - 1; },
                "leaf table says", true);
}

INSTANTIATE_TEST_SUITE_P(Fanouts, InnerLayoutTest, ::testing::Values(16, 32, 64),
                         [](const ::testing::TestParamInfo<int>& p) { return "F" + std::to_string(p.param); });

}  // namespace
