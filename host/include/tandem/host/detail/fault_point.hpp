#pragma once
// Allocation fault points: the test-only way to make the n-th counted
// allocation fail with std::bad_alloc, which proves that a batch that cannot
// get its memory leaves the index as it was (index.hpp, "Failure").
//
// Every allocation site of the leaf store (room for new leaves) and of the
// batch pipeline (route arrays, answer columns, the leaf phase's buffers,
// scan output, the leaf table of an inner sync) calls `allocation_point()`
// just before it allocates. Disarmed, that costs one relaxed atomic load.
// The count is process-wide: every index and every thread draw from it.
// The scheduler's test hook (tandem/scheduler/testing.hpp) arms it.

#include <atomic>
#include <cstdint>

namespace tandem::host::detail {

/// Counted allocations still to come before the one that fails; 0: disarmed.
extern std::atomic<std::uint64_t> allocation_countdown;

/// Counts one allocation; throws std::bad_alloc when it is the one armed.
void count_allocation();

/// @brief Called by an allocation site before it allocates.
/// @throws std::bad_alloc when armed and this is the n-th counted allocation
inline void allocation_point() {
  if (allocation_countdown.load(std::memory_order_relaxed) != 0) count_allocation();
}

/// @brief Makes the n-th counted allocation from now on fail (n >= 1); it
///        fails once, then the point is disarmed. 0 disarms.
void arm_allocation_fault(std::uint64_t n) noexcept;

/// @brief Disarms.
/// @return how many counted allocations were still to come before the
///         failing one: 0 when the failure happened (or none was armed).
std::uint64_t disarm_allocation_fault() noexcept;

}  // namespace tandem::host::detail
