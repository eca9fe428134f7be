#pragma once
/// @file
/// The leaf phase of a batch (DESIGN, "One batch", steps 3, 4, 5 and 7): from
/// ops grouped by leaf to the batch's answers.
///
/// 1. Order: each leaf's group is sorted by (key, position); its point ops
///    (get/put/insert/erase) and its range ops (lower_bound/scan/count) are
///    separated, and the batch's writes are listed in (key, position) order.
/// 2. Read: every range op is answered on the pre-batch state (leaves are
///    only read, in parallel), then *patched* with the batch's writes of
///    lower position in its range. A write's effect on a key is a function
///    of the key's pre-batch state and the earlier writes to it, so the patch
///    needs no result of the write phase.
/// 3. Write: one task per leaf group applies the group's point ops in (key,
///    position) order, so each key sees its ops in batch order; full leaves
///    split, both halves staying with the task; splits are reported.
/// 4. Complete: point results scattered to batch order, scans flattened.
///
/// Together this gives every op the answer it would get if the batch's ops
/// ran one by one in batch order.

#include <tandem/batch.hpp>
#include <tandem/batch_result.hpp>
#include <tandem/core/types.hpp>
#include <tandem/host/leaf_store.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace tandem::host {

/// Ops grouped by the leaf they were routed to: group g holds positions
/// `positions[group_begin[g] .. group_begin[g+1])` (increasing inside the
/// group) and was routed to `group_leaf[g]`; groups in key order.
struct route_groups {
  const std::uint32_t* positions = nullptr;
  const std::uint32_t* group_begin = nullptr;
  const leaf_id* group_leaf = nullptr;
  std::size_t groups = 0;
};

/// Work arrays of the leaf phase, kept from batch to batch so that a batch
/// neither allocates nor zeroes them again. One per index; not shared by two
/// leaf phases at once.
class leaf_phase_workspace {
 public:
  leaf_phase_workspace();
  ~leaf_phase_workspace();
  leaf_phase_workspace(const leaf_phase_workspace&) = delete;
  leaf_phase_workspace& operator=(const leaf_phase_workspace&) = delete;

  struct buffers;
  buffers& get() noexcept { return *buffers_; }

 private:
  std::unique_ptr<buffers> buffers_;
};

struct leaf_phase_times {
  double order = 0;
  double read = 0;
  double leaf = 0;
  double complete = 0;
};

/// @brief Runs the leaf phase of one batch on `store`.
/// @param ops     the batch, `n` ops
/// @param result  sized to `n` by the caller, invalid ops already marked
///                (they are skipped); gets every other answer
/// @param splits  gets one record per leaf split
/// @note Uses the calling thread's TBB arena. Needs exclusive use of `store`.
void run_leaf_phase(leaf_store& store, const op* ops, std::size_t n, const route_groups& groups,
                    batch_result& result, std::vector<split_record>& splits, leaf_phase_times& times,
                    leaf_phase_workspace& workspace);

}  // namespace tandem::host
