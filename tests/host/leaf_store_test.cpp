// leaf_store: bulk load, allocation from many threads, splits, the leaf
// table, verify() catching broken invariants, room made ahead for splits
// (and allocation failure changing nothing), the bound on a run's splits
// that the leaf phase reserves leaves for, and merges: routes through dead
// leaves, their ids reused once recycled, compaction.
#include <tandem/host/detail/fault_point.hpp>
#include <tandem/host/leaf_store.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <string>
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

TEST(LeafStore, ReservedRoomAllocatesNothingAndFailedGrowthChangesNothing) {
  // Loaded to exactly the arena's first segment: the next leaf needs room.
  const std::size_t leaves = 64;
  std::vector<key_type> keys(leaves * small_store::bpa_type::capacity);
  std::iota(keys.begin(), keys.end(), key_type{0});
  std::vector<value_type> values(keys.begin(), keys.end());
  auto s = small_store::bulk_load(keys.data(), values.data(), keys.size(), 1.0);
  ASSERT_EQ(s.leaf_count(), leaves);
  ASSERT_EQ(s.room(), 0u);

  host::detail::arm_allocation_fault(1);
  EXPECT_THROW(s.split(s.head()), std::bad_alloc);
  EXPECT_EQ(host::detail::disarm_allocation_fault(), 0u);
  EXPECT_EQ(s.leaf_count(), leaves);
  EXPECT_NO_THROW(s.verify());
  EXPECT_EQ(s.size(), keys.size());

  host::detail::arm_allocation_fault(1);
  EXPECT_THROW(s.reserve(10), std::bad_alloc);
  EXPECT_EQ(host::detail::disarm_allocation_fault(), 0u);
  EXPECT_EQ(s.room(), 0u);

  s.reserve(10);
  ASSERT_GE(s.room(), 10u);
  host::detail::arm_allocation_fault(1);
  const leaf_table t = s.table();
  for (std::size_t i = 0; i < 10; ++i) EXPECT_NO_THROW(s.split(t.ids[i]));
  EXPECT_EQ(host::detail::disarm_allocation_fault(), 1u) << "splits into reserved room allocate nothing";
  EXPECT_EQ(s.leaf_count(), leaves + 10);
  EXPECT_NO_THROW(s.verify());
  EXPECT_EQ(s.size(), keys.size());
}

