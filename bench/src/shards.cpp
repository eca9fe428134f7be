#include "shards.hpp"

#include "pinned_vector.hpp"
#include "report.hpp"
#include "shard_cut.hpp"
#include "tables.hpp"
#include "tandem_run.hpp"

#include <tandem/device/device_query.hpp>
#include <tandem/device/pinned.hpp>
#include <tandem/tandem.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tandem_bench {
namespace {

using clock_type = std::chrono::steady_clock;
using tandem::key_type;
using tandem::op_type;
using tandem::value_type;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

/// An index cannot be made (exit status 2).
struct index_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A batch as its client holds it: keys, and args and types unless every op
/// is a get. The keys are pinned: an index on a GPU reads a batch's (one
/// shard) directly. Args and types are only read by the client thread.
struct client_batch {
  bool gets_only = true;
  pinned_vector<key_type> keys;
  std::vector<std::uint64_t> args;
  std::vector<op_type> types;
};

std::vector<client_batch> as_columns(std::vector<std::vector<tandem::op>>& batches) {
  std::vector<client_batch> out(batches.size());
  tbb::parallel_for(std::size_t{0}, batches.size(), [&](std::size_t b) {
    std::vector<tandem::op>& ops = batches[b];
    const std::size_t n = ops.size();
    client_batch& c = out[b];
    c.gets_only = std::all_of(ops.begin(), ops.end(), [](const tandem::op& o) { return o.type == op_type::get; });
    c.keys.resize(n);
    if (!c.gets_only) {
      c.args.resize(n);
      c.types.resize(n);
    }
    for (std::size_t i = 0; i < n; ++i) {
      c.keys[i] = ops[i].key;
      if (!c.gets_only) {
        c.args[i] = ops[i].arg;
        c.types[i] = ops[i].type;
      }
    }
    std::vector<tandem::op>().swap(ops);  // the client's arrays replace them
  });
  return out;
}

/// Flags set among flags[0..n), in parallel.
std::uint64_t count_set(const std::uint8_t* flags, std::size_t n) {
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, n, std::size_t{1} << 16), std::uint64_t{0},
      [&](const tbb::blocked_range<std::size_t>& r, std::uint64_t hits) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) hits += flags[i];
        return hits;
      },
      [](std::uint64_t a, std::uint64_t b) { return a + b; });
}

/// Gets of `b` not answered with their key's loaded value (workload C: every
/// key it asks for was loaded and never changes).
std::uint64_t wrong_gets(const client_batch& b, const value_type* values, const std::uint8_t* found) {
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, b.keys.size(), std::size_t{1} << 16), std::uint64_t{0},
      [&](const tbb::blocked_range<std::size_t>& r, std::uint64_t wrong) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) {
          wrong += found[i] != 1 || values[i] != load_value(b.keys[i]);
        }
        return wrong;
      },
      [](std::uint64_t a, std::uint64_t c) { return a + c; });
}

/// One batch in flight and the arrays it uses, sized for the largest batch
/// and touched once, before any timing. The arrays an index reads or
/// answers into are pinned, so that its GPU copies them directly.
struct slot {
  slot(std::size_t capacity, std::size_t shards, bool with_args)
      : cut(shards > 1 ? capacity : 0, shards, with_args && shards > 1),
        values(shards > 1 ? capacity : 0),
        found(shards > 1 ? capacity : 0),
        values_out(capacity),
        found_out(capacity),
        columns_done(shards),
        batch_done(shards) {}

  const client_batch* b = nullptr;
  shard_cut cut;                        // the batch cut by range (more than one shard)
  pinned_vector<value_type> values;     // gets: the parts' answers, part after part
  pinned_vector<std::uint8_t> found;
  pinned_vector<value_type> values_out; // the answers in batch order
  pinned_vector<std::uint8_t> found_out;
  std::vector<std::future<void>> columns_done;                // a shard's part of gets
  std::vector<std::future<tandem::batch_result>> batch_done;  // a shard's part of other ops

