#pragma once
// index::submit of columns in GPU memory (index.hpp, `columns::device`).
#include "job.hpp"

#include <tandem/index.hpp>

#include <cstdint>
#include <functional>
#include <future>
#include <memory>

namespace tandem {

/// A job's columns in GPU memory. Gets whose keys stay there (`on_gpu`)
/// are routed from the caller's device array by the leaf copies' route,
/// the copies' answers written into the caller's device arrays and the
/// misses' scattered there after the leaf phase; every other job runs on
/// page-locked host copies (`to_host`), its answers copied up once it is
/// done.
struct device_io {
  columns c;                     // the caller's arrays, GPU and stream
  bool on_gpu = false;           // the job's keys and outputs are c's device arrays
  void* stream = nullptr;        // tandem's own stream on c.device: copies and scatters after the call
  std::uint64_t pcie_bytes = 0;  // once on the host: bytes copied down and to be copied up
  // Page-locked host copies once on the host (null where none).
  void* keys = nullptr;
  void* values = nullptr;
  void* values_out = nullptr;
  void* found_out = nullptr;
  void* keys_out = nullptr;
  device_io() = default;
  device_io(const device_io&) = delete;
  device_io& operator=(const device_io&) = delete;
  ~device_io();
};

/// Whether job `j`'s keys and outputs are still the caller's arrays in GPU
/// memory (never to be read or written on the host).
inline bool keys_on_gpu(const job& j) noexcept { return j.device && j.device->on_gpu; }

/// Queues `c` (checked as host columns are; c.device >= 0): its arrays
/// checked to be GPU c.device's memory, and the work queued on c.stream
/// before the call waited for. With `keep_on_gpu` (gets, and the index
/// routes from leaf copies on that GPU) the job reads the keys where they
/// are; otherwise they are copied down at once (`to_host`). The answers are
/// in the caller's arrays before the future is ready. `enqueue` queues the
/// job (index::impl::enqueue).
/// @throws std::invalid_argument naming an array that is not that GPU's
///         memory; tandem::error without the CUDA layer or that GPU;
///         tandem::cuda_error when a copy fails
std::future<void> submit_from_device(const columns& c, bool keep_on_gpu,
                                     const std::function<void(std::unique_ptr<job>)>& enqueue);

/// Moves job `j` of device columns to page-locked host copies of its
/// inputs, with host room for its outputs, copied up when it finishes
/// (nothing for a job already on the host).
/// @throws tandem::cuda_error when the copy fails; std::bad_alloc
void to_host(job& j);

/// Writes the answers of the `m` ops a route left to the leaf phase (batch
/// positions, values, flags) into the caller's device arrays of `j`, whose
/// keys stayed on the GPU; the copies' answers are there already.
/// @return the bytes that went up (the outputs the caller asked for, with
///         their positions)
std::size_t scatter_misses(const job& j, const std::uint32_t* positions, const value_type* values,
                    const std::uint8_t* found, std::size_t m);

}  // namespace tandem
