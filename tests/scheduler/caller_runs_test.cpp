// config.caller_runs: a small batch of gets submitted for a future while the
// index is idle is answered on the submitting thread. It must keep queue
// order (a submitter's own earlier writes come first, sequence numbers stay
// dense and match the order of effect) and give the answers of the
// dispatcher's path.
#include <tandem/tandem.hpp>

#include "support/batches.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <random>
#include <thread>

namespace {

using namespace tandem;

std::vector<entry> initial_pairs(test::key_source& keys, std::size_t n) {
  std::vector<entry> pairs = keys.pairs(n);
  pairs.push_back({min_key, 1});
  pairs.push_back({max_key, 2});
  return pairs;
}

/// 1 .. 64 gets: present and absent keys, 0 and UINT64_MAX.
batch small_gets(test::key_source& keys) {
  auto& rng = keys.rng();
  batch b;
  const std::size_t n = 1 + rng() % 64;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = rng();
    b.get(r % 16 == 0 ? min_key : r % 16 == 1 ? max_key : r % 16 == 2 ? r : keys());
  }
  return b;
}

// On an idle index (the dispatcher waiting), small get batches are answered
// before submit returns; with config.caller_runs off none is, and the
// answers are the same. Batches with writes, with callbacks or of more ops
// than config.small_batch_ops always go through the queue.
TEST(CallerRuns, SmallGetsOnAnIdleIndexAnswerBeforeSubmitReturns) {
  for (const bool on : {true, false}) {
    SCOPED_TRACE(on ? "caller_runs on" : "caller_runs off");
    config cfg;
    cfg.threads = 2;
    cfg.caller_runs = on;
    tandem::index idx(cfg);
    test::key_source keys(test::key_pattern::narrow, 20'000, 11);
    test::index_model model;
    model.load(idx, initial_pairs(keys, 10'000));
    std::uint64_t ready_at_return = 0, last_sequence = 0;
    constexpr int rounds = 40;
    for (int i = 0; i < rounds; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the dispatcher goes back to waiting
      const batch b = small_gets(keys);
      std::future<batch_result> f = idx.submit(b);
      ready_at_return += f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
      const batch_result r = f.get();
      ASSERT_EQ(model.check(b, r, "round " + std::to_string(i)), 0u);
      if (i > 0) {  // reads answered on their callers share the number of the batch after them
        EXPECT_GE(r.sequence(), last_sequence);
        EXPECT_LE(r.sequence(), last_sequence + 1);
      }
      last_sequence = r.sequence();
    }
    // Not small gets: a write, a callback, a scan, a batch over small_batch_ops.
    batch put;
    put.put(max_key, 7);
    ASSERT_EQ(model.check(put, idx.execute(put), "put"), 0u);
    batch scan;
    scan.scan(min_key, max_key, 10);
    ASSERT_EQ(model.check(scan, idx.execute(scan), "scan"), 0u);
    batch big;
    for (std::size_t k = 0; k < cfg.small_batch_ops + 1; ++k) big.get(keys());
    ASSERT_EQ(model.check(big, idx.execute(big), "big"), 0u);
    std::promise<batch_result> by_callback;
    const batch gets = small_gets(keys);
    idx.submit(gets, [&](batch_result r, std::exception_ptr) { by_callback.set_value(std::move(r)); });
    ASSERT_EQ(model.check(gets, by_callback.get_future().get(), "callback"), 0u);

    const tandem::stats s = idx.stats();
    EXPECT_EQ(s.batches, std::uint64_t{rounds + 4});
    if (on) {
      EXPECT_GE(ready_at_return, s.caller_batches) << "a batch answered on the caller is ready when submit returns";
      EXPECT_GT(s.caller_batches, std::uint64_t{0});
      EXPECT_LE(s.caller_batches, std::uint64_t{rounds});
      EXPECT_LE(s.caller_batches, s.direct_batches);
    } else {
      EXPECT_EQ(s.caller_batches, 0u);
    }
    EXPECT_NO_THROW(idx.verify());
  }
}

// A submitter's writes, queued and not waited for, come before its next
// gets: a get that could run on the caller must not overtake them. Puts,
// inserts and erases of a few keys (0 and UINT64_MAX among them), each
// followed at once by a get of the same key.
TEST(CallerRuns, AGetSeesTheWritesQueuedBeforeIt) {
  for (const std::size_t threads : {1u, 2u, 4u}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    config cfg;
    cfg.threads = threads;
    tandem::index idx(cfg);
    test::key_source keys(test::key_pattern::narrow, 5'000, 21 + threads);
    test::index_model model;
    model.load(idx, initial_pairs(keys, 2'000));
    const key_type hot[] = {min_key, max_key, keys(), keys(), keys()};
    std::mt19937_64 rng(threads);
    // Each write batch with the model's answers to it, checked when it is answered.
    struct pending_write {
      batch b;
      std::vector<test::expected_answer> want;
      std::future<batch_result> f;
    };
    std::vector<pending_write> writes;
    auto check_writes = [&] {
      for (pending_write& w : writes) {
        const batch_result r = w.f.get();
        ASSERT_EQ(r.size(), w.b.size());
        for (std::size_t i = 0; i < w.b.size(); ++i) {
          const std::string diff = test::map_model::compare(w.b[i], w.want[i], r, i);
          ASSERT_TRUE(diff.empty()) << diff;
        }
      }
      writes.clear();
    };
    for (int i = 0; i < 3000; ++i) {
      const key_type k = hot[rng() % 5];
      batch w;
      switch (rng() % 3) {
        case 0: w.put(k, static_cast<value_type>(i)); break;
        case 1: w.insert(k, static_cast<value_type>(i)); break;
        default: w.erase(k);
      }
      if (rng() % 4 == 0) {  // sometimes a bigger write batch, slower to run
        for (int j = 0; j < 200; ++j) w.put(keys(), rng());
      }
      pending_write p{w, {}, idx.submit(w)};
      for (std::size_t j = 0; j < w.size(); ++j) p.want.push_back(model.run(w[j]));
      writes.push_back(std::move(p));
      batch g;
      g.get(k);
      if (rng() % 2) g.get(hot[rng() % 5]);
      ASSERT_EQ(model.check(g, idx.submit(g).get(), "get after write " + std::to_string(i)), 0u);
      if (writes.size() == 8) check_writes();
    }
    check_writes();
    EXPECT_NO_THROW(idx.verify());
  }
}

// Many submitters, small get batches beside write batches (futures and
// callbacks): every answer equals the model replayed in sequence() order,
// whichever thread ran the batch.
TEST(CallerRuns, ConcurrentSubmittersMatchQueueOrder) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    config cfg;
    cfg.threads = 1 + seed;
    tandem::index idx(cfg);
    test::key_source keys(test::key_pattern::narrow, 20'000, seed);
    test::index_model model;
    model.load(idx, initial_pairs(keys, 8'000));
    constexpr int submitters = 6;
    constexpr int per_thread = 150;
    test::answered_batches done;
    std::vector<std::thread> threads;
    for (int t = 0; t < submitters; ++t) {
      threads.emplace_back([&, t] {
        test::key_source mine(test::key_pattern::narrow, 20'000, seed * 100 + static_cast<std::uint64_t>(t));
        auto& rng = mine.rng();
        for (int i = 0; i < per_thread; ++i) {
          if (t % 3 != 0) {  // small gets, mostly waited for at once
            batch b = small_gets(mine);
            done.add(b, idx.submit(b).get());
            continue;
          }
          test::batch_mix writes;
          writes.get = writes.lower_bound = writes.scan = writes.count = 0;
          batch b = test::random_batch(mine, 1 + rng() % 300, writes);
          if (i % 2) {
            done.add(b, idx.submit(b).get());
          } else {
            std::promise<batch_result> answer;
            idx.submit(b, [&](batch_result r, std::exception_ptr) { answer.set_value(std::move(r)); });
            done.add(b, answer.get_future().get());
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(done.in_sequence().size(), std::size_t{submitters * per_thread});
    ASSERT_EQ(done.check_in_sequence(model), 0u);
    EXPECT_EQ(idx.size(), model.data.size());
    batch all;
    all.scan(min_key, max_key, max_scan_limit);
    EXPECT_EQ(model.check(all, idx.execute(all), "final"), 0u);
    EXPECT_NO_THROW(idx.verify());
  }
}

}  // namespace
