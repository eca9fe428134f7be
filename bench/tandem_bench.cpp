/// @file
/// tandem-bench: the main benchmark. Loads N keys, runs a YCSB-style mix of
/// M ops in batches of B through tandem::index::submit (a few batches in
/// flight), and optionally the same op sequence on absl::btree_map,
/// tbb::concurrent_map (same thread count) and, for workload C, a GPU sorted
/// array searched by thrust::lower_bound. Prints a table on stdout,
/// optionally CSV/JSON rows, and with --verify checks every answer of tandem
/// against an ordered model that replays the batches in order.
///
/// --sweep share runs the same batches at GPU shares 0, 0.1, ..., 1 and auto
/// on one loaded index (index::set_gpu_share between points; workloads that
/// insert new keys, load and E, reload the index before each point so every
/// point starts from the same contents), prints one row per point with the
/// stage times, and with --plot draws throughput against share (gnuplot).
///
/// Timing is end to end: for tandem from the first submit to the last
/// result (host input to host output); all batches are generated up front,
/// outside the timed region. See `tandem-bench --help`.

#include "src/baselines.hpp"
#include "src/gpu_baseline.hpp"
#include "src/model.hpp"
#include "src/plot.hpp"
#include "src/report.hpp"
#include "src/tandem_run.hpp"
#include "src/workload.hpp"

#include <tandem/device/device_query.hpp>
#include <tandem/tandem.hpp>

#include <CLI/CLI.hpp>
#include <oneapi/tbb/info.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
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
  std::string gpu_order = "partial";
  double leaf_fill = 0.75;
  bool verify = false;
  bool baselines = true;
  std::size_t absl_shards = 64;
  std::string csv;
  bool csv_append = false;
  std::string json;
  std::string sweep;
  std::string warmup = "auto";
  std::string plot;
  std::string plot_csv;
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
  std::string device_used = "cpu";
  std::optional<tandem_figures> tandem;  // tandem only
  json requested_share;                  // tandem only: a number or "auto"
  bool sweep_point = false;              // a point of --sweep share
};

std::string mops(double ops, double seconds) {
  if (seconds <= 0) return "-";
  char buf[64];
  const double m = ops / seconds / 1e6;
  std::snprintf(buf, sizeof buf, m >= 1.0 || m == 0.0 ? "%.2f" : "%.3g", m);
  return buf;
}

std::string share_string(const std::optional<double>& s) {
  if (!s) return "auto";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", *s);
  return buf;
}

/// The systems table: throughput, bulk load, hits (and scan entries).
void print_systems_table(const std::vector<const system_result*>& rows, bool scans) {
  std::printf("\n%-14s %18s %10s %18s %10s %8s", "system", "throughput", "seconds", "bulk load", "load s", "found");
  if (scans) std::printf(" %20s", "scan entries");
  std::printf("\n");
  for (const system_result* r : rows) {
    const std::string tput = mops(static_cast<double>(r->run.ops), r->run.seconds) + " M ops/s";
    const std::string load = mops(static_cast<double>(r->load_keys), r->load_seconds) + " M keys/s";
    const double found =
        r->run.ops ? 100.0 * static_cast<double>(r->run.hits) / static_cast<double>(r->run.ops) : 0.0;
    std::printf("%-14s %18s %10.3f %18s %10.3f %7.1f%%", r->system.c_str(), tput.c_str(), r->run.seconds,
                load.c_str(), r->load_seconds, found);
    if (scans) {
      std::printf(" %20s", (mops(static_cast<double>(r->run.entries), r->run.seconds) + " M entries/s").c_str());
    }
    std::printf("\n");
  }
}

