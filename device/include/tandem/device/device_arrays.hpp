#pragma once
/// @file
/// The caller's arrays in GPU memory (index::submit of `columns` with
/// `device` set): checks that a pointer is memory of the named GPU, and
/// copies between it and host memory ordered after the caller's stream.
/// The stream travels as `void*` (a cudaStream_t; null: the legacy default
/// stream), so that no CUDA type reaches the public headers. Without the
/// CUDA layer every function throws tandem::error saying so.

#include <cstddef>
#include <cstdint>

namespace tandem::device {

/// @brief Checks that [p, p + bytes) is memory of GPU `ordinal` (device or
///        managed memory), aligned to `align` bytes.
/// @throws std::invalid_argument naming `what` (the argument) when it is
///         host memory, another GPU's, unknown to CUDA, or misaligned;
///         tandem::error without the CUDA layer or when GPU `ordinal` is
///         not usable
void check_device_array(const void* p, std::size_t bytes, std::size_t align, int ordinal, const char* what);

/// @brief Copies `bytes` from GPU memory to host memory once the work
///        queued on `stream` before the call is done, and waits.
/// @throws tandem::cuda_error when a CUDA call fails
void copy_from_device(void* host, const void* dev, std::size_t bytes, int ordinal, void* stream);

/// @brief Copies `bytes` from host memory to GPU memory on `stream`, and
///        waits until the copy is done.
/// @throws tandem::cuda_error when a CUDA call fails
void copy_to_device(void* dev, const void* host, std::size_t bytes, int ordinal, void* stream);

/// @brief A stream of GPU `ordinal` that does not wait for the legacy
///        default stream (cudaStreamNonBlocking), for work of tandem's own.
/// @throws tandem::cuda_error when it cannot be made
[[nodiscard]] void* create_stream(int ordinal);
/// @brief Destroys a stream from create_stream (nullptr is fine).
void destroy_stream(void* stream, int ordinal) noexcept;

/// @brief Waits until the work queued on `stream` (of GPU `ordinal`) is done.
/// @throws tandem::cuda_error when it failed
void synchronize(int ordinal, void* stream);

/// @return the GPU whose device (or managed) memory `p` is, or -1 (host
///         memory, memory CUDA does not know, no CUDA layer).
[[nodiscard]] int device_of(const void* p) noexcept;

/// @brief Writes `m` answers given in host memory into the caller's arrays
///        in GPU memory: values_out[positions[i]] = values[i] and
///        found_out[positions[i]] = found[i] (either output may be null),
///        on `stream`, and waits. The answers go up once, a kernel puts
///        them in place.
/// @throws tandem::cuda_error when a CUDA call fails
void scatter_into_device(std::uint64_t* values_out, std::uint8_t* found_out, const std::uint32_t* positions,
                         const std::uint64_t* values, const std::uint8_t* found, std::size_t m, int ordinal,
                         void* stream);

/// @brief Flips `n` flags (0 and 1) in GPU memory, on `stream`, and waits.
/// @throws tandem::cuda_error when a CUDA call fails
void invert_flags(std::uint8_t* flags, std::size_t n, int ordinal, void* stream);

/// @brief `bytes` of memory of GPU `ordinal` (cudaMalloc), for tests and
///        tools that hand the index device columns.
/// @throws tandem::cuda_error when it cannot be had; tandem::error without
///         the CUDA layer
[[nodiscard]] void* allocate_device(std::size_t bytes, int ordinal);
/// @brief Frees memory from allocate_device (nullptr is fine).
void free_device(void* p, int ordinal) noexcept;

}  // namespace tandem::device
