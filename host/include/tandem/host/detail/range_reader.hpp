#pragma once
// The range reader of the leaf phase's range ops (range_read.cpp): scans,
// lower_bounds and counts read on the pre-batch leaves, merged with the
// batch's earlier writes (write_list), into a worker's buffer or straight
// into the result. Read-only over the leaves; one per batch, shared by the
// range-op workers.

#include <tandem/host/detail/range_read.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace tandem::host::detail {

/// Where an ordered read starts in a leaf (bpa::start_scan on leaf `leaf`),
/// found ahead of the read while its lines load; the read uses it when that
/// leaf owns its lo.
struct scan_start {
  leaf_id leaf = no_leaf;
  bpa::slot at{-1, 0};
};

struct key_state {
  bool present;
  value_type value;
};

/// State of a key after write i, from state `s` before it.
inline key_state after_write(const write_list& w, std::size_t i, key_state s) {
  switch (w.type[i]) {
    case op_type::put: return {true, w.value[i]};
    case op_type::insert: return s.present ? s : key_state{true, w.value[i]};
    case op_type::erase: return {false, 0};
    default: return s;
  }
}

/// State of a key after its writes [b, e) with position < p, from `s`.
inline key_state replay(const write_list& w, std::size_t b, std::size_t e, std::uint32_t p, key_state s) {
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

/// Answers range ops on the pre-batch state, patched with earlier writes.
class range_reader {
 public:
  /// Scans of at least this many entries (16 KiB) write them past the
  /// caches (put_entry): a batch of them outgrows the caches anyway, and
  /// streaming stores skip reading every output line before writing it.
  /// From 2^10 rather than 2^16 entries, 256 scans of 10^4 entries copied
  /// in 0.97 ms instead of 1.15 to 1.22 (H200 machine, 16 threads).
  static constexpr std::uint64_t stream_entries = std::uint64_t{1} << 10;

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
  void stream_ordered(leaf_id start, key_type lo, std::uint64_t n, entry* out, const scan_start& from = {}) const {
    const bool stream = n >= stream_entries;
    for (leaf_id id = store_.walk_right(start, lo); n != 0 && id != no_leaf; id = store_[id].right) {
      const auto& l = store_[id];
      if (l.right != no_leaf && n > l.data.size()) store_[l.right].prefetch();  // the next leaf's first lines
      const bpa::slot at = id == from.leaf ? from.at : bpa::slot{-1, 0};
      const std::size_t wrote =
          stream ? l.data.copy_ordered<true>(lo, n, out, at) : l.data.copy_ordered(lo, n, out, at);
      out += wrote;
      n -= wrote;
    }
    if (stream) stream_fence();
  }

  /// Writes to `out` the first entries, at most `limit`, with lo <= key <=
  /// bound in the pre-batch state, in key order. @return how many.
  std::uint64_t copy_below(leaf_id start, key_type lo, key_type bound, std::uint64_t limit, entry* out,
                           const scan_start& at = {}) const {
    std::uint64_t n = 0;
    for (leaf_id id = store_.walk_right(start, lo); n < limit && id != no_leaf; id = store_[id].right) {
      const auto& l = store_[id];
      entry* const from = out + n;
      entry* const end = from + l.data.copy_ordered(lo, limit - n, from, id == at.leaf ? at.at : bpa::slot{-1, 0});
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
  /// particular order (same conditions as stream_ordered). A sorted leaf is
  /// copied in key order, as stream_ordered does (as fast, and it needs no
  /// count); an unsorted one's entries in the range are copied as they lie,
  /// and only the last leaf, where fewer than all of them are wanted, is
  /// selected through `spill`. `from`: as stream_ordered's.
  void stream_unordered(leaf_id start, key_type lo, key_type hi, std::uint64_t n, entry* out, entry_vector& spill,
                        const scan_start& from = {}) const {
    const bool stream = n >= stream_entries;
    for (leaf_id id = store_.walk_right(start, lo); n != 0 && id != no_leaf; id = store_[id].right) {
      const auto& l = store_[id];
      const key_type a = std::max(lo, l.low), b = std::min(hi, l.high);
      if (l.data.sorted()) {  // the first n from a: none past hi, as n is at most their count
        if (l.right != no_leaf && n > l.data.size()) store_[l.right].prefetch();
        const bpa::slot at = id == from.leaf ? from.at : bpa::slot{-1, 0};
        const std::size_t wrote =
            stream ? l.data.copy_ordered<true>(a, n, out, at) : l.data.copy_ordered(a, n, out, at);
        out += wrote;
        n -= wrote;
        continue;
      }
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

}  // namespace tandem::host::detail
