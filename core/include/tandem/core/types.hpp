#pragma once
/// @file
/// Scalar types shared by the layers. Every `key_type` value is a valid key,
/// 0 and UINT64_MAX included: no key value is reserved as a sentinel anywhere
/// in tandem. Occupancy is always tracked by counts.

#include <cstdint>
#include <limits>

namespace tandem {

using key_type = std::uint64_t;
using value_type = std::uint64_t;

inline constexpr key_type min_key = 0;
inline constexpr key_type max_key = std::numeric_limits<key_type>::max();

/// A key and its value.
struct entry {
  key_type key;
  value_type value;
  friend bool operator==(const entry& a, const entry& b) { return a.key == b.key && a.value == b.value; }
  friend bool operator!=(const entry& a, const entry& b) { return !(a == b); }
};

/// Index of a leaf in the host leaf store. 32 bits keep routes small on the
/// PCIe bus (DESIGN: a route is a 4-byte leaf id plus a 4-byte position).
using leaf_id = std::uint32_t;

/// Named sentinel of the leaf-id space (never a key): "no leaf", e.g. the
/// right link of the rightmost leaf.
inline constexpr leaf_id no_leaf = std::numeric_limits<leaf_id>::max();

}  // namespace tandem
