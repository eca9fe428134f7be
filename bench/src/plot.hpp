#pragma once
/// @file
/// tandem-bench's plots, from the rows it writes to --csv/--json (or reads
/// back from such a CSV):
///  - a GPU-share sweep (--sweep share): throughput (M ops/s) against the
///    GPU share, one point per fixed share, the automatic point at the share
///    it used, the share actually used on a second axis, and each baseline
///    as a horizontal line;
///  - a latency sweep (--sweep latency): latency against batch size and
///    throughput against p99 latency, one line per system and client count;
///  - plain runs (one row per system per run, several runs appended with
///    --csv-append): throughput against the number of keys, one line per
///    system, when the runs differ in --keys alone; otherwise grouped bars,
///    one group per run labelled by the settings that differ between the
///    runs, one bar per system. y is M ops/s, or M entries/s (M keys
///    counted/s) when every run is a scan (count) workload.
/// plot_rows picks one of the three from the rows. Each is written as a
/// self-contained gnuplot script (the data inline) next to the PNG, FILE.gp
/// for FILE.png, and rendered with gnuplot when one is found: the path
/// CMake's find_program saw at build time (TANDEM_BENCH_GNUPLOT), else
/// `gnuplot` on PATH. Without gnuplot only the script is written and the
/// caller is told so.

#include "report.hpp"

#include <string>
#include <vector>

namespace tandem_bench {

/// What became of a plot, one line for stdout.
struct plot_outcome {
  bool rendered = false;
  std::string message;
};

/// @brief Plots the sweep rows of `rows` (objects as written to --csv/--json:
///        rows with "sweep" = "share" are tandem's points, every other row a
///        baseline) into `png`.
/// @throws std::runtime_error when the script cannot be written or the rows
///         hold no sweep point
plot_outcome plot_share_sweep(const std::vector<json>& rows, const std::string& png);

/// @brief Plots --sweep latency rows (with p50_us, p99_us, p999_us): latency
///        against batch size and throughput against p99 latency, one line
///        per system and client count (as plot_share_sweep: FILE.gp, and
///        FILE.png when gnuplot is found).
/// @throws std::runtime_error when the script cannot be written or the rows
///         hold no latency point
plot_outcome plot_latency(const std::vector<json>& rows, const std::string& png);

/// @brief Plots the rows of plain runs (rows with ops_per_s and no "sweep";
///        sweep rows are skipped) into `png`: throughput against keys when
///        the runs differ in "keys" alone, else grouped bars, one group per
///        run and one bar per system (see the file comment). A run is
///        tandem's row and the baselines' rows after it.
/// @throws std::runtime_error when the script cannot be written or the rows
///         hold no plain run
plot_outcome plot_runs(const std::vector<json>& rows, const std::string& png);

/// @brief -w churn's rounds: leaf memory and resident memory (left axis)
///        and leaves (right axis) against the round, and each round's
///        throughput below.
plot_outcome plot_churn(const std::vector<json>& rows, const std::string& png);

/// @brief Plots `rows` (as read back by read_csv) as what they hold: any
///        --sweep share row makes it plot_share_sweep, any --sweep latency
///        row plot_latency, otherwise plot_runs.
/// @throws std::runtime_error as the plot it picks
plot_outcome plot_rows(const std::vector<json>& rows, const std::string& png);

/// @brief Reads a CSV written by write_csv back into rows: numbers become
///        numbers, true/false booleans, empty fields null.
/// @throws std::runtime_error when the file cannot be read or a row's field
///         count differs from the header's
[[nodiscard]] std::vector<json> read_csv(const std::string& path);

/// The gnuplot found at run time, or "" (see the file comment).
[[nodiscard]] std::string find_gnuplot();

}  // namespace tandem_bench
