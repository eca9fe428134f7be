#include "tandem_run.hpp"

#include "report.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace tandem_bench {
namespace {

/// Found flags (each 0 or 1) set among flags[0..n): the client reads every
/// batch's flags inside the timed run, so this must keep up with the index.
/// Words of eight flags are added (each byte lane counts at most 255 of
/// them), then the lanes: 1.1 - 1.4 ms for 2^24 flags on one core. A
/// popcount a word is slower where the build targets baseline x86-64, whose
/// popcount is a libgcc call: 8 - 10 ms for 2^24 flags, which held every
/// host-array run of the H200 machine near 1600 - 2200 M ops/s.
std::uint64_t count_found(const std::uint8_t* flags, std::size_t n) {
  constexpr std::uint64_t byte_pairs = 0x00FF00FF00FF00FFull;
  std::uint64_t hits = 0;
  std::size_t i = 0;
  while (i + 8 <= n) {
    const std::size_t words = std::min<std::size_t>((n - i) / 8, 255);
    std::uint64_t lanes = 0;
    for (std::size_t w = 0; w < words; ++w, i += 8) {
      std::uint64_t word;
      std::memcpy(&word, flags + i, 8);
      lanes += word;
    }
    lanes = (lanes & byte_pairs) + ((lanes >> 8) & byte_pairs);  // four 16-bit lanes
    hits += (lanes * 0x0001000100010001ull) >> 48;
  }
  for (; i < n; ++i) hits += flags[i];
  return hits;
}

using clock_type = std::chrono::steady_clock;

/// What the callback hands back to the submitting thread.
struct completion {
  tandem::batch_result result;
  std::exception_ptr error;
  route_sums route;  // of this batch alone
};

/// Shared by the callback (which captures only a pointer to it, so the
/// std::function holding it needs no heap memory) and the submitting thread.
struct completion_queue {
  tandem::index* idx = nullptr;
  std::mutex m;
  std::condition_variable cv;
  std::deque<completion> finished;
};

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

void build_batch(const std::vector<tandem::op>& ops, tandem::batch& b) {
  using tandem::op_type;
  const std::size_t n = ops.size();
  const op_type type = n ? ops.front().type : op_type::get;
  const bool one_type = type != op_type::scan && type != op_type::count &&
                        std::all_of(ops.begin(), ops.end(), [type](const tandem::op& o) { return o.type == type; });
  if (!one_type) {
    b.reserve(b.size() + n);
    for (const tandem::op& o : ops) b.add(o);
    return;
  }
  std::vector<tandem::key_type> keys(n);
  for (std::size_t i = 0; i < n; ++i) keys[i] = ops[i].key;
  if (type == op_type::put || type == op_type::insert) {
    std::vector<tandem::value_type> values(n);
    for (std::size_t i = 0; i < n; ++i) values[i] = ops[i].arg;
    if (type == op_type::put) {
      b.put(keys.data(), values.data(), n);
    } else {
      b.insert(keys.data(), values.data(), n);
    }
  } else if (type == op_type::get) {
    b.get(keys.data(), n);
  } else if (type == op_type::erase) {
    b.erase(keys.data(), n);
  } else {
    b.lower_bound(keys.data(), n);
  }
}

tandem_figures run_tandem(tandem::index& idx, const std::vector<std::vector<tandem::op>>& batches,
                          std::size_t inflight, bool keep_results, const std::string& label) {
  const std::size_t n = batches.size();
  std::vector<tandem::batch> built(n);
  tbb::parallel_for(std::size_t{0}, n, [&](std::size_t b) { build_batch(batches[b], built[b]); });

  tandem_figures f;
  if (keep_results) f.kept.reserve(n);
  completion_queue queue;
  queue.idx = &idx;
  auto on_done = [q = &queue](tandem::batch_result r, std::exception_ptr e) {
    // The bench's bookkeeping (a stats snapshot with its strings, a deque
    // node now and then) is left out of the allocation count.
    const alloc_count::pause_here pause;
    completion c;
    c.result = std::move(r);
    c.error = std::move(e);
    const tandem::stats s = q->idx->stats();  // this batch's: the next one has not started
    c.route = {s.gpu_upload, s.gpu_sort, s.gpu_kernel, s.gpu_download, s.gpu_route, s.cpu_route};
    {
      std::lock_guard<std::mutex> lock(q->m);
      q->finished.push_back(std::move(c));
    }
    q->cv.notify_one();
  };

  const tandem::stats before = idx.stats();
  std::string failure;
  std::size_t submitted = 0, done = 0;
  {
    progress_bar bar(label, n);
    f.allocs_counted = alloc_count::available();
    if (f.allocs_counted) alloc_count::start();
    const auto t0 = clock_type::now();
    // Every submitted batch is waited for, also after a failure: the callback
    // refers to this frame.
    while (done < submitted || (failure.empty() && submitted < n)) {
      while (failure.empty() && submitted < n && submitted - done < inflight) {
        try {
          idx.submit(std::move(built[submitted]), on_done);
          ++submitted;
        } catch (const std::exception& e) {
          failure = "tandem batch " + std::to_string(submitted) + " was not submitted: " + e.what();
        }
      }
      if (done == submitted) break;
      completion c;
      {
        std::unique_lock<std::mutex> lock(queue.m);
        queue.cv.wait(lock, [&] { return !queue.finished.empty(); });
        c = std::move(queue.finished.front());
        queue.finished.pop_front();
      }
      const std::size_t b = done++;
      if (c.error) {
        if (failure.empty()) failure = "tandem batch " + std::to_string(b) + " failed: " + what_of(c.error);
        continue;
      }
      if (const std::uint8_t* found = c.result.found_flags()) f.run.hits += count_found(found, c.result.size());
      f.run.entries += c.result.scan_entries().size();
      if (!batches[b].empty() && batches[b].front().type == tandem::op_type::count) {  // the count workload
        for (std::size_t i = 0; i < c.result.size(); ++i) f.run.entries += c.result.value(i);
      }
      f.run.ops += c.result.size();
      f.route.gpu_upload += c.route.gpu_upload;
      f.route.gpu_sort += c.route.gpu_sort;
      f.route.gpu_kernel += c.route.gpu_kernel;
      f.route.gpu_download += c.route.gpu_download;
      f.route.gpu_route += c.route.gpu_route;
      f.route.cpu_route += c.route.cpu_route;
      if (keep_results) f.kept.push_back(std::move(c.result));  // else destroyed here: back to the pools
      const alloc_count::pause_here pause;
      bar.update(done);
    }
    f.run.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (f.allocs_counted) f.allocs = alloc_count::stop();
  }
  if (!failure.empty()) throw std::runtime_error(failure);

  f.after = idx.stats();
  f.stages = stage_difference(f.after.total, before.total);
  f.bytes = stage_difference(f.after.total_bytes, before.total_bytes);
  f.batches = f.after.batches - before.batches;
  f.gpu_scatters = f.after.gpu_scatters - before.gpu_scatters;
  f.host_scatters = f.after.host_scatters - before.host_scatters;
  f.direct_batches = f.after.direct_batches - before.direct_batches;
  f.hinted_ops = f.after.hinted_ops - before.hinted_ops;
  f.stale_hints = f.after.stale_hints - before.stale_hints;
  f.guide_refreshes = f.after.guide_refreshes - before.guide_refreshes;
  f.cache_lookups = f.after.cache_lookups - before.cache_lookups;
  f.cache_hits = f.after.cache_hits - before.cache_hits;
  f.cache_synced_bytes = f.after.cache_synced_bytes - before.cache_synced_bytes;
  f.cache_evictions = f.after.cache_evictions - before.cache_evictions;
  f.cache_patched = f.after.cache_patched - before.cache_patched;
  for (tandem::op_type t : {tandem::op_type::lower_bound, tandem::op_type::scan, tandem::op_type::count}) {
    const auto i = static_cast<std::size_t>(t);
    f.range_ops += f.after.ops_by_type[i] - before.ops_by_type[i];
  }
  f.leaf_line_ops = f.after.leaf_line_ops - before.leaf_line_ops;
  f.leaf_lines = f.after.leaf_lines - before.leaf_lines;
  f.gpu_keys = f.after.gpu_keys - before.gpu_keys;
  f.cpu_keys = f.after.cpu_keys - before.cpu_keys;
  f.last_share = f.after.gpu_share;
  f.splits = f.after.splits - before.splits;
  f.gpu_failures = f.after.gpu_failures - before.gpu_failures;
  return f;
}

}  // namespace tandem_bench
