#pragma once
// Range ops of the leaf phase (private to the host layer): the batch's
// writes in (key, position) order, and the routine that answers lower_bound,
// scan and count on the pre-batch state patched with earlier writes.

#include <tandem/batch.hpp>
#include <tandem/core/types.hpp>
#include <tandem/host/leaf_phase.hpp>
#include <tandem/host/leaf_store.hpp>

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

/// Answers the range ops rg[0..ranges) at their routed index: values and
/// found flags; lower_bound keys into answer_keys; scan entries into
/// scan_out[r] (resized to at least `ranges`). scan_slot[p]: the entry of
/// b.scans() of the scan at position p. Parallel, waits.
void read_ranges(const leaf_store& store, const batch& b, const std::uint32_t* scan_slot, const range_op* rg,
                 std::size_t ranges, const write_list& writes, value_type* values, std::uint8_t* found,
                 key_type* answer_keys, std::vector<std::vector<entry>>& scan_out);

}  // namespace tandem::host::detail
