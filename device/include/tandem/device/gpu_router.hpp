#pragma once
/// @file
/// `gpu_router`: the GPU side of routing (DESIGN, "One batch", steps 2 and 5).
///
/// What it is. A double-buffered device mirror of the inner layout
/// (inner_layout.hpp) plus the two shuffles the GPU does for a batch: `route`
/// sorts and groups the batch by leaf, `scatter` puts answers back into batch
/// order. The leaf a key routes to is what `descend()` on the host gives (one
/// descent implementation: the kernels call the layout's `TANDEM_HD` node
/// search), and a route fills the same `routed_batch_view` that the CPU
/// router (`host::route_sorted`) fills, so the leaf phase reads one shape.
///
/// How a route runs (aggregation::full, the default). The batch's keys (and
/// args, types when wanted) go up in chunks of `router_options::chunk`, the
/// chunks rotating over `router_options::streams` streams: pinned caller
/// arrays are copied directly; pageable ones are first copied into pinned
/// staging by `copy_threads` host threads, chunk i+1 being staged while
/// chunk i crosses PCIe. One CUB radix sort of (key, position) over all 64
/// bits and the whole batch follows (stable, positions in batch order as
/// values: equal keys keep batch order). The sorted keys descend the levels
/// with narrowed thread groups (g threads share one node visit, g chosen per
/// level by a calibration at upload) and coalesced reads; since the keys are
/// sorted, the leaf ordinals come out non-decreasing and the groups are the
/// runs of equal ordinal: a flag per run start and two CUB selects give
/// group_begin and group_ordinal on the GPU. Args and types are gathered by
/// sorted position on the GPU. Then positions, sorted keys, args, types and
/// the G group entries come down: directly into pinned caller arrays, else
/// through two pinned pieces (the D2H of piece j+1 overlaps the host copy of
/// piece j). With two or more streams, positions and keys start down while
/// the descent still runs.
///
/// aggregation::partial (PSA) and aggregation::none descend chunk by chunk
/// instead (chunk i descends while chunk i+1 goes up), partially sorted on
/// the top N = ceil(log2(T / 8)) key bits (T = leaf_count * keys_per_leaf) or
/// in batch order; the descent writes each op's ordinal at its position, one
/// stable sort of (ordinal, position) over ceil(log2(leaf_count)) bits groups
/// the batch, and keys, args, types are gathered by position on the GPU.
/// Inside a group positions then increase but keys are not sorted
/// (`key_sorted` false).
///
/// How a scatter runs. Positions, values and flags go up in chunks on the
/// scatter's own two streams, a kernel per chunk writes value i to
/// values_out[positions[i]] in device memory, and the outputs come down
/// (direct or staged as above).
///
/// The mirror. Two device buffer sets (key region, child_prefix, leaf_ids);
/// `upload` writes the idle one (reusing its allocations when big enough),
/// then makes it current under a mutex. The top levels of each version's
/// child_prefix also go to `__constant__` memory (a slot per buffer, up to
/// `constant_slot_entries` entries, so a flip never waits for a route); the
/// rest is read through the read-only data path.
///
/// Cost. PCIe carries 8 bytes a key up (+8 with args, +1 with types) and 12
/// down (+8, +1), plus 8 per group: `route_timing::bytes_up/bytes_down`
/// report it, ~0.35 ms per 2^24 keys-only batch each way at the measured
/// 55 GB/s. On an H200 with 2^24 keys (notes/machine.md and the measurements
/// of the previous route): the 64-bit sort ~1.4 ms, the descent of sorted
/// keys over 175k leaves (F16) ~0.45 ms, the grouping a few passes over the
/// ordinals. From pageable arrays the host staging copies (~10 GB/s a copy
/// thread) bound the call: give route and scatter pinned arrays
/// (device/pinned.hpp) where speed matters. Device arrays grow to the
/// largest batch seen (~70 bytes a key for a route with args and types) and
/// are kept; a call allocates no host memory once warm. A re-upload of a
/// 2.2 MB layout takes ~0.2 ms; a calibration ~4 ms.
///
/// Without the CUDA layer (TANDEM_HAS_CUDA undefined) the class exists but its
/// constructor throws tandem::error saying so.
///
/// Threads: `upload`, `route` and `scatter` may run at once from different
/// threads; each has its own streams and device buffers. A route keeps using
/// the layout version it started on; `upload` writes the idle buffer and
/// flips when the copy is complete (an upload that finds a route still using
/// the idle buffer waits for it). Two calls of the same kind take turns (the
/// second waits). Host staging copies of a route and a scatter take turns on
/// the router's copy threads. Every call waits for its GPU work and makes the
/// router's device current on the calling thread (batch_bytes too), but the
/// constructor and the destructor, which put back the caller's current
/// device (device/current_device.hpp); sort_bytes, which is static, sizes
/// for the device current on the calling thread. Routers on different
/// devices of one process are independent.
///
/// Errors: every failed CUDA call throws tandem::cuda_error naming the call,
/// file and line; the router stays usable afterwards (a later call may
/// succeed) unless the device itself is lost. Outputs of a failed call are
/// unspecified. A failed upload leaves the current version in place.

