// gpu_router: the device mirror of the inner layout and GPU routing
// (interface and design: gpu_router.hpp; kernels: detail/descend_kernels.cuh).
#include <tandem/device/gpu_router.hpp>

#include <tandem/device/detail/copy_pool.hpp>
#include <tandem/device/detail/cuda_check.cuh>
#include <tandem/device/detail/descend_kernels.cuh>
#include <tandem/device/device_query.hpp>
#include <tandem/error.hpp>

#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tandem::device {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// ---- owning wrappers ---------------------------------------------------------

/// Device array that only grows; contents are lost when it grows.
template <class T>
class device_array {
 public:
  device_array() = default;
  ~device_array() { release(); }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;

  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

  /// Room for n elements; when it must grow, takes n + n * headroom_percent / 100.
  /// @return true when it (re)allocated.
  bool reserve(std::size_t n, std::size_t headroom_percent = 0) {
    if (n <= capacity_) return false;
    release();
    const std::size_t want = n + n / 100 * headroom_percent;
    TANDEM_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&data_), want * sizeof(T)));
    capacity_ = want;
    return true;
  }
  void release() noexcept {
    if (data_ != nullptr) (void)cudaFree(data_);
    data_ = nullptr;
    capacity_ = 0;
  }

 private:
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
};

/// Page-locked host array that only grows.
template <class T>
class pinned_array {
 public:
  pinned_array() = default;
  ~pinned_array() { release(); }
  pinned_array(const pinned_array&) = delete;
  pinned_array& operator=(const pinned_array&) = delete;

  [[nodiscard]] T* data() const noexcept { return data_; }
  void reserve(std::size_t n) {
    if (n <= capacity_) return;
    release();
    TANDEM_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&data_), n * sizeof(T)));
    capacity_ = n;
  }
  void release() noexcept {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
    data_ = nullptr;
    capacity_ = 0;
  }

 private:
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
};

