#pragma once
// The dispatcher's jobs held back (index_impl.hpp, held_).
#include "job.hpp"

#include <array>
#include <cstddef>

namespace tandem::scheduler {

/// Jobs taken from the queue that run before anything still in it: one
/// found not foldable while gathering, or batches that could not be
/// folded. A fixed ring, so putting jobs back never allocates.
template <std::size_t Capacity>
class held_jobs {
 public:
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  tandem::job* pop_front() noexcept {
    tandem::job* j = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
    --size_;
    return j;
  }
  void push_front(tandem::job* j) noexcept {
    head_ = (head_ + ring_.size() - 1) % ring_.size();
    ring_[head_] = j;
    ++size_;
  }

 private:
  std::array<tandem::job*, Capacity> ring_{};
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace tandem::scheduler
