// Unit tests of every bpa operation at sizes 0, 1, full and just over full,
// over several leaf geometries.
#include <tandem/host/bpa.hpp>
#include <tandem/host/leaf.hpp>

#include "support/keys.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::host;

template <class B>
class BpaTest : public ::testing::Test {
 protected:
  // BPAs are large; keep them off the test's stack.
  std::unique_ptr<B> make() { return std::make_unique<B>(); }

  /// Fills `b` with `n` distinct keys (0 and UINT64_MAX first) and returns the model.
  std::map<key_type, value_type> fill(B& b, std::size_t n, std::uint64_t seed = 1) {
    std::map<key_type, value_type> model;
    std::mt19937_64 rng(seed);
    std::vector<key_type> keys = {min_key, max_key};
    while (keys.size() < n + 2) keys.push_back(rng());
    for (std::size_t i = 0; model.size() < n; ++i) {
      const key_type k = keys[i];
      if (model.count(k)) continue;
      EXPECT_EQ(b.upsert(k, k ^ 0x5555), upsert_status::inserted);
      model[k] = k ^ 0x5555;
    }
    return model;
  }

  /// Applies `op` to the model, as a BPA applies it.
  static void replay(const point_op& op, std::map<key_type, value_type>& model) {
    switch (op.kind) {
      case op_kind::get: break;
      case op_kind::put: model[op.key] = op.value; break;
      case op_kind::insert: model.emplace(op.key, op.value); break;
      case op_kind::erase: model.erase(op.key); break;
    }
  }

  static void expect_same(B& b, const std::map<key_type, value_type>& model) {
    ASSERT_NO_THROW(b.verify());
    ASSERT_EQ(b.size(), model.size());
    for (const auto& [k, v] : model) {
      const auto got = b.get(k);
      ASSERT_TRUE(got.has_value()) << "key " << k;
      ASSERT_EQ(*got, v) << "key " << k;
    }
    std::vector<entry> seen;
    b.iterate(min_key, model.size() + 1, [&](key_type k, value_type v) { seen.push_back({k, v}); });
    ASSERT_EQ(seen.size(), model.size());
    auto it = model.begin();
    for (const entry& e : seen) {
      ASSERT_EQ(e.key, it->first);
      ASSERT_EQ(e.value, it->second);
      ++it;
    }
    ASSERT_EQ(b.count(min_key, max_key), model.size());
  }
};

using geometries = ::testing::Types<basic_bpa<1, 1, 1>, basic_bpa<2, 2, 2>, basic_bpa<4, 4, 4>, basic_bpa<3, 5, 7>,
                                    basic_bpa<32, 32, 32>, basic_bpa<64, 64, 32>>;
TYPED_TEST_SUITE(BpaTest, geometries);

TYPED_TEST(BpaTest, EmptyAnswersNothing) {
  auto b = this->make();
  for (key_type k : {min_key, key_type{1}, key_type{12345}, max_key}) {
    EXPECT_FALSE(b->get(k).has_value());
    EXPECT_FALSE(b->lower_bound(k).has_value());
    EXPECT_FALSE(b->erase(k));
  }
  EXPECT_EQ(b->size(), 0u);
  EXPECT_TRUE(b->empty());
  EXPECT_EQ(b->count(min_key, max_key), 0u);
  EXPECT_EQ(b->iterate(min_key, 100, [](key_type, value_type) { ADD_FAILURE(); }), 0u);
  b->map(min_key, max_key, [](key_type, value_type) { ADD_FAILURE(); });
  b->flush();
  EXPECT_NO_THROW(b->verify());
}

