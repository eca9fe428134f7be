// libFuzzer target of the snapshot reader (host/storage/snapshot_file.hpp).
//
// Each input is read as a snapshot twice, with read_buffer (the checks of
// read and read_into, over a buffer): as it is, and "resealed", with every
// checksum recomputed where the layout puts it (as far as the bytes reach),
// so that mutated inputs get past the checksums to the checks behind them:
// the size the header implies, chunk pair counts, key order, the footer.
// Each read must either throw tandem::error or return what the format
// promises (header.pairs pairs, keys strictly increasing); anything else
// (another exception, a crash, a sanitizer report) is a finding. An input
// that reads as it is must read the same resealed: its checksums were right.
//
// The seeds in snapshot_corpus/ are small snapshots made by the writer.
#include <tandem/error.hpp>
#include <tandem/host/storage/snapshot_file.hpp>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

namespace {

namespace snapshot = tandem::host::snapshot;

template <class T>
T get(const std::vector<unsigned char>& b, std::size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

void put(std::vector<unsigned char>& b, std::size_t at, std::uint64_t v) { std::memcpy(b.data() + at, &v, sizeof v); }

/// Recomputes the header, chunk and footer checksums that lie within `b`,
/// walking the chunks as the header's pairs and chunk_pairs place them.
void reseal(std::vector<unsigned char>& b) {
  constexpr std::size_t header = 64;
  if (b.size() < header) return;
  put(b, 56, XXH3_64bits(b.data(), 56));
  const std::uint64_t chunk_pairs = get<std::uint32_t>(b, 36);
  std::uint64_t left = get<std::uint64_t>(b, 40);
  if (chunk_pairs == 0) return;
  std::vector<std::uint64_t> sums;
  std::size_t at = header;
  while (left > 0) {
    const std::uint64_t n = std::min(chunk_pairs, left);
    if (b.size() - at < 16 || n > (b.size() - at - 16) / 16) return;  // the chunk does not fit
    const std::size_t len = 8 + 16 * n;
    const std::uint64_t parts[2] = {XXH3_64bits(b.data() + at, 8 + 8 * n),  // n and keys
                                    XXH3_64bits(b.data() + at + 8 + 8 * n, 8 * n)};
    sums.push_back(XXH3_64bits_withSeed(parts, sizeof parts, sums.size()));
    put(b, at + len, sums.back());
    at += len + 8;
    left -= n;
  }
  if (b.size() - at < 24) return;
  put(b, at + 16, XXH3_64bits_withSeed(sums.data(), sums.size() * 8, get<std::uint64_t>(b, 56)));
}

/// The contents, or nothing when the reader refused the bytes.
std::optional<snapshot::contents> read(const std::vector<unsigned char>& b) {
  try {
    snapshot::contents c = snapshot::read_buffer(b.data(), b.size(), "fuzz input");
    const bool sound = c.keys.size() == c.header.pairs && c.values.size() == c.header.pairs &&
                       std::adjacent_find(c.keys.begin(), c.keys.end(), [](auto x, auto y) { return x >= y; }) ==
                           c.keys.end();
    if (!sound) {
      std::fprintf(stderr, "snapshot_fuzz: read_buffer returned contents that break the format\n");
      std::abort();
    }
    return c;
  } catch (const tandem::error&) {
    return std::nullopt;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<unsigned char> b(data, data + size);
  const std::optional<snapshot::contents> as_is = read(b);
  reseal(b);
  const std::optional<snapshot::contents> resealed = read(b);
  if (as_is && (!resealed || resealed->keys != as_is->keys || resealed->values != as_is->values)) {
    std::fprintf(stderr, "snapshot_fuzz: a valid snapshot reads differently once resealed\n");
    std::abort();
  }
  return 0;
}
