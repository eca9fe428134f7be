// The leaf phase (leaf_phase.hpp): takes a key-sorted routed batch, gives
// its answers in routed order. Runs on the dispatcher's TBB arena.
#include <tandem/host/leaf_phase.hpp>

#include <tandem/host/detail/fault_point.hpp>
#include <tandem/host/detail/range_read.hpp>
#include <tandem/host/detail/scratch.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
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
bool may_add(op_type t) noexcept { return t == op_type::put || t == op_type::insert; }

// The routed type column is applied as it is (column_run's kinds).
static_assert(static_cast<int>(op_kind::get) == static_cast<int>(op_type::get) &&
                  static_cast<int>(op_kind::put) == static_cast<int>(op_type::put) &&
                  static_cast<int>(op_kind::insert) == static_cast<int>(op_type::insert) &&
                  static_cast<int>(op_kind::erase) == static_cast<int>(op_type::erase),
              "op_kind and op_type number the point ops alike");

/// Groups per task: enough work to amortise scheduling, few enough to balance.
constexpr std::size_t group_grain = 16;
/// Groups per task of the classification, which reads only a byte an op.
constexpr std::size_t classify_grain = 512;
/// A task starts loading a group's leaf header this many groups ahead.
constexpr std::size_t prefetch_distance = 4;

/// Gets in flight per task of a gets-only batch: a get's block and lookup
/// window are found and the window's lines prefetched (bpa::start_get)
/// `get_distance` gets before the key is located there and its value read
/// (bpa::finish_get; a key found in a block shares its line with its value). So
/// a task keeps its cache misses overlapping across the ends of groups.
constexpr std::uint32_t get_distance = 16;
constexpr std::uint32_t get_ring = 16;  // >= get_distance, a power of two
static_assert(get_ring >= get_distance && (get_ring & (get_ring - 1)) == 0);

}  // namespace

struct leaf_phase_workspace::buffers {
  std::vector<std::uint32_t> n_range, n_write;      // per group
  std::vector<std::uint32_t> range_at, write_at;    // their prefix sums, for batches with range ops
  std::vector<char> reads_entries;  // per group: a scan or lower_bound reads its leaf's entries
  std::vector<char> points_only;    // per group: every op is a point op
  range_op_vector ranges;
  ::tandem::host::detail::scratch<key_type> w_key;
  ::tandem::host::detail::scratch<std::uint32_t> w_pos;
  ::tandem::host::detail::scratch<value_type> w_value;
  ::tandem::host::detail::scratch<op_type> w_type;
  ::tandem::host::detail::scratch<leaf_id> w_leaf;
  ::tandem::host::detail::scan_buffers scan_out;
  // From classifying: the splits the groups with at least near_full_slack
  // adds can make, read off their counts (2 * (1 + adds / adds_per_split)
  // each), and the batch's writes.
  std::uint64_t loose_split_bound = 0;
  std::size_t writes = 0;
  // Made before the writes (run_leaf_reads), used by them.
  ::tandem::host::detail::scratch<split_record> split_room;
  split_sink splits;
  ::tandem::host::detail::scratch<leaf_id> underfull_room;
  record_sink<leaf_id> underfull;
};

