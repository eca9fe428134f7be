// The GPU's side of the index (index_impl.hpp): choosing the GPU at
// construction, fitting config.max_gpu_bytes (route arrays, scatter room,
// leaf guides of either kind), uploading the inner layout's new versions
// and the leaf guides. Runs on the dispatcher thread.
#include "index_impl.hpp"

#include <tandem/device/current_device.hpp>
#include <tandem/device/device_query.hpp>
#include <tandem/error.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <string>

namespace tandem {

void index::impl::open_gpu() {
  route_keys_.store(cfg_.max_gpu_route_keys);
  if (cfg_.device == device_kind::cpu) {
    device_ = "cpu (config.device = cpu)";
    return;
  }
  const device::device_report devices = device::query_devices();
  const int ordinal = cfg_.gpu_devices.empty() ? cfg_.gpu_device : cfg_.gpu_devices[0];
  const std::string named = cfg_.gpu_devices.empty() ? "config.gpu_device = " : "config.gpu_devices[0] = ";
  if (devices.devices.empty()) {
    if (cfg_.device == device_kind::gpu) {
      throw error("tandem::config.device = gpu, but there is no usable GPU (" + named + std::to_string(ordinal) +
                  "; found " + device::describe(devices) + ")");
    }
    device_ = "cpu (" + device::describe(devices) + ")";
    return;
  }
  if (std::none_of(devices.devices.begin(), devices.devices.end(),
                   [&](const device::device_info& d) { return d.ordinal == ordinal; })) {
    // describe() names how many GPUs were found and what they are.
    const std::string why = named + std::to_string(ordinal) + " names no usable GPU (found " +
                            device::describe(devices) + ")";
    if (cfg_.device == device_kind::gpu) throw error("tandem::config.device = gpu, but " + why);
    device_ = "cpu (" + why + ")";
    return;
  }
  device::router_options options;
  try {
    options.device_ordinal = ordinal;
    options.order = cfg_.gpu_order == gpu_query_order::partial_sort ? device::aggregation::partial
                    : cfg_.gpu_order == gpu_query_order::none       ? device::aggregation::none
                                                                    : device::aggregation::full;
    // Under a memory budget, smaller chunks (their buffers take ~47 bytes a
    // key) and calibrations leave more of it to routes: chunks of at most
    // 2^19 keys whose buffers take at most an eighth of the budget.
    if (cfg_.max_gpu_bytes > 0) {
      options.chunk = std::size_t{1} << 19;
      while (options.chunk > (std::size_t{1} << 12) && options.chunk * 47 > cfg_.max_gpu_bytes / 8) options.chunk /= 2;
      options.calibration_keys = std::max<std::size_t>(options.chunk, 1024);
    } else {
      // Chunks of 2^21 keys: a batch's first chunk goes up and its last
      // one's answers come down beside no other work of the batch, so a
      // 2^24-key batch in 8 chunks keeps the link and the GPU busier than in
      // 4. Over several GPUs each takes a part of a batch, and chunks shrink
      // with the parts (two H200s: routes took 0.226 s a run with chunks of
      // 2^20 against 0.237 s with 2^21).
      options.chunk = std::max<std::size_t>((std::size_t{1} << 21) / std::max<std::size_t>(1, cfg_.gpu_devices.size()),
                                            std::size_t{1} << 12);
    }
    gpu_ = std::make_unique<device::gpu_router>(options);
    device_ = "gpu " + std::to_string(ordinal) + ": " + gpu_->name();
  } catch (const std::exception& e) {
    if (cfg_.device == device_kind::gpu) {
      throw error("tandem::config.device = gpu, but GPU " + std::to_string(ordinal) + " cannot be used: " + e.what());
    }
    gpu_.reset();
    device_ = "cpu (GPU " + std::to_string(ordinal) + " unusable: " + e.what() + ")";
  }
  if (gpu_) open_peers(options, devices);
}

void index::impl::use_gpu_device() const noexcept {
  if (!gpu_) return;
  try {
    device::make_current(gpu_->device_ordinal());
  } catch (const std::exception&) {  // each GPU call makes it current again, and reports a failure
  }
}

bool index::impl::fit_gpu_budget(std::size_t scatter) {
  const std::size_t budget = cfg_.max_gpu_bytes;
  if (budget == 0) return true;
  // Both versions of the mirror (at most the layout's bytes each), with the
  // upload's headroom (an eighth).
  const std::size_t mirror = layout_->bytes();
  // The leaf cache's slots and table (config.gpu_cache_bytes) come first.
  const std::size_t copies = cache_ && standin_ == nullptr
                                 ? cache_->counters().capacity_bytes + store_.leaf_count() * 2 * sizeof(leaf_copy)
                                 : 0;
  const std::size_t fixed = 2 * (mirror + mirror / 8) + copies;
  const std::size_t leaves = store_.leaf_count();
  // The guides of either kind, with their growth's headroom (a quarter; a
  // sixteenth for compact ones, gpu_router::upload_compact_guides).
  const std::size_t full = (leaves + leaves / 4) * sizeof(leaf_guide);
  const std::size_t compact = (leaves + leaves / 16 + 1) * sizeof(compact_guide);
  // The most keys a route may take beside `held` bytes and scatters of
  // `answers` (0: not even 1024).
  auto keys_beside = [&](std::size_t held, std::size_t answers) -> std::size_t {
    std::size_t lo = 0;
    std::size_t hi = std::size_t{1} << 32;
    while (hi - lo > 1024) {
      const std::size_t mid = lo + (hi - lo) / 2;
      (held + gpu_->batch_bytes(mid, answers, true) <= budget ? lo : hi) = mid;
    }
    return lo;
  };
  // Full guides while routes of guide_min_route_keys fit beside them and
  // the scatter room; else compact ones while routes of
  // compact_min_route_keys fit beside them and the room; else none. The
  // scatter room comes first: a host scatter of a batch's answers costs
  // more than hints save its leaf phase (docs/design.md, "Memory").
  guide_kind kind = guide_kind::none;
  if (cfg_.gpu_leaf_hints) {
    if (keys_beside(fixed + full, scatter) >= guide_min_route_keys) {
      kind = guide_kind::full;
    } else if (keys_beside(fixed + compact, scatter) >= compact_min_route_keys) {
      kind = guide_kind::compact;
    }
  }
  const std::size_t held = fixed + (kind == guide_kind::full ? full : kind == guide_kind::compact ? compact : 0);
  std::size_t keys = keys_beside(held, scatter);
  if (keys < scatter_min_route_keys && scatter > 0) {  // the layout grew: give up GPU scatters first
    scatter = 0;
    keys = keys_beside(held, 0);
  }
  if (cfg_.max_gpu_route_keys > 0) keys = std::min(keys, cfg_.max_gpu_route_keys);
  const bool fits = keys >= min_budget_route_keys;
  budget_layout_bytes_.store(fixed);
  if (scatter_) scatter_->wait();  // no scatter in flight past the new room
  std::lock_guard<std::mutex> turn(gpu_turn_);  // no route between the bounds and their use
  const bool dropped = kind == guide_kind::none;
  if (kind != guide_kind_.load()) {  // the next batch's refresh_guides uploads the new kind
    if (cfg_.gpu_leaf_hints && !guides_dropped_.load()) gpu_->upload_guides(nullptr, 0);  // frees them
    batches_since_guides_ = guide_refresh_batches;
  }
  guides_dropped_.store(dropped && cfg_.gpu_leaf_hints);
  guide_kind_.store(kind);
  gpu_->set_key_bound(fits ? keys : min_budget_route_keys, fits ? scatter : 0);
  for_each_peer([&](device::gpu_router& g) { g.set_key_bound(fits ? keys : min_budget_route_keys, 0); });
  route_keys_.store(fits ? keys : 0);
  scatter_keys_.store(fits ? scatter : 0);
  scatter_refused_ = 0;
  over_budget_.store(!fits);
  return fits;
}

bool index::impl::gpu_scatter_fits(std::size_t n) {
  if (cfg_.max_gpu_bytes == 0) return route_keys_.load() == 0 || n <= route_keys_.load();
  if (n <= scatter_keys_.load()) return true;
  if (scatter_refused_ != 0 && n >= scatter_refused_) return false;
  // Room for the answers of n ops while routes of scatter_min_route_keys
  // still fit: more key ranges a batch cost less than a host scatter.
  const std::size_t before = scatter_keys_.load();
  try {
    if (fit_gpu_budget(n) && scatter_keys_.load() >= n) return true;
    fit_gpu_budget(before);
  } catch (const std::exception&) {  // the batch scatters on the host
    note_gpu_failure();
  }
  scatter_refused_ = n;
  return false;
}

void index::impl::sync_gpu() {
  if (!gpu_ || degraded_.load()) return;
  try {
    if (!fit_gpu_budget(scatter_keys_.load())) return;
    // The router switches versions when the upload completes; a route in
    // flight must see its ordinals mapped through the version it used, so
    // uploads and routes on the GPU take turns (see route()).
    std::lock_guard<std::mutex> turn(gpu_turn_);
    gpu_->upload(*layout_);
    for_each_peer([&](device::gpu_router& g) { g.upload(*layout_); });
    std::lock_guard<std::mutex> lock(layout_mutex_);
    gpu_layout_ = layout_;
    group_sizes_.clear();
    for (int g : gpu_->group_sizes()) group_sizes_ += (group_sizes_.empty() ? "" : ",") + std::to_string(g);
  } catch (const std::exception&) {
    note_gpu_failure();
  }
}

void index::impl::refresh_guides() {
  batches_since_guides_ = 0;
  if (!gpu_ || degraded_.load() || over_budget_.load() || guides_dropped_.load() || !cfg_.gpu_leaf_hints) return;
  try {
    const std::size_t count = store_.leaf_count();
    if (guide_kind_.load() == guide_kind::compact) {
      // Their places lie between the fences of the layout the GPU routes on.
      if (gpu_layout_snapshot() != layout_snapshot()) return;
      guides_.release();
      compact_guide* g = compact_guides_.get(count);
      const std::size_t leaves = table_.size();
      run_in_arena([&] {
        tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, 1 << 16),
                          [&](const tbb::blocked_range<std::size_t>& r) {
                            std::fill(g + r.begin(), g + r.end(), compact_guide{});  // ids of no leaf: no hints
                          });
        tbb::parallel_for(tbb::blocked_range<std::size_t>(0, leaves, 4096), [&](const tbb::blocked_range<std::size_t>& r) {
          for (std::size_t o = r.begin(); o < r.end(); ++o) {
            const bool bounded = o + 1 < leaves;
            store_[table_.ids[o]].data.fill_compact_guide(g[table_.ids[o]], o == 0 ? min_key : table_.low_keys[o],
                                                          bounded ? table_.low_keys[o + 1] : max_key, bounded);
          }
        });
      });
      std::lock_guard<std::mutex> turn(gpu_turn_);
      gpu_->upload_compact_guides(g, count);
    } else {
      compact_guides_.release();
      leaf_guide* g = guides_.get(count);
      run_in_arena([&] {
        tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, 4096), [&](const tbb::blocked_range<std::size_t>& r) {
          for (std::size_t id = r.begin(); id < r.end(); ++id) store_[static_cast<leaf_id>(id)].data.guide(g[id]);
        });
      });
      std::lock_guard<std::mutex> turn(gpu_turn_);
      gpu_->upload_guides(g, count);
    }
    ++guide_refreshes_;
  } catch (const std::bad_alloc&) {  // routes go on without hints
  } catch (const std::exception&) {
    note_gpu_failure();
  }
}

void index::impl::note_gpu_failure() {
  ++gpu_failures_;
  if (++consecutive_failures_ >= cfg_.gpu_failure_limit) degraded_.store(true);
}

}  // namespace tandem
