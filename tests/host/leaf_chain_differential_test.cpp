// Differential test of a chain of leaves (leaf_store) with splits against a
// std::map model. Each batch of random point ops is sorted by (key, position),
// routed through the leaf table, and applied one group per leaf (groups on
// different leaves in parallel, so splits allocate leaves concurrently), or
// routed on a stale table so that runs must follow right links.
#include <tandem/host/leaf_store.hpp>

#include "support/keys.hpp"

#include <gtest/gtest.h>

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::host;
using test::key_pattern;

std::size_t route(const leaf_table& t, key_type k) {
  return static_cast<std::size_t>(std::upper_bound(t.low_keys.begin(), t.low_keys.end(), k) - t.low_keys.begin()) - 1;
}

template <class Store>
void run_chain(key_pattern pattern, std::uint64_t seed, std::size_t batches, std::size_t& checked) {
  SCOPED_TRACE(::testing::Message() << "pattern " << test::name(pattern) << " seed " << seed);
  constexpr std::size_t cap = Store::bpa_type::capacity;
  test::key_source keys(pattern, cap * 40, seed);
  auto& rng = keys.rng();

  // Start from a bulk load of part of the key pool.
  std::map<key_type, value_type> model;
  for (std::size_t i = 0; i < cap * 10; ++i) model[keys()] = rng();
  std::vector<key_type> ks;
  std::vector<value_type> vs;
  for (const auto& [k, v] : model) {
    ks.push_back(k);
    vs.push_back(v);
  }
  Store store = Store::bulk_load(ks.data(), vs.data(), ks.size(), 0.5 + 0.5 * static_cast<double>(seed % 2));
  leaf_table stale = store.table();

  for (std::size_t batch = 0; batch < batches; ++batch) {
    // A batch: random kinds, plus now and then a long ascending insert run.
    std::vector<point_op> ops(1 + rng() % (cap * 8));
    for (auto& op : ops) op = {keys(), rng(), static_cast<op_kind>(rng() % 4)};
    if (rng() % 4 == 0) {
      key_type k = keys();
      for (std::size_t i = 0; i < cap * 3 && k < max_key; ++i) ops.push_back({k++, rng(), op_kind::put});
    }
    std::stable_sort(ops.begin(), ops.end(), [](const point_op& a, const point_op& b) { return a.key < b.key; });

    const bool use_stale = rng() % 3 == 0;
    const leaf_table table = use_stale ? stale : store.table();
    // Groups: maximal runs of ops routed to the same leaf.
    std::vector<std::size_t> starts;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (i == 0 || route(table, ops[i].key) != route(table, ops[i - 1].key)) starts.push_back(i);
    }
    starts.push_back(ops.size());
    const std::size_t leaves_before = store.leaf_count();
    std::vector<point_result> results(ops.size());
    std::vector<std::vector<split_record>> splits(starts.size() - 1);
    auto apply_group = [&](std::size_t g) {
      const std::size_t b = starts[g], e = starts[g + 1];
      store.apply(table.ids[route(table, ops[b].key)], ops.data() + b, e - b, results.data() + b, &splits[g]);
    };
    if (use_stale) {
      for (std::size_t g = 0; g + 1 < starts.size(); ++g) apply_group(g);  // stale groups may share leaves
    } else {
      tbb::parallel_for(std::size_t{0}, starts.size() - 1, apply_group);
    }

    for (std::size_t i = 0; i < ops.size(); ++i) {
      const point_op& op = ops[i];
      const auto it = model.find(op.key);
      ASSERT_EQ(results[i].found, it != model.end()) << "batch " << batch << " op " << i << " key " << op.key;
      if (it != model.end()) {
        ASSERT_EQ(results[i].value, it->second);
      }
      switch (op.kind) {
        case op_kind::get: break;
        case op_kind::put: model[op.key] = op.value; break;
        case op_kind::insert: model.emplace(op.key, op.value); break;
        case op_kind::erase: model.erase(op.key); break;
      }
    }
    checked += ops.size();
    ASSERT_NO_THROW(store.verify());
    ASSERT_EQ(store.size(), model.size());
    std::size_t new_leaves = 0;
    for (const auto& s : splits) new_leaves += s.size();
    ASSERT_EQ(store.leaf_count(), leaves_before + new_leaves) << "every split is reported";
    if (batch % 5 == 4) stale = store.table();
  }

  // Final state: every leaf's contents, in table order, equal the model.
  const leaf_table t = store.table();
  auto it = model.begin();
  for (std::size_t i = 0; i < t.size(); ++i) {
    store[t.ids[i]].data.iterate(min_key, cap, [&](key_type k, value_type v) {
      EXPECT_EQ(k, it->first);
      EXPECT_EQ(v, it->second);
      ++it;
    });
  }
  EXPECT_EQ(it, model.end());
}

class LeafChainDifferential : public ::testing::TestWithParam<key_pattern> {};

TEST_P(LeafChainDifferential, SmallLeaves) {
  std::size_t checked = 0;
  for (std::uint64_t seed = 1; seed <= 16; ++seed) {
    run_chain<basic_leaf_store<basic_bpa<4, 4, 8>>>(GetParam(), seed, 60, checked);
    run_chain<basic_leaf_store<basic_bpa<2, 3, 5>>>(GetParam(), seed, 60, checked);
  }
  EXPECT_GE(checked, 100'000u);
}

TEST_P(LeafChainDifferential, DefaultLeaves) {
  std::size_t checked = 0;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) run_chain<leaf_store>(GetParam(), seed, 12, checked);
  EXPECT_GE(checked, 100'000u);
}

INSTANTIATE_TEST_SUITE_P(Patterns, LeafChainDifferential,
                         ::testing::Values(key_pattern::uniform, key_pattern::narrow, key_pattern::clustered,
                                           key_pattern::edges),
                         [](const auto& param_info) { return std::string(test::name(param_info.param)); });

}  // namespace
