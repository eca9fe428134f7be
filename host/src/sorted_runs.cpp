// Parallel merge of sorted runs of pairs (sorted_runs.hpp).
#include <tandem/host/sorted_runs.hpp>

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem::host {

namespace {

/// Pairs per piece of the merge (about): enough to amortise the searches.
constexpr std::size_t piece_pairs = std::size_t{1} << 16;

}  // namespace

std::size_t merge_sorted_runs(const key_type* keys, const value_type* values, const std::vector<std::size_t>& bounds,
                              key_type* keys_out, value_type* values_out) {
  if (bounds.empty()) throw std::invalid_argument("merge_sorted_runs: no run bounds");
  std::size_t longest = 0;
  for (std::size_t r = 0; r + 1 < bounds.size(); ++r) {
    if (bounds[r + 1] < bounds[r]) {
      throw std::invalid_argument("merge_sorted_runs: run " + std::to_string(r) + " ends before it begins");
    }
    if (bounds[r + 1] - bounds[r] > bounds[longest + 1] - bounds[longest]) longest = r;
  }
  const std::size_t runs = bounds.size() - 1;
  const std::size_t total = bounds.back() - bounds.front();
  if (runs == 0 || total == 0) return 0;

  // Splitters: keys of the longest run at even ranks; piece p takes the keys
  // in [splitter p - 1, splitter p) of every run.
  const std::size_t span = bounds[longest + 1] - bounds[longest];
  const std::size_t pieces = std::max<std::size_t>(1, std::min(span, total / piece_pairs));
  std::vector<std::size_t> cut((pieces + 1) * runs);  // cut[p * runs + r]: where piece p starts in run r
  tbb::parallel_for(std::size_t{0}, pieces + 1, [&](std::size_t p) {
    for (std::size_t r = 0; r < runs; ++r) {
      std::size_t at = bounds[r];
      if (p == pieces) {
        at = bounds[r + 1];
      } else if (p > 0) {
        const key_type splitter = keys[bounds[longest] + p * span / pieces];
        at = static_cast<std::size_t>(std::lower_bound(keys + bounds[r], keys + bounds[r + 1], splitter) - keys);
      }
      cut[p * runs + r] = at;
    }
  });

  // The walk over piece p: emit(key, index of the winning pair) per key.
  auto walk = [&](std::size_t p, auto&& emit) {
    std::vector<std::size_t> head(cut.begin() + static_cast<std::ptrdiff_t>(p * runs),
                                  cut.begin() + static_cast<std::ptrdiff_t>((p + 1) * runs));
    const std::size_t* end = cut.data() + (p + 1) * runs;
    for (;;) {
      bool any = false;
      key_type least = 0;
      for (std::size_t r = 0; r < runs; ++r) {
        if (head[r] < end[r] && (!any || keys[head[r]] < least)) {
          least = keys[head[r]];
          any = true;
        }
      }
      if (!any) return;
      std::size_t winner = 0;
      for (std::size_t r = 0; r < runs; ++r) {
        if (head[r] < end[r] && keys[head[r]] == least) winner = head[r]++;
      }
      emit(least, winner);
    }
  };
  std::vector<std::size_t> offset(pieces + 1, 0);
  tbb::parallel_for(std::size_t{0}, pieces, [&](std::size_t p) {
    std::size_t c = 0;
    walk(p, [&](key_type, std::size_t) { ++c; });
    offset[p + 1] = c;
  });
  for (std::size_t p = 0; p < pieces; ++p) offset[p + 1] += offset[p];
  tbb::parallel_for(std::size_t{0}, pieces, [&](std::size_t p) {
    std::size_t o = offset[p];
    walk(p, [&](key_type k, std::size_t i) {
      keys_out[o] = k;
      values_out[o++] = values[i];
    });
  });
  return offset[pieces];
}

}  // namespace tandem::host
