// config.gpu_device: the ordinal of the GPU an index routes on. An ordinal
// no GPU has is refused with device = gpu (naming the ordinal and the GPUs
// found) and leaves an automatic index on the CPU, answering as the model
// does; an index on the last GPU, and two indexes on two GPUs used from two
// threads at once, answer as their models do; the caller's current device
// survives the index's construction and destruction. Tests named *Gpu*
// need a GPU (ctest label gpu) and skip without one; the others run
// anywhere.
#include <tandem/device/current_device.hpp>
#include <tandem/device/device_query.hpp>
#include <tandem/tandem.hpp>

#include "support/batches.hpp"
#include "support/gpu.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace tandem;
using test::key_pattern;

/// What the error and stats().device say about the GPUs found.
std::string found_text(const device::device_report& r) {
  if (r.devices.empty()) return "found no GPU";
  return "found " + std::to_string(r.devices.size()) + (r.devices.size() == 1 ? " GPU" : " GPUs");
}

/// Random batches of every op on `idx` against a model; returns after the
/// first batch with a wrong answer.
void run_against_model(tandem::index& idx, std::uint64_t seed, std::size_t batches, std::size_t most_ops) {
  test::index_model model;
  test::key_source keys(key_pattern::uniform, 40'000, seed);
  model.load(idx, keys.pairs(20'000));
  for (std::size_t b = 0; b < batches; ++b) {
    const batch bt = test::random_batch(keys, test::random_batch_size(keys.rng(), most_ops));
    ASSERT_EQ(model.check(bt, idx.execute(bt), "seed " + std::to_string(seed) + " batch " + std::to_string(b)), 0u);
  }
  ASSERT_NO_THROW(idx.verify());
  batch all;
  all.scan(min_key, max_key, max_scan_limit);
  EXPECT_EQ(model.check(all, idx.execute(all), "final scan"), 0u);
}

config gpu_config(int ordinal) {
  config c;
  c.device = device_kind::gpu;
  c.gpu_device = ordinal;
  c.min_gpu_batch = 1;  // every batch may use the GPU
  c.threads = 4;
  return c;
}

TEST(DeviceOrdinal, OutOfRangeIsRefusedNamingTheField) {
  for (const int ordinal : {-1, 1024, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()}) {
    config c;
    c.device = device_kind::cpu;
    c.threads = 2;
    c.gpu_device = ordinal;
    try {
      tandem::index idx(c);
      ADD_FAILURE() << "gpu_device " << ordinal << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "tandem::config.gpu_device must be in [0, 1023], got " + std::to_string(ordinal));
    }
  }
  for (const int ordinal : {0, 1023}) {  // in range: a CPU index does not look for the GPU
    config c;
    c.device = device_kind::cpu;
    c.threads = 2;
    c.gpu_device = ordinal;
    tandem::index idx(c);
    const batch_result r = idx.execute(batch{}.put(1, 10).get(1));
    EXPECT_EQ(r.value(1), 10u);
    EXPECT_EQ(idx.stats().device, "cpu (config.device = cpu)");
  }
}

TEST(DeviceOrdinal, MissingOrdinalWithDeviceGpuThrowsNamingTheOrdinalAndTheGpusFound) {
  const device::device_report report = device::query_devices();
  const int ordinal = test::missing_ordinal(report);
  try {
    tandem::index idx(gpu_config(ordinal));
    ADD_FAILURE() << "an index was built on missing GPU " << ordinal;
  } catch (const tandem::error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tandem::config.device = gpu"), std::string::npos) << what;
    EXPECT_NE(what.find("config.gpu_device = " + std::to_string(ordinal)), std::string::npos) << what;
    EXPECT_NE(what.find("no usable GPU"), std::string::npos) << what;
    EXPECT_NE(what.find(found_text(report)), std::string::npos) << what;
  }
}

TEST(DeviceOrdinal, MissingOrdinalWithAutomaticRoutesOnTheCpuAndAnswersRight) {
  const device::device_report report = device::query_devices();
  config c;
  c.device = device_kind::automatic;
  c.gpu_device = test::missing_ordinal(report);
  c.min_gpu_batch = 1;
  c.threads = 4;
  tandem::index idx(c);
  const stats s = idx.stats();
  EXPECT_EQ(s.device.rfind("cpu (", 0), 0u) << s.device;
  if (!report.devices.empty()) {  // else it says there is no GPU at all
    EXPECT_NE(s.device.find("config.gpu_device = " + std::to_string(c.gpu_device)), std::string::npos) << s.device;
    EXPECT_NE(s.device.find(found_text(report)), std::string::npos) << s.device;
  }
  run_against_model(idx, 11, 6, 20'000);
  EXPECT_EQ(idx.stats().gpu_keys, 0u);
}

TEST(GpuDevice, IndexOnTheLastGpuAnswersAsTheModel) {
  TANDEM_REQUIRE_GPU();
  const device::device_report report = device::query_devices();
  const int last = report.devices.back().ordinal;
  tandem::index idx(gpu_config(last));
  idx.set_gpu_share(1.0);
  const std::string prefix = "gpu " + std::to_string(last) + ": " + report.devices.back().name;
  EXPECT_EQ(idx.stats().device.rfind(prefix, 0), 0u) << idx.stats().device;
  run_against_model(idx, 21, 10, 60'000);
  const stats s = idx.stats();
  EXPECT_GT(s.gpu_keys, 0u);
  EXPECT_EQ(s.gpu_failures, 0u);
  EXPECT_FALSE(s.gpu_degraded);
}

TEST(GpuDevice, TwoIndexesOnTwoGpusAnswerAsTheirModelsFromTwoThreadsAtOnce) {
  TANDEM_REQUIRE_GPU();
  const device::device_report report = device::query_devices();
  // Devices 0 and 1 when there are two; on one GPU both share it.
  const int first = report.devices[0].ordinal;
  const int second = report.devices[1 % report.devices.size()].ordinal;
  tandem::index a(gpu_config(first));
  tandem::index b(gpu_config(second));
  a.set_gpu_share(1.0);
  b.set_gpu_share(1.0);
  EXPECT_EQ(a.stats().device.rfind("gpu " + std::to_string(first) + ": ", 0), 0u) << a.stats().device;
  EXPECT_EQ(b.stats().device.rfind("gpu " + std::to_string(second) + ": ", 0), 0u) << b.stats().device;
  std::exception_ptr failures[2];
  auto client = [&](tandem::index& idx, std::uint64_t seed, std::exception_ptr& failure) {
    try {
      run_against_model(idx, seed, 12, 60'000);
    } catch (...) {
      failure = std::current_exception();
    }
  };
  std::thread ta(client, std::ref(a), 31, std::ref(failures[0]));
  std::thread tb(client, std::ref(b), 32, std::ref(failures[1]));
  ta.join();
  tb.join();
  for (const std::exception_ptr& f : failures) {
    if (f) std::rethrow_exception(f);
  }
  for (const tandem::index* idx : {&a, &b}) {
    const stats s = idx->stats();
    EXPECT_GT(s.gpu_keys, 0u) << s.device;
    EXPECT_EQ(s.gpu_failures, 0u) << s.device;
  }
}

TEST(GpuDevice, ConstructionAndDestructionKeepTheCallersCurrentDevice) {
  TANDEM_REQUIRE_GPU();
  const device::device_report report = device::query_devices();
  const int mine = report.devices[0].ordinal;
  const int other = report.devices.back().ordinal;  // the same one on a machine of one GPU
  device::make_current(mine);
  {
    tandem::index idx(gpu_config(other));
    EXPECT_EQ(device::current(), mine);
    (void)idx.execute(batch{}.put(5, 50).get(5));
    EXPECT_EQ(device::current(), mine);
  }
  EXPECT_EQ(device::current(), mine);
}

}  // namespace
