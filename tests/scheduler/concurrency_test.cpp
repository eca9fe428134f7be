// Many threads submitting interleaved batches: each batch's answers equal the
// model replayed in the index's execution order (batch_result::sequence), and
// the final state equals the model.
#include <tandem/tandem.hpp>

#include "support/batches.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

namespace {

using namespace tandem;

class Concurrency : public ::testing::TestWithParam<std::size_t> {};

TEST_P(Concurrency, EightSubmittersMatchQueueOrder) {
  config cfg;
  cfg.threads = GetParam();
  tandem::index idx(cfg);
  constexpr int submitters = 8;
  constexpr int per_thread = 25;
  test::answered_batches done;
  std::vector<std::thread> threads;
  for (int t = 0; t < submitters; ++t) {
    threads.emplace_back([&, t] {
      // Shared narrow key space: batches of different threads collide.
      test::key_source keys(test::key_pattern::narrow, 4000, 1000 + static_cast<std::uint64_t>(t));
      std::vector<std::pair<batch, std::future<batch_result>>> mine;
      for (int i = 0; i < per_thread; ++i) {
        batch b = test::random_batch(keys, 1 + keys.rng()() % 3000);
        if (i % 2) {
          auto f = idx.submit(b);
          mine.emplace_back(std::move(b), std::move(f));
        } else {
          auto p = std::make_shared<std::promise<batch_result>>();
          auto f = p->get_future();
          idx.submit(b, [p](batch_result r, std::exception_ptr) { p->set_value(std::move(r)); });
          mine.emplace_back(std::move(b), std::move(f));
        }
      }
      for (auto& [b, f] : mine) done.add(std::move(b), f.get());
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(done.in_sequence().size(), std::size_t{submitters * per_thread});
  test::index_model model;
  ASSERT_EQ(done.check_in_sequence(model), 0u);
  batch all;
  all.scan(min_key, max_key, max_scan_limit);
  EXPECT_EQ(model.check(all, idx.execute(all), "final"), 0u);
  EXPECT_NO_THROW(idx.verify());
}

// Batches of gets answered directly run as reader tasks beside each other
// and beside the dispatcher, which takes up the batches behind them; a
// batch that writes waits for them. Eight submitters: most send gets-only
// batches of 65 .. ~1000 keys (direct, not small; present, absent and edge
// keys), the rest writes to the same keys (puts, inserts, erases) that
// split leaves. Every answer equals the model replayed in sequence()
// order: no get sees a write queued after it or misses one queued before.
// Every batch of half the submitters comes with a callback (such
// batches stay on the dispatcher): the callbacks run in queue order.
// Without group commit every gets-only batch is answered directly; with it
// (the default) folds of gets-only batches are.
TEST_P(Concurrency, ReadersBesideEachOtherAndBetweenWrites) {
  for (const bool fold : {false, true}) {
    SCOPED_TRACE(fold ? "group commit" : "no group commit");
    config cfg;
    cfg.threads = GetParam();
    if (!fold) cfg.group_commit_ops = 0;
    tandem::index idx(cfg);
    test::key_source keys(test::key_pattern::narrow, 200'000, 77);
    test::index_model model;
    std::vector<entry> initial = keys.pairs(100'000);
    initial.push_back({min_key, 1});
    initial.push_back({max_key, 2});
    model.load(idx, initial);
    const std::size_t direct_most = 4 * idx.stats().leaves;  // gets a direct batch may hold
    ASSERT_GT(direct_most, std::size_t{200});
    constexpr int submitters = 8;
    constexpr int per_thread = 30;
    test::answered_batches done;
    std::mutex callbacks_mutex;
    std::vector<std::uint64_t> callback_order;  // sequence numbers, as the callbacks ran
    std::vector<std::thread> threads;
    for (int t = 0; t < submitters; ++t) {
      threads.emplace_back([&, t] {
        test::key_source mine(test::key_pattern::narrow, 200'000, 500 + static_cast<std::uint64_t>(t));
        auto& rng = mine.rng();
        std::vector<std::pair<batch, std::future<batch_result>>> pending;
        auto collect = [&](std::pair<batch, std::future<batch_result>>& p) {
          done.add(std::move(p.first), p.second.get());
        };
        for (int i = 0; i < per_thread; ++i) {
          batch b;
          if (rng() % 4 == 0) {
            test::batch_mix writes;
            writes.get = writes.lower_bound = writes.scan = writes.count = 0;
            b = test::random_batch(mine, 1 + rng() % 3000, writes);
          } else {
            const std::size_t n = 65 + rng() % (std::min<std::size_t>(direct_most, 1000) - 65);
            for (std::size_t k = 0; k < n; ++k) {
              const std::uint64_t r = rng();
              b.get(r % 32 == 0 ? min_key : r % 32 == 1 ? max_key : r % 32 == 2 ? r : mine());
            }
          }
          if (t % 2 == 1) {
            auto answer = std::make_shared<std::promise<batch_result>>();
            std::future<batch_result> f = answer->get_future();
            idx.submit(b, [&, answer](batch_result r, std::exception_ptr) {
              {
                std::lock_guard<std::mutex> lock(callbacks_mutex);
                callback_order.push_back(r.sequence());
              }
              answer->set_value(std::move(r));
            });
            pending.emplace_back(b, std::move(f));
          } else {
            pending.emplace_back(b, idx.submit(b));
          }
          if (pending.size() == 4) {  // a few in flight per submitter
            collect(pending.front());
            pending.erase(pending.begin());
          }
        }
        for (auto& p : pending) collect(p);
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(done.in_sequence().size(), std::size_t{submitters * per_thread});
    ASSERT_EQ(done.check_in_sequence(model), 0u);
    ASSERT_FALSE(callback_order.empty());
    EXPECT_TRUE(std::is_sorted(callback_order.begin(), callback_order.end())) << "callbacks in queue order";
    const tandem::stats s = idx.stats();
    if (!fold) {
      EXPECT_GT(s.direct_batches, 0u);
    }
    EXPECT_GT(s.splits, 0u);
    EXPECT_EQ(idx.size(), model.data.size());
    batch all;
    all.scan(min_key, max_key, max_scan_limit);
    EXPECT_EQ(model.check(all, idx.execute(all), "final"), 0u);
    EXPECT_NO_THROW(idx.verify());
  }
}

// Reader tasks run with 8 threads and more.
INSTANTIATE_TEST_SUITE_P(Arenas, Concurrency, ::testing::Values(1, 2, 4, 8));

// Group commit: tiny batches queued together run as one. Submitters pile
// batches up while the first one's callback holds the dispatcher, so folding
// is certain; every batch still gets the answers of running the batches one
// after another in sequence() order, with its own columns, scans, errors
// (numbered in its own ops) and sequence number.
TEST(GroupCommit, FoldedTinyBatchesAnswerAsIfRunOneByOne) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    config cfg;
    cfg.threads = 2;
    cfg.group_commit_ops = 64 + seed * 100;  // folds stop at the bound, then go on
    tandem::index idx(cfg);
    test::key_source keys(test::key_pattern::narrow, 600, seed);
    std::vector<entry> initial;
    for (int i = 0; i < 400; ++i) initial.push_back({keys(), keys.rng()()});
    initial.push_back({min_key, 1});
    initial.push_back({max_key, 2});
    idx.load(initial);
    test::index_model model;
    for (const entry& e : initial) model.data[e.key] = e.value;  // the later pair wins

    test::answered_batches done;
    std::promise<void> all_queued;
    std::shared_future<void> queued = all_queued.get_future().share();
    batch first;
    first.get(min_key);
    std::promise<batch_result> first_result;
    idx.submit(first, [&, queued](batch_result r, std::exception_ptr) {
      queued.wait();  // the others pile up in the queue meanwhile
      first_result.set_value(std::move(r));
    });
    constexpr int submitters = 4;
    constexpr int per_thread = 40;
    std::vector<std::thread> threads;
    std::atomic<int> submitted{0};
    for (int t = 0; t < submitters; ++t) {
      threads.emplace_back([&, t] {
        test::key_source mine(test::key_pattern::narrow, 600, seed * 100 + static_cast<std::uint64_t>(t));
        test::batch_mix mix;
        mix.invalid_per_mille = 50;
        std::vector<std::pair<batch, std::future<batch_result>>> pending;
        for (int i = 0; i < per_thread; ++i) {
          batch b = test::random_batch(mine, 1 + mine.rng()() % 40, mix);
          pending.emplace_back(b, idx.submit(b));
          submitted.fetch_add(1);
        }
        for (auto& [b, f] : pending) done.add(std::move(b), f.get());
      });
    }
    while (submitted.load() < submitters * per_thread) std::this_thread::yield();
    all_queued.set_value();
    for (auto& t : threads) t.join();
    done.add(first, first_result.get_future().get());
    ASSERT_EQ(done.in_sequence().size(), std::size_t{submitters * per_thread + 1});
    ASSERT_EQ(done.check_in_sequence(model), 0u) << "seed " << seed;
    for (const test::answered_batches::answered& d : done.in_sequence()) {
      // Columns and scan entries are this batch's own.
      std::size_t entries = 0;
      for (std::size_t k = 0; k < d.r.size(); ++k) {
        ASSERT_EQ(d.r.values()[k], d.r.value(k));
        ASSERT_EQ(d.r.found_flags()[k] != 0, d.r.found(k));
        ASSERT_EQ(d.r.statuses()[k], d.r.status(k));
        ASSERT_EQ(d.r.keys()[k], d.r.key(k));
        if (d.r.status(k) == op_status::invalid) {
          EXPECT_EQ(d.r.error(k).rfind("op " + std::to_string(k) + " ", 0), 0u) << d.r.error(k);
        }
        const entry_span sc = d.r.scan(k);
        if (!sc.empty()) {
          ASSERT_EQ(sc.data(), d.r.scan_entries().data() + entries) << "scan entries in batch order";
        }
        entries += sc.size();
      }
      ASSERT_EQ(d.r.scan_entries().size(), entries);
    }
    const tandem::stats st = idx.stats();
    EXPECT_GT(st.grouped_batches, std::uint64_t{submitters * per_thread / 2}) << "queued batches were folded";
    EXPECT_EQ(st.batches, std::uint64_t{submitters * per_thread + 1});
    batch all;
    all.scan(min_key, max_key, max_scan_limit);
    EXPECT_EQ(model.check(all, idx.execute(all), "final"), 0u);
    EXPECT_NO_THROW(idx.verify());
  }
}

// Results of one folded run share columns: each stays valid alone, after the
// others and the index are gone.
// config.max_batch_output_bytes caps each batch's scan output, also when
// group commit folds batches: a scan is never refused for another batch's
// entries, and a batch over the cap on its own is refused as it would be
// alone.
TEST(GroupCommit, TheOutputCapStaysPerBatch) {
  config cfg;
  cfg.threads = 2;
  cfg.max_batch_output_bytes = 1000 * sizeof(entry);
  cfg.caller_runs = false;  // the get batches queue (to fold) rather than run beside the held dispatcher
  tandem::index idx(cfg);
  std::vector<entry> pairs;
  for (std::uint64_t k = 0; k < 5000; ++k) pairs.push_back({k * 10, k});
  pairs.push_back({max_key, 9});
  idx.load(pairs);
  std::promise<void> go;
  std::shared_future<void> wait = go.get_future().share();
  batch hold;
  hold.get(7);
  idx.submit(hold, [wait](batch_result, std::exception_ptr) { wait.wait(); });
  std::vector<std::future<batch_result>> scans, gets;
  for (std::uint64_t i = 0; i < 10; ++i) {
    batch b;
    b.scan(i * 10, max_key, 600, i % 2 ? scan_order::unordered : scan_order::ordered);
    scans.push_back(idx.submit(std::move(b)));
    batch g;
    g.get(i * 10).get(max_key);
    gets.push_back(idx.submit(std::move(g)));
  }
  batch over;  // 1200 entries alone: the second scan is refused
  over.scan(0, max_key, 600).scan(0, max_key, 600);
  std::future<batch_result> over_result = idx.submit(std::move(over));
  go.set_value();
  for (std::uint64_t i = 0; i < 10; ++i) {
    const batch_result r = scans[i].get();
    ASSERT_EQ(r.status(0), op_status::ok) << "batch " << i << ": " << r.error(0);
    const auto entries = r.scan(0);
    ASSERT_EQ(entries.size(), 600u);
    std::vector<key_type> got;
    for (const entry& e : entries) got.push_back(e.key);
    std::sort(got.begin(), got.end());
    for (std::size_t e = 0; e < got.size(); ++e) ASSERT_EQ(got[e], (i + e) * 10);
    const batch_result g = gets[i].get();
    EXPECT_TRUE(g.found(0));
    EXPECT_EQ(g.value(1), 9u);
  }
  const batch_result r = over_result.get();
  EXPECT_EQ(r.status(0), op_status::ok);
  EXPECT_EQ(r.scan(0).size(), 600u);
  EXPECT_EQ(r.status(1), op_status::output_limit);
  EXPECT_GT(idx.stats().grouped_batches, 0u) << "scan batches still fold with batches of gets";
}

// config.group_commit_output_bytes bounds the scan output (by the scans'
// limits) of a fold: batches fold while their limits fit it together, a
// batch whose limits alone exceed it runs alone, and 0 keeps every batch
// with scans out of folds. Answers are the same either way.
TEST(GroupCommit, FoldsStopAtTheOutputBound) {
  for (const std::size_t bound : {std::size_t{100} * sizeof(entry), std::size_t{0}}) {
    config cfg;
    cfg.threads = 2;
    cfg.group_commit_output_bytes = bound;
    cfg.caller_runs = false;  // the get batches queue (to fold) rather than run beside the held dispatcher
    tandem::index idx(cfg);
    std::vector<entry> pairs;
    for (std::uint64_t k = 0; k < 1000; ++k) pairs.push_back({k * 10, k});
    pairs.push_back({max_key, 9});
    idx.load(pairs);
    std::promise<void> entered;
    std::promise<void> go;
    std::shared_future<void> release = go.get_future().share();
    batch hold;
    hold.get(0);
    idx.submit(hold, [&entered, release](batch_result, std::exception_ptr) {
      entered.set_value();
      release.wait();
    });
    entered.get_future().wait();
    batch a;  // gets: fold with b (bound 100) or with nothing but gets (bound 0)
    a.get(10).get(max_key);
    batch b;  // 60 entries at most
    b.scan(0, max_key, 60);
    batch c;  // 50 more: past 100 with b, so c starts the next fold
    c.scan(500, max_key, 50, scan_order::unordered);
    batch d;  // 200 alone: runs alone
    d.scan(0, max_key, 200).get(20);
    batch e;
    e.get(30);
    std::vector<std::future<batch_result>> f;
    for (batch* x : {&a, &b, &c, &d, &e}) f.push_back(idx.submit(std::move(*x)));
    go.set_value();
    std::vector<batch_result> r;
    for (auto& x : f) r.push_back(x.get());
    EXPECT_EQ(idx.stats().grouped_batches, bound == 0 ? 0u : 2u) << "bound " << bound;
    EXPECT_EQ(r[0].value(0), 1u);
    EXPECT_EQ(r[0].value(1), 9u);
    ASSERT_EQ(r[1].scan(0).size(), 60u);
    for (std::size_t i = 0; i < 60; ++i) EXPECT_EQ(r[1].scan(0)[i].key, i * 10);
    ASSERT_EQ(r[2].scan(0).size(), 50u);
    std::vector<key_type> got;
    for (const entry& x : r[2].scan(0)) got.push_back(x.key);
    std::sort(got.begin(), got.end());
    for (std::size_t i = 0; i < 50; ++i) EXPECT_EQ(got[i], 500 + i * 10);
    ASSERT_EQ(r[3].scan(0).size(), 200u);
    EXPECT_EQ(r[3].scan(0)[199].key, 1990u);
    EXPECT_EQ(r[3].value(1), 2u);
    EXPECT_EQ(r[4].value(0), 3u);
    for (std::size_t i = 1; i < r.size(); ++i) EXPECT_EQ(r[i].sequence(), r[i - 1].sequence() + 1);
  }
}

TEST(GroupCommit, ResultsOutliveTheirSiblingsAndTheIndex) {
  std::vector<batch_result> kept;
  {
    config cfg;
    cfg.threads = 1;
    tandem::index idx(cfg);
    std::promise<void> go;
    std::shared_future<void> wait = go.get_future().share();
    batch hold;
    hold.put(7, 70);
    idx.submit(hold, [wait](batch_result, std::exception_ptr) { wait.wait(); });
    std::vector<std::future<batch_result>> fs;
    for (std::uint64_t i = 0; i < 20; ++i) {
      batch b;
      b.put(100 + i, i).get(7).scan(100, 100 + i, 100);
      fs.push_back(idx.submit(std::move(b)));
    }
    go.set_value();
    for (auto& f : fs) kept.push_back(f.get());
    EXPECT_GT(idx.stats().grouped_batches, 0u);
  }
  for (std::size_t i = kept.size(); i-- > 0;) {
    const batch_result& r = kept[i];
    ASSERT_EQ(r.size(), 3u);
    EXPECT_FALSE(r.found(0));
    EXPECT_EQ(r.value(1), 70u);
    ASSERT_EQ(r.scan(2).size(), i + 1);
    for (std::size_t e = 0; e <= i; ++e) EXPECT_EQ(r.scan(2)[e].key, 100 + e);
    kept.pop_back();  // siblings go first
  }
}

// A large batch queued behind the one being routed is validated on the
// dispatcher while that route runs (dispatch.cpp). A callback holds the
// dispatcher until eight batches of 200 .. 2200 ops (writes, range ops, a
// tenth of them invalid, edge keys) are queued, so each is validated ahead;
// every answer equals the model in queue order and each invalid op says why.
TEST(Pipeline, BatchesValidatedAheadAnswerInQueueOrder) {
  for (const std::uint64_t seed : {1u, 2u, 3u, 4u}) {
    config cfg;
    cfg.threads = 2;
    cfg.group_commit_ops = 0;  // none folded: each is a large batch of its own
    cfg.direct_get_ops = 0;    // every batch routed
    tandem::index idx(cfg);
    test::key_source keys(test::key_pattern::narrow, 50'000, seed);
    test::index_model model;
    std::vector<entry> initial = keys.pairs(20'000);
    initial.push_back({min_key, 1});
    initial.push_back({max_key, 2});
    model.load(idx, initial);
    test::batch_mix mix;
    mix.invalid_per_mille = 100;
    std::promise<void> all_queued;
    std::shared_future<void> queued = all_queued.get_future().share();
    const batch first = test::random_batch(keys, 300, mix);
    std::promise<batch_result> first_result;
    idx.submit(first, [&, queued](batch_result r, std::exception_ptr) {
      queued.wait();  // the others pile up in the queue meanwhile
      first_result.set_value(std::move(r));
    });
    std::vector<std::pair<batch, std::future<batch_result>>> pending;
    for (int i = 0; i < 8; ++i) {
      batch b = test::random_batch(keys, 200 + keys.rng()() % 2000, mix);
      b.get(min_key);
      b.put(max_key, seed + static_cast<std::uint64_t>(i));
      b.get(max_key);
      pending.emplace_back(b, idx.submit(b));
    }
    all_queued.set_value();
    test::answered_batches done;
    done.add(first, first_result.get_future().get());
    for (auto& [b, f] : pending) done.add(std::move(b), f.get());
    ASSERT_EQ(done.check_in_sequence(model), 0u) << "seed " << seed;
    EXPECT_EQ(idx.size(), model.data.size());
    EXPECT_NO_THROW(idx.verify());
  }
}

}  // namespace
