// Step 4 of a batch and the jobs that reshape the index (index_impl.hpp):
// new separators from splits merge into the leaf table and the inner layout
// is rebuilt on the CPU (linear in the leaves); bulk load; the whole-index
// invariant check (its upload to the GPU: gpu_setup.cpp). Runs on the
// dispatcher thread, in the arena.
//
// Each of them builds the new leaf table and layout aside and then puts
// them in place with moves that cannot fail, so one that cannot get its
// memory leaves the table and layout as they were.
#include "index_impl.hpp"

#include <tandem/host/detail/fault_point.hpp>
#include <tandem/host/sorted_runs.hpp>
#include <tandem/error.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>
#include <oneapi/tbb/parallel_sort.h>

#include <algorithm>
#include <array>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <chrono>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace tandem {

std::shared_ptr<const inner_layout> index::impl::layout_snapshot() const {
  std::lock_guard<std::mutex> lock(layout_mutex_);
  return layout_;
}
std::shared_ptr<const inner_layout> index::impl::gpu_layout_snapshot() const {
  std::lock_guard<std::mutex> lock(layout_mutex_);
  return gpu_layout_;
}
void index::impl::set_layout(std::shared_ptr<const inner_layout> l) {
  std::lock_guard<std::mutex> lock(layout_mutex_);
  layout_ = std::move(l);
}

void index::impl::inner_sync(std::vector<host::split_record>& splits, const std::vector<leaf_id>& underfull) {
  std::sort(splits.begin(), splits.end(),
            [](const host::split_record& a, const host::split_record& b) { return a.separator < b.separator; });
  host::detail::allocation_point();  // the new leaf table
  host::leaf_table t;
  t.low_keys.resize(table_.low_keys.size() + splits.size());
  t.ids.resize(t.low_keys.size());
  std::size_t i = 0, s = 0, o = 0;
  while (i < table_.low_keys.size() || s < splits.size()) {
    if (s == splits.size() || (i < table_.low_keys.size() && table_.low_keys[i] < splits[s].separator)) {
      t.low_keys[o] = table_.low_keys[i];
      t.ids[o++] = table_.ids[i++];
    } else {
      t.low_keys[o] = splits[s].separator;
      t.ids[o++] = splits[s++].right;
    }
  }
  merge_underfull(t, underfull);
  adopt_table(std::move(t));
}

void index::impl::merge_underfull(host::leaf_table& t, const std::vector<leaf_id>& underfull) {
  if (underfull.empty()) return;
  using store_type = host::leaf_store;
  // The plan's memory first: without it the leaves stay as they are (the
  // batch happened all the same; a later batch offers them again).
  std::vector<std::uint32_t> ords;
  std::vector<char> gone;
  try {
    host::detail::allocation_point();
    ords.reserve(underfull.size());
    gone.assign(t.size(), 0);
    store_.reserve_merges(underfull.size());
  } catch (const std::bad_alloc&) {
    return;
  }
  for (const leaf_id id : underfull) {
    const auto o = static_cast<std::uint32_t>(
        std::upper_bound(t.low_keys.begin(), t.low_keys.end(), store_[id].low) - t.low_keys.begin() - 1);
    if (t.ids[o] == id) ords.push_back(o);  // else it died or moved on since
  }
  std::sort(ords.begin(), ords.end());
  ords.erase(std::unique(ords.begin(), ords.end()), ords.end());
  auto size_of = [&](std::uint32_t o) { return store_[t.ids[o]].data.size(); };
  auto fits = [](std::size_t a, std::size_t b) { return a == 0 || b == 0 || a + b <= store_type::merge_fill; };
  // Ascending: the live neighbour left of o is o - 1, or, when the last
  // merge took o - 1, the leaf that took it. Each offer merges once.
  std::uint32_t last_dead = 0, last_survivor = 0;  // last_dead 0: none (the head never dies)
  const std::uint64_t tag = layout_versions_;  // versions built from now on do not list the dead
  std::size_t merged = 0;
  for (const std::uint32_t o : ords) {
    if (gone[o] || size_of(o) > store_type::merge_below) continue;
    const std::uint32_t left = o > 0 && o - 1 == last_dead ? last_survivor : o - 1;
    if (o > 0 && fits(size_of(left), size_of(o))) {
      store_.merge(t.ids[left], t.ids[o], tag);
      if (cache_) cache_->drop(std::array<leaf_id, 2>{t.ids[left], t.ids[o]}.data(), 2);
      gone[o] = 1;
      last_dead = o;
      last_survivor = left;
      ++merged;
    } else if (o + 1 < t.size() && fits(size_of(o), size_of(o + 1))) {
      store_.merge(t.ids[o], t.ids[o + 1], tag);
      if (cache_) cache_->drop(std::array<leaf_id, 2>{t.ids[o], t.ids[o + 1]}.data(), 2);
      gone[o + 1] = 1;
      last_dead = o + 1;
      last_survivor = o;
      ++merged;
    }
  }
  if (merged == 0) return;
  std::size_t kept = 0;
  for (std::size_t o = 0; o < t.size(); ++o) {
    if (gone[o]) continue;
    t.low_keys[kept] = t.low_keys[o];
    t.ids[kept++] = t.ids[o];
  }
  t.low_keys.resize(kept);
  t.ids.resize(kept);
}