TYPED_TEST(BpaTest, SingleEdgeKeys) {
  for (key_type k : {min_key, max_key, key_type{77}}) {
    auto b = this->make();
    EXPECT_EQ(b->upsert(k, 5), upsert_status::inserted);
    EXPECT_EQ(b->size(), 1u);
    EXPECT_EQ(b->get(k), std::optional<value_type>(5));
    EXPECT_EQ(b->lower_bound(min_key), std::optional<entry>(entry{k, 5}));
    EXPECT_EQ(b->lower_bound(k), std::optional<entry>(entry{k, 5}));
    if (k != max_key) {
      EXPECT_FALSE(b->lower_bound(k + 1).has_value());
    }
    EXPECT_EQ(b->count(k, k), 1u);
    EXPECT_EQ(b->count(min_key, max_key), 1u);
    if (k != min_key) {
      EXPECT_EQ(b->count(min_key, k - 1), 0u);
    }
    value_type prev = 0;
    EXPECT_EQ(b->upsert(k, 6, &prev), upsert_status::replaced);
    EXPECT_EQ(prev, 5u);
    value_type kept = 0;
    EXPECT_EQ(b->insert(k, 7, &kept), insert_status::present);
    EXPECT_EQ(kept, 6u);
    EXPECT_EQ(b->get(k), std::optional<value_type>(6));
    b->flush();
    EXPECT_NO_THROW(b->verify());
    EXPECT_EQ(b->get(k), std::optional<value_type>(6));
    value_type erased = 0;
    EXPECT_TRUE(b->erase(k, &erased));
    EXPECT_EQ(erased, 6u);
    EXPECT_FALSE(b->erase(k));
    EXPECT_FALSE(b->get(k).has_value());
    EXPECT_TRUE(b->empty());
    EXPECT_NO_THROW(b->verify());
  }
}

TYPED_TEST(BpaTest, FullRefusesOnlyNewKeys) {
  using B = TypeParam;
  auto b = this->make();
  auto model = this->fill(*b, B::capacity);
  EXPECT_TRUE(b->full());
  this->expect_same(*b, model);

  // Just over full: a new key is refused and nothing changes.
  key_type fresh = 2;
  while (model.count(fresh)) ++fresh;
  EXPECT_EQ(b->upsert(fresh, 1), upsert_status::full);
  EXPECT_EQ(b->insert(fresh, 1), insert_status::full);
  this->expect_same(*b, model);

  // Existing keys still update when full.
  for (auto& [k, v] : model) {
    EXPECT_EQ(b->upsert(k, v + 1), upsert_status::replaced);
    ++v;
  }
  this->expect_same(*b, model);

  // One erase makes room for exactly one key.
  const key_type victim = model.begin()->first;
  EXPECT_TRUE(b->erase(victim));
  model.erase(victim);
  EXPECT_EQ(b->insert(fresh, 9), insert_status::inserted);
  model[fresh] = 9;
  EXPECT_EQ(b->upsert(victim, 1), upsert_status::full);
  this->expect_same(*b, model);
}

TYPED_TEST(BpaTest, DeleteInsertDeleteOneKey) {
  using B = TypeParam;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, B::capacity / 2, B::capacity - 1}) {
    if (n >= B::capacity) continue;  // needs room for one more key
    auto b = this->make();
    auto model = this->fill(*b, n, 7);
    key_type k = 3;
    while (model.count(k)) ++k;
    for (int round = 0; round < 3; ++round) {
      EXPECT_FALSE(b->erase(k));                            // delete (absent)
      EXPECT_EQ(b->insert(k, 1), insert_status::inserted);  // insert
      EXPECT_TRUE(b->erase(k));                             // delete cancels the buffered insert
      EXPECT_FALSE(b->get(k).has_value());
      EXPECT_EQ(b->upsert(k, 2), upsert_status::inserted);
      b->flush();  // now in a block
      EXPECT_TRUE(b->erase(k));
      EXPECT_EQ(b->upsert(k, 3), upsert_status::inserted);  // back in the log
      EXPECT_TRUE(b->erase(k));
      EXPECT_FALSE(b->get(k).has_value());
      EXPECT_FALSE(b->erase(k));
      this->expect_same(*b, model);
    }
  }
}

