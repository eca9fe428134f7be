// Big-array host memory (detail/huge_pages.hpp).
#include <tandem/host/detail/huge_pages.hpp>

#include <tandem/host/detail/fault_point.hpp>

#include <sys/mman.h>

#include <cstdlib>

namespace tandem::host::detail {
namespace {
constexpr std::size_t huge_page = std::size_t{2} << 20;
constexpr std::size_t line = 64;
}  // namespace

void* allocate_huge(std::size_t bytes) {
  allocation_point();
  if (bytes < huge_page) {
    void* p = std::aligned_alloc(line, (bytes + line - 1) / line * line);
    if (!p) throw std::bad_alloc();
    return p;
  }
  const std::size_t rounded = (bytes + huge_page - 1) / huge_page * huge_page;
  void* p = std::aligned_alloc(huge_page, rounded);
  if (!p) throw std::bad_alloc();
  (void)madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without THP it is ordinary memory
  return p;
}

void free_huge(void* p) noexcept { std::free(p); }

}  // namespace tandem::host::detail
