#pragma once
/// @file
/// How a client of range shards cuts a batch and puts the answers back
/// (tandem-bench --shards; tandem.distributed does the same with
/// np.searchsorted): the key space is cut into ranges by their low bounds,
/// each op goes to the range holding its key, each range's part keeps batch
/// order, and the parts' answers are written back at the ops' batch
/// positions.
///
/// The parts lie back to back in one set of arrays (a stable counting sort
/// by range: tandem::host::counting_scatter, the pass CPU routing sorts
/// with), so a part is a window of them that an index reads and answers in
/// place. Both passes run in parallel on the calling thread's TBB arena.
/// The cut's arrays are pinned by default (pinned_vector.hpp), so an index
/// on a GPU reads a part's keys directly, without staging.

#include "pinned_vector.hpp"

#include <tandem/batch.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem_bench {

/// @return the low bounds of `shards` (>= 1) equal ranges of the 64-bit key
///         space: lows[0] = 0 and lows[i] = ceil(i * 2^64 / shards), so
///         range i is [lows[i], lows[i + 1]) and the last ends at UINT64_MAX
///         (included).
[[nodiscard]] std::vector<tandem::key_type> equal_ranges(std::size_t shards);

/// @return the range holding `key`: the last i with lows[i] <= key
///         (np.searchsorted(lows, key, side='right') - 1). `lows` ascends
///         and starts at 0.
[[nodiscard]] std::size_t shard_of(const std::vector<tandem::key_type>& lows, tandem::key_type key) noexcept;

/// One batch cut by range, in arrays sized once for the largest batch
/// (touched at construction, reused batch after batch):
///
///     begin[0..shards]        part s is [begin[s], begin[s + 1]) of the
///                             arrays below; begin[0] = 0, begin[shards] = n
///     keys[0..n)              the ops' keys, part by part, each in batch order
///     args[0..n), types[0..n) the same for args and op types (when cut with them)
///     positions[0..n)         each op's place in the batch: within a part
///                             they increase; over all parts they are a
///                             permutation of 0..n-1
///
/// keys, args, types and positions are page-locked unless the cut is made
/// with pinned = false (a cut used once, too large to pin, as the load's).
struct shard_cut {
  /// @param capacity most ops a batch holds (< 2^32)
  /// @param with_args room for args and types too
  /// @param pinned    the arrays in page-locked memory, else ordinary memory
  shard_cut(std::size_t capacity, std::size_t shards, bool with_args, bool pinned = true);

  [[nodiscard]] std::size_t shards() const noexcept { return begin.size() - 1; }
  [[nodiscard]] std::size_t size() const noexcept { return begin.back(); }
  [[nodiscard]] std::size_t part_size(std::size_t s) const noexcept { return begin[s + 1] - begin[s]; }

  std::vector<std::size_t> begin;
  pinned_vector<tandem::key_type> keys;
  pinned_vector<std::uint64_t> args;
  pinned_vector<tandem::op_type> types;
  pinned_vector<std::uint32_t> positions;
  /// Per chunk of the input and range: ops counted, then where they go.
  std::vector<std::size_t> chunk_counts;
};

/// @brief Cuts the batch keys[i] (args[i], types[i]), i < n, by `lows` into
///        `out` (see shard_cut). args and types may each be null (then they
///        are not cut). Parallel; waits.
/// @throws std::invalid_argument when n exceeds the capacity of `out`,
///         lows.size() != out.shards(), or args or types are given to a cut
///         without room for them
void cut_by_range(const tandem::key_type* keys, const std::uint64_t* args, const tandem::op_type* types,
                  std::size_t n, const std::vector<tandem::key_type>& lows, shard_cut& out);

/// @brief Puts the answers of part `s` of `cut` back in batch order:
///        values_out[p] = values[j] and found_out[p] = found[j] for the
///        part's j-th op at batch position p. `values` and `found` hold the
///        part's answers in its order (values_out may be null to put back
///        only flags).
/// @return how many of the part's found flags are set
std::uint64_t put_back(const shard_cut& cut, std::size_t s, const tandem::value_type* values,
                       const std::uint8_t* found, tandem::value_type* values_out, std::uint8_t* found_out);

}  // namespace tandem_bench
