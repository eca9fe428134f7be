#pragma once
/// @file
/// `leaf_cache`: which leaves have a copy beside the host's (on the GPU, or
/// in the host-memory stand-in of CPU-only builds), whether each copy is
/// current, and the changes that bring the copies up to date (DESIGN, "Leaf
/// cache"). It keeps the bookkeeping only; the copies live in a
/// `copy_target` (core/leaf_copy.hpp says what a copy is).
///
/// Slots. The copies' pool is cut into slots of `slot_entries` entries (a
/// leaf's capacity), one leaf a slot: `bytes / (slot_entries * 16)` slots.
///
/// Never stale. Host leaves stay the truth. A batch that will write a leaf
/// *claims* it when it has been routed, before any later batch is routed:
/// the leaf's copy becomes unusable in the next `drain`, which every route
/// that answers from the copies runs first. A copy is (re)made by `sync`
/// after a batch's leaf phase, from the host leaf as that batch left it,
/// and only while no later batch has claimed the leaf; a claim that comes
/// between a sync and its drain wins (the entry the drain sends is the
/// table's current one). A leaf whose writes the batch's route also wrote
/// into its copy (`patched`) keeps the copy usable. Structural changes
/// (splits, merges) drop the copies of the leaves they touch (and the
/// index makes no copy until the batches routed before them have run:
/// their claims name leaves of the older layout); loads,
/// compactions and table rebuilds drop every copy. So a copy that a route
/// reads holds its leaf as the batch's view has it (the batches before it,
/// all applied).
///
/// Heat. Gets that a route could not answer from a copy count against
/// their leaf (`note_misses`: a leaf with a slot heats its slot, one
/// without a current copy wants one); the target counts the gets its
/// copies answered, added to their slots at each drain once all slots are
/// taken. `sync` admits the leaves with the most misses, within a byte
/// budget, and when no slot is free takes one by CLOCK: the hand halves
/// each slot's heat as it passes and takes the first slot less than half
/// as hot as the leaf that wants it (leaves alike in heat do not take turns
/// in the slots), at most slots / 16 a sync (a new hot set is in within
/// about 16 syncs).
///
/// Threads: every member may be called from any thread; they take turns on
/// one mutex. `sync` reads the leaves it copies: the caller keeps them from
/// changing meanwhile. `drain` must not overlap lookups in the target.

#include <tandem/core/leaf_copy.hpp>
#include <tandem/core/types.hpp>
#include <tandem/host/leaf_store.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace tandem::host {

/// Where the copies live.
class copy_target {
 public:
  virtual ~copy_target() = default;
  /// @brief Makes room for `entries` pool entries, keeping what the pool
  ///        holds (what `apply` writes stays below it). Waits.
  virtual void reserve(std::size_t entries) = 0;
  /// @brief Applies `c` (core/leaf_copy.hpp); waits until it is in place.
  virtual void apply(const copy_changes& c) = 0;
  /// @brief Adds the gets answered from each leaf's copy since the last
  ///        call to hits[id] (ids below hits.size()), and starts counting
  ///        again from 0.
  virtual void take_hits(std::vector<std::uint32_t>& hits) = 0;
  /// @return bytes of memory the copies take (pool and table).
  [[nodiscard]] virtual std::size_t bytes() const noexcept = 0;
  /// @brief The table (by leaf id) and the pool as they are, for
  ///        `leaf_cache::verify`. Waits.
  virtual void read(std::vector<leaf_copy>& table, std::vector<entry>& pool) = 0;
};

/// The copies in host memory: what CPU-only builds answer from, so that the
/// cache's bookkeeping runs (and is tested) without a GPU.
class host_copies final : public copy_target {
 public:
  void reserve(std::size_t entries) override;
  void apply(const copy_changes& c) override;
  void take_hits(std::vector<std::uint32_t>& hits) override;
  [[nodiscard]] std::size_t bytes() const noexcept override;
  void read(std::vector<leaf_copy>& table, std::vector<entry>& pool) override;
  /// @brief `copy_get` on leaf `id`'s copy (none past the table), counting
  ///        the answer as a hit of the leaf.
  copy_answer get(leaf_id id, key_type key, value_type* value) const noexcept;
  /// @return leaf id's table entry (unusable past the table).
  [[nodiscard]] leaf_copy entry_of(leaf_id id) const noexcept {
    return id < table_.size() ? table_[id] : leaf_copy{};
  }
  [[nodiscard]] const entry* pool() const noexcept { return pool_.data(); }
  /// @brief Counts a get answered from leaf id's copy (`get` counts its own).
  void count_hit(leaf_id id) const noexcept { hits_[id].fetch_add(1, std::memory_order_relaxed); }
  /// @brief pool[at].value = value (a put written into a copy).
  void patch(std::uint64_t at, value_type value) noexcept { pool_[at].value = value; }

 private:
  std::vector<leaf_copy> table_;
  std::vector<entry> pool_;
  mutable std::vector<std::atomic<std::uint32_t>> hits_;
};

/// Counters of a leaf cache (index::stats).
struct leaf_cache_counters {
  std::size_t capacity_bytes = 0;  ///< the pool: slots * slot bytes
  std::size_t slots = 0;
  std::size_t cached = 0;        ///< leaves with a usable copy
  std::size_t held = 0;          ///< slots given to a leaf (its copy usable or not)
  std::uint64_t evictions = 0;   ///< slots taken from one leaf for another
  std::uint64_t copies = 0;      ///< leaf copies made
  std::uint64_t synced_bytes = 0;  ///< bytes of entries staged for the copies, in all
  std::uint64_t claims = 0;      ///< copies made unusable by writes
  std::uint64_t patched = 0;     ///< copies kept current by writes written into them
  std::uint64_t clears = 0;      ///< times every copy was dropped
  std::size_t target_bytes = 0;  ///< copy_target::bytes() after the latest drain
};

