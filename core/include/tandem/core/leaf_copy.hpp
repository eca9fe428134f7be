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

#include <tandem/batch.hpp>
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

/// No entry (copy_find).
inline constexpr std::uint64_t no_copy_entry = ~std::uint64_t{0};

/// Entries on either side of a lookup's interpolated guess that its first
/// step brackets (copy_lower_bound).
inline constexpr std::uint32_t copy_bracket = 32;

/// @return the first of the copy's entries with a key >= `key` (count: none).
/// Where `key` lies between the fences gives a guess of its place; the
/// entries copy_bracket before and after it, read at once, bound the search
/// to them when they enclose the key (keys spread evenly over the leaf:
/// 1 + 6 dependent reads instead of 10 for a leaf of 767 entries), else to
/// the side of them where it lies. Then halving.
TANDEM_HD inline std::uint32_t copy_lower_bound(const leaf_copy& c, const entry* pool, key_type key) noexcept {
  const entry* e = pool + c.offset;
  std::uint32_t lo = 0;
  std::uint32_t n = c.count;
  if (n > 4 * copy_bracket && key > c.low && c.high > c.low) {
    const double at = static_cast<double>(key - c.low) / static_cast<double>(c.high - c.low) * n;
    const auto g = at < static_cast<double>(n - 1) ? static_cast<std::uint32_t>(at) : n - 1;
    const std::uint32_t a = g > copy_bracket ? g - copy_bracket : 0;
    const std::uint32_t b = g + copy_bracket < n - 1 ? g + copy_bracket : n - 1;
    const key_type ka = e[a].key;
    const key_type kb = e[b].key;
    if (ka >= key) {  // at or before a
      n = a;
    } else if (kb >= key) {  // in (a, b]
      lo = a + 1;
      n = b - a;
    } else {  // past b
      lo = b + 1;
      n = n - b - 1;
    }
  }
  while (n > 0) {  // by halving
    const std::uint32_t half = n / 2;
    const bool right = e[lo + half].key < key;
    lo = right ? lo + half + 1 : lo;
    n = right ? n - half - 1 : half;
  }
  return lo;
}

/// @brief Where `key` is in the copy `c`: its pool index, or no_copy_entry
///        (no usable copy speaks for the key, or the leaf holds no such
///        key; `speaks` says which).
TANDEM_HD inline std::uint64_t copy_find(const leaf_copy& c, const entry* pool, key_type key, bool* speaks) noexcept {
  *speaks = c.usable != 0 && key >= c.low && key <= c.high;
  if (!*speaks) return no_copy_entry;
  const std::uint32_t lo = copy_lower_bound(c, pool, key);
  return lo < c.count && pool[c.offset + lo].key == key ? c.offset + lo : no_copy_entry;
}

/// @brief Looks `key` up in the copy `c` over the pool `pool`.
TANDEM_HD inline copy_answer copy_get(const leaf_copy& c, const entry* pool, key_type key,
                                      value_type* value) noexcept {
  bool speaks = false;
  const std::uint64_t at = copy_find(c, pool, key, &speaks);
  if (!speaks) return copy_answer::none;
  if (at == no_copy_entry) return copy_answer::absent;
  *value = pool[at].value;
  return copy_answer::found;
}

// ---- a batch with writes (or lower_bounds), routed from the copies ---------
//
// Its ops are routed sorted by (key, position), so the ops of one key are
// neighbours in batch order. Each row gets one of these:
//   - a get with no write of its key before it in the batch, whose copy
//     speaks for its key: answered from the copy (`answered`);
//   - a lower_bound whose copy speaks for its key and holds a key at or
//     past it (or is the last leaf's): answered from the copy. Only in
//     batches without writes (a write of any key up to the answer would
//     change it);
//   - a put of a key the copy holds: its value is written into the copy as
//     the host leaf's (`patched`; the host applies it too), by the batch's
//     last put of that key only; an insert of a key the copy holds changes
//     nothing, and counts as patched too;
//   - anything else: the host leaf phase (`host`). The leaf of a write the
//     copy did not take is claimed (its copy unusable).

/// What a route does with a row of a batch with writes.
enum class copy_row : std::uint8_t {
  answered = 0,  ///< a get answered from the copy
  host = 1,      ///< to the host leaf phase
  patched = 2,   ///< a write to the host leaf phase that the copy takes too
};

/// A routed type with this bit set: a write its leaf's copy took (copy_row
/// patched). The bit is cleared before the leaf phase reads the types.
inline constexpr std::uint8_t copy_patched_bit = 0x80;

TANDEM_HD inline bool copy_is_write(std::uint8_t t) noexcept {
  const auto o = static_cast<op_type>(t);
  return o == op_type::put || o == op_type::insert || o == op_type::erase;
}

/// @brief Row `s` of `n` rows sorted by (key, position), with types; `c`
///        its leaf's table entry. A row answered writes value, found and
///        the answer's key (batch_result's columns).
TANDEM_HD inline copy_row copy_sorted_row(const key_type* keys, const std::uint8_t* types, std::size_t s,
                                          const leaf_copy& c, const entry* pool, value_type* value,
                                          std::uint8_t* found, key_type* found_key) noexcept {
  const key_type key = keys[s];
  const auto t = static_cast<op_type>(types[s]);
  *found_key = key;
  if (t == op_type::lower_bound) {
    if (c.usable == 0 || key < c.low || key > c.high) return copy_row::host;
    const std::uint32_t lo = copy_lower_bound(c, pool, key);
    if (lo == c.count && c.high != max_key) return copy_row::host;  // the answer is in a later leaf
    *found = lo < c.count ? 1 : 0;
    *value = lo < c.count ? pool[c.offset + lo].value : 0;
    *found_key = lo < c.count ? pool[c.offset + lo].key : 0;
    return copy_row::answered;
  }
  if (t == op_type::get) {
    for (std::size_t j = s; j > 0 && keys[j - 1] == key; --j) {
      if (copy_is_write(types[j - 1])) return copy_row::host;  // sees a write of this batch
    }
    const copy_answer a = copy_get(c, pool, key, value);
    if (a == copy_answer::none) return copy_row::host;
    *found = a == copy_answer::found ? 1 : 0;
    if (a == copy_answer::absent) *value = 0;
    return copy_row::answered;
  }
  if (t != op_type::put && t != op_type::insert) return copy_row::host;
  bool speaks = false;
  return copy_find(c, pool, key, &speaks) != no_copy_entry ? copy_row::patched : copy_row::host;
}

/// @return whether row `s` is a put and its key's last in the batch (the
///        one whose value a patched copy takes; a later erase claims the
///        leaf, a later insert of the key, present then, changes nothing).
TANDEM_HD inline bool copy_last_put(const key_type* keys, const std::uint8_t* types, std::size_t s,
                                    std::size_t n) noexcept {
  if (static_cast<op_type>(types[s]) != op_type::put) return false;
  for (std::size_t j = s + 1; j < n && keys[j] == keys[s]; ++j) {
    if (static_cast<op_type>(types[j]) == op_type::put) return false;
  }
  return true;
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
