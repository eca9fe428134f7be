/// @file
/// tandem-leaf-bench: single-thread ("per core") costs of one BPA leaf and of
/// the host leaf store, beside std::map and absl::btree_map holding the same
/// keys. Every benchmark reports items/s; one item is one operation, or one
/// element for iterate/map/count, so ns per item = 1e9 / (items per second).
///
/// Families (names are `BM_<what>_<structure>/<case>`):
/// - BM_Get_*       random hits: one BPA of 768 keys (75% of 1024) and a leaf
///                  store bulk-loaded with 2^20 keys (route by upper_bound over
///                  the leaf table, then BPA get), std::map / absl::btree_map
///                  of 768 and 2^20 keys.
/// - BM_Upsert_*    a fixed stream of puts, half to present keys (replace),
///                  half to new keys (insert); every insert is followed by an
///                  erase of a random present key, so the size stays 768/769.
///                  One item = one put or erase (1/3 replace, 1/3 insert,
///                  1/3 erase). The structure is reset (timer paused) once per
///                  2^16 ops.
/// - BM_ApplyRun    a key-sorted run of r point ops (get/put/erase, half on
///                  present keys) applied to a 768-key BPA on a forced path
///                  (per_op, merge) or the automatic choice. Each iteration
///                  first restores the BPA by copying a prepared one: the
///                  items/s include that copy; BM_BpaCopy measures it alone
///                  and the counter `net_ns_per_op` subtracts it (copy cost
///                  measured in the same process right after the loop).
///                  BM_ApplyRun starts from a leaf as random inserts leave
///                  it (16 keys in the log, unsorted blocks);
///                  BM_ApplyRun_SortedLeaf from the same keys just after
///                  assign_sorted (empty log, sorted blocks), the best case
///                  for merge. 64 distinct runs per r, over 8 distinct
///                  prepared leaves, so the branch predictor cannot learn
///                  one leaf's sort by heart.
///                  Read the per_op/merge crossover off `net_ns_per_op` (or
///                  items/s: the copy is the same on both paths).
/// - BM_Iterate_*   ordered iteration of all 768 keys, per element.
///                  Bpa/unsorted: leaves as inserts left them (iterate sorts
///                  unsorted blocks in local copies, on every call);
///                  Bpa/sort_then_iterate: restore, sort() in place, iterate
///                  (copy reported and subtracted as above); Bpa/sorted: the
///                  steady state after sort().
/// - BM_Map_Bpa, BM_Count_Bpa  unordered map / count over the full key range
///                  and over the lower half, per element in range.
///
/// Keys are drawn uniformly from the whole uint64 range with fixed seeds
/// (std::mt19937_64), so every run sees the same data.

#include <tandem/host/bpa.hpp>
#include <tandem/host/leaf_store.hpp>

#include <absl/container/btree_map.h>
#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

using tandem::key_type;
using tandem::max_key;
using tandem::value_type;
using tandem::host::apply_path;
using tandem::host::bpa;
using tandem::host::leaf_store;
using tandem::host::leaf_table;
using tandem::host::op_kind;
using tandem::host::point_op;
using tandem::host::point_result;
using tandem::host::upsert_status;

using std_map = std::map<key_type, value_type>;
using btree_map = absl::btree_map<key_type, value_type>;

constexpr std::size_t kLeafKeys = bpa::capacity * 3 / 4;  // 768: one leaf at 75%
constexpr std::size_t kStoreKeys = std::size_t{1} << 20;  // the leaf store case
constexpr std::size_t kProbes = std::size_t{1} << 16;     // probe keys per case (power of two)
constexpr std::size_t kStreamOps = std::size_t{1} << 16;  // upsert stream length
constexpr std::size_t kRunsPerLength = 64;                // distinct runs per run length (power of two)
constexpr std::size_t kLeafVariants = 8;                  // prepared leaves rotated over (divides kRunsPerLength)

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tandem-leaf-bench: setup check failed: %s\n", what.c_str());
  std::abort();
}

/// CPU time of the calling thread, the clock Google Benchmark reports.
double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

