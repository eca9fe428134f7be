#pragma once
// reader_gate: reads answered on the threads that ask for them, any number
// side by side, never beside a write, and each after every write submitted
// before it (index_impl.hpp, run_on_caller and the point reads).
//
// Readers register in a slot of their own (a cache line per slot, picked by
// thread), so 16 threads reading at once share no written line: the only
// lines they all read (the write count and flag) change once per write.
// The dispatcher raises `writing` before anything that changes leaves,
// leaf table or layout and waits until every slot is empty; a reader that
// registers and then sees the flag leaves again (the two sides are ordered
// by sequentially consistent operations, Dekker's pattern, as in a
// big-reader lock). Writes are counted when submitted and when done, in
// queue order; a read waits until as many are done as were submitted when
// it was asked, which holds exactly the writes whose submit returned before.
//
// One-key writes on their callers (index_impl.hpp, write_on_caller) enter
// as readers too (no write of the queue runs beside them), and count
// themselves as writers of their slot: they run beside one-key reads and
// each other, never beside a batch that reads on a thread of its own (a
// batch answered on its caller or directly, a snapshot being written:
// `begin_batch_read`), so that such a batch sees each of them wholly or
// not at all. A batch reader raises `batch_readers_` and waits until no
// slot counts a writer; a writer that registers and then sees a batch
// reader leaves again (Dekker's pattern once more). Until the first
// writer comes (`writers_`: none, coming, seen), batch readers count
// themselves in their own slot instead (`plain`), writing no line they
// share, and one-key reads read leaves as they are; no writer enters
// before every slot has been seen with no such reader in. From then on
// one-key reads validate what they read (host/shared_leaf.hpp).
#include <tandem/batch.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

namespace tandem::scheduler {

class reader_gate {
 public:
  /// Slots readers register in (threads beyond it share them).
  static constexpr std::size_t slot_count = 64;  // at most 64: quiet_slots_ has a bit a slot

  /// One slot: its readers and what they answered (for stats), on a line of
  /// their own.
  struct alignas(128) slot {
    /// Readers in (the low 32 bits), and above them the one-key reads done
    /// (index::get, contains, lower_bound), counted by the same operation
    /// that lets the reader out (`leave(s, true)`).
    std::atomic<std::uint64_t> readers{0};
    std::atomic<std::uint32_t> waiting{0};  // readers in `enter` waiting for a write
    std::atomic<std::uint32_t> writers{0};  // one-key writes under way (counted in `readers` too)
    std::atomic<std::uint32_t> plain{0};  // batch readers of this slot that count on no writer (none came yet)
    std::atomic<std::uint64_t> point_writes{0};  // one-key writes applied on their callers
    std::atomic<std::uint32_t> callers{0};  // index::impl::enqueue calls under way
    std::atomic<std::uint64_t> batches{0};  // batches answered on their callers
    std::array<std::atomic<std::uint64_t>, op_type_count> ops{};  // ops of those batches, by type
  };

  /// The slot of the calling thread.
  [[nodiscard]] slot& mine() noexcept {
    static std::atomic<std::size_t> threads{0};
    thread_local const std::size_t at = threads.fetch_add(1, std::memory_order_relaxed) % slot_count;
    return slots_[at];
  }
  /// The position of slot `s` (below slot_count).
  [[nodiscard]] std::size_t at(const slot& s) const noexcept { return static_cast<std::size_t>(&s - slots_.data()); }

  // ---- readers -----------------------------------------------------------------

  /// A write is about to enter the queue (before it can be taken up).
  void write_submitted() noexcept { submitted_.fetch_add(1); }
  /// What a read asked for now must wait for: the writes submitted so far.
  [[nodiscard]] std::uint64_t ticket() const noexcept { return submitted_.load(); }

