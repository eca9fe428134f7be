// Leaf guides and hints (core/leaf_guide.hpp): a guide's hints are the
// BPA's own lookup windows; a compact guide's name the block or are unsure; a lookup from any hint, fresh, stale or
// garbage, answers only what the BPA holds; the leaf phase answers gets
// routed with fresh, stale and garbage hints as the model does.
#include <tandem/batch.hpp>
#include <tandem/core/inner_layout.hpp>
#include <tandem/core/leaf_guide.hpp>
#include <tandem/host/bpa.hpp>
#include <tandem/host/leaf_phase.hpp>
#include <tandem/host/leaf_store.hpp>
#include <tandem/host/route.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <memory>
#include <random>
#include <set>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::host;

template <class B>
class LeafHintTest : public ::testing::Test {};

using geometries = ::testing::Types<basic_bpa<1, 1, 1>, basic_bpa<4, 4, 4>, basic_bpa<3, 5, 7>, basic_bpa<32, 32, 32>,
                                    basic_bpa<64, 64, 32>>;
TYPED_TEST_SUITE(LeafHintTest, geometries);

template <class B>
struct bpa_state {
  std::unique_ptr<B> b;
  std::map<key_type, value_type> model;
  bool log_empty;
};

/// BPAs of `B` in several states, each with its model: inserted op by op
/// (log and unsorted blocks), rebuilt from sorted keys, sorted, with keys
/// erased from sorted blocks, of small keys; 0 and UINT64_MAX among the keys.
template <class B>
std::vector<bpa_state<B>> states(std::uint64_t seed) {
  std::vector<bpa_state<B>> out;
  std::mt19937_64 rng(seed);
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, B::capacity / 2, B::capacity - 1, B::capacity}) {
    for (int form = 0; form < 4; ++form) {
      auto b = std::make_unique<B>();
      std::map<key_type, value_type> model;
      std::vector<key_type> keys = {min_key, max_key, 1, max_key - 1};
      while (keys.size() < n) keys.push_back(form == 3 ? rng() % (4 * B::capacity) : rng());
      keys.resize(n);
      for (key_type k : keys) model[k] = k ^ 0x9e3779b97f4a7c15ULL;
      if (form == 0) {
        for (const auto& [k, v] : model) b->upsert(k, v);
      } else {
        std::vector<key_type> ks;
        std::vector<value_type> vs;
        for (const auto& [k, v] : model) {
          ks.push_back(k);
          vs.push_back(v);
        }
        b->assign_sorted(ks.data(), vs.data(), ks.size());
        if (form == 2) {  // erase every third key from the sorted blocks
          for (std::size_t i = 0; i < ks.size(); i += 3) {
            EXPECT_TRUE(b->erase(ks[i]));
            model.erase(ks[i]);
          }
        }
      }
      if (form == 1) b->sort();
      out.push_back({std::move(b), std::move(model), form != 0});
    }
  }
  return out;
}

/// The keys to look up in a BPA of `model`: every key, its neighbours, the
/// edge keys and random ones.
std::vector<key_type> probes(const std::map<key_type, value_type>& model, std::mt19937_64& rng) {
  std::vector<key_type> ks = {min_key, 1, max_key - 1, max_key};
  for (const auto& [k, v] : model) {
    ks.push_back(k);
    ks.push_back(k + 1);
    ks.push_back(k - 1);
  }
  for (int i = 0; i < 64; ++i) ks.push_back(rng());
  return ks;
}

TYPED_TEST(LeafHintTest, GuideHintsAreTheBpasOwnLookupWindows) {
  using B = TypeParam;
  constexpr bool guided = B::num_blocks <= guide_blocks && B::block_capacity <= 0xff;
  std::mt19937_64 rng(7);
  for (auto& [b, model, log_empty] : states<B>(11)) {
    leaf_guide g;
    b->guide(g);
    if (!guided) {
      EXPECT_EQ(g.block_count, 0u);
      EXPECT_EQ(guide_hint(g, 42), no_hint);
      continue;
    }
    ASSERT_EQ(g.block_count, b->block_count());
    for (key_type k : probes(model, rng)) {
      const auto s = b->start_get(k);
      ASSERT_EQ(static_cast<std::size_t>(guide_hint(g, k)),
                static_cast<std::size_t>(s.block) * B::block_capacity + static_cast<std::size_t>(s.index))
          << "key " << k;
      value_type v = 1;
      std::uint8_t f = 2;
      const bool answered = b->finish_hinted(b->start_hinted(guide_hint(g, k)), k, &v, &f);
      const auto it = model.find(k);
      if (answered) {
        ASSERT_NE(it, model.end()) << "key " << k;
        ASSERT_EQ(v, it->second);
        ASSERT_EQ(f, 1);
      } else {
        // Only a key of the log is not found at its hint.
        ASSERT_TRUE(it == model.end() || !log_empty) << "key " << k;
      }
    }
  }
}

