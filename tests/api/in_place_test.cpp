// index::submit(columns): n ops of one type read from the caller's arrays
// and answered into the caller's arrays, in place. Same answers as a batch
// of those ops on every path (answered on the caller, small on the
// dispatcher, gets answered directly, routed; on the GPU too), edge keys 0
// and UINT64_MAX included; bad arrays are refused with a clear error.
#include <tandem/device/device_query.hpp>
#include <tandem/device/pinned.hpp>
#include <tandem/tandem.hpp>

#include "support/keys.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace tandem;

/// The caller's arrays for one submit, outputs filled with a marker.
struct arrays {
  std::vector<key_type> keys;
  std::vector<value_type> values;
  std::vector<value_type> values_out;
  std::vector<std::uint8_t> found_out;
  std::vector<key_type> keys_out;
  explicit arrays(std::size_t n) : keys(n), values(n), values_out(n, 77), found_out(n, 7), keys_out(n, 77) {}
  columns as(op_type type, bool with_outputs = true) {
    columns c;
    c.type = type;
    c.keys = keys.data();
    c.values = values.data();
    c.n = keys.size();
    if (with_outputs) {
      c.values_out = values_out.data();
      c.found_out = found_out.data();
      c.keys_out = keys_out.data();
    }
    return c;
  }
};

/// Checks every answer of `a` (submitted as `type`) against the model,
/// replaying the ops in order; returns the mismatches.
std::size_t check(test::index_model& model, op_type type, const arrays& a, const std::string& where) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.keys.size(); ++i) {
    const test::expected_answer want = model.run({a.keys[i], a.values[i], 0, type, scan_order::ordered});
    const bool found = a.found_out[i] != 0;
    bool ok = a.found_out[i] <= 1 && found == want.result.found && a.values_out[i] == want.result.value;
    if (type == op_type::lower_bound) ok = ok && a.keys_out[i] == want.result.key;
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << where << ": " << to_string(type) << " op " << i << " key " << a.keys[i] << ": got found "
                    << int(a.found_out[i]) << " value " << a.values_out[i] << " key " << a.keys_out[i]
                    << "; want found " << want.result.found << " value " << want.result.value << " key "
                    << want.result.key;
    }
  }
  return bad;
}