class stream_handle {
 public:
  stream_handle() { TANDEM_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~stream_handle() { (void)cudaStreamDestroy(stream_); }
  stream_handle(const stream_handle&) = delete;
  stream_handle& operator=(const stream_handle&) = delete;
  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class event_handle {
 public:
  explicit event_handle(bool timing = false) {
    TANDEM_CUDA_TRY(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~event_handle() { (void)cudaEventDestroy(event_); }
  event_handle(const event_handle&) = delete;
  event_handle& operator=(const event_handle&) = delete;
  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// ---- constant-memory slots -------------------------------------------------------

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

// ---- helpers -------------------------------------------------------------------

/// ceil(log2(x)) for x >= 1 (0 for x == 1).
int ceil_log2(std::uint64_t x) {
  int bits = 0;
  while (bits < 64 && (std::uint64_t{1} << bits) < x) ++bits;
  return bits;
}

bool is_pinned(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

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

/// What one device buffer holds (copied out by a route under the mutex).
struct layout_meta {
  bool loaded = false;
  std::uint32_t node_count = 0;
  std::uint32_t leaf_count = 0;
  int fanout = 0;
  int height = 0;
  int constant_levels = 0;
  std::uint32_t constant_first = 0;
  std::size_t constant_entries = 0;
  int psa_bits = 1;    // aggregation::partial sorts key bits [64 - psa_bits, 64)
  int group_bits = 0;  // grouping sorts ordinal bits [0, group_bits)
  std::size_t bytes = 0;
  std::uint64_t version = 0;
  std::vector<std::uint32_t> level_start;
  std::vector<int> groups;  // threads per query per level
};

struct version_buffer {
  device_array<key_type> key_region;
  device_array<std::uint32_t> child_prefix;
  device_array<leaf_id> leaf_ids;
  layout_meta meta;
  int users = 0;  // routes running on this buffer
};

/// Per-stream resources of the chunk pipeline.
struct chunk_lane {
  stream_handle stream;
  event_handle staged;  // the H2D out of `staging` is done
  event_handle done;    // the lane's last enqueued work
  pinned_array<key_type> staging;
  device_array<key_type> keys;
  device_array<key_type> keys_sorted;
  device_array<std::uint32_t> positions;
  device_array<std::uint32_t> nodes;
  device_array<unsigned char> temp;
};

/// Pinned landing buffer of the result download.
struct download_slot {
  event_handle landed;
  pinned_array<std::uint32_t> positions;
  pinned_array<std::uint32_t> ordinals;
};

/// Pieces the result comes down in (D2H of piece j+1 overlaps the host copy of piece j).
constexpr std::size_t download_piece = std::size_t{1} << 20;

/// Checks each stage's injected faults at most once per call.
class fault_gate {
 public:
  explicit fault_gate(std::array<std::atomic<int>, stage_count>& faults) : faults_(faults) {}
  cudaError_t reach(stage s) {
    const auto i = static_cast<std::size_t>(s);
    if (reached_[i]) return cudaSuccess;
    reached_[i] = true;
    int armed = faults_[i].load();
    while (armed > 0) {
      if (faults_[i].compare_exchange_weak(armed, armed - 1)) return cudaErrorLaunchFailure;
    }
    return cudaSuccess;
  }

 private:
  std::array<std::atomic<int>, stage_count>& faults_;
  std::array<bool, stage_count> reached_{};
};

/// The injected error goes through TANDEM_CUDA_TRY like a real one, whose
/// message then names this call.
cudaError_t injected_fault_at(fault_gate& gate, stage s) { return gate.reach(s); }

}  // namespace

// ---- state -----------------------------------------------------------------------

struct gpu_router::state {
  explicit state(const router_options& o) : options(o), pool(o.copy_threads) {}

  router_options options;
  device_info info;
  int device = 0;

  // Layout versions.
  mutable std::mutex meta_mutex;  // guards current, versions, buffers[*].meta/users
  std::condition_variable users_cv;
  std::mutex upload_mutex;
  std::mutex route_mutex;
  std::array<version_buffer, 2> buffers;
  int current = -1;
  std::uint64_t versions = 0;
  int constant_pair = -1;
  std::unique_ptr<stream_handle> upload_stream;
  double upload_seconds = 0;
  double calibration_seconds = 0;

  // Calibration: its own scratch (an upload may run beside a route).
  struct {
    int fanout = 0;
    int height = 0;
    std::uint32_t leaf_count = 0;
    std::vector<int> groups;
    device_array<key_type> keys;
    device_array<key_type> keys_sorted;
    device_array<std::uint32_t> positions;
    device_array<std::uint32_t> positions_sorted;
    device_array<std::uint32_t> nodes_a;
    device_array<std::uint32_t> nodes_b;
    device_array<std::uint32_t> ordinals;
    device_array<unsigned char> temp;
  } calibration;

  // Route resources.
  std::vector<std::unique_ptr<chunk_lane>> lanes;
  std::array<std::unique_ptr<download_slot>, 2> downloads;
  device_array<std::uint32_t> ordinals_by_position;
  device_array<std::uint32_t> ordinals_sorted;
  device_array<std::uint32_t> positions_sorted;
  device_array<std::uint32_t> iota;  // iota[i] == i over its capacity
  device_array<unsigned char> group_temp;
  std::vector<std::unique_ptr<event_handle>> timing_events;
  detail::copy_pool pool;

  std::array<std::atomic<int>, stage_count> faults{};

  void set_device() const { TANDEM_CUDA_TRY(cudaSetDevice(device)); }

  cudaEvent_t timing_event(std::size_t k) {
    while (timing_events.size() <= k) timing_events.push_back(std::make_unique<event_handle>(true));
    return timing_events[k]->get();
  }

  /// Waits for everything this router enqueued, ignoring errors (after a
  /// failure, so nothing in flight touches buffers the next call reuses).
  void drain() noexcept {
    for (const auto& lane : lanes) (void)cudaStreamSynchronize(lane->stream.get());
    if (upload_stream) (void)cudaStreamSynchronize(upload_stream->get());
    (void)cudaGetLastError();
  }

  /// Descends levels [level_begin, level_end), fusing runs of levels with
  /// the same group size into one launch. Nodes come from nodes_in (first
  /// launch) and live in nodes_out between launches.
  void launch_descent(const version_buffer& vb, const layout_meta& m, const key_type* keys,
                      const std::uint32_t* positions, std::uint32_t n, const std::uint32_t* nodes_in,
                      std::uint32_t* nodes_out, std::uint32_t* ordinals_by_pos, cudaStream_t stream, int level_begin,
                      int level_end, const std::vector<int>& groups) const {
    int level = level_begin;
    while (level < level_end) {
      const int g = groups[static_cast<std::size_t>(level)];
      int end = level + 1;
      while (end < level_end && groups[static_cast<std::size_t>(end)] == g) ++end;
      detail::descend_params p;
      p.n = n;
      p.level_begin = level;
      p.level_end = end;
      p.height = m.height;
      p.constant_levels = m.constant_levels;
      p.constant_first = m.constant_first;
      p.node_count = m.node_count;
      p.leaf_count = m.leaf_count;
      const std::uint64_t threads = static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(g);
      const auto blocks = static_cast<unsigned>((threads + detail::descend_block_threads - 1) /
                                                detail::descend_block_threads);
      const descend_fn kernel = descend_kernel_for(m.fanout, g);
      kernel<<<blocks, detail::descend_block_threads, 0, stream>>>(vb.key_region.data(), vb.child_prefix.data(),
                                                                   keys, positions, nodes_in, nodes_out,
                                                                   ordinals_by_pos, p);
      TANDEM_CUDA_TRY(cudaGetLastError());
      nodes_in = nodes_out;
      level = end;
    }
  }

  void fill_iota(std::uint32_t* out, std::uint32_t n, cudaStream_t stream) const {
    if (n == 0) return;
    const unsigned blocks = std::min<unsigned>((n + 255) / 256, 4096);
    detail::iota_kernel<<<blocks, 256, 0, stream>>>(out, n);
    TANDEM_CUDA_TRY(cudaGetLastError());
  }

  std::vector<int> calibrate(const version_buffer& vb, const layout_meta& m);
  void run_route(const version_buffer& vb, const layout_meta& m, const key_type* keys, std::size_t n,
                 std::uint32_t* positions, std::uint32_t* ordinals, route_timing* timing);
};

// ---- calibration -------------------------------------------------------------

std::vector<int> gpu_router::state::calibrate(const version_buffer& vb, const layout_meta& m) {
  auto& c = calibration;
  const cudaStream_t stream = upload_stream->get();
  const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(options.calibration_keys, std::size_t{1} << 26));
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
  fill_iota(c.positions.data(), n, stream);

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
    positions = c.positions_sorted.data();
  }

  const event_handle start(true);
  const event_handle stop(true);
  constexpr int repeats = 3;
  std::vector<int> groups(static_cast<std::size_t>(m.height), 1);
  std::uint32_t* in = c.nodes_a.data();
  std::uint32_t* out = c.nodes_b.data();
  for (int level = 0; level < m.height; ++level) {
    float best = std::numeric_limits<float>::max();
    for (int g = 1; g <= 32 && g <= m.fanout; g *= 2) {
      const std::vector<int> trial(static_cast<std::size_t>(m.height), g);
      // in -> out, so every launch of a level does the same work.
      auto run_level = [&] {
        launch_descent(vb, m, keys, positions, n, in, out, c.ordinals.data(), stream, level, level + 1, trial);
      };
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

// ---- route -----------------------------------------------------------------------

void gpu_router::state::run_route(const version_buffer& vb, const layout_meta& m, const key_type* keys,
                                  std::size_t n, std::uint32_t* positions, std::uint32_t* ordinals,
                                  route_timing* timing) {
  fault_gate gate(faults);
  const auto n32 = static_cast<std::uint32_t>(n);
  const std::size_t chunk = std::min(options.chunk, n);
  const std::size_t chunks = (n + chunk - 1) / chunk;
  const std::size_t lanes_used = std::min(lanes.size(), chunks);
  const bool keys_pinned = is_pinned(keys);
  const bool out_pinned = is_pinned(positions) && is_pinned(ordinals);

  // Batch-wide device arrays (grow with 25% headroom; iota refilled on growth).
  ordinals_by_position.reserve(n, 25);
  ordinals_sorted.reserve(n, 25);
  positions_sorted.reserve(n, 25);
  if (iota.reserve(std::max(n, chunk), 25)) {
    fill_iota(iota.data(), static_cast<std::uint32_t>(std::min<std::size_t>(iota.capacity(), UINT32_MAX)),
              lanes[0]->stream.get());
    // Every lane uses iota: make it visible to all before the first chunk.
    TANDEM_CUDA_TRY(cudaStreamSynchronize(lanes[0]->stream.get()));
  }
  for (std::size_t l = 0; l < lanes_used; ++l) {
    chunk_lane& lane = *lanes[l];
    if (!keys_pinned) lane.staging.reserve(chunk);
    lane.keys.reserve(chunk);
    lane.nodes.reserve(chunk);
    if (options.order != aggregation::none) {
      lane.keys_sorted.reserve(chunk);
      lane.positions.reserve(chunk);
    }
  }
  const int begin_bit = options.order == aggregation::full ? 0 : 64 - m.psa_bits;
  if (options.order != aggregation::none) {
    // Scratch for the largest chunk (a smaller one needs no more).
    std::size_t temp_bytes = 0;
    TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, lanes[0]->keys.data(),
                                                    lanes[0]->keys_sorted.data(), iota.data(),
                                                    lanes[0]->positions.data(), static_cast<std::uint32_t>(chunk),
                                                    begin_bit, 64, lanes[0]->stream.get()));
    for (std::size_t l = 0; l < lanes_used; ++l) lanes[l]->temp.reserve(temp_bytes);
  }

  // Timing events: 4 per chunk (begin, H2D done, sort done, descent done),
  // 2 for the grouping sort, 2 per download piece.
  std::size_t next_event = 0;
  auto mark = [&](cudaStream_t stream) -> std::size_t {
    if (timing == nullptr) return 0;
    const std::size_t k = next_event++;
    TANDEM_CUDA_TRY(cudaEventRecord(timing_event(k), stream));
    return k;
  };
  struct chunk_marks {
    std::size_t begin, staged, sorted, descended;
  };
  std::vector<chunk_marks> marks;
  if (timing != nullptr) marks.reserve(chunks);

  // Chunks: stage, H2D, aggregation sort, descent; lanes round-robin.
  for (std::size_t i = 0; i < chunks; ++i) {
    chunk_lane& lane = *lanes[i % lanes.size()];
    const cudaStream_t stream = lane.stream.get();
    const std::size_t offset = i * chunk;
    const std::size_t count = std::min(chunk, n - offset);
    const key_type* source = keys + offset;
    if (!keys_pinned) {
      TANDEM_CUDA_TRY(cudaEventSynchronize(lane.staged.get()));  // the lane's staging is free again
      const auto t0 = clock_type::now();
      pool.copy(lane.staging.data(), keys + offset, count * sizeof(key_type));
      if (timing != nullptr) timing->host_in += seconds_since(t0);
      source = lane.staging.data();
    }
    TANDEM_CUDA_TRY(injected_fault_at(gate, stage::upload));
    chunk_marks cm{};
    cm.begin = mark(stream);
    TANDEM_CUDA_TRY(cudaMemcpyAsync(lane.keys.data(), source, count * sizeof(key_type), cudaMemcpyHostToDevice,
                                    stream));
    TANDEM_CUDA_TRY(cudaEventRecord(lane.staged.get(), stream));
    cm.staged = mark(stream);

    const key_type* query_keys = lane.keys.data();
    const std::uint32_t* query_positions = nullptr;
    if (options.order != aggregation::none) {
      TANDEM_CUDA_TRY(injected_fault_at(gate, stage::sort));
      std::size_t temp_bytes = 0;
      TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, lane.keys.data(), lane.keys_sorted.data(),
                                                      iota.data(), lane.positions.data(),
                                                      static_cast<std::uint32_t>(count), begin_bit, 64, stream));
      lane.temp.reserve(temp_bytes);  // never grows in practice (sized for the largest chunk)
      temp_bytes = lane.temp.capacity();
      TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(lane.temp.data(), temp_bytes, lane.keys.data(),
                                                      lane.keys_sorted.data(), iota.data(), lane.positions.data(),
                                                      static_cast<std::uint32_t>(count), begin_bit, 64, stream));
      query_keys = lane.keys_sorted.data();
      query_positions = lane.positions.data();
    }
    cm.sorted = mark(stream);

    TANDEM_CUDA_TRY(injected_fault_at(gate, stage::kernel));
    launch_descent(vb, m, query_keys, query_positions, static_cast<std::uint32_t>(count), nullptr,
                   lane.nodes.data(), ordinals_by_position.data() + offset, stream, 0, m.height, m.groups);
    cm.descended = mark(stream);
    if (timing != nullptr) marks.push_back(cm);
  }

  // Join the lanes into lane 0, then group the whole batch by ordinal: a
  // stable sort of (ordinal, position) with positions in batch order, so
  // positions increase inside a group.
  const cudaStream_t main_stream = lanes[0]->stream.get();
  for (std::size_t l = 1; l < lanes_used; ++l) {
    TANDEM_CUDA_TRY(cudaEventRecord(lanes[l]->done.get(), lanes[l]->stream.get()));
    TANDEM_CUDA_TRY(cudaStreamWaitEvent(main_stream, lanes[l]->done.get(), 0));
  }
  TANDEM_CUDA_TRY(injected_fault_at(gate, stage::sort));
  const std::size_t group_begin = mark(main_stream);
  const std::uint32_t* out_ordinals = ordinals_by_position.data();  // group_bits == 0: one leaf, all 0
  const std::uint32_t* out_positions = iota.data();
  if (m.group_bits > 0) {
    std::size_t temp_bytes = 0;
    TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ordinals_by_position.data(),
                                                    ordinals_sorted.data(), iota.data(), positions_sorted.data(), n32,
                                                    0, m.group_bits, main_stream));
    if (group_temp.capacity() < temp_bytes) {
      TANDEM_CUDA_TRY(cudaStreamSynchronize(main_stream));  // a regrowth frees the old scratch
      group_temp.reserve(temp_bytes, 25);
    }
    temp_bytes = group_temp.capacity();
    TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(group_temp.data(), temp_bytes, ordinals_by_position.data(),
                                                    ordinals_sorted.data(), iota.data(), positions_sorted.data(), n32,
                                                    0, m.group_bits, main_stream));
    out_ordinals = ordinals_sorted.data();
    out_positions = positions_sorted.data();
  }
  const std::size_t group_end = mark(main_stream);

  // Download: straight into pinned caller arrays, else in pieces through two
  // pinned slots (D2H of piece j+1 overlaps the host copy of piece j).
  TANDEM_CUDA_TRY(injected_fault_at(gate, stage::download));
  std::vector<std::pair<std::size_t, std::size_t>> download_marks;
  double host_out = 0;
  if (out_pinned) {
    const std::size_t b = mark(main_stream);
    TANDEM_CUDA_TRY(cudaMemcpyAsync(positions, out_positions, n * sizeof(std::uint32_t), cudaMemcpyDeviceToHost,
                                    main_stream));
    TANDEM_CUDA_TRY(cudaMemcpyAsync(ordinals, out_ordinals, n * sizeof(std::uint32_t), cudaMemcpyDeviceToHost,
                                    main_stream));
    download_marks.emplace_back(b, mark(main_stream));
  } else {
    const std::size_t piece = std::min(download_piece, n);
    const std::size_t pieces = (n + piece - 1) / piece;
    for (auto& slot : downloads) {
      slot->positions.reserve(piece);
      slot->ordinals.reserve(piece);
    }
    auto enqueue = [&](std::size_t j) {
      download_slot& slot = *downloads[j % 2];
      const std::size_t offset = j * piece;
      const std::size_t count = std::min(piece, n - offset);
      const std::size_t b = mark(main_stream);
      TANDEM_CUDA_TRY(cudaMemcpyAsync(slot.positions.data(), out_positions + offset, count * sizeof(std::uint32_t),
                                      cudaMemcpyDeviceToHost, main_stream));
      TANDEM_CUDA_TRY(cudaMemcpyAsync(slot.ordinals.data(), out_ordinals + offset, count * sizeof(std::uint32_t),
                                      cudaMemcpyDeviceToHost, main_stream));
      TANDEM_CUDA_TRY(cudaEventRecord(slot.landed.get(), main_stream));
      download_marks.emplace_back(b, mark(main_stream));
    };
    for (std::size_t j = 0; j < std::min<std::size_t>(2, pieces); ++j) enqueue(j);
    for (std::size_t j = 0; j < pieces; ++j) {
      download_slot& slot = *downloads[j % 2];
      TANDEM_CUDA_TRY(cudaEventSynchronize(slot.landed.get()));
      const std::size_t offset = j * piece;
      const std::size_t count = std::min(piece, n - offset);
      const auto t0 = clock_type::now();
      pool.copy(positions + offset, slot.positions.data(), count * sizeof(std::uint32_t));
      pool.copy(ordinals + offset, slot.ordinals.data(), count * sizeof(std::uint32_t));
      host_out += seconds_since(t0);
      if (j + 2 < pieces) enqueue(j + 2);
    }
  }

  TANDEM_CUDA_TRY(injected_fault_at(gate, stage::sync));
  TANDEM_CUDA_TRY(cudaStreamSynchronize(main_stream));

  if (timing != nullptr) {
    auto elapsed = [&](std::size_t a, std::size_t b) {
      float ms = 0;
      TANDEM_CUDA_TRY(cudaEventElapsedTime(&ms, timing_event(a), timing_event(b)));
      return static_cast<double>(ms) * 1e-3;
    };
    for (const chunk_marks& cm : marks) {
      timing->upload += elapsed(cm.begin, cm.staged);
      timing->sort += elapsed(cm.staged, cm.sorted);
      timing->kernel += elapsed(cm.sorted, cm.descended);
    }
    timing->group_sort = elapsed(group_begin, group_end);
    timing->sort += timing->group_sort;
    for (const auto& d : download_marks) timing->download += elapsed(d.first, d.second);
    timing->upload += timing->host_in;
    timing->host_out = host_out;
    timing->download += host_out;
    timing->chunks = chunks;
  }
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

  auto s = std::make_unique<state>(options);
  s->info = *it;
  s->device = options.device_ordinal;
  s->set_device();
  s->upload_stream = std::make_unique<stream_handle>();
  for (int l = 0; l < options.streams; ++l) s->lanes.push_back(std::make_unique<chunk_lane>());
  for (auto& slot : s->downloads) slot = std::make_unique<download_slot>();
  if (options.constant_prefix) s->constant_pair = constant_slot_registry::instance().claim(s->device);
  state_ = std::move(s);
}

