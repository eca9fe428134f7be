// leaf_cache: the bookkeeping of the leaf copies (leaf_cache.hpp), and
// host_copies, the copies in host memory.
#include <tandem/host/leaf_cache.hpp>

#include <tandem/error.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace tandem::host {

// ---- host_copies ------------------------------------------------------------

void host_copies::reserve(std::size_t entries) {
  if (pool_.size() < entries) pool_.resize(entries);
}

void host_copies::apply(const copy_changes& c) {
  if (table_.size() < c.table_size) {
    table_.resize(c.table_size);
    std::vector<std::atomic<std::uint32_t>> grown(c.table_size);
    for (std::size_t i = 0; i < hits_.size(); ++i) grown[i].store(hits_[i].load(std::memory_order_relaxed));
    hits_.swap(grown);
  }
  // The GPU applies the moves at once: here their destinations are checked
  // to be disjoint, as that needs.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans(c.move_count);
  for (std::size_t i = 0; i < c.move_count; ++i) spans[i] = {c.moves[i].to, c.moves[i].to + c.moves[i].count};
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) {
      throw std::logic_error("host_copies::apply: two moves write pool entry " + std::to_string(spans[i].first));
    }
  }
  if (c.clear) std::fill(table_.begin(), table_.end(), leaf_copy{});
  for (std::size_t i = 0; i < c.move_count; ++i) {
    const copy_move& m = c.moves[i];
    if (m.to + m.count > pool_.size() || m.from + m.count > c.staged_count) {
      throw std::logic_error("host_copies::apply: a move past the pool or the staged entries");
    }
    std::copy(c.staged + m.from, c.staged + m.from + m.count, pool_.begin() + static_cast<std::ptrdiff_t>(m.to));
  }
  for (std::size_t i = 0; i < c.entry_count; ++i) table_[c.ids[i]] = c.entries[i];
}

void host_copies::take_hits(std::vector<std::uint32_t>& hits) {
  const std::size_t n = std::min(hits.size(), hits_.size());
  for (std::size_t i = 0; i < n; ++i) hits[i] += hits_[i].exchange(0, std::memory_order_relaxed);
}

void host_copies::read(std::vector<leaf_copy>& table, std::vector<entry>& pool) {
  table = table_;
  pool = pool_;
}

std::size_t host_copies::bytes() const noexcept {
  return pool_.size() * sizeof(entry) + table_.size() * (sizeof(leaf_copy) + sizeof(std::uint32_t));
}

copy_answer host_copies::get(leaf_id id, key_type key, value_type* value) const noexcept {
  if (id >= table_.size()) return copy_answer::none;
  const copy_answer a = copy_get(table_[id], pool_.data(), key, value);
  if (a != copy_answer::none) hits_[id].fetch_add(1, std::memory_order_relaxed);
  return a;
}

// ---- leaf_cache -------------------------------------------------------------

leaf_cache::leaf_cache(std::size_t bytes, std::size_t slot_entries)
    : slot_entries_(slot_entries), slots_(slot_entries == 0 ? 0 : bytes / (slot_entries * sizeof(entry))) {
  if (slot_entries == 0) throw std::invalid_argument("leaf_cache: slot_entries must be at least 1");
  if (slots_ >= no_slot) slots_ = no_slot - 1;
  owner_.assign(slots_, no_leaf);
  slot_heat_.assign(slots_, 0);
  counts_.slots = slots_;
  counts_.capacity_bytes = slots_ * slot_entries_ * sizeof(entry);
}

void leaf_cache::grow_table(std::size_t ids) {
  if (table_.size() >= ids) return;
  const std::size_t n = std::max(ids, table_.size() + table_.size() / 4);
  table_.resize(n);
  slot_of_.resize(n, no_slot);
  claimed_.resize(n, 0);
  heat_.resize(n, 0);
  dirty_.resize(n, 0);
  wanted_flag_.resize(n, 0);
  dirty_ids_.reserve(n);  // each id at most once: mark() and drop() allocate nothing
}

void leaf_cache::mark(leaf_id id) {
  if (dirty_[id]) return;
  dirty_[id] = 1;
  dirty_ids_.push_back(id);
}

void leaf_cache::unusable(leaf_id id) {
  if (table_[id].usable == 0) return;
  table_[id].usable = 0;
  --counts_.cached;
  mark(id);
}

void leaf_cache::claim(const leaf_id* ids, std::size_t n, std::uint64_t sequence) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i = 0; i < n; ++i) {
    const leaf_id id = ids[i];
    grow_table(std::size_t{id} + 1);
    claimed_[id] = std::max(claimed_[id], sequence);
    if (table_[id].usable != 0) ++counts_.claims;
    unusable(id);
  }
}