TYPED_TEST(LeafHintTest, AnyHintAnswersOnlyWhatTheBpaHolds) {
  using B = TypeParam;
  std::mt19937_64 rng(3);
  for (auto& [b, model, log_empty] : states<B>(5)) {
    const std::vector<key_type> ks = probes(model, rng);
    // Every hint a block can name, and past the blocks, for a sample of keys.
    const std::size_t hints = B::num_blocks * B::block_capacity + 40;
    for (std::size_t i = 0; i < ks.size(); i += 1 + ks.size() / 64) {
      const key_type k = ks[i];
      const auto it = model.find(k);
      for (std::size_t h = 0; h <= hints; ++h) {
        const leaf_hint hint = h == hints ? no_hint : h + 1 == hints ? unsure_hint : static_cast<leaf_hint>(h);
        value_type v = 1;
        std::uint8_t f = 2;
        if (b->finish_hinted(b->start_hinted(hint), k, &v, &f)) {
          ASSERT_NE(it, model.end()) << "key " << k << " hint " << hint;
          ASSERT_EQ(v, it->second);
          ASSERT_EQ(f, 1);
        } else {
          ASSERT_EQ(f, 2) << "nothing written without an answer";
        }
      }
    }
  }
}

// A compact guide's hints, with fences around the whole key space or tight
// around the keys: a key the blocks hold is unsure or found at its hint
// (the hint names its block); every hint answers only what the BPA holds.
TYPED_TEST(LeafHintTest, CompactHintsNameTheBlockThatHoldsTheKey) {
  using B = TypeParam;
  constexpr std::size_t window = std::min<std::size_t>(8, B::block_capacity);
  constexpr bool guided = B::num_blocks <= guide_blocks && B::block_capacity <= 0xff && (window & (window - 1)) == 0;
  std::mt19937_64 rng(23);
  for (auto& [b, model, log_empty] : states<B>(29)) {
    for (const bool tight : {false, true}) {
      const key_type low = tight && !model.empty() ? model.begin()->first : min_key;
      const bool bounded = tight && !model.empty() && model.rbegin()->first < max_key;
      const key_type next_low = bounded ? model.rbegin()->first + 1 : max_key;
      compact_guide g;
      b->fill_compact_guide(g, low, next_low, bounded);
      if (!guided) {
        EXPECT_EQ(g.exact & 1, 0u);
        EXPECT_EQ(compact_hint(g, 42, low, next_low, bounded), no_hint);
        continue;
      }
      ASSERT_EQ(g.block_count, b->block_count());
      std::set<key_type> unsure_keys;
      for (key_type k : probes(model, rng)) {
        if (k < low || (bounded && k >= next_low)) continue;  // outside the leaf
        const leaf_hint h = compact_hint(g, k, low, next_low, bounded);
        ASSERT_NE(h, no_hint) << "key " << k;
        const auto it = model.find(k);
        if (h == unsure_hint) {
          if (it != model.end()) unsure_keys.insert(k);
          ASSERT_EQ(b->start_hinted(h).block, B::unsure_block);
          continue;
        }
        ASSERT_LT(h / B::block_capacity, b->block_count()) << "key " << k;
        value_type v = 1;
        std::uint8_t f = 2;
        if (b->finish_hinted(b->start_hinted(h), k, &v, &f)) {
          ASSERT_NE(it, model.end()) << "key " << k;
          ASSERT_EQ(v, it->second);
        } else {
          ASSERT_TRUE(it == model.end() || !log_empty) << "key " << k << " hint " << h;  // only the log's keys
        }
      }
      // Random keys over the whole space are far apart: at most a few share
      // a place with a key of the block beside them.
      const auto small = std::distance(model.begin(), model.lower_bound(key_type{1} << 40));
      const bool spread = model.size() >= 64 && small <= 4;
      if (spread && B::num_blocks >= 8) {
        EXPECT_LE(unsure_keys.size() * 8, model.size()) << unsure_keys.size() << " unsure";
      }
    }
  }
}

