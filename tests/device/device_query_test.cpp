#include <tandem/device/device_query.hpp>
#include <tandem/tandem.hpp>

#include <gtest/gtest.h>

#include <iostream>

using tandem::device::describe;
using tandem::device::query_devices;

// Runs everywhere: either devices, or none with a reason.
TEST(DeviceQuery, ListsDevicesOrSaysWhyNot) {
  const auto report = query_devices();
  if (report.devices.empty()) {
    EXPECT_FALSE(report.reason.empty());
    EXPECT_NE(describe(report).find("no GPU"), std::string::npos);
    if (!tandem::built_with_cuda()) {
      EXPECT_NE(report.reason.find("without CUDA"), std::string::npos);
    }
  } else {
    EXPECT_TRUE(report.reason.empty());
  }
}

// Needs a GPU (label gpu): the device is named and sane.
TEST(GpuDeviceQuery, DescribesTheGpu) {
  const auto report = query_devices();
  if (report.devices.empty()) GTEST_SKIP() << "no usable GPU: " << report.reason;
  std::cout << describe(report) << "\n";
  for (const auto& d : report.devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.total_memory, std::size_t{1} << 30);
    EXPECT_LE(d.free_memory, d.total_memory);
    EXPECT_GE(d.compute_major, 7);
    EXPECT_GT(d.multiprocessors, 0);
  }
  EXPECT_NE(describe(report).find(report.devices[0].name), std::string::npos);
}
