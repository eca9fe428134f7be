/// @file
/// tandem-bench: the main benchmark. Loads N keys, runs a YCSB-style mix of
/// M ops in batches of B through tandem::index::submit (a few batches in
/// flight), and optionally the same op sequence on absl::btree_map and
/// tbb::concurrent_map with the same thread count. Prints a table on stdout,
/// optionally CSV/JSON rows, and with --verify checks every answer of tandem
/// against an ordered model that replays the batches in order.
///
/// Timing is end to end: for tandem from the first submit to the last
/// result (host input to host output); all batches are generated up front,
/// outside the timed region. See `tandem-bench --help`.

#include "src/baselines.hpp"
#include "src/model.hpp"
#include "src/report.hpp"
#include "src/workload.hpp"

#include <tandem/tandem.hpp>

#include <CLI/CLI.hpp>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace tandem_bench;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// ---- command line -------------------------------------------------------------

/// Parses a count: decimal ("16777216", "16'777'216"), a power of two
/// ("2^24") or decimal exponent notation ("1e6"). Empty when malformed.
std::optional<std::uint64_t> parse_count(std::string s) {
  s.erase(std::remove_if(s.begin(), s.end(), [](char c) { return c == '\'' || c == '_'; }), s.end());
  if (s.empty()) return std::nullopt;
  auto digits = [](const std::string& t, std::uint64_t& out) {
    if (t.empty() || t.size() > 19 || t.find_first_not_of("0123456789") != std::string::npos) return false;
    out = std::stoull(t);
    return true;
  };
  std::uint64_t a = 0, b = 0;
  if (const auto caret = s.find('^'); caret != std::string::npos) {
    if (s.substr(0, caret) != "2" || !digits(s.substr(caret + 1), b) || b > 63) return std::nullopt;
    return std::uint64_t{1} << b;
  }
  if (const auto e = s.find_first_of("eE"); e != std::string::npos) {
    if (!digits(s.substr(0, e), a) || !digits(s.substr(e + 1), b) || b > 19) return std::nullopt;
    for (std::uint64_t i = 0; i < b; ++i) {
      if (a > UINT64_MAX / 10) return std::nullopt;
      a *= 10;
    }
    return a;
  }
  if (!digits(s, a)) return std::nullopt;
  return a;
}

/// "auto", or a number in [0, 1].
std::optional<double> parse_share(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !(v >= 0.0 && v <= 1.0)) return std::nullopt;
  return v;
}

std::string pow2_text(std::uint64_t n) {
  std::string s = std::to_string(n);
  if (n != 0 && (n & (n - 1)) == 0) {
    int k = 0;
    while ((std::uint64_t{1} << k) != n) ++k;
    s += " (2^" + std::to_string(k) + ")";
  }
  return s;
}

struct options {
  std::string keys = "2^22";
  std::string ops = "auto";
  std::string batch = "auto";
  std::string workload = "C";
  std::string dist = "uniform";
  std::size_t threads = 0;
  std::string device = "auto";
  std::string gpu_share = "auto";
  std::uint64_t seed = 42;
  std::string scan_length = "10000";
  std::string scan_order = "ordered";
  std::size_t inflight = 4;
  int fanout = 32;
  double leaf_fill = 0.75;
  bool verify = false;
  bool baselines = true;
  std::size_t absl_shards = 64;
  std::string csv;
  bool csv_append = false;
  std::string json;
};

workload_kind to_workload(const std::string& s) {
  if (s == "load") return workload_kind::load;
  if (s == "A") return workload_kind::a;
  if (s == "B") return workload_kind::b;
  if (s == "E") return workload_kind::e;
  if (s == "scan") return workload_kind::scan;
  return workload_kind::c;
}

key_dist to_dist(const std::string& s) {
  if (s == "zipf") return key_dist::zipf;
  if (s == "sequential") return key_dist::sequential;
  return key_dist::uniform;
}

