// Range ops of the leaf phase (leaf_phase.hpp, step 2): lower_bound, scan
// and count answered on the pre-batch state of the leaves, then patched with
// the batch's earlier writes. Takes the range ops and the batch's writes in
// (key, position) order; gives their answers at their routed index. Runs on
// the leaf-phase thread's TBB arena, leaves read only.
#include <tandem/host/detail/range_read.hpp>

#include <tandem/host/detail/fault_point.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_scan.h>
#include <oneapi/tbb/parallel_sort.h>

#include <algorithm>
#include <atomic>
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

/// The batch's scan output cap, shared by the workers of pass 1: the entries
/// the merge buffers hold (and so the memory they take) stay within it.
class output_budget {
 public:
  explicit output_budget(std::uint64_t limit) noexcept : limit_(limit) {}
  /// Takes k entries of the budget; false (nothing taken) when they are not left.
  bool take(std::uint64_t k) noexcept {
    std::uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (k > limit_ - used) return false;
    } while (!used_.compare_exchange_weak(used, used + k, std::memory_order_relaxed));
    return true;
  }
  void give(std::uint64_t k) noexcept { used_.fetch_sub(k, std::memory_order_relaxed); }

 private:
  const std::uint64_t limit_;
  std::atomic<std::uint64_t> used_{0};
};

/// One scan's (or lower_bound's) entries as they are merged into its
/// worker's buffer. Under a cap the buffer holds room of the budget, taken
/// in chunks and kept for the worker's next scans; a scan that cannot get
/// room goes on counting its entries without keeping them.
class merge_output {
 public:
  merge_output(scan_buffers::merge_buffer& buffer, output_budget* budget) noexcept
      : out_(buffer.entries), held_(buffer.held), base_(out_.size()), budget_(budget) {}

  entry_vector& entries() noexcept { return out_; }
  [[nodiscard]] std::size_t base() const noexcept { return base_; }
  [[nodiscard]] std::size_t kept() const noexcept { return out_.size() - base_; }
  /// Entries pushed, kept or not.
  [[nodiscard]] std::uint64_t seen() const noexcept { return seen_; }

  /// Room for k more entries in the buffer; false when the budget has none.
  bool room(std::size_t k) noexcept {
    if (budget_ == nullptr) return true;
    const std::uint64_t need = out_.size() + k;
    if (need <= held_) return true;
    const std::uint64_t more = need - held_;
    const std::uint64_t ask = std::max<std::uint64_t>(more, chunk);  // few trips to the shared counter
    if (budget_->take(ask)) {
      held_ += ask;
      return true;
    }
    if (ask != more && budget_->take(more)) {
      held_ += more;
      return true;
    }
    return false;
  }
  void push(key_type k, value_type v) {
    ++seen_;
    if (!keeping_) return;
    if (!room(1)) {
      keeping_ = false;
      return;
    }
    out_.push_back({k, v});
  }
  /// Drops what was kept and starts over (an unordered merge that ran out
  /// of room, to be done again in key order).
  void restart() noexcept {
    out_.resize(base_);
    seen_ = 0;
    keeping_ = true;
  }
  /// After the scan: true when it kept every entry; false when it could
  /// not, and then keeps nothing.
  bool finish() noexcept {
    if (keeping_) return true;
    out_.resize(base_);
    return false;
  }

 private:
  static constexpr std::uint64_t chunk = 4096;

  entry_vector& out_;
  std::uint64_t& held_;
  const std::size_t base_;
  output_budget* budget_;
  std::uint64_t seen_ = 0;
  bool keeping_ = true;
};

/// Entries written in place (a deferred scan's second merge).
struct pointer_output {
  entry* at;
  void push(key_type k, value_type v) noexcept { *at++ = entry{k, v}; }
};

