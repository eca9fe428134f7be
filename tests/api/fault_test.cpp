// Memory exhaustion (index.hpp, "Failure"): a batch that cannot get its
// memory fails as a whole and leaves the index exactly as it was. For every
// n, the n-th counted allocation of a mixed batch that splits leaves is made
// to fail (index_access::fail_nth_allocation): the future must throw
// std::bad_alloc, verify() must pass and the contents must equal the state
// before the batch; n runs on until the batch makes fewer than n counted
// allocations, and that run must give the model's answers. A failure in the
// work after the writes (the inner sync) must not fail the batch. And the
// scan output cap (config.max_batch_output_bytes): scans past it get status
// output_limit, in batch order, and everything else runs.
// Tests named *Gpu* need a GPU (ctest label gpu) and skip without one.
#include <tandem/host/bpa.hpp>
#include <tandem/scheduler/testing.hpp>
#include <tandem/tandem.hpp>

#include "support/contents.hpp"
#include "support/gpu.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace tandem;
using tandem::detail::index_access;
using test::as_entries;
using test::contents;

/// Disarms the allocation fault when a test ends, whatever happens in it.
struct disarm_at_exit {
  disarm_at_exit() = default;
  disarm_at_exit(const disarm_at_exit&) = delete;
  disarm_at_exit& operator=(const disarm_at_exit&) = delete;
  ~disarm_at_exit() { index_access::disarm_allocation_fault(); }
};

/// The loaded pairs: `n` keys 1000 apart, the last one UINT64_MAX.
std::vector<entry> loaded_pairs(std::size_t n) {
  std::vector<entry> pairs;
  for (std::size_t i = 0; i + 1 < n; ++i) pairs.push_back({i * 1000, i + 1});
  pairs.push_back({max_key, 2});
  return pairs;
}

