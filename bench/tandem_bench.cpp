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
/// --shards N runs N indexes over N key ranges, shard i on GPU i mod (GPUs
/// found), a client cutting each batch by range, beside one shard on one GPU
/// (src/shards.hpp).
///
/// Timing is end to end: for tandem from the first submit to the last
/// result (host input to host output); all batches are generated up front,
/// outside the timed region. Beside the stage times, tandem's stage table
/// gives the bytes each stage moved (tandem::stats total_bytes) and GB/s,
/// the PCIe and host bytes per op, and the heap allocations of the process
/// per batch during the timed run (malloc hooks, src/alloc_count.cpp); a
/// memory probe run before the timed runs (src/probe.cpp) sets the host
/// bytes per op against the machine's read bandwidth. The command line is in
/// src/cli.cpp, the tables and CSV/JSON rows in src/tables.cpp. See
/// `tandem-bench --help`.


#include "src/alloc_count.hpp"
#include "src/baselines.hpp"
#include "src/churn.hpp"
#include "src/cli.hpp"
#include "src/gpu_baseline.hpp"
#include "src/client_work.hpp"
#include "src/latency.hpp"
#include "src/model.hpp"
#include "src/persist.hpp"
#include "src/plot.hpp"
#include "src/probe.hpp"
#include "src/report.hpp"
#include "src/shards.hpp"
#include "src/tables.hpp"
#include "src/tandem_run.hpp"
#include "src/workload.hpp"

#include <tandem/device/device_query.hpp>
#include <tandem/tandem.hpp>

#include <oneapi/tbb/info.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
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

}  // namespace

