// tandem-bench's tables and CSV/JSON rows (tables.hpp).
#include "tables.hpp"

#include <tandem/tandem.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

namespace tandem_bench {
namespace {

/// One stage of tandem::stage_times / stage_bytes.
struct stage_view {
  const char* name;
  double seconds;
  std::uint64_t bytes;
};

std::vector<stage_view> stages_of(const tandem_figures& t) {
  return {{"validate", t.stages.validate, t.bytes.validate}, {"route", t.stages.route, t.bytes.route},
          {"order", t.stages.order, t.bytes.order},          {"read", t.stages.read, t.bytes.read},
          {"leaf", t.stages.leaf, t.bytes.leaf},              {"sync", t.stages.sync, t.bytes.sync},
          {"complete", t.stages.complete, t.bytes.complete}};
}


/// Binary units for sizes of buffers: "64 MiB", "1 GiB".
std::string size_text(std::size_t b) {
  char buf[32];
  if (b >= (std::size_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%g GiB", static_cast<double>(b) / static_cast<double>(std::size_t{1} << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%g MiB", static_cast<double>(b) / static_cast<double>(std::size_t{1} << 20));
  }
  return buf;
}

double gbs(std::uint64_t bytes, double seconds) { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }

double per(std::uint64_t x, std::uint64_t n) { return n ? static_cast<double>(x) / static_cast<double>(n) : 0; }

}  // namespace

std::string bytes_text(double b) {
  char buf[32];
  if (b < 1e3) {
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  } else if (b < 1e6) {
    std::snprintf(buf, sizeof buf, "%.1f KB", b / 1e3);
  } else if (b < 1e9) {
    std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  }
  return buf;
}

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

void print_systems_table(const std::vector<const system_result*>& rows, entries_column entries) {
  const bool scans = entries != entries_column::none;
  std::printf("\n%-14s %18s %10s %18s %10s %8s", "system", "throughput", "seconds", "bulk load", "load s", "found");
  if (scans) std::printf(" %20s", entries == entries_column::scan_entries ? "scan entries" : "keys counted");
  std::printf("\n");
  for (const system_result* r : rows) {
    const std::string tput = mops(static_cast<double>(r->run.ops), r->run.seconds) + " M ops/s";
    const std::string load = mops(static_cast<double>(r->load_keys), r->load_seconds) + " M keys/s";
    const double found =
        r->run.ops ? 100.0 * static_cast<double>(r->run.hits) / static_cast<double>(r->run.ops) : 0.0;
    std::printf("%-14s %18s %10.3f %18s %10.3f %7.1f%%", r->system.c_str(), tput.c_str(), r->run.seconds,
                load.c_str(), r->load_seconds, found);
    if (scans) {
      std::printf(" %20s", (mops(static_cast<double>(r->run.entries), r->run.seconds) +
                            (entries == entries_column::scan_entries ? " M entries/s" : " M keys/s"))
                               .c_str());
    }
    std::printf("\n");
  }
}

void print_stage_table(const tandem_figures& t, std::uint64_t nb, double wall, bool kept_results,
                       std::uint64_t warmup) {
  const double stage_sum = t.stages.sum();
  std::printf("\ntandem stages, summed over the run's %llu batches (stages of different batches may overlap;\n"
              "bytes: host memory read and written plus PCIe, from tandem::stats total_bytes; GB/s: bytes / the "
              "stage's seconds):\n",
              static_cast<unsigned long long>(nb));
  auto row = [&](const stage_view& s) {
    std::printf("  %-9s %9.3f s %6.1f%% %11s %8.2f GB/s\n", s.name, s.seconds,
                stage_sum > 0 ? 100.0 * s.seconds / stage_sum : 0.0, bytes_text(static_cast<double>(s.bytes)).c_str(),
                gbs(s.bytes, s.seconds));
  };
  const std::vector<stage_view> stages = stages_of(t);
  row(stages[0]);  // validate
  row(stages[1]);  // route
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
  for (std::size_t i = 2; i < stages.size(); ++i) row(stages[i]);
  std::uint64_t all_bytes = 0;
  for (const stage_view& s : stages) all_bytes += s.bytes;
  std::printf("  %-9s %9.3f s %6.1f%% %11s %8.2f GB/s   (timed wall %.3f s)\n", "sum", stage_sum,
              stage_sum > 0 ? 100.0 : 0.0, bytes_text(static_cast<double>(all_bytes)).c_str(),
              gbs(all_bytes, stage_sum), wall);
  const std::uint64_t ops = t.run.ops;
  std::printf("  pcie: %s over the run, %.1f bytes/op (counted in the stages above); host: %s, %.1f bytes/op\n",
              bytes_text(static_cast<double>(t.bytes.pcie)).c_str(), per(t.bytes.pcie, ops),
              bytes_text(static_cast<double>(t.host_bytes())).c_str(), per(t.host_bytes(), ops));
  if (t.leaf_line_ops != 0) {
    std::printf("  leaf lines: %.2f a point op (%.0f bytes), counted after the ops ran on %llu of them (one leaf "
                "group in %zu, one direct get in %zu): the distinct lines of each leaf its lookups read, and the "
                "lines its writes dirty\n",
                t.leaf_lines_per_op(), 64 * t.leaf_lines_per_op(), static_cast<unsigned long long>(t.leaf_line_ops),
                tandem::stats::leaf_line_sample, tandem::stats::leaf_line_sample);
  }
  if (!t.allocs_counted) {
    std::printf("heap allocations per batch: not counted (sanitizer build: malloc is the sanitizer's)\n");
    return;
  }
  std::printf("heap allocations per batch: %.1f (%.0f bytes); of at least %zu KiB: %.1f (%.0f bytes)\n",
              per(t.allocs.allocs, nb), per(t.allocs.bytes, nb), alloc_count::large_bytes >> 10,
              per(t.allocs.large_allocs, nb), per(t.allocs.large_bytes, nb));
  if (kept_results) {
    std::printf("  (whole process, timed run; --verify keeps every result, so the answer pools are not reused)\n");
  } else if (warmup == 0) {
    std::printf("  (whole process, timed run; the first batches fill the index's pools: --warmup N runs untimed "
                "batches first)\n");
  }
}

void print_probe_lines(const probe_figures& p, const tandem_figures* t, const run_figures* run) {
  std::printf("probe (%s array, %zu threads, %.2f s, not timed): seq read %.1f GB/s, seq write %.1f GB/s, "
              "random 8-byte reads %.1f M/s\n",
              size_text(p.array_bytes).c_str(), p.threads, p.seconds, p.read_gbs, p.write_gbs,
              p.random_reads_s / 1e6);
  if (!t || t->run.ops == 0) return;
  const double measured = run && run->seconds > 0 ? static_cast<double>(run->ops) / run->seconds : 0.0;
  if (t->leaf_line_ops != 0 && t->range_ops == 0 && p.random_reads_s > 0) {
    // Point ops only: each leaf line a point op moves is one random read.
    const double bound = p.random_reads_s / t->leaf_lines_per_op();
    std::printf("leaf lines/op: %.2f; at the probe's random reads that bounds tandem at %s M ops/s (measured %s M "
                "ops/s, %.0f%% of it)\n",
                t->leaf_lines_per_op(), mops(bound, 1.0).c_str(), run ? mops(measured, 1.0).c_str() : "-",
                100.0 * measured / bound);
  }
  const double host_per_op = per(t->host_bytes(), t->run.ops);
  if (host_per_op <= 0 || p.read_gbs <= 0) return;
  const double bound = p.read_gbs * 1e9 / host_per_op;
  std::printf("host bytes/op: %.1f; at the probe's read bandwidth that bounds tandem at %s M ops/s (measured %s M "
              "ops/s, %.0f%% of it)\n",
              host_per_op, mops(bound, 1.0).c_str(),
              run ? mops(static_cast<double>(run->ops), run->seconds).c_str() : "-",
              run && run->seconds > 0 ? 100.0 * static_cast<double>(run->ops) / run->seconds / bound : 0.0);
}

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

std::string cache_text(const tandem_figures& t) {
  const tandem::stats& s = t.after;
  if (s.cache == "off") return "; leaf cache off";
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "; leaf cache (%s, %.2f GiB of slots, %llu of %llu leaves current): %llu of %llu gets answered "
                "from it (%.1f%%), %.1f%% of the last batch's gets held by current copies, %.1f MiB synced, "
                "%llu evictions, %llu copies kept current by writes",
                s.cache.c_str(), static_cast<double>(s.cache_capacity_bytes) / (1u << 30),
                static_cast<unsigned long long>(s.cached_leaves), static_cast<unsigned long long>(s.leaves),
                static_cast<unsigned long long>(t.cache_hits), static_cast<unsigned long long>(t.cache_lookups),
                t.cache_lookups ? 100.0 * static_cast<double>(t.cache_hits) / static_cast<double>(t.cache_lookups) : 0.0,
                100.0 * s.cache_held, static_cast<double>(t.cache_synced_bytes) / (1u << 20),
                static_cast<unsigned long long>(t.cache_evictions), static_cast<unsigned long long>(t.cache_patched));
  return buf;
}

