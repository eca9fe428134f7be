#pragma once
/// @file
/// tandem-bench's command line: the options, their parsing (CLI11) and the
/// small parsers and workload-dependent defaults main() resolves them with.

#include "workload.hpp"

#include <tandem/config.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem_bench {

struct options {
  std::string keys = "2^22";
  std::string ops = "auto";
  std::string batch = "auto";
  std::string workload = "C";
  std::string dist = "uniform";
  std::string load_order = "random";  ///< random | sorted
  std::size_t threads = 0;
  std::string device = "auto";
  std::string gpu_share = "auto";
  std::uint64_t seed = 42;
  std::string scan_length = "10000";
  std::string scan_order = "ordered";
  std::size_t inflight = 4;
  int fanout = 32;
  std::string gpu_order = "full";   ///< full | partial | none
  std::string gpu_scatter = "on";   ///< on | off
  std::string gpu_cache_writes = "off";  ///< config.gpu_cache_writes: on | off
  std::string leaf_hints = "on";    ///< on | off
  std::string caller_runs = "on";   ///< config.caller_runs: on | off
  std::string gpu_route_keys = "0";  ///< config.max_gpu_route_keys (0: no bound)
  std::string gpu_cache = "auto";    ///< config.gpu_cache_bytes: auto, off, all, bytes, or P% of the pairs' bytes
  std::string gpu_budget = "0";      ///< config.max_gpu_bytes: bytes, or P% of the pairs' bytes (0: no bound)
  std::string small_batch = "auto";  ///< config.small_batch_ops (auto: the config's default)
  std::string direct_gets = "auto";  ///< config.direct_get_ops (auto: the config's default)
  std::string min_gpu_batch = "auto";  ///< config.min_gpu_batch (auto: the config's default)
  std::string group_commit = "auto";  ///< config.group_commit_ops (auto: the config's default)
  std::string group_commit_output = "auto";  ///< config.group_commit_output_bytes (auto: the default)
  double leaf_fill = 0.75;
  bool verify = false;
  bool baselines = true;
  std::vector<std::string> skip_baselines;  ///< absl | tbb | gpu-array
  bool probe = true;
  std::size_t absl_shards = 64;
  std::string csv;
  bool csv_append = false;
  std::string json;
  std::string sweep;
  std::string latency_batches = "1,16,64,256,1024,4096,65536";  ///< --sweep latency: B values
  std::string latency_clients = "1,4,16";                       ///< --sweep latency: K values
  std::string rounds = "1000";       ///< -w churn: rounds
  std::string snapshot_path = "tandem-bench.snapshot";  ///< -w save: the snapshot file
  std::string churn_keys = "ordered";  ///< -w churn: ordered | random
  std::vector<std::string> log_sync{"off"};  ///< --log-sync: off | none | group | batch, one run each
  std::string storage_dir = "tandem-bench-storage";  ///< --log-sync: the index's storage folder
  double latency_seconds = 1.0;                                  ///< --sweep latency: seconds a point and system
  std::string latency_wait = "future";                           ///< --sweep latency: future | spin
  std::string latency_api = "batch";                             ///< --sweep latency: batch | point
  int latency_puts = -1;  ///< --sweep latency: percent of puts among the ops (-1: the workload's)
  bool client_work = false;  ///< --client-work: also the run with batches built and answers read on client threads
  std::size_t clients = 1;   ///< --clients: client threads of --client-work
  std::string keys_on = "host";  ///< --keys-on: host | gpu (also the runs with keys and answers in GPU memory)
  std::size_t shards = 0;    ///< --shards: indexes over equal key ranges (0: one index, the usual run)
  std::size_t gpus = 1;      ///< --gpus: GPUs of one index (config.gpu_devices 0 .. N-1)
  std::string warmup = "auto";
  std::string plot;
  std::string plot_csv;
};

/// Parses the command line into `opt`.
/// @return -1 to go on, else the exit status (--help, a bad option)
[[nodiscard]] int parse_command_line(int argc, char** argv, options& opt);

/// Parses a count: decimal ("16777216", "16'777'216"), a power of two
/// ("2^24") or decimal exponent notation ("1e6"). Empty when malformed.
[[nodiscard]] std::optional<std::uint64_t> parse_count(std::string s);
/// "auto", or a number in [0, 1].
[[nodiscard]] std::optional<double> parse_share(const std::string& s);
/// "16777216 (2^24)" for powers of two, else the number.
[[nodiscard]] std::string pow2_text(std::uint64_t n);

[[nodiscard]] workload_kind to_workload(const std::string& s);
[[nodiscard]] key_dist to_dist(const std::string& s);
[[nodiscard]] tandem::gpu_query_order to_gpu_order(const std::string& s);
/// A --log-sync policy other than off.
[[nodiscard]] tandem::log_sync to_log_sync(const std::string& s);
/// Workload-dependent defaults of --ops and --batch.
[[nodiscard]] std::uint64_t default_ops(workload_kind w);
[[nodiscard]] std::uint64_t default_batch(workload_kind w);

}  // namespace tandem_bench
