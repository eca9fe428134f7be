// Steps 3 and 5 of a batch (index_impl.hpp): the leaf phase on the routed
// batch, the key count, inner sync after splits, then the answers back to
// batch order: on the GPU (sorted answers up, scatter kernel, batch-order
// answers down into the result's pinned columns) for GPU-routed batches,
// else on the host in parallel; lower_bound keys are written by the host
// (scan entries went straight to the result in the leaf phase). A batch of
// at most config.direct_get_ops gets skips route and scatter: each get
// descends and reads its leaf, its answer written in batch order
// (get_directly). Runs on the dispatcher thread, in the arena.
//
// Failure (index.hpp): everything that can fail for lack of memory happens
// before the leaf phase's writes: the reads, the room for splits, the
// messages of refused scans. Once the writes start the batch happens; what
// follows them never fails it: an inner sync that cannot get its memory is
// left for later (sync_pending_), since routes on the older layout stay
// correct by right links.
#include "device_columns.hpp"
#include "index_impl.hpp"

#include <tandem/host/answer_scatter.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>

namespace tandem {
namespace {

/// The keys of the lower_bounds a batch's route answered from the leaf
/// copies (route_space::copy_keys), into its key column or the caller's
/// array; the host writes those of the rest after.
void copy_lower_bound_keys(prepared& p) {
  if (!p.from_copies || p.info.ops_by_type[static_cast<std::size_t>(op_type::lower_bound)] == 0) return;
  key_type* out = p.j->in_place ? p.j->keys_out : p.result_keys.data();
  if (out == nullptr) return;
  const auto* types = p.j->ops.types();
  const key_type* keys = p.space->copy_keys.data();
  for (std::size_t i = 0; i < p.n; ++i) {
    if (types[i] == op_type::lower_bound) out[i] = keys[i];
  }
}

/// Per-op errors for the scans the leaf phase refused for the output cap,
/// merged into p.errors (sorted by op index).
void add_refused_scan_errors(prepared& p, const std::vector<host::refused_scan>& refused, std::size_t cap_bytes) {
  std::vector<std::pair<std::size_t, std::string>> added;
  added.reserve(refused.size());
  for (const host::refused_scan& r : refused) {
    added.emplace_back(r.pos, "op " + std::to_string(p.j->local_index(r.pos)) + " (scan): did not run: its " +
                                  std::to_string(r.entries) + " entries would take the batch's scan output past " +
                                  "config.max_batch_output_bytes = " + std::to_string(cap_bytes));
  }
  std::vector<std::pair<std::size_t, std::string>> all;
  all.reserve(p.errors.size() + added.size());
  std::merge(std::make_move_iterator(p.errors.begin()), std::make_move_iterator(p.errors.end()),
             std::make_move_iterator(added.begin()), std::make_move_iterator(added.end()), std::back_inserter(all),
             [](const auto& a, const auto& b) { return a.first < b.first; });
  p.errors = std::move(all);
}

}  // namespace

void index::impl::run_leaves(prepared& p, std::uint64_t& split_count) {
  const batch& b = p.j->ops;
  const std::size_t n = b.size();
  if (n == 0) {
    make_member_results(p);
    return;
  }
  if (p.direct) return get_directly(p);
  if (p.from_copies && p.routed == 0) {  // every get answered from the leaf copies
    make_member_results(p);
    p.result_keys = p.j->ops.take_keys();
    copy_lower_bound_keys(p);
    const auto t0 = clock_type::now();
    sync_copies(p, sync_pending_);
    p.times.sync = seconds_since(t0);
    verify_if_asked();
    return;
  }
  route_space& sp = *p.space;
  host::leaf_phase_input in;
  in.routes = &p.routes;
  in.n = p.routed;
  in.leaf_ids = p.version->leaf_ids().data();
  in.leaf_count = p.version->leaf_count();
  in.leaves_made = p.version->stamp().leaves_made;
  in.ops = &b;
  in.scan_slot = sp.scan_slot.data();
  in.status = p.columns->status;
  in.gets_only = p.gets_only;
  if (cfg_.max_batch_output_bytes != 0) in.max_scan_entries = cfg_.max_batch_output_bytes / sizeof(entry);
  const host::sorted_answers sorted{sp.answers.get(n), sp.found.get(n), p.columns.get()};
  host::leaf_phase_report& lr = leaf_report_;
  // Splits may reuse the ids of leaves no route can reach any more.
  if (!p.gets_only) store_.recycle(oldest_routable_version(p));
  host::run_leaf_reads(store_, in, sorted, lr, leaf_ws_);
  if (!leaf_ws_.refused_scans().empty()) {
    add_refused_scan_errors(p, leaf_ws_.refused_scans(), cfg_.max_batch_output_bytes);
  }
  make_member_results(p);
  // From here on the batch happens: nothing below fails it for lack of memory.
  host::run_leaf_writes(store_, in, sorted, lr, leaf_ws_);
  if (cache_) {  // the new leaves' ids may have held copies of dead leaves
    for (const host::split_record& s : lr.splits) cache_->drop(&s.right, 1);
  }
  p.times.order = lr.order;
  p.times.read = lr.read;
  p.times.leaf = lr.leaf;
  p.bytes.leaf = lr.bytes;
  p.bytes.read = lr.read_bytes;
  p.lines = lr.lines;
  p.hinted_ops = lr.hinted_ops;
  p.stale_hints = lr.stale_hints;
  keys_.store(static_cast<std::size_t>(static_cast<std::int64_t>(keys_.load()) + lr.key_delta),
              std::memory_order_release);

  auto t0 = clock_type::now();
  split_count = lr.splits.size();
  try {
    if (sync_pending_ || lr.splits_lost) {
      rebuild_table_from_store(lr.underfull);
    } else if (!lr.splits.empty() || !lr.underfull.empty()) {
      inner_sync(lr.splits, lr.underfull);
    }
  } catch (...) {
    sync_pending_ = true;  // the next batch (or verify, or load) tries again
  }
  if (p.routes.hints != nullptr) {  // asked for: refresh guides missing, or stale for 1 op in 8
    ++batches_since_guides_;
    const bool stale = !p.routes.hinted || lr.stale_hints * 8 > lr.hinted_ops + lr.stale_hints;
    if (stale && batches_since_guides_ >= guide_refresh_batches) refresh_guides();
  }
  sync_copies(p, sync_pending_ || lr.splits_lost || !lr.splits.empty() || !lr.underfull.empty());
  p.times.sync = seconds_since(t0);

  t0 = clock_type::now();
  tandem::detail::answer_columns& cols = *p.columns;
  // After copies answered some gets, only the rest are scattered (the GPU
  // scatter writes every answer).
  p.gpu_scatter = !p.from_copies && cfg_.gpu_scatter && p.info.gpu_keys != 0 && gpu_ && !degraded_.load() &&
                  gpu_scatter_fits(n);
  if (keys_on_gpu(*p.j)) {  // the misses' answers into the caller's GPU arrays
    try {
      p.bytes.pcie += scatter_misses(*p.j, p.routes.positions, sorted.values, sorted.found, p.routed);
    } catch (...) {
      p.failure = std::current_exception();
    }
  } else if (!p.gpu_scatter) {
    host::scatter_answers(p.routes.positions, sorted.values, sorted.found, p.routed, cols.values, cols.found);
  }
  p.result_keys = p.j->ops.take_keys();
  // lower_bound's keys: into the result's key column, or the caller's array.
  key_type* found_keys = p.j->in_place ? p.j->keys_out : p.result_keys.data();
  copy_lower_bound_keys(p);  // those the copies answered; the host's below
  p.bytes.complete = n * (sizeof(std::uint32_t) + 2 * (sizeof(value_type) + 1)) +
                     (found_keys ? host::write_lower_bound_keys(leaf_ws_, in, found_keys) : 0);
  p.times.complete = seconds_since(t0);
  {
    std::lock_guard<std::mutex> lock(policy_mutex_);
    policy_.observe_leaf(n, p.times.order + p.times.read + p.times.leaf + p.times.complete);
  }
  verify_if_asked();
}

void index::impl::verify_if_asked() {
  if (!cfg_.verify_each_batch) return;
  try {
    verify_all();
  } catch (const std::bad_alloc&) {  // the check could not run; the batch happened
  }
}

void index::impl::get_directly(prepared& p) {
  make_member_results(p);
  const auto t0 = clock_type::now();
  const std::size_t n = p.n;
  const inner_layout& l = *p.version;
  const key_type* keys = p.j->ops.keys();
  value_type* values = p.columns->values;
  std::uint8_t* found = p.columns->found;
  constexpr std::size_t grain = 64;
  if (n <= grain) {
    p.lines = answer_gets(l, keys, n, values, found, true);
  } else {
    p.lines = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, n, grain), host::leaf_line_count{},
        [&](const tbb::blocked_range<std::size_t>& r, host::leaf_line_count sum) {
          return sum + answer_gets(l, keys + r.begin(), r.size(), values + r.begin(), found + r.begin(), true);
        },
        std::plus<>());
  }
  p.result_keys = p.j->ops.take_keys();
  p.times.leaf = seconds_since(t0);
  p.bytes.leaf = n * (sizeof(key_type) + sizeof(value_type) + 1);
  verify_if_asked();
}

