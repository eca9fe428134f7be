#pragma once
/// @file
/// tandem-leaf-bench's data sets and measuring helpers, shared by its
/// benchmark files: one leaf's worth of keys in several prepared BPAs (the
/// leaf variants), 2^20 keys in a leaf store, std::map and absl::btree_map
/// holding the same keys, and the CPU-time copy baseline that apply-run and
/// iterate benchmarks subtract. Every data set is built once, on first use,
/// from fixed seeds (std::mt19937_64), so every run sees the same data.

#include <tandem/host/bpa.hpp>
#include <tandem/host/leaf_store.hpp>

#include <absl/container/btree_map.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

namespace tandem_leaf_bench {

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

/// Ends the process: a data set failed its own check.
[[noreturn]] void die(const std::string& what);

/// CPU time of the calling thread, the clock Google Benchmark reports.
[[nodiscard]] double thread_cpu_ns();

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

[[nodiscard]] bpa_ptr new_bpa();
[[nodiscard]] bpa_ptr new_bpa(const bpa& from);

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

[[nodiscard]] const small_leaf_data& small_leaf();
[[nodiscard]] const leaf_variant& leaf0();

/// 2^20 keys for the leaf-store case.
struct big_data {
  std::vector<key_type> keys;  ///< random order
  std::vector<value_type> values;
  std::vector<key_type> sorted_keys;
  std::vector<value_type> sorted_values;
  std::vector<key_type> probes;
};

[[nodiscard]] const big_data& big();

struct big_store_data {
  leaf_store store;
  leaf_table table;
};

/// big()'s keys bulk-loaded into a leaf store, and its leaf table.
[[nodiscard]] const big_store_data& big_store();
/// big()'s keys in a std::map and an absl::btree_map, inserted in random order.
[[nodiscard]] const std_map& big_stdmap();
[[nodiscard]] const btree_map& big_btree();

/// The restored leaves of variant-rotating benchmarks, in rotation order.
[[nodiscard]] std::vector<const bpa*> leaf_sources(bool sorted);

/// CPU ns per copy of a leaf (rotating over `sources`, as BM_BpaCopy does)
/// into `dst`: the median of 5 batches of copies.
[[nodiscard]] double copy_ns(const std::vector<const bpa*>& sources, bpa& dst, std::int64_t iterations);

}  // namespace tandem_leaf_bench