void leaf_cache::patched(const leaf_id* ids, std::size_t n, std::uint64_t sequence) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i = 0; i < n; ++i) {
    const leaf_id id = ids[i];
    grow_table(std::size_t{id} + 1);
    claimed_[id] = std::max(claimed_[id], sequence);
    if (dirty_[id] != 0) {  // changed since the route's drain: the patch may have missed it
      if (table_[id].usable != 0) ++counts_.claims;
      unusable(id);
    } else if (table_[id].usable != 0) {
      ++counts_.patched;
    }
  }
}

void leaf_cache::drop(const leaf_id* ids, std::size_t n) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i] < table_.size()) unusable(ids[i]);
  }
}

void leaf_cache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (leaf_copy& c : table_) c = leaf_copy{};
  std::fill(slot_of_.begin(), slot_of_.end(), no_slot);
  std::fill(heat_.begin(), heat_.end(), 0);
  std::fill(dirty_.begin(), dirty_.end(), 0);
  std::fill(wanted_flag_.begin(), wanted_flag_.end(), 0);
  std::fill(owner_.begin(), owner_.end(), no_leaf);
  std::fill(slot_heat_.begin(), slot_heat_.end(), 0);
  next_free_ = 0;
  hand_ = 0;
  wanted_.clear();
  dirty_ids_.clear();
  staged_.clear();
  moves_.clear();
  clear_pending_ = true;
  counts_.cached = 0;
  counts_.held = 0;
  ++counts_.clears;
}

std::size_t leaf_cache::note_misses(const leaf_id* ids, const std::uint32_t* counts, std::size_t n) {
  std::size_t current = 0;
  if (slots_ == 0) return current;
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i = 0; i < n; ++i) {
    const leaf_id id = ids[i];
    grow_table(std::size_t{id} + 1);
    // Gets of a leaf with a slot heat the slot (those a current copy
    // answered come from the target's hit counts); a leaf whose copy is
    // not current wants one.
    if (slot_of_[id] != no_slot) slot_heat_[slot_of_[id]] += counts[i];
    if (table_[id].usable != 0) {
      current += counts[i];
      continue;
    }
    heat_[id] += counts[i];
    if (!wanted_flag_[id]) {
      wanted_flag_[id] = 1;
      wanted_.push_back(id);
    }
  }
  return current;
}

bool leaf_cache::full() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_.held == slots_;
}

std::size_t leaf_cache::stage(const leaf_store& store, leaf_id id, std::uint32_t slot) {
  const leaf& f = store[id];
  const std::size_t at = staged_.size();
  const std::size_t n = f.data.size();
  staged_.resize(at + n);
  const std::size_t got = n == 0 ? 0 : f.data.copy_ordered(min_key, n, staged_.data() + at);
  staged_.resize(at + got);
  const std::uint64_t to = std::uint64_t{slot} * slot_entries_;
  if (got > 0) moves_.push_back({at, to, got});
  leaf_copy& c = table_[id];
  if (c.usable == 0) ++counts_.cached;
  c = leaf_copy{f.low, f.high, to, static_cast<std::uint32_t>(got), 1};
  mark(id);
  ++counts_.copies;
  counts_.synced_bytes += got * sizeof(entry);
  return got * sizeof(entry);
}

std::uint32_t leaf_cache::take_slot(std::uint32_t heat, std::size_t& evictions_left) {
  if (next_free_ < slots_) return static_cast<std::uint32_t>(next_free_++);
  if (evictions_left == 0) return no_slot;
  // CLOCK: one turn at most; each slot passed cools by half. A slot goes
  // to a leaf at least twice as hot (leaves alike in heat do not take
  // turns in the slots).
  for (std::size_t step = 0; step < slots_; ++step) {
    const std::size_t s = hand_;
    hand_ = hand_ + 1 == slots_ ? 0 : hand_ + 1;
    if (std::uint64_t{slot_heat_[s]} * 2 < heat) {
      --evictions_left;
      const leaf_id old = owner_[s];
      unusable(old);
      slot_of_[old] = no_slot;
      owner_[s] = no_leaf;
      --counts_.held;
      ++counts_.evictions;
      return static_cast<std::uint32_t>(s);
    }
    slot_heat_[s] /= 2;
  }
  evictions_left = 0;  // a turn found no slot this cool: none for the cooler leaves after it either
  return no_slot;
}

