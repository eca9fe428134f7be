#pragma once
// The snapshot file's on-disk format (the layout is in snapshot_file.hpp):
// the header and footer as laid out in the file, the checksums, and where
// the chunks lie. Shared by the reader and the writer.
#include <tandem/host/storage/snapshot_file.hpp>

// Header-only use of the packaged xxHash: no library to link, nothing for
// consumers of tandem to find.
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::host::snapshot::format {

inline constexpr char header_magic[8] = {'T', 'A', 'N', 'D', 'E', 'M', 'S', 'S'};
inline constexpr char footer_magic[8] = {'T', 'A', 'N', 'D', 'E', 'M', 'S', 'F'};
inline constexpr std::uint32_t byte_order_mark = 0x01020304;
inline constexpr std::uint64_t pair_bytes = sizeof(key_type) + sizeof(value_type);
inline constexpr std::uint64_t chunk_overhead = 2 * sizeof(std::uint64_t);  // n and checksum

/// The header as laid out in the file.
struct raw_header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t byte_order;
  std::uint32_t geom[5];  // leaf_capacity, log_capacity, block_count, block_size, inner_fanout
  std::uint32_t chunk_pairs;
  std::uint64_t pairs;
  std::uint64_t sequence;
  std::uint64_t checksum;  // of the bytes before it
};
static_assert(sizeof(raw_header) == 64 && offsetof(raw_header, chunk_pairs) == 36 &&
              offsetof(raw_header, checksum) == 56);

struct raw_footer {
  char magic[8];
  std::uint64_t pairs;
  std::uint64_t checksum;
};
static_assert(sizeof(raw_footer) == 24);

// The code over xxHash, which XXH_INLINE_ALL makes static: internal here
// too, one copy in each file that includes this header.
namespace {

inline std::uint64_t header_checksum(const raw_header& h) {
  return XXH3_64bits(&h, offsetof(raw_header, checksum));
}

/// The footer's checksum: of the chunks' checksums, seeded with the header's.
inline std::uint64_t footer_checksum(const std::vector<std::uint64_t>& chunk_checksums, std::uint64_t header_sum) {
  return XXH3_64bits_withSeed(chunk_checksums.data(), chunk_checksums.size() * sizeof(std::uint64_t), header_sum);
}

/// Pairs per step of work whose next step reads what it left in cache:
/// 32 KiB of keys (and of values).
inline constexpr std::size_t cache_step = 4096;

/// A chunk's checksum: XXH3_64bits_withSeed of the digests
/// {XXH3_64bits(n, keys), XXH3_64bits(values)}, seeded with the chunk's
/// index. Keys and values are two streams, so that they can be fed in any
/// interleaving (the writer hashes each piece as it copies it).
class chunk_hash {
 public:
  explicit chunk_hash(std::uint64_t n) noexcept {
    XXH3_INITSTATE(&keys_);
    XXH3_INITSTATE(&values_);
    reset(n);
  }
  /// Starts the checksum of a chunk of `n` pairs.
  void reset(std::uint64_t n) noexcept {
    XXH3_64bits_reset(&keys_);
    XXH3_64bits_update(&keys_, &n, sizeof n);
    XXH3_64bits_reset(&values_);
  }
  void add_keys(const key_type* k, std::size_t count) noexcept { XXH3_64bits_update(&keys_, k, count * sizeof *k); }
  void add_values(const value_type* v, std::size_t count) noexcept {
    XXH3_64bits_update(&values_, v, count * sizeof *v);
  }
  [[nodiscard]] std::uint64_t digest(std::uint64_t index) const noexcept {
    const std::uint64_t parts[2] = {XXH3_64bits_digest(&keys_), XXH3_64bits_digest(&values_)};
    return XXH3_64bits_withSeed(parts, sizeof parts, index);
  }

 private:
  XXH3_state_t keys_;
  XXH3_state_t values_;
};

}  // namespace

/// Empty when the fields are in range, else what is wrong.
std::string field_problem(const std::uint32_t (&geom)[5], std::uint32_t chunk_pairs);

/// The header of `h`, checksum included.
raw_header make_header(const info& h);

/// What a header says.
info info_of(const raw_header& r);

/// Where the chunks lie, as a checked header implies.
struct layout {
  std::uint64_t pairs;
  std::uint64_t chunk_pairs;
  std::uint64_t chunks;

  [[nodiscard]] std::uint64_t chunk_offset(std::uint64_t c) const {
    return sizeof(raw_header) + c * (chunk_overhead + chunk_pairs * pair_bytes);
  }
  [[nodiscard]] std::uint64_t chunk_size(std::uint64_t c) const {
    return std::min(chunk_pairs, pairs - c * chunk_pairs);
  }
  [[nodiscard]] std::uint64_t footer_offset() const {
    return sizeof(raw_header) + chunks * chunk_overhead + pairs * pair_bytes;
  }
  [[nodiscard]] std::uint64_t file_size() const { return footer_offset() + sizeof(raw_footer); }
};

/// @throws tandem::error "tandem snapshot '<name>': <what>"
[[noreturn]] void fail(const std::string& name, const std::string& what);

}  // namespace tandem::host::snapshot::format
