#pragma once
/// @file
/// tandem-bench's results: one system_result per system (or sweep point),
/// the tables printed on stdout (systems, tandem's stages with bytes and
/// GB/s, heap allocations, memory probe, the GPU line, the sweep table) and
/// the CSV/JSON row of each.

#include "baselines.hpp"
#include "cli.hpp"
#include "probe.hpp"
#include "report.hpp"
#include "tandem_run.hpp"
#include "workload.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem_bench {

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

/// What every CSV/JSON row shares.
struct row_context {
  const workload_spec* spec = nullptr;
  std::uint64_t batches = 0;
  std::size_t threads = 0;
  const options* opt = nullptr;
  std::uint64_t warmup = 0;
  std::string host, cpu;
  std::optional<probe_figures> probe;  ///< empty with --no-probe
};

/// Decimal units (as GB/s): "512 B", "12.3 KB", "4.56 MB", "1.23 GB".
[[nodiscard]] std::string bytes_text(double b);
/// "12.34" M per second, or "-" when `seconds` is 0.
[[nodiscard]] std::string mops(double ops, double seconds);
/// "auto" or the share.
[[nodiscard]] std::string share_string(const std::optional<double>& s);

/// What the systems table's last column shows: run_figures::entries per second.
enum class entries_column { none, scan_entries, keys_counted };

/// The systems table: throughput, bulk load, hits (and scan entries or keys
/// counted per second).
void print_systems_table(const std::vector<const system_result*>& rows, entries_column entries);
/// tandem's stage table of one run (seconds, bytes, GB/s; the GPU route
/// fields under route), the PCIe and host bytes per op, and the heap
/// allocations per batch; `kept_results`: --verify kept every result;
/// `warmup`: untimed batches run before (0: the pools fill in the run).
void print_stage_table(const tandem_figures& t, std::uint64_t nb, double wall, bool kept_results,
                       std::uint64_t warmup);
/// The probe's line, and with a tandem run, tandem's host bytes per op set
/// against the probe's read bandwidth.
void print_probe_lines(const probe_figures& p, const tandem_figures* t, const run_figures* run);
/// One line on the GPU side of a tandem run: share used, policy, failures.
[[nodiscard]] std::string gpu_line(const tandem_figures& t, const std::string& requested);
/// "answers to batch order: N batches on the GPU, M on the host".
[[nodiscard]] std::string scatter_text(const tandem_figures& t);
/// The --sweep share table: one row per point, stages and GPU route fields.
void print_sweep_table(const std::vector<const system_result*>& points);

/// The CSV/JSON row of one system (or sweep point).
[[nodiscard]] json row_of(const system_result& r, const row_context& ctx);

}  // namespace tandem_bench