int main(int argc, char** argv) {
  options opt;
  if (const int status = parse_command_line(argc, argv, opt); status >= 0) return status;

  // ---- --plot-csv: plot an earlier CSV (sweep or plain runs), run nothing -------
  if (!opt.plot_csv.empty()) {
    if (opt.plot.empty()) {
      std::fprintf(stderr, "tandem-bench: --plot-csv needs --plot FILE.png\n");
      return 2;
    }
    try {
      const plot_outcome p = plot_rows(read_csv(opt.plot_csv), opt.plot);
      std::printf("%s\n", p.message.c_str());
      return p.rendered ? 0 : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tandem-bench: --plot-csv %s: %s\n", opt.plot_csv.c_str(), e.what());
      return 1;
    }
  }
  const bool sweeping = opt.sweep == "share";
  const bool latency_sweep = opt.sweep == "latency";

  // ---- resolve the configuration -----------------------------------------------
  workload_spec spec;
  spec.kind = to_workload(opt.workload);
  spec.dist = to_dist(opt.dist);
  spec.sorted_load = opt.load_order == "sorted";
  spec.keys = *parse_count(opt.keys);
  spec.ops = latency_sweep ? 0 : opt.ops == "auto" ? default_ops(spec.kind) : *parse_count(opt.ops);
  spec.batch = opt.batch == "auto" ? default_batch(spec.kind) : *parse_count(opt.batch);
  spec.seed = opt.seed;
  spec.scan_length = *parse_count(opt.scan_length);
  spec.order = opt.scan_order == "unordered" ? tandem::scan_order::unordered : tandem::scan_order::ordered;
  const std::size_t threads = opt.threads ? opt.threads : static_cast<std::size_t>(tbb::info::default_concurrency());
  // The requested GPU share (empty: auto).
  const std::optional<double> share = opt.gpu_share == "auto" ? std::nullopt : parse_share(opt.gpu_share);
  const std::string share_text = share_string(share);
  const std::uint64_t nb = (spec.ops + spec.batch - 1) / spec.batch;
  const std::uint64_t warmup = opt.warmup == "auto" ? 4 : *parse_count(opt.warmup);
  const char* const warmup_what = describe_warmup(spec.kind);
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
  const bool churn = opt.workload == "churn";
  const bool save = opt.workload == "save";
  if (churn) {
    std::printf("workload churn: keys %s (the window); rounds %s\n", pow2_text(spec.keys).c_str(), opt.rounds.c_str());
  } else if (save) {
    std::printf("workload save: keys %s\n", pow2_text(spec.keys).c_str());
  } else {
  std::printf("workload %s: %s; dist %s; keys %s (loaded in %s order); ops %s; batch %s (%llu batches, up to %zu "
              "in flight)\n",
              to_string(spec.kind), describe(spec.kind, spec.scan_length, spec.order).c_str(), to_string(spec.dist),
              pow2_text(spec.keys).c_str(), spec.sorted_load ? "key" : "random", pow2_text(spec.ops).c_str(), pow2_text(spec.batch).c_str(),
              static_cast<unsigned long long>(nb), opt.inflight);
  }
  std::printf("threads %zu; device %s; gpu-share %s; gpu-order %s; gpu-scatter %s; leaf-hints %s; gpu-route-keys %s; "
              "seed %llu%s\n",
              threads, opt.device.c_str(), sweeping ? "swept" : share_text.c_str(), opt.gpu_order.c_str(),
              opt.gpu_scatter.c_str(), opt.leaf_hints.c_str(), opt.gpu_route_keys == "0" ? "unbounded" : opt.gpu_route_keys.c_str(), static_cast<unsigned long long>(spec.seed), opt.verify ? "; verify on" : "");
  if (sweeping) {
    std::printf("sweep share: 0, 0.1, ..., 1, auto on one index (%s); %llu warm-up batches of %s before each point\n",
                reload_each_point ? "reloaded before each point: the workload inserts new keys"
                                  : "loaded once; the points run one after another",
                static_cast<unsigned long long>(warmup), warmup_what);
  } else if (warmup) {
    std::printf("warm-up: %llu untimed batches of %s before the run\n", static_cast<unsigned long long>(warmup),
                warmup_what);
  }
  std::fflush(stdout);

  // ---- the index (constructed first: a bad --device fails before any work) -------
  tandem::config cfg;
  cfg.threads = threads;
  cfg.fanout = opt.fanout;
  cfg.leaf_fill = opt.leaf_fill;
  cfg.gpu_order = to_gpu_order(opt.gpu_order);
  cfg.gpu_scatter = opt.gpu_scatter == "on";
  cfg.gpu_leaf_hints = opt.leaf_hints == "on";
  cfg.caller_runs = opt.caller_runs == "on";
  cfg.max_gpu_route_keys = static_cast<std::size_t>(*parse_count(opt.gpu_route_keys));
  if (!opt.gpu_budget.empty() && opt.gpu_budget.back() == '%') {
    cfg.max_gpu_bytes = static_cast<std::size_t>(std::strtod(opt.gpu_budget.c_str(), nullptr) / 100.0 *
                                                 static_cast<double>(spec.keys) * 16.0);
  } else {
    cfg.max_gpu_bytes = static_cast<std::size_t>(*parse_count(opt.gpu_budget));
  }
  if (opt.small_batch != "auto") cfg.small_batch_ops = static_cast<std::size_t>(*parse_count(opt.small_batch));
  if (opt.direct_gets != "auto") cfg.direct_get_ops = static_cast<std::size_t>(*parse_count(opt.direct_gets));
  if (opt.group_commit != "auto") cfg.group_commit_ops = static_cast<std::size_t>(*parse_count(opt.group_commit));
  if (opt.group_commit_output != "auto") {
    cfg.group_commit_output_bytes = static_cast<std::size_t>(*parse_count(opt.group_commit_output));
  }
  cfg.device = opt.device == "gpu"   ? tandem::device_kind::gpu
               : opt.device == "cpu" ? tandem::device_kind::cpu
                                     : tandem::device_kind::automatic;
  // --shards: indexes of their own (src/shards.hpp).
  if (opt.shards != 0) return run_shards(opt, spec, cfg, warmup);

  std::unique_ptr<tandem::index> idx;
  try {
    idx = std::make_unique<tandem::index>(cfg);
    if (share && !sweeping) idx->set_gpu_share(*share);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: cannot create the index (--device %s): %s\n", opt.device.c_str(), e.what());
    return 2;
  }

  if (churn || save) {  // workloads of their own: rows, CSV, JSON, plot
    try {
      const std::vector<json> rows = churn ? run_churn(opt, cfg, *idx, resident_bytes()) : run_save(opt, cfg, *idx);
      if (!opt.csv.empty()) write_csv(opt.csv, rows, opt.csv_append);
      if (!opt.json.empty()) write_json(opt.json, rows);
      if (churn && !opt.plot.empty()) std::printf("%s\n", plot_churn(rows, opt.plot).message.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tandem-bench: -w %s: %s\n", opt.workload.c_str(), e.what());
      return 1;
    }
    return 0;
  }

  // ---- data, generated before any timing -----------------------------------------
  auto t_gen = clock_type::now();
  dataset ds;
  std::vector<std::vector<tandem::op>> warm;
  try {
    progress_bar bar("setup", dataset_steps, "steps");
    ds = make_dataset(spec, [&](std::size_t done) { bar.update(done); });
    warm = make_warmup_batches(ds, spec, warmup);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    return 1;
  }
  const double gen_seconds = seconds_since(t_gen);
  std::printf("setup (not timed): %zu keys, %llu ops in %zu batches generated in %.2f s\n", ds.load_keys.size(),
              static_cast<unsigned long long>(spec.ops), ds.batches.size(), gen_seconds);
  std::fflush(stdout);

  if (latency_sweep) {
    try {
      {
        progress_bar bar("tandem load", 1, "bulk load");
        idx->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
      }
      std::unique_ptr<baseline> absl;
      if (opt.baselines &&
          std::find(opt.skip_baselines.begin(), opt.skip_baselines.end(), "absl") == opt.skip_baselines.end()) {
        absl = make_absl_baseline(threads, opt.absl_shards);
        progress_bar bar("absl load", 1, "bulk load");
        (void)absl->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
      }
      std::vector<json> rows = run_latency_sweep(*idx, absl.get(), ds, spec, opt);
      const tandem::stats s = idx->stats();
      std::printf("tandem: device %s; %llu batches (%llu run folded with others; %llu answered directly), %llu ops; stats() histograms "
                  "over them: queue wait p50 <= %.0f us, p99 <= %.0f us; execution p50 <= %.0f us, p99 <= %.0f us\n",
                  s.device.c_str(), static_cast<unsigned long long>(s.batches),
                  static_cast<unsigned long long>(s.grouped_batches),
                  static_cast<unsigned long long>(s.direct_batches), static_cast<unsigned long long>(s.ops),
                  s.queue_wait.percentile_us(50), s.queue_wait.percentile_us(99), s.execution.percentile_us(50),
                  s.execution.percentile_us(99));
      if (!opt.csv.empty()) write_csv(opt.csv, rows, opt.csv_append);
      if (!opt.json.empty()) write_json(opt.json, rows);
      if (!opt.plot.empty()) std::printf("%s\n", plot_latency(rows, opt.plot).message.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tandem-bench: --sweep latency: %s\n", e.what());
      return 1;
    }
    return 0;
  }

  std::vector<system_result> results;
  std::vector<std::string> notes;

  // ---- the memory probe (before the timed runs, not timed with them) ----------------
  std::optional<probe_figures> probe;
  if (opt.probe) {
    try {
      progress_bar bar("memory probe", 1, "probe");
      probe = run_memory_probe(threads, spec.keys);
    } catch (const std::exception& e) {
      notes.push_back(std::string("memory probe: failed: ") + e.what());
    }
  }
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

  std::string load_how;  // stats().last_load after the first load
  // --log-sync: one fresh index per policy (off: no storage folder).
  const bool log_runs = !(opt.log_sync.size() == 1 && opt.log_sync[0] == "off");
  double disk_write_rate = 0;  // --log-sync: a plain sequential write of the storage folder's disk, bytes/s
  try {
    double load_seconds = 0;
    auto timed_load = [&] {
      progress_bar bar("tandem load", 1, "bulk load");
      const auto t0 = clock_type::now();
      idx->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
      load_seconds = seconds_since(t0);
    };
    if (!log_runs) timed_load();
    load_how = idx->stats().last_load;
    if (log_runs) {
      // The disk's own rate, for the log's bound: 1 GiB written and fsynced.
      std::filesystem::remove_all(opt.storage_dir);
      std::filesystem::create_directories(opt.storage_dir);
      const std::vector<unsigned char> bytes(std::size_t{1} << 30, 0x5a);
      const std::string plain = opt.storage_dir + "/plain-write";
      const auto t0 = clock_type::now();
      plain_write(plain, bytes.data(), bytes.size());
      disk_write_rate = static_cast<double>(bytes.size()) / seconds_since(t0);
      std::filesystem::remove(plain);
    }
    const std::vector<std::optional<double>> runs =
        sweeping ? points : std::vector<std::optional<double>>(log_runs ? opt.log_sync.size() : 1, share);
    for (std::size_t p = 0; p < runs.size(); ++p) {
      const std::string req = share_string(runs[p]);
      const std::string log_policy = log_runs ? opt.log_sync[p] : "off";
      if (log_runs) {
        idx.reset();
        std::filesystem::remove_all(opt.storage_dir);
        tandem::config c = cfg;
        if (log_policy != "off") {
          c.storage_dir = opt.storage_dir;
          c.log_sync_policy = log_policy == "none"    ? tandem::log_sync::none
                              : log_policy == "group" ? tandem::log_sync::group
                                                      : tandem::log_sync::batch;
        }
        idx = std::make_unique<tandem::index>(c);
        if (share) idx->set_gpu_share(*share);
        timed_load();  // with a log: the load's checkpoint included
        if (verifier) verifier->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
      }
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
      // The warm-up's results are kept until its last batch is answered: the
      // answer pool then holds a column set for each batch the timed run
      // can have in flight, each grown to a batch's answers and scan output.
      if (!warm.empty()) (void)run_tandem(*idx, warm, opt.inflight, true, "warm-up " + req);
      system_result r;
      r.system = sweeping ? "tandem@" + req : log_policy != "off" ? "tandem+log:" + log_policy : "tandem";
      r.description =
          "tandem::index, batches through index::submit, up to " + std::to_string(opt.inflight) + " in flight";
      r.load_seconds = load_seconds;
      r.load_keys = ds.load_keys.size();
      r.requested_share = runs[p] ? json(*runs[p]) : json("auto");
      r.sweep_point = sweeping;
      const tandem::stats log_before = idx->stats();
      tandem_figures fig = run_tandem(*idx, ds.batches, opt.inflight, opt.verify,
                                      sweeping ? "tandem share " + req : "tandem " + std::string(to_string(spec.kind)));
      r.run = fig.run;
      r.device_used = fig.after.device;
      if (opt.verify) verify_run(fig, sweeping ? "tandem share " + req : r.system);
      if (log_runs) {
        const tandem::stats s = idx->stats();
        const double rate = static_cast<double>(r.run.ops) / r.run.seconds;
        const double per_op =
            static_cast<double>(s.log_bytes - log_before.log_bytes) / static_cast<double>(r.run.ops);
        char line[512];
        std::snprintf(line, sizeof(line),
                      "log %-5s: %.2f M ops/s; load (its checkpoint included) %.3f s; the timed run logged %s "
                      "in %llu records (%.2f bytes an op), %llu fdatasyncs%s%s",
                      log_policy.c_str(), rate / 1e6, load_seconds,
                      bytes_text(static_cast<double>(s.log_bytes - log_before.log_bytes)).c_str(),
                      static_cast<unsigned long long>(s.log_records - log_before.log_records), per_op,
                      static_cast<unsigned long long>(s.log_syncs - log_before.log_syncs),
                      s.log_error.empty() ? "" : "; LOG FAILED: ",
                      s.log_error.c_str());
        notes.push_back(line);
        if (per_op > 0) {
          std::snprintf(line, sizeof(line),
                        "          the disk's plain write rate (%s/s, 1 GiB written and fsynced before the runs) "
                        "bounds a synced log at %.2f M ops/s",
                        bytes_text(disk_write_rate).c_str(), disk_write_rate / per_op / 1e6);
          notes.push_back(line);
        }
      }
      r.tandem = std::move(fig);
      results.push_back(std::move(r));
      if (opt.client_work && !sweeping && !log_runs) {
        system_result w;
        w.system = "tandem client-work";
        w.description = "the same batches from " + std::to_string(opt.clients) +
                        " client thread(s): handed over from the workload's arrays inside the timed loop, every "
                        "answer read on the client, up to " + std::to_string(opt.inflight) + " in flight a client";
        w.load_seconds = load_seconds;
        w.load_keys = ds.load_keys.size();
        client_work_figures cw;
        {
          progress_bar bar("tandem client-work", 1, "run");
          cw = run_client_work(*idx, ds.batches, opt.clients, opt.inflight);
        }
        w.run = cw.run;
        w.device_used = idx->stats().device;
        const double index_only = static_cast<double>(results.back().run.ops) / results.back().run.seconds;
        const double client = static_cast<double>(w.run.ops) / w.run.seconds;
        char line[512];
        std::snprintf(line, sizeof(line), "client-work: %.2f M ops/s, %.3fx the index-only run's %.2f (same run)",
                      client / 1e6, client / index_only, index_only / 1e6);
        notes.push_back(line);
        const tandem::stage_times& st = results.back().tandem->stages;
        std::snprintf(line, sizeof(line),
                      "             clients' seconds: %.3f handing over, %.3f waiting, %.3f reading answers; index "
                      "stage seconds (index-only run in brackets): route %.3f (%.3f), leaf %.3f (%.3f), complete "
                      "%.3f (%.3f), wall %.3f (%.3f)",
                      cw.submitting, cw.waiting, cw.reading, cw.stages.route, st.route, cw.stages.leaf, st.leaf,
                      cw.stages.complete, st.complete, cw.run.seconds, results.back().run.seconds);
        notes.push_back(line);
        results.push_back(std::move(w));
      }
    }
    if (log_runs) {
      idx.reset();
      std::filesystem::remove_all(opt.storage_dir);
      const system_result* off = nullptr;
      for (const system_result& r : results) {
        if (r.system == "tandem") off = &r;
      }
      for (const system_result& r : results) {
        if (!off || &r == off || r.system.rfind("tandem+log:", 0) != 0) continue;
        const double ratio = (static_cast<double>(r.run.ops) / r.run.seconds) /
                             (static_cast<double>(off->run.ops) / off->run.seconds);
        notes.push_back(r.system + ": " + std::to_string(ratio).substr(0, 5) + "x the rate without a log (same run)");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    return 1;
  }
  if (opt.verify && tandem_checks_failed) exit_code = 1;
  if (opt.verify && !tandem_checks_failed && idx) {
    verify_lines.push_back(std::string("verify: tandem index::verify() found no broken invariant and the size equals "
                                       "the model's (") +
                           std::to_string(idx->size()) + " keys)" + (sweeping ? ", after every point" : ""));
  }
  idx.reset();

  // ---- baselines ---------------------------------------------------------------------
  if (opt.baselines) {
    auto skipped = [&](const std::string& name) {
      const bool skip = std::find(opt.skip_baselines.begin(), opt.skip_baselines.end(), name) !=
                        opt.skip_baselines.end();
      if (skip) notes.push_back(name + ": skipped (--skip-baseline)");
      return skip;
    };
    std::vector<std::unique_ptr<baseline>> systems;
    if (!skipped("absl")) systems.push_back(make_absl_baseline(threads, opt.absl_shards));
    if (!skipped("tbb")) systems.push_back(make_tbb_baseline(threads));
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
    if (skipped(gpu_array_name)) {
    } else if (spec.kind != workload_kind::c) {
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
  const entries_column entries = spec.kind == workload_kind::scan || spec.kind == workload_kind::e
                                     ? entries_column::scan_entries
                                     : spec.kind == workload_kind::count ? entries_column::keys_counted
                                                                         : entries_column::none;
  std::vector<const system_result*> tandem_rows, other_rows;
  for (const system_result& r : results) (r.tandem ? tandem_rows : other_rows).push_back(&r);
  if (sweeping) {
    print_sweep_table(tandem_rows);
    if (!other_rows.empty()) {
      std::printf("\nbaselines on the same batches:");
      print_systems_table(other_rows, entries);
    }
    std::printf("tandem: device %s; %llu leaves, inner height %d; load %.3f s (%s M keys/s%s)\n",
                tandem_rows.back()->device_used.c_str(),
                static_cast<unsigned long long>(tandem_rows.back()->tandem->after.leaves),
                tandem_rows.back()->tandem->after.inner_height, tandem_rows.front()->load_seconds,
                mops(static_cast<double>(ds.load_keys.size()), tandem_rows.front()->load_seconds).c_str(),
                reload_each_point ? ", the first of the per-point loads" : "");
    std::printf("tandem auto point: %s; %s\n", gpu_line(*tandem_rows.back()->tandem, "auto").c_str(),
                scatter_text(*tandem_rows.back()->tandem).c_str());
    if (probe) print_probe_lines(*probe, &*tandem_rows.back()->tandem, &tandem_rows.back()->run);
    for (const system_result* p : tandem_rows) {
      if (p->tandem->gpu_failures != 0 || p->tandem->after.gpu_degraded) {
        std::printf("WARNING: point %s: %s\n", p->system.c_str(), gpu_line(*p->tandem, "").c_str());
      }
    }
  } else {
    std::vector<const system_result*> all;
    for (const system_result& r : results) all.push_back(&r);
    print_systems_table(all, entries);
    const tandem_figures& t = *tandem_rows.front()->tandem;
    print_stage_table(t, nb, tandem_rows.front()->run.seconds, opt.verify, warmup);
    if (probe) print_probe_lines(*probe, &t, &tandem_rows.front()->run);
    std::printf("tandem: device %s; %s;\n        %s; %llu leaves, inner height %d, %llu splits in the run, %llu "
                "keys (%.0f a leaf)\n",
                t.after.device.c_str(), gpu_line(t, share_text).c_str(), scatter_text(t).c_str(),
                static_cast<unsigned long long>(t.after.leaves), t.after.inner_height,
                static_cast<unsigned long long>(t.splits), static_cast<unsigned long long>(t.after.keys),
                t.after.leaves > 0 ? static_cast<double>(t.after.keys) / static_cast<double>(t.after.leaves) : 0.0);
    if (!load_how.empty()) std::printf("        load: %s\n", load_how.c_str());
    const double data_bytes = static_cast<double>(t.after.keys) * 16;
    auto percent = [&](std::size_t b) { return data_bytes > 0 ? 100.0 * static_cast<double>(b) / data_bytes : 0.0; };
    const std::size_t radix_bytes =
        t.after.host_bytes - t.after.leaf_bytes - t.after.inner_bytes - t.after.guide_bytes;
    std::printf("        memory held: host %s (leaves %s, inner layout %s, its radix table %s, leaf guides %s; %.2f "
                "bytes per byte of pairs), GPU %s "
                "(%.3f%% of the pairs' %s: the inner layout, %.3f%% a version, the leaf guides, and route/scatter "
                "arrays sized by the largest batch)\n",
                bytes_text(static_cast<double>(t.after.host_bytes)).c_str(),
                bytes_text(static_cast<double>(t.after.leaf_bytes)).c_str(),
                bytes_text(static_cast<double>(t.after.inner_bytes)).c_str(),
                bytes_text(static_cast<double>(radix_bytes)).c_str(),
                bytes_text(static_cast<double>(t.after.guide_bytes)).c_str(),
                data_bytes > 0 ? static_cast<double>(t.after.host_bytes) / data_bytes : 0.0,
                bytes_text(static_cast<double>(t.after.gpu_bytes)).c_str(), percent(t.after.gpu_bytes),
                bytes_text(data_bytes).c_str(), percent(t.after.inner_bytes));
    if (t.after.gpu_budget_bytes > 0) {
      std::printf("        GPU budget: %s (%.3f%% of the pairs' bytes), held %s; routes of at most %llu keys%s\n",
                  bytes_text(static_cast<double>(t.after.gpu_budget_bytes)).c_str(),
                  percent(t.after.gpu_budget_bytes), bytes_text(static_cast<double>(t.after.gpu_bytes)).c_str(),
                  static_cast<unsigned long long>(t.after.gpu_route_keys),
                  t.after.guides_dropped ? ", leaf guides dropped" : "");
    }
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
  row_context ctx;
  ctx.spec = &spec;
  ctx.batches = nb;
  ctx.threads = threads;
  ctx.opt = &opt;
  ctx.warmup = warmup;
  ctx.host = host;
  ctx.cpu = cpu_model();
  ctx.probe = probe;
  for (const system_result& r : results) rows.push_back(row_of(r, ctx));
  try {
    if (!opt.csv.empty()) write_csv(opt.csv, rows, opt.csv_append);
    if (!opt.json.empty()) write_json(opt.json, rows);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    exit_code = 1;
  }
  if (!opt.plot.empty()) {
    try {
      // A plain run plots the whole --csv file (with --csv-append, every run
      // appended so far), or its own rows without --csv.
      const plot_outcome p = sweeping       ? plot_share_sweep(rows, opt.plot)
                             : opt.csv.empty() ? plot_runs(rows, opt.plot)
                                               : plot_runs(read_csv(opt.csv), opt.plot);
      std::printf("%s\n", p.message.c_str());
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
