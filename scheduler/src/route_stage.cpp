// Step 2 of a batch (index_impl.hpp): sort and route. Takes the checked
// batch; gives its ops grouped by leaf and sorted by (key, position) in the
// space's final route (routed_batch_view), on one layout version. Share s
// of the ops (the first s * n) goes to the GPU, which sorts, descends and
// groups them and hands back positions, keys (args, types) and group
// boundaries; the CPU workers route the rest on the same version; the two
// sorted halves are merged, group by group in parallel. A GPU failure
// re-routes the GPU's share on the CPU. Runs on the look-ahead thread (the
// GPU side of a split on the GPU thread); CPU work enters the arena, the
// waits for the GPU stay outside it.
#include "index_impl.hpp"

#include <tandem/error.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <limits>

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
  if (m == n) {
    route_gpu(p, out, out, n);
    turn.unlock();
    observe_rates(info);
    p.routes = out;
    return;
  }
  routed_batch_view gpu_part = sp.gpu_side.view(m, with_args);
  routed_batch_view cpu_part = sp.cpu_side.view(n - m, with_args);
  gpu_side_->start([&] { route_gpu(p, gpu_part, gpu_part, m); });
  const auto t0 = clock_type::now();
  try {
    run_in_arena([&] {
      host::route_sorted(version.view(), b.keys() + m, b.args() + m, types + m, n - m, static_cast<std::uint32_t>(m),
                         cpu_part, sp.cpu_work);
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
  turn.unlock();
  observe_rates(info);
  run_in_arena([&] { merge_routes(gpu_part, cpu_part, out, n); });
  p.bytes.route += 2 * route_bytes(n, with_args);  // the merge reads both halves and writes the whole
  p.routes = out;
}

/// The GPU share [0, m) into `out`; on a GPU failure, the same share routed
/// on the CPU. Leaves `out` key-sorted either way.
void index::impl::route_gpu(prepared& p, const routed_batch_view& want, routed_batch_view& out, std::size_t m) {
  const batch& b = p.j->ops;
  route_report& info = p.info;
  const auto* types = reinterpret_cast<const std::uint8_t*>(b.types());
  out = want;
  const auto t0 = clock_type::now();
  try {
    gpu_->route(b.keys(), want.args ? b.args() : nullptr, want.types ? types : nullptr, m, out, &info.gpu);
    info.gpu_seconds = seconds_since(t0);
    info.gpu_keys = m;
    consecutive_failures_.store(0);
    p.bytes.pcie += info.gpu.bytes_up + info.gpu.bytes_down;
  } catch (const std::exception&) {
    note_gpu_failure();
    info.gpu_failed = true;
    out = want;
    const auto t1 = clock_type::now();
    run_in_arena([&] { host::route_sorted(p.version->view(), b.keys(), b.args(), types, m, 0, out, p.space->cpu_work); });
    info.cpu_seconds += seconds_since(t1);
    info.cpu_keys += m;
  }
  if (!out.key_sorted) run_in_arena([&] { host::sort_groups(out); });
}

void index::impl::observe_rates(route_report& info) {
  std::lock_guard<std::mutex> lock(policy_mutex_);
  if (!info.gpu_failed) policy_.observe(info.gpu_keys, info.gpu_seconds, info.cpu_keys, info.cpu_seconds);
  info.gpu_rate = policy_.gpu_rate();
  info.cpu_rate = policy_.cpu_rate();
}

/// out = the GPU's ops (positions < m) and the CPU's ops merged: one group
/// per ordinal, ordinals increasing, each group in (key, position) order.
void index::impl::merge_routes(routed_batch_view& gpu, routed_batch_view& cpu, routed_batch_view& out,
                               std::size_t n) {
  // Group lists merged by ordinal (sequential over groups: small), each
  // merged group remembering where its two parts start.
  std::size_t a = 0, c = 0, g = 0;
  std::uint32_t at = 0;
  while (a < gpu.groups || c < cpu.groups) {
    constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
    const std::uint32_t oa = a < gpu.groups ? gpu.group_ordinal[a] : none;
    const std::uint32_t oc = c < cpu.groups ? cpu.group_ordinal[c] : none;
    const std::uint32_t ord = std::min(oa, oc);
    out.group_ordinal[g] = ord;
    out.group_begin[g++] = at;
    if (oa == ord) at += gpu.group_begin[a + 1] - gpu.group_begin[a], ++a;
    if (oc == ord) at += cpu.group_begin[c + 1] - cpu.group_begin[c], ++c;
  }
  out.group_begin[g] = at;
  out.groups = g;
  out.key_sorted = true;
  if (at != n) throw error("tandem: merged route holds " + std::to_string(at) + " of " + std::to_string(n) + " ops");
  // Both halves are sorted by (key, position) as a whole, and positions
  // differ between them: a merge of the two in slices cut at group starts.
  const std::size_t slices = std::max<std::size_t>(1, std::min<std::size_t>(g, n >> 14));
  tbb::parallel_for(std::size_t{0}, slices, [&](std::size_t s) {
    const std::size_t g0 = g * s / slices, g1 = g * (s + 1) / slices;
    if (g0 == g1) return;
    std::uint32_t o = out.group_begin[g0];
    const std::uint32_t o_end = out.group_begin[g1];
    // Where this slice starts in each half: the first op of an ordinal >= out.group_ordinal[g0].
    auto start_of = [&](const routed_batch_view& h, std::uint32_t ord) {
      const std::size_t k = static_cast<std::size_t>(
          std::lower_bound(h.group_ordinal, h.group_ordinal + h.groups, ord) - h.group_ordinal);
      return h.group_begin[k];
    };
    std::uint32_t i = start_of(gpu, out.group_ordinal[g0]);
    std::uint32_t j = start_of(cpu, out.group_ordinal[g0]);
    const std::uint32_t i_end = gpu.group_begin[gpu.groups], j_end = cpu.group_begin[cpu.groups];
    for (; o < o_end; ++o) {
      const bool take_gpu = j >= j_end || (i < i_end && (gpu.keys[i] < cpu.keys[j] ||
                                                          (gpu.keys[i] == cpu.keys[j] && gpu.positions[i] < cpu.positions[j])));
      const routed_batch_view& h = take_gpu ? gpu : cpu;
      const std::uint32_t k = take_gpu ? i++ : j++;
      out.keys[o] = h.keys[k];
      out.positions[o] = h.positions[k];
      if (out.args) {
        out.args[o] = h.args[k];
        out.types[o] = h.types[k];
      }
    }
  });
}

}  // namespace tandem
