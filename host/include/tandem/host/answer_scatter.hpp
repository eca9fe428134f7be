#pragma once
/// @file
/// Answers back to batch order (DESIGN, "One batch", step 5), on the host.
///
/// Takes the leaf phase's answers in routed order and the routed positions;
/// gives the result's columns in batch order. `scatter_answers` is the host
/// form of the scatter (the GPU form is device::gpu_router::scatter);
/// `write_lower_bound_keys` writes what only lower_bound ops have (the leaf
/// phase writes scan entries in batch order itself). Both run on the
/// calling thread's TBB arena and wait.

#include <tandem/batch_result.hpp>
#include <tandem/core/routed_batch.hpp>
#include <tandem/core/types.hpp>
#include <tandem/host/leaf_phase.hpp>

#include <cstddef>
#include <cstdint>

namespace tandem::host {

/// @brief values_out[positions[i]] = values[i], found_out[positions[i]] =
///        found[i] for i < n (parallel).
void scatter_answers(const std::uint32_t* positions, const value_type* values, const std::uint8_t* found,
                     std::size_t n, value_type* values_out, std::uint8_t* found_out);

/// @brief After `run_leaf_phase(…, in, …, ws)`: writes the lower_bound keys
///        (from in.routes->keys at their routed index) into `result_keys`.
/// @return bytes written.
std::size_t write_lower_bound_keys(const leaf_phase_workspace& ws, const leaf_phase_input& in,
                                   key_type* result_keys);

}  // namespace tandem::host