/// `n` distinct keys, uniform over [0, UINT64_MAX], in generation (random) order.
std::vector<key_type> unique_random_keys(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::unordered_set<key_type> seen;
  seen.reserve(2 * n);
  std::vector<key_type> out;
  out.reserve(n);
  while (out.size() < n) {
    const key_type k = rng();
    if (seen.insert(k).second) out.push_back(k);
  }
  return out;
}

std::vector<value_type> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<value_type> out(n);
  for (value_type& v : out) v = rng();
  return out;
}

/// `count` keys drawn uniformly (with repetition) from `keys`.
std::vector<key_type> random_probes(const std::vector<key_type>& keys, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<key_type> out(count);
  for (key_type& k : out) k = keys[rng() % keys.size()];
  return out;
}

/// BPAs of this benchmark live at page-aligned addresses: the speed of a
/// 17 KiB copy depends on where source and destination sit relative to each
/// other (4K aliasing), and the copy baseline must not move between builds.
struct page_delete {
  void operator()(bpa* p) const noexcept {
    p->~bpa();
    ::operator delete(p, std::align_val_t{4096});
  }
};
using bpa_ptr = std::unique_ptr<bpa, page_delete>;

bpa_ptr new_bpa() { return bpa_ptr(new (::operator new(sizeof(bpa), std::align_val_t{4096})) bpa()); }
bpa_ptr new_bpa(const bpa& from) {
  return bpa_ptr(new (::operator new(sizeof(bpa), std::align_val_t{4096})) bpa(from));
}

// ---- data sets (built once, on first use) ------------------------------------

/// One leaf's worth of keys: 768 distinct keys, 75% of a BPA, in two states.
struct leaf_variant {
  /// Built by 768 random upserts, a flush, 16 more upserts and 16 erases of
  /// block keys: the log holds 16 unsorted keys, several blocks are unsorted.
  bpa_ptr inserted;
  /// The same keys through assign_sorted (what bulk load and merge produce):
  /// empty log, every block sorted.
  bpa_ptr sorted;
  std::vector<key_type> keys;  ///< present keys, random order
  std::vector<value_type> values;
  std::unordered_set<key_type> key_set;
  std_map model;  ///< the same contents, for cross-checks
};

leaf_variant build_leaf_variant(std::uint64_t seed) {
  constexpr std::size_t extra = 16;
  leaf_variant s;
  const std::vector<key_type> all = unique_random_keys(kLeafKeys + extra, seed);
  const std::vector<value_type> all_values = random_values(kLeafKeys + extra, seed ^ 0x9b1c0ffeeULL);

  s.inserted = new_bpa();
  bpa& b = *s.inserted;
  for (std::size_t i = 0; i < kLeafKeys; ++i) {
    if (b.upsert(all[i], all_values[i]) != upsert_status::inserted) die("upsert of a new key did not insert");
  }
  b.flush();
  for (std::size_t i = kLeafKeys; i < kLeafKeys + extra; ++i) {
    if (b.upsert(all[i], all_values[i]) != upsert_status::inserted) die("upsert of a new key did not insert");
  }
  // Erase `extra` random keys of the first 768 (all in blocks after the flush).
  std::vector<std::size_t> order(kLeafKeys);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::mt19937_64 rng(seed ^ 0x5eed0001ULL);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<bool> erased(kLeafKeys + extra, false);
  for (std::size_t e = 0; e < extra; ++e) {
    const std::size_t at = order[e];
    value_type old = 0;
    if (!b.erase(all[at], &old) || old != all_values[at]) die("erase of a present key failed");
    erased[at] = true;
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (erased[i]) continue;
    s.keys.push_back(all[i]);
    s.values.push_back(all_values[i]);
  }
  b.verify();
  if (b.size() != kLeafKeys || s.keys.size() != kLeafKeys) die("prepared BPA does not hold 768 keys");
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::optional<value_type> v = b.get(all[i]);
    if (erased[i] ? v.has_value() : (!v || *v != all_values[i])) die("prepared BPA get mismatch");
  }

  for (std::size_t i = 0; i < s.keys.size(); ++i) s.model.emplace(s.keys[i], s.values[i]);
  std::vector<key_type> sk;
  std::vector<value_type> sv;
  for (const auto& [k, v] : s.model) {
    sk.push_back(k);
    sv.push_back(v);
  }
  s.sorted = new_bpa();
  s.sorted->assign_sorted(sk.data(), sv.data(), sk.size());
  s.sorted->verify();
  s.key_set.insert(s.keys.begin(), s.keys.end());
  return s;
}

