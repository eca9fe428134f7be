// steps.hpp, step 3 for the baselines: absl and tbb on the same batches, and
// for workload C the GPU sorted array; with --verify, each checked on the
// model.
#include "steps.hpp"

#include "baselines.hpp"
#include "gpu_baseline.hpp"
#include "report.hpp"

#include <tandem/device/device_query.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <utility>

namespace tandem_bench {
namespace {

/// The GPU sorted array (workload C only: it answers gets), or a note why not.
void run_gpu_array_point(const run_setup& s, const workload_data& w, run_outcome& out, bool queries_on_gpu) {
  const dataset& ds = w.ds;
  if (s.spec.kind != workload_kind::c) {
    out.notes.push_back(std::string("GPU sorted array: skipped (it answers gets only; workload ") +
                        to_string(s.spec.kind) + " has other ops)");
    return;
  }
  if (!gpu_array_built()) {
    out.notes.push_back("GPU sorted array: not built (no CUDA)");
    return;
  }
  const tandem::device::device_report gpus = tandem::device::query_devices();
  if (gpus.devices.empty()) {
    out.notes.push_back("GPU sorted array: skipped (no usable GPU: " + gpus.reason + ")");
    return;
  }
  const model* const replay = out.check.replay.get();
  std::uint64_t gpu_bad = 0, gpu_checked = 0;
  gpu_array_check check;
  if (replay) {
    check = [&](std::size_t b, const std::uint8_t* found, const tandem::value_type* values, std::size_t n) {
      for (std::size_t i = 0; i < n; ++i) {
        tandem::value_type want = 0;
        const bool want_found = replay->find(ds.batches[b][i].key, want);
        if (want_found != (found[i] != 0) || (want_found && want != values[i])) {
          if (gpu_bad++ < 10) {
            std::fprintf(stderr, "verify: gpu-array batch %zu op %zu get(%llu): got {found %d, value %llu}\n", b, i,
                         static_cast<unsigned long long>(ds.batches[b][i].key), found[i] ? 1 : 0,
                         static_cast<unsigned long long>(values[i]));
          }
        }
        ++gpu_checked;
      }
    };
  }
  try {
    progress_bar bar("gpu-array", 1, "run");
    const gpu_array_figures g = run_gpu_array(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size(),
                                              ds.batches, check, queries_on_gpu);
    const std::string name = std::string(gpu_array_name) + (queries_on_gpu ? " keys-on-gpu" : "");
    system_result r;
    r.system = name;
    r.description = g.description;
    r.load_keys = ds.load_keys.size();
    r.load_seconds = g.load_seconds;
    r.run = g.run;
    r.device_used = "gpu " + g.device;
    out.results.push_back(std::move(r));
    if (replay) {
      out.check.lines.push_back("verify: " + name + ": " + std::to_string(gpu_checked) + " answers checked, " +
                                std::to_string(gpu_bad) + " mismatches");
      out.check.answers_checked += gpu_checked;
      out.check.mismatches += gpu_bad;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    out.notes.push_back(std::string("GPU sorted array: failed: ") + e.what());
    out.exit_code = 1;
  }
}

}  // namespace

bool run_baselines(const options& opt, const run_setup& s, const workload_data& w, run_outcome& out) {
  if (!opt.baselines) return true;
  const dataset& ds = w.ds;
  auto skipped = [&](const std::string& name) {
    const bool skip =
        std::find(opt.skip_baselines.begin(), opt.skip_baselines.end(), name) != opt.skip_baselines.end();
    if (skip) out.notes.push_back(name + ": skipped (--skip-baseline)");
    return skip;
  };
  std::vector<std::unique_ptr<baseline>> systems;
  if (!skipped("absl")) systems.push_back(make_absl_baseline(s.threads, opt.absl_shards));
  if (!skipped("tbb")) systems.push_back(make_tbb_baseline(s.threads));
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
      progress_bar bar(r.system + " " + to_string(s.spec.kind), ds.batches.size());
      r.run = sys->run(ds.batches, [&](std::size_t done, std::size_t) { bar.update(done); });
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tandem-bench: %s failed: %s\n", r.system.c_str(), e.what());
      return false;
    }
    if (out.check.replay) {
      const std::string diff = out.check.replay->compare_contents(*sys);
      if (diff.empty()) {
        out.check.lines.push_back("verify: " + r.system + " final contents equal the model's (" +
                                  std::to_string(sys->size()) + " keys)");
      } else {
        out.check.lines.push_back("verify: " + r.system + " final contents differ from the model's: " + diff);
        out.exit_code = 1;
      }
    }
    sys.reset();
    out.results.push_back(std::move(r));
  }
  if (!skipped(gpu_array_name)) {
    run_gpu_array_point(s, w, out, false);
    if (s.keys_on_gpu) run_gpu_array_point(s, w, out, true);
  }
  return true;
}

}  // namespace tandem_bench
