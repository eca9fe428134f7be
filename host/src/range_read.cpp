// Range ops of the leaf phase (leaf_phase.hpp, step 2): lower_bound, scan
// and count answered on the pre-batch state of the leaves, then patched with
// the batch's earlier writes. Takes the range ops and the batch's writes in
// (key, position) order; gives their answers at their routed index. Runs on
// the leaf-phase thread's TBB arena, leaves read only.
#include <tandem/host/detail/range_read.hpp>
#include <tandem/host/detail/range_reader.hpp>

#include <tandem/host/detail/fault_point.hpp>
#include <tandem/host/detail/scratch.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>
#include <oneapi/tbb/parallel_sort.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace tandem::host::detail {
namespace {

/// Scans of at most this many entries (that read below the batch's first
/// write in their range) are copied into their worker's buffer in pass 1,
/// in one visit of their leaves, instead of counted there and copied from
/// the leaves in pass 3.
constexpr std::uint64_t short_scan_entries = 256;
/// Scans of at most this many entries may be placed (scan_buffers): the
/// bisection that finds them counts up to that many keys from a probe's lo.
constexpr std::uint64_t max_placed_limit = std::uint64_t{1} << 18;
/// Marks a placed scan's entry in scan_buffers::slot_count, so that the
/// batch-order copy pass skips placed scans without reading their slices.
constexpr std::uint64_t placed_bit = std::uint64_t{1} << 63;
/// Range ops between an op and the later one whose lines it prefetches.
constexpr std::size_t prefetch_distance = 8;

/// How many range ops, from the first in key order, have at least `need`
/// keys from their lo up in the pre-batch state (a prefix: the ops ascend
/// by key). Bisection, each probe counting at most `need` keys.
std::size_t ops_below_last(const range_reader& reader, const key_type* lo, const range_op* rg, std::size_t ranges,
                           std::uint64_t need) {
  auto holds = [&](std::size_t j) { return reader.count_before(rg[j].leaf, lo[rg[j].pos], max_key, need) >= need; };
  if (holds(ranges - 1)) return ranges;
  std::size_t first = 0, last = ranges - 1;  // the answer lies in [first, last]
  while (first < last) {
    const std::size_t mid = first + (last - first) / 2;
    if (holds(mid)) {
      first = mid + 1;
    } else {
      last = mid;
    }
  }
  return first;
}

/// The range ops, from the first in key order, among which a scan up to
/// UINT64_MAX with a limit of at most max_placed_limit is placed: it
/// returns exactly its limit, since at least the batch's longest such
/// limit plus its erases lie from its lo up before the batch.
/// @return how many.
std::size_t placeable_ops(const batch& b, const range_reader& reader, const range_op* rg, std::size_t ranges,
                          const write_list& w) {
  const key_type* lo = b.keys();
  const std::uint64_t* hi = b.args();
  const std::vector<scan_spec>& scans = b.scans();
  const std::uint64_t longest = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, scans.size(), std::size_t{1} << 12), std::uint64_t{0},
      [&](const tbb::blocked_range<std::size_t>& r, std::uint64_t m) {
        for (std::size_t slot = r.begin(); slot < r.end(); ++slot) {
          const scan_spec& spec = scans[slot];
          if (spec.limit <= max_placed_limit && hi[spec.index] == max_key) m = std::max(m, spec.limit);
        }
        return m;
      },
      [](std::uint64_t x, std::uint64_t y) { return std::max(x, y); });
  if (longest == 0) return 0;
  const auto erased = static_cast<std::uint64_t>(std::count(w.type, w.type + w.n, op_type::erase));
  if (erased > max_placed_limit) return 0;  // the probes would count that many keys each
  return ops_below_last(reader, lo, rg, ranges, longest + erased);
}

