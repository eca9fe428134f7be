// The leaf cache of an index (index_impl.hpp; DESIGN, "Leaf cache"): the
// copies of leaves on the GPU (or, without one, the host stand-in), the
// route that answers from them first (gets-only batches; with
// config.gpu_cache_writes, batches of point ops, whose puts go into the
// copies too), the claims that a batch's writes make before any later
// batch is routed, and the copies made again after batches without writes
// or routed from the copies. The bookkeeping is host::leaf_cache; the
// GPU's side is gpu_router's copies.
#include "device_columns.hpp"
#include "index_impl.hpp"

#include <tandem/device/device_query.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <functional>
#include <new>
#include <string>
#include <vector>

namespace tandem {
namespace {

/// Per mille of a batch's lookups that current copies must hold for the
/// next batch to look in them: below it the usual route was faster (at
/// 50% held, zipf, 0.88x; docs/performance.md, "The leaf cache").
constexpr std::uint32_t min_hit_permille = 750;
/// Syncs passed over after one that found nothing to copy, the slots full.
constexpr std::uint32_t quiet_after_idle_sync = 15;
/// Most bytes of entries one sync stages (and the next route sends up).
constexpr std::size_t sync_budget_bytes = std::size_t{256} << 20;
/// ... and what a load's fill stages before sending them up.
constexpr std::size_t fill_piece_bytes = std::size_t{256} << 20;

bool writes(op_type t) { return t == op_type::put || t == op_type::insert || t == op_type::erase; }

/// Whether the batch holds no write.
bool read_only(const prepared& p) {
  const auto& by_type = p.info.ops_by_type;
  return by_type[static_cast<std::size_t>(op_type::put)] + by_type[static_cast<std::size_t>(op_type::insert)] +
             by_type[static_cast<std::size_t>(op_type::erase)] ==
         0;
}

// The stand-in's route of gets: each get's leaf by the layout, then its
// copy; the misses (flagged in sp.found, free until the leaf phase) routed.
std::size_t standin_gets(prepared& p, const host::host_copies& standin, routed_batch_view& out) {
  const inner_layout& l = *p.version;
  const std::size_t n = p.n;
  route_space& sp = *p.space;
  const key_type* keys = p.j->ops.keys();
  value_type* values = p.columns->values;
  std::uint8_t* found = p.columns->found;
  std::uint8_t* missed = sp.found.get(n);
  key_type* miss_keys = sp.cpu_side.keys.get(n);
  std::uint32_t* miss_at = sp.cpu_side.positions.get(n);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 4096), [&](const tbb::blocked_range<std::size_t>& r) {
    const leaf_id* ids = l.leaf_ids().data();
    for (std::size_t i = r.begin(); i < r.end(); ++i) {
      value_type v = 0;
      const copy_answer a = standin.get(ids[l.find(keys[i])], keys[i], &v);
      values[i] = v;
      found[i] = a == copy_answer::found ? 1 : 0;
      missed[i] = a == copy_answer::none ? 1 : 0;
    }
  });
  std::size_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (missed[i] == 0) continue;
    miss_keys[m] = keys[i];
    miss_at[m++] = static_cast<std::uint32_t>(i);
  }
  host::route_sorted(l.view(), miss_keys, nullptr, nullptr, m, 0, out, sp.cpu_work);
  for (std::size_t i = 0; i < m; ++i) out.positions[i] = miss_at[out.positions[i]];
  return m;
}

