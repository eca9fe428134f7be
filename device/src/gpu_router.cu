// gpu_router, the mirror: construction, upload of layout versions into the
// double buffer and their constant-memory slots, the group-size calibration,
// descent launches and the accessors. Takes layouts from the thread that
// calls upload (the scheduler's inner sync); gives the route (gpu_route.cu)
// a current version and launch_descent. The descent kernels read this
// file's __constant__ slots, so every descent is launched from here.
// Interface and design: gpu_router.hpp; shared state: detail/router_state.cuh.
#include <tandem/device/gpu_router.hpp>

#include <tandem/device/detail/cuda_check.cuh>
#include <tandem/device/detail/descend_kernels.cuh>
#include <tandem/device/detail/router_state.cuh>
#include <tandem/device/detail/shuffle_kernels.cuh>
#include <tandem/device/current_device.hpp>
#include <tandem/device/device_query.hpp>
#include <tandem/error.hpp>

#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tandem::device {

using detail::clock_type;
using detail::seconds_since;

namespace {

/// Slot pairs of detail::constant_prefix, per device: a router owns one pair
/// (one slot per buffer) or none.
class constant_slot_registry {
 public:
  static constant_slot_registry& instance() {
    static constant_slot_registry registry;
    return registry;
  }
  /// @return a free pair index, or -1.
  int claim(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    unsigned& used = used_[device];
    for (int pair = 0; pair < detail::constant_slots / 2; ++pair) {
      if ((used & (1u << pair)) == 0) {
        used |= 1u << pair;
        return pair;
      }
    }
    return -1;
  }
  void release(int device, int pair) {
    if (pair < 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    used_[device] &= ~(1u << pair);
  }

 private:
  std::mutex mutex_;
  std::map<int, unsigned> used_;
};

bool valid_group_size(int g) { return g >= 1 && g <= 32 && (g & (g - 1)) == 0; }

using descend_fn = void (*)(const key_type*, const std::uint32_t*, const key_type*, const std::uint32_t*,
                            const std::uint32_t*, std::uint32_t*, std::uint32_t*, detail::descend_params);

template <int F>
descend_fn descend_kernel_for(int g) {
  switch (g) {
    case 1: return &detail::descend_kernel<F, 1>;
    case 2: return &detail::descend_kernel<F, 2>;
    case 4: return &detail::descend_kernel<F, 4>;
    case 8: return &detail::descend_kernel<F, 8>;
    case 16: return &detail::descend_kernel<F, 16>;
    default: return &detail::descend_kernel<F, 32>;
  }
}

descend_fn descend_kernel_for(int fanout, int g) {
  switch (fanout) {
    case 16: return descend_kernel_for<16>(g);
    case 32: return descend_kernel_for<32>(g);
    default: return descend_kernel_for<64>(g);
  }
}

}  // namespace

// ---- descent -------------------------------------------------------------------

void gpu_router::state::launch_descent(const detail::version_buffer& vb, const detail::layout_meta& m,
                                       const detail::descent_args& a, cudaStream_t stream, int level_begin,
                                       int level_end, const std::vector<int>& groups) const {
  const std::uint32_t* nodes_in = a.nodes_in;
  int level = level_begin;
  while (level < level_end) {
    const int g = groups[static_cast<std::size_t>(level)];
    int end = level + 1;
    while (end < level_end && groups[static_cast<std::size_t>(end)] == g) ++end;
    detail::descend_params p;
    p.n = a.n;
    p.level_begin = level;
    p.level_end = end;
    p.height = m.height;
    p.constant_levels = m.constant_levels;
    p.constant_first = m.constant_first;
    p.node_count = m.node_count;
    p.leaf_count = m.leaf_count;
    const std::uint64_t threads = static_cast<std::uint64_t>(a.n) * static_cast<std::uint64_t>(g);
    const auto blocks =
        static_cast<unsigned>((threads + detail::descend_block_threads - 1) / detail::descend_block_threads);
    const descend_fn kernel = descend_kernel_for(m.fanout, g);
    kernel<<<blocks, detail::descend_block_threads, 0, stream>>>(vb.key_region.data(), vb.child_prefix.data(), a.keys,
                                                                 a.positions, nodes_in, a.nodes_out, a.ordinals, p);
    TANDEM_CUDA_TRY(cudaGetLastError());
    nodes_in = a.nodes_out;
    level = end;
  }
}

// ---- calibration -------------------------------------------------------------

std::vector<int> gpu_router::state::calibrate(const detail::version_buffer& vb, const detail::layout_meta& m) {
  auto& c = calibration;
  const cudaStream_t stream = upload_stream->get();
  const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(
      options.calibration_keys, key_bound.load() > 0 ? bounded_calibration_keys : std::size_t{1} << 26));
  c.keys.reserve(n);
  c.keys_sorted.reserve(n);
  c.positions.reserve(n);
  c.positions_sorted.reserve(n);
  c.nodes_a.reserve(n);
  c.nodes_b.reserve(n);
  c.ordinals.reserve(n);

