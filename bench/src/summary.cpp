// steps.hpp, step 4: the tables, tandem's lines and the notes on stdout;
// the CSV/JSON rows and the plot; the verify lines.
#include "steps.hpp"

#include "plot.hpp"
#include "report.hpp"

#include <cstdio>
#include <exception>

namespace tandem_bench {
namespace {

/// --sweep share: the points' table, the baselines beside them, the auto point.
void print_sweep_summary(const run_setup& s, const workload_data& w, const run_outcome& out,
                         const std::vector<const system_result*>& tandem_rows,
                         const std::vector<const system_result*>& other_rows, entries_column entries) {
  print_sweep_table(tandem_rows);
  if (!other_rows.empty()) {
    std::printf("\nbaselines on the same batches:");
    print_systems_table(other_rows, entries);
  }
  const system_result& last = *tandem_rows.back();
  std::printf("tandem: device %s; %llu leaves, inner height %d; load %.3f s (%s M keys/s%s)\n",
              last.device_used.c_str(), static_cast<unsigned long long>(last.tandem->after.leaves),
              last.tandem->after.inner_height, tandem_rows.front()->load_seconds,
              mops(static_cast<double>(w.ds.load_keys.size()), tandem_rows.front()->load_seconds).c_str(),
              s.reload_each_point ? ", the first of the per-point loads" : "");
  std::printf("tandem auto point: %s; %s\n", gpu_line(*last.tandem, "auto").c_str(),
              scatter_text(*last.tandem).c_str());
  if (out.probe) print_probe_lines(*out.probe, &*last.tandem, &last.run);
  for (const system_result* p : tandem_rows) {
    if (p->tandem->gpu_failures != 0 || p->tandem->after.gpu_degraded) {
      std::printf("WARNING: point %s: %s\n", p->system.c_str(), gpu_line(*p->tandem, "").c_str());
    }
  }
}

/// One run: the systems' table, tandem's stage table and its lines (the
/// index's shape, its load, the memory it holds, the GPU budget).
void print_run_summary(const options& opt, const run_setup& s, const run_outcome& out,
                       const std::vector<const system_result*>& tandem_rows, entries_column entries) {
  std::vector<const system_result*> all;
  for (const system_result& r : out.results) all.push_back(&r);
  print_systems_table(all, entries);
  const tandem_figures& t = *tandem_rows.front()->tandem;
  print_stage_table(t, s.batches, tandem_rows.front()->run.seconds, opt.verify, s.warmup);
  if (out.probe) print_probe_lines(*out.probe, &t, &tandem_rows.front()->run);
  std::printf("tandem: device %s; %s;\n        %s; %llu leaves, inner height %d, %llu splits in the run, %llu "
              "keys (%.0f a leaf)\n",
              t.after.device.c_str(), gpu_line(t, s.share_text).c_str(), scatter_text(t).c_str(),
              static_cast<unsigned long long>(t.after.leaves), t.after.inner_height,
              static_cast<unsigned long long>(t.splits), static_cast<unsigned long long>(t.after.keys),
              t.after.leaves > 0 ? static_cast<double>(t.after.keys) / static_cast<double>(t.after.leaves) : 0.0);
  if (!out.load_how.empty()) std::printf("        load: %s\n", out.load_how.c_str());
  const double data_bytes = static_cast<double>(t.after.keys) * 16;
  auto percent = [&](std::size_t b) { return data_bytes > 0 ? 100.0 * static_cast<double>(b) / data_bytes : 0.0; };
  const std::size_t radix_bytes = t.after.host_bytes - t.after.leaf_bytes - t.after.inner_bytes - t.after.guide_bytes;
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
                bytes_text(static_cast<double>(t.after.gpu_budget_bytes)).c_str(), percent(t.after.gpu_budget_bytes),
                bytes_text(static_cast<double>(t.after.gpu_bytes)).c_str(),
                static_cast<unsigned long long>(t.after.gpu_route_keys),
                t.after.guides_dropped   ? ", leaf guides dropped"
                : t.after.guides_compact ? ", compact leaf guides"
                                         : "");
  }
}

}  // namespace

void print_summary(const options& opt, const run_setup& s, const workload_data& w, const run_outcome& out) {
  const workload_kind kind = s.spec.kind;
  const entries_column entries = kind == workload_kind::scan || kind == workload_kind::e ? entries_column::scan_entries
                                 : kind == workload_kind::count                          ? entries_column::keys_counted
                                                                                         : entries_column::none;
  std::vector<const system_result*> tandem_rows, other_rows;
  for (const system_result& r : out.results) (r.tandem ? tandem_rows : other_rows).push_back(&r);
  if (s.sweeping) {
    print_sweep_summary(s, w, out, tandem_rows, other_rows, entries);
  } else {
    print_run_summary(opt, s, out, tandem_rows, entries);
  }
  std::printf("  %-13s %s\n", "tandem", tandem_rows.front()->description.c_str());
  for (const system_result* r : other_rows) std::printf("  %-13s %s\n", r->system.c_str(), r->description.c_str());
  for (const std::string& n : out.notes) std::printf("%s\n", n.c_str());
  if (!other_rows.empty()) {
    std::printf("note: the CPU baselines run each batch's ops concurrently, in no order: no batch-sequential "
                "semantics.\n");
  }
}

void write_outputs(const options& opt, const run_setup& s, run_outcome& out) {
  std::vector<json> rows;
  row_context ctx;
  ctx.spec = &s.spec;
  ctx.batches = s.batches;
  ctx.threads = s.threads;
  ctx.opt = &opt;
  ctx.warmup = s.warmup;
  ctx.host = s.host;
  ctx.cpu = cpu_model();
  ctx.probe = out.probe;
  for (const system_result& r : out.results) rows.push_back(row_of(r, ctx));
  try {
    if (!opt.csv.empty()) write_csv(opt.csv, rows, opt.csv_append);
    if (!opt.json.empty()) write_json(opt.json, rows);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    out.exit_code = 1;
  }
  if (opt.plot.empty()) return;
  try {
    // A plain run plots the whole --csv file (with --csv-append, every run
    // appended so far), or its own rows without --csv.
    const plot_outcome p = s.sweeping        ? plot_share_sweep(rows, opt.plot)
                           : opt.csv.empty() ? plot_runs(rows, opt.plot)
                                             : plot_runs(read_csv(opt.csv), opt.plot);
    std::printf("%s\n", p.message.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: --plot %s: %s\n", opt.plot.c_str(), e.what());
    out.exit_code = 1;
  }
}

int finish(const options& opt, run_outcome& out) {
  if (opt.verify) {
    const verify_state& v = out.check;
    std::printf("\n");
    for (const std::string& line : v.lines) std::printf("%s\n", line.c_str());
    std::printf("verify: %llu answers checked, %llu mismatches\n", static_cast<unsigned long long>(v.answers_checked),
                static_cast<unsigned long long>(v.mismatches));
    if (v.mismatches != 0) out.exit_code = 1;
  }
  return out.exit_code;
}

}  // namespace tandem_bench
