#include <tandem/host/leaf_phase.hpp>

#include <tandem/host/detail/scratch.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_sort.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

namespace tandem::host {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// Groups this large are sorted in parallel.
constexpr std::size_t parallel_sort_threshold = std::size_t{1} << 16;

bool is_point(op_type t) noexcept { return t <= op_type::erase; }
bool is_write(op_type t) noexcept { return t == op_type::put || t == op_type::insert || t == op_type::erase; }

/// The ops the index answers with status ok (the others were marked invalid
/// when the batch was checked, by the same rule).
bool valid(const op& o) noexcept {
  if (o.type == op_type::scan) return o.key <= o.arg && o.limit <= max_scan_limit;
  if (o.type == op_type::count) return o.key <= o.arg;
  return o.type <= op_type::count;
}

op_kind to_kind(op_type t) noexcept {
  switch (t) {
    case op_type::put: return op_kind::put;
    case op_type::insert: return op_kind::insert;
    case op_type::erase: return op_kind::erase;
    default: return op_kind::get;
  }
}

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

  /// Ordered: the first `limit` entries with lo <= key <= hi as of position p.
  void ordered(leaf_id start, key_type lo, key_type hi, std::uint64_t limit, std::uint32_t p,
               std::vector<entry>& out) const {
    out.clear();
    if (limit == 0) return;
    out.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(limit, 128)));
    std::size_t wi = w_.first_at_or_above(lo);
    const std::size_t wend = w_.first_above(hi);
    bool done = false;
    auto push = [&](key_type k, value_type v) {
      out.push_back({k, v});
      done = out.size() >= limit;
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

  /// Unordered: the same entries as `ordered`, in any order.
  void unordered(leaf_id start, key_type lo, key_type hi, std::uint64_t limit, std::uint32_t p,
                 std::vector<entry>& out) const {
    out.clear();
    if (limit == 0) return;
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
      if (out.size() >= limit + margin) {
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
      std::size_t kept = 0;
      for (const entry& e : out) {
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
    if (out.size() > limit) {
      const auto nth = out.begin() + static_cast<std::ptrdiff_t>(limit);
      std::nth_element(out.begin(), nth, out.end(), [](const entry& a, const entry& b) { return a.key < b.key; });
      out.resize(static_cast<std::size_t>(limit));
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
void patch_counts(const leaf_store& store, const op* ops, const std::uint32_t* rg_pos, std::size_t ranges,
                  const leaf_id* rg_leaf, const write_list& w, const range_reader& reader,
                  op_result_vector& results) {
  std::vector<std::size_t> counts;
  for (std::size_t i = 0; i < ranges; ++i) {
    if (ops[rg_pos[i]].type == op_type::count) counts.push_back(i);
  }
  if (counts.empty() || w.n == 0) {
    for (std::size_t i : counts) results[rg_pos[i]].found = results[rg_pos[i]].value != 0;
    return;
  }
  std::uint64_t direct_cost = 0;
  for (std::size_t i : counts) {
    const op& o = ops[rg_pos[i]];
    direct_cost += w.first_above(o.arg) - w.first_at_or_above(o.key);
  }
  const std::size_t n_writes = w.n;
  const std::uint64_t sweep_cost = 4 * (n_writes + counts.size()) * (1 + static_cast<std::uint64_t>(std::log2(n_writes)));
  if (direct_cost <= sweep_cost) {
    tbb::parallel_for(std::size_t{0}, counts.size(), [&](std::size_t c) {
      const std::size_t i = counts[c];
      const op& o = ops[rg_pos[i]];
      op_result& res = results[rg_pos[i]];
      res.value = static_cast<std::uint64_t>(static_cast<std::int64_t>(res.value) +
                                             reader.count_patch(rg_leaf[i], o.key, o.arg, rg_pos[i]));
      res.found = res.value != 0;
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
    const std::size_t b = runs[r], e = runs[r + 1];
    const key_state before = reader.state_before(store.walk_right(w.leaf[b], w.key[b]), w.key[b]);
    key_state s = before;
    for (std::size_t i = b; i < e; ++i) {
      s = after_write(w, i, s);
      events[i] = {w.pos[i], static_cast<std::uint32_t>(r), int{s.present} - int{before.present}};
    }
  });
  tbb::parallel_sort(events.begin(), events.end(), [](const event& a, const event& b) { return a.pos < b.pos; });
  std::sort(counts.begin(), counts.end(), [&](std::size_t a, std::size_t b) { return rg_pos[a] < rg_pos[b]; });
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
    const std::uint32_t p = rg_pos[i];
    for (; next < events.size() && events[next].pos < p; ++next) {
      const event& ev = events[next];
      tree.add(ev.rank, ev.delta - current[ev.rank]);
      current[ev.rank] = ev.delta;
    }
    const op& o = ops[p];
    const std::size_t lo_rank = rank_of_first_at_or_above(o.key);
    const std::size_t hi_rank = o.arg == max_key ? n_runs : rank_of_first_at_or_above(o.arg + 1);
    op_result& res = results[p];
    res.value = static_cast<std::uint64_t>(static_cast<std::int64_t>(res.value) + tree.prefix(hi_rank) -
                                           tree.prefix(lo_rank));
    res.found = res.value != 0;
  }
}

/// An op gathered into group order, with its batch position.
struct grouped_op {
  op o;
  std::uint32_t pos;
  bool operator<(const grouped_op& x) const noexcept { return o.key < x.o.key || (o.key == x.o.key && pos < x.pos); }
};

}  // namespace

struct leaf_phase_workspace::buffers {
  detail::scratch<grouped_op> sorted;
  detail::scratch<point_op> pt_ops;
  detail::scratch<std::uint32_t> pt_pos;
  detail::scratch<point_result> pt_res;
  detail::scratch<std::uint32_t> rg_pos;
  detail::scratch<leaf_id> rg_leaf;
  detail::scratch<key_type> w_key;
  detail::scratch<std::uint32_t> w_pos;
  detail::scratch<value_type> w_value;
  detail::scratch<op_type> w_type;
  detail::scratch<leaf_id> w_leaf;
  std::vector<std::size_t> n_point, n_range, n_write;
  std::vector<char> has_ordered_read;
};

leaf_phase_workspace::leaf_phase_workspace() : buffers_(std::make_unique<buffers>()) {}
leaf_phase_workspace::~leaf_phase_workspace() = default;

void run_leaf_phase(leaf_store& store, const op* ops, std::size_t n, const route_groups& groups,
                    batch_result& result, std::vector<split_record>& splits, leaf_phase_times& times,
                    leaf_phase_workspace& workspace) {
  leaf_phase_workspace::buffers& ws = workspace.get();
  op_result_vector& results = result.mutable_results();
  const std::size_t g_count = groups.groups;

  // ---- 1. order -------------------------------------------------------------
  auto t0 = clock_type::now();
  // One random gather of the ops into group order; everything after reads
  // the gathered copies sequentially. Each group is then sorted by (key,
  // position) in place.
  grouped_op* const sorted = ws.sorted.get(n);
  std::vector<std::size_t>& n_point = ws.n_point;
  std::vector<std::size_t>& n_range = ws.n_range;
  std::vector<std::size_t>& n_write = ws.n_write;
  n_point.assign(g_count + 1, 0);
  n_range.assign(g_count + 1, 0);
  n_write.assign(g_count + 1, 0);
  std::vector<char>& has_ordered_read = ws.has_ordered_read;
  has_ordered_read.assign(g_count, 0);
  tbb::parallel_for(std::size_t{0}, g_count, [&](std::size_t g) {
    const std::size_t b = groups.group_begin[g], e = groups.group_begin[g + 1];
    for (std::size_t i = b; i < e; ++i) sorted[i] = {ops[groups.positions[i]], groups.positions[i]};
    grouped_op* const first = sorted + b;
    grouped_op* const last = sorted + e;
    if (e - b >= parallel_sort_threshold) {
      tbb::parallel_sort(first, last);
    } else {
      std::sort(first, last);
    }
    for (std::size_t i = b; i < e; ++i) {
      const op& o = sorted[i].o;
      if (!valid(o)) continue;
      if (is_point(o.type)) {
        ++n_point[g];
        n_write[g] += is_write(o.type);
      } else {
        ++n_range[g];
        if (o.type == op_type::lower_bound || (o.type == op_type::scan && o.order == scan_order::ordered)) {
          has_ordered_read[g] = 1;
        }
      }
    }
  });
  std::exclusive_scan(n_point.begin(), n_point.end(), n_point.begin(), std::size_t{0});
  std::exclusive_scan(n_range.begin(), n_range.end(), n_range.begin(), std::size_t{0});
  std::exclusive_scan(n_write.begin(), n_write.end(), n_write.begin(), std::size_t{0});
  const std::size_t points = n_point[g_count], ranges = n_range[g_count];
  point_op* const pt_ops = ws.pt_ops.get(points);
  std::uint32_t* const pt_pos = ws.pt_pos.get(points);
  point_result* const pt_res = ws.pt_res.get(points);
  std::uint32_t* const rg_pos = ws.rg_pos.get(ranges);
  leaf_id* const rg_leaf = ws.rg_leaf.get(ranges);
  write_list writes;
  writes.n = n_write[g_count];
  writes.key = ws.w_key.get(writes.n);
  writes.pos = ws.w_pos.get(writes.n);
  writes.value = ws.w_value.get(writes.n);
  writes.type = ws.w_type.get(writes.n);
  writes.leaf = ws.w_leaf.get(writes.n);
  tbb::parallel_for(std::size_t{0}, g_count, [&](std::size_t g) {
    std::size_t pi = n_point[g], ri = n_range[g], wi = n_write[g];
    for (std::size_t i = groups.group_begin[g], e = groups.group_begin[g + 1]; i < e; ++i) {
      const op& o = sorted[i].o;
      const std::uint32_t p = sorted[i].pos;
      if (!valid(o)) continue;
      if (is_point(o.type)) {
        pt_ops[pi] = {o.key, o.arg, to_kind(o.type)};
        pt_pos[pi++] = p;
        if (is_write(o.type)) {
          writes.key[wi] = o.key;
          writes.pos[wi] = p;
          writes.value[wi] = o.arg;
          writes.leaf[wi] = groups.group_leaf[g];
          writes.type[wi++] = o.type;
        }
      } else {
        rg_pos[ri] = p;
        rg_leaf[ri++] = groups.group_leaf[g];
      }
    }
  });
  times.order = seconds_since(t0);

  // ---- 2. read: range ops on the pre-batch state, patched -------------------
  t0 = clock_type::now();
  std::vector<std::vector<entry>> scan_out(ranges);
  if (ranges) {
    tbb::parallel_for(std::size_t{0}, g_count, [&](std::size_t g) {
      if (has_ordered_read[g]) store[groups.group_leaf[g]].data.sort();  // scans then copy nothing
    });
    const range_reader reader(store, writes);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, ranges), [&](const tbb::blocked_range<std::size_t>& r) {
      std::vector<entry> one;
      for (std::size_t i = r.begin(); i < r.end(); ++i) {
        const std::uint32_t p = rg_pos[i];
        const op& o = ops[p];
        op_result& res = results[p];
        switch (o.type) {
          case op_type::lower_bound:
            reader.ordered(rg_leaf[i], o.key, max_key, 1, p, one);
            res.found = !one.empty();
            res.key = res.found ? one[0].key : 0;
            res.value = res.found ? one[0].value : 0;
            break;
          case op_type::scan:
            if (o.order == scan_order::ordered) {
              reader.ordered(rg_leaf[i], o.key, o.arg, o.limit, p, scan_out[i]);
            } else {
              reader.unordered(rg_leaf[i], o.key, o.arg, o.limit, p, scan_out[i]);
            }
            res.key = o.key;
            res.value = scan_out[i].size();
            res.found = !scan_out[i].empty();
            res.scan_offset = i;  // where its entries are, until the complete phase
            break;
          case op_type::count:
            res.key = o.key;
            res.value = reader.count_before(rg_leaf[i], o.key, o.arg);  // patched below
            break;
          default: break;
        }
      }
    });
    patch_counts(store, ops, rg_pos, ranges, rg_leaf, writes, reader, results);
  }
  times.read = seconds_since(t0);

  // ---- 3. write: point ops, one task per leaf group --------------------------
  t0 = clock_type::now();
  tbb::enumerable_thread_specific<std::vector<split_record>> local_splits;
  tbb::parallel_for(std::size_t{0}, g_count, [&](std::size_t g) {
    const std::size_t b = n_point[g], e = n_point[g + 1];
    if (b == e) return;
    store.apply(groups.group_leaf[g], pt_ops + b, e - b, pt_res + b, &local_splits.local());
  });
  for (auto& v : local_splits) splits.insert(splits.end(), v.begin(), v.end());
  times.leaf = seconds_since(t0);

  // ---- 4. complete: scatter, flatten scans -----------------------------------
  t0 = clock_type::now();
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, points), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i < r.end(); ++i) {
      op_result& res = results[pt_pos[i]];
      res.key = pt_ops[i].key;
      res.found = pt_res[i].found;
      res.value = pt_res[i].found ? pt_res[i].value : 0;
    }
  });
  // Scans in batch order (one sequential pass; the read phase left each
  // scan's index into scan_out in its scan_offset), then offsets and copies.
  std::vector<std::size_t> scans;
  for (std::size_t p = 0; p < n; ++p) {
    if (ops[p].type == op_type::scan && results[p].status == op_status::ok) scans.push_back(p);
  }
  std::size_t total = 0;
  std::vector<std::size_t> source(scans.size());
  for (std::size_t s = 0; s < scans.size(); ++s) {
    op_result& res = results[scans[s]];
    source[s] = res.scan_offset;
    res.scan_offset = total;
    total += scan_out[source[s]].size();
  }
  entry_vector& flat = result.mutable_scan_entries();
  flat.resize(total);
  tbb::parallel_for(std::size_t{0}, scans.size(), [&](std::size_t s) {
    const std::vector<entry>& from = scan_out[source[s]];
    std::copy(from.begin(), from.end(), flat.begin() + static_cast<std::ptrdiff_t>(results[scans[s]].scan_offset));
  });
  times.complete = seconds_since(t0);
}

}  // namespace tandem::host
