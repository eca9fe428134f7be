// Careless and hostile callers: callbacks that throw, block or call back
// into the index, batches changed after submit, share changes from many
// threads during a run, and submits racing the destructor. Each works or
// fails with a clear error; none deadlocks (ctest's timeout would catch it)
// or loses an accepted batch.
#include <tandem/tandem.hpp>

#include "support/batches.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using namespace tandem;
using namespace std::chrono_literals;

config small_config() {
  config cfg;
  cfg.threads = 2;
  return cfg;
}

TEST(HostileCallers, CallbackThatBlocksHoldsUpLaterBatchesOnly) {
  tandem::index idx(small_config());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  batch first;
  first.put(1, 10);
  std::atomic<bool> first_done{false};
  idx.submit(first, [&, released](batch_result r, std::exception_ptr e) {
    EXPECT_EQ(e, nullptr);
    EXPECT_EQ(r.size(), 1u);
    released.wait_for(1s);  // blocks the dispatcher for up to a second
    first_done = true;
  });
  batch second;
  second.get(1);
  std::future<batch_result> later = idx.submit(second);
  // submit, stats and size do not wait for the blocked callback.
  EXPECT_EQ(later.wait_for(50ms), std::future_status::timeout);
  (void)idx.stats();
  release.set_value();
  const batch_result r = later.get();
  EXPECT_TRUE(first_done.load());
  EXPECT_TRUE(r.found(0));
  EXPECT_EQ(r.value(0), 10u);
}

TEST(HostileCallers, CallbackThatBlocksForASecondDelaysButLosesNothing) {
  tandem::index idx(small_config());
  const auto t0 = std::chrono::steady_clock::now();
  batch first;
  first.put(5, 50);
  idx.submit(first, [](batch_result, std::exception_ptr) { std::this_thread::sleep_for(1s); });
  std::vector<std::future<batch_result>> more;
  for (key_type k = 0; k < 20; ++k) {
    batch b;
    b.put(100 + k, k).get(5);
    more.push_back(idx.submit(std::move(b)));
  }
  for (auto& f : more) {
    const batch_result r = f.get();
    EXPECT_TRUE(r.found(1));
    EXPECT_EQ(r.value(1), 50u);
  }
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(idx.size(), 21u);
}

TEST(HostileCallers, CallbackMaySubmitToTheSameIndexButNotWaitOnIt) {
  tandem::index idx(small_config());
  std::promise<batch_result> inner;
  std::promise<std::string> refused_execute, refused_load, refused_verify;
  batch outer;
  outer.put(1, 11);
  idx.submit(outer, [&](batch_result, std::exception_ptr) {
    // Queued behind this batch: fine, nothing waits.
    batch b;
    b.get(1).put(2, 22);
    idx.submit(std::move(b), [&](batch_result r, std::exception_ptr) { inner.set_value(std::move(r)); });
    // Each of these would wait for this very callback: refused, not a deadlock.
    try {
      batch g;
      g.get(1);
      (void)idx.execute(std::move(g));
      refused_execute.set_value("");
    } catch (const tandem::error& e) {
      refused_execute.set_value(e.what());
    }
    try {
      idx.load(std::vector<entry>{{3, 33}});
      refused_load.set_value("");
    } catch (const tandem::error& e) {
      refused_load.set_value(e.what());
    }
    try {
      idx.verify();
      refused_verify.set_value("");
    } catch (const tandem::error& e) {
      refused_verify.set_value(e.what());
    }
  });
  const batch_result r = inner.get_future().get();
  EXPECT_TRUE(r.found(0));
  EXPECT_EQ(r.value(0), 11u);
  const std::string ex = refused_execute.get_future().get();
  const std::string ld = refused_load.get_future().get();
  const std::string vf = refused_verify.get_future().get();
  EXPECT_NE(ex.find("execute called from a callback"), std::string::npos) << ex;
  EXPECT_NE(ld.find("load called from a callback"), std::string::npos) << ld;
  EXPECT_NE(vf.find("verify called from a callback"), std::string::npos) << vf;
  batch g;
  g.get(1).get(2).get(3);
  const batch_result all = idx.execute(g);
  EXPECT_TRUE(all.found(0));
  EXPECT_EQ(all.value(1), 22u);
  EXPECT_FALSE(all.found(2)) << "the refused load changed nothing";
  EXPECT_EQ(idx.stats().callback_errors, 0u);
  EXPECT_NO_THROW(idx.verify());
}

