// The snapshot writer (snapshot_file.hpp): the caller's thread copies and
// hashes the pairs into chunk buffers, an I/O thread of the writer's own
// writes them, and `commit` makes the file durable and renames it into
// place.
#include <tandem/host/storage/snapshot_file.hpp>

#include <tandem/error.hpp>
#include <tandem/host/storage/detail/posix_file.hpp>

#include "snapshot_format.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tandem::host::snapshot {

using namespace format;

namespace {

std::atomic<std::uint64_t> temp_counter{0};

}  // namespace

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
  host::detail::unique_fd fd_;
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
  fd_ = host::detail::unique_fd(::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  if (!fd_.valid()) {
    const int err = errno;
    const std::string what = "cannot create " + temp_;
    temp_.clear();  // not ours to remove
    fail_io(what, err);
  }
  iovec iov{&h, sizeof h};
  if (const int err = host::detail::write_all(fd_.get(), &iov, 1)) fail_io("cannot write the header", err);
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
    const int err = host::detail::write_all(fd_.get(), iov, 4);
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
  (void)fd_.close();
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
  f.checksum = footer_checksum(chunk_checksums_, header_checksum_);
  iovec iov{&f, sizeof f};
  if (const int err = host::detail::write_all(fd_.get(), &iov, 1)) fail_io("cannot write the footer", err);
  if (::fsync(fd_.get()) != 0) {
    const int err = errno;
    fail_io("cannot sync " + temp_, err);
  }
  if (const int err = fd_.close()) fail_io("cannot close " + temp_, err);
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    fail_io("cannot rename " + temp_ + " over it", err);
  }
  state_ = state::committed;
  temp_.clear();
  // The rename is durable once the folder's entry is.
  const std::string folder = host::detail::folder_of(path_);
  if (const int err = host::detail::sync_folder(folder)) {
    fail(path_, "renamed into place, but cannot sync its folder " + folder + ": " + std::strerror(err));
  }
}

writer::writer(const std::string& path, const info& header) : impl_(std::make_unique<impl>(path, header)) {}
writer::~writer() = default;
void writer::append(const key_type* keys, const value_type* values, std::size_t n) { impl_->append(keys, values, n); }
void writer::commit() { impl_->commit(); }

}  // namespace tandem::host::snapshot