/// A mixed batch over loaded_pairs(keys): inserts of new keys between the
/// loaded ones (enough to split leaves loaded full), puts, erases, gets,
/// lower_bounds, counts and scans (ordered and unordered, some over keys
/// the batch writes).
batch mixed_batch(std::size_t keys, std::size_t ops, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto any_key = [&] { return (rng() % keys) * 1000 + (rng() % 4 == 0 ? 0 : rng() % 1000); };
  batch b;
  for (std::size_t i = 0; i < ops; ++i) {
    const unsigned d = static_cast<unsigned>(rng() % 100);
    const key_type k = any_key();
    if (d < 45) {
      b.insert(k | 1, rng());  // odd: new keys, between the loaded ones
    } else if (d < 60) {
      b.put(k, rng());
    } else if (d < 70) {
      b.erase(k);
    } else if (d < 80) {
      b.get(k);
    } else if (d < 85) {
      b.lower_bound(k);
    } else if (d < 90) {
      b.count(k, k + rng() % 200'000);
    } else {
      b.scan(k, k + rng() % 100'000, 1 + rng() % 300, rng() % 3 == 0 ? scan_order::unordered : scan_order::ordered);
    }
  }
  return b;
}

/// Index config of the fault tests: leaves loaded full, so that inserts
/// split them at once.
config fault_config(device_kind device) {
  config c;
  c.device = device;
  c.leaf_fill = 1.0;
  c.threads = 2;
  if (device == device_kind::gpu) {
    c.min_gpu_batch = 1;
    c.gpu_share = 1.0;
  }
  return c;
}

/// What happened to the n-th counted allocation of one armed batch.
struct armed_run {
  bool failed = false;  // the future threw std::bad_alloc
  bool fired = false;   // the n-th counted allocation was reached (and failed)
};

/// Runs `b` with the n-th counted allocation failing, then checks the index:
/// on failure, exactly `before`; on success, the model's answers and state
/// (the model is advanced). Either way verify() passes.
armed_run run_armed(tandem::index& idx, const batch& b, std::uint64_t n, test::index_model& model) {
  armed_run out;
  const std::vector<entry> before = as_entries(model.data);
  index_access::fail_nth_allocation(n);
  std::future<batch_result> f = idx.submit(b);
  batch_result r;
  try {
    r = f.get();
  } catch (const std::bad_alloc&) {
    out.failed = true;
  }
  out.fired = index_access::disarm_allocation_fault() == 0;
  const std::string where = "n = " + std::to_string(n);
  if (out.failed) {
    EXPECT_TRUE(out.fired) << where << ": failed without the armed allocation";
  } else {
    EXPECT_EQ(model.check(b, r, where), 0u);
  }
  EXPECT_NO_THROW(idx.verify()) << where;
  EXPECT_EQ(idx.size(), model.data.size()) << where;
  const std::vector<entry> now = contents(idx);
  if (out.failed) {
    EXPECT_TRUE(now == before) << where << ": a failed batch changed the index";
  } else {
    EXPECT_TRUE(now == as_entries(model.data)) << where << ": contents differ from the model";
  }
  return out;
}

struct sweep_counts {
  std::uint64_t failures = 0;    // batches that failed, index untouched
  std::uint64_t deferred = 0;    // faults after the writes: the batch still happened
  std::uint64_t deferred_n = 0;  // the last of those
  std::uint64_t last_n = 0;      // the first n the batch did not reach
};

/// For n = 1, 2, ... on a fresh index each time (so every allocation site,
/// cold, is reached): the batch fails with the index untouched, or (a fault
/// after its writes) succeeds; the sweep ends at the first n the batch does
/// not reach, where it must give the model's answers.
sweep_counts sweep_fresh(const config& cfg, std::size_t keys, const batch& b) {
  const std::vector<entry> pairs = loaded_pairs(keys);
  sweep_counts c;
  for (std::uint64_t n = 1; n <= 400; ++n) {
    tandem::index idx(cfg);
    idx.load(pairs);
    test::index_model model;
    for (const entry& e : pairs) model.data[e.key] = e.value;
    const armed_run run = run_armed(idx, b, n, model);
    if (::testing::Test::HasFailure()) return c;
    if (!run.fired) {
      c.last_n = n;
      return c;
    }
    if (run.failed) {
      ++c.failures;
    } else {
      ++c.deferred;
      c.deferred_n = n;
    }
  }
  ADD_FAILURE() << "the batch still reached its 400th counted allocation";
  return c;
}

/// The same, on one index that lives through every failed attempt (pools
/// warm up from attempt to attempt; the index must stay usable).
sweep_counts sweep_same_index(const config& cfg, std::size_t keys, const batch& b) {
  const std::vector<entry> pairs = loaded_pairs(keys);
  tandem::index idx(cfg);
  idx.load(pairs);
  test::index_model model;
  for (const entry& e : pairs) model.data[e.key] = e.value;
  sweep_counts c;
  for (std::uint64_t n = 1; n <= 400; ++n) {
    const armed_run run = run_armed(idx, b, n, model);
    if (::testing::Test::HasFailure()) return c;
    if (!run.fired) {
      c.last_n = n;
      return c;
    }
    if (!run.failed) {  // it happened: start over from its state with a new batch
      ++c.deferred;
      return c;
    }
    ++c.failures;
  }
  ADD_FAILURE() << "the batch still reached its 400th counted allocation";
  return c;
}

void expect_splits(const config& cfg, std::size_t keys, const batch& b) {
  tandem::index idx(cfg);
  idx.load(loaded_pairs(keys));
  const std::uint64_t before = idx.stats().splits;
  (void)idx.execute(b);
  EXPECT_GT(idx.stats().splits, before) << "the batch is meant to split leaves";
}

/// 64 leaves loaded full: the leaf store's first segment of room is used
/// up, so the first split of a batch needs room allocated for new leaves
/// (the allocation that must happen before any leaf changes).
constexpr std::size_t fault_keys = 64 * host::bpa::capacity;

TEST(Fault, EveryAllocationOfAMixedBatchWithSplitsFailsCleanly) {
  const disarm_at_exit guard;
  const config cfg = fault_config(device_kind::cpu);
  const batch b = mixed_batch(fault_keys, 3000, 1);
  expect_splits(cfg, fault_keys, b);
  const sweep_counts c = sweep_fresh(cfg, fault_keys, b);
  std::cout << "fresh index: " << c.failures << " failing allocations, " << c.deferred
            << " after the writes, done at n = " << c.last_n << "\n";
  EXPECT_GE(c.failures, 10u);
  EXPECT_EQ(c.deferred, 1u) << "the inner sync after the splits";
}

/// Erases of most loaded keys (every leaf but a few emptied or left nearly
/// empty: merges) beside inserts, gets and scans.
batch erasing_batch(std::size_t keys, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  batch b;
  for (std::size_t i = 0; i < keys; ++i) {
    if (i % 97 != 0) b.erase(i * 1000);
    if (i % 50 == 0) b.insert(i * 1000 + 1, rng());
    if (i % 40 == 0) b.get(rng() % keys * 1000);
    if (i % 300 == 0) b.scan(i * 1000, i * 1000 + 40'000, 20);
  }
  return b;
}

TEST(Fault, EveryAllocationOfABatchThatMergesLeavesFailsCleanly) {
  const disarm_at_exit guard;
  const config cfg = fault_config(device_kind::cpu);
  const batch b = erasing_batch(fault_keys, 4);
  const sweep_counts c = sweep_fresh(cfg, fault_keys, b);
  std::cout << "fresh index: " << c.failures << " failing allocations, " << c.deferred
            << " after the writes (merge plan, leaf table), done at n = " << c.last_n << "\n";
  EXPECT_GE(c.failures, 5u);
  EXPECT_GE(c.deferred, 1u) << "the merges' plan and the inner sync after the writes";
  // Unarmed, the batch merges.
  tandem::index idx(cfg);
  idx.load(loaded_pairs(fault_keys));
  const std::uint64_t leaves = idx.stats().leaves;
  idx.execute(b);
  EXPECT_GT(idx.stats().merges, 0u);
  EXPECT_LT(idx.stats().leaves, leaves / 4);
}

TEST(Fault, FailedCompactionChangesNothing) {
  const disarm_at_exit guard;
  const config cfg = fault_config(device_kind::cpu);
  tandem::index idx(cfg);
  const std::vector<entry> pairs = loaded_pairs(fault_keys);
  idx.load(pairs);
  test::index_model model;
  for (const entry& e : pairs) model.data[e.key] = e.value;
  const batch b = erasing_batch(fault_keys, 5);
  ASSERT_EQ(model.check(b, idx.execute(b)), 0u);
  ASSERT_GT(idx.stats().dead_leaves, 0u);
  const std::vector<entry> before = contents(idx);
  std::uint64_t failures = 0;
  for (std::uint64_t n = 1; n <= 100; ++n) {
    index_access::fail_nth_allocation(n);
    bool failed = false;
    try {
      idx.compact();
    } catch (const std::bad_alloc&) {
      failed = true;
    }
    const bool fired = index_access::disarm_allocation_fault() == 0;
    EXPECT_NO_THROW(idx.verify()) << "n = " << n;
    EXPECT_TRUE(contents(idx) == before) << "n = " << n;
    if (!failed) break;
    EXPECT_TRUE(fired);
    EXPECT_GT(idx.stats().dead_leaves, 0u) << "a failed compaction keeps its dead leaves";
    ++failures;
  }
  EXPECT_GE(failures, 1u);
  EXPECT_EQ(idx.stats().dead_leaves, 0u);
  const batch again = mixed_batch(fault_keys, 3000, 6);
  EXPECT_EQ(model.check(again, idx.execute(again)), 0u);
  EXPECT_NO_THROW(idx.verify());
}

TEST(Fault, SmallBatchOnTheDispatcherFailsCleanly) {
  const disarm_at_exit guard;
  const config cfg = fault_config(device_kind::cpu);
  ASSERT_GE(cfg.small_batch_ops, 40u);
  const batch b = mixed_batch(fault_keys, 40, 2);  // runs on the dispatcher thread alone
  expect_splits(cfg, fault_keys, b);
  const sweep_counts c = sweep_fresh(cfg, fault_keys, b);
  EXPECT_GE(c.failures, 5u);
}

TEST(Fault, OneIndexSurvivesEveryFailedAttempt) {
  const disarm_at_exit guard;
  const config cfg = fault_config(device_kind::cpu);
  const batch b = mixed_batch(fault_keys, 3000, 3);
  const sweep_counts c = sweep_same_index(cfg, fault_keys, b);
  EXPECT_GE(c.failures, 3u);
}

TEST(Fault, WarmIndexFailsCleanlyWhereItStillAllocates) {
  // After batches of the same shape the pools are warm: what is left to
  // allocate is room for new leaves (the batch splits) and growth.
  const disarm_at_exit guard;
  const config cfg = fault_config(device_kind::cpu);
  const std::vector<entry> pairs = loaded_pairs(fault_keys);
  tandem::index idx(cfg);
  idx.load(pairs);
  test::index_model model;
  for (const entry& e : pairs) model.data[e.key] = e.value;
  for (std::uint64_t s = 10; s < 13; ++s) {
    const batch warm = mixed_batch(fault_keys, 3000, s);
    ASSERT_EQ(model.check(warm, idx.execute(warm)), 0u);
  }
  // Inserts into leaves filled by the warm-up batches: more splits.
  const batch b = mixed_batch(fault_keys, 6000, 20);
  std::uint64_t failures = 0;
  for (std::uint64_t n = 1; n <= 400; ++n) {
    const armed_run run = run_armed(idx, b, n, model);
    if (HasFailure() || !run.fired || !run.failed) break;
    ++failures;
  }
  EXPECT_GE(failures, 1u);
}

TEST(Fault, FailedInnerSyncIsRetriedAndRoutingStaysCorrect) {
  // Make the inner sync after a batch's splits fail: the batch still
  // happens, routing goes on over the older layout, and the next batch
  // (or verify) rebuilds it.
  const disarm_at_exit guard;
  const config cfg = fault_config(device_kind::cpu);
  const batch b = mixed_batch(fault_keys, 3000, 4);
  const sweep_counts c = sweep_fresh(cfg, fault_keys, b);
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(c.deferred, 1u);
  const std::uint64_t sync_n = c.deferred_n;  // the inner sync's leaf table

  const std::vector<entry> pairs = loaded_pairs(fault_keys);
  tandem::index idx(cfg);
  idx.load(pairs);
  test::index_model model;
  for (const entry& e : pairs) model.data[e.key] = e.value;
  index_access::fail_nth_allocation(sync_n);
  const batch_result r = idx.execute(b);
  ASSERT_EQ(index_access::disarm_allocation_fault(), 0u);
  ASSERT_EQ(model.check(b, r), 0u);
  const std::uint64_t syncs = idx.stats().inner_syncs;
  for (std::uint64_t s = 30; s < 34; ++s) {  // routed on the layout before the splits, then rebuilt
    const batch next = mixed_batch(fault_keys, 2000, s);
    ASSERT_EQ(model.check(next, idx.execute(next), "after the failed sync"), 0u);
  }
  EXPECT_GT(idx.stats().inner_syncs, syncs);
  ASSERT_NO_THROW(idx.verify());
  EXPECT_TRUE(contents(idx) == as_entries(model.data));
}

TEST(Fault, FailedLoadLeavesTheIndexAsItWas) {
  const disarm_at_exit guard;
  tandem::index idx(fault_config(device_kind::cpu));
  const std::vector<entry> first = loaded_pairs(1000);
  idx.load(first);
  std::vector<entry> second;
  for (key_type k = 0; k < 300'000; ++k) second.push_back({k * 3 + 1, k});
  std::uint64_t failures = 0;
  for (std::uint64_t n = 1; n <= 100; ++n) {
    index_access::fail_nth_allocation(n);
    bool failed = false;
    try {
      idx.load(second);
    } catch (const std::bad_alloc&) {
      failed = true;
    }
    const bool fired = index_access::disarm_allocation_fault() == 0;
    ASSERT_NO_THROW(idx.verify()) << "n = " << n;
    if (!failed) {
      EXPECT_EQ(idx.size(), second.size());
      break;
    }
    ASSERT_TRUE(fired);
    ++failures;
    ASSERT_EQ(idx.size(), first.size()) << "n = " << n;
    ASSERT_TRUE(contents(idx) == first) << "n = " << n;
  }
  EXPECT_GE(failures, 1u);
}

TEST(FaultGpu, EveryAllocationOfAMixedBatchWithSplitsFailsCleanly) {
  TANDEM_REQUIRE_GPU();
  const disarm_at_exit guard;
  const config cfg = fault_config(device_kind::gpu);
  const batch b = mixed_batch(fault_keys, 3000, 5);
  expect_splits(cfg, fault_keys, b);
  const sweep_counts c = sweep_fresh(cfg, fault_keys, b);
  std::cout << "fresh GPU index: " << c.failures << " failing allocations, " << c.deferred
            << " after the writes, done at n = " << c.last_n << "\n";
  EXPECT_GE(c.failures, 10u);
}

TEST(FaultGpu, OneIndexSurvivesEveryFailedAttempt) {
  TANDEM_REQUIRE_GPU();
  const disarm_at_exit guard;
  const batch b = mixed_batch(fault_keys, 3000, 6);
  const sweep_counts c = sweep_same_index(fault_config(device_kind::gpu), fault_keys, b);
  EXPECT_GE(c.failures, 3u);
}

// ---- the scan output cap -----------------------------------------------------

/// What the index must answer to `b` under a cap of `cap_entries` scan
/// entries: the model's answers, but scans taken in batch order, each
/// refused (output_limit, nothing returned) when its entries would take the
/// total past the cap.
std::size_t check_capped(test::index_model& model, const batch& b, const batch_result& r, std::uint64_t cap_entries,
                         const std::string& where) {
  std::size_t bad = 0;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const op o = b[i];
    test::expected_answer want = model.run(o);
    if (o.type == op_type::scan && want.result.status == op_status::ok) {
      if (want.scan.size() <= cap_entries - total) {
        total += want.scan.size();
      } else {
        want = {};
        want.result.key = o.key;
        want.result.status = op_status::output_limit;
        if (r.status(i) == op_status::output_limit && r.error(i).empty() && ++bad <= 5) {
          ADD_FAILURE() << where << ": op " << i << " output_limit without an error message";
        }
      }
    }
    const std::string diff = test::map_model::compare(o, want, r, i);
    if (!diff.empty() && ++bad <= 5) ADD_FAILURE() << where << ": " << diff;
  }
  return bad;
}

TEST(OutputCap, ScansPastTheCapAreRefusedInBatchOrder) {
  config c;
  c.device = device_kind::cpu;
  c.max_batch_output_bytes = 100 * sizeof(entry);  // 100 entries
  tandem::index idx(c);
  std::vector<entry> pairs;
  for (key_type k = 0; k < 1000; ++k) pairs.push_back({k * 10, k});
  idx.load(pairs);
  batch b;
  b.scan(0, max_key, 60)                              // 60: runs
      .scan(0, max_key, 60, scan_order::unordered)    // 120 > 100: refused
      .put(5, 55)                                     // a write inside the next scans' ranges
      .scan(0, max_key, 30)                           // 90: runs, merged with the put
      .count(0, max_key)
      .scan(100, 200, 20, scan_order::unordered)      // 11 entries: 101 > 100, refused
      .scan(0, 0, 5)                                  // 1 entry: 91, runs
      .get(5);
  const batch_result r = idx.execute(b);
  ASSERT_EQ(r.size(), b.size());
  EXPECT_EQ(r.status(0), op_status::ok);
  EXPECT_EQ(r.scan(0).size(), 60u);
  EXPECT_EQ(r.status(1), op_status::output_limit);
  EXPECT_FALSE(r.found(1));
  EXPECT_EQ(r.value(1), 0u);
  EXPECT_TRUE(r.scan(1).empty());
  EXPECT_NE(r.error(1).find("max_batch_output_bytes"), std::string::npos) << r.error(1);
  EXPECT_EQ(r.status(3), op_status::ok);
  ASSERT_EQ(r.scan(3).size(), 30u);
  EXPECT_EQ(r.scan(3)[1], (entry{5, 55}));
  EXPECT_EQ(r.value(4), 1001u);
  EXPECT_EQ(r.status(5), op_status::output_limit);
  EXPECT_EQ(r.status(6), op_status::ok);
  EXPECT_EQ(r.scan(6).size(), 1u);
  EXPECT_TRUE(r.found(7));
  EXPECT_EQ(r.invalid_count(), 0u);
  EXPECT_EQ(r.scan_entries().size(), 91u);
  EXPECT_EQ(idx.stats().invalid_ops, 2u);
  EXPECT_NO_THROW(idx.verify());
}

TEST(OutputCap, MatchesTheModelOverRandomBatches) {
  // Many scans, over keys the batch writes and not, under caps small enough
  // that most batches pass them; several threads share the cap's budget.
  for (const std::uint64_t cap_entries : {std::uint64_t{1}, std::uint64_t{700}, std::uint64_t{5000}}) {
    config c;
    c.device = device_kind::cpu;
    c.max_batch_output_bytes = cap_entries * sizeof(entry) + 7;  // a cap that is no multiple of an entry
    tandem::index idx(c);
    test::index_model model;
    std::mt19937_64 rng(cap_entries);
    std::vector<entry> pairs;
    for (key_type k = 0; k < 20'000; ++k) pairs.push_back({k * 16, rng()});
    idx.load(pairs);
    for (const entry& e : pairs) model.data[e.key] = e.value;
    for (int round = 0; round < 6; ++round) {
      batch b;
      for (int i = 0; i < 4000; ++i) {
        const key_type k = rng() % 330'000;
        switch (rng() % 6) {
          case 0: b.put(k, rng()); break;
          case 1: b.erase(k); break;
          case 2: b.get(k); break;
          case 3: b.count(k, k + rng() % 5000); break;
          default:
            b.scan(k, k + rng() % 20'000, rng() % 400, rng() % 2 ? scan_order::unordered : scan_order::ordered);
        }
      }
      const std::string where = "cap " + std::to_string(cap_entries) + ", round " + std::to_string(round);
      ASSERT_EQ(check_capped(model, b, idx.execute(b), cap_entries, where), 0u);
    }
    ASSERT_NO_THROW(idx.verify());
  }
}

TEST(OutputCap, ZeroMeansNoCapAndTinyCapsAreRejected) {
  config c;
  c.device = device_kind::cpu;
  c.max_batch_output_bytes = sizeof(entry) - 1;
  EXPECT_THROW(tandem::index{c}, std::invalid_argument);
  c.max_batch_output_bytes = 1;
  EXPECT_THROW(tandem::index{c}, std::invalid_argument);
  c.max_batch_output_bytes = sizeof(entry);
  EXPECT_NO_THROW(tandem::index{c});
  EXPECT_EQ(config{}.max_batch_output_bytes, std::size_t{1} << 30);

  c.max_batch_output_bytes = 0;
  tandem::index idx(c);
  std::vector<entry> pairs;
  for (key_type k = 0; k < 100'000; ++k) pairs.push_back({k, k});
  idx.load(pairs);
  batch b;
  for (int i = 0; i < 20; ++i) b.scan(0, max_key, max_scan_limit);
  const batch_result r = idx.execute(b);
  for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(r.scan(i).size(), pairs.size());
}

}  // namespace
