// tandem-leaf-bench's apply runs: a key-sorted run of point ops applied to a
// BPA on the per-op or the merge path (BM_ApplyRun*), and the leaf copy each
// iteration restores first (BM_BpaCopy). See leaf_bench.cpp.

#include "leaf_data.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

namespace {

using namespace tandem_leaf_bench;

// ---- apply runs -----------------------------------------------------------------

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

}  // namespace
