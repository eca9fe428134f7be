#pragma once
/// @file
/// Kernels of the leaf copies (private to gpu_router): the lookup that
/// answers gets from the copies (core/leaf_copy.hpp's copy_get, one
/// implementation with the host stand-in) and the two that apply a
/// copy_changes. Templates (header-only, as shuffle_kernels.cuh).

#include <tandem/core/leaf_copy.hpp>
#include <tandem/core/types.hpp>
#include <tandem/device/detail/shuffle_kernels.cuh>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tandem::device::detail {

/// For i < n, the key keys[i] that descended to leaf ordinal ordinals[i]:
/// answered from its leaf's copy (values[i], found[i], missed[i] = 0), or
/// found[i] = 0, missed[i] = 1. Batch position base + i; one in eight
/// answers counts 8 hits of its leaf.
template <int Unused = 0>
__global__ void copy_lookup_kernel(const key_type* __restrict__ keys, const std::uint32_t* __restrict__ ordinals,
                                   std::size_t n, const leaf_id* __restrict__ leaf_ids, std::uint32_t leaf_count,
                                   const leaf_copy* __restrict__ table, std::size_t table_size,
                                   const entry* __restrict__ pool, std::uint32_t* __restrict__ hits, std::size_t base,
                                   value_type* __restrict__ values, std::uint8_t* __restrict__ found,
                                   std::uint8_t* __restrict__ missed) {
  for (std::size_t i = grid_first(); i < n; i += grid_stride()) {
    const key_type key = keys[i];
    const std::uint32_t o = ordinals[i];
    copy_answer a = copy_answer::none;
    value_type v = 0;
    leaf_id id = no_leaf;
    if (o < leaf_count) {
      id = leaf_ids[o];
      if (id < table_size) a = copy_get(table[id], pool, key, &v);
    }
    values[i] = v;
    found[i] = a == copy_answer::found ? 1 : 0;
    missed[i] = a == copy_answer::none ? 1 : 0;
    if (a != copy_answer::none && ((base + i) & 7) == 0) atomicAdd(hits + id, 8u);
  }
}

/// Block b copies move b: staged[from, from + count) to pool[to, ...).
template <int Unused = 0>
__global__ void copy_moves_kernel(const entry* __restrict__ staged, const copy_move* __restrict__ moves,
                                  std::size_t count, entry* __restrict__ pool) {
  for (std::size_t m = blockIdx.x; m < count; m += gridDim.x) {
    const copy_move mv = moves[m];
    for (std::size_t i = threadIdx.x; i < mv.count; i += blockDim.x) pool[mv.to + i] = staged[mv.from + i];
  }
}

/// table[ids[i]] = entries[i] for i < n (ids distinct).
template <int Unused = 0>
__global__ void copy_entries_kernel(const leaf_id* __restrict__ ids, const leaf_copy* __restrict__ entries,
                                    std::size_t n, leaf_copy* __restrict__ table) {
  for (std::size_t i = grid_first(); i < n; i += grid_stride()) table[ids[i]] = entries[i];
}

}  // namespace tandem::device::detail
