#pragma once
/// @file
/// Merging sorted runs of pairs, the host half of a bulk load whose sort ran
/// on the GPU in runs (gpu_router::sort_pairs): each run holds strictly
/// increasing keys, a key may recur in later runs, and the pair of the last
/// run that holds a key wins (runs hold input in order, a later pair wins).
///
/// How. The keys of the longest run at evenly spaced ranks split the key
/// space into pieces; each run's share of a piece is found by binary search,
/// so every copy of a key falls into one piece. Pieces merge in parallel,
/// twice: a first walk counts the distinct keys of each piece, a prefix sum
/// gives each piece its place, and a second walk writes there. The walk
/// takes the least head key over the runs (a linear look at k heads: k is
/// small).
///
/// Waiting: parallel in the caller's task arena; returns when done.

#include <tandem/core/types.hpp>

#include <cstddef>
#include <vector>

namespace tandem::host {

/// @brief Merges the runs [bounds[r], bounds[r + 1]) of keys/values (each
///        strictly increasing in key) into keys_out/values_out in key order,
///        one pair per key: where runs share a key, the pair of the last of
///        them. The outputs must not overlap the inputs and have room for
///        bounds.back() - bounds.front() pairs.
/// @return pairs written
/// @throws std::invalid_argument when bounds is empty or decreases
std::size_t merge_sorted_runs(const key_type* keys, const value_type* values, const std::vector<std::size_t>& bounds,
                              key_type* keys_out, value_type* values_out);

}  // namespace tandem::host
