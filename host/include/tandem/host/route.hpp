#pragma once
/// @file
/// CPU routing: a batch's ops -> sorted by key and grouped by the leaf that
/// owns them, the same shape the GPU router gives (routed_batch.hpp).
///
/// How. The CPU does what the GPU does, sort first, then descend:
/// 1. (key, position) items are partitioned by an MSD radix digit of the
///    key (parallel histograms, a prefix, a stable scatter). The digit is
///    taken just below the bits every key of the batch shares, so small
///    integer keys or a batch inside a narrow range spread as well as
///    uniform keys do.
/// 2. Each bucket (a few thousand items, in cache) is sorted by a second
///    counting pass on the next digit of its own key range and an insertion
///    or std::sort pass over what that leaves unsorted; buckets run in
///    parallel and write keys, positions (and args, types) in sorted order.
/// 3. The sorted keys of a bucket are walked against the inner layout: one
///    descent per leaf (`descend_span` says how far a leaf reaches), so the
///    groups come out of a merge of sorted keys with the leaf separators.
/// Ties on a key keep batch order: the items compare as (key, position).
///
/// Waiting: every function here waits for its work; the parallel ones run in
/// the caller's current task arena (wrap the call in `tbb::task_arena::execute`
/// to bound the threads). The layout must stay alive and unchanged during a
/// call.

#include <tandem/core/inner_layout.hpp>
#include <tandem/core/routed_batch.hpp>
#include <tandem/core/types.hpp>
#include <tandem/host/detail/huge_pages.hpp>

#include <oneapi/tbb/enumerable_thread_specific.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::host {

/// Working memory of `route_sorted`, reused from call to call (grow-only).
/// No meaning between calls.
struct route_workspace {
  __extension__ typedef unsigned __int128 item;  ///< key << 64 | position
  std::vector<item, detail::huge_page_allocator<item>> items;
  std::vector<std::uint32_t> histograms;    // per chunk and bucket
  std::vector<std::uint32_t> bucket_begin;  // per bucket + 1
  std::vector<std::uint32_t> group_count;    // per bucket
  std::vector<std::uint32_t> first_ordinal;  // per bucket
  /// Per thread: what sorting a bucket or a group works in.
  struct thread_scratch {
    std::vector<std::uint32_t> counts;
    std::vector<item> items;
    std::vector<std::uint64_t> args;
    std::vector<std::uint8_t> types;
  };
  /// Not `thread_local`: in a library loaded with dlopen (the Python module)
  /// every access to one takes glibc's `__tls_get_addr` slow path before
  /// 2.39 (3% of the CPU time of 2^20-get batches).
  tbb::enumerable_thread_specific<thread_scratch> scratch;
};

/// @brief Routes ops [0, n) of a batch for the leaf phase: `out` gets them
///        sorted by (key, position) and grouped by leaf (out.key_sorted),
///        positions offset by `first_position`, and args/types gathered the
///        same way when out.args/out.types are set (then `args`/`types` must
///        be given). Parallel, waits.
/// @throws std::invalid_argument when n > 0 and the layout is empty.
/// @throws std::length_error when n + first_position >= 2^32 (positions are u32).
void route_sorted(const inner_layout_view& v, const key_type* keys, const std::uint64_t* args,
                  const std::uint8_t* types, std::size_t n, std::uint32_t first_position, routed_batch_view& out,
                  route_workspace& work);

/// @brief Sorts n keys, key i at keys[i * stride], with their positions:
///        keys_out/positions_out get (key, i) in ascending (key, i) order, so
///        equal keys keep their input order. The radix sort of
///        `route_sorted` without the descent. Parallel, waits.
/// @throws std::length_error when n >= 2^32 (positions are u32).
void sort_keys(const key_type* keys, std::size_t stride, std::size_t n, key_type* keys_out,
               std::uint32_t* positions_out, route_workspace& work);

/// Work arrays of merge_routes, reused from call to call (grow-only).
struct merge_workspace {
  std::vector<std::uint32_t> first;  // per range and part: the part's first group there
  std::vector<std::size_t> group_at, op_at;  // per range: its first output group and op
};

/// @brief Merges k key-sorted routes of one batch's ops into one: `out` gets
///        one group per leaf ordinal, ordinals increasing, each group in
///        (key, batch position) order, as route_sorted gives for the whole
///        batch. Part i's positions plus bases[i] are batch positions (the
///        GPU numbers a slice from 0, route_sorted from its first_position);
///        parts hold disjoint positions and n ops in all. The ordinal space
///        is cut into ranges merged in parallel: a first pass counts each
///        range's groups, a prefix sum places the ranges, a second pass
///        merges groups and ops (a branch-free pick of the least head over
///        the parts). Args and types move along when out.args is set (then
///        every part has them). Waits.
/// @throws std::logic_error when the parts do not hold n ops
void merge_routes(const routed_batch_view* parts, const std::uint32_t* bases, std::size_t k, std::size_t n,
                  routed_batch_view& out, merge_workspace& work);

/// @brief Sorts every group of a route that is grouped but not key-sorted by
///        (key, position), moving args/types along; sets out.key_sorted.
///        Parallel, waits. Uses `work.scratch` only.
void sort_groups(routed_batch_view& out, route_workspace& work);

}  // namespace tandem::host
