// The ranges of tandem::config (each field's comment in config.hpp states
// its own): a value just past a bound makes the index's constructor throw
// std::invalid_argument naming the field, the range and the value, and so
// does config::validate() with the same message; a value just inside
// validates and builds an index that answers a batch. Every config here routes
// on the CPU (a machine without a GPU runs them all) unless it says so.
#include <tandem/tandem.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace tandem;

constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();
constexpr std::size_t two_to_32 = std::size_t{1} << 32;

/// The defaults with CPU routing and two threads.
config cpu_config() {
  config c;
  c.device = device_kind::cpu;
  c.threads = 2;
  return c;
}

/// cpu_config() changed by `set`.
template <class F>
config with(F set) {
  config c = cpu_config();
  set(c);
  return c;
}

/// Constructing an index with `c` throws std::invalid_argument whose message
/// names `field` as config.hpp spells it.
void expect_rejected(const config& c, const std::string& field) {
  SCOPED_TRACE("tandem::config." + field);
  try {
    tandem::index idx(c);
    ADD_FAILURE() << "an out-of-range tandem::config." << field << " was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tandem::config." + field + " must be "), std::string::npos) << e.what();
    try {
      c.validate();
      ADD_FAILURE() << "config::validate accepted the tandem::config." << field << " the index refused";
    } catch (const std::invalid_argument& v) {
      EXPECT_STREQ(v.what(), e.what());
    }
  }
}

/// An index built with `c` answers a batch that writes and reads.
void expect_accepted(const config& c, const std::string& field) {
  SCOPED_TRACE("tandem::config." + field);
  try {
    c.validate();
    tandem::index idx(c);
    const batch_result r = idx.execute(batch{}.put(7, 70).get(7).get(8));
    ASSERT_EQ(r.size(), 3u);
    EXPECT_TRUE(r.found(1));
    EXPECT_EQ(r.value(1), 70u);
    EXPECT_FALSE(r.found(2));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "tandem::config." << field << " in range was refused: " << e.what();
  }
}

