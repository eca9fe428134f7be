// The host memory probe (probe.hpp).
#include "probe.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <new>
#include <thread>
#include <vector>

namespace tandem_bench {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::size_t mib = std::size_t{1} << 20;
constexpr std::size_t gib = std::size_t{1} << 30;
constexpr std::size_t page_bytes = 4096;
constexpr std::size_t slice_words = mib / sizeof(std::uint64_t);  // sequential work unit: 1 MiB
constexpr std::size_t random_step = std::size_t{1} << 16;         // random reads per work unit

struct free_deleter {
  void operator()(std::uint64_t* p) const noexcept { std::free(p); }
};
using words_ptr = std::unique_ptr<std::uint64_t[], free_deleter>;

/// Bytes of the probe array: min(1 GiB, keys * 16) rounded up to a power of
/// two, at least 1 MiB, halved while above a quarter of the available memory.
std::size_t array_bytes_for(std::uint64_t keys) {
  const std::uint64_t want = keys > gib / 16 ? gib : std::max<std::uint64_t>(keys * 16, mib);
  std::size_t bytes = mib;
  while (bytes < want) bytes *= 2;
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    const std::uint64_t avail = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
    while (bytes > mib && bytes > avail / 4) bytes /= 2;
  }
  return bytes;
}

words_ptr allocate_words(std::size_t bytes) {
  // Ordinary memory, like the index's leaves (no MADV_HUGEPAGE: where THP is
  // "madvise", huge pages can cost seconds of compaction at first touch).
  auto* p = static_cast<std::uint64_t*>(std::aligned_alloc(page_bytes, bytes));
  if (!p) throw std::bad_alloc();
  return words_ptr(p);
}

/// Runs body(t) on `threads` threads (the calling thread is one of them).
template <class Body>
void on_threads(std::size_t threads, const Body& body) {
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back([&body, t] { body(t); });
  body(0);
  for (std::thread& th : pool) th.join();
}

/// Threads take work units until `seconds` have passed; unit(t, u) does
/// unit number u on thread t and returns a value folded into `sink`.
/// @return (units done, seconds from the common start to the last thread's end)
template <class Unit>
std::pair<std::uint64_t, double> timed_units(std::size_t threads, double seconds, std::atomic<std::uint64_t>& sink,
                                             const Unit& unit) {
  std::atomic<std::uint64_t> next{0};
  std::atomic<std::size_t> ready{0};
  std::atomic<bool> go{false};
  std::atomic<std::int64_t> last_end_ns{0};
  clock_type::time_point start;
  on_threads(threads, [&](std::size_t t) {
    if (t == 0) {
      while (ready.load(std::memory_order_acquire) != threads - 1) std::this_thread::yield();
      start = clock_type::now();
      go.store(true, std::memory_order_release);
    } else {
      ready.fetch_add(1, std::memory_order_acq_rel);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    }
    const clock_type::time_point t0 = clock_type::now();
    const auto deadline = t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
    std::uint64_t acc = 0;
    clock_type::time_point now = t0;
    do {
      acc += unit(t, next.fetch_add(1, std::memory_order_relaxed));
      now = clock_type::now();
    } while (now < deadline);
    sink.fetch_add(acc, std::memory_order_relaxed);
    const std::int64_t end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
    std::int64_t seen = last_end_ns.load(std::memory_order_relaxed);
    while (seen < end_ns && !last_end_ns.compare_exchange_weak(seen, end_ns, std::memory_order_relaxed)) {
    }
  });
  const double elapsed =
      static_cast<double>(last_end_ns.load() -
                          std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count()) *
      1e-9;
  return {next.load(), elapsed};
}

std::uint64_t sum_words(const std::uint64_t* p, std::size_t n) {
  std::uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (std::size_t i = 0; i + 4 <= n; i += 4) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
  }
  return a0 ^ a1 ^ a2 ^ a3;
}

std::uint64_t splitmix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void write_words(std::uint64_t* p, std::size_t n, std::uint64_t v) {
  for (std::size_t i = 0; i < n; ++i) p[i] = v + i;
}

}  // namespace

probe_figures run_memory_probe(std::size_t threads, std::uint64_t keys, double seconds_each, double fill_seconds) {
  const auto t_begin = clock_type::now();
  probe_figures f;
  f.threads = std::max<std::size_t>(threads, 1);
  f.array_bytes = array_bytes_for(keys);
  words_ptr data = allocate_words(f.array_bytes);
  std::uint64_t* const a = data.get();
  std::size_t slices = f.array_bytes / (slice_words * sizeof(std::uint64_t));

  // Fill (first touch) before any timing, in slices taken in order, for at
  // most fill_seconds: where page faults are slow (a VM) the probe keeps the
  // filled prefix, rounded down to a power of two, instead of the whole array.
  {
    std::atomic<std::size_t> next{0};
    const auto deadline = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                                  std::chrono::duration<double>(fill_seconds));
    on_threads(f.threads, [&](std::size_t) {
      for (std::size_t u; (u = next.fetch_add(1, std::memory_order_relaxed)) < slices;) {
        write_words(a + u * slice_words, slice_words, u);
        if (clock_type::now() >= deadline) break;
      }
    });
    // Every slice claimed was written before its thread stopped.
    std::size_t filled = std::min(next.load(), slices);
    std::size_t used = 1;
    while (used * 2 <= filled) used *= 2;
    slices = used;
    f.array_bytes = slices * slice_words * sizeof(std::uint64_t);
  }
  const std::size_t words = slices * slice_words;

  std::atomic<std::uint64_t> sink{0};
  const double bytes_per_slice = static_cast<double>(slice_words * sizeof(std::uint64_t));
  {
    const auto [units, s] = timed_units(f.threads, seconds_each, sink, [&](std::size_t, std::uint64_t u) {
      write_words(a + (u % slices) * slice_words, slice_words, u);
      return std::uint64_t{0};
    });
    f.write_gbs = s > 0 ? static_cast<double>(units) * bytes_per_slice / s / 1e9 : 0;
  }
  {
    const auto [units, s] = timed_units(f.threads, seconds_each, sink, [&](std::size_t, std::uint64_t u) {
      return sum_words(a + (u % slices) * slice_words, slice_words);
    });
    f.read_gbs = s > 0 ? static_cast<double>(units) * bytes_per_slice / s / 1e9 : 0;
  }
  {
    int log2_words = 0;
    while ((std::size_t{1} << log2_words) < words) ++log2_words;
    const int shift = 64 - log2_words;
    const auto [units, s] = timed_units(f.threads, seconds_each, sink, [&](std::size_t t, std::uint64_t u) {
      // Two LCG streams per work unit; their top bits pick the words. The
      // reads are independent of each other (only the sums depend on them).
      std::uint64_t x0 = splitmix(u * 2 + t * 0x100000001ULL), x1 = splitmix(u * 2 + 1 + t * 0x100000001ULL);
      std::uint64_t s0 = 0, s1 = 0;
      for (std::size_t k = 0; k < random_step; k += 2) {
        x0 = x0 * 6364136223846793005ULL + 1442695040888963407ULL;
        x1 = x1 * 6364136223846793005ULL + 1442695040888963407ULL;
        s0 += a[(x0 >> shift) & (words - 1)];
        s1 += a[(x1 >> shift) & (words - 1)];
      }
      return s0 ^ s1;
    });
    f.random_reads_s = s > 0 ? static_cast<double>(units) * static_cast<double>(random_step) / s : 0;
  }
  data.reset();
  f.seconds = std::chrono::duration<double>(clock_type::now() - t_begin).count();
  return f;
}

}  // namespace tandem_bench
