#pragma once
/// @file
/// Host memory for big arrays: allocations of 2 MiB or more are aligned to
/// 2 MiB and advised for transparent huge pages (`MADV_HUGEPAGE`; where THP
/// is off it is ordinary memory). Huge pages halve the cost of first touch
/// and let random reads of the leaves (gigabytes) miss the TLB far less
/// often. Smaller allocations are cache-line aligned.

#include <tandem/batch_result.hpp>

#include <cstddef>

namespace tandem::host::detail {

/// @throws std::bad_alloc
void* allocate_huge(std::size_t bytes);
void free_huge(void* p) noexcept;

/// A standard allocator over `allocate_huge` (the leaf store's segments, the
/// routing's work items). Elements made without arguments are
/// default-initialised (as by `tandem::detail::default_init_allocator`), so
/// the pages of a resized vector are first touched by whoever fills them, in
/// parallel, not zeroed by one thread.
template <class T>
struct huge_page_allocator : tandem::detail::default_init_allocator<T> {
  template <class U>
  struct rebind {
    using other = huge_page_allocator<U>;
  };
  huge_page_allocator() noexcept = default;
  template <class U>
  huge_page_allocator(const huge_page_allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_huge(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { free_huge(p); }
  friend bool operator==(const huge_page_allocator&, const huge_page_allocator&) noexcept { return true; }
  friend bool operator!=(const huge_page_allocator&, const huge_page_allocator&) noexcept { return false; }
};

}  // namespace tandem::host::detail
