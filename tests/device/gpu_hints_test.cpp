// Leaf hints from a GPU route (core/leaf_guide.hpp): with full guides or
// compact ones uploaded, a full-sort route hands each key the hint the
// host computes from the same guide (compact ones: from its leaf's fences
// as well); other orders, and routes after the guides are dropped, give
// none. Tests that need a GPU have "Gpu" in their name.
#include <tandem/core/inner_layout.hpp>
#include <tandem/core/leaf_guide.hpp>
#include <tandem/device/gpu_router.hpp>
#include <tandem/host/bpa.hpp>

#include "device/gpu_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::device;
using test::build;
using test::gpu_batch;
using test::make_batch;
using test::name;
using test::pattern;
using test::random_table;
using test::routed_arrays;
using test::table;

constexpr aggregation all_orders[] = {aggregation::full, aggregation::partial, aggregation::none};

}  // namespace

namespace {

/// Guides of `leaves` leaves with random shapes (some without blocks: no
/// hints), their bounds inside [lo, lo + 2^40).
std::vector<leaf_guide> random_guides(std::size_t leaves, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<leaf_guide> guides(leaves);
  for (leaf_guide& g : guides) {
    g = leaf_guide{};
    if (rng() % 16 == 0) continue;  // block_count 0
    g.block_count = static_cast<std::uint16_t>(1 + rng() % guide_blocks);
    g.block_capacity = 32;
    g.per_line = 4;
    g.window = 8;
    g.sorted_mask = rng() | rng();  // mostly sorted
    const key_type lo = rng() % 2 == 0 ? min_key : rng() >> 1;
    std::vector<key_type> bounds(g.block_count);
    for (key_type& b : bounds) b = lo + (rng() >> 24);
    bounds[0] = lo;
    std::sort(bounds.begin(), bounds.end());
    for (std::size_t b = 0; b < guide_blocks; ++b) {
      g.bound[b] = b < g.block_count ? bounds[b] : max_key;
      g.size[b] = b < g.block_count ? static_cast<std::uint8_t>(rng() % 33) : 0;
    }
  }
  return guides;
}

}  // namespace