void run_mix(const config& cfg, std::uint64_t seed) {
  tandem::index idx(cfg);
  test::key_source keys(test::key_pattern::narrow, 30'000, seed);
  test::index_model model;
  model.load(idx, keys.pairs(20'000));
  std::mt19937_64& rng = keys.rng();
  const op_type types[] = {op_type::get, op_type::put, op_type::insert, op_type::erase, op_type::lower_bound};
  // 1 and 64: answered on the caller (reads) or small on the dispatcher;
  // 2000: gets answered directly; 70000: routed.
  for (const std::size_t n : {std::size_t{1}, std::size_t{64}, std::size_t{2000}, std::size_t{70'000}}) {
    for (const op_type type : types) {
      arrays a(n);
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t r = rng() % 32;
        a.keys[i] = r == 0 ? min_key : r == 1 ? max_key : keys();
        a.values[i] = rng();
      }
      idx.submit(a.as(type)).get();
      ASSERT_EQ(check(model, type, a, "n " + std::to_string(n)), 0u);
    }
  }
  // Outputs left null: nothing written, the ops run all the same.
  arrays a(500);
  for (std::size_t i = 0; i < 500; ++i) {
    a.keys[i] = keys();
    a.values[i] = rng();
  }
  idx.submit(a.as(op_type::put, false)).get();
  for (std::size_t i = 0; i < 500; ++i) (void)model.run({a.keys[i], a.values[i], 0, op_type::put, scan_order::ordered});
  EXPECT_EQ(a.values_out[0], 77u);
  EXPECT_EQ(a.found_out[0], 7u);
  // The keys array as the values of a put (read only): allowed.
  columns self = a.as(op_type::put);
  self.values = a.keys.data();
  idx.submit(self).get();
  for (std::size_t i = 0; i < 500; ++i) (void)model.run({a.keys[i], a.keys[i], 0, op_type::put, scan_order::ordered});
  EXPECT_EQ(idx.size(), model.data.size());
  batch all;
  all.scan(min_key, max_key, max_scan_limit);
  EXPECT_EQ(model.check(all, idx.execute(all), "contents"), 0u);
  EXPECT_NO_THROW(idx.verify());
}

TEST(InPlace, AnswersAsBatchesDoOnEveryPath) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    config cfg;
    cfg.threads = static_cast<std::size_t>(1 + 3 * (seed - 1));  // 1, 4, 7: reader tasks from 8 up
    cfg.device = device_kind::cpu;
    run_mix(cfg, seed);
  }
}

TEST(InPlace, GpuRoutedAnswersAsBatchesDo) {
  const auto report = device::query_devices();
  if (report.devices.empty()) GTEST_SKIP() << "no usable GPU: " << report.reason;
  for (const double share : {1.0, 0.5}) {
    SCOPED_TRACE("share " + std::to_string(share));
    config cfg;
    cfg.device = device_kind::gpu;
    cfg.gpu_share = share;
    cfg.min_gpu_batch = 1024;
    run_mix(cfg, 11);
  }
}

// With a GPU, answers for pageable outputs wait in the batch's pinned
// columns and are copied out on delivery; page-locked outputs are written
// directly. One array of each kind in one call, both ways round, with and
// without the leaf cache.
TEST(InPlace, GpuAnswersReachPinnedAndPageableOutputsAlike) {
  const auto report = device::query_devices();
  if (report.devices.empty()) GTEST_SKIP() << "no usable GPU: " << report.reason;
  for (const std::size_t cache : {gpu_cache_auto, std::size_t{0}}) {
    SCOPED_TRACE(cache == 0 ? "no leaf cache" : "leaf cache");
    config cfg;
    cfg.device = device_kind::gpu;
    cfg.min_gpu_batch = 1024;
    cfg.gpu_cache_bytes = cache;
    tandem::index idx(cfg);
    test::key_source keys(test::key_pattern::narrow, 30'000, 5);
    test::index_model model;
    model.load(idx, keys.pairs(20'000));
    const std::size_t n = 70'000;
    arrays a(n);
    for (std::size_t i = 0; i < n; ++i) a.keys[i] = i % 97 == 0 ? min_key : i % 89 == 0 ? max_key : keys();
    const std::unique_ptr<void, void (*)(void*)> pinned(device::allocate_pinned(n * sizeof(value_type)),
                                                       device::free_pinned);
    auto* pinned_values = static_cast<value_type*>(pinned.get());
    auto* pinned_found = static_cast<std::uint8_t*>(pinned.get());
    for (const bool values_pinned : {true, false}) {
      std::fill(a.values_out.begin(), a.values_out.end(), 77);
      std::fill(a.found_out.begin(), a.found_out.end(), 7);
      std::memset(pinned.get(), 9, n * sizeof(value_type));
      columns c = a.as(op_type::get);
      if (values_pinned) c.values_out = pinned_values;
      if (!values_pinned) c.found_out = pinned_found;
      idx.submit(c).get();
      if (values_pinned) std::copy(pinned_values, pinned_values + n, a.values_out.begin());
      if (!values_pinned) std::copy(pinned_found, pinned_found + n, a.found_out.begin());
      EXPECT_EQ(check(model, op_type::get, a, values_pinned ? "values pinned" : "found pinned"), 0u);
    }
  }
}

TEST(InPlace, RefusesBadArraysWithAClearError) {
  tandem::index idx;
  idx.load(std::vector<entry>{{1, 10}, {2, 20}});
  arrays a(16);
  const auto refused = [&](columns c, const char* says) {
    try {
      (void)idx.submit(c);
      ADD_FAILURE() << "accepted; expected an error saying '" << says << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  columns c = a.as(op_type::scan);
  refused(c, "take a batch");
  c = a.as(op_type::get);
  c.keys = nullptr;
  refused(c, "null keys");
  c = a.as(op_type::insert);
  c.values = nullptr;
  refused(c, "null values");
  c = a.as(op_type::get);
  c.values_out = reinterpret_cast<value_type*>(a.keys.data() + 8);  // half over the keys
  refused(c, "overlap");
  c = a.as(op_type::lower_bound);
  c.keys_out = reinterpret_cast<key_type*>(a.values_out.data() + 15);
  refused(c, "overlap");
  c = a.as(op_type::get);
  c.found_out = reinterpret_cast<std::uint8_t*>(a.values_out.data());
  refused(c, "overlap");
  std::vector<unsigned char> raw(17 * sizeof(key_type));
  c = a.as(op_type::get);
  c.keys = reinterpret_cast<const key_type*>(raw.data() + 1);
  refused(c, "aligned");
  // Zero ops: ready at once, nothing read (null arrays allowed).
  columns none;
  none.n = 0;
  auto f = idx.submit(none);
  EXPECT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_NO_THROW(f.get());
  EXPECT_EQ(idx.size(), 2u);
}

// Many threads submitting in place beside batches with writes: every
// answer is one the model gives in the index's order; here a writer's puts
// are read back by in-place gets of the same thread after their futures.
TEST(InPlace, ConcurrentSubmittersSeeTheirOwnWrites) {
  config cfg;
  cfg.threads = 4;
  tandem::index idx(cfg);
  std::vector<std::thread> threads;
  for (std::uint64_t t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int round = 0; round < 60; ++round) {
        const std::size_t n = 1 + rng() % 300;
        arrays a(n);
        for (std::size_t i = 0; i < n; ++i) {
          a.keys[i] = (t << 56) | (rng() % 5000);  // each thread its own keys
          a.values[i] = static_cast<value_type>(round) * 1000 + i;
        }
        std::future<void> put = idx.submit(a.as(op_type::put, false));  // not waited for
        arrays g(n);
        g.keys = a.keys;
        idx.submit(g.as(op_type::get)).get();
        put.get();
        for (std::size_t i = 0; i < n; ++i) {
          // The last put of each key in the batch wins.
          std::size_t last = i;
          for (std::size_t k = i + 1; k < n; ++k) {
            if (a.keys[k] == a.keys[i]) last = k;
          }
          ASSERT_EQ(g.found_out[i], 1u);
          ASSERT_EQ(g.values_out[i], a.values[last]) << "thread " << t << " round " << round;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_NO_THROW(idx.verify());
}

}  // namespace