TYPED_TEST(BpaTest, LowerBoundMatchesModel) {
  using B = TypeParam;
  for (std::size_t n : {std::size_t{1}, B::capacity / 2 + 1, B::capacity}) {
    auto b = this->make();
    const auto model = this->fill(*b, n, 11);
    std::vector<key_type> probes = {min_key, 1, max_key - 1, max_key};
    for (const auto& [k, v] : model) {
      probes.push_back(k);
      if (k != max_key) probes.push_back(k + 1);
      if (k != min_key) probes.push_back(k - 1);
    }
    for (key_type p : probes) {
      const auto it = model.lower_bound(p);
      const auto got = b->lower_bound(p);
      if (it == model.end()) {
        EXPECT_FALSE(got.has_value()) << "probe " << p;
      } else {
        ASSERT_TRUE(got.has_value()) << "probe " << p;
        EXPECT_EQ(got->key, it->first);
        EXPECT_EQ(got->value, it->second);
      }
    }
  }
}

TYPED_TEST(BpaTest, GetSortedMatchesModelSortedOrNot) {
  using B = TypeParam;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, B::capacity / 2 + 1, B::capacity}) {
    for (int state = 0; state < 3; ++state) {  // 0: as inserted (log + unsorted blocks), 1: flushed, 2: sorted
      auto b = this->make();
      auto model = this->fill(*b, n, 21 + n);
      if (state >= 1) b->flush();
      if (state == 2) b->sort();
      if (state == 1 && n > 2) {  // erase a few so blocks lose their order and shift
        for (key_type k : {model.begin()->first, std::prev(model.end())->first}) {
          ASSERT_TRUE(b->erase(k));
          model.erase(k);
        }
      }
      std::vector<key_type> probes = {min_key, min_key, 1, max_key - 1, max_key, max_key};
      std::mt19937_64 rng(5);
      for (const auto& [k, v] : model) {
        probes.push_back(k);
        if (rng() % 3 == 0) probes.push_back(k);  // repeats
        if (k != max_key) probes.push_back(k + 1);
      }
      for (int i = 0; i < 200; ++i) probes.push_back(rng());
      std::sort(probes.begin(), probes.end());
      std::vector<value_type> values(probes.size(), 7);
      std::vector<std::uint8_t> found(probes.size(), 7);
      b->get_sorted(probes.data(), probes.size(), values.data(), found.data());
      for (std::size_t i = 0; i < probes.size(); ++i) {
        const auto it = model.find(probes[i]);
        ASSERT_EQ(found[i], it != model.end() ? 1 : 0) << "n " << n << " state " << state << " probe " << probes[i];
        ASSERT_EQ(values[i], it != model.end() ? it->second : 0) << "probe " << probes[i];
      }
    }
  }
}

// The stepped lookup of the direct get path (start_route, start_get_near,
// finish_get) finds what get finds from any guessed block: the one
// start_route guesses from any fences (around the key or not) and every
// block, so the seek runs both ways. So does the leaf phase's (start_get,
// whose header bisection must pick the block get picks: a key equal to a
// block's bound, one past it, 0 and UINT64_MAX are all probed).
TYPED_TEST(BpaTest, SteppedLookupsFromAnyGuessedBlock) {
  using B = TypeParam;
  for (const test::key_pattern pattern : {test::key_pattern::uniform, test::key_pattern::clustered}) {
    for (int state = 0; state < 3; ++state) {  // 0: as inserted, 1: flushed, 2: sorted
      auto b = this->make();
      test::key_source source(pattern, B::capacity * 2, 40 + state);
      std::map<key_type, value_type> model;
      for (std::size_t i = 0; i < B::capacity * 4 && model.size() + 2 < B::capacity; ++i) {
        const key_type k = source();
        if (model.count(k)) continue;
        ASSERT_EQ(b->upsert(k, k ^ 0x77), upsert_status::inserted);
        model[k] = k ^ 0x77;
      }
      for (const key_type k : {min_key, max_key}) {
        if (!model.count(k) && b->upsert(k, 5) == upsert_status::inserted) model[k] = 5;
      }
      if (state >= 1) b->flush();
      if (state == 2) b->sort();
      std::vector<key_type> probes = {min_key, 1, max_key - 1, max_key};
      for (const auto& [k, v] : model) {
        probes.push_back(k);
        if (k != max_key) probes.push_back(k + 1);
      }
      const key_type lo = model.empty() ? min_key : model.begin()->first;
      const key_type hi = model.empty() ? max_key : model.rbegin()->first;
      const std::pair<key_type, key_type> fences[] = {{min_key, max_key}, {lo, hi}, {hi, hi}, {lo / 2, lo / 2 + 1}};
      for (const key_type probe : probes) {
        const auto it = model.find(probe);
        const auto check = [&](typename B::slot guess, const char* from) {
          value_type value = 7;
          std::uint8_t found = 7;
          b->finish_get(guess, probe, &value, &found);
          ASSERT_EQ(found, it != model.end() ? 1 : 0) << from << " probe " << probe;
          ASSERT_EQ(value, it != model.end() ? it->second : 0) << from << " probe " << probe;
        };
        for (const auto& [f_lo, f_hi] : fences) {
          check(b->start_get_near(probe, b->start_route(probe, f_lo, f_hi)), "start_route");
        }
        for (std::size_t block = 0; block < b->block_count(); ++block) {
          check(b->start_get_near(probe, block), ("block " + std::to_string(block)).c_str());
        }
        check(b->start_get(probe), "start_get");
      }
    }
  }
}

