// Built without the CUDA layer: no array is in GPU memory.
#include <tandem/device/device_arrays.hpp>

#include <tandem/error.hpp>

#include <string>

namespace tandem::device {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw error(std::string("tandem: ") + what +
              " is in GPU memory, and tandem was built without CUDA (TANDEM_CUDA=OFF or no nvcc at build time)");
}

}  // namespace

void check_device_array(const void*, std::size_t, std::size_t, int, const char* what) { no_cuda(what); }
void copy_from_device(void*, const void*, std::size_t, int, void*) { no_cuda("an array"); }
void copy_to_device(void*, const void*, std::size_t, int, void*) { no_cuda("an array"); }
void* create_stream(int) { no_cuda("a stream"); }
void destroy_stream(void*, int) noexcept {}
void synchronize(int, void*) { no_cuda("a stream"); }
int device_of(const void*) noexcept { return -1; }
void scatter_into_device(std::uint64_t*, std::uint8_t*, const std::uint32_t*, const std::uint64_t*,
                         const std::uint8_t*, std::size_t, int, void*) {
  no_cuda("an array");
}
void invert_flags(std::uint8_t*, std::size_t, int, void*) { no_cuda("an array"); }
void* allocate_device(std::size_t, int) { no_cuda("an array"); }
void free_device(void*, int) noexcept {}

}  // namespace tandem::device