/// Checks leaf_store::apply's bound on the splits of one run over stores of
/// geometry Bpa: 2 * (leaves that can fill + adds / adds_per_split), and
/// none when no leaf can fill.
template <class Bpa>
void check_split_bound(std::uint64_t seed) {
  using store = basic_leaf_store<Bpa>;
  constexpr std::size_t cap = Bpa::capacity;
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 300; ++round) {
    // Leaves of random fill over keys 0, 8, 16, ...
    const std::size_t n = 1 + rng() % (cap * 6);
    std::vector<key_type> keys(n);
    for (std::size_t i = 0; i < n; ++i) keys[i] = i * 8;
    std::vector<value_type> values(keys.begin(), keys.end());
    const double fill = 0.3 + 0.7 * static_cast<double>(rng() % 1000) / 1000.0;
    auto s = store::bulk_load(keys.data(), values.data(), n, fill);
    // The run: ascending keys from a stored one, in a pattern that splits
    // often (dense appends, keys up to just below a stored key, sparse,
    // repeats with erases).
    std::vector<point_op> run;
    const key_type lo = (rng() % n) * 8;
    const int pattern = static_cast<int>(rng() % 4);
    // Some runs short (fewer adds than near_full_slack), some long.
    const std::size_t m = 1 + (rng() % 2 ? rng() % store::near_full_slack : rng() % (cap * 8));
    key_type k = lo;
    for (std::size_t i = 0; i < m; ++i) {
      switch (pattern) {
        case 0: k += 1; break;                      // dense ascending: fills, then splits at the next key
        case 1: k += (i % 7 == 0) ? 7 : 1; break;   // up to just below a stored key, over and over
        case 2: k += 1 + rng() % 16; break;         // sparse
        default: k += rng() % 3; break;             // repeats
      }
      const unsigned d = static_cast<unsigned>(rng() % 10);
      const op_kind kind = pattern == 3 && d < 3 ? op_kind::erase : d < 1 ? op_kind::get : d < 6 ? op_kind::insert : op_kind::put;
      run.push_back({k, k, kind});
    }
    std::uint64_t adds = 0;
    for (const point_op& o : run) adds += o.kind == op_kind::put || o.kind == op_kind::insert;
    const leaf_id start = s.walk_right(s.head(), run.front().key);
    std::uint64_t can_fill = 0;
    for (leaf_id id = start;; id = s[id].right) {
      can_fill += s[id].data.size() + adds > cap;
      if (s[id].high >= run.back().key) break;
    }
    std::uint64_t spanned = 0;
    for (leaf_id id = start;; id = s[id].right) {
      ++spanned;
      if (s[id].high >= run.back().key) break;
    }
    auto near_full_leaves = [&] {
      std::size_t c = 0;
      for (leaf_id id = s.head(); id != no_leaf; id = s[id].right) c += s[id].data.size() + store::near_full_slack > cap;
      return c;
    };
    ASSERT_EQ(s.near_full(), near_full_leaves()) << "seed " << seed << " round " << round;
    const std::uint64_t near_full = s.near_full();
    std::vector<point_result> results(run.size());
    std::vector<split_record> splits;
    s.apply(start, run.data(), run.size(), results.data(), &splits);
    const std::string what = "seed " + std::to_string(seed) + " round " + std::to_string(round) + " pattern " +
                             std::to_string(pattern) + ": " + std::to_string(adds) + " adds, " +
                             std::to_string(can_fill) + " leaves can fill";
    // Reading the leaves: 2 * (leaves that can fill + adds / adds_per_split).
    const std::uint64_t bound = can_fill == 0 ? 0 : 2 * (can_fill + adds / store::adds_per_split);
    ASSERT_LE(splits.size(), bound) << what;
    // Reading none: fewer adds than near_full_slack split near-full leaves only.
    const std::uint64_t free_bound =
        (adds >= store::near_full_slack ? 2 * (spanned + adds / store::adds_per_split) : 0) + 2 * near_full;
    ASSERT_LE(splits.size(), free_bound) << what;
    ASSERT_EQ(s.near_full(), near_full_leaves()) << what;
    ASSERT_NO_THROW(s.verify());
  }
}

TEST(LeafStore, SplitsOfARunStayWithinTheDocumentedBound) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    check_split_bound<basic_bpa<4, 4, 8>>(seed);  // 32 keys
    check_split_bound<basic_bpa<2, 2, 4>>(seed);  // 8 keys
    check_split_bound<basic_bpa<4, 4, 4>>(seed);  // 16 keys
  }
}

}  // namespace