/// kLeafVariants leaves with different keys. Benchmarks that restore a leaf
/// every iteration (apply runs, first iteration) rotate over them, so that
/// the branch predictor cannot learn one leaf's sort by heart; the others
/// use variant 0.
struct small_leaf_data {
  std::vector<leaf_variant> variants;
  std_map stdmap;  ///< variant 0's keys, inserted in the same random order
  btree_map btree;
  std::vector<key_type> probes;  ///< kProbes keys of variant 0, random
};

const small_leaf_data& small_leaf() {
  static const small_leaf_data d = [] {
    small_leaf_data r;
    for (std::size_t v = 0; v < kLeafVariants; ++v) r.variants.push_back(build_leaf_variant(0x7a6d3e11ULL + 977 * v));
    const leaf_variant& v0 = r.variants[0];
    for (std::size_t i = 0; i < v0.keys.size(); ++i) {
      r.stdmap.emplace(v0.keys[i], v0.values[i]);
      r.btree.emplace(v0.keys[i], v0.values[i]);
    }
    r.probes = random_probes(v0.keys, kProbes, 0x0b5e55edULL);
    return r;
  }();
  return d;
}

const leaf_variant& leaf0() { return small_leaf().variants[0]; }

/// 2^20 keys for the leaf-store case.
struct big_data {
  std::vector<key_type> keys;  ///< random order
  std::vector<value_type> values;
  std::vector<key_type> sorted_keys;
  std::vector<value_type> sorted_values;
  std::vector<key_type> probes;
};

const big_data& big() {
  static const big_data d = [] {
    big_data r;
    r.keys = unique_random_keys(kStoreKeys, 0xb16b00b5ULL);
    r.values = random_values(kStoreKeys, 0xfeedfaceULL);
    std::vector<std::size_t> order(kStoreKeys);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&r](std::size_t a, std::size_t b) { return r.keys[a] < r.keys[b]; });
    r.sorted_keys.reserve(kStoreKeys);
    r.sorted_values.reserve(kStoreKeys);
    for (const std::size_t i : order) {
      r.sorted_keys.push_back(r.keys[i]);
      r.sorted_values.push_back(r.values[i]);
    }
    r.probes = random_probes(r.keys, kProbes, 0xa11ce5ULL);
    return r;
  }();
  return d;
}

struct big_store_data {
  leaf_store store;
  leaf_table table;
};

const big_store_data& big_store() {
  static const big_store_data d = [] {
    const big_data& b = big();
    big_store_data r{leaf_store::bulk_load(b.sorted_keys.data(), b.sorted_values.data(), kStoreKeys), {}};
    r.table = r.store.table();
    if (r.store.size() != kStoreKeys) die("bulk-loaded leaf store does not hold 2^20 keys");
    return r;
  }();
  return d;
}

const std_map& big_stdmap() {
  static const std_map m = [] {
    std_map r;
    const big_data& b = big();
    for (std::size_t i = 0; i < kStoreKeys; ++i) r.emplace(b.keys[i], b.values[i]);
    return r;
  }();
  return m;
}

const btree_map& big_btree() {
  static const btree_map m = [] {
    btree_map r;
    const big_data& b = big();
    for (std::size_t i = 0; i < kStoreKeys; ++i) r.emplace(b.keys[i], b.values[i]);
    return r;
  }();
  return m;
}

// ---- 1. get --------------------------------------------------------------------

template <class Lookup>
void get_loop(benchmark::State& state, const std::vector<key_type>& probes, Lookup lookup) {
  const std::size_t mask = probes.size() - 1;
  std::size_t i = 0;
  std::size_t misses = 0;
  for (auto _ : state) {
    const std::optional<value_type> v = lookup(probes[i & mask]);
    ++i;
    misses += !v.has_value();
    benchmark::DoNotOptimize(v);
  }
  if (misses != 0) state.SkipWithError("a probe key was not found");
  state.SetItemsProcessed(state.iterations());
}