#include <tandem/core/inner_layout.hpp>
#include <tandem/core/leaf_copy.hpp>
#include <tandem/core/routed_batch.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem::device {

/// Stages of a GPU call, for timings and fault injection. A route reaches
/// all five; an upload reaches `upload` (its copies) and `sync`; a scatter
/// reaches all but `sort`.
enum class stage : std::uint8_t { upload, sort, kernel, download, sync };
inline constexpr std::size_t stage_count = 5;

/// How queries are ordered before the descent.
enum class aggregation : std::uint8_t {
  partial,  ///< PSA: radix sort on the top N = ceil(log2(T/K)) key bits, per chunk
  full,     ///< radix sort on all 64 key bits, over the whole batch
  none,     ///< batch order
};

/// Entries of child_prefix one layout version may keep in `__constant__`
/// memory (15 KiB). Four such slots exist per device and process: two
/// routers at once get constant memory, a third reads everything from global
/// memory (same answers).
inline constexpr std::size_t constant_slot_entries = 3840;

struct router_options {
  int device_ordinal = 0;
  /// Keys per chunk: the unit that goes up (and, without a full sort, is
  /// sorted and descended) while the next one is staged; chunks rotate over
  /// `streams` streams. Scatter uses the same chunk. >= 1.
  std::size_t chunk = std::size_t{1} << 22;
  aggregation order = aggregation::full;
  /// Threads per query per level (1..32, power of two), root first; a list
  /// shorter than the height repeats its last entry. Empty: chosen at upload
  /// by a calibration over the levels of the uploaded layout.
  std::vector<int> group_sizes;
  /// CUDA streams the route's chunks rotate over (1..8).
  int streams = 2;
  /// Host threads that copy pageable arrays into pinned staging and results
  /// out of it (1..64; 1 = the calling thread alone), for routes and sorts,
  /// and as many again for scatters (their own, so a scatter's copies run
  /// beside the next route's). Copies under 1 MiB use one. These copies
  /// bound a call on pageable memory (H200 host, 2^24 keys: 1 thread 570, 4
  /// threads ~1750, 8 threads ~2200 M keys/s end to end).
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

/// Seconds per stage of the last route: GPU event times (summed over chunks
/// where there are chunks) plus the host copies. Stages overlap (chunks on
/// several streams; keys start down during the descent), so they may add up
/// to more than `total`.
struct route_timing {
  double upload = 0;    ///< H2D of keys (args, types), with the host staging copies
  double sort = 0;      ///< full: the (key, position) sort; else PSA sorts + the grouping sort
  double kernel = 0;    ///< descent
  double grouping = 0;  ///< run flags + selects (group_begin, group_ordinal) + gathers by position
  double download = 0;  ///< D2H of the routed arrays, with the host copy-out when staged
  double total = 0;     ///< wall time of route()
  // Parts of the above, for tuning.
  double group_sort = 0;  ///< the (ordinal, position) sort alone (part of `sort`; 0 with full)
  double host_in = 0;     ///< host copies into pinned staging (part of `upload`)
  double host_out = 0;    ///< host copies out of pinned staging (part of `download`)
  std::size_t chunks = 0;      ///< chunks the batch went up in
  std::size_t bytes_up = 0;    ///< bytes moved host -> device by the call
  std::size_t bytes_down = 0;  ///< bytes moved device -> host by the call
  std::size_t answered = 0;    ///< route_cached: gets answered from leaf copies
  double lookup = 0;           ///< route_cached: descent + copy lookups of the whole batch (part of `kernel`)
};

/// Seconds per stage of the last scatter (as route_timing).
struct scatter_timing {
  double upload = 0;    ///< H2D of positions, values, flags, with the host staging copies
  double kernel = 0;    ///< the scatter kernels
  double download = 0;  ///< D2H of the outputs, with the host copy-out when staged
  double total = 0;     ///< wall time of scatter()
  std::size_t bytes_up = 0;
  std::size_t bytes_down = 0;
};

/// Seconds and bytes of the last sort_pairs (host clock; the phases of a
/// run follow one another).
struct sort_timing {
  double upload = 0;    ///< H2D of the pairs, with the host staging copies
  double sort = 0;      ///< the radix sorts, the last-of-key flags and the selects
  double download = 0;  ///< D2H of the kept pairs, with the host copy-out
  double total = 0;     ///< wall time of sort_pairs()
  std::size_t runs = 0;        ///< runs the pairs were sorted in
  std::size_t run_pairs = 0;   ///< pairs per run (the last may hold fewer)
  std::size_t bytes_up = 0;    ///< bytes moved host -> device
  std::size_t bytes_down = 0;  ///< bytes moved device -> host
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

