// config.gpu_devices: one index over several GPUs. The list is checked
// (range, repeats, length); a GPU of it that this process does not see is
// refused with device = gpu (naming its place in the list) and left out
// with automatic. With two GPUs or more (tests named *Gpu*: they skip with
// fewer, saying how many were found) batches of gets are cut over the GPUs
// and answered from each one's leaf copies, against a std::map model with
// the edge keys, writes that split and merge leaves in between (with
// gpu_cache_writes too), loads and compactions, and verify() checking every
// GPU's copies; a GPU past the
// first that fails is dropped and its share answered by the others, with
// no answer lost or wrong.
#include <tandem/device/device_query.hpp>
#include <tandem/scheduler/testing.hpp>
#include <tandem/tandem.hpp>

#include "support/batches.hpp"
#include "support/gpu.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace tandem;
using test::key_pattern;

std::string refusal(const config& c) {
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(DeviceOrdinalList, OutOfRangeRepeatedOrTooLongIsRefusedNamingTheField) {
  config c;
  c.gpu_devices = {0, 1024};
  EXPECT_EQ(refusal(c), "tandem::config.gpu_devices must be ordinals in [0, 1023], got 1024");
  c.gpu_devices = {-1};
  EXPECT_EQ(refusal(c), "tandem::config.gpu_devices must be ordinals in [0, 1023], got -1");
  c.gpu_devices = {2, 0, 2};
  EXPECT_EQ(refusal(c), "tandem::config.gpu_devices must be ordinals none of which is named twice, got 2 twice");
  c.gpu_devices.assign(17, 0);
  for (int i = 0; i < 17; ++i) c.gpu_devices[static_cast<std::size_t>(i)] = i;
  EXPECT_EQ(refusal(c), "tandem::config.gpu_devices must be at most 16 ordinals, got 17");
  c.gpu_devices.pop_back();
  EXPECT_EQ(refusal(c), "accepted");
  c.device = device_kind::cpu;  // a CPU index looks for none of them
  tandem::index idx(c);
  EXPECT_EQ(idx.execute(batch{}.put(0, 1).put(max_key, 2).get(max_key)).value(2), 2u);
  EXPECT_EQ(idx.stats().device, "cpu (config.device = cpu)");
}

TEST(DeviceOrdinalList, MissingGpuIsRefusedWithDeviceGpuAndLeftOutWithAutomatic) {
  const device::device_report report = device::query_devices();
  const int missing = test::missing_ordinal(report);
  config c;
  c.threads = 2;
  c.device = device_kind::gpu;
  c.gpu_devices = {missing};
  try {
    tandem::index idx(c);
    ADD_FAILURE() << "an index was built on missing GPU " << missing;
  } catch (const tandem::error& e) {
    EXPECT_NE(std::string(e.what()).find("config.gpu_devices[0] = " + std::to_string(missing)), std::string::npos)
        << e.what();
  }
  if (!report.devices.empty()) {
    c.gpu_devices = {report.devices[0].ordinal, missing};
    try {
      tandem::index idx(c);
      ADD_FAILURE() << "an index was built with missing GPU " << missing;
    } catch (const tandem::error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("config.gpu_devices[1] = " + std::to_string(missing) + " names no usable GPU"),
                std::string::npos)
          << what;
    }
  }
  c.device = device_kind::automatic;
  c.gpu_devices = {report.devices.empty() ? 0 : report.devices[0].ordinal, missing};
  tandem::index idx(c);
  const std::string where = idx.stats().device;
  if (report.devices.empty()) {
    EXPECT_EQ(where.rfind("cpu (", 0), 0u) << where;
  } else {
    EXPECT_NE(where.find("gpu " + std::to_string(missing) + " left out (names no usable GPU"), std::string::npos)
        << where;
  }
  test::index_model model;
  test::key_source keys(key_pattern::edges, 20'000, 5);
  model.load(idx, keys.pairs(10'000));
  const batch bt = test::random_batch(keys, 30'000);
  EXPECT_EQ(model.check(bt, idx.execute(bt), "automatic"), 0u);
}

/// Two GPUs or more, or the test skips saying how many there are.
#define TANDEM_REQUIRE_GPUS(count)                                                                    \
  do {                                                                                                \
    const std::size_t found_ = device::query_devices().devices.size();                               \
    if (found_ < (count)) GTEST_SKIP() << "needs " << (count) << " GPUs; found " << found_;          \
  } while (0)

/// An index over GPUs 0 and 1 with every leaf cached, whose batches of gets
/// are all routed (and so cut over both GPUs).
config pair_config() {
  config c;
  c.device = device_kind::gpu;
  c.gpu_devices = {0, 1};
  c.threads = 4;
  c.direct_get_ops = 0;
  c.caller_runs = false;
  c.min_gpu_batch = 0;
  c.gpu_share = 1.0;
  c.gpu_cache_bytes = std::size_t{4096} * 1024 * sizeof(entry);
  return c;
}

batch gets(test::key_source& keys, std::size_t n) {
  batch b;
  for (std::size_t i = 0; i < n; ++i) b.get(keys());
  return b;
}

TEST(GpuDevices, GetsCutOverTwoGpusMatchTheModel) {
  TANDEM_REQUIRE_GPUS(2u);
  for (const key_pattern pattern : {key_pattern::uniform, key_pattern::clustered, key_pattern::edges}) {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(::testing::Message() << "pattern " << test::name(pattern) << " seed " << seed);
      config c = pair_config();
      c.gpu_cache_writes = seed == 2;  // batches with puts then take the first GPU's usual route
      tandem::index idx(c);
      const std::string where = idx.stats().device;
      ASSERT_NE(where.find("; gpu 1: "), std::string::npos) << where;
      test::index_model model;
      test::key_source keys(pattern, 60'000, seed);
      auto& rng = keys.rng();
      model.load(idx, keys.pairs(30'000));
      test::batch_mix points;
      points.get = 80;
      points.put = 14;
      points.insert = 3;
      points.erase = 3;
      points.lower_bound = points.scan = points.count = 0;
      for (std::size_t b = 0; b < 40; ++b) {
        const std::string at = "batch " + std::to_string(b);
        batch bt;
        if (b % 4 == 3) {
          bt = test::random_batch(keys, 1 + rng() % 20'000);  // writes, scans, counts: the first GPU
        } else if (b % 8 == 2) {
          bt = test::random_batch(keys, 1 + rng() % 20'000, points);  // a fifth writes, puts of cached keys
        } else {
          bt = gets(keys, 1 + rng() % 40'000);  // includes batches of one get: a part may be empty
          if (b % 8 == 1) bt.get(min_key).get(max_key);
        }
        ASSERT_EQ(model.check(bt, idx.execute(bt), at), 0u);
        if (b % 10 == 9) idx.compact();
        if (b == 25) {  // a load replaces the contents
          model.data.clear();
          model.load(idx, keys.pairs(1 + rng() % 20'000));
        }
        if (b % 5 == 0) {
          ASSERT_NO_THROW(idx.verify()) << at;  // both GPUs' copies against the leaves
        }
      }
      const stats s = idx.stats();
      EXPECT_GT(s.cache_hits, 0u);
      EXPECT_EQ(s.gpu_failures, 0u);
      EXPECT_EQ(s.device.find("dropped"), std::string::npos) << s.device;
    }
  }
}

TEST(GpuDevices, FailingSecondGpuIsDroppedAndNothingIsLost) {
  TANDEM_REQUIRE_GPUS(2u);
  for (const device::stage st : {device::stage::upload, device::stage::kernel, device::stage::download}) {
    SCOPED_TRACE(::testing::Message() << "stage " << static_cast<int>(st));
    tandem::index idx(pair_config());
    test::index_model model;
    test::key_source keys(key_pattern::uniform, 60'000, 9);
    model.load(idx, keys.pairs(30'000));
    batch warm = gets(keys, 30'000);
    ASSERT_EQ(model.check(warm, idx.execute(warm), "before"), 0u);
    ASSERT_TRUE(detail::index_access::inject_gpu_fault(idx, 1, st, 1));
    EXPECT_FALSE(detail::index_access::inject_gpu_fault(idx, 2, st, 1));
    for (std::size_t b = 0; b < 6; ++b) {
      const batch bt = b % 3 == 2 ? test::random_batch(keys, 10'000) : gets(keys, 30'000);
      ASSERT_EQ(model.check(bt, idx.execute(bt), "after " + std::to_string(b)), 0u);
    }
    ASSERT_NO_THROW(idx.verify());
    const stats s = idx.stats();
    EXPECT_NE(s.device.find("[gpu 1 dropped: "), std::string::npos) << s.device;
    EXPECT_GE(s.gpu_failures, 1u);
    EXPECT_GT(s.cache_hits, 0u);  // the first GPU still answers from its copies
  }
}

}  // namespace