void BM_Get_Bpa(benchmark::State& state, bool sorted) {
  const leaf_variant& v = leaf0();
  const bpa& b = sorted ? *v.sorted : *v.inserted;
  get_loop(state, small_leaf().probes, [&b](key_type k) { return b.get(k); });
}
BENCHMARK_CAPTURE(BM_Get_Bpa, inserted_768, false);
BENCHMARK_CAPTURE(BM_Get_Bpa, sorted_768, true);

void BM_Get_LeafStore(benchmark::State& state) {
  const big_store_data& d = big_store();
  const leaf_store& store = d.store;
  const std::vector<key_type>& lows = d.table.low_keys;
  const std::vector<tandem::leaf_id>& ids = d.table.ids;
  get_loop(state, big().probes, [&](key_type k) {
    const std::size_t at = static_cast<std::size_t>(std::upper_bound(lows.begin(), lows.end(), k) - lows.begin()) - 1;
    return store[ids[at]].data.get(k);
  });
}
BENCHMARK(BM_Get_LeafStore)->Arg(kStoreKeys);

template <class Map>
std::optional<value_type> map_find(const Map& m, key_type k) {
  const auto it = m.find(k);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

void BM_Get_StdMap(benchmark::State& state) {
  const bool small = static_cast<std::size_t>(state.range(0)) == kLeafKeys;
  const std_map& m = small ? small_leaf().stdmap : big_stdmap();
  get_loop(state, small ? small_leaf().probes : big().probes, [&m](key_type k) { return map_find(m, k); });
}
BENCHMARK(BM_Get_StdMap)->Arg(kLeafKeys)->Arg(kStoreKeys);

void BM_Get_AbslBtree(benchmark::State& state) {
  const bool small = static_cast<std::size_t>(state.range(0)) == kLeafKeys;
  const btree_map& m = small ? small_leaf().btree : big_btree();
  get_loop(state, small ? small_leaf().probes : big().probes, [&m](key_type k) { return map_find(m, k); });
}
BENCHMARK(BM_Get_AbslBtree)->Arg(kLeafKeys)->Arg(kStoreKeys);

// ---- 2. upsert -------------------------------------------------------------------

enum class stream_kind : std::uint8_t { replace, insert, erase };

struct stream_op {
  key_type key;
  value_type value;
  stream_kind kind;
};

/// Starting from leaf0()'s keys: each step is, with equal odds, a put
/// of a present key, or a put of a new key followed by an erase of a random
/// key that was present before it.
const std::vector<stream_op>& upsert_stream() {
  static const std::vector<stream_op> ops = [] {
    std::vector<key_type> present = leaf0().keys;
    std::unordered_set<key_type> in(present.begin(), present.end());
    std::mt19937_64 rng(0x0f5e7ULL);
    std::vector<stream_op> r;
    r.reserve(kStreamOps + 1);
    while (r.size() < kStreamOps) {
      if (rng() & 1) {
        r.push_back({present[rng() % present.size()], rng(), stream_kind::replace});
        continue;
      }
      key_type fresh = rng();
      while (in.count(fresh) != 0) fresh = rng();
      const std::size_t victim = rng() % present.size();
      r.push_back({fresh, rng(), stream_kind::insert});
      r.push_back({present[victim], 0, stream_kind::erase});
      in.erase(present[victim]);
      in.insert(fresh);
      present[victim] = fresh;
    }
    return r;
  }();
  return ops;
}

/// Runs the stream over `working`; `step` returns whether the op had the
/// expected outcome. Resets `working` to `initial`, timer paused, at the end
/// of the stream.
template <class T, class Step>
void upsert_loop(benchmark::State& state, T& working, const T& initial, Step step) {
  const std::vector<stream_op>& ops = upsert_stream();
  working = initial;
  std::size_t i = 0;
  std::size_t bad = 0;
  for (auto _ : state) {
    bad += !step(working, ops[i]);
    if (++i == ops.size()) {
      state.PauseTiming();
      working = initial;
      i = 0;
      state.ResumeTiming();
    }
  }
  if (bad != 0) state.SkipWithError("an upsert or erase had an unexpected outcome");
  state.SetItemsProcessed(state.iterations());
}

void BM_Upsert_Bpa(benchmark::State& state) {
  auto working = new_bpa();
  upsert_loop(state, *working, *leaf0().inserted, [](bpa& b, const stream_op& op) {
    switch (op.kind) {
      case stream_kind::replace:
        return b.upsert(op.key, op.value) == upsert_status::replaced;
      case stream_kind::insert:
        return b.upsert(op.key, op.value) == upsert_status::inserted;
      case stream_kind::erase:
        return b.erase(op.key);
    }
    return false;
  });
}
BENCHMARK(BM_Upsert_Bpa)->Arg(kLeafKeys);

template <class Map>
bool map_step(Map& m, const stream_op& op) {
  switch (op.kind) {
    case stream_kind::replace:
      return !m.insert_or_assign(op.key, op.value).second;
    case stream_kind::insert:
      return m.insert_or_assign(op.key, op.value).second;
    case stream_kind::erase:
      return m.erase(op.key) == 1;
  }
  return false;
}

void BM_Upsert_StdMap(benchmark::State& state) {
  std_map working;
  upsert_loop(state, working, small_leaf().stdmap, map_step<std_map>);
}
BENCHMARK(BM_Upsert_StdMap)->Arg(kLeafKeys);

void BM_Upsert_AbslBtree(benchmark::State& state) {
  btree_map working;
  upsert_loop(state, working, small_leaf().btree, map_step<btree_map>);
}
BENCHMARK(BM_Upsert_AbslBtree)->Arg(kLeafKeys);

// ---- 3. apply runs -----------------------------------------------------------------

/// The restored leaves of variant-rotating benchmarks, in rotation order.
std::vector<const bpa*> leaf_sources(bool sorted) {
  std::vector<const bpa*> out;
  for (const leaf_variant& v : small_leaf().variants) out.push_back(sorted ? v.sorted.get() : v.inserted.get());
  return out;
}

/// CPU ns per copy of a leaf (rotating over `sources`, as the benchmark did)
/// into `dst`: the median of 5 batches of copies.
double copy_ns(const std::vector<const bpa*>& sources, bpa& dst, std::int64_t iterations) {
  const std::int64_t n = std::clamp<std::int64_t>(iterations / 5, 1000, 10000);
  double batch[5];
  for (double& t : batch) {
    const double t0 = thread_cpu_ns();
    for (std::int64_t i = 0; i < n; ++i) {
      dst = *sources[static_cast<std::size_t>(i) % sources.size()];
      benchmark::ClobberMemory();
    }
    t = (thread_cpu_ns() - t0) / static_cast<double>(n);
  }
  std::sort(std::begin(batch), std::end(batch));
  return batch[2];
}

/// The restore step of BM_ApplyRun and BM_Iterate_Bpa/sort_then_iterate
/// alone: one copy of a 768-key BPA (rotating over the prepared leaves).
void BM_BpaCopy(benchmark::State& state) {
  const std::vector<const bpa*> sources = leaf_sources(false);
  auto dst = new_bpa();
  bpa* const d = dst.get();
  std::size_t j = 0;
  for (auto _ : state) {
    *d = *sources[j];
    j = (j + 1) % kLeafVariants;
    benchmark::DoNotOptimize(d);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(sizeof(bpa)));
}
BENCHMARK(BM_BpaCopy);

/// Outcomes of `run` on std::map (the reference model).
std::vector<point_result> model_results(std_map m, const std::vector<point_op>& run) {
  std::vector<point_result> out;
  for (const point_op& op : run) {
    const auto it = m.find(op.key);
    const bool found = it != m.end();
    out.push_back({found, found ? it->second : 0});
    if (op.kind == op_kind::put) {
      m.insert_or_assign(op.key, op.value);
    } else if (op.kind == op_kind::erase && found) {
      m.erase(it);
    }
  }
  return out;
}

bool same_results(const std::vector<point_result>& a, const std::vector<point_result>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].found != b[i].found || a[i].value != b[i].value) return false;
  }
  return true;
}

