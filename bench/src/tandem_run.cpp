#include "tandem_run.hpp"

#include "report.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace tandem_bench {
namespace {

using clock_type = std::chrono::steady_clock;

/// What the callback hands back to the submitting thread.
struct completion {
  tandem::batch_result result;
  std::exception_ptr error;
  route_sums route;  // of this batch alone
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

tandem::stage_times stage_difference(const tandem::stage_times& a, const tandem::stage_times& b) {
  tandem::stage_times d;
  d.validate = a.validate - b.validate;
  d.route = a.route - b.route;
  d.order = a.order - b.order;
  d.read = a.read - b.read;
  d.leaf = a.leaf - b.leaf;
  d.sync = a.sync - b.sync;
  d.complete = a.complete - b.complete;
  return d;
}

tandem_figures run_tandem(tandem::index& idx, const std::vector<std::vector<tandem::op>>& batches,
                          std::size_t inflight, bool keep_results, const std::string& label) {
  const std::size_t n = batches.size();
  std::vector<tandem::batch> built(n);
  tbb::parallel_for(std::size_t{0}, n, [&](std::size_t b) {
    built[b].reserve(batches[b].size());
    for (const tandem::op& o : batches[b]) built[b].add(o);
  });

  tandem_figures f;
  if (keep_results) f.kept.reserve(n);
  std::mutex m;
  std::condition_variable cv;
  std::deque<completion> finished;
  auto on_done = [&](tandem::batch_result r, std::exception_ptr e) {
    completion c;
    c.result = std::move(r);
    c.error = std::move(e);
    const tandem::stats s = idx.stats();  // this batch's: the next one has not started
    c.route = {s.gpu_upload, s.gpu_sort, s.gpu_kernel, s.gpu_download, s.gpu_route, s.cpu_route};
    {
      std::lock_guard<std::mutex> lock(m);
      finished.push_back(std::move(c));
    }
    cv.notify_one();
  };

  const tandem::stats before = idx.stats();
  std::string failure;
  std::size_t submitted = 0, done = 0;
  {
    progress_bar bar(label, n);
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
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return !finished.empty(); });
        c = std::move(finished.front());
        finished.pop_front();
      }
      const std::size_t b = done++;
      if (c.error) {
        if (failure.empty()) failure = "tandem batch " + std::to_string(b) + " failed: " + what_of(c.error);
        continue;
      }
      std::uint64_t hits = 0;
      for (std::size_t i = 0; i < c.result.size(); ++i) hits += c.result.found(i);
      f.run.hits += hits;
      f.run.entries += c.result.scan_entries().size();
      f.run.ops += c.result.size();
      f.route.gpu_upload += c.route.gpu_upload;
      f.route.gpu_sort += c.route.gpu_sort;
      f.route.gpu_kernel += c.route.gpu_kernel;
      f.route.gpu_download += c.route.gpu_download;
      f.route.gpu_route += c.route.gpu_route;
      f.route.cpu_route += c.route.cpu_route;
      if (keep_results) f.kept.push_back(std::move(c.result));
      bar.update(done);
    }
    f.run.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  }
  if (!failure.empty()) throw std::runtime_error(failure);

  f.after = idx.stats();
  f.stages = stage_difference(f.after.total, before.total);
  f.gpu_keys = f.after.gpu_keys - before.gpu_keys;
  f.cpu_keys = f.after.cpu_keys - before.cpu_keys;
  f.last_share = f.after.gpu_share;
  f.splits = f.after.splits - before.splits;
  f.gpu_failures = f.after.gpu_failures - before.gpu_failures;
  return f;
}

}  // namespace tandem_bench
