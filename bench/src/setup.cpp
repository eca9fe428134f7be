// steps.hpp, steps 1 and 2: the options resolved, the header lines, the
// workload generated; the memory probe that runs before the timed runs.
#include "steps.hpp"

#include "report.hpp"

#include <oneapi/tbb/info.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>

namespace tandem_bench {

run_setup resolve_setup(const options& opt) {
  run_setup s;
  s.sweeping = opt.sweep == "share";
  s.keys_on_gpu = opt.keys_on == "gpu";
  s.latency_sweep = opt.sweep == "latency";
  workload_spec& spec = s.spec;
  spec.kind = to_workload(opt.workload);
  spec.dist = to_dist(opt.dist);
  spec.sorted_load = opt.load_order == "sorted";
  spec.keys = *parse_count(opt.keys);
  spec.ops = s.latency_sweep ? 0 : opt.ops == "auto" ? default_ops(spec.kind) : *parse_count(opt.ops);
  spec.batch = opt.batch == "auto" ? default_batch(spec.kind) : *parse_count(opt.batch);
  spec.seed = opt.seed;
  spec.scan_length = *parse_count(opt.scan_length);
  spec.order = opt.scan_order == "unordered" ? tandem::scan_order::unordered : tandem::scan_order::ordered;
  s.threads = opt.threads ? opt.threads : static_cast<std::size_t>(tbb::info::default_concurrency());
  s.share = opt.gpu_share == "auto" ? std::nullopt : parse_share(opt.gpu_share);
  s.share_text = share_string(s.share);
  s.batches = (spec.ops + spec.batch - 1) / spec.batch;
  s.warmup = opt.warmup == "auto" ? 4 : *parse_count(opt.warmup);
  s.warmup_what = describe_warmup(spec.kind);
  if (s.sweeping) {
    for (int i = 0; i <= 10; ++i) s.points.emplace_back(i / 10.0);
    s.points.emplace_back(std::nullopt);
  }
  s.reload_each_point = spec.kind == workload_kind::load || spec.kind == workload_kind::e;
  s.churn = opt.workload == "churn";
  s.save = opt.workload == "save";
  s.log_runs = !(opt.log_sync.size() == 1 && opt.log_sync[0] == "off");
  s.host = host_name();

  tandem::config& cfg = s.cfg;
  cfg.threads = s.threads;
  cfg.fanout = opt.fanout;
  cfg.leaf_fill = opt.leaf_fill;
  cfg.gpu_order = to_gpu_order(opt.gpu_order);
  cfg.gpu_scatter = opt.gpu_scatter == "on";
  cfg.gpu_cache_writes = opt.gpu_cache_writes == "on";
  cfg.gpu_leaf_hints = opt.leaf_hints == "on";
  cfg.caller_runs = opt.caller_runs == "on";
  cfg.max_gpu_route_keys = static_cast<std::size_t>(*parse_count(opt.gpu_route_keys));
  // Bytes, or P% of the loaded pairs' bytes (16 a pair).
  auto bytes_of = [&](const std::string& v) {
    return !v.empty() && v.back() == '%'
               ? static_cast<std::size_t>(std::strtod(v.c_str(), nullptr) / 100.0 * static_cast<double>(spec.keys) *
                                          16.0)
               : static_cast<std::size_t>(*parse_count(v));
  };
  cfg.max_gpu_bytes = bytes_of(opt.gpu_budget);
  if (opt.gpu_cache == "off") {
    cfg.gpu_cache_bytes = 0;
  } else if (opt.gpu_cache == "all") {
    // Slots for the leaves a load makes and a quarter more (splits), and
    // room for small indexes.
    const double leaves = static_cast<double>(spec.keys) / (1024.0 * opt.leaf_fill);
    cfg.gpu_cache_bytes = (static_cast<std::size_t>(leaves * 1.25) + 1024) * 1024 * 16;
  } else if (opt.gpu_cache != "auto") {
    cfg.gpu_cache_bytes = bytes_of(opt.gpu_cache);
  }
  if (opt.small_batch != "auto") cfg.small_batch_ops = static_cast<std::size_t>(*parse_count(opt.small_batch));
  if (opt.direct_gets != "auto") cfg.direct_get_ops = static_cast<std::size_t>(*parse_count(opt.direct_gets));
  if (opt.min_gpu_batch != "auto") cfg.min_gpu_batch = static_cast<std::size_t>(*parse_count(opt.min_gpu_batch));
  if (opt.group_commit != "auto") cfg.group_commit_ops = static_cast<std::size_t>(*parse_count(opt.group_commit));
  if (opt.group_commit_output != "auto") {
    cfg.group_commit_output_bytes = static_cast<std::size_t>(*parse_count(opt.group_commit_output));
  }
  if (opt.gpus > 1 && opt.shards == 0) {
    for (int g = 0; g < static_cast<int>(opt.gpus); ++g) cfg.gpu_devices.push_back(g);
  }
  cfg.device = opt.device == "gpu"   ? tandem::device_kind::gpu
               : opt.device == "cpu" ? tandem::device_kind::cpu
                                     : tandem::device_kind::automatic;
  if (s.latency_sweep && s.log_runs) {  // one policy (parse_command_line), the index's for the sweep
    cfg.storage_dir = opt.storage_dir;
    cfg.log_sync_policy = to_log_sync(opt.log_sync[0]);
  }
  return s;
}

void print_setup(const options& opt, const run_setup& s) {
  const workload_spec& spec = s.spec;
  std::printf("tandem-bench: tandem %s (CUDA layer: %s) on %s, %u CPUs (%s)\n", tandem::version(),
              tandem::built_with_cuda() ? "yes" : "no", s.host.c_str(), cpu_count(), cpu_model().c_str());
  if (s.churn) {
    std::printf("workload churn: keys %s (the window); rounds %s\n", pow2_text(spec.keys).c_str(), opt.rounds.c_str());
  } else if (s.save) {
    std::printf("workload save: keys %s\n", pow2_text(spec.keys).c_str());
  } else {
    std::printf("workload %s: %s; dist %s; keys %s (loaded in %s order); ops %s; batch %s (%llu batches, up to %zu "
                "in flight)\n",
                to_string(spec.kind), describe(spec.kind, spec.scan_length, spec.order).c_str(), to_string(spec.dist),
                pow2_text(spec.keys).c_str(), spec.sorted_load ? "key" : "random", pow2_text(spec.ops).c_str(),
                pow2_text(spec.batch).c_str(), static_cast<unsigned long long>(s.batches), opt.inflight);
  }
  std::printf("threads %zu; device %s; gpu-share %s; gpu-order %s; gpu-scatter %s; leaf-hints %s; gpu-route-keys %s; "
              "seed %llu%s\n",
              s.threads, opt.device.c_str(), s.sweeping ? "swept" : s.share_text.c_str(), opt.gpu_order.c_str(),
              opt.gpu_scatter.c_str(), opt.leaf_hints.c_str(),
              opt.gpu_route_keys == "0" ? "unbounded" : opt.gpu_route_keys.c_str(),
              static_cast<unsigned long long>(spec.seed), opt.verify ? "; verify on" : "");
  if (s.sweeping) {
    std::printf("sweep share: 0, 0.1, ..., 1, auto on one index (%s); %llu warm-up batches of %s before each point\n",
                s.reload_each_point ? "reloaded before each point: the workload inserts new keys"
                                    : "loaded once; the points run one after another",
                static_cast<unsigned long long>(s.warmup), s.warmup_what);
  } else if (s.warmup) {
    std::printf("warm-up: %llu untimed batches of %s before the run\n", static_cast<unsigned long long>(s.warmup),
                s.warmup_what);
  }
  std::fflush(stdout);
}

bool make_workload(const run_setup& s, workload_data& out) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    progress_bar bar("setup", dataset_steps, "steps");
    out.ds = make_dataset(s.spec, [&](std::size_t done) { bar.update(done); });
    out.warm = make_warmup_batches(out.ds, s.spec, s.warmup);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    return false;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("setup (not timed): %zu keys, %llu ops in %zu batches generated in %.2f s\n", out.ds.load_keys.size(),
              static_cast<unsigned long long>(s.spec.ops), out.ds.batches.size(), seconds);
  std::fflush(stdout);
  return true;
}

void run_probe(const options& opt, const run_setup& s, run_outcome& out) {
  if (!opt.probe) return;
  try {
    progress_bar bar("memory probe", 1, "probe");
    out.probe = run_memory_probe(s.threads, s.spec.keys);
  } catch (const std::exception& e) {
    out.notes.push_back(std::string("memory probe: failed: ") + e.what());
  }
}

}  // namespace tandem_bench
