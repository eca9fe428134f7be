#pragma once
/// @file
/// Copies of leaves kept beside the host's (the leaf cache, DESIGN "Leaf
/// cache"): what one copy is, how a get is answered from it, and the changes
/// that bring a set of copies up to date. One lookup (`TANDEM_HD`) serves
/// the GPU's copies in HBM and the host-memory stand-in of CPU-only builds.
///
/// Layout. The copies live in one pool of entries (key, value), each copy a
/// run of `count` entries in strictly increasing key order (the leaf's
/// buffered log merged in) at `offset`. A table indexed by leaf id says
/// where each leaf's copy lies and which keys it speaks for: the fences
/// [low, high] the host leaf had when it was copied. A get whose key routes
/// to a leaf with a usable copy (`usable`, key within the fences) is
/// answered from it: found with its value, or absent. Anything else (no
/// copy, a copy dropped because a write claimed the leaf, a key past the
/// fences: a route on an older layout) goes to the host leaf as before.
///
/// Threads: a copy is written only while no lookup reads the pool (the
/// caller takes turns); lookups read it from any number of threads.

#include <tandem/core/macros.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>

namespace tandem {

/// One leaf's entry in a copy table (32 bytes).
struct leaf_copy {
  key_type low = max_key;  ///< the fences the copy speaks for (low > high: none)
  key_type high = min_key;
  std::uint64_t offset = 0;  ///< first entry in the pool
  std::uint32_t count = 0;   ///< entries
  std::uint32_t usable = 0;  ///< 1: the copy holds the leaf as it is now
};

/// What a lookup in a copy found.
enum class copy_answer : std::uint8_t {
  none = 0,    ///< no usable copy speaks for the key: ask the host leaf
  absent = 1,  ///< the leaf holds no such key
  found = 2,   ///< the leaf holds it; the value was written
};

/// @brief Looks `key` up in the copy `c` over the pool `pool`.
TANDEM_HD inline copy_answer copy_get(const leaf_copy& c, const entry* pool, key_type key,
                                      value_type* value) noexcept {
  if (c.usable == 0 || key < c.low || key > c.high) return copy_answer::none;
  const entry* e = pool + c.offset;
  // Lower bound by halving: the first entry with key >= the query.
  std::uint32_t lo = 0;
  std::uint32_t n = c.count;
  while (n > 0) {
    const std::uint32_t half = n / 2;
    const bool right = e[lo + half].key < key;
    lo = right ? lo + half + 1 : lo;
    n = right ? n - half - 1 : half;
  }
  if (lo < c.count && e[lo].key == key) {
    *value = e[lo].value;
    return copy_answer::found;
  }
  return copy_answer::absent;
}

/// A run of entries to put in the pool: staged[from, from + count) to
/// pool[to, to + count). The moves of one copy_changes write disjoint parts
/// of the pool and may be applied in any order (the GPU applies them at
/// once).
struct copy_move {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  std::uint64_t count = 0;
};

/// Changes to a set of copies, applied in this order: a clear (every table
/// entry unusable), the moves of staged entries into the pool, then the
/// table entries `ids[i]` set to `entries[i]`. The table grows to
/// `table_size` entries first (new ones unusable).
struct copy_changes {
  bool clear = false;
  std::size_t table_size = 0;
  const entry* staged = nullptr;
  std::size_t staged_count = 0;
  const copy_move* moves = nullptr;
  std::size_t move_count = 0;
  const leaf_id* ids = nullptr;
  const leaf_copy* entries = nullptr;
  std::size_t entry_count = 0;
  [[nodiscard]] bool empty() const noexcept { return !clear && move_count == 0 && entry_count == 0; }
};

}  // namespace tandem