namespace {

/// Every pair of a store, in key order, by walking the chain.
std::vector<entry> chain_entries(const small_store& s) {
  std::vector<entry> out;
  for (leaf_id id = s.head(); id != no_leaf; id = s[id].right) {
    std::vector<key_type> k(s[id].data.size());
    std::vector<value_type> v(k.size());
    auto copy = s[id].data;  // extract_sorted sorts in place
    copy.extract_sorted(k.data(), v.data());
    for (std::size_t i = 0; i < k.size(); ++i) out.push_back({k[i], v[i]});
  }
  return out;
}

TEST(LeafStoreMerges, MergedLeavesForwardRoutesAndAreReusedOnlyWhenRecycled) {
  std::vector<key_type> keys(10 * 8);
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = 100 + i * 10;
  std::vector<value_type> values(keys.begin(), keys.end());
  auto s = small_store::bulk_load(keys.data(), values.data(), keys.size(), 0.25);  // 10 leaves of 8
  const leaf_table before = s.table();
  ASSERT_EQ(before.size(), 10u);
  const auto expected = chain_entries(s);

  s.reserve_merges(3);
  s.merge(before.ids[2], before.ids[3], 7);  // 3 dies into 2
  s.merge(before.ids[2], before.ids[4], 7);  // and 4 after it
  s.merge(before.ids[0], before.ids[1], 8);
  EXPECT_NO_THROW(s.verify());
  EXPECT_EQ(s.live_leaves(), 7u);
  EXPECT_EQ(s.dead_leaves(), 3u);
  EXPECT_EQ(s.merges(), 3u);
  EXPECT_EQ(chain_entries(s), expected) << "merges move no entry out of the index";
  EXPECT_EQ(s.table().size(), 7u);
  // A route of the old table still finds every key's owner.
  for (std::size_t o = 0; o < before.size(); ++o) {
    for (key_type k = before.low_keys[o] == 0 ? 1 : before.low_keys[o];
         k < (o + 1 < before.size() ? before.low_keys[o + 1] : before.low_keys[o] + 1000); k += 3) {
      const leaf_id owner = s.walk_right(before.ids[o], k);
      ASSERT_TRUE(s[owner].owns(k)) << "key " << k << " routed to old ordinal " << o;
    }
  }
  // Dead ids come back only once recycled past their tag.
  const std::size_t ids = s.leaf_count();
  s.recycle(7);  // tags below 7: none
  (void)s.split(s.table().ids.back());
  EXPECT_EQ(s.leaf_count(), ids + 1) << "no dead leaf reused before recycle";
  s.recycle(8);  // the two of tag 7
  EXPECT_GE(s.room(), 2u);
  const std::set<leaf_id> dead_ids{before.ids[3], before.ids[4]};
  for (int i = 0; i < 2; ++i) {
    const split_record r = s.split(s.table().ids.back());
    EXPECT_TRUE(dead_ids.count(r.right)) << "split " << i << " reuses a recycled id";
  }
  EXPECT_EQ(s.leaf_count(), ids + 1);
  EXPECT_EQ(s.dead_leaves(), 1u);
  EXPECT_NO_THROW(s.verify());
  EXPECT_EQ(chain_entries(s), expected);
}

TEST(LeafStoreMerges, CompactMovesLiveLeavesDownAndFreesTheRest) {
  std::vector<key_type> keys(300 * 8);
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = i * 3 + 1;
  keys.back() = max_key;
  std::vector<value_type> values(keys.begin(), keys.end());
  auto s = small_store::bulk_load(keys.data(), values.data(), keys.size(), 0.25);  // 300 leaves of 8
  const auto expected = chain_entries(s);
  // Merge every leaf but a few into its left neighbour's chain, right to left
  // in runs, so that live leaves end up scattered over the ids.
  const leaf_table t = s.table();
  s.reserve_merges(t.size());
  std::size_t survivor = 0;
  for (std::size_t o = 1; o < t.size(); ++o) {
    if (o % 37 == 0) {
      survivor = o;
      continue;
    }
    if (s[t.ids[survivor]].data.size() + s[t.ids[o]].data.size() > small_store::bpa_type::capacity) {
      survivor = o;
      continue;
    }
    s.merge(t.ids[survivor], t.ids[o], 1);
  }
  ASSERT_NO_THROW(s.verify());
  const std::size_t live = s.live_leaves();
  ASSERT_LT(live, t.size() / 2);
  // A failed compaction changes nothing.
  EXPECT_THROW(s.compact([](const std::vector<leaf_id>&) { throw std::bad_alloc(); }), std::bad_alloc);
  EXPECT_NO_THROW(s.verify());
  EXPECT_EQ(s.leaf_count(), t.size());
  std::vector<leaf_id> moved;
  s.compact([&](const std::vector<leaf_id>& m) { moved = m; });
  EXPECT_NO_THROW(s.verify());
  EXPECT_EQ(s.leaf_count(), live);
  EXPECT_EQ(s.dead_leaves(), 0u);
  EXPECT_EQ(chain_entries(s), expected);
  ASSERT_EQ(moved.size(), t.size());
  for (const leaf_id id : s.table().ids) EXPECT_LT(id, live);
  // New leaves go on from there.
  (void)s.split(s.head());
  EXPECT_EQ(s.leaf_count(), live + 1);
  EXPECT_NO_THROW(s.verify());
}

}  // namespace
