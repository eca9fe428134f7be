// steps.hpp, step 3 for tandem: its timed runs (one run, the points of
// --sweep share, or one fresh index per --log-sync policy), the
// --client-work run beside the first, and each run checked on the model.
#include "steps.hpp"

#include "client_work.hpp"
#include "device_keys.hpp"
#include "persist.hpp"
#include "report.hpp"
#include "tandem_run.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <utility>

namespace tandem_bench {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// Checks one run's answers on the model (which replays the run's batches)
/// and the index's invariants and size; frees the kept results as it goes.
void check_run(tandem::index& idx, tandem_figures& fig, const std::string& what, const dataset& ds,
               verify_state& v) {
  progress_bar bar("verify " + what, ds.batches.size());
  for (std::size_t b = 0; b < ds.batches.size(); ++b) {
    v.mismatches += v.replay->check(ds.batches[b], fig.kept[b], b, v.report_left);
    v.answers_checked += ds.batches[b].size();
    fig.kept[b] = tandem::batch_result();  // free as we go
    bar.update(b + 1);
  }
  fig.kept.clear();
  bar.finish();
  try {
    idx.verify();
  } catch (const std::exception& e) {
    v.lines.push_back("verify: " + what + ": index::verify() failed: " + e.what());
    v.tandem_failed = true;
  }
  if (idx.size() != v.replay->size()) {
    v.lines.push_back("verify: " + what + ": tandem holds " + std::to_string(idx.size()) + " keys, the model " +
                      std::to_string(v.replay->size()));
    v.tandem_failed = true;
  }
}

/// --log-sync: the disk's own rate, for the log's bound (1 GiB written and
/// fsynced in the storage folder), bytes/s.
double disk_write_rate(const options& opt) {
  std::filesystem::remove_all(opt.storage_dir);
  std::filesystem::create_directories(opt.storage_dir);
  const std::vector<unsigned char> bytes(std::size_t{1} << 30, 0x5a);
  const std::string plain = opt.storage_dir + "/plain-write";
  const auto t0 = clock_type::now();
  plain_write(plain, bytes.data(), bytes.size());
  const double rate = static_cast<double>(bytes.size()) / seconds_since(t0);
  std::filesystem::remove(plain);
  return rate;
}

/// A fresh index for the --log-sync policy `policy` (off: no storage folder).
std::unique_ptr<tandem::index> log_index(const options& opt, const run_setup& s, const std::string& policy) {
  std::filesystem::remove_all(opt.storage_dir);
  tandem::config c = s.cfg;
  if (policy != "off") {
    c.storage_dir = opt.storage_dir;
    c.log_sync_policy = to_log_sync(policy);
  }
  auto idx = std::make_unique<tandem::index>(c);
  if (s.share) idx->set_gpu_share(*s.share);
  return idx;
}

/// The notes of a --log-sync run: its rate, load, what it logged and the
/// disk's bound.
void log_notes(const std::string& policy, const run_figures& run, double load_seconds, const tandem::stats& before,
               const tandem::stats& s, double disk_rate, std::vector<std::string>& notes) {
  const double rate = static_cast<double>(run.ops) / run.seconds;
  const double per_op = static_cast<double>(s.log_bytes - before.log_bytes) / static_cast<double>(run.ops);
  char line[512];
  std::snprintf(line, sizeof(line),
                "log %-5s: %.2f M ops/s; load (its checkpoint included) %.3f s; the timed run logged %s "
                "in %llu records (%.2f bytes an op), %llu fdatasyncs%s%s",
                policy.c_str(), rate / 1e6, load_seconds,
                bytes_text(static_cast<double>(s.log_bytes - before.log_bytes)).c_str(),
                static_cast<unsigned long long>(s.log_records - before.log_records), per_op,
                static_cast<unsigned long long>(s.log_syncs - before.log_syncs),
                s.log_error.empty() ? "" : "; LOG FAILED: ", s.log_error.c_str());
  notes.push_back(line);
  if (per_op > 0) {
    std::snprintf(line, sizeof(line),
                  "          the disk's plain write rate (%s/s, 1 GiB written and fsynced before the runs) "
                  "bounds a synced log at %.2f M ops/s",
                  bytes_text(disk_rate).c_str(), disk_rate / per_op / 1e6);
    notes.push_back(line);
  }
}

/// --client-work: the same batches from client threads, beside the
/// index-only run just done (out.results.back()).
void run_client_work_point(const options& opt, const workload_data& w, tandem::index& idx, double load_seconds,
                           run_outcome& out) {
  system_result r;
  r.system = "tandem client-work";
  r.description = "the same batches from " + std::to_string(opt.clients) +
                  " client thread(s): handed over from the workload's arrays inside the timed loop, every "
                  "answer read on the client, up to " + std::to_string(opt.inflight) + " in flight a client";
  r.load_seconds = load_seconds;
  r.load_keys = w.ds.load_keys.size();
  client_work_figures cw;
  {
    progress_bar bar("tandem client-work", 1, "run");
    cw = run_client_work(idx, w.ds.batches, opt.clients, opt.inflight);
  }
  r.run = cw.run;
  r.device_used = idx.stats().device;
  const system_result& alone = out.results.back();
  const double index_only = static_cast<double>(alone.run.ops) / alone.run.seconds;
  const double client = static_cast<double>(r.run.ops) / r.run.seconds;
  char line[512];
  std::snprintf(line, sizeof(line), "client-work: %.2f M ops/s, %.3fx the index-only run's %.2f (same run)",
                client / 1e6, client / index_only, index_only / 1e6);
  out.notes.push_back(line);
  const tandem::stage_times& st = alone.tandem->stages;
  std::snprintf(line, sizeof(line),
                "             clients' seconds: %.3f handing over, %.3f waiting, %.3f reading answers; index "
                "stage seconds (index-only run in brackets): route %.3f (%.3f), leaf %.3f (%.3f), complete "
                "%.3f (%.3f), wall %.3f (%.3f)",
                cw.submitting, cw.waiting, cw.reading, cw.stages.route, st.route, cw.stages.leaf, st.leaf,
                cw.stages.complete, st.complete, cw.run.seconds, alone.run.seconds);
  out.notes.push_back(line);
  out.results.push_back(std::move(r));
}

/// --keys-on gpu: the same batches as device columns, beside the run just
/// done (out.results.back()).
void run_device_keys_point(const options& opt, const run_setup& s, const workload_data& w, tandem::index& idx,
                           double load_seconds, run_outcome& out) {
  const tandem::stats st = idx.stats();
  if (st.device.rfind("gpu", 0) != 0) {
    out.notes.push_back("keys-on-gpu: skipped (the index routes on the CPU: " + st.device + ")");
    return;
  }
  system_result r;
  r.system = "tandem keys-on-gpu";
  r.description = "the same batches with keys and answers in GPU " + std::to_string(s.cfg.gpu_device) +
                  "'s memory, handed over as device columns, up to " + std::to_string(opt.inflight) + " in flight";
  r.load_seconds = load_seconds;
  r.load_keys = w.ds.load_keys.size();
  device_keys_figures d;
  try {
    progress_bar bar("tandem keys-on-gpu", 1, "run");
    d = run_device_keys(idx, w.ds.batches, s.cfg.gpu_device, opt.inflight);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: keys-on-gpu: %s\n", e.what());
    out.notes.push_back(std::string("keys-on-gpu: failed: ") + e.what());
    out.exit_code = 1;
    return;
  }
  r.run = d.run;
  r.device_used = st.device;
  const auto alone = std::find_if(out.results.rbegin(), out.results.rend(),
                                  [](const system_result& x) { return x.system == "tandem"; });
  const double host_rate = alone == out.results.rend() ? 0.0 : static_cast<double>(alone->run.ops) / alone->run.seconds;
  const double rate = static_cast<double>(r.run.ops) / r.run.seconds;
  char line[512];
  std::snprintf(line, sizeof(line),
                "keys-on-gpu: %.2f M ops/s, %.3fx the host arrays' %.2f (same run); %.3f PCIe bytes a get; %.1f%% "
                "of the gets answered in the leaf copies; %llu answers unlike host columns'",
                rate / 1e6, rate / host_rate, host_rate / 1e6,
                static_cast<double>(d.pcie_bytes) / static_cast<double>(std::max<std::uint64_t>(r.run.ops, 1)),
                100.0 * static_cast<double>(d.cache_hits) / static_cast<double>(std::max<std::uint64_t>(d.cache_lookups, 1)),
                static_cast<unsigned long long>(d.mismatches));
  out.notes.push_back(line);
  std::snprintf(line, sizeof(line),
                "             route stage %.3f s over the run (wall %.3f s); latest batch: GPU kernel %.3f ms, GPU "
                "route %.3f ms",
                d.route_seconds, r.run.seconds, d.last_kernel * 1e3, d.last_route * 1e3);
  out.notes.push_back(line);
  if (d.mismatches != 0) out.exit_code = 1;
  out.results.push_back(std::move(r));
}

/// --log-sync: each logged run's rate against the run without a log.
void log_ratio_notes(run_outcome& out) {
  const system_result* off = nullptr;
  for (const system_result& r : out.results) {
    if (r.system == "tandem") off = &r;
  }
  for (const system_result& r : out.results) {
    if (!off || &r == off || r.system.rfind("tandem+log:", 0) != 0) continue;
    const double ratio = (static_cast<double>(r.run.ops) / r.run.seconds) /
                         (static_cast<double>(off->run.ops) / off->run.seconds);
    out.notes.push_back(r.system + ": " + std::to_string(ratio).substr(0, 5) + "x the rate without a log (same run)");
  }
}

/// The runs: for each sweep point or log policy (or the one run), load or
/// reload where needed, warm up, time, check.
void run_points(const options& opt, const run_setup& s, const workload_data& w,
                std::unique_ptr<tandem::index>& idx, run_outcome& out) {
  const dataset& ds = w.ds;
  model* const replay = out.check.replay.get();
  double load_seconds = 0;
  auto timed_load = [&] {
    progress_bar bar("tandem load", 1, "bulk load");
    const auto t0 = clock_type::now();
    idx->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
    load_seconds = seconds_since(t0);
  };
  if (!s.log_runs) timed_load();
  out.load_how = idx->stats().last_load;
  const double disk_rate = s.log_runs ? disk_write_rate(opt) : 0;  // --log-sync: the log's bound
  const std::vector<std::optional<double>> runs =
      s.sweeping ? s.points : std::vector<std::optional<double>>(s.log_runs ? opt.log_sync.size() : 1, s.share);
  for (std::size_t p = 0; p < runs.size(); ++p) {
    const std::string req = share_string(runs[p]);
    const std::string log_policy = s.log_runs ? opt.log_sync[p] : "off";
    if (s.log_runs) {
      idx.reset();
      idx = log_index(opt, s, log_policy);
      timed_load();  // with a log: the load's checkpoint included
      if (replay) replay->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
    }
    if (s.sweeping && p > 0 && s.reload_each_point) {
      progress_bar bar("tandem reload", 1, "bulk load");
      const auto t0 = clock_type::now();
      idx->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
      load_seconds = seconds_since(t0);
      if (replay) replay->load(ds.load_keys.data(), ds.load_values.data(), ds.load_keys.size());
    }
    if (s.sweeping) {
      if (runs[p]) {
        idx->set_gpu_share(*runs[p]);
      } else {
        idx->set_gpu_share(tandem::auto_share);
      }
    }
    // The warm-up's results are kept until its last batch is answered: the
    // answer pool then holds a column set for each batch the timed run
    // can have in flight, each grown to a batch's answers and scan output.
    if (!w.warm.empty()) (void)run_tandem(*idx, w.warm, opt.inflight, true, "warm-up " + req);
    system_result r;
    r.system = s.sweeping ? "tandem@" + req : log_policy != "off" ? "tandem+log:" + log_policy : "tandem";
    r.description =
        "tandem::index, batches through index::submit, up to " + std::to_string(opt.inflight) + " in flight";
    r.load_seconds = load_seconds;
    r.load_keys = ds.load_keys.size();
    r.requested_share = runs[p] ? json(*runs[p]) : json("auto");
    r.sweep_point = s.sweeping;
    const tandem::stats log_before = idx->stats();
    tandem_figures fig =
        run_tandem(*idx, ds.batches, opt.inflight, opt.verify,
                   s.sweeping ? "tandem share " + req : "tandem " + std::string(to_string(s.spec.kind)));
    r.run = fig.run;
    r.device_used = fig.after.device;
    if (opt.verify) check_run(*idx, fig, s.sweeping ? "tandem share " + req : r.system, ds, out.check);
    if (s.log_runs) log_notes(log_policy, r.run, load_seconds, log_before, idx->stats(), disk_rate, out.notes);
    r.tandem = std::move(fig);
    out.results.push_back(std::move(r));
    if (opt.client_work && !s.sweeping && !s.log_runs) run_client_work_point(opt, w, *idx, load_seconds, out);
    if (s.keys_on_gpu) run_device_keys_point(opt, s, w, *idx, load_seconds, out);
  }
  if (s.log_runs) {
    idx.reset();
    std::filesystem::remove_all(opt.storage_dir);
    log_ratio_notes(out);
  }
}

}  // namespace

bool run_tandem_points(const options& opt, const run_setup& s, const workload_data& w,
                       std::unique_ptr<tandem::index>& idx, run_outcome& out) {
  verify_state& v = out.check;
  if (opt.verify) {
    v.replay = std::make_unique<model>();
    v.replay->load(w.ds.load_keys.data(), w.ds.load_values.data(), w.ds.load_keys.size());
  }
  try {
    run_points(opt, s, w, idx, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    return false;
  }
  if (opt.verify && v.tandem_failed) out.exit_code = 1;
  if (opt.verify && !v.tandem_failed && idx) {
    v.lines.push_back(std::string("verify: tandem index::verify() found no broken invariant and the size equals "
                                  "the model's (") +
                      std::to_string(idx->size()) + " keys)" + (s.sweeping ? ", after every point" : ""));
  }
  return true;
}

}  // namespace tandem_bench