/// tandem's stage table of one run, with the GPU route fields under route.
void print_stage_table(const tandem_figures& t, std::uint64_t nb, double wall) {
  const double stage_sum = t.stages.sum();
  std::printf("\ntandem stages, summed over the run's %llu batches (stages of different batches may overlap):\n",
              static_cast<unsigned long long>(nb));
  auto row = [&](const char* name, double sec) {
    std::printf("  %-9s %9.3f s %6.1f%%\n", name, sec, stage_sum > 0 ? 100.0 * sec / stage_sum : 0.0);
  };
  row("validate", t.stages.validate);
  row("route", t.stages.route);
  const std::pair<const char*, double> gpu_rows[] = {{"gpu_upload", t.route.gpu_upload},
                                                     {"gpu_sort", t.route.gpu_sort},
                                                     {"gpu_kernel", t.route.gpu_kernel},
                                                     {"gpu_download", t.route.gpu_download}};
  for (const auto& [name, sec] : gpu_rows) {
    std::printf("    %-12s %8.3f s           GPU event time inside route (chunks overlap)\n", name, sec);
  }
  std::printf("    %-12s %8.3f s           wall, GPU side of route (%llu keys)\n", "gpu_route", t.route.gpu_route,
              static_cast<unsigned long long>(t.gpu_keys));
  std::printf("    %-12s %8.3f s           wall, CPU side of route, beside the GPU side (%llu keys)\n", "cpu_route",
              t.route.cpu_route, static_cast<unsigned long long>(t.cpu_keys));
  row("order", t.stages.order);
  row("read", t.stages.read);
  row("leaf", t.stages.leaf);
  row("sync", t.stages.sync);
  row("complete", t.stages.complete);
  std::printf("  %-9s %9.3f s %6.1f%%   (timed wall %.3f s)\n", "sum", stage_sum, stage_sum > 0 ? 100.0 : 0.0, wall);
}

/// One line on the GPU side of a tandem run: share used, policy, failures.
std::string gpu_line(const tandem_figures& t, const std::string& requested) {
  const tandem::stats& s = t.after;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "gpu share used %.3f over the run (%llu of %llu keys routed on the GPU; last batch %.3f; "
                "requested %s)",
                t.share_used(), static_cast<unsigned long long>(t.gpu_keys),
                static_cast<unsigned long long>(t.gpu_keys + t.cpu_keys), t.last_share, requested.c_str());
  std::string line = buf;
  if (s.gpu_rate > 0 || s.cpu_rate > 0) {
    std::snprintf(buf, sizeof buf, "; routing rates (moving averages): GPU %.1f, CPU %.1f M keys/s",
                  s.gpu_rate / 1e6, s.cpu_rate / 1e6);
    line += buf;
  }
  if (!s.gpu_group_sizes.empty()) line += "; GPU threads per query by level " + s.gpu_group_sizes;
  if (t.gpu_failures != 0 || s.gpu_degraded) {
    line += "\nWARNING: " + std::to_string(t.gpu_failures) + " GPU route failures in the run (re-routed on the CPU)" +
            (s.gpu_degraded ? "; the GPU is marked degraded" : "");
  }
  return line;
}

