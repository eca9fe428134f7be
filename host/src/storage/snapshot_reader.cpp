// The snapshot reader (snapshot_file.hpp): checks the header against the
// file's size before anything is allocated, reads the chunks in file order
// and checks them in parallel, then checks the footer.
#include <tandem/host/storage/snapshot_file.hpp>

#include <tandem/error.hpp>
#include <tandem/host/storage/detail/posix_file.hpp>

#include "snapshot_format.hpp"

#include <oneapi/tbb/task_group.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace tandem::host::snapshot {

using namespace format;

namespace {

using host::detail::ended_early;

/// The bytes a reader checks: an open file (preadv) or a buffer (memcpy).
class source {
 public:
  /// Opens `path`. @throws tandem::error (strerror)
  explicit source(const std::string& path) : name_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    struct stat st {};
    if (!fd_.valid() || ::fstat(fd_.get(), &st) != 0) {
      const int err = errno;
      fail(path, std::string("cannot open: ") + std::strerror(err));
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
    (void)::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint: a larger read-ahead
  }
  source(const void* data, std::size_t bytes, const std::string& name)
      : name_(name), size_(bytes), data_(static_cast<const unsigned char*>(data)) {}

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

  /// Fills iov[0, count) from `offset` on. Thread-safe.
  /// @return 0, an errno value, or `ended_early`
  int read(std::uint64_t offset, iovec* iov, std::size_t count) const noexcept {
    if (data_ != nullptr) {
      for (std::size_t i = 0; i < count; ++i) {
        if (iov[i].iov_len > size_ || offset > size_ - iov[i].iov_len) return ended_early;
        std::memcpy(iov[i].iov_base, data_ + offset, iov[i].iov_len);
        offset += iov[i].iov_len;
      }
      return 0;
    }
    return host::detail::pread_all(fd_.get(), iov, count, offset);
  }

