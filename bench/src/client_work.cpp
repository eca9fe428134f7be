#include "client_work.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <stdexcept>
#include <thread>

namespace tandem_bench {
namespace {

/// One batch as a user holds it: columns of keys (and args, types when
/// its ops are not all gets).
struct user_batch {
  bool gets_only = true;
  std::vector<tandem::key_type> keys;
  std::vector<std::uint64_t> args;
  std::vector<tandem::op_type> types;
};

/// A batch in flight and the arrays its answers go to.
struct in_flight {
  const user_batch* b = nullptr;
  std::future<void> columns_done;          // gets: answers in values / found
  std::future<tandem::batch_result> done;  // mixed: answers in the result
  std::vector<tandem::value_type> values;
  std::vector<std::uint8_t> found;
};

}  // namespace

client_work_figures run_client_work(tandem::index& idx, const std::vector<std::vector<tandem::op>>& batches,
                                    std::size_t clients, std::size_t inflight) {
  using clock_type = std::chrono::steady_clock;
  const auto since = [](clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
  };
  clients = std::max<std::size_t>(clients, 1);
  inflight = std::max<std::size_t>(inflight, 1);
  // The user's arrays: made before timing (they are the program's data).
  std::vector<user_batch> data(batches.size());
  std::size_t largest = 0;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    user_batch& u = data[i];
    u.keys.reserve(batches[i].size());
    for (const tandem::op& o : batches[i]) {
      u.keys.push_back(o.key);
      u.gets_only = u.gets_only && o.type == tandem::op_type::get;
    }
    if (!u.gets_only) {
      for (const tandem::op& o : batches[i]) {
        if (o.type == tandem::op_type::scan || o.type == tandem::op_type::count) {
          throw std::invalid_argument("--client-work runs workloads of gets, puts, inserts and erases");
        }
        u.args.push_back(o.arg);
        u.types.push_back(o.type);
      }
    }
    largest = std::max(largest, u.keys.size());
  }
  std::vector<run_figures> per(clients);
  std::vector<std::array<double, 3>> spent(clients, {0.0, 0.0, 0.0});  // submitting, waiting, reading
  std::vector<std::exception_ptr> failures(clients);
  std::atomic<std::size_t> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (std::size_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      try {
        std::deque<in_flight> window;
        std::vector<in_flight> spare(inflight);
        for (in_flight& f : spare) {  // answer arrays touched before timing, reused batch after batch
          f.values.assign(largest, 0);
          f.found.assign(largest, 0);
        }
        run_figures& fig = per[c];
        auto finish_oldest = [&] {
          in_flight f = std::move(window.front());
          window.pop_front();
          const std::size_t n = f.b->keys.size();
          std::uint64_t hits = 0, sum = 0;
          auto t0 = clock_type::now();
          if (f.b->gets_only) {
            f.columns_done.get();
            spent[c][1] += since(t0);
            t0 = clock_type::now();
            for (std::size_t i = 0; i < n; ++i) {  // every answer read
              hits += f.found[i];
              sum += f.values[i];
            }
          } else {
            const tandem::batch_result r = f.done.get();
            spent[c][1] += since(t0);
            t0 = clock_type::now();
            const tandem::value_type* values = r.values();
            const std::uint8_t* found = r.found_flags();
            for (std::size_t i = 0; i < n; ++i) {
              hits += found[i];
              sum += values[i];
            }
          }
          spent[c][2] += since(t0);
          fig.ops += n;
          fig.hits += hits;
          fig.entries += sum & 1;  // keeps the reads
          spare.push_back(std::move(f));
        };
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        for (std::size_t i = c; i < data.size(); i += clients) {
          if (window.size() == inflight) finish_oldest();
          const auto t0 = clock_type::now();
          in_flight f = std::move(spare.back());
          spare.pop_back();
          const user_batch& u = data[i];
          f.b = &u;
          if (u.gets_only) {  // read and written in place: nothing copied here
            tandem::columns cols;
            cols.type = tandem::op_type::get;
            cols.keys = u.keys.data();
            cols.n = u.keys.size();
            cols.values_out = f.values.data();
            cols.found_out = f.found.data();
            f.columns_done = idx.submit(cols);
          } else {  // the batch API: the user's columns copied into a batch
            tandem::batch b;
            b.reserve(u.keys.size());
            for (std::size_t k = 0; k < u.keys.size(); ++k) b.add({u.keys[k], u.args[k], 0, u.types[k]});
            f.done = idx.submit(std::move(b));
          }
          window.push_back(std::move(f));
          spent[c][0] += since(t0);
        }
        while (!window.empty()) finish_oldest();
      } catch (...) {
        failures[c] = std::current_exception();
      }
    });
  }
  while (ready.load() < clients) std::this_thread::yield();
  const tandem::stats before = idx.stats();
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  client_work_figures all;
  all.run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (std::size_t c = 0; c < clients; ++c) {
    if (failures[c]) std::rethrow_exception(failures[c]);
    all.run.ops += per[c].ops;
    all.run.hits += per[c].hits;
    all.submitting += spent[c][0];
    all.waiting += spent[c][1];
    all.reading += spent[c][2];
  }
  const tandem::stats after = idx.stats();
  all.stages = after.total;
  all.stages.validate -= before.total.validate;
  all.stages.route -= before.total.route;
  all.stages.order -= before.total.order;
  all.stages.read -= before.total.read;
  all.stages.leaf -= before.total.leaf;
  all.stages.sync -= before.total.sync;
  all.stages.complete -= before.total.complete;
  return all;
}

}  // namespace tandem_bench
