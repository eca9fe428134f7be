// gpu_router, the load sort: takes the pairs of a bulk load in input order,
// gives them back sorted by key with the last pair of each key kept, in runs
// that fit the device (index::load merges the runs on the host). Runs on the
// thread that calls sort_pairs (the dispatcher's load job), one at a time
// per router, on its own stream; its device arrays live only during the call.
// Design: gpu_router.hpp; state: detail/router_state.cuh.
#include <tandem/device/gpu_router.hpp>

#include <tandem/device/detail/cuda_check.cuh>
#include <tandem/device/detail/router_state.cuh>
#include <tandem/device/detail/shuffle_kernels.cuh>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

namespace tandem::device {

using detail::clock_type;
using detail::seconds_since;

namespace {

/// Most pairs in one run: CUB's sorts and selects count items in int.
constexpr std::size_t max_run_pairs = std::size_t{1} << 30;

/// keys[i] = entries[2i], values[i] = entries[2i + 1] for i < n.
__global__ void split_entries_kernel(const std::uint64_t* __restrict__ entries, std::size_t n,
                                     std::uint64_t* __restrict__ keys, std::uint64_t* __restrict__ values) {
  for (std::size_t i = detail::grid_first(); i < n; i += detail::grid_stride()) {
    keys[i] = entries[2 * i];
    values[i] = entries[2 * i + 1];
  }
}

/// flags[i] = 1 where key i is the last of its run of equal keys.
__global__ void last_of_key_kernel(const key_type* __restrict__ keys, std::size_t n, std::uint8_t* __restrict__ flags) {
  for (std::size_t i = detail::grid_first(); i < n; i += detail::grid_stride()) {
    flags[i] = static_cast<std::uint8_t>(i + 1 == n || keys[i + 1] != keys[i]);
  }
}

/// Copies between caller memory and the device: direct when the caller's
/// memory is pinned, else through two pinned pieces, the copy threads filling
/// (emptying) one piece while the other crosses PCIe.
class staged_pieces {
 public:
  void up(void* device, const void* host, std::size_t bytes, bool pinned, cudaStream_t stream,
          detail::copy_pool& pool) {
    if (bytes == 0) return;
    if (pinned) {
      TANDEM_CUDA_TRY(cudaMemcpyAsync(device, host, bytes, cudaMemcpyDefault, stream));
      return;
    }
    reserve();
    for (std::size_t offset = 0; offset < bytes; offset += piece_bytes) {
      slot& s = slots_[next_++ % slots_.size()];
      const std::size_t piece = std::min(piece_bytes, bytes - offset);
      TANDEM_CUDA_TRY(cudaEventSynchronize(s.done.get()));  // its last H2D is done
      pool.copy(s.buffer.data(), static_cast<const unsigned char*>(host) + offset, piece);
      TANDEM_CUDA_TRY(cudaMemcpyAsync(static_cast<unsigned char*>(device) + offset, s.buffer.data(), piece,
                                      cudaMemcpyDefault, stream));
      TANDEM_CUDA_TRY(cudaEventRecord(s.done.get(), stream));
    }
  }

  /// Returns with every byte in `host` (waits for the stream's work before).
  void down(void* host, const void* device, std::size_t bytes, bool pinned, cudaStream_t stream,
            detail::copy_pool& pool) {
    if (bytes == 0) return;
    if (pinned) {
      TANDEM_CUDA_TRY(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDefault, stream));
      TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
      return;
    }
    reserve();
    const std::size_t pieces = (bytes + piece_bytes - 1) / piece_bytes;
    auto issue = [&](std::size_t j) {
      slot& s = slots_[j % slots_.size()];
      const std::size_t offset = j * piece_bytes;
      TANDEM_CUDA_TRY(cudaMemcpyAsync(s.buffer.data(), static_cast<const unsigned char*>(device) + offset,
                                      std::min(piece_bytes, bytes - offset), cudaMemcpyDefault, stream));
      TANDEM_CUDA_TRY(cudaEventRecord(s.done.get(), stream));
    };
    issue(0);
    for (std::size_t j = 0; j < pieces; ++j) {
      if (j + 1 < pieces) issue(j + 1);  // into the other slot, emptied by the last round
      slot& s = slots_[j % slots_.size()];
      TANDEM_CUDA_TRY(cudaEventSynchronize(s.done.get()));
      const std::size_t offset = j * piece_bytes;
      pool.copy(static_cast<unsigned char*>(host) + offset, s.buffer.data(), std::min(piece_bytes, bytes - offset));
    }
  }

