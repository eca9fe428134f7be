#pragma once
/// @file
/// Which GPU a thread's CUDA calls go to. The CUDA runtime keeps one current
/// device per host thread (cudaSetDevice), and streams, events, device
/// memory and kernel launches belong to the device current when they are
/// made or used. An index on GPU n makes n current on every thread it owns
/// (the dispatcher, the look-ahead, GPU side and scatter threads), and
/// where it borrows a caller's thread (construction, destruction) it puts
/// the caller's device back afterwards. Page-locked host memory is
/// allocated portable (device/pinned.hpp), so it counts as pinned for every
/// device whichever was current when it was allocated.
///
/// Without the CUDA layer both do nothing.

namespace tandem::device {

/// @brief Makes `ordinal` the calling thread's current device. Waits for
///        the device's context to be initialised the first time.
/// @throws tandem::cuda_error when cudaSetDevice fails (no such device)
void make_current(int ordinal);

/// @return the calling thread's current device (cudaGetDevice: 0 on a
///         thread that never chose one), or -1 without the CUDA layer or a
///         driver.
[[nodiscard]] int current() noexcept;

/// Makes a device current on the calling thread for its lifetime, then puts
/// back the device that was current before (cudaGetDevice at construction).
class device_scope {
 public:
  /// @throws tandem::cuda_error when cudaSetDevice fails
  explicit device_scope(int ordinal);
  ~device_scope();
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  [[maybe_unused]] int previous_ = -1;  ///< -1: nothing to put back (unused without the CUDA layer)
};

}  // namespace tandem::device
