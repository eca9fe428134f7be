#pragma once
/// @file
/// `leaf_store`: the arena of leaves in host memory.
///
/// Leaves are addressed by 32-bit `leaf_id`s; a leaf stays at the same
/// address while it lives, so routes computed on an older inner-layout
/// version remain usable. New leaves may be allocated from many threads at
/// once. Leaves
/// partition [0, UINT64_MAX] and are chained left to right by right links,
/// starting at `head()`; the *leaf table* lists them in key order: ordinal ->
/// leaf_id, with each leaf's low fence as the separator the inner levels
/// index.
///
/// Threads: `allocate` is thread-safe. Everything else on one leaf must be
/// done by the task that owns the leaf; `apply` and `split` on different
/// leaves may run concurrently. `leaf_table`, `size`, `reserve` and `verify`
/// need a quiescent store.
///
/// Merges: `merge` moves a leaf's keys into its left neighbour, which then
/// owns its range, and leaves it *dead*: empty, fences `low = UINT64_MAX,
/// high = 0` (owning nothing) and its right link pointing at the survivor.
/// A route of an older version that lands on a dead leaf walks from it to
/// the survivor and on to the right (`walk_right`): the survivor's low fence
/// lies below every key the dead leaf owned, and key 0 always routes to the
/// head, which never dies. A dead leaf is therefore kept, and its id not
/// handed out again, until no route of a version that lists it can be used:
/// each death carries a tag (the caller's layout version), and `recycle(v)`
/// lets `allocate` reuse the ids of leaves that died with tags below v.
/// `compact` moves the live leaves down into the dead ones' slots and gives
/// the arena's emptied segments back (ids change: no older route may be
/// used afterwards).
///
/// Memory: leaves live in segments that never move (detail/leaf_arena.hpp).
/// `reserve(k)` makes room for k new leaves up front, so that the next k
/// allocations (splits) allocate no memory: the leaf phase reserves a bound
/// on its splits before any leaf changes, and a batch that cannot get the
/// memory fails with the store untouched. An allocation that fails leaves
/// the store as it was.

#include <tandem/core/types.hpp>
#include <tandem/host/bpa.hpp>
#include <tandem/host/detail/leaf_arena.hpp>
#include <tandem/host/leaf.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace tandem::host {

/// A separator created by a split: `right` now owns [separator, old high].
struct split_record {
  key_type separator;
  leaf_id left;
  leaf_id right;
};

/// Where concurrent runs record their splits (or other records): room for
/// `capacity` records made beforehand, so that recording allocates nothing.
/// Records past the room are counted, not kept (`lost()`).
template <class Record>
struct record_sink {
  Record* records = nullptr;
  std::size_t capacity = 0;
  std::atomic<std::size_t> count{0};