/// Writes a placed scan's `s.count` entries (its limit) to `out`: from the
/// leaves as they are when the batch writes nothing from its lo up, else
/// those below the first key it writes there as they are and the rest
/// merged with the writes. A short scan is gathered in `stage` (room for
/// short_scan_entries, in cache) and copied out past the caches.
/// `first_write`: the first of the batch's writes at or above its lo.
/// `start`: where it starts in its leaf, found while the lines loaded.
void place_scan(const range_reader& reader, const range_op& o, const scan_buffers::slice& s, const write_list& w,
                std::size_t first_write, const scan_start& start, entry* out, entry* stage, entry_vector& spill) {
  const bool short_scan = s.count <= short_scan_entries;
  if (first_write == w.n && !short_scan) {
    if (s.ordered) {
      reader.stream_ordered(o.leaf, s.lo, s.count, out, start);
    } else {
      reader.stream_unordered(o.leaf, s.lo, max_key, s.count, out, spill, start);
    }
    return;
  }
  entry* const to = short_scan ? stage : out;
  std::uint64_t got = 0;
  if (first_write == w.n) {
    got = reader.copy_below(o.leaf, s.lo, max_key, s.count, to, start);
  } else if (w.key[first_write] > s.lo) {
    // All of [lo, written) when fewer than the limit.
    got = reader.copy_below(o.leaf, s.lo, w.key[first_write] - 1, s.count, to, start);
  }
  if (got != s.count && first_write != w.n) {
    pointer_output at{to + got};
    got += reader.ordered(o.leaf, w.key[first_write], max_key, s.count - got, o.pos, at);
  }
  if (got != s.count) throw std::logic_error("tandem: a placed scan returned fewer entries than its limit");
  if (short_scan) copy_streaming(stage, got, out);
}

/// Pass 1 of a short scan (at most short_scan_entries) that reads below
/// the batch's first write in its range: its entries are copied to the
/// worker's buffer from the pre-batch leaves, one visit, and `s` points at
/// them. @return false (nothing kept) when the scan reaches a written key or
/// the output cap has no room: it goes the general way.
bool copy_short_scan(const range_reader& reader, leaf_id leaf, key_type lo, key_type hi, std::uint64_t limit,
                     const write_list& w, std::size_t first_write, scan_buffers::merge_buffer& buffer,
                     output_budget* budget, scan_buffers::slice& s) {
  const bool clean = first_write == w.first_above(hi);  // no write of the batch in [lo, hi]
  if (!clean && w.key[first_write] == lo) return false;
  merge_output out(buffer, budget);
  if (!out.room(limit)) return false;
  entry_vector& entries = out.entries();
  const std::size_t base = entries.size();
  entries.resize(base + limit);
  const std::uint64_t got =
      reader.copy_below(leaf, lo, clean ? hi : w.key[first_write] - 1, limit, entries.data() + base);
  // Complete: `limit` entries below the first write, or all of [lo, hi].
  if (got != limit && !clean) {
    entries.resize(base);
    return false;
  }
  entries.resize(base + got);
  s.buffer = &entries;
  s.offset = base;
  s.count = got;
  return true;
}

/// Fenwick tree over the ranks of the batch's distinct written keys.
class fenwick {
 public:
  explicit fenwick(std::size_t n) : tree_(n + 1, 0) {}
  void add(std::size_t i, std::int64_t d) {
    for (++i; i < tree_.size(); i += i & (~i + 1)) tree_[i] += d;
  }
  /// Sum over ranks [0, i).
  [[nodiscard]] std::int64_t prefix(std::size_t i) const {
    std::int64_t s = 0;
    for (; i > 0; i -= i & (~i + 1)) s += tree_[i];
    return s;
  }

 private:
  std::vector<std::int64_t> tree_;
};


