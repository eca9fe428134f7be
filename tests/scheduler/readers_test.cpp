// Reads answered on the callers' threads (reader_gate): the point API
// (index::get, contains, lower_bound, put, insert, erase) and small read
// batches, side by side with each other and with a stream of writes. Every
// answer must be one the model gives in the index's order of effect, and a
// read must see every write whose submit returned before it was asked.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <future>
#include <random>
#include <tandem/tandem.hpp>
#include <thread>
#include <vector>

#include "support/batches.hpp"
#include "support/model.hpp"

namespace {

using namespace tandem;

/// The model's answer to one op, as the point API gives it.
struct point_answer {
  bool found = false;
  value_type value = 0;
  key_type key = 0;  // lower_bound's entry
};

point_answer model_answer(test::map_model &model, const op &o) {
  const test::expected_answer want = model.run(o);
  return {want.result.found, want.result.value, want.result.key};
}

key_type edge_or(test::key_source &keys) {
  const std::uint64_t r = keys.rng()() % 16;
  return r == 0 ? min_key : r == 1 ? max_key : r == 2 ? max_key - 1 : r == 3 ? 1 : keys();
}

// Every point call against the model, edge keys 0, 1, UINT64_MAX - 1 and
// UINT64_MAX included, and then a batch of the same ops gives the same
// answers; verify() after the writes.
TEST(PointApi, AnswersAsOneOpBatchesDo) {
  for (const std::uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    config cfg;
    cfg.threads = 1 + seed % 3;
    tandem::index idx(cfg);
    test::key_source keys(test::key_pattern::narrow, 4'000, seed);
    test::index_model model;
    // Empty index first: nothing found anywhere.
    EXPECT_FALSE(idx.get(min_key).has_value());
    EXPECT_FALSE(idx.contains(max_key));
    EXPECT_FALSE(idx.lower_bound(min_key).has_value());
    if (seed % 2) model.load(idx, keys.pairs(2'000));
    auto &rng = keys.rng();
    for (int i = 0; i < 6'000; ++i) {
      const key_type k = edge_or(keys);
      const value_type v = rng();
      switch (rng() % 7) {
        case 0: {
          const point_answer want = model_answer(model, {k, 0, 0, op_type::get, scan_order::ordered});
          const std::optional<value_type> got = idx.get(k);
          ASSERT_EQ(got.has_value(), want.found) << "get " << k;
          if (want.found) {
            ASSERT_EQ(*got, want.value) << "get " << k;
          }
          break;
        }
        case 1:
          ASSERT_EQ(idx.contains(k), model.data.count(k) == 1) << "contains " << k;
          break;
        case 2: {
          const point_answer want = model_answer(model, {k, 0, 0, op_type::lower_bound, scan_order::ordered});
          const std::optional<entry> got = idx.lower_bound(k);
          ASSERT_EQ(got.has_value(), want.found) << "lower_bound " << k;
          if (want.found) {
            ASSERT_EQ(got->key, want.key) << "lower_bound " << k;
            ASSERT_EQ(got->value, want.value) << "lower_bound " << k;
          }
          break;
        }
        case 3: {
          const point_answer want = model_answer(model, {k, v, 0, op_type::put, scan_order::ordered});
          const std::optional<value_type> got = idx.put(k, v);
          ASSERT_EQ(got.has_value(), want.found) << "put " << k;
          if (want.found) {
            ASSERT_EQ(*got, want.value) << "put " << k;
          }
          break;
        }
        case 4: {
          const point_answer want = model_answer(model, {k, v, 0, op_type::insert, scan_order::ordered});
          ASSERT_EQ(idx.insert(k, v), !want.found) << "insert " << k;
          break;
        }
        default: {
          const point_answer want = model_answer(model, {k, 0, 0, op_type::erase, scan_order::ordered});
          const std::optional<value_type> got = idx.erase(k);
          ASSERT_EQ(got.has_value(), want.found) << "erase " << k;
          if (want.found) {
            ASSERT_EQ(*got, want.value) << "erase " << k;
          }
        }
      }
    }
    EXPECT_EQ(idx.size(), model.data.size());
    EXPECT_NO_THROW(idx.verify());
    // The same reads as a batch (answered on the caller: gets, lower_bounds
    // and counts) and as points agree.
    batch reads;
    std::vector<key_type> asked;
    for (int i = 0; i < 48; ++i) {
      const key_type k = edge_or(keys);
      asked.push_back(k);
      if (i % 3 == 0) reads.get(k);
      if (i % 3 == 1) reads.lower_bound(k);
      if (i % 3 == 2) reads.count(k, k + (max_key - k) / 2);
    }
    const batch_result r = idx.execute(reads);
    ASSERT_EQ(model.check(reads, r, "read batch"), 0u);
    for (std::size_t i = 0; i < asked.size(); ++i) {
      if (i % 3 == 0) {
        EXPECT_EQ(idx.get(asked[i]).has_value(), r.found(i));
      }
      if (i % 3 == 1) {
        EXPECT_EQ(idx.lower_bound(asked[i]).has_value(), r.found(i));
      }
    }
  }
}

// A read asked after a write's submit returned sees it, though that write
// still waits in the queue: the dispatcher is busy with 2^16 gets answered
// directly on its own thread (a read: readers on callers may go on beside
// it), the put queues behind them, and the point get and the get batch
// that follow must wait for the put. A gate that let a reader in while a
// write is queued ahead of it fails here.
TEST(Readers, AReadNeverOvertakesAWriteQueuedBeforeIt) {
  config cfg;
  cfg.threads = 2;
  cfg.small_batch_ops = 1 << 16;  // the busy batch runs on the dispatcher, serially
  tandem::index idx(cfg);
  test::key_source keys(test::key_pattern::uniform, 1 << 16, 7);
  const std::vector<entry> pairs = keys.pairs(1 << 16);
  idx.load(pairs);
  batch busy;
  for (const entry &e : pairs) busy.get(e.key);
  for (int round = 0; round < 20; ++round) {
    std::promise<std::size_t> read;  // a callback: it never runs on this thread
    idx.submit(busy, [&](batch_result r, std::exception_ptr) { read.set_value(r.size()); });
    const key_type k = round % 2 ? max_key : min_key;
    const value_type v = 1000 + static_cast<value_type>(round);
    std::future<batch_result> put = idx.submit(batch().put(k, v));
    const std::optional<value_type> seen = idx.get(k);
    ASSERT_TRUE(seen.has_value()) << "round " << round;
    ASSERT_EQ(*seen, v) << "round " << round << ": a point get overtook the put queued before it";
    const batch_result r = idx.submit(batch().get(k).lower_bound(k)).get();
    ASSERT_TRUE(r.found(0));
    ASSERT_EQ(r.value(0), v) << "round " << round << ": a get batch overtook the put queued before it";
    ASSERT_EQ(r.key(1), k);
    EXPECT_EQ(put.get().size(), 1u);
    EXPECT_EQ(read.get_future().get(), busy.size());
  }
}

// Many readers (point gets and lower_bounds, small read batches) beside one
// writer whose batches split and merge leaves. The writer puts an
// increasing version into hot keys and publishes it once submit returns:
// a point read must see at least the version published before it began
// and at most the one submitted when it ended. Every batch (the writer's
// and the readers') must equal the model replayed in order of effect.
TEST(Readers, PointAndBatchReadersBesideAWriterMatchTheModel) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    config cfg;
    cfg.threads = 1 + seed;
    tandem::index idx(cfg);
    test::key_source keys(test::key_pattern::narrow, 20'000, seed);
    test::index_model model;
    std::vector<entry> pairs = keys.pairs(8'000);
    constexpr std::size_t hot_keys = 4;
    // Outside the keys the writer's random ops touch ([0, 40000), 0, 1,
    // UINT64_MAX - 1 and UINT64_MAX).
    const std::array<key_type, hot_keys> hot{max_key - 3, key_type{1} << 41, 50'001, key_type{1} << 40};
    for (const key_type k : hot) pairs.push_back({k, 0});
    model.load(idx, pairs);
    std::array<std::atomic<std::uint64_t>, hot_keys> published{};  // writer: after submit returned
    std::array<std::atomic<std::uint64_t>, hot_keys> submitted{};  // writer: before submit
    std::atomic<bool> writing{true};
    test::answered_batches done;
    std::atomic<std::uint64_t> point_reads{0};
    std::thread writer([&] {
      test::key_source mine(test::key_pattern::narrow, 20'000, seed * 977);
      auto &rng = mine.rng();
      std::vector<std::pair<batch, std::future<batch_result>>> in_flight;
      for (std::uint64_t version = 1; version <= 400; ++version) {
        test::batch_mix writes;
        writes.get = writes.lower_bound = writes.scan = writes.count = 0;
        batch b = test::random_batch(mine, rng() % 4 == 0 ? 600 : 1 + rng() % 40, writes);
        const std::size_t h = version % hot_keys;
        b.put(hot[h], version);
        submitted[h].store(version);
        in_flight.emplace_back(b, idx.submit(b));
        published[h].store(version);
        if (in_flight.size() == 6) {
          for (auto &[wb, f] : in_flight) done.add(std::move(wb), f.get());
          in_flight.clear();
        }
      }
      for (auto &[wb, f] : in_flight) done.add(std::move(wb), f.get());
      writing.store(false);
    });
    constexpr int readers = 8;
    std::vector<std::thread> threads;
    for (int t = 0; t < readers; ++t) {
      threads.emplace_back([&, t] {
        test::key_source mine(test::key_pattern::narrow, 20'000, seed * 100 + static_cast<std::uint64_t>(t));
        auto &rng = mine.rng();
        while (writing.load()) {
          const std::size_t h = rng() % hot_keys;
          if (t % 2 == 0) {  // point reads of a hot key
            const std::uint64_t low = published[h].load();
            const std::optional<value_type> v =
                rng() % 2 ? idx.get(hot[h]) : std::optional<value_type>(idx.lower_bound(hot[h])->value);
            const std::uint64_t high = submitted[h].load();
            ASSERT_TRUE(v.has_value());
            // Hot key h gets versions h, h + 4, ... (and 0 from the load).
            ASSERT_GE(*v, low) << "a point read missed a write whose submit had returned";
            ASSERT_LE(*v, high) << "a point read saw a write not yet submitted";
            point_reads.fetch_add(1);
          } else {  // small read batches, answered on the caller or queued
            batch b;
            const std::size_t n = 1 + rng() % 16;
            for (std::size_t i = 0; i < n; ++i) {
              const std::uint64_t r = rng() % 16;
              const key_type k = r == 0 ? hot[rng() % hot_keys] : r == 1 ? min_key : mine();
              switch (rng() % 3) {
                case 0:
                  b.get(k);
                  break;
                case 1:
                  b.lower_bound(k);
                  break;
                default:
                  b.count(k, k + rng() % 2'000);
              }
            }
            done.add(b, idx.submit(b).get());
          }
        }
      });
    }
    writer.join();
    for (auto &t : threads) t.join();
    EXPECT_GT(point_reads.load(), 0u);
    ASSERT_EQ(done.check_in_sequence(model), 0u);
    EXPECT_EQ(idx.size(), model.data.size());
    EXPECT_NO_THROW(idx.verify());
    EXPECT_GT(idx.stats().caller_batches, 0u);
    EXPECT_EQ(idx.stats().point_reads, point_reads.load());
  }
}

// Point calls from a callback would wait for the callback itself: they
// throw; the index goes on.
TEST(PointApi, FromACallbackThrows) {
  tandem::index idx;
  std::promise<std::string> what;
  idx.submit(batch().put(1, 2), [&](batch_result, std::exception_ptr) {
    try {
      (void)idx.get(1);
      what.set_value("no exception");
    } catch (const tandem::error &e) {
      what.set_value(e.what());
    }
  });
  EXPECT_NE(what.get_future().get().find("callback"), std::string::npos);
  EXPECT_EQ(idx.get(1), std::optional<value_type>(2));
}

}  // namespace