  /// Waits for every part still in flight, ignoring failures (before the
  /// arrays it writes into may go).
  void drain() noexcept {
    for (auto& f : columns_done) {
      if (f.valid()) f.wait();
    }
    for (auto& f : batch_done) {
      if (f.valid()) f.wait();
    }
  }
};

struct client_figures {
  run_figures run;
  /// The client thread's seconds: cutting batches by range, submitting the
  /// parts (building the batches of other ops), waiting for answers, and
  /// putting them back in batch order (one shard: reading them).
  double cutting = 0, submitting = 0, waiting = 0, putting_back = 0;
  std::uint64_t wrong = 0;  ///< --verify: gets answered wrongly
};

/// Runs `batches` through the shards as one client does (shards.hpp), up to
/// slots.size() batches in flight. With one shard a batch's arrays go to the
/// index as they are. @throws what a failed batch threw, once nothing is in flight
client_figures drive(const std::vector<tandem::index*>& shards, const std::vector<key_type>& lows,
                     const std::vector<client_batch>& batches, std::vector<std::unique_ptr<slot>>& slots, bool verify,
                     const std::string& label) {
  const std::size_t count = shards.size();
  client_figures fig;
  std::deque<slot*> window;
  std::vector<slot*> spare;
  for (auto& s : slots) spare.push_back(s.get());
  progress_bar bar(label, batches.size());
  std::size_t done = 0;

  auto finish_oldest = [&] {
    slot& sl = *window.front();
    const client_batch& b = *sl.b;
    const std::size_t n = b.keys.size();
    std::uint64_t hits = 0;
    for (std::size_t s = 0; s < count; ++s) {
      auto t0 = clock_type::now();
      if (sl.columns_done[s].valid()) {
        sl.columns_done[s].get();
        fig.waiting += since(t0);
        t0 = clock_type::now();
        hits += count == 1 ? count_set(sl.found_out.data(), n)
                           : put_back(sl.cut, s, sl.values.data() + sl.cut.begin[s], sl.found.data() + sl.cut.begin[s],
                                      sl.values_out.data(), sl.found_out.data());
        fig.putting_back += since(t0);
      } else if (sl.batch_done[s].valid()) {
        const tandem::batch_result r = sl.batch_done[s].get();
        fig.waiting += since(t0);
        t0 = clock_type::now();
        hits += count == 1 ? count_set(r.found_flags(), r.size())
                           : put_back(sl.cut, s, r.values(), r.found_flags(), sl.values_out.data(), sl.found_out.data());
        fig.putting_back += since(t0);
      }
    }
    if (verify && b.gets_only) fig.wrong += wrong_gets(b, sl.values_out.data(), sl.found_out.data());
    fig.run.ops += n;
    fig.run.hits += hits;
    window.pop_front();
    spare.push_back(&sl);
    bar.update(++done);
  };

  const auto t0 = clock_type::now();
  try {
    for (std::size_t i = 0; i < batches.size(); ++i) {
      if (spare.empty()) finish_oldest();
      slot& sl = *spare.back();
      spare.pop_back();
      window.push_back(&sl);  // drained on a failure from here on
      const client_batch& b = batches[i];
      sl.b = &b;
      const std::size_t n = b.keys.size();
      const key_type* keys = b.keys.data();
      const std::uint64_t* args = b.args.data();
      const op_type* types = b.types.data();
      if (count > 1) {
        const auto c0 = clock_type::now();
        cut_by_range(keys, b.gets_only ? nullptr : args, b.gets_only ? nullptr : types, n, lows, sl.cut);
        fig.cutting += since(c0);
        keys = sl.cut.keys.data();
        args = sl.cut.args.data();
        types = sl.cut.types.data();
      }
      const auto s0 = clock_type::now();
      for (std::size_t s = 0; s < count; ++s) {
        const std::size_t first = count > 1 ? sl.cut.begin[s] : 0;
        const std::size_t m = count > 1 ? sl.cut.part_size(s) : n;
        if (m == 0) continue;
        if (b.gets_only) {  // read and answered in place
          tandem::columns c;
          c.type = op_type::get;
          c.keys = keys + first;
          c.n = m;
          c.values_out = (count > 1 ? sl.values.data() : sl.values_out.data()) + first;
          c.found_out = (count > 1 ? sl.found.data() : sl.found_out.data()) + first;
          sl.columns_done[s] = shards[s]->submit(c);
        } else {
          tandem::batch part;
          part.reserve(m);
          for (std::size_t j = first; j < first + m; ++j) part.add({keys[j], args[j], 0, types[j]});
          sl.batch_done[s] = shards[s]->submit(std::move(part));
        }
      }
      fig.submitting += since(s0);
    }
    while (!window.empty()) finish_oldest();
  } catch (...) {
    for (slot* s : window) s->drain();
    throw;
  }
  fig.run.seconds = since(t0);
  return fig;
}

