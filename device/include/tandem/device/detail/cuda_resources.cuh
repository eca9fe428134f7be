#pragma once
/// @file
/// Owning wrappers for the CUDA resources of gpu_router (private): grow-only
/// device and pinned host arrays, streams, events, a grow-only event pool for
/// stage timings, the pinned-memory test and the fault-injection gate. Used
/// by the threads that call upload, route and scatter; each wrapper belongs
/// to one of them.

#include <tandem/device/detail/cuda_check.cuh>
#include <tandem/device/gpu_router.hpp>

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace tandem::device::detail {

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// ceil(log2(x)) for x >= 1 (0 for x == 1).
inline int ceil_log2(std::uint64_t x) {
  int bits = 0;
  while (bits < 64 && (std::uint64_t{1} << bits) < x) ++bits;
  return bits;
}

/// Device memory held by one router: every device_array counts its bytes
/// into the account current on the thread that allocated it.
struct memory_account {
  std::atomic<std::size_t> device_bytes{0};
};

/// The account device_array allocations of this thread count into (null: none).
inline memory_account*& current_account() noexcept {
  thread_local memory_account* account = nullptr;
  return account;
}

/// Makes `a` the thread's current account for the scope's lifetime.
class account_scope {
 public:
  explicit account_scope(memory_account& a) noexcept : saved_(current_account()) { current_account() = &a; }
  ~account_scope() { current_account() = saved_; }
  account_scope(const account_scope&) = delete;
  account_scope& operator=(const account_scope&) = delete;

 private:
  memory_account* saved_;
};

/// Device array that only grows; contents are lost when it grows. Grow only
/// while nothing in flight uses it (cudaFree of the old block). Its bytes
/// count into the thread's current account at allocation.
template <class T>
class device_array {
 public:
  device_array() = default;
  ~device_array() { release(); }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;

  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

  /// Room for n elements; when it must grow, takes n + n * headroom_percent / 100.
  /// @return true when it (re)allocated.
  bool reserve(std::size_t n, std::size_t headroom_percent = 0) {
    if (n <= capacity_) return false;
    release();
    const std::size_t want = n + n / 100 * headroom_percent;
    TANDEM_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&data_), want * sizeof(T)));
    capacity_ = want;
    account_ = current_account();
    if (account_ != nullptr) account_->device_bytes += want * sizeof(T);
    return true;
  }
  void swap(device_array& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(capacity_, o.capacity_);
    std::swap(account_, o.account_);
  }
  void release() noexcept {
    if (data_ != nullptr) (void)cudaFree(data_);
    if (account_ != nullptr) account_->device_bytes -= capacity_ * sizeof(T);
    data_ = nullptr;
    capacity_ = 0;
    account_ = nullptr;
  }

 private:
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
  memory_account* account_ = nullptr;
};

/// Page-locked host array that only grows (staging: always really pinned,
/// unlike device::allocate_pinned, which falls back to ordinary memory;
/// portable, like it: pinned for every device's context).
template <class T>
class pinned_buffer {
 public:
  pinned_buffer() = default;
  ~pinned_buffer() { release(); }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  [[nodiscard]] T* data() const noexcept { return data_; }
  void reserve(std::size_t n) {
    if (n <= capacity_) return;
    release();
    TANDEM_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&data_), n * sizeof(T), cudaHostAllocPortable));
    capacity_ = n;
  }
  void release() noexcept {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
    data_ = nullptr;
    capacity_ = 0;
  }

 private:
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
};

class stream_handle {
 public:
  stream_handle() { TANDEM_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~stream_handle() { (void)cudaStreamDestroy(stream_); }
  stream_handle(const stream_handle&) = delete;
  stream_handle& operator=(const stream_handle&) = delete;
  [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class event_handle {
 public:
  explicit event_handle(bool timing = false) {
    TANDEM_CUDA_TRY(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~event_handle() { (void)cudaEventDestroy(event_); }
  event_handle(const event_handle&) = delete;
  event_handle& operator=(const event_handle&) = delete;
  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

/// Timing events handed out in order during one call (`reset` at its
/// start). Grows when a call needs more than any before; otherwise a call
/// creates nothing.
class event_pool {
 public:
  void reset() noexcept { next_ = 0; }
  /// Records the next event on `stream` and returns its index.
  std::size_t record(cudaStream_t stream) {
    if (next_ == events_.size()) events_.push_back(std::make_unique<event_handle>(true));
    const std::size_t k = next_++;
    TANDEM_CUDA_TRY(cudaEventRecord(events_[k]->get(), stream));
    return k;
  }
  /// Seconds between two recorded events (both must have completed).
  [[nodiscard]] double seconds(std::size_t from, std::size_t to) const {
    float ms = 0;
    TANDEM_CUDA_TRY(cudaEventElapsedTime(&ms, events_[from]->get(), events_[to]->get()));
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  std::vector<std::unique_ptr<event_handle>> events_;
  std::size_t next_ = 0;
};

/// @return where `p` lies (cudaMemoryTypeUnregistered for pageable host
///         memory, memory CUDA does not know, or null) and, in `device`
///         when given, the GPU of device or managed memory.
inline cudaMemoryType memory_type(const void* p, int* device = nullptr) {
  cudaPointerAttributes attributes{};
  if (p == nullptr || cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaMemoryTypeUnregistered;
  }
  if (device != nullptr) *device = attributes.device;
  return attributes.type;
}

/// @return true when `p` is device (or managed) memory: copies of it cross
///         no PCIe link (route_timing's bytes leave it out).
inline bool in_gpu_memory(const void* p) {
  const cudaMemoryType t = memory_type(p);
  return t == cudaMemoryTypeDevice || t == cudaMemoryTypeManaged;
}

/// @return true when the GPU can copy `p` directly: page-locked or
///         registered host memory, or device (or managed) memory, which a
///         copy of kind cudaMemcpyDefault reaches where it lies (so caller
///         arrays in GPU memory are used in place, never staged).
inline bool dma_ready(const void* p) { return memory_type(p) == cudaMemoryTypeHost || in_gpu_memory(p); }

/// Checks each stage's injected faults at most once per call.
class fault_gate {
 public:
  explicit fault_gate(std::array<std::atomic<int>, stage_count>& faults) : faults_(faults) {}
  cudaError_t reach(stage s) {
    const auto i = static_cast<std::size_t>(s);
    if (reached_[i]) return cudaSuccess;
    reached_[i] = true;
    int armed = faults_[i].load();
    while (armed > 0) {
      if (faults_[i].compare_exchange_weak(armed, armed - 1)) return cudaErrorLaunchFailure;
    }
    return cudaSuccess;
  }

 private:
  std::array<std::atomic<int>, stage_count>& faults_;
  std::array<bool, stage_count> reached_{};
};

/// The injected error goes through TANDEM_CUDA_TRY like a real one, whose
/// message then names this call (tests look for "injected_fault_at").
inline cudaError_t injected_fault_at(fault_gate& gate, stage s) { return gate.reach(s); }

}  // namespace tandem::device::detail