/// kRunsPerLength key-sorted runs of `r` ops on distinct keys; run j is for
/// leaf variant j % kLeafVariants: half its present keys, half new ones;
/// get, put, erase with equal odds. Cross-checked once: per_op, merge (from
/// both leaf states) and std::map give the same results and contents.
std::vector<std::vector<point_op>> make_runs(std::size_t r) {
  std::mt19937_64 rng(0xa991e000ULL + r);
  std::vector<std::vector<point_op>> runs(kRunsPerLength);
  auto a = new_bpa();
  auto b = new_bpa();
  std::vector<key_type> ka(bpa::capacity), kb(bpa::capacity);
  std::vector<value_type> va(bpa::capacity), vb(bpa::capacity);
  for (std::size_t j = 0; j < runs.size(); ++j) {
    std::vector<point_op>& run = runs[j];
    const leaf_variant& s = small_leaf().variants[j % kLeafVariants];
    std::unordered_set<key_type> used;
    while (run.size() < r) {
      key_type k = 0;
      if (rng() & 1) {
        k = s.keys[rng() % s.keys.size()];
      } else {
        do k = rng(); while (s.key_set.count(k) != 0);
      }
      if (!used.insert(k).second) continue;
      const op_kind kinds[3] = {op_kind::get, op_kind::put, op_kind::erase};
      run.push_back({k, rng(), kinds[rng() % 3]});
    }
    std::sort(run.begin(), run.end(), [](const point_op& x, const point_op& y) { return x.key < y.key; });

    *a = *s.inserted;
    *b = *s.inserted;
    std::vector<point_result> ra(r), rb(r);
    if (a->apply(run.data(), r, ra.data(), apply_path::per_op) != r) die("per_op apply stopped early");
    if (b->apply(run.data(), r, rb.data(), apply_path::merge) != r) die("merge apply stopped early");
    a->verify();
    b->verify();
    if (!same_results(ra, rb)) die("per_op and merge results differ, r = " + std::to_string(r));
    if (!same_results(ra, model_results(s.model, run))) die("apply results differ from std::map, r = " + std::to_string(r));
    if (a->size() != b->size()) die("per_op and merge sizes differ");
    a->extract_sorted(ka.data(), va.data());
    b->extract_sorted(kb.data(), vb.data());
    if (!std::equal(ka.begin(), ka.begin() + static_cast<std::ptrdiff_t>(a->size()), kb.begin()) ||
        !std::equal(va.begin(), va.begin() + static_cast<std::ptrdiff_t>(a->size()), vb.begin())) {
      die("per_op and merge contents differ, r = " + std::to_string(r));
    }
    for (const apply_path path : {apply_path::per_op, apply_path::merge}) {  // the sorted leaf agrees
      *b = *s.sorted;
      if (b->apply(run.data(), r, rb.data(), path) != r) die("apply on the sorted leaf stopped early");
      b->verify();
      if (!same_results(ra, rb) || b->size() != a->size()) die("apply on the sorted leaf differs, r = " + std::to_string(r));
      b->extract_sorted(kb.data(), vb.data());
      if (!std::equal(ka.begin(), ka.begin() + static_cast<std::ptrdiff_t>(a->size()), kb.begin())) {
        die("apply on the sorted leaf: contents differ, r = " + std::to_string(r));
      }
    }
  }
  return runs;
}

