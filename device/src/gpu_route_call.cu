// gpu_router's route entry points: route(), route_range() and (with
// gpu_copies.cu's route_cached) route_call, which checks a call, holds the
// layout buffer it routes on and runs gpu_route.cu's run_route. Design:
// gpu_router.hpp.
#include <tandem/device/gpu_router.hpp>

#include <tandem/device/detail/cuda_check.cuh>
#include <tandem/device/detail/router_state.cuh>

#include <cuda_runtime.h>

#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

namespace tandem::device {

using detail::clock_type;
using detail::seconds_since;

void gpu_router::state::drain_route() noexcept {
  for (const auto& lane : route.lanes) (void)cudaStreamSynchronize(lane->stream.get());
  (void)cudaGetLastError();
}

void gpu_router::route(const key_type* keys, const value_type* args, const std::uint8_t* types, std::size_t n,
                       routed_batch_view& out, route_timing* timing) {
  state_->route_call(keys, args, types, n, out, timing, nullptr);
}

std::size_t gpu_router::route_range(const key_type* keys, const value_type* args, const std::uint8_t* types,
                                    std::size_t n, key_type lo, key_type hi, std::size_t limit, routed_batch_view& out,
                                    route_timing* timing) {
  if (state_->options.order != aggregation::full) {
    throw std::logic_error("gpu_router::route_range: needs aggregation::full");
  }
  const detail::key_range range{lo, hi, limit};
  return state_->route_call(keys, args, types, n, out, timing, &range);
}

std::size_t gpu_router::state::route_call(const key_type* keys, const value_type* args, const std::uint8_t* types,
                                          std::size_t n, routed_batch_view& out, route_timing* timing,
                                          const detail::key_range* range, const detail::copy_answers* answers) {
  const auto t0 = clock_type::now();
  state& s = *this;
  const detail::account_scope scope(s.account);
  std::lock_guard<std::mutex> route_lock(s.route_mutex);
  int b = 0;
  {
    std::lock_guard<std::mutex> lock(s.meta_mutex);
    if (s.current < 0) throw std::logic_error("gpu_router::route: no layout was uploaded");
    b = s.current;
    ++s.buffers[static_cast<std::size_t>(b)].users;
  }
  // While it counts as a user, no upload writes this buffer or its meta.
  struct release_buffer {
    state& s;
    int b;
    ~release_buffer() {
      {
        std::lock_guard<std::mutex> lock(s.meta_mutex);
        --s.buffers[static_cast<std::size_t>(b)].users;
      }
      s.users_cv.notify_all();
    }
  } release{s, b};
  const detail::version_buffer& vb = s.buffers[static_cast<std::size_t>(b)];

  if (n > std::size_t{std::numeric_limits<std::uint32_t>::max()}) {
    throw std::length_error("gpu_router::route: " + std::to_string(n) +
                            " keys; a batch holds at most 2^32 - 1 (positions are u32)");
  }
  route_timing t;
  out.hinted = false;
  std::size_t routed = 0;
  if (n == 0) {
    if (out.group_begin != nullptr) out.group_begin[0] = 0;
    out.groups = 0;
    out.key_sorted = s.options.order == aggregation::full;
  } else {
    if (keys == nullptr || out.positions == nullptr || out.keys == nullptr || out.group_begin == nullptr ||
        out.group_ordinal == nullptr) {
      throw std::invalid_argument("gpu_router::route: null keys, out.positions, out.keys, out.group_begin or "
                                  "out.group_ordinal for " + std::to_string(n) + " keys");
    }
    if ((out.args != nullptr && args == nullptr) || (out.types != nullptr && types == nullptr)) {
      throw std::invalid_argument("gpu_router::route: out.args (out.types) is set but args (types) is null for " +
                                  std::to_string(n) + " keys");
    }
    s.set_device();
    try {
      routed = s.run_route(vb, vb.meta, keys, args, types, n, out, timing != nullptr ? &t : nullptr, range, answers);
    } catch (...) {
      s.drain_route();
      throw;
    }
  }
  t.total = seconds_since(t0);
  if (timing != nullptr) *timing = t;
  return routed;
}

}  // namespace tandem::device