// The stand-in's route of a batch with types (writes, or lower_bounds), as
// the GPU's: routed whole, each sorted row judged (copy_sorted_row;
// verdicts in sp.found, answer keys by batch position in `keys`), the
// patches written, then the rows left compacted in place, groups with them.
std::size_t standin_typed(prepared& p, host::host_copies& standin, key_type* keys, routed_batch_view& out) {
  const inner_layout& l = *p.version;
  const std::size_t n = p.n;
  const batch& b = p.j->ops;
  host::route_sorted(l.view(), b.keys(), b.args(), reinterpret_cast<const std::uint8_t*>(b.types()), n, 0, out,
                     p.space->cpu_work);
  std::uint8_t* rows = p.space->found.get(n);
  const leaf_id* ids = l.leaf_ids().data();
  const host::host_copies& c = standin;
  value_type* values = p.columns->values;
  std::uint8_t* found = p.columns->found;
  auto each_group = [&](auto&& f) {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, out.groups, 16), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t g = r.begin(); g < r.end(); ++g) {
        const leaf_id id = ids[out.group_ordinal[g]];
        const leaf_copy e = c.entry_of(id);
        for (std::uint32_t s = out.group_begin[g]; s < out.group_begin[g + 1]; ++s) f(id, e, s);
      }
    });
  };
  each_group([&](leaf_id id, const leaf_copy& e, std::uint32_t s) {
    value_type v = 0;
    std::uint8_t f = 0;
    key_type k = 0;
    const copy_row r = copy_sorted_row(out.keys, out.types, s, e, c.pool(), &v, &f, &k);
    rows[s] = static_cast<std::uint8_t>(r);
    if (r != copy_row::answered) return;
    values[out.positions[s]] = v;
    found[out.positions[s]] = f;
    keys[out.positions[s]] = k;
    c.count_hit(id);
  });
  each_group([&](leaf_id, const leaf_copy& e, std::uint32_t s) {
    if (rows[s] != static_cast<std::uint8_t>(copy_row::patched) || !copy_last_put(out.keys, out.types, s, n)) {
      return;
    }
    bool speaks = false;
    const std::uint64_t at = copy_find(e, c.pool(), out.keys[s], &speaks);
    if (at != no_copy_entry) standin.patch(at, out.args[s]);
  });
  std::size_t m = 0;
  std::size_t groups = 0;
  for (std::size_t g = 0; g < out.groups; ++g) {
    const std::uint32_t lo = out.group_begin[g];
    const std::uint32_t hi = out.group_begin[g + 1];
    const std::uint32_t ordinal = out.group_ordinal[g];
    const std::size_t first = m;
    for (std::uint32_t s = lo; s < hi; ++s) {
      if (rows[s] == static_cast<std::uint8_t>(copy_row::answered)) continue;
      out.positions[m] = out.positions[s];
      out.keys[m] = out.keys[s];
      out.args[m] = out.args[s];
      out.types[m] = static_cast<std::uint8_t>(
          out.types[s] | (rows[s] == static_cast<std::uint8_t>(copy_row::patched) ? copy_patched_bit : 0));
      ++m;
    }
    if (m == first) continue;
    out.group_begin[groups] = static_cast<std::uint32_t>(first);
    out.group_ordinal[groups++] = ordinal;
  }
  out.group_begin[groups] = static_cast<std::uint32_t>(m);
  out.groups = groups;
  return m;
}

}  // namespace

// Makes the leaf cache (config.gpu_cache_bytes) once the GPU is chosen.
void index::impl::open_cache() {
  const std::size_t asked = cfg_.gpu_cache_bytes;
  if (asked == 0) return;
  std::size_t bytes = asked;
  if (gpu_) {
    if (cfg_.max_gpu_bytes > 0) {
      if (asked == gpu_cache_auto) return;  // the budget goes to routes and guides
      bytes = std::min(asked, cfg_.max_gpu_bytes / 2);  // the rest to the layout and routes
    } else if (asked == gpu_cache_auto) {
      const device::device_report r = device::query_devices();
      bytes = ~std::size_t{0};  // half the free memory of the GPU with the least
      for (const device::device_info& d : r.devices) {
        const bool ours = d.ordinal == gpu_->device_ordinal() ||
                          std::any_of(peers_.begin(), peers_.end(),
                                      [&](const auto& peer) { return peer->router->device_ordinal() == d.ordinal; });
        if (ours) bytes = std::min(bytes, d.free_memory / 2);
      }
      if (bytes == ~std::size_t{0}) bytes = 0;
    }
    scheduler::gpu_copy_target::each_peer each;
    if (!peers_.empty()) each = [this](const std::function<void(device::gpu_router&)>& call) { for_each_peer(call); };
    copies_ = std::make_unique<scheduler::gpu_copy_target>(*gpu_, std::move(each));
  } else {
    if (asked == gpu_cache_auto) return;
    auto standin = std::make_unique<host::host_copies>();
    standin_ = standin.get();
    copies_ = std::move(standin);
  }
  cache_ = std::make_unique<host::leaf_cache>(bytes, host::bpa::capacity);
  if (cache_->slots() == 0) {
    cache_.reset();
    copies_.reset();
    standin_ = nullptr;
  }
}

