#pragma once
// A batch between its route and its answers (index_impl.hpp): the route
// arrays and answer buffers of one pipeline stage (route_space), what its
// route did (route_report) and the batch's state from the dispatcher's
// taking it up to its delivery (prepared).
#include "batch_memory.hpp"
#include "job.hpp"
#include "reader_gate.hpp"

#include <tandem/core/inner_layout.hpp>
#include <tandem/core/routed_batch.hpp>
#include <tandem/device/gpu_router.hpp>
#include <tandem/host/leaf_phase.hpp>
#include <tandem/host/route.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

/// The arrays of one routed batch (routed_batch_view), grow-only.
struct routed_arrays {
  scheduler::host_array<std::uint32_t> positions, group_begin, group_ordinal;
  scheduler::host_array<key_type> keys;
  scheduler::host_array<std::uint64_t> args;
  scheduler::host_array<std::uint8_t> types;
  scheduler::host_array<leaf_hint> hints;
  void release() noexcept {
    positions.release();
    group_begin.release();
    group_ordinal.release();
    keys.release();
    args.release();
    types.release();
    hints.release();
  }
  void set_kind(scheduler::memory_kind k) {
    hints.set_kind(k);
    positions.set_kind(k);
    group_begin.set_kind(k);
    group_ordinal.set_kind(k);
    keys.set_kind(k);
    args.set_kind(k);
    types.set_kind(k);
  }
  /// A view with room for n ops; args and types only when wanted.
  routed_batch_view view(std::size_t n, bool with_args_and_types) {
    routed_batch_view v;
    v.positions = positions.get(n);
    v.keys = keys.get(n);
    v.args = with_args_and_types ? args.get(n) : nullptr;
    v.types = with_args_and_types ? types.get(n) : nullptr;
    v.group_begin = group_begin.get(n + 1);
    v.group_ordinal = group_ordinal.get(n);
    return v;
  }
};

/// Buffers of one batch between its route and its answers. Three exist: one
/// batch is routed while the previous one runs its leaf phase and the one
/// before that gets its answers back in batch order on the GPU.
struct route_space {
  routed_arrays final_route;     // what the leaf phase reads
  routed_arrays gpu_side, cpu_side;  // the shares of a split route, before the merge
  std::vector<routed_batch_view> parts;   // the GPU's slices (in gpu_side), then the CPU's share
  std::vector<std::uint32_t> part_bases;  // added to each part's positions by the merge
  host::merge_workspace merge_work;
  host::route_workspace cpu_work;  // work arrays of CPU routing
  host::route_workspace fallback_work;  // of the GPU side re-routing a failed slice beside the CPU share
  std::vector<key_type> range_sample;     // route_gpu_ranges: sampled keys, then each range's first key
  std::vector<key_type> range_lows;
  std::vector<leaf_id> miss_ids;  // route_from_copies: each missed leaf, and its gets
  std::vector<leaf_id> patched_ids;  // claim_writes: leaves whose copies took all their writes
  std::vector<std::uint32_t> miss_counts;
  scheduler::host_array<value_type> answers;     // leaf-phase answers in routed order
  scheduler::host_array<std::uint8_t> found;
  scheduler::host_array<key_type> copy_keys;  // route_from_copies: answer keys by batch position
  // Per batch position: the scan's entry of batch::scans() (scan ops only).
  scheduler::host_array<std::uint32_t> scan_slot;
  // The batch's write ops for its redo log record (gather_log_ops), when it
  // has other ops too.
  scheduler::host_array<op_type> log_types;
  scheduler::host_array<key_type> log_keys;
  scheduler::host_array<value_type> log_args;
  void set_kind(scheduler::memory_kind k) {
    final_route.set_kind(k);
    gpu_side.set_kind(k);
    cpu_side.set_kind(k);
    answers.set_kind(k);
    found.set_kind(k);
    copy_keys.set_kind(k);
  }
  /// Gives back every array (the next batch allocates again).
  void release() noexcept {
    final_route.release();
    gpu_side.release();
    cpu_side.release();
    answers.release();
    found.release();
    copy_keys.release();
    scan_slot.release();
    log_types.release();
    log_keys.release();
    log_args.release();
    merge_work = {};
    cpu_work = {};
    fallback_work = {};
    range_sample = {};
    range_lows = {};
    miss_ids = {};
    patched_ids = {};
    miss_counts = {};
  }
};