gpu_router::~gpu_router() {
  if (!state_) return;
  (void)cudaSetDevice(state_->device);
  state_->drain();
  constant_slot_registry::instance().release(state_->device, state_->constant_pair);
}

void gpu_router::upload(const inner_layout& layout) {
  if (layout.height() == 0 || layout.leaf_count() == 0) {
    throw std::invalid_argument("gpu_router::upload: the layout is empty (build it first)");
  }
  state& s = *state_;
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
  version_buffer& vb = s.buffers[static_cast<std::size_t>(idle)];
  const cudaStream_t stream = s.upload_stream->get();
  fault_gate gate(s.faults);

  double calibration_seconds = 0;
  layout_meta m;
  m.node_count = static_cast<std::uint32_t>(layout.node_count());
  m.leaf_count = static_cast<std::uint32_t>(layout.leaf_count());
  m.fanout = layout.fanout();
  m.height = layout.height();
  m.level_start = layout.level_start();
  m.bytes = layout.key_region().size() * sizeof(key_type) + layout.child_prefix().size() * sizeof(std::uint32_t) +
            layout.leaf_ids().size() * sizeof(leaf_id);
  const std::uint64_t tree_keys = std::uint64_t{m.leaf_count} * s.options.keys_per_leaf;
  m.psa_bits = std::clamp(ceil_log2(std::max<std::uint64_t>(tree_keys / 8, 1)), 1, 64);
  m.group_bits = ceil_log2(m.leaf_count);

  try {
    TANDEM_CUDA_TRY(injected_fault_at(gate, stage::upload));
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
    TANDEM_CUDA_TRY(injected_fault_at(gate, stage::sync));
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

void gpu_router::route(const key_type* keys, std::size_t n, std::uint32_t* positions, std::uint32_t* ordinals,
                       route_timing* timing) {
  const auto t0 = clock_type::now();
  state& s = *state_;
  std::lock_guard<std::mutex> route_lock(s.route_mutex);
  int b = 0;
  layout_meta m;
  {
    std::lock_guard<std::mutex> lock(s.meta_mutex);
    if (s.current < 0) throw std::logic_error("gpu_router::route: no layout was uploaded");
    b = s.current;
    ++s.buffers[static_cast<std::size_t>(b)].users;
    m = s.buffers[static_cast<std::size_t>(b)].meta;
  }
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

  if (n > std::size_t{std::numeric_limits<std::uint32_t>::max()}) {
    throw std::length_error("gpu_router::route: " + std::to_string(n) +
                            " keys; a batch holds at most 2^32 - 1 (positions are u32)");
  }
  route_timing t;
  if (n > 0) {
    if (keys == nullptr || positions == nullptr || ordinals == nullptr) {
      throw std::invalid_argument("gpu_router::route: null keys, positions or ordinals for " + std::to_string(n) +
                                  " keys");
    }
    s.set_device();
    try {
      s.run_route(s.buffers[static_cast<std::size_t>(b)], m, keys, n, positions, ordinals,
                  timing != nullptr ? &t : nullptr);
    } catch (...) {
      s.drain();
      throw;
    }
  }
  t.total = seconds_since(t0);
  if (timing != nullptr) *timing = t;
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

}  // namespace tandem::device