  /// @brief Routes the batch keys[i], args[i], types[i] (i < n, batch order)
  ///        to leaves and groups it by leaf into `out` (routed_batch.hpp):
  ///        positions, keys and, when `out.args` / `out.types` are not null,
  ///        args and types, all in (leaf, key, position) order with
  ///        aggregation::full (`out.key_sorted` = true) or (leaf, position)
  ///        order otherwise; `out.groups` groups in group_begin[0..G] and
  ///        group_ordinal[0..G). Ordinals are those of the version current
  ///        when the call started. Any host memory works; pinned arrays
  ///        (allocate_pinned, cudaMallocHost, cudaHostRegister) skip the
  ///        staging copies. n == 0 gives G = 0 and group_begin[0] = 0.
  ///        Waits.
  /// @param args  may be null when out.args is null (likewise types)
  /// @param timing when not null, filled with this call's stage times
  /// @throws std::logic_error when no layout was uploaded
  /// @throws std::length_error when n >= 2^32 (positions are u32)
  /// @throws std::invalid_argument when an array needed for n > 0 is null
  /// @throws tandem::cuda_error when a CUDA call fails (outputs unspecified)
  void route(const key_type* keys, const value_type* args, const std::uint8_t* types, std::size_t n,
             routed_batch_view& out, route_timing* timing = nullptr);

  /// @brief As route() with aggregation::full, for the ops whose key lies
  ///        in [lo, hi] only: all n keys (args, types) go up in chunks, the
  ///        ops in the range are kept in batch order on the GPU, then
  ///        sorted, descended, grouped and brought down as route() does.
  ///        Positions in `out` are batch positions (0 .. n-1). The device
  ///        arrays are sized by `limit`, not n: key ranges of one batch
  ///        routed one after another, each holding at most `limit` ops,
  ///        need the device memory of one route of `limit` keys, and since
  ///        each range comes out sorted, ranges routed in key order
  ///        concatenate into the batch's route. Waits.
  /// @return ops routed (out[0, count) and count's groups written), or
  ///         limit + 1 when more than `limit` ops lie in the range (out
  ///         unspecified)
  /// @throws std::logic_error when no layout was uploaded or the router's
  ///         order is not aggregation::full
  /// @throws as route() otherwise
  std::size_t route_range(const key_type* keys, const value_type* args, const std::uint8_t* types, std::size_t n,
                          key_type lo, key_type hi, std::size_t limit, routed_batch_view& out,
                          route_timing* timing = nullptr);

