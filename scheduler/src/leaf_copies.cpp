// The leaf cache of an index (index_impl.hpp; DESIGN, "Leaf cache"): the
// copies of leaves on the GPU (or, without one, the host stand-in), the
// route of a gets-only batch that answers from them first, the claims that
// a batch's writes make before any later batch is routed, and the copies
// made again after gets-only batches. The bookkeeping is host::leaf_cache;
// the GPU's side is gpu_router's copies.
#include "index_impl.hpp"

#include <tandem/device/device_query.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <new>
#include <string>
#include <vector>

namespace tandem {
namespace {

/// The copies in the GPU's memory, through the router.
class gpu_copy_target final : public host::copy_target {
 public:
  explicit gpu_copy_target(device::gpu_router& g) : g_(g) {}
  void reserve(std::size_t entries) override { g_.reserve_copies(entries); }
  void apply(const copy_changes& c) override { g_.apply_copies(c); }
  void take_hits(std::vector<std::uint32_t>& hits) override { g_.take_copy_hits(hits); }
  [[nodiscard]] std::size_t bytes() const noexcept override { return g_.copy_bytes(); }

 private:
  device::gpu_router& g_;
};

/// Per mille of a batch's gets that current copies must hold for the next
/// gets-only batch to look in them (fewer: the usual route is faster).
constexpr std::uint32_t min_hit_permille = 400;
/// While the slots are all taken by leaves that hold fewer of the gets
/// than that, one sync in this many runs (each may evict a few slots).
constexpr std::uint32_t cold_sync_every = 16;
/// Most bytes of entries one sync stages (and the next route sends up).
constexpr std::size_t sync_budget_bytes = std::size_t{256} << 20;
/// ... and what a load's fill stages before sending them up.
constexpr std::size_t fill_piece_bytes = std::size_t{256} << 20;

bool writes(op_type t) { return t == op_type::put || t == op_type::insert || t == op_type::erase; }

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
      bytes = 0;
      for (const device::device_info& d : r.devices) {
        if (d.ordinal == gpu_->device_ordinal()) bytes = d.free_memory / 2;
      }
    }
    copies_ = std::make_unique<gpu_copy_target>(*gpu_);
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

// A gets-only batch answered from the leaf copies first (the GPU's, or the
// host stand-in's), the rest routed into the final route with batch
// positions. Returns false, having done nothing the usual route redoes,
// when the copies are not used.
bool index::impl::route_from_copies(prepared& p, double share) {
  if (!cache_ || !p.gets_only || copies_off_.load() != 0) return false;
  const batch& b = p.j->ops;
  const std::size_t n = b.size();
  route_space& sp = *p.space;
  route_report& info = p.info;
  value_type* values = p.columns->values;
  std::uint8_t* found = p.columns->found;
  routed_batch_view out = sp.final_route.view(n, false);
  if (gpu_) {
    // As the GPU route would take the batch: whole, on the GPU.
    if (degraded_.load() || n < cfg_.min_gpu_batch || share <= 0) return false;
    // A batch whose gets mostly miss runs faster by the usual route (its
    // answers go back in batch order on the GPU beside the next batch,
    // where here the host puts the misses' answers in place): it is taken
    // while current copies held under 40% of the last batch's gets, as
    // counted by its hits or, routed the usual way, by its gets' leaves
    // (note_heat). The host stand-in, there for tests, always looks.
    if (copies_rate_.load() < min_hit_permille) return false;
    std::unique_lock<std::mutex> turn(gpu_turn_);
    const std::size_t bound = route_keys_.load();
    if (over_budget_.load() || (bound > 0 && n > bound)) return false;
    std::shared_ptr<const inner_layout> on_gpu = gpu_layout_snapshot();
    if (!on_gpu) return false;
    try {
      cache_->drain(*copies_);  // the claims so far, before any lookup
    } catch (const std::exception& e) {
      fail_copies(e.what());
      return false;
    }
    if (cfg_.gpu_leaf_hints && !guides_dropped_.load() && n < host::dense_gets * on_gpu->leaf_count()) {
      out.hints = sp.final_route.hints.get(n);
    }
    const auto t0 = clock_type::now();
    device::route_timing t;
    std::size_t routed = 0;
    try {
      routed = gpu_->route_cached(b.keys(), n, values, found, out, &t);
    } catch (const std::exception&) {
      note_gpu_failure();
      info.gpu_failed = true;
      return false;  // routed whole, by the usual route
    }
    p.version = std::move(on_gpu);
    note_gpu_route(p, t, n, seconds_since(t0));
    turn.unlock();
    observe_rates(info);
    p.routed = routed;
  } else {
    // The stand-in: each get's leaf by the layout, then its copy; the
    // misses (flagged in sp.found, free until the leaf phase) routed.
    const auto t0 = clock_type::now();
    const inner_layout& l = *p.version;
    const key_type* keys = b.keys();
    std::uint8_t* missed = sp.found.get(n);
    key_type* miss_keys = sp.cpu_side.keys.get(n);
    std::uint32_t* miss_at = sp.cpu_side.positions.get(n);
    std::size_t m = 0;
    std::lock_guard<std::mutex> turn(standin_turn_);
    cache_->drain(*copies_);
    run_in_arena([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 4096), [&](const tbb::blocked_range<std::size_t>& r) {
        const leaf_id* ids = l.leaf_ids().data();
        for (std::size_t i = r.begin(); i < r.end(); ++i) {
          value_type v = 0;
          const copy_answer a = standin_->get(ids[l.find(keys[i])], keys[i], &v);
          values[i] = v;
          found[i] = a == copy_answer::found ? 1 : 0;
          missed[i] = a == copy_answer::none ? 1 : 0;
        }
      });
      for (std::size_t i = 0; i < n; ++i) {
        if (missed[i] == 0) continue;
        miss_keys[m] = keys[i];
        miss_at[m++] = static_cast<std::uint32_t>(i);
      }
      host::route_sorted(l.view(), miss_keys, nullptr, nullptr, m, 0, out, sp.cpu_work);
      for (std::size_t i = 0; i < m; ++i) out.positions[i] = miss_at[out.positions[i]];
    });
    info.cpu_seconds = seconds_since(t0);
    info.cpu_keys = n;
    p.routed = m;
  }
  p.routes = out;
  p.from_copies = true;
  p.copy_hits = n - p.routed;
  copy_lookups_.fetch_add(n);
  copy_hits_.fetch_add(p.copy_hits);
  last_copy_lookups_.store(n);
  last_copy_hits_.store(p.copy_hits);
  p.bytes.route = n * (sizeof(key_type) + sizeof(value_type) + 1) +
                  p.routed * (sizeof(std::uint32_t) + sizeof(key_type));
  note_heat(p);
  return true;
}