/// Adds to every count (which holds its pre-batch value) the change made by
/// the writes before it. Few writes per count: one lookup per written key in
/// range. Many: one sweep over positions with a Fenwick tree over written
/// keys, O((writes + counts) log writes) instead of O(writes x counts).
void patch_counts(const leaf_store& store, const batch& b, const range_op* rg, std::vector<std::size_t>& counts,
                  const write_list& w, const range_reader& reader, value_type* values) {
  if (counts.empty() || w.n == 0) return;
  const key_type* lo = b.keys();
  const std::uint64_t* hi = b.args();
  std::uint64_t direct_cost = 0;
  for (std::size_t i : counts) direct_cost += w.first_above(hi[rg[i].pos]) - w.first_at_or_above(lo[rg[i].pos]);
  const std::size_t n_writes = w.n;
  const std::uint64_t sweep_cost = 4 * (n_writes + counts.size()) * (1 + static_cast<std::uint64_t>(std::log2(n_writes)));
  if (direct_cost <= sweep_cost) {
    tbb::parallel_for(std::size_t{0}, counts.size(), [&](std::size_t c) {
      const range_op& o = rg[counts[c]];
      values[o.index] = static_cast<std::uint64_t>(static_cast<std::int64_t>(values[o.index]) +
                                                   reader.count_patch(o.leaf, lo[o.pos], hi[o.pos], o.pos));
    });
    return;
  }

  // Distinct written keys (runs), their pre-batch presence, and for every
  // write the key's change of presence once that write has run.
  std::vector<std::size_t> runs;
  for (std::size_t i = 0; i < n_writes; i = w.run_end(i, n_writes)) runs.push_back(i);
  runs.push_back(n_writes);
  struct event {
    std::uint32_t pos;
    std::uint32_t rank;
    std::int32_t delta;  // presence after this write minus presence before the batch
  };
  std::vector<event> events(n_writes);
  tbb::parallel_for(std::size_t{0}, runs.size() - 1, [&](std::size_t r) {
    const std::size_t b0 = runs[r], e = runs[r + 1];
    const key_state before = reader.state_before(store.walk_right(w.leaf[b0], w.key[b0]), w.key[b0]);
    key_state s = before;
    for (std::size_t i = b0; i < e; ++i) {
      s = after_write(w, i, s);
      events[i] = {w.pos[i], static_cast<std::uint32_t>(r), int{s.present} - int{before.present}};
    }
  });
  tbb::parallel_sort(events.begin(), events.end(), [](const event& a, const event& x) { return a.pos < x.pos; });
  std::sort(counts.begin(), counts.end(), [&](std::size_t a, std::size_t x) { return rg[a].pos < rg[x].pos; });
  const std::size_t n_runs = runs.size() - 1;
  auto rank_of_first_at_or_above = [&](key_type k) {
    return static_cast<std::size_t>(std::lower_bound(runs.begin(), runs.end() - 1, k,
                                                     [&](std::size_t i, key_type key) { return w.key[i] < key; }) -
                                    runs.begin());
  };
  fenwick tree(n_runs);
  std::vector<std::int32_t> current(n_runs, 0);
  std::size_t next = 0;
  for (std::size_t i : counts) {
    const std::uint32_t p = rg[i].pos;
    for (; next < events.size() && events[next].pos < p; ++next) {
      const event& ev = events[next];
      tree.add(ev.rank, ev.delta - current[ev.rank]);
      current[ev.rank] = ev.delta;
    }
    const std::size_t lo_rank = rank_of_first_at_or_above(lo[p]);
    const std::size_t hi_rank = hi[p] == max_key ? n_runs : rank_of_first_at_or_above(hi[p] + 1);
    value_type& v = values[rg[i].index];
    v = static_cast<std::uint64_t>(static_cast<std::int64_t>(v) + tree.prefix(hi_rank) - tree.prefix(lo_rank));
  }
}

}  // namespace