// A batch of gets, or of point ops with writes, answered from the leaf
// copies first (the GPU's, or the host stand-in's): its gets a copy speaks
// for are answered, its puts of keys a copy holds written into the copy
// too (core/leaf_copy.hpp, copy_row), and the rest routed into the final
// route with batch positions. Returns false, having done nothing the usual
// route redoes, when the copies are not used.
bool index::impl::route_from_copies(prepared& p, double share) {
  if (!cache_ || copies_off_.load() != 0) return false;
  const auto& by_type = p.info.ops_by_type;
  auto ops = [&](op_type t) { return by_type[static_cast<std::size_t>(t)]; };
  const std::size_t gets = ops(op_type::get);
  // Gets alone, (config.gpu_cache_writes) point ops with writes, or gets
  // and lower_bounds (sorted and judged whole: with_types). Scans, counts,
  // and lower_bounds beside writes take the usual route; on the GPU so do
  // batches where writes are more than a quarter of the ops, and, over
  // several GPUs, every batch with writes: the puts would go into the first
  // GPU's copies alone (a GPU past the first is never dropped back in, so
  // none seen now means none later).
  const bool with_types = !p.gets_only;
  const std::size_t writes = ops(op_type::put) + ops(op_type::insert) + ops(op_type::erase);
  const bool takes_writes = cfg_.gpu_cache_writes && gets + writes == p.n &&
                            (!gpu_ || (writes * 4 <= p.n && peers_on() == 0));
  const bool takes_lower_bounds = gets + ops(op_type::lower_bound) == p.n;
  if (with_types && !takes_writes && !takes_lower_bounds) return false;
  const std::size_t lookups = gets + ops(op_type::lower_bound);
  const batch& b = p.j->ops;
  const std::size_t n = b.size();
  const auto* types = reinterpret_cast<const std::uint8_t*>(b.types());
  route_space& sp = *p.space;
  route_report& info = p.info;
  value_type* values = p.columns->values;
  std::uint8_t* found = p.columns->found;
  routed_batch_view out = sp.final_route.view(n, with_types);
  key_type* answer_keys = with_types ? sp.copy_keys.get(n) : nullptr;
  if (gpu_) {
    // As the GPU route would take the batch: whole, on the GPU, fully sorted.
    // Keys in GPU memory (device columns) are looked up in the copies at
    // any size and hit rate: the usual route would copy them down first.
    const bool device_keys = keys_on_gpu(*p.j);
    if (degraded_.load() || (n < cfg_.min_gpu_batch && !device_keys) || share <= 0 ||
        cfg_.gpu_order != gpu_query_order::full_sort) {
      return false;
    }
    // A batch whose gets mostly miss runs faster by the usual route (its
    // answers go back in batch order on the GPU beside the next batch,
    // where here the host puts the misses' answers in place): it is taken
    // while current copies held under 75% of the last batch's gets, as
    // counted by its hits or, routed the usual way, by its gets' leaves
    // (note_heat). The host stand-in, there for tests, always looks.
    if (copies_rate_.load() < min_hit_permille && !device_keys) return false;
    std::unique_lock<std::mutex> turn(gpu_turn_);
    const std::size_t bound = route_keys_.load();
    if (over_budget_.load() || (bound > 0 && n > bound)) return false;
    std::shared_ptr<const inner_layout> on_gpu = gpu_layout_snapshot();
    if (!on_gpu) return false;
    p.caller_writes = point_claims_.count();  // before the drain: reroute_after_writes
    try {
      point_claims_.fold(*cache_, gate_.sequence());
      cache_->drain(*copies_);  // the claims so far, before any lookup
    } catch (const std::exception& e) {
      fail_copies(e.what());
      return false;
    }
    const bool split = !with_types && !device_keys && peers_on() > 0;  // cut over the GPUs (gpu_peers.cpp)
    if (cfg_.gpu_leaf_hints && !guides_dropped_.load() && n < host::dense_gets * on_gpu->leaf_count() && !split) {
      out.hints = sp.final_route.hints.get(n);
    }
    const auto t0 = clock_type::now();
    device::route_timing t;
    std::size_t routed = 0;
    try {
      // Device gets that want found flags only (contains): no values cross PCIe.
      value_type* const copy_values = device_keys && p.j->values_out == nullptr ? nullptr : values;
      if (with_types) {
        routed = gpu_->route_cached(b.keys(), b.args(), types, n, values, found, answer_keys, out, &t);
      } else if (!split) {
        routed = gpu_->route_cached(b.keys(), n, copy_values, found, out, &t);
      } else {
        const std::optional<std::size_t> parts = route_cached_split(p, values, found, out, t);
        if (!parts) return false;  // a GPU past the first failed, and is dropped: the usual route
        routed = *parts;
      }
    } catch (const std::bad_alloc&) {  // host memory, not the GPU: the usual route, nothing counted
      if (with_types) cache_->clear();
      return false;
    } catch (const std::exception&) {
      note_gpu_failure();
      info.gpu_failed = true;
      if (with_types) cache_->clear();  // its puts may be in the copies, and will not be in the leaves
      return false;  // routed whole, by the usual route
    }
    p.version = std::move(on_gpu);
    note_gpu_route(p, t, n, seconds_since(t0));
    turn.unlock();
    observe_rates(info);
    p.routed = routed;
  } else {
    const auto t0 = clock_type::now();
    std::lock_guard<std::mutex> turn(standin_turn_);
    p.caller_writes = point_claims_.count();
    point_claims_.fold(*cache_, gate_.sequence());
    cache_->drain(*copies_);
    run_in_arena([&] {
      p.routed = with_types ? standin_typed(p, *standin_, answer_keys, out) : standin_gets(p, *standin_, out);
    });
    info.cpu_seconds = seconds_since(t0);
    info.cpu_keys = n;
  }
  p.routes = out;
  p.from_copies = true;
  p.copy_hits = n - p.routed;
  copy_lookups_.fetch_add(lookups);
  copy_hits_.fetch_add(p.copy_hits);
  last_copy_lookups_.store(lookups);
  last_copy_hits_.store(p.copy_hits);
  p.bytes.route = n * (sizeof(key_type) + sizeof(value_type) + 1) +
                  p.routed * (sizeof(std::uint32_t) + sizeof(key_type));
  if (with_types) p.bytes.route += n * (sizeof(value_type) + 1) + p.routed * (sizeof(value_type) + 1);
  note_heat(p);
  return true;
}

