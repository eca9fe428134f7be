#pragma once
// Grow-only, never-initialised buffers for per-batch work arrays: after the
// first batches they are neither allocated nor zeroed again, and their pages
// are already mapped.

#include <tandem/host/detail/fault_point.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>

namespace tandem::host::detail {

/// Resizes a per-batch vector to n: grown with a quarter to spare (so
/// batches of about one size settle on one allocation), never shrunk.
template <class Vector>
void resize_with_room(Vector& v, std::size_t n) {
  if (v.capacity() < n) {
    allocation_point();
    v.reserve(n + n / 4);
  }
  v.resize(n);
}

template <class T>
class scratch {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "scratch holds plain data only");

 public:
  /// @return room for n elements (contents unspecified). Grows with a
  /// quarter to spare, so batches of about one size settle on one buffer.
  T* get(std::size_t n) {
    if (n > capacity_) {
      allocation_point();
      data_.reset();
      capacity_ = 0;
      const std::size_t room = std::max<std::size_t>(n + n / 4, 1);
      void* p = std::malloc(room * sizeof(T));
      if (!p) throw std::bad_alloc();
      data_.reset(static_cast<T*>(p));
      capacity_ = room;
    }
    return data_.get();
  }

 private:
  struct release {
    void operator()(T* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<T, release> data_;
  std::size_t capacity_ = 0;
};

}  // namespace tandem::host::detail
