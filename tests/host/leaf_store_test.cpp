// leaf_store: bulk load, allocation from many threads, splits, the leaf
// table, and verify() catching broken invariants.
#include <tandem/host/leaf_store.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::host;

using small_store = basic_leaf_store<basic_bpa<4, 4, 8>>;  // 32 keys per leaf

std::vector<key_type> spread_keys(std::size_t n) {
  std::vector<key_type> keys(n);
  for (std::size_t i = 0; i < n; ++i) keys[i] = i * 7919;
  if (n > 1) keys.back() = max_key;
  return keys;
}

TEST(LeafStore, StartsWithOneLeafOwningEverything) {
  leaf_store s;
  EXPECT_EQ(s.leaf_count(), 1u);
  EXPECT_EQ(s.size(), 0u);
  const leaf_table t = s.table();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t.low_keys[0], min_key);
  EXPECT_EQ(s[s.head()].high, max_key);
  EXPECT_EQ(s[s.head()].right, no_leaf);
  EXPECT_NO_THROW(s.verify());
}

TEST(LeafStore, BulkLoadSizesAndFill) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{32}, std::size_t{33},
                        std::size_t{5000}}) {
    for (double fill : {0.5, 0.75, 1.0}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " fill " << fill);
      const auto keys = spread_keys(n);
      std::vector<value_type> values(n);
      std::iota(values.begin(), values.end(), 100);
      auto s = small_store::bulk_load(keys.data(), values.data(), n, fill);
      ASSERT_NO_THROW(s.verify());
      EXPECT_EQ(s.size(), n);
      const std::size_t per = std::max<std::size_t>(1, static_cast<std::size_t>(fill * 32));
      EXPECT_EQ(s.leaf_count(), n == 0 ? 1 : (n + per - 1) / per);
      const leaf_table t = s.table();
      ASSERT_EQ(t.size(), s.leaf_count());
      EXPECT_TRUE(std::is_sorted(t.low_keys.begin(), t.low_keys.end()));
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t ord = static_cast<std::size_t>(std::upper_bound(t.low_keys.begin(), t.low_keys.end(), keys[i]) -
                                                         t.low_keys.begin()) - 1;
        const auto got = s[t.ids[ord]].data.get(keys[i]);
        ASSERT_TRUE(got.has_value()) << "key " << keys[i];
        EXPECT_EQ(*got, values[i]);
      }
    }
  }
}

TEST(LeafStore, BulkLoadRejectsBadInput) {
  const std::vector<key_type> unsorted = {1, 3, 2};
  const std::vector<key_type> dup = {1, 2, 2};
  const std::vector<value_type> v(3, 0);
  EXPECT_THROW(leaf_store::bulk_load(unsorted.data(), v.data(), 3), std::invalid_argument);
  EXPECT_THROW(leaf_store::bulk_load(dup.data(), v.data(), 3), std::invalid_argument);
  const std::vector<key_type> ok = {1, 2, 3};
  EXPECT_THROW(leaf_store::bulk_load(ok.data(), v.data(), 3, 0.0), std::invalid_argument);
  EXPECT_THROW(leaf_store::bulk_load(ok.data(), v.data(), 3, 1.5), std::invalid_argument);
  try {
    (void)leaf_store::bulk_load(unsorted.data(), v.data(), 3);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("key[2]"), std::string::npos) << e.what();
  }
}

TEST(LeafStore, ConcurrentAllocationGivesDistinctStableIds) {
  leaf_store s;
  constexpr int threads = 8;
  constexpr int per_thread = 200;
  std::vector<std::vector<leaf_id>> got(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const leaf_id id = s.allocate();
        s[id].data.upsert(static_cast<key_type>(t), static_cast<value_type>(i));  // touch it
        got[t].push_back(id);
      }
    });
  }
  for (auto& th : pool) th.join();
  std::set<leaf_id> all;
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < per_thread; ++i) {
      const leaf_id id = got[t][i];
      EXPECT_TRUE(all.insert(id).second) << "id " << id << " handed out twice";
      EXPECT_EQ(s[id].data.get(static_cast<key_type>(t)), std::optional<value_type>(i));
    }
  }
  EXPECT_EQ(all.size(), std::size_t{threads * per_thread});
  EXPECT_EQ(s.leaf_count(), std::size_t{threads * per_thread} + 1);
  EXPECT_EQ(*all.rbegin(), threads * per_thread);  // ids are dense
}

TEST(LeafStore, SplitAtMedianKeepsChainAndFences) {
  const auto keys = spread_keys(32);
  std::vector<value_type> values(keys.begin(), keys.end());
  auto s = small_store::bulk_load(keys.data(), values.data(), keys.size(), 1.0);
  ASSERT_EQ(s.leaf_count(), 1u);
  const split_record r = s.split(s.head());
  EXPECT_EQ(r.left, s.head());
  EXPECT_EQ(r.separator, keys[16]);
  EXPECT_EQ(s[r.left].high, keys[16] - 1);
  EXPECT_EQ(s[r.right].low, keys[16]);
  EXPECT_EQ(s[r.right].high, max_key);
  EXPECT_EQ(s[r.left].right, r.right);
  EXPECT_EQ(s[r.left].data.size(), 16u);
  EXPECT_EQ(s[r.right].data.size(), 16u);
  EXPECT_NO_THROW(s.verify());
  const leaf_table t = s.table();
  EXPECT_EQ(t.ids, (std::vector<leaf_id>{r.left, r.right}));
  EXPECT_EQ(s.walk_right(r.left, max_key), r.right);
  EXPECT_EQ(s.walk_right(r.left, keys[15]), r.left);
}

