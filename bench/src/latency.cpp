#include "latency.hpp"

#include "tandem_run.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace tandem_bench {
namespace {

using clock_type = std::chrono::steady_clock;

/// "1,16,2^10" -> {1, 16, 1024}.
std::vector<std::size_t> parse_list(const std::string& s, const char* what) {
  std::vector<std::size_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto v = parse_count(item);
    if (!v || *v == 0) throw std::invalid_argument(std::string(what) + ": '" + item + "' is not a count >= 1");
    out.push_back(static_cast<std::size_t>(*v));
  }
  if (out.empty()) throw std::invalid_argument(std::string(what) + ": empty list");
  return out;
}

/// Batches of `b` ops on loaded keys in the workload's mix, for one client.
std::vector<std::vector<tandem::op>> client_batches(const dataset& ds, const workload_spec& spec, std::size_t b,
                                                    std::size_t count, std::uint64_t seed, int puts) {
  std::mt19937_64 rng(seed);
  const std::uint64_t write_pct = puts >= 0 ? static_cast<std::uint64_t>(puts)
                                  : spec.kind == workload_kind::a ? 50
                                  : spec.kind == workload_kind::b ? 5
                                                                   : 0;
  std::vector<std::vector<tandem::op>> out(count);
  for (auto& ops : out) {
    ops.reserve(b);
    for (std::size_t i = 0; i < b; ++i) {
      const tandem::key_type k = ds.load_keys[rng() % ds.load_keys.size()];
      if (rng() % 100 < write_pct) {
        ops.push_back({k, put_value(k, rng() % 1024), 0, tandem::op_type::put, tandem::scan_order::ordered});
      } else {
        ops.push_back({k, 0, 0, tandem::op_type::get, tandem::scan_order::ordered});
      }
    }
  }
  return out;
}

struct point_figures {
  std::vector<double> samples;  // seconds, one per batch
  double seconds = 0;
  std::uint64_t ops = 0;
};

/// K clients in a closed loop for `seconds`, after an untimed warm-up: each
/// calls prepare(client, i) (untimed), then run(client, i), which answers
/// its i-th batch and returns its ops (timed: one sample).
template <class Prepare, class Run>
point_figures closed_loop(std::size_t clients, double seconds, Prepare&& prepare, Run&& run) {
  point_figures f;
  std::vector<std::vector<double>> per(clients);
  std::vector<std::uint64_t> ops(clients, 0);
  std::atomic<int> phase{0};  // 0 warm-up, 1 timed, 2 stop
  std::atomic<std::size_t> ready{0};
  std::vector<std::thread> threads;
  threads.reserve(clients);
  for (std::size_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      per[c].reserve(1 << 16);
      std::size_t i = 0;
      ready.fetch_add(1);
      while (phase.load(std::memory_order_acquire) == 0) {
        prepare(c, i);
        run(c, i++);
      }
      while (phase.load(std::memory_order_acquire) == 1) {
        prepare(c, i);
        const auto t0 = clock_type::now();
        const std::size_t n = run(c, i++);
        per[c].push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
        ops[c] += n;
      }
    });
  }
  while (ready.load() < clients) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::duration<double>(std::min(0.2, seconds / 4)));
  const auto t0 = clock_type::now();
  phase.store(1, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  phase.store(2, std::memory_order_release);
  for (auto& t : threads) t.join();
  f.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  for (std::size_t c = 0; c < clients; ++c) {
    f.samples.insert(f.samples.end(), per[c].begin(), per[c].end());
    f.ops += ops[c];
  }
  std::sort(f.samples.begin(), f.samples.end());
  return f;
}

/// Nearest-rank percentile of sorted samples, in microseconds.
double percentile_us(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<std::size_t>(rank, 1)) - 1] * 1e6;
}

}  // namespace

