#pragma once
/// @file
/// Descent kernels of gpu_router (private). Included by device/src/gpu_router.cu
/// only: it defines the `__constant__` prefix slots, and without relocatable
/// device code constant memory is one per translation unit, so the kernels
/// that read it and the copies that fill it live in that one file (other
/// files launch the descent through gpu_router::state::launch_descent).
///
/// The descent with narrowed thread groups (NTG). G threads (a power of two,
/// 1..32, aligned inside a warp) serve one query. At each level the group
/// searches one node of F slots (F-1 keys, then max_key padding; sorted):
///
///     lane j of the group owns slots [j*S, (j+1)*S), S = max(1, F/G)
///     c_j    = slots of its slice that are <= key        (0..S)
///     m      = popc(ballot(c_j == S) over the group)      (full slices)
///     count  = m*S + c_m                                  (sorted: one partial slice)
///     child  = child_prefix[node] + min(count, valid)     (padding never counts)
///
/// which is exactly node_rank's "keys <= key over all F slots, clamped to the
/// valid keys". G == 1 calls the layout's own node_search<F>; slices of 16 or
/// more slots call node_rank<S> on the slice; shorter slices compare their S
/// slots with 16-byte loads. Levels below `constant_levels` read child_prefix
/// from this version's `__constant__` slot (the same node_search, on a view
/// whose child_prefix points there), the others through the read-only path.
///
/// Every query descends exactly `height` levels (the tree is balanced), so a
/// warp's lanes stay converged and the full-mask ballot/shuffle are safe; a
/// group past the end of the batch repeats the last query and writes nothing.

#include <tandem/core/inner_layout.hpp>
#include <tandem/core/types.hpp>
#include <tandem/device/gpu_router.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tandem::device::detail {

/// Constant-memory slots for child_prefix (see constant_slot_entries).
inline constexpr int constant_slots = 4;
/// Threads per block of the descent kernel (a multiple of 32).
inline constexpr int descend_block_threads = 256;

/// The slots: version v of a router owning slot pair p uses slot 2p + v.
__constant__ std::uint32_t constant_prefix[constant_slots * constant_slot_entries];

/// Scalars of one descent launch.
struct descend_params {
  std::uint32_t n = 0;             ///< queries of this launch
  int level_begin = 0;             ///< first level searched (0: start at the root)
  int level_end = 0;               ///< one past the last level searched
  int height = 0;                  ///< levels of the layout
  int constant_levels = 0;         ///< levels < this read child_prefix from the slot
  std::uint32_t constant_first = 0;  ///< first entry of this version's slot
  std::uint32_t node_count = 0;
  std::uint32_t leaf_count = 0;
};

/// Keys <= key among the S slots of one lane's slice.
template <int S>
__device__ __forceinline__ std::uint32_t slice_rank(const key_type* slice, key_type key) {
  if constexpr (S >= 16) {
    // The layout's own search; S slots of a sorted node are sorted, and with
    // valid == S nothing is clamped, so this is the raw count.
    return node_rank<S>(slice, static_cast<std::uint32_t>(S), key);
  } else if constexpr (S == 1) {
    return static_cast<std::uint32_t>(__ldg(slice) <= key);
  } else {
    std::uint32_t c = 0;
#pragma unroll
    for (int j = 0; j < S; j += 2) {
      const ulonglong2 pair = __ldg(reinterpret_cast<const ulonglong2*>(slice + j));
      c += static_cast<std::uint32_t>(pair.x <= key) + static_cast<std::uint32_t>(pair.y <= key);
    }
    return c;
  }
}

