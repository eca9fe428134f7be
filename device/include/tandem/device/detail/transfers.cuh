#pragma once
/// @file
/// Host <-> device copies of caller arrays for gpu_router (private).
///
/// `stage_up` prepares one slice of a caller array for its H2D: none when
/// the array is pinned, else a host copy (by the copy pool) into the calling
/// lane's pinned staging. `staged_download` brings a list of device arrays
/// down into caller arrays: pinned destinations by direct D2H, the others in
/// pieces through two pinned slots, so that the D2H of piece j+1 overlaps the
/// host copy of piece j. Both run on the thread of the route or scatter that
/// owns them; a download object serves one call at a time.

#include <tandem/device/detail/copy_pool.hpp>
#include <tandem/device/detail/cuda_check.cuh>
#include <tandem/device/detail/cuda_resources.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>

namespace tandem::device::detail {

/// Offset of the next slice of a staging buffer (slices start on 64 bytes).
constexpr std::size_t staging_align(std::size_t bytes) { return (bytes + 63) & ~std::size_t{63}; }

/// @brief Where an H2D of `bytes` of caller memory `host` reads from: `host`
///        itself when pinned, else `staging` after a host copy into it (the
///        staging must be free: the caller waited for its last H2D). The
///        time of that copy is added to `host_in`.
inline const void* stage_up(const void* host, std::size_t bytes, bool pinned, unsigned char* staging,
                            copy_pool& pool, double& host_in) {
  if (pinned || bytes == 0) return host;
  const auto t0 = clock_type::now();
  pool.copy(staging, host, bytes);
  host_in += seconds_since(t0);
  return staging;
}

/// Byte offsets of the arrays of one chunk inside a lane's staging buffer
/// (64-byte aligned; an array copied directly takes no room).
struct staging_layout {
  std::size_t offset[3] = {0, 0, 0};
  std::size_t total = 0;
  /// Adds array k of `bytes` bytes, staged or not.
  void add(int k, std::size_t bytes, bool staged) {
    offset[k] = total;
    if (staged) total = staging_align(total + bytes);
  }
};

/// One array of a download.
struct download_item {
  void* host = nullptr;          ///< the caller's array
  const void* device = nullptr;  ///< its device source
  std::size_t bytes = 0;
  bool pinned = false;           ///< `host` is page-locked: copied directly
  cudaEvent_t ready = nullptr;   ///< the source is complete once this event is (null: stream order)
};

class staged_download {
 public:
  /// Bytes per staged piece (the copy pool splits pieces over its threads).
  static constexpr std::size_t piece_bytes = std::size_t{4} << 20;

  staged_download() : slots_{std::make_unique<slot>(), std::make_unique<slot>()} {}

  /// @brief Copies items[0..count) down on `stream`. Returns when every
  ///        staged item is in the caller's arrays; direct copies may still
  ///        be in flight (synchronise `stream`). With `marks`, records a
  ///        begin and an end event per item (indices into *marks appended to
  ///        `spans`, which must hold 2 * count) and adds the host copy-out
  ///        time to `host_out`.
  void run(const download_item* items, std::size_t count, cudaStream_t stream, copy_pool& pool, event_pool* marks,
           std::size_t* spans, double& host_out) {
    auto begin_item = [&](std::size_t k) {
      if (items[k].ready != nullptr) TANDEM_CUDA_TRY(cudaStreamWaitEvent(stream, items[k].ready, 0));
      if (marks != nullptr) spans[2 * k] = marks->record(stream);
    };
    auto end_item = [&](std::size_t k) {
      if (marks != nullptr) spans[2 * k + 1] = marks->record(stream);
    };
    bool staged = false;
    for (std::size_t k = 0; k < count; ++k) {
      if (!items[k].pinned) {
        staged = staged || items[k].bytes > 0;
        continue;
      }
      begin_item(k);
      if (items[k].bytes > 0) {
        TANDEM_CUDA_TRY(cudaMemcpyAsync(items[k].host, items[k].device, items[k].bytes, cudaMemcpyDefault,
                                        stream));
      }
      end_item(k);
    }
    if (!staged) {
      for (std::size_t k = 0; k < count; ++k) {
        if (!items[k].pinned) {  // empty: only its marks
          begin_item(k);
          end_item(k);
        }
      }
      return;
    }
    for (auto& s : slots_) s->buffer.reserve(piece_bytes);

    // Pieces in item order; at most two in flight (one per slot).
    std::size_t next_item = 0;
    std::size_t next_offset = 0;
    std::size_t issued = 0;
    std::size_t consumed = 0;
    auto issue = [&]() -> bool {
      while (next_item < count && (items[next_item].pinned || next_offset >= items[next_item].bytes)) {
        if (!items[next_item].pinned && items[next_item].bytes == 0) {
          begin_item(next_item);
          end_item(next_item);
        }
        ++next_item;
        next_offset = 0;
      }
      if (next_item == count) return false;
      const download_item& it = items[next_item];
      slot& s = *slots_[issued % 2];
      if (next_offset == 0) begin_item(next_item);
      s.host = static_cast<unsigned char*>(it.host) + next_offset;
      s.bytes = std::min(piece_bytes, it.bytes - next_offset);
      TANDEM_CUDA_TRY(cudaMemcpyAsync(s.buffer.data(), static_cast<const unsigned char*>(it.device) + next_offset,
                                      s.bytes, cudaMemcpyDeviceToHost, stream));
      TANDEM_CUDA_TRY(cudaEventRecord(s.landed.get(), stream));
      next_offset += s.bytes;
      if (next_offset >= it.bytes) end_item(next_item);
      ++issued;
      return true;
    };
    while (issued < 2 && issue()) {
    }
    while (consumed < issued) {
      slot& s = *slots_[consumed % 2];
      TANDEM_CUDA_TRY(cudaEventSynchronize(s.landed.get()));
      const auto t0 = clock_type::now();
      pool.copy(s.host, s.buffer.data(), s.bytes);
      host_out += seconds_since(t0);
      ++consumed;
      issue();  // into the slot just emptied
    }
  }

 private:
  struct slot {
    pinned_buffer<unsigned char> buffer;
    event_handle landed;  // its D2H is done
    unsigned char* host = nullptr;
    std::size_t bytes = 0;
  };
  std::array<std::unique_ptr<slot>, 2> slots_;
};

}  // namespace tandem::device::detail
