#pragma once
// The index's GPUs past its first (config.gpu_devices): each holds the inner
// levels and the same leaf copies as the first, and answers its part of a
// batch of gets that the copies take (gpu_peers.cpp).
#include <tandem/device/device_query.hpp>
#include <tandem/device/gpu_router.hpp>

#include "worker_thread.hpp"

#include <atomic>
#include <memory>
#include <string>

namespace tandem::scheduler {

struct peer_gpu {
  std::unique_ptr<device::gpu_router> router;
  /// Runs this GPU's part of a split route (its device current there).
  std::unique_ptr<worker_thread> thread;
  /// A call on it failed: it is no longer used (its copies are unspecified).
  /// Set under the index's gpu_turn_; read there or as a hint.
  std::atomic<bool> off{false};
  std::string why;  // set before `off`; read once `off` is seen
};

}  // namespace tandem::scheduler
