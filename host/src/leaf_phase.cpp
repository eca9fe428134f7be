// The leaf phase (leaf_phase.hpp): takes a key-sorted routed batch, gives
// its answers in routed order. Runs on the dispatcher's TBB arena.
#include <tandem/host/leaf_phase.hpp>

#include <tandem/host/detail/range_read.hpp>
#include <tandem/host/detail/scratch.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>

namespace tandem::host {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

bool is_point(op_type t) noexcept { return t <= op_type::erase; }
bool is_write(op_type t) noexcept { return t == op_type::put || t == op_type::insert || t == op_type::erase; }

op_kind to_kind(op_type t) noexcept {
  switch (t) {
    case op_type::put: return op_kind::put;
    case op_type::insert: return op_kind::insert;
    case op_type::erase: return op_kind::erase;
    default: return op_kind::get;
  }
}

/// Groups per task: enough work to amortise scheduling, few enough to balance.
constexpr std::size_t group_grain = 16;
/// A task starts loading a group's leaf header this many groups ahead.
constexpr std::size_t prefetch_distance = 4;

/// Per worker: the point ops of one group, as a run for leaf_store::apply.
struct run_buffers {
  std::vector<point_op> ops;
  std::vector<point_result> results;
  std::vector<std::uint32_t> index;  // routed index of each op of the run
  std::vector<split_record> splits;
  std::int64_t key_delta = 0;
};

}  // namespace

struct leaf_phase_workspace::buffers {
  std::vector<std::uint32_t> n_range, n_write;  // per group, then prefix sums
  std::vector<char> has_ordered_read;
  std::vector<range_op> ranges;
  ::tandem::host::detail::scratch<key_type> w_key;
  ::tandem::host::detail::scratch<std::uint32_t> w_pos;
  ::tandem::host::detail::scratch<value_type> w_value;
  ::tandem::host::detail::scratch<op_type> w_type;
  ::tandem::host::detail::scratch<leaf_id> w_leaf;
  ::tandem::host::detail::scan_buffers scan_out;
  tbb::enumerable_thread_specific<run_buffers> runs;
};

leaf_phase_workspace::leaf_phase_workspace() : buffers_(std::make_unique<buffers>()) {}
leaf_phase_workspace::~leaf_phase_workspace() = default;
const std::vector<range_op>& leaf_phase_workspace::ranges() const noexcept { return buffers_->ranges; }