/// One run: its shards loaded and warmed up, then the timed batches.
struct shard_run {
  std::string system;
  std::size_t shards = 0;
  std::uint64_t keys = 0;     ///< pairs loaded, over all shards
  std::size_t threads = 0;    ///< config.threads of each index
  /// Of the arrays the client hands an index for gets, how many the index
  /// takes for pinned (page_locked), and how many there are.
  std::size_t pinned_arrays = 0, client_arrays = 0;
  double load_seconds = 0;    ///< summed over the shards (they load one after another)
  /// Host blocks pinned during the timed run, by every index of the run
  /// (device::pinned_allocations; the count is process-wide): steady
  /// batches should pin nothing.
  tandem::device::pinned_counts pinned_in_run;
  client_figures client;
  std::vector<std::string> devices;      ///< stats().device of each shard
  std::vector<std::string> shard_lines;  ///< what each shard did
};

std::string hex(key_type k) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(k));
  return text;
}

shard_run measure(const options& opt, workload_spec spec, std::size_t shards, const tandem::config& base,
                  const tandem::device::device_report& gpus, std::uint64_t warmup) {
  shard_run out;
  out.shards = shards;
  out.threads = base.threads;
  out.system = "tandem " + std::to_string(shards) + (shards == 1 ? " shard" : " shards");
  const std::string label = std::to_string(shards) + (shards == 1 ? " shard" : " shards");
  // The indexes first: a bad --device fails before any work.
  std::vector<std::unique_ptr<tandem::index>> owned;
  std::vector<tandem::index*> idx;
  for (std::size_t s = 0; s < shards; ++s) {
    tandem::config cfg = base;
    const std::size_t used = std::min(gpus.devices.size(), opt.gpus > 1 ? opt.gpus : gpus.devices.size());
    cfg.gpu_device = used == 0 ? 0 : gpus.devices[s % used].ordinal;
    try {
      owned.push_back(std::make_unique<tandem::index>(cfg));
    } catch (const std::exception& e) {
      throw index_failure("cannot create shard " + std::to_string(s) + "'s index (--device " + opt.device +
                          ", gpu_device " + std::to_string(cfg.gpu_device) + "): " + e.what());
    }
    idx.push_back(owned.back().get());
  }

  dataset ds;
  std::vector<std::vector<tandem::op>> warm;
  {
    progress_bar bar(label + " setup", dataset_steps, "steps");
    ds = make_dataset(spec, [&](std::size_t done) { bar.update(done); });
    warm = make_warmup_batches(ds, spec, warmup);
  }
  const std::vector<key_type> lows = equal_ranges(shards);

  // Each shard loads its range's pairs.
  const std::size_t n = ds.load_keys.size();
  out.keys = n;
  std::vector<double> load_seconds(shards, 0.0);
  {
    progress_bar bar(label + " load", shards, "shards");
    if (shards == 1) {
      const auto t0 = clock_type::now();
      idx[0]->load(ds.load_keys.data(), ds.load_values.data(), n);
      load_seconds[0] = since(t0);
    } else {
      // Used once and as large as the load: ordinary memory, as the one
      // shard's load arrays are.
      shard_cut pairs(n, shards, true, false);
      cut_by_range(ds.load_keys.data(), ds.load_values.data(), nullptr, n, lows, pairs);
      std::vector<key_type>().swap(ds.load_keys);
      std::vector<value_type>().swap(ds.load_values);
      for (std::size_t s = 0; s < shards; ++s) {
        const auto t0 = clock_type::now();
        idx[s]->load(pairs.keys.data() + pairs.begin[s], pairs.args.data() + pairs.begin[s], pairs.part_size(s));
        load_seconds[s] = since(t0);
        bar.update(s + 1);
      }
    }
  }
  std::vector<key_type>().swap(ds.load_keys);
  std::vector<value_type>().swap(ds.load_values);
  for (const double sec : load_seconds) out.load_seconds += sec;

  // The client's arrays, and the slots of the batches in flight.
  const std::vector<client_batch> run_batches = as_columns(ds.batches);
  const std::vector<client_batch> warm_batches = as_columns(warm);
  std::size_t capacity = 0;
  bool with_args = false;
  for (const auto* set : {&run_batches, &warm_batches}) {
    for (const client_batch& b : *set) {
      capacity = std::max(capacity, b.keys.size());
      with_args = with_args || !b.gets_only;
    }
  }
  std::vector<std::unique_ptr<slot>> slots;
  for (std::size_t k = 0; k < std::max<std::size_t>(opt.inflight, 1); ++k) {
    slots.push_back(std::make_unique<slot>(capacity, shards, with_args));
  }

  {
    // What an index on a GPU will read directly: a get's keys (the batch's
    // own with one shard, the cut's with more) and its answer arrays.
    const slot& sl = *slots.front();
    std::vector<const void*> arrays;
    if (shards == 1) {
      if (!run_batches.empty()) arrays.push_back(run_batches.front().keys.data());
      arrays.insert(arrays.end(), {sl.values_out.data(), sl.found_out.data()});
    } else {
      arrays.insert(arrays.end(), {sl.cut.keys.data(), sl.values.data(), sl.found.data()});
    }
    for (const void* a : arrays) out.pinned_arrays += page_locked(a);
    out.client_arrays = arrays.size();
  }

  if (!warm_batches.empty()) (void)drive(idx, lows, warm_batches, slots, false, label + " warm-up");
  std::vector<tandem::stats> before;
  for (tandem::index* i : idx) before.push_back(i->stats());
  const tandem::device::pinned_counts pinned_before = tandem::device::pinned_allocations();
  out.client = drive(idx, lows, run_batches, slots, opt.verify && spec.kind == workload_kind::c, label + " run");
  const tandem::device::pinned_counts pinned_after = tandem::device::pinned_allocations();
  out.pinned_in_run = {pinned_after.blocks - pinned_before.blocks, pinned_after.bytes - pinned_before.bytes};

  for (std::size_t s = 0; s < shards; ++s) {
    const tandem::stats a = idx[s]->stats();
    const tandem::stage_times st = stage_difference(a.total, before[s].total);
    const std::uint64_t gpu_keys = a.gpu_keys - before[s].gpu_keys;
    const std::uint64_t all_keys = gpu_keys + (a.cpu_keys - before[s].cpu_keys);
    const key_type high = s + 1 < shards ? lows[s + 1] - 1 : tandem::max_key;
    const std::uint64_t ops = a.ops - before[s].ops;
    const std::uint64_t pcie = a.total_bytes.pcie - before[s].total_bytes.pcie;
    char line[1536];
    std::snprintf(line, sizeof line,
                  "  shard %zu [%s, %s]: %llu keys, %s; load %.3f s (%s); run: %llu batches, %llu ops, stage "
                  "seconds route %.3f, leaf %.3f, complete %.3f; GPU share used %.2f; PCIe %.1f bytes an op; "
                  "latest GPU route: upload %.4f s, sort %.4f, kernel %.4f, download %.4f, wall %.4f; GPU "
                  "failures %llu",
                  s, hex(lows[s]).c_str(), hex(high).c_str(), static_cast<unsigned long long>(a.keys),
                  a.device.c_str(), load_seconds[s], a.last_load.c_str(),
                  static_cast<unsigned long long>(a.batches - before[s].batches), static_cast<unsigned long long>(ops),
                  st.route, st.leaf, st.complete,
                  all_keys ? static_cast<double>(gpu_keys) / static_cast<double>(all_keys) : 0.0,
                  ops ? static_cast<double>(pcie) / static_cast<double>(ops) : 0.0, a.gpu_upload, a.gpu_sort,
                  a.gpu_kernel, a.gpu_download, a.gpu_route,
                  static_cast<unsigned long long>(a.gpu_failures - before[s].gpu_failures));
    out.shard_lines.emplace_back(line);
    out.devices.push_back(a.device);
  }
  return out;
}