std::vector<json> run_latency_sweep(tandem::index& idx, baseline* absl, const dataset& ds, const workload_spec& spec,
                                    const options& opt) {
  if (spec.kind != workload_kind::c && spec.kind != workload_kind::a && spec.kind != workload_kind::b) {
    throw std::invalid_argument("--sweep latency runs workload C, A or B");
  }
  const std::vector<std::size_t> sizes = parse_list(opt.latency_batches, "--latency-batches");
  const std::vector<std::size_t> client_counts = parse_list(opt.latency_clients, "--latency-clients");
  const double seconds = opt.latency_seconds;
  if (opt.latency_wait != "future" && opt.latency_wait != "spin") {
    throw std::invalid_argument("--latency-wait: 'future' or 'spin', got '" + opt.latency_wait + "'");
  }
  const bool spin = opt.latency_wait == "spin";
  const bool point = opt.latency_api == "point";
  constexpr std::size_t batches_per_client = 16;

  std::printf("\nlatency: closed loop, K clients each keeping one batch of B ops in flight, %.2f s a point; "
              "microseconds from submit to answer, percentiles over every batch of the point; tandem clients %s\n",
              seconds,
              point ? "call the one-key API once an op (index::get, index::put)"
              : spin ? "submit with a callback and spin until it has run"
                     : "submit and wait on the future");
  std::printf("%-8s %7s %7s %9s %10s %10s %10s %10s %10s\n", "system", "clients", "batch", "batches", "p50 us",
              "p99 us", "p99.9 us", "max us", "M ops/s");
  std::vector<json> rows;
  for (const std::size_t k : client_counts) {
    for (const std::size_t b : sizes) {
      std::vector<std::vector<std::vector<tandem::op>>> ops(k);
      std::vector<std::vector<tandem::batch>> built(k);
      for (std::size_t c = 0; c < k; ++c) {
        ops[c] = client_batches(ds, spec, b, batches_per_client, spec.seed * 1000003 + k * 7919 + b * 31 + c,
                                opt.latency_puts);
        built[c].resize(batches_per_client);
        for (std::size_t i = 0; i < batches_per_client; ++i) build_batch(ops[c][i], built[c][i]);
      }
      // `caller` of the point's `batches` were answered on the client's own
      // thread (config.caller_runs; tandem only).
      auto report = [&](const std::string& system, const point_figures& f, std::uint64_t caller = 0,
                        std::uint64_t batches = 0) {
        json j;
        j["system"] = system;
        j["sweep"] = "latency";
        j["workload"] = to_string(spec.kind);
        j["keys"] = spec.keys;
        j["clients"] = k;
        j["batch"] = b;
        j["batches"] = f.samples.size();
        j["p50_us"] = percentile_us(f.samples, 50);
        j["p99_us"] = percentile_us(f.samples, 99);
        j["p999_us"] = percentile_us(f.samples, 99.9);
        j["max_us"] = f.samples.empty() ? 0.0 : f.samples.back() * 1e6;
        j["ops_per_s"] = f.seconds > 0 ? static_cast<double>(f.ops) / f.seconds : 0.0;
        j["device_used"] = idx.stats().device;
        j["wait"] = system == "tandem" ? (point ? "point" : opt.latency_wait) : "answers on the client thread";
        j["api"] = system == "tandem" ? opt.latency_api : "batch";
        j["puts_percent"] = opt.latency_puts;
        if (system == "tandem") j["log_sync"] = opt.log_sync[0];  // off, or the index's redo log's policy
        std::string on_caller;
        if (system == "tandem" && !point) {
          j["batches_on_caller"] = caller;
          if (batches != 0) on_caller = "  (" + std::to_string(100 * caller / batches) + "% answered on the caller)";
        }
        std::printf("%-8s %7zu %7zu %9zu %10.1f %10.1f %10.1f %10.1f %10.2f%s\n", system.c_str(), k, b,
                    f.samples.size(), j["p50_us"].get<double>(), j["p99_us"].get<double>(),
                    j["p999_us"].get<double>(), j["max_us"].get<double>(), j["ops_per_s"].get<double>() / 1e6,
                    on_caller.c_str());
        std::fflush(stdout);
        rows.push_back(std::move(j));
      };
      std::vector<tandem::batch> next(k);  // each client's batch about to go
      auto prepare = [&](std::size_t c, std::size_t i) { next[c] = built[c][i % batches_per_client]; };
      auto tandem_point = [&](auto&& run) {
        const tandem::stats before = idx.stats();
        const point_figures f = closed_loop(k, seconds, prepare, run);
        const tandem::stats after = idx.stats();
        report("tandem", f, after.caller_batches - before.caller_batches, after.batches - before.batches);
      };
      if (point) {  // one call of the one-key API an op; reads on the client thread
        tandem_point([&](std::size_t c, std::size_t i) {
          std::uint64_t seen = 0;
          for (const tandem::op& o : ops[c][i % batches_per_client]) {
            if (o.type == tandem::op_type::put) {
              seen += idx.put(o.key, o.arg).value_or(0);
            } else {
              seen += idx.get(o.key).value_or(0);
            }
          }
          return ops[c][i % batches_per_client].size() + (seen & 0);  // each answer is read
        });
      } else if (spin) {  // the callback form, the client spinning on a flag the callback sets
        tandem_point([&](std::size_t c, std::size_t) {
          std::atomic<bool> done{false};
          std::size_t answered = 0;
          idx.submit(std::move(next[c]), [&](tandem::batch_result r, std::exception_ptr e) {
            if (!e) answered = r.size();
            done.store(true, std::memory_order_release);
          });
          while (!done.load(std::memory_order_acquire)) {
          }
          return answered;
        });
      } else {  // the future form: get() sleeps until the answer (or is ready at once: config.caller_runs)
        tandem_point([&](std::size_t c, std::size_t) { return idx.submit(std::move(next[c])).get().size(); });
      }
      if (absl != nullptr) {
        report(absl->name(), closed_loop(
                                 k, seconds, [](std::size_t, std::size_t) {},
                                 [&](std::size_t c, std::size_t i) {
                                   const auto& batch_ops = ops[c][i % batches_per_client];
                                   (void)absl->answer_here(batch_ops);
                                   return batch_ops.size();
                                 }));
      }
    }
  }
  return rows;
}

}  // namespace tandem_bench
