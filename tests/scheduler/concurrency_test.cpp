// Many threads submitting interleaved batches: each batch's answers equal the
// model replayed in the index's execution order (batch_result::sequence), and
// the final state equals the model.
#include <tandem/tandem.hpp>

#include "support/batches.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

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
  struct done_batch {
    batch b;
    batch_result r;
  };
  std::vector<done_batch> done;
  std::mutex m;
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
      for (auto& [b, f] : mine) {
        batch_result r = f.get();
        std::lock_guard<std::mutex> lock(m);
        done.push_back({std::move(b), std::move(r)});
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(done.size(), std::size_t{submitters * per_thread});
  std::sort(done.begin(), done.end(), [](const done_batch& a, const done_batch& b) { return a.r.sequence() < b.r.sequence(); });
  test::index_model model;
  for (std::size_t i = 0; i < done.size(); ++i) {
    ASSERT_EQ(done[i].r.sequence(), i) << "sequence numbers are dense";
    ASSERT_EQ(model.check(done[i].b, done[i].r, "batch #" + std::to_string(i)), 0u);
  }
  batch all;
  all.scan(min_key, max_key, max_scan_limit);
  EXPECT_EQ(model.check(all, idx.execute(all), "final"), 0u);
  EXPECT_NO_THROW(idx.verify());
}

INSTANTIATE_TEST_SUITE_P(Arenas, Concurrency, ::testing::Values(1, 2, 4));

}  // namespace