TEST(LeafStore, SplitAtTheKeyAboutToGoInWhenAtMostOneKeyIsAbove) {
  const auto keys = spread_keys(32);  // the last is max_key
  std::vector<value_type> values(keys.begin(), keys.end());
  {  // one key (max_key) above: the left keeps 31
    auto s = small_store::bulk_load(keys.data(), values.data(), keys.size(), 1.0);
    const split_record r = s.split(s.head(), keys[30] + 1);
    EXPECT_EQ(r.separator, max_key);
    EXPECT_EQ(s[r.left].data.size(), 31u);
    EXPECT_EQ(s[r.right].data.size(), 1u);
    EXPECT_NO_THROW(s.verify());
  }
  {  // none above: the left keeps all, the right owns [next, max] empty
    auto s = small_store::bulk_load(keys.data(), values.data(), keys.size() - 1, 1.0);
    const split_record r = s.split(s.head(), keys[30] + 5);
    EXPECT_EQ(r.separator, keys[30] + 5);
    EXPECT_EQ(s[r.left].data.size(), 31u);
    EXPECT_EQ(s[r.right].data.size(), 0u);
    EXPECT_EQ(s[r.left].high, keys[30] + 4);
    EXPECT_NO_THROW(s.verify());
  }
  {  // two above: the median
    auto s = small_store::bulk_load(keys.data(), values.data(), keys.size(), 1.0);
    const split_record r = s.split(s.head(), keys[29] + 1);
    EXPECT_EQ(r.separator, keys[16]);
    EXPECT_EQ(s[r.left].data.size(), 16u);
  }
}

TEST(LeafStore, AscendingInsertsLeaveFullLeaves) {
  // Keys appended at the right end (below max_key, which stays the last key),
  // in batches: every leaf but the last two ends full; median splits would
  // leave them half full.
  const auto keys = spread_keys(100);
  std::vector<value_type> values(keys.begin(), keys.end());
  auto s = small_store::bulk_load(keys.data(), values.data(), keys.size(), 1.0);
  const std::size_t loaded_leaves = s.leaf_count();
  key_type next = keys[98] + 1;
  std::size_t inserted = 0;
  for (int b = 0; b < 40; ++b) {
    std::vector<point_op> run;
    for (int i = 0; i < 25; ++i) run.push_back({next++, next, op_kind::insert});
    std::vector<point_result> res(run.size());
    s.apply(s.head(), run.data(), run.size(), res.data());
    inserted += run.size();
  }
  ASSERT_NO_THROW(s.verify());
  EXPECT_EQ(s.size(), keys.size() + inserted);
  const leaf_table t = s.table();
  std::size_t full = 0;
  for (std::size_t i = loaded_leaves; i + 2 < t.size(); ++i) full += s[t.ids[i]].data.size() >= 31;
  EXPECT_EQ(full, t.size() - loaded_leaves - 2);
  EXPECT_LE(t.size(), loaded_leaves + inserted / 31 + 2);
}

TEST(LeafStore, ApplySplitsFullLeavesAndReportsSeparators) {
  small_store s;
  std::vector<point_op> run;
  for (key_type k = 0; k < 1000; ++k) run.push_back({k * 3, k, op_kind::insert});
  run.push_back({max_key, 1, op_kind::put});
  std::vector<point_result> res(run.size());
  std::vector<split_record> splits;
  s.apply(s.head(), run.data(), run.size(), res.data(), &splits);
  ASSERT_NO_THROW(s.verify());
  EXPECT_EQ(s.size(), run.size());
  EXPECT_EQ(splits.size() + 1, s.leaf_count());
  for (const auto& r : res) EXPECT_FALSE(r.found);
  const leaf_table t = s.table();
  std::vector<key_type> seps;
  for (const auto& sr : splits) seps.push_back(sr.separator);
  std::sort(seps.begin(), seps.end());
  EXPECT_EQ(std::vector<key_type>(t.low_keys.begin() + 1, t.low_keys.end()), seps);
  // Every leaf within capacity and every key findable through the table.
  for (const auto& op : run) {
    const std::size_t ord =
        static_cast<std::size_t>(std::upper_bound(t.low_keys.begin(), t.low_keys.end(), op.key) - t.low_keys.begin()) - 1;
    EXPECT_EQ(s[t.ids[ord]].data.get(op.key), std::optional<value_type>(op.value));
  }
}

TEST(LeafStore, VerifyCatchesBrokenInvariants) {
  const auto keys = spread_keys(100);
  std::vector<value_type> values(keys.size(), 1);
  {
    auto s = small_store::bulk_load(keys.data(), values.data(), keys.size());
    s[s.head()].high -= 1;  // gap between fences
    EXPECT_THROW(s.verify(), invariant_error);
  }
  {
    auto s = small_store::bulk_load(keys.data(), values.data(), keys.size());
    const leaf_id second = s[s.head()].right;
    s[second].low += 1;  // key outside fences and a gap
    s[s.head()].high += 1;
    EXPECT_THROW(s.verify(), invariant_error);
  }
  {
    auto s = small_store::bulk_load(keys.data(), values.data(), keys.size());
    s[s.head()].right = no_leaf;  // unlinked leaves
    s[s.head()].high = max_key;
    EXPECT_THROW(s.verify(), invariant_error);
  }
  {
    auto s = small_store::bulk_load(keys.data(), values.data(), keys.size());
    (void)s.allocate();  // allocated but never linked
    EXPECT_THROW(s.verify(), invariant_error);
  }
}

}  // namespace
