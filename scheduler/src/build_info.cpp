#include <tandem/scheduler/build_info.hpp>

#include <tandem/device/device_query.hpp>
#include <tandem/version.hpp>

#include <thread>

namespace tandem::scheduler {

std::string build_info() {
  return std::string("tandem ") + tandem::version() + ", CUDA layer: " + (tandem::built_with_cuda() ? "yes" : "no") +
         ", " + device::describe(device::query_devices()) + ", " +
         std::to_string(std::thread::hardware_concurrency()) + " host threads";
}

}  // namespace tandem::scheduler
