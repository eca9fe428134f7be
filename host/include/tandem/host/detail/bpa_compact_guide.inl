#pragma once
// basic_bpa::fill_compact_guide (host/bpa.hpp; the guide: core/leaf_guide.hpp).
// Included by bpa.hpp after detail/bpa.inl.

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tandem::host {

template <int LogSize, int NumBlocks, int BlockSize>
void basic_bpa<LogSize, NumBlocks, BlockSize>::fill_compact_guide(compact_guide& g, key_type low, key_type next_low,
                                                                  bool bounded) const noexcept {
  g = compact_guide{};
  if constexpr (num_blocks <= guide_blocks && block_capacity <= 0xff && lookup_window <= block_capacity &&
                (lookup_window & (lookup_window - 1)) == 0 && (per_line & (per_line - 1)) == 0) {
    const std::size_t count = std::min<std::size_t>(block_count_, num_blocks);
    // Each block's smallest and largest key's places (none: an empty block).
    constexpr std::uint32_t none = compact_places;
    std::uint32_t least[num_blocks], most[num_blocks];
    std::size_t held = 0;
    for (std::size_t b = 0; b < count; ++b) {
      const std::size_t n = std::min<std::size_t>(block_size_[b], block_capacity);
      held += n;
      least[b] = none;
      most[b] = none;
      if (n == 0) continue;
      key_type lo = blocks_[b][0].key, hi = blocks_[b][n - 1].key;
      if ((sorted_mask_ >> b & 1) == 0) {
        for (std::size_t i = 0; i < n; ++i) {
          lo = std::min(lo, blocks_[b][i].key);
          hi = std::max(hi, blocks_[b][i].key);
        }
      }
      least[b] = compact_place(compact_position(lo, low, next_low, bounded));
      most[b] = compact_place(compact_position(hi, low, next_low, bounded));
    }
    // Bound b: the smallest place of the keys from block b on (the last
    // place past them), exact where every key below lies at a smaller one.
    std::uint32_t above = compact_places - 1;
    std::uint32_t places[num_blocks];
    for (std::size_t b = count; b-- > 1;) {
      if (least[b] != none) above = std::min(above, least[b]);
      places[b] = above;
    }
    std::uint32_t below = 0;
    bool any_below = false;
    g.exact = 1;
    for (std::size_t b = 1; b < count; ++b) {
      if (most[b - 1] != none) {
        below = std::max(below, most[b - 1]);
        any_below = true;
      }
      set_compact_bound(g, b, places[b]);
      if (!any_below || below < places[b]) g.exact |= std::uint32_t{1} << b;
    }
    g.block_count = static_cast<std::uint8_t>(count);
    g.mean_size = static_cast<std::uint8_t>(count == 0 ? 0 : (held + count / 2) / count);
    g.block_capacity = static_cast<std::uint8_t>(block_capacity);
    g.shape = static_cast<std::uint8_t>(__builtin_ctzll(per_line) | __builtin_ctzll(lookup_window) << 4);
  }
}

}  // namespace tandem::host
