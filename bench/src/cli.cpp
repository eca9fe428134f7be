// tandem-bench's command line (cli.hpp).
#include "cli.hpp"

#include <tandem/batch.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace tandem_bench {

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


workload_kind to_workload(const std::string& s) {
  if (s == "load") return workload_kind::load;
  if (s == "A") return workload_kind::a;
  if (s == "B") return workload_kind::b;
  if (s == "E") return workload_kind::e;
  if (s == "scan") return workload_kind::scan;
  if (s == "count") return workload_kind::count;
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
    case workload_kind::count:
      return std::uint64_t{1} << 16;
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
    case workload_kind::count:
      return std::uint64_t{1} << 12;
    default:
      return std::uint64_t{1} << 20;
  }
}

tandem::gpu_query_order to_gpu_order(const std::string& s) {
  if (s == "partial") return tandem::gpu_query_order::partial_sort;
  if (s == "none") return tandem::gpu_query_order::none;
  return tandem::gpu_query_order::full_sort;
}

tandem::log_sync to_log_sync(const std::string& s) {
  if (s == "none") return tandem::log_sync::none;
  if (s == "group") return tandem::log_sync::group;
  return tandem::log_sync::batch;
}

int parse_command_line(int argc, char** argv, options& opt) {
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
  // Bytes (a count) or P% with P in (0, max_percent], or one of `words`.
  auto bytes_or_percent = [](double max_percent, std::vector<std::string> words, std::string what) {
    return CLI::Validator(
        [=](std::string& v) -> std::string {
          if (std::find(words.begin(), words.end(), v) != words.end()) return "";
          if (!v.empty() && v.back() == '%') {
            char* end = nullptr;
            const double p = std::strtod(v.c_str(), &end);
            return end == v.c_str() + v.size() - 1 && p > 0 && p <= max_percent
                       ? ""
                       : "must be P% with P in (0, " + std::to_string(static_cast<int>(max_percent)) + "]";
          }
          return parse_count(v) ? "" : "must be " + what;
        },
        "");
  };
  app.add_option("--keys", opt.keys,
                 "Keys loaded before the run: N distinct uniformly random uint64 keys (--seed), 0 and UINT64_MAX "
                 "always among them. Accepts 16777216, 2^24, 1e6")
      ->check(count_in(2, std::uint64_t{1} << 40, false))
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--ops", opt.ops,
                 "Ops run after the load. auto: 2^23 for load/C/A/B, 2^21 for E, 2^12 for scan, 2^16 for count")
      ->check(count_in(0, std::uint64_t{1} << 40, true))
      ->type_name("M|auto")
      ->capture_default_str();
  app.add_option("--batch", opt.batch,
                 "Ops per batch. auto: 2^20 for load/C/A/B, 2^18 for E, 2^8 for scan, 2^12 for count")
      ->check(count_in(1, (std::uint64_t{1} << 32) - 2, true))
      ->type_name("B|auto")
      ->capture_default_str();
  app.add_option("--workload,-w", opt.workload,
                 "load: bulk load timed (keys/s), then M inserts of new keys; C: 100% get; A: 50% get / 50% put; "
                 "B: 95% get / 5% put; E: 95% ordered scans of 1..100 keys (uniform) / 5% inserts of new keys; "
                 "scan: long scans of --scan-length keys (also reports entries/s); count: counts over random ranges "
                 "holding about --scan-length keys (also reports keys counted/s); churn: a sliding window of --keys "
                 "keys for --rounds rounds, each inserting the next keys/16 and erasing the keys/16 oldest among "
                 "reads (memory, leaves and throughput per round; then the window erased whole and compact()); save: "
                 "index::save and index::open of --keys pairs beside a plain sequential write and read of as many "
                 "bytes to the same disk and a sorted bulk load (see --snapshot-path)")
      ->transform(CLI::IsMember({"load", "C", "A", "B", "E", "scan", "count", "churn", "save"}, CLI::ignore_case))
      ->type_name("W")
      ->capture_default_str();
  app.add_option("--dist,-d", opt.dist,
                 "Which loaded keys the ops use: uniform; zipf (YCSB scrambled zipfian, constant 0.99: popular "
                 "ranks scattered over the keys by FNV); sequential (walks the keys in key order; "
                 "the inserts of load and E append new keys in ascending order at the right end)")
      ->transform(CLI::IsMember({"uniform", "zipf", "sequential"}, CLI::ignore_case))
      ->type_name("D")
      ->capture_default_str();
  app.add_option("--load-order", opt.load_order,
                 "Order of the pairs every system bulk-loads: random, or sorted (in key order: tandem detects it "
                 "and skips its sort)")
      ->check(CLI::IsMember({"random", "sorted"}))
      ->type_name("ORDER")
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
  app.add_option("--scan-length", opt.scan_length, "Entries per scan of --workload scan, and keys per range of --workload count (at most 2^24)")
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
                 "tandem::config.gpu_order: how the GPU orders keys before the descent: full (sort (key, position) "
                 "on all 64 bits; the host sorts nothing), partial (sort on the top log2(keys/8) bits; the host "
                 "sorts each leaf's ops) or none (batch order; the host sorts)")
      ->check(CLI::IsMember({"full", "partial", "none"}))
      ->type_name("ORDER")
      ->capture_default_str();
  app.add_option("--gpu-route-keys", opt.gpu_route_keys,
                 "tandem::config.max_gpu_route_keys: most keys one GPU route takes (larger GPU shares go in "
                 "slices the host merges; such batches scatter on the host); bounds the GPU memory of batches. "
                 "0: no bound")
      ->check(count_in(0, std::uint64_t{1} << 32, false))
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--gpu-cache", opt.gpu_cache,
                 "tandem::config.gpu_cache_bytes: GPU memory for copies of leaves that answer gets in the route: "
                 "bytes (2^32), P% of the loaded pairs' bytes (16 a pair), all (room for every leaf), off, or auto "
                 "(half the free GPU memory; none under --gpu-budget). Without a GPU, bytes keep the copies in host "
                 "memory (a stand-in for tests)")
      ->check(bytes_or_percent(1000, {"auto", "off", "all"}, "auto, off, all, a byte count (e.g. 2^32) or P%"))
      ->type_name("BYTES|P%|all|off|auto")
      ->capture_default_str();
  app.add_option("--gpu-cache-writes", opt.gpu_cache_writes,
                 "tandem::config.gpu_cache_writes: on, batches of point ops with writes (at most a quarter of their "
                 "ops on the GPU) are answered from the leaf copies too, and their puts written into them")
      ->check(CLI::IsMember({"on", "off"}))
      ->type_name("on|off")
      ->capture_default_str();
  app.add_option("--gpu-budget", opt.gpu_budget,
                 "tandem::config.max_gpu_bytes: most GPU memory the index holds, in bytes (2^28, 300000000) or "
                 "as a percentage of the loaded pairs' bytes (16 a pair: 1% of 2^31 pairs is 344 MB); the leaf "
                 "guides are dropped and routes go in key ranges to stay within it. 0: no bound")
      ->check(bytes_or_percent(100, {}, "a byte count (e.g. 2^28) or P%"))
      ->type_name("BYTES|P%")
      ->capture_default_str();
  app.add_option("--small-batch", opt.small_batch,
                 "tandem::config.small_batch_ops: batches of at most this many ops run on the dispatcher thread "
                 "alone (0: never); auto: the config's default")
      ->check(count_in(0, std::uint64_t{1} << 32, true))
      ->type_name("N|auto")
      ->capture_default_str();
  app.add_option("--direct-gets", opt.direct_gets,
                 "tandem::config.direct_get_ops: batches of at most this many gets are answered directly (each get "
                 "descends and reads its leaf; no sort, no scatter; 0: never); auto: the config's default")
      ->check(count_in(0, std::uint64_t{1} << 32, true))
      ->type_name("N|auto")
      ->capture_default_str();
  app.add_option("--min-gpu-batch", opt.min_gpu_batch,
                 "tandem::config.min_gpu_batch: batches of fewer ops route on the CPU only (with the leaf cache "
                 "holding the leaves, batches of gets from this many on are answered from the GPU's copies); auto: "
                 "the config's default")
      ->check(count_in(0, std::uint64_t{1} << 32, true))
      ->type_name("N|auto")
      ->capture_default_str();
  app.add_option("--group-commit", opt.group_commit,
                 "tandem::config.group_commit_ops: batches waiting in the queue together run as one of at most "
                 "this many ops (0: never); auto: the config's default")
      ->check(count_in(0, std::uint64_t{1} << 32, true))
      ->type_name("N|auto")
      ->capture_default_str();
  app.add_option("--group-commit-output", opt.group_commit_output,
                 "tandem::config.group_commit_output_bytes: most bytes of scan entries (by the scans' limits) "
                 "that folded batches may return together; a batch whose scans may return more runs alone; auto: "
                 "the config's default")
      ->check(count_in(0, std::uint64_t{1} << 40, true))
      ->type_name("BYTES|auto")
      ->capture_default_str();
  app.add_option("--gpu-scatter", opt.gpu_scatter,
                 "tandem::config.gpu_scatter: on, a GPU-routed batch's answers go back to batch order on the GPU; "
                 "off, on the host. The tandem line says how many batches scattered where")
      ->check(CLI::IsMember({"on", "off"}))
      ->type_name("on|off")
      ->capture_default_str();
  app.add_option("--leaf-hints", opt.leaf_hints,
                 "tandem::config.gpu_leaf_hints: on, the GPU keeps a guide of each leaf's blocks and a GPU route of "
                 "gets hands each get its block and lookup window; off, the host finds them from the leaf's header")
      ->check(CLI::IsMember({"on", "off"}))
      ->type_name("on|off")
      ->capture_default_str();
  app.add_option("--caller-runs", opt.caller_runs,
                 "tandem::config.caller_runs: on, a batch of at most --small-batch gets submitted for a future while "
                 "the index is idle is answered on the submitting thread; off, every batch goes through the "
                 "dispatcher")
      ->check(CLI::IsMember({"on", "off"}))
      ->type_name("on|off")
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
  app.add_option("--skip-baseline", opt.skip_baselines,
                 "Leave this baseline out (repeatable; with --baselines): absl, tbb or gpu-array. tbb loads at "
                 "about 3 M keys/s, so at 2^30 keys and beyond it takes minutes")
      ->check(CLI::IsMember({"absl", "tbb", "gpu-array"}))
      ->type_name("NAME");
  app.add_flag("--probe,!--no-probe", opt.probe,
               "(Default on; --no-probe: skip.) Before the timed runs, measure host sequential read and write "
               "GB/s and random 8-byte reads/s with --threads threads over an array of min(1 GiB, keys*16 bytes) "
               "(less where first-touch page faults are slow; about 1 to 1.5 s in all), and set tandem's host bytes per op against the read bandwidth");
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
                     "Without a usable GPU every point routes on the CPU (share used 0). "
                     "latency: closed-loop clients (--latency-clients), each keeping one batch of B ops "
                     "(--latency-batches) in flight for --latency-seconds, timed from submit to answer; prints "
                     "p50, p99, p99.9 and max per point for tandem and absl (answering the same batches on the "
                     "client threads); --csv/--json write the rows, --plot draws latency against batch size")
          ->check(CLI::IsMember({"share", "latency"}))
          ->type_name("WHAT");
  app.add_option("--latency-batches", opt.latency_batches, "--sweep latency: batch sizes B, comma-separated")
      ->type_name("B,B,...")
      ->capture_default_str();
  app.add_option("--latency-clients", opt.latency_clients,
                 "--sweep latency: client counts K, comma-separated (each client a thread keeping one batch in "
                 "flight)")
      ->type_name("K,K,...")
      ->capture_default_str();
  app.add_option("--latency-wait", opt.latency_wait,
                 "--sweep latency: how a tandem client waits: future (submit, then future::get(), which sleeps) "
                 "or spin (submit with a callback, spin until it has run: no wake-up on the way back)")
      ->check(CLI::IsMember({"future", "spin"}))
      ->type_name("HOW")
      ->capture_default_str();
  app.add_flag("--client-work", opt.client_work,
               "After tandem's run, the same batches as a program that holds its keys in arrays sends them: on "
               "--clients threads, each batch handed over inside the timed loop (gets: index::submit(columns), its "
               "key array read and its answers written in place; other ops: a tandem::batch built from the arrays) "
               "and every answer read, up to --inflight batches a client in flight; reported beside the index-only "
               "run (workloads of gets, puts, inserts and erases)");
  app.add_option("--keys-on", opt.keys_on,
                 "gpu: after tandem's run, the same batches with their keys and answer arrays in the GPU's memory "
                 "(uploaded before timing, as a GPU pipeline holds them), handed to the index as device columns "
                 "(index::submit of columns with columns::device), up to --inflight in flight, the answers then "
                 "compared with host columns'; and the gpu-array baseline run again with its queries and answers "
                 "in GPU memory (workload C)")
      ->check(CLI::IsMember({"host", "gpu"}))
      ->capture_default_str();
  app.add_option("--clients", opt.clients, "--client-work: client threads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--gpus", opt.gpus,
                 "One index over GPUs 0 .. N-1 (config.gpu_devices): each holds the inner levels and the same "
                 "leaf copies, and batches of gets the copies take are cut by position over them. With --shards "
                 "and N >= 2, the shards take GPUs 0 .. N-1 in turn (else every GPU found)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{16}))
      ->capture_default_str();
  app.add_option("--shards", opt.shards,
                 "What more GPUs give this host: N indexes over N equal key ranges, shard i on GPU i mod (GPUs "
                 "found) (config.gpu_device), each loaded with its range's keys (--keys is the keys of one shard: "
                 "N times as many are loaded). One client thread cuts each batch by range, submits every shard's "
                 "part at once and puts the answers back in batch order, up to --inflight batches in flight; "
                 "timed from the first cut to the last answer put back; its key and answer arrays are pinned. "
                 "With --threads 0 each shard gets max(1, hardware threads / N) threads (the one shard all of "
                 "them). In the same run, first, one shard on one "
                 "GPU holding --keys keys runs the same ops count in batches of the same size; prints both, each "
                 "shard's GPU and the ratio. Workloads C, A, B and load; no baselines, probe or sweep; --verify "
                 "(C only) checks every get inside the timed run")
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}))
      ->type_name("N");
  app.add_option("--latency-puts", opt.latency_puts,
                 "--sweep latency: percent of the ops that are puts (of loaded keys), the rest gets; -1: the "
                 "workload's (C 0, B 5, A 50)")
      ->check(CLI::Range(-1, 100))
      ->type_name("PCT")
      ->capture_default_str();
  app.add_option("--latency-api", opt.latency_api,
                 "--sweep latency: how a tandem client asks: batch (a batch of B ops, submitted) or point (B calls "
                 "of the one-key API, index::get and index::put, one after another; timed together)")
      ->check(CLI::IsMember({"batch", "point"}))
      ->type_name("API")
      ->capture_default_str();
  app.add_option("--snapshot-path", opt.snapshot_path,
                 "-w save: the snapshot file (its folder also gets the plain file of the comparison; both are removed "
                 "at the end)")
      ->capture_default_str();
  app.add_option("--log-sync", opt.log_sync,
                 "Run tandem once per value, each on a fresh index (loaded, warmed up, timed): off (no "
                 "config.storage_dir) or the redo log's config.log_sync_policy none, group or batch, with the "
                 "log in --storage-dir; one row each, and their rates against off's. Comma-separated. With "
                 "--sweep latency: one policy, the index's for the whole sweep")
      ->delimiter(',')
      ->check(CLI::IsMember({"off", "none", "group", "batch"}))
      ->type_name("POLICY,...")
      ->capture_default_str();
  app.add_option("--storage-dir", opt.storage_dir,
                 "--log-sync: the folder of the index's checkpoint and redo log (emptied before each run, removed "
                 "at the end)")
      ->capture_default_str();
  app.add_option("--rounds", opt.rounds, "-w churn: rounds of the sliding window")
      ->check(count_in(1, std::uint64_t{1} << 24, false))
      ->type_name("R")
      ->capture_default_str();
  app.add_option("--churn-keys", opt.churn_keys,
                 "-w churn: time-ordered keys (key i is i: the window slides right) or random ones (key i is a "
                 "hash of i: the same churn spread over the key space)")
      ->check(CLI::IsMember({"ordered", "random"}))
      ->capture_default_str();
  app.add_option("--latency-seconds", opt.latency_seconds, "--sweep latency: seconds per point and system")
      ->check(CLI::Range(0.01, 600.0))
      ->type_name("S")
      ->capture_default_str();
  share_opt->excludes(sweep_opt);
  app.add_option("--warmup", opt.warmup,
                 "Untimed batches of --batch ops on loaded keys in the workload's mix of reads (C: gets; A, B, "
                 "load: gets and, every other op, an insert of a loaded key: present, so it changes nothing; E "
                 "and scan: their scans, E with 5% such inserts) run on tandem before each timed run: "
                 "they fill the index's batch memory pools (first touch of fresh pages; their results are kept "
                 "until the last one is answered, so the answer pool ends with one column set per batch in "
                 "flight), warm the GPU and let the auto share converge, so the timed run shows the steady "
                 "state. auto: 4 (a batch through each of the index's three route spaces, and the answer pool "
                 "filled for --inflight 4)")
      ->check(count_in(0, 1u << 20, true))
      ->type_name("W|auto")
      ->capture_default_str();
  app.add_option("--plot", opt.plot,
                 "Write FILE.gp, a self-contained gnuplot script, and run gnuplot on it to make FILE.png when "
                 "gnuplot is found (the one CMake found at build time, else on PATH; configuring as root installs "
                 "gnuplot-nox); otherwise say so and keep the script. With --sweep share: throughput against the "
                 "GPU share (baselines as lines); with --sweep latency: latency against batch size and throughput "
                 "against p99. A plain run plots the rows of its --csv file, so with --csv-append every run "
                 "appended so far (without --csv, this run's rows): throughput against keys, one line per system, "
                 "when the runs differ in --keys alone; otherwise grouped bars, one group per run labelled by the "
                 "settings that differ, one bar per system (M ops/s; M entries/s when every run is --workload "
                 "scan, M keys counted/s for count)")
      ->type_name("FILE.png");
  app.add_option("--plot-csv", opt.plot_csv,
                 "Run nothing: plot a CSV written earlier by --csv into --plot FILE.png, as what it holds: "
                 "--sweep share rows, --sweep latency rows, or plain runs (see --plot). Exit status 1 when "
                 "gnuplot is not found")
      ->check(CLI::ExistingFile)
      ->type_name("CSV");
  app.add_option("--csv", opt.csv,
                 "Write one CSV row per system to FILE (with --sweep: one per point, then one per baseline)")
      ->type_name("FILE");
  app.add_flag("--csv-append", opt.csv_append, "Append to the --csv file (header only when it is new or empty)");
  app.add_option("--json", opt.json, "Write a JSON array, one object per system, to FILE")->type_name("FILE");
  app.footer(
      "Output: a table on stdout (M ops/s and seconds of the timed run per system; bulk-load rate; tandem's "
      "per-stage seconds, bytes moved and GB/s from tandem::stats with the GPU route times (gpu_upload, "
      "gpu_sort, gpu_kernel, gpu_download, gpu_route, cpu_route) summed over the batches, PCIe bytes, host "
      "bytes per op, heap allocations per batch during the timed run, the memory probe, device, GPU share "
      "used, batches scattered on the GPU/host, leaves, height, splits; with --sweep one such row per share); "
      "a progress bar on stderr when it is a terminal. tandem is "
      "timed from its first submit to its last result, with up to --inflight batches queued; the baselines from "
      "their first to their last batch. Batches are generated before timing.\nExit status: 0 ok, 1 a verify "
      "mismatch, a failed batch or baseline, an unwritable output file, or --plot-csv without gnuplot, 2 the "
      "index cannot be created (e.g. --device gpu without a GPU) or --plot-csv without --plot; other "
      "command-line errors exit with CLI11's codes.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const bool logged = !(opt.log_sync.size() == 1 && opt.log_sync[0] == "off");
  if (logged && (opt.sweep == "share" || (opt.sweep == "latency" && opt.log_sync.size() != 1))) {
    std::fprintf(stderr, "tandem-bench: --log-sync takes one policy with --sweep latency, and none with --sweep share\n");
    return 2;
  }
  if (opt.keys_on == "gpu" && (opt.workload != "C" || !opt.sweep.empty() || opt.shards != 0 || logged)) {
    std::fprintf(stderr, "tandem-bench: --keys-on gpu runs workload C, without --sweep, --shards or --log-sync\n");
    return 2;
  }
  if (opt.shards != 0) {
    const std::string w = opt.workload;
    const char* refused = nullptr;
    if (w != "C" && w != "A" && w != "B" && w != "load") {
      refused = "runs workloads of point ops: C, A, B or load";
    } else if (!opt.sweep.empty()) {
      refused = "runs no --sweep";
    } else if (opt.client_work) {
      refused = "is a client run already (no --client-work)";
    } else if (logged) {
      refused = "runs without a redo log (no --log-sync)";
    } else if (opt.verify && w != "C") {
      refused = "checks answers of workload C only (--verify)";
    } else if (!opt.plot.empty()) {
      refused = "draws no plot (--plot)";
    }
    if (refused) {
      std::fprintf(stderr, "tandem-bench: --shards %s\n", refused);
      return 2;
    }
  }
  return -1;
}

}  // namespace tandem_bench
