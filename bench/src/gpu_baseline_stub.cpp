// The GPU sorted array baseline in a build without the CUDA layer.
#include "gpu_baseline.hpp"

#include <stdexcept>

namespace tandem_bench {

bool gpu_array_built() noexcept { return false; }

gpu_array_figures run_gpu_array(const tandem::key_type*, const tandem::value_type*, std::size_t,
                                const std::vector<std::vector<tandem::op>>&, const gpu_array_check&, bool) {
  throw std::runtime_error("GPU sorted array: not built (no CUDA)");
}

}  // namespace tandem_bench
