#pragma once
// Range ops of the leaf phase (private to the host layer): the batch's
// writes in (key, position) order, and the routine that answers lower_bound,
// scan and count on the pre-batch state patched with earlier writes.

#include <tandem/batch.hpp>
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

/// Where the scans of a batch put their entries: each worker appends to its
/// own buffer (kept, so steady-state batches allocate nothing), and a scan's
/// entries are a slice of one buffer.
struct scan_buffers {
  struct slice {
    const entry_vector* buffer = nullptr;
    std::size_t offset = 0;
    std::size_t count = 0;
  };
  tbb::enumerable_thread_specific<entry_vector> buffers;
  std::vector<slice> slices;  ///< per range op

  [[nodiscard]] entry_span entries(std::size_t r) const noexcept {
    const slice& s = slices[r];
    return s.count ? entry_span(s.buffer->data() + s.offset, s.count) : entry_span();
  }
};

/// Answers the range ops rg[0..ranges) at their routed index: values and
/// found flags; lower_bound keys into answer_keys; scan entries into
/// `out`: scan r's entries are out.slices[r] (into the workers' buffers,
/// kept from batch to batch). Bounds, limits and orders come from the
/// batch of `in`. Parallel, waits.
void read_ranges(const leaf_store& store, const leaf_phase_input& in, const range_op* rg, std::size_t ranges,
                 const write_list& writes, value_type* values, std::uint8_t* found, key_type* answer_keys,
                 scan_buffers& out);

}  // namespace tandem::host::detail
