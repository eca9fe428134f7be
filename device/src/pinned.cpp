#include <tandem/device/pinned.hpp>

#include <cstdint>
#include <cstdlib>

#if defined(TANDEM_HAS_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace tandem::device {
namespace {

// Each block starts with a 64-byte header saying how it was allocated, so
// that free_pinned needs no lookup.
constexpr std::size_t header = 64;
enum class kind : std::uint64_t { pinned = 0x70696e6e6564, ordinary = 0x6f7264696e };

}  // namespace

void* allocate_pinned(std::size_t bytes) {
  void* block = nullptr;
#if defined(TANDEM_HAS_CUDA)
  if (cudaMallocHost(&block, bytes + header) == cudaSuccess) {
    *static_cast<kind*>(block) = kind::pinned;
    return static_cast<char*>(block) + header;
  }
  (void)cudaGetLastError();  // no driver or no pinnable memory: ordinary memory will do
#endif
  block = std::aligned_alloc(header, (bytes + 2 * header - 1) / header * header);
  if (!block) throw std::bad_alloc();
  *static_cast<kind*>(block) = kind::ordinary;
  return static_cast<char*>(block) + header;
}

void free_pinned(void* p) noexcept {
  if (!p) return;
  void* block = static_cast<char*>(p) - header;
#if defined(TANDEM_HAS_CUDA)
  if (*static_cast<kind*>(block) == kind::pinned) {
    (void)cudaFreeHost(block);
    return;
  }
#endif
  std::free(block);
}

}  // namespace tandem::device
