// The leaf phase (leaf_phase.hpp): takes a key-sorted routed batch, gives
// its answers in routed order. Runs on the dispatcher's TBB arena.
#include <tandem/host/leaf_phase.hpp>

#include <tandem/host/detail/fault_point.hpp>
#include <tandem/host/detail/range_read.hpp>
#include <tandem/host/detail/scratch.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <stdexcept>

namespace tandem::host {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

bool is_point(op_type t) noexcept { return t <= op_type::erase; }
bool is_write(op_type t) noexcept { return t == op_type::put || t == op_type::insert || t == op_type::erase; }
bool may_add(op_type t) noexcept { return t == op_type::put || t == op_type::insert; }

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

/// A group's point ops go to leaf_store::apply in runs of at most this many:
/// every thread's run buffers are sized before the writes start.
constexpr std::size_t max_run = 4096;

/// Per thread slot of the arena: the point ops of one run of a group. On
/// lines of its own: the slots sit side by side in one vector and their
/// fill pointers move with every op.
struct alignas(128) run_buffers {
  std::vector<point_op> ops;
  std::vector<point_result> results;
  std::vector<std::uint32_t> index;  // routed index of each op of the run
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
  // From classifying: the splits the groups with at least near_full_slack
  // adds can make, read off their counts (2 * (1 + adds / adds_per_split)
  // each), and the largest group with writes.
  std::uint64_t loose_split_bound = 0;
  std::size_t largest_write_group = 0;
  // Made before the writes (run_leaf_reads), used by them.
  std::vector<run_buffers> runs;  // per thread slot (tbb::this_task_arena::current_thread_index)
  std::size_t run_room = 0;       // ops each run buffer holds
  ::tandem::host::detail::scratch<split_record> split_room;
  split_sink splits;
};

leaf_phase_workspace::leaf_phase_workspace() : buffers_(std::make_unique<buffers>()) {}
leaf_phase_workspace::~leaf_phase_workspace() = default;
const std::vector<range_op>& leaf_phase_workspace::ranges() const noexcept { return buffers_->ranges; }
const std::vector<refused_scan>& leaf_phase_workspace::refused_scans() const noexcept {
  return buffers_->scan_out.refused;
}

namespace {

/// Splits the batch's writes can make, reading the leaves they reach: per
/// group with adds, 2 * (leaves that can fill + adds / adds_per_split)
/// (leaf_store::apply). Parallel.
std::uint64_t split_bound(const leaf_store& store, const leaf_phase_input& in, const leaf_phase_workspace::buffers& ws) {
  const routed_batch_view& rt = *in.routes;
  const auto* types = reinterpret_cast<const op_type*>(rt.types);
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, rt.groups, group_grain), std::uint64_t{0},
      [&](const tbb::blocked_range<std::size_t>& r, std::uint64_t sum) {
        // The leaves' first lines are fetched a few groups ahead (the writes
        // read them next anyway).
        auto prefetch_leaf = [&](std::size_t g) {
          if (g < r.end() && ws.n_write[g] != ws.n_write[g + 1]) store[in.leaf_ids[rt.group_ordinal[g]]].prefetch();
        };
        for (std::size_t g = r.begin(); g < r.begin() + prefetch_distance; ++g) prefetch_leaf(g);
        for (std::size_t g = r.begin(); g < r.end(); ++g) {
          prefetch_leaf(g + prefetch_distance);
          if (ws.n_write[g] == ws.n_write[g + 1]) continue;
          const std::uint32_t b = rt.group_begin[g], e = rt.group_begin[g + 1];
          std::uint64_t adds = 0;
          for (std::uint32_t i = b; i < e; ++i) adds += may_add(types[i]);
          if (adds == 0) continue;
          std::uint64_t can_fill = 0;
          const key_type last = rt.keys[e - 1];
          for (leaf_id id = in.leaf_ids[rt.group_ordinal[g]];; ) {
            const auto& l = store[id];
            can_fill += l.data.size() + adds > bpa::capacity;
            if (l.high >= last) break;
            id = l.right;
          }
          if (can_fill != 0) sum += 2 * (can_fill + adds / leaf_store::adds_per_split);
        }
        return sum;
      },
      [](std::uint64_t x, std::uint64_t y) { return x + y; });
}

