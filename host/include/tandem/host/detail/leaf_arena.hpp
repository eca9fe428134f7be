#pragma once
// leaf_arena<T>: the leaf store's storage, a grow-only array whose elements
// never move. Elements live in segments that stay where they are for the
// life of the arena, so element i keeps its address (a leaf_id of any
// inner-layout version stays usable).
//
//     struct leaf_arena {
//       T*     segments[max_segments];  // [0, used): allocated; segment 0 holds
//                                       // first_size elements, segment s > 0
//                                       // holds first_size << (s - 1)
//       atomic size;                    // elements handed out, [0, size) built
//       atomic capacity;                // elements the allocated segments hold
//     };
//
// Invariants: size <= capacity == the sum of the sizes of the used segments;
// `shrink` frees the last segments once no element lives in them;
// element i lies in segment s = i < first_size ? 0 : log2(i) - first_bits + 1.
//
// Growth fails cleanly: room is added a whole segment at a time, and an
// allocation that throws leaves the arena as it was (tbb::concurrent_vector
// would mark a segment whose allocation failed as unusable for good and
// count the elements it could not build). `reserve` makes room up
// front; `emplace` takes the next element from room already there without
// allocating, from any number of threads at once, and adds a segment under
// a lock only when no room is left.

#include <tandem/host/detail/huge_pages.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace tandem::host::detail {

template <class T>
class leaf_arena {
  static_assert(std::is_nothrow_default_constructible_v<T>, "elements are built where room was made beforehand");

 public:
  static constexpr int first_bits = 6;
  static constexpr std::size_t first_size = std::size_t{1} << first_bits;
  static constexpr int max_segments = 64 - first_bits;

  leaf_arena() noexcept = default;
  ~leaf_arena() { clear(); }
  leaf_arena(const leaf_arena&) = delete;
  leaf_arena& operator=(const leaf_arena&) = delete;
  leaf_arena(leaf_arena&& o) noexcept { steal(o); }
  leaf_arena& operator=(leaf_arena&& o) noexcept {
    if (this != &o) {
      clear();
      steal(o);
    }
    return *this;
  }

  [[nodiscard]] T& operator[](std::size_t i) noexcept {
    const auto [s, offset] = locate(i);
    return segments_[s][offset];
  }
  [[nodiscard]] const T& operator[](std::size_t i) const noexcept {
    const auto [s, offset] = locate(i);
    return segments_[s][offset];
  }

  /// Elements handed out (all built once every emplace has returned).
  [[nodiscard]] std::size_t size() const noexcept { return size_.load(std::memory_order_acquire); }
  /// Elements the arena holds room for.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_.load(std::memory_order_acquire); }

  /// @brief Makes room for n elements in all: the emplace calls that bring
  ///        size() up to n allocate nothing. Thread-safe.
  /// @throws std::bad_alloc with the arena as it was (or with some of the
  ///         room made, which is just as consistent).
  void reserve(std::size_t n) {
    if (n <= capacity()) return;
    std::lock_guard<std::mutex> lock(grow_);
    std::size_t cap = capacity_.load(std::memory_order_relaxed);
    while (cap < n) {
      if (used_ == max_segments) throw std::length_error("leaf_arena: no segment left");
      const std::size_t count = segment_size(used_);
      T* seg = static_cast<T*>(allocate_huge(count * sizeof(T)));  // throws: nothing changed
      segments_[used_++] = seg;
      cap += count;
      capacity_.store(cap, std::memory_order_release);
    }
  }

  /// @brief Builds the next element and returns its index. Elements are
  ///        default-initialised, not zeroed: what the constructor leaves
  ///        alone (a leaf's empty slots) is not touched. Thread-safe;
  ///        allocates only when no room is left.
  /// @param limit the index no element may reach
  /// @throws std::length_error when the next index would be `limit`;
  ///         std::bad_alloc when room is needed and cannot be made. Either
  ///         way nothing changed.
  std::size_t emplace(std::size_t limit) {
    std::size_t n = size_.load(std::memory_order_relaxed);
    for (;;) {
      if (n >= limit) throw std::length_error("leaf_arena: index space exhausted");
      if (n < capacity()) {
        if (size_.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) {
          ::new (static_cast<void*>(&(*this)[n])) T;
          return n;
        }
        continue;
      }
      reserve(n + 1);
      n = size_.load(std::memory_order_relaxed);
    }
  }

  /// @brief Sets the size to n <= size(), dropping the elements from n on,
  ///        and frees every segment that holds none below n (segment 0
  ///        stays). Not thread-safe.
  void shrink(std::size_t n) noexcept {
    const std::size_t old = size_.load(std::memory_order_relaxed);
    if (n >= old) return;
    if constexpr (!std::is_trivially_destructible_v<T>) {
      for (std::size_t i = n; i < old; ++i) (*this)[i].~T();
    }
    std::size_t cap = capacity_.load(std::memory_order_relaxed);
    while (used_ > 1 && segment_start(used_ - 1) >= n) {
      free_huge(segments_[--used_]);
      segments_[used_] = nullptr;
      cap -= segment_size(used_);
    }
    size_.store(n, std::memory_order_relaxed);
    capacity_.store(cap, std::memory_order_relaxed);
  }

  /// @brief Sets the size to n >= size(): elements [size(), n) are built in
  ///        parallel chunks, each chunk default-initialised and then passed
  ///        to `fill(first, last)` on the same thread (so that its pages are
  ///        first touched by the thread that fills them). Room must be there
  ///        (reserve). Not thread-safe.
  template <class Fill>
  void append(std::size_t n, Fill&& fill) {
    const std::size_t first = size_.load(std::memory_order_relaxed);
    if (n <= first) return;
    constexpr std::size_t grain = 64;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(first, n, grain), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t i = r.begin(); i < r.end(); ++i) ::new (static_cast<void*>(&(*this)[i])) T;
      fill(r.begin(), r.end());
    });
    size_.store(n, std::memory_order_release);
  }

 private:
  static constexpr std::size_t segment_size(int s) noexcept {
    return s == 0 ? first_size : first_size << (s - 1);
  }
  static constexpr std::size_t segment_start(int s) noexcept { return s == 0 ? 0 : first_size << (s - 1); }
  static std::pair<int, std::size_t> locate(std::size_t i) noexcept {
    if (i < first_size) return {0, i};
    const int high = 63 - __builtin_clzll(static_cast<unsigned long long>(i));
    return {high - first_bits + 1, i - (std::size_t{1} << high)};
  }

  void clear() noexcept {
    const std::size_t n = size_.load(std::memory_order_relaxed);
    if constexpr (!std::is_trivially_destructible_v<T>) {
      for (std::size_t i = 0; i < n; ++i) (*this)[i].~T();
    }
    for (int s = 0; s < used_; ++s) free_huge(segments_[s]);
    used_ = 0;
    size_.store(0, std::memory_order_relaxed);
    capacity_.store(0, std::memory_order_relaxed);
  }
  void steal(leaf_arena& o) noexcept {
    std::copy(o.segments_, o.segments_ + o.used_, segments_);
    used_ = o.used_;
    size_.store(o.size_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    capacity_.store(o.capacity_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    o.used_ = 0;
    o.size_.store(0, std::memory_order_relaxed);
    o.capacity_.store(0, std::memory_order_relaxed);
  }

  T* segments_[max_segments] = {};
  int used_ = 0;  // guarded by grow_ while others may emplace
  std::atomic<std::size_t> size_{0};
  std::atomic<std::size_t> capacity_{0};
  std::mutex grow_;
};

}  // namespace tandem::host::detail