const std::vector<std::vector<point_op>>& apply_runs(std::size_t r) {
  static std::mutex mu;
  static std::map<std::size_t, std::vector<std::vector<point_op>>> cache;
  const std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(r);
  if (it == cache.end()) it = cache.emplace(r, make_runs(r)).first;
  return it->second;
}

void apply_run_loop(benchmark::State& state, bool sorted_leaf, apply_path path) {
  const std::size_t r = static_cast<std::size_t>(state.range(0));
  const std::vector<std::vector<point_op>>& runs = apply_runs(r);
  const std::vector<const bpa*> sources = leaf_sources(sorted_leaf);
  auto working = new_bpa();
  std::vector<point_result> results(r);
  std::size_t j = 0;
  std::size_t applied = 0;
  const double t0 = thread_cpu_ns();
  for (auto _ : state) {
    *working = *sources[j % kLeafVariants];
    applied += working->apply(runs[j].data(), r, results.data(), path);
    j = (j + 1) & (kRunsPerLength - 1);
    benchmark::DoNotOptimize(results.data());
    benchmark::ClobberMemory();
  }
  const double loop_ns = thread_cpu_ns() - t0;
  const std::int64_t iters = state.iterations();
  if (applied != static_cast<std::size_t>(iters) * r) state.SkipWithError("a run was not applied in full");
  const double copy = copy_ns(sources, *working, iters);
  state.SetItemsProcessed(iters * static_cast<std::int64_t>(r));
  state.counters["copy_ns"] = copy;
  state.counters["net_ns_per_op"] = (loop_ns / static_cast<double>(iters) - copy) / static_cast<double>(r);
}

