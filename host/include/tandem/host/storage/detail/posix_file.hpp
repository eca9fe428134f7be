#pragma once
/// @file
/// The POSIX file I/O of host/storage (the snapshot file and the redo log):
/// an owning file descriptor, reads and writes that go on after EINTR and
/// short transfers until every byte is moved, and the sync of a folder,
/// which is what makes a file created or renamed in it durable.
///
/// Private to host/storage; installed only because `redo_log` holds
/// `unique_fd` members. Functions report failures as errno values, so that
/// each caller words its own error (the snapshot names the file, the redo log
/// its operation) and decides what a failure undoes.

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem::host::detail {

/// Owns a file descriptor (-1: none) and closes it when destroyed or
/// assigned over.
class unique_fd {
 public:
  explicit unique_fd(int fd = -1) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  unique_fd& operator=(unique_fd&& o) noexcept;
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd();

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  /// @brief Closes the descriptor now (when there is one) and owns none.
  /// @return 0, or the errno of a failed close(); the descriptor is gone
  ///         either way
  int close() noexcept;

 private:
  int fd_;
};

/// What `pread_all` returns when the file ends before the buffers are full
/// (a file that shrank while read).
inline constexpr int ended_early = -1;

/// @brief Writes all of iov[0, count) at the file position (writev).
/// @note  Entries are adjusted in place as bytes go out.
/// @return 0 or an errno value (EIO when the kernel takes no bytes and gives
///         no reason)
int write_all(int fd, iovec* iov, std::size_t count) noexcept;

/// @brief Writes all of iov[0, count) at `offset` (pwritev, IOV_MAX entries
///        a call at most).
/// @note  Entries are adjusted in place as bytes go out.
/// @return 0 or an errno value, as `write_all`
int pwrite_all(int fd, iovec* iov, std::size_t count, std::uint64_t offset) noexcept;

/// @brief Fills iov[0, count) from `offset` on (preadv, IOV_MAX entries a
///        call at most). Thread-safe for any number of readers of one fd.
/// @note  Entries are adjusted in place as bytes come in.
/// @return 0, an errno value, or `ended_early`
int pread_all(int fd, iovec* iov, std::size_t count, std::uint64_t offset) noexcept;

/// @return the folder `path` is in: "." for a bare name, "/" for a name in
///         the root
std::string folder_of(const std::string& path);

/// @brief fsyncs the folder `folder`, so that a file created in it or renamed
///        into it survives a power loss.
/// @return 0 or the errno of the failed open() or fsync()
int sync_folder(const std::string& folder) noexcept;

}  // namespace tandem::host::detail
