#pragma once
// Bodies of basic_leaf_store (included by tandem/host/leaf_store.hpp).

#include <tandem/error.hpp>
#include <tandem/host/detail/fault_point.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace tandem::host {

template <class Bpa>
basic_leaf_store<Bpa>::basic_leaf_store() {
  head_ = allocate();
}

template <class Bpa>
leaf_id basic_leaf_store<Bpa>::allocate() {
  if (recycled_ != 0) {  // a dead leaf's id, once no route can reach it
    const std::size_t i = reuse_next_.fetch_add(1, std::memory_order_relaxed);
    if (i < recycled_) {
      const leaf_id id = dead_[i].id;
      ::new (static_cast<void*>(&leaves_[id])) leaf_type;
      made_.fetch_add(1, std::memory_order_relaxed);
      return id;
    }
  }
  try {
    const auto id = static_cast<leaf_id>(leaves_.emplace(no_leaf));
    made_.fetch_add(1, std::memory_order_relaxed);
    return id;
  } catch (const std::length_error&) {
    throw error("leaf_store: the 32-bit leaf id space is exhausted");
  }
}

template <class Bpa>
void basic_leaf_store<Bpa>::merge(leaf_id left_id, leaf_id right_id, std::uint64_t tag) {
  leaf_type& left = leaves_[left_id];
  leaf_type& right = leaves_[right_id];
  const bool was = is_near_full(left.data.size());
  note_fill(is_near_full(right.data.size()), false);
  left.data.absorb(right.data);
  note_fill(was, is_near_full(left.data.size()));
  left.high = right.high;
  left.right = right.right;
  right.low = max_key;  // owns nothing; routes that land here go on to the survivor
  right.high = min_key;
  right.right = left_id;
  dead_.push_back({right_id, tag});  // room made by reserve_merges
  ++merges_;
}

template <class Bpa>
void basic_leaf_store<Bpa>::reserve_merges(std::size_t more) {
  ::tandem::host::detail::allocation_point();
  dead_.reserve(dead_.size() + more);
}

template <class Bpa>
void basic_leaf_store<Bpa>::recycle(std::uint64_t tag) noexcept {
  dead_.erase(dead_.begin(), dead_.begin() + static_cast<std::ptrdiff_t>(reused()));
  reuse_next_.store(0, std::memory_order_relaxed);
  recycled_ = static_cast<std::size_t>(
      std::partition_point(dead_.begin(), dead_.end(), [&](const death& d) { return d.tag < tag; }) - dead_.begin());
}

template <class Bpa>
template <class Before>
void basic_leaf_store<Bpa>::compact(Before&& before) {
  const std::size_t ids = leaves_.size();
  const std::size_t live = live_leaves();
  ::tandem::host::detail::allocation_point();
  std::vector<leaf_id> moved(ids);
  std::vector<leaf_id> holes;  // dead ids below `live`, ascending
  holes.reserve(dead_leaves());
  for (std::size_t id = 0; id < ids; ++id) moved[id] = static_cast<leaf_id>(id);
  for (std::size_t d = reused(); d < dead_.size(); ++d) {
    moved[dead_[d].id] = no_leaf;
    if (dead_[d].id < live) holes.push_back(dead_[d].id);
  }
  std::sort(holes.begin(), holes.end());
  // The live leaves at or above `live` move into the holes, in order.
  std::size_t h = 0;
  for (std::size_t id = live; id < ids; ++id) {
    if (moved[id] != no_leaf) moved[id] = holes[h++];
  }
  before(static_cast<const std::vector<leaf_id>&>(moved));
  // Nothing below allocates or throws.
  for (std::size_t id = live; id < ids; ++id) {
    if (moved[id] != no_leaf) leaves_[moved[id]] = leaves_[id];
  }
  for (std::size_t id = 0; id < live; ++id) {
    leaf_type& l = leaves_[id];
    if (l.right != no_leaf) l.right = moved[l.right];
  }
  head_ = moved[head_];
  dead_.clear();
  recycled_ = 0;
  reuse_next_.store(0, std::memory_order_relaxed);
  leaves_.shrink(live);
}

template <class Bpa>
basic_leaf_store<Bpa> basic_leaf_store<Bpa>::bulk_load(const key_type* keys, const value_type* values,
                                                       std::size_t n, double fill) {
  if (!(fill > 0.0 && fill <= 1.0)) {
    throw std::invalid_argument("leaf_store::bulk_load: fill must be in (0, 1], got " + std::to_string(fill));
  }
  const std::size_t bad = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(1, std::max<std::size_t>(n, 1)), n,
      [&](const tbb::blocked_range<std::size_t>& r, std::size_t first_bad) {
        for (std::size_t i = r.begin(); i < r.end() && i < first_bad; ++i) {
          if (keys[i - 1] >= keys[i]) return i;
        }
        return first_bad;
      },
      [](std::size_t a, std::size_t b) { return std::min(a, b); });
  if (bad < n) {
    throw std::invalid_argument("leaf_store::bulk_load: keys must be strictly increasing; key[" +
                                std::to_string(bad) + "] = " + std::to_string(keys[bad]) + " follows " +
                                std::to_string(keys[bad - 1]));
  }

  basic_leaf_store store;  // one empty leaf owning everything
  if (n == 0) return store;
  const std::size_t per_leaf =
      std::max<std::size_t>(1, static_cast<std::size_t>(std::floor(fill * static_cast<double>(Bpa::capacity))));
  const std::size_t count = (n + per_leaf - 1) / per_leaf;
  if (count >= no_leaf) throw error("leaf_store::bulk_load: too many leaves for 32-bit leaf ids");
  // Leaf i takes keys [i * per_leaf, ...). The leaves are built in parallel
  // chunks, so that their memory (huge pages, zeroed when first touched) is
  // first touched by many threads; leaf 0 exists already.
  auto assign = [&](std::size_t first, std::size_t last) {
    for (std::size_t i = first; i < last; ++i) {
      const std::size_t begin = i * per_leaf;
      const std::size_t end = std::min(n, begin + per_leaf);
      leaf_type& l = store.leaves_[i];
      l.data.assign_sorted(keys + begin, values + begin, end - begin);
      l.low = i == 0 ? min_key : keys[begin];
      l.high = i + 1 == count ? max_key : keys[end] - 1;
      l.right = i + 1 == count ? no_leaf : static_cast<leaf_id>(i + 1);
    }
  };
  assign(0, 1);
  store.leaves_.reserve(count);
  store.leaves_.append(count, assign);
  const std::size_t last = n - (count - 1) * per_leaf;  // keys of the last leaf
  store.near_full_.store(static_cast<std::int64_t>((is_near_full(per_leaf) ? count - 1 : 0) + is_near_full(last)),
                         std::memory_order_relaxed);
  return store;
}

