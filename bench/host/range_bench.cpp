// tandem-leaf-bench's reads over a key range: ordered iteration of a whole
// BPA beside std::map and absl::btree_map (BM_Iterate_*), and unordered map
// and count over a range of one BPA (BM_Map_Bpa, BM_Count_Bpa). See
// leaf_bench.cpp.

#include "leaf_data.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

using namespace tandem_leaf_bench;

// ---- iterate ----------------------------------------------------------------------

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

// ---- map and count ------------------------------------------------------------------

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
