// Heap allocation counting (alloc_count.hpp): malloc interposition in the
// tandem-bench executable. A symbol defined in the executable wins over
// libc's for every library loaded with it (libstdc++'s operator new, TBB,
// CUDA's runtime), so these see every allocation of the process. free is
// glibc's own: the __libc_* functions return glibc chunks.
#include "alloc_count.hpp"

#include <atomic>
#include <cerrno>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(__SANITIZE_MEMORY__)
#define TANDEM_BENCH_NO_ALLOC_HOOKS 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#undef TANDEM_BENCH_NO_ALLOC_HOOKS
#define TANDEM_BENCH_NO_ALLOC_HOOKS 1
#endif
#endif
#if !defined(__GLIBC__)  // the hooks forward to glibc's __libc_* entry points
#undef TANDEM_BENCH_NO_ALLOC_HOOKS
#define TANDEM_BENCH_NO_ALLOC_HOOKS 1
#endif

namespace tandem_bench::alloc_count {
namespace {

std::atomic<bool> counting{false};

struct alignas(64) counters {
  std::atomic<std::uint64_t> allocs{0}, bytes{0}, large_allocs{0}, large_bytes{0};
};
counters totals;

// Zero-initialised, no constructor: reading it never allocates (static TLS
// of the executable).
thread_local int paused = 0;

}  // namespace

/// Called by every hook with the size asked for.
inline void note(std::size_t n) noexcept {
  if (!counting.load(std::memory_order_relaxed) || paused != 0) return;
  totals.allocs.fetch_add(1, std::memory_order_relaxed);
  totals.bytes.fetch_add(n, std::memory_order_relaxed);
  if (n >= large_bytes) {
    totals.large_allocs.fetch_add(1, std::memory_order_relaxed);
    totals.large_bytes.fetch_add(n, std::memory_order_relaxed);
  }
}

#ifdef TANDEM_BENCH_NO_ALLOC_HOOKS
bool available() noexcept { return false; }
#else
bool available() noexcept { return true; }
#endif

void start() noexcept {
  totals.allocs.store(0, std::memory_order_relaxed);
  totals.bytes.store(0, std::memory_order_relaxed);
  totals.large_allocs.store(0, std::memory_order_relaxed);
  totals.large_bytes.store(0, std::memory_order_relaxed);
  counting.store(true, std::memory_order_seq_cst);
}

counts stop() noexcept {
  counting.store(false, std::memory_order_seq_cst);
  counts c;
  c.allocs = totals.allocs.load(std::memory_order_relaxed);
  c.bytes = totals.bytes.load(std::memory_order_relaxed);
  c.large_allocs = totals.large_allocs.load(std::memory_order_relaxed);
  c.large_bytes = totals.large_bytes.load(std::memory_order_relaxed);
  return c;
}

pause_here::pause_here() noexcept { ++paused; }
pause_here::~pause_here() { --paused; }

}  // namespace tandem_bench::alloc_count

#ifndef TANDEM_BENCH_NO_ALLOC_HOOKS

extern "C" {
// glibc's allocator proper (exported by libc.so.6 since GLIBC_2.2.5).
void* __libc_malloc(std::size_t size);                        // NOLINT(bugprone-reserved-identifier)
void* __libc_calloc(std::size_t count, std::size_t size);     // NOLINT(bugprone-reserved-identifier)
void* __libc_realloc(void* p, std::size_t size);              // NOLINT(bugprone-reserved-identifier)
void* __libc_memalign(std::size_t alignment, std::size_t size);  // NOLINT(bugprone-reserved-identifier)
void* memalign(std::size_t alignment, std::size_t size) noexcept;

void* malloc(std::size_t size) noexcept {
  tandem_bench::alloc_count::note(size);
  return __libc_malloc(size);
}

void* calloc(std::size_t count, std::size_t size) noexcept {
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) bytes = SIZE_MAX;
  tandem_bench::alloc_count::note(bytes);
  return __libc_calloc(count, size);
}

void* realloc(void* p, std::size_t size) noexcept {
  if (p == nullptr || size != 0) tandem_bench::alloc_count::note(size);  // realloc(p, 0) frees
  return __libc_realloc(p, size);
}

void* memalign(std::size_t alignment, std::size_t size) noexcept {
  tandem_bench::alloc_count::note(size);
  return __libc_memalign(alignment, size);
}

void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {  // as glibc 2.36: any alignment
  tandem_bench::alloc_count::note(size);
  return __libc_memalign(alignment, size);
}

int posix_memalign(void** out, std::size_t alignment, std::size_t size) noexcept {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  tandem_bench::alloc_count::note(size);
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}  // extern "C"

#endif  // TANDEM_BENCH_NO_ALLOC_HOOKS