  const std::uint32_t bottom_first = m.level_start[static_cast<std::size_t>(m.height) - 1];
  const std::uint32_t bottom_nodes = m.node_count - bottom_first;
  detail::calibration_keys_kernel<<<std::min<unsigned>((n + 255) / 256, 4096), 256, 0, stream>>>(
      vb.key_region.data(), vb.child_prefix.data(), m.fanout, bottom_first, bottom_nodes,
      0x5eed0000ull + m.leaf_count, c.keys.data(), n);
  TANDEM_CUDA_TRY(cudaGetLastError());
  detail::iota_kernel<<<detail::shuffle_blocks(n), detail::shuffle_block_threads, 0, stream>>>(
      c.positions.data(), std::size_t{n}, std::uint32_t{0});
  TANDEM_CUDA_TRY(cudaGetLastError());

  const key_type* keys = c.keys.data();
  const std::uint32_t* positions = nullptr;
  if (options.order != aggregation::none) {
    const int begin_bit = options.order == aggregation::full ? 0 : 64 - m.psa_bits;
    std::size_t temp_bytes = 0;
    TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, c.keys.data(), c.keys_sorted.data(),
                                                    c.positions.data(), c.positions_sorted.data(), n, begin_bit,
                                                    64, stream));
    c.temp.reserve(temp_bytes);
    temp_bytes = c.temp.capacity();
    TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(c.temp.data(), temp_bytes, c.keys.data(), c.keys_sorted.data(),
                                                    c.positions.data(), c.positions_sorted.data(), n, begin_bit,
                                                    64, stream));
    keys = c.keys_sorted.data();
    // As a route: a full sort descends in sorted order and writes ordinals
    // in that order; PSA writes them by position.
    positions = options.order == aggregation::full ? nullptr : c.positions_sorted.data();
  }

  const detail::event_handle start(true);
  const detail::event_handle stop(true);
  constexpr int repeats = 3;
  std::vector<int> groups(static_cast<std::size_t>(m.height), 1);
  std::uint32_t* in = c.nodes_a.data();
  std::uint32_t* out = c.nodes_b.data();
  for (int level = 0; level < m.height; ++level) {
    float best = std::numeric_limits<float>::max();
    for (int g = 1; g <= 32 && g <= m.fanout; g *= 2) {
      const std::vector<int> trial(static_cast<std::size_t>(m.height), g);
      // in -> out, so every launch of a level does the same work.
      detail::descent_args a;
      a.keys = keys;
      a.positions = positions;
      a.n = n;
      a.nodes_in = in;
      a.nodes_out = out;
      a.ordinals = c.ordinals.data();
      auto run_level = [&] { launch_descent(vb, m, a, stream, level, level + 1, trial); };
      run_level();  // warm-up
      TANDEM_CUDA_TRY(cudaEventRecord(start.get(), stream));
      for (int r = 0; r < repeats; ++r) run_level();
      TANDEM_CUDA_TRY(cudaEventRecord(stop.get(), stream));
      TANDEM_CUDA_TRY(cudaEventSynchronize(stop.get()));
      float ms = 0;
      TANDEM_CUDA_TRY(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      if (ms < best) {
        best = ms;
        groups[static_cast<std::size_t>(level)] = g;
      }
    }
    std::swap(in, out);  // `in` now holds this level's nodes
  }
  return groups;
}

// ---- gpu_router --------------------------------------------------------------------