// At a batch's leaf phase (no one-key write runs): a write applied on a
// caller since the batch's route read the copies (write_on_caller) may
// have changed a leaf that a copy answered from, read before the write,
// while the batch's other answers come from the leaves after it. The
// batch is routed again the usual way; the claims of its first route
// stand (those of its writes, and the write's own).
void index::impl::reroute_after_writes(prepared& p) {
  if (!p.from_copies || p.failure || point_claims_.count() == p.caller_writes) return;
  p.from_copies = false;
  p.copy_hits = 0;
  p.routes = {};
  p.no_copies = true;
  try {
    route_and_claim(p);
  } catch (...) {
    p.failure = std::current_exception();
  }
}

// A batch of gets that would be answered directly (config.direct_get_ops)
// is routed from the GPU's copies instead while they held the last routed
// batch's gets (the gate of route_from_copies) and it has min_gpu_batch
// gets or more: its gets then cost the host nothing but the misses (the
// usual route, taken should the copies not answer, is not faster than
// direct gets, so this asks the same as route_from_copies does).
bool index::impl::copies_take_gets(const prepared& p) const {
  return cache_ && gpu_ && copies_off_.load() == 0 && !degraded_.load() && p.n >= cfg_.min_gpu_batch &&
         cfg_.gpu_order == gpu_query_order::full_sort && copies_rate_.load() >= min_hit_permille;
}

