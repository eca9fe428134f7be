// Findings of the differential fuzz target (tests/fuzz/index_fuzz.cpp), each
// reproduced here with the default leaf geometry so that every preset runs
// it, not only the fuzz build.
#include <tandem/tandem.hpp>

#include <gtest/gtest.h>

#include <exception>
#include <future>
#include <vector>

namespace {

using namespace tandem;

// op_result::scan_offset is the scan's first entry in the result's own
// scan_entries(), also for a batch that ran folded with the ones queued
// before it (group commit) and so shares their answer columns. The fuzz
// target found it counting from the start of the shared columns: the second
// batch's first scan said 3 (the first batch's three entries) instead of 0.
TEST(FuzzFindings, ScanOffsetOfAFoldedBatchCountsInItsOwnEntries) {
  config cfg;
  cfg.threads = 1;
  tandem::index idx(cfg);
  idx.load(std::vector<entry>{{1002, 1}, {1006, 2}, {1010, 3}});

  // The dispatcher waits in this callback until both batches are queued, so
  // that it takes them up together and folds them.
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
  batch first;
  first.scan(1000, 1020, 100).get(1006);
  batch second;
  second.get(0).scan(1000, max_key / 2, 2).scan(1004, 1010, 5);
  std::future<batch_result> f1 = idx.submit(first);
  std::future<batch_result> f2 = idx.submit(second);
  go.set_value();
  const batch_result r1 = f1.get();
  const batch_result r2 = f2.get();
  ASSERT_EQ(idx.stats().grouped_batches, 2u) << "the two batches ran folded";

  ASSERT_EQ(r1.scan_entries().size(), 3u);
  EXPECT_EQ(r1[0].scan_offset, 0u);
  ASSERT_EQ(r2.scan_entries().size(), 4u);  // 2 + 2
  EXPECT_EQ(r2[1].scan_offset, 0u);
  EXPECT_EQ(r2[2].scan_offset, 2u);
  for (std::size_t i : {1u, 2u}) {
    EXPECT_EQ(r2.scan_entries().data() + r2[i].scan_offset, r2.scan(i).data()) << "scan op " << i;
  }
  EXPECT_EQ(r2[0].scan_offset, 0u) << "no scan";
  EXPECT_EQ(r2.scan(2)[0].key, 1006u);
}

}  // namespace
