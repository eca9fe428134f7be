#pragma once
/// @file
/// The snapshot file of tandem: an index's pairs in ascending key order, with
/// the geometry and batch sequence number of the index that wrote it.
///
/// A snapshot is written by `writer`, which streams the pairs in chunks to a
/// temporary file in the target's folder and, at `commit()`, syncs it and
/// renames it over the target: a reader sees the old file or the new one,
/// never a mix, and a crash leaves at most a `<path>.tmp.*` file behind.
/// Readers (`read`, `read_into`, `read_buffer`) check everything (header,
/// every chunk's checksum and pair count, keys strictly increasing within
/// and across chunks, footer) before they return; any fault throws
/// `tandem::error` naming the file and the fault, and a count read from the
/// file is checked against the file's size before anything is allocated.
///
/// Layout (every field in the writer's byte order; no padding anywhere; the
/// file's size follows from the header alone):
///
///     header (64 bytes)
///       0  char     magic[8]       "TANDEMSS"
///       8  uint32   version        format_version
///       12 uint32   byte_order     0x01020304 (reads 0x04030201 on a machine
///                                  of the other order: refused)
///       16 uint32   leaf_capacity, log_capacity, block_count, block_size,
///                   inner_fanout   each in [1, max_geometry]
///       36 uint32   chunk_pairs    in [1, max_chunk_pairs]
///       40 uint64   pairs
///       48 uint64   sequence
///       56 uint64   checksum       XXH3_64bits(bytes 0..55)
///     chunk c, for c in [0, C), C = ceil(pairs / chunk_pairs)
///       uint64   n                 chunk_pairs; the last chunk the rest (>= 1)
///       uint64   keys[n]           strictly increasing, above the previous
///                                  chunk's last key
///       uint64   values[n]
///       uint64   checksum          XXH3_64bits_withSeed(uint64[2] {
///                                    XXH3_64bits(n, keys),
///                                    XXH3_64bits(values) }; seed = c)
///     footer (24 bytes)
///       char     magic[8]          "TANDEMSF"
///       uint64   pairs             = the header's
///       uint64   checksum          XXH3_64bits_withSeed(the C chunk checksums
///                                  as uint64[C]; seed = header checksum)
///
///     size = 64 + C * 16 + pairs * 16 + 24
///
/// Every later version keeps bytes 0..15 and "bytes 56..63 = XXH3_64bits of
/// bytes 0..55", so a reader checks magic, byte order and header checksum
/// before it trusts the version: a damaged version field reads as a
/// checksum mismatch, a newer file as a newer version.
///
/// Keys and values of a chunk are contiguous, so a reader preads them
/// straight into its final arrays; chunks are verified in parallel (oneTBB,
/// in the caller's arena). Keys and values are hashed as two streams so that
/// the writer hashes each piece as it copies it, while it is in cache. A
/// chunk of the default size is 16 MiB, the unit of the writer's writes.
///
/// Threads: a `writer` is used by one thread at a time; reads of any number
/// of files may run at once.

#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem::host::snapshot {

/// The format this build writes, and the newest it reads.
inline constexpr std::uint32_t format_version = 1;
/// Pairs per chunk unless `info::chunk_pairs` says otherwise (16 MiB chunks).
inline constexpr std::uint32_t default_chunk_pairs = std::uint32_t{1} << 20;
/// Largest chunk a file may declare (256 MiB chunks).
inline constexpr std::uint32_t max_chunk_pairs = std::uint32_t{1} << 24;
/// Largest value of each geometry field.
inline constexpr std::uint32_t max_geometry = std::uint32_t{1} << 16;

/// Geometry of the index that wrote the snapshot: informational, each field
/// in [1, max_geometry].
struct geometry {
  std::uint32_t leaf_capacity = 0;
  std::uint32_t log_capacity = 0;
  std::uint32_t block_count = 0;
  std::uint32_t block_size = 0;
  std::uint32_t inner_fanout = 0;
};

/// What the header of a snapshot says.
struct info {
  std::uint64_t pairs = 0;     ///< total pairs in the file
  std::uint64_t sequence = 0;  ///< the index's batch sequence number the snapshot is consistent at
  geometry geom{};
  /// Pairs per chunk (the last chunk may hold fewer). The writer's choice,
  /// in [1, max_chunk_pairs]; readers report what the file uses. Small
  /// values are for tests.
  std::uint32_t chunk_pairs = default_chunk_pairs;
};