TEST(HostileCallers, CallbackThatThrowsEveryTimeNeverStopsTheIndex) {
  tandem::index idx(small_config());
  for (key_type k = 0; k < 50; ++k) {
    batch b;
    b.insert(k, k);
    idx.submit(b, [k](batch_result, std::exception_ptr) {
      if (k % 2 == 0) throw std::bad_alloc();
      throw 42;  // not even an exception type (the last one, k = 49)
    });
  }
  batch all;
  all.count(0, max_key);
  EXPECT_EQ(idx.execute(all).value(0), 50u);
  const tandem::stats s = idx.stats();
  EXPECT_EQ(s.callback_errors, 50u);
  EXPECT_EQ(s.last_callback_error, "unknown exception");
}

TEST(HostileCallers, BatchChangedAfterSubmitIsTheSubmittedCopy) {
  // submit takes the batch by value: an lvalue is copied, so later changes
  // to the caller's batch (or its destruction) do not reach the index.
  static_assert(std::is_same_v<decltype(&tandem::index::execute), batch_result (tandem::index::*)(batch)>);
  tandem::index idx(small_config());
  auto b = std::make_unique<batch>();
  b->put(7, 70).get(7);
  std::future<batch_result> f = idx.submit(*b);
  b->clear();
  b->erase(7);
  b.reset();
  const batch_result r = f.get();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(r.found(1));
  EXPECT_EQ(r.value(1), 70u);
  EXPECT_EQ(idx.size(), 1u);
}

TEST(HostileCallers, ShareChangesFromManyThreadsDuringARun) {
  tandem::index idx(small_config());
  test::key_source keys(test::key_pattern::narrow, 5'000, 77);
  std::atomic<bool> stop{false};
  std::vector<std::thread> changers;
  for (int t = 0; t < 4; ++t) {
    changers.emplace_back([&, t] {
      std::uint64_t i = static_cast<std::uint64_t>(t);
      while (!stop.load()) {
        if (++i % 5 == 0) {
          idx.set_gpu_share(auto_share);
        } else {
          idx.set_gpu_share(static_cast<double>(i % 11) / 10.0);
        }
        EXPECT_THROW(idx.set_gpu_share(1.5), std::invalid_argument);
      }
    });
  }
  test::index_model model;
  for (int i = 0; i < 40; ++i) {
    const batch b = test::random_batch(keys, 1 + keys.rng()() % 8'000);
    ASSERT_EQ(model.check(b, idx.execute(b), "batch #" + std::to_string(i)), 0u);
  }
  stop = true;
  for (auto& t : changers) t.join();
  EXPECT_NO_THROW(idx.verify());
}

// Destruction while other threads submit: calls that start once the
// destructor has begun are refused with tandem::error; every batch accepted
// before is run and answered. A gate batch's callback keeps the destructor
// from returning until every submitter has seen a refusal and stopped, so no
// call starts after the index is gone (that is the caller's duty).
TEST(HostileCallers, SubmitsRacingTheDestructorAreRunOrRefused) {
  constexpr int submitters = 4;
  std::atomic<int> stopped{0};
  std::vector<std::vector<std::future<batch_result>>> accepted(submitters);
  std::vector<std::string> refusals(submitters);
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  {
    tandem::index idx(small_config());
    batch gate;
    gate.put(0, 0);
    idx.submit(gate, [&](batch_result, std::exception_ptr) {
      while (stopped.load() < submitters) std::this_thread::yield();
    });
    for (int t = 0; t < submitters; ++t) {
      threads.emplace_back([&, t] {
        while (!go.load()) std::this_thread::yield();
        for (key_type k = 0;; ++k) {
          batch b;
          const key_type key = 1'000'000 * static_cast<key_type>(t + 1) + k;
          b.put(key, k).get(key);
          try {
            accepted[static_cast<std::size_t>(t)].push_back(idx.submit(std::move(b)));
          } catch (const tandem::error& e) {
            refusals[static_cast<std::size_t>(t)] = e.what();
            break;
          }
          if (k % 64 == 63) std::this_thread::sleep_for(100us);
        }
        stopped.fetch_add(1);
      });
    }
    go = true;
    std::this_thread::sleep_for(20ms);
  }  // the destructor starts while the submitters run
  for (auto& t : threads) t.join();
  for (int t = 0; t < submitters; ++t) {
    EXPECT_NE(refusals[static_cast<std::size_t>(t)].find("after the index's destruction began"), std::string::npos)
        << refusals[static_cast<std::size_t>(t)];
    for (auto& f : accepted[static_cast<std::size_t>(t)]) {
      ASSERT_EQ(f.wait_for(0s), std::future_status::ready) << "an accepted batch was left unanswered";
      const batch_result r = f.get();
      ASSERT_EQ(r.size(), 2u);
      EXPECT_FALSE(r.found(0));
      EXPECT_TRUE(r.found(1));
    }
  }
}

}  // namespace
