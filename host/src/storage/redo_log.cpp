// The redo log (redo_log.hpp): record layout, append, replay with the torn
// tail cut, truncation.
#include <tandem/host/storage/redo_log.hpp>

#include <tandem/error.hpp>
#include <tandem/host/storage/detail/posix_file.hpp>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace tandem::host {

using detail::unique_fd;

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the log's layout is little-endian");

// One record of redo.log (records lie back to back from offset 0; each
// starts at a multiple of 8):
//
//   struct record {
//     u32 magic;             // record_magic ("TLOG")
//     u32 version;           // record_version
//     u64 sequence;          // above the previous record's
//     u64 count;             // n: write ops
//     u64 durable;           // 0, or the sequence of an earlier record of this
//                            // file: the log was fdatasync'ed through it before
//                            // this record was appended
//     u64 payload_checksum;  // XXH3_64bits of keys..pad
//     u64 header_checksum;   // XXH3_64bits of the 40 bytes above
//     u64 keys[n];
//     u64 args[n];
//     u8  types[n];          // op_type: put, insert or erase
//     u8  pad[-n & 7];       // zeros: the record is a multiple of 8 long
//   };
//
// A record is whole when both checksums match and it ends within the file.
struct record_header {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint64_t sequence;
  std::uint64_t count;
  std::uint64_t durable;
  std::uint64_t payload_checksum;
  std::uint64_t header_checksum;
};
static_assert(sizeof(record_header) == 48);

constexpr std::uint32_t record_magic = 0x474f4c54;  // "TLOG" in file order
constexpr std::uint32_t record_version = 1;
constexpr std::size_t header_bytes = sizeof(record_header);
constexpr std::size_t checked_header_bytes = offsetof(record_header, header_checksum);
constexpr std::size_t op_bytes = 2 * sizeof(std::uint64_t) + sizeof(op_type);
constexpr unsigned char zeros[8] = {};

/// Records of this many payload bytes and more are written from the
/// caller's arrays; smaller ones are copied, so that a group of small
/// records takes few iovecs.
constexpr std::size_t copy_below = std::size_t{64} << 10;
/// Read size of a replay.
constexpr std::size_t read_chunk = std::size_t{4} << 20;
/// Read size of truncate_through's walk over the headers.
constexpr std::size_t header_chunk = std::size_t{64} << 10;

constexpr std::size_t type_pad(std::uint64_t n) noexcept { return static_cast<std::size_t>(-n & 7); }
constexpr std::uint64_t record_bytes(std::uint64_t n) noexcept { return header_bytes + n * op_bytes + type_pad(n); }

tandem::error io_error(const std::string& what, int err) {
  return tandem::error("tandem::redo_log: " + what + ": " + std::generic_category().message(err));
}

/// Reads a file of a known size through a buffer. Views start at the offset
/// asked for, 8-aligned where the offset is, and stay valid until the next
/// call.
class file_reader {
 public:
  file_reader(int fd, const std::string& path, std::uint64_t size, std::size_t chunk)
      : fd_(fd), path_(path), size_(size), chunk_(chunk) {}

  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

  /// @return bytes [off, off + len), which must lie in the file
  const unsigned char* at(std::uint64_t off, std::size_t len) {
    if (off < buf_off_ || off + len > buf_off_ + buf_len_) fill(off, len);
    return reinterpret_cast<const unsigned char*>(buf_.data()) + (off - buf_off_);
  }

