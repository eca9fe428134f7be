#pragma once
/// @file
/// `gpu_router::state` (private): what the router's three implementation
/// files share. gpu_router.cu owns the mirror (version buffers, upload,
/// calibration, descent launches); gpu_route.cu the route resources;
/// gpu_scatter.cu the scatter resources; gpu_sort.cu the load sort (whose
/// arrays live only during the call). Each resource set has its own mutex
/// and streams, so an upload, a route and a scatter may run at once on three
/// threads; only the copy pool is shared (its calls take turns).
///
/// Which lock guards what:
///
///     meta_mutex    current, versions, buffers[*].meta / users, the two
///                   timing doubles (a route reads a buffer's meta without
///                   it while it counts as a user: an upload never writes a
///                   buffer that has users)
///     upload_mutex  upload_stream, calibration, buffers[idle] contents
///     route_mutex   route
///     scatter_mutex scatter
///     sort_mutex    sort_pairs

#include <tandem/core/routed_batch.hpp>
#include <tandem/core/types.hpp>
#include <tandem/device/detail/copy_kernels.cuh>
#include <tandem/device/detail/copy_pool.hpp>
#include <tandem/device/detail/cuda_resources.cuh>
#include <tandem/device/detail/transfers.cuh>
#include <tandem/device/device_query.hpp>
#include <tandem/device/gpu_router.hpp>

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace tandem::device {

namespace detail {

/// What one device buffer holds.
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
  int group_bits = 0;  // the grouping sort sorts ordinal bits [0, group_bits)
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

/// One stream of a route and what its chunks need of their own.
struct route_lane {
  stream_handle stream;
  event_handle staged;  // the lane's last H2D is done: its staging is free
  event_handle done;    // the lane's last work, to join it into the main stream
  pinned_buffer<unsigned char> staging;  // keys | args | types of one chunk, when pageable
  // partial/none: per-chunk sort output and descent scratch
  device_array<key_type> keys_sorted;
  device_array<std::uint32_t> positions;
  device_array<std::uint32_t> nodes;
  device_array<unsigned char> temp;
};

/// Device arrays of a route (n = the largest batch so far, or under
/// set_key_bound at most the bound; grow-only but for set_key_bound).
/// route_range fills keys, args, types with the range's ops as they are
/// kept (batch_positions: each one's batch position) and routes those.
///
///     keys, args, types          the batch in batch order (uploaded)
///     keys_alt                   full: the sort's other key buffer;
///                                else: keys gathered by grouped position
///     args_out, types_out        gathered by grouped position
///     positions, positions_alt   the sort's position buffers
///     ordinals, ordinals_alt     ordinals (full: in sorted order; else by
///                                position, then the grouping sort's buffers)
///     nodes                      full: descent scratch between launches
///     flags                      1 where a run of equal ordinal starts
///     group_begin, group_ordinal the selects' outputs (room for n)
///     hints                      full, with guides: the keys' leaf hints
///     selected                   G, written by the selects
///     iota                       iota[i] == i over its capacity
///     temp                       batch-wide CUB scratch (sort, selects)
struct route_resources {
  std::vector<std::unique_ptr<route_lane>> lanes;
  device_array<key_type> keys, keys_alt;
  device_array<value_type> args, args_out;
  device_array<std::uint8_t> types, types_out;
  device_array<std::uint32_t> positions, positions_alt;
  device_array<std::uint32_t> ordinals, ordinals_alt;
  device_array<std::uint32_t> nodes;
  device_array<std::uint8_t> flags;
  device_array<std::uint32_t> group_begin, group_ordinal;
  device_array<leaf_hint> hints;  // full, with guides: each key's leaf hint
  device_array<std::uint32_t> selected;
  device_array<std::uint32_t> iota;
  device_array<unsigned char> temp;
  // route_range: one chunk as it came up, the exclusive sum of its ops in
  // the range, the count of ops kept so far (1 entry), each kept op's batch
  // position, and the sum's CUB scratch.
  device_array<key_type> chunk_keys;
  device_array<value_type> chunk_args;
  device_array<std::uint8_t> chunk_types;
  device_array<std::uint32_t> chunk_offsets;
  device_array<std::uint32_t> kept;
  device_array<std::uint32_t> batch_positions;
  device_array<unsigned char> chunk_temp;
  // route_cached: the batch's answers from the copies, and which ops missed
  // (with writes: each sorted row's copy_row); the hints of the rows left
  device_array<value_type> answers;
  device_array<key_type> answer_keys;
  device_array<std::uint8_t> answer_found, missed;
  device_array<leaf_hint> hints_alt;
  pinned_buffer<std::uint32_t> selected_host;  // G (route_range: ops kept), read by the host
  event_handle sorted;   // full: positions and sorted keys are complete
  event_handle grouped;  // everything but the download is complete
  staged_download download;
  event_pool marks;
  struct chunk_marks {
    std::size_t begin, uploaded, sorted, descended;
  };
  std::vector<chunk_marks> chunk_spans;  // reserved to the most chunks seen
};

/// One stream of a scatter with its chunk buffers.
struct scatter_lane {
  stream_handle stream;
  event_handle staged;  // the lane's last H2D is done: its staging is free
  event_handle done;
  pinned_buffer<unsigned char> staging;  // positions | values | flags of one chunk, when pageable
  device_array<std::uint32_t> positions;
  device_array<value_type> values;
  device_array<std::uint8_t> flags;
};

/// Scatter's own resources: nothing shared with a route.
struct scatter_resources {
  std::array<std::unique_ptr<scatter_lane>, 2> lanes;
  device_array<value_type> values_out;
  device_array<std::uint8_t> flags_out;
  staged_download download;
  event_pool marks;
  struct chunk_marks {
    std::size_t begin, uploaded, scattered;
  };
  std::vector<chunk_marks> chunk_spans;
};

/// The ops route_range keeps: keys in [lo, hi], at most limit of them.
/// The leaf copies (core/leaf_copy.hpp) and what applying changes takes.
struct copy_resources {
  device_array<entry> pool;
  device_array<leaf_copy> table;
  std::size_t table_size = 0;
  device_array<std::uint32_t> hits;  // by leaf id, as table
  device_array<entry> staged;
  device_array<copy_move> moves;
  device_array<leaf_id> ids;
  device_array<leaf_copy> entries;
};

/// Where route_cached writes its answers (keys: a typed route's answer
/// keys, or null: not wanted).
struct copy_answers {
  value_type* values = nullptr;
  std::uint8_t* found = nullptr;
  key_type* keys = nullptr;
};

struct key_range {
  key_type lo = 0;
  key_type hi = 0;
  std::size_t limit = 0;
};

/// Scalars of a descent over one array of queries.
struct descent_args {
  const key_type* keys = nullptr;
  const std::uint32_t* positions = nullptr;  // null: ordinal q goes to ordinals[q]
  std::uint32_t n = 0;
  const std::uint32_t* nodes_in = nullptr;
  std::uint32_t* nodes_out = nullptr;  // scratch between launches (room for n)
  std::uint32_t* ordinals = nullptr;   // ordinals[positions ? positions[q] : q]
};

}  // namespace detail

/// Keys a calibration times under set_key_bound (its scratch, ~12 MB, is
/// freed after it): the bound leaves little room beside the batch arrays.
inline constexpr std::size_t bounded_calibration_keys = std::size_t{1} << 18;

struct gpu_router::state {
  explicit state(const router_options& o) : options(o), pool(o.copy_threads), scatter_pool(o.copy_threads) {}

  detail::memory_account account;  // first: outlives every array below
  router_options options;
  device_info info;
  int device = 0;

  // Layout versions (gpu_router.cu).
  mutable std::mutex meta_mutex;
  std::condition_variable users_cv;
  std::mutex upload_mutex;
  std::array<detail::version_buffer, 2> buffers;
  int current = -1;
  std::uint64_t versions = 0;
  int constant_pair = -1;
  std::unique_ptr<detail::stream_handle> upload_stream;
  double upload_seconds = 0;
  double calibration_seconds = 0;

  // Calibration: its own scratch (an upload may run beside a route).
  struct {
    int fanout = 0;
    int height = 0;
    std::uint32_t leaf_count = 0;
    std::vector<int> groups;
    detail::device_array<key_type> keys;
    detail::device_array<key_type> keys_sorted;
    detail::device_array<std::uint32_t> positions;
    detail::device_array<std::uint32_t> positions_sorted;
    detail::device_array<std::uint32_t> nodes_a;
    detail::device_array<std::uint32_t> nodes_b;
    detail::device_array<std::uint32_t> ordinals;
    detail::device_array<unsigned char> temp;
  } calibration;

  std::mutex route_mutex;
  detail::route_resources route;  // gpu_route.cu
  // set_key_bound (under upload_mutex, route_mutex and scatter_mutex):
  // most keys the route arrays take (0: no bound) and most answers the
  // scatter's outputs take (read only while key_bound is set).
  std::atomic<std::size_t> key_bound{0};
  std::atomic<std::size_t> scatter_bound{0};
  /// Elements an array sized for `n` takes when it grows: a quarter more,
  /// within `bound` (0: none).
  [[nodiscard]] static std::size_t grown(std::size_t n, std::size_t bound) {
    return bound > 0 ? std::max(n, std::min(n + n / 4, bound)) : n + n / 4;
  }
  [[nodiscard]] std::size_t grown(std::size_t n) const { return grown(n, key_bound.load()); }
  // Leaf guides by leaf id (upload_guides or upload_compact_guides, under
  // route_mutex): guide_count of them hold guides of one kind (the other
  // array is freed), the rest of the capacity nothing.
  detail::device_array<leaf_guide> guides;
  detail::device_array<compact_guide> compact_guides;
  std::size_t guide_count = 0;
  bool guides_compact = false;
  /// Puts `count` guides of `host` into `into` (the other kind's array
  /// freed), under route_mutex; count 0 frees both.
  template <class Guide>
  void replace_guides(detail::device_array<Guide>& into, const Guide* host, std::size_t count, bool compact);
  detail::copy_resources copies;  // gpu_copies.cu; under route_mutex

  std::mutex scatter_mutex;
  detail::scatter_resources scatter;  // gpu_scatter.cu

  std::mutex sort_mutex;  // sort_pairs (gpu_sort.cu): one at a time, its arrays local to the call

  detail::copy_pool pool;
  /// The scatter's staging (caller arrays that are not page-locked): its
  /// own threads, so a scatter's copies never wait for the next batch's
  /// route staging in `pool` (they run at the same time).
  detail::copy_pool scatter_pool;
  std::array<std::atomic<int>, stage_count> faults{};

  void set_device() const { TANDEM_CUDA_TRY(cudaSetDevice(device)); }

  /// Descends levels [level_begin, level_end) of buffer `vb` on `stream`,
  /// fusing runs of levels with the same group size into one launch
  /// (gpu_router.cu: the kernels read this file's __constant__ slots).
  void launch_descent(const detail::version_buffer& vb, const detail::layout_meta& m, const detail::descent_args& a,
                      cudaStream_t stream, int level_begin, int level_end, const std::vector<int>& groups) const;

  std::vector<int> calibrate(const detail::version_buffer& vb, const detail::layout_meta& m);

  /// gpu_route.cu: the work of route() (range null) or route_range() for
  /// n >= 1, its checks done. @return ops routed (range: limit + 1 when
  /// more lie in it)
  std::size_t run_route(const detail::version_buffer& vb, const detail::layout_meta& m, const key_type* keys,
                        const value_type* args, const std::uint8_t* types, std::size_t n, routed_batch_view& out,
                        route_timing* timing, const detail::key_range* range,
                        const detail::copy_answers* answers = nullptr);
  /// gpu_route.cu: route(), route_range() and route_cached() around run_route.
  std::size_t route_call(const key_type* keys, const value_type* args, const std::uint8_t* types, std::size_t n,
                         routed_batch_view& out, route_timing* timing, const detail::key_range* range,
                         const detail::copy_answers* answers = nullptr);
  /// gpu_copies.cu: the ops route_cached's lookups missed (r.missed), in
  /// batch order: their keys to the front of r.keys, their positions to
  /// r.batch_positions. @return how many (waits for the count)
  std::size_t select_missed(std::size_t n, cudaStream_t stream);
  /// gpu_copies.cu: route_cached of a batch with writes, its n rows sorted
  /// by (key, position) and descended (`rows`; args and types still in
  /// batch order in r.args, r.types): gets answered from the copies into
  /// r.answers (by batch position), puts patched into them, and the rows
  /// left compacted into free arrays that `rows` then points to.
  /// @return rows left (waits for the count)
  std::size_t answer_sorted(const detail::version_buffer& vb, const detail::layout_meta& m, std::size_t n,
                            detail::row_arrays& rows, cudaStream_t stream);
  /// Waits for everything a route enqueued, ignoring errors (after a failure).
  void drain_route() noexcept;

  /// gpu_scatter.cu: the work of scatter() for n >= 1, its checks done.
  void run_scatter(const std::uint32_t* positions, const value_type* values, const std::uint8_t* flags,
                   std::size_t n, value_type* values_out, std::uint8_t* flags_out, scatter_timing* timing);
  void drain_scatter() noexcept;
};

}  // namespace tandem::device
