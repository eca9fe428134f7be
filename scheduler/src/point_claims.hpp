#pragma once
// point_claims: the leaf cache's claims of one-key writes on their callers
// (caller_runs.cpp, write_on_caller), gathered by reader slot so that
// writers on different threads share no lock and no written line; the
// cache's own mutex, taken for every write, held 16 writing threads to a
// seventh of absl's rate (docs/performance.md). They reach the cache
// (leaf_cache::claim) before each drain, that is before any lookup in the
// copies that must see them (leaf_copies.cpp), or at once when a slot's
// buffer fills.
//
// Order: a writer changes its leaf, adds the claim, then counts it; a route
// reads the count, then folds the claims into the cache, then drains. A
// write counted by the route's read was folded before its drain; a write
// not counted changes the count the batch's leaf phase reads again
// (reroute_after_writes).
#include "reader_gate.hpp"

#include <tandem/host/leaf_cache.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace tandem::scheduler {

class point_claims {
 public:
  /// Leaf `id` was written on a caller of reader slot `at` (after the write).
  /// A full buffer claims its leaves in `cache` with `sequence` at once.
  /// @throws std::bad_alloc (the write stays claimed: the copies must go)
  void add(std::size_t at, leaf_id id, host::leaf_cache& cache, std::uint64_t sequence) {
    buffer& b = buffers_[at];
    struct counted {  // counted last, thrown or not
      std::atomic<std::uint64_t>& added;
      ~counted() { added.fetch_add(1); }
    } count_it{b.added};
    std::lock_guard<std::mutex> lock(b.mutex);
    if (b.ids.size() >= fold_at) {
      cache.claim(b.ids.data(), b.ids.size(), sequence);
      b.ids.clear();
    }
    b.ids.push_back(id);
  }
  /// Writes added so far (it only grows).
  [[nodiscard]] std::uint64_t count() const noexcept {
    std::uint64_t n = 0;
    for (const buffer& b : buffers_) n += b.added.load();
    return n;
  }
  /// Claims every leaf added so far in `cache` with `sequence` (the gate's:
  /// at least what each write claimed with).
  /// @throws what leaf_cache::claim throws (what is not claimed stays)
  void fold(host::leaf_cache& cache, std::uint64_t sequence) {
    for (buffer& b : buffers_) {
      std::lock_guard<std::mutex> lock(b.mutex);
      if (b.ids.empty()) continue;
      cache.claim(b.ids.data(), b.ids.size(), sequence);
      b.ids.clear();
    }
  }

 private:
  static constexpr std::size_t fold_at = 4096;
  struct alignas(128) buffer {
    std::mutex mutex;
    std::vector<leaf_id> ids;
    std::atomic<std::uint64_t> added{0};
  };
  std::array<buffer, reader_gate::slot_count> buffers_;
};

}  // namespace tandem::scheduler
