#include <tandem/device/current_device.hpp>

#if defined(TANDEM_HAS_CUDA)
#include <tandem/device/detail/cuda_check.cuh>
#endif

namespace tandem::device {

void make_current([[maybe_unused]] int ordinal) {
#if defined(TANDEM_HAS_CUDA)
  TANDEM_CUDA_TRY(cudaSetDevice(ordinal));
#endif
}

int current() noexcept {
#if defined(TANDEM_HAS_CUDA)
  int ordinal = -1;
  if (cudaGetDevice(&ordinal) == cudaSuccess) return ordinal;
  (void)cudaGetLastError();
#endif
  return -1;
}

device_scope::device_scope([[maybe_unused]] int ordinal) {
#if defined(TANDEM_HAS_CUDA)
  const int previous = current();  // -1, no driver: nothing to put back
  TANDEM_CUDA_TRY(cudaSetDevice(ordinal));
  previous_ = previous == ordinal ? -1 : previous;
#endif
}

device_scope::~device_scope() {
#if defined(TANDEM_HAS_CUDA)
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
#endif
}

}  // namespace tandem::device