/// What the route stage of one batch did.
struct route_report {
  std::size_t gpu_keys = 0;
  std::size_t cpu_keys = 0;
  double gpu_seconds = 0;
  double cpu_seconds = 0;
  bool gpu_failed = false;
  std::array<std::uint64_t, op_type_count> ops_by_type{};
  double gpu_rate = 0;  // the policy's moving averages after this batch
  double cpu_rate = 0;
  device::route_timing gpu;
};

/// A batch between its route and its leaf phase (two, reused).
struct prepared {
  job* j = nullptr;
  std::size_t n = 0;  // ops in the batch
  route_space* space = nullptr;
  std::shared_ptr<const inner_layout> version;  // the layout its ordinals refer to
  std::shared_ptr<tandem::detail::answer_columns> columns;
  tandem::detail::column<key_type> result_keys;  // the batch's key column, lower_bound keys patched
  std::vector<std::pair<std::size_t, std::string>> errors;  // ops that did not run, by index
  /// A group-commit job's results, one per member, made before the batch's
  /// first write (make_member_results): delivering them allocates nothing.
  std::vector<batch_result> member_results;
  routed_batch_view routes;
  std::size_t routed = 0;  // ops in `routes`: n, or those no leaf copy answered
  bool from_copies = false;  // its gets were looked up in the leaf copies first
  std::size_t copy_hits = 0;  // gets answered from the leaf copies
  std::uint64_t caller_writes = 0;  // point_claims_.count() before the route looked in the copies
  bool no_copies = false;  // routed again, the usual way (reroute_after_writes)
  scheduler::reader_gate::slot* batch_read = nullptr;  // answered directly: its reader_gate::begin_batch_read
  bool patched_copies = false;  // its route wrote puts into copies that stay usable
  bool gets_only = false;
  bool validated = false;  // validate() ran ahead of prepare() (dispatch.cpp)
  bool direct = false;  // gets answered directly, not routed (config.direct_get_ops)
  stage_times times;
  stage_bytes bytes;
  host::leaf_line_count lines;  // sampled point ops and their leaf lines (stats::leaf_lines)
  std::size_t hinted_ops = 0, stale_hints = 0;  // stats::hinted_ops, stale_hints
  route_report info;
  bool gpu_scatter = false;
  std::uint64_t splits = 0;
  std::exception_ptr failure;
  bool log_gathered = false;  // its write ops are in space->log_* (gather_log_ops)
  bool logging = false;  // its redo log record is being written (logger thread)
  bool scattering = false;  // its GPU scatter task was started (the task may clear gpu_scatter)
  /// log_sync::batch: its record's sequence number, until a sync covers it
  /// (the answer waits); 0: nothing to wait for.
  std::uint64_t log_sequence = 0;
  std::exception_ptr log_failure;  // the record could not be written or synced: the batch's answer
  std::chrono::steady_clock::time_point taken;  // when the dispatcher took it up
  std::uint64_t sequence = 0;  // its own, or its first member's (queue order)
  void reset(job* jb, route_space* sp) {
    j = jb;
    taken = std::chrono::steady_clock::now();
    n = jb->ops.size();
    space = sp;
    version.reset();
    columns.reset();
    result_keys = {};
    errors.clear();
    member_results.clear();
    routes = {};
    routed = 0;
    from_copies = false;
    copy_hits = 0;
    caller_writes = 0;
    no_copies = false;
    batch_read = nullptr;
    patched_copies = false;
    gets_only = false;
    validated = false;
    direct = false;
    times = {};
    bytes = {};
    lines = {};
    hinted_ops = 0;
    stale_hints = 0;
    info = {};
    gpu_scatter = false;
    splits = 0;
    failure = nullptr;
    log_gathered = false;
    logging = false;
    scattering = false;
    log_sequence = 0;
    log_failure = nullptr;
  }
};

}  // namespace tandem