// Gets in GPU memory stay there when the copies' route can take them: on
// the index's GPU, with its leaf cache, batches sorted whole.
bool index::impl::keeps_device_keys(const columns& c) const {
  const std::size_t bound = route_keys_.load();
  return c.type == op_type::get && cache_ && gpu_ && gpu_->device_ordinal() == c.device && copies_off_.load() == 0 &&
         !degraded_.load() && !over_budget_.load() && (bound == 0 || c.n <= bound) &&
         cfg_.gpu_order == gpu_query_order::full_sort;
}

// A batch of device columns that the copies' route did not take runs on
// host copies of its arrays (device_columns.hpp, to_host).
void index::impl::keys_to_host(prepared& p) {
  if (!keys_on_gpu(*p.j)) return;
  to_host(*p.j);
  p.bytes.pcie += p.j->device->pcie_bytes;
  if (p.j->values_out) p.columns->values = p.j->values_out;
  if (p.j->found_out) p.columns->found = p.j->found_out;
}

// The gets of a routed batch that no copy answered heat their leaves
// (leaf_cache::note_misses); what share of its gets current copies held
// (answered, or would have) decides whether the next batches look.
void index::impl::note_heat(prepared& p) {
  if (!cache_ || copies_off_.load() != 0 || p.n == 0 || !(p.from_copies || read_only(p))) return;
  if (gpu_ && p.n < cfg_.min_gpu_batch) return;  // a batch that never reads the GPU's copies
  // Gets and lower_bounds: the lookups a copy may answer.
  const std::size_t gets = p.info.ops_by_type[static_cast<std::size_t>(op_type::get)] +
                           p.info.ops_by_type[static_cast<std::size_t>(op_type::lower_bound)];
  if (gets == 0) return;
  const routed_batch_view& r = p.routes;
  route_space& sp = *p.space;
  std::vector<leaf_id>& ids = sp.miss_ids;
  std::vector<std::uint32_t>& counts = sp.miss_counts;
  try {
    ids.resize(r.groups);
    counts.resize(r.groups);
    const leaf_id* by_ordinal = p.version->leaf_ids().data();
    std::size_t m = 0;
    for (std::size_t g = 0; g < r.groups; ++g) {
      std::uint32_t c = r.group_begin[g + 1] - r.group_begin[g];
      if (!p.gets_only) {  // the group's lookups (a patched write's type carries copy_patched_bit)
        c = 0;
        const std::uint8_t mask = p.from_copies ? static_cast<std::uint8_t>(~copy_patched_bit) : 0xFF;
        for (std::uint32_t i = r.group_begin[g]; i < r.group_begin[g + 1]; ++i) {
          const auto t = static_cast<op_type>(r.types[i] & mask);
          c += t == op_type::get || t == op_type::lower_bound ? 1 : 0;
        }
        if (c == 0) continue;
      }
      ids[m] = by_ordinal[r.group_ordinal[g]];
      counts[m++] = c;
    }
    const std::size_t current = cache_->note_misses(ids.data(), counts.data(), m);
    // The gets a copy answered count as held by current copies.
    copies_rate_.store(static_cast<std::uint32_t>((p.copy_hits + current) * 1000 / gets));
  } catch (const std::bad_alloc&) {  // heat is a hint: the batch goes on
  }
}

// A drain to the GPU failed (its memory, say): the copies there are
// unspecified, so none is read again; batches take the usual route and
// stats().cache says why. GPU routing itself goes on.
void index::impl::fail_copies(const char* what) {
  std::lock_guard<std::mutex> lock(stats_mutex_);  // stats().cache keeps the reason from now on
  stats_.cache = std::string("off (the GPU copies failed: ") + what + ")";
  copies_off_.store(1);
}

