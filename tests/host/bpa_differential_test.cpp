// Differential test of one bpa against a std::map model: random ops over many
// seeds and key patterns, edge keys, repeated keys, delete/insert/delete and
// long sorted runs, with verify() at every checkpoint (and, in the debug
// preset, inside every flush).
#include <tandem/host/bpa.hpp>

#include "support/keys.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::host;
using test::key_pattern;

/// Runs `ops` random ops on one B and the model; adds the ops checked to `checked`.
template <class B>
void run_differential(key_pattern pattern, std::uint64_t seed, std::size_t ops, std::size_t& checked) {
  SCOPED_TRACE(::testing::Message() << "pattern " << test::name(pattern) << " seed " << seed);
  auto b = std::make_unique<B>();
  std::map<key_type, value_type> model;
  test::key_source keys(pattern, B::capacity + B::capacity / 2, seed);
  auto& rng = keys.rng();
  auto check_all = [&] {
    ASSERT_NO_THROW(b->verify());
    ASSERT_EQ(b->size(), model.size());
    auto it = model.begin();
    b->iterate(min_key, model.size(), [&](key_type k, value_type v) {
      EXPECT_EQ(k, it->first);
      EXPECT_EQ(v, it->second);
      ++it;
    });
    EXPECT_EQ(it, model.end());
  };

  for (std::size_t i = 0; i < ops; ++i) {
    const key_type k = keys();
    const value_type v = rng();
    const auto it = model.find(k);
    const bool present = it != model.end();
    const bool room = model.size() < B::capacity;
    const unsigned dice = static_cast<unsigned>(rng() % 100);
    if (dice < 25) {
      value_type prev = 0;
      const upsert_status s = b->upsert(k, v, &prev);
      if (present) {
        ASSERT_EQ(s, upsert_status::replaced);
        ASSERT_EQ(prev, it->second);
        it->second = v;
      } else if (room) {
        ASSERT_EQ(s, upsert_status::inserted);
        model.emplace(k, v);
      } else {
        ASSERT_EQ(s, upsert_status::full);
      }
    } else if (dice < 40) {
      value_type kept = 0;
      const insert_status s = b->insert(k, v, &kept);
      if (present) {
        ASSERT_EQ(s, insert_status::present);
        ASSERT_EQ(kept, it->second);
      } else {
        ASSERT_EQ(s, room ? insert_status::inserted : insert_status::full);
        if (room) model.emplace(k, v);
      }
    } else if (dice < 60) {
      value_type gone = 0;
      ASSERT_EQ(b->erase(k, &gone), present);
      if (present) {
        ASSERT_EQ(gone, it->second);
        model.erase(it);
        // delete / insert / delete of the same key, back to back
        if (rng() % 4 == 0) {
          ASSERT_EQ(b->insert(k, v), insert_status::inserted);
          ASSERT_TRUE(b->erase(k));
          ASSERT_FALSE(b->erase(k));
        }
      }
    } else if (dice < 80) {
      const auto got = b->get(k);
      ASSERT_EQ(got.has_value(), present) << "get " << k;
      if (present) {
        ASSERT_EQ(*got, it->second);
      }
    } else if (dice < 87) {
      const auto got = b->lower_bound(k);
      const auto want = model.lower_bound(k);
      ASSERT_EQ(got.has_value(), want != model.end());
      if (got) {
        ASSERT_EQ(got->key, want->first);
      }
    } else if (dice < 92) {
      key_type lo = k, hi = keys();
      if (lo > hi) std::swap(lo, hi);
      std::size_t want = 0;
      for (auto m = model.lower_bound(lo); m != model.end() && m->first <= hi; ++m) ++want;
      ASSERT_EQ(b->count(lo, hi), want);
      std::size_t mapped = 0;
      b->map(lo, hi, [&](key_type mk, value_type mv) {
        ++mapped;
        EXPECT_EQ(model.at(mk), mv);
      });
      ASSERT_EQ(mapped, want);
    } else if (dice < 97) {
      // A long sorted run through apply: ascending keys, all kinds.
      std::vector<point_op> run(1 + rng() % 200);
      key_type next = keys();
      for (auto& op : run) {
        op = {next, rng(), static_cast<op_kind>(rng() % 4)};
        if (rng() % 3) next = next == max_key ? max_key : next + 1 + rng() % 3;
      }
      std::sort(run.begin(), run.end(), [](const point_op& x, const point_op& y) { return x.key < y.key; });
      std::vector<point_result> res(run.size());
      const apply_path path = static_cast<apply_path>(rng() % 3);
      const std::size_t applied = b->apply(run.data(), run.size(), res.data(), path);
      for (std::size_t j = 0; j < applied; ++j) {
        const auto m = model.find(run[j].key);
        ASSERT_EQ(res[j].found, m != model.end()) << "run op " << j;
        if (m != model.end()) {
          ASSERT_EQ(res[j].value, m->second);
        }
        switch (run[j].kind) {
          case op_kind::get: break;
          case op_kind::put: model[run[j].key] = run[j].value; break;
          case op_kind::insert: model.emplace(run[j].key, run[j].value); break;
          case op_kind::erase: model.erase(run[j].key); break;
        }
      }
      if (applied < run.size()) {
        ASSERT_EQ(model.size(), B::capacity);
      }
      checked += run.size();
      ASSERT_NO_THROW(b->verify());
    } else {
      b->flush();
      check_all();
    }
    ++checked;
  }
  check_all();
}

class BpaDifferential : public ::testing::TestWithParam<key_pattern> {};

TEST_P(BpaDifferential, DefaultGeometry) {
  std::size_t total = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) run_differential<bpa>(GetParam(), seed, 25'000, total);
  EXPECT_GE(total, 300'000u);
}

TEST_P(BpaDifferential, SmallGeometries) {
  std::size_t total = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    run_differential<basic_bpa<4, 4, 4>>(GetParam(), seed, 10'000, total);
    run_differential<basic_bpa<3, 5, 7>>(GetParam(), seed, 10'000, total);
    run_differential<basic_bpa<1, 2, 3>>(GetParam(), seed, 2'000, total);
  }
  EXPECT_GE(total, 250'000u);
}

INSTANTIATE_TEST_SUITE_P(Patterns, BpaDifferential,
                         ::testing::Values(key_pattern::uniform, key_pattern::narrow, key_pattern::clustered,
                                           key_pattern::edges),
                         [](const auto& param_info) { return std::string(test::name(param_info.param)); });

}  // namespace