/// One node visit by a group of G lanes (`lane` = index inside the group).
/// Returns the child index, like node_search<F>.
template <int F, int G>
__device__ __forceinline__ std::uint32_t group_search(const inner_layout_view& v, std::uint32_t node, key_type key,
                                                      unsigned lane) {
  if constexpr (G == 1) {
    (void)lane;
    return node_search<F>(v, node, key);
  } else {
    constexpr int S = F >= G ? F / G : 1;           // slots per lane
    constexpr unsigned lanes_used = F / S;          // min(F, G): lanes past the node idle
    const std::uint32_t first = v.child_prefix[node];
    const std::uint32_t valid = v.child_prefix[node + 1] - first - 1;
    std::uint32_t c = 0;
    if (lanes_used == G || lane < lanes_used) {
      c = slice_rank<S>(v.key_region + static_cast<std::size_t>(node) * F + lane * S, key);
    }
    const unsigned full = __ballot_sync(0xffffffffu, c == static_cast<std::uint32_t>(S));
    const unsigned base = (threadIdx.x & 31u) & ~static_cast<unsigned>(G - 1);
    const unsigned group_bits = G == 32 ? 0xffffffffu : ((1u << (G & 31)) - 1u) << base;
    const unsigned m = static_cast<unsigned>(__popc(full & group_bits));
    const std::uint32_t partial = __shfl_sync(0xffffffffu, c, static_cast<int>(m & (G - 1)), G);
    const std::uint32_t count = m * static_cast<std::uint32_t>(S) + (m < lanes_used ? partial : 0u);
    return first + (count < valid ? count : valid);
  }
}

/// Descends levels [p.level_begin, p.level_end) for p.n queries, G lanes per
/// query. Query q starts at the root (level_begin == 0) or at nodes_in[q]; it
/// ends in nodes_out[q] (level_end < height) or, at the bottom, writes its
/// leaf ordinal to ordinals_by_position[positions ? positions[q] : q].
/// `nodes_in` may equal `nodes_out` (each entry is touched by its own group
/// only, read before written).
template <int F, int G>
__global__ void __launch_bounds__(descend_block_threads)
    descend_kernel(const key_type* __restrict__ key_region, const std::uint32_t* __restrict__ child_prefix,
                   const key_type* __restrict__ keys, const std::uint32_t* __restrict__ positions,
                   const std::uint32_t* nodes_in, std::uint32_t* nodes_out,
                   std::uint32_t* __restrict__ ordinals_by_position, descend_params p) {
  const std::uint64_t thread = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::uint64_t q = thread / G;
  const bool active = q < p.n;
  if (!active) q = p.n - 1;  // keeps the warp converged for ballot/shuffle
  const unsigned lane = threadIdx.x & static_cast<unsigned>(G - 1);
  const key_type key = keys[q];
  std::uint32_t x = p.level_begin == 0 ? 0u : nodes_in[q];

  inner_layout_view global_view;
  global_view.key_region = key_region;
  global_view.child_prefix = child_prefix;
  global_view.node_count = p.node_count;
  global_view.leaf_count = p.leaf_count;
  global_view.fanout = F;
  global_view.height = p.height;
  inner_layout_view constant_view = global_view;
  constant_view.child_prefix = constant_prefix + p.constant_first;

  for (int level = p.level_begin; level < p.level_end; ++level) {
    x = level < p.constant_levels ? group_search<F, G>(constant_view, x, key, lane)
                                  : group_search<F, G>(global_view, x, key, lane);
  }
  if (!active || lane != 0) return;
  if (p.level_end == p.height) {
    const std::uint32_t at = positions != nullptr ? positions[q] : static_cast<std::uint32_t>(q);
    ordinals_by_position[at] = x - p.node_count;
  } else {
    nodes_out[q] = x;
  }
}

__device__ __forceinline__ std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Synthetic calibration queries: each picks a random bottom-level node and
/// one of its keys (a leaf's low key) plus a small offset, so the queries
/// spread over the leaves whatever range the keys occupy.
__global__ void calibration_keys_kernel(const key_type* __restrict__ key_region,
                                        const std::uint32_t* __restrict__ child_prefix, int fanout,
                                        std::uint32_t bottom_first, std::uint32_t bottom_nodes, std::uint64_t seed,
                                        key_type* __restrict__ keys, std::uint32_t n) {
  const std::uint32_t stride = gridDim.x * blockDim.x;
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint64_t h = mix64(seed + i);
    const std::uint32_t node = bottom_first + static_cast<std::uint32_t>((h & 0xffffffffull) % bottom_nodes);
    const std::uint32_t valid = child_prefix[node + 1] - child_prefix[node] - 1;
    if (valid == 0) {
      keys[i] = 0;
      continue;
    }
    const std::uint32_t slot = static_cast<std::uint32_t>((h >> 32) % valid);
    const key_type low = key_region[static_cast<std::size_t>(node) * static_cast<std::size_t>(fanout) + slot];
    const key_type offset = mix64(h) & 1023u;
    keys[i] = low + offset < low ? low : low + offset;
  }
}

}  // namespace tandem::device::detail
