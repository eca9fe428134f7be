#pragma once
/// @file
/// `leaf_store`: the arena of leaves in host memory.
///
/// Leaves are addressed by 32-bit `leaf_id`s; an id stays valid, and its leaf
/// stays at the same address, for the life of the store (leaves are never
/// freed or moved, so routes computed on any inner-layout version remain
/// usable). New leaves may be allocated from many threads at once. Leaves
/// partition [0, UINT64_MAX] and are chained left to right by right links,
/// starting at `head()`; the *leaf table* lists them in key order: ordinal ->
/// leaf_id, with each leaf's low fence as the separator the inner levels
/// index.
///
/// Threads: `allocate` is thread-safe. Everything else on one leaf must be
/// done by the task that owns the leaf; `apply` and `split` on different
/// leaves may run concurrently. `leaf_table`, `size` and `verify` need a
/// quiescent store.

#include <tandem/core/types.hpp>
#include <tandem/host/bpa.hpp>
#include <tandem/host/detail/huge_pages.hpp>
#include <tandem/host/leaf.hpp>

#include <cstddef>
#include <optional>
#include <vector>

// oneTBB is a dependency of the host layer only; users of tandem/tandem.hpp
// never see it.
#include <oneapi/tbb/concurrent_vector.h>

namespace tandem::host {

/// A separator created by a split: `right` now owns [separator, old high].
struct split_record {
  key_type separator;
  leaf_id left;
  leaf_id right;
};

/// Leaves in key order: `ids[i]` owns [low_keys[i], low_keys[i+1] - 1]
/// (the last one up to UINT64_MAX); low_keys[0] == 0.
struct leaf_table {
  std::vector<key_type> low_keys;
  std::vector<leaf_id> ids;
  [[nodiscard]] std::size_t size() const noexcept { return ids.size(); }
};

template <class Bpa = bpa>
class basic_leaf_store {
 public:
  using bpa_type = Bpa;
  using leaf_type = basic_leaf<Bpa>;

  /// Default fill factor of bulk load: room for inserts without early splits.
  static constexpr double default_fill = 0.75;

  /// @brief A store of one empty leaf that owns every key.
  basic_leaf_store();

  basic_leaf_store(const basic_leaf_store&) = delete;
  basic_leaf_store& operator=(const basic_leaf_store&) = delete;
  basic_leaf_store(basic_leaf_store&&) = default;
  basic_leaf_store& operator=(basic_leaf_store&&) = default;

  /// @brief Builds leaves from `n` pairs sorted by strictly increasing key,
  ///        each leaf filled to `fill` of its capacity (parallel).
  /// @throws std::invalid_argument when keys are not strictly increasing or
  ///         fill is not in (0, 1].
  static basic_leaf_store bulk_load(const key_type* keys, const value_type* values, std::size_t n,
                                    double fill = default_fill);

  /// @brief Allocates an empty leaf (fences and link left to the caller).
  ///        Thread-safe.
  /// @throws tandem::error when the 32-bit id space is exhausted.
  leaf_id allocate();

  [[nodiscard]] leaf_type& operator[](leaf_id id) noexcept { return leaves_[id]; }
  [[nodiscard]] const leaf_type& operator[](leaf_id id) const noexcept { return leaves_[id]; }

  /// @return the leaf that owns key 0.
  [[nodiscard]] leaf_id head() const noexcept { return head_; }
  /// @return the number of leaves allocated (all are linked once a split ends).
  [[nodiscard]] std::size_t leaf_count() const noexcept { return leaves_.size(); }
  /// @return the number of keys held. Needs a quiescent store.
  [[nodiscard]] std::size_t size() const;

  /// @brief Splits leaf `id` at its median key: the lower half stays, the
  ///        upper half moves to a new right neighbour. Requires >= 2 keys.
  ///        With `next`, the key about to go in: when at most one key of it
  ///        lies at or above `next`, splits there instead (bpa::split_into), so
  ///        that inserts in ascending order leave full leaves behind.
  split_record split(leaf_id id, std::optional<key_type> next = std::nullopt);

  /// @brief Applies a run of point ops sorted by key, starting at leaf `id`,
  ///        splitting leaves that fill up; ops past a leaf's high fence follow
  ///        right links. The calling task must own every leaf the run reaches.
  /// @param splits when not null, gets one record per split, in key order
  /// @note Requires ops[0].key >= the low fence of `id`.
  void apply(leaf_id id, const point_op* ops, std::size_t n, point_result* results,
             std::vector<split_record>* splits = nullptr, apply_path path = apply_path::automatic);

  /// @return the leaves in key order, walking right links from head().
  [[nodiscard]] leaf_table table() const;

  /// @return the leaf that owns `key`, by walking right links from `start`
  ///         (which must own a key <= `key`).
  [[nodiscard]] leaf_id walk_right(leaf_id start, key_type key) const noexcept {
    while (key > leaves_[start].high) start = leaves_[start].right;
    return start;
  }

  /// @brief Checks every leaf and the chain: fences contiguous from 0 to
  ///        UINT64_MAX, every allocated leaf linked exactly once.
  /// @throws tandem::invariant_error
  void verify() const;

 private:
  // Leaves in huge pages where the system has them: random reads of
  // gigabytes of leaves miss the TLB far less often.
  tbb::concurrent_vector<leaf_type, detail::huge_page_allocator<leaf_type>> leaves_;
  leaf_id head_ = 0;
};

using leaf_store = basic_leaf_store<bpa>;

}  // namespace tandem::host

#include <tandem/host/detail/leaf_store.inl>