class leaf_cache {
 public:
  /// @param bytes pool bytes (whole slots of slot_entries entries are used)
  /// @param slot_entries entries a slot holds: the leaves' capacity (>= 1)
  leaf_cache(std::size_t bytes, std::size_t slot_entries);

  [[nodiscard]] std::size_t slots() const noexcept { return slots_; }
  [[nodiscard]] std::size_t slot_entries() const noexcept { return slot_entries_; }
  /// @return pool entries the target needs room for.
  [[nodiscard]] std::size_t pool_entries() const noexcept { return slots_ * slot_entries_; }

  /// @brief Batch `sequence` will write leaf `id`: its copy is unusable from
  ///        the next drain on, and no sync of an earlier batch remakes it.
  void claim(const leaf_id* ids, std::size_t n, std::uint64_t sequence);
  /// @brief Batch `sequence`'s writes to leaf id were all written into its
  ///        copy too (core/leaf_copy.hpp, copy_row::patched), by the route
  ///        after the drain before it: the copy stays usable unless it was
  ///        staged (or its slot given away) since that drain (then it goes:
  ///        it may lack the batch's values); no sync of an earlier batch
  ///        remakes it.
  void patched(const leaf_id* ids, std::size_t n, std::uint64_t sequence);
  /// @brief The leaves' shape changed (split, merge): their copies go.
  ///        Allocates nothing (for the leaf phase past its writes).
  void drop(const leaf_id* ids, std::size_t n) noexcept;
  /// @brief Every copy goes (loads, compactions, leaf table rebuilds).
  void clear();
  /// @brief Gets of one route that no copy answered, by leaf: heat.
  /// @return those of them whose leaf has a current copy (a route that did
  ///         not look in the copies: its would-be hits)
  std::size_t note_misses(const leaf_id* ids, const std::uint32_t* counts, std::size_t n);
  /// @return whether every slot is given to a leaf.
  [[nodiscard]] bool full() const;

  /// @brief After the leaf phase of batch `sequence`: stages copies of
  ///        the hottest missed leaves (not claimed by a later batch) from
  ///        `store`, at most `budget_bytes` of entries with what is staged
  ///        already, taking slots by CLOCK when none is free. Touches no
  ///        target (the next drain sends them). The store must not change
  ///        meanwhile.
  /// @return bytes of entries staged
  std::size_t sync(const leaf_store& store, std::uint64_t sequence, std::size_t budget_bytes);
  /// @brief Copies every live leaf of `store` (a load): as many as there
  ///        are slots, in key order, each piece of `budget_bytes` drained
  ///        into `target` before the next.
  void fill(const leaf_store& store, std::size_t budget_bytes, copy_target& target);
  /// @brief Sends what changed since the last drain to `target` (waits);
  ///        when every slot is taken, then adds the target's hit counts to
  ///        the slots' heat. Call it, taking turns with lookups, before a
  ///        lookup must see the claims made so far.
  void drain(copy_target& target);
  /// @return whether a drain has something to send.
  [[nodiscard]] bool pending() const;
  /// @brief Checks that the target holds this table (after a drain: call
  ///        it after one, nothing changing meanwhile) and that every usable
  ///        copy holds its live host leaf of `store`: the leaf's fences,
  ///        its entries in key order. Reads the whole pool (index::verify).
  /// @throws invariant_error naming the first leaf that differs
  void verify(const leaf_store& store, copy_target& target) const;
  /// @return the table entry of leaf id (none past the table). For tests.
  [[nodiscard]] leaf_copy entry_of(leaf_id id) const;

  [[nodiscard]] leaf_cache_counters counters() const;

 private:
  static constexpr std::uint32_t no_slot = 0xffffffffu;
  void grow_table(std::size_t ids);  // under mutex_
  void mark(leaf_id id);             // table_[id] changed: send it at the next drain
  void unusable(leaf_id id);
  std::size_t stage(const leaf_store& store, leaf_id id, std::uint32_t slot);
  std::uint32_t take_slot(std::uint32_t heat, std::size_t& evictions_left);
  /// A sync evicts at most slots / this (and at least one) copies.
  static constexpr std::size_t evictions_per_sync_divisor = 16;
  void drain_locked(copy_target& target);

  mutable std::mutex mutex_;
  std::size_t slot_entries_;
  std::size_t slots_;
  std::size_t next_free_ = 0;  // slots below it were handed out once
  std::size_t reserved_entries_ = 0;  // pool entries the target was asked to hold
  std::vector<leaf_id> owner_;        // by slot (no_leaf: free)
  std::vector<std::uint32_t> slot_heat_;
  std::size_t hand_ = 0;
  // By leaf id.
  std::vector<leaf_copy> table_;
  std::vector<std::uint32_t> slot_of_;
  std::vector<std::uint64_t> claimed_;  // sequence of the last batch that claimed it
  std::vector<std::uint32_t> heat_;     // misses since it was last copied
  std::vector<std::uint8_t> dirty_;
  std::vector<std::uint8_t> wanted_flag_;
  std::vector<leaf_id> wanted_;  // ids with misses
  // Pending changes.
  bool clear_pending_ = false;
  std::vector<leaf_id> dirty_ids_;
  std::vector<entry> staged_;
  std::vector<copy_move> moves_;
  std::vector<std::uint32_t> hits_;  // take_hits scratch, by id
  leaf_cache_counters counts_;
};

}  // namespace tandem::host