/// Leaves as random inserts leave them (16 keys in the log, unsorted blocks;
/// a merge must sort them first).
void BM_ApplyRun(benchmark::State& state, apply_path path) { apply_run_loop(state, false, path); }

/// The same keys right after assign_sorted (bulk load, or a previous merge):
/// empty log, every block sorted.
void BM_ApplyRun_SortedLeaf(benchmark::State& state, apply_path path) { apply_run_loop(state, true, path); }

/// r = 1, 2, 4, ..., 256, plus 48 (768 / bpa::merge_crossover) and 96.
void run_lengths(benchmark::internal::Benchmark* b) {
  b->ArgName("r");
  for (std::int64_t r = 1; r <= 256; r *= 2) {
    b->Arg(r);
    if (r == 32 || r == 64) b->Arg(r + r / 2);
  }
}
BENCHMARK_CAPTURE(BM_ApplyRun, per_op, apply_path::per_op)->Apply(run_lengths);
BENCHMARK_CAPTURE(BM_ApplyRun, merge, apply_path::merge)->Apply(run_lengths);
BENCHMARK_CAPTURE(BM_ApplyRun, automatic, apply_path::automatic)->Apply(run_lengths);
BENCHMARK_CAPTURE(BM_ApplyRun_SortedLeaf, per_op, apply_path::per_op)->Apply(run_lengths);
BENCHMARK_CAPTURE(BM_ApplyRun_SortedLeaf, merge, apply_path::merge)->Apply(run_lengths);

// ---- 4. iterate ----------------------------------------------------------------------

struct sum_visitor {
  std::uint64_t* sum;
  std::size_t* n;
  void operator()(key_type k, value_type v) const {
    *sum += k ^ v;
    ++*n;
  }
};

/// Ordered iteration of a whole BPA, per element. iterate is const: a block
/// (or the log) that is not sorted is sorted in a local copy on every call.
/// - unsorted: leaves as random inserts left them (log and several blocks
///   unsorted), rotating over the leaf variants; this is every iteration,
///   first or not, of a leaf nobody sorted.
/// - sort_then_iterate: restore an unsorted leaf (copy), sort() it in place,
///   iterate; the copy is reported (copy_ns) and subtracted (net_ns_per_elem).
///   This is the first iteration when the caller sorts first.
/// - sorted: variant 0 after sort(): the steady state, nothing copied.
enum class iterate_case : std::uint8_t { unsorted, sort_then_iterate, sorted };

void BM_Iterate_Bpa(benchmark::State& state, iterate_case which) {
  const std::vector<const bpa*> sources = leaf_sources(false);
  auto working = new_bpa(*sources[0]);
  if (which == iterate_case::sorted) working->sort();
  std::size_t j = 0;
  std::uint64_t sum = 0;
  std::size_t visited = 0;
  const double t0 = thread_cpu_ns();
  for (auto _ : state) {
    const bpa* b = working.get();
    if (which == iterate_case::unsorted) {
      b = sources[j];
    } else if (which == iterate_case::sort_then_iterate) {
      *working = *sources[j];
      working->sort();
    }
    j = (j + 1) % kLeafVariants;
    b->iterate(0, std::numeric_limits<std::size_t>::max(), sum_visitor{&sum, &visited});
    benchmark::DoNotOptimize(sum);
    benchmark::ClobberMemory();
  }
  const double loop_ns = thread_cpu_ns() - t0;
  const std::int64_t iters = state.iterations();
  if (visited != static_cast<std::size_t>(iters) * kLeafKeys) state.SkipWithError("iterate missed keys");
  state.SetItemsProcessed(iters * static_cast<std::int64_t>(kLeafKeys));
  if (which == iterate_case::sort_then_iterate) {
    const double copy = copy_ns(sources, *working, iters);
    state.counters["copy_ns"] = copy;
    state.counters["net_ns_per_elem"] =
        (loop_ns / static_cast<double>(iters) - copy) / static_cast<double>(kLeafKeys);
  }
}
BENCHMARK_CAPTURE(BM_Iterate_Bpa, unsorted, iterate_case::unsorted)->Arg(kLeafKeys);
BENCHMARK_CAPTURE(BM_Iterate_Bpa, sort_then_iterate, iterate_case::sort_then_iterate)->Arg(kLeafKeys);
BENCHMARK_CAPTURE(BM_Iterate_Bpa, sorted, iterate_case::sorted)->Arg(kLeafKeys);