/// Room for everything the writes need: leaves for their splits, split
/// records, run buffers for every thread slot of the current arena.
void reserve_for_writes(leaf_store& store, const leaf_phase_input& in, leaf_phase_report& report,
                        leaf_phase_workspace::buffers& ws) {
  ws.splits.records = nullptr;
  ws.splits.capacity = 0;
  ws.splits.count.store(0, std::memory_order_relaxed);
  report.split_bound = 0;
  if (ws.largest_write_group == 0) return;  // gets only, or no group with writes
  // A bound that reads no leaf (leaf_store::apply): a group with fewer adds
  // than near_full_slack splits only near-full leaves, each at most twice;
  // one with more may split its routed leaf twice for free and then once
  // per adds_per_split adds. Leaves made since the routing version may lie
  // inside a group's range: each may take two splits beside the groups' own.
  const std::size_t leaves = store.leaf_count();
  const std::size_t newer = in.leaf_count != 0 && in.leaf_count <= leaves ? leaves - in.leaf_count : leaves;
  std::uint64_t bound = ws.loose_split_bound + 2 * std::uint64_t{store.near_full()} + 2 * std::uint64_t{newer};
  // Room is address space until leaves are built in it; but when the bound
  // would reserve much beyond the room there is, the leaves the writes
  // reach are read for a tighter one.
  if (bound > store.room() && bound > leaves / 4) bound = std::min(bound, split_bound(store, in, ws));
  store.reserve(static_cast<std::size_t>(bound));
  ws.splits.records = ws.split_room.get(bound);
  ws.splits.capacity = bound;
  if (report.splits.capacity() < bound) {
    ::tandem::host::detail::allocation_point();
    report.splits.reserve(bound);
  }
  report.split_bound = bound;

  const auto slots = static_cast<std::size_t>(tbb::this_task_arena::max_concurrency());
  const std::size_t room = std::min(max_run, ws.largest_write_group);
  if (ws.runs.size() < slots) {
    ::tandem::host::detail::allocation_point();
    ws.runs.resize(slots);
  }
  for (std::size_t t = 0; t < slots; ++t) {
    run_buffers& rb = ws.runs[t];
    if (rb.ops.capacity() >= room && rb.results.capacity() >= room && rb.index.capacity() >= room) continue;
    ::tandem::host::detail::allocation_point();
    rb.ops.reserve(room);
    rb.results.reserve(room);
    rb.index.reserve(room);
  }
  ws.run_room = room;
}

}  // namespace

void run_leaf_phase(leaf_store& store, const leaf_phase_input& in, sorted_answers out, leaf_phase_report& report,
                    leaf_phase_workspace& workspace) {
  run_leaf_reads(store, in, out, report, workspace);
  run_leaf_writes(store, in, out, report, workspace);
}

void run_leaf_reads(leaf_store& store, const leaf_phase_input& in, sorted_answers out, leaf_phase_report& report,
                    leaf_phase_workspace& workspace) {
  leaf_phase_workspace::buffers& ws = workspace.get();
  routed_batch_view& rt = *in.routes;
  const std::size_t g_count = rt.groups;
  const std::uint32_t* gb = rt.group_begin;
  const key_type* keys = rt.keys;
  const op_type* types = reinterpret_cast<const op_type*>(rt.types);
  ws.ranges.clear();
  ws.scan_out.refused.clear();
  ws.loose_split_bound = 0;
  ws.largest_write_group = 0;
  report.splits.clear();
  report.splits_lost = false;
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
    struct sizes {
      std::uint64_t split_bound = 0;  // of the groups with many adds (reserve_for_writes)
      std::size_t largest_write_group = 0;
    };
    const sizes found = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, g_count, group_grain), sizes{},
        [&](const tbb::blocked_range<std::size_t>& r, sizes acc) {
          for (std::size_t g = r.begin(); g < r.end(); ++g) {
            std::uint32_t nr = 0, nw = 0, na = 0;
            char ordered = 0;
            for (std::uint32_t i = gb[g]; i < gb[g + 1]; ++i) {
              const op_type t = types[i];
              if (is_point(t)) {
                nw += is_write(t);
                na += may_add(t);
              } else if (t <= op_type::count && in.status[rt.positions[i]] == op_status::ok) {
                ++nr;
                ordered |= t == op_type::lower_bound ||
                           (t == op_type::scan && in.scan_at(rt.positions[i]).order == scan_order::ordered);
              }
            }
            ws.n_range[g] = nr;
            ws.n_write[g] = nw;
            ws.has_ordered_read[g] = ordered;
            if (na >= leaf_store::near_full_slack) acc.split_bound += 2 * (1 + na / leaf_store::adds_per_split);
            if (nw != 0) acc.largest_write_group = std::max<std::size_t>(acc.largest_write_group, gb[g + 1] - gb[g]);
          }
          return acc;
        },
        [](sizes x, sizes y) {
          return sizes{x.split_bound + y.split_bound, std::max(x.largest_write_group, y.largest_write_group)};
        });
    ws.loose_split_bound = found.split_bound;
    ws.largest_write_group = found.largest_write_group;
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

  // ---- room for step 3 -------------------------------------------------------
  reserve_for_writes(store, in, report, ws);
}

