// Step 2 of a batch (index_impl.hpp): sort and route. Takes the checked
// batch; gives its ops grouped by leaf and sorted by (key, position) in the
// space's final route (routed_batch_view), on one layout version. Share s
// of the ops (the first s * n) goes to the GPU, which sorts, descends and
// groups them and hands back positions, keys (args, types) and group
// boundaries, in slices of at most config.max_gpu_route_keys when that is
// set; the CPU workers route the rest on the same version; the sorted parts
// are merged, group by group in parallel. A GPU failure re-routes the GPU's
// share (slice) on the CPU. Runs on the look-ahead thread (the
// GPU side of a split on the GPU thread); CPU work enters the arena, the
// waits for the GPU stay outside it.
#include "index_impl.hpp"

#include <tandem/error.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tandem {
namespace {

/// Bytes a route of n ops writes into host memory.
std::size_t route_bytes(std::size_t n, bool with_args) {
  return n * (sizeof(std::uint32_t) + sizeof(key_type) + (with_args ? sizeof(std::uint64_t) + 1 : 0));
}

}  // namespace

void index::impl::route(prepared& p) {
  const batch& b = p.j->ops;
  const std::size_t n = b.size();
  route_space& sp = *p.space;
  route_report& info = p.info;
  const bool with_args = !p.gets_only;
  const auto* types = reinterpret_cast<const std::uint8_t*>(b.types());
  double share = fixed_share_.load();
  if (auto_share_.load()) {
    std::lock_guard<std::mutex> lock(policy_mutex_);
    share = policy_.share();
  }
  // Held until the GPU route has finished: no upload may switch the router's
  // version between reading it here and the route using it.
  std::unique_lock<std::mutex> turn(gpu_turn_, std::defer_lock);
  std::shared_ptr<const inner_layout> on_gpu;
  if (gpu_ && !degraded_.load() && n >= cfg_.min_gpu_batch && share > 0) {
    turn.lock();
    on_gpu = gpu_layout_snapshot();
  }
  if (!on_gpu) share = 0;
  const std::size_t m = std::min(n, static_cast<std::size_t>(std::llround(share * static_cast<double>(n))));
  routed_batch_view out = sp.final_route.view(n, with_args);
  p.bytes.route = route_bytes(n, with_args);
  if (m == 0) {
    const auto t0 = clock_type::now();
    run_in_arena([&] { host::route_sorted(p.version->view(), b.keys(), b.args(), types, n, 0, out, sp.cpu_work); });
    info.cpu_seconds = seconds_since(t0);
    info.cpu_keys = n;
    p.routes = out;
    p.bytes.route += n * (sizeof(key_type) * 2 + sizeof(std::uint32_t) * 2);  // descent + grouping + gathers
    return;
  }
  p.version = on_gpu;  // both sides route on it
  const inner_layout& version = *on_gpu;
  const std::size_t slice = cfg_.max_gpu_route_keys > 0 ? std::min(m, cfg_.max_gpu_route_keys) : m;
  if (m == n && slice == n) {
    // Hints serve the point ops of a batch sparse over the leaves; denser
    // batches share the header lines anyway.
    if (cfg_.gpu_leaf_hints && n < host::dense_gets * version.leaf_count()) {
      out.hints = sp.final_route.hints.get(n);
    }
    route_gpu(p, out, out, 0, n);
    turn.unlock();
    observe_rates(info);
    p.routes = out;
    return;
  }
  // The GPU's share in slices (each routed whole: sorted and grouped), the
  // rest on the CPU, then one merge of all the parts.
  const std::size_t slices = (m + slice - 1) / slice;
  std::vector<routed_batch_view>& parts = sp.parts;
  std::vector<std::uint32_t>& bases = sp.part_bases;  // added to a part's positions by the merge
  parts.assign(slices + (m < n ? 1 : 0), routed_batch_view{});
  bases.assign(parts.size(), 0);
  {
    const routed_batch_view all = sp.gpu_side.view(m + slices, with_args);
    for (std::size_t i = 0; i < slices; ++i) {
      const std::size_t at = i * slice;
      routed_batch_view& v = parts[i];
      v.positions = all.positions + at;
      v.keys = all.keys + at;
      v.args = with_args ? all.args + at : nullptr;
      v.types = with_args ? all.types + at : nullptr;
      v.group_begin = all.group_begin + at + i;
      v.group_ordinal = all.group_ordinal + at;
    }
  }
  auto gpu_work = [&] {
    for (std::size_t i = 0; i < slices; ++i) {
      const std::size_t at = i * slice;
      bases[i] = route_gpu(p, parts[i], parts[i], at, std::min(slice, m - at));
    }
  };
  if (m < n) {
    parts.back() = sp.cpu_side.view(n - m, with_args);
    gpu_side_->start(gpu_work);
    const auto t0 = clock_type::now();
    try {
      run_in_arena([&] {
        host::route_sorted(version.view(), b.keys() + m, b.args() + m, types + m, n - m, static_cast<std::uint32_t>(m),
                           parts.back(), sp.cpu_work);
      });
    } catch (...) {
      try {
        gpu_side_->wait();  // it uses this frame: let it finish first
      } catch (...) {
      }
      throw;
    }
    info.cpu_seconds = seconds_since(t0);
    info.cpu_keys = n - m;
    gpu_side_->wait();
  } else {
    gpu_work();
  }
  turn.unlock();
  observe_rates(info);
  run_in_arena([&] { host::merge_routes(parts.data(), bases.data(), parts.size(), n, out, sp.merge_work); });
  p.bytes.route += 2 * route_bytes(n, with_args);  // the merge reads the parts and writes the whole
  p.routes = out;
}