  void push_back(const Record& r) noexcept {
    const std::size_t i = count.fetch_add(1, std::memory_order_relaxed);
    if (i < capacity) records[i] = r;
  }
  /// Records kept (after the runs).
  [[nodiscard]] std::size_t size() const noexcept { return std::min(count.load(std::memory_order_relaxed), capacity); }
  /// Whether some split found no room for its record.
  [[nodiscard]] bool lost() const noexcept { return count.load(std::memory_order_relaxed) > capacity; }
  void reset(Record* room, std::size_t n) noexcept {
    records = room;
    capacity = n;
    count.store(0, std::memory_order_relaxed);
  }
};
using split_sink = record_sink<split_record>;

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
  basic_leaf_store(basic_leaf_store&& o) noexcept { *this = std::move(o); }
  basic_leaf_store& operator=(basic_leaf_store&& o) noexcept {
    leaves_ = std::move(o.leaves_);
    head_ = o.head_;
    near_full_.store(o.near_full_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    made_.store(o.made_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    merges_ = o.merges_;
    dead_ = std::move(o.dead_);
    recycled_ = o.recycled_;
    reuse_next_.store(o.reuse_next_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }

  /// @brief Builds leaves from `n` pairs sorted by strictly increasing key,
  ///        each leaf filled to `fill` of its capacity (parallel).
  /// @throws std::invalid_argument when keys are not strictly increasing or
  ///         fill is not in (0, 1].
  static basic_leaf_store bulk_load(const key_type* keys, const value_type* values, std::size_t n,
                                    double fill = default_fill);

  /// @brief Allocates an empty leaf (fences and link left to the caller).
  ///        Thread-safe. Takes room made by `reserve` when there is some.
  /// @throws tandem::error when the 32-bit id space is exhausted;
  ///         std::bad_alloc when no room is left and none can be made.
  ///         Either way the store is as it was.
  leaf_id allocate();

  /// @brief Merges leaf `right` into its left neighbour `left`
  ///        (`left.right == right`): `left` takes its keys, high fence and
  ///        right link, and `right` dies with `tag` (see "Merges").
  ///        Allocates nothing after `reserve_merges`.
  /// @note Requires left.size() + right.size() <= capacity; the head never
  ///       dies (it is never a `right`).
  void merge(leaf_id left, leaf_id right, std::uint64_t tag);
  /// @brief Makes room to record `more` deaths: the next `more` merges
  ///        allocate nothing.
  /// @throws std::bad_alloc, the store unchanged
  void reserve_merges(std::size_t more);
  /// @brief Lets `allocate` hand out again the ids of leaves that died with
  ///        a tag below `tag`. Needs a quiescent store.
  void recycle(std::uint64_t tag) noexcept;
  /// @brief Moves every live leaf to an id below live_leaves() (links and
  ///        head follow), drops every dead leaf and frees the arena's
  ///        segments that hold no live leaf. Needs a quiescent store.
  ///        Before anything moves, calls `before(moved)` with the new id of
  ///        each old id (no_leaf for a dead one), for every id below
  ///        leaf_count(): what it throws aborts the compaction, the store
  ///        unchanged.
  /// @throws std::bad_alloc, or what `before` throws, before anything changed
  template <class Before>
  void compact(Before&& before);

  /// @brief Makes room for `more` leaves beyond those allocated: the next
  ///        `more` allocations allocate no memory.
  /// @throws std::bad_alloc, the store unchanged
  void reserve(std::size_t more) {
    const std::size_t reused = reusable();
    if (more > reused) leaves_.reserve(leaves_.size() + more - reused);
  }

  /// @return how many leaves can be allocated without allocating memory.
  [[nodiscard]] std::size_t room() const noexcept { return leaves_.capacity() - leaves_.size() + reusable(); }

  [[nodiscard]] leaf_type& operator[](leaf_id id) noexcept { return leaves_[id]; }
  [[nodiscard]] const leaf_type& operator[](leaf_id id) const noexcept { return leaves_[id]; }

  /// @return the leaf that owns key 0.
  [[nodiscard]] leaf_id head() const noexcept { return head_; }
  /// @return the ids handed out: every leaf id is below it (live and dead
  ///         leaves; room made by `reserve` is not counted).
  [[nodiscard]] std::size_t leaf_count() const noexcept { return leaves_.size(); }
  /// @return the leaves linked in the chain (once a split or merge ends).
  [[nodiscard]] std::size_t live_leaves() const noexcept { return leaves_.size() - dead_leaves(); }
  /// @return dead leaves, waiting to be recycled or recycled and not yet
  ///         handed out again.
  [[nodiscard]] std::size_t dead_leaves() const noexcept { return dead_.size() - reused(); }
  /// @return leaves made by allocate() so far (never decreases): a route
  ///         made when this was m may meet made() - m leaves it does not
  ///         know.
  [[nodiscard]] std::uint64_t made() const noexcept { return made_.load(std::memory_order_relaxed); }
  /// @return merges so far (never decreases).
  [[nodiscard]] std::uint64_t merges() const noexcept { return merges_; }
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
  ///        (push_back: a std::vector, or a split_sink shared by runs)
  /// @return the leaf that owns the last op's key (`id` when n == 0): the
  ///         leaf to continue from with a run of higher keys
  /// @note Requires ops[0].key >= the low fence of `id`.
  ///
  /// How many splits a run can make (the leaf phase reserves that many
  /// leaves before it writes): with C = Bpa::capacity and h = C/2 - 1, a run
  /// of `a` ops that may add a key (put, insert) over leaves of which `f`
  /// can fill (size + a > C) splits at most 2 * (f + a / h) times, and not
  /// at all when f == 0. Why: a leaf splits only when full. Its first split
  /// costs no adds (f counts those). After a split, the half the run goes on
  /// in, and any leaf the run made and reaches later, is at least h keys
  /// short of full, so its next split costs h adds (a / h counts those),
  /// except one case: a split at the next key that keeps all but one key in
  /// the lower half, which the add fills, so that the next add splits it
  /// again, now with every key below it, leaving it full and never reached
  /// again. Those follow-up splits are at most as many as the others.
  template <class Splits = std::vector<split_record>>
  leaf_id apply(leaf_id id, const point_op* ops, std::size_t n, point_result* results, Splits* splits = nullptr,
                apply_path path = apply_path::automatic) {
    std::int64_t added = 0;
    return apply_run(id, record_run{ops, results}, n, splits, added, path);
  }

  /// @brief `apply` over a run given as records or columns (bpa.hpp:
  ///        record_run, column_run), read where it lies.
  /// @param added gets the keys the run added minus those it erased
  template <class Run, class Splits>
  leaf_id apply_run(leaf_id id, const Run& run, std::size_t n, Splits* splits, std::int64_t& added,
                    apply_path path = apply_path::automatic);

  /// A leaf that a run of erases leaves with at most this many keys is
  /// offered for a merge (leaf_phase_report::underfull) ...
  static constexpr std::size_t merge_below = Bpa::capacity / 4;
  /// ... with a neighbour when the two hold at most this many together, or
  /// when either is empty.
  static constexpr std::size_t merge_fill = Bpa::capacity * 3 / 4;

  /// Adds the run may make between splits of one leaf (see apply).
  static constexpr std::size_t adds_per_split = Bpa::capacity / 2 - 1;
  static_assert(Bpa::capacity >= 4, "a split must leave room in the half that goes on");

  /// A leaf is *near full* when fewer than this many keys would fill it: a
  /// run of fewer adds can split no other leaf (and, as this is at most
  /// adds_per_split, can split it at most twice; see apply).
  static constexpr std::size_t near_full_slack = Bpa::capacity / 16 > 0 ? Bpa::capacity / 16 : 1;
  static_assert(near_full_slack <= adds_per_split, "a near-full leaf's run splits it at most twice");
  /// @return how many leaves are near full, as apply, split and bulk_load
  ///         left them (changes made through operator[] are not counted).
  ///         Needs a quiescent store.
  [[nodiscard]] std::size_t near_full() const noexcept {
    const std::int64_t n = near_full_.load(std::memory_order_relaxed);
    return n > 0 ? static_cast<std::size_t>(n) : 0;
  }

  /// @return the leaves in key order, walking right links from head().
  [[nodiscard]] leaf_table table() const;

  /// @return the leaf that owns `key`, by walking right links from `start`
  ///         (which must own, or have owned before it died, a key <= `key`;
  ///         a dead leaf's high fence, 0, sends every key > 0 on to its
  ///         survivor).
  [[nodiscard]] leaf_id walk_right(leaf_id start, key_type key) const noexcept {
    while (key > leaves_[start].high) start = leaves_[start].right;
    return start;
  }

  /// @brief Checks every leaf and the chain: fences contiguous from 0 to
  ///        UINT64_MAX, every live leaf linked exactly once, every dead
  ///        leaf empty and owning nothing.
  /// @throws tandem::invariant_error
  void verify() const;

 private:
  // Leaves in huge pages where the system has them: random reads of
  // gigabytes of leaves miss the TLB far less often.
  detail::leaf_arena<leaf_type> leaves_;
  leaf_id head_ = 0;
  std::atomic<std::int64_t> near_full_{0};  // see near_full()
  std::atomic<std::uint64_t> made_{0};      // see made()
  std::uint64_t merges_ = 0;
  /// Dead leaves in order of death (tags never decrease): [0, recycled_)
  /// may be handed out again, allocate taking them from the front
  /// (reuse_next_ counts its takes, some of them past recycled_), the rest
  /// wait.
  struct death {
    leaf_id id;
    std::uint64_t tag;
  };
  std::vector<death> dead_;
  std::size_t recycled_ = 0;
  std::atomic<std::size_t> reuse_next_{0};
  [[nodiscard]] std::size_t reused() const noexcept {
    return std::min(reuse_next_.load(std::memory_order_relaxed), recycled_);
  }
  [[nodiscard]] std::size_t reusable() const noexcept { return recycled_ - reused(); }

  static constexpr bool is_near_full(std::size_t size) noexcept { return size + near_full_slack > Bpa::capacity; }
  /// Counts a leaf that went from near full `was` to `now`.
  void note_fill(bool was, bool now) noexcept {
    if (was != now) near_full_.fetch_add(now ? 1 : -1, std::memory_order_relaxed);
  }
};

using leaf_store = basic_leaf_store<bpa>;

}  // namespace tandem::host

#include <tandem/host/detail/leaf_store.inl>
