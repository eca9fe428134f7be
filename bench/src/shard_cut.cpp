#include "shard_cut.hpp"

#include <tandem/host/counting_scatter.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem_bench {
namespace {

__extension__ using u128 = unsigned __int128;

/// Ops a chunk of the input holds: each is counted, then written, by one task.
constexpr std::size_t cut_chunk = std::size_t{1} << 16;

/// @return `shards`, once the bounds hold (before any array is pinned)
std::size_t checked_shards(std::size_t capacity, std::size_t shards) {
  if (shards == 0) throw std::invalid_argument("shard_cut: at least one shard");
  if (capacity >= (std::size_t{1} << 32)) {
    throw std::invalid_argument("shard_cut: batches of at most 2^32 - 1 ops (positions are 32-bit), asked " +
                                std::to_string(capacity));
  }
  return shards;
}

}  // namespace

std::vector<tandem::key_type> equal_ranges(std::size_t shards) {
  if (shards == 0) throw std::invalid_argument("equal_ranges: at least one shard");
  std::vector<tandem::key_type> lows(shards);
  for (std::size_t i = 0; i < shards; ++i) {
    const u128 scaled = static_cast<u128>(i) << 64;
    lows[i] = static_cast<tandem::key_type>((scaled + shards - 1) / shards);
  }
  return lows;
}

std::size_t shard_of(const std::vector<tandem::key_type>& lows, tandem::key_type key) noexcept {
  return static_cast<std::size_t>(std::upper_bound(lows.begin() + 1, lows.end(), key) - lows.begin()) - 1;
}

shard_cut::shard_cut(std::size_t capacity, std::size_t shards, bool with_args, bool pinned)
    : begin(checked_shards(capacity, shards) + 1, 0),
      keys(capacity, pinned_allocator<tandem::key_type>(pinned)),
      args(with_args ? capacity : 0, pinned_allocator<std::uint64_t>(pinned)),
      types(with_args ? capacity : 0, pinned_allocator<tandem::op_type>(pinned)),
      positions(capacity, pinned_allocator<std::uint32_t>(pinned)),
      chunk_counts(((capacity + cut_chunk - 1) / cut_chunk) * shards) {}

void cut_by_range(const tandem::key_type* keys, const std::uint64_t* args, const tandem::op_type* types,
                  std::size_t n, const std::vector<tandem::key_type>& lows, shard_cut& out) {
  const std::size_t shards = out.shards();
  if (lows.size() != shards) throw std::invalid_argument("cut_by_range: one low bound a shard");
  if (n > out.keys.size()) throw std::invalid_argument("cut_by_range: more ops than the cut has room for");
  const bool with_args = args != nullptr, with_types = types != nullptr;
  if ((with_args || with_types) && out.args.size() < n) {
    throw std::invalid_argument("cut_by_range: the cut has no room for args and types");
  }
  const std::size_t chunks = (n + cut_chunk - 1) / cut_chunk;
  tandem::host::counting_scatter(
      chunks, shards, [&](std::size_t c) { return std::min(n, c * cut_chunk); },
      [&](std::size_t i) { return keys[i]; }, [&](tandem::key_type key) { return shard_of(lows, key); },
      [&](std::size_t i, tandem::key_type key, std::size_t j) {
        out.keys[j] = key;
        out.positions[j] = static_cast<std::uint32_t>(i);
        if (with_args) out.args[j] = args[i];
        if (with_types) out.types[j] = types[i];
      },
      out.chunk_counts.data(), out.begin.data());
}

std::uint64_t put_back(const shard_cut& cut, std::size_t s, const tandem::value_type* values,
                       const std::uint8_t* found, tandem::value_type* values_out, std::uint8_t* found_out) {
  const std::size_t first = cut.begin[s];
  const std::size_t n = cut.part_size(s);
  const std::uint32_t* positions = cut.positions.data() + first;
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, n, cut_chunk / 4), std::uint64_t{0},
      [&](const tbb::blocked_range<std::size_t>& r, std::uint64_t hits) {
        for (std::size_t j = r.begin(); j < r.end(); ++j) {
          const std::uint32_t p = positions[j];
          if (values_out != nullptr) values_out[p] = values[j];
          found_out[p] = found[j];
          hits += found[j];
        }
        return hits;
      },
      [](std::uint64_t a, std::uint64_t b) { return a + b; });
}

}  // namespace tandem_bench
