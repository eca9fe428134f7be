// Allocation fault points (detail/fault_point.hpp).
#include <tandem/host/detail/fault_point.hpp>

#include <new>

namespace tandem::host::detail {

std::atomic<std::uint64_t> allocation_countdown{0};

void count_allocation() {
  std::uint64_t left = allocation_countdown.load(std::memory_order_relaxed);
  // Several threads may count at once: exactly one of them takes the count
  // from 1 to 0 and fails.
  while (left != 0) {
    if (allocation_countdown.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) {
      if (left == 1) throw std::bad_alloc();
      return;
    }
  }
}

void arm_allocation_fault(std::uint64_t n) noexcept { allocation_countdown.store(n, std::memory_order_relaxed); }

std::uint64_t disarm_allocation_fault() noexcept { return allocation_countdown.exchange(0, std::memory_order_relaxed); }

}  // namespace tandem::host::detail
