#pragma once
/// @file
/// Client arrays the GPU reads and writes directly: std::vector with an
/// allocator of page-locked host memory (tandem::device::allocate_pinned:
/// portable, so pinned for every GPU; ordinary memory without the CUDA
/// layer or a driver). The index looks at each caller array it is handed
/// (cudaPointerGetAttributes) and copies a pinned one straight to and from
/// the GPU; a pageable one goes through its pinned staging chunks and copy
/// threads (docs/performance.md, "client-work": 17 bytes an op of copies
/// for gets). tandem-bench --shards holds its client's arrays in these, in
/// every run, so that no run pays the staging the other does not.
///
/// An allocator asked for ordinary memory (pinned_allocator(false)) gives
/// 64-byte aligned pageable memory instead: for arrays too large to pin
/// that the GPU does not need to read directly (the load's cut). Two
/// allocators are equal when they give the same kind of memory; the kind
/// travels with a container on copy, move and swap.

#include <tandem/device/pinned.hpp>

#if defined(TANDEM_HAS_CUDA)
#include <cuda_runtime_api.h>
#endif

#include <cstddef>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

namespace tandem_bench {

template <class T>
class pinned_allocator {
 public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;

  static_assert(alignof(T) <= 64, "pinned_allocator: blocks are aligned to 64 bytes");

  /// Page-locked memory.
  pinned_allocator() noexcept = default;
  /// @param pinned page-locked memory, else ordinary memory
  explicit pinned_allocator(bool pinned) noexcept : pinned_(pinned) {}
  template <class U>
  pinned_allocator(const pinned_allocator<U>& other) noexcept : pinned_(other.pinned()) {}

  /// @brief Room for n objects, 64-byte aligned; waits (pinning takes
  ///        milliseconds for large blocks).
  /// @throws std::bad_array_new_length when n * sizeof(T) overflows,
  ///         std::bad_alloc when no memory can be had
  [[nodiscard]] T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = n * sizeof(T);
    if (pinned_) return static_cast<T*>(tandem::device::allocate_pinned(bytes));
    return static_cast<T*>(::operator new(bytes, std::align_val_t{64}));
  }
  void deallocate(T* p, std::size_t) noexcept {
    if (pinned_) {
      tandem::device::free_pinned(p);
    } else {
      ::operator delete(p, std::align_val_t{64});
    }
  }

  /// Whether this allocator asks for page-locked memory (it gets ordinary
  /// memory anyway where nothing can be pinned).
  [[nodiscard]] bool pinned() const noexcept { return pinned_; }

 private:
  bool pinned_ = true;
};

template <class T, class U>
bool operator==(const pinned_allocator<T>& a, const pinned_allocator<U>& b) noexcept {
  return a.pinned() == b.pinned();
}
template <class T, class U>
bool operator!=(const pinned_allocator<T>& a, const pinned_allocator<U>& b) noexcept {
  return !(a == b);
}

/// A vector whose elements the GPU reads and writes directly.
template <class T>
using pinned_vector = std::vector<T, pinned_allocator<T>>;

/// @return whether an index on a GPU takes `p` for pinned and copies it
///          directly (the check its routing and scatter make:
///          cudaPointerGetAttributes says host memory); false without the
///          CUDA layer or a driver
inline bool page_locked(const void* p) noexcept {
#if defined(TANDEM_HAS_CUDA)
  if (p == nullptr) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
#else
  (void)p;
  return false;
#endif
}

}  // namespace tandem_bench