// Sorted blocks of skewed keys: interpolated lookup windows miss often (the
// block is bisected then), and removals inside a run shift sorted blocks
// under the windows guessed for later ops of the same chunk.
TYPED_TEST(BpaTest, LookupsInSkewedSortedBlocks) {
  using B = TypeParam;
  for (const test::key_pattern pattern :
       {test::key_pattern::uniform, test::key_pattern::narrow, test::key_pattern::clustered, test::key_pattern::edges}) {
    for (std::uint64_t seed = 0; seed < 8; ++seed) {
      test::key_source source(pattern, B::capacity * 2, seed);
      std::map<key_type, value_type> model;
      for (std::size_t i = 0; i < B::capacity * 4 && model.size() < B::capacity * 3 / 4 + 1; ++i) {
        const key_type k = source();
        model[k] = k * 3 + 1;
      }
      std::vector<key_type> keys;
      std::vector<value_type> values;
      for (const auto& [k, v] : model) keys.push_back(k), values.push_back(v);
      auto b = this->make();
      b->assign_sorted(keys.data(), values.data(), keys.size());

      std::vector<key_type> probes;
      for (const key_type k : keys) {
        if (k != min_key) probes.push_back(k - 1);
        probes.push_back(k);
        if (k != max_key) probes.push_back(k + 1);
      }
      std::sort(probes.begin(), probes.end());
      std::vector<value_type> got(probes.size());
      std::vector<std::uint8_t> found(probes.size());
      b->get_sorted(probes.data(), probes.size(), got.data(), found.data());
      for (std::size_t i = 0; i < probes.size(); ++i) {
        const auto it = model.find(probes[i]);
        ASSERT_EQ(found[i], it != model.end() ? 1 : 0) << name(pattern) << " seed " << seed << " probe " << probes[i];
        ASSERT_EQ(got[i], it != model.end() ? it->second : 0) << name(pattern) << " seed " << seed;
      }

      // A run of mostly erases and gets of present keys: each erase shifts
      // its sorted block left by one slot.
      std::mt19937_64 rng(seed);
      std::vector<point_op> run;
      for (const key_type k : keys) {
        const auto r = rng() % 4;
        if (r == 0) run.push_back({k, 0, op_kind::erase});
        if (r == 1) run.push_back({k, 9, op_kind::put});
        run.push_back({k, 0, op_kind::get});
      }
      std::vector<point_result> results(run.size());
      ASSERT_EQ(b->apply(run.data(), run.size(), results.data(), apply_path::per_op), run.size());
      for (std::size_t i = 0; i < run.size(); ++i) {
        const point_op& op = run[i];
        const auto it = model.find(op.key);
        ASSERT_EQ(results[i].found, it != model.end()) << name(pattern) << " seed " << seed << " op " << i;
        if (it != model.end()) {
          ASSERT_EQ(results[i].value, it->second) << name(pattern) << " seed " << seed;
        }
        if (op.kind == op_kind::erase) model.erase(op.key);
        if (op.kind == op_kind::put) model[op.key] = op.value;
      }
      this->expect_same(*b, model);
    }
  }
}

