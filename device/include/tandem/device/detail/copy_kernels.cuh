#pragma once
/// @file
/// Kernels of the leaf copies (private to gpu_router): the lookup that
/// answers gets from the copies (core/leaf_copy.hpp's copy_get, one
/// implementation with the host stand-in), those of a batch with writes
/// (copy_sorted_row: answered, patched, or left to the host, then the rows
/// left compacted) and the two that apply a copy_changes. Templates (header-only, as shuffle_kernels.cuh).

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

/// Rows s < n of a batch with writes, sorted by (key, position), with their
/// leaf ordinals and batch positions: copy_sorted_row's verdict in rows[s];
/// a row answered writes values, found and found_keys at its batch
/// position. One in eight answers counts 8 hits of its leaf.
template <int Unused = 0>
__global__ void copy_rows_kernel(const key_type* __restrict__ keys, const std::uint8_t* __restrict__ types,
                                 const std::uint32_t* __restrict__ ordinals,
                                 const std::uint32_t* __restrict__ positions, std::size_t n,
                                 const leaf_id* __restrict__ leaf_ids, std::uint32_t leaf_count,
                                 const leaf_copy* __restrict__ table, std::size_t table_size,
                                 const entry* __restrict__ pool, std::uint32_t* __restrict__ hits,
                                 value_type* __restrict__ values, std::uint8_t* __restrict__ found,
                                 key_type* __restrict__ found_keys, std::uint8_t* __restrict__ rows) {
  for (std::size_t s = grid_first(); s < n; s += grid_stride()) {
    const std::uint32_t o = ordinals[s];
    const leaf_id id = o < leaf_count ? leaf_ids[o] : no_leaf;
    const leaf_copy c = id < table_size ? table[id] : leaf_copy{};
    value_type v = 0;
    std::uint8_t f = 0;
    key_type k = 0;
    const copy_row r = copy_sorted_row(keys, types, s, c, pool, &v, &f, &k);
    rows[s] = static_cast<std::uint8_t>(r);
    if (r == copy_row::answered) {
      const std::uint32_t p = positions[s];
      values[p] = v;
      found[p] = f;
      found_keys[p] = k;
      if ((p & 7) == 0) atomicAdd(hits + id, 8u);
    }
  }
}

/// The values of the patched rows (copy_row::patched) into their copies:
/// each key's last put (copy_last_put), args[s] in sorted order.
template <int Unused = 0>
__global__ void copy_patch_kernel(const key_type* __restrict__ keys, const std::uint8_t* __restrict__ types,
                                  const std::uint32_t* __restrict__ ordinals, const value_type* __restrict__ args,
                                  const std::uint8_t* __restrict__ rows, std::size_t n,
                                  const leaf_id* __restrict__ leaf_ids, const leaf_copy* __restrict__ table,
                                  entry* __restrict__ pool) {
  for (std::size_t s = grid_first(); s < n; s += grid_stride()) {
    if (rows[s] != static_cast<std::uint8_t>(copy_row::patched) || !copy_last_put(keys, types, s, n)) continue;
    bool speaks = false;
    const std::uint64_t at = copy_find(table[leaf_ids[ordinals[s]]], pool, keys[s], &speaks);
    if (at != no_copy_entry) pool[at].value = args[s];
  }
}

/// 1 for a row the host still has (not answered from a copy).
struct row_for_host {
  __host__ __device__ std::uint32_t operator()(std::uint8_t r) const {
    return r != static_cast<std::uint8_t>(copy_row::answered) ? 1u : 0u;
  }
};

/// Sorted rows, one array each, and where the rows the host has go.
struct row_arrays {
  const key_type* keys;
  const std::uint32_t* positions;
  const std::uint32_t* ordinals;
  const value_type* args;
  const std::uint8_t* types;
  const leaf_hint* hints;  // may be null
};
struct row_outputs {
  key_type* keys;
  std::uint32_t* positions;
  std::uint32_t* ordinals;
  value_type* args;
  std::uint8_t* types;
  leaf_hint* hints;  // null when in.hints is
};

/// The rows the host has (rows[s] != answered), in order: row s to
/// offsets[s] (their exclusive sum), a patched put's type with
/// copy_patched_bit; how many into *count.
template <int Unused = 0>
__global__ void copy_compact_kernel(row_arrays in, const std::uint8_t* __restrict__ rows,
                                    const std::uint32_t* __restrict__ offsets, std::size_t n, row_outputs out,
                                    std::uint32_t* __restrict__ count) {
  for (std::size_t s = grid_first(); s < n; s += grid_stride()) {
    const std::uint8_t r = rows[s];
    if (s + 1 == n) *count = offsets[s] + (r != static_cast<std::uint8_t>(copy_row::answered) ? 1u : 0u);
    if (r == static_cast<std::uint8_t>(copy_row::answered)) continue;
    const std::uint32_t o = offsets[s];
    out.keys[o] = in.keys[s];
    out.positions[o] = in.positions[s];
    out.ordinals[o] = in.ordinals[s];
    out.args[o] = in.args[s];
    out.types[o] = static_cast<std::uint8_t>(
        in.types[s] | (r == static_cast<std::uint8_t>(copy_row::patched) ? copy_patched_bit : 0));
    if (out.hints != nullptr) out.hints[o] = in.hints[s];
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