// upload_guides: a full-sort route hands each key the hint that the host's
// guide_hint gives for it in its leaf's guide (no_hint past the guides);
// other orders, and routes after the guides are dropped, give none.
TEST(GpuRouter, HintsEqualTheHostsHintsFromTheUploadedGuides) {
  TANDEM_REQUIRE_GPU();
  const table t = random_table(20'000, 31, true);
  const inner_layout layout = build(t, 16);
  const std::size_t leaves = layout.leaf_count();
  const std::vector<leaf_guide> guides = random_guides(leaves, 5);
  for (const aggregation order : all_orders) {
    router_options options;
    options.order = order;
    gpu_router router(options);
    router.upload(layout);
    router.upload_guides(guides.data(), leaves - 7);  // the last leaves have none
    ASSERT_EQ(router.guide_count(), leaves - 7);
    for (const pattern p : {pattern::uniform, pattern::separators, pattern::edges}) {
      for (const std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{300'000}}) {
        SCOPED_TRACE(std::string(name(order)) + ", " + name(p) + ", n " + std::to_string(n));
        const gpu_batch b = make_batch(p, n, n + 3, t);
        routed_arrays out(n, n % 2 == 0, false, false);
        std::vector<leaf_hint> hints(n, 0x1234);
        routed_batch_view v = out.view();
        v.hints = hints.data();
        router.route(b.keys.data(), nullptr, nullptr, n, v);
        ASSERT_EQ(v.hinted, order == aggregation::full);
        if (!v.hinted) continue;
        for (std::size_t g = 0; g < v.groups; ++g) {
          const leaf_id id = layout.leaf_ids()[v.group_ordinal[g]];
          for (std::uint32_t i = v.group_begin[g]; i < v.group_begin[g + 1]; ++i) {
            const leaf_hint want = id < leaves - 7 ? guide_hint(guides[id], v.keys[i]) : no_hint;
            ASSERT_EQ(hints[i], want) << "slot " << i << " key " << v.keys[i] << " leaf " << id;
          }
        }
      }
    }
    router.upload_guides(nullptr, 0);
    EXPECT_EQ(router.guide_count(), 0u);
    const gpu_batch b = make_batch(pattern::uniform, 100, 1, t);
    routed_arrays out(100, false, false, false);
    std::vector<leaf_hint> hints(100);
    routed_batch_view v = out.view();
    v.hints = hints.data();
    router.route(b.keys.data(), nullptr, nullptr, 100, v);
    EXPECT_FALSE(v.hinted);
  }
}

// upload_compact_guides: guides filled by real BPAs (keys between each
// leaf's fences); a full-sort route hands each key the hint the host's
// compact_hint gives from its leaf's fences, at fanouts 16 and 64; full
// guides uploaded after them replace them.
TEST(GpuRouter, CompactHintsEqualTheHostsHintsFromTheUploadedGuides) {
  TANDEM_REQUIRE_GPU();
  const table t = random_table(5'000, 37, true);
  std::vector<compact_guide> guides(7 * t.size() + 3);
  std::mt19937_64 rng(41);
  auto leaf = std::make_unique<host::basic_bpa<32, 32, 32>>();
  for (std::size_t o = 0; o < t.size(); ++o) {
    const bool bounded = o + 1 < t.size();
    const key_type low = t.low_keys[o], next_low = bounded ? t.low_keys[o + 1] : max_key;
    std::vector<key_type> ks = {low};
    const key_type width = next_low - low;
    for (std::size_t i = 0, n = rng() % 900; i < n && width > 1; ++i) ks.push_back(low + rng() % width);
    std::sort(ks.begin(), ks.end());
    ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
    leaf->assign_sorted(ks.data(), ks.data(), ks.size());
    leaf->fill_compact_guide(guides[t.ids[o]], low, next_low, bounded);
  }
  for (const int fanout : {16, 64}) {
    const inner_layout layout = build(t, fanout);
    router_options options;
    options.order = aggregation::full;
    gpu_router router(options);
    router.upload(layout);
    router.upload_compact_guides(guides.data(), guides.size() - 70);  // the last leaves have none
    for (const pattern p : {pattern::uniform, pattern::separators, pattern::edges}) {
      const std::size_t n = 200'000;
      SCOPED_TRACE("fanout " + std::to_string(fanout) + ", " + name(p));
      const gpu_batch b = make_batch(p, n, n + 5, t);
      routed_arrays out(n, false, false, false);
      std::vector<leaf_hint> hints(n, 0x1234);
      routed_batch_view v = out.view();
      v.hints = hints.data();
      router.route(b.keys.data(), nullptr, nullptr, n, v);
      ASSERT_TRUE(v.hinted);
      std::size_t named = 0;
      for (std::size_t g = 0; g < v.groups; ++g) {
        const std::uint32_t o = v.group_ordinal[g];
        const leaf_id id = layout.leaf_ids()[o];
        const bool bounded = o + 1 < t.size();
        const key_type low = o == 0 ? min_key : t.low_keys[o], next_low = bounded ? t.low_keys[o + 1] : max_key;
        for (std::uint32_t i = v.group_begin[g]; i < v.group_begin[g + 1]; ++i) {
          const leaf_hint want =
              id < guides.size() - 70 ? compact_hint(guides[id], v.keys[i], low, next_low, bounded) : no_hint;
          ASSERT_EQ(hints[i], want) << "slot " << i << " key " << v.keys[i] << " leaf " << id;
          named += want < unsure_hint;
        }
      }
      EXPECT_GT(named, n / 2);  // the hints are not all none or unsure
    }
    std::vector<leaf_guide> full(guides.size());
    router.upload_guides(full.data(), full.size());  // block_count 0: no hints
    const gpu_batch b = make_batch(pattern::uniform, 1000, 3, t);
    routed_arrays out(1000, false, false, false);
    std::vector<leaf_hint> hints(1000, 0x1234);
    routed_batch_view v = out.view();
    v.hints = hints.data();
    router.route(b.keys.data(), nullptr, nullptr, 1000, v);
    ASSERT_TRUE(v.hinted);
    EXPECT_TRUE(std::all_of(hints.begin(), hints.end(), [](leaf_hint h) { return h == no_hint; }));
  }
}

