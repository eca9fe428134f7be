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
///
/// Files: leaf_data.* (the data sets and the copy baseline),
/// point_ops_bench.cpp (get, upsert), apply_run_bench.cpp (apply runs, the
/// BPA copy), range_bench.cpp (iterate, map, count); this file is main().

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <vector>

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