gpu_router::gpu_router(const router_options& options) {
  if (options.chunk == 0) throw std::invalid_argument("gpu_router: router_options::chunk must be >= 1");
  if (options.streams < 1 || options.streams > 8) {
    throw std::invalid_argument("gpu_router: router_options::streams must be in 1..8 (got " +
                                std::to_string(options.streams) + ")");
  }
  if (options.copy_threads < 1 || options.copy_threads > 64) {
    throw std::invalid_argument("gpu_router: router_options::copy_threads must be in 1..64 (got " +
                                std::to_string(options.copy_threads) + ")");
  }
  if (options.keys_per_leaf == 0) throw std::invalid_argument("gpu_router: router_options::keys_per_leaf must be >= 1");
  if (options.calibration_keys < 1024) {
    throw std::invalid_argument("gpu_router: router_options::calibration_keys must be >= 1024");
  }
  for (const int g : options.group_sizes) {
    if (!valid_group_size(g)) {
      throw std::invalid_argument("gpu_router: router_options::group_sizes has " + std::to_string(g) +
                                  "; each must be a power of two in 1..32");
    }
  }
  const device_report report = query_devices();
  if (report.devices.empty()) throw tandem::error("gpu_router: no usable GPU: " + report.reason);
  const auto it = std::find_if(report.devices.begin(), report.devices.end(),
                               [&](const device_info& d) { return d.ordinal == options.device_ordinal; });
  if (it == report.devices.end()) {
    throw tandem::error("gpu_router: no usable GPU: device ordinal " + std::to_string(options.device_ordinal) +
                        " is not among the " + std::to_string(report.devices.size()) + " usable (" +
                        describe(report) + ")");
  }

  // The state creates events: make the device current first (the caller's
  // comes back when the constructor returns).
  const device_scope current(options.device_ordinal);
  auto s = std::make_unique<state>(options);
  const detail::account_scope scope(s->account);
  s->info = *it;
  s->device = options.device_ordinal;
  s->upload_stream = std::make_unique<detail::stream_handle>();
  for (int l = 0; l < options.streams; ++l) s->route.lanes.push_back(std::make_unique<detail::route_lane>());
  for (auto& lane : s->scatter.lanes) lane = std::make_unique<detail::scatter_lane>();
  s->route.selected.reserve(1);
  s->route.selected_host.reserve(1);
  if (options.constant_prefix) s->constant_pair = constant_slot_registry::instance().claim(s->device);
  state_ = std::move(s);
}

