// Built when tandem is configured without the CUDA layer: no device is ever
// usable, and the report says so.
#include <tandem/device/device_query.hpp>

namespace tandem::device {

device_report query_devices() {
  device_report report;
  report.reason = "tandem was built without CUDA (TANDEM_CUDA=OFF or no nvcc at build time)";
  return report;
}

}  // namespace tandem::device