// Leaves loaded as at 2^31 keys (768 uniform keys a leaf, a leaf 2^-21.4 of
// the key space): compact guides hint most keys, at windows that read about
// as many lines as the full guides' windows.
TEST(LeafHints, CompactGuidesHintMostKeysOfLoadedLeavesAtTheirWindow) {
  using B = basic_bpa<32, 32, 32>;
  std::mt19937_64 rng(31);
  const key_type width = max_key / 2'800'000;
  std::size_t keys = 0, unsure = 0, full_lines = 0, compact_lines = 0;
  for (int leaf = 0; leaf < 300; ++leaf) {
    const key_type low = width * static_cast<key_type>(rng() % 2'700'000);
    std::vector<key_type> ks;
    while (ks.size() < 768) ks.push_back(low + rng() % width);
    std::sort(ks.begin(), ks.end());
    ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
    const std::vector<value_type> vs(ks.begin(), ks.end());
    auto b = std::make_unique<B>();
    b->assign_sorted(ks.data(), vs.data(), ks.size());
    leaf_guide full;
    b->guide(full);
    compact_guide g;
    b->fill_compact_guide(g, low, low + width, true);
    for (const key_type k : ks) {
      auto lines_from = [&](leaf_hint h) {
        std::vector<std::uintptr_t> lines;
        b->hinted_entries(h, k, [&](const auto* e) { lines.push_back(reinterpret_cast<std::uintptr_t>(e) / 64); });
        std::sort(lines.begin(), lines.end());
        return static_cast<std::size_t>(std::unique(lines.begin(), lines.end()) - lines.begin());
      };
      ++keys;
      full_lines += lines_from(guide_hint(full, k));
      const leaf_hint h = compact_hint(g, k, low, low + width, true);
      if (h == unsure_hint) {
        ++unsure;
        continue;
      }
      value_type v = 0;
      std::uint8_t f = 0;
      ASSERT_TRUE(b->finish_hinted(b->start_hinted(h), k, &v, &f)) << "key " << k;
      compact_lines += lines_from(h);
    }
  }
  const double unsure_share = static_cast<double>(unsure) / static_cast<double>(keys);
  const double full_mean = static_cast<double>(full_lines) / static_cast<double>(keys);
  const double compact_mean = static_cast<double>(compact_lines) / static_cast<double>(keys - unsure);
  std::printf("compact guides: %.2f%% of %zu keys unsure; block lines a hinted key %.3f (full guides %.3f)\n",
              100 * unsure_share, keys, compact_mean, full_mean);
  EXPECT_LT(unsure_share, 0.02);
  EXPECT_LT(compact_mean, full_mean + 0.1);
}