gpu_router::~gpu_router() {
  if (!state_) return;
  // The streams, events and device arrays are freed with the router's
  // device current; the caller's comes back afterwards.
  const int previous = current();
  (void)cudaSetDevice(state_->device);
  state_->drain_route();
  state_->drain_scatter();
  if (state_->upload_stream) (void)cudaStreamSynchronize(state_->upload_stream->get());
  constant_slot_registry::instance().release(state_->device, state_->constant_pair);
  state_.reset();
  if (previous >= 0) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

void gpu_router::upload(const inner_layout& layout) {
  if (layout.height() == 0 || layout.leaf_count() == 0) {
    throw std::invalid_argument("gpu_router::upload: the layout is empty (build it first)");
  }
  state& s = *state_;
  const detail::account_scope scope(s.account);
  std::lock_guard<std::mutex> upload_lock(s.upload_mutex);
  const auto t0 = clock_type::now();
  s.set_device();

  int idle = 0;
  {
    std::unique_lock<std::mutex> lock(s.meta_mutex);
    idle = s.current < 0 ? 0 : 1 - s.current;
    s.users_cv.wait(lock, [&] { return s.buffers[static_cast<std::size_t>(idle)].users == 0; });
    s.buffers[static_cast<std::size_t>(idle)].meta.loaded = false;
  }
  detail::version_buffer& vb = s.buffers[static_cast<std::size_t>(idle)];
  const cudaStream_t stream = s.upload_stream->get();
  detail::fault_gate gate(s.faults);

  double calibration_seconds = 0;
  detail::layout_meta m;
  m.node_count = static_cast<std::uint32_t>(layout.node_count());
  m.leaf_count = static_cast<std::uint32_t>(layout.leaf_count());
  m.fanout = layout.fanout();
  m.height = layout.height();
  m.level_start = layout.level_start();
  m.bytes = layout.key_region().size() * sizeof(key_type) + layout.child_prefix().size() * sizeof(std::uint32_t) +
            layout.leaf_ids().size() * sizeof(leaf_id);
  const std::uint64_t tree_keys = std::uint64_t{m.leaf_count} * s.options.keys_per_leaf;
  m.psa_bits = std::clamp(detail::ceil_log2(std::max<std::uint64_t>(tree_keys / 8, 1)), 1, 64);
  m.group_bits = detail::ceil_log2(m.leaf_count);

  try {
    TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::upload));
    // Grown buffers get 12.5% headroom: a layout grows slowly with splits.
    vb.key_region.reserve(layout.key_region().size(), 12);
    vb.child_prefix.reserve(layout.child_prefix().size(), 12);
    vb.leaf_ids.reserve(layout.leaf_ids().size(), 12);
    TANDEM_CUDA_TRY(cudaMemcpyAsync(vb.key_region.data(), layout.key_region().data(),
                                    layout.key_region().size() * sizeof(key_type), cudaMemcpyHostToDevice, stream));
    TANDEM_CUDA_TRY(cudaMemcpyAsync(vb.child_prefix.data(), layout.child_prefix().data(),
                                    layout.child_prefix().size() * sizeof(std::uint32_t), cudaMemcpyHostToDevice,
                                    stream));
    TANDEM_CUDA_TRY(cudaMemcpyAsync(vb.leaf_ids.data(), layout.leaf_ids().data(),
                                    layout.leaf_ids().size() * sizeof(leaf_id), cudaMemcpyHostToDevice, stream));
    // The top levels whose prefix entries (up to and including the first
    // entry of the next level: node_search reads prefix[x + 1]) fit the slot.
    // Constant memory serialises a warp's distinct addresses: with unsorted
    // queries (aggregation::none) only the root is shared by a whole warp
    // (measured on an H200, 2^24 queries, 175k leaves, F16: descent 1.19 ms
    // with 4 constant levels, 0.83 ms with none; sorted queries: no change).
    const int max_constant_levels = s.options.order == aggregation::none ? 1 : m.height;
    if (s.constant_pair >= 0) {
      while (m.constant_levels < max_constant_levels &&
             std::size_t{m.level_start[static_cast<std::size_t>(m.constant_levels) + 1]} + 1 <= constant_slot_entries) {
        ++m.constant_levels;
      }
      if (m.constant_levels > 0) {
        m.constant_entries = std::size_t{m.level_start[static_cast<std::size_t>(m.constant_levels)]} + 1;
        m.constant_first = static_cast<std::uint32_t>((2 * static_cast<std::size_t>(s.constant_pair) +
                                                       static_cast<std::size_t>(idle)) *
                                                      constant_slot_entries);
        TANDEM_CUDA_TRY(cudaMemcpyToSymbolAsync(detail::constant_prefix, layout.child_prefix().data(),
                                                m.constant_entries * sizeof(std::uint32_t),
                                                m.constant_first * sizeof(std::uint32_t), cudaMemcpyHostToDevice,
                                                stream));
      }
    }
    TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::sync));
    TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));

    // Group sizes: given, kept from the last calibration of a similar shape,
    // or calibrated now.
    auto& cal = s.calibration;
    if (!s.options.group_sizes.empty()) {
      for (int l = 0; l < m.height; ++l) {
        const std::size_t i = std::min(static_cast<std::size_t>(l), s.options.group_sizes.size() - 1);
        m.groups.push_back(s.options.group_sizes[i]);
      }
    } else if (cal.fanout == m.fanout && cal.height == m.height &&
               std::uint64_t{m.leaf_count} * 4 >= std::uint64_t{cal.leaf_count} * 3 &&
               std::uint64_t{m.leaf_count} * 3 <= std::uint64_t{cal.leaf_count} * 4) {
      m.groups = cal.groups;
    } else {
      const auto c0 = clock_type::now();
      m.groups = s.calibrate(vb, m);
      calibration_seconds = seconds_since(c0);
      if (s.key_bound.load() > 0) {  // under a memory bound the scratch is not kept
        TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
        auto& c = s.calibration;
        for (auto* a : {&c.keys, &c.keys_sorted}) a->release();
        for (auto* a : {&c.positions, &c.positions_sorted, &c.nodes_a, &c.nodes_b, &c.ordinals}) a->release();
        c.temp.release();
      }
      cal.fanout = m.fanout;
      cal.height = m.height;
      cal.leaf_count = m.leaf_count;
      cal.groups = m.groups;
    }
  } catch (...) {
    // Let nothing in flight outlive the call; the current version is untouched.
    (void)cudaStreamSynchronize(stream);
    (void)cudaGetLastError();
    throw;
  }

  m.loaded = true;
  {
    std::lock_guard<std::mutex> lock(s.meta_mutex);
    m.version = ++s.versions;
    vb.meta = std::move(m);
    s.current = idle;
    s.calibration_seconds = calibration_seconds;
    s.upload_seconds = seconds_since(t0);
  }
}