/// Ops [first, first + m) of the batch into `out`, on the GPU, or on a GPU
/// failure on the CPU. Leaves `out` key-sorted either way.
/// @return what to add to out's positions to make them batch positions
///         (the GPU numbers a slice from 0; the CPU from `first`)
std::uint32_t index::impl::route_gpu(prepared& p, const routed_batch_view& want, routed_batch_view& out,
                                     std::size_t first, std::size_t m) {
  const batch& b = p.j->ops;
  route_report& info = p.info;
  const auto* types = reinterpret_cast<const std::uint8_t*>(b.types()) + first;
  out = want;
  std::uint32_t base = static_cast<std::uint32_t>(first);
  const auto t0 = clock_type::now();
  try {
    device::route_timing t;
    gpu_->route(b.keys() + first, want.args ? b.args() + first : nullptr, want.types ? types : nullptr, m, out, &t);
    info.gpu.upload += t.upload;
    info.gpu.sort += t.sort;
    info.gpu.kernel += t.kernel;
    info.gpu.download += t.download;
    info.gpu.grouping += t.grouping;
    info.gpu.total += t.total;
    info.gpu.chunks += t.chunks;
    info.gpu.bytes_up += t.bytes_up;
    info.gpu.bytes_down += t.bytes_down;
    info.gpu_seconds += seconds_since(t0);
    info.gpu_keys += m;
    consecutive_failures_.store(0);
    p.bytes.pcie += t.bytes_up + t.bytes_down;
  } catch (const std::exception&) {
    note_gpu_failure();
    info.gpu_failed = true;
    out = want;
    base = 0;
    const auto t1 = clock_type::now();
    run_in_arena([&] {
      host::route_sorted(p.version->view(), b.keys() + first, b.args() + first, types, m,
                         static_cast<std::uint32_t>(first), out, p.space->fallback_work);
    });
    info.cpu_seconds += seconds_since(t1);
    info.cpu_keys += m;
  }
  if (!out.key_sorted) run_in_arena([&] { host::sort_groups(out); });
  return base;
}

void index::impl::observe_rates(route_report& info) {
  std::lock_guard<std::mutex> lock(policy_mutex_);
  if (!info.gpu_failed) policy_.observe(info.gpu_keys, info.gpu_seconds, info.cpu_keys, info.cpu_seconds);
  info.gpu_rate = policy_.gpu_rate();
  info.cpu_rate = policy_.cpu_rate();
}

}  // namespace tandem
