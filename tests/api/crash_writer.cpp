// The writer process of the crash test (tests/api/durability_test.cpp):
// opens the index kept in a folder, then runs the crash batches of one
// generation (tests/support/crash_batches.hpp) with up to crash_in_flight
// of them queued, and writes the number of each acknowledged batch (its
// future returned) to stdout as 8 bytes, in order, until it is killed. Now
// and then it writes a checkpoint.
//
// With a policy of <none|group|batch>-points, crash_point_threads threads
// instead call index::put, insert and erase one after another
// (crash_point_call), each writing (thread << 56 | call) once its call
// returned.
//
// Usage: tandem_crash_writer <folder> <seed> <generation> <none|group|batch>[-points]
#include <tandem/tandem.hpp>

#include "support/crash_batches.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace {

void report(std::uint64_t i) {
  const char* p = reinterpret_cast<const char*>(&i);
  std::size_t left = sizeof(i);
  while (left != 0) {
    const ssize_t w = ::write(STDOUT_FILENO, p, left);
    if (w <= 0) std::exit(3);  // the test is gone
    p += w;
    left -= static_cast<std::size_t>(w);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <folder> <seed> <generation> <none|group|batch>\n", argv[0]);
    return 2;
  }
  try {
    tandem::config cfg;
    cfg.threads = 2;
    cfg.device = tandem::device_kind::cpu;
    cfg.storage_dir = argv[1];
    const std::uint64_t seed = std::strtoull(argv[2], nullptr, 10);
    const std::uint64_t generation = std::strtoull(argv[3], nullptr, 10);
    std::string policy = argv[4];
    const bool points = policy.size() > 7 && policy.compare(policy.size() - 7, 7, "-points") == 0;
    if (points) policy.resize(policy.size() - 7);
    cfg.log_sync_policy = policy == "none"    ? tandem::log_sync::none
                          : policy == "group" ? tandem::log_sync::group
                                              : tandem::log_sync::batch;
    cfg.log_group_us = 200;
    tandem::index idx(cfg);
    if (points) {
      std::vector<std::thread> threads;
      for (std::uint64_t t = 0; t < tandem::test::crash_point_threads; ++t) {
        threads.emplace_back([&idx, t, generation] {
          try {
            for (std::uint64_t i = 0;; ++i) {
              const tandem::test::point_call c = tandem::test::crash_point_call(t, generation, i);
              if (c.type == tandem::op_type::put) (void)idx.put(c.key, c.value);
              if (c.type == tandem::op_type::insert) (void)idx.insert(c.key, c.value);
              if (c.type == tandem::op_type::erase) (void)idx.erase(c.key);
              report(t << 56 | i);  // 8 bytes: one write, whole, beside the other threads'
              if (t == 0 && i % 500 == 499) idx.checkpoint();
            }
          } catch (const std::exception& e) {
            std::fprintf(stderr, "tandem_crash_writer: %s\n", e.what());
            std::exit(1);
          }
        });
      }
      for (auto& th : threads) th.join();
      return 0;
    }
    std::deque<std::future<tandem::batch_result>> in_flight;
    std::uint64_t acknowledged = 0;
    for (std::uint64_t i = 0;; ++i) {
      in_flight.push_back(idx.submit(tandem::test::crash_batch(seed, generation, i)));
      while (in_flight.size() >= tandem::test::crash_in_flight || (i % 61 == 60 && !in_flight.empty())) {
        (void)in_flight.front().get();
        in_flight.pop_front();
        report(acknowledged++);
      }
      if (i % 61 == 60) idx.checkpoint();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem_crash_writer: %s\n", e.what());
    return 1;
  }
}
