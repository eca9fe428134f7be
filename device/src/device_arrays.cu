// The caller's arrays in GPU memory (device_arrays.hpp).
#include <tandem/device/device_arrays.hpp>

#include <tandem/device/current_device.hpp>
#include <tandem/device/detail/cuda_check.cuh>
#include <tandem/device/detail/cuda_resources.cuh>
#include <tandem/device/detail/shuffle_kernels.cuh>
#include <tandem/error.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace tandem::device {

void check_device_array(const void* p, std::size_t bytes, std::size_t align, int ordinal, const char* what) {
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument(std::string("tandem: ") + what + " " + why);
  };
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || ordinal < 0 || ordinal >= count) {
    (void)cudaGetLastError();
    throw error(std::string("tandem: ") + what + " is on GPU " + std::to_string(ordinal) +
                ", which this process cannot use");
  }
  if (bytes == 0) return;
  if (p == nullptr) fail("is null");
  if (reinterpret_cast<std::uintptr_t>(p) % align != 0) fail("is not aligned to " + std::to_string(align) + " bytes");
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    fail("is not memory CUDA knows (pass device = -1 for host arrays)");
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
    fail(a.type == cudaMemoryTypeHost ? "is page-locked host memory, not GPU memory (pass device = -1)"
                                      : "is host memory, not GPU memory (pass device = -1)");
  }
  if (a.device != ordinal) {
    fail("is memory of GPU " + std::to_string(a.device) + ", not of GPU " + std::to_string(ordinal));
  }
  cudaPointerAttributes last{};  // the array's last byte lies in the same GPU's memory
  if (cudaPointerGetAttributes(&last, static_cast<const char*>(p) + bytes - 1) != cudaSuccess ||
      last.type != a.type || last.device != ordinal) {
    (void)cudaGetLastError();
    fail("ends past its GPU allocation (" + std::to_string(bytes) + " bytes from it)");
  }
}

namespace {

/// One copy on `stream` of GPU `ordinal`, waited for.
void copy_and_wait(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind, int ordinal, void* stream) {
  if (bytes == 0) return;
  const device_scope on(ordinal);
  const auto s = static_cast<cudaStream_t>(stream);
  TANDEM_CUDA_TRY(cudaMemcpyAsync(to, from, bytes, kind, s));
  TANDEM_CUDA_TRY(cudaStreamSynchronize(s));
}

}  // namespace

void copy_from_device(void* host, const void* dev, std::size_t bytes, int ordinal, void* stream) {
  copy_and_wait(host, dev, bytes, cudaMemcpyDeviceToHost, ordinal, stream);
}

void copy_to_device(void* dev, const void* host, std::size_t bytes, int ordinal, void* stream) {
  copy_and_wait(dev, host, bytes, cudaMemcpyHostToDevice, ordinal, stream);
}

void* create_stream(int ordinal) {
  const device_scope on(ordinal);
  cudaStream_t s = nullptr;
  TANDEM_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void destroy_stream(void* stream, int ordinal) noexcept {
  if (stream == nullptr) return;
  try {
    const device_scope on(ordinal);
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  } catch (...) {
  }
  (void)cudaGetLastError();
}

void synchronize(int ordinal, void* stream) {
  const device_scope on(ordinal);
  TANDEM_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

int device_of(const void* p) noexcept {
  int device = -1;
  const cudaMemoryType t = detail::memory_type(p, &device);
  return t == cudaMemoryTypeDevice || t == cudaMemoryTypeManaged ? device : -1;
}

namespace {

__global__ void invert_flags_kernel(std::uint8_t* flags, std::size_t n) {
  for (std::size_t i = detail::grid_first(); i < n; i += detail::grid_stride()) flags[i] = flags[i] == 0 ? 1 : 0;
}

}  // namespace

void invert_flags(std::uint8_t* flags, std::size_t n, int ordinal, void* stream) {
  if (n == 0) return;
  const device_scope on(ordinal);
  const auto s = static_cast<cudaStream_t>(stream);
  invert_flags_kernel<<<detail::shuffle_blocks(n), detail::shuffle_block_threads, 0, s>>>(flags, n);
  TANDEM_CUDA_TRY(cudaGetLastError());
  TANDEM_CUDA_TRY(cudaStreamSynchronize(s));
}

void scatter_into_device(std::uint64_t* values_out, std::uint8_t* found_out, const std::uint32_t* positions,
                         const std::uint64_t* values, const std::uint8_t* found, std::size_t m, int ordinal,
                         void* stream) {
  if (m == 0 || (values_out == nullptr && found_out == nullptr)) return;
  const device_scope on(ordinal);
  const auto s = static_cast<cudaStream_t>(stream);
  // One allocation: positions, values (when wanted), flags (when wanted);
  // stream-ordered where the GPU has memory pools, else cudaMalloc, freed
  // once the kernel is done.
  const std::size_t value_at = (m * sizeof(std::uint32_t) + 255) / 256 * 256;
  const std::size_t found_at = value_at + (values_out != nullptr ? m * sizeof(std::uint64_t) : 0);
  const std::size_t bytes = found_at + (found_out != nullptr ? m : 0);
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    pools = 0;
  }
  void* room = nullptr;
  TANDEM_CUDA_TRY(pools != 0 ? cudaMallocAsync(&room, bytes, s) : cudaMalloc(&room, bytes));
  const auto release = [&]() -> cudaError_t {
    if (pools != 0) {
      const cudaError_t freed = cudaFreeAsync(room, s);
      const cudaError_t done = cudaStreamSynchronize(s);
      return freed != cudaSuccess ? freed : done;
    }
    const cudaError_t done = cudaStreamSynchronize(s);
    const cudaError_t freed = cudaFree(room);
    return done != cudaSuccess ? done : freed;
  };
  auto* base = static_cast<unsigned char*>(room);
  try {
    TANDEM_CUDA_TRY(cudaMemcpyAsync(base, positions, m * sizeof(std::uint32_t), cudaMemcpyDefault, s));
    if (values_out != nullptr) {
      TANDEM_CUDA_TRY(cudaMemcpyAsync(base + value_at, values, m * sizeof(std::uint64_t), cudaMemcpyDefault, s));
    }
    if (found_out != nullptr) TANDEM_CUDA_TRY(cudaMemcpyAsync(base + found_at, found, m, cudaMemcpyDefault, s));
    detail::scatter_kernel<<<detail::shuffle_blocks(m), detail::shuffle_block_threads, 0, s>>>(
        reinterpret_cast<const std::uint32_t*>(base), m, std::numeric_limits<std::size_t>::max(),
        reinterpret_cast<const std::uint64_t*>(base + value_at), values_out, base + found_at, found_out);
    TANDEM_CUDA_TRY(cudaGetLastError());
  } catch (...) {
    (void)release();
    (void)cudaGetLastError();
    throw;
  }
  TANDEM_CUDA_TRY(release());
}

void* allocate_device(std::size_t bytes, int ordinal) {
  const device_scope on(ordinal);
  void* p = nullptr;
  TANDEM_CUDA_TRY(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  return p;
}

void free_device(void* p, int ordinal) noexcept {
  if (p == nullptr) return;
  try {
    const device_scope on(ordinal);
    (void)cudaFree(p);
  } catch (...) {
  }
  (void)cudaGetLastError();
}

}  // namespace tandem::device