std::string gpu_router::name() const {
  device_report r;
  r.devices.push_back(state_->info);
  const std::string d = describe(r);
  const std::string prefix = "1 GPU: ";
  return d.compare(0, prefix.size(), prefix) == 0 ? d.substr(prefix.size()) : d;
}

int gpu_router::device_ordinal() const { return state_->device; }

std::vector<int> gpu_router::group_sizes() const {
  std::lock_guard<std::mutex> lock(state_->meta_mutex);
  if (state_->current < 0) return {};
  return state_->buffers[static_cast<std::size_t>(state_->current)].meta.groups;
}

std::size_t gpu_router::device_bytes() const noexcept { return state_->account.device_bytes.load(); }

void gpu_router::set_key_bound(std::size_t route_keys, std::size_t scatter_keys) {
  state& s = *state_;
  std::lock_guard<std::mutex> upload_lock(s.upload_mutex);
  std::lock_guard<std::mutex> route_lock(s.route_mutex);
  std::lock_guard<std::mutex> scatter_lock(s.scatter_mutex);
  s.scatter_bound.store(scatter_keys);
  s.key_bound.store(route_keys);
  if (route_keys == 0) return;
  // Arrays sized past the new bounds go; the rest grow again within them.
  s.set_device();
  s.drain_route();
  s.drain_scatter();
  (void)cudaStreamSynchronize(s.upload_stream->get());
  auto trim = [](std::size_t most) {
    return [most](auto&... a) { ((a.capacity() > most ? a.release() : void()), ...); };
  };
  detail::route_resources& r = s.route;
  trim(s.grown(route_keys))(r.keys, r.keys_alt, r.args, r.args_out, r.types, r.types_out, r.positions,
                            r.positions_alt, r.ordinals, r.ordinals_alt, r.nodes, r.flags, r.group_begin,
                            r.group_ordinal, r.hints, r.iota, r.batch_positions);
  r.temp.release();
  trim(s.grown(scatter_keys, scatter_keys))(s.scatter.values_out, s.scatter.flags_out);
  auto& c = s.calibration;
  c.keys.release(), c.keys_sorted.release(), c.temp.release();
  c.positions.release(), c.positions_sorted.release(), c.nodes_a.release(), c.nodes_b.release(), c.ordinals.release();
}

std::size_t gpu_router::batch_bytes(std::size_t route_keys, std::size_t scatter_keys, bool with_args) const {
  const state& s = *state_;
  s.set_device();  // CUB sizes its scratch for the current device
  // Per route key: keys x2, positions x2, ordinals (x2 without a full
  // sort), nodes, flags, group_begin, group_ordinal, hints, iota, batch
  // positions; with args: args x2, types x2. Per scatter answer: its value
  // and flag.
  const std::size_t per_key = 2 * sizeof(key_type) + (s.options.order == aggregation::full ? 8 : 9) *
                              sizeof(std::uint32_t) + 1 + sizeof(leaf_hint) + (with_args ? 2 * sizeof(value_type) + 2 : 0);
  const std::size_t per_answer = sizeof(value_type) + 1;
  // Per chunk key: route_range's chunk (key, arg, type, offset), the
  // scatter lanes' chunks (position, value, flag, two lanes) and, without a
  // full sort, each route lane's (nodes; partial: sorted keys, positions and
  // as much again of CUB scratch).
  const std::size_t chunk = s.options.chunk;
  const std::size_t lane_bytes = s.options.order == aggregation::full ? 0
                                 : s.options.order == aggregation::none
                                     ? sizeof(std::uint32_t)
                                     : sizeof(std::uint32_t) + 2 * (sizeof(key_type) + sizeof(std::uint32_t));
  const std::size_t per_chunk_key = sizeof(key_type) + sizeof(value_type) + 1 + sizeof(std::uint32_t) +
                                    2 * (sizeof(std::uint32_t) + sizeof(value_type) + 1) +
                                    static_cast<std::size_t>(s.options.streams) * lane_bytes;
  // CUB scratch of a route's sort and selects, and the calibration's.
  std::size_t sort = 0;
  {
    cub::DoubleBuffer<key_type> k(nullptr, nullptr);
    cub::DoubleBuffer<std::uint32_t> v(nullptr, nullptr);
    const auto items = static_cast<std::uint32_t>(std::min<std::size_t>(route_keys, 0xffffffffu));
    TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, sort, k, v, items, 0, 64));
  }
  // The calibration: keys x2, positions x2, nodes x2, ordinals, and its
  // sort's CUB scratch (about a key and a position again).
  const std::size_t calibration = std::min(s.options.calibration_keys, bounded_calibration_keys) *
                                  (3 * sizeof(key_type) + 6 * sizeof(std::uint32_t));
  return route_keys * per_key + scatter_keys * per_answer + chunk * per_chunk_key + 2 * sort + calibration +
         (std::size_t{1} << 20);
}

