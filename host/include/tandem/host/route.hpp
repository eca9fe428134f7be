#pragma once
/// @file
/// CPU routing: a batch of keys -> the leaves that own them, grouped by leaf.
///
/// What it does. `route_cpu` descends the inner layout (inner_layout.hpp) for
/// every key of a batch, on the workers of the calling thread's oneTBB task
/// arena, and returns the batch's op positions grouped by leaf: the ops of
/// one leaf are contiguous, groups come in increasing leaf-ordinal order and
/// positions increase inside a group (so per key, batch order is kept). This
/// is DESIGN step 2 (CPU); the GPU does the same for its share of a batch.
///
/// How. Each worker descends a *group* of 16 keys at once, level by level:
/// after computing a key's next node it prefetches every cache line of that
/// node (and its prefix-sum entry), then searches the other keys of the group
/// while those lines arrive, so the group's memory misses overlap (pB+-trees,
/// notes/pbtree.md). The top 32 KiB of the tree is never prefetched: it stays
/// in cache anyway.
///
/// Grouping is a stable counting sort over leaf ordinals. With at most 4096
/// leaves it is one pass: per-chunk histograms, a prefix, a scatter. With
/// more, a histogram over every leaf would leave the cache and cost two
/// misses per op, so it runs in two passes (MSD radix): (ordinal, position)
/// pairs are first partitioned stably by the ordinal's high bits into at most
/// 4096 buckets, then each bucket is counting-sorted by the low bits inside
/// the cache, buckets in parallel; a bucket with few ops for its range of
/// leaves is sorted instead, so a batch much smaller than the leaf count pays
/// for its ops, not for empty buckets. Batches of at most pair_sort_max_ops
/// ops just sort their (ordinal, position) pairs.
///
/// Waiting: every function here waits for its work; the parallel ones run in
/// the caller's current task arena (wrap the call in
/// `tbb::task_arena::execute` to bound the threads). Exceptions are thrown on
/// the calling thread. The layout must stay alive and unchanged during a call.

#include <tandem/core/inner_layout.hpp>
#include <tandem/core/routed_batch.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::host {

/// Working memory of the grouping, kept in routed_batch so that a reused
/// output reuses it too. No meaning between calls.
struct route_workspace {
  std::vector<std::uint64_t> pairs;
  std::vector<std::uint32_t> counts;
  std::vector<std::uint32_t> chunk_counts;
  std::vector<std::uint32_t> bucket_begin;
  std::vector<std::uint32_t> bucket_groups;
  std::vector<unsigned char> bucket_sorted;
};

/// A batch grouped by leaf. With G = group_count():
///
///     struct routed_batch {
///       u32     positions[n];        // a permutation of 0 .. n-1
///       u32     group_begin[G + 1];  // group g = positions[group_begin[g] .. group_begin[g+1])
///       u32     group_ordinal[G];    // leaf ordinal of group g, strictly increasing
///       leaf_id group_leaf[G];       // leaf_ids[group_ordinal[g]]
///       u32     ordinals[n];         // by-product: ordinal of op i, batch order
///     };
///
/// Invariants: group_begin[0] == 0, group_begin[G] == n, groups are non-empty;
/// inside a group positions are strictly increasing; ordinals[p] ==
/// group_ordinal[g] for every position p of group g.
struct routed_batch {
  std::vector<std::uint32_t> positions;
  std::vector<std::uint32_t> group_begin;
  std::vector<std::uint32_t> group_ordinal;
  std::vector<leaf_id> group_leaf;
  std::vector<std::uint32_t> ordinals;
  route_workspace workspace;

  /// @return the number of ops routed.
  [[nodiscard]] std::size_t size() const noexcept { return positions.size(); }
  /// @return the number of leaves with at least one op.
  [[nodiscard]] std::size_t group_count() const noexcept { return group_ordinal.size(); }
};

/// How keys are descended.
enum class descent_method {
  grouped,              ///< 16 keys in flight, level by level, whole-node prefetch (default)
  grouped_no_prefetch,  ///< the same without prefetch (faster only while the tree sits in L2)
  plain,                ///< one key after the other, no prefetch (for comparison)
};

/// How routed ops are grouped by leaf.
enum class grouping_method {
  automatic,      ///< pair sort for small batches, else counting sort (default)
  counting_sort,  ///< stable parallel counting sort over leaf ordinals (one or two passes)
  pair_sort,      ///< sort of (ordinal, position) pairs
};

struct route_options {
  descent_method descent = descent_method::grouped;
  grouping_method grouping = grouping_method::automatic;
};

/// The automatic grouping sorts pairs for batches of at most this many ops
/// and takes the counting sort above.
inline constexpr std::size_t pair_sort_max_ops = 512;

/// @brief Routes one key: the ordinal of the leaf that owns it (= descend()).
[[nodiscard]] inline std::uint32_t route_one(const inner_layout_view& v, key_type key) noexcept {
  return descend(v, key);
}

/// @brief Descends every key (parallel, waits): ordinals[i] = the ordinal of
///        the leaf that owns keys[i].
/// @throws std::invalid_argument when n > 0 and the layout is empty.
void descend_batch(const inner_layout_view& v, const key_type* keys, std::size_t n, std::uint32_t* ordinals,
                   descent_method method = descent_method::grouped);

/// @brief Groups ops by leaf ordinal (parallel, waits), filling every field
///        of `out` but `ordinals`, which it reads (`out.ordinals` must hold n
///        ordinals < v.leaf_count).
/// @throws std::length_error when n >= 2^32.
void group_by_leaf(const inner_layout_view& v, routed_batch& out, grouping_method method = grouping_method::automatic);

/// @brief Routes a batch of n keys and groups it by leaf (parallel, waits).
///        Reuses the capacity of `out`.
/// @param keys n keys, any values (0 and UINT64_MAX included)
/// @throws std::invalid_argument when n > 0 and the layout is empty.
/// @throws std::length_error when n >= 2^32 (positions are u32).
void route_cpu(const inner_layout_view& v, const key_type* keys, std::size_t n, routed_batch& out,
               const route_options& options = {});

/// @brief Routes ops [0, n) of a batch for the leaf phase: `out` gets them
///        grouped by leaf and sorted by (key, position) inside each group
///        (out.key_sorted), with positions offset by `first_position`, and
///        args/types gathered the same way when out.args/out.types are set
///        (then `args`/`types` must be given). Parallel, waits.
/// @param work grouping work arrays, reused from call to call
void route_sorted(const inner_layout_view& v, const key_type* keys, const std::uint64_t* args,
                  const std::uint8_t* types, std::size_t n, std::uint32_t first_position, routed_batch_view& out,
                  routed_batch& work);

/// @brief Sorts every group of a route that is grouped but not key-sorted by
///        (key, position), moving args/types along; sets out.key_sorted.
///        Parallel, waits.
void sort_groups(routed_batch_view& out);

/// @brief As above, returning a new routed_batch.
[[nodiscard]] routed_batch route_cpu(const inner_layout& layout, const key_type* keys, std::size_t n,
                                     const route_options& options = {});

}  // namespace tandem::host
