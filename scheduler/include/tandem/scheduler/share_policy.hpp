#pragma once
/// @file
/// `share_policy`: the automatic CPU/GPU split of routing (DESIGN, "Split
/// policy"). It keeps moving averages of the GPU's and the CPU's routing
/// rates (keys per second, end to end for each side) and picks the GPU share
/// s so that both sides finish together: s * n / gpu_rate = (1 - s) * n /
/// cpu_rate, i.e. s = gpu_rate / (gpu_rate + cpu_rate).
///
/// But routing is pipelined: batch k+1 is routed while batch k runs its leaf
/// phase on the CPU workers. So when the GPU alone routes a batch at least
/// as fast as the workers finish one (gpu_rate >= leaf_rate, the rate of
/// the leaf phase and answers, fed by `observe_leaf`), its route hides
/// behind the leaf phase and every key goes to the GPU (s = 1): CPU routing
/// would only take cores from the leaf phase. (Measured on the H200, 2^27
/// keys, batches of 2^24 gets: share 1 gave 278 M ops/s, the balancing share
/// 0.91 gave 198.) Only a GPU slower than that gets the balancing share, and
/// once at 1 the share stays there until the GPU falls below
/// `keep_whole_batches` of the leaf phase's rate: near equality a split
/// gains little and costs a merge of the two sides' routes (a GPU share in
/// key ranges, under config.max_gpu_bytes, routes faster per key the
/// smaller it is, which without this margin flipped the share between 1
/// and a split from batch to batch).
///
/// Until a side has been measured its rate is unknown and the share stays at
/// `initial_share`. A side that got no keys in a batch keeps its old rate.
/// The first measurement of each side (GPU, CPU, leaf phase) is not kept:
/// it pays first-use costs (CUDA module loading, pools and pages touched
/// for the first time) and would hold the share away from where it
/// belongs for several batches (on the H200, after 4 warm-up batches of
/// 2^24 gets, the timed batches still averaged a share of 0.89 where 1 was
/// right).
/// Not synchronised: the index guards it with a mutex.

#include <cstddef>

namespace tandem::scheduler {

class share_policy {
 public:
  /// @param smoothing weight of the newest measurement in the moving average, in (0, 1]
  explicit share_policy(double initial_share = 0.5, double smoothing = 0.5) noexcept
      : share_(initial_share), initial_(initial_share), smoothing_(smoothing) {}

  /// @brief Feeds one batch's measurement: keys routed and seconds spent on
  ///        each side (a side with no keys is ignored).
  void observe(std::size_t gpu_keys, double gpu_seconds, std::size_t cpu_keys, double cpu_seconds) noexcept {
    update(gpu_, gpu_keys, gpu_seconds);
    update(cpu_, cpu_keys, cpu_seconds);
    choose();
  }

  /// @brief Feeds one batch's leaf phase (with its answers): ops and seconds.
  void observe_leaf(std::size_t ops, double seconds) noexcept {
    update(leaf_, ops, seconds);
    choose();
  }

  /// @return the share of the next batch's keys to route on the GPU, in [0, 1].
  [[nodiscard]] double share() const noexcept { return share_; }
  [[nodiscard]] double leaf_rate() const noexcept { return leaf_.rate; }
  [[nodiscard]] double gpu_rate() const noexcept { return gpu_.rate; }
  [[nodiscard]] double cpu_rate() const noexcept { return cpu_.rate; }

  void reset() noexcept {
    share_ = initial_;
    gpu_ = cpu_ = leaf_ = {};
  }

 private:
  struct side {
    double rate = 0;       ///< moving average of the kept measurements (0: none yet)
    bool warmed = false;   ///< the first measurement was seen (and dropped)
  };

  void update(side& s, std::size_t keys, double seconds) const noexcept {
    if (keys == 0 || !(seconds > 0)) return;
    if (!s.warmed) {
      s.warmed = true;
      return;
    }
    const double r = static_cast<double>(keys) / seconds;
    s.rate = s.rate > 0 ? smoothing_ * r + (1 - smoothing_) * s.rate : r;
  }

  /// A share of 1 is kept while the GPU routes at least this share of the
  /// leaf phase's rate.
  static constexpr double keep_whole_batches = 0.8;

  void choose() noexcept {
    const double g = gpu_.rate, c = cpu_.rate, l = leaf_.rate;
    if (g > 0 && l > 0 && (g >= l || (share_ == 1.0 && g >= keep_whole_batches * l))) {
      share_ = 1.0;
    } else if (g > 0 && c > 0) {
      share_ = g / (g + c);
    }
  }

  double share_;
  double initial_;
  double smoothing_;
  side gpu_, cpu_, leaf_;
};

}  // namespace tandem::scheduler
