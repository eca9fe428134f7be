#pragma once
/// @file
/// Test hooks of tandem::index. Not part of the stable API.

#include <tandem/device/gpu_router.hpp>
#include <tandem/index.hpp>

#include <cstdint>

namespace tandem::detail {

struct index_access {
  /// Makes the next `count` GPU calls of the index that reach `s` fail with
  /// a CUDA error. Returns false when the index routes without a GPU.
  static bool inject_gpu_fault(tandem::index& idx, device::stage s, int count = 1);
  /// As inject_gpu_fault, on the index's GPU `gpu` past its first (1: the
  /// next of config.gpu_devices that it holds). Returns false when it
  /// holds no such GPU.
  static bool inject_gpu_fault(tandem::index& idx, std::size_t gpu, device::stage s, int count = 1);

  /// Makes the n-th counted allocation from now on throw std::bad_alloc
  /// (n >= 1), once; 0 disarms. Counted: room for new leaves (splits, load),
  /// a batch's route arrays and answer columns, the leaf phase's work arrays
  /// and run buffers, scan output, the leaf table of an inner sync.
  /// Process-wide: every index and every thread draw from one count.
  static void fail_nth_allocation(std::uint64_t n) noexcept;
  /// Disarms the allocation fault.
  /// @return counted allocations that were still to come before the failing
  ///         one: 0 when it failed (or none was armed)
  static std::uint64_t disarm_allocation_fault() noexcept;
};

}  // namespace tandem::detail