  /// @brief A route of gets that answers from the leaf copies (below)
  ///        first: every key goes up and descends in batch order; a key
  ///        whose leaf has a usable copy speaking for it is answered from
  ///        the copy into values_out[i], found_out[i] (found 1 or 0); the
  ///        rest (found_out[i] 0, values_out[i] unspecified) are routed into
  ///        `out` as route() routes a batch (aggregation::full), positions
  ///        being batch positions. values_out may be null (found flags
  ///        only: no values cross PCIe). One answer in eight counts as 8
  ///        hits of its leaf (take_copy_hits). Pinned outputs are written by
  ///        copies that overlap the next chunk's. Waits.
  /// @return the ops routed into `out` (n - timing->answered)
  /// @throws std::logic_error when no layout was uploaded or the router's
  ///         order is not aggregation::full
  /// @throws std::invalid_argument when found_out is null for n > 0
  /// @throws as route() otherwise
  std::size_t route_cached(const key_type* keys, std::size_t n, value_type* values_out, std::uint8_t* found_out,
                           routed_batch_view& out, route_timing* timing = nullptr);
  /// @brief route_cached of a batch of point ops with writes (types get,
  ///        put, insert, erase; out.args and out.types set): the batch is
  ///        routed as route() routes it, then each sorted row is judged by
  ///        core/leaf_copy.hpp's copy_sorted_row: gets answered from the
  ///        copies (values_out, found_out and, unless null, keys_out at
  ///        their batch positions), puts of keys a copy holds written into
  ///        it as well (their routed type carries copy_patched_bit), and
  ///        only the rows not answered are routed into `out`. Waits.
  /// @return the ops routed into `out` (at least the writes)
  /// @throws std::logic_error when every op was answered (no writes)
  /// @throws as the gets-only form otherwise
  std::size_t route_cached(const key_type* keys, const value_type* args, const std::uint8_t* types, std::size_t n,
                           value_type* values_out, std::uint8_t* found_out, key_type* keys_out,
                           routed_batch_view& out, route_timing* timing = nullptr);

  /// @brief Leaf copies in device memory (core/leaf_copy.hpp): makes room
  ///        for a pool of `entries` entries, keeping what it holds (0
  ///        frees pool and table).
  ///        Waits for a route in flight.
  void reserve_copies(std::size_t entries);
  /// @brief Applies `c` to the copies: the staged entries go up in one
  ///        copy, a kernel puts each move in place, then the table entries
  ///        are written. Waits (for a route in flight too).
  /// @throws std::invalid_argument when a move passes the pool reserved
  /// @throws tandem::cuda_error when a CUDA call fails (the copies are then
  ///         unspecified until a later apply that clears them succeeds)
  void apply_copies(const copy_changes& c);
  /// @brief Adds the hits counted per leaf since the last call to hits[id]
  ///        and zeroes the counters. Waits.
  void take_copy_hits(std::vector<std::uint32_t>& hits);
  /// @return device bytes of the leaf copies (pool, table, hit counters, staging).
  [[nodiscard]] std::size_t copy_bytes() const noexcept;
  /// @brief The copies' table and pool, downloaded (host::copy_target::read). Waits.
  void read_copies(std::vector<leaf_copy>& table, std::vector<entry>& pool);

  /// @brief Bounds the route arrays to `route_keys` keys and the scatter's
  ///        outputs to `scatter_keys` answers (route_keys 0: no bound, the
  ///        default): arrays that hold more are freed now (they grow again,
  ///        up to the bound, when needed), growth headroom stays within the
  ///        bounds, and the calibration's scratch is freed now and after
  ///        each calibration. The caller keeps routes (route_range ranges)
  ///        at or below route_keys and scatters at or below scatter_keys.
  ///        Waits for an upload, route or scatter in flight.
  void set_key_bound(std::size_t route_keys, std::size_t scatter_keys);
  /// @return device bytes that routes of up to `route_keys` keys and
  ///         scatters of up to `scatter_keys` answers hold at most under
  ///         set_key_bound(route_keys, scatter_keys): their arrays, the
  ///         chunk buffers of route_range and of the scatter's lanes, CUB
  ///         scratch and the calibration's.
  [[nodiscard]] std::size_t batch_bytes(std::size_t route_keys, std::size_t scatter_keys, bool with_args) const;
  /// @return device bytes sort_pairs takes for runs of `run_pairs` pairs.
  [[nodiscard]] static std::size_t sort_bytes(std::size_t run_pairs);

  /// @brief Replaces the leaf guides (core/leaf_guide.hpp) that routes
  ///        read: guides[id] for leaf ids id < count (a guide with
  ///        block_count 0 gives no hints). From then on a key-sorted route
  ///        (aggregation::full) whose `out.hints` is not null fills it with
  ///        each key's hint in the guide of its leaf (no_hint past `count`)
  ///        and sets `out.hinted`. count 0 drops the guides (and frees
  ///        their device memory). Any host
  ///        memory works; pinned is faster. Waits (for a route in flight too).
  /// @throws tandem::cuda_error when a CUDA call fails: no guides are kept
  void upload_guides(const leaf_guide* guides, std::size_t count);
  /// @brief As upload_guides, with compact guides (56 bytes a leaf): a
  ///        route's hint kernel descends again for each key's fences, and
  ///        a key at a place its guide cannot tell gets `unsure_hint`.
  ///        Either kind replaces the other.
  void upload_compact_guides(const compact_guide* guides, std::size_t count);
  /// @return leaf guides held (0: routes give no hints).
  [[nodiscard]] std::size_t guide_count() const;