  /// Registers a reader in `s` when no write runs and the writes of
  /// `ticket` are done. @return whether it did (then `leave` follows).
  bool try_enter(slot& s, std::uint64_t ticket) noexcept {
    s.readers.fetch_add(1);
    if (!writing_.load() && done_.load() >= ticket) return true;
    leave(s);
    return false;
  }
  /// Registers a reader in `s`, waiting for the writes of `ticket` and for
  /// a running write: a brief spin, then asleep until the dispatcher wakes
  /// it. @return false, registering nothing, once `close` has begun.
  ///
  /// With `plain` (a one-key read): *plain says whether the reader may
  /// read leaves as they are, no one-key writer having come (looked at
  /// once it is registered, so that the first writer's wait for the slots
  /// to be quiet covers it), or must validate what it reads
  /// (host/shared_leaf.hpp).
  bool enter(slot& s, std::uint64_t ticket, bool* plain = nullptr) {
    s.readers.fetch_add(1);
    if (!writing_.load() && done_.load() >= ticket) {
      if (plain != nullptr) *plain = writers_.load() == none;
      return true;
    }
    if (plain != nullptr) *plain = false;  // after a wait, it validates
    // Counted as waiting before it leaves, so that wait_for_readers (the
    // index's destructor) never misses it.
    s.waiting.fetch_add(1);
    leave(s);
    bool in = false;
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
    while (!closed_.load() && std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
      if (may_enter(ticket) && try_enter(s, ticket)) {
        in = true;
        break;
      }
    }
    while (!in && !closed_.load()) {
      {
        sleepers_.fetch_add(1);
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return closed_.load() || may_enter(ticket); });
        sleepers_.fetch_sub(1);
      }
      in = !closed_.load() && try_enter(s, ticket);
    }
    s.waiting.fetch_sub(1, std::memory_order_release);
    return in;
  }
  /// Registers a one-key write on its caller in `s` when no write of the
  /// queue runs, no batch reads on a thread of its own, and the writes of
  /// `ticket` are done. @return whether it did (then `leave_writer`).
  bool try_enter_writer(slot& s, std::uint64_t ticket) noexcept {
    if (writers_.load() != seen && !first_writer()) return false;
    s.readers.fetch_add(1);
    s.writers.fetch_add(1);
    if (!writing_.load() && batch_readers_.load() == 0 && done_.load() >= ticket) return true;
    leave_writer(s, false);
    return false;
  }
  /// Lets the writer of `s` out; `wrote` counts it as a one-key write.
  void leave_writer(slot& s, bool wrote) noexcept {
    if (wrote) s.point_writes.fetch_add(1, std::memory_order_relaxed);
    s.writers.fetch_sub(1, std::memory_order_release);
    leave(s);
  }
  /// A batch that reads on a thread of its own, beside readers: from here
  /// until `end_batch_read` (given what this returns) no one-key write
  /// enters; returns once those in have left.
  [[nodiscard]] slot* begin_batch_read() noexcept {
    if (writers_.load() == none) {  // counted in its own slot: no writer enters until it leaves
      slot& s = mine();
      s.plain.fetch_add(1);
      if (writers_.load() == none) return &s;
      s.plain.fetch_sub(1, std::memory_order_release);
    }
    batch_readers_.fetch_add(1);
    for (slot& s : slots_) {
      while (s.writers.load() != 0) std::this_thread::yield();
    }
    return nullptr;
  }
  void end_batch_read(slot* counted) noexcept {
    (counted != nullptr ? counted->plain : batch_readers_).fetch_sub(1, std::memory_order_release);
  }

  /// Lets the reader of `s` out; `point_read` counts it as a one-key read.
  void leave(slot& s, bool point_read = false) noexcept {
    s.readers.fetch_add(point_read ? done_read - 1 : ~std::uint64_t{0}, std::memory_order_release);
  }
  /// One-key reads done in `s`.
  [[nodiscard]] static std::uint64_t point_reads(const slot& s) noexcept { return s.readers.load() >> 32; }

  /// The sequence number of a read that entered now: that of the batch
  /// after the last write done (it sees every write numbered below it).
  [[nodiscard]] std::uint64_t sequence() const noexcept { return sequence_.load(std::memory_order_acquire); }

  // ---- the dispatcher ------------------------------------------------------------

  /// From here until end_write no reader enters; returns once the readers
  /// that entered before have left.
  void begin_write() noexcept {
    writing_.store(true);
    for (slot& s : slots_) {
      while (in(s) != 0) std::this_thread::yield();
    }
  }
  void end_write() {
    writing_.store(false);
    wake_sleepers();
  }
  /// `count` writes of the queue are done (in queue order), and the next
  /// batch is numbered `next_sequence`.
  void writes_done(std::uint64_t count, std::uint64_t next_sequence) {
    sequence_.store(next_sequence, std::memory_order_release);
    if (count == 0) return;
    done_.fetch_add(count);
    wake_sleepers();
  }

  /// No reader enters from now on (enter returns false); returns once the
  /// readers in and those waiting have gone. The index's destructor.
  void close() {
    closed_.store(true);
    writing_.store(true);
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
    wait_for_readers();
  }
  /// Waits until no slot has a reader in or waiting (a reader that comes
  /// later must find it refused: the index's destructor sets closing first).
  void wait_for_readers() const noexcept {
    for (const slot& s : slots_) {
      while (in(s) != 0 || s.waiting.load() != 0) std::this_thread::yield();
    }
  }

  /// Waits until no slot counts an enqueue call under way (the index's
  /// destructor, once it has refused new ones).
  void wait_for_callers() const noexcept {
    for (const slot& s : slots_) {
      while (s.callers.load() != 0) std::this_thread::yield();
    }
  }

  template <class F>
  void for_each_slot(F&& f) const {
    for (const slot& s : slots_) f(s);
  }

 private:
  /// slot::readers: one reader done (high half) and out (low half).
  static constexpr std::uint64_t done_read = std::uint64_t{1} << 32;
  [[nodiscard]] static std::uint64_t in(const slot& s) noexcept { return s.readers.load() & (done_read - 1); }
  /// How long a reader spins for a write ahead of it before it sleeps.
  static constexpr int spin_us = 50;
  [[nodiscard]] bool may_enter(std::uint64_t ticket) const noexcept {
    return !writing_.load() && done_.load() >= ticket;
  }
  void wake_sleepers() {
    if (sleepers_.load() == 0) return;
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }

  alignas(128) std::atomic<std::uint64_t> submitted_{0};  // written by each write's submit
  alignas(128) std::atomic<bool> writing_{false};         // written by the dispatcher
  std::atomic<std::uint64_t> done_{0};
  std::atomic<std::uint64_t> sequence_{0};
  std::atomic<bool> closed_{false};
  /// The first one-key writes: from `none` to `coming`, in which no
  /// reader that registers counts on no writer, then, once every slot has
  /// been seen with no reader in (so none of those that came before), and
  /// none counted in `plain`, `seen`. @return whether writers may enter
  /// (false: a slot was busy; a later call looks again, without waiting:
  /// a snapshot being written may take a while).
  bool first_writer() noexcept {
    std::uint32_t expected = none;
    writers_.compare_exchange_strong(expected, coming);
    if (expected == seen) return true;
    std::uint64_t quiet = quiet_slots_.load();
    for (std::size_t i = 0; i < slot_count; ++i) {
      if (quiet >> i & 1) continue;
      const slot& s = slots_[i];
      if (in(s) != 0 || s.plain.load() != 0) return false;
      quiet = quiet_slots_.fetch_or(std::uint64_t{1} << i) | std::uint64_t{1} << i;
    }
    writers_.store(seen);
    return true;
  }
  static constexpr std::uint32_t none = 0, coming = 1, seen = 2;

  alignas(128) std::atomic<std::uint32_t> batch_readers_{0};  // written by each batch reader once writers came
  std::atomic<std::uint32_t> writers_{none};                  // none, coming, seen: written by the first writers
  std::atomic<std::uint64_t> quiet_slots_{0};  // coming: the slots seen with no reader in (bit i: slot i)
  alignas(128) std::atomic<int> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::array<slot, slot_count> slots_;
};

}  // namespace tandem::scheduler
