// Snapshot files: the writer and the checking reader (snapshot_file.hpp has
// the layout).
#include <tandem/host/storage/snapshot_file.hpp>

#include <tandem/error.hpp>

#include <oneapi/tbb/task_group.h>

// Header-only use of the packaged xxHash: no library to link, nothing for
// consumers of tandem to find.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tandem::host::snapshot {

namespace {

constexpr char header_magic[8] = {'T', 'A', 'N', 'D', 'E', 'M', 'S', 'S'};
constexpr char footer_magic[8] = {'T', 'A', 'N', 'D', 'E', 'M', 'S', 'F'};
constexpr std::uint32_t byte_order_mark = 0x01020304;
constexpr std::uint64_t pair_bytes = sizeof(key_type) + sizeof(value_type);
constexpr std::uint64_t chunk_overhead = 2 * sizeof(std::uint64_t);  // n and checksum

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

constexpr const char* geometry_names[5] = {"leaf_capacity", "log_capacity", "block_count", "block_size",
                                           "inner_fanout"};

std::uint64_t header_checksum(const raw_header& h) { return XXH3_64bits(&h, offsetof(raw_header, checksum)); }

/// Pairs per step of work whose next step reads what it left in cache:
/// 32 KiB of keys (and of values).
constexpr std::size_t cache_step = 4096;

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

/// Empty when the fields are in range, else what is wrong.
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

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw error("tandem snapshot '" + name + "': " + what);
}

/// Drops the first `done` bytes of iov[0, count), then any empty entries.
iovec* advance(iovec* iov, int& count, std::size_t done) noexcept {
  while (count > 0 && done >= iov->iov_len) {
    done -= iov->iov_len;
    ++iov;
    --count;
  }
  if (count > 0) {
    iov->iov_base = static_cast<char*>(iov->iov_base) + done;
    iov->iov_len -= done;
  }
  return iov;
}

/// Writes all of iov[0, count) at the file offset. @return 0 or errno.
int write_all(int fd, iovec* iov, int count) noexcept {
  iov = advance(iov, count, 0);
  while (count > 0) {
    const ssize_t put = ::writev(fd, iov, count);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return errno;
    if (put == 0) return EIO;  // a regular file takes bytes or reports why not
    iov = advance(iov, count, static_cast<std::size_t>(put));
  }
  return 0;
}

// ---- the reader ---------------------------------------------------------------

/// What `source::read` returns when the bytes end first (a file that shrank).
constexpr int ended_early = -1;