/// The --sweep share table: one row per point, stages and GPU route fields.
void print_sweep_table(const std::vector<const system_result*>& points) {
  struct column {
    const char* name;
    double (*get)(const tandem_figures&);
  };
  static const column columns[] = {
      {"validate", [](const tandem_figures& t) { return t.stages.validate; }},
      {"route", [](const tandem_figures& t) { return t.stages.route; }},
      {"order", [](const tandem_figures& t) { return t.stages.order; }},
      {"read", [](const tandem_figures& t) { return t.stages.read; }},
      {"leaf", [](const tandem_figures& t) { return t.stages.leaf; }},
      {"sync", [](const tandem_figures& t) { return t.stages.sync; }},
      {"complete", [](const tandem_figures& t) { return t.stages.complete; }},
      {"gpu_upload", [](const tandem_figures& t) { return t.route.gpu_upload; }},
      {"gpu_sort", [](const tandem_figures& t) { return t.route.gpu_sort; }},
      {"gpu_kernel", [](const tandem_figures& t) { return t.route.gpu_kernel; }},
      {"gpu_download", [](const tandem_figures& t) { return t.route.gpu_download; }},
      {"gpu_route", [](const tandem_figures& t) { return t.route.gpu_route; }},
      {"cpu_route", [](const tandem_figures& t) { return t.route.cpu_route; }},
  };
  std::printf("\n%6s %6s %10s %8s", "share", "used", "M ops/s", "seconds");
  for (const column& c : columns) std::printf(" %*s", std::max(9, static_cast<int>(std::strlen(c.name))), c.name);
  std::printf("\n");
  for (const system_result* p : points) {
    const tandem_figures& t = *p->tandem;
    const std::string req = p->requested_share.is_string() ? "auto" : share_string(p->requested_share.get<double>());
    std::printf("%6s %6.3f %10s %8.3f", req.c_str(), t.share_used(),
                mops(static_cast<double>(p->run.ops), p->run.seconds).c_str(), p->run.seconds);
    for (const column& c : columns) {
      std::printf(" %*.4f", std::max(9, static_cast<int>(std::strlen(c.name))), c.get(t));
    }
    std::printf("\n");
  }
  std::printf(
      "share: requested (index::set_gpu_share; auto: set_gpu_share(tandem::auto_share)); used: keys routed on the "
      "GPU / all keys of the point's batches\n(the batch-size-weighted mean of stats().gpu_share). Stage columns: "
      "seconds summed over the point's batches (tandem::stats total); gpu_* and cpu_route: the per-batch route "
      "fields\nof tandem::stats summed over the batches (gpu_upload..gpu_download: GPU event times; gpu_route, "
      "cpu_route: wall times of the two sides of route, which run at once).\n");
}