/// Workload-dependent defaults of --ops and --batch.
std::uint64_t default_ops(workload_kind w) {
  switch (w) {
    case workload_kind::e:
      return std::uint64_t{1} << 21;
    case workload_kind::scan:
      return std::uint64_t{1} << 12;
    default:
      return std::uint64_t{1} << 23;
  }
}
std::uint64_t default_batch(workload_kind w) {
  switch (w) {
    case workload_kind::e:
      return std::uint64_t{1} << 18;
    case workload_kind::scan:
      return std::uint64_t{1} << 8;
    default:
      return std::uint64_t{1} << 20;
  }
}

// ---- results ------------------------------------------------------------------

struct system_result {
  std::string system;
  std::string description;
  double load_seconds = 0;
  std::uint64_t load_keys = 0;
  run_figures run;
  std::optional<tandem::stats> stats;  // tandem only
  tandem::stage_times stages;          // tandem only: summed over this run's batches
  std::uint64_t splits = 0;            // tandem only: during the run
};

/// Passes a fixed GPU share to the index through index::set_gpu_share when
/// this tandem has it (DESIGN's API); returns whether it did. "auto" needs no
/// call: the index starts in automatic mode.
template <class Index>
auto apply_gpu_share(Index& idx, double share, int) -> decltype(idx.set_gpu_share(share), bool()) {
  idx.set_gpu_share(share);
  return true;
}
template <class Index>
bool apply_gpu_share(Index&, double, long) {
  return false;
}