// Claims the leaves a routed batch's writes go to (leaf_cache::claim),
// but for those whose copies took every write (patched: the bit comes off
// the routed types here, before the leaf phase reads them): called before
// the next batch is routed. Only a batch routed from the copies carries the
// bit; in any other batch a type with that bit is the caller's own unknown
// type (answered invalid), left as it is.
void index::impl::claim_writes(prepared& p) {
  if (!cache_ || read_only(p) || p.routed == 0 || p.routes.types == nullptr) return;
  const routed_batch_view& r = p.routes;
  const leaf_id* by_ordinal = p.version->leaf_ids().data();
  std::vector<leaf_id>& ids = p.space->miss_ids;  // free once the batch's heat is noted
  std::vector<leaf_id>& kept = p.space->patched_ids;
  std::vector<std::uint32_t>& verdict = p.space->miss_counts;  // by group: 0 no write, 1 claimed, 2 kept
  ids.clear();
  kept.clear();
  verdict.resize(r.groups);
  std::uint8_t* types = r.types;
  const bool from_copies = p.from_copies;
  // The rows' types in parallel (a batch of 2^22 B ops reads a group's rows
  // up to its first write: about half of them), the ids in group order.
  run_in_arena([&] {
    using groups = tbb::blocked_range<std::size_t>;
    tbb::parallel_for(groups(0, r.groups, 4096), [&](const groups& range) {
      for (std::size_t g = range.begin(); g < range.end(); ++g) {
        bool wrote = false;
        bool all_taken = true;
        for (std::uint32_t i = r.group_begin[g]; i < r.group_begin[g + 1]; ++i) {
          const std::uint8_t t = types[i];
          if (from_copies && (t & copy_patched_bit) != 0) {
            types[i] = static_cast<std::uint8_t>(t & ~copy_patched_bit);
            wrote = true;
          } else if (writes(static_cast<op_type>(t))) {
            wrote = true;
            all_taken = false;
            if (!from_copies) break;  // no bits to take off
          }
        }
        verdict[g] = wrote ? (all_taken ? 2 : 1) : 0;
      }
    });
  });
  for (std::size_t g = 0; g < r.groups; ++g) {
    if (verdict[g] != 0) (verdict[g] == 2 ? kept : ids).push_back(by_ordinal[r.group_ordinal[g]]);
  }
  cache_->claim(ids.data(), ids.size(), p.sequence);
  if (!kept.empty()) {
    cache_->patched(kept.data(), kept.size(), p.sequence);
    p.patched_copies = true;
  }
}

// A batch whose route wrote puts into the copies failed before its leaf
// phase wrote them: no copy is read before a fill makes them again, and a
// `next` batch routed from them meanwhile is routed again.
void index::impl::forget_patches(prepared* next) {
  cache_->clear();
  if (next == nullptr || !next->from_copies || next->failure) return;
  next->from_copies = false;
  next->copy_hits = 0;
  next->patched_copies = false;
  try {
    route_and_claim(*next);
  } catch (...) {
    next->failure = std::current_exception();
  }
}

