// An index's start and end (index_impl.hpp): the constructor checks the
// config, opens the GPU, sizes the arena and starts the threads the index
// owns; the destructor refuses new jobs, lets the dispatcher drain the queue
// and leaves every answered batch's redo log record durable. Also the jobs
// a caller queues and waits for (loads, barriers) and the GPU share.
#include "index_impl.hpp"

#include <tandem/device/current_device.hpp>
#include <tandem/device/pinned.hpp>

#include <oneapi/tbb/info.h>

#include <cmath>
#include <optional>
#include <stdexcept>

namespace tandem {

index::impl::impl(const config& cfg) : cfg_(cfg), queue_(128) {
  cfg_.validate();
  open_gpu();
  open_cache();
  // The GPU's calls below (the first upload) run on the caller's thread:
  // its own current device comes back when the constructor returns.
  std::optional<device::device_scope> caller_device;
  if (gpu_) caller_device.emplace(gpu_->device_ordinal());
  memory_ = gpu_ ? scheduler::memory_kind::pinned : scheduler::memory_kind::ordinary;
  // From now on large batch columns are pinned: the GPU reads a batch's
  // keys (args, types) where the caller built them.
  if (gpu_) tandem::detail::use_column_source(device::pinned_column_source());
  for (route_space& s : spaces_) s.set_kind(memory_);
  guides_.set_kind(memory_);
  compact_guides_.set_kind(memory_);
  answers_ = std::make_shared<scheduler::answer_pool>(memory_);
  auto_share_.store(cfg_.gpu_share < 0);
  fixed_share_.store(cfg_.gpu_share < 0 ? 0.0 : cfg_.gpu_share);
  const int threads = cfg_.threads ? static_cast<int>(cfg_.threads) : tbb::info::default_concurrency();
  // Two slots for application threads: the dispatcher (leaf phase) and the
  // look-ahead thread (validate and route of the next batch) both join the
  // arena at once, so the look-ahead never waits for the leaf phase's tasks
  // to leave it a slot; threads - 1 workers serve both.
  arena_.initialize(threads + 1, 2);
  threads_ = static_cast<std::size_t>(threads);
  rebuild_table_from_store({});
  publish_stats(nullptr, false, 0);
  // The threads the index owns make its GPU current once (cudaSetDevice
  // is per thread): whatever CUDA call they make goes to that device.
  const auto on_gpu = [this] { use_gpu_device(); };
  lookahead_ = std::make_unique<scheduler::worker_thread>(on_gpu);
  if (gpu_) {
    gpu_side_ = std::make_unique<scheduler::worker_thread>(on_gpu);
    scatter_ = std::make_unique<scheduler::worker_thread>(on_gpu);
  }
  if (!cfg_.storage_dir.empty()) logger_ = std::make_unique<scheduler::worker_thread>();  // log_: recover()
  dispatcher_ = std::thread([this] {
    use_gpu_device();
    dispatch();
  });
  dispatcher_id_ = dispatcher_.get_id();  // before any job: the queue orders it before every callback
}

index::impl::~impl() {
  // Refuse new jobs, let enqueue calls under way finish (each one either
  // saw closing_ or is counted in its thread's slot: both are sequentially
  // consistent), then drain the queue.
  closing_.store(true);
  gate_.wait_for_callers();
  gate_.wait_for_readers();  // point reads under way (they look at closing_ once in)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  dispatcher_.join();
  gate_.close();  // point reads under way finish; later ones are refused
  if (saver_.joinable()) saver_.join();
  stop_syncer();
  // Every answered batch's record is in the OS; closing makes them durable
  // under every log_sync policy.
  if (log_ && !log_failed_.load()) {
    try {
      log_->sync();
    } catch (...) {  // a destructor cannot report it; log_sync::batch had synced them
    }
  }
}

void index::impl::load_and_wait(const load_input& in) {
  auto j = std::make_unique<job>();
  j->type = job::kind::load;
  j->pairs = in;
  std::future<void> done = j->finished.get_future();
  enqueue(std::move(j));
  done.get();
}

void index::impl::run_barrier(std::function<void()> work) {
  auto j = std::make_unique<job>();
  j->type = job::kind::barrier;
  j->barrier_work = std::move(work);
  std::future<void> done = j->finished.get_future();
  enqueue(std::move(j));
  done.get();
}

void index::impl::set_share(double share) {
  if (std::isnan(share) || share < 0.0 || share > 1.0) {
    throw std::invalid_argument("tandem::index::set_gpu_share: the share must be in [0, 1], got " +
                                std::to_string(share));
  }
  fixed_share_.store(share);
  auto_share_.store(false);
}

bool index::impl::inject_gpu_fault(device::stage s, int count) {
  if (!gpu_) return false;
  gpu_->inject_fault(s, count);
  return true;
}

}  // namespace tandem
