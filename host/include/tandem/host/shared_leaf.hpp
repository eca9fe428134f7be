#pragma once
/// @file
/// One-key ops on a leaf beside other threads' (the index's one-key writes
/// on their callers): `leaf_versions`, a version lock per leaf (striped),
/// and `shared_access`, the BPA operations that run under it.
///
/// Writers are exclusive per leaf: a writer holds the leaf's lock (its
/// version odd) and changes the BPA with atomic stores, in place, never its
/// shape: a value replaced, a key appended to a log with room, a key taken
/// out of the log or its block. Readers are optimistic: they read the
/// version (waiting while it is odd: for that one leaf's writer), load every
/// word they read atomically, bounding every index by the BPA's capacity so
/// that a torn read stays in range, then read the version again and retry
/// when it changed. Atomic words on both sides: no data race, so the
/// ThreadSanitizer preset checks the protocol as it is. Anything else that
/// changes leaves (a batch's leaf phase, splits, merges, loads) runs while
/// none of these do (the index's reader_gate).

#include <tandem/core/types.hpp>
#include <tandem/host/bpa.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>

namespace tandem::host {

/// Version locks of leaves, by leaf id over a fixed number of stripes (two
/// leaves of one stripe share a lock: their writers take turns).
class leaf_versions {
 public:
  static constexpr std::size_t stripes = 4096;

  leaf_versions() : v_(new stripe[stripes]) {}

  /// A reader's start: the leaf's version, once no writer holds it.
  [[nodiscard]] std::uint64_t read_begin(leaf_id id) const noexcept {
    const std::atomic<std::uint64_t>& v = of(id);
    for (;;) {
      const std::uint64_t seen = v.load(std::memory_order_acquire);
      if ((seen & 1) == 0) return seen;
      std::this_thread::yield();
    }
  }
  /// A reader's end: whether nothing it read of the leaf changed since
  /// read_begin returned `seen`.
  [[nodiscard]] bool read_valid(leaf_id id, std::uint64_t seen) const noexcept {
    return of(id).load(std::memory_order_acquire) == seen;  // after the reads (acquire loads: shared_access::ld)
  }
  void lock(leaf_id id) noexcept {
    std::atomic<std::uint64_t>& v = of(id);
    for (;;) {
      std::uint64_t seen = v.load(std::memory_order_relaxed);
      if ((seen & 1) == 0 && v.compare_exchange_weak(seen, seen + 1, std::memory_order_acquire)) break;
      std::this_thread::yield();
    }
  }
  void unlock(leaf_id id) noexcept { of(id).fetch_add(1, std::memory_order_release); }

 private:
  struct alignas(64) stripe {
    std::atomic<std::uint64_t> v{0};
  };
  [[nodiscard]] std::atomic<std::uint64_t>& of(leaf_id id) const noexcept {
    return v_[(std::uint64_t{id} * 0x9E3779B97F4A7C15ULL) >> 52].v;  // 4096 stripes, spread
  }
  std::unique_ptr<stripe[]> v_;
};

/// The BPA operations of leaf_versions' protocol (a friend of basic_bpa).
/// No fences (ThreadSanitizer does not model them): a reader's loads
/// acquire, so its second look at the version comes after them, and a
/// writer's stores release, so one that a reader sees brings the odd
/// version with it (plain moves on x86 both).
template <class Bpa>
struct shared_access {
  template <class T>
  static T ld(const T& x) noexcept {
    return __atomic_load_n(&x, __ATOMIC_ACQUIRE);
  }
  template <class T>
  static void st(T& x, T v) noexcept {
    __atomic_store_n(&x, v, __ATOMIC_RELEASE);
  }

  // ---- readers (any thread; validate the leaf's version after) ----

  /// The block whose bounds hold `key`: the last of the first `count` with
  /// header <= key (block 0 when none).
  static std::size_t block_of(const Bpa& a, key_type key) noexcept {
    const std::size_t count = std::clamp<std::size_t>(ld(a.block_count_), 1, Bpa::num_blocks);
    std::size_t lo = 0, hi = count;
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      (ld(a.header_[mid]) <= key ? lo : hi) = mid;
    }
    return lo;
  }

  /// `key`'s value: its block by a bisection of the header, then a
  /// bisection of the block (a scan when not sorted), then the log. (An
  /// interpolated window, as basic_bpa's lookups read, ran 0.77x absl
  /// against 0.83x for this on 2 clients of YCSB B, 2-core machine.)
  static std::optional<value_type> get(const Bpa& a, key_type key) noexcept {
    const std::size_t b = block_of(a, key);
    const std::size_t n = std::min<std::size_t>(ld(a.block_size_[b]), Bpa::block_capacity);
    const entry* es = a.blocks_[b];
    if (ld(a.sorted_mask_) >> b & 1) {
      std::size_t lo = 0, hi = n;  // first entry with key >= `key`
      while (lo < hi) {
        const std::size_t mid = (lo + hi) / 2;
        if (ld(es[mid].key) < key) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      if (lo < n && ld(es[lo].key) == key) return ld(es[lo].value);
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        if (ld(es[i].key) == key) return ld(es[i].value);
      }
    }
    return get_in_log(a, key);
  }
  static std::optional<value_type> get_in_log(const Bpa& a, key_type key) noexcept {
    const std::size_t logged = std::min<std::size_t>(ld(a.log_size_), Bpa::log_capacity);
    for (std::size_t i = 0; i < logged; ++i) {
      if (ld(a.log_keys_[i]) == key) return ld(a.log_values_[i]);
    }
    return std::nullopt;
  }

