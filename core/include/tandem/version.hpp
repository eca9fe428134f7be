#pragma once
/// @file
/// Version and build facts of the linked tandem library.

namespace tandem {

/// @return the library version, "major.minor.patch".
[[nodiscard]] const char* version() noexcept;

/// @return true when the library was built with the CUDA device layer. A
/// build with CUDA still runs on machines without a GPU (on the CPU alone).
[[nodiscard]] bool built_with_cuda() noexcept;

}  // namespace tandem