 private:
  void fill(std::uint64_t off, std::size_t len) {
    if (off + len > size_) throw tandem::error("tandem::redo_log: " + path_ + ": read past the end");
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(std::max(len, chunk_), size_ - off));
    if (buf_.size() * sizeof(std::uint64_t) < want) buf_.resize((want + 7) / 8);
    iovec iov{buf_.data(), want};
    if (const int err = detail::pread_all(fd_, &iov, 1, off)) {
      if (err == detail::ended_early) throw tandem::error("tandem::redo_log: " + path_ + " shrank while being read");
      throw io_error("read " + path_, err);
    }
    buf_off_ = off;
    buf_len_ = want;
  }

  int fd_;
  const std::string& path_;
  std::uint64_t size_;
  std::size_t chunk_;
  std::vector<std::uint64_t> buf_;  // 8-aligned
  std::uint64_t buf_off_ = 0;
  std::size_t buf_len_ = 0;
};

struct record_view {
  record_header h;
  std::uint64_t bytes;           ///< whole record
  const unsigned char* payload;  ///< keys; valid until the reader's next call
};

/// @return whether a whole record starts at `off`
/// @throws tandem::error for a whole header of another format version
bool whole_record_at(file_reader& r, const std::string& path, std::uint64_t off, record_view& v) {
  const std::uint64_t room = r.size() - off;
  if (room < header_bytes) return false;
  std::memcpy(&v.h, r.at(off, header_bytes), header_bytes);
  if (v.h.magic != record_magic || XXH3_64bits(&v.h, checked_header_bytes) != v.h.header_checksum) return false;
  if (v.h.version != record_version) {
    throw tandem::error("tandem::redo_log: " + path + ": the record at offset " + std::to_string(off) +
                        " has format version " + std::to_string(v.h.version) + "; this tandem reads version " +
                        std::to_string(record_version));
  }
  if (v.h.count > (room - header_bytes) / op_bytes) return false;  // before record_bytes, which could overflow
  v.bytes = record_bytes(v.h.count);
  if (v.bytes > room) return false;
  v.payload = r.at(off, static_cast<std::size_t>(v.bytes)) + header_bytes;
  return XXH3_64bits(v.payload, static_cast<std::size_t>(v.bytes) - header_bytes) == v.h.payload_checksum;
}

/// Where a walk over the records stopped.
struct walk_end {
  std::uint64_t end = 0;    ///< end of the last whole record in order
  std::uint64_t last = 0;   ///< its sequence (0: none)
  bool disordered = false;  ///< stopped at a whole record whose sequence is not above `last`
};

/// Walks the whole records from offset 0, calling `f` (when given) for those
/// with sequence > after; `replayed` becomes the last of those.
walk_end walk(file_reader& r, const std::string& path, const replay_fn* f, std::uint64_t after,
              std::uint64_t& replayed) {
  walk_end w;
  record_view v;
  while (whole_record_at(r, path, w.end, v)) {
    if (v.h.sequence <= w.last) {
      w.disordered = true;
      break;
    }
    if (v.h.sequence > after) {
      const auto n = static_cast<std::size_t>(v.h.count);
      const auto* keys = reinterpret_cast<const key_type*>(v.payload);
      if (f != nullptr) {
        (*f)(v.h.sequence, reinterpret_cast<const op_type*>(v.payload + 2 * n * sizeof(std::uint64_t)), keys,
             keys + n, n);
      }
      replayed = v.h.sequence;
    }
    w.end += v.bytes;
    w.last = v.h.sequence;
  }
  return w;
}

/// The file goes on past the last whole record at w.end. That is a torn
/// tail unless a later whole record was appended after the damaged bytes
/// had been synced (its `durable` is above w.last): then it is corruption.
/// Whole records lie at multiples of 8, so every one is looked at.
void check_torn_tail(file_reader& r, const std::string& path, const walk_end& w) {
  record_view v;
  for (std::uint64_t pos = w.end + 8; pos + header_bytes <= r.size();) {
    std::uint32_t magic;
    std::memcpy(&magic, r.at(pos, sizeof magic), sizeof magic);
    if (magic != record_magic || !whole_record_at(r, path, pos, v)) {
      pos += 8;
      continue;
    }
    if (v.h.durable > w.last) {
      throw tandem::error("tandem::redo_log: " + path + " is corrupt: the record at offset " + std::to_string(w.end) +
                          " is damaged, but the whole record at offset " + std::to_string(pos) + " (sequence " +
                          std::to_string(v.h.sequence) + ") was appended after the log had been synced through " +
                          "sequence " + std::to_string(v.h.durable) +
                          "; restore the file, or move it away to recover from the snapshot alone");
    }
    pos += v.bytes;
  }
}

}  // namespace