// After a routed batch's leaf phase (leaf_cache::sync): the leaves its
// gets missed are copied from the leaves as it left them, for the next
// batches that look.
//
// `reshaped`: its leaf phase split or merged leaves (or left the layout
// behind them). The batches routed meanwhile, on the older layout, claimed
// the leaves their route named, while their writes land in the leaves that
// hold their keys now (a merged leaf's left neighbour, a split's new
// right leaf): a copy made before they have run could miss their writes
// and stay usable. So no copy is made until pipeline_depth routed batches
// have run since.
void index::impl::sync_copies(prepared& p, bool reshaped) {
  if (!cache_) return;
  if (reshaped) reshaped_syncs_.store(pipeline_depth);
  if (reshaped_syncs_.load() > 0) {
    reshaped_syncs_.fetch_sub(1);
    return;
  }
  // A batch routed the usual way with writes claimed its leaves: copies of
  // them made after each such batch would be dropped by the next.
  if (!cache_ || copies_off_.load() != 0 || !(p.from_copies || read_only(p))) return;
  if (gpu_ && p.n < cfg_.min_gpu_batch) return;  // small batches keep their latency
  // Slots all taken, and the last sync found no leaf to copy (a uniform
  // workload with a small cache: the leaves that miss are no hotter than
  // those in the slots): the next few syncs are passed over, as they would
  // only spend the dispatcher's time.
  if (gpu_ && quiet_syncs_.load() > 0 && cache_->full()) {
    quiet_syncs_.fetch_sub(1);
    return;
  }
  try {
    const std::size_t staged = cache_->sync(store_, p.sequence, sync_budget_bytes);
    last_synced_bytes_.store(staged);
    if (staged == 0) quiet_syncs_.store(quiet_after_idle_sync);
  } catch (const std::bad_alloc&) {  // the batch happened; copies come with a later one
  }
}

// Every copy goes (a load, a compaction); with slots for every leaf, every
// leaf is copied again.
void index::impl::refill_copies() {
  if (!cache_ || copies_off_.load() == 1) return;
  try {
    point_claims_.fold(*cache_, gate_.sequence());  // now, with the copies they claim: later they would drop new ones
  } catch (const std::bad_alloc&) {
  }
  cache_->clear();
  const std::size_t live = store_.live_leaves();
  const std::uint32_t rate = live <= cache_->slots() ? 1000 : 0;  // what the copies will hold
  copies_rate_.store(rate);
  quiet_syncs_.store(0);
  // By default (gpu_cache_auto) the copies serve an index whose leaves all
  // fit: with a part of them cached, batches ran slower than with none
  // (docs/performance.md, "The leaf cache"). A later load or compaction
  // looks again.
  if (gpu_ && cfg_.gpu_cache_bytes == gpu_cache_auto) {
    copies_off_.store(live <= cache_->slots() ? 0 : 2);
    if (live > cache_->slots()) return;
  }
  try {
    if (gpu_) {
      if (degraded_.load()) return;
      std::lock_guard<std::mutex> turn(gpu_turn_);
      if (live <= cache_->slots()) cache_->fill(store_, fill_piece_bytes, *copies_);
      cache_->drain(*copies_);
    } else {
      std::lock_guard<std::mutex> turn(standin_turn_);
      if (live <= cache_->slots()) cache_->fill(store_, fill_piece_bytes, *copies_);
      cache_->drain(*copies_);
    }
  } catch (const std::bad_alloc&) {  // the copies come back as gets miss
  } catch (const std::exception& e) {
    if (gpu_) fail_copies(e.what());
  }
}

// index::verify, no batch in flight: every usable copy holds its leaf
// (leaf_cache::verify), once the one-key writes' claims are in and every
// change is sent. A GPU that fails meanwhile turns the copies off, as a
// failed drain does.
void index::impl::verify_copies() {
  if (!cache_ || copies_off_.load() == 1 || (gpu_ && degraded_.load())) return;
  std::unique_lock<std::mutex> turn(gpu_ ? gpu_turn_ : standin_turn_);
  try {
    point_claims_.fold(*cache_, gate_.sequence());
    cache_->drain(*copies_);
    cache_->verify(store_, *copies_);
    for (auto& peer : peers_) {  // each other GPU's copies too
      if (peer->off.load()) continue;
      scheduler::gpu_copy_target one(*peer->router);
      try {
        cache_->verify(store_, one);
      } catch (const invariant_error&) {
        throw;
      } catch (const std::exception& e) {
        drop_peer(*peer, e.what());
      }
    }
    use_gpu_device();  // the first GPU current again on this thread
  } catch (const invariant_error&) {
    throw;
  } catch (const std::exception& e) {
    if (!gpu_) throw;
    fail_copies(e.what());
  }
}

}  // namespace tandem