/// The bytes a reader checks: an open file (preadv) or a buffer (memcpy).
class source {
 public:
  /// Opens `path`. @throws tandem::error (strerror)
  explicit source(const std::string& path) : name_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    struct stat st {};
    if (fd_ < 0 || ::fstat(fd_, &st) != 0) {
      const int err = errno;
      if (fd_ >= 0) ::close(fd_);
      fail(path, std::string("cannot open: ") + std::strerror(err));
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
    (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint: a larger read-ahead
  }
  source(const void* data, std::size_t bytes, const std::string& name)
      : name_(name), size_(bytes), data_(static_cast<const unsigned char*>(data)) {}
  ~source() {
    if (fd_ >= 0) ::close(fd_);
  }
  source(const source&) = delete;
  source& operator=(const source&) = delete;

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

  /// Fills iov[0, count) from `offset` on. Thread-safe.
  /// @return 0, an errno value, or `ended_early`
  int read(std::uint64_t offset, iovec* iov, int count) const noexcept {
    if (data_ != nullptr) {
      for (int i = 0; i < count; ++i) {
        if (iov[i].iov_len > size_ || offset > size_ - iov[i].iov_len) return ended_early;
        std::memcpy(iov[i].iov_base, data_ + offset, iov[i].iov_len);
        offset += iov[i].iov_len;
      }
      return 0;
    }
    iov = advance(iov, count, 0);
    while (count > 0) {
      const ssize_t got = ::preadv(fd_, iov, count, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return errno;
      if (got == 0) return ended_early;
      offset += static_cast<std::uint64_t>(got);
      iov = advance(iov, count, static_cast<std::size_t>(got));
    }
    return 0;
  }

 private:
  std::string name_;
  int fd_ = -1;
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
  if (f.checksum != XXH3_64bits_withSeed(checksums.data(), checksums.size() * sizeof(std::uint64_t), h.checksum)) {
    fail(name, "footer checksum mismatch");
  }
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

std::atomic<std::uint64_t> temp_counter{0};

/// The folder `path` is in.
std::string folder_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

// ---- public ------------------------------------------------------------------

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

// ---- writer --------------------------------------------------------------------

class writer::impl {
 public:
  impl(const std::string& path, const info& header);
  ~impl();
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  void append(const key_type* keys, const value_type* values, std::size_t n);
  void commit();

 private:
  enum class state { open, failed, committed };

  void check_open(const char* op) const;
  /// Hands a full chunk (hashed) to the I/O thread once the one before it
  /// is written, and starts the next.
  void hand_off(const key_type* keys, const value_type* values);
  /// Waits until no chunk is in flight; fails with the error of its write.
  void wait_written();
  void io_loop() noexcept;
  void stop_io() noexcept;
  /// Closes and removes the temporary file (if still there).
  void discard() noexcept;
  /// Stops the I/O thread, discards the file, marks the writer failed and
  /// throws tandem::error with `what` and strerror(err).
  [[noreturn]] void fail_io(const std::string& what, int err);

  std::string path_;
  std::string temp_;
  info header_;
  int fd_ = -1;
  state state_ = state::open;
  std::uint64_t appended_ = 0;
  key_type last_key_ = 0;
  std::uint64_t header_checksum_ = 0;
  std::vector<std::uint64_t> chunk_checksums_;

  // The caller fills buffer `filling_` while the I/O thread writes the other
  // (or a chunk straight from the caller's arrays).
  std::unique_ptr<key_type[]> keys_[2];
  std::unique_ptr<value_type[]> values_[2];
  int filling_ = 0;
  std::size_t buffered_ = 0;
  std::size_t chunk_size_ = 0;  // pairs of the chunk being filled
  chunk_hash hash_{0};          // of the chunk being filled

  // The hand-off, under mutex_: at most one chunk in flight. The caller sets
  // flight_* and in_flight_; the I/O thread clears in_flight_ and sets
  // io_error_ once the chunk is written.
  std::mutex mutex_;
  std::condition_variable cv_;
  bool in_flight_ = false;
  bool stop_ = false;
  int io_error_ = 0;
  const key_type* flight_keys_ = nullptr;
  const value_type* flight_values_ = nullptr;
  std::uint64_t flight_pairs_ = 0;
  std::uint64_t flight_checksum_ = 0;
  std::thread io_;
};

writer::impl::impl(const std::string& path, const info& header) : path_(path), header_(header) {
  raw_header h = make_header(header);
  if (const std::string p = field_problem(h.geom, h.chunk_pairs); !p.empty()) {
    throw std::invalid_argument("snapshot::writer: " + p);
  }
  header_checksum_ = h.checksum;
  chunk_size_ = static_cast<std::size_t>(std::min<std::uint64_t>(header.chunk_pairs, header.pairs));
  hash_.reset(chunk_size_);
  for (int b = 0; b < (header.pairs > header.chunk_pairs ? 2 : 1); ++b) {
    keys_[b].reset(new key_type[chunk_size_]);
    values_[b].reset(new value_type[chunk_size_]);
  }
  temp_ = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(temp_counter++);
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int err = errno;
    const std::string what = "cannot create " + temp_;
    temp_.clear();  // not ours to remove
    fail_io(what, err);
  }
  iovec iov{&h, sizeof h};
  if (const int err = write_all(fd_, &iov, 1)) fail_io("cannot write the header", err);
  try {
    io_ = std::thread([this] { io_loop(); });
  } catch (...) {
    discard();
    throw;
  }
}

writer::impl::~impl() {
  stop_io();
  if (state_ != state::committed) discard();
}

void writer::impl::io_loop() noexcept {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return in_flight_ || stop_; });
    if (!in_flight_) return;
    lock.unlock();
    // writev only reads what iov_base points to.
    iovec iov[4] = {{&flight_pairs_, sizeof flight_pairs_},
                    {const_cast<key_type*>(flight_keys_), flight_pairs_ * sizeof(key_type)},
                    {const_cast<value_type*>(flight_values_), flight_pairs_ * sizeof(value_type)},
                    {&flight_checksum_, sizeof flight_checksum_}};
    const int err = write_all(fd_, iov, 4);
    lock.lock();
    io_error_ = err;
    in_flight_ = false;
    cv_.notify_all();
  }
}

void writer::impl::stop_io() noexcept {
  if (!io_.joinable()) return;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  io_.join();
}

void writer::impl::wait_written() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return !in_flight_; });
  if (io_error_ != 0) {
    const int err = io_error_;
    lock.unlock();
    fail_io("cannot write chunk " + std::to_string(chunk_checksums_.size() - 1), err);
  }
}

void writer::impl::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

void writer::impl::fail_io(const std::string& what, int err) {
  stop_io();
  discard();
  state_ = state::failed;
  fail(path_, what + ": " + std::strerror(err));
}

void writer::impl::check_open(const char* op) const {
  if (state_ == state::committed) throw std::logic_error(std::string("snapshot::writer::") + op + " after commit");
  if (state_ == state::failed) throw std::logic_error(std::string("snapshot::writer::") + op + " after a failed write");
}

