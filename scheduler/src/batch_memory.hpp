#pragma once
// Batch memory (DESIGN, "Batch memory"): grow-only host arrays and the pool
// of answer columns. Takes sizes; gives memory that is touched once and then
// reused batch after batch, so a steady-state batch allocates nothing of its
// size. With a GPU the arrays are pinned (the GPU copies them directly);
// without one they are ordinary memory with transparent huge pages asked for
// (madvise), which halves first-touch cost. Used by the dispatcher and the
// look-ahead thread; a pool may be used from any thread.

#include <tandem/batch_result.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace tandem::scheduler {

/// Where batch arrays live.
enum class memory_kind : std::uint8_t { ordinary, pinned };

/// A counted allocation site (host/detail/fault_point.hpp).
/// @throws std::bad_alloc
void* allocate_host(std::size_t bytes, memory_kind kind);
void free_host(void* p, memory_kind kind) noexcept;

/// Elements a grow-only array takes when a request of n outgrows it: an
/// eighth more than n. Requests that wander a little around one size (the
/// parts of batches cut by key range differ by thousands of ops from batch
/// to batch) then fit the first allocation, instead of each new largest
/// one freeing and pinning again: pinning the arrays of one route space
/// for 2^23 ops (~300 MB) takes tens of milliseconds, and cudaFreeHost waits
/// for the GPU, several times what the GPU takes to route those ops.
[[nodiscard]] constexpr std::size_t grown_capacity(std::size_t n) noexcept {
  return n > SIZE_MAX - n / 8 ? n : n + n / 8;
}

/// A grow-only array of plain T; contents are kept only while it does not
/// grow. It grows to grown_capacity(n).
template <class T>
class host_array {
 public:
  explicit host_array(memory_kind kind = memory_kind::ordinary) noexcept : kind_(kind) {}
  ~host_array() { free_host(data_, kind_); }
  host_array(const host_array&) = delete;
  host_array& operator=(const host_array&) = delete;

  void set_kind(memory_kind kind) noexcept {
    if (kind == kind_) return;
    release();
    kind_ = kind;
  }
  /// @return room for n elements.
  T* get(std::size_t n) {
    if (n > capacity_) {
      release();
      const std::size_t room = grown_capacity(std::max<std::size_t>(n, 1));
      data_ = static_cast<T*>(allocate_host(room * sizeof(T), kind_));
      capacity_ = room;
    }
    return data_;
  }
  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  /// Gives the memory back.
  void release() noexcept {
    free_host(data_, kind_);
    data_ = nullptr;
    capacity_ = 0;
  }

 private:
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
  memory_kind kind_;
};

/// Answer columns for a few answers, in one allocation of their own (no
/// pool, no lock): batches answered on their callers' threads.
/// @throws std::bad_alloc
std::shared_ptr<tandem::detail::answer_columns> small_answer_columns(std::size_t n);

/// Answer columns handed to batch results and taken back when they die.
/// Results may outlive the index: the pool is shared with every result's
/// deleter, which frees the slot when the pool is gone.
class answer_pool : public std::enable_shared_from_this<answer_pool> {
 public:
  explicit answer_pool(memory_kind kind);
  ~answer_pool();

  /// @return columns with room for n answers (contents unspecified).
  std::shared_ptr<tandem::detail::answer_columns> take(std::size_t n);
  /// Frees the columns no result holds (the next batches allocate afresh).
  void release_free() noexcept;

 private:
  struct slot;
  void give_back(slot* s) noexcept;

  memory_kind kind_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<slot>> free_;
};

}  // namespace tandem::scheduler