std::string mops(double ops, double seconds) {
  if (seconds <= 0) return "-";
  char buf[64];
  const double m = ops / seconds / 1e6;
  std::snprintf(buf, sizeof buf, m >= 1.0 || m == 0.0 ? "%.2f" : "%.3g", m);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  CLI::App app{
      "tandem-bench: YCSB-style throughput of tandem::index (batches through index::submit, end to end), "
      "optionally beside absl::btree_map and tbb::concurrent_map on the same ops and threads.\n"};
  app.get_formatter()->column_width(34);

  // A count in [lo, hi]; with `allow_auto`, also the word "auto".
  auto count_in = [](std::uint64_t lo, std::uint64_t hi, bool allow_auto) {
    return CLI::Validator(
        [=](std::string& s) -> std::string {
          if (allow_auto && s == "auto") return "";
          const std::optional<std::uint64_t> v = parse_count(s);
          if (!v)
            return "'" + s + "' is not " + (allow_auto ? "'auto' or " : "") + "a count (e.g. 16777216, 2^24, 1e6)";
          if (*v < lo || *v > hi) return s + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
          return "";
        },
        "");
  };
  app.add_option("--keys", opt.keys,
                 "Keys loaded before the run: N distinct uniformly random uint64 keys (--seed), 0 and UINT64_MAX "
                 "always among them. Accepts 16777216, 2^24, 1e6")
      ->check(count_in(2, std::uint64_t{1} << 40, false))
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--ops", opt.ops, "Ops run after the load. auto: 2^23 for load/C/A/B, 2^21 for E, 2^12 for scan")
      ->check(count_in(0, std::uint64_t{1} << 40, true))
      ->type_name("M|auto")
      ->capture_default_str();
  app.add_option("--batch", opt.batch, "Ops per batch. auto: 2^20 for load/C/A/B, 2^18 for E, 2^8 for scan")
      ->check(count_in(1, (std::uint64_t{1} << 32) - 2, true))
      ->type_name("B|auto")
      ->capture_default_str();
  app.add_option("--workload,-w", opt.workload,
                 "load: bulk load timed (keys/s), then M inserts of new keys; C: 100% get; A: 50% get / 50% put; "
                 "B: 95% get / 5% put; E: 95% ordered scans of 1..100 keys (uniform) / 5% inserts of new keys; "
                 "scan: long scans of --scan-length keys (also reports entries/s)")
      ->transform(CLI::IsMember({"load", "C", "A", "B", "E", "scan"}, CLI::ignore_case))
      ->type_name("W")
      ->capture_default_str();
  app.add_option("--dist,-d", opt.dist,
                 "Which loaded keys the ops use, by rank in key order: uniform; zipf (YCSB scrambled zipfian, "
                 "constant 0.99); sequential (walks the keys in order)")
      ->transform(CLI::IsMember({"uniform", "zipf", "sequential"}, CLI::ignore_case))
      ->type_name("D")
      ->capture_default_str();
  app.add_option("--threads,-t", opt.threads,
                 "tandem::config.threads, and the thread count of the baselines; 0: one per hardware thread")
      ->check(CLI::Range(std::size_t{0}, std::size_t{4096}))
      ->type_name("T")
      ->capture_default_str();
  app.add_option("--device", opt.device,
                 "tandem::config.device: auto, cpu or gpu (gpu fails, exit status 2, when no GPU is usable)")
      ->transform(CLI::IsMember({"auto", "cpu", "gpu"}, CLI::ignore_case))
      ->type_name("DEV")
      ->capture_default_str();
  app.add_option("--gpu-share", opt.gpu_share,
                 "Share of each batch's keys routed on the GPU: auto (the index balances GPU and CPU) or a "
                 "number in [0,1], passed to index::set_gpu_share before the load. Without a usable GPU routing "
                 "stays on the CPU. Reported in the table, CSV and JSON")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            return s == "auto" || parse_share(s) ? "" : "'" + s + "' is not 'auto' or a number in [0, 1]";
          },
          ""))
      ->type_name("S")
      ->capture_default_str();
  app.add_option("--seed", opt.seed, "Seed of keys, values and ops (same seed, same run)")
      ->type_name("SEED")
      ->capture_default_str();
  app.add_option("--scan-length", opt.scan_length, "Entries per scan of --workload scan (at most 2^24)")
      ->check(count_in(1, tandem::max_scan_limit, false))
      ->type_name("L")
      ->capture_default_str();
  app.add_option("--scan-order", opt.scan_order,
                 "Order of --workload scan's scans: ordered, or unordered (the BPA map path; same entries)")
      ->check(CLI::IsMember({"ordered", "unordered"}))
      ->type_name("ORDER")
      ->capture_default_str();
  app.add_option("--inflight", opt.inflight, "tandem: most batches submitted and not yet answered")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1024}))
      ->type_name("K")
      ->capture_default_str();
  app.add_option("--fanout", opt.fanout, "tandem::config.fanout (16, 32 or 64)")->type_name("F")->capture_default_str();
  app.add_option("--leaf-fill", opt.leaf_fill, "tandem::config.leaf_fill, in (0, 1]")
      ->type_name("X")
      ->capture_default_str();
  app.add_flag("--verify", opt.verify,
               "Check every answer of tandem (status, found, value, key, every scan entry) against an "
               "absl::btree_map model that replays the same batches in order (not timed), plus index::verify() "
               "and the final size; with --baselines also their final contents. Prints 'verify: <n> answers "
               "checked, <m> mismatches'; exit status 1 on any mismatch. Keeps all results in memory");
  app.add_flag("--baselines,!--no-baselines", opt.baselines,
               "(Default on; --no-baselines: tandem only.) Also run the same ops (same keys, batches, threads) on "
               "absl::btree_map (key-range shards, "
               "std::shared_mutex each: shared for reads, exclusive for writes) and tbb::concurrent_map; each "
               "batch is a tbb::parallel_for in a task_arena of --threads. They run a batch's ops concurrently: "
               "no batch-sequential semantics");
  app.add_option("--absl-shards", opt.absl_shards,
                 "Key-range shards of the absl baseline, a power of two (1: one map behind one shared_mutex)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            const auto v = parse_count(s);
            return v && *v >= 1 && *v <= 65536 && (*v & (*v - 1)) == 0 ? "" : "must be a power of two in [1, 65536]";
          },
          ""))
      ->type_name("S")
      ->capture_default_str();
  app.add_option("--csv", opt.csv, "Write one CSV row per system to FILE")->type_name("FILE");
  app.add_flag("--csv-append", opt.csv_append, "Append to the --csv file (header only when it is new or empty)");
  app.add_option("--json", opt.json, "Write a JSON array, one object per system, to FILE")->type_name("FILE");
  app.footer(
      "Output: a table on stdout (M ops/s and seconds of the timed run per system; bulk-load rate; tandem's "
      "per-stage seconds from tandem::stats, device and GPU share, leaves, height, splits); a progress bar on "
      "stderr when it is a terminal. tandem is timed from its first submit to its last result, with up to "
      "--inflight batches queued; the baselines from their first to their last batch. Batches are generated "
      "before timing.\nExit status: 0 ok, 1 a verify mismatch or a failed batch, 2 the index cannot be "
      "created (e.g. --device gpu without a GPU).");
  CLI11_PARSE(app, argc, argv);

  // ---- resolve the configuration -----------------------------------------------
  workload_spec spec;
  spec.kind = to_workload(opt.workload);
  spec.dist = to_dist(opt.dist);
  spec.keys = *parse_count(opt.keys);
  spec.ops = opt.ops == "auto" ? default_ops(spec.kind) : *parse_count(opt.ops);
  spec.batch = opt.batch == "auto" ? default_batch(spec.kind) : *parse_count(opt.batch);
  spec.seed = opt.seed;
  spec.scan_length = *parse_count(opt.scan_length);
  spec.order = opt.scan_order == "unordered" ? tandem::scan_order::unordered : tandem::scan_order::ordered;
  const std::size_t threads = opt.threads ? opt.threads : static_cast<std::size_t>(tbb::info::default_concurrency());
  // The requested GPU share (empty: auto).
  const std::optional<double> share = opt.gpu_share == "auto" ? std::nullopt : parse_share(opt.gpu_share);
  std::string share_text = "auto";
  if (share) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *share);
    share_text = buf;
  }
  const std::uint64_t nb = (spec.ops + spec.batch - 1) / spec.batch;

  const std::string host = host_name();
  std::printf("tandem-bench: tandem %s (CUDA layer: %s) on %s, %u CPUs (%s)\n", tandem::version(),
              tandem::built_with_cuda() ? "yes" : "no", host.c_str(), cpu_count(), cpu_model().c_str());
  std::printf("workload %s: %s; dist %s; keys %s; ops %s; batch %s (%llu batches, up to %zu in flight)\n",
              to_string(spec.kind), describe(spec.kind, spec.scan_length, spec.order).c_str(), to_string(spec.dist),
              pow2_text(spec.keys).c_str(), pow2_text(spec.ops).c_str(), pow2_text(spec.batch).c_str(),
              static_cast<unsigned long long>(nb), opt.inflight);
  std::printf("threads %zu; device %s; gpu-share %s; seed %llu%s\n", threads, opt.device.c_str(), share_text.c_str(),
              static_cast<unsigned long long>(spec.seed), opt.verify ? "; verify on" : "");
  std::fflush(stdout);

  // ---- the index (constructed first: a bad --device fails before any work) -------
  tandem::config cfg;
  cfg.threads = threads;
  cfg.fanout = opt.fanout;
  cfg.leaf_fill = opt.leaf_fill;
  cfg.device = opt.device == "gpu"   ? tandem::device_kind::gpu
               : opt.device == "cpu" ? tandem::device_kind::cpu
                                     : tandem::device_kind::automatic;
  std::unique_ptr<tandem::index> idx;
  try {
    idx = std::make_unique<tandem::index>(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: cannot create the index (--device %s): %s\n", opt.device.c_str(), e.what());
    return 2;
  }
  const bool share_applied = !share || apply_gpu_share(*idx, *share, 0);

  // ---- data, generated before any timing -----------------------------------------
  auto t_gen = clock_type::now();
  dataset ds;
  try {
    ds = make_dataset(spec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    return 1;
  }
  const double gen_seconds = seconds_since(t_gen);
  std::printf("setup (not timed): %zu keys, %llu ops in %zu batches generated in %.2f s\n", ds.load_keys.size(),
              static_cast<unsigned long long>(spec.ops), ds.batches.size(), gen_seconds);
  std::fflush(stdout);

  std::vector<system_result> results;
  int exit_code = 0;
  std::uint64_t answers_checked = 0, mismatches = 0;
  std::vector<std::string> verify_lines;
  std::unique_ptr<model> verifier;  // --verify: the model, after replaying every batch

  // ---- tandem ----------------------------------------------------------------------
  {
    system_result r;
    r.system = "tandem";
    r.description =
        "tandem::index, batches through index::submit, up to " + std::to_string(opt.inflight) + " in flight";
    r.load_keys = ds.load_keys.size();
    {
      progress_bar bar("tandem load", 1, "bulk load");
      const auto t0 = clock_type::now();
      idx->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
      r.load_seconds = seconds_since(t0);
    }
    const tandem::stats before = idx->stats();

    std::vector<tandem::batch> batches(ds.batches.size());
    tbb::parallel_for(std::size_t{0}, ds.batches.size(), [&](std::size_t b) {
      batches[b].reserve(ds.batches[b].size());
      for (const tandem::op& o : ds.batches[b]) batches[b].add(o);
    });
    std::vector<tandem::batch_result> kept;
    if (opt.verify) kept.reserve(batches.size());

    {
      progress_bar bar("tandem " + std::string(to_string(spec.kind)), batches.size());
      std::deque<std::future<tandem::batch_result>> inflight;
      std::size_t submitted = 0, done = 0;
      try {
        const auto t0 = clock_type::now();
        while (done < batches.size()) {
          while (submitted < batches.size() && inflight.size() < opt.inflight) {
            inflight.push_back(idx->submit(std::move(batches[submitted++])));
          }
          tandem::batch_result res = inflight.front().get();
          inflight.pop_front();
          std::uint64_t hits = 0;
          for (std::size_t i = 0; i < res.size(); ++i) hits += res.found(i);
          r.run.hits += hits;
          r.run.entries += res.scan_entries().size();
          r.run.ops += res.size();
          if (opt.verify) kept.push_back(std::move(res));
          ++done;
          bar.update(done);
        }
        r.run.seconds = seconds_since(t0);
      } catch (const std::exception& e) {
        bar.finish();
        std::fprintf(stderr, "tandem-bench: tandem batch %zu failed: %s\n", done, e.what());
        return 1;
      }
    }
    const tandem::stats after = idx->stats();
    r.stats = after;
    r.stages = after.total;
    r.stages.validate -= before.total.validate;
    r.stages.route -= before.total.route;
    r.stages.order -= before.total.order;
    r.stages.read -= before.total.read;
    r.stages.leaf -= before.total.leaf;
    r.stages.sync -= before.total.sync;
    r.stages.complete -= before.total.complete;
    r.splits = after.splits - before.splits;

    if (opt.verify) {
      try {
        idx->verify();
        verify_lines.push_back("verify: tandem index::verify() found no broken invariant");
      } catch (const std::exception& e) {
        verify_lines.push_back(std::string("verify: tandem index::verify() failed: ") + e.what());
        exit_code = 1;
      }
    }
    const std::size_t tandem_size = idx->size();
    idx.reset();
    results.push_back(std::move(r));

    // ---- --verify: replay on the model (not timed) -----------------------------------
    if (opt.verify) {
      verifier = std::make_unique<model>();
      verifier->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
      progress_bar bar("verify", ds.batches.size());
      std::uint64_t report_left = 10;
      for (std::size_t b = 0; b < ds.batches.size(); ++b) {
        mismatches += verifier->check(ds.batches[b], kept[b], b, report_left);
        answers_checked += ds.batches[b].size();
        kept[b] = tandem::batch_result();  // free as we go
        bar.update(b + 1);
      }
      if (tandem_size != verifier->size()) {
        verify_lines.push_back("verify: tandem holds " + std::to_string(tandem_size) + " keys, the model " +
                               std::to_string(verifier->size()));
        exit_code = 1;
      } else {
        verify_lines.push_back("verify: tandem size " + std::to_string(tandem_size) + " equals the model's");
      }
    }
  }

  // ---- baselines ---------------------------------------------------------------------
  if (opt.baselines) {
    std::vector<std::unique_ptr<baseline>> systems;
    systems.push_back(make_absl_baseline(threads, opt.absl_shards));
    systems.push_back(make_tbb_baseline(threads));
    for (auto& sys : systems) {
      system_result r;
      r.system = sys->name();
      r.description = sys->description();
      r.load_keys = ds.load_keys.size();
      {
        progress_bar bar(r.system + " load", 1, "bulk load");
        r.load_seconds = sys->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
      }
      try {
        progress_bar bar(r.system + " " + to_string(spec.kind), ds.batches.size());
        r.run = sys->run(ds.batches, [&](std::size_t done, std::size_t) { bar.update(done); });
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tandem-bench: %s failed: %s\n", r.system.c_str(), e.what());
        return 1;
      }
      if (verifier) {
        const std::string diff = verifier->compare_contents(*sys);
        if (diff.empty()) {
          verify_lines.push_back("verify: " + r.system + " final contents equal the model's (" +
                                 std::to_string(sys->size()) + " keys)");
        } else {
          verify_lines.push_back("verify: " + r.system + " final contents differ from the model's: " + diff);
          exit_code = 1;
        }
      }
      sys.reset();
      results.push_back(std::move(r));
    }
  }

  // ---- table -------------------------------------------------------------------------
  const bool scans = spec.kind == workload_kind::scan || spec.kind == workload_kind::e;
  std::printf("\n%-8s %18s %10s %18s %10s %8s", "system", "throughput", "seconds", "bulk load", "load s", "found");
  if (scans) std::printf(" %20s", "scan entries");
  std::printf("\n");
  for (const system_result& r : results) {
    const std::string tput = mops(static_cast<double>(r.run.ops), r.run.seconds) + " M ops/s";
    const std::string load = mops(static_cast<double>(r.load_keys), r.load_seconds) + " M keys/s";
    const double found = r.run.ops ? 100.0 * static_cast<double>(r.run.hits) / static_cast<double>(r.run.ops) : 0.0;
    std::printf("%-8s %18s %10.3f %18s %10.3f %7.1f%%", r.system.c_str(), tput.c_str(), r.run.seconds, load.c_str(),
                r.load_seconds, found);
    if (scans) {
      std::printf(" %20s", (mops(static_cast<double>(r.run.entries), r.run.seconds) + " M entries/s").c_str());
    }
    std::printf("\n");
  }
  const system_result& t = results.front();
  const tandem::stats& ts = *t.stats;
  const double stage_sum = t.stages.sum();
  std::printf("\ntandem stages, summed over the run's %llu batches (stages of different batches may overlap):\n",
              static_cast<unsigned long long>(nb));
  const std::pair<const char*, double> stage_rows[] = {{"validate", t.stages.validate}, {"route", t.stages.route},
                                                       {"order", t.stages.order},       {"read", t.stages.read},
                                                       {"leaf", t.stages.leaf},         {"sync", t.stages.sync},
                                                       {"complete", t.stages.complete}};
  for (const auto& [name, sec] : stage_rows) {
    std::printf("  %-9s %9.3f s %6.1f%%\n", name, sec, stage_sum > 0 ? 100.0 * sec / stage_sum : 0.0);
  }
  std::printf("  %-9s %9.3f s %6.1f%%   (timed wall %.3f s)\n", "sum", stage_sum, stage_sum > 0 ? 100.0 : 0.0,
              t.run.seconds);
  std::printf(
      "tandem: device %s; gpu share %.2f (requested %s%s); %llu leaves, "
      "inner height %d, %llu splits in the run, %llu keys\n",
      ts.device.c_str(), ts.gpu_share, share_text.c_str(),
      share_applied ? "" : ", not applied: this index has no set_gpu_share", static_cast<unsigned long long>(ts.leaves),
      ts.inner_height, static_cast<unsigned long long>(t.splits), static_cast<unsigned long long>(ts.keys));
  for (const system_result& r : results) std::printf("  %-7s %s\n", r.system.c_str(), r.description.c_str());
  if (results.size() > 1) {
    std::printf("note: the baselines run each batch's ops concurrently, in no order: no batch-sequential semantics.\n");
  }

  // ---- CSV / JSON ----------------------------------------------------------------------
  std::vector<json> rows;
  const std::string cpu = cpu_model();
  for (const system_result& r : results) {
    const bool is_tandem = r.stats.has_value();
    json j;
    j["system"] = r.system;
    j["workload"] = to_string(spec.kind);
    j["keys"] = spec.keys;
    j["ops"] = spec.ops;
    j["batch"] = spec.batch;
    j["batches"] = nb;
    j["dist"] = to_string(spec.dist);
    j["threads"] = threads;
    j["device"] = opt.device;
    j["gpu_share"] = share ? json(*share) : json("auto");  // requested
    j["gpu_share_applied"] = is_tandem ? json(share_applied) : json(nullptr);
    j["ops_per_s"] = r.run.seconds > 0 ? static_cast<double>(r.run.ops) / r.run.seconds : 0.0;
    j["seconds"] = r.run.seconds;
    j["load_keys_per_s"] = r.load_seconds > 0 ? static_cast<double>(r.load_keys) / r.load_seconds : 0.0;
    j["load_seconds"] = r.load_seconds;
    j["hits"] = r.run.hits;
    j["scan_entries"] = r.run.entries;
    j["entries_per_s"] = r.run.seconds > 0 ? static_cast<double>(r.run.entries) / r.run.seconds : 0.0;
    auto stage = [&](double v) { return is_tandem ? json(v) : json(nullptr); };
    j["validate_s"] = stage(r.stages.validate);
    j["route_s"] = stage(r.stages.route);
    j["order_s"] = stage(r.stages.order);
    j["read_s"] = stage(r.stages.read);
    j["leaf_s"] = stage(r.stages.leaf);
    j["sync_s"] = stage(r.stages.sync);
    j["complete_s"] = stage(r.stages.complete);
    j["device_used"] = is_tandem ? json(r.stats->device) : json("cpu");
    j["gpu_share_used"] = is_tandem ? json(r.stats->gpu_share) : json(nullptr);  // of the last batch
    j["leaves"] = is_tandem ? json(r.stats->leaves) : json(nullptr);
    j["inner_height"] = is_tandem ? json(r.stats->inner_height) : json(nullptr);
    j["splits"] = is_tandem ? json(r.splits) : json(nullptr);
    j["seed"] = spec.seed;
    j["scan_length"] = spec.kind == workload_kind::scan ? json(spec.scan_length) : json(nullptr);
    j["inflight"] = is_tandem ? json(opt.inflight) : json(nullptr);
    j["description"] = r.description;
    j["host"] = host;
    j["cpus"] = cpu_count();
    j["cpu_model"] = cpu;
    j["tandem_version"] = tandem::version();
    rows.push_back(std::move(j));
  }
  try {
    if (!opt.csv.empty()) write_csv(opt.csv, rows, opt.csv_append);
    if (!opt.json.empty()) write_json(opt.json, rows);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    exit_code = 1;
  }

  if (opt.verify) {
    std::printf("\n");
    for (const std::string& line : verify_lines) std::printf("%s\n", line.c_str());
    std::printf("verify: %llu answers checked, %llu mismatches\n", static_cast<unsigned long long>(answers_checked),
                static_cast<unsigned long long>(mismatches));
    if (mismatches != 0) exit_code = 1;
  }
  return exit_code;
}