host::leaf_line_count index::impl::answer_gets(const inner_layout& l, const key_type* keys, std::size_t n,
                                               value_type* values, std::uint8_t* found, bool sample) const {
  const inner_layout_view v = l.view();
  const leaf_id* ids = l.leaf_ids().data();
  const host::leaf_store& store = store_;
  // Chunks of gets in a software pipeline, each chunk one step further every
  // round, so that a step's cache misses (started by the step before, a
  // round earlier) have arrived when it runs:
  //   the leaf by the layout's radix table (inner_layout::radix):
  //      prefetch the key's bucket; pick the owner's id among the bucket's
  //      candidates (leaf_radix_view::leaf_of). Where the layout has no
  //      table, one step per inner level (descend_level). After the last,
  //      each leaf's first line (fences, counts) is prefetched;
  //   then guess the key's block from the fences, prefetch its header line
  //      (bpa::start_route);
  //   find the block and the window of slots there, prefetch its lines
  //      (bpa::start_get_near);
  //   compare and read the value (bpa::finish_get; a key found in a block shares its
  //      line), write the answer in batch order.
  // A get thus reads about four lines of its leaf. A route on an older
  // layout version reaches the leaf that owns its key by right links.
  const leaf_radix_view rx = l.radix();
  const bool by_radix = rx.buckets != 0;
  const std::size_t to_leaf = by_radix ? 2 : static_cast<std::size_t>(v.height);  // steps to the leaf
  const std::size_t steps = to_leaf + 3;
  constexpr std::size_t max_steps = 16;  // heights up to 13: 16^8 leaves already exceed leaf_id
  if (steps > max_steps) {
    throw std::length_error("tandem::index: the direct get path takes inner layouts up to height " +
                            std::to_string(max_steps - 3) + ", not " + std::to_string(v.height));
  }
  constexpr std::size_t chunk = 16;
  struct lane {
    std::uint32_t at[chunk];
    std::uint32_t block[chunk];
    const host::leaf* leaf[chunk];  // once found: no arena lookup a step
    host::bpa::slot s[chunk];
  } lanes[max_steps];
  const std::size_t chunks = (n + chunk - 1) / chunk;
  for (std::size_t round = 0; round < chunks + steps - 1; ++round) {
    for (std::size_t step = steps; step-- > 0;) {
      if (round < step || round - step >= chunks) continue;
      const std::size_t c = (round - step) * chunk;
      const std::size_t m = std::min(chunk, n - c);
      const key_type* k = keys + c;
      lane& ln = lanes[(round - step) % steps];
      if (by_radix && step < to_leaf) {
        if (step == 0) {
          for (std::size_t i = 0; i < m; ++i) {
            if (const radix_bucket* e = rx.bucket_of(k[i])) TANDEM_PREFETCH(e);
          }
        } else {
          for (std::size_t i = 0; i < m; ++i) {
            ln.leaf[i] = &store[rx.leaf_of(k[i])];
            ln.leaf[i]->prefetch_first_line();
          }
        }
        continue;
      }
      if (step < to_leaf) {
        descend_level(v, static_cast<int>(step), k, static_cast<std::uint32_t>(m), ln.at);
        if (step + 1 == to_leaf) {
          for (std::size_t i = 0; i < m; ++i) {
            ln.leaf[i] = &store[ids[ln.at[i]]];
            ln.leaf[i]->prefetch_first_line();
          }
        }
        continue;
      }
      switch (step - to_leaf) {
        case 0:
          for (std::size_t i = 0; i < m; ++i) {
            const host::leaf* f = ln.leaf[i];
            if (k[i] > f->high) f = ln.leaf[i] = &store[store.walk_right(f->right, k[i])];
            ln.block[i] = static_cast<std::uint32_t>(f->data.start_route(k[i], f->low, f->high));
          }
          break;
        case 1:
          for (std::size_t i = 0; i < m; ++i) ln.s[i] = ln.leaf[i]->data.start_get_near(k[i], ln.block[i]);
          break;
        default:
          for (std::size_t i = 0; i < m; ++i) ln.leaf[i]->data.finish_get(ln.s[i], k[i], values + c + i, found + c + i);
      }
    }
  }
  // The leaf lines of one get in line_sample_groups (stats::leaf_lines),
  // found again once the range is answered, while its lines are cached.
  host::leaf_line_count lines;
  for (std::size_t i = 0; sample && i < n; i += host::line_sample_groups) {
    const key_type key = keys[i];
    const host::leaf& f = owner(l, key);
    lines += {1, f.data.lookup_lines(&key, 1, f.data.start_route(key, f.low, f.high)).read};
  }
  return lines;
}

