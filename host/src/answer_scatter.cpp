// Answers back to batch order on the host (answer_scatter.hpp). Runs on the
// dispatcher's TBB arena after the leaf phase.
#include <tandem/host/answer_scatter.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace tandem::host {

void scatter_answers(const std::uint32_t* positions, const value_type* values, const std::uint8_t* found,
                     std::size_t n, value_type* values_out, std::uint8_t* found_out) {
  constexpr std::size_t grain = std::size_t{1} << 14;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, grain), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i < r.end(); ++i) {
      const std::uint32_t p = positions[i];
      values_out[p] = values[i];
      found_out[p] = found[i];
    }
  });
}

std::size_t finish_ranges(const leaf_phase_workspace& ws, const leaf_phase_input& in, key_type* result_keys,
                          tandem::detail::answer_columns& columns) {
  const std::vector<range_op>& ranges = ws.ranges();
  const routed_batch_view& routes = *in.routes;
  columns.scan_ops.clear();
  columns.scan_begin.clear();
  columns.scan_entries.clear();
  if (ranges.empty()) return 0;
  // Scans in batch order without a sort: the scan table is in batch order,
  // and in.scan_slot gives each scan's place in it.
  constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  std::vector<std::uint32_t> order(in.ops->scans().size(), none);  // range op of each scan-table entry
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, ranges.size(), std::size_t{1} << 12),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t i = r.begin(); i < r.end(); ++i) {
                        const range_op& o = ranges[i];
                        if (o.type == op_type::lower_bound) result_keys[o.pos] = routes.keys[o.index];
                        if (o.type == op_type::scan) order[in.scan_slot[o.pos]] = static_cast<std::uint32_t>(i);
                      }
                    });
  std::size_t scans = 0;
  std::uint64_t total = 0;
  for (const std::uint32_t r : order) {  // scans that did not run (invalid ones) have no range op
    if (r == none) continue;
    order[scans++] = r;
    columns.scan_ops.push_back(ranges[r].pos);
    columns.scan_begin.push_back(total);
    total += ws.scan_output(r).size();
  }
  columns.scan_begin.push_back(total);
  columns.scan_entries.resize(total);
  tbb::parallel_for(std::size_t{0}, scans, [&](std::size_t s) {
    const entry_span from = ws.scan_output(order[s]);
    std::copy(from.begin(), from.end(), columns.scan_entries.begin() + static_cast<std::ptrdiff_t>(columns.scan_begin[s]));
  });
  return total * sizeof(entry);
}

}  // namespace tandem::host