template <class Bpa>
std::size_t basic_leaf_store<Bpa>::size() const {
  std::size_t total = 0;
  for (std::size_t i = 0, count = leaves_.size(); i < count; ++i) total += leaves_[i].data.size();
  return total;
}

template <class Bpa>
split_record basic_leaf_store<Bpa>::split(leaf_id id, std::optional<key_type> next) {
  const leaf_id right_id = allocate();
  leaf_type& left = leaves_[id];
  leaf_type& right = leaves_[right_id];
  const bool was = is_near_full(left.data.size());
  const key_type separator = left.data.split_into(right.data, next);
  note_fill(was, is_near_full(left.data.size()));
  note_fill(false, is_near_full(right.data.size()));
  right.low = separator;
  right.high = left.high;
  right.right = left.right;
  left.high = separator - 1;  // separator > left.low: it is above the lower half's keys
  left.right = right_id;
  return {separator, id, right_id};
}

template <class Bpa>
template <class Run, class Splits>
leaf_id basic_leaf_store<Bpa>::apply_run(leaf_id id, const Run& run, std::size_t n, Splits* splits,
                                         std::int64_t& added, apply_path path) {
  std::size_t done = 0;
  added = 0;
  while (done < n) {
    id = walk_right(id, run.key(done));
    leaf_type& l = leaves_[id];
    // The ops this leaf owns: all the rest where the last is (no split since
    // the routing), else up to the first above its fence.
    std::size_t end = run.key(n - 1) <= l.high ? n : done;
    while (end < n && run.key(end) <= l.high) ++end;
    const std::size_t before = l.data.size();
    done += l.data.apply(run.advanced(done), end - done, path);
    added += static_cast<std::int64_t>(l.data.size()) - static_cast<std::int64_t>(before);
    note_fill(is_near_full(before), is_near_full(l.data.size()));
    if (done < end) {  // full: split, continue in the half that owns the next key
      const split_record s = split(id, run.key(done));
      if (splits) splits->push_back(s);
    }
  }
  return id;
}

template <class Bpa>
leaf_table basic_leaf_store<Bpa>::table() const {
  leaf_table t;
  t.ids.reserve(leaves_.size());
  t.low_keys.reserve(leaves_.size());
  for (leaf_id id = head_; id != no_leaf; id = leaves_[id].right) {
    t.ids.push_back(id);
    t.low_keys.push_back(leaves_[id].low);
  }
  return t;
}

template <class Bpa>
void basic_leaf_store<Bpa>::verify() const {
  const std::size_t count = leaves_.size();
  std::vector<bool> seen(count, false);
  for (std::size_t d = reused(); d < dead_.size(); ++d) {
    const leaf_id id = dead_[d].id;
    const leaf_type& l = leaves_[id];
    if (id >= count || seen[id]) throw invariant_error("leaf_store: dead leaf " + std::to_string(id) + " listed twice or not allocated");
    if (l.low != max_key || l.high != min_key || l.data.size() != 0) {
      throw invariant_error("leaf_store: dead leaf " + std::to_string(id) + " owns keys or holds entries");
    }
    seen[id] = true;
  }
  key_type expected_low = min_key;
  bool reached_end = false;
  std::size_t walked = 0;
  for (leaf_id id = head_; id != no_leaf; id = leaves_[id].right) {
    const std::string where = "leaf_store: leaf " + std::to_string(id);
    if (id >= count) throw invariant_error(where + " is not allocated");
    if (seen[id]) throw invariant_error(where + " is linked twice, or dead and linked");
    if (reached_end) throw invariant_error(where + " follows the leaf that owns UINT64_MAX");
    seen[id] = true;
    ++walked;
    const leaf_type& l = leaves_[id];
    if (l.low != expected_low) {
      throw invariant_error(where + ": low fence " + std::to_string(l.low) + ", expected " +
                            std::to_string(expected_low));
    }
    l.verify();
    if (l.high == max_key) {
      reached_end = true;
    } else {
      expected_low = l.high + 1;
    }
  }
  if (!reached_end) throw invariant_error("leaf_store: no leaf owns UINT64_MAX");
  if (walked != live_leaves()) {
    throw invariant_error("leaf_store: " + std::to_string(live_leaves() - walked) + " live leaves are not linked");
  }
}

extern template class basic_leaf_store<bpa>;
extern template leaf_id basic_leaf_store<bpa>::apply_run(leaf_id, const record_run&, std::size_t,
                                                         std::vector<split_record>*, std::int64_t&, apply_path);
extern template leaf_id basic_leaf_store<bpa>::apply_run(leaf_id, const column_run&, std::size_t, split_sink*,
                                                         std::int64_t&, apply_path);

}  // namespace tandem::host