std::string scatter_text(const tandem_figures& t) {
  return "answers put back in batch order on the GPU for " + std::to_string(t.gpu_scatters) + " batches, on the host for " +
         std::to_string(t.host_scatters) + ", answered directly for " + std::to_string(t.direct_batches) +
         "; leaf hints: " + std::to_string(t.hinted_ops) + " point ops answered at their hint, " +
         std::to_string(t.stale_hints) + " missing or stale, " + std::to_string(t.guide_refreshes) +
         " guide refreshes" + cache_text(t);
}

void print_sweep_table(const std::vector<const system_result*>& points) {
  struct column {
    const char* name;
    double (*get)(const tandem_figures&);
    int precision;
  };
  static const column columns[] = {
      {"validate", [](const tandem_figures& t) { return t.stages.validate; }, 4},
      {"route", [](const tandem_figures& t) { return t.stages.route; }, 4},
      {"order", [](const tandem_figures& t) { return t.stages.order; }, 4},
      {"read", [](const tandem_figures& t) { return t.stages.read; }, 4},
      {"leaf", [](const tandem_figures& t) { return t.stages.leaf; }, 4},
      {"sync", [](const tandem_figures& t) { return t.stages.sync; }, 4},
      {"complete", [](const tandem_figures& t) { return t.stages.complete; }, 4},
      {"gpu_upload", [](const tandem_figures& t) { return t.route.gpu_upload; }, 4},
      {"gpu_sort", [](const tandem_figures& t) { return t.route.gpu_sort; }, 4},
      {"gpu_kernel", [](const tandem_figures& t) { return t.route.gpu_kernel; }, 4},
      {"gpu_download", [](const tandem_figures& t) { return t.route.gpu_download; }, 4},
      {"gpu_route", [](const tandem_figures& t) { return t.route.gpu_route; }, 4},
      {"cpu_route", [](const tandem_figures& t) { return t.route.cpu_route; }, 4},
      {"host_B/op", [](const tandem_figures& t) { return per(t.host_bytes(), t.run.ops); }, 1},
      {"pcie_B/op", [](const tandem_figures& t) { return per(t.bytes.pcie, t.run.ops); }, 1},
      {"allocs/b",
       [](const tandem_figures& t) { return t.allocs_counted ? per(t.allocs.allocs, t.batches) : -1.0; }, 1},
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
      std::printf(" %*.*f", std::max(9, static_cast<int>(std::strlen(c.name))), c.precision, c.get(t));
    }
    std::printf("\n");
  }
  std::printf(
      "share: requested (index::set_gpu_share; auto: set_gpu_share(tandem::auto_share)); used: keys routed on the "
      "GPU / all keys of the point's batches\n(the batch-size-weighted mean of stats().gpu_share). Stage columns: "
      "seconds summed over the point's batches (tandem::stats total); gpu_* and cpu_route: the per-batch route "
      "fields\nof tandem::stats summed over the batches (gpu_upload..gpu_download: GPU event times; gpu_route, "
      "cpu_route: wall times of the two sides of route, which run at once).\nhost_B/op, pcie_B/op: stage bytes "
      "(tandem::stats total_bytes) less PCIe, and PCIe, per op; allocs/b: heap allocations of the process per "
      "batch in the timed run (-1: not counted).\n");
}