/// The message of the error for `c`, or "" when there is none.
std::string message_for(const config& c) {
  try {
    tandem::index idx(c);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigRanges, DefaultsAreValid) {
  const config defaults;
  EXPECT_EQ(message_for(defaults), "");
  expect_accepted(defaults, "(defaults)");
  expect_accepted(cpu_config(), "(defaults, cpu)");
}

TEST(ConfigRanges, ThreadsIsZeroOrAtMost4096) {
  expect_accepted(with([](config& c) { c.threads = 0; }), "threads");
  expect_accepted(with([](config& c) { c.threads = 1; }), "threads");
  expect_accepted(with([](config& c) { c.threads = 4096; }), "threads");
  expect_rejected(with([](config& c) { c.threads = 4097; }), "threads");
  expect_rejected(with([](config& c) { c.threads = size_max; }), "threads");
}

TEST(ConfigRanges, FanoutIs16Or32Or64) {
  for (const int f : {16, 32, 64}) expect_accepted(with([&](config& c) { c.fanout = f; }), "fanout");
  for (const int f : {0, -32, 15, 17, 31, 33, 63, 65, 128}) {
    expect_rejected(with([&](config& c) { c.fanout = f; }), "fanout");
  }
}

TEST(ConfigRanges, LeafFillIsASixteenthToOne) {
  expect_accepted(with([](config& c) { c.leaf_fill = 0.0625; }), "leaf_fill");
  expect_accepted(with([](config& c) { c.leaf_fill = 1.0; }), "leaf_fill");
  expect_rejected(with([](config& c) { c.leaf_fill = std::nextafter(0.0625, 0.0); }), "leaf_fill");
  expect_rejected(with([](config& c) { c.leaf_fill = std::nextafter(1.0, 2.0); }), "leaf_fill");
  expect_rejected(with([](config& c) { c.leaf_fill = 0.0; }), "leaf_fill");
  expect_rejected(with([](config& c) { c.leaf_fill = -0.5; }), "leaf_fill");
  expect_rejected(with([](config& c) { c.leaf_fill = std::numeric_limits<double>::quiet_NaN(); }), "leaf_fill");
  expect_rejected(with([](config& c) { c.leaf_fill = std::numeric_limits<double>::infinity(); }), "leaf_fill");
}

// The case: 0.002 put 2 keys in a leaf (1,502 leaves for 3,003
// keys). Now it fails, saying what the range is and what it got.
TEST(ConfigRanges, LeafFillOfTwoThousandthsIsRejected) {
  const config c = with([](config& x) { x.leaf_fill = 0.002; });
  expect_rejected(c, "leaf_fill");
  EXPECT_EQ(message_for(c), "tandem::config.leaf_fill must be in [0.0625, 1], got 0.002");
}

// At the lowest fill a load makes at most 16 times the leaves of a full one.
TEST(ConfigRanges, LowestLeafFillLoadsAtMostSixteenTimesTheLeaves) {
  std::vector<entry> pairs(3003);
  for (std::size_t i = 0; i < pairs.size(); ++i) pairs[i] = {i * 3, i};
  const auto leaves_at = [&](double fill) {
    tandem::index idx(with([&](config& c) { c.leaf_fill = fill; }));
    idx.load(pairs);
    EXPECT_NO_THROW(idx.verify());
    return idx.stats().leaves;
  };
  const std::size_t full = leaves_at(1.0);
  const std::size_t lowest = leaves_at(0.0625);
  EXPECT_GT(lowest, full);
  EXPECT_LE(lowest, 16 * full);
}

TEST(ConfigRanges, DeviceIsOneOfItsEnumerators) {
  expect_accepted(with([](config& c) { c.device = device_kind::automatic; }), "device");
  expect_accepted(with([](config& c) { c.device = device_kind::cpu; }), "device");
  // In range: it builds where a GPU works and fails for want of one (a
  // tandem::error, not an invalid argument) elsewhere.
  try {
    tandem::index idx(with([](config& c) { c.device = device_kind::gpu; }));
  } catch (const std::invalid_argument& e) {
    ADD_FAILURE() << "device = gpu was refused as out of range: " << e.what();
  } catch (const tandem::error&) {
  }
  expect_rejected(with([](config& c) { c.device = static_cast<device_kind>(3); }), "device");
  expect_rejected(with([](config& c) { c.device = static_cast<device_kind>(255); }), "device");
  EXPECT_EQ(message_for(with([](config& c) { c.device = static_cast<device_kind>(3); })),
            "tandem::config.device must be automatic, cpu or gpu, got the integer 3");
}

TEST(ConfigRanges, MinGpuBatchTakesAnyValue) {
  expect_accepted(with([](config& c) { c.min_gpu_batch = 0; }), "min_gpu_batch");
  expect_accepted(with([](config& c) { c.min_gpu_batch = size_max; }), "min_gpu_batch");
}

TEST(ConfigRanges, SmallBatchOpsIsAtMostTwoTo32) {
  expect_accepted(with([](config& c) { c.small_batch_ops = 0; }), "small_batch_ops");
  expect_accepted(with([](config& c) { c.small_batch_ops = two_to_32; }), "small_batch_ops");
  expect_rejected(with([](config& c) { c.small_batch_ops = two_to_32 + 1; }), "small_batch_ops");
  expect_rejected(with([](config& c) { c.small_batch_ops = size_max; }), "small_batch_ops");
}

TEST(ConfigRanges, DirectGetOpsTakesAnyValue) {
  expect_accepted(with([](config& c) { c.direct_get_ops = 0; }), "direct_get_ops");
  expect_accepted(with([](config& c) { c.direct_get_ops = size_max; }), "direct_get_ops");
}

TEST(ConfigRanges, GroupCommitOpsIsAtMostABatchsMostOps) {
  expect_accepted(with([](config& c) { c.group_commit_ops = 0; }), "group_commit_ops");
  expect_accepted(with([](config& c) { c.group_commit_ops = two_to_32 - 2; }), "group_commit_ops");
  expect_rejected(with([](config& c) { c.group_commit_ops = two_to_32 - 1; }), "group_commit_ops");
  expect_rejected(with([](config& c) { c.group_commit_ops = size_max; }), "group_commit_ops");
}

TEST(ConfigRanges, GroupCommitOutputBytesTakesAnyValue) {
  expect_accepted(with([](config& c) { c.group_commit_output_bytes = 0; }), "group_commit_output_bytes");
  expect_accepted(with([](config& c) { c.group_commit_output_bytes = size_max; }), "group_commit_output_bytes");
}

TEST(ConfigRanges, DispatcherSpinIsAtMostOneSecond) {
  expect_accepted(with([](config& c) { c.dispatcher_spin_us = 0; }), "dispatcher_spin_us");
  expect_accepted(with([](config& c) { c.dispatcher_spin_us = 1'000'000; }), "dispatcher_spin_us");
  expect_rejected(with([](config& c) { c.dispatcher_spin_us = 1'000'001; }), "dispatcher_spin_us");
  expect_rejected(with([](config& c) { c.dispatcher_spin_us = std::numeric_limits<unsigned>::max(); }),
                  "dispatcher_spin_us");
}

TEST(ConfigRanges, GpuShareIsZeroToOneOrNegative) {
  for (const double s : {0.0, 0.5, 1.0, -1.0, -std::numeric_limits<double>::infinity()}) {
    expect_accepted(with([&](config& c) { c.gpu_share = s; }), "gpu_share");
  }
  for (const double s : {std::nextafter(1.0, 2.0), 2.0, std::numeric_limits<double>::infinity(),
                         std::numeric_limits<double>::quiet_NaN()}) {
    expect_rejected(with([&](config& c) { c.gpu_share = s; }), "gpu_share");
  }
}

TEST(ConfigRanges, GpuOrderIsOneOfItsEnumerators) {
  for (const gpu_query_order o : {gpu_query_order::full_sort, gpu_query_order::partial_sort, gpu_query_order::none}) {
    expect_accepted(with([&](config& c) { c.gpu_order = o; }), "gpu_order");
  }
  expect_rejected(with([](config& c) { c.gpu_order = static_cast<gpu_query_order>(3); }), "gpu_order");
  expect_rejected(with([](config& c) { c.gpu_order = static_cast<gpu_query_order>(255); }), "gpu_order");
}

TEST(ConfigRanges, MaxGpuRouteKeysIsZeroOr256ToTwoTo32) {
  for (const std::size_t n : {std::size_t{0}, std::size_t{256}, std::size_t{777}, two_to_32}) {
    expect_accepted(with([&](config& c) { c.max_gpu_route_keys = n; }), "max_gpu_route_keys");
  }
  for (const std::size_t n : {std::size_t{1}, std::size_t{255}, two_to_32 + 1, size_max}) {
    expect_rejected(with([&](config& c) { c.max_gpu_route_keys = n; }), "max_gpu_route_keys");
  }
}

TEST(ConfigRanges, MaxGpuBytesIsZeroOrAtLeastOneMiB) {
  for (const std::size_t n : {std::size_t{0}, std::size_t{1} << 20, size_max}) {
    expect_accepted(with([&](config& c) { c.max_gpu_bytes = n; }), "max_gpu_bytes");
  }
  for (const std::size_t n : {std::size_t{1}, (std::size_t{1} << 20) - 1}) {
    expect_rejected(with([&](config& c) { c.max_gpu_bytes = n; }), "max_gpu_bytes");
  }
}

TEST(ConfigRanges, GpuFailureLimitIsAtLeastOne) {
  expect_accepted(with([](config& c) { c.gpu_failure_limit = 1; }), "gpu_failure_limit");
  expect_accepted(with([](config& c) { c.gpu_failure_limit = std::numeric_limits<int>::max(); }),
                  "gpu_failure_limit");
  expect_rejected(with([](config& c) { c.gpu_failure_limit = 0; }), "gpu_failure_limit");
  expect_rejected(with([](config& c) { c.gpu_failure_limit = std::numeric_limits<int>::min(); }),
                  "gpu_failure_limit");
}

TEST(ConfigRanges, MaxBatchOutputBytesIsZeroOrAtLeastOneEntry) {
  for (const std::size_t n : {std::size_t{0}, sizeof(entry), size_max}) {
    expect_accepted(with([&](config& c) { c.max_batch_output_bytes = n; }), "max_batch_output_bytes");
  }
  for (const std::size_t n : {std::size_t{1}, sizeof(entry) - 1}) {
    expect_rejected(with([&](config& c) { c.max_batch_output_bytes = n; }), "max_batch_output_bytes");
  }
}

TEST(ConfigRanges, BooleansTakeEitherValue) {
  for (const bool on : {false, true}) {
    expect_accepted(with([&](config& c) { c.caller_runs = on; }), "caller_runs");
    expect_accepted(with([&](config& c) { c.gpu_scatter = on; }), "gpu_scatter");
    expect_accepted(with([&](config& c) { c.gpu_leaf_hints = on; }), "gpu_leaf_hints");
    expect_accepted(with([&](config& c) { c.gpu_cache_writes = on; }), "gpu_cache_writes");
    expect_accepted(with([&](config& c) { c.verify_each_batch = on; }), "verify_each_batch");
  }
}

// Every message says the range and the value given, in one form.
TEST(ConfigRanges, MessagesNameTheRangeAndTheValue) {
  EXPECT_EQ(message_for(with([](config& c) { c.threads = 5000; })),
            "tandem::config.threads must be 0 or in [1, 4096], got 5000");
  EXPECT_EQ(message_for(with([](config& c) { c.fanout = 17; })), "tandem::config.fanout must be 16, 32 or 64, got 17");
  EXPECT_EQ(message_for(with([](config& c) { c.dispatcher_spin_us = 2'000'000; })),
            "tandem::config.dispatcher_spin_us must be in [0, 1000000] (one second), got 2000000");
  EXPECT_EQ(message_for(with([](config& c) { c.gpu_share = 1.5; })),
            "tandem::config.gpu_share must be in [0, 1] (or negative for automatic), got 1.5");
  EXPECT_EQ(message_for(with([](config& c) { c.max_gpu_route_keys = 100; })),
            "tandem::config.max_gpu_route_keys must be 0 (no bound) or in [256, 2^32 = 4294967296], got 100");
  EXPECT_EQ(message_for(with([](config& c) { c.max_gpu_bytes = 4096; })),
            "tandem::config.max_gpu_bytes must be 0 (no bound) or at least 2^20 = 1048576 (1 MiB), got 4096");
  EXPECT_EQ(message_for(with([](config& c) { c.max_batch_output_bytes = 8; })),
            "tandem::config.max_batch_output_bytes must be 0 (no cap) or at least 16 (one scan entry), got 8");
  // A value just past a bound prints as itself, not as the bound.
  const std::string past_one = message_for(with([](config& c) { c.leaf_fill = std::nextafter(1.0, 2.0); }));
  EXPECT_NE(past_one.find("got 1.0000000000000002"), std::string::npos) << past_one;
}

}  // namespace