std::size_t gpu_router::layout_bytes() const {
  std::lock_guard<std::mutex> lock(state_->meta_mutex);
  if (state_->current < 0) return 0;
  return state_->buffers[static_cast<std::size_t>(state_->current)].meta.bytes;
}

std::size_t gpu_router::constant_prefix_entries() const {
  std::lock_guard<std::mutex> lock(state_->meta_mutex);
  if (state_->current < 0) return 0;
  return state_->buffers[static_cast<std::size_t>(state_->current)].meta.constant_entries;
}

int gpu_router::constant_levels() const {
  std::lock_guard<std::mutex> lock(state_->meta_mutex);
  if (state_->current < 0) return 0;
  return state_->buffers[static_cast<std::size_t>(state_->current)].meta.constant_levels;
}

std::uint64_t gpu_router::version() const {
  std::lock_guard<std::mutex> lock(state_->meta_mutex);
  return state_->versions;
}

int gpu_router::partial_sort_bits() const {
  std::lock_guard<std::mutex> lock(state_->meta_mutex);
  if (state_->current < 0) return 0;
  return state_->buffers[static_cast<std::size_t>(state_->current)].meta.psa_bits;
}

double gpu_router::last_upload_seconds() const {
  std::lock_guard<std::mutex> lock(state_->meta_mutex);
  return state_->upload_seconds;
}

double gpu_router::last_calibration_seconds() const {
  std::lock_guard<std::mutex> lock(state_->meta_mutex);
  return state_->calibration_seconds;
}

void gpu_router::inject_fault(stage s, int count) {
  state_->faults[static_cast<std::size_t>(s)].store(count > 0 ? count : 0);
}

template <class Guide>
void gpu_router::state::replace_guides(detail::device_array<Guide>& into, const Guide* host, std::size_t count,
                                       bool compact) {
  const detail::account_scope scope(account);
  std::lock_guard<std::mutex> route_lock(route_mutex);
  set_device();
  guide_count = 0;  // none until the copy is complete
  if (count == 0) {
    guides.release();
    compact_guides.release();
    return;
  }
  if (host == nullptr) throw std::invalid_argument("gpu_router: null leaf guides for " + std::to_string(count) +
                                                   " leaves");
  if (compact) {
    guides.release();
  } else {
    compact_guides.release();
  }
  into.reserve(count, compact ? 6 : 25);  // compact guides: under a tight budget (gpu_setup.cpp counts the same)
  const cudaStream_t stream = route.lanes[0]->stream.get();
  TANDEM_CUDA_TRY(cudaMemcpyAsync(into.data(), host, count * sizeof(Guide), cudaMemcpyHostToDevice, stream));
  TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
  guides_compact = compact;
  guide_count = count;
}

void gpu_router::upload_guides(const leaf_guide* guides, std::size_t count) {
  state_->replace_guides(state_->guides, guides, count, false);
}

void gpu_router::upload_compact_guides(const compact_guide* guides, std::size_t count) {
  state_->replace_guides(state_->compact_guides, guides, count, true);
}

std::size_t gpu_router::guide_count() const {
  state& s = *state_;
  std::lock_guard<std::mutex> route_lock(s.route_mutex);
  return s.guide_count;
}

}  // namespace tandem::device
