#pragma once
// A long-lived thread that runs one task at a time for the dispatcher: the
// look-ahead route of the next batch, the GPU side of a split route, a GPU
// scatter or a batch's redo log record.
// Started once with the index, so no thread is created per batch. `start`
// hands it a task, `wait` waits for it and rethrows what it threw. An
// optional first step runs on the thread before any task (the index makes
// its GPU current there: cudaSetDevice is per thread); it must not throw.

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace tandem::scheduler {

class worker_thread {
 public:
  worker_thread() : thread_([this] { loop(); }) {}
  explicit worker_thread(std::function<void()> first)
      : thread_([this, f = std::move(first)] {
          if (f) f();
          loop();
        }) {}
  ~worker_thread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  worker_thread(const worker_thread&) = delete;
  worker_thread& operator=(const worker_thread&) = delete;

  /// @brief Runs `task` on the thread. Requires: no task running.
  void start(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = std::move(task);
      busy_ = true;
      error_ = nullptr;
    }
    wake_.notify_all();
  }

  /// @return whether no task runs (`wait` would return at once).
  [[nodiscard]] bool idle() {
    std::lock_guard<std::mutex> lock(mutex_);
    return !busy_;
  }

  /// @brief Waits for the task; rethrows its exception.
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return !busy_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || task_; });
      if (!task_) return;  // stopping with nothing to do
      std::function<void()> task = std::move(task_);
      task_ = nullptr;
      lock.unlock();
      std::exception_ptr error;
      try {
        task();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      error_ = error;
      busy_ = false;
      done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::function<void()> task_;
  std::exception_ptr error_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tandem::scheduler