std::size_t leaf_cache::sync(const leaf_store& store, std::uint64_t sequence, std::size_t budget_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (slots_ == 0 || wanted_.empty()) return 0;
  // Staged and not yet drained (syncs of batches that did not look in the
  // copies) count against the budget.
  if (staged_.size() * sizeof(entry) >= budget_bytes) return 0;
  budget_bytes -= staged_.size() * sizeof(entry);
  grow_table(store.leaf_count());
  // Hottest first: those that may get a slot now in order, the rest after.
  const std::size_t open = slots_ - counts_.held + std::max<std::size_t>(1, slots_ / evictions_per_sync_divisor);
  const auto hotter = [&](leaf_id a, leaf_id b) { return heat_[a] > heat_[b]; };
  if (wanted_.size() > open) {
    std::nth_element(wanted_.begin(), wanted_.begin() + static_cast<std::ptrdiff_t>(open), wanted_.end(), hotter);
    std::sort(wanted_.begin(), wanted_.begin() + static_cast<std::ptrdiff_t>(open), hotter);
  } else {
    std::sort(wanted_.begin(), wanted_.end(), hotter);
  }
  std::size_t staged = 0;
  std::size_t evictions_left = std::max<std::size_t>(1, slots_ / evictions_per_sync_divisor);
  std::size_t kept = 0;
  auto wait_cooler = [&](leaf_id id) {  // it stays wanted at half its heat, while it has some
    heat_[id] /= 2;
    if (heat_[id] == 0) {
      wanted_flag_[id] = 0;
    } else {
      wanted_[kept++] = id;
    }
  };
  auto forget = [&](leaf_id id) {
    wanted_flag_[id] = 0;
    heat_[id] = 0;
  };
  for (std::size_t i = 0; i < wanted_.size(); ++i) {
    const leaf_id id = wanted_[i];
    if (claimed_[id] > sequence || table_[id].usable != 0) {  // written later, or current
      forget(id);
      continue;
    }
    std::uint32_t slot = slot_of_[id];
    // No room for it: it waits, and its leaf (a line of the store, at
    // random) is not read.
    if (staged >= budget_bytes || (slot == no_slot && next_free_ == slots_ && evictions_left == 0)) {
      wait_cooler(id);
      continue;
    }
    if (id >= store.leaf_count() || store[id].low > store[id].high) {  // dead
      forget(id);
      continue;
    }
    if (slot == no_slot) {
      slot = take_slot(heat_[id], evictions_left);
      if (slot == no_slot) {  // every slot hotter, or evictions spent
        wait_cooler(id);
        continue;
      }
      slot_of_[id] = slot;
      owner_[slot] = id;
      ++counts_.held;
    }
    slot_heat_[slot] = heat_[id];
    heat_[id] = 0;
    wanted_flag_[id] = 0;
    staged += stage(store, id, slot);
  }
  wanted_.resize(kept);
  return staged;
}

void leaf_cache::fill(const leaf_store& store, std::size_t budget_bytes, copy_target& target) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (slots_ == 0) return;
  grow_table(store.leaf_count());
  // In pieces of about budget_bytes: the leaves' places in the staged
  // entries by a prefix sum of their sizes, then every copy in parallel.
  std::vector<leaf_id> ids;
  std::vector<std::size_t> at, got;
  leaf_id next = store.head();
  while (next != no_leaf && next_free_ < slots_) {
    ids.clear();
    at.assign(1, 0);
    for (; next != no_leaf && next_free_ + ids.size() < slots_ && at.back() * sizeof(entry) < budget_bytes;
         next = store[next].right) {
      ids.push_back(next);
      at.push_back(at.back() + store[next].data.size());
    }
    staged_.resize(at.back());
    got.assign(ids.size(), 0);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, ids.size(), 64), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t i = r.begin(); i < r.end(); ++i) {
        const std::size_t n = at[i + 1] - at[i];
        if (n > 0) got[i] = store[ids[i]].data.copy_ordered(min_key, n, staged_.data() + at[i]);
      }
    });
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const leaf_id id = ids[i];
      const leaf& f = store[id];
      const auto slot = static_cast<std::uint32_t>(next_free_++);
      slot_of_[id] = slot;
      owner_[slot] = id;
      ++counts_.held;
      const std::uint64_t to = std::uint64_t{slot} * slot_entries_;
      const std::size_t n = got[i];
      if (n > 0) moves_.push_back({at[i], to, n});
      table_[id] = leaf_copy{f.low, f.high, to, static_cast<std::uint32_t>(n), 1};
      ++counts_.cached;
      mark(id);
      ++counts_.copies;
      counts_.synced_bytes += n * sizeof(entry);
    }
    drain_locked(target);
  }
  drain_locked(target);
}

void leaf_cache::drain(copy_target& target) {
  std::lock_guard<std::mutex> lock(mutex_);
  drain_locked(target);
}

