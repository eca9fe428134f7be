// The snapshot file's header fields (snapshot_format.hpp).
#include "snapshot_format.hpp"

#include <tandem/error.hpp>

#include <cstring>
#include <iterator>

namespace tandem::host::snapshot::format {

namespace {

constexpr const char* geometry_names[5] = {"leaf_capacity", "log_capacity", "block_count", "block_size",
                                           "inner_fanout"};

}  // namespace

std::string field_problem(const std::uint32_t (&geom)[5], std::uint32_t chunk_pairs) {
  for (std::size_t i = 0; i < 5; ++i) {
    if (geom[i] == 0 || geom[i] > max_geometry) {
      return std::string("geometry ") + geometry_names[i] + " = " + std::to_string(geom[i]) +
             " is out of range [1, " + std::to_string(max_geometry) + "]";
    }
  }
  if (chunk_pairs == 0 || chunk_pairs > max_chunk_pairs) {
    return "chunk size of " + std::to_string(chunk_pairs) + " pairs is out of range [1, " +
           std::to_string(max_chunk_pairs) + "]";
  }
  return {};
}

raw_header make_header(const info& h) {
  raw_header r{};
  std::memcpy(r.magic, header_magic, sizeof r.magic);
  r.version = format_version;
  r.byte_order = byte_order_mark;
  const geometry& g = h.geom;
  const std::uint32_t geom[5] = {g.leaf_capacity, g.log_capacity, g.block_count, g.block_size, g.inner_fanout};
  std::copy(std::begin(geom), std::end(geom), r.geom);
  r.chunk_pairs = h.chunk_pairs;
  r.pairs = h.pairs;
  r.sequence = h.sequence;
  r.checksum = header_checksum(r);
  return r;
}

info info_of(const raw_header& r) {
  info h;
  h.pairs = r.pairs;
  h.sequence = r.sequence;
  h.geom = {r.geom[0], r.geom[1], r.geom[2], r.geom[3], r.geom[4]};
  h.chunk_pairs = r.chunk_pairs;
  return h;
}

void fail(const std::string& name, const std::string& what) { throw error("tandem snapshot '" + name + "': " + what); }

}  // namespace tandem::host::snapshot::format
