#pragma once
// The index's GPUs past its first (config.gpu_devices): each holds the inner
// levels and the same leaf copies as the first, and answers its part of a
// batch of gets that the copies take (gpu_peers.cpp); and the leaf cache's
// target on the GPUs (leaf_copies.cpp).
#include <tandem/device/device_query.hpp>
#include <tandem/device/gpu_router.hpp>
#include <tandem/host/leaf_cache.hpp>

#include "worker_thread.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

/// The copies in the GPU's memory, through the router; with `peers`
/// (config.gpu_devices), the same copies on each of the others, where a
/// failure drops that GPU alone.
class gpu_copy_target final : public host::copy_target {
 public:
  using each_peer = std::function<void(const std::function<void(device::gpu_router&)>&)>;
  explicit gpu_copy_target(device::gpu_router& g, each_peer peers = nullptr) : g_(g), peers_(std::move(peers)) {}
  void reserve(std::size_t entries) override {
    g_.reserve_copies(entries);
    if (peers_) peers_([&](device::gpu_router& g) { g.reserve_copies(entries); });
  }
  void apply(const copy_changes& c) override {
    g_.apply_copies(c);
    if (peers_) peers_([&](device::gpu_router& g) { g.apply_copies(c); });
  }
  void take_hits(std::vector<std::uint32_t>& hits) override {
    g_.take_copy_hits(hits);
    if (peers_) peers_([&](device::gpu_router& g) { g.take_copy_hits(hits); });
  }
  [[nodiscard]] std::size_t bytes() const noexcept override { return g_.copy_bytes(); }
  void read(std::vector<leaf_copy>& table, std::vector<entry>& pool) override { g_.read_copies(table, pool); }

 private:
  device::gpu_router& g_;
  each_peer peers_;
};

}  // namespace tandem::scheduler
