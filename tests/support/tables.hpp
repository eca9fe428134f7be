#pragma once
// Leaf tables (sorted low keys + leaf ids) for the inner-layout and routing
// tests, and the reference answer every descent is compared with.

#include <tandem/core/inner_layout.hpp>
#include <tandem/core/types.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace tandem::test {

struct table {
  std::vector<key_type> low_keys;
  std::vector<leaf_id> ids;
  [[nodiscard]] std::size_t size() const { return ids.size(); }
};

/// `leaves` leaves with random strictly increasing low keys from 0; when
/// `with_max` the last leaf's low key is UINT64_MAX. Some runs of adjacent
/// keys, so that separator +-1 is itself a separator. Ids are distinct and
/// shuffled, so an ordinal/id mix-up shows.
inline table random_table(std::size_t leaves, std::uint64_t seed, bool with_max = false) {
  std::mt19937_64 rng(seed);
  std::vector<key_type> keys = {min_key};
  if (with_max && leaves > 1) keys.push_back(max_key);
  while (keys.size() < leaves) {
    for (std::size_t i = leaves - keys.size(); i > 0; --i) {
      const key_type k = rng();
      keys.push_back(k);
      if (rng() % 8 == 0 && k < max_key - 4) {
        for (key_type d = 1; d <= 3; ++d) keys.push_back(k + d);
      }
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  }
  // Too many: drop from just after 0 (keeps 0 first and max_key last).
  keys.erase(keys.begin() + 1, keys.begin() + 1 + static_cast<std::ptrdiff_t>(keys.size() - leaves));
  table t;
  t.low_keys = keys;
  t.ids.resize(leaves);
  for (std::size_t i = 0; i < leaves; ++i) t.ids[i] = static_cast<leaf_id>(i * 7 + 3);
  std::shuffle(t.ids.begin(), t.ids.end(), rng);
  return t;
}

/// The ordinal of the leaf that owns `key`: upper_bound over the low keys, minus one.
inline std::uint32_t reference(const table& t, key_type key) {
  const auto it = std::upper_bound(t.low_keys.begin(), t.low_keys.end(), key);
  return static_cast<std::uint32_t>(it - t.low_keys.begin()) - 1;
}

inline inner_layout build(const table& t, int fanout) {
  return inner_layout::build(t.low_keys.data(), t.ids.data(), t.size(), fanout);
}

}  // namespace tandem::test
