// Range ops of the leaf phase (leaf_phase.hpp, step 2): lower_bound, scan
// and count answered on the pre-batch state of the leaves, then patched with
// the batch's earlier writes. Takes the range ops and the batch's writes in
// (key, position) order; gives their answers at their routed index. Runs on
// the leaf-phase thread's TBB arena, leaves read only.
#include <tandem/host/detail/range_read.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_sort.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tandem::host::detail {
namespace {

struct key_state {
  bool present;
  value_type value;
};

/// State of a key after write i, from state `s` before it.
key_state after_write(const write_list& w, std::size_t i, key_state s) {
  switch (w.type[i]) {
    case op_type::put: return {true, w.value[i]};
    case op_type::insert: return s.present ? s : key_state{true, w.value[i]};
    case op_type::erase: return {false, 0};
    default: return s;
  }
}

/// State of a key after its writes [b, e) with position < p, from `s`.
key_state replay(const write_list& w, std::size_t b, std::size_t e, std::uint32_t p, key_state s) {
  for (std::size_t i = b; i < e && w.pos[i] < p; ++i) s = after_write(w, i, s);
  return s;
}

/// Answers range ops on the pre-batch state, patched with earlier writes.
class range_reader {
 public:
  range_reader(const leaf_store& store, const write_list& writes) : store_(store), w_(writes) {}

  /// Ordered: appends to `out` the first `limit` entries with lo <= key <= hi
  /// as of position p.
  void ordered(leaf_id start, key_type lo, key_type hi, std::uint64_t limit, std::uint32_t p,
               entry_vector& out) const {
    if (limit == 0) return;
    const std::size_t base = out.size();
    std::size_t wi = w_.first_at_or_above(lo);
    const std::size_t wend = w_.first_above(hi);
    bool done = false;
    auto push = [&](key_type k, value_type v) {
      out.push_back({k, v});
      done = out.size() - base >= limit;
    };
    // Written keys below `bound` not seen in the pre-batch state were absent.
    auto emit_written_below = [&](key_type bound, bool inclusive) {
      while (!done && wi < wend && (w_.key[wi] < bound || (inclusive && w_.key[wi] == bound))) {
        const std::size_t e = w_.run_end(wi, wend);
        const key_state s = replay(w_, wi, e, p, {false, 0});
        if (s.present) push(w_.key[wi], s.value);
        wi = e;
      }
    };
    for (leaf_id id = store_.walk_right(start, lo); !done && id != no_leaf; id = store_[id].right) {
      const auto& l = store_[id];
      l.data.iterate(lo, std::numeric_limits<std::size_t>::max(), [&](key_type k, value_type v) {
        if (k > hi) return false;
        emit_written_below(k, false);
        if (done) return false;
        if (wi < wend && w_.key[wi] == k) {
          const std::size_t e = w_.run_end(wi, wend);
          const key_state s = replay(w_, wi, e, p, {true, v});
          wi = e;
          if (s.present) push(k, s.value);
        } else {
          push(k, v);
        }
        return !done;
      });
      if (l.high >= hi) break;
    }
    emit_written_below(hi, true);
  }

  /// Unordered: appends the same entries as `ordered`, in any order.
  void unordered(leaf_id start, key_type lo, key_type hi, std::uint64_t limit, std::uint32_t p,
                 entry_vector& out) const {
    if (limit == 0) return;
    const std::size_t base = out.size();
    const std::size_t wb = w_.first_at_or_above(lo);
    const std::size_t margin = w_.first_above(hi) - wb;  // each write removes at most one entry
    if (margin > limit) {  // the batch writes more here than the scan returns: merge in order
      ordered(start, lo, hi, limit, p, out);
      return;
    }
    key_type boundary = hi;
    for (leaf_id id = store_.walk_right(start, lo); id != no_leaf; id = store_[id].right) {
      const auto& l = store_[id];
      l.data.map(std::max(lo, l.low), std::min(hi, l.high), [&](key_type k, value_type v) { out.push_back({k, v}); });
      if (l.high >= hi) break;
      if (out.size() - base >= limit + margin) {
        boundary = l.high;  // every entry in [lo, boundary] is in `out`
        break;
      }
    }
    const std::size_t we = w_.first_above(boundary);
    if (wb < we) {
      // Distinct written keys in [lo, boundary] and whether the pre-batch state had them.
      std::vector<std::size_t> runs;
      for (std::size_t i = wb; i < we; i = w_.run_end(i, we)) runs.push_back(i);
      std::vector<char> seen(runs.size(), 0);
      auto run_of = [&](key_type k) -> std::size_t {
        const auto it = std::lower_bound(runs.begin(), runs.end(), k,
                                         [&](std::size_t r, key_type key) { return w_.key[r] < key; });
        return it != runs.end() && w_.key[*it] == k ? static_cast<std::size_t>(it - runs.begin()) : runs.size();
      };
      std::size_t kept = base;
      for (std::size_t i = base; i < out.size(); ++i) {
        const entry e = out[i];
        const std::size_t r = run_of(e.key);
        if (r == runs.size()) {
          out[kept++] = e;
          continue;
        }
        seen[r] = 1;
        const key_state s = replay(w_, runs[r], w_.run_end(runs[r], we), p, {true, e.value});
        if (s.present) out[kept++] = {e.key, s.value};
      }
      out.resize(kept);
      for (std::size_t r = 0; r < runs.size(); ++r) {
        if (seen[r]) continue;
        const key_state s = replay(w_, runs[r], w_.run_end(runs[r], we), p, {false, 0});
        if (s.present) out.push_back({w_.key[runs[r]], s.value});
      }
    }
    if (out.size() - base > limit) {
      const auto first = out.begin() + static_cast<std::ptrdiff_t>(base);
      const auto nth = first + static_cast<std::ptrdiff_t>(limit);
      std::nth_element(first, nth, out.end(), [](const entry& a, const entry& b) { return a.key < b.key; });
      out.resize(base + static_cast<std::size_t>(limit));
    }
  }

