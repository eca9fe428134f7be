#pragma once
/// @file
/// A one-line summary of how this tandem was built and what it can run on
/// here: version, CUDA layer, visible GPUs, host threads.

#include <string>

namespace tandem::scheduler {

/// @return e.g. "tandem 0.1.0, CUDA layer: yes, 1 GPU: NVIDIA H200 (sm_90,
///         139.8 GiB), 16 host threads". Queries the CUDA runtime once.
[[nodiscard]] std::string build_info();

}  // namespace tandem::scheduler