/// The CSV/JSON row of one system (or sweep point).
json row_of(const system_result& r, const workload_spec& spec, std::uint64_t nb, std::size_t threads,
            const options& opt, std::uint64_t warmup, const std::string& host, const std::string& cpu) {
  const bool is_tandem = r.tandem.has_value();
  json j;
  j["system"] = r.system;
  j["sweep"] = r.sweep_point ? json("share") : json(nullptr);
  j["workload"] = to_string(spec.kind);
  j["keys"] = spec.keys;
  j["ops"] = spec.ops;
  j["batch"] = spec.batch;
  j["batches"] = nb;
  j["dist"] = to_string(spec.dist);
  j["threads"] = threads;
  j["device"] = opt.device;
  j["gpu_share"] = is_tandem ? r.requested_share : json(nullptr);  // requested
  j["gpu_share_used"] = is_tandem ? json(r.tandem->share_used()) : json(nullptr);  // over the run
  j["ops_per_s"] = r.run.seconds > 0 ? static_cast<double>(r.run.ops) / r.run.seconds : 0.0;
  j["seconds"] = r.run.seconds;
  j["load_keys_per_s"] = r.load_seconds > 0 ? static_cast<double>(r.load_keys) / r.load_seconds : 0.0;
  j["load_seconds"] = r.load_seconds;
  j["hits"] = r.run.hits;
  j["scan_entries"] = r.run.entries;
  j["entries_per_s"] = r.run.seconds > 0 ? static_cast<double>(r.run.entries) / r.run.seconds : 0.0;
  auto field = [&](double v) { return is_tandem ? json(v) : json(nullptr); };
  const tandem_figures empty;
  const tandem_figures& t = is_tandem ? *r.tandem : empty;
  j["validate_s"] = field(t.stages.validate);
  j["route_s"] = field(t.stages.route);
  j["order_s"] = field(t.stages.order);
  j["read_s"] = field(t.stages.read);
  j["leaf_s"] = field(t.stages.leaf);
  j["sync_s"] = field(t.stages.sync);
  j["complete_s"] = field(t.stages.complete);
  j["gpu_upload_s"] = field(t.route.gpu_upload);
  j["gpu_sort_s"] = field(t.route.gpu_sort);
  j["gpu_kernel_s"] = field(t.route.gpu_kernel);
  j["gpu_download_s"] = field(t.route.gpu_download);
  j["gpu_route_s"] = field(t.route.gpu_route);
  j["cpu_route_s"] = field(t.route.cpu_route);
  j["gpu_keys"] = is_tandem ? json(t.gpu_keys) : json(nullptr);
  j["cpu_keys"] = is_tandem ? json(t.cpu_keys) : json(nullptr);
  j["gpu_share_last"] = field(t.last_share);  // stats().gpu_share after the last batch
  j["gpu_rate"] = field(t.after.gpu_rate);
  j["cpu_rate"] = field(t.after.cpu_rate);
  j["gpu_failures"] = is_tandem ? json(t.gpu_failures) : json(nullptr);
  j["device_used"] = r.device_used;
  j["leaves"] = is_tandem ? json(t.after.leaves) : json(nullptr);
  j["inner_height"] = is_tandem ? json(t.after.inner_height) : json(nullptr);
  j["splits"] = is_tandem ? json(t.splits) : json(nullptr);
  j["warmup_batches"] = is_tandem ? json(warmup) : json(nullptr);
  j["seed"] = spec.seed;
  j["scan_length"] = spec.kind == workload_kind::scan ? json(spec.scan_length) : json(nullptr);
  j["inflight"] = is_tandem ? json(opt.inflight) : json(nullptr);
  j["description"] = r.description;
  j["host"] = host;
  j["cpus"] = cpu_count();
  j["cpu_model"] = cpu;
  j["tandem_version"] = tandem::version();
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  CLI::App app{
      "tandem-bench: YCSB-style throughput of tandem::index (batches through index::submit, end to end), "
      "optionally beside absl::btree_map, tbb::concurrent_map and a GPU sorted array on the same ops.\n"};
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
  auto* share_opt = app.add_option(
                 "--gpu-share", opt.gpu_share,
                 "Share of each batch's keys routed on the GPU: auto (the index balances GPU and CPU) or a "
                 "number in [0,1], passed to index::set_gpu_share before the load. Without a usable GPU routing "
                 "stays on the CPU. The share used (keys routed on the GPU / all) and the GPU route times are "
                 "reported in the stage table, CSV and JSON")
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
  app.add_option("--gpu-order", opt.gpu_order,
                 "tandem::config.gpu_order: how the GPU orders keys before the descent: partial (sort on the top "
                 "log2(keys/8) bits), full (all 64 bits) or none")
      ->check(CLI::IsMember({"partial", "full", "none"}))
      ->type_name("ORDER")
      ->capture_default_str();
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
               "no batch-sequential semantics. For workload C also 'gpu-array': the loaded pairs sorted on the "
               "GPU (thrust::sort_by_key; keys + parallel values), each batch answered by thrust::lower_bound + a "
               "gather, query upload and answer download from/to pinned host memory included (needs a CUDA build "
               "and a GPU; otherwise a line says why it was skipped)");
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
  auto* sweep_opt =
      app.add_option("--sweep", opt.sweep,
                     "share: run the same batches at GPU shares 0, 0.1, ..., 1 and auto on ONE loaded index "
                     "(index::set_gpu_share between points; auto after --warmup batches that let the policy "
                     "converge). Read-only and update-only workloads (C, scan, A, B) reuse the index as it is; "
                     "load and E, which insert new keys, reload it before each point so every point starts from the "
                     "same contents. Prints one row per point (share requested and used, M ops/s, stage seconds, "
                     "GPU route fields); --csv writes one row per point (then one per baseline), --plot draws it. "
                     "Without a usable GPU every point routes on the CPU (share used 0)")
          ->check(CLI::IsMember({"share"}))
          ->type_name("WHAT");
  share_opt->excludes(sweep_opt);
  app.add_option("--warmup", opt.warmup,
                 "Untimed batches of --batch gets of loaded keys (they change nothing) run on tandem before each "
                 "timed run: they warm the GPU and let the auto share converge. auto: 4 with --sweep, else 0")
      ->check(count_in(0, 1u << 20, true))
      ->type_name("W|auto")
      ->capture_default_str();
  app.add_option("--plot", opt.plot,
                 "With --sweep share (or --plot-csv): write FILE.gp, a self-contained gnuplot script of "
                 "throughput against GPU share (baselines as lines), and run gnuplot on it to make FILE.png when "
                 "gnuplot is found (the one CMake found at build time, else on PATH); otherwise say so and keep "
                 "the script")
      ->type_name("FILE.png");
  app.add_option("--plot-csv", opt.plot_csv,
                 "Run nothing: plot the --sweep share rows of a CSV written earlier by --csv into --plot FILE.png "
                 "(exit status 1 when gnuplot is not found)")
      ->check(CLI::ExistingFile)
      ->type_name("CSV");
  app.add_option("--csv", opt.csv,
                 "Write one CSV row per system to FILE (with --sweep: one per point, then one per baseline)")
      ->type_name("FILE");
  app.add_flag("--csv-append", opt.csv_append, "Append to the --csv file (header only when it is new or empty)");
  app.add_option("--json", opt.json, "Write a JSON array, one object per system, to FILE")->type_name("FILE");
  app.footer(
      "Output: a table on stdout (M ops/s and seconds of the timed run per system; bulk-load rate; tandem's "
      "per-stage seconds from tandem::stats with the GPU route times (gpu_upload, gpu_sort, gpu_kernel, "
      "gpu_download, gpu_route, cpu_route) summed over the batches, device, GPU share used, leaves, height, "
      "splits; with --sweep one such row per share); a progress bar on stderr when it is a terminal. tandem is "
      "timed from its first submit to its last result, with up to --inflight batches queued; the baselines from "
      "their first to their last batch. Batches are generated before timing.\nExit status: 0 ok, 1 a verify "
      "mismatch, a failed batch or baseline, an unwritable output file, or --plot-csv without gnuplot, 2 the "
      "index cannot be created (e.g. --device gpu without a GPU) or --plot without --sweep/--plot-csv; other "
      "command-line errors exit with CLI11's codes.");
  CLI11_PARSE(app, argc, argv);

  // ---- --plot-csv: plot an earlier sweep, run nothing ----------------------------
  if (!opt.plot_csv.empty()) {
    if (opt.plot.empty()) {
      std::fprintf(stderr, "tandem-bench: --plot-csv needs --plot FILE.png\n");
      return 2;
    }
    try {
      const plot_outcome p = plot_share_sweep(read_csv(opt.plot_csv), opt.plot);
      std::printf("%s\n", p.message.c_str());
      return p.rendered ? 0 : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tandem-bench: --plot-csv %s: %s\n", opt.plot_csv.c_str(), e.what());
      return 1;
    }
  }
  const bool sweeping = opt.sweep == "share";
  if (!opt.plot.empty() && !sweeping) {
    std::fprintf(stderr, "tandem-bench: --plot draws a GPU-share sweep: add --sweep share (or use --plot-csv)\n");
    return 2;
  }

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
  const std::string share_text = share_string(share);
  const std::uint64_t nb = (spec.ops + spec.batch - 1) / spec.batch;
  const std::uint64_t warmup = opt.warmup == "auto" ? (sweeping ? 4 : 0) : *parse_count(opt.warmup);
  // Sweep points: 0, 0.1, ..., 1, then auto (empty).
  std::vector<std::optional<double>> points;
  if (sweeping) {
    for (int i = 0; i <= 10; ++i) points.emplace_back(i / 10.0);
    points.emplace_back(std::nullopt);
  }
  // Workloads that insert new keys: a sweep reloads the index before each point.
  const bool reload_each_point = spec.kind == workload_kind::load || spec.kind == workload_kind::e;

  const std::string host = host_name();
  std::printf("tandem-bench: tandem %s (CUDA layer: %s) on %s, %u CPUs (%s)\n", tandem::version(),
              tandem::built_with_cuda() ? "yes" : "no", host.c_str(), cpu_count(), cpu_model().c_str());
  std::printf("workload %s: %s; dist %s; keys %s; ops %s; batch %s (%llu batches, up to %zu in flight)\n",
              to_string(spec.kind), describe(spec.kind, spec.scan_length, spec.order).c_str(), to_string(spec.dist),
              pow2_text(spec.keys).c_str(), pow2_text(spec.ops).c_str(), pow2_text(spec.batch).c_str(),
              static_cast<unsigned long long>(nb), opt.inflight);
  std::printf("threads %zu; device %s; gpu-share %s; seed %llu%s\n", threads, opt.device.c_str(),
              sweeping ? "swept" : share_text.c_str(), static_cast<unsigned long long>(spec.seed),
              opt.verify ? "; verify on" : "");
  if (sweeping) {
    std::printf("sweep share: 0, 0.1, ..., 1, auto on one index (%s); %llu warm-up batches of gets before each point\n",
                reload_each_point ? "reloaded before each point: the workload inserts new keys"
                                  : "loaded once; the points run one after another",
                static_cast<unsigned long long>(warmup));
  } else if (warmup) {
    std::printf("warm-up: %llu untimed batches of gets before the run\n", static_cast<unsigned long long>(warmup));
  }
  std::fflush(stdout);

  // ---- the index (constructed first: a bad --device fails before any work) -------
  tandem::config cfg;
  cfg.threads = threads;
  cfg.fanout = opt.fanout;
  cfg.leaf_fill = opt.leaf_fill;
  cfg.gpu_order = opt.gpu_order == "full"   ? tandem::gpu_query_order::full_sort
                  : opt.gpu_order == "none" ? tandem::gpu_query_order::none
                                            : tandem::gpu_query_order::partial_sort;
  cfg.device = opt.device == "gpu"   ? tandem::device_kind::gpu
               : opt.device == "cpu" ? tandem::device_kind::cpu
                                     : tandem::device_kind::automatic;
  std::unique_ptr<tandem::index> idx;
  try {
    idx = std::make_unique<tandem::index>(cfg);
    if (share && !sweeping) idx->set_gpu_share(*share);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: cannot create the index (--device %s): %s\n", opt.device.c_str(), e.what());
    return 2;
  }

  // ---- data, generated before any timing -----------------------------------------
  auto t_gen = clock_type::now();
  dataset ds;
  std::vector<std::vector<tandem::op>> warm;
  try {
    ds = make_dataset(spec);
    warm = make_warmup_batches(ds, spec.batch, warmup, spec.seed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    return 1;
  }
  const double gen_seconds = seconds_since(t_gen);
  std::printf("setup (not timed): %zu keys, %llu ops in %zu batches generated in %.2f s\n", ds.load_keys.size(),
              static_cast<unsigned long long>(spec.ops), ds.batches.size(), gen_seconds);
  std::fflush(stdout);

  std::vector<system_result> results;
  std::vector<std::string> notes;
  int exit_code = 0;
  std::uint64_t answers_checked = 0, mismatches = 0, report_left = 10;
  std::vector<std::string> verify_lines;
  bool tandem_checks_failed = false;
  std::unique_ptr<model> verifier;  // --verify: the model, replaying what tandem ran
  if (opt.verify) {
    verifier = std::make_unique<model>();
    verifier->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
  }

  // ---- tandem ----------------------------------------------------------------------
  // Checks one run's answers on the model (which replays the run's batches)
  // and the index's invariants and size.
  auto verify_run = [&](tandem_figures& fig, const std::string& what) {
    progress_bar bar("verify " + what, ds.batches.size());
    for (std::size_t b = 0; b < ds.batches.size(); ++b) {
      mismatches += verifier->check(ds.batches[b], fig.kept[b], b, report_left);
      answers_checked += ds.batches[b].size();
      fig.kept[b] = tandem::batch_result();  // free as we go
      bar.update(b + 1);
    }
    fig.kept.clear();
    bar.finish();
    try {
      idx->verify();
    } catch (const std::exception& e) {
      verify_lines.push_back("verify: " + what + ": index::verify() failed: " + e.what());
      tandem_checks_failed = true;
    }
    if (idx->size() != verifier->size()) {
      verify_lines.push_back("verify: " + what + ": tandem holds " + std::to_string(idx->size()) + " keys, the model " +
                             std::to_string(verifier->size()));
      tandem_checks_failed = true;
    }
  };

  try {
    double load_seconds = 0;
    {
      progress_bar bar("tandem load", 1, "bulk load");
      const auto t0 = clock_type::now();
      idx->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
      load_seconds = seconds_since(t0);
    }
    const std::vector<std::optional<double>> runs = sweeping ? points : std::vector<std::optional<double>>{share};
    for (std::size_t p = 0; p < runs.size(); ++p) {
      const std::string req = share_string(runs[p]);
      if (sweeping && p > 0 && reload_each_point) {
        progress_bar bar("tandem reload", 1, "bulk load");
        const auto t0 = clock_type::now();
        idx->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
        load_seconds = seconds_since(t0);
        if (verifier) verifier->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
      }
      if (sweeping) {
        if (runs[p]) {
          idx->set_gpu_share(*runs[p]);
        } else {
          idx->set_gpu_share(tandem::auto_share);
        }
      }
      if (!warm.empty()) (void)run_tandem(*idx, warm, opt.inflight, false, "warm-up " + req);
      system_result r;
      r.system = sweeping ? "tandem@" + req : "tandem";
      r.description =
          "tandem::index, batches through index::submit, up to " + std::to_string(opt.inflight) + " in flight";
      r.load_seconds = load_seconds;
      r.load_keys = ds.load_keys.size();
      r.requested_share = runs[p] ? json(*runs[p]) : json("auto");
      r.sweep_point = sweeping;
      tandem_figures fig = run_tandem(*idx, ds.batches, opt.inflight, opt.verify,
                                      sweeping ? "tandem share " + req : "tandem " + std::string(to_string(spec.kind)));
      r.run = fig.run;
      r.device_used = fig.after.device;
      if (opt.verify) verify_run(fig, sweeping ? "tandem share " + req : "tandem");
      r.tandem = std::move(fig);
      results.push_back(std::move(r));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    return 1;
  }
  if (opt.verify && tandem_checks_failed) exit_code = 1;
  if (opt.verify && !tandem_checks_failed) {
    verify_lines.push_back(std::string("verify: tandem index::verify() found no broken invariant and the size equals "
                                       "the model's (") +
                           std::to_string(idx->size()) + " keys)" + (sweeping ? ", after every point" : ""));
  }
  idx.reset();

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

    // The GPU sorted array: workload C only (it answers gets).
    if (spec.kind != workload_kind::c) {
      notes.push_back(std::string("GPU sorted array: skipped (it answers gets only; workload ") + to_string(spec.kind) +
                      " has other ops)");
    } else if (!gpu_array_built()) {
      notes.push_back("GPU sorted array: not built (no CUDA)");
    } else {
      const tandem::device::device_report gpus = tandem::device::query_devices();
      if (gpus.devices.empty()) {
        notes.push_back("GPU sorted array: skipped (no usable GPU: " + gpus.reason + ")");
      } else {
        std::uint64_t gpu_bad = 0, gpu_checked = 0;
        gpu_array_check check;
        if (verifier) {
          check = [&](std::size_t b, const std::uint8_t* found, const tandem::value_type* values, std::size_t n) {
            for (std::size_t i = 0; i < n; ++i) {
              tandem::value_type want = 0;
              const bool want_found = verifier->find(ds.batches[b][i].key, want);
              if (want_found != (found[i] != 0) || (want_found && want != values[i])) {
                if (gpu_bad++ < 10) {
                  std::fprintf(stderr, "verify: gpu-array batch %zu op %zu get(%llu): got {found %d, value %llu}\n", b,
                               i, static_cast<unsigned long long>(ds.batches[b][i].key), found[i] ? 1 : 0,
                               static_cast<unsigned long long>(values[i]));
                }
              }
              ++gpu_checked;
            }
          };
        }
        try {
          progress_bar bar("gpu-array", 1, "run");
          const gpu_array_figures g =
              run_gpu_array(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size(), ds.batches, check);
          system_result r;
          r.system = gpu_array_name;
          r.description = g.description;
          r.load_keys = ds.load_keys.size();
          r.load_seconds = g.load_seconds;
          r.run = g.run;
          r.device_used = "gpu " + g.device;
          results.push_back(std::move(r));
          if (verifier) {
            verify_lines.push_back("verify: gpu-array: " + std::to_string(gpu_checked) + " answers checked, " +
                                   std::to_string(gpu_bad) + " mismatches");
            answers_checked += gpu_checked;
            mismatches += gpu_bad;
          }
        } catch (const std::exception& e) {
          std::fprintf(stderr, "tandem-bench: %s\n", e.what());
          notes.push_back(std::string("GPU sorted array: failed: ") + e.what());
          exit_code = 1;
        }
      }
    }
  }

  // ---- tables ------------------------------------------------------------------------
  const bool scans = spec.kind == workload_kind::scan || spec.kind == workload_kind::e;
  std::vector<const system_result*> tandem_rows, other_rows;
  for (const system_result& r : results) (r.tandem ? tandem_rows : other_rows).push_back(&r);
  if (sweeping) {
    print_sweep_table(tandem_rows);
    if (!other_rows.empty()) {
      std::printf("\nbaselines on the same batches:");
      print_systems_table(other_rows, scans);
    }
    std::printf("tandem: device %s; %llu leaves, inner height %d; load %.3f s (%s M keys/s%s)\n",
                tandem_rows.back()->device_used.c_str(),
                static_cast<unsigned long long>(tandem_rows.back()->tandem->after.leaves),
                tandem_rows.back()->tandem->after.inner_height, tandem_rows.front()->load_seconds,
                mops(static_cast<double>(ds.load_keys.size()), tandem_rows.front()->load_seconds).c_str(),
                reload_each_point ? ", the first of the per-point loads" : "");
    std::printf("tandem auto point: %s\n", gpu_line(*tandem_rows.back()->tandem, "auto").c_str());
    for (const system_result* p : tandem_rows) {
      if (p->tandem->gpu_failures != 0 || p->tandem->after.gpu_degraded) {
        std::printf("WARNING: point %s: %s\n", p->system.c_str(), gpu_line(*p->tandem, "").c_str());
      }
    }
  } else {
    std::vector<const system_result*> all;
    for (const system_result& r : results) all.push_back(&r);
    print_systems_table(all, scans);
    const tandem_figures& t = *tandem_rows.front()->tandem;
    print_stage_table(t, nb, tandem_rows.front()->run.seconds);
    std::printf("tandem: device %s; %s;\n        %llu leaves, inner height %d, %llu splits in the run, %llu keys\n",
                t.after.device.c_str(), gpu_line(t, share_text).c_str(),
                static_cast<unsigned long long>(t.after.leaves), t.after.inner_height,
                static_cast<unsigned long long>(t.splits), static_cast<unsigned long long>(t.after.keys));
  }
  std::printf("  %-13s %s\n", "tandem", tandem_rows.front()->description.c_str());
  for (const system_result* r : other_rows) std::printf("  %-13s %s\n", r->system.c_str(), r->description.c_str());
  for (const std::string& n : notes) std::printf("%s\n", n.c_str());
  if (!other_rows.empty()) {
    std::printf("note: the CPU baselines run each batch's ops concurrently, in no order: no batch-sequential "
                "semantics.\n");
  }

  // ---- CSV / JSON / plot -----------------------------------------------------------------
  std::vector<json> rows;
  const std::string cpu = cpu_model();
  for (const system_result& r : results) rows.push_back(row_of(r, spec, nb, threads, opt, warmup, host, cpu));
  try {
    if (!opt.csv.empty()) write_csv(opt.csv, rows, opt.csv_append);
    if (!opt.json.empty()) write_json(opt.json, rows);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    exit_code = 1;
  }
  if (!opt.plot.empty()) {
    try {
      std::printf("%s\n", plot_share_sweep(rows, opt.plot).message.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tandem-bench: --plot %s: %s\n", opt.plot.c_str(), e.what());
      exit_code = 1;
    }
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
