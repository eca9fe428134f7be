#pragma once
/// @file
/// Where a key lies inside a leaf, computed without reading the leaf: the
/// arithmetic of a BPA's lookup window (host/bpa.hpp) and the `leaf_guide`,
/// a copy of a leaf's block bounds and counts that the GPU keeps per leaf
/// so that a route can hand the leaf phase each get's block and window
/// (a `leaf_hint`) along with its leaf. The host then loads the window's
/// lines directly, without the header lines and the bisection that finding
/// the block takes. A hint is only a hint: a lookup that does not find its
/// key at the hinted window (a stale guide, an absent key) looks the key up
/// from the leaf as usual, so answers never depend on a guide being current.
///
/// One routine serves the CPU's lookups and the GPU's hints (`TANDEM_HD`).

#include <tandem/core/macros.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>

namespace tandem {

/// A block's slots by interpolation: key k sits near slot
/// (k - low) * scale / 2^63. scale is the block's keys per unit of key
/// space, n / width, as a fraction of 2^63 (at most 1: a block's width, the
/// gap to the next block's bound, holds n distinct keys).
struct block_interpolation {
  key_type low;
  std::uint64_t scale;
};

/// The scale of `n` keys over `width` (0 when width <= 1). In signed
/// arithmetic, whose conversions are one instruction each: the width halved
/// (its lowest bit does not matter to a guess).
TANDEM_HD inline std::uint64_t interpolation_scale(std::size_t n, key_type width) noexcept {
  if (width <= 1) return 0;
  const double s = static_cast<double>(n) / static_cast<double>(static_cast<std::int64_t>(width >> 1)) * 0x1p62;
  return s >= 0x1p63 ? std::uint64_t{0x7fffffffffffffff} : static_cast<std::uint64_t>(static_cast<std::int64_t>(s));
}

/// The interpolation of block `b` of `block_count` with lower bounds
/// `bounds` and `n` keys: its width is the gap to the next bound, or for the
/// last block the mean width of the others (an estimate; guesses are clamped
/// to the block).
TANDEM_HD inline block_interpolation interpolate_block(const key_type* bounds, std::size_t b, std::size_t block_count,
                                                       std::size_t n) noexcept {
  const key_type low = bounds[b];
  key_type width = 0;
  if (b + 1 < block_count) {
    width = bounds[b + 1] - low;
  } else if (b > 0) {
    width = (low - bounds[0]) / b;
  }
  return {low, interpolation_scale(n, width)};
}

/// First slot of the lookup window (`window` entries, `per_line` a cache
/// line, both powers of two) for `key` in a sorted block of `n` entries: the
/// start of the line before that of the interpolated slot where the slot
/// lies in the first half of its line, else of its line; the block's last
/// window where a window from there would pass its end. A key below the
/// block's bound (of block 0 only, and absent from it) wraps to a guess past
/// the end: the last window, whose compare fails.
TANDEM_HD inline std::size_t window_start(const block_interpolation& ip, key_type key, std::size_t n,
                                          std::size_t per_line, std::size_t window) noexcept {
  if (n <= window) return 0;
  const key_type d = key - ip.low;
#if defined(__CUDA_ARCH__)
  const std::uint64_t guess = (__umul64hi(d, ip.scale) << 1) | ((d * ip.scale) >> 63);
  // The guess moved back half a line, or 0 where that would wrap.
  const std::size_t keep = std::size_t{0} - static_cast<std::size_t>(guess >= per_line / 2);
  const std::size_t line = (guess - per_line / 2) & keep & ~(per_line - 1);
#else
  __extension__ using wide = unsigned __int128;  // for a 64 x 64-bit product
  const auto guess = static_cast<std::size_t>(static_cast<wide>(d) * ip.scale >> 63);
  // The guess moved back half a line, or 0 where that would wrap: masked
  // by the borrow, not a branch (where the slot lies is not predictable).
  std::size_t back = 0;
  const bool wraps = __builtin_sub_overflow(guess, per_line / 2, &back);
  const std::size_t line = back & (static_cast<std::size_t>(wraps) - 1) & ~(per_line - 1);
#endif
  return line < n - window ? line : n - window;
}

/// Blocks a guide holds: a leaf of more blocks (or of blocks of more than
/// 255 slots) has no guide.
inline constexpr std::size_t guide_blocks = 32;

/// A leaf's blocks as its lookups see them (host::bpa::guide fills it).
struct leaf_guide {
  key_type bound[guide_blocks];        ///< lower bounds; max_key from block_count on
  std::uint64_t sorted_mask;           ///< bit b: block b is sorted
  std::uint8_t size[guide_blocks];     ///< keys a block
  std::uint16_t block_count;           ///< blocks in use; 0: no guide (no hints)
  std::uint16_t block_capacity;        ///< slots a block
  std::uint8_t per_line;               ///< entries a cache line
  std::uint8_t window;                 ///< entries of a lookup window
};

/// A point op's block and window start in its leaf: block * block_capacity +
/// slot, `no_hint`, or `unsure_hint`.
using leaf_hint = std::uint16_t;
inline constexpr leaf_hint no_hint = 0xffff;
/// A compact guide's answer for a key whose block it cannot tell: the
/// lookup starts from the leaf, and the hint counts as neither used nor
/// stale (the guide is as current as it can be).
inline constexpr leaf_hint unsure_hint = 0xfffe;

/// The hint for `key` in the leaf of guide `g`: its block by a bisection of
/// the bounds, its window by the block's interpolation (slot 0 for a block
/// not sorted, which a lookup scans whole).
TANDEM_HD inline leaf_hint guide_hint(const leaf_guide& g, key_type key) noexcept {
  const std::size_t count = g.block_count;
  if (count == 0 || count > guide_blocks) return no_hint;
  std::size_t b = 0;
  for (std::size_t half = guide_blocks / 2; half > 0; half /= 2) {
    b += half & (std::size_t{0} - static_cast<std::size_t>(g.bound[b + half] <= key));
  }
  b = b < count - 1 ? b : count - 1;
  std::size_t at = 0;
  if (g.sorted_mask >> b & 1) {
    const std::size_t n = g.size[b];
    at = window_start(interpolate_block(g.bound, b, count, n), key, n, g.per_line, g.window);
  }
  return static_cast<leaf_hint>(b * g.block_capacity + at);
}

/// Bits a compact guide gives each block bound's place between the leaf's
/// fences: over leaves of 768 uniform keys, 12 bits a place leave 0.8% of
/// the keys at a place the guide cannot tell (10 bits: 3%; 8 bits: 12%).
inline constexpr int compact_place_bits = 12;
inline constexpr std::uint32_t compact_places = std::uint32_t{1} << compact_place_bits;

/// A leaf's blocks in 56 bytes (host::bpa::fill_compact_guide), for GPUs
/// whose memory budget cannot hold `leaf_guide`s (304 bytes a leaf). It
/// keeps no key: each bound b >= 1 is a place in [0, compact_places)
/// between the fences of the leaf (its low key and the next leaf's, which
/// the route's descent finds again), chosen so that every key of blocks
/// below b lies at a smaller place and every key of blocks from b on at
/// that place or above. Where the largest key below and the smallest from
/// b on share a place, no place parts them: the bound is not exact, and a
/// key at that place gets `unsure_hint`. Windows come from the place of the
/// key inside its block's places and the blocks' mean size.
struct compact_guide {
  std::uint64_t places[6];     ///< place of bound b (1..31) in bits [12 (b - 1), 12 b)
  std::uint32_t exact;         ///< bit b: bound b's place parts its blocks; bit 0: the guide gives hints
  std::uint8_t block_count;    ///< blocks in use
  std::uint8_t mean_size;      ///< keys a block in use, rounded
  std::uint8_t block_capacity; ///< slots a block
  std::uint8_t shape;          ///< log2(entries a line) | log2(entries a window) << 4
};
static_assert(sizeof(compact_guide) == 56, "a compact guide is 56 bytes");
static_assert((guide_blocks - 1) * compact_place_bits <= 6 * 64, "the places fit their words");

/// The place of `key` between the fences `low` and `next_low` (no next
/// leaf: !bounded, the fence past max_key) as a fraction of
/// compact_places; the same double arithmetic on the CPU and the GPU.
TANDEM_HD inline double compact_position(key_type key, key_type low, key_type next_low, bool bounded) noexcept {
  const double width = bounded ? static_cast<double>(next_low - low) : static_cast<double>(max_key - low) + 1.0;
  const double f = static_cast<double>(key - low) * (static_cast<double>(compact_places) / width);
  return f < 0 ? 0 : f;
}

/// The whole place of a position (at most compact_places - 1).
TANDEM_HD inline std::uint32_t compact_place(double position) noexcept {
  const double last = static_cast<double>(compact_places - 1);
  return static_cast<std::uint32_t>(position < last ? position : last);
}

/// Bound b's place (1 <= b < guide_blocks).
TANDEM_HD inline std::uint32_t compact_bound(const compact_guide& g, std::size_t b) noexcept {
  const std::size_t bit = (b - 1) * compact_place_bits;
  const std::size_t w = bit / 64, at = bit % 64;
  std::uint64_t v = g.places[w] >> at;
  if (at + compact_place_bits > 64) v |= g.places[w + 1] << (64 - at);
  return static_cast<std::uint32_t>(v & (compact_places - 1));
}

/// Sets bound b's place (1 <= b < guide_blocks; the bits start clear).
inline void set_compact_bound(compact_guide& g, std::size_t b, std::uint32_t place) noexcept {
  const std::size_t bit = (b - 1) * compact_place_bits;
  const std::size_t w = bit / 64, at = bit % 64;
  g.places[w] |= static_cast<std::uint64_t>(place) << at;
  if (at + compact_place_bits > 64) g.places[w + 1] |= static_cast<std::uint64_t>(place) >> (64 - at);
}

/// The hint for `key` in the leaf of compact guide `g` whose fences are
/// `low` and `next_low` (descend_span): its block by the places, its window
/// interpolated between the block's places; `unsure_hint` at a place that
/// is not exact, `no_hint` for a guide that gives none.
TANDEM_HD inline leaf_hint compact_hint(const compact_guide& g, key_type key, key_type low, key_type next_low,
                                        bool bounded) noexcept {
  const std::size_t count = g.block_count;
  if ((g.exact & 1) == 0 || count == 0 || count > guide_blocks) return no_hint;
  const double f = compact_position(key, low, next_low, bounded);
  const std::uint32_t q = compact_place(f);
  std::size_t b = 0;
  bool unsure = false;
  for (std::size_t j = 1; j < count; ++j) {
    const std::uint32_t p = compact_bound(g, j);
    b += p <= q;
    unsure |= p == q && (g.exact >> j & 1) == 0;
  }
  if (unsure) return unsure_hint;
  const std::size_t per_line = std::size_t{1} << (g.shape & 15);
  const std::size_t window = std::size_t{1} << (g.shape >> 4);
  std::size_t at = 0;
  if (g.mean_size > window) {
    const double lo = b == 0 ? 0.0 : static_cast<double>(compact_bound(g, b));
    const double hi = b + 1 < count ? static_cast<double>(compact_bound(g, b + 1)) : static_cast<double>(compact_places);
    const double span = hi - lo > 1.0 ? hi - lo : 1.0;
    const double slot = (f - lo) / span * static_cast<double>(g.mean_size);
    const std::size_t guess = slot > 0 ? static_cast<std::size_t>(slot) : 0;
    const std::size_t line = guess >= per_line / 2 ? (guess - per_line / 2) & ~(per_line - 1) : 0;
    const std::size_t last = g.block_capacity - window;
    at = line < last ? line : last;
  }
  return static_cast<leaf_hint>(b * g.block_capacity + at);
}

}  // namespace tandem