 private:
  std::string name_;
  host::detail::unique_fd fd_;
  std::uint64_t size_ = 0;
  const unsigned char* data_ = nullptr;
};

/// Fails with the reason `read` gave.
[[noreturn]] void fail_read(const source& src, int err, const std::string& where) {
  if (err == ended_early) fail(src.name(), "truncated: the file ended inside " + where + " (it shrank while read)");
  fail(src.name(), "cannot read " + where + ": " + std::strerror(err));
}

struct checked_header {
  info header;
  layout lay;
  std::uint64_t checksum;
};

/// Reads and checks the header, and the source's size against it.
checked_header check_header(const source& src) {
  const std::string& name = src.name();
  raw_header h{};
  const std::size_t have = static_cast<std::size_t>(std::min<std::uint64_t>(src.size(), sizeof h));
  iovec iov{&h, have};
  if (const int err = src.read(0, &iov, 1)) fail_read(src, err, "the header");
  if (std::memcmp(h.magic, header_magic, std::min(have, sizeof h.magic)) != 0) {
    fail(name, "not a tandem snapshot (no \"TANDEMSS\" magic)");
  }
  if (have < sizeof h) {
    fail(name, "truncated: " + std::to_string(have) + " bytes, less than the " + std::to_string(sizeof h) +
                   "-byte header");
  }
  if (h.byte_order == __builtin_bswap32(byte_order_mark)) {
    fail(name, "written on a machine of the other byte order (byte-order mark reads 0x04030201); "
               "this machine reads 0x01020304 only");
  }
  if (h.checksum != header_checksum(h)) fail(name, "header checksum mismatch");
  if (h.byte_order != byte_order_mark) fail(name, "byte-order mark is neither byte order");
  if (h.version > format_version) {
    fail(name, "format version " + std::to_string(h.version) + " is newer than this build reads (" +
                   std::to_string(format_version) + ")");
  }
  if (h.version == 0) fail(name, "format version 0 does not exist");
  if (const std::string p = field_problem(h.geom, h.chunk_pairs); !p.empty()) fail(name, "header: " + p);

  // Below 2^58 pairs no size computed from the count overflows; above, no
  // file is that large. The pairs are allocated only after the file's size
  // matched the count.
  const bool absurd = h.pairs > (std::uint64_t{1} << 58);
  const layout lay{h.pairs, h.chunk_pairs, h.pairs / h.chunk_pairs + (h.pairs % h.chunk_pairs != 0)};
  if (absurd || src.size() < lay.file_size()) {
    fail(name, "truncated: " + std::to_string(src.size()) + " bytes, where the header's " +
                   std::to_string(h.pairs) + " pairs take " +
                   (absurd ? std::string("over 2^62") : std::to_string(lay.file_size())));
  }
  if (src.size() > lay.file_size()) {
    fail(name, std::to_string(src.size() - lay.file_size()) + " bytes past the footer (" +
                   std::to_string(lay.file_size()) + " expected)");
  }
  return {info_of(h), lay, h.checksum};
}

enum class fault : std::uint8_t { none, io, checksum, count, order };

struct chunk_check {
  fault what = fault::none;
  int err = 0;              // fault::io: the errno value or ended_early
  std::uint64_t count = 0;  // as stored
};

/// Reads chunk `c` into keys/values at its place; its stored count goes to
/// r.count, its stored checksum to `*checksum`. @return false on a read fault
/// (in r)
bool read_chunk(const source& src, const layout& lay, std::uint64_t c, key_type* keys, value_type* values,
                std::uint64_t* checksum, chunk_check& r) noexcept {
  const std::size_t first = c * lay.chunk_pairs;
  const std::size_t n = lay.chunk_size(c);
  iovec iov[4] = {{&r.count, sizeof r.count},
                  {keys + first, n * sizeof(key_type)},
                  {values + first, n * sizeof(value_type)},
                  {checksum, sizeof *checksum}};
  if ((r.err = src.read(lay.chunk_offset(c), iov, 4)) != 0) {
    r.what = fault::io;
    return false;
  }
  return true;
}

/// Checks chunk `c` as read_chunk left it.
void check_chunk(const layout& lay, std::uint64_t c, const key_type* keys, const value_type* values,
                 const std::uint64_t* checksum, chunk_check& r) noexcept {
  const std::size_t first = c * lay.chunk_pairs;
  const std::size_t n = lay.chunk_size(c);
  const key_type* k = keys + first;
  chunk_hash hash(r.count);
  bool ordered = true;
  for (std::size_t i = 0; i < n; i += cache_step) {
    const std::size_t end = std::min(n, i + cache_step);
    hash.add_keys(k + i, end - i);
    for (std::size_t j = std::max<std::size_t>(i, 1); j < end; ++j) ordered &= k[j] > k[j - 1];
  }
  hash.add_values(values + first, n);
  if (hash.digest(c) != *checksum) {
    r.what = fault::checksum;
  } else if (r.count != n) {
    r.what = fault::count;
  } else if (!ordered) {
    r.what = fault::order;
  }
}

[[noreturn]] void fail_order(const std::string& name, std::uint64_t at, std::uint64_t c) {
  fail(name, "keys not strictly increasing at pair " + std::to_string(at) + " (chunk " + std::to_string(c) + ")");
}

/// Reads every chunk in file order on this thread (so that the kernel's
/// read-ahead sees one sequential stream), checks each on the arena while
/// the next ones are read, then checks the footer.
void read_pairs(const source& src, const checked_header& h, key_type* keys, value_type* values) {
  const std::string& name = src.name();
  const layout& lay = h.lay;
  std::vector<chunk_check> checks(lay.chunks);
  std::vector<std::uint64_t> checksums(lay.chunks);
  tbb::task_group checking;
  for (std::uint64_t c = 0; c < lay.chunks; ++c) {
    if (!read_chunk(src, lay, c, keys, values, &checksums[c], checks[c])) break;
    checking.run([&, c] { check_chunk(lay, c, keys, values, &checksums[c], checks[c]); });
  }
  checking.wait();
  // The first fault in file order is the one reported, however the chunks
  // were scheduled.
  for (std::uint64_t c = 0; c < lay.chunks; ++c) {
    const chunk_check& r = checks[c];
    const std::uint64_t first = c * lay.chunk_pairs;
    switch (r.what) {
      case fault::none:
        break;
      case fault::io:
        fail_read(src, r.err, "chunk " + std::to_string(c));
      case fault::checksum:
        fail(name, "checksum mismatch in chunk " + std::to_string(c));
      case fault::count:
        fail(name, "chunk " + std::to_string(c) + " holds " + std::to_string(r.count) +
                       " pairs where the header implies " + std::to_string(lay.chunk_size(c)));
      case fault::order: {
        std::uint64_t at = first + 1;
        while (keys[at] > keys[at - 1]) ++at;
        fail_order(name, at, c);
      }
    }
    if (c > 0 && keys[first] <= keys[first - 1]) fail_order(name, first, c);
  }

  raw_footer f{};
  iovec iov{&f, sizeof f};
  if (const int err = src.read(lay.footer_offset(), &iov, 1)) fail_read(src, err, "the footer");
  if (std::memcmp(f.magic, footer_magic, sizeof f.magic) != 0) fail(name, "footer: no \"TANDEMSF\" magic");
  if (f.pairs != lay.pairs) {
    fail(name, "footer: " + std::to_string(f.pairs) + " pairs where the header says " + std::to_string(lay.pairs));
  }
  if (f.checksum != footer_checksum(checksums, h.checksum)) fail(name, "footer checksum mismatch");
}

contents read_contents(const source& src) {
  const checked_header h = check_header(src);
  contents out;
  out.header = h.header;
  // Sized by a header that the file's size vouched for.
  out.keys.resize(h.lay.pairs);
  out.values.resize(h.lay.pairs);
  read_pairs(src, h, out.keys.data(), out.values.data());
  return out;
}

}  // namespace

contents read(const std::string& path) { return read_contents(source(path)); }

contents read_buffer(const void* data, std::size_t bytes, const std::string& name) {
  return read_contents(source(data, bytes, name));
}

info read_into(const std::string& path, key_type* keys, value_type* values, std::size_t capacity) {
  const source src(path);
  const checked_header h = check_header(src);
  if (h.lay.pairs > capacity) {
    fail(path, "holds " + std::to_string(h.lay.pairs) + " pairs, more than the room for " + std::to_string(capacity));
  }
  read_pairs(src, h, keys, values);
  return h.header;
}

info read_info(const std::string& path) { return check_header(source(path)).header; }

}  // namespace tandem::host::snapshot