/// Streams one snapshot to `path`: through a temporary file in the same
/// folder (`<path>.tmp.<pid>.<counter>`), which `commit()` syncs (fsync) and
/// renames over `path`, then syncs the folder. Until `commit()` returns,
/// an existing file at `path` is untouched; a writer destroyed without
/// `commit()` removes its temporary file.
///
/// Writes: the caller's thread checks, copies and checksums the pairs into
/// a chunk buffer; a full chunk goes to the writer's own I/O thread, which
/// writes it with one writev() (16 MiB by default) while the caller fills
/// the other buffer. A whole chunk that one `append` holds while no partial
/// chunk is buffered is written straight from the caller's arrays, without
/// a copy; such an `append` returns once it is written. Memory: two chunk
/// buffers of min(header.pairs, chunk_pairs) pairs (one when the file has
/// one chunk), and the I/O thread, which ends at `commit()` or with the
/// writer.
class writer {
 public:
  /// @brief Creates the temporary file and writes the header.
  /// @param header what the header says; `header.pairs` is the exact number
  ///        of pairs that will be appended
  /// @throws std::invalid_argument when a geometry field or chunk_pairs is
  ///         out of range; tandem::error naming the file and the system's
  ///         reason (strerror) when the file cannot be created or written.
  writer(const std::string& path, const info& header);
  writer(const writer&) = delete;
  writer& operator=(const writer&) = delete;
  /// Removes the temporary file unless `commit()` succeeded.
  ~writer();

  /// @brief Appends `n` pairs (any n, 0 included); writes each chunk as it
  ///        fills. On return the caller's arrays are no longer read.
  /// @throws std::invalid_argument, with nothing appended, when keys are not
  ///         strictly increasing (within the call and after the pairs
  ///         appended before), when more than `header.pairs` pairs would be
  ///         appended, or when n > 0 with a null array;
  ///         tandem::error (strerror) when a write fails (the temporary
  ///         file is then removed); std::logic_error after a successful
  ///         `commit()` or a failed write.
  void append(const key_type* keys, const value_type* values, std::size_t n);

  /// @brief Writes the footer, syncs the file, renames it over the target
  ///        and syncs the folder.
  /// @throws tandem::error when fewer than `header.pairs` pairs were
  ///         appended (the writer stays usable) or when writing, syncing or
  ///         renaming fails (strerror; the target is then untouched, except
  ///         when only the folder's sync failed); std::logic_error after a
  ///         successful `commit()` or a failed write.
  void commit();

 private:
  class impl;
  std::unique_ptr<impl> impl_;
};

/// A whole snapshot.
struct contents {
  info header;
  std::vector<key_type> keys;      ///< strictly increasing
  std::vector<value_type> values;  ///< values[i] belongs to keys[i]
};

/// @brief Reads and checks the whole file.
/// @note  The vectors are allocated and zero-filled before the read: for
///        gigabytes, first-touch page faults cost about as much as the read
///        itself. `read_into` arrays the caller reuses (or backs with huge
///        pages) avoid that.
/// @throws tandem::error naming `path` and the fault: the file cannot be
///         opened or read (strerror), is not a snapshot (magic), is
///         truncated or has bytes past its footer, was written with the
///         other byte order, has a newer format version, a header, chunk or
///         footer checksum mismatch, a header field out of range, a chunk
///         pair count not the header's, or keys not strictly increasing.
///         std::bad_alloc when the pairs do not fit in memory.
contents read(const std::string& path);

/// @brief Reads and checks the whole file into caller arrays: no copy
///        beyond the kernel's, no allocation of the pairs' size.
/// @param capacity room in `keys` and in `values`, in pairs
/// @return the header; its `pairs` were written to keys[0..pairs),
///         values[0..pairs)
/// @throws as `read`, and tandem::error when the file holds more than
///         `capacity` pairs (read_info first to size the arrays). After a
///         throw the arrays hold unspecified values.
info read_into(const std::string& path, key_type* keys, value_type* values, std::size_t capacity);

/// @brief Checks the header and that the file's size is the one the header
///        implies; reads no pairs.
/// @throws as `read`, for the faults these checks find.
info read_info(const std::string& path);

/// @brief `read` of a snapshot held in memory (`bytes` bytes at `data`),
///        through the same checks; `name` stands for the path in messages.
/// @throws as `read`.
contents read_buffer(const void* data, std::size_t bytes, const std::string& name = "(buffer)");

}  // namespace tandem::host::snapshot
