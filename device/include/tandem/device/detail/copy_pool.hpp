#pragma once
/// @file
/// `copy_pool`: a few host threads that split one large memcpy between them
/// (pageable <-> pinned staging). One thread copies ~10 GB/s; the PCIe link
/// moves ~55 GB/s, so the staging copies, not the bus, bound a route.
///
/// Private to the device layer: the device layer may not use oneTBB, and a
/// route must not occupy TBB workers (STYLE: TBB workers never block on
/// CUDA), so it has its own parked threads. `copy` waits; calls from several
/// threads (a route's and a scatter's staging) take turns, each using every
/// thread (the copies are bound by memory bandwidth, not by threads).

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::device::detail {

class copy_pool {
 public:
  /// Copies below this size run on the calling thread alone.
  static constexpr std::size_t split_bytes = std::size_t{1} << 20;

  /// @param threads threads taking part in a copy, the caller included (>= 1)
  explicit copy_pool(int threads) : parts_(threads > 1 ? static_cast<std::size_t>(threads) : 1) {
    try {
      for (int w = 1; w < threads; ++w) workers_.emplace_back([this, w] { work(static_cast<std::size_t>(w)); });
    } catch (...) {
      stop_workers();
      throw;
    }
  }
  ~copy_pool() { stop_workers(); }
  copy_pool(const copy_pool&) = delete;
  copy_pool& operator=(const copy_pool&) = delete;

  /// @brief memcpy(dst, src, bytes), split over the threads. Waits.
  void copy(void* dst, const void* src, std::size_t bytes) {
    if (parts_ == 1 || bytes < split_bytes) {
      std::memcpy(dst, src, bytes);
      return;
    }
    std::lock_guard<std::mutex> turn(turn_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      dst_ = static_cast<unsigned char*>(dst);
      src_ = static_cast<const unsigned char*>(src);
      bytes_ = bytes;
      pending_ = parts_ - 1;
      ++generation_;
    }
    wake_.notify_all();
    copy_part(0, dst_, src_, bytes);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
  }

  [[nodiscard]] int threads() const noexcept { return static_cast<int>(parts_); }

 private:
  // Part k of parts() equal pieces, cut at 64-byte boundaries.
  void copy_part(std::size_t k, unsigned char* dst, const unsigned char* src, std::size_t bytes) const {
    const std::size_t piece = (bytes / parts_ + 63) & ~std::size_t{63};
    const std::size_t begin = k * piece < bytes ? k * piece : bytes;
    const std::size_t end = begin + piece < bytes && k + 1 < parts_ ? begin + piece : bytes;
    if (end > begin) std::memcpy(dst + begin, src + begin, end - begin);
  }

  void stop_workers() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void work(std::size_t k) {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      unsigned char* dst = dst_;
      const unsigned char* src = src_;
      const std::size_t bytes = bytes_;
      lock.unlock();
      copy_part(k, dst, src, bytes);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  const std::size_t parts_;
  std::vector<std::thread> workers_;
  std::mutex turn_;   // one split copy at a time
  std::mutex mutex_;  // guards the fields below
  std::condition_variable wake_;
  std::condition_variable done_;
  bool stop_ = false;
  std::uint64_t generation_ = 0;
  std::size_t pending_ = 0;
  unsigned char* dst_ = nullptr;
  const unsigned char* src_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace tandem::device::detail
