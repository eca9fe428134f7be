#pragma once
/// @file
/// `routed_batch_view`: a batch routed to leaves and grouped by leaf, in host
/// memory. It is what routing gives the leaf phase (DESIGN, "One batch",
/// step 2), whoever routes: the GPU (`device::gpu_router::route`) and the CPU
/// (`host::route_sorted`) fill the same arrays, so the leaf phase reads one
/// shape. The caller owns the arrays (from the index's pools); the router
/// fills them.
///
/// Layout, with n ops and G groups:
///
///     struct routed_batch_view {
///       u32      positions[n];        // batch positions, grouped by leaf
///       key_type keys[n];             // keys[i] = key of op positions[i]
///       u64      args[n];             // optional: arg of op positions[i]
///       u8       types[n];            // optional: op_type of op positions[i]
///       u32      group_begin[G + 1];  // group g = [group_begin[g], group_begin[g+1])
///       u32      group_ordinal[G];    // leaf ordinal of group g
///       u16      hints[n];            // optional: the get's block and window
///     };                              //   in its leaf (core/leaf_guide.hpp)
///
/// Invariants: group_begin[0] == 0, group_begin[G] == n, groups are
/// non-empty, group_ordinal strictly increases; every position appears once.
/// Inside a group (key, position) strictly increases when `key_sorted`; else
/// positions strictly increase. Since leaves own consecutive key ranges, a
/// key-sorted route is sorted by (key, position) as a whole.

#include <tandem/core/leaf_guide.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>

namespace tandem {

struct routed_batch_view {
  std::uint32_t* positions = nullptr;      ///< room for n
  key_type* keys = nullptr;                ///< room for n
  value_type* args = nullptr;              ///< room for n, or null: not wanted
  std::uint8_t* types = nullptr;           ///< room for n, or null: not wanted
  std::uint32_t* group_begin = nullptr;    ///< room for n + 1
  std::uint32_t* group_ordinal = nullptr;  ///< room for n
  /// Room for n, or null: not wanted. A router that keeps leaf guides fills
  /// it (key-sorted routes only) and sets `hinted`.
  leaf_hint* hints = nullptr;
  std::size_t groups = 0;                  ///< G, set by the router
  bool key_sorted = false;                 ///< set by the router
  bool hinted = false;                     ///< set by the router: hints[0..n) filled
};

}  // namespace tandem