leaf_id index::impl::owner_id(const inner_layout& l, key_type key) const noexcept {
  const leaf_radix_view rx = l.radix();
  const leaf_id start = rx.buckets != 0 ? rx.leaf_of(key) : l.leaf_ids()[l.find(key)];
  return store_.walk_right(start, key);
}

std::optional<value_type> index::impl::get_on(const inner_layout& l, key_type key) const noexcept {
  // As answer_gets does a get: the block guessed from the fences, its
  // header line, then the window of slots (about four leaf lines).
  const host::leaf& f = owner(l, key);
  const host::bpa::slot s = f.data.start_get_near(key, f.data.start_route(key, f.low, f.high));
  value_type value = 0;
  std::uint8_t found = 0;
  f.data.finish_get(s, key, &value, &found);
  return found ? std::optional<value_type>(value) : std::nullopt;
}

std::optional<entry> index::impl::lower_bound_on(const inner_layout& l, key_type key) const noexcept {
  // The owner's smallest key >= key, else the first key of a leaf to its
  // right (leaves emptied by erases hold none).
  const host::leaf* f = &owner(l, key);
  for (;;) {
    if (std::optional<entry> e = f->data.lower_bound(key)) return e;
    if (f->right == no_leaf) return std::nullopt;
    f = &store_[f->right];
  }
}

std::uint64_t index::impl::count_on(const inner_layout& l, key_type lo, key_type hi) const noexcept {
  std::uint64_t total = 0;
  for (const host::leaf* f = &owner(l, lo);;) {
    total += f->data.count(std::max(lo, f->low), std::min(hi, f->high));
    if (f->high >= hi || f->right == no_leaf) return total;
    f = &store_[f->right];
  }
}

void index::impl::scatter_on_gpu(prepared& p) {
  const auto t0 = clock_type::now();
  route_space& sp = *p.space;
  tandem::detail::answer_columns& cols = *p.columns;
  try {
    device::scatter_timing st;
    gpu_->scatter(p.routes.positions, sp.answers.data(), sp.found.data(), p.n, cols.values, cols.found, &st);
    p.bytes.pcie += st.bytes_up + st.bytes_down;
  } catch (const std::exception&) {
    note_gpu_failure();
    p.gpu_scatter = false;
    run_in_arena([&] {
      host::scatter_answers(p.routes.positions, sp.answers.data(), sp.found.data(), p.n, cols.values, cols.found);
    });
  }
  p.times.complete += seconds_since(t0);
}

}  // namespace tandem