TYPED_TEST(BpaTest, RangesMatchModel) {
  using B = TypeParam;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, B::capacity - 1, B::capacity}) {
    auto b = this->make();
    const auto model = this->fill(*b, n, 13);
    std::mt19937_64 rng(n);
    std::vector<std::pair<key_type, key_type>> ranges = {
        {min_key, max_key}, {min_key, min_key}, {max_key, max_key}, {min_key, 1}, {max_key - 1, max_key}};
    for (int i = 0; i < 40; ++i) {
      key_type a = rng(), c = rng();
      if (!model.empty() && i % 2) a = std::next(model.begin(), static_cast<long>(rng() % model.size()))->first;
      ranges.push_back({std::min(a, c), std::max(a, c)});
    }
    for (const auto& [lo, hi] : ranges) {
      std::vector<entry> want;
      for (auto it = model.lower_bound(lo); it != model.end() && it->first <= hi; ++it) want.push_back({it->first, it->second});
      EXPECT_EQ(b->count(lo, hi), want.size());
      for (std::size_t cap : {std::size_t{1}, std::size_t{5}, want.size(), want.size() + 1}) {
        // Capped: exact below the cap, at least the cap otherwise.
        const std::size_t c = b->count(lo, hi, cap);
        if (want.size() < cap) {
          EXPECT_EQ(c, want.size()) << "cap " << cap;
        } else {
          EXPECT_GE(c, cap) << "cap " << cap;
          EXPECT_LE(c, want.size()) << "cap " << cap;
        }
      }
      std::vector<entry> mapped;
      b->map(lo, hi, [&](key_type k, value_type v) { mapped.push_back({k, v}); });
      std::sort(mapped.begin(), mapped.end(), [](const entry& x, const entry& y) { return x.key < y.key; });
      EXPECT_EQ(mapped, want);
      // Ordered iteration from lo with limits, stopping past hi.
      for (std::size_t limit : {std::size_t{1}, std::size_t{3}, want.size() + 5}) {
        std::vector<entry> got;
        b->iterate(lo, limit, [&](key_type k, value_type v) {
          if (k > hi) return false;
          got.push_back({k, v});
          return true;
        });
        const std::vector<entry> expect(want.begin(), want.begin() + static_cast<long>(std::min(limit, want.size())));
        EXPECT_EQ(got, expect) << "lo " << lo << " limit " << limit;
      }
    }
    EXPECT_NO_THROW(b->verify());
  }
}

