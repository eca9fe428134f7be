#pragma once
/// @file
/// Test hooks of tandem::index. Not part of the stable API.

#include <tandem/device/gpu_router.hpp>
#include <tandem/index.hpp>

namespace tandem::detail {

struct index_access {
  /// Makes the next `count` GPU calls of the index that reach `s` fail with
  /// a CUDA error. Returns false when the index routes without a GPU.
  static bool inject_gpu_fault(tandem::index& idx, device::stage s, int count = 1);
};

}  // namespace tandem::detail
