#pragma once
/// @file
/// The "GPU sorted array" baseline of tandem-bench: what a user with a GPU
/// and a read-only key set would write instead of an index. The loaded pairs
/// are copied to the GPU and sorted by key there (thrust::sort_by_key: a
/// sorted key array and a parallel value array, both GPU-resident). Each
/// batch of get ops is then answered by thrust::lower_bound, vectorized over
/// the batch's keys, plus one gather kernel that turns a position into an
/// answer (found when the key at the position equals the query; value from
/// the value array), so it is a real map lookup.
///
/// Transfers are included: per batch, the query keys go host->device from a
/// pinned host buffer and the answers (8-byte value + 1-byte found flag per
/// query) come back device->host into pinned host buffers. Batches alternate
/// between two CUDA streams with their own device buffers, so the copies of
/// one batch overlap the search of the next. The queries are staged into the
/// pinned buffer before timing (as the other systems' batches are generated
/// before timing); the timed region runs from the first upload to the last
/// download. One untimed warm-up batch loads the kernels first.
///
/// It answers gets only: tandem-bench runs it for workload C alone.
/// Built only when the CUDA layer is (TANDEM_HAS_CUDA); otherwise a stub
/// says so.

#include "baselines.hpp"

#include <tandem/batch.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tandem_bench {

/// Name used in tables and CSV rows.
inline constexpr const char* gpu_array_name = "gpu-array";

struct gpu_array_figures {
  double load_seconds = 0;  ///< pageable H2D of keys and values + thrust::sort_by_key
  run_figures run;          ///< the timed batches
  std::string device;       ///< the GPU it ran on
  std::string description;  ///< one line for the table's legend
};

/// Called after the timed run, once per batch, with the batch's answers in op
/// order (for --verify): found flags and values.
using gpu_array_check =
    std::function<void(std::size_t batch_no, const std::uint8_t* found, const tandem::value_type* values, std::size_t n)>;

/// @return whether this build has the CUDA baseline (false: the stub).
[[nodiscard]] bool gpu_array_built() noexcept;

/// @brief Loads `n` distinct pairs onto the GPU and answers every batch.
/// @param batches get ops only (std::invalid_argument otherwise)
/// @param check   optional, see gpu_array_check
/// @param queries_on_gpu every batch's queries and answers in GPU memory
///        (--keys-on gpu: a GPU pipeline's arrays, uploaded before timing,
///        answers brought down after it): the timed run moves nothing over
///        PCIe
/// @throws std::runtime_error on a CUDA error (message names the call), or
///         when built without CUDA
[[nodiscard]] gpu_array_figures run_gpu_array(const tandem::key_type* keys, const tandem::value_type* values,
                                              std::size_t n, const std::vector<std::vector<tandem::op>>& batches,
                                              const gpu_array_check& check, bool queries_on_gpu = false);

}  // namespace tandem_bench