// copy_ordered writes what iterate visits, from any key and with any limit:
// on a BPA as inserts leave it (log, unsorted blocks), after sort(), and as
// bulk load leaves it (empty log, sorted blocks: the straight block copies),
// with the edge keys in it, and with most keys erased; on a sorted one also
// from start_scan's start.
TYPED_TEST(BpaTest, CopyOrderedEqualsIterate) {
  using B = TypeParam;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, B::capacity / 2 + 1, B::capacity}) {
    auto b = this->make();
    const auto model = this->fill(*b, n, 17 + n);
    std::mt19937_64 rng(n + 3);
    for (const int state : {0, 1, 2, 3}) {
      if (state == 1) b->sort();  // the log stays: iterate's path
      if (state == 2) {           // as bulk load leaves it: empty log, sorted blocks
        std::vector<key_type> keys;
        std::vector<value_type> values;
        for (const auto& [k, v] : model) {
          keys.push_back(k);
          values.push_back(v);
        }
        b->assign_sorted(keys.data(), values.data(), keys.size());
      }
      if (state == 3) {  // three keys in four erased: sparse and empty blocks
        std::size_t i = 0;
        for (const auto& kv : model) {
          if (i++ % 4 != 0) {
            ASSERT_TRUE(b->erase(kv.first));
          }
        }
        b->sort();
      }
      std::vector<key_type> froms = {min_key, 1, max_key - 1, max_key};
      for (int i = 0; i < 30; ++i) {
        froms.push_back(!model.empty() && i % 2 ? std::next(model.begin(), static_cast<long>(rng() % model.size()))->first
                                                : rng());
      }
      for (const key_type from : froms) {
        for (const std::size_t limit : {std::size_t{0}, std::size_t{1}, std::size_t{7}, n, n + 3}) {
          std::vector<entry> want;
          b->iterate(from, limit, [&](key_type k, value_type v) { want.push_back({k, v}); });
          std::vector<entry> got(limit + 1, entry{42, 42});
          const std::size_t wrote = b->copy_ordered(from, limit, got.data());
          ASSERT_EQ(wrote, want.size()) << "from " << from << " limit " << limit << " state " << state;
          EXPECT_EQ(got[wrote].key, 42u) << "wrote past its count";
          got.resize(wrote);
          ASSERT_EQ(got, want) << "from " << from << " limit " << limit << " state " << state;
          // From start_scan's start, on a guessed block (from any fences,
          // around `from` or not) and on every block: the seek runs both ways.
          if (!b->sorted()) {
            ASSERT_LT(b->start_scan(from, 0, limit).block, 0) << "a start on a BPA that is not sorted";
            continue;
          }
          const key_type lo = model.empty() ? min_key : model.begin()->first;
          const key_type hi = model.empty() ? max_key : model.rbegin()->first;
          std::vector<std::size_t> guesses;
          for (const auto& [f_lo, f_hi] : {std::pair{min_key, max_key}, std::pair{lo, hi}, std::pair{hi, hi},
                                           std::pair{lo / 2, lo / 2 + 1}}) {
            guesses.push_back(b->start_route(from, f_lo, f_hi));
          }
          for (std::size_t block = 0; block < B::num_blocks; ++block) guesses.push_back(block);
          for (const std::size_t guess : guesses) {
            const auto start = b->start_scan(from, guess, limit);
            ASSERT_GE(start.block, 0);
            std::vector<entry> from_start(limit + 1, entry{42, 42});
            ASSERT_EQ(b->copy_ordered(from, limit, from_start.data(), start), want.size())
                << "from " << from << " limit " << limit << " guess " << guess;
            from_start.resize(want.size());
            ASSERT_EQ(from_start, want) << "from " << from << " limit " << limit << " guess " << guess;
          }
        }
      }
    }
    EXPECT_NO_THROW(b->verify());
  }
}

TYPED_TEST(BpaTest, AssignExtractAndSplit) {
  using B = TypeParam;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2}, B::capacity}) {
    if (n > B::capacity) continue;
    std::vector<key_type> keys;
    std::vector<value_type> values;
    for (std::size_t i = 0; i < n; ++i) {
      keys.push_back(i == 0 ? min_key : (i + 1 == n ? max_key : i * 1000));
      values.push_back(i);
    }
    auto b = this->make();
    b->assign_sorted(keys.data(), values.data(), n);
    EXPECT_NO_THROW(b->verify());
    EXPECT_EQ(b->size(), n);
    std::vector<key_type> k2(n);
    std::vector<value_type> v2(n);
    b->extract_sorted(k2.data(), v2.data());
    EXPECT_EQ(k2, keys);
    EXPECT_EQ(v2, values);
    if (n >= 2) {
      auto right = this->make();
      const key_type sep = b->split_into(*right);
      EXPECT_EQ(sep, keys[n / 2]);
      EXPECT_EQ(b->size(), n / 2);
      EXPECT_EQ(right->size(), n - n / 2);
      EXPECT_NO_THROW(b->verify());
      EXPECT_NO_THROW(right->verify());
      EXPECT_EQ(b->count(min_key, sep - 1), b->size());
      EXPECT_EQ(right->count(sep, max_key), right->size());
    }
  }
}

