#pragma once
/// @file
/// The leaf phase of a batch (DESIGN, "One batch", step 3): from a batch
/// routed and sorted by (key, position) to its answers, in that sorted order.
///
/// Takes: the routed batch (`routed_batch_view`, key-sorted, groups by leaf
/// ordinal), the routing version's ordinal -> leaf_id list, and the batch's
/// columns (for the rare range ops: hi, limit, order, status). Gives: one
/// value and one found flag per op *in routed order* (`answers`), lower_bound
/// keys written over `routes.keys` at their routed index, scan entries in
/// batch order (straight into the result's columns), the list of range
/// ops, leaf splits and the change in the key count. Putting the answers
/// back in batch order is the next stage (answer_scatter.hpp).
/// Runs on the calling thread's TBB arena; needs exclusive use of the store.
///
/// 1. Classify: per group, count point ops, range ops and writes (skipped
///    when the batch holds gets only).
/// 2. Read: range ops (lower_bound, scan, count) are answered on the
///    pre-batch state (leaves only read, in parallel), then patched with the
///    batch's writes of lower position in their range: a write's effect is a
///    function of the key's pre-batch state and the earlier writes to it,
///    so the patch needs no result of step 3.
/// 3. Point ops: one task per leaf group walks the group's sorted keys
///    against its leaf (a merge-join: keys ascend, so each lookup starts
///    where the last one ended), in (key, position) order so each key sees
///    its ops in batch order; answers are written sequentially. Groups with
///    writes apply their runs of point ops where they lie in the routed
///    columns (leaf_store::apply_run over a column_run: full leaves split,
///    both halves stay with the task). A task keeps its cache misses
///    overlapping across the ends of its groups: a gets-only batch's gets
///    go through a pipeline (block and window guessed and prefetched, then,
///    some gets behind, located there and the value read); with writes,
///    the lines of the next ops'
///    lookups are prefetched while the current group is applied.
///
/// Routes from an older inner-layout version are fine: every op follows
/// right links from its routed leaf to the leaf that owns its key now.
///
/// Memory and failure: `run_leaf_reads` (steps 1 and 2) reads the leaves
/// only and then makes room for everything step 3 needs: the leaves the
/// batch's splits can take (a bound from each group's adds and the store's
/// count of near-full leaves, see leaf_store::apply; only when it would
/// reserve much beyond the room there is are the leaves read for a tighter
/// one) and the split records. It may throw std::bad_alloc; the store's
/// contents are then unchanged. `run_leaf_writes` (step 3) allocates no
/// memory of its own, so once it starts every write of the batch happens.
///
/// Scan output: when the batch's scans would return more than
/// `max_scan_entries` entries in all, the scans are taken in batch order and
/// each one whose entries would take the total past the cap does not run
/// (status output_limit, no entries, `refused_scans()` lists them); the
/// merge buffers of step 2 hold at most about that many entries too.

#include <tandem/batch.hpp>
#include <tandem/batch_result.hpp>
#include <tandem/core/routed_batch.hpp>
#include <tandem/core/types.hpp>
#include <tandem/host/leaf_store.hpp>
#include <tandem/stats.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

namespace tandem::host {

/// Gets a leaf (a batch's average) from which a gets-only batch is answered
/// group by group (bpa::get_sorted) rather than by a pipeline of lookups
/// that keeps many leaves' misses in flight.
inline constexpr std::size_t dense_gets = 32;

inline constexpr std::uint64_t unknown_made = std::numeric_limits<std::uint64_t>::max();

/// What the leaf phase reads of one batch.
struct leaf_phase_input {
  routed_batch_view* routes = nullptr;  ///< key-sorted; keys of lower_bound ops are overwritten
  std::size_t n = 0;                    ///< ops routed (the batch's size)
  const leaf_id* leaf_ids = nullptr;    ///< ordinal -> leaf of the routing version
  const batch* ops = nullptr;           ///< the batch (hi, limit, order of range ops)
  /// For each scan op's position, its entry of ops->scans() (other positions
  /// unspecified): O(1) where batch::find_scan bisects.
  const std::uint32_t* scan_slot = nullptr;
  /// Batch order; ops not ok are skipped. Scans refused for the output cap
  /// get output_limit here.
  op_status* status = nullptr;
  bool gets_only = false;               ///< every op is a get (routes->types may be null)
  /// Leaves of the routing version (leaf_ids has this many); 0: unknown.
  /// Leaves made since then may lie inside a group's range (right links).
  std::size_t leaf_count = 0;
  /// leaf_store::made() when the routing version was built (unknown_made:
  /// not known; then leaf_count tells, which holds only without merges).
  std::uint64_t leaves_made = unknown_made;
  /// Most scan entries the batch may return in all (see "Scan output").
  std::uint64_t max_scan_entries = std::numeric_limits<std::uint64_t>::max();

