#pragma once
/// @file
/// Data-movement kernels of gpu_router (private): iota, run-start flags,
/// gathers by position (a route's keys, args, types), the leaf hints and the
/// answer scatter.
/// Templates, so that several translation units may include them (unlike
/// descend_kernels.cuh, these read no `__constant__` memory). Grid-stride
/// loops over 64-bit indices: n may come close to 2^32.

#include <tandem/core/inner_layout.hpp>
#include <tandem/core/leaf_guide.hpp>
#include <tandem/core/types.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tandem::device::detail {

/// Threads per block of these kernels.
inline constexpr unsigned shuffle_block_threads = 256;

/// Blocks for n elements: enough to fill the GPU, grid-stride beyond.
inline unsigned shuffle_blocks(std::size_t n) {
  return static_cast<unsigned>(std::min<std::size_t>((n + shuffle_block_threads - 1) / shuffle_block_threads, 8192));
}

__device__ __forceinline__ std::size_t grid_first() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t grid_stride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

/// out[i] = first + i for i < n.
template <class T>
__global__ void iota_kernel(T* __restrict__ out, std::size_t n, T first) {
  for (std::size_t i = grid_first(); i < n; i += grid_stride()) out[i] = first + static_cast<T>(i);
}

/// flags[i] = 1 where a run of equal values starts (i == 0 or v[i] != v[i-1]), else 0.
template <class T>
__global__ void run_start_kernel(const T* __restrict__ v, std::size_t n, std::uint8_t* __restrict__ flags) {
  for (std::size_t i = grid_first(); i < n; i += grid_stride()) {
    flags[i] = static_cast<std::uint8_t>(i == 0 || v[i] != v[i - 1]);
  }
}

/// For i < n: the leaf hint of keys[i] in leaf leaf_ids[ordinals[i]]
/// (core/leaf_guide.hpp), from that leaf's guide; no_hint where the
/// ordinal or the leaf lies past the arrays.
template <class Guide>
__global__ void hint_kernel(const key_type* __restrict__ keys, const std::uint32_t* __restrict__ ordinals,
                            std::size_t n, const leaf_id* __restrict__ leaf_ids, std::size_t leaf_count,
                            const Guide* __restrict__ guides, std::size_t guide_count, leaf_hint* __restrict__ hints) {
  for (std::size_t i = grid_first(); i < n; i += grid_stride()) {
    const std::uint32_t ordinal = ordinals[i];
    const leaf_id id = ordinal < leaf_count ? leaf_ids[ordinal] : no_leaf;
    hints[i] = id < guide_count ? guide_hint(guides[id], keys[i]) : no_hint;
  }
}

/// For i < n: the hint of keys[i] from the compact guide of its leaf
/// (core/leaf_guide.hpp), whose fences a second descent of `v` finds (the
/// route's descent keeps only the ordinal); no_hint past the guides.
template <int F>
__global__ void compact_hint_kernel(const key_type* __restrict__ keys, std::size_t n, inner_layout_view v,
                                    const leaf_id* __restrict__ leaf_ids, const compact_guide* __restrict__ guides,
                                    std::size_t guide_count, leaf_hint* __restrict__ hints) {
  for (std::size_t i = grid_first(); i < n; i += grid_stride()) {
    const key_type key = keys[i];
    const leaf_span s = descend_span<F>(v, key);
    const leaf_id id = s.ordinal < v.leaf_count ? leaf_ids[s.ordinal] : no_leaf;
    hints[i] = id < guide_count ? compact_hint(guides[id], key, s.low, s.next_low, s.bounded) : no_hint;
  }
}

/// For i < n: keys_out[i] = keys_in[perm[i]], args_out[i] = args_in[perm[i]],
/// types_out[i] = types_in[perm[i]]; a null output skips its array.
template <class K, class A, class T>
__global__ void gather_kernel(const std::uint32_t* __restrict__ perm, std::size_t n, const K* __restrict__ keys_in,
                              K* __restrict__ keys_out, const A* __restrict__ args_in, A* __restrict__ args_out,
                              const T* __restrict__ types_in, T* __restrict__ types_out) {
  for (std::size_t i = grid_first(); i < n; i += grid_stride()) {
    const std::uint32_t p = perm[i];
    if (keys_out != nullptr) keys_out[i] = keys_in[p];
    if (args_out != nullptr) args_out[i] = args_in[p];
    if (types_out != nullptr) types_out[i] = types_in[p];
  }
}

/// 1 for a key in [lo, hi], else 0 (route_range's filter).
struct in_range {
  key_type lo, hi;
  __host__ __device__ std::uint32_t operator()(key_type k) const { return k >= lo && k <= hi ? 1u : 0u; }
};

/// Appends a chunk's ops whose key is in `range` after the `*kept` ops kept
/// before them, in chunk order: op i (offsets[i] = how many ops before it
/// in the chunk are in range) goes to *kept + offsets[i], with its batch
/// position first + i; entries at or past `limit` are not written. A null
/// args (types) skips that array.
__global__ inline void keep_in_range_kernel(const key_type* __restrict__ keys, const value_type* __restrict__ args,
                                            const std::uint8_t* __restrict__ types,
                                            const std::uint32_t* __restrict__ offsets, std::size_t count,
                                            in_range range, const std::uint32_t* __restrict__ kept,
                                            std::uint32_t first, std::size_t limit, key_type* __restrict__ keys_out,
                                            value_type* __restrict__ args_out, std::uint8_t* __restrict__ types_out,
                                            std::uint32_t* __restrict__ positions_out) {
  const std::size_t base = *kept;
  for (std::size_t i = grid_first(); i < count; i += grid_stride()) {
    const key_type k = keys[i];
    const std::size_t at = base + offsets[i];
    if (range(k) == 0 || at >= limit) continue;
    keys_out[at] = k;
    if (args != nullptr) args_out[at] = args[i];
    if (types != nullptr) types_out[at] = types[i];
    positions_out[at] = first + static_cast<std::uint32_t>(i);
  }
}

/// *kept += the chunk's ops in range (the last offset plus the last op's
/// own flag). One thread, after keep_in_range_kernel.
__global__ inline void add_kept_kernel(const key_type* __restrict__ keys, const std::uint32_t* __restrict__ offsets,
                                       std::size_t count, in_range range, std::uint32_t* __restrict__ kept) {
  *kept += offsets[count - 1] + range(keys[count - 1]);
}

/// For i < count: values_out[positions[i]] = values[i], flags_out[...] =
/// flags[i]; positions >= n are skipped; a null output skips its array.
template <class V, class F>
__global__ void scatter_kernel(const std::uint32_t* __restrict__ positions, std::size_t count, std::size_t n,
                               const V* __restrict__ values, V* __restrict__ values_out, const F* __restrict__ flags,
                               F* __restrict__ flags_out) {
  for (std::size_t i = grid_first(); i < count; i += grid_stride()) {
    const std::uint32_t p = positions[i];
    if (p >= n) continue;
    if (values_out != nullptr) values_out[p] = values[i];
    if (flags_out != nullptr) flags_out[p] = flags[i];
  }
}

}  // namespace tandem::device::detail
