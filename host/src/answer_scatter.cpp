// Answers back to batch order on the host (answer_scatter.hpp). Runs on the
// dispatcher's TBB arena after the leaf phase.
#include <tandem/host/answer_scatter.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <functional>
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

std::size_t write_lower_bound_keys(const leaf_phase_workspace& ws, const leaf_phase_input& in,
                                   key_type* result_keys) {
  const range_op_vector& ranges = ws.ranges();
  const routed_batch_view& routes = *in.routes;
  tbb::enumerable_thread_specific<std::size_t> written(0);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, ranges.size(), std::size_t{1} << 12),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      std::size_t c = 0;
                      for (std::size_t i = r.begin(); i < r.end(); ++i) {
                        const range_op& o = ranges[i];
                        if (o.type != op_type::lower_bound) continue;
                        result_keys[o.pos] = routes.keys[o.index];
                        ++c;
                      }
                      written.local() += c;
                    });
  return written.combine(std::plus<>()) * sizeof(key_type);
}

}  // namespace tandem::host