void writer::impl::append(const key_type* keys, const value_type* values, std::size_t n) {
  check_open("append");
  if (n == 0) return;
  if (keys == nullptr || values == nullptr) {
    throw std::invalid_argument("snapshot::writer::append: null array with n = " + std::to_string(n));
  }
  if (n > header_.pairs - appended_) {
    throw std::invalid_argument("snapshot::writer::append: " + std::to_string(n) + " pairs after " +
                                std::to_string(appended_) + " make more than the header's " +
                                std::to_string(header_.pairs));
  }
  if (appended_ > 0 && keys[0] <= last_key_) {
    throw std::invalid_argument("snapshot::writer::append: key " + std::to_string(keys[0]) +
                                " is not above the last key appended, " + std::to_string(last_key_));
  }
  for (std::size_t i = 1; i < n; ++i) {
    if (keys[i] <= keys[i - 1]) {
      throw std::invalid_argument("snapshot::writer::append: keys[" + std::to_string(i) + "] = " +
                                  std::to_string(keys[i]) + " is not above keys[" + std::to_string(i - 1) + "]");
    }
  }
  last_key_ = keys[n - 1];
  bool borrowed = false;
  for (std::size_t done = 0; done < n;) {
    if (buffered_ == 0 && n - done >= chunk_size_) {
      // A whole chunk in the caller's arrays: written from there, no copy.
      const key_type* k = keys + done;
      const value_type* v = values + done;
      hash_.add_keys(k, chunk_size_);
      hash_.add_values(v, chunk_size_);
      done += chunk_size_;
      appended_ += chunk_size_;
      hand_off(k, v);
      borrowed = true;
      continue;
    }
    // Copied a step at a time, so that the hash reads what the copy left in
    // cache.
    const std::size_t take = std::min({n - done, chunk_size_ - buffered_, cache_step});
    key_type* k = keys_[filling_].get() + buffered_;
    value_type* v = values_[filling_].get() + buffered_;
    std::memcpy(k, keys + done, take * sizeof(key_type));
    std::memcpy(v, values + done, take * sizeof(value_type));
    hash_.add_keys(k, take);
    hash_.add_values(v, take);
    buffered_ += take;
    done += take;
    appended_ += take;
    if (buffered_ == chunk_size_) {
      hand_off(keys_[filling_].get(), values_[filling_].get());
      filling_ ^= 1;
      buffered_ = 0;
    }
  }
  if (borrowed) wait_written();  // the caller's arrays are the caller's again
}

void writer::impl::hand_off(const key_type* keys, const value_type* values) {
  const std::uint64_t checksum = hash_.digest(chunk_checksums_.size());
  wait_written();  // the chunk before: its buffer may be the next to fill
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    flight_keys_ = keys;
    flight_values_ = values;
    flight_pairs_ = chunk_size_;
    flight_checksum_ = checksum;
    in_flight_ = true;
  }
  cv_.notify_all();
  chunk_checksums_.push_back(checksum);
  chunk_size_ = static_cast<std::size_t>(std::min<std::uint64_t>(header_.chunk_pairs, header_.pairs - appended_));
  hash_.reset(chunk_size_);
}

void writer::impl::commit() {
  check_open("commit");
  if (appended_ != header_.pairs) {
    fail(path_, "commit after " + std::to_string(appended_) + " of the " + std::to_string(header_.pairs) +
                    " pairs the header announces");
  }
  wait_written();
  stop_io();
  raw_footer f{};
  std::memcpy(f.magic, footer_magic, sizeof f.magic);
  f.pairs = header_.pairs;
  f.checksum = XXH3_64bits_withSeed(chunk_checksums_.data(), chunk_checksums_.size() * sizeof(std::uint64_t),
                                    header_checksum_);
  iovec iov{&f, sizeof f};
  if (const int err = write_all(fd_, &iov, 1)) fail_io("cannot write the footer", err);
  if (::fsync(fd_) != 0) {
    const int err = errno;
    fail_io("cannot sync " + temp_, err);
  }
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) {
    const int err = errno;
    fail_io("cannot close " + temp_, err);
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    fail_io("cannot rename " + temp_ + " over it", err);
  }
  state_ = state::committed;
  temp_.clear();
  // The rename is durable once the folder's entry is.
  const std::string folder = folder_of(path_);
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0 || ::fsync(dir) != 0) {
    const int err = errno;
    if (dir >= 0) ::close(dir);
    fail(path_, "renamed into place, but cannot sync its folder " + folder + ": " + std::strerror(err));
  }
  ::close(dir);
}

writer::writer(const std::string& path, const info& header) : impl_(std::make_unique<impl>(path, header)) {}
writer::~writer() = default;
void writer::append(const key_type* keys, const value_type* values, std::size_t n) { impl_->append(keys, values, n); }
void writer::commit() { impl_->commit(); }

}  // namespace tandem::host::snapshot