void run_leaf_phase(leaf_store& store, const leaf_phase_input& in, sorted_answers out, leaf_phase_report& report,
                    leaf_phase_workspace& workspace) {
  leaf_phase_workspace::buffers& ws = workspace.get();
  routed_batch_view& rt = *in.routes;
  const std::size_t g_count = rt.groups;
  const std::uint32_t* gb = rt.group_begin;
  const key_type* keys = rt.keys;
  const op_type* types = reinterpret_cast<const op_type*>(rt.types);
  ws.ranges.clear();
  report.splits.clear();
  report.key_delta = 0;
  report.bytes = in.n * (sizeof(key_type) + sizeof(value_type) + 1);
  report.read_bytes = 0;

  // ---- 1. classify ----------------------------------------------------------
  auto t0 = clock_type::now();
  std::size_t ranges = 0, writes = 0;
  if (!in.gets_only) {
    report.bytes += in.n * (sizeof(std::uint64_t) + 1);
    ws.n_range.assign(g_count + 1, 0);
    ws.n_write.assign(g_count + 1, 0);
    ws.has_ordered_read.assign(g_count, 0);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, g_count, group_grain),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        for (std::size_t g = r.begin(); g < r.end(); ++g) {
                          std::uint32_t nr = 0, nw = 0;
                          char ordered = 0;
                          for (std::uint32_t i = gb[g]; i < gb[g + 1]; ++i) {
                            const op_type t = types[i];
                            if (is_point(t)) {
                              nw += is_write(t);
                            } else if (t <= op_type::count && in.status[rt.positions[i]] == op_status::ok) {
                              ++nr;
                              ordered |= t == op_type::lower_bound ||
                                         (t == op_type::scan &&
                                          in.scan_at(rt.positions[i]).order == scan_order::ordered);
                            }
                          }
                          ws.n_range[g] = nr;
                          ws.n_write[g] = nw;
                          ws.has_ordered_read[g] = ordered;
                        }
                      });
    std::exclusive_scan(ws.n_range.begin(), ws.n_range.end(), ws.n_range.begin(), std::uint32_t{0});
    std::exclusive_scan(ws.n_write.begin(), ws.n_write.end(), ws.n_write.begin(), std::uint32_t{0});
    ranges = ws.n_range[g_count];
    writes = ws.n_write[g_count];
  }
  // The writes in (key, position) order are needed only to patch range ops.
  ::tandem::host::detail::write_list wl;
  wl.n = ranges ? writes : 0;
  if (ranges) {
    ws.ranges.resize(ranges);
    wl.key = ws.w_key.get(wl.n);
    wl.pos = ws.w_pos.get(wl.n);
    wl.value = ws.w_value.get(wl.n);
    wl.type = ws.w_type.get(wl.n);
    wl.leaf = ws.w_leaf.get(wl.n);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, g_count, group_grain),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        for (std::size_t g = r.begin(); g < r.end(); ++g) {
                          std::uint32_t ri = ws.n_range[g], wi = ws.n_write[g];
                          if (ri == ws.n_range[g + 1] && wi == ws.n_write[g + 1]) continue;
                          const leaf_id routed_leaf = in.leaf_ids[rt.group_ordinal[g]];
                          for (std::uint32_t i = gb[g]; i < gb[g + 1]; ++i) {
                            const op_type t = types[i];
                            const std::uint32_t p = rt.positions[i];
                            if (is_write(t)) {
                              wl.key[wi] = keys[i];
                              wl.pos[wi] = p;
                              wl.value[wi] = rt.args[i];
                              wl.type[wi] = t;
                              wl.leaf[wi++] = routed_leaf;
                            } else if (!is_point(t) && t <= op_type::count && in.status[p] == op_status::ok) {
                              ws.ranges[ri++] = range_op{i, p, routed_leaf, t};
                            }
                          }
                        }
                      });
  }
  report.order = seconds_since(t0);

  // ---- 2. range ops on the pre-batch state, patched --------------------------
  t0 = clock_type::now();
  if (ranges) {
    tbb::parallel_for(std::size_t{0}, g_count, [&](std::size_t g) {
      if (ws.has_ordered_read[g]) store[in.leaf_ids[rt.group_ordinal[g]]].data.sort();  // scans then copy nothing
    });
  }
  report.read_bytes = ::tandem::host::detail::read_ranges(store, in, ws.ranges.data(), ranges, wl, out.values,
                                                          out.found, rt.keys, ws.scan_out, *out.scans);
  report.read = seconds_since(t0);

  // ---- 3. point ops, one task per leaf group ----------------------------------
  t0 = clock_type::now();
  for (run_buffers& rb : ws.runs) {
    rb.splits.clear();
    rb.key_delta = 0;
  }
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, g_count, group_grain),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      run_buffers& rb = ws.runs.local();
                      auto prefetch_leaf = [&](std::size_t g) {
                        if (g < r.end()) store[in.leaf_ids[rt.group_ordinal[g]]].prefetch();
                      };
                      for (std::size_t g = r.begin(); g < r.begin() + prefetch_distance; ++g) prefetch_leaf(g);
                      for (std::size_t g = r.begin(); g < r.end(); ++g) {
                        prefetch_leaf(g + prefetch_distance);
                        const std::uint32_t b = gb[g], e = gb[g + 1];
                        leaf_id id = in.leaf_ids[rt.group_ordinal[g]];
                        if (in.gets_only || ws.n_write[g] == ws.n_write[g + 1]) {  // no writes in the group
                          // Reads only: runs of gets merge-joined against the
                          // leaf that owns them now.
                          for (std::uint32_t i = b; i < e;) {
                            if (!in.gets_only && types[i] != op_type::get) {
                              if (types[i] > op_type::count || in.status[rt.positions[i]] != op_status::ok) {
                                out.values[i] = 0;
                                out.found[i] = 0;
                              }
                              ++i;
                              continue;
                            }
                            id = store.walk_right(id, keys[i]);
                            const auto& l = store[id];
                            std::uint32_t j = i + 1;
                            while (j < e && keys[j] <= l.high && (in.gets_only || types[j] == op_type::get)) ++j;
                            l.data.get_sorted(keys + i, j - i, out.values + i, out.found + i);
                            i = j;
                          }
                          continue;
                        }
                        rb.ops.clear();
                        rb.index.clear();
                        for (std::uint32_t i = b; i < e; ++i) {
                          const op_type t = types[i];
                          if (is_point(t)) {
                            rb.ops.push_back({keys[i], rt.args[i], to_kind(t)});
                            rb.index.push_back(i);
                          } else if (t > op_type::count || in.status[rt.positions[i]] != op_status::ok) {
                            out.values[i] = 0;
                            out.found[i] = 0;
                          }
                        }
                        rb.results.resize(rb.ops.size());
                        store.apply(id, rb.ops.data(), rb.ops.size(), rb.results.data(), &rb.splits);
                        for (std::size_t k = 0; k < rb.ops.size(); ++k) {
                          const point_result& res = rb.results[k];
                          const std::uint32_t i = rb.index[k];
                          out.values[i] = res.found ? res.value : 0;
                          out.found[i] = res.found;
                          const op_kind kind = rb.ops[k].kind;
                          if ((kind == op_kind::put || kind == op_kind::insert) && !res.found) ++rb.key_delta;
                          if (kind == op_kind::erase && res.found) --rb.key_delta;
                        }
                      }
                    });
  for (run_buffers& rb : ws.runs) {
    report.splits.insert(report.splits.end(), rb.splits.begin(), rb.splits.end());
    report.key_delta += rb.key_delta;
  }
  report.leaf = seconds_since(t0);
}

}  // namespace tandem::host
