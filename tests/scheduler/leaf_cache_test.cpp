// The leaf cache (config.gpu_cache_bytes; DESIGN, "Leaf cache") against a
// std::map model: gets-only batches answered from the copies, interleaved
// with writes that split and merge leaves, loads and compactions, with the
// cache holding everything, a few leaves (constant eviction), or nothing.
// Without a GPU the copies live in host memory (the stand-in); the *Gpu*
// cases run the same on the GPU. Then the bookkeeping alone
// (host::leaf_cache): claims, syncs and drains in the orders the pipeline
// may run them.
#include <tandem/core/leaf_copy.hpp>
#include <tandem/host/leaf_cache.hpp>
#include <tandem/scheduler/testing.hpp>
#include <tandem/tandem.hpp>

#include "support/batches.hpp"
#include "support/gpu.hpp"
#include "support/keys.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <future>
#include <new>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace tandem;
using test::key_pattern;

/// Bytes of `slots` slots of the cache.
constexpr std::size_t slot_bytes(std::size_t slots) { return slots * host::bpa::capacity * sizeof(entry); }

enum class room { all, few, none };
const char* name(room r) { return r == room::all ? "all" : r == room::few ? "few" : "none"; }

/// Gets only, from `keys` (present and absent ones).
batch gets(test::key_source& keys, std::size_t n) {
  batch b;
  for (std::size_t i = 0; i < n; ++i) b.get(keys());
  return b;
}

/// An index config whose batches are all routed (and look in the copies):
/// `bytes` of cache, writes going into the copies, on the GPU (its whole
/// share, every batch) or on the CPU (the host stand-in).
config cache_config(std::size_t bytes, bool gpu) {
  config cfg;
  cfg.direct_get_ops = 0;
  cfg.caller_runs = false;
  cfg.gpu_cache_bytes = bytes;
  cfg.gpu_cache_writes = true;
  if (gpu) {
    cfg.device = device_kind::gpu;
    cfg.min_gpu_batch = 0;
    cfg.gpu_share = 1.0;
  } else {
    cfg.device = device_kind::cpu;
  }
  return cfg;
}

struct outcome {
  std::uint64_t hits = 0;
  std::uint64_t evictions = 0;
  std::string where;
  std::uint64_t patched = 0;
};

