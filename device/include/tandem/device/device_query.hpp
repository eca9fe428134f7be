#pragma once
/// @file
/// What GPUs this process can use. Works in every build: without the CUDA
/// layer, or on a machine without a GPU or driver, the report lists no
/// devices and says why. Never throws for a missing GPU; this call waits on
/// nothing but the CUDA runtime's own initialisation.

#include <cstddef>
#include <string>
#include <vector>

namespace tandem::device {

struct device_info {
  int ordinal = 0;                 ///< CUDA device ordinal
  std::string name;                ///< e.g. "NVIDIA H200"
  std::size_t total_memory = 0;    ///< bytes of global memory
  std::size_t free_memory = 0;     ///< bytes free when queried
  int compute_major = 0;           ///< compute capability, major
  int compute_minor = 0;           ///< compute capability, minor
  int multiprocessors = 0;         ///< streaming multiprocessors
};

struct device_report {
  std::vector<device_info> devices;  ///< usable devices, by ordinal
  std::string reason;                ///< why `devices` is empty; empty otherwise
};

/// @brief Lists the GPUs visible to this process.
/// @return the devices, or none with the reason (no CUDA in this build, no
///         driver, no device, ...).
[[nodiscard]] device_report query_devices();

/// @return a one-line human summary of `report`, e.g.
///         "1 GPU: NVIDIA H200 (sm_90, 139.8 GiB)" or "no GPU: <reason>".
[[nodiscard]] std::string describe(const device_report& report);

}  // namespace tandem::device