void index::impl::rebuild_table_from_store(const std::vector<leaf_id>& underfull) {
  keys_.store(store_.size(), std::memory_order_release);
  // With as many leaves as the table lists, no merge offered and no sync
  // left undone, the table is the chain already (a failed batch that split
  // nothing).
  if (!sync_pending_ && underfull.empty() && !table_.ids.empty() && table_.size() == store_.live_leaves()) return;
  // Splits of a failed batch may be unrecorded: their leaves' ids may hold
  // copies of leaves that died. Copies come back as gets miss.
  if (cache_) cache_->clear();
  try {
    host::detail::allocation_point();  // the new leaf table
    host::leaf_table t = store_.table();
    merge_underfull(t, underfull);
    adopt_table(std::move(t));
  } catch (...) {
    sync_pending_ = true;
    throw;
  }
}

std::shared_ptr<const inner_layout> index::impl::build_layout(const host::leaf_table& t, std::uint64_t leaves_made) {
  inner_layout l = inner_layout::build(t.low_keys.data(), t.ids.data(), t.size(), cfg_.fanout);
  l.set_stamp({++layout_versions_, leaves_made});
  return std::make_shared<const inner_layout>(std::move(l));
}

std::uint64_t index::impl::oldest_routable_version(const prepared& p) const {
  std::uint64_t v = p.version ? p.version->stamp().version : 0;
  std::lock_guard<std::mutex> lock(layout_mutex_);
  if (gpu_layout_) v = std::min(v, gpu_layout_->stamp().version);
  return v;
}

void index::impl::compact() {
  if (sync_pending_) rebuild_table_from_store({});
  const bool dropped = store_.dead_leaves() != 0;
  if (dropped) {
    // The new table and layout are built before any leaf moves: a
    // compaction that cannot get its memory changes nothing.
    host::leaf_table t;
    std::shared_ptr<const inner_layout> layout;
    store_.compact([&](const std::vector<leaf_id>& moved) {
      host::detail::allocation_point();
      t.low_keys = table_.low_keys;
      t.ids.resize(table_.size());
      for (std::size_t o = 0; o < t.size(); ++o) t.ids[o] = moved[table_.ids[o]];
      layout = build_layout(t, store_.made());
    });
    {
      // Leaf ids changed: no version of the old ids may route on the GPU.
      std::lock_guard<std::mutex> lock(layout_mutex_);
      gpu_layout_.reset();
    }
    table_ = std::move(t);
    set_layout(std::move(layout));
    guides_.release();  // sized by the old ids
    compact_guides_.release();
    sync_gpu();
    refresh_guides();
    ++inner_syncs_;
    refill_copies();  // leaf ids changed
  }
  // The batch arrays are sized by the largest batch so far: the next
  // batches grow them again as far as they need.
  for (route_space& sp : spaces_) sp.release();
  try {
    leaf_ws_.release();
  } catch (const std::bad_alloc&) {  // keeps its arrays
  }
  answers_->release_free();
  leaf_report_ = {};
  (void)tandem::detail::release_free_columns();
  ++compactions_;
  release_free_memory();
  publish_stats(nullptr, false, 0);  // leaves and bytes after it
}

void index::impl::release_free_memory() noexcept {
#if defined(__GLIBC__)
  (void)malloc_trim(0);  // the allocator's free pages back to the system
#endif
}

void index::impl::adopt_table(host::leaf_table&& t) {
  auto layout = build_layout(t, store_.made());
  table_ = std::move(t);
  set_layout(std::move(layout));
  sync_pending_ = false;
  sync_gpu();
  ++inner_syncs_;
}