  [[nodiscard]] const scan_spec& scan_at(std::uint32_t position) const noexcept {
    return ops->scans()[scan_slot[position]];
  }
};

/// Where the leaf phase answers: values and found flags in routed order
/// (arrays of n, from the caller's pools), scan entries in batch order.
struct sorted_answers {
  value_type* values = nullptr;
  std::uint8_t* found = nullptr;
  /// Receives scan_ops, scan_begin and scan_entries (cleared first); not null.
  tandem::detail::answer_columns* scans = nullptr;
};

/// A range op of the batch, in routed order.
struct range_op {
  std::uint32_t index;  ///< routed index (answers, routes->keys)
  std::uint32_t pos;    ///< batch position
  leaf_id leaf;         ///< routed leaf
  op_type type;
};

/// Range ops, resized without being zeroed (each is written before it is read).
using range_op_vector = std::vector<range_op, tandem::detail::default_init_allocator<range_op>>;

/// A scan that did not run because its entries would have taken the
/// batch's scan output past leaf_phase_input::max_scan_entries.
struct refused_scan {
  std::uint32_t pos;      ///< batch position
  std::uint64_t entries;  ///< entries it would have returned
};

/// Work arrays and by-products of the leaf phase, kept from batch to batch
/// so that a batch neither allocates nor zeroes them again. One per index.
class leaf_phase_workspace {
 public:
  leaf_phase_workspace();
  ~leaf_phase_workspace();
  leaf_phase_workspace(const leaf_phase_workspace&) = delete;
  leaf_phase_workspace& operator=(const leaf_phase_workspace&) = delete;

  struct buffers;
  buffers& get() noexcept { return *buffers_; }
  /// @brief Frees every work array (the next leaf phase allocates afresh).
  /// @throws std::bad_alloc (the arrays kept) when not even their empty
  ///         holder can be had
  void release();

  /// The batch's range ops (valid ones), in routed order, after a run.
  [[nodiscard]] const range_op_vector& ranges() const noexcept;
  /// Scans refused for the output cap, in batch order, after run_leaf_reads.
  [[nodiscard]] const std::vector<refused_scan>& refused_scans() const noexcept;

 private:
  std::unique_ptr<buffers> buffers_;
};

/// One leaf group in this many has its point ops' leaf lines counted
/// (stats::leaf_lines).
inline constexpr std::size_t line_sample_groups = stats::leaf_line_sample;

/// Sampled point ops and the leaf cache lines they read and wrote
/// (bpa::lookup_lines).
struct leaf_line_count {
  std::uint64_t ops = 0, lines = 0;
  leaf_line_count& operator+=(const leaf_line_count& o) noexcept {
    ops += o.ops;
    lines += o.lines;
    return *this;
  }
  friend leaf_line_count operator+(leaf_line_count a, const leaf_line_count& b) noexcept { return a += b; }
};

struct leaf_phase_report {
  double order = 0;  ///< classifying ops, listing writes and range ops
  double read = 0;   ///< range ops
  double leaf = 0;   ///< point ops
  std::int64_t key_delta = 0;           ///< keys added minus keys removed
  std::vector<split_record> splits;     ///< one per leaf split
  /// Some split found no room for its record (the reserved bound did not
  /// hold): `splits` is incomplete, rebuild the leaf table from the store.
  bool splits_lost = false;
  std::size_t split_bound = 0;          ///< splits room was made for
  /// Leaves that runs with erases left with at most leaf_store::merge_below
  /// keys (each a group's last leaf; a leaf may be listed twice).
  std::vector<leaf_id> underfull;
  std::size_t bytes = 0;                ///< bytes of batch arrays read and answers written
  std::size_t read_bytes = 0;           ///< bytes of scan entries written by the range ops
  /// The sampled groups' point ops (one group in line_sample_groups) and
  /// the leaf lines they moved, counted after they ran.
  leaf_line_count lines;
  /// Point ops of a batch routed with hints (routed_batch_view::hinted)
  /// answered at their hint, and those whose hint was missing or whose
  /// hinted block did not hold the key (a stale guide: the index's signal
  /// to refresh its guides).
  std::size_t hinted_ops = 0;
  std::size_t stale_hints = 0;
};

/// @brief Steps 1 and 2 of the leaf phase, then room for step 3 (waits):
///        classifies the ops, answers every range op, refuses the scans past
///        the output cap, and makes room for the writes (leaves for the
///        splits, split records). Reads the leaves only (a scan or a
///        lower_bound may sort a leaf's blocks, which changes no key).
/// @throws std::bad_alloc with the store's contents unchanged
void run_leaf_reads(leaf_store& store, const leaf_phase_input& in, sorted_answers out, leaf_phase_report& report,
                    leaf_phase_workspace& workspace);

/// @brief Step 3 of the leaf phase (waits), after run_leaf_reads with the
///        same arguments: the point ops. Allocates no memory of its own.
void run_leaf_writes(leaf_store& store, const leaf_phase_input& in, sorted_answers out, leaf_phase_report& report,
                     leaf_phase_workspace& workspace);

/// @brief Runs the leaf phase of one batch on `store` (waits): reads, then
///        writes.
void run_leaf_phase(leaf_store& store, const leaf_phase_input& in, sorted_answers out, leaf_phase_report& report,
                    leaf_phase_workspace& workspace);

}  // namespace tandem::host
