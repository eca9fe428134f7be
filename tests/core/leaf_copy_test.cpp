// core/leaf_copy.hpp's lookups against std::lower_bound: copies of every
// size up to a leaf's capacity, keys spread evenly, clustered at one end,
// dense, or in two clumps, fences tight, loose, 0 and UINT64_MAX; probes at
// every entry, beside each, at the fences and the edge keys.
#include <tandem/core/leaf_copy.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace tandem {
namespace {

TEST(LeafCopy, LowerBoundAndFindAgreeWithTheStandardLibrary) {
  std::mt19937_64 rng(7);
  std::size_t checked = 0;
  for (int round = 0; round < 400; ++round) {
    const std::uint32_t count = round < 8 ? static_cast<std::uint32_t>(round) : static_cast<std::uint32_t>(rng() % 1025);
    const int shape = round % 4;
    std::set<key_type> keys;
    const key_type base = rng() % 2 == 0 ? 0 : rng() >> 8;
    while (keys.size() < count) {
      key_type k = 0;
      switch (shape) {
        case 0: k = rng(); break;                                          // spread evenly
        case 1: k = base + rng() % (std::uint64_t{count} * 4 + 1); break;  // dense
        case 2: k = base + (rng() % 1000 < 900 ? rng() % 5000 : rng() >> 1); break;  // clustered low
        default: k = (rng() % 2 == 0 ? base : max_key - 1'000'000) + rng() % 1'000'000; break;  // two clumps
      }
      keys.insert(k);
    }
    std::vector<entry> pool;
    pool.push_back({1, 1});  // the copy starts past the pool's first entry
    for (const key_type k : keys) pool.push_back({k, ~k});
    leaf_copy c;
    c.offset = 1;
    c.count = count;
    c.usable = 1;
    const key_type first = keys.empty() ? 0 : *keys.begin();
    const key_type last = keys.empty() ? 0 : *keys.rbegin();
    switch (round % 3) {
      case 0: c.low = first; c.high = last; break;  // tight
      case 1: c.low = 0; c.high = max_key; break;   // the only leaf
      default: c.low = first / 2; c.high = last + (max_key - last) / 2; break;
    }
    std::vector<key_type> probes = {0, 1, max_key, max_key - 1, c.low, c.high, c.low + 1, c.high - 1};
    for (const key_type k : keys) {
      probes.push_back(k);
      probes.push_back(k - 1);
      probes.push_back(k + 1);
    }
    for (int i = 0; i < 200; ++i) probes.push_back(rng());
    const std::vector<entry> sorted(pool.begin() + 1, pool.end());
    for (const key_type k : probes) {
      const auto want = static_cast<std::uint32_t>(
          std::lower_bound(sorted.begin(), sorted.end(), k, [](const entry& e, key_type x) { return e.key < x; }) -
          sorted.begin());
      ASSERT_EQ(copy_lower_bound(c, pool.data(), k), want) << "round " << round << ", key " << k;
      bool speaks = false;
      const std::uint64_t at = copy_find(c, pool.data(), k, &speaks);
      const bool inside = k >= c.low && k <= c.high;
      ASSERT_EQ(speaks, inside) << "round " << round << ", key " << k;
      const bool held = inside && keys.count(k) != 0;
      ASSERT_EQ(at, held ? 1 + want : no_copy_entry) << "round " << round << ", key " << k;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100'000u);
}

}  // namespace
}  // namespace tandem