json row_of(const system_result& r, const row_context& ctx) {
  const workload_spec& spec = *ctx.spec;
  const options& opt = *ctx.opt;
  const bool is_tandem = r.tandem.has_value();
  json j;
  j["system"] = r.system;
  j["sweep"] = r.sweep_point ? json("share") : json(nullptr);
  j["workload"] = to_string(spec.kind);
  j["keys"] = spec.keys;
  j["ops"] = spec.ops;
  j["batch"] = spec.batch;
  j["batches"] = ctx.batches;
  j["dist"] = to_string(spec.dist);
  j["load_order"] = spec.sorted_load ? "sorted" : "random";
  j["threads"] = ctx.threads;
  j["device"] = opt.device;
  j["gpu_order"] = is_tandem ? json(opt.gpu_order) : json(nullptr);
  j["gpu_scatter"] = is_tandem ? json(opt.gpu_scatter) : json(nullptr);
  j["gpu_route_keys"] = is_tandem ? json(*parse_count(opt.gpu_route_keys)) : json(nullptr);
  j["gpu_share"] = is_tandem ? r.requested_share : json(nullptr);                  // requested
  j["gpu_share_used"] = is_tandem ? json(r.tandem->share_used()) : json(nullptr);  // over the run
  j["ops_per_s"] = r.run.seconds > 0 ? static_cast<double>(r.run.ops) / r.run.seconds : 0.0;
  j["seconds"] = r.run.seconds;
  j["load_keys_per_s"] = r.load_seconds > 0 ? static_cast<double>(r.load_keys) / r.load_seconds : 0.0;
  j["load_seconds"] = r.load_seconds;
  j["hits"] = r.run.hits;
  const bool counts = spec.kind == workload_kind::count;
  j["scan_entries"] = counts ? 0 : r.run.entries;
  j["keys_counted"] = counts ? r.run.entries : 0;
  j["host_bytes"] = is_tandem ? json(r.tandem->after.host_bytes) : json(nullptr);
  j["gpu_bytes"] = is_tandem ? json(r.tandem->after.gpu_bytes) : json(nullptr);
  j["gpu_budget_bytes"] = is_tandem ? json(r.tandem->after.gpu_budget_bytes) : json(nullptr);
  j["entries_per_s"] = r.run.seconds > 0 ? static_cast<double>(r.run.entries) / r.run.seconds : 0.0;
  auto field = [&](double v) { return is_tandem ? json(v) : json(nullptr); };
  auto count = [&](std::uint64_t v) { return is_tandem ? json(v) : json(nullptr); };
  const tandem_figures empty;
  const tandem_figures& t = is_tandem ? *r.tandem : empty;
  const std::vector<stage_view> stages = stages_of(t);
  for (const stage_view& s : stages) j[std::string(s.name) + "_s"] = field(s.seconds);
  // Bytes each stage moved over the run (stats().total_bytes difference), and bytes / the stage's seconds.
  for (const stage_view& s : stages) j[std::string(s.name) + "_bytes"] = count(s.bytes);
  for (const stage_view& s : stages) j[std::string(s.name) + "_gbs"] = field(gbs(s.bytes, s.seconds));
  j["pcie_bytes"] = count(t.bytes.pcie);
  j["pcie_bytes_per_op"] = field(per(t.bytes.pcie, t.run.ops));
  j["host_bytes_per_op"] = field(per(t.host_bytes(), t.run.ops));
  j["gpu_upload_s"] = field(t.route.gpu_upload);
  j["gpu_sort_s"] = field(t.route.gpu_sort);
  j["gpu_kernel_s"] = field(t.route.gpu_kernel);
  j["gpu_download_s"] = field(t.route.gpu_download);
  j["gpu_route_s"] = field(t.route.gpu_route);
  j["cpu_route_s"] = field(t.route.cpu_route);
  j["gpu_keys"] = count(t.gpu_keys);
  j["cpu_keys"] = count(t.cpu_keys);
  j["gpu_share_last"] = field(t.last_share);  // stats().gpu_share after the last batch
  j["gpu_rate"] = field(t.after.gpu_rate);
  j["cpu_rate"] = field(t.after.cpu_rate);
  j["gpu_failures"] = count(t.gpu_failures);
  j["gpu_scatters"] = count(t.gpu_scatters);    // batches put back in batch order on the GPU
  j["host_scatters"] = count(t.host_scatters);  // ... on the host
  j["direct_batches"] = count(t.direct_batches);  // gets answered directly
  j["hinted_ops"] = count(t.hinted_ops);      // point ops answered at their route's hint
  j["stale_hints"] = count(t.stale_hints);      // point ops whose hint was missing or stale
  j["cache_lookups"] = count(t.cache_lookups);  // gets looked up in the leaf copies
  j["cache_hits"] = count(t.cache_hits);        // ... and answered there
  j["cache_patched"] = count(t.cache_patched);  // copies kept current by writes written into them
  // Share of the last batch's gets in current copies.
  j["cache_held"] = is_tandem ? json(r.tandem->after.cache_held) : json(nullptr);
  j["cache_synced_bytes"] = count(t.cache_synced_bytes);
  j["cache_bytes"] = is_tandem ? json(r.tandem->after.cache_bytes) : json(nullptr);
  j["guide_refreshes"] = count(t.guide_refreshes);
  j["leaf_line_ops"] = count(t.leaf_line_ops);    // point ops whose leaf lines were counted
  j["leaf_lines_per_op"] = field(t.leaf_lines_per_op());
  // Heap allocations of the whole process per batch of the timed run (null: not counted).
  const bool allocs = is_tandem && t.allocs_counted;
  const std::uint64_t nb = ctx.batches;
  j["heap_allocs_per_batch"] = allocs ? json(per(t.allocs.allocs, nb)) : json(nullptr);
  j["heap_bytes_per_batch"] = allocs ? json(per(t.allocs.bytes, nb)) : json(nullptr);
  j["heap_large_allocs_per_batch"] = allocs ? json(per(t.allocs.large_allocs, nb)) : json(nullptr);  // >= 64 KiB
  j["heap_large_bytes_per_batch"] = allocs ? json(per(t.allocs.large_bytes, nb)) : json(nullptr);
  j["results_kept"] = is_tandem ? json(opt.verify) : json(nullptr);
  // The memory probe (the same for every row of a run; null with --no-probe).
  const probe_figures* p = ctx.probe ? &*ctx.probe : nullptr;
  j["probe_array_bytes"] = p ? json(p->array_bytes) : json(nullptr);
  j["probe_read_gbs"] = p ? json(p->read_gbs) : json(nullptr);
  j["probe_write_gbs"] = p ? json(p->write_gbs) : json(nullptr);
  j["probe_random_reads_per_s"] = p ? json(p->random_reads_s) : json(nullptr);
  const double host_per_op = per(t.host_bytes(), t.run.ops);
  j["probe_bound_ops_per_s"] =
      p && is_tandem && host_per_op > 0 ? json(p->read_gbs * 1e9 / host_per_op) : json(nullptr);
  j["device_used"] = r.device_used;
  j["leaves"] = count(t.after.leaves);
  j["inner_height"] = is_tandem ? json(t.after.inner_height) : json(nullptr);
  j["splits"] = count(t.splits);
  j["warmup_batches"] = count(ctx.warmup);
  j["seed"] = spec.seed;
  j["scan_length"] = spec.kind == workload_kind::scan ? json(spec.scan_length) : json(nullptr);
  j["inflight"] = is_tandem ? json(opt.inflight) : json(nullptr);
  j["description"] = r.description;
  j["host"] = ctx.host;
  j["cpus"] = cpu_count();
  j["cpu_model"] = ctx.cpu;
  j["tandem_version"] = tandem::version();
  return j;
}

}  // namespace tandem_bench