namespace {

/// Of n pairs sorted by key (equal keys in input order), keeps the last
/// pair of each run of equal keys (a later duplicate wins) in keys/values,
/// in parallel. @return how many were kept.
template <class KeyAt, class ValueAt>
std::size_t keep_last_of_runs(std::size_t n, KeyAt key_at, ValueAt value_at, key_type* keys, value_type* values) {
  const std::size_t chunks = std::max<std::size_t>(1, std::min<std::size_t>(1024, n >> 16));
  auto chunk_begin = [&](std::size_t c) { return c * n / chunks; };
  auto kept = [&](std::size_t i) { return i + 1 == n || key_at(i + 1) != key_at(i); };
  std::vector<std::size_t> offset(chunks + 1, 0);
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    std::size_t k = 0;
    for (std::size_t i = chunk_begin(c), e = chunk_begin(c + 1); i < e; ++i) k += kept(i);
    offset[c + 1] = k;
  });
  for (std::size_t c = 0; c < chunks; ++c) offset[c + 1] += offset[c];
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    std::size_t o = offset[c];
    for (std::size_t i = chunk_begin(c), e = chunk_begin(c + 1); i < e; ++i) {
      if (!kept(i)) continue;
      keys[o] = key_at(i);
      values[o++] = value_at(i);
    }
  });
  return offset[chunks];
}

}  // namespace

