// Columnar batches and answers: bulk appends of every op type equal the same
// ops added one by one, answer columns equal the per-op accessors, results
// kept alive while later batches run keep their answers (pool reuse never
// touches a live result), and a steady-state batch allocates nothing of its
// size.
#include <tandem/tandem.hpp>

#include "support/batches.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

// ---- counting allocator hook --------------------------------------------------
// Counts heap allocations of at least `big_threshold` bytes made by any thread
// of this process (malloc interposition; sanitizer builds intercept malloc
// themselves, so the count is off there and the test skips).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TANDEM_TEST_COUNTS_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TANDEM_TEST_COUNTS_ALLOCATIONS 0
#endif
#endif
#if !defined(TANDEM_TEST_COUNTS_ALLOCATIONS) && defined(__GLIBC__)
#define TANDEM_TEST_COUNTS_ALLOCATIONS 1
#endif
#if !defined(TANDEM_TEST_COUNTS_ALLOCATIONS)
#define TANDEM_TEST_COUNTS_ALLOCATIONS 0
#endif

namespace {
std::atomic<std::size_t> big_threshold{~std::size_t{0}};
std::atomic<std::size_t> big_allocations{0};
inline void note(std::size_t bytes) {
  if (bytes >= big_threshold.load(std::memory_order_relaxed)) big_allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

#if TANDEM_TEST_COUNTS_ALLOCATIONS
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void* malloc(std::size_t n) {
  note(n);
  return __libc_malloc(n);
}
void* calloc(std::size_t k, std::size_t n) {
  note(k * n);
  return __libc_calloc(k, n);
}
void* realloc(void* p, std::size_t n) {
  note(n);
  return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t a, std::size_t n) {
  note(n);
  return __libc_memalign(a, n);
}
void* memalign(std::size_t a, std::size_t n) {
  note(n);
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, std::size_t a, std::size_t n) {
  note(n);
  void* p = __libc_memalign(a, n);
  if (!p) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}
#endif

namespace {

using namespace tandem;

TEST(Columnar, BulkAppendsEqualOneByOne) {
  std::mt19937_64 rng(7);
  std::vector<key_type> keys = {0, max_key, 1, max_key - 1};
  for (int i = 0; i < 200; ++i) keys.push_back(rng() % 300);
  std::vector<value_type> values(keys.size());
  for (auto& v : values) v = rng();
  batch bulk, single;
  bulk.put(keys, values).get(keys).insert(keys.data(), values.data(), keys.size()).lower_bound(keys).erase(keys);
  bulk.get(keys.data(), 0);  // nothing
  for (std::size_t i = 0; i < keys.size(); ++i) single.put(keys[i], values[i]);
  for (key_type k : keys) single.get(k);
  for (std::size_t i = 0; i < keys.size(); ++i) single.insert(keys[i], values[i]);
  for (key_type k : keys) single.lower_bound(k);
  for (key_type k : keys) single.erase(k);
  ASSERT_EQ(bulk.size(), single.size());
  for (std::size_t i = 0; i < bulk.size(); ++i) {
    EXPECT_EQ(bulk[i].key, single[i].key);
    EXPECT_EQ(bulk[i].arg, single[i].arg);
    EXPECT_EQ(bulk[i].type, single[i].type);
  }
  tandem::index a, b;
  const batch_result ra = a.execute(bulk);
  const batch_result rb = b.execute(single);
  test::index_model model;
  EXPECT_EQ(model.check(bulk, ra, "bulk"), 0u);
  for (std::size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra.value(i), rb.value(i));
    EXPECT_EQ(ra.found(i), rb.found(i));
    EXPECT_EQ(ra.key(i), rb.key(i));
  }
  EXPECT_EQ(a.size(), 0u);
  a.verify();
}

TEST(Columnar, ColumnsEqualPerOpAccessors) {
  tandem::config cfg;
  cfg.threads = 2;
  tandem::index idx(cfg);
  test::key_source keys(test::key_pattern::clustered, 5000, 11);
  test::index_model model;
  for (int round = 0; round < 6; ++round) {
    const batch b = test::random_batch(keys, 4000);
    const batch_result r = idx.execute(b);
    ASSERT_EQ(model.check(b, r, "round " + std::to_string(round)), 0u);
    const value_type* values = r.values();
    const key_type* ks = r.keys();
    const std::uint8_t* found = r.found_flags();
    const op_status* status = r.statuses();
    std::size_t entries = 0;
    for (std::size_t i = 0; i < r.size(); ++i) {
      ASSERT_EQ(values[i], r.value(i));
      ASSERT_EQ(ks[i], r.key(i));
      ASSERT_EQ(found[i] != 0, r.found(i));
      ASSERT_TRUE(found[i] == 0 || found[i] == 1);
      ASSERT_EQ(status[i], r.status(i));
      const op_result one = r[i];
      ASSERT_EQ(one.value, values[i]);
      if (b[i].type == op_type::scan && r.ok(i)) {
        if (!r.scan(i).empty()) {
          ASSERT_EQ(r.scan(i).data(), r.scan_entries().data() + one.scan_offset);
        }
        entries += r.scan(i).size();
      }
    }
    EXPECT_EQ(entries, r.scan_entries().size());
  }
  idx.verify();
}

TEST(Columnar, KeptResultsSurviveLaterBatches) {
  tandem::config cfg;
  cfg.threads = 2;
  tandem::index idx(cfg);
  std::vector<entry> pairs;
  for (key_type k = 0; k < 20000; ++k) pairs.push_back({k * 3, k});
  idx.load(pairs);
  std::vector<batch_result> kept;
  std::vector<std::vector<value_type>> want;
  for (int round = 0; round < 40; ++round) {
    batch b;
    std::vector<key_type> keys(3000);
    for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = (i * 7 + static_cast<std::size_t>(round) * 13) % 60000;
    b.get(keys);
    batch_result r = idx.execute(std::move(b));
    if (round % 3 == 0) {
      want.emplace_back(r.values(), r.values() + r.size());
      kept.push_back(std::move(r));
    }  // the others go back to the pool here and are reused
  }
  for (std::size_t k = 0; k < kept.size(); ++k) {
    ASSERT_EQ(kept[k].size(), want[k].size());
    for (std::size_t i = 0; i < want[k].size(); ++i) ASSERT_EQ(kept[k].value(i), want[k][i]) << k << " " << i;
  }
}

TEST(Columnar, ResultOutlivesItsIndex) {
  batch_result r;
  {
    tandem::index idx;
    idx.load(std::vector<entry>{{5, 50}});
    batch b;
    b.get(5).scan(0, 10, 5);
    r = idx.execute(b);
  }
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r.value(0), 50u);
  ASSERT_EQ(r.scan(1).size(), 1u);
  EXPECT_EQ(r.scan(1)[0], (entry{5, 50}));
}

TEST(Columnar, SteadyStateBatchAllocatesNothingOfItsSize) {
  if (!TANDEM_TEST_COUNTS_ALLOCATIONS) GTEST_SKIP() << "malloc is intercepted by a sanitizer in this build";
  tandem::config cfg;
  cfg.threads = 2;
  cfg.device = device_kind::cpu;
  tandem::index idx(cfg);
  constexpr std::size_t keys_held = 1 << 18, n = 1 << 17;
  std::vector<entry> pairs;
  for (key_type k = 0; k < keys_held; ++k) pairs.push_back({k * 5, k});
  idx.load(pairs);
  std::mt19937_64 rng(3);
  auto make = [&](bool writes) {
    batch b;
    b.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const key_type k = (rng() % keys_held) * 5;  // existing keys: no splits
      if (writes && i % 2) {
        b.put(k, rng());
      } else {
        b.get(k);
      }
    }
    return b;
  };
  for (bool writes : {false, true}) {
    std::vector<batch> batches;
    for (int i = 0; i < 8; ++i) batches.push_back(make(writes));
    for (int i = 0; i < 3; ++i) (void)idx.execute(std::move(batches[i]));  // warm the pools
    big_threshold.store(n);  // one byte per op
    big_allocations.store(0);
    for (int i = 3; i < 8; ++i) (void)idx.execute(std::move(batches[i]));
    const std::size_t counted = big_allocations.load();
    big_threshold.store(~std::size_t{0});
    EXPECT_EQ(counted, 0u) << (writes ? "gets and puts" : "gets") << ": allocations of >= " << n << " bytes";
  }
}

}  // namespace
