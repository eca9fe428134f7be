#pragma once
/// @file
/// Page-locked (pinned) host memory for the arrays that cross PCIe: the GPU
/// copies them directly instead of through a staging copy. Without the CUDA
/// layer, or without a driver, ordinary memory is returned instead, so code
/// using it runs everywhere.

#include <tandem/core/column_memory.hpp>

#include <cstddef>
#include <cstdint>
#include <new>

namespace tandem::device {

/// @brief Allocates `bytes` of host memory, pinned when possible (portable:
///        pinned for every device, whichever is current on the calling
///        thread), aligned to 64 bytes. Waits (pinning large buffers takes
///        milliseconds).
/// @throws std::bad_alloc when no memory at all can be had
[[nodiscard]] void* allocate_pinned(std::size_t bytes);
/// @brief Frees memory from allocate_pinned (nullptr is fine).
void free_pinned(void* p) noexcept;

/// Blocks pinned since the process started by allocate_pinned and the
/// pinned column source, and their bytes (headers included), over every
/// thread and index. Pinning is slow (tens of milliseconds per hundred
/// megabytes); a steady stream of batches should add none.
struct pinned_counts {
  std::uint64_t blocks = 0;
  std::uint64_t bytes = 0;
};
[[nodiscard]] pinned_counts pinned_allocations() noexcept;

/// @brief The source of pinned batch columns (core/column_memory.hpp):
///        portable page-locked blocks while the blocks it has given out
///        stay under a quarter of the machine's memory, then none (the
///        column cache falls back to ordinary memory). nullptr without the
///        CUDA layer.
[[nodiscard]] const tandem::detail::column_source* pinned_column_source() noexcept;

}  // namespace tandem::device