/// Scans of at most this many entries are merged into their worker's buffer
/// in pass 1 instead of counted there and copied from the leaves in pass 3.
constexpr std::uint64_t short_scan_entries = 256;
/// Range ops between an op and the later one whose lines it prefetches.
constexpr std::size_t prefetch_distance = 8;

/// Answers range ops on the pre-batch state, patched with earlier writes.
class range_reader {
 public:
  /// Scans of at least this many entries (1 MiB) write them past the caches
  /// (put_entry): a batch of them outgrows the caches anyway, and streaming
  /// stores skip reading every output line before writing it.
  static constexpr std::uint64_t stream_entries = std::uint64_t{1} << 16;

  range_reader(const leaf_store& store, const write_list& writes) : store_(store), w_(writes) {}

  /// Ordered: pushes to `out` the first `limit` entries with lo <= key <= hi
  /// as of position p, in key order. @return how many.
  template <class Output>
  std::uint64_t ordered(leaf_id start, key_type lo, key_type hi, std::uint64_t limit, std::uint32_t p,
                        Output& out) const {
    if (limit == 0) return 0;
    std::uint64_t got = 0;
    std::size_t wi = w_.first_at_or_above(lo);
    const std::size_t wend = w_.first_above(hi);
    bool done = false;
    auto push = [&](key_type k, value_type v) {
      out.push(k, v);
      done = ++got >= limit;
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
    return got;
  }

  /// Unordered: appends the same entries as `ordered`, in any order.
  /// @return false when the output budget ran out first: then `o` is as
  ///         it was and the scan is to be merged in key order instead
  bool unordered(leaf_id start, key_type lo, key_type hi, std::uint64_t limit, std::uint32_t p,
                 merge_output& o) const {
    if (limit == 0) return true;
    const std::size_t base = o.base();
    const std::size_t wb = w_.first_at_or_above(lo);
    const std::size_t margin = w_.first_above(hi) - wb;  // each write removes at most one entry
    if (margin > limit) {  // the batch writes more here than the scan returns: merge in order
      ordered(start, lo, hi, limit, p, o);
      return true;
    }
    entry_vector& out = o.entries();
    key_type boundary = hi;
    for (leaf_id id = store_.walk_right(start, lo); id != no_leaf; id = store_[id].right) {
      const auto& l = store_[id];
      if (!o.room(l.data.size())) {
        o.restart();
        return false;
      }
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
      if (!o.room(runs.size())) {
        o.restart();
        return false;
      }
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
    return true;
  }

  /// Keys in [lo, hi] in the pre-batch state; counting stops at `cap` or
  /// above. Leaves inside the range add their size without reading a key.
  /// `reach`, when given, gets the high fence of the last leaf counted
  /// (clamped to hi): the first `cap` entries of the range lie in [lo, reach].
  [[nodiscard]] std::uint64_t count_before(leaf_id start, key_type lo, key_type hi,
                                           std::uint64_t cap = std::numeric_limits<std::uint64_t>::max(),
                                           key_type* reach = nullptr) const {
    std::uint64_t c = 0;
    key_type last = hi;
    for (leaf_id id = store_.walk_right(start, lo); id != no_leaf; id = store_[id].right) {
      const auto& l = store_[id];
      c += lo <= l.low && l.high <= hi ? l.data.size() : l.data.count(lo, hi, cap - c);
      if (l.high >= hi) break;
      if (c >= cap) {
        last = l.high;
        break;
      }
    }
    if (reach != nullptr) *reach = last;
    return c;
  }

  /// Writes the first `n` entries with key >= lo in ascending order to
  /// `out`: the ordered scan when no write of the batch lies in its range
  /// and `n` is its capped pre-batch count.
  void stream_ordered(leaf_id start, key_type lo, std::uint64_t n, entry* out) const {
    const bool stream = n >= stream_entries;
    for (leaf_id id = store_.walk_right(start, lo); n != 0 && id != no_leaf; id = store_[id].right) {
      const auto& l = store_[id];
      if (l.right != no_leaf && n > l.data.size()) store_[l.right].prefetch();  // the next leaf's first lines
      const std::size_t wrote = stream ? l.data.copy_ordered<true>(lo, n, out) : l.data.copy_ordered(lo, n, out);
      out += wrote;
      n -= wrote;
    }
    if (stream) stream_fence();
  }

  /// Writes to `out` the first entries, at most `limit`, with lo <= key <=
  /// bound in the pre-batch state, in key order. @return how many.
  std::uint64_t copy_below(leaf_id start, key_type lo, key_type bound, std::uint64_t limit, entry* out) const {
    std::uint64_t n = 0;
    for (leaf_id id = store_.walk_right(start, lo); n < limit && id != no_leaf; id = store_[id].right) {
      const auto& l = store_[id];
      entry* const from = out + n;
      entry* const end = from + l.data.copy_ordered(lo, limit - n, from);
      // The copy is in key order: drop what lies past `bound`.
      n += static_cast<std::uint64_t>(
          std::upper_bound(from, end, bound, [](key_type k, const entry& e) { return k < e.key; }) - from);
      if (l.high >= bound) break;
    }
    return n;
  }

  /// The `c` entries of leaf `l` in [a, b] (all it holds there) to `out`:
  /// in key order when its log and blocks are sorted (the first c from
  /// `a` are those up to `b`), else as `map` visits them. @return the end.
  template <bool Stream>
  static entry* copy_leaf_range(const leaf& l, key_type a, key_type b, std::uint64_t c, entry* out) {
    if (l.data.sorted()) return out + l.data.copy_ordered<Stream>(a, c, out);
    l.data.map(a, b, [&](key_type k, value_type v) { put_entry<Stream>(out++, k, v); });
    return out;
  }

  /// Writes the `n` smallest entries with lo <= key <= hi to `out` in no
  /// particular order (same conditions as stream_ordered). Whole leaves are
  /// copied as they lie; only the last leaf, where fewer than all of its
  /// entries are wanted, is selected through `spill`.
  void stream_unordered(leaf_id start, key_type lo, key_type hi, std::uint64_t n, entry* out,
                        entry_vector& spill) const {
    const bool stream = n >= stream_entries;
    for (leaf_id id = store_.walk_right(start, lo); n != 0 && id != no_leaf; id = store_[id].right) {
      const auto& l = store_[id];
      const key_type a = std::max(lo, l.low), b = std::min(hi, l.high);
      const std::uint64_t c = a == l.low && b == l.high ? l.data.size() : l.data.count(a, b);
      if (c <= n) {
        out = stream ? copy_leaf_range<true>(l, a, b, c, out) : copy_leaf_range<false>(l, a, b, c, out);
        n -= c;
        continue;
      }
      spill.clear();
      l.data.map(a, b, [&](key_type k, value_type v) { spill.push_back({k, v}); });
      const auto nth = spill.begin() + static_cast<std::ptrdiff_t>(n);
      std::nth_element(spill.begin(), nth, spill.end(), [](const entry& x, const entry& y) { return x.key < y.key; });
      std::copy(spill.begin(), nth, out);
      n = 0;
    }
    if (stream) stream_fence();
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
  scratch.slices.assign(ranges, {});
  constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  scratch.op_of.assign(b.scans().size(), none);
  scratch.slot_count.resize(b.scans().size());
  const range_reader reader(store, w);
  std::vector<std::size_t> counts;
  const std::uint64_t cap = in.max_scan_entries;
  const bool capped = cap != std::numeric_limits<std::uint64_t>::max();
  output_budget budget(cap);

  // Pass 1: every answer but the scans' entries. A scan learns its entry
  // count: from the pre-batch state when no write of the batch lies in its
  // reach (lo up to the leaf where the count meets its limit), else by
  // merging into its worker's buffer (under a cap, only while the cap has
  // room for what the buffers hold; past that, counting only).
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, ranges), [&](const tbb::blocked_range<std::size_t>& r) {
    scan_buffers::merge_buffer& buffer = scratch.buffers.local();
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
        store[ahead.leaf].prefetch();
      }
      if (i + prefetch_distance / 2 < r.end()) {
        const range_op& ahead = rg[i + prefetch_distance / 2];
        store[ahead.leaf].data.prefetch_range(lo[ahead.pos]);
      }
      const range_op& o = rg[i];
      const std::uint32_t p = o.pos;
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
          scratch.op_of[in.scan_slot[p]] = static_cast<std::uint32_t>(i);
          scratch.slot_count[in.scan_slot[p]] = s.count;
          values[o.index] = s.count;
          found[o.index] = s.count != 0;
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

  // Pass 2: the scans' places in batch order (the scan table is in batch
  // order; scans that did not run have no range op): a parallel prefix sum
  // over the table of (scans that ran, entries).
  const std::size_t slots = scratch.op_of.size();
  if (result.scan_ops.capacity() < slots) {  // pooled: room to spare, as for the entries
    allocation_point();
    result.scan_ops.reserve(slots + slots / 4);
    result.scan_begin.reserve(slots + slots / 4 + 1);
  }
  result.scan_ops.resize(slots);
  result.scan_begin.resize(slots + 1);
  struct running {
    std::uint64_t scans = 0, entries = 0;
  };
  running totals = tbb::parallel_scan(
      tbb::blocked_range<std::size_t>(0, slots, std::size_t{1} << 12), running{},
      [&](const tbb::blocked_range<std::size_t>& r, running sum, bool is_final) {
        for (std::size_t slot = r.begin(); slot < r.end(); ++slot) {
          const std::uint32_t op = scratch.op_of[slot];
          if (op == none) continue;
          const std::uint64_t count = scratch.slot_count[slot];
          if (is_final) {
            result.scan_ops[sum.scans] = b.scans()[slot].index;
            result.scan_begin[sum.scans] = sum.entries;
            scratch.slices[op].dest = sum.entries;
          }
          ++sum.scans;
          sum.entries += count;
        }
        return sum;
      },
      [](const running& x, const running& y) { return running{x.scans + y.scans, x.entries + y.entries}; });
  if (totals.entries > cap) {
    // Over the cap: in batch order, a scan runs when its entries fit in
    // what the scans before it left, else it is refused (no entries).
    totals = {};
    for (std::size_t slot = 0; slot < slots; ++slot) {
      const std::uint32_t op = scratch.op_of[slot];
      if (op == none) continue;
      const std::uint64_t count = scratch.slot_count[slot];
      scan_buffers::slice& s = scratch.slices[op];
      if (count <= cap - totals.entries) {
        result.scan_ops[totals.scans] = b.scans()[slot].index;
        result.scan_begin[totals.scans] = totals.entries;
        s.dest = totals.entries;
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

  // Pass 3: the entries, each scan straight into its place. In batch order,
  // so the result fills front to back; a short scan's entries come from its
  // worker's buffer (fetched a few scans ahead), a long one's from the leaves.
  entry* const dest = result.scan_entries.data();
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, slots), [&](const tbb::blocked_range<std::size_t>& r) {
    entry_vector& spill = scratch.spill.local();
    for (std::size_t slot = r.begin(); slot < r.end(); ++slot) {
      if (slot + prefetch_distance < r.end()) {
        const std::uint32_t ahead = scratch.op_of[slot + prefetch_distance];
        if (ahead != none) {
          const scan_buffers::slice& a = scratch.slices[ahead];
          if (a.buffer != nullptr) TANDEM_PREFETCH(a.buffer->data() + a.offset);
        }
      }
      const std::uint32_t i = scratch.op_of[slot];
      if (i == none) continue;
      const scan_buffers::slice& s = scratch.slices[i];
      if (s.count == 0) continue;
      entry* out = dest + s.dest;
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