// apply_per_op with hints (column_run::hints): runs of mixed point ops,
// keys present and absent, repeated, the edge keys, with hints from the
// BPA's guide before the run (stale once the run's first writes land),
// garbage hints and no hints, answer and leave the BPA as the model does.
TYPED_TEST(LeafHintTest, RunsOfPointOpsWithAnyHintsApplyLikeTheModel) {
  using B = TypeParam;
  std::mt19937_64 rng(19);
  for (int mode = 0; mode < 3; ++mode) {
    for (auto& [b, model, log_empty] : states<B>(29 + static_cast<std::uint64_t>(mode))) {
      (void)log_empty;
      std::vector<key_type> ks = probes(model, rng);
      std::vector<key_type> keys;
      for (std::size_t i = 0; i < 3 * B::capacity / 2 + 4; ++i) keys.push_back(ks[rng() % ks.size()]);
      std::sort(keys.begin(), keys.end());
      const std::size_t n = keys.size();
      std::vector<value_type> values(n);
      std::vector<std::uint8_t> kinds(n);
      std::vector<value_type> results(n, 77);
      std::vector<std::uint8_t> found(n, 2);
      std::vector<leaf_hint> hints(n);
      leaf_guide g;
      b->guide(g);
      for (std::size_t i = 0; i < n; ++i) {
        values[i] = rng();
        kinds[i] = static_cast<std::uint8_t>(rng() % 4);  // get, put, insert, erase
        hints[i] = mode == 0 ? guide_hint(g, keys[i]) : static_cast<leaf_hint>(rng());
      }
      hint_counts counts;
      const column_run run{keys.data(), values.data(), kinds.data(), results.data(), found.data(),
                           mode == 2 ? nullptr : hints.data(), &counts};
      std::size_t done = 0;
      while (done < n) {
        const std::size_t k = b->apply(run.advanced(done), n - done, apply_path::per_op);
        for (std::size_t i = done; i < done + k; ++i) {  // the model, op by op
          const auto it = model.find(keys[i]);
          ASSERT_EQ(found[i], it != model.end() ? 1 : 0) << "op " << i << " key " << keys[i];
          ASSERT_EQ(results[i], it != model.end() ? it->second : 0) << "op " << i << " key " << keys[i];
          switch (static_cast<op_kind>(kinds[i])) {
            case op_kind::get: break;
            case op_kind::put: model[keys[i]] = values[i]; break;
            case op_kind::insert: model.emplace(keys[i], values[i]); break;
            case op_kind::erase: model.erase(keys[i]); break;
          }
        }
        done += k;
        if (done < n) {  // full: make room as a split would, then go on
          ASSERT_EQ(b->size(), B::capacity);
          const key_type gone = model.begin()->first == keys[done] ? model.rbegin()->first : model.begin()->first;
          ASSERT_TRUE(b->erase(gone));
          model.erase(gone);
        }
      }
      ASSERT_NO_THROW(b->verify());
      ASSERT_EQ(b->size(), model.size());
      for (const auto& [k, v] : model) ASSERT_EQ(b->get(k), std::optional<value_type>(v)) << "key " << k;
      // Every op applied op by op is counted once: at its hint, or its hint
      // missing or stale; without hints nothing is.
      if (mode == 2) {
        EXPECT_EQ(counts.hinted + counts.stale, 0u);
      } else {
        EXPECT_LE(counts.hinted + counts.stale, n);
        if (mode == 0 && g.block_count != 0) {
          EXPECT_GT(counts.hinted, 0u);
        }
      }
    }
  }
}

/// A store bulk-loaded with `n` keys (0 and UINT64_MAX among them), its
/// table and layout, and the model.
struct loaded {
  leaf_store store;
  leaf_table table;
  inner_layout layout;
  std::map<key_type, value_type> model;
};

std::unique_ptr<loaded> load(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::map<key_type, value_type> model;
  model[min_key] = 7;
  model[max_key] = 8;
  while (model.size() < n) {
    const key_type k = rng();
    model[k] = k * 3;
  }
  std::vector<key_type> ks;
  std::vector<value_type> vs;
  for (const auto& [k, v] : model) {
    ks.push_back(k);
    vs.push_back(v);
  }
  auto l = std::make_unique<loaded>();
  l->store = leaf_store::bulk_load(ks.data(), vs.data(), ks.size(), 0.75);
  l->table = l->store.table();
  l->layout = inner_layout::build(l->table.low_keys.data(), l->table.ids.data(), l->table.size(), 16);
  l->model = std::move(model);
  return l;
}

enum class hints_kind { fresh, stale, garbage, none };

