#pragma once
/// @file
/// Heap allocation counting for tandem-bench: the executable defines malloc,
/// calloc, realloc, aligned_alloc, posix_memalign and memalign itself
/// (alloc_count.cpp), forwarding to glibc's __libc_* functions, so every
/// allocation of the process (operator new, TBB, the index, the bench)
/// passes through them. While counting is on they add the allocation to
/// process-wide counters with relaxed atomics; otherwise they only forward.
/// Frees are not counted.
///
/// Under sanitizers (which bring their own malloc) the hooks are compiled
/// out and available() is false.

#include <cstddef>
#include <cstdint>

namespace tandem_bench::alloc_count {

/// Allocations at least this large count as "large".
inline constexpr std::size_t large_bytes = std::size_t{64} << 10;

struct counts {
  std::uint64_t allocs = 0;        ///< malloc/calloc/realloc/aligned allocations
  std::uint64_t bytes = 0;         ///< bytes asked for by them
  std::uint64_t large_allocs = 0;  ///< those of at least large_bytes
  std::uint64_t large_bytes = 0;
};

/// @return false when the hooks are compiled out (sanitizer builds).
[[nodiscard]] bool available() noexcept;

/// Zeroes the counters and turns counting on (process-wide).
void start() noexcept;
/// Turns counting off and returns what was counted since start().
counts stop() noexcept;

/// While one lives, allocations of the constructing thread are not counted
/// (the bench's own bookkeeping inside a timed run, e.g. copying a stats
/// snapshot in a completion callback). Nests.
class pause_here {
 public:
  pause_here() noexcept;
  ~pause_here();
  pause_here(const pause_here&) = delete;
  pause_here& operator=(const pause_here&) = delete;
};

}  // namespace tandem_bench::alloc_count
