#pragma once
// Range ops of the leaf phase (private to the host layer): the batch's
// writes in (key, position) order, and the routine that answers lower_bound,
// scan and count on the pre-batch state patched with earlier writes.

#include <tandem/batch.hpp>
#include <tandem/batch_result.hpp>
#include <tandem/core/types.hpp>
#include <tandem/host/leaf_phase.hpp>
#include <tandem/host/leaf_store.hpp>

#include <oneapi/tbb/enumerable_thread_specific.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::host::detail {

/// The batch's writes in (key, position) order (arrays of the workspace).
struct write_list {
  key_type* key = nullptr;
  std::uint32_t* pos = nullptr;
  value_type* value = nullptr;
  op_type* type = nullptr;
  leaf_id* leaf = nullptr;  ///< routed leaf (owns the key or lies left of its owner)
  std::size_t n = 0;

  [[nodiscard]] std::size_t first_at_or_above(key_type k) const {
    return static_cast<std::size_t>(std::lower_bound(key, key + n, k) - key);
  }
  [[nodiscard]] std::size_t first_above(key_type k) const {
    return static_cast<std::size_t>(std::upper_bound(key, key + n, k) - key);
  }
  /// End of the run of writes to key[i].
  [[nodiscard]] std::size_t run_end(std::size_t i, std::size_t limit) const {
    const key_type k = key[i];
    while (i < limit && key[i] == k) ++i;
    return i;
  }
};

/// Scratch of the range ops, kept from batch to batch (steady-state batches
/// allocate nothing). Every scan's entry count is known before its entries
/// are copied, so each goes straight to its place in the result:
/// - "Placed": a scan from lo up to UINT64_MAX (limit at most 2^18) whose
///   range holds, before the batch, at least the batch's longest such limit
///   plus its erases returns exactly its limit. Its entries are copied from
///   the leaves (merged with the batch's writes where they lie in reach)
///   in a pass of their own, in key order.
/// - Otherwise, with no write of the batch in its reach, it has the
///   pre-batch count, capped at the limit, and streams from the leaves.
/// - A short scan below the batch's first write in its range, a scan with
///   writes in its range, and every lower_bound are copied or merged into
///   the worker's buffer first and copied from there. Under an output cap, a
///   merged scan that finds the cap's room taken by others keeps only its
///   count (deferred) and is merged again straight into the result if it is
///   to run.
struct scan_buffers {
  /// Scans and their entries, summed over part of the scan table.
  struct running {
    std::uint64_t scans = 0, entries = 0;
  };
  struct slice {
    const entry_vector* buffer = nullptr;  ///< null: the scan streams into the result
    std::size_t offset = 0;                ///< in buffer
    std::size_t count = 0;                 ///< entries of the scan
    std::uint32_t slot = 0;                ///< in the batch's scan table
    bool deferred = false;                 ///< merged again in place (buffer is null)
    bool placed = false;                   ///< returns its limit; copied in the placing pass
    bool ordered = true;                   ///< the scan's order (scan_order::ordered)
    key_type lo = 0, hi = 0;               ///< the scan's bounds (pass 3 reads no batch column)
  };
  /// A worker's merge buffer and the entries of the output cap it holds
  /// (taken in chunks, kept for the worker's next scans).
  struct merge_buffer {
    entry_vector entries;
    std::uint64_t held = 0;
  };
  tbb::enumerable_thread_specific<merge_buffer> buffers;
  tbb::enumerable_thread_specific<entry_vector> spill;  ///< an unordered scan's last leaf
  std::vector<slice> slices;              ///< per range op
  std::vector<std::uint32_t> op_of;       ///< per scan-table entry: its range op, or none
  std::vector<std::uint64_t> slot_count;  ///< per scan-table entry that ran: its entry count (top bit: placed)
  std::vector<std::uint64_t> slot_dest;   ///< per scan-table entry that runs: its first entry in the result
  std::vector<running> chunk_starts;      ///< pass 2: what the scan table's chunks before each one hold
  std::vector<refused_scan> refused;      ///< scans refused for the output cap, in batch order
};

/// Answers the range ops rg[0..ranges) at their routed index: values and
/// found flags; lower_bound keys into answer_keys; the entries of every
/// scan, in batch order, into `result` (scan_ops, scan_begin,
/// scan_entries). Bounds, limits and orders come from the batch of `in`;
/// scans past in.max_scan_entries are refused (in.status, scratch.refused).
/// Parallel, waits.
/// @return bytes of scan entries written.
std::size_t read_ranges(const leaf_store& store, const leaf_phase_input& in, const range_op* rg, std::size_t ranges,
                        const write_list& writes, value_type* values, std::uint8_t* found, key_type* answer_keys,
                        scan_buffers& scratch, tandem::detail::answer_columns& result);

}  // namespace tandem::host::detail