json row_of_run(const shard_run& r, const shard_run& one, const options& opt, const workload_spec& spec) {
  json j;
  j["system"] = r.system;
  j["shards"] = r.shards;
  j["workload"] = to_string(spec.kind);
  j["dist"] = to_string(spec.dist);
  j["keys_a_shard"] = spec.keys;
  j["keys"] = r.keys;
  j["ops"] = r.client.run.ops;
  j["batch"] = spec.batch;
  j["inflight"] = opt.inflight;
  j["threads"] = r.threads;  // each index's
  j["client_arrays_pinned"] = r.pinned_arrays == r.client_arrays;
  j["device"] = opt.device;
  std::string devices;
  for (const std::string& d : r.devices) devices += (devices.empty() ? "" : "; ") + d;
  j["devices"] = devices;
  const double rate = r.client.run.seconds > 0 ? static_cast<double>(r.client.run.ops) / r.client.run.seconds : 0.0;
  const double one_rate =
      one.client.run.seconds > 0 ? static_cast<double>(one.client.run.ops) / one.client.run.seconds : 0.0;
  j["ops_per_s"] = rate;
  j["seconds"] = r.client.run.seconds;
  j["ratio_to_one_shard"] = one_rate > 0 ? rate / one_rate : 0.0;
  j["load_keys_per_s"] = r.load_seconds > 0 ? static_cast<double>(r.keys) / r.load_seconds : 0.0;
  j["load_seconds"] = r.load_seconds;
  j["hits"] = r.client.run.hits;
  j["client_cut_s"] = r.client.cutting;
  j["client_submit_s"] = r.client.submitting;
  j["client_wait_s"] = r.client.waiting;
  j["client_put_back_s"] = r.client.putting_back;
  j["pinned_blocks_in_run"] = r.pinned_in_run.blocks;
  j["pinned_bytes_in_run"] = r.pinned_in_run.bytes;
  j["host"] = host_name();
  j["cpu"] = cpu_model();
  j["version"] = tandem::version();
  return j;
}

}  // namespace

