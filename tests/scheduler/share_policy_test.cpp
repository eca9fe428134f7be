// The automatic split, driven by injected routing rates: it converges to the
// share that balances both sides and follows a change of rates.
#include <tandem/scheduler/share_policy.hpp>

#include <gtest/gtest.h>

#include <cmath>

namespace {

using tandem::scheduler::share_policy;

/// One simulated batch of n keys at the current share with the given true
/// rates (keys/s); returns the wall time (the slower side).
double run_batch(share_policy& p, double gpu_rate, double cpu_rate, std::size_t n = 1u << 20) {
  const auto g = static_cast<std::size_t>(std::llround(p.share() * static_cast<double>(n)));
  const std::size_t c = n - g;
  const double tg = static_cast<double>(g) / gpu_rate, tc = static_cast<double>(c) / cpu_rate;
  p.observe(g, tg, c, tc);
  return std::max(tg, tc);
}

TEST(SharePolicy, StartsAtTheInitialShare) {
  share_policy p(0.3);
  EXPECT_DOUBLE_EQ(p.share(), 0.3);
  p.observe(0, 0, 1000, 1.0);  // only the CPU measured: no basis to move yet
  EXPECT_DOUBLE_EQ(p.share(), 0.3);
}

TEST(SharePolicy, ConvergesToTheBalancingShare) {
  for (const auto& [g, c] : {std::pair{4e9, 1e9}, std::pair{1e9, 1e9}, std::pair{2e8, 1.8e9}, std::pair{3e9, 1e8}}) {
    share_policy p;
    for (int i = 0; i < 8; ++i) run_batch(p, g, c);
    EXPECT_NEAR(p.share(), g / (g + c), 1e-6) << "gpu " << g << " cpu " << c;
    // At the balancing share the batch takes n / (g + c), both sides busy
    // (up to one key of rounding).
    const double ideal = static_cast<double>(1u << 20) / (g + c);
    EXPECT_NEAR(run_batch(p, g, c), ideal, 1.0 / std::min(g, c));
  }
}

TEST(SharePolicy, FollowsAChangeOfRatesWithinAFewBatches) {
  share_policy p;
  for (int i = 0; i < 10; ++i) run_batch(p, 3e9, 1e9);
  EXPECT_NEAR(p.share(), 0.75, 1e-6);
  // The GPU slows down to the CPU's rate (say, another tenant).
  int batches = 0;
  while (std::abs(p.share() - 0.5) > 0.02 && batches < 50) {
    run_batch(p, 1e9, 1e9);
    ++batches;
  }
  EXPECT_LE(batches, 6);
  EXPECT_NEAR(p.share(), 0.5, 0.02);
}

TEST(SharePolicy, AGpuThatOutrunsTheLeafPhaseTakesWholeBatches) {
  share_policy p;
  for (int i = 0; i < 4; ++i) run_batch(p, 3e9, 1e9);
  EXPECT_NEAR(p.share(), 0.75, 1e-6);
  p.observe_leaf(1u << 20, (1u << 20) / 5e8);  // the first leaf phase: not kept
  EXPECT_NEAR(p.share(), 0.75, 1e-6);
  p.observe_leaf(1u << 20, (1u << 20) / 5e8);  // leaf phase at 0.5 G ops/s: the GPU route hides behind it
  EXPECT_DOUBLE_EQ(p.share(), 1.0);
  for (int i = 0; i < 4; ++i) run_batch(p, 3e9, 1e9);
  EXPECT_DOUBLE_EQ(p.share(), 1.0);
  // Just below the leaf phase's rate (0.45 of 0.5 G/s) the batches stay whole.
  for (int i = 0; i < 8; ++i) run_batch(p, 4.5e8, 1e9);
  EXPECT_DOUBLE_EQ(p.share(), 1.0);
  // The GPU slows well below the leaf phase's rate: back to balancing.
  for (int i = 0; i < 16; ++i) run_batch(p, 2e8, 1e9);
  EXPECT_NEAR(p.share(), 2e8 / (2e8 + 1e9), 1e-3);
}

// A first batch that pays first-use costs (here a GPU route 20x slower than
// the next ones) does not hold the share down: each side's first
// measurement is not kept.
TEST(SharePolicy, AColdFirstBatchIsNotKept) {
  share_policy p;
  run_batch(p, 3e9 / 20, 1e9);
  EXPECT_DOUBLE_EQ(p.share(), 0.5) << "nothing kept yet";
  EXPECT_EQ(p.gpu_rate(), 0.0);
  p.observe_leaf(1u << 20, (1u << 20) / 1e9);  // the leaf phase's first batch: not kept either
  EXPECT_EQ(p.leaf_rate(), 0.0);
  run_batch(p, 3e9, 1e9);
  EXPECT_NEAR(p.gpu_rate(), 3e9, 1e-3 * 3e9);
  EXPECT_NEAR(p.share(), 0.75, 1e-6);
  p.observe_leaf(1u << 20, (1u << 20) / 1e9);
  EXPECT_DOUBLE_EQ(p.share(), 1.0) << "the GPU outruns the leaf phase from the second batch on";
}

TEST(SharePolicy, ResetForgetsRates) {
  share_policy p(0.5);
  for (int i = 0; i < 5; ++i) run_batch(p, 9e9, 1e9);
  EXPECT_GT(p.share(), 0.85);
  p.reset();
  EXPECT_DOUBLE_EQ(p.share(), 0.5);
  EXPECT_EQ(p.gpu_rate(), 0.0);
}

}  // namespace
