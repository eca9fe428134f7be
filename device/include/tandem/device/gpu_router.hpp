#pragma once
/// @file
/// `gpu_router`: routing on the GPU (DESIGN step 2, GPU side).
///
/// What it is. A double-buffered device mirror of the inner layout
/// (inner_layout.hpp) and the machinery that routes a batch of keys to leaf
/// ordinals on it. The answer is the same as `descend()` on the host gives
/// (one descent implementation: the kernels call the layout's `TANDEM_HD`
/// node search), returned grouped by leaf like `host::route_cpu`.
///
/// How a route runs. The batch is cut into chunks of `router_options::chunk`
/// keys, handed round-robin to `router_options::streams` CUDA streams. For
/// each chunk: the caller's keys are copied into pinned staging (by
/// `copy_threads` host threads; skipped when the caller's array is pinned),
/// go up (H2D), are sorted by (key, position) on their top N bits (partially
/// sorted aggregation, PSA: N = ceil(log2(T / K)), T = leaf_count *
/// keys_per_leaf, K = 8 keys per cache line) or on all 64 bits or not at all,
/// and are descended with narrowed thread groups (g threads cooperate on one
/// node: each compares a slice of the F-1 keys, a warp ballot and shuffle
/// combine the slices; g chosen per level). The descent writes each op's
/// ordinal at its batch position, so while chunk i is descended, chunk i+1
/// is staged and goes up on the other stream. Once every chunk is descended,
/// one CUB radix sort over the whole batch (ceil(log2(leaf_count)) bits,
/// stable, positions in batch order as values) groups the ops by leaf, and
/// the result comes down in chunks (D2H of chunk j+1 overlaps the host copy
/// of chunk j into the caller's arrays). Grouping on the device once is far
/// cheaper than a per-chunk sort plus a k-way merge on the host.
///
/// The mirror. Two device buffer sets (key region, child_prefix, leaf_ids);
/// `upload` writes the idle one (reusing its allocations when big enough),
/// then makes it current under a mutex. The top levels of each version's
/// child_prefix also go to `__constant__` memory (a slot per buffer, up to
/// `constant_slot_entries` entries, so a flip never waits for a route); the
/// rest is read through the read-only data path.
///
/// Cost (H200, PCIe Gen5, 2^24 uniform keys, 175k leaves = a 2^27-key tree,
/// F16, PSA): descent ~0.45 ms, PSA sort ~0.8 ms, grouping sort 0.4 ms; the
/// rest is moving keys and results: ~2200 M keys/s end to end from pageable
/// arrays (the host staging copies dominate), ~3000 M keys/s from pinned
/// ones. A re-upload of that layout (2.2 MB) takes ~0.17 ms; a calibration
/// ~4 ms.
///
/// Without the CUDA layer (TANDEM_HAS_CUDA undefined) the class exists but its
/// constructor throws tandem::error saying so.
///
/// Threads: `upload` and `route` may be called from different threads; a
/// route keeps using the layout version it started on, `upload` writes the
/// idle buffer and flips when the copy is complete (an upload that finds a
/// route still using the idle buffer waits for it). Two `route` calls do not
/// run at once (the second waits), nor do two `upload` calls. Both calls wait
/// for their GPU work. Each call makes the router's device current on the
/// calling thread.
///
/// Errors: every failed CUDA call throws tandem::cuda_error naming the call,
/// file and line; the router stays usable afterwards (a later call may
/// succeed) unless the device itself is lost. A failed upload leaves the
/// current version in place.

#include <tandem/core/inner_layout.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem::device {

/// Stages of a GPU route or upload, for timings and fault injection.
/// A route reaches all five; an upload reaches `upload` (its copies) and
/// `sync`.
enum class stage : std::uint8_t { upload, sort, kernel, download, sync };
inline constexpr std::size_t stage_count = 5;

/// How queries are ordered before the descent.
enum class aggregation : std::uint8_t {
  partial,  ///< PSA: radix sort on the top N = ceil(log2(T/K)) key bits
  full,     ///< radix sort on all 64 key bits
  none,     ///< batch order
};

/// Entries of child_prefix one layout version may keep in `__constant__`
/// memory (15 KiB). Four such slots exist per device and process: two
/// routers at once get constant memory, a third reads everything from global
/// memory (same answers).
inline constexpr std::size_t constant_slot_entries = 3840;