 private:
  static constexpr std::size_t piece_bytes = std::size_t{16} << 20;
  struct slot {
    detail::pinned_buffer<unsigned char> buffer;
    detail::event_handle done;  // its last copy is complete
  };
  void reserve() {
    for (auto& s : slots_) s.buffer.reserve(piece_bytes);
  }
  std::array<slot, 2> slots_;
  std::size_t next_ = 0;
};

/// CUB scratch bytes of one run of `count` pairs: the sort and the two selects.
std::size_t scratch_bytes(std::size_t count) {
  const int items = static_cast<int>(count);
  cub::DoubleBuffer<key_type> keys(nullptr, nullptr);
  cub::DoubleBuffer<value_type> values(nullptr, nullptr);
  std::size_t sort = 0;
  TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, sort, keys, values, items, 0, 64));
  std::size_t select = 0;
  TANDEM_CUDA_TRY(cub::DeviceSelect::Flagged(nullptr, select, static_cast<const key_type*>(nullptr),
                                             static_cast<const std::uint8_t*>(nullptr),
                                             static_cast<key_type*>(nullptr), static_cast<int*>(nullptr), items));
  return std::max(sort, select);
}

/// Device bytes one run of `count` pairs takes.
std::size_t run_bytes(std::size_t count) {
  return count * (4 * sizeof(std::uint64_t) + 1) + scratch_bytes(count) + 1024;
}

}  // namespace

std::size_t gpu_router::sort_bytes(std::size_t run_pairs) { return run_bytes(std::min(run_pairs, max_run_pairs)); }