  /// @brief Answers back to batch order: values_out[positions[i]] = values[i]
  ///        and flags_out[positions[i]] = flags[i] for i < n (positions a
  ///        permutation of 0..n-1; an entry >= n is skipped, and an output
  ///        no position names keeps no defined value). Host arrays; pinned
  ///        ones are copied directly. Needs no layout. Waits.
  /// @param values, values_out may both be null: no values (likewise flags)
  /// @param timing when not null, filled with this call's stage times
  /// @throws std::length_error when n >= 2^32
  /// @throws std::invalid_argument when positions is null for n > 0, or only
  ///         one of values/values_out (flags/flags_out) is null
  /// @throws tandem::cuda_error when a CUDA call fails (outputs unspecified)
  void scatter(const std::uint32_t* positions, const value_type* values, const std::uint8_t* flags, std::size_t n,
               value_type* values_out, std::uint8_t* flags_out, scatter_timing* timing = nullptr);

  /// @brief Sorts the pairs (keys[i * stride], values[i * stride]), i < n,
  ///        by key on the GPU and keeps the last pair of each key (a later
  ///        pair wins), in runs: pairs [r * R, (r + 1) * R) go up as run r
  ///        (R = run_pairs, or when 0 as many as fit in half the device
  ///        memory free at the call), are sorted there (CUB radix sort over
  ///        all 64 bits, stable: equal keys keep input order), compacted to
  ///        the last pair of each key, and come down into keys_out /
  ///        values_out right after the runs before them. Within a run keys
  ///        strictly increase; a key may recur in later runs, whose pair
  ///        then wins (host::merge_sorted_runs merges them). Pageable arrays
  ///        go through two pinned pieces of 16 MiB: one crosses PCIe while
  ///        the copy threads fill or empty the other. The device memory the
  ///        call takes is freed before it returns. Needs no layout. Waits.
  /// @param stride 1 (two arrays), or 2 with values == keys + 1 (an array
  ///        of key-value entries)
  /// @param keys_out, values_out room for n pairs each
  /// @return run boundaries b[0..runs]: run r is [b[r], b[r + 1]) of the
  ///         outputs, b[0] = 0 and b[runs] = pairs written ({0} for n == 0)
  /// @throws std::invalid_argument on a null array for n > 0 or another stride
  /// @throws tandem::cuda_error when a CUDA call fails (outputs unspecified)
  std::vector<std::size_t> sort_pairs(const key_type* keys, const value_type* values, std::size_t stride,
                                      std::size_t n, key_type* keys_out, value_type* values_out,
                                      std::size_t run_pairs = 0, sort_timing* timing = nullptr);

  /// @return e.g. "NVIDIA H200 (sm_90, 139.8 GiB)"
  [[nodiscard]] std::string name() const;
  /// @return the CUDA device ordinal in use.
  [[nodiscard]] int device_ordinal() const;
  /// @return the threads per query used at each level of the current
  ///         version, root first (empty before the first upload).
  [[nodiscard]] std::vector<int> group_sizes() const;
  /// @return bytes of the layout version in use.
  [[nodiscard]] std::size_t layout_bytes() const;
  /// @return bytes of device memory the router holds now: both layout
  ///         versions and the grow-only work arrays of routes and scatters
  ///         (sized by the largest batch so far).
  [[nodiscard]] std::size_t device_bytes() const noexcept;
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

  /// @brief Test hook: the next `count` calls (route, upload, scatter or sort_pairs)
  ///        reaching stage `s` fail with a CUDA error (cudaErrorLaunchFailure,
  ///        simulated: the context stays healthy), thrown as
  ///        tandem::cuda_error. count <= 0 disarms.
  void inject_fault(stage s, int count = 1);

 private:
  struct state;  // defined in detail/router_state.cuh, shared by the implementation files
  std::unique_ptr<state> state_;
};

}  // namespace tandem::device