// The gets of a routed gets-only batch that no copy answered heat their
// leaves (leaf_cache::note_misses).
void index::impl::note_heat(prepared& p) {
  if (!cache_ || copies_off_.load() != 0 || !p.gets_only || p.n == 0) return;
  if (gpu_ && p.n < cfg_.min_gpu_batch) return;  // a batch that never reads the GPU's copies
  if (p.routed == 0) {
    copies_rate_.store(1000);
    slotted_rate_.store(1000);
    return;
  }
  const routed_batch_view& r = p.routes;
  route_space& sp = *p.space;
  std::vector<leaf_id>& ids = sp.miss_ids;
  std::vector<std::uint32_t>& counts = sp.miss_counts;
  try {
    ids.resize(r.groups);
    counts.resize(r.groups);
    const leaf_id* by_ordinal = p.version->leaf_ids().data();
    for (std::size_t g = 0; g < r.groups; ++g) {
      ids[g] = by_ordinal[r.group_ordinal[g]];
      counts[g] = r.group_begin[g + 1] - r.group_begin[g];
    }
    const host::leaf_cache::miss_report got = cache_->note_misses(ids.data(), counts.data(), r.groups);
    // The gets a copy answered count as held by current copies (their
    // leaves hold slots).
    const std::size_t n = p.n;
    copies_rate_.store(static_cast<std::uint32_t>((p.copy_hits + got.current) * 1000 / n));
    slotted_rate_.store(static_cast<std::uint32_t>((p.copy_hits + got.slotted) * 1000 / n));
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

// Claims the leaves a routed batch's writes go to (leaf_cache::claim):
// called before the next batch is routed.
void index::impl::claim_writes(const prepared& p) {
  if (!cache_ || copies_off_.load() != 0 || p.gets_only || p.routed == 0 || p.routes.types == nullptr) return;
  const routed_batch_view& r = p.routes;
  const leaf_id* by_ordinal = p.version->leaf_ids().data();
  std::vector<leaf_id>& ids = p.space->miss_ids;  // free until the batch's own heat, which has no writes
  ids.clear();
  const auto* types = reinterpret_cast<const op_type*>(r.types);
  for (std::size_t g = 0; g < r.groups; ++g) {
    for (std::uint32_t i = r.group_begin[g]; i < r.group_begin[g + 1]; ++i) {
      if (writes(types[i])) {
        ids.push_back(by_ordinal[r.group_ordinal[g]]);
        break;
      }
    }
  }
  cache_->claim(ids.data(), ids.size(), p.sequence);
}

// After a gets-only batch's leaf phase (leaf_cache::sync).
void index::impl::sync_copies(prepared& p) {
  // After every routed gets-only batch: those that did not look in the
  // copies stage theirs for the next one that does.
  if (!cache_ || copies_off_.load() != 0 || !p.gets_only) return;
  if (gpu_ && p.n < cfg_.min_gpu_batch) return;  // small batches keep their latency
  // Slots all taken by leaves that few gets go to (a uniform workload with
  // a small cache): syncs could only trade a few slots between leaves alike
  // in heat, so most are passed over. Copies of leaves that hold slots but
  // were written (slotted, not current) are made at every sync.
  if (gpu_ && slotted_rate_.load() < min_hit_permille && cache_->full() &&
      syncs_passed_.fetch_add(1) % cold_sync_every != 0) {
    return;
  }
  try {
    last_synced_bytes_.store(cache_->sync(store_, p.sequence, sync_budget_bytes));
  } catch (const std::bad_alloc&) {  // the batch happened; copies come with a later one
  }
}

// Every copy goes (a load, a compaction); with slots for every leaf, every
// leaf is copied again.
void index::impl::refill_copies() {
  if (!cache_ || copies_off_.load() == 1) return;
  cache_->clear();
  const std::size_t live = store_.live_leaves();
  const std::uint32_t rate = live <= cache_->slots() ? 1000 : 0;  // what the copies will hold
  copies_rate_.store(rate);
  slotted_rate_.store(rate);
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

}  // namespace tandem