TYPED_TEST(BpaTest, ApplyPathsAgreeAndStopWhenFull) {
  using B = TypeParam;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    std::mt19937_64 rng(seed);
    const std::size_t start = static_cast<std::size_t>(rng() % (B::capacity + 1));
    auto a = this->make();
    auto model = this->fill(*a, start, seed);
    if (seed % 2) a->sort();  // sorted blocks: per-op lookups go through their windows
    auto b = std::make_unique<B>(*a);
    test::key_source keys(test::key_pattern::narrow, B::capacity * 2, seed);
    std::vector<point_op> run(1 + rng() % (2 * B::capacity + 4));
    for (auto& op : run) op = {keys(), rng() % 100, static_cast<op_kind>(rng() % 4)};
    std::stable_sort(run.begin(), run.end(), [](const point_op& x, const point_op& y) { return x.key < y.key; });
    std::vector<point_result> ra(run.size()), rb(run.size());
    const std::size_t na = a->apply(run.data(), run.size(), ra.data(), apply_path::per_op);
    const std::size_t nb = b->apply(run.data(), run.size(), rb.data(), apply_path::merge);
    ASSERT_EQ(na, nb) << "seed " << seed;
    // Replay the applied prefix on the model.
    for (std::size_t i = 0; i < na; ++i) {
      const point_op& op = run[i];
      const auto it = model.find(op.key);
      const bool found = it != model.end();
      EXPECT_EQ(ra[i].found, found) << "seed " << seed << " op " << i;
      EXPECT_EQ(rb[i].found, found) << "seed " << seed << " op " << i;
      if (found) {
        EXPECT_EQ(ra[i].value, it->second);
        EXPECT_EQ(rb[i].value, it->second);
      }
      this->replay(op, model);
    }
    if (na < run.size()) {  // stopped: the next op adds a key to a full leaf
      EXPECT_EQ(model.size(), B::capacity);
      EXPECT_TRUE(run[na].kind == op_kind::put || run[na].kind == op_kind::insert);
      EXPECT_EQ(model.count(run[na].key), 0u);
    }
    this->expect_same(*a, model);
    this->expect_same(*b, model);
  }
}

// Runs applied op by op whose keys are spread over the blocks: a key moves
// on from the block of the key before by none, a few or more blocks than
// `advance` counts at once, in BPAs with few or all blocks in use, with the
// keys 0, 1, UINT64_MAX - 1 and UINT64_MAX in every run (present or not).
TYPED_TEST(BpaTest, PerOpRunsSpreadOverTheBlocksWithEdgeKeys) {
  using B = TypeParam;
  const std::size_t almost_full = B::capacity > 4 ? B::capacity - 4 : B::capacity;
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, B::capacity / 8, B::capacity / 2, almost_full}) {
    for (int state = 0; state < 3; ++state) {  // 0: as inserted, 1: flushed, 2: sorted
      auto base = this->make();
      const auto loaded = this->fill(*base, n, 90 + n + state);
      if (state >= 1) base->flush();
      if (state == 2) base->sort();
      if (n > 2 && state >= 1) {  // so that 0 and UINT64_MAX may be absent too
        ASSERT_TRUE(base->erase(state == 1 ? min_key : max_key));
      }
      auto start = loaded;
      if (n > 2 && state >= 1) start.erase(state == 1 ? min_key : max_key);
      for (const std::size_t stride : {1, 3, 9, 40, 150}) {
        auto b = std::make_unique<B>(*base);
        auto model = start;
        std::mt19937_64 rng(stride * 7 + n + static_cast<std::size_t>(state));
        std::vector<point_op> run;
        const auto op_on = [&](key_type k) { run.push_back({k, rng() % 1000, static_cast<op_kind>(rng() % 4)}); };
        for (const key_type k : {min_key, key_type{1}, max_key - 1, max_key}) op_on(k);
        std::size_t i = 0;
        for (const auto& [k, v] : start) {
          if (i++ % stride != 0) continue;
          op_on(k);
          if (k != max_key && rng() % 4 == 0) op_on(k + 1);  // most likely absent
        }
        std::stable_sort(run.begin(), run.end(), [](const point_op& x, const point_op& y) { return x.key < y.key; });
        std::vector<point_result> results(run.size());
        const std::size_t applied = b->apply(run.data(), run.size(), results.data(), apply_path::per_op);
        for (std::size_t j = 0; j < applied; ++j) {
          const point_op& op = run[j];
          const auto it = model.find(op.key);
          ASSERT_EQ(results[j].found, it != model.end())
              << "n " << n << " state " << state << " stride " << stride << " op " << j << " key " << op.key;
          ASSERT_EQ(results[j].value, it != model.end() ? it->second : 0) << "key " << op.key;
          this->replay(op, model);
        }
        if (applied < run.size()) {  // stopped: the next op adds a key to a full BPA
          ASSERT_EQ(model.size(), B::capacity);
          ASSERT_EQ(model.count(run[applied].key), 0u);
        }
        this->expect_same(*b, model);
      }
    }
  }
}