std::size_t read_ranges(const leaf_store& store, const leaf_phase_input& in, const range_op* rg, std::size_t ranges,
                        const write_list& w, value_type* values, std::uint8_t* found, key_type* answer_keys,
                        scan_buffers& scratch, tandem::detail::answer_columns& result) {
  result.scan_ops.clear();
  result.scan_begin.clear();
  result.scan_entries.clear();
  scratch.refused.clear();
  if (ranges == 0) return 0;
  const batch& b = *in.ops;
  const key_type* lo = b.keys();
  const std::uint64_t* hi = b.args();
  for (scan_buffers::merge_buffer& buffer : scratch.buffers) {
    buffer.entries.clear();
    buffer.held = 0;
  }
  resize_with_room(scratch.slices, ranges);  // each one reset in pass 1
  constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  resize_with_room(scratch.op_of, b.scans().size());
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, scratch.op_of.size(), std::size_t{1} << 14),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      std::fill(scratch.op_of.begin() + static_cast<std::ptrdiff_t>(r.begin()),
                                scratch.op_of.begin() + static_cast<std::ptrdiff_t>(r.end()), none);
                    });
  resize_with_room(scratch.slot_count, b.scans().size());
  const range_reader reader(store, w);
  std::vector<std::size_t> counts;
  const std::uint64_t cap = in.max_scan_entries;
  const bool capped = cap != std::numeric_limits<std::uint64_t>::max();
  output_budget budget(cap);
  const std::size_t placeable = placeable_ops(b, reader, rg, ranges, w);
  // Range op j may be a placed scan (which pass 1 does not read): its leaf
  // lines are fetched in the placing pass instead.
  auto may_place = [&](std::size_t j) { return j < placeable && hi[rg[j].pos] == max_key; };
  std::atomic<std::size_t> unplaced{0};  // scans with entries that pass 3 copies
  std::atomic<std::size_t> n_counts{0};

  // Pass 1: every answer but the scans' entries. A scan learns its entry
  // count: a placed one has its limit; others from the pre-batch state when
  // no write of the batch lies in their reach (lo up to the leaf where the
  // count meets the limit), else by merging into the worker's buffer (under
  // a cap, only while the cap has room for what the buffers hold; past
  // that, counting only).
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, ranges), [&](const tbb::blocked_range<std::size_t>& r) {
    scan_buffers::merge_buffer& buffer = scratch.buffers.local();
    std::size_t to_copy = 0, counted = 0;
    for (std::size_t i = r.begin(); i < r.end(); ++i) {
      // The range ops go in key order, their batch columns lie in batch
      // order: later ops' columns and leaves are fetched ahead, so that
      // their cache misses overlap.
      if (i + 2 * prefetch_distance < r.end()) {
        const std::uint32_t q = rg[i + 2 * prefetch_distance].pos;
        TANDEM_PREFETCH(lo + q);
        TANDEM_PREFETCH(hi + q);
        TANDEM_PREFETCH(in.scan_slot + q);
      }
      if (i + prefetch_distance < r.end()) {
        const range_op& ahead = rg[i + prefetch_distance];
        if (ahead.type == op_type::scan) {
          const std::uint32_t slot = in.scan_slot[ahead.pos];
          TANDEM_PREFETCH(&b.scans()[slot]);
          TANDEM_PREFETCH(&scratch.op_of[slot]);
          TANDEM_PREFETCH(&scratch.slot_count[slot]);
        }
        if (!may_place(i + prefetch_distance)) store[ahead.leaf].prefetch();
      }
      if (i + prefetch_distance / 2 < r.end()) {
        const range_op& ahead = rg[i + prefetch_distance / 2];
        if (!may_place(i + prefetch_distance / 2)) {
          store[ahead.leaf].data.prefetch_range(lo[ahead.pos]);
        }
      }
      const range_op& o = rg[i];
      const std::uint32_t p = o.pos;
      scratch.slices[i] = scan_buffers::slice{};
      switch (o.type) {
        case op_type::lower_bound: {
          merge_output one(buffer, nullptr);
          const bool hit = reader.ordered(o.leaf, lo[p], max_key, 1, p, one) != 0;
          const std::size_t at = one.base();
          found[o.index] = hit;
          answer_keys[o.index] = hit ? buffer.entries[at].key : 0;
          values[o.index] = hit ? buffer.entries[at].value : 0;
          buffer.entries.resize(at);
          break;
        }
        case op_type::scan: {
          const scan_spec& spec = in.scan_at(p);
          scan_buffers::slice& s = scratch.slices[i];
          s.lo = lo[p];
          s.hi = hi[p];
          s.ordered = spec.order == scan_order::ordered;
          s.slot = in.scan_slot[p];
          s.placed = may_place(i) && spec.limit != 0 && spec.limit <= max_placed_limit;
          if (s.placed) {
            s.count = spec.limit;
          } else {
            const std::size_t first_write = w.first_at_or_above(lo[p]);
            const bool copied = spec.limit != 0 && spec.limit <= short_scan_entries &&
                                copy_short_scan(reader, o.leaf, lo[p], hi[p], spec.limit, w, first_write,
                                                buffer, capped ? &budget : nullptr, s);
            if (!copied) {
              // Without writes of the batch where the scan reads, the
              // pre-batch state is the answer and its size is known now.
              key_type reach = hi[p];
              const std::uint64_t before =
                  spec.limit == 0 ? 0 : reader.count_before(o.leaf, lo[p], hi[p], spec.limit, &reach);
              bool untouched = spec.limit == 0 || w.first_above(reach) == first_write;
              if (!untouched && before >= spec.limit && w.key[first_write] > lo[p]) {
                // A leaf is coarse: the scan's `limit` entries may all lie
                // below the first key the batch writes in its range.
                untouched = reader.count_before(o.leaf, lo[p], w.key[first_write] - 1, spec.limit) >= spec.limit;
              }
              if (untouched) {
                s.count = std::min<std::uint64_t>(before, spec.limit);
              } else {
                merge_output out(buffer, capped ? &budget : nullptr);
                const bool merged = spec.order == scan_order::unordered &&
                                    reader.unordered(o.leaf, lo[p], hi[p], spec.limit, p, out);
                if (!merged) reader.ordered(o.leaf, lo[p], hi[p], spec.limit, p, out);
                const std::uint64_t seen = out.seen();
                if (out.finish()) {
                  s.buffer = &buffer.entries;
                  s.offset = out.base();
                  s.count = out.kept();
                } else {
                  s.count = seen;
                  s.deferred = true;
                }
              }
            }
            if (s.count != 0) ++to_copy;
          }
          scratch.op_of[in.scan_slot[p]] = static_cast<std::uint32_t>(i);
          scratch.slot_count[in.scan_slot[p]] = s.count | (s.placed ? placed_bit : 0);
          values[o.index] = s.count;
          found[o.index] = s.count != 0;
          break;
        }
        case op_type::count:
          values[o.index] = reader.count_before(o.leaf, lo[p], hi[p]);  // patched below
          ++counted;
          break;
        default: break;
      }
    }
    if (to_copy != 0) unplaced.fetch_add(to_copy, std::memory_order_relaxed);
    if (counted != 0) n_counts.fetch_add(counted, std::memory_order_relaxed);
  });
  if (n_counts.load(std::memory_order_relaxed) != 0) {
    counts.reserve(n_counts.load(std::memory_order_relaxed));
    for (std::size_t i = 0; i < ranges; ++i) {
      if (rg[i].type == op_type::count) counts.push_back(i);
    }
  }
  patch_counts(store, b, rg, counts, w, reader, values);
  for (std::size_t i : counts) found[rg[i].index] = values[rg[i].index] != 0;

  // Pass 2: the scans' places in batch order (the scan table is in batch
  // order; scans that did not run have no range op): a parallel prefix sum
  // over the table of (scans that ran, entries), by chunks of the table:
  // their sums, then each chunk from its start.
  const std::size_t slots = scratch.op_of.size();
  if (result.scan_ops.capacity() < slots) {  // pooled: room to spare, as for the entries
    allocation_point();
    result.scan_ops.reserve(slots + slots / 4);
    result.scan_begin.reserve(slots + slots / 4 + 1);
  }
  result.scan_ops.resize(slots);
  result.scan_begin.resize(slots + 1);
  resize_with_room(scratch.slot_dest, slots);
  constexpr std::size_t chunk = std::size_t{1} << 12;
  const std::size_t chunks = (slots + chunk - 1) / chunk;
  std::vector<scan_buffers::running>& starts = scratch.chunk_starts;
  starts.resize(chunks + 1);
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    scan_buffers::running sum;
    for (std::size_t slot = c * chunk; slot < std::min(slots, (c + 1) * chunk); ++slot) {
      if (scratch.op_of[slot] == none) continue;
      ++sum.scans;
      sum.entries += scratch.slot_count[slot] & ~placed_bit;
    }
    starts[c] = sum;
  });
  scan_buffers::running totals;
  for (std::size_t c = 0; c < chunks; ++c) {
    const scan_buffers::running sum = starts[c];
    starts[c] = totals;
    totals.scans += sum.scans;
    totals.entries += sum.entries;
  }
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    scan_buffers::running at = starts[c];
    for (std::size_t slot = c * chunk; slot < std::min(slots, (c + 1) * chunk); ++slot) {
      if (scratch.op_of[slot] == none) continue;
      result.scan_ops[at.scans] = b.scans()[slot].index;
      result.scan_begin[at.scans] = at.entries;
      scratch.slot_dest[slot] = at.entries;
      ++at.scans;
      at.entries += scratch.slot_count[slot] & ~placed_bit;
    }
  });
  if (totals.entries > cap) {
    // Over the cap: in batch order, a scan runs when its entries fit in
    // what the scans before it left, else it is refused (no entries).
    totals = {};
    for (std::size_t slot = 0; slot < slots; ++slot) {
      const std::uint32_t op = scratch.op_of[slot];
      if (op == none) continue;
      const std::uint64_t count = scratch.slot_count[slot] & ~placed_bit;
      scan_buffers::slice& s = scratch.slices[op];
      if (count <= cap - totals.entries) {
        result.scan_ops[totals.scans] = b.scans()[slot].index;
        result.scan_begin[totals.scans] = totals.entries;
        scratch.slot_dest[slot] = totals.entries;
        ++totals.scans;
        totals.entries += count;
        continue;
      }
      const range_op& o = rg[op];
      scratch.refused.push_back({o.pos, count});
      in.status[o.pos] = op_status::output_limit;
      values[o.index] = 0;
      found[o.index] = 0;
      s.count = 0;
    }
  }
  result.scan_ops.resize(totals.scans);
  result.scan_begin.resize(totals.scans + 1);
  result.scan_begin[totals.scans] = totals.entries;
  const std::uint64_t total = totals.entries;
  if (total == 0) return 0;
  // A pooled result keeps its capacity; grow it with room to spare (within
  // the cap), so batches of varying scan output settle on pages already
  // touched.
  if (result.scan_entries.capacity() < total) {
    allocation_point();
    result.scan_entries.reserve(std::min<std::uint64_t>(total + total / 4, std::max(total, cap)));
  }
  result.scan_entries.resize(total);
  entry* const dest = result.scan_entries.data();

  // Pass 3, placed scans: in key order, as pass 1, so that scans starting
  // in one leaf find its lines cached. Each one's lines are fetched in
  // steps a few scans ahead, each step reading what the one before
  // fetched: its leaf's first line (fences, counts) and its place; its
  // block guessed from the fences and that header line; its block and
  // slot found and the lines its entries take.
  if (placeable != 0) {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, placeable), [&](const tbb::blocked_range<std::size_t>& r) {
      entry_vector& spill = scratch.spill.local();
      entry stage[short_scan_entries];
      // How many scans ahead of the one copied each step runs.
      constexpr std::size_t first_line = prefetch_distance, header_line = prefetch_distance / 2,
                            entry_lines = prefetch_distance / 4, copy = 0;
      scan_start begins[prefetch_distance];  // by scan, modulo prefetch_distance
      // Round t runs each step on the scan `ahead` places before the one it
      // copies, t - first_line: @return that scan when it is a placed one
      // with entries, else `no_scan`.
      constexpr std::size_t no_scan = std::numeric_limits<std::size_t>::max();
      auto scan_at = [&](std::size_t t, std::size_t ahead) {
        const std::size_t lag = first_line - ahead;
        if (t < r.begin() + lag || t - lag >= r.end()) return no_scan;
        const scan_buffers::slice& s = scratch.slices[t - lag];
        return s.placed && s.count != 0 ? t - lag : no_scan;
      };
      // The scans ascend by lo, and so does the first write at or above it:
      // found for the range's first placed scan, then walked.
      std::size_t first_write = w.n + 1;
      for (std::size_t t = r.begin(); t < r.end() + first_line; ++t) {
        if (const std::size_t i = scan_at(t, first_line); i != no_scan) {
          store[rg[i].leaf].prefetch_first_line();
          TANDEM_PREFETCH(&scratch.slot_dest[scratch.slices[i].slot]);
        }
        if (const std::size_t i = scan_at(t, header_line); i != no_scan) {
          const scan_buffers::slice& s = scratch.slices[i];
          scan_start& at = begins[i % prefetch_distance];
          at.leaf = store.walk_right(rg[i].leaf, s.lo);
          const auto& l = store[at.leaf];
          at.at.block = static_cast<int>(l.data.start_route(s.lo, l.low, l.high));
        }
        if (const std::size_t i = scan_at(t, entry_lines); i != no_scan) {
          const scan_buffers::slice& s = scratch.slices[i];
          scan_start& at = begins[i % prefetch_distance];
          at.at = store[at.leaf].data.start_scan(s.lo, static_cast<std::size_t>(at.at.block), s.count);
        }
        if (const std::size_t i = scan_at(t, copy); i != no_scan) {
          const scan_buffers::slice& s = scratch.slices[i];
          if (first_write > w.n) first_write = w.first_at_or_above(s.lo);
          while (first_write < w.n && w.key[first_write] < s.lo) ++first_write;
          place_scan(reader, rg[i], s, w, first_write, begins[i % prefetch_distance], dest + scratch.slot_dest[s.slot],
                     stage, spill);
        }
      }
      stream_fence();
    });
  }
  if (unplaced.load(std::memory_order_relaxed) == 0) return total * sizeof(entry);

  // Pass 3, the other scans: each straight into its place. In batch order,
  // so the result fills front to back; a short scan's entries come from its
  // worker's buffer (fetched a few scans ahead), a long one's from the leaves.
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, slots), [&](const tbb::blocked_range<std::size_t>& r) {
    entry_vector& spill = scratch.spill.local();
    for (std::size_t slot = r.begin(); slot < r.end(); ++slot) {
      if (slot + prefetch_distance < r.end()) {
        const std::uint32_t ahead = scratch.op_of[slot + prefetch_distance];
        if (ahead != none && (scratch.slot_count[slot + prefetch_distance] & placed_bit) == 0) {
          const scan_buffers::slice& a = scratch.slices[ahead];
          if (a.buffer != nullptr) TANDEM_PREFETCH(a.buffer->data() + a.offset);
        }
      }
      const std::uint32_t i = scratch.op_of[slot];
      if (i == none || (scratch.slot_count[slot] & placed_bit) != 0) continue;
      const scan_buffers::slice& s = scratch.slices[i];
      if (s.count == 0) continue;
      entry* out = dest + scratch.slot_dest[slot];
      if (s.buffer != nullptr) {
        std::copy_n(s.buffer->data() + s.offset, s.count, out);
        continue;
      }
      const range_op& o = rg[i];
      if (s.deferred) {  // merged again, in key order (a valid order for an unordered scan too)
        pointer_output at{out};
        reader.ordered(o.leaf, s.lo, s.hi, s.count, o.pos, at);
      } else if (s.ordered) {
        reader.stream_ordered(o.leaf, s.lo, s.count, out);
      } else {
        reader.stream_unordered(o.leaf, s.lo, s.hi, s.count, out, spill);
      }
    }
  });
  return total * sizeof(entry);
}

}  // namespace tandem::host::detail
