#include <tandem/device/device_query.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace tandem::device {

device_report query_devices() {
  device_report report;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // No driver, no device, or a driver older than the runtime: a normal
    // situation on CPU-only machines, reported rather than thrown.
    (void)cudaGetLastError();
    report.reason = std::string("CUDA runtime reports: ") + cudaGetErrorString(status);
    return report;
  }
  int previous = 0;
  const bool restore = cudaGetDevice(&previous) == cudaSuccess;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    device_info info;
    info.ordinal = ordinal;
    info.name = prop.name;
    info.total_memory = prop.totalGlobalMem;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    info.multiprocessors = prop.multiProcessorCount;
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    if (cudaSetDevice(ordinal) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      info.free_memory = free_bytes;
    } else {
      (void)cudaGetLastError();
    }
    report.devices.push_back(std::move(info));
  }
  if (restore) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
  if (report.devices.empty()) report.reason = "the CUDA runtime lists no usable device";
  return report;
}

}  // namespace tandem::device