struct router_options {
  int device_ordinal = 0;
  /// Keys per chunk: each chunk is copied up, sorted and descended as one
  /// unit; chunks overlap on `streams` streams. >= 1.
  std::size_t chunk = std::size_t{1} << 22;
  aggregation order = aggregation::partial;
  /// Threads per query per level (1..32, power of two), root first; a list
  /// shorter than the height repeats its last entry. Empty: chosen at upload
  /// by a calibration over the levels of the uploaded layout.
  std::vector<int> group_sizes;
  /// CUDA streams the chunks rotate over (1..8).
  int streams = 2;
  /// Host threads that copy keys into pinned staging and results out of it
  /// (1..64; 1 = the calling thread alone). Copies under 1 MiB use one.
  /// These copies bound a route from pageable memory (H200 host, 2^24 keys:
  /// 1 thread 570, 4 threads ~1750, 8 threads ~2200 M keys/s end to end).
  int copy_threads = 8;
  /// Put the top levels of child_prefix in __constant__ memory when they fit
  /// (with aggregation::none only the root level: unsorted queries make a
  /// warp read many distinct entries, which constant memory serialises).
  bool constant_prefix = true;
  /// Estimated keys per leaf, for PSA's T = leaf_count * keys_per_leaf. >= 1.
  std::size_t keys_per_leaf = 768;
  /// Keys of the synthetic batch the calibration times (>= 1024).
  std::size_t calibration_keys = std::size_t{1} << 20;
};

/// Seconds spent per stage by the last route (GPU event times summed over
/// chunks, plus the host copies; chunks overlap, so the stages may add up to
/// more than `total`).
struct route_timing {
  double upload = 0;    ///< host staging + H2D of keys
  double sort = 0;      ///< aggregation sort + grouping sort
  double kernel = 0;    ///< descent
  double download = 0;  ///< D2H of (position, ordinal) + host copy-out
  double total = 0;     ///< wall time of route()
  // Parts of the above, for tuning.
  double group_sort = 0;  ///< the grouping sort alone (part of `sort`)
  double host_in = 0;     ///< host copy into pinned staging (part of `upload`)
  double host_out = 0;    ///< host copy out of pinned staging (part of `download`)
  std::size_t chunks = 0;  ///< chunks the batch was cut into
};

class gpu_router {
 public:
  /// @brief Takes the device `options.device_ordinal`, creates its streams
  ///        and claims constant-memory slots. Allocates nothing per batch yet.
  /// @throws tandem::error when no usable GPU (the message says "no usable
  ///         GPU" and the reason)
  /// @throws std::invalid_argument on bad options (names the option)
  /// @throws tandem::cuda_error when a CUDA call fails
  explicit gpu_router(const router_options& options = {});
  ~gpu_router();
  gpu_router(const gpu_router&) = delete;
  gpu_router& operator=(const gpu_router&) = delete;

  /// @brief Copies `layout` into the idle device buffer (every array: at
  ///        these sizes comparing costs as much as copying), fills its
  ///        constant slot, calibrates the group sizes when none were given
  ///        and the layout's shape differs from the last calibrated one, then
  ///        makes it current. Waits.
  /// @throws std::invalid_argument when `layout` is empty (never built)
  /// @throws tandem::cuda_error when a CUDA call fails; the current version
  ///         stays in use
  void upload(const inner_layout& layout);

  /// @brief Routes keys[0..n): on return `positions[i]`, `ordinals[i]` for
  ///        i < n list every position once, grouped by non-decreasing leaf
  ///        ordinal; inside a group positions increase (as route_cpu).
  ///        `ordinals[i]` is the ordinal of the leaf owning keys[positions[i]]
  ///        in the version current when the call started. Any host memory
  ///        works; pinned (cudaMallocHost/cudaHostRegister) arrays skip the
  ///        staging copies. Waits.
  /// @throws std::logic_error when no layout was uploaded
  /// @throws std::length_error when n >= 2^32 (positions are u32)
  /// @throws tandem::cuda_error when a CUDA call fails (outputs unspecified)
  void route(const key_type* keys, std::size_t n, std::uint32_t* positions, std::uint32_t* ordinals,
             route_timing* timing = nullptr);

  /// @return e.g. "NVIDIA H200 (sm_90, 139.8 GiB)"
  [[nodiscard]] std::string name() const;
  /// @return the CUDA device ordinal in use.
  [[nodiscard]] int device_ordinal() const;
  /// @return the threads per query used at each level of the current
  ///         version, root first (empty before the first upload).
  [[nodiscard]] std::vector<int> group_sizes() const;
  /// @return bytes of the layout version in use.
  [[nodiscard]] std::size_t layout_bytes() const;
  /// @return how many of the top prefix-sum entries sit in __constant__ memory.
  [[nodiscard]] std::size_t constant_prefix_entries() const;
  /// @return how many top levels read child_prefix from __constant__ memory.
  [[nodiscard]] int constant_levels() const;
  /// @return the number of uploads made current so far (0: none).
  [[nodiscard]] std::uint64_t version() const;
  /// @return the PSA sort width N (key bits) for the current version.
  [[nodiscard]] int partial_sort_bits() const;
  /// @return seconds the last upload took (copies, constant slot,
  ///         calibration) and the calibration alone.
  [[nodiscard]] double last_upload_seconds() const;
  [[nodiscard]] double last_calibration_seconds() const;

  /// @brief Test hook: the next `count` calls reaching stage `s` fail with a
  ///        CUDA error (cudaErrorLaunchFailure, simulated: the context stays
  ///        healthy), thrown as tandem::cuda_error. count <= 0 disarms.
  void inject_fault(stage s, int count = 1);

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace tandem::device
