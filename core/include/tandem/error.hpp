#pragma once
/// @file
/// tandem's exception types. All derive from standard exceptions, so callers
/// that catch `std::exception` see every failure.
///
/// - `tandem::error` (std::runtime_error): a failure while running, such as
///   an allocation that cannot be made or a device that cannot be used.
/// - `tandem::invariant_error` (std::logic_error): a `verify()` found a broken
///   structural invariant; the message names the structure and the invariant.
/// - `tandem::cuda_error` (tandem::error): a CUDA runtime call failed; it
///   carries the call, the place and the CUDA error code.

#include <stdexcept>
#include <string>

namespace tandem {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class invariant_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

class cuda_error : public error {
 public:
  /// @param call   the CUDA call as written, e.g. "cudaMalloc(&p, n)"
  /// @param file   source file of the call
  /// @param line   source line of the call
  /// @param code   the cudaError_t value
  /// @param reason the CUDA runtime's description of `code`
  cuda_error(const std::string& call, const char* file, int line, int code, const std::string& reason)
      : error(call + " failed at " + file + ":" + std::to_string(line) + ": " + reason + " (CUDA error " +
              std::to_string(code) + ")"),
        code_(code) {}

  /// @return the cudaError_t value of the failed call.
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

}  // namespace tandem
