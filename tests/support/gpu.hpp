#pragma once
// Whether a GPU is usable, and the skip of tests that need one (index-level
// tests; the router tests have their own in tests/device/gpu_test_support.hpp).

#include <tandem/device/device_query.hpp>

#include <gtest/gtest.h>

#include <string>

namespace tandem::test {

/// @return whether a GPU is usable; `why` gets the reason when none is.
inline bool have_gpu(std::string& why) {
  const auto report = device::query_devices();
  why = report.reason;
  return !report.devices.empty();
}

}  // namespace tandem::test

#define TANDEM_REQUIRE_GPU()                                                              \
  do {                                                                                    \
    std::string why_;                                                                     \
    if (!::tandem::test::have_gpu(why_)) GTEST_SKIP() << "no usable GPU: " << why_;       \
  } while (0)