  /// The smallest entry with key >= `key` in this BPA, or none.
  static std::optional<entry> lower_bound(const Bpa& a, key_type key) noexcept {
    std::optional<entry> best;
    const std::size_t logged = std::min<std::size_t>(ld(a.log_size_), Bpa::log_capacity);
    for (std::size_t i = 0; i < logged; ++i) {
      const key_type k = ld(a.log_keys_[i]);
      if (k >= key && (!best || k < best->key)) best = entry{k, ld(a.log_values_[i])};
    }
    const std::size_t count = std::clamp<std::size_t>(ld(a.block_count_), 1, Bpa::num_blocks);
    for (std::size_t b = block_of(a, key); b < count; ++b) {
      const std::size_t n = std::min<std::size_t>(ld(a.block_size_[b]), Bpa::block_capacity);
      const entry* es = a.blocks_[b];
      std::optional<entry> here;
      for (std::size_t i = 0; i < n; ++i) {
        const key_type k = ld(es[i].key);
        if (k >= key && (!here || k < here->key)) here = entry{k, ld(es[i].value)};
      }
      if (here) {
        if (!best || here->key < best->key) best = here;
        break;  // later blocks hold only larger keys
      }
    }
    return best;
  }

  /// Keys with lo <= key <= hi in this BPA.
  static std::uint64_t count(const Bpa& a, key_type lo, key_type hi) noexcept {
    std::uint64_t total = 0;
    const std::size_t logged = std::min<std::size_t>(ld(a.log_size_), Bpa::log_capacity);
    for (std::size_t i = 0; i < logged; ++i) {
      const key_type k = ld(a.log_keys_[i]);
      total += lo <= k && k <= hi ? 1 : 0;
    }
    const std::size_t blocks = std::clamp<std::size_t>(ld(a.block_count_), 1, Bpa::num_blocks);
    for (std::size_t b = block_of(a, lo); b < blocks; ++b) {
      if (b > 0 && ld(a.header_[b]) > hi) break;
      const std::size_t n = std::min<std::size_t>(ld(a.block_size_[b]), Bpa::block_capacity);
      for (std::size_t i = 0; i < n; ++i) {
        const key_type k = ld(a.blocks_[b][i].key);
        total += lo <= k && k <= hi ? 1 : 0;
      }
    }
    return total;
  }

  // ---- writers (the leaf's lock held) ----

  /// Where `key` is (`found()` or not), and the value there.
  static typename Bpa::slot find(const Bpa& a, key_type key) noexcept { return a.find(key); }
  static value_type value_at(const Bpa& a, typename Bpa::slot s) noexcept { return *a.value_at(s); }
  /// Replaces the value at `s` (found). @return the value it had.
  static value_type put_at(Bpa& a, typename Bpa::slot s, value_type value) noexcept {
    return __atomic_exchange_n(a.value_at(s), value, __ATOMIC_ACQ_REL);
  }
  /// Appends `key` (absent) to the log when it has room and the BPA is
  /// not full. @return whether it did.
  static bool insert(Bpa& a, key_type key, value_type value) noexcept {
    const std::size_t n = a.log_size_;
    if (n >= Bpa::log_capacity || a.size_ >= Bpa::capacity) return false;
    st(a.log_keys_[n], key);
    st(a.log_values_[n], value);
    if (a.log_sorted_ && n > 0 && a.log_keys_[n - 1] > key) st(a.log_sorted_, false);
    st(a.log_size_, static_cast<decltype(a.log_size_)>(n + 1));
    st(a.size_, static_cast<decltype(a.size_)>(a.size_ + 1));
    return true;
  }
  /// Takes the key at `s` (found) out, as basic_bpa::erase_at does.
  static value_type erase_at(Bpa& a, typename Bpa::slot s) noexcept {
    value_type old = 0;
    if (s.block < 0) {
      const std::size_t i = static_cast<std::size_t>(s.index);
      const std::size_t last = a.log_size_ - 1u;
      old = a.log_values_[i];
      st(a.log_keys_[i], a.log_keys_[last]);
      st(a.log_values_[i], a.log_values_[last]);
      if (i != last) st(a.log_sorted_, false);
      st(a.log_size_, static_cast<decltype(a.log_size_)>(last));
    } else {
      const std::size_t b = static_cast<std::size_t>(s.block);
      const std::size_t i = static_cast<std::size_t>(s.index);
      const std::size_t n = a.block_size_[b];
      entry* es = a.blocks_[b];
      old = es[i].value;
      if (a.sorted_mask_ >> b & 1) {  // a shift keeps the block sorted
        for (std::size_t j = i; j + 1 < n; ++j) {
          st(es[j].key, es[j + 1].key);
          st(es[j].value, es[j + 1].value);
        }
      } else if (i + 1 < n) {
        st(es[i].key, es[n - 1].key);
        st(es[i].value, es[n - 1].value);
      }
      st(a.block_size_[b], static_cast<std::remove_reference_t<decltype(a.block_size_[b])>>(n - 1));
    }
    st(a.size_, static_cast<decltype(a.size_)>(a.size_ - 1));
    return old;
  }
};

}  // namespace tandem::host
