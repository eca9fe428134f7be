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
///
/// main() is a sequence of named steps (src/steps.hpp): setup, the
/// workload, tandem's runs, the baselines' runs, the report. The flows of
/// their own branch off here: --plot-csv, --shards, -w churn and -w save,
/// --sweep latency.

#include "src/baselines.hpp"
#include "src/churn.hpp"
#include "src/cli.hpp"
#include "src/latency.hpp"
#include "src/persist.hpp"
#include "src/plot.hpp"
#include "src/report.hpp"
#include "src/shards.hpp"
#include "src/steps.hpp"

#include <tandem/tandem.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace tandem_bench;

/// --plot-csv: plots an earlier CSV (sweep or plain runs), runs nothing.
int plot_earlier_csv(const options& opt) {
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

/// The index, made before any work so that a bad --device fails first.
/// @return null, the error printed, when it cannot be made
std::unique_ptr<tandem::index> make_index(const options& opt, const run_setup& s) {
  try {
    if (!s.cfg.storage_dir.empty()) std::filesystem::remove_all(s.cfg.storage_dir);  // a fresh index
    auto idx = std::make_unique<tandem::index>(s.cfg);
    if (s.share && !s.sweeping) idx->set_gpu_share(*s.share);
    return idx;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: cannot create the index (--device %s): %s\n", opt.device.c_str(), e.what());
    return nullptr;
  }
}

/// -w churn and -w save: workloads of their own (rows, CSV, JSON, plot).
int run_own_workload(const options& opt, const run_setup& s, tandem::index& idx) {
  try {
    const std::vector<json> rows = s.churn ? run_churn(opt, s.cfg, idx, resident_bytes()) : run_save(opt, s.cfg, idx);
    if (!opt.csv.empty()) write_csv(opt.csv, rows, opt.csv_append);
    if (!opt.json.empty()) write_json(opt.json, rows);
    if (s.churn && !opt.plot.empty()) std::printf("%s\n", plot_churn(rows, opt.plot).message.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: -w %s: %s\n", opt.workload.c_str(), e.what());
    return 1;
  }
  return 0;
}

/// --sweep latency: tandem and absl loaded once, then the batch sizes and
/// client counts of src/latency.hpp.
int run_latency(const options& opt, const run_setup& s, tandem::index& idx, const workload_data& w) {
  const dataset& ds = w.ds;
  try {
    {
      progress_bar bar("tandem load", 1, "bulk load");
      idx.load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
    }
    std::unique_ptr<baseline> absl;
    if (opt.baselines &&
        std::find(opt.skip_baselines.begin(), opt.skip_baselines.end(), "absl") == opt.skip_baselines.end()) {
      absl = make_absl_baseline(s.threads, opt.absl_shards);
      progress_bar bar("absl load", 1, "bulk load");
      (void)absl->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
    }
    std::vector<json> rows = run_latency_sweep(idx, absl.get(), ds, s.spec, opt);
    const tandem::stats st = idx.stats();
    std::printf("tandem: device %s; %llu batches (%llu run folded with others; %llu answered directly), %llu ops; "
                "stats() histograms over them: queue wait p50 <= %.0f us, p99 <= %.0f us; execution p50 <= %.0f "
                "us, p99 <= %.0f us\n",
                st.device.c_str(), static_cast<unsigned long long>(st.batches),
                static_cast<unsigned long long>(st.grouped_batches), static_cast<unsigned long long>(st.direct_batches),
                static_cast<unsigned long long>(st.ops), st.queue_wait.percentile_us(50),
                st.queue_wait.percentile_us(99), st.execution.percentile_us(50), st.execution.percentile_us(99));
    if (!opt.csv.empty()) write_csv(opt.csv, rows, opt.csv_append);
    if (!opt.json.empty()) write_json(opt.json, rows);
    if (!opt.plot.empty()) std::printf("%s\n", plot_latency(rows, opt.plot).message.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: --sweep latency: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  if (const int status = parse_command_line(argc, argv, opt); status >= 0) return status;
  if (!opt.plot_csv.empty()) return plot_earlier_csv(opt);

  const run_setup setup = resolve_setup(opt);
  print_setup(opt, setup);
  if (opt.shards != 0) return run_shards(opt, setup.spec, setup.cfg, setup.warmup);  // src/shards.hpp
  std::unique_ptr<tandem::index> idx = make_index(opt, setup);
  if (!idx) return 2;
  if (setup.churn || setup.save) return run_own_workload(opt, setup, *idx);

  workload_data work;
  if (!make_workload(setup, work)) return 1;
  if (setup.latency_sweep) {
    const int status = run_latency(opt, setup, *idx, work);
    idx.reset();
    if (!setup.cfg.storage_dir.empty()) std::filesystem::remove_all(setup.cfg.storage_dir);
    return status;
  }

  run_outcome out;
  run_probe(opt, setup, out);
  if (!run_tandem_points(opt, setup, work, idx, out)) return 1;
  idx.reset();
  if (!run_baselines(opt, setup, work, out)) return 1;

  print_summary(opt, setup, work, out);
  write_outputs(opt, setup, out);
  return finish(opt, out);
}
