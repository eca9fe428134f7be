#pragma once
/// @file
/// Page-locked (pinned) host memory for the arrays that cross PCIe: the GPU
/// copies them directly instead of through a staging copy. Without the CUDA
/// layer, or without a driver, ordinary memory is returned instead, so code
/// using it runs everywhere.

#include <cstddef>
#include <new>

namespace tandem::device {

/// @brief Allocates `bytes` of host memory, pinned when possible, aligned to
///        64 bytes. Waits (pinning large buffers takes milliseconds).
/// @throws std::bad_alloc when no memory at all can be had
[[nodiscard]] void* allocate_pinned(std::size_t bytes);
/// @brief Frees memory from allocate_pinned (nullptr is fine).
void free_pinned(void* p) noexcept;

/// A grow-only array of trivially copyable T in pinned memory. resize()
/// keeps no contents when it grows the allocation.
template <class T>
class pinned_array {
 public:
  pinned_array() = default;
  ~pinned_array() { free_pinned(data_); }
  pinned_array(const pinned_array&) = delete;
  pinned_array& operator=(const pinned_array&) = delete;

  void resize(std::size_t n) {
    if (n > capacity_) {
      free_pinned(data_);
      data_ = nullptr;
      capacity_ = 0;
      data_ = static_cast<T*>(allocate_pinned(n * sizeof(T)));
      capacity_ = n;
    }
    size_ = n;
  }
  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace tandem::device