// lookup_lines counts the lines of a leaf that lookups read: the first line
// (fences and counts), the header, each key's window of two entry lines
// (which hold the values), the log when a key is not in its block; and the
// entry lines writes dirty.
TEST(BpaLookupLines, CountsTheLinesLookupsRead) {
  using B = basic_bpa<32, 32, 32>;  // the default leaf, whatever the build's
  using L = basic_leaf<B>;
  constexpr std::uint64_t header_lines = 4;  // 32 keys of 8 bytes
  constexpr std::uint64_t block_lines = 8;   // 32 entries of 16 bytes
  auto leaf = std::make_unique<L>();  // aligned as a leaf store aligns them
  B& b = leaf->data;
  std::vector<key_type> keys(B::capacity), values(B::capacity);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    keys[i] = (i + 1) * 1'000'003;
    values[i] = i;
  }
  b.assign_sorted(keys.data(), values.data(), keys.size());
  ASSERT_EQ(b.block_count(), B::num_blocks);
  // No lookup: the first line alone.
  EXPECT_EQ(b.lookup_lines(keys.data(), 0).read, 1u);
  // Every key: every line of the leaf but the log's.
  const B::line_tally all = b.lookup_lines(keys.data(), keys.size(), 0, [](std::size_t) { return true; });
  EXPECT_EQ(all.read, 1 + header_lines + block_lines * B::num_blocks);
  EXPECT_EQ(all.written, block_lines * B::num_blocks);
  // One key, its block guessed right: the first line, a header line or two,
  // and its window's two lines, which hold its value too.
  std::mt19937_64 rng(9);
  for (int t = 0; t < 200; ++t) {
    const std::size_t i = rng() % keys.size();
    const B::line_tally one = b.lookup_lines(&keys[i], 1, i / B::block_capacity);
    EXPECT_GE(one.read, 4u) << i;
    EXPECT_LE(one.read, 5u) << i;
    EXPECT_EQ(one.written, 0u);
  }
  // Sought from the first block, a key of the last reads the whole header.
  EXPECT_GE(b.lookup_lines(&keys.back(), 1, 0).read, 1 + header_lines + 2);
  // Neighbouring keys share their leaf's lines: the second adds at most a
  // window line.
  const std::uint64_t first = b.lookup_lines(&keys[100], 1).read;
  const std::uint64_t two = b.lookup_lines(&keys[100], 2).read;
  EXPECT_GE(two, first);
  EXPECT_LE(two, first + 1);
  // A key in no block is sought in the log once it holds keys: its line
  // more; a put of it would write a log line.
  const key_type absent = keys[500] + 1;
  const std::uint64_t before = b.lookup_lines(&absent, 1).read;
  ASSERT_EQ(b.upsert(keys.back() + 1, 1), upsert_status::full);  // full: nothing added
  ASSERT_TRUE(b.erase(keys[0]));
  ASSERT_EQ(b.upsert(keys.back() + 1, 1), upsert_status::inserted);  // into the log
  EXPECT_EQ(b.lookup_lines(&absent, 1).read, before + 1);
  EXPECT_EQ(b.lookup_lines(&absent, 1, 0, [](std::size_t) { return true; }).written, 2u);
  // An unsorted block is read whole: the first line, the header's first and
  // 20 entries (five lines).
  auto small = std::make_unique<L>();
  for (key_type k = 11; k <= 20; ++k) small->data.upsert(k, k);  // into the log
  small->data.flush();                                             // then block 0
  for (key_type k = 1; k <= 10; ++k) small->data.upsert(k, k);
  small->data.flush();  // appended behind the larger keys
  ASSERT_FALSE(small->data.sorted());
  const key_type probe = 1;
  EXPECT_EQ(small->data.lookup_lines(&probe, 1).read, 7u);
}

}  // namespace