TEST(LeafHints, LeafPhaseAnswersGetsWithFreshStaleAndGarbageHints) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    auto l = load(60000 + seed * 1000, seed);
    // Guides as loaded: stale once the leaves change below.
    std::vector<leaf_guide> guides(l->store.leaf_count());
    for (std::size_t id = 0; id < guides.size(); ++id) l->store[static_cast<leaf_id>(id)].data.guide(guides[id]);
    for (const hints_kind kind : {hints_kind::fresh, hints_kind::garbage, hints_kind::stale, hints_kind::none}) {
      std::mt19937_64 rng(seed * 10 + static_cast<std::uint64_t>(kind));
      if (kind == hints_kind::stale) {
        // Erase runs of 256 keys in every 768 and insert new ones inside
        // the leaves' fences, then flush: counts move, and where a leaf is
        // redistributed its keys move to other blocks.
        std::vector<key_type> present;
        for (const auto& [k, v] : l->model) present.push_back(k);
        for (std::size_t i = 0; i < present.size(); ++i) {
          if ((i / 256) % 3 != 0) continue;
          const leaf_id id = l->store.walk_right(0, present[i]);
          ASSERT_TRUE(l->store[id].data.erase(present[i]));
          l->model.erase(present[i]);
          const key_type fresh = present[i] + 1 + rng() % 7;
          auto& leaf = l->store[id];
          if (i % 4 == 0 && fresh <= leaf.high && fresh > present[i] && !l->model.count(fresh) &&
              leaf.data.upsert(fresh, fresh ^ 1) == upsert_status::inserted) {
            l->model[fresh] = fresh ^ 1;
          }
        }
        // Every other leaf redistributed: its keys move between blocks.
        for (std::size_t id = 0; id < l->store.leaf_count(); ++id) {
          bpa& data = l->store[static_cast<leaf_id>(id)].data;
          data.flush();
          if (id % 2 == 1) continue;
          std::vector<key_type> ks;
          std::vector<value_type> vs;
          data.iterate(min_key, bpa::capacity, [&](key_type k, value_type v) {
            ks.push_back(k);
            vs.push_back(v);
          });
          data.assign_sorted(ks.data(), vs.data(), ks.size());
        }
      }
      // Gets sparse over the leaves (the pipelined path): present keys,
      // absent neighbours, the edge keys, repeats.
      std::vector<key_type> present;
      for (const auto& [k, v] : l->model) present.push_back(k);
      std::vector<key_type> keys = {min_key, max_key, 1, max_key - 1};
      const std::size_t n = l->store.leaf_count() * 4;
      while (keys.size() < n) {
        const key_type k = present[rng() % present.size()];
        keys.push_back(rng() % 4 == 0 ? k + 1 : k);
      }
      batch b;
      b.get(keys);
      std::vector<std::uint32_t> positions(n), group_begin(n + 1), group_ordinal(n);
      std::vector<key_type> routed_keys(n);
      std::vector<leaf_hint> hints(n);
      routed_batch_view rt;
      rt.positions = positions.data();
      rt.keys = routed_keys.data();
      rt.group_begin = group_begin.data();
      rt.group_ordinal = group_ordinal.data();
      route_workspace ws;
      route_sorted(l->layout.view(), keys.data(), nullptr, nullptr, n, 0, rt, ws);
      ASSERT_TRUE(rt.key_sorted);
      ASSERT_LT(n, dense_gets * rt.groups) << "the batch takes the pipelined path";
      for (std::size_t g = 0; g < rt.groups; ++g) {
        const leaf_id id = l->layout.leaf_ids()[rt.group_ordinal[g]];
        for (std::uint32_t i = rt.group_begin[g]; i < rt.group_begin[g + 1]; ++i) {
          leaf_guide now;
          l->store[id].data.guide(now);
          hints[i] = kind == hints_kind::garbage ? static_cast<leaf_hint>(rng())
                     : kind == hints_kind::stale ? guide_hint(guides[id], rt.keys[i])
                                                 : guide_hint(now, rt.keys[i]);
        }
      }
      rt.hints = hints.data();
      rt.hinted = kind != hints_kind::none;
      std::vector<op_status> status(n, op_status::ok);
      std::vector<value_type> values(n, 99);
      std::vector<std::uint8_t> found(n, 2);
      tandem::detail::answer_columns scans;
      leaf_phase_input in;
      in.routes = &rt;
      in.n = n;
      in.leaf_ids = l->layout.leaf_ids().data();
      in.leaf_count = l->layout.leaf_count();
      in.ops = &b;
      in.status = status.data();
      in.gets_only = true;
      leaf_phase_report report;
      leaf_phase_workspace work;
      run_leaf_phase(l->store, in, {values.data(), found.data(), &scans}, report, work);
      std::size_t hits = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const auto it = l->model.find(rt.keys[i]);
        ASSERT_EQ(found[i], it != l->model.end() ? 1 : 0) << "key " << rt.keys[i];
        ASSERT_EQ(values[i], it != l->model.end() ? it->second : 0) << "key " << rt.keys[i];
        hits += it != l->model.end();
      }
      ASSERT_NO_THROW(l->store.verify());
      if (kind == hints_kind::fresh) {
        EXPECT_EQ(report.hinted_ops, hits) << "every present key is found at a fresh hint";
        EXPECT_EQ(report.stale_hints, 0u);
      } else if (kind == hints_kind::none) {
        EXPECT_EQ(report.hinted_ops + report.stale_hints, 0u);
      } else if (kind == hints_kind::stale) {  // stale hints name blocks: only found keys count
        EXPECT_EQ(report.hinted_ops + report.stale_hints, hits);
        EXPECT_GT(report.stale_hints, 0u);
      } else {  // garbage: hints past the blocks count as missing, found or not
        EXPECT_GE(report.hinted_ops + report.stale_hints, hits);
        EXPECT_GT(report.stale_hints, 0u);
      }
    }
  }
}

}  // namespace
