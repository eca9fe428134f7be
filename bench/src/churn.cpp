#include "churn.hpp"

#include "baselines.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

namespace tandem_bench {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double mb(std::size_t bytes) { return static_cast<double>(bytes) / 1e6; }

/// Mean of the rounds [first, last) of `mops`.
double mean(const std::vector<double>& mops, std::size_t first, std::size_t last) {
  double sum = 0;
  for (std::size_t r = first; r < last; ++r) sum += mops[r];
  return last > first ? sum / static_cast<double>(last - first) : 0;
}

}  // namespace

std::size_t huge_page_bytes() {
  std::ifstream rollup("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(rollup, line)) {
    if (line.rfind("AnonHugePages:", 0) == 0) return std::stoull(line.substr(14)) * 1024;
  }
  return 0;
}

std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

std::vector<json> run_churn(const options& opt, const tandem::config& cfg, tandem::index& idx, std::size_t rss_empty) {
  const std::uint64_t window = *parse_count(opt.keys);
  const std::uint64_t rounds = *parse_count(opt.rounds);
  const std::uint64_t slide = std::max<std::uint64_t>(1, window / 16);
  const bool ordered = opt.churn_keys == "ordered";
  auto key_of = [&](std::uint64_t i) { return ordered ? i : spread_key(i ^ opt.seed); };
  std::mt19937_64 rng(opt.seed);
  std::printf("churn: a sliding window of %s keys (%s), %llu rounds; each round one batch: %s inserts at the "
              "right end, %s erases of the oldest, %s gets of keys in the window, %s lower_bounds, 1 count over "
              "the window\n",
              pow2_text(window).c_str(), ordered ? "time-ordered keys: key i is i" : "random keys: key i is a hash of i",
              static_cast<unsigned long long>(rounds), pow2_text(slide).c_str(), pow2_text(slide).c_str(),
              pow2_text(slide).c_str(), pow2_text(std::max<std::uint64_t>(1, slide / 16)).c_str());

  // The first window, loaded.
  {
    std::vector<tandem::key_type> keys(window);
    std::vector<tandem::value_type> values(window);
    for (std::uint64_t i = 0; i < window; ++i) {
      keys[i] = key_of(i);
      values[i] = i;
    }
    idx.load(keys.data(), values.data(), window);
  }
  const std::size_t rss_loaded = resident_bytes();
  const tandem::stats loaded = idx.stats();
  std::printf("loaded: %llu leaves, leaf bytes %.1f MB, resident %.1f MB (empty index %.1f MB)\n",
              static_cast<unsigned long long>(loaded.leaves), mb(loaded.leaf_bytes), mb(rss_loaded), mb(rss_empty));

  auto round_batch = [&](std::uint64_t r, std::vector<tandem::op>* plain) {
    const std::uint64_t first = r * slide;  // oldest key of the window before the round
    tandem::batch b;
    b.reserve(3 * slide + slide / 16 + 1);
    auto add = [&](const tandem::op& o) {
      b.add(o);
      if (plain) plain->push_back(o);
    };
    for (std::uint64_t i = 0; i < slide; ++i) add({key_of(first + window + i), first + window + i, 0, tandem::op_type::insert});
    for (std::uint64_t i = 0; i < slide; ++i) add({key_of(first + i), 0, 0, tandem::op_type::erase});
    for (std::uint64_t i = 0; i < slide; ++i) add({key_of(first + slide + rng() % window), 0, 0, tandem::op_type::get});
    for (std::uint64_t i = 0; i < std::max<std::uint64_t>(1, slide / 16); ++i) {
      add({key_of(first + slide + rng() % window), 0, 0, tandem::op_type::lower_bound});
    }
    if (ordered) {
      add({first + slide, first + slide + window - 1, 0, tandem::op_type::count});
    } else {
      add({0, tandem::max_key, 0, tandem::op_type::count});
    }
    return b;
  };

  std::vector<json> rows;
  std::vector<double> mops(rounds);
  std::size_t rss_peak = rss_loaded;
  std::uint64_t peak_leaf_bytes = loaded.leaf_bytes, peak_leaves = loaded.leaves;
  const std::uint64_t every = std::max<std::uint64_t>(1, rounds / 16);
  std::printf("%8s %10s %10s %10s %12s %12s %12s\n", "round", "M ops/s", "leaves", "dead", "leaf MB", "resident MB",
              "keys");
  {
    progress_bar bar("tandem churn", rounds, "rounds");
    for (std::uint64_t r = 0; r < rounds; ++r) {
      tandem::batch b = round_batch(r, nullptr);
      const std::size_t n = b.size();
      const auto t0 = clock_type::now();
      const tandem::batch_result res = idx.execute(std::move(b));
      const double s = seconds_since(t0);
      mops[r] = static_cast<double>(n) / s / 1e6;
      const tandem::stats st = idx.stats();
      const std::size_t rss = resident_bytes();
      rss_peak = std::max(rss_peak, rss);
      peak_leaf_bytes = std::max<std::uint64_t>(peak_leaf_bytes, st.leaf_bytes);
      peak_leaves = std::max<std::uint64_t>(peak_leaves, st.leaves);
      if (r % every == 0 || r + 1 == rounds) {
        std::printf("%8llu %10.2f %10llu %10llu %12.1f %12.1f %12llu\n", static_cast<unsigned long long>(r), mops[r],
                    static_cast<unsigned long long>(st.leaves), static_cast<unsigned long long>(st.dead_leaves),
                    mb(st.leaf_bytes), mb(rss), static_cast<unsigned long long>(st.keys));
        std::fflush(stdout);
      }
      json row;
      row["system"] = "tandem";
      row["workload"] = "churn";
      row["keys"] = window;
      row["round"] = r;
      row["ops"] = n;
      row["ops_per_s"] = static_cast<double>(n) / s;
      row["leaves"] = st.leaves;
      row["dead_leaves"] = st.dead_leaves;
      row["leaf_bytes"] = st.leaf_bytes;
      row["resident_bytes"] = rss;
      row["key_order"] = ordered ? "time-ordered" : "random";
      row["threads"] = cfg.threads;
      row["device_used"] = st.device;
      rows.push_back(std::move(row));
      bar.update(r + 1);
    }
  }
  const tandem::stats end = idx.stats();
  // The loaded keys leave the window in the first 16 rounds; from then on
  // every leaf was made by the churn. First and last: up to 100 rounds each.
  const std::size_t settled = std::min<std::uint64_t>(16, rounds);
  const std::size_t tail = std::min<std::uint64_t>(100, (rounds - settled) / 2);
  const double loaded_mops = mean(mops, 0, settled);
  const double first_mops = mean(mops, settled, settled + tail), last_mops = mean(mops, rounds - tail, rounds);

  // A fresh load of the last window, for comparison.
  std::uint64_t fresh_leaves = 0, fresh_bytes = 0;
  {
    std::vector<tandem::key_type> keys(window);
    std::vector<tandem::value_type> values(window);
    for (std::uint64_t i = 0; i < window; ++i) {
      keys[i] = key_of(rounds * slide + i);
      values[i] = i;
    }
    tandem::index fresh(cfg);
    fresh.load(keys.data(), values.data(), window);
    fresh_leaves = fresh.stats().leaves;
    fresh_bytes = fresh.stats().leaf_bytes;
  }
  std::printf("tandem churn: %llu rounds; M ops/s: rounds 0-%zu (loaded keys still in the window) %.2f; then "
              "the first %zu rounds %.2f, the last %zu rounds %.2f (last/first %.2f); merges %llu, splits %llu\n",
              static_cast<unsigned long long>(rounds), settled - 1, loaded_mops, tail, first_mops, tail, last_mops,
              first_mops > 0 ? last_mops / first_mops : 0.0, static_cast<unsigned long long>(end.merges),
              static_cast<unsigned long long>(end.splits));
  std::printf("tandem churn memory: leaves %llu (peak %llu), leaf bytes %.1f MB (peak %.1f MB); a fresh load of the "
              "last window: %llu leaves, %.1f MB: leaves %.2fx, leaf bytes %.2fx (peak %.2fx, %.2fx); resident "
              "peak %.1f MB\n",
              static_cast<unsigned long long>(end.leaves), static_cast<unsigned long long>(peak_leaves),
              mb(end.leaf_bytes), mb(peak_leaf_bytes), static_cast<unsigned long long>(fresh_leaves), mb(fresh_bytes),
              static_cast<double>(end.leaves) / static_cast<double>(fresh_leaves),
              static_cast<double>(end.leaf_bytes) / static_cast<double>(fresh_bytes),
              static_cast<double>(peak_leaves) / static_cast<double>(fresh_leaves),
              static_cast<double>(peak_leaf_bytes) / static_cast<double>(fresh_bytes), mb(rss_peak));

  // absl: the same rounds (without the counts' order: its ops of a batch run
  // in parallel), timed the same way.
  if (opt.baselines &&
      std::find(opt.skip_baselines.begin(), opt.skip_baselines.end(), "absl") == opt.skip_baselines.end()) {
    auto absl = make_absl_baseline(cfg.threads, opt.absl_shards);
    {
      std::vector<tandem::key_type> keys(window);
      std::vector<tandem::value_type> values(window);
      for (std::uint64_t i = 0; i < window; ++i) {
        keys[i] = key_of(i);
        values[i] = i;
      }
      (void)absl->load(keys.data(), values.data(), window);
    }
    rng.seed(opt.seed);
    std::vector<double> absl_mops(rounds);
    progress_bar bar("absl churn", rounds, "rounds");
    for (std::uint64_t r = 0; r < rounds; ++r) {
      std::vector<std::vector<tandem::op>> one(1);
      (void)round_batch(r, &one[0]);
      const run_figures f = absl->run(one, {});
      absl_mops[r] = static_cast<double>(f.ops) / f.seconds / 1e6;
      bar.update(r + 1);
    }
    bar.finish();
    const double a_first = mean(absl_mops, settled, settled + tail), a_last = mean(absl_mops, rounds - tail, rounds);
    std::printf("absl churn (%s): M ops/s the first %zu rounds after 0-15 %.2f, the last %zu %.2f; tandem/absl "
                "over all rounds %.2fx\n",
                absl->description().c_str(), tail, a_first, tail, a_last,
                mean(mops, 0, rounds) / mean(absl_mops, 0, rounds));
  }

  // The window erased whole, then compact().
  {
    progress_bar bar("tandem erase-all", 16, "batches");
    const std::uint64_t first = rounds * slide;
    for (std::uint64_t i = 0; i < window; i += slide) {
      tandem::batch b;
      for (std::uint64_t k = i; k < std::min(window, i + slide); ++k) b.erase(key_of(first + k));
      (void)idx.execute(std::move(b));
      bar.update(i / slide + 1);
    }
  }
  const tandem::stats erased = idx.stats();
  const std::size_t rss_erased = resident_bytes();
  const auto t0 = clock_type::now();
  idx.compact();
  const double compact_seconds = seconds_since(t0);
  const tandem::stats compacted = idx.stats();
  const std::size_t rss_compacted = resident_bytes();
  const std::size_t huge_compacted = huge_page_bytes();
  std::printf("erase-all: %llu keys left, %llu leaves, %llu dead, leaf bytes %.1f MB, resident %.1f MB; compact() in "
              "%.3f s: %llu leaves, leaf bytes %zu, resident %.1f MB (%.1f MB of it in huge pages) = %.2fx the "
              "empty index's %.1f MB\n",
              static_cast<unsigned long long>(erased.keys), static_cast<unsigned long long>(erased.leaves),
              static_cast<unsigned long long>(erased.dead_leaves), mb(erased.leaf_bytes), mb(rss_erased),
              compact_seconds, static_cast<unsigned long long>(compacted.leaves), compacted.leaf_bytes, mb(rss_compacted),
              mb(huge_compacted),
              static_cast<double>(rss_compacted) / static_cast<double>(rss_empty), mb(rss_empty));
  return rows;
}

}  // namespace tandem_bench