  /// Keys in [lo, hi] in the pre-batch state.
  [[nodiscard]] std::uint64_t count_before(leaf_id start, key_type lo, key_type hi) const {
    std::uint64_t c = 0;
    for (leaf_id id = store_.walk_right(start, lo); id != no_leaf; id = store_[id].right) {
      const auto& l = store_[id];
      c += l.data.count(lo, hi);
      if (l.high >= hi) break;
    }
    return c;
  }

  /// Change of the number of keys in [lo, hi] made by the writes before
  /// position p: one lookup per written key in the range.
  [[nodiscard]] std::int64_t count_patch(leaf_id start, key_type lo, key_type hi, std::uint32_t p) const {
    std::int64_t delta = 0;
    const std::size_t we = w_.first_above(hi);
    leaf_id owner = store_.walk_right(start, lo);
    for (std::size_t i = w_.first_at_or_above(lo); i < we;) {
      const std::size_t e = w_.run_end(i, we);
      if (w_.pos[i] < p) {  // some write to this key precedes the count
        owner = store_.walk_right(owner, w_.key[i]);
        const key_state before = state_before(owner, w_.key[i]);
        delta += int{replay(w_, i, e, p, before).present} - int{before.present};
      }
      i = e;
    }
    return delta;
  }

  [[nodiscard]] key_state state_before(leaf_id owner, key_type k) const {
    const auto v = store_[owner].data.get(k);
    return {v.has_value(), v.value_or(0)};
  }

 private:
  const leaf_store& store_;
  const write_list& w_;
};

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

void read_ranges(const leaf_store& store, const leaf_phase_input& in, const range_op* rg, std::size_t ranges,
                 const write_list& w, value_type* values, std::uint8_t* found, key_type* answer_keys,
                 scan_buffers& out) {
  if (ranges == 0) return;
  const batch& b = *in.ops;
  const key_type* lo = b.keys();
  const std::uint64_t* hi = b.args();
  for (entry_vector& buffer : out.buffers) buffer.clear();
  out.slices.assign(ranges, {});
  const range_reader reader(store, w);
  std::vector<std::size_t> counts;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, ranges), [&](const tbb::blocked_range<std::size_t>& r) {
    entry_vector& buffer = out.buffers.local();
    for (std::size_t i = r.begin(); i < r.end(); ++i) {
      const range_op& o = rg[i];
      const std::uint32_t p = o.pos;
      const std::size_t base = buffer.size();
      switch (o.type) {
        case op_type::lower_bound: {
          reader.ordered(o.leaf, lo[p], max_key, 1, p, buffer);
          const bool hit = buffer.size() > base;
          found[o.index] = hit;
          answer_keys[o.index] = hit ? buffer[base].key : 0;
          values[o.index] = hit ? buffer[base].value : 0;
          buffer.resize(base);
          break;
        }
        case op_type::scan: {
          const scan_spec& spec = in.scan_at(p);
          if (spec.order == scan_order::ordered) {
            reader.ordered(o.leaf, lo[p], hi[p], spec.limit, p, buffer);
          } else {
            reader.unordered(o.leaf, lo[p], hi[p], spec.limit, p, buffer);
          }
          out.slices[i] = {&buffer, base, buffer.size() - base};
          values[o.index] = buffer.size() - base;
          found[o.index] = buffer.size() > base;
          break;
        }
        case op_type::count:
          values[o.index] = reader.count_before(o.leaf, lo[p], hi[p]);  // patched below
          break;
        default: break;
      }
    }
  });
  for (std::size_t i = 0; i < ranges; ++i) {
    if (rg[i].type == op_type::count) counts.push_back(i);
  }
  patch_counts(store, b, rg, counts, w, reader, values);
  for (std::size_t i : counts) found[rg[i].index] = values[rg[i].index] != 0;
}

}  // namespace tandem::host::detail
