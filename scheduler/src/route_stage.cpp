// Step 2 of a batch (index_impl.hpp): sort and route. Takes the checked
// batch; gives its ops grouped by leaf and sorted by (key, position) in the
// space's final route (routed_batch_view), on one layout version. Share s
// of the ops (the first s * n) goes to the GPU, which sorts, descends and
// groups them and hands back positions, keys (args, types) and group
// boundaries; a share larger than the keys one route may take
// (config.max_gpu_route_keys, or what config.max_gpu_bytes leaves) goes in
// key ranges that end at leaf bounds, each routed whole (their routes
// concatenate), or, without a full sort, past max_key_ranges ranges or
// after a range overflowed, in slices by position (a range that overflows
// sends its batch to the CPU router); the CPU workers route the rest on the
// same version;
// the sorted parts are merged, group by group in parallel. A GPU failure
// re-routes the GPU's share (slice) on the CPU. Runs on the look-ahead thread (the
// GPU side of a split on the GPU thread); CPU work enters the arena, the
// waits for the GPU stay outside it.
#include "index_impl.hpp"

#include <tandem/error.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
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
  double share = fixed_share_.load();
  if (auto_share_.load()) {
    std::lock_guard<std::mutex> lock(policy_mutex_);
    share = policy_.share();
  }
  if (cache_ && !p.no_copies && route_from_copies(p, share)) return;
  keys_to_host(p);  // device columns the copies did not take: b is over host copies from here
  const auto* types = reinterpret_cast<const std::uint8_t*>(b.types());
  // Held until the GPU route has finished: no upload may switch the router's
  // version between reading it here and the route using it.
  std::unique_lock<std::mutex> turn(gpu_turn_, std::defer_lock);
  std::shared_ptr<const inner_layout> on_gpu;
  if (gpu_ && !degraded_.load() && n >= cfg_.min_gpu_batch && share > 0) {
    turn.lock();  // over_budget_ and route_keys_ change only under it
    if (!over_budget_.load()) on_gpu = gpu_layout_snapshot();
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
  const std::size_t bound = route_keys_.load();
  const std::size_t slice = bound > 0 ? std::min(m, bound) : m;
  // Hints serve the point ops of a batch sparse over the leaves; denser
  // batches share the header lines anyway.
  const bool hints = m == n && cfg_.gpu_leaf_hints && !guides_dropped_.load() &&
                     n < host::dense_gets * version.leaf_count();
  if (m == n && slice == n) {
    if (hints) out.hints = sp.final_route.hints.get(n);
    route_gpu(p, out, out, 0, n);
    turn.unlock();
    observe_rates(info);
    p.routes = out;
    return;
  }
  // The GPU's share in key ranges (one part: with the whole batch on the
  // GPU, the route itself) while they are few (each uploads all m keys) and
  // the last batches' ranges did not overflow, else in slices by position
  // (each routed whole: sorted and grouped); the rest on the CPU, then one
  // merge of the parts.
  const bool by_range = cfg_.gpu_order == gpu_query_order::full_sort && slice < m && version.leaf_count() >= 2 &&
                        m <= max_key_ranges * (slice / 10 * 9) && range_cooldown_.load() == 0;
  if (!by_range && range_cooldown_.load() > 0) range_cooldown_.fetch_sub(1);
  const std::size_t slices = by_range ? 1 : (m + slice - 1) / slice;
  std::vector<routed_batch_view>& parts = sp.parts;
  std::vector<std::uint32_t>& bases = sp.part_bases;  // added to a part's positions by the merge
  parts.assign(slices + (m < n ? 1 : 0), routed_batch_view{});
  bases.assign(parts.size(), 0);
  if (by_range && m == n) {
    parts[0] = out;
    if (hints) parts[0].hints = sp.final_route.hints.get(n);
  } else {
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
    if (by_range) {
      const routed_batch_view want = parts[0];
      bool routed = false;
      try {
        routed = route_gpu_ranges(p, parts[0], m, slice);
      } catch (const std::exception&) {
        note_gpu_failure();
        info.gpu_failed = true;
      }
      if (!routed) {  // a range past the slice (ops crowded on a leaf), or a GPU failure: the CPU routes them
        parts[0] = want;
        const auto t0 = clock_type::now();
        run_in_arena([&] {
          host::route_sorted(version.view(), b.keys(), b.args(), types, m, 0, parts[0], sp.fallback_work);
        });
        info.cpu_seconds += seconds_since(t0);
        info.cpu_keys += m;
      }
      return;
    }
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
  if (parts.size() == 1) {  // the whole batch in key ranges: routed as it is
    p.routes = parts[0];
    return;
  }
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
    note_gpu_route(p, t, m, seconds_since(t0));
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
  if (!out.key_sorted) run_in_arena([&] { host::sort_groups(out, p.space->fallback_work); });
  return base;
}

void index::impl::note_gpu_route(prepared& p, const device::route_timing& t, std::size_t keys, double seconds) {
  add_gpu_route(p.info, t, keys, seconds);
  consecutive_failures_.store(0);
  p.bytes.pcie += t.bytes_up + t.bytes_down;
}

void index::impl::add_gpu_route(route_report& info, const device::route_timing& t, std::size_t keys,
                                double seconds) {
  info.gpu.upload += t.upload;
  info.gpu.sort += t.sort;
  info.gpu.kernel += t.kernel;
  info.gpu.download += t.download;
  info.gpu.grouping += t.grouping;
  info.gpu.total += t.total;
  info.gpu.chunks += t.chunks;
  info.gpu.bytes_up += t.bytes_up;
  info.gpu.bytes_down += t.bytes_down;
  info.gpu_seconds += seconds;
  info.gpu_keys += keys;
}

bool index::impl::route_gpu_ranges(prepared& p, routed_batch_view& part, std::size_t m, std::size_t slice) {
  const batch& b = p.j->ops;
  const inner_layout& version = *p.version;
  const auto* types = reinterpret_cast<const std::uint8_t*>(b.types());
  // Each range's first key: quantiles of a sample of the keys, each moved
  // down to the low key of its leaf (a leaf's ops stay in one range). The
  // ranges aim at 9/10 of a slice: with 4096 sampled keys a range, a range
  // holds its aim within ~1.6% (one standard deviation), so one overfills
  // (and the CPU routes the batch) only where many ops share a leaf.
  const std::size_t aim = std::max<std::size_t>(slice / 10 * 9, 1);
  const std::size_t ranges = (m + aim - 1) / aim;
  const std::size_t step = std::max<std::size_t>(1, m / (ranges * range_sample_keys));
  std::vector<key_type>& sample = p.space->range_sample;
  sample.clear();
  for (std::size_t i = 0; i < m; i += step) sample.push_back(b.keys()[i]);
  std::sort(sample.begin(), sample.end());
  std::vector<key_type>& lows = p.space->range_lows;
  lows.assign(1, 0);
  const key_type* low_keys = version.radix().low_keys;
  for (std::size_t r = 1; r < ranges; ++r) {
    const key_type low = low_keys[version.find(sample[r * sample.size() / ranges])];
    if (low > lows.back()) lows.push_back(low);
  }
  std::size_t at = 0;
  std::size_t groups = 0;
  bool hinted = part.hints != nullptr;
  route_report done;  // what the ranges did, counted once they all fit
  for (std::size_t r = 0; r < lows.size(); ++r) {
    routed_batch_view v = part;
    v.positions += at;
    v.keys += at;
    if (v.args != nullptr) v.args += at;
    if (v.types != nullptr) v.types += at;
    if (v.hints != nullptr) v.hints += at;
    v.group_begin += groups;
    v.group_ordinal += groups;
    const key_type hi = r + 1 < lows.size() ? lows[r + 1] - 1 : max_key;
    device::route_timing t;
    const auto t0 = clock_type::now();
    const std::size_t got = gpu_->route_range(b.keys(), v.args ? b.args() : nullptr, v.types ? types : nullptr, m,
                                              lows[r], hi, slice, v, &t);
    if (got > slice) {  // ops crowded on a leaf: slices by position for the next batches
      range_cooldown_.store(range_cooldown_batches);
      return false;
    }
    add_gpu_route(done, t, got, seconds_since(t0));
    for (std::size_t g = 0; g < v.groups; ++g) v.group_begin[g] += static_cast<std::uint32_t>(at);
    hinted = hinted && (v.hinted || got == 0);
    at += got;
    groups += v.groups;
  }
  if (at != m) {
    throw std::logic_error("route_gpu_ranges: the key ranges hold " + std::to_string(at) + " ops, not " +
                           std::to_string(m));
  }
  part.groups = groups;
  part.group_begin[groups] = static_cast<std::uint32_t>(m);
  part.key_sorted = true;
  part.hinted = hinted;
  note_gpu_route(p, done.gpu, done.gpu_keys, done.gpu_seconds);
  return true;
}

void index::impl::observe_rates(route_report& info) {
  std::lock_guard<std::mutex> lock(policy_mutex_);
  if (!info.gpu_failed) policy_.observe(info.gpu_keys, info.gpu_seconds, info.cpu_keys, info.cpu_seconds);
  info.gpu_rate = policy_.gpu_rate();
  info.cpu_rate = policy_.cpu_rate();
}

}  // namespace tandem
