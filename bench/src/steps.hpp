#pragma once
/// @file
/// tandem-bench's main() as named steps, in the order it runs them:
///  1. setup (setup.cpp): the options resolved into a workload, tandem's
///     config and what the later steps read; the header lines printed.
///  2. the workload (make_workload): every batch generated before any
///     timing.
///  3. the timed runs: tandem (tandem_points.cpp: one run, the points of
///     --sweep share or one run per --log-sync policy, and --client-work),
///     then the baselines (baseline_runs.cpp: absl, tbb and the GPU sorted
///     array), each checked on the model with --verify.
///  4. the report (summary.cpp): the tables and notes on stdout, the
///     CSV/JSON rows, the plot and the verify lines.
/// What runs a flow of its own (--plot-csv, --shards, -w churn, -w save,
/// --sweep latency) branches off in tandem_bench.cpp.

#include "cli.hpp"
#include "model.hpp"
#include "probe.hpp"
#include "tables.hpp"
#include "workload.hpp"

#include <tandem/tandem.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem_bench {

/// The options resolved: what every later step reads.
struct run_setup {
  workload_spec spec;
  std::size_t threads = 0;
  std::optional<double> share;  ///< the requested GPU share (empty: auto)
  std::string share_text;       ///< "auto" or the share
  std::uint64_t batches = 0;    ///< batches of the timed run
  std::uint64_t warmup = 0;     ///< untimed batches before each run
  const char* warmup_what = "";
  bool sweeping = false;       ///< --sweep share
  bool latency_sweep = false;  ///< --sweep latency
  /// --sweep share: points 0, 0.1, ..., 1, then auto (empty).
  std::vector<std::optional<double>> points;
  /// Workloads that insert new keys: a sweep reloads the index before each point.
  bool reload_each_point = false;
  bool churn = false, save = false;  ///< -w churn, -w save: workloads of their own
  /// --log-sync other than off: one fresh index per policy, with a storage folder.
  bool log_runs = false;
  bool keys_on_gpu = false;  ///< --keys-on gpu
  std::string host;
  tandem::config cfg;  ///< the index's config
};

/// @brief Resolves `opt` (already checked by parse_command_line).
[[nodiscard]] run_setup resolve_setup(const options& opt);

/// @brief Prints the header lines: tandem, the machine, the workload, the
///        index's settings, the sweep or warm-up.
void print_setup(const options& opt, const run_setup& s);

/// The batches of the run and of its warm-up, generated before any timing.
struct workload_data {
  dataset ds;
  std::vector<std::vector<tandem::op>> warm;
};

/// @brief Generates the workload (progress bar "setup") and prints how long
///        it took. @return false, the error printed, when generation failed
[[nodiscard]] bool make_workload(const run_setup& s, workload_data& out);

/// --verify: the model replaying what tandem ran, and what the checks found.
struct verify_state {
  std::unique_ptr<model> replay;  ///< null without --verify
  std::uint64_t answers_checked = 0, mismatches = 0, report_left = 10;
  std::vector<std::string> lines;  ///< printed at the end
  bool tandem_failed = false;      ///< index::verify() or the size disagreed
};

/// What the timed runs gave, for the report.
struct run_outcome {
  std::vector<system_result> results;  ///< tandem's rows first, then the baselines'
  std::vector<std::string> notes;      ///< lines printed under the tables
  std::optional<probe_figures> probe;  ///< the memory probe (empty: --no-probe or failed)
  std::string load_how;                ///< stats().last_load after tandem's first load
  verify_state check;
  int exit_code = 0;
};

/// @brief The memory probe (before the timed runs, not timed with them);
///        a failure becomes a note.
void run_probe(const options& opt, const run_setup& s, run_outcome& out);

/// @brief tandem's timed runs on `idx` (with --log-sync, a fresh index per
///        policy, left in `idx`), each checked with --verify.
/// @return false, the error printed, when a run failed
[[nodiscard]] bool run_tandem_points(const options& opt, const run_setup& s, const workload_data& w,
                                     std::unique_ptr<tandem::index>& idx, run_outcome& out);

/// @brief The baselines' timed runs on the same batches (--baselines).
/// @return false, the error printed, when a CPU baseline failed
[[nodiscard]] bool run_baselines(const options& opt, const run_setup& s, const workload_data& w, run_outcome& out);

/// @brief The tables, tandem's lines and the notes on stdout.
void print_summary(const options& opt, const run_setup& s, const workload_data& w, const run_outcome& out);

/// @brief The rows to --csv and --json, and the --plot.
void write_outputs(const options& opt, const run_setup& s, run_outcome& out);

/// @brief The verify lines (--verify). @return the exit status
[[nodiscard]] int finish(const options& opt, run_outcome& out);

}  // namespace tandem_bench
