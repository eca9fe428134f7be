#pragma once
// The queue's unit of work (index_impl.hpp): a batch, a load, a barrier or a
// save, as a submitting thread pushes it and the dispatcher takes it up;
// batches folded by group commit become one job holding its members.
#include <tandem/index.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

struct device_io;  // device_columns.hpp

/// The pairs of a load, read where the caller keeps them (`index::load`
/// waits for the load, so they outlive it): pair i is keys[i * stride],
/// values[i * stride].
struct load_input {
  const key_type* keys = nullptr;
  const value_type* values = nullptr;
  std::size_t stride = 1;
  std::size_t n = 0;
  /// A snapshot's sequence number (index::open): later batches are numbered
  /// after it.
  std::uint64_t sequence = 0;
};

/// One unit of work in the queue: a batch, a load, a barrier or a save.
struct job {
  enum class kind { batch, load, barrier, save } type = kind::batch;
  std::string path;                    // save
  std::uint64_t* saved_sequence = nullptr;  // save: receives the snapshot's sequence number
  tandem::batch ops;
  load_input pairs;                    // load
  std::promise<batch_result> promise;  // batch via submit(b)
  index::callback done;                // batch via submit(b, cb)
  std::promise<void> finished;         // load, barrier
  std::function<void()> barrier_work;  // barrier: runs on the dispatcher
  std::chrono::steady_clock::time_point submitted;  // batch: when it was queued
  /// Writes it counts as for readers on callers (reader_gate): 1 for a
  /// load, a barrier or a batch that may write, 0 for a save or a batch of
  /// reads; a fold, its members' sum.
  std::uint32_t writes = 0;
  /// index::submit(columns): `ops` is over the caller's arrays (batch::over)
  /// and the answers go to these (null: not written); `finished` is
  /// fulfilled once they are written.
  /// Its caller waits for it inside the call (execute, the point writes):
  /// not counted as a write for readers (job::writes).
  bool awaited = false;
  bool in_place = false;
  value_type* values_out = nullptr;
  std::uint8_t* found_out = nullptr;
  key_type* keys_out = nullptr;
  /// Device columns (device_columns.hpp): the caller's arrays in GPU
  /// memory; `then` runs with the failure (or none) before `finished` is
  /// fulfilled with what it returns.
  std::shared_ptr<device_io> device;
  std::function<std::exception_ptr(std::exception_ptr)> then;
  // Group commit: a batch job made of queued batches run as one. `ops` holds
  // theirs back to back; member i owns ops [member_begin[i], member_begin[i + 1]).
  std::vector<job*> members;
  std::vector<std::size_t> member_begin;
  /// Op `i` of this job as its own batch numbers it (for error messages).
  [[nodiscard]] std::size_t local_index(std::size_t i) const noexcept {
    if (member_begin.empty()) return i;
    return i - *(std::upper_bound(member_begin.begin(), member_begin.end(), i) - 1);
  }
};

}  // namespace tandem