std::vector<std::size_t> gpu_router::sort_pairs(const key_type* keys, const value_type* values, std::size_t stride,
                                                std::size_t n, key_type* keys_out, value_type* values_out,
                                                std::size_t run_pairs, sort_timing* timing) {
  const auto t0 = clock_type::now();
  const bool entries = stride == 2 && values == keys + 1;
  if (n > 0) {
    if (keys == nullptr || values == nullptr || keys_out == nullptr || values_out == nullptr) {
      throw std::invalid_argument("gpu_router::sort_pairs: null array for " + std::to_string(n) + " pairs");
    }
    if (stride != 1 && !entries) {
      throw std::invalid_argument("gpu_router::sort_pairs: stride " + std::to_string(stride) +
                                  "; give two arrays (stride 1) or key-value entries (stride 2, values == keys + 1)");
    }
  }
  std::vector<std::size_t> bounds{0};
  sort_timing t;
  if (n == 0) {
    if (timing != nullptr) *timing = t;
    return bounds;
  }
  state& s = *state_;
  const detail::account_scope scope(s.account);
  std::lock_guard<std::mutex> sort_lock(s.sort_mutex);
  s.set_device();
  detail::fault_gate gate(s.faults);
  detail::stream_handle stream_owner;
  const cudaStream_t stream = stream_owner.get();
  try {
    // Pairs per run: what was asked, else what half the free memory holds.
    std::size_t run = std::min({n, max_run_pairs, run_pairs > 0 ? run_pairs : n});
    if (run_pairs == 0) {
      std::size_t free_bytes = 0, total_bytes = 0;
      TANDEM_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
      while (run > (std::size_t{1} << 16) && run_bytes(run) > free_bytes / 2) run = (run + 1) / 2;
    }
    t.run_pairs = run;
    // a: the pairs as they came up (entries: interleaved over both halves)
    // and the sort's second buffers; b: the other buffers. The kept pairs
    // are selected into whichever pair of buffers the sort did not end in.
    detail::device_array<std::uint64_t> a, b;
    detail::device_array<std::uint8_t> flags;
    detail::device_array<unsigned char> temp;
    detail::device_array<int> selected;
    a.reserve(2 * run);
    b.reserve(2 * run);
    flags.reserve(run);
    const std::size_t temp_bytes = scratch_bytes(run);
    temp.reserve(temp_bytes);
    selected.reserve(2);
    detail::pinned_buffer<int> selected_host;
    selected_host.reserve(2);
    staged_pieces staged;
    const bool keys_pinned = detail::dma_ready(keys);
    const bool values_pinned = entries ? keys_pinned : detail::dma_ready(values);
    const bool keys_out_pinned = detail::dma_ready(keys_out);
    const bool values_out_pinned = detail::dma_ready(values_out);

    for (std::size_t begin = 0; begin < n; begin += run) {
      const std::size_t count = std::min(run, n - begin);
      const int items = static_cast<int>(count);
      ++t.runs;

      auto phase = clock_type::now();
      TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::upload));
      cub::DoubleBuffer<key_type> key_buffers(a.data(), b.data());
      cub::DoubleBuffer<value_type> value_buffers(a.data() + run, b.data() + run);
      if (entries) {
        staged.up(a.data(), keys + 2 * begin, count * 2 * sizeof(std::uint64_t), keys_pinned, stream, s.pool);
        split_entries_kernel<<<detail::shuffle_blocks(count), detail::shuffle_block_threads, 0, stream>>>(
            a.data(), count, b.data(), b.data() + run);
        TANDEM_CUDA_TRY(cudaGetLastError());
        key_buffers = cub::DoubleBuffer<key_type>(b.data(), a.data());
        value_buffers = cub::DoubleBuffer<value_type>(b.data() + run, a.data() + run);
      } else {
        staged.up(a.data(), keys + begin, count * sizeof(key_type), keys_pinned, stream, s.pool);
        staged.up(a.data() + run, values + begin, count * sizeof(value_type), values_pinned, stream, s.pool);
      }
      TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
      t.upload += seconds_since(phase);
      t.bytes_up += count * 2 * sizeof(std::uint64_t);

      phase = clock_type::now();
      TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::sort));
      std::size_t bytes = temp_bytes;
      TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp.data(), bytes, key_buffers, value_buffers, items, 0, 64,
                                                      stream));
      TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::kernel));
      last_of_key_kernel<<<detail::shuffle_blocks(count), detail::shuffle_block_threads, 0, stream>>>(
          key_buffers.Current(), count, flags.data());
      TANDEM_CUDA_TRY(cudaGetLastError());
      bytes = temp_bytes;
      TANDEM_CUDA_TRY(cub::DeviceSelect::Flagged(temp.data(), bytes, key_buffers.Current(), flags.data(),
                                                 key_buffers.Alternate(), selected.data(), items, stream));
      bytes = temp_bytes;
      TANDEM_CUDA_TRY(cub::DeviceSelect::Flagged(temp.data(), bytes, value_buffers.Current(), flags.data(),
                                                 value_buffers.Alternate(), selected.data() + 1, items, stream));
      TANDEM_CUDA_TRY(cudaMemcpyAsync(selected_host.data(), selected.data(), 2 * sizeof(int), cudaMemcpyDeviceToHost,
                                      stream));
      TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
      t.sort += seconds_since(phase);
      const auto kept = static_cast<std::size_t>(selected_host.data()[0]);
      if (kept != static_cast<std::size_t>(selected_host.data()[1]) || kept == 0 || kept > count) {
        throw std::logic_error("gpu_router::sort_pairs: the selects kept " + std::to_string(kept) + " keys and " +
                               std::to_string(selected_host.data()[1]) + " values of " + std::to_string(count));
      }

      phase = clock_type::now();
      TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::download));
      const std::size_t at = bounds.back();
      staged.down(keys_out + at, key_buffers.Alternate(), kept * sizeof(key_type), keys_out_pinned, stream, s.pool);
      TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::sync));
      staged.down(values_out + at, value_buffers.Alternate(), kept * sizeof(value_type), values_out_pinned, stream,
                  s.pool);
      t.download += seconds_since(phase);
      t.bytes_down += kept * 2 * sizeof(std::uint64_t);
      bounds.push_back(at + kept);
    }
  } catch (...) {
    (void)cudaStreamSynchronize(stream);
    (void)cudaGetLastError();
    throw;
  }
  t.total = seconds_since(t0);
  if (timing != nullptr) *timing = t;
  return bounds;
}

}  // namespace tandem::device
