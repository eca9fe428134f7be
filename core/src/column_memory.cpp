// Column memory (column_memory.hpp): the process-wide cache of large column
// blocks. Each block starts with a 64-byte header naming its source and
// size class; callers get the memory after it.
#include <tandem/core/column_memory.hpp>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace tandem::detail {
namespace {

constexpr std::size_t header_bytes = 64;
constexpr std::size_t huge_page = std::size_t{2} << 20;

struct alignas(header_bytes) block_header {
  const column_source* source;
  std::size_t bytes;  // the size class: usable bytes after the header
};
static_assert(sizeof(block_header) == header_bytes);

void* ordinary_allocate(std::size_t bytes) noexcept {
  const std::size_t align = bytes >= huge_page ? huge_page : header_bytes;
  const std::size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p != nullptr && align == huge_page) (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}
void ordinary_release(void* block, std::size_t) noexcept { std::free(block); }

const column_source ordinary{&ordinary_allocate, &ordinary_release};

/// Usable bytes of the block that serves `bytes`: rounded up to a quarter of
/// the largest power of two not above it.
std::size_t size_class(std::size_t bytes) {
  if (bytes > std::numeric_limits<std::size_t>::max() / 4) throw std::bad_alloc();
  std::size_t top = 1;
  while (top <= bytes / 2) top *= 2;
  const std::size_t step = top / 4;
  return (bytes + step - 1) / step * step;
}

/// Free bytes the cache keeps: an eighth of the machine's memory.
std::size_t default_bound() noexcept { return physical_memory_bytes() / 8; }

struct free_block {
  block_header* block;
  std::size_t bytes;
};

class column_cache_state {
 public:
  column_cache_state() : bound_(default_bound()) { free_.reserve(max_free_blocks); }

  void* allocate(std::size_t bytes) {
    const std::size_t size = size_class(bytes);
    const column_source* source = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      source = source_;
      // Every cached block is of the current source (release and use keep it so).
      for (std::size_t i = 0; i < free_.size(); ++i) {
        if (free_[i].bytes == size) {
          block_header* h = free_[i].block;
          free_[i] = free_.back();
          free_.pop_back();
          free_bytes_ -= size;
          ++reused_;
          return h + 1;
        }
      }
      ++allocated_;
    }
    void* raw = source->allocate(size + header_bytes);
    if (raw == nullptr && source != &ordinary) {
      source = &ordinary;
      raw = ordinary.allocate(size + header_bytes);
    }
    if (raw == nullptr) throw std::bad_alloc();
    auto* h = static_cast<block_header*>(raw);
    h->source = source;
    h->bytes = size;
    return h + 1;
  }

  void release(void* p) noexcept {
    block_header* h = static_cast<block_header*>(p) - 1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (h->source == source_ && free_bytes_ + h->bytes <= bound_ && free_.size() < free_.capacity()) {
        free_.push_back({h, h->bytes});  // within the reserved room: no allocation
        free_bytes_ += h->bytes;
        return;
      }
    }
    h->source->release(h, h->bytes + header_bytes);
  }

  const column_source* use(const column_source* source) noexcept {
    std::vector<free_block> stale;
    const column_source* previous = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      previous = source_;
      if (source == source_) return previous;
      source_ = source;
      stale.swap(free_);
      try {
        free_.reserve(max_free_blocks);
      } catch (...) {  // keeps nothing cached until there is room again
      }
      free_bytes_ = 0;
    }
    for (const free_block& f : stale) f.block->source->release(f.block, f.bytes + header_bytes);
    return previous;
  }

  std::size_t release_free() noexcept {
    std::vector<free_block> cached;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cached.swap(free_);
      try {
        free_.reserve(max_free_blocks);
      } catch (...) {  // keeps nothing cached until there is room again
      }
      free_bytes_ = 0;
    }
    std::size_t bytes = 0;
    for (const free_block& f : cached) {
      f.block->source->release(f.block, f.bytes + header_bytes);
      bytes += f.bytes;
    }
    return bytes;
  }

  column_cache_counts counts() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    return {free_.size(), free_bytes_, reused_, allocated_};
  }

 private:
  static constexpr std::size_t max_free_blocks = 1024;

  std::mutex mutex_;
  const column_source* source_ = &ordinary;
  std::vector<free_block> free_;
  std::size_t free_bytes_ = 0;
  const std::size_t bound_;
  std::size_t reused_ = 0;
  std::size_t allocated_ = 0;
};

// Never destroyed: columns may be freed during static destruction, and
// cached pinned blocks must not be freed after the CUDA runtime unloads.
column_cache_state& cache() {
  static auto* state = new column_cache_state();
  return *state;
}

}  // namespace

std::size_t physical_memory_bytes() noexcept {
#if defined(__linux__)
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
#endif
  return std::size_t{8} << 30;
}

const column_source* use_column_source(const column_source* source) noexcept {
  const column_source* previous = cache().use(source ? source : &ordinary);
  return previous == &ordinary ? nullptr : previous;
}

void* allocate_column(std::size_t bytes) { return cache().allocate(bytes); }

void release_column(void* p, std::size_t) noexcept {
  if (p != nullptr) cache().release(p);
}

column_cache_counts column_cache() noexcept { return cache().counts(); }

std::size_t release_free_columns() noexcept { return cache().release_free(); }

}  // namespace tandem::detail