template <class Map>
void map_iterate_loop(benchmark::State& state, const Map& m) {
  std::uint64_t sum = 0;
  std::size_t visited = 0;
  for (auto _ : state) {
    for (const auto& [k, v] : m) {
      sum += k ^ v;
      ++visited;
    }
    benchmark::DoNotOptimize(sum);
  }
  if (visited != static_cast<std::size_t>(state.iterations()) * m.size()) state.SkipWithError("iteration missed keys");
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(m.size()));
}

void BM_Iterate_StdMap(benchmark::State& state) { map_iterate_loop(state, small_leaf().stdmap); }
BENCHMARK(BM_Iterate_StdMap)->Arg(kLeafKeys);

void BM_Iterate_AbslBtree(benchmark::State& state) { map_iterate_loop(state, small_leaf().btree); }
BENCHMARK(BM_Iterate_AbslBtree)->Arg(kLeafKeys);

// ---- 5. map and count ------------------------------------------------------------------

constexpr key_type kHalfHigh = max_key / 2;  // [0, 2^63 - 1]: about half the keys

std::size_t keys_in(key_type lo, key_type hi) {
  const std::vector<key_type>& keys = leaf0().keys;
  return static_cast<std::size_t>(std::count_if(keys.begin(), keys.end(), [&](key_type k) { return lo <= k && k <= hi; }));
}

void BM_Map_Bpa(benchmark::State& state, key_type hi) {
  const bpa& b = *leaf0().inserted;
  const std::size_t expected = keys_in(0, hi);
  std::uint64_t sum = 0;
  std::size_t visited = 0;
  for (auto _ : state) {
    b.map(0, hi, sum_visitor{&sum, &visited});
    benchmark::DoNotOptimize(sum);
  }
  if (visited != static_cast<std::size_t>(state.iterations()) * expected) state.SkipWithError("map visited a wrong number of keys");
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(expected));
  state.counters["elems"] = static_cast<double>(expected);
}
BENCHMARK_CAPTURE(BM_Map_Bpa, full_range, max_key)->Arg(kLeafKeys);
BENCHMARK_CAPTURE(BM_Map_Bpa, half_range, kHalfHigh)->Arg(kLeafKeys);

void BM_Count_Bpa(benchmark::State& state, key_type hi) {
  const bpa& b = *leaf0().inserted;
  const std::size_t expected = keys_in(0, hi);
  std::size_t total = 0;
  for (auto _ : state) {
    std::size_t c = b.count(0, hi);
    benchmark::DoNotOptimize(c);
    total += c;
  }
  if (total != static_cast<std::size_t>(state.iterations()) * expected) state.SkipWithError("count returned a wrong number");
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(expected));
  state.counters["elems"] = static_cast<double>(expected);
}
BENCHMARK_CAPTURE(BM_Count_Bpa, full_range, max_key)->Arg(kLeafKeys);
BENCHMARK_CAPTURE(BM_Count_Bpa, half_range, kHalfHigh)->Arg(kLeafKeys);

}  // namespace

/// BENCHMARK_MAIN, except that a run without --benchmark_min_time (flag or
/// BENCHMARK_MIN_TIME environment variable) uses 0.1 s per benchmark so the
/// whole executable finishes in well under a minute.
int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  bool min_time_given = std::getenv("BENCHMARK_MIN_TIME") != nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--benchmark_min_time", 20) == 0) min_time_given = true;
  }
  static char default_min_time[] = "--benchmark_min_time=0.1";
  if (!min_time_given && !args.empty()) args.insert(args.begin() + 1, default_min_time);
  int n = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