redo_log::redo_log(const std::string& dir) : dir_(dir), path_((std::filesystem::path(dir) / "redo.log").string()) {
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec)) {
    std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();  // "a/b/"
    if (const int err = detail::sync_folder(p.parent_path().string())) {
      throw io_error("sync the folder above " + dir, err);
    }
  }
  if (ec) throw io_error("create the folder " + dir, ec.value());
  dir_fd_ = unique_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd_.get() < 0) throw io_error("open the folder " + dir, errno);

  lock_fd_ = unique_fd(::openat(dir_fd_.get(), "redo.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock_fd_.get() < 0) throw io_error("open " + dir + "/redo.lock", errno);
  if (::flock(lock_fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      throw tandem::error("tandem::redo_log: the log folder " + dir + " is in use: another redo_log holds " + dir +
                          "/redo.lock");
    }
    throw io_error("lock " + dir + "/redo.lock", errno);
  }
  if (::unlinkat(dir_fd_.get(), "redo.log.new", 0) != 0 && errno != ENOENT) {
    throw io_error("remove " + dir + "/redo.log.new", errno);
  }

  fd_ = unique_fd(::openat(dir_fd_.get(), "redo.log", O_RDWR | O_CLOEXEC));
  if (fd_.get() < 0 && errno == ENOENT) {
    fd_ = unique_fd(::openat(dir_fd_.get(), "redo.log", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd_.get() >= 0 && ::fsync(dir_fd_.get()) != 0) throw io_error("sync the folder " + dir, errno);
  }
  if (fd_.get() < 0) throw io_error("open " + path_, errno);
}

redo_log::~redo_log() {
  try {
    flush();
  } catch (...) {  // documented: call flush() or sync() to see errors
  }
}

void redo_log::check_usable(const char* call, bool need_replay) const {
  if (!failure_.empty()) {
    throw tandem::error(std::string("tandem::redo_log::") + call + ": the log failed earlier (" + failure_ +
                        "); reopen it");
  }
  if (need_replay && !replayed_) {
    throw tandem::error(std::string("tandem::redo_log::") + call + ": " + path_ + " has not been replayed yet");
  }
}

void redo_log::fail(const std::string& what, int err) {
  failure_ = what + ": " + std::generic_category().message(err);
  drop_queue();
  throw tandem::error("tandem::redo_log: " + failure_);
}

void redo_log::datasync() {
  const std::uint64_t written = written_.load(std::memory_order_acquire);
  const std::uint64_t last = file_last_.load(std::memory_order_acquire);
  if (::fdatasync(fd_.get()) != 0) fail("fdatasync " + path_, errno);
  synced_.store(written, std::memory_order_release);
  durable_.store(last, std::memory_order_release);
}

void redo_log::sync_written() {
  // What flush had written when the fdatasync began is on the disk when it
  // returns: its records through `last`, its writes through `written`.
  const std::uint64_t written = written_.load(std::memory_order_acquire);
  const std::uint64_t last = file_last_.load(std::memory_order_acquire);
  if (written == synced_.load(std::memory_order_acquire)) return;
  if (::fdatasync(fd_.get()) != 0) throw io_error("fdatasync " + path_, errno);
  synced_.store(written, std::memory_order_release);
  if (last > durable_.load(std::memory_order_relaxed)) durable_.store(last, std::memory_order_release);
}

std::uint64_t redo_log::file_size() const {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) throw io_error("stat " + path_, errno);
  return static_cast<std::uint64_t>(st.st_size);
}

std::uint64_t redo_log::replay(std::uint64_t after, const replay_fn& f) {
  check_usable("replay", false);
  flush();
  file_reader r(fd_.get(), path_, file_size(), read_chunk);
  std::uint64_t replayed = after;
  const walk_end w = walk(r, path_, f ? &f : nullptr, after, replayed);
  if (w.disordered) {
    throw tandem::error("tandem::redo_log: " + path_ + " is corrupt: the record at offset " + std::to_string(w.end) +
                        " does not have a sequence above " + std::to_string(w.last));
  }
  if (w.end < r.size()) {
    check_torn_tail(r, path_, w);
    if (::ftruncate(fd_.get(), static_cast<off_t>(w.end)) != 0) fail("cut the torn tail of " + path_, errno);
  }
  end_ = w.end;
  file_last_ = w.last;
  last_sequence_ = std::max(last_sequence_, w.last);
  datasync();
  replayed_ = true;
  return replayed;
}

void redo_log::stage(const void* p, std::size_t bytes) {
  if (bytes == 0) return;
  const std::size_t offset = staged_.size();
  const auto* b = static_cast<const unsigned char*>(p);
  staged_.insert(staged_.end(), b, b + bytes);
  if (!queue_.empty() && queue_.back().data == nullptr) {
    queue_.back().bytes += bytes;  // staged pieces in a row are contiguous
  } else {
    queue_.push_back({nullptr, offset, bytes});
  }
}

void redo_log::borrow(const void* p, std::size_t bytes) {
  if (bytes > 0) queue_.push_back({p, 0, bytes});
}

void redo_log::drop_queue() noexcept {
  staged_.clear();
  queue_.clear();
  queued_bytes_ = 0;
}

void redo_log::append(std::uint64_t sequence, const op_type* types, const key_type* keys, const value_type* args,
                      std::size_t n) {
  check_usable("append", true);
  if (sequence <= last_sequence_) {
    throw tandem::error("tandem::redo_log::append: sequence " + std::to_string(sequence) +
                        " is not above the last one, " + std::to_string(last_sequence_));
  }
  const std::size_t column = n * sizeof(std::uint64_t);
  const std::size_t pad = type_pad(n);
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, keys, column);
  XXH3_64bits_update(&state, args, column);
  XXH3_64bits_update(&state, types, n);
  XXH3_64bits_update(&state, zeros, pad);
  record_header h{record_magic, record_version, sequence, n, durable_.load(std::memory_order_acquire),
                  XXH3_64bits_digest(&state), 0};
  h.header_checksum = XXH3_64bits(&h, checked_header_bytes);

  if (queue_.empty()) queued_from_ = last_sequence_;
  stage(&h, header_bytes);
  const auto put = record_bytes(n) - header_bytes < copy_below ? &redo_log::stage : &redo_log::borrow;
  (this->*put)(keys, column);
  (this->*put)(args, column);
  (this->*put)(types, n);
  stage(zeros, pad);
  queued_bytes_ += record_bytes(n);
  last_sequence_ = sequence;
}