void run_leaf_writes(leaf_store& store, const leaf_phase_input& in, sorted_answers out, leaf_phase_report& report,
                     leaf_phase_workspace& workspace) {
  leaf_phase_workspace::buffers& ws = workspace.get();
  routed_batch_view& rt = *in.routes;
  const std::size_t g_count = rt.groups;
  const std::uint32_t* gb = rt.group_begin;
  const key_type* keys = rt.keys;
  const op_type* types = reinterpret_cast<const op_type*>(rt.types);
  const bool writes = ws.largest_write_group != 0;
  if (writes && static_cast<std::size_t>(tbb::this_task_arena::max_concurrency()) > ws.runs.size()) {
    throw std::logic_error("run_leaf_writes: not in the task arena of run_leaf_reads");  // before any change
  }

  // ---- 3. point ops, one task per leaf group ----------------------------------
  // Nothing below allocates: the leaves for splits, the run buffers and the
  // split records were made by run_leaf_reads.
  const auto t0 = clock_type::now();
  for (run_buffers& rb : ws.runs) rb.key_delta = 0;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, g_count, group_grain),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      run_buffers* rb = nullptr;  // this thread's, once a group has writes
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
                        // The group's point ops, in runs that fit this
                        // thread's buffers; each run goes on from the leaf
                        // where the one before ended.
                        if (rb == nullptr) {
                          rb = &ws.runs[static_cast<std::size_t>(tbb::this_task_arena::current_thread_index())];
                        }
                        run_buffers& run = *rb;
                        const std::size_t room = ws.run_room;
                        for (std::uint32_t i = b; i < e;) {
                          const std::uint32_t stop = e - i <= room ? e : i + static_cast<std::uint32_t>(room);
                          run.ops.clear();
                          run.index.clear();
                          for (; i < stop; ++i) {
                            const op_type t = types[i];
                            if (is_point(t)) {
                              run.ops.push_back({keys[i], rt.args[i], to_kind(t)});
                              run.index.push_back(i);
                            } else if (t > op_type::count || in.status[rt.positions[i]] != op_status::ok) {
                              out.values[i] = 0;
                              out.found[i] = 0;
                            }
                          }
                          run.results.resize(run.ops.size());
                          id = store.apply(id, run.ops.data(), run.ops.size(), run.results.data(), &ws.splits);
                          std::int64_t delta = 0;
                          for (std::size_t k = 0; k < run.ops.size(); ++k) {
                            const point_result& res = run.results[k];
                            const std::uint32_t at = run.index[k];
                            out.values[at] = res.found ? res.value : 0;
                            out.found[at] = res.found;
                            const op_kind kind = run.ops[k].kind;
                            if ((kind == op_kind::put || kind == op_kind::insert) && !res.found) ++delta;
                            if (kind == op_kind::erase && res.found) --delta;
                          }
                          run.key_delta += delta;
                        }
                      }
                    });
  report.key_delta = 0;
  for (run_buffers& rb : ws.runs) report.key_delta += rb.key_delta;
  // Within the capacity reserved for them: no allocation.
  report.splits.assign(ws.splits.records, ws.splits.records + ws.splits.size());
  report.splits_lost = ws.splits.lost();
  report.leaf = seconds_since(t0);
}

}  // namespace tandem::host