outcome run(room r, key_pattern pattern, std::uint64_t seed, bool gpu) {
  SCOPED_TRACE(::testing::Message() << "room " << name(r) << " pattern " << test::name(pattern) << " seed " << seed);
  config cfg = cache_config(r == room::all ? slot_bytes(4096) : r == room::few ? slot_bytes(3) : 0, gpu);
  cfg.threads = 3;
  tandem::index idx(cfg);
  test::index_model model;
  test::key_source keys(pattern, 40'000, seed);
  auto& rng = keys.rng();
  model.load(idx, keys.pairs(20'000));
  test::batch_mix writes;  // writes and range ops, fewer gets
  writes.get = 5;
  writes.put = 30;
  writes.insert = 20;
  writes.erase = 30;
  test::batch_mix points;  // point ops alone, a fifth writes: routed from the copies, puts written into them
  points.get = 80;
  points.put = 14;
  points.insert = 3;
  points.erase = 3;
  points.lower_bound = points.scan = points.count = 0;
  test::batch_mix reads;  // gets and lower_bounds: answered from the copies too
  reads.get = reads.lower_bound = 50;
  reads.put = reads.insert = reads.erase = reads.scan = reads.count = 0;
  for (std::size_t b = 0; b < 60; ++b) {
    const std::string where = "batch " + std::to_string(b);
    const std::size_t kind = rng() % 10;
    batch bt;
    if (kind < 4) {
      bt = gets(keys, 1 + rng() % 20'000);
    } else if (kind < 5) {
      bt = test::random_batch(keys, 1 + rng() % 20'000, reads);
    } else if (kind < 8) {
      bt = test::random_batch(keys, 1 + rng() % 20'000, points);
    } else {
      bt = test::random_batch(keys, 1 + rng() % 20'000, writes);
    }
    const batch_result res = idx.execute(bt);
    if (model.check(bt, res, where) != 0) return {0, 0, where};
    if (b % 20 == 7) idx.compact();
    if (b % 25 == 11) {  // a load replaces the contents
      model.data.clear();
      model.load(idx, keys.pairs(1 + rng() % 5'000));
    }
    if (b % 10 == 0) {
      EXPECT_NO_THROW(idx.verify()) << where;
    }
  }
  // Gets alone for a while: copies are made again and answer (on the GPU,
  // past the batches sent the usual way after ones that mostly missed).
  for (std::size_t b = 0; b < 20; ++b) {
    const batch bt = gets(keys, 5'000);
    if (model.check(bt, idx.execute(bt), "gets alone " + std::to_string(b)) != 0) return {0, 0, "gets alone"};
  }
  // Edge keys: present, then gone, then back.
  for (const key_type k : {min_key, max_key}) {
    batch w;
    w.put(k, 77);
    model.check(w, idx.execute(w), "put edge");
    const batch g = gets(keys, 5'000).get(k);
    model.check(g, idx.execute(g), "get edge");
    batch e;
    e.erase(k);
    model.check(e, idx.execute(e), "erase edge");
    const batch g2 = batch(g);
    model.check(g2, idx.execute(g2), "get erased edge");
  }
  EXPECT_NO_THROW(idx.verify());
  const stats s = idx.stats();
  EXPECT_EQ(s.cache, r == room::none ? "off" : gpu ? "gpu" : "host");
  return {s.cache_hits, s.cache_evictions, {}, s.cache_patched};
}

class LeafCacheDifferential : public ::testing::TestWithParam<std::tuple<room, key_pattern>> {};

/// On the GPU, a few slots may see no hit: a batch under 75% hits sends
/// the next ones the usual way.
void expect_cache_used(room r, key_pattern pattern, const outcome& o, bool gpu) {
  if (r == room::none) {
    EXPECT_EQ(o.hits, 0u);
    return;
  }
  if (gpu && r == room::few) return;
  EXPECT_GT(o.hits, 0u) << "no get was answered from the copies";
  // (Edges: every batch erases in the one leaf. On the GPU, batches with
  // writes look in the copies only while they held 75% of the lookups:
  // GpuWritesIntoCopies covers them there.)
  if (!gpu && r == room::all && pattern != key_pattern::edges) {
    EXPECT_GT(o.patched, 0u) << "no batch's puts were written into the copies";
  }
  if (r == room::few && pattern != key_pattern::edges) {  // the edge keys fill one leaf
    EXPECT_GT(o.evictions, 0u) << "three slots and no eviction";
  }
}

TEST_P(LeafCacheDifferential, MatchesModel) {
  const auto [r, pattern] = GetParam();
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const outcome o = run(r, pattern, seed, false);
    ASSERT_TRUE(o.where.empty()) << "first wrong answer in " << o.where;
    expect_cache_used(r, pattern, o, false);
  }
}

TEST_P(LeafCacheDifferential, GpuMatchesModel) {
  TANDEM_REQUIRE_GPU();
  const auto [r, pattern] = GetParam();
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const outcome o = run(r, pattern, seed, true);
    ASSERT_TRUE(o.where.empty()) << "first wrong answer in " << o.where;
    expect_cache_used(r, pattern, o, true);
  }
}

INSTANTIATE_TEST_SUITE_P(Rooms, LeafCacheDifferential,
                         ::testing::Combine(::testing::Values(room::all, room::few, room::none),
                                            ::testing::Values(key_pattern::uniform, key_pattern::clustered,
                                                              key_pattern::edges)),
                         [](const auto& p) {
                           return std::string(name(std::get<0>(p.param))) + "_" + test::name(std::get<1>(p.param));
                         });

// Everything is copied at load when it fits, and a batch whose gets all
// hit never reaches the host leaves (no leaf lines read).
TEST(LeafCache, LoadCopiesEverythingThatFits) {
  tandem::index idx(cache_config(slot_bytes(1000), false));
  std::vector<entry> pairs;
  for (key_type k = 0; k < 50'000; ++k) pairs.push_back({k * 7, k});
  idx.load(pairs);
  const stats before = idx.stats();
  EXPECT_EQ(before.cached_leaves, before.leaves);
  batch b;
  for (key_type k = 0; k < 20'000; ++k) b.get(k * 5);
  const batch_result r = idx.execute(b);
  for (std::size_t i = 0; i < b.size(); ++i) {
    const key_type k = b.keys()[i];
    ASSERT_EQ(r.found(i), k % 7 == 0) << k;
    if (k % 7 == 0) {
      ASSERT_EQ(r.value(i), k / 7);
    }
  }
  const stats s = idx.stats();
  EXPECT_EQ(s.cache_last_lookups, b.size());
  EXPECT_EQ(s.cache_last_hits, b.size());
  EXPECT_EQ(s.leaf_line_ops, before.leaf_line_ops) << "an all-hit batch read host leaves";
}

// A batch of gets and puts is answered from the copies and writes its puts
// into them: gets before a put of their key see the old value, gets after
// it the new one (from the host), and the next batch's gets all hit the
// copies, with the batch's last values. An erase in a leaf claims it.
void writes_into_copies(bool gpu) {
  tandem::index idx(cache_config(slot_bytes(1000), gpu));
  test::index_model model;
  std::vector<entry> pairs;
  for (key_type k = 0; k < 50'000; ++k) pairs.push_back({k * 7, k});
  pairs.push_back({max_key, 1});
  model.load(idx, pairs);
  batch b;
  for (key_type k = 0; k < 50'000; k += 3) {  // a quarter of the ops or fewer are writes (as the GPU takes them)
    b.get(k * 7).put(k * 7, k + 1).get(k * 7).put(k * 7, k + 2).get(k * 7 + 1).get(k * 7).get(k * 7 + 7);
    b.get(k * 7 + 14).get(k * 7 + 2);
  }
  b.get(max_key).put(max_key, 5).get(0).put(0, 9).get(max_key);
  const stats before = idx.stats();
  ASSERT_EQ(model.check(b, idx.execute(b), "gets and puts"), 0u);
  const stats after = idx.stats();
  EXPECT_GT(after.cache_patched, before.cache_patched);
  EXPECT_EQ(after.cache_claims, before.cache_claims) << "puts of present keys claimed leaves";
  EXPECT_GT(after.cache_last_hits, 0u);
  EXPECT_LT(after.cache_last_hits, after.cache_last_lookups) << "gets after a put of their key came from a copy";
  batch g;
  for (key_type k = 0; k < 50'000; ++k) g.get(k * 7);
  g.get(max_key);
  ASSERT_EQ(model.check(g, idx.execute(g), "gets after"), 0u);
  EXPECT_EQ(idx.stats().cache_last_hits, g.size()) << "a copy the puts were written into was not current";
  batch e;
  e.put(7, 3).erase(14).get(7).get(14);
  ASSERT_EQ(model.check(e, idx.execute(e), "put and erase"), 0u);
  EXPECT_GT(idx.stats().cache_claims, after.cache_claims);
  ASSERT_EQ(model.check(g, idx.execute(g), "gets after the erase"), 0u);
  EXPECT_NO_THROW(idx.verify());
}

// Lower_bounds of a batch without writes are answered from the copies
// too, at the edges as well: lower_bound(0), and past the last key of all
// (none, key 0). (One whose answer lies in a later leaf, past a gap that
// erases left, goes to the host: the differential tests cover it.) Then a
// batch that the copies answer whole (no row left for the host).
void lower_bounds_from_copies(bool gpu) {
  tandem::index idx(cache_config(slot_bytes(1000), gpu));
  test::index_model model;
  std::vector<entry> pairs;
  for (key_type k = 1; k < 50'000; ++k) pairs.push_back({k * 7, k});
  model.load(idx, pairs);
  batch b;
  for (key_type k = 0; k < 50'000; ++k) b.lower_bound(k * 7 + k % 3).get(k * 7 + 1);
  b.lower_bound(0).lower_bound(max_key).lower_bound(49'999 * 7 + 1).get(max_key);
  ASSERT_EQ(model.check(b, idx.execute(b), "lower_bounds and gets"), 0u);
  const stats s = idx.stats();
  EXPECT_EQ(s.cache_last_lookups, b.size());
  EXPECT_EQ(s.cache_last_hits, s.cache_last_lookups) << "a lower_bound or get was not answered there";
  batch whole;
  for (key_type k = 1; k < 40'000; k += 2) whole.lower_bound(k * 7).get(k * 7 + 1).get(k * 7);
  ASSERT_EQ(model.check(whole, idx.execute(whole), "answered whole"), 0u);
  EXPECT_EQ(idx.stats().cache_last_hits, whole.size());
}

TEST(LeafCache, LowerBoundsFromCopies) { lower_bounds_from_copies(false); }

TEST(LeafCache, GpuLowerBoundsFromCopies) {
  TANDEM_REQUIRE_GPU();
  lower_bounds_from_copies(true);
}

// On the GPU, batches of gets that would be answered directly on the host
// (config.direct_get_ops) are answered from the copies once they reach
// min_gpu_batch; smaller ones stay direct.
TEST(LeafCache, GpuBatchesOfGetsBelowDirectGetOpsUseTheCopies) {
  TANDEM_REQUIRE_GPU();
  config cfg = cache_config(slot_bytes(4096), true);
  cfg.direct_get_ops = config{}.direct_get_ops;
  cfg.min_gpu_batch = 2048;
  tandem::index idx(cfg);
  test::index_model model;
  std::vector<entry> pairs;
  for (key_type k = 0; k < (1u << 20); ++k) pairs.push_back({k * 3, k});
  model.load(idx, pairs);
  ASSERT_GE(4 * idx.stats().leaves, 4096u) << "batches of 4096 gets would not be direct";
  test::key_source keys(key_pattern::narrow, 1u << 21, 7);  // keys below 2^22: present ones and absent
  const stats before = idx.stats();
  batch big = gets(keys, 4096);
  ASSERT_EQ(model.check(big, idx.execute(big), "4096 gets"), 0u);
  const stats mid = idx.stats();
  EXPECT_EQ(mid.cache_lookups - before.cache_lookups, big.size()) << "the batch was answered directly";
  EXPECT_EQ(mid.cache_last_hits, big.size());
  batch small = gets(keys, 1024);
  ASSERT_EQ(model.check(small, idx.execute(small), "1024 gets"), 0u);
  EXPECT_EQ(idx.stats().cache_lookups, mid.cache_lookups) << "a batch below min_gpu_batch looked in the copies";
}

// An op of an unknown type whose byte looks like a write that a copy took
// (copy_patched_bit on a put, insert or erase) is answered invalid and
// changes nothing, in a batch with writes beside it, cache on.
TEST(LeafCache, UnknownTypesWithThePatchedBitChangeNothing) {
  tandem::index idx(cache_config(slot_bytes(1000), false));
  test::index_model model;
  std::vector<entry> pairs;
  for (key_type k = 1; k < 5'000; ++k) pairs.push_back({k * 7, k});
  model.load(idx, pairs);
  batch b;
  for (const op_type t : {op_type::get, op_type::put, op_type::insert, op_type::erase}) {
    op o;
    o.type = static_cast<op_type>(static_cast<std::uint8_t>(t) | copy_patched_bit);
    o.key = 1;  // absent: an insert or put would add it
    o.arg = 2;
    b.add(o);
    o.key = 14;  // present: an erase would take it
    b.add(o);
  }
  b.insert(21, 5).get(0).get(1).get(14);
  ASSERT_EQ(model.check(b, idx.execute(b), "unknown types"), 0u);
  batch g;
  g.get(1).get(14).lower_bound(0).count(0, max_key);
  ASSERT_EQ(model.check(g, idx.execute(g), "after"), 0u);
  EXPECT_EQ(idx.size(), pairs.size());
  EXPECT_NO_THROW(idx.verify());
}

TEST(LeafCache, WritesIntoCopies) { writes_into_copies(false); }

TEST(LeafCache, GpuWritesIntoCopies) {
  TANDEM_REQUIRE_GPU();
  writes_into_copies(true);
}

// A batch whose puts went into the copies and that then fails (its leaf
// phase's memory, for every n in turn) leaves no trace: the batch routed
// from the copies behind it, and every later one, sees the index without
// its puts.
TEST(LeafCache, FailedBatchLeavesNoPutsInTheCopies) {
  struct disarm {
    ~disarm() { tandem::detail::index_access::disarm_allocation_fault(); }
  } guard;
  std::vector<entry> pairs;
  for (key_type k = 0; k < 20'000; ++k) pairs.push_back({k * 7, k});
  batch b;
  batch g;
  for (key_type k = 0; k < 20'000; k += 2) {
    b.get(k * 7).put(k * 7, k + 100);
    g.get(k * 7);
  }
  std::size_t failed = 0;
  for (std::uint64_t n = 1; n <= 200; ++n) {
    config cfg = cache_config(slot_bytes(1000), false);
    cfg.threads = 2;
    tandem::index idx(cfg);
    test::index_model model;
    model.load(idx, pairs);
    test::index_model after = model;
    tandem::detail::index_access::fail_nth_allocation(n);
    std::future<batch_result> fb = idx.submit(b);
    std::future<batch_result> fg = idx.submit(g);
    bool b_failed = false;
    batch_result rb;
    try {
      rb = fb.get();
    } catch (const std::bad_alloc&) {
      b_failed = true;
    }
    const bool fired = tandem::detail::index_access::disarm_allocation_fault() == 0;
    const std::string where = "n = " + std::to_string(n);
    if (!b_failed) {
      ASSERT_EQ(after.check(b, rb, where), 0u);
    }
    test::index_model& now = b_failed ? model : after;
    try {
      const batch_result rg = fg.get();
      ASSERT_EQ(now.check(g, rg, where + ", the batch behind"), 0u);
    } catch (const std::bad_alloc&) {  // the fault hit the batch behind instead
    }
    ASSERT_EQ(now.check(g, idx.execute(g), where + ", a later batch"), 0u);
    EXPECT_NO_THROW(idx.verify()) << where;
    failed += b_failed ? 1 : 0;
    if (!fired) break;
  }
  EXPECT_GT(failed, 0u) << "no allocation of the batch failed";
}

// ---- the bookkeeping alone -------------------------------------------------

/// A store of `keys` keys 0, 10, 20, ... (values key / 10), leaves half full.
host::leaf_store store_of(std::size_t keys) {
  std::vector<key_type> k(keys);
  std::vector<value_type> v(keys);
  for (std::size_t i = 0; i < keys; ++i) {
    k[i] = i * 10;
    v[i] = i;
  }
  return host::leaf_store::bulk_load(k.data(), v.data(), keys, 0.5);
}

leaf_id second_leaf(const host::leaf_store& s) { return s[s.head()].right; }

/// A store of `keys` keys (store_of), a cache of `slots` slots over it and
/// the host copies it drains into.
struct book {
  host::leaf_store store;
  host::leaf_cache cache;
  host::host_copies copies;
  book(std::size_t keys, std::size_t slots) : store(store_of(keys)), cache(slot_bytes(slots), host::bpa::capacity) {}
  /// `count` gets of leaf `id` missed.
  void miss(leaf_id id, std::uint32_t count) { cache.note_misses(&id, &count, 1); }
  /// The sync after batch `sequence`, without a byte bound to speak of.
  std::size_t sync(std::uint64_t sequence) { return cache.sync(store, sequence, std::size_t{1} << 30); }
  /// A leaf (the second) copied by a sync after batch 1 and sent to the
  /// copies. @return its id
  leaf_id copied_leaf() {
    const leaf_id id = second_leaf(store);
    miss(id, 1);
    sync(1);
    cache.drain(copies);
    return id;
  }
  /// The copies' answer for leaf `id`'s lowest key.
  copy_answer at_low(leaf_id id) {
    value_type v = 0;
    return copies.get(id, store[id].low, &v);
  }
};

TEST(LeafCacheBook, SyncCopiesMissedLeaves) {
  book t(5'000, 8);
  const leaf_id id = second_leaf(t.store);
  t.miss(id, 5);
  EXPECT_GT(t.sync(1), 0u);
  t.cache.drain(t.copies);
  value_type v = 0;
  const key_type k = t.store[id].low;
  EXPECT_EQ(t.copies.get(id, k, &v), copy_answer::found);
  EXPECT_EQ(v, k / 10);
  EXPECT_EQ(t.copies.get(id, k + 1, &v), copy_answer::absent);
  EXPECT_EQ(t.copies.get(t.store.head(), 0, &v), copy_answer::none) << "a leaf never copied";
  EXPECT_EQ(t.copies.get(id, t.store[id].high + 1, &v), copy_answer::none) << "past the fences";
}

TEST(LeafCacheBook, ClaimMakesCopyUnusableAtNextDrain) {
  book t(5'000, 8);
  const leaf_id id = t.copied_leaf();
  t.cache.claim(&id, 1, 2);
  EXPECT_TRUE(t.cache.pending());
  t.cache.drain(t.copies);
  EXPECT_EQ(t.at_low(id), copy_answer::none);
  EXPECT_EQ(t.cache.counters().claims, 1u);
}

// verify reads the copies back: a copy that no longer holds its leaf (a
// write that claimed nothing: a skipped claim) is named; claimed, it goes,
// and the rest pass.
TEST(LeafCacheBook, VerifyNamesACopyThatDiffersFromItsLeaf) {
  book t(5'000, 8);
  const leaf_id id = t.copied_leaf();
  ASSERT_EQ(t.at_low(id), copy_answer::found);
  EXPECT_NO_THROW(t.cache.verify(t.store, t.copies));
  value_type old = 0;
  t.store[id].data.upsert(t.store[id].low, 12345, &old);
  EXPECT_THROW(t.cache.verify(t.store, t.copies), invariant_error) << "a changed value";
  t.store[id].data.upsert(t.store[id].low, old);
  EXPECT_NO_THROW(t.cache.verify(t.store, t.copies));
  t.store[id].data.erase(t.store[id].low);
  EXPECT_THROW(t.cache.verify(t.store, t.copies), invariant_error) << "an erased key";
  t.cache.claim(&id, 1, 2);
  t.cache.drain(t.copies);
  EXPECT_NO_THROW(t.cache.verify(t.store, t.copies));
}

TEST(LeafCacheBook, SyncOfAnEarlierBatchDoesNotRemakeALaterClaim) {
  book t(5'000, 8);
  const leaf_id id = second_leaf(t.store);
  // Batch 3 was routed (and claimed the leaf) before batch 2's sync ran.
  t.cache.claim(&id, 1, 3);
  t.miss(id, 1);
  EXPECT_EQ(t.sync(2), 0u);
  t.cache.drain(t.copies);
  EXPECT_EQ(t.at_low(id), copy_answer::none);
}

TEST(LeafCacheBook, PatchedCopyStaysUsableAndNoEarlierSyncRemakesIt) {
  book t(5'000, 8);
  const leaf_id id = second_leaf(t.store);
  t.miss(id, 1);
  t.sync(1);
  t.cache.drain(t.copies);  // the drain before batch 3's route, which wrote its puts into the copy
  t.cache.patched(&id, 1, 3);
  EXPECT_FALSE(t.cache.pending());
  EXPECT_EQ(t.at_low(id), copy_answer::found);
  EXPECT_EQ(t.cache.counters().patched, 1u);
  t.cache.claim(&id, 1, 4);  // then batch 4 erases there; batch 2's sync comes late
  t.miss(id, 1);
  EXPECT_EQ(t.sync(2), 0u);
}

TEST(LeafCacheBook, SlotTakenBetweenARoutesDrainAndItsPatchesStaysTaken) {
  book t(5'000, 1);
  const leaf_id id = second_leaf(t.store);
  const leaf_id hot = t.store[id].right;
  t.miss(id, 1);
  t.sync(1);
  t.cache.drain(t.copies);  // batch 3's route reads the copy and writes its puts into it
  // Batch 2's sync gives the one slot to a hotter leaf before batch 3's
  // claims call the leaf patched: the slot is no longer its copy.
  t.miss(hot, 5);
  EXPECT_GT(t.sync(2), 0u);
  t.cache.patched(&id, 1, 3);
  t.cache.drain(t.copies);
  EXPECT_EQ(t.cache.counters().evictions, 1u);
  EXPECT_EQ(t.at_low(id), copy_answer::none);
  EXPECT_EQ(t.at_low(hot), copy_answer::found);
}

TEST(LeafCacheBook, ClaimBetweenSyncAndDrainWins) {
  book t(5'000, 8);
  const leaf_id id = second_leaf(t.store);
  t.miss(id, 1);
  t.sync(1);
  t.cache.claim(&id, 1, 2);  // the next batch, routed before the drain
  t.cache.drain(t.copies);
  EXPECT_EQ(t.at_low(id), copy_answer::none);
}

TEST(LeafCacheBook, HotterLeavesTakeSlotsFromColderOnes) {
  book t(20'000, 2);
  std::vector<leaf_id> ids;
  for (leaf_id id = t.store.head(); id != no_leaf; id = t.store[id].right) ids.push_back(id);
  ASSERT_GE(ids.size(), 4u);
  t.miss(ids[0], 1);
  t.miss(ids[1], 1);
  t.sync(1);
  t.cache.drain(t.copies);
  EXPECT_EQ(t.cache.counters().cached, 2u);
  t.miss(ids[2], 1000);
  t.sync(2);
  t.cache.drain(t.copies);
  const host::leaf_cache_counters c = t.cache.counters();
  EXPECT_EQ(c.cached, 2u);
  EXPECT_EQ(c.evictions, 1u);
  EXPECT_NE(t.at_low(ids[2]), copy_answer::none);
  EXPECT_EQ(t.at_low(ids[0]) == copy_answer::none || t.at_low(ids[1]) == copy_answer::none, true);
}

// A slot given to a hotter leaf before the first leaf's copy was sent:
// the drain sends the second copy only (targets apply moves in any order).
TEST(LeafCacheBook, SlotStagedTwiceBeforeADrainKeepsTheLastCopy) {
  book t(20'000, 1);
  const leaf_id a = t.store.head();
  const leaf_id b = second_leaf(t.store);
  t.miss(a, 10);
  t.sync(1);
  t.miss(b, 1000);
  t.sync(2);
  t.cache.drain(t.copies);
  EXPECT_EQ(t.cache.counters().evictions, 1u);
  value_type v = 0;
  for (key_type k = t.store[b].low; k <= t.store[b].low + 200; k += 10) {
    ASSERT_EQ(t.copies.get(b, k, &v), copy_answer::found) << k;
    ASSERT_EQ(v, k / 10);
  }
  EXPECT_EQ(t.at_low(a), copy_answer::none);
}

TEST(LeafCacheBook, ClearDropsEverything) {
  book t(5'000, 100);
  t.cache.fill(t.store, std::size_t{1} << 16, t.copies);
  EXPECT_EQ(t.cache.counters().cached, t.store.live_leaves());
  value_type v = 0;
  EXPECT_EQ(t.copies.get(t.store.head(), 0, &v), copy_answer::found);
  t.cache.clear();
  t.cache.drain(t.copies);
  EXPECT_EQ(t.copies.get(t.store.head(), 0, &v), copy_answer::none);
  EXPECT_EQ(t.cache.counters().cached, 0u);
}

}  // namespace
