#include <tandem/device/device_query.hpp>

#include <cstdio>

namespace tandem::device {

std::string describe(const device_report& report) {
  if (report.devices.empty()) return "no GPU: " + report.reason;
  std::string out = std::to_string(report.devices.size()) + (report.devices.size() == 1 ? " GPU: " : " GPUs: ");
  for (std::size_t i = 0; i < report.devices.size(); ++i) {
    const device_info& d = report.devices[i];
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s%s (sm_%d%d, %.1f GiB)", i ? ", " : "", d.name.c_str(), d.compute_major,
                  d.compute_minor, static_cast<double>(d.total_memory) / (1024.0 * 1024.0 * 1024.0));
    out += buf;
  }
  return out;
}

}  // namespace tandem::device
