#pragma once
/// @file
/// Column memory: where the columns of batches and results (`batch`'s keys,
/// args and types, `batch_result`'s keys) get memory of 1 MiB and more.
///
/// A program that submits batch after batch of millions of ops would
/// otherwise map, fault in and unmap hundreds of MB a batch. Unmapping is
/// the expensive part: it takes the process's address-space lock and shoots
/// down every core's TLB, stalling the index's leaf phase and its GPU
/// copies on all threads for milliseconds (tens of ms measured for 128 MiB
/// next to a 16-thread leaf phase). So large column blocks freed by one
/// batch are kept in a process-wide cache and handed to the next batch of a
/// similar size; blocks are sized in steps of a quarter of a power of two,
/// so at most 25% of a block goes unused. The cache keeps at most an eighth
/// of the machine's memory in free blocks and frees the rest.
///
/// Where blocks come from (the *source*): ordinary memory (transparent huge
/// pages asked for) until an index opens a GPU; from then on page-locked
/// (pinned) memory, which the GPU reads and writes directly, so a batch's
/// keys go up without a host copy into staging (`use_column_source`). A
/// source that cannot give a block (pinned memory is limited) falls back to
/// ordinary memory; blocks of another source are not reused once a new one
/// is installed, and are freed.
///
/// Threads: every function may be called from any thread.

#include <cstddef>
#include <new>
#include <vector>

namespace tandem::detail {

/// Columns below this many bytes use operator new; larger ones the cache.
inline constexpr std::size_t column_block_min = std::size_t{1} << 20;

/// Where new column blocks come from.
struct column_source {
  /// @return a block of `bytes` bytes aligned to 64, or nullptr when none
  ///         can be had (never throws)
  void* (*allocate)(std::size_t bytes) noexcept;
  /// Gives back a block `allocate` returned, with the same `bytes`.
  void (*release)(void* block, std::size_t bytes) noexcept;
};

/// @brief Makes `source` give every later new block (nullptr: ordinary
///        memory; the source object must live until the process ends).
///        Free cached blocks of the previous source are freed.
/// @return the previous source
const column_source* use_column_source(const column_source* source) noexcept;

/// @brief A block of at least `bytes` (>= column_block_min) bytes, 64-byte
///        aligned: a cached one when one of this size class is free.
/// @throws std::bad_alloc
[[nodiscard]] void* allocate_column(std::size_t bytes);
/// @brief Gives back a block of allocate_column(bytes), to the cache or,
///        beyond the cache's bound, to its source.
void release_column(void* p, std::size_t bytes) noexcept;

/// @brief Frees every cached free block (index::compact: the memory goes
///        back to its source; later batches allocate afresh).
/// @return the bytes freed
std::size_t release_free_columns() noexcept;

/// @return the machine's memory in bytes (8 GiB when it cannot be read).
[[nodiscard]] std::size_t physical_memory_bytes() noexcept;

/// What the cache holds (for tests and stats).
struct column_cache_counts {
  std::size_t free_blocks = 0;
  std::size_t free_bytes = 0;
  std::size_t reused = 0;     ///< allocations served from the cache, ever
  std::size_t allocated = 0;  ///< allocations served by a source, ever
};
[[nodiscard]] column_cache_counts column_cache() noexcept;

/// Allocator of batch columns: column memory from column_block_min bytes,
/// operator new below.
template <class T>
struct column_allocator {
  using value_type = T;
  column_allocator() noexcept = default;
  template <class U>
  column_allocator(const column_allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_alloc();
    const std::size_t bytes = n * sizeof(T);
    return static_cast<T*>(bytes >= column_block_min ? allocate_column(bytes) : ::operator new(bytes));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (bytes >= column_block_min) {
      release_column(p, bytes);
    } else {
      ::operator delete(p);
    }
  }
  friend bool operator==(const column_allocator&, const column_allocator&) noexcept { return true; }
  friend bool operator!=(const column_allocator&, const column_allocator&) noexcept { return false; }
};

/// A column: a vector in column memory.
template <class T>
using column = std::vector<T, column_allocator<T>>;

}  // namespace tandem::detail
