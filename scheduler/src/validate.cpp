// Step 1 of a batch (index_impl.hpp): check the ops in one parallel pass
// over the type column (keys and args read for range ops only; a slice of
// point ops only is counted and marked ok without a branch per op), count them
// by type, take the answer columns from the pool and fill the status column.
// Runs on the look-ahead thread (or the dispatcher), in the arena.
#include "device_columns.hpp"
#include "index_impl.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <array>

namespace tandem {
namespace {

// `i`: the op's index in the batch its submitter built (job::local_index).
std::string op_text(std::size_t i, op_type t) {
  return "op " + std::to_string(i) + " (" + to_string(t) + ")";
}

struct check_state {
  std::array<std::uint64_t, op_type_count> counts{};
  std::vector<std::pair<std::size_t, std::string>> bad;
};

/// Number of bytes equal to v among t[0..n): byte counters over runs of 255
/// (they cannot wrap), which the compiler vectorises.
std::uint64_t count_equal(const std::uint8_t* t, std::size_t n, std::uint8_t v) {
  std::uint64_t total = 0;
  for (std::size_t b = 0; b < n; b += 255) {
    const std::size_t e = std::min(n, b + 255);
    std::uint8_t k = 0;
    for (std::size_t i = b; i < e; ++i) k = static_cast<std::uint8_t>(k + (t[i] == v));
    total += k;
  }
  return total;
}

/// Adds the counts of n op types to `counts` when they are all point ops
/// (nothing to check: the common case): one pass for the smallest and
/// largest type, then one per type between them (the largest one's count is
/// what is left), so a slice of one op type costs one pass.
/// @return false, counting nothing, when any of them is not.
bool count_point_ops(const op_type* types, std::size_t n, std::array<std::uint64_t, op_type_count>& counts) {
  const auto* t = reinterpret_cast<const std::uint8_t*>(types);
  constexpr auto last_point = static_cast<std::uint8_t>(op_type::lower_bound);
  std::uint8_t lowest = 0xff, highest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    highest = std::max(highest, t[i]);
    lowest = std::min(lowest, t[i]);
  }
  if (n == 0) return true;
  if (highest > last_point) return false;
  std::uint64_t seen = 0;
  for (std::uint8_t v = lowest; v < highest; ++v) {
    const std::uint64_t k = count_equal(t, n, v);
    counts[v] += k;
    seen += k;
  }
  counts[highest] += n - seen;
  return true;
}

}  // namespace

void index::impl::validate(prepared& p) {
  const auto t0 = clock_type::now();
  const batch& b = p.j->ops;
  const std::size_t n = b.size();
  p.columns = answers_->take(n);
  if (p.j->in_place) {  // answers straight into the caller's arrays, where given
    if (p.j->values_out) p.columns->values = p.j->values_out;
    if (p.j->found_out) p.columns->found = p.j->found_out;
  }
  op_status* status = p.columns->status;
  const op_type* types = b.types();
  const key_type* lo = b.keys();
  const std::uint64_t* hi = b.args();
  // Each scan's entry of the scan table by position: later stages find a
  // scan's limit and order in O(1).
  const std::vector<scan_spec>& scans = b.scans();
  std::uint32_t* slot = scans.empty() ? nullptr : p.space->scan_slot.get(n);
  tbb::parallel_for(std::size_t{0}, scans.size(), [&](std::size_t s) {
    slot[scans[s].index] = static_cast<std::uint32_t>(s);
  });
  tbb::enumerable_thread_specific<check_state> checks;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, std::size_t{1} << 12),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      check_state& c = checks.local();
                      if (count_point_ops(types + r.begin(), r.size(), c.counts)) {
                        std::fill(status + r.begin(), status + r.end(), op_status::ok);
                        return;
                      }
                      for (std::size_t i = r.begin(); i < r.end(); ++i) {
                        const op_type t = types[i];
                        status[i] = op_status::ok;
                        if (t <= op_type::lower_bound) {
                          ++c.counts[static_cast<std::size_t>(t)];
                          continue;
                        }
                        if (t > op_type::count) {
                          status[i] = op_status::invalid;
                          c.bad.emplace_back(i, "op " + std::to_string(p.j->local_index(i)) + ": unknown op type " +
                                                    std::to_string(static_cast<int>(t)));
                          continue;
                        }
                        ++c.counts[static_cast<std::size_t>(t)];
                        if (lo[i] > hi[i]) {
                          status[i] = op_status::invalid;
                          c.bad.emplace_back(i, op_text(p.j->local_index(i), t) + ": lo " + std::to_string(lo[i]) + " > hi " +
                                                    std::to_string(hi[i]));
                        } else if (t == op_type::scan) {
                          const scan_spec& s = scans[slot[i]];
                          if (s.limit > max_scan_limit) {
                            status[i] = op_status::invalid;
                            c.bad.emplace_back(i, op_text(p.j->local_index(i), t) + ": limit " + std::to_string(s.limit) +
                                                      " exceeds max_scan_limit " + std::to_string(max_scan_limit));
                          }
                        }
                      }
                    });
  for (check_state& c : checks) {
    for (std::size_t t = 0; t < op_type_count; ++t) p.info.ops_by_type[t] += c.counts[t];
    for (auto& e : c.bad) p.errors.push_back(std::move(e));
  }
  std::sort(p.errors.begin(), p.errors.end());
  p.gets_only = p.info.ops_by_type[static_cast<std::size_t>(op_type::get)] == n;
  p.times.validate = seconds_since(t0);
  const std::uint64_t ranges = p.info.ops_by_type[static_cast<std::size_t>(op_type::scan)] +
                               p.info.ops_by_type[static_cast<std::size_t>(op_type::count)];
  p.bytes.validate = n * (sizeof(op_type) + sizeof(op_status)) + ranges * (sizeof(key_type) + sizeof(std::uint64_t));
  // Device columns copied to the host at the call: their copies down and up.
  if (p.j->device && !p.j->device->on_gpu) p.bytes.pcie += p.j->device->pcie_bytes;
}

}  // namespace tandem
