#include <tandem/device/pinned.hpp>

#include <atomic>
#include <cstdint>
#include <cstdlib>

#if defined(TANDEM_HAS_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace tandem::device {
namespace {

// Each block starts with a 64-byte header saying how it was allocated, so
// that free_pinned needs no lookup.
constexpr std::size_t header = 64;
enum class kind : std::uint64_t { pinned = 0x70696e6e6564, ordinary = 0x6f7264696e };

// Blocks pinned so far, by allocate_pinned and the column source (pinned_allocations).
std::atomic<std::uint64_t> pinned_blocks{0};
std::atomic<std::uint64_t> pinned_bytes{0};

#if defined(TANDEM_HAS_CUDA)
// Bytes of pinned column blocks given out, and the most there may be.
std::atomic<std::size_t> column_bytes{0};

void* allocate_column_block(std::size_t bytes) noexcept {
  static const std::size_t bound = tandem::detail::physical_memory_bytes() / 4;
  if (column_bytes.fetch_add(bytes) + bytes > bound) {
    column_bytes.fetch_sub(bytes);
    return nullptr;
  }
  void* block = nullptr;
  if (cudaHostAlloc(&block, bytes, cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError();
    column_bytes.fetch_sub(bytes);
    return nullptr;
  }
  pinned_blocks.fetch_add(1, std::memory_order_relaxed);
  pinned_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return block;
}

void release_column_block(void* block, std::size_t bytes) noexcept {
  (void)cudaFreeHost(block);
  column_bytes.fetch_sub(bytes);
}

const tandem::detail::column_source pinned_columns{&allocate_column_block, &release_column_block};
#endif

}  // namespace

const tandem::detail::column_source* pinned_column_source() noexcept {
#if defined(TANDEM_HAS_CUDA)
  return &pinned_columns;
#else
  return nullptr;
#endif
}

void* allocate_pinned(std::size_t bytes) {
  void* block = nullptr;
#if defined(TANDEM_HAS_CUDA)
  // Portable: pinned for every device's context, whichever device is
  // current on this thread (indexes on several GPUs share the pools).
  if (cudaHostAlloc(&block, bytes + header, cudaHostAllocPortable) == cudaSuccess) {
    *static_cast<kind*>(block) = kind::pinned;
    pinned_blocks.fetch_add(1, std::memory_order_relaxed);
    pinned_bytes.fetch_add(bytes + header, std::memory_order_relaxed);
    return static_cast<char*>(block) + header;
  }
  (void)cudaGetLastError();  // no driver or no pinnable memory: ordinary memory will do
#endif
  block = std::aligned_alloc(header, (bytes + 2 * header - 1) / header * header);
  if (!block) throw std::bad_alloc();
  *static_cast<kind*>(block) = kind::ordinary;
  return static_cast<char*>(block) + header;
}

void free_pinned(void* p) noexcept {
  if (!p) return;
  void* block = static_cast<char*>(p) - header;
#if defined(TANDEM_HAS_CUDA)
  if (*static_cast<kind*>(block) == kind::pinned) {
    (void)cudaFreeHost(block);
    return;
  }
#endif
  std::free(block);
}

pinned_counts pinned_allocations() noexcept {
  return {pinned_blocks.load(std::memory_order_relaxed), pinned_bytes.load(std::memory_order_relaxed)};
}

}  // namespace tandem::device
