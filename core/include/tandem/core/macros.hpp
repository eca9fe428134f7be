#pragma once
/// @file
/// Macros shared by every layer. `TANDEM_HD` marks functions that one
/// implementation serves on the CPU and, compiled by nvcc, on the GPU.

#if defined(__CUDACC__)
#define TANDEM_HD __host__ __device__
#define TANDEM_DEVICE __device__
#else
#define TANDEM_HD
#define TANDEM_DEVICE
#endif

#if defined(__CUDA_ARCH__)
// Device code: the GPU's caches are not steered this way.
#define TANDEM_LIKELY(x) (x)
#define TANDEM_UNLIKELY(x) (x)
#define TANDEM_PREFETCH(addr) ((void)(addr))
#elif defined(__GNUC__) || defined(__clang__)
#define TANDEM_LIKELY(x) __builtin_expect(!!(x), 1)
#define TANDEM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#if defined(__x86_64__)
// Not __builtin_prefetch: GCC counts it as no side effect, so a function
// that only prefetches (a lambda that prefetches a leaf's lines, say) is
// found pure and its calls are deleted (-fipa-pure-const). A volatile asm
// stays where it is written.
#define TANDEM_PREFETCH(addr) __asm__ volatile("prefetcht0 %0" : : "m"(*reinterpret_cast<const char*>(addr)))
#else
#define TANDEM_PREFETCH(addr) __builtin_prefetch(addr)
#endif
#else
#define TANDEM_LIKELY(x) (x)
#define TANDEM_UNLIKELY(x) (x)
#define TANDEM_PREFETCH(addr) ((void)(addr))
#endif
