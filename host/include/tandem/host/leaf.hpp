#pragma once
/// @file
/// `leaf`: one BPA plus the key range it owns and a link to its right
/// neighbour. Fences are inclusive, so the rightmost leaf can own UINT64_MAX:
/// a leaf owns exactly the keys `low <= k <= high`. Leaves of a store
/// partition the whole key space [0, UINT64_MAX], left to right along the
/// right links. A route computed on an older inner layout may land on a leaf
/// left of the one that now owns a key; the owner is found by following right
/// links while `key > high` (leaves never move keys leftwards and are never
/// freed while routes may point at them).

#include <tandem/core/types.hpp>
#include <tandem/host/bpa.hpp>

#include <cstddef>
#include <string>

namespace tandem::host {

/// Cache-line aligned, fences first: the fences and the BPA's counts share
/// the leaf's first line, the BPA's header the next ones (`prefetch`
/// fetches them). The right link comes last: only a route on an older
/// layout reads it.
template <class Bpa>
struct alignas(64) basic_leaf {
  key_type low = min_key;   ///< smallest key this leaf owns
  key_type high = max_key;  ///< largest key this leaf owns (inclusive)
  Bpa data;
  leaf_id right = no_leaf;  ///< right neighbour, `no_leaf` for the rightmost

  [[nodiscard]] bool owns(key_type key) const noexcept { return low <= key && key <= high; }

  /// Starts loading the lines that lookups of many keys in this leaf read
  /// first: the fences, the counts and the whole header.
  void prefetch() const noexcept {
    TANDEM_PREFETCH(this);
    data.prefetch_header();
  }
  /// Starts loading the first line only: the fences and the counts, what
  /// one lookup reads before the header line of its block (`start_route`).
  void prefetch_first_line() const noexcept { TANDEM_PREFETCH(this); }

  /// @brief Checks the BPA and that every key lies inside the fences.
  /// @throws tandem::invariant_error
  void verify() const {
    if (low > high) throw invariant_error("leaf: low fence above high fence");
    data.verify();
    if (data.count(low, high) != data.size()) {
      throw invariant_error("leaf [" + std::to_string(low) + ", " + std::to_string(high) +
                            "]: holds keys outside its fences");
    }
  }
};

using leaf = basic_leaf<bpa>;
static_assert((offsetof(leaf, data) + bpa::blocks_offset()) % 64 == 0,
              "a leaf's blocks start on a cache line, so that a line holds whole entries");

}  // namespace tandem::host