void redo_log::flush() {
  check_usable("flush", false);
  if (queue_.empty()) return;
  std::vector<iovec> iov;
  iov.reserve(queue_.size());
  for (const piece& p : queue_) {
    iov.push_back({const_cast<void*>(p.data != nullptr ? p.data : staged_.data() + p.offset), p.bytes});
  }
  if (const int err = detail::pwrite_all(fd_.get(), iov.data(), iov.size(), end_)) write_failed(err);
  end_ += queued_bytes_;
  file_last_.store(last_sequence_, std::memory_order_release);
  written_.fetch_add(1, std::memory_order_acq_rel);
  drop_queue();
}

void redo_log::write_failed(int err) {
  // A part of the queue may have reached the file: cut it back to its last
  // whole record, so that the next record follows that one.
  drop_queue();
  last_sequence_ = queued_from_;
  if (::ftruncate(fd_.get(), static_cast<off_t>(end_)) != 0) {
    fail("write " + path_ + " failed (" + std::generic_category().message(err) + "), then cutting it back failed",
         errno);
  }
  throw io_error("write " + path_, err);
}

void redo_log::sync() {
  flush();
  if (written_.load(std::memory_order_acquire) != synced_.load(std::memory_order_acquire)) datasync();
}

void redo_log::truncate_through(std::uint64_t sequence) {
  check_usable("truncate_through", true);
  flush();
  if (end_ == 0) return;
  if (sequence >= file_last_) {
    if (::ftruncate(fd_.get(), 0) != 0) throw io_error("empty " + path_, errno);
    end_ = 0;
    file_last_.store(0, std::memory_order_release);
    written_.fetch_add(1, std::memory_order_acq_rel);
    datasync();  // so that the dropped records cannot come back
    return;
  }
  // The first record to keep (the file holds whole records only).
  file_reader r(fd_.get(), path_, end_, header_chunk);
  std::uint64_t from = 0;
  for (record_header h;; from += record_bytes(h.count)) {
    std::memcpy(&h, r.at(from, header_bytes), header_bytes);
    if (h.sequence > sequence) break;
  }
  if (from == 0) return;

  const std::string next = dir_ + "/redo.log.new";
  unique_fd out(::openat(dir_fd_.get(), "redo.log.new", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (out.get() < 0) throw io_error("create " + next, errno);
  try {
    for (std::uint64_t off = from; off < end_;) {
      const auto len = static_cast<std::size_t>(std::min<std::uint64_t>(read_chunk, end_ - off));
      iovec iov{const_cast<unsigned char*>(r.at(off, len)), len};  // pwritev only reads it
      if (const int err = detail::pwrite_all(out.get(), &iov, 1, off - from)) throw io_error("write " + next, err);
      off += len;
    }
    if (::fdatasync(out.get()) != 0) throw io_error("fdatasync " + next, errno);
    if (::renameat(dir_fd_.get(), "redo.log.new", dir_fd_.get(), "redo.log") != 0) {
      throw io_error("rename " + next + " to " + path_, errno);
    }
  } catch (...) {
    ::unlinkat(dir_fd_.get(), "redo.log.new", 0);
    throw;
  }
  fd_ = std::move(out);
  end_ -= from;
  synced_.store(written_.load(std::memory_order_acquire), std::memory_order_release);
  durable_.store(file_last_.load(std::memory_order_acquire), std::memory_order_release);
  if (::fsync(dir_fd_.get()) != 0) fail("sync the folder " + dir_ + " after renaming redo.log.new", errno);
}

void redo_log::verify() {
  check_usable("verify", true);
  flush();
  const std::uint64_t size = file_size();
  file_reader r(fd_.get(), path_, size, read_chunk);
  std::uint64_t unused = 0;
  const walk_end w = walk(r, path_, nullptr, 0, unused);
  const auto broken = [&](const std::string& what) {
    return tandem::invariant_error("redo_log " + path_ + ": " + what);
  };
  if (w.end != size) {
    throw broken("the bytes from offset " + std::to_string(w.end) + " to " + std::to_string(size) +
                 (w.disordered ? " begin with a record whose sequence is not above the previous one"
                               : " are no whole record"));
  }
  if (size != end_) throw broken("the file has " + std::to_string(size) + " bytes, not " + std::to_string(end_));
  const std::uint64_t last = file_last_.load(std::memory_order_acquire);
  const std::uint64_t durable = durable_.load(std::memory_order_acquire);
  if (w.last != last) {
    throw broken("the last record has sequence " + std::to_string(w.last) + ", not " + std::to_string(last));
  }
  if (durable > last) throw broken("synced through " + std::to_string(durable) + ", past the last record");
}

}  // namespace tandem::host