void index::impl::load(const load_input& in) {
  // Sorted by key; for a key given twice the later pair wins. One parallel
  // pass asks whether the input is in key order already: then the sort is
  // skipped (and, with two arrays and no repeated key, the copy too: the
  // leaves are built from the caller's arrays). Otherwise the GPU sorts the
  // pairs in runs (gpu_router::sort_pairs, stable, last pair of each key
  // kept) and the host merges the runs; without a GPU, or below
  // gpu_load_min_pairs, or when the GPU fails, the CPU routing's radix sort
  // orders (key, index) so that equal keys keep their input order.
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t n = in.n, stride = in.stride;
  auto key_of = [&](std::size_t i) { return in.keys[i * stride]; };
  auto value_of = [&](std::size_t i) { return in.values[i * stride]; };
  struct order {
    bool sorted = true;    // non-decreasing keys
    bool distinct = true;  // strictly increasing keys
  };
  const order o = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(1, std::max<std::size_t>(n, 1), std::size_t{1} << 16), order{},
      [&](const tbb::blocked_range<std::size_t>& r, order acc) {
        for (std::size_t i = r.begin(); i < r.end() && acc.sorted; ++i) {
          acc.sorted = key_of(i - 1) <= key_of(i);
          acc.distinct = acc.distinct && key_of(i - 1) < key_of(i);
        }
        return acc;
      },
      [](order x, order y) { return order{x.sorted && y.sorted, x.distinct && y.distinct}; });

  scheduler::host_array<key_type> keys;
  scheduler::host_array<value_type> values;
  const key_type* sorted_keys = keys.data();
  const value_type* sorted_values = values.data();
  std::size_t m = 0;
  std::string how;
  auto into_arrays = [&](std::size_t kept) {
    m = kept;
    sorted_keys = keys.data();
    sorted_values = values.data();
  };
  if (o.sorted && o.distinct && stride == 1) {
    sorted_keys = in.keys;
    sorted_values = in.values;
    m = n;
    how = "input in key order";
  } else if (o.sorted) {
    into_arrays(keep_last_of_runs(n, key_of, value_of, keys.get(n), values.get(n)));
    how = "input in key order, repeated keys dropped";
  }
  // Under config.max_gpu_bytes the sort's runs take what the index leaves.
  std::size_t run_pairs = 0;
  if (gpu_ && cfg_.max_gpu_bytes > 0) {
    const std::size_t held = gpu_->device_bytes();
    const std::size_t room = cfg_.max_gpu_bytes > held ? cfg_.max_gpu_bytes - held : 0;
    run_pairs = std::size_t{1} << 30;
    while (run_pairs >= gpu_load_min_pairs && device::gpu_router::sort_bytes(run_pairs) > room) run_pairs /= 2;
  }
  // The host merges the runs at a cost that grows with their number: more
  // than max_load_runs sort faster on the CPU.
  const bool gpu_can = gpu_ && !degraded_.load() && !over_budget_.load() && n >= gpu_load_min_pairs &&
                       (cfg_.max_gpu_bytes == 0 ||
                        (run_pairs >= gpu_load_min_pairs && n <= max_load_runs * run_pairs)) &&
                       (stride == 1 || (stride == 2 && in.values == in.keys + 1));
  scheduler::host_array<key_type> run_keys;  // the GPU's runs
  scheduler::host_array<value_type> run_values;
  if (!o.sorted && gpu_can) {
    try {
      device::sort_timing t;
      const std::vector<std::size_t> bounds =
          gpu_->sort_pairs(in.keys, in.values, stride, n, run_keys.get(n), run_values.get(n), run_pairs, &t);
      const auto merge0 = std::chrono::steady_clock::now();
      if (bounds.size() == 2) {  // one run: sorted and unique already
        sorted_keys = run_keys.data();
        sorted_values = run_values.data();
        m = bounds[1];
      } else {
        into_arrays(host::merge_sorted_runs(run_keys.data(), run_values.data(), bounds, keys.get(n), values.get(n)));
        run_keys.release();  // before the leaves take their memory
        run_values.release();
      }
      char text[192];
      std::snprintf(text, sizeof text, "GPU sort in %zu run%s (up %.3f s, sort %.3f s, down %.3f s), host merge %.3f s",
                    t.runs, t.runs == 1 ? "" : "s", t.upload, t.sort, t.download,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - merge0).count());
      how = text;
    } catch (const std::exception&) {
      note_gpu_failure();  // the CPU sorts instead
    }
  }
  if (!o.sorted && how.empty()) {
    if (n < std::size_t{std::numeric_limits<std::uint32_t>::max()}) {
      scheduler::host_array<key_type> radix_keys;
      scheduler::host_array<std::uint32_t> positions;
      {
        host::route_workspace work;
        host::sort_keys(in.keys, stride, n, radix_keys.get(n), positions.get(n), work);
      }
      const key_type* sk = radix_keys.data();
      const std::uint32_t* pos = positions.data();
      into_arrays(keep_last_of_runs(
          n, [&](std::size_t i) { return sk[i]; }, [&](std::size_t i) { return value_of(pos[i]); }, keys.get(n),
          values.get(n)));
    } else {  // positions need more than 32 bits
      std::vector<std::pair<key_type, std::size_t>> order(n);
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) order[i] = {key_of(i), i};
      });
      tbb::parallel_sort(order.begin(), order.end());
      into_arrays(keep_last_of_runs(
          n, [&](std::size_t i) { return order[i].first; }, [&](std::size_t i) { return value_of(order[i].second); },
          keys.get(n), values.get(n)));
    }
    how = "CPU radix sort";
  }
  // The new leaves, table and layout are built aside: a load that cannot
  // get its memory leaves the index as it was.
  host::leaf_store fresh = host::leaf_store::bulk_load(sorted_keys, sorted_values, m, cfg_.leaf_fill);
  host::leaf_table t = fresh.table();
  auto layout = build_layout(t, fresh.made());
  {
    // No layout of the old leaves may route on the GPU: if the upload below
    // fails, the GPU has no version until the next one succeeds.
    std::lock_guard<std::mutex> lock(layout_mutex_);
    gpu_layout_.reset();
  }
  sequence_ = std::max(sequence_, in.sequence);
  merges_before_ += store_.merges();
  store_ = std::move(fresh);
  table_ = std::move(t);
  set_layout(std::move(layout));
  sync_pending_ = false;
  keys_.store(m, std::memory_order_release);
  sync_gpu();
  refresh_guides();
  ++inner_syncs_;
  refill_copies();
  char text[64];
  std::snprintf(text, sizeof text, "%zu pairs in %.3f s: ", n,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  last_load_ = text + how;
}

void index::impl::verify_all() {
  if (sync_pending_) rebuild_table_from_store({});  // an inner sync left for later
  store_.verify();
  const host::leaf_table walked = store_.table();
  if (walked.low_keys != table_.low_keys || walked.ids != table_.ids) {
    throw invariant_error("index: the leaf table differs from the chain of leaves");
  }
  layout_->verify(table_.low_keys.data(), table_.ids.data(), table_.size());
  if (store_.size() != keys_.load()) {
    throw invariant_error("index: key count " + std::to_string(keys_.load()) + " != " +
                          std::to_string(store_.size()) + " keys in the leaves");
  }
}

}  // namespace tandem