int run_shards(const options& opt, const workload_spec& spec, const tandem::config& cfg, std::uint64_t warmup) {
  const std::size_t n = opt.shards;
  const tandem::device::device_report gpus = tandem::device::query_devices();
  const std::size_t found = gpus.devices.size();
  // --threads 0 (one per hardware thread): the one shard keeps them all,
  // the N shards share them out, so N arenas do not oversubscribe the host.
  const std::size_t threads = cfg.threads;
  const std::size_t shard_threads = opt.threads == 0 ? std::max<std::size_t>(1, threads / n) : threads;
  std::printf("shards: %zu indexes over %zu equal key ranges, %s keys a shard (%s in all), shard i on GPU i mod %zu "
              "(%s); one shard on one GPU, %s keys, in the same run\n",
              n, n, pow2_text(spec.keys).c_str(), pow2_text(spec.keys * n).c_str(), std::max<std::size_t>(found, 1),
              tandem::device::describe(gpus).c_str(), pow2_text(spec.keys).c_str());
  std::printf("  one client thread: each batch cut by range, every shard's part submitted at once, the answers put "
              "back in batch order; up to %zu batches in flight; timed from the first cut to the last answer put "
              "back (one shard: its arrays handed over as they are); the client's key and answer arrays pinned in both "
              "runs (an index on a GPU copies them directly, no staging)%s\n",
              opt.inflight, opt.verify ? "; --verify checks every get inside the timed run" : "");
  if (opt.threads == 0) {
    std::printf("  threads: one shard %zu (one per hardware thread); each of the %zu shards %zu (the hardware "
                "threads shared out: max(1, %zu / %zu))\n",
                threads, n, shard_threads, threads, n);
  } else {
    std::printf("  threads: %zu an index (--threads), one shard and each of the %zu shards\n", threads, n);
  }
  std::fflush(stdout);

  shard_run one, many;
  try {
    one = measure(opt, spec, 1, cfg, gpus, warmup);
    workload_spec all = spec;
    all.keys = spec.keys * n;
    tandem::config shard_cfg = cfg;
    shard_cfg.threads = shard_threads;
    many = measure(opt, all, n, shard_cfg, gpus, warmup);
  } catch (const index_failure& e) {
    std::fprintf(stderr, "tandem-bench: --shards: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: --shards: %s\n", e.what());
    return 1;
  }

  std::vector<system_result> rows(2);
  for (std::size_t i = 0; i < 2; ++i) {
    const shard_run& r = i == 0 ? one : many;
    rows[i].system = r.system;
    rows[i].load_keys = r.keys;
    rows[i].load_seconds = r.load_seconds;
    rows[i].run = r.client.run;
  }
  print_systems_table({&rows[0], &rows[1]}, entries_column::none);
  for (const shard_run* r : {&one, &many}) {
    const std::string pinned = r->pinned_arrays == r->client_arrays ? std::string("pinned")
                               : r->pinned_arrays == 0
                                   ? std::string("in ordinary memory (nothing pinned here)")
                                   : std::to_string(r->pinned_arrays) + " of " + std::to_string(r->client_arrays) +
                                         " pinned";
    std::printf("%s (%zu thread%s an index; client arrays %s; client: cut %.3f s, submit %.3f s, wait %.3f s, "
                "%s %.3f s; host memory pinned during the run: %llu blocks, %.1f MB):\n",
                r->system.c_str(), r->threads, r->threads == 1 ? "" : "s", pinned.c_str(), r->client.cutting,
                r->client.submitting, r->client.waiting, r->shards == 1 ? "read answers" : "put back",
                r->client.putting_back, static_cast<unsigned long long>(r->pinned_in_run.blocks),
                static_cast<double>(r->pinned_in_run.bytes) / 1e6);
    for (const std::string& line : r->shard_lines) std::printf("%s\n", line.c_str());
  }
  const double one_rate = static_cast<double>(one.client.run.ops) / one.client.run.seconds;
  const double many_rate = static_cast<double>(many.client.run.ops) / many.client.run.seconds;
  const std::size_t used = found == 0 || cfg.device == tandem::device_kind::cpu ? 0 : std::min(n, found);
  const std::string where = used == 0 ? std::string("routing on the CPU")
                                      : "on " + std::to_string(used) + (used == 1 ? " GPU" : " GPUs");
  std::printf("%zu shards %s: %.2f M ops/s, %.3fx one shard on one GPU (%.2f M ops/s), same run\n", n,
              where.c_str(), many_rate / 1e6, many_rate / one_rate, one_rate / 1e6);

  int status = 0;
  if (opt.verify) {
    std::printf("verify: %llu gets answered wrongly (one shard %llu, %zu shards %llu)\n",
                static_cast<unsigned long long>(one.client.wrong + many.client.wrong),
                static_cast<unsigned long long>(one.client.wrong), n,
                static_cast<unsigned long long>(many.client.wrong));
    if (one.client.wrong + many.client.wrong != 0) status = 1;
  }
  const std::vector<json> out{row_of_run(one, one, opt, spec), row_of_run(many, one, opt, spec)};
  try {
    if (!opt.csv.empty()) write_csv(opt.csv, out, opt.csv_append);
    if (!opt.json.empty()) write_json(opt.json, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench: %s\n", e.what());
    status = 1;
  }
  return status;
}

}  // namespace tandem_bench