leaf_phase_workspace::leaf_phase_workspace() : buffers_(std::make_unique<buffers>()) {}
leaf_phase_workspace::~leaf_phase_workspace() = default;
void leaf_phase_workspace::release() { buffers_ = std::make_unique<buffers>(); }
const range_op_vector& leaf_phase_workspace::ranges() const noexcept { return buffers_->ranges; }
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
          if (g < r.end() && ws.n_write[g] != 0) store[in.leaf_ids[rt.group_ordinal[g]]].prefetch();
        };
        for (std::size_t g = r.begin(); g < r.begin() + prefetch_distance; ++g) prefetch_leaf(g);
        for (std::size_t g = r.begin(); g < r.end(); ++g) {
          prefetch_leaf(g + prefetch_distance);
          if (ws.n_write[g] == 0) continue;
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
/// records.
void reserve_for_writes(leaf_store& store, const leaf_phase_input& in, leaf_phase_report& report,
                        leaf_phase_workspace::buffers& ws) {
  ws.splits.reset(nullptr, 0);
  ws.underfull.reset(nullptr, 0);
  report.split_bound = 0;
  if (ws.writes == 0) return;
  // A bound that reads no leaf (leaf_store::apply): a group with fewer adds
  // than near_full_slack splits only near-full leaves, each at most twice;
  // one with more may split its routed leaf twice for free and then once
  // per adds_per_split adds. Leaves made since the routing version may lie
  // inside a group's range: each may take two splits beside the groups' own.
  const std::size_t leaves = store.live_leaves();
  const std::size_t newer = in.leaves_made != unknown_made   ? static_cast<std::size_t>(store.made() - in.leaves_made)
                            : in.leaf_count != 0 && in.leaf_count <= leaves ? leaves - in.leaf_count
                                                                            : leaves;
  std::uint64_t bound = ws.loose_split_bound + 2 * std::uint64_t{store.near_full()} + 2 * std::uint64_t{newer};
  // Room is address space until leaves are built in it; but when the bound
  // would reserve much beyond the room there is, the leaves the writes
  // reach are read for a tighter one.
  if (bound > store.room() && bound > leaves / 4) bound = std::min(bound, split_bound(store, in, ws));
  store.reserve(static_cast<std::size_t>(bound));
  ws.splits.reset(ws.split_room.get(bound), bound);
  if (report.splits.capacity() < bound) {
    ::tandem::host::detail::allocation_point();
    report.splits.reserve(bound);
  }
  report.split_bound = bound;
  // A group's run offers at most its last leaf for a merge.
  const std::size_t offers = std::min<std::size_t>(ws.writes, in.routes->groups);
  ws.underfull.reset(ws.underfull_room.get(offers), offers);
  if (report.underfull.capacity() < offers) {
    ::tandem::host::detail::allocation_point();
    report.underfull.reserve(offers);
  }
}

/// Answers the gets of groups [g_begin, g_end) of a gets-only batch in
/// routed order, `get_distance` apart as above; each goes from its routed leaf to
/// the one that owns it now by right links.
void stream_gets(const leaf_store& store, const leaf_phase_input& in, std::size_t g_begin, std::size_t g_end,
                 const sorted_answers& out) {
  const routed_batch_view& rt = *in.routes;
  const key_type* keys = rt.keys;
  const std::uint32_t* gb = rt.group_begin;
  struct pending {
    const bpa* data;
    bpa::slot slot;  // the guess
  };
  pending ring[get_ring];
  // The task's gets before `read` are answered.
  std::uint32_t read = gb[g_begin];
  auto answer = [&](std::uint32_t i) {
    const pending& p = ring[i % get_ring];
    p.data->finish_get(p.slot, keys[i], out.values + i, out.found + i);
  };
  auto prefetch_leaf = [&](std::size_t g) {
    if (g < g_end) store[in.leaf_ids[rt.group_ordinal[g]]].prefetch();
  };
  for (std::size_t g = g_begin; g < g_begin + prefetch_distance; ++g) prefetch_leaf(g);
  for (std::size_t g = g_begin; g < g_end; ++g) {
    prefetch_leaf(g + prefetch_distance);
    leaf_id id = in.leaf_ids[rt.group_ordinal[g]];
    const leaf_store::leaf_type* l = &store[id];
    for (std::uint32_t i = gb[g], e = gb[g + 1]; i < e; ++i) {
      if (keys[i] > l->high) {
        id = store.walk_right(id, keys[i]);
        l = &store[id];
      }
      if (i - read == get_distance) answer(read++);
      ring[i % get_ring] = {&l->data, l->data.start_get(keys[i])};
    }
  }
  for (; read < gb[g_end]; ++read) answer(read);
}

/// stream_gets with the route's hints (routed_batch_view::hints): a get's
/// window lines are prefetched straight from its hint, `get_distance` gets
/// ahead, and only the leaf's first line (the block counts) besides; no
/// header line is read. A get whose hinted block does not hold its key (an
/// absent key, a stale hint) is looked up from its leaf as stream_gets
/// does, at once. Counts into `t` (stale: a hint missing, or the key found
/// elsewhere; an unsure hint of a compact guide is neither).
void stream_hinted_gets(const leaf_store& store, const leaf_phase_input& in, std::size_t g_begin, std::size_t g_end,
                        const sorted_answers& out, hint_counts& t) {
  const routed_batch_view& rt = *in.routes;
  const key_type* keys = rt.keys;
  const leaf_hint* hints = rt.hints;
  const std::uint32_t* gb = rt.group_begin;
  struct pending {
    leaf_id id;
    bpa::slot slot;  // block -1: no hint
  };
  pending ring[get_ring];
  std::uint32_t read = gb[g_begin];
  auto answer = [&](std::uint32_t i) {
    const pending& p = ring[i % get_ring];
    if (TANDEM_LIKELY(store[p.id].data.finish_hinted(p.slot, keys[i], out.values + i, out.found + i))) {
      ++t.hinted;
      return;
    }
    const leaf_id id = store.walk_right(p.id, keys[i]);
    const bpa& data = store[id].data;
    data.finish_get(data.start_get(keys[i]), keys[i], out.values + i, out.found + i);
    t.stale += (out.found[i] | (p.slot.block == -1)) & (p.slot.block != bpa::unsure_block);  // unsure: neither
  };
  auto prefetch_leaf = [&](std::size_t g) {
    if (g < g_end) store[in.leaf_ids[rt.group_ordinal[g]]].prefetch_first_line();
  };
  for (std::size_t g = g_begin; g < g_begin + prefetch_distance; ++g) prefetch_leaf(g);
  for (std::size_t g = g_begin; g < g_end; ++g) {
    prefetch_leaf(g + prefetch_distance);
    const leaf_id id = in.leaf_ids[rt.group_ordinal[g]];
    const bpa& data = store[id].data;
    for (std::uint32_t i = gb[g], e = gb[g + 1]; i < e; ++i) {
      if (i - read == get_distance) answer(read++);
      const bpa::slot s = data.start_hinted(hints[i]);
      if (s.block == bpa::unsure_block) data.prefetch_header();  // looked up from the header at its answer
      ring[i % get_ring] = {id, s};
    }
  }
  for (; read < gb[g_end]; ++read) answer(read);
}

/// Adds the leaf lines that the point ops of group `g` moved (bpa::lookup_lines)
/// to `count`, on the leaves as they are now. (The header lines are counted
/// as a walk from block 0 reads them; stream_gets bisects the header
/// instead, which for a group of several keys reads about as many. Gets
/// with hints read the leaf's first line and their windows.)
void count_group_lines(const leaf_store& store, const leaf_phase_input& in, std::size_t g, leaf_line_count& count) {
  const routed_batch_view& rt = *in.routes;
  const auto* types = reinterpret_cast<const op_type*>(rt.types);
  const key_type* keys = rt.keys;
  const std::uint32_t e = rt.group_begin[g + 1];
  leaf_id id = in.leaf_ids[rt.group_ordinal[g]];
  if (rt.hinted) {
    // The leaf's first line, then the distinct lines of the ops' windows
    // (and the searches past them), read and, for a write found there,
    // written; an op not found at its hint adds its lookup from the leaf.
    const bpa& data = store[id].data;
    constexpr std::size_t most = 512;  // distinct lines kept; past them lines count without dedup
    std::uintptr_t read[most], written[most];
    std::size_t reads = 0, writes = 0;
    auto add = [&](std::uintptr_t* lines, std::size_t& k, const void* p) {
      const std::uintptr_t l = reinterpret_cast<std::uintptr_t>(p) / 64;
      if (k == most) {
        ++count.lines;
      } else if (std::find(lines, lines + k, l) == lines + k) {
        lines[k++] = l;
      }
    };
    add(read, reads, &store[id]);
    for (std::uint32_t i = rt.group_begin[g]; i < e; ++i) {
      if (!in.gets_only && !is_point(types[i])) continue;
      const bool dirties = !in.gets_only && is_write(types[i]);
      ++count.ops;
      data.hinted_entries(rt.hints[i], rt.keys[i], [&](const entry* p) { add(read, reads, p); });
      if (const entry* at = data.find_hinted(data.start_hinted(rt.hints[i]), rt.keys[i])) {
        if (dirties) add(written, writes, at);
      } else {
        const bpa::line_tally t = store[store.walk_right(id, rt.keys[i])].data.lookup_lines(
            rt.keys + i, 1, 0, [&](std::size_t) { return dirties; });
        count.lines += t.read + t.written;
      }
    }
    count.lines += reads + writes;
    return;
  }
  for (std::uint32_t i = rt.group_begin[g]; i < e;) {
    if (!in.gets_only && !is_point(types[i])) {
      ++i;
      continue;
    }
    id = store.walk_right(id, keys[i]);
    const auto& l = store[id];
    std::uint32_t j = i + 1;
    while (j < e && keys[j] <= l.high && (in.gets_only || is_point(types[j]))) ++j;
    const bpa::line_tally t = l.data.lookup_lines(keys + i, j - i, 0, [&](std::size_t k) {
      return !in.gets_only && is_write(types[i + k]);
    });
    count.ops += j - i;
    count.lines += t.read + t.written;
    i = j;
  }
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
  ws.writes = 0;
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
    // Every group's counts are written below: no zeroing.
    ws.n_range.resize(g_count);
    ws.n_write.resize(g_count);
    ws.reads_entries.resize(g_count);
    ws.points_only.resize(g_count);
    struct counts {
      std::uint64_t loose_bound = 0, ranges = 0, writes = 0;
    };
    const counts c = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, g_count, classify_grain), counts{},
        [&](const tbb::blocked_range<std::size_t>& r, counts sum) {
          for (std::size_t g = r.begin(); g < r.end(); ++g) {
            std::uint32_t nr = 0, nw = 0, na = 0, np = 0;
            char reads = 0;
            for (std::uint32_t i = gb[g]; i < gb[g + 1]; ++i) {
              const op_type t = types[i];
              if (is_point(t)) {
                nw += is_write(t);
                na += may_add(t);
                ++np;
              } else if (t <= op_type::count && in.status[rt.positions[i]] == op_status::ok) {
                ++nr;
                reads |= t != op_type::count;
              }
            }
            ws.n_range[g] = nr;
            ws.n_write[g] = nw;
            ws.reads_entries[g] = reads;
            ws.points_only[g] = np == gb[g + 1] - gb[g];
            sum.ranges += nr;
            sum.writes += nw;
            // The splits of a group with many adds (reserve_for_writes).
            if (na >= leaf_store::near_full_slack) sum.loose_bound += 2 * (1 + na / leaf_store::adds_per_split);
          }
          return sum;
        },
        [](counts x, const counts& y) {
          x.loose_bound += y.loose_bound;
          x.ranges += y.ranges;
          x.writes += y.writes;
          return x;
        });
    ws.loose_split_bound = c.loose_bound;
    ranges = c.ranges;
    writes = c.writes;
    ws.writes = writes;
    if (ranges != 0) {  // where each group's range ops and writes go in their lists
      ws.range_at.resize(g_count);
      ws.write_at.resize(g_count);
      std::exclusive_scan(ws.n_range.begin(), ws.n_range.end(), ws.range_at.begin(), std::uint32_t{0});
      std::exclusive_scan(ws.n_write.begin(), ws.n_write.end(), ws.write_at.begin(), std::uint32_t{0});
    }
  }
  // The writes in (key, position) order are needed only to patch range ops.
  ::tandem::host::detail::write_list wl;
  wl.n = ranges ? writes : 0;
  if (ranges) {
    ::tandem::host::detail::resize_with_room(ws.ranges, ranges);
    wl.key = ws.w_key.get(wl.n);
    wl.pos = ws.w_pos.get(wl.n);
    wl.value = ws.w_value.get(wl.n);
    wl.type = ws.w_type.get(wl.n);
    wl.leaf = ws.w_leaf.get(wl.n);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, g_count, group_grain),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        for (std::size_t g = r.begin(); g < r.end(); ++g) {
                          if (ws.n_range[g] == 0 && ws.n_write[g] == 0) continue;
                          std::uint32_t ri = ws.range_at[g], wi = ws.write_at[g];
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
    // Sorted, a leaf's entries are copied block by block, in key order. A
    // sorted leaf's first line tells so; those of the next groups load
    // meanwhile.
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, g_count, group_grain),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        auto read_leaf = [&](std::size_t g) -> leaf_store::leaf_type& {
                          return store[in.leaf_ids[rt.group_ordinal[g]]];
                        };
                        auto prefetch = [&](std::size_t g) {
                          if (g < r.end() && ws.reads_entries[g]) read_leaf(g).prefetch_first_line();
                        };
                        for (std::size_t g = r.begin(); g < r.begin() + prefetch_distance; ++g) prefetch(g);
                        for (std::size_t g = r.begin(); g < r.end(); ++g) {
                          prefetch(g + prefetch_distance);
                          if (ws.reads_entries[g]) read_leaf(g).data.sort();
                        }
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
  const std::uint32_t* gb = rt.group_begin;
  const key_type* keys = rt.keys;
  const op_type* types = reinterpret_cast<const op_type*>(rt.types);

  // ---- 3. point ops, one task per leaf group ----------------------------------
  // Nothing below allocates: the leaves for splits and the split records
  // were made by run_leaf_reads; runs of point ops are applied where they
  // lie in the routed columns, their answers written in place.
  const auto t0 = clock_type::now();
  const tbb::blocked_range<std::size_t> all_groups(0, rt.groups, group_grain);
  // A gets-only batch with fewer than dense_gets gets a leaf goes through
  // the pipeline; denser ones share most lines between neighbouring gets,
  // and their groups' chunks (get_sorted) already keep many misses in flight.
  struct tally {
    std::int64_t delta = 0;  // keys added minus keys removed
    leaf_line_count lines;
    hint_counts hints;
  };
  const auto add = [](tally a, const tally& b) {
    a.delta += b.delta;
    a.lines += b.lines;
    a.hints.hinted += b.hints.hinted;
    a.hints.stale += b.hints.stale;
    return a;
  };
  tally sum;
  if (in.gets_only && in.n < dense_gets * rt.groups) {
    sum = tbb::parallel_reduce(
        all_groups, tally{},
        [&](const tbb::blocked_range<std::size_t>& r, tally t) {
          if (rt.hinted) {
            stream_hinted_gets(store, in, r.begin(), r.end(), out, t.hints);
          } else {
            stream_gets(store, in, r.begin(), r.end(), out);
          }
          for (std::size_t g = r.begin(); g < r.end(); ++g) {
            if (g % line_sample_groups == 0) count_group_lines(store, in, g, t.lines);
          }
          return t;
        },
        add);
  } else {
    sum = tbb::parallel_reduce(
        all_groups, tally{},
        [&](const tbb::blocked_range<std::size_t>& r, tally t) {
          // No lines are prefetched ahead of a group: its runs' chunks
          // keep their misses in flight (bpa::get_sorted, bpa::apply), and
          // prefetching the next groups' headers or lookups as well measured
          // slower (YCSB A -24%, C -5%).
          for (std::size_t g = r.begin(); g < r.end(); ++g) {
            const std::uint32_t b = gb[g], e = gb[g + 1];
            leaf_id id = in.leaf_ids[rt.group_ordinal[g]];
            const bool reads_only = in.gets_only || ws.n_write[g] == 0;
            bool shrank = false;  // a run removed keys: its last leaf may be offered for a merge
            // Runs of point ops (of gets only, in a group without writes),
            // merge-joined against the leaf that owns them now; range ops
            // were answered by the reads, invalid ops get zeros.
            for (std::uint32_t i = b; i < e;) {
              if (!in.gets_only && (reads_only ? types[i] != op_type::get : !is_point(types[i]))) {
                if (types[i] > op_type::count || in.status[rt.positions[i]] != op_status::ok) {
                  out.values[i] = 0;
                  out.found[i] = 0;
                }
                ++i;
                continue;
              }
              std::uint32_t j = i + 1;
              if (reads_only) {
                id = store.walk_right(id, keys[i]);
                const auto& l = store[id];
                if (in.gets_only && keys[e - 1] <= l.high) {
                  j = e;  // the whole group: no key to look at
                } else {
                  while (j < e && keys[j] <= l.high && (in.gets_only || types[j] == op_type::get)) ++j;
                }
                l.data.get_sorted(keys + i, j - i, out.values + i, out.found + i);
              } else {
                if (ws.points_only[g]) {
                  j = e;
                } else {
                  while (j < e && is_point(types[j])) ++j;
                }
                const column_run run{keys + i,      rt.args + i,  rt.types + i,
                                     out.values + i, out.found + i, rt.hinted ? rt.hints + i : nullptr,
                                     &t.hints};
                std::int64_t added = 0;
                id = store.apply_run(id, run, j - i, &ws.splits, added);
                t.delta += added;
                shrank |= added < 0;
              }
              i = j;
            }
            if (shrank && store[id].data.size() <= leaf_store::merge_below) ws.underfull.push_back(id);
            // Counted while the group's lines are still cached.
            if (g % line_sample_groups == 0) count_group_lines(store, in, g, t.lines);
          }
          return t;
        },
        add);
  }
  report.key_delta = sum.delta;
  report.lines = sum.lines;
  report.hinted_ops = sum.hints.hinted;
  report.stale_hints = sum.hints.stale;
  // Within the capacity reserved for them: no allocation.
  report.splits.assign(ws.splits.records, ws.splits.records + ws.splits.size());
  report.splits_lost = ws.splits.lost();
  report.underfull.assign(ws.underfull.records, ws.underfull.records + ws.underfull.size());
  report.leaf = seconds_since(t0);
}

}  // namespace tandem::host
