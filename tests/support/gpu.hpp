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

/// @return an ordinal past every GPU of `r` (none has it).
inline int missing_ordinal(const device::device_report& r) {
  int last = -1;
  for (const device::device_info& d : r.devices) last = last > d.ordinal ? last : d.ordinal;
  return last + 3;
}

}  // namespace tandem::test

#define TANDEM_REQUIRE_GPU()                                                              \
  do {                                                                                    \
    std::string why_;                                                                     \
    if (!::tandem::test::have_gpu(why_)) GTEST_SKIP() << "no usable GPU: " << why_;       \
  } while (0)