void leaf_cache::drain_locked(copy_target& target) {
  if (!clear_pending_ && dirty_ids_.empty() && moves_.empty()) return;
  // A slot staged twice since the last drain (a leaf copied again, or its
  // slot given to another leaf) keeps its last copy: the target applies
  // the moves in any order, so no two may write the same slot.
  std::sort(moves_.begin(), moves_.end(), [](const copy_move& a, const copy_move& b) {
    return a.to != b.to ? a.to < b.to : a.from > b.from;  // by slot, the latest staged first
  });
  moves_.erase(std::unique(moves_.begin(), moves_.end(),
                           [](const copy_move& a, const copy_move& b) { return a.to == b.to; }),
               moves_.end());
  std::vector<leaf_copy> entries(dirty_ids_.size());
  for (std::size_t i = 0; i < dirty_ids_.size(); ++i) {
    entries[i] = table_[dirty_ids_[i]];
    dirty_[dirty_ids_[i]] = 0;
  }
  copy_changes c;
  c.clear = clear_pending_;
  c.table_size = table_.size();
  c.staged = staged_.data();
  c.staged_count = staged_.size();
  c.moves = moves_.data();
  c.move_count = moves_.size();
  c.ids = dirty_ids_.data();
  c.entries = entries.data();
  c.entry_count = entries.size();
  // Room for the slots handed out so far, growing by a quarter at least,
  // never past the slots.
  const std::size_t need = next_free_ * slot_entries_;
  if (need > reserved_entries_) {
    target.reserve(std::min(pool_entries(), std::max(need, reserved_entries_ + reserved_entries_ / 4)));
    reserved_entries_ = std::min(pool_entries(), std::max(need, reserved_entries_ + reserved_entries_ / 4));
  }
  target.apply(c);  // on failure everything stays pending: the next drain sends it again
  counts_.target_bytes = target.bytes();
  if (next_free_ == slots_) {  // full: the gets the copies answered heat their slots
    hits_.assign(table_.size(), 0);
    target.take_hits(hits_);
    for (std::size_t s = 0; s < slots_; ++s) {
      if (owner_[s] != no_leaf && owner_[s] < hits_.size()) slot_heat_[s] += hits_[owner_[s]];
    }
  }
  clear_pending_ = false;
  dirty_ids_.clear();
  staged_.clear();
  moves_.clear();
}

bool leaf_cache::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return clear_pending_ || !dirty_ids_.empty() || !moves_.empty();
}

leaf_copy leaf_cache::entry_of(leaf_id id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return id < table_.size() ? table_[id] : leaf_copy{};
}

leaf_cache_counters leaf_cache::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

void leaf_cache::verify(const leaf_store& store, copy_target& target) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<leaf_copy> held;
  std::vector<entry> pool;
  target.read(held, pool);
  auto fail = [](leaf_id id, const std::string& what) {
    throw invariant_error("leaf cache: leaf " + std::to_string(id) + ": " + what);
  };
  std::vector<entry> leaf_entries;
  for (std::size_t i = 0; i < std::max(held.size(), table_.size()); ++i) {
    const auto id = static_cast<leaf_id>(i);
    const leaf_copy mine = i < table_.size() ? table_[i] : leaf_copy{};
    const leaf_copy there = i < held.size() ? held[i] : leaf_copy{};
    if ((mine.usable != 0) != (there.usable != 0)) fail(id, "the copies' table differs from the cache's");
    if (there.usable == 0) continue;
    if (mine.low != there.low || mine.high != there.high || mine.offset != there.offset ||
        mine.count != there.count) {
      fail(id, "the copies' table differs from the cache's");
    }
    if (i >= store.leaf_count()) fail(id, "a usable copy of no leaf");
    const leaf& f = store[id];
    if (f.low > f.high) fail(id, "a usable copy of a dead leaf");
    if (there.low != f.low || there.high != f.high) fail(id, "the copy's fences differ from the leaf's");
    if (there.offset + there.count > pool.size()) fail(id, "the copy passes the pool");
    leaf_entries.resize(f.data.size());
    const std::size_t n = f.data.size() == 0 ? 0 : f.data.copy_ordered(min_key, f.data.size(), leaf_entries.data());
    if (n != there.count) {
      fail(id, "the copy holds " + std::to_string(there.count) + " entries, the leaf " + std::to_string(n));
    }
    for (std::size_t e = 0; e < n; ++e) {
      const entry& c = pool[there.offset + e];
      if (c.key != leaf_entries[e].key || c.value != leaf_entries[e].value) {
        fail(id, "entry " + std::to_string(e) + " of the copy differs from the leaf's (key " + std::to_string(c.key) +
                     " against " + std::to_string(leaf_entries[e].key) + ")");
      }
    }
  }
}

}  // namespace tandem::host
