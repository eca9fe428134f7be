// tandem-leaf-bench's point ops on one BPA, on the leaf store and on the
// ordered maps beside them: BM_Get_* (random hits) and BM_Upsert_* (a fixed
// stream of replaces, inserts and erases). See leaf_bench.cpp.

#include "leaf_data.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <unordered_set>
#include <vector>

namespace {

using namespace tandem_leaf_bench;

// ---- get --------------------------------------------------------------------

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

// ---- upsert -------------------------------------------------------------------

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

}  // namespace
