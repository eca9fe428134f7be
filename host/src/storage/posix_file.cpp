// POSIX file I/O of host/storage (storage/detail/posix_file.hpp).
#include <tandem/host/storage/detail/posix_file.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace tandem::host::detail {

namespace {

/// Drops the first `done` bytes of iov[0, count), then any empty entries.
iovec* advance(iovec* iov, std::size_t& count, std::size_t done) noexcept {
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

/// Calls `call(iov, n, offset)` (a readv or writev of the first n entries
/// at `offset`, returning bytes or -1 with errno) until every entry is
/// done. A call that moves no bytes ends it with `on_none`: a regular file
/// takes bytes or reports why not, and gives none only at its end.
template <class Call>
int transfer_all(iovec* iov, std::size_t count, std::uint64_t offset, int on_none, Call call) noexcept {
  iov = advance(iov, count, 0);
  while (count > 0) {
    const int n = static_cast<int>(std::min<std::size_t>(count, IOV_MAX));
    const ssize_t moved = call(iov, n, offset);
    if (moved < 0 && errno == EINTR) continue;
    if (moved < 0) return errno;
    if (moved == 0) return on_none;
    offset += static_cast<std::uint64_t>(moved);
    iov = advance(iov, count, static_cast<std::size_t>(moved));
  }
  return 0;
}

}  // namespace

unique_fd& unique_fd::operator=(unique_fd&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

unique_fd::~unique_fd() { close(); }

int unique_fd::close() noexcept {
  if (fd_ < 0) return 0;
  const int closed = ::close(fd_);
  fd_ = -1;
  return closed == 0 ? 0 : errno;
}

int write_all(int fd, iovec* iov, std::size_t count) noexcept {
  return transfer_all(iov, count, 0, EIO, [fd](const iovec* v, int n, std::uint64_t) { return ::writev(fd, v, n); });
}

int pwrite_all(int fd, iovec* iov, std::size_t count, std::uint64_t offset) noexcept {
  return transfer_all(iov, count, offset, EIO, [fd](const iovec* v, int n, std::uint64_t at) {
    return ::pwritev(fd, v, n, static_cast<off_t>(at));
  });
}

int pread_all(int fd, iovec* iov, std::size_t count, std::uint64_t offset) noexcept {
  return transfer_all(iov, count, offset, ended_early, [fd](const iovec* v, int n, std::uint64_t at) {
    return ::preadv(fd, v, n, static_cast<off_t>(at));
  });
}

std::string folder_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

int sync_folder(const std::string& folder) noexcept {
  const unique_fd dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid() || ::fsync(dir.get()) != 0) return errno;
  return 0;
}

}  // namespace tandem::host::detail
