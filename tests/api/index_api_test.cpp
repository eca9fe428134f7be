// The public contract of tandem::index: futures, callbacks, per-op errors,
// empty batches, edge keys, config checks, stats, destruction with work in
// flight.
#include <tandem/device/device_query.hpp>
#include <tandem/tandem.hpp>

#include "support/batches.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

namespace {

using namespace tandem;

TEST(IndexApi, FutureAnswersInBatchOrder) {
  tandem::index idx;
  batch b;
  b.get(5).put(5, 50).get(5).insert(5, 51).erase(5).get(5).put(max_key, 1).put(min_key, 2);
  const batch_result r = idx.submit(b).get();
  ASSERT_EQ(r.size(), 8u);
  EXPECT_FALSE(r.found(0));
  EXPECT_FALSE(r.found(1));
  EXPECT_TRUE(r.found(2));
  EXPECT_EQ(r.value(2), 50u);
  EXPECT_TRUE(r.found(3));  // present: not inserted, value kept
  EXPECT_EQ(r.value(3), 50u);
  EXPECT_TRUE(r.found(4));  // erased 50
  EXPECT_EQ(r.value(4), 50u);
  EXPECT_FALSE(r.found(5));
  EXPECT_EQ(idx.size(), 2u);
}

TEST(IndexApi, EdgeKeysAndRanges) {
  tandem::index idx;
  idx.load(std::vector<entry>{{max_key, 9}, {min_key, 1}, {10, 2}});
  batch b;
  b.lower_bound(11).lower_bound(max_key).scan(min_key, max_key, 10).count(min_key, max_key).scan(max_key, max_key, 1)
      .count(1, max_key - 1).erase(max_key).lower_bound(11);
  const batch_result r = idx.execute(b);
  EXPECT_TRUE(r.found(0));
  EXPECT_EQ(r.key(0), max_key);
  EXPECT_EQ(r.value(0), 9u);
  EXPECT_EQ(r.key(1), max_key);
  ASSERT_EQ(r.scan(2).size(), 3u);
  EXPECT_EQ(r.scan(2)[0], (entry{min_key, 1}));
  EXPECT_EQ(r.scan(2)[2], (entry{max_key, 9}));
  EXPECT_EQ(r.value(3), 3u);
  ASSERT_EQ(r.scan(4).size(), 1u);
  EXPECT_EQ(r.value(5), 1u);
  EXPECT_TRUE(r.found(6));
  EXPECT_FALSE(r.found(7));  // erased just before
}

TEST(IndexApi, InvalidOpsGetTheirOwnErrorOthersRun) {
  tandem::index idx;
  batch b;
  b.put(1, 10).scan(5, 4, 10).count(9, 3).scan(0, 100, max_scan_limit + 1).get(1).scan(0, 100, max_scan_limit);
  const batch_result r = idx.execute(b);
  EXPECT_TRUE(r.ok(0));
  EXPECT_EQ(r.status(1), op_status::invalid);
  EXPECT_EQ(r.status(2), op_status::invalid);
  EXPECT_EQ(r.status(3), op_status::invalid);
  EXPECT_TRUE(r.ok(4));
  EXPECT_TRUE(r.found(4));
  EXPECT_TRUE(r.ok(5));
  EXPECT_EQ(r.scan(5).size(), 1u);
  EXPECT_EQ(r.invalid_count(), 3u);
  EXPECT_NE(r.error(1).find("op 1 (scan)"), std::string::npos) << r.error(1);
  EXPECT_NE(r.error(1).find("lo 5 > hi 4"), std::string::npos) << r.error(1);
  EXPECT_NE(r.error(2).find("op 2 (count)"), std::string::npos) << r.error(2);
  EXPECT_NE(r.error(3).find("max_scan_limit"), std::string::npos) << r.error(3);
  EXPECT_TRUE(r.error(0).empty());
  EXPECT_TRUE(r.scan(1).empty());
  EXPECT_EQ(idx.stats().invalid_ops, 3u);
}

TEST(IndexApi, EmptyBatch) {
  tandem::index idx;
  const batch_result r = idx.execute(batch{});
  EXPECT_EQ(r.size(), 0u);
  EXPECT_EQ(idx.stats().batches, 1u);
}

TEST(IndexApi, CallbacksAndCallbackExceptions) {
  tandem::index idx;
  std::atomic<int> calls{0};
  for (int i = 0; i < 10; ++i) {
    batch b;
    b.put(static_cast<key_type>(i), static_cast<value_type>(i));
    idx.submit(b, [&, i](batch_result r, std::exception_ptr e) {
      EXPECT_EQ(e, nullptr);
      EXPECT_EQ(r.size(), 1u);
      ++calls;
      if (i % 3 == 0) throw std::runtime_error("callback " + std::to_string(i) + " fails");
    });
  }
  batch g;
  for (int i = 0; i < 10; ++i) g.get(static_cast<key_type>(i));
  const batch_result r = idx.execute(g);  // runs after every callback batch
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(r.found(static_cast<std::size_t>(i)));
  EXPECT_EQ(calls.load(), 10);
  const stats s = idx.stats();
  EXPECT_EQ(s.callback_errors, 4u);
  EXPECT_EQ(s.last_callback_error, "callback 9 fails");
  EXPECT_THROW(idx.submit(batch{}, index::callback{}), std::invalid_argument);
}

TEST(IndexApi, ConfigIsChecked) {
  config c;
  c.fanout = 17;
  EXPECT_THROW(tandem::index{c}, std::invalid_argument);
  c = {};
  c.leaf_fill = 0;
  EXPECT_THROW(tandem::index{c}, std::invalid_argument);
  c = {};
  c.leaf_fill = 1.01;
  EXPECT_THROW(tandem::index{c}, std::invalid_argument);
  for (int f : {16, 32, 64}) {
    c = {};
    c.fanout = f;
    c.threads = 2;
    tandem::index idx(c);
    EXPECT_EQ(idx.stats().threads, 2u);
  }
}

TEST(IndexApi, DeviceGpuWithoutGpuFailsNamingTheGpu) {
  if (!device::query_devices().devices.empty()) GTEST_SKIP() << "a GPU is present";
  config c;
  c.device = device_kind::gpu;
  try {
    tandem::index idx(c);
    FAIL() << "device = gpu must fail without a GPU";
  } catch (const tandem::error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable GPU"), std::string::npos) << e.what();
  }
  c.device = device_kind::cpu;
  tandem::index idx(c);
  EXPECT_NE(idx.stats().device.find("cpu"), std::string::npos);
}

TEST(IndexApi, StatsCountOpsAndStages) {
  tandem::index idx;
  test::key_source keys(test::key_pattern::uniform, 5000, 3);
  std::size_t ops = 0;
  for (int i = 0; i < 5; ++i) {
    const batch b = test::random_batch(keys, 20'000);
    ops += b.size();
    idx.execute(b);
  }
  const stats s = idx.stats();
  EXPECT_EQ(s.batches, 5u);
  EXPECT_EQ(s.ops, ops);
  std::uint64_t by_type = 0;
  for (auto c : s.ops_by_type) by_type += c;
  EXPECT_EQ(by_type, ops);
  EXPECT_GT(s.splits, 0u);
  EXPECT_GT(s.inner_syncs, 0u);
  EXPECT_GT(s.leaves, 1u);
  EXPECT_GE(s.inner_height, 1);
  EXPECT_GT(s.total.route, 0.0);
  EXPECT_GT(s.total.leaf, 0.0);
  EXPECT_GE(s.total.sum(), s.last.sum());
  EXPECT_EQ(s.last_batch_ops, 20'000u);
  EXPECT_EQ(s.keys, idx.size());
}

TEST(IndexApi, StatsKeepLatencyHistogramsOfEveryBatch) {
  latency_histogram h;
  EXPECT_EQ(h.percentile_us(50), 0.0);
  h.add(0.5e-6);   // bucket 0: below 2 us
  h.add(3e-6);     // [2, 4)
  h.add(100e-6);   // [64, 128)
  h.add(5e-3);     // [4096, 8192)
  EXPECT_EQ(h.count(), 4u);
  EXPECT_EQ(h.buckets[0], 1u);
  EXPECT_EQ(h.buckets[1], 1u);
  EXPECT_EQ(h.buckets[6], 1u);
  EXPECT_EQ(h.buckets[12], 1u);
  EXPECT_EQ(h.percentile_us(25), 2.0);
  EXPECT_EQ(h.percentile_us(50), 4.0);
  EXPECT_EQ(h.percentile_us(75), 128.0);
  EXPECT_EQ(h.percentile_us(100), 8192.0);
  h.add(1e9);  // far beyond: the last bucket
  EXPECT_EQ(h.buckets[latency_histogram::bucket_count - 1], 1u);

  config cfg;
  cfg.device = device_kind::cpu;
  tandem::index idx(cfg);
  for (int i = 0; i < 50; ++i) idx.execute(batch{}.put(static_cast<key_type>(i), 1).get(7));
  const stats s = idx.stats();
  EXPECT_EQ(s.queue_wait.count(), 50u);
  EXPECT_EQ(s.execution.count(), 50u);
  EXPECT_GT(s.execution.percentile_us(50), 0.0);
  EXPECT_GE(s.execution.percentile_us(99), s.execution.percentile_us(50));
}

/// n pairs with keys 7919 apart: spread evenly, so the layout has a radix
/// table.
std::vector<entry> spread_pairs(std::size_t n) {
  std::vector<entry> pairs(n);
  for (std::size_t i = 0; i < n; ++i) pairs[i] = {i * 7919, i};
  return pairs;
}

TEST(IndexApi, StatsReportTheDataAfterALoad) {
  config c;
  c.device = device_kind::cpu;
  tandem::index idx(c);
  const std::vector<entry> pairs = spread_pairs(100'000);
  idx.load(pairs);
  const stats s = idx.stats();  // no batch ran: the load itself publishes
  EXPECT_EQ(s.keys, pairs.size());
  EXPECT_GT(s.leaves, 1u);
  EXPECT_GE(s.leaf_bytes, pairs.size() * sizeof(entry));
  EXPECT_LE(s.leaf_bytes, s.leaves * 64 * 1024);
  EXPECT_GT(s.inner_bytes, 0u);
  // And the layout's radix table: the low keys and at most two intervals a
  // leaf, each a 4-byte entry and a 32-byte bucket (these keys spread
  // evenly: it has one).
  ASSERT_GT(s.host_bytes, s.leaf_bytes + s.inner_bytes);
  const std::size_t radix = s.host_bytes - s.leaf_bytes - s.inner_bytes;
  EXPECT_GE(radix, s.leaves * sizeof(key_type));
  EXPECT_LE(radix, s.leaves * (sizeof(key_type) + 2 * (sizeof(std::uint32_t) + 32)) +
                      sizeof(std::uint32_t));
  EXPECT_EQ(s.gpu_bytes, 0u);  // routing on the CPU holds no device memory
}

// stats().leaf_lines counts the leaf lines of a sample of point ops, on
// the routed path (a leaf group in leaf_line_sample) and the direct one
// (a get in leaf_line_sample): a lone get reads its leaf's first line, a
// header line and its window, which holds the value; gets that share their
// leaves share lines; scans are not counted.
TEST(IndexApi, StatsCountTheLeafLinesOfPointOps) {
  config c;
  c.device = device_kind::cpu;
  tandem::index idx(c);
  const std::vector<entry> pairs = spread_pairs(200'000);
  idx.load(pairs);
  const auto lines_of = [&](const batch& b) {
    const stats before = idx.stats();
    idx.execute(b);
    const stats after = idx.stats();
    return std::make_pair(after.leaf_line_ops - before.leaf_line_ops, after.leaf_lines - before.leaf_lines);
  };
  std::mt19937_64 rng(3);
  batch sparse;  // a get every few leaves: answered directly
  for (std::size_t i = 0; i < 256; ++i) sparse.get(pairs[rng() % pairs.size()].key);
  const auto [direct_ops, direct_lines] = lines_of(sparse);
  EXPECT_EQ(direct_ops, 256 / stats::leaf_line_sample);
  EXPECT_GE(direct_lines, 3 * direct_ops);
  EXPECT_LE(direct_lines, 7 * direct_ops);

  batch dense;  // every key, in batch order: routed, each leaf's lines shared
  for (const entry& e : pairs) dense.get(e.key);
  const auto [dense_ops, dense_lines] = lines_of(dense);
  EXPECT_GT(dense_ops, 0u);
  EXPECT_LT(dense_ops, pairs.size());
  EXPECT_LT(dense_lines, dense_ops);  // 16 bytes a pair, 4 pairs a line

  batch writes;  // puts dirty their entries' lines as well
  for (const entry& e : pairs) writes.put(e.key, e.value + 1);
  const auto [write_ops, write_lines] = lines_of(writes);
  EXPECT_GT(write_ops, 0u);
  EXPECT_GT(write_lines * dense_ops, dense_lines * write_ops);

  batch scans;
  for (std::size_t i = 0; i < 64; ++i) scans.scan(pairs[i * 1000].key, max_key, 100);
  EXPECT_EQ(lines_of(scans).first, 0u);
}

TEST(IndexApi, DestructionDrainsWorkInFlight) {
  std::vector<std::future<batch_result>> futures;
  std::atomic<int> callbacks{0};
  {
    tandem::index idx;
    test::key_source keys(test::key_pattern::narrow, 10'000, 5);
    for (int i = 0; i < 40; ++i) {
      futures.push_back(idx.submit(test::random_batch(keys, 5'000)));
      idx.submit(test::random_batch(keys, 100), [&](batch_result, std::exception_ptr) { ++callbacks; });
    }
  }  // destructor waits for all 80 batches
  for (auto& f : futures) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    EXPECT_EQ(f.get().size(), 5'000u);
  }
  EXPECT_EQ(callbacks.load(), 40);
}

TEST(IndexApi, LoadReplacesContentsLaterDuplicateWins) {
  tandem::index idx;
  idx.execute(batch{}.put(1, 1).put(2, 2));
  const std::vector<key_type> k = {7, 3, 7, max_key, 0};
  const std::vector<value_type> v = {1, 2, 3, 4, 5};
  idx.load(k.data(), v.data(), k.size());
  EXPECT_EQ(idx.size(), 4u);
  const batch_result r = idx.execute(batch{}.get(7).get(1).get(max_key).get(0));
  EXPECT_EQ(r.value(0), 3u);
  EXPECT_FALSE(r.found(1));
  EXPECT_EQ(r.value(2), 4u);
  EXPECT_EQ(r.value(3), 5u);
  idx.load(nullptr, nullptr, 0);
  EXPECT_EQ(idx.size(), 0u);
  EXPECT_NO_THROW(idx.verify());
}

}  // namespace
