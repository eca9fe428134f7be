#pragma once
/// @file
/// What a BPA's ordered reads and runs of point ops take and give: entries
/// written to an output array (`put_entry`, optionally past the caches), and
/// key-sorted runs of point ops with their results, as records
/// (`record_run`) or as columns where they lie (`column_run`).

#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tandem::host {

/// @brief Writes entry{k, v} to *o. With Stream and a 16-byte aligned `o`,
///        by a non-temporal store: past the caches, without first reading
///        the line, for output too large to stay cached (then an sfence
///        must follow before other threads read it: stream_fence).
template <bool Stream>
inline void put_entry(entry* o, key_type k, value_type v) noexcept {
#if defined(__SSE2__)
  if constexpr (Stream) {
    if ((reinterpret_cast<std::uintptr_t>(o) & 15) == 0) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(o),
                       _mm_set_epi64x(static_cast<long long>(v), static_cast<long long>(k)));
      return;
    }
  }
#endif
  *o = entry{k, v};
}

/// @brief Copies n entries to `out`, the cache lines they fill whole by
///        non-temporal stores (not read first, not kept cached), the lines
///        they share with other output at either end by ordinary stores.
///        A stream_fence must follow, as for put_entry.
inline void copy_streaming(const entry* from, std::size_t n, entry* out) noexcept {
  constexpr std::size_t per_line = 64 / sizeof(entry);
  std::size_t i = 0;
  for (; i < n && (reinterpret_cast<std::uintptr_t>(out + i) & 63) != 0; ++i) out[i] = from[i];
  for (; i + per_line <= n; i += per_line) {
    for (std::size_t j = 0; j < per_line; ++j) put_entry<true>(out + i + j, from[i + j].key, from[i + j].value);
  }
  for (; i < n; ++i) out[i] = from[i];
}

/// Orders the non-temporal stores of put_entry before later stores.
inline void stream_fence() noexcept {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

/// The point operations a leaf applies in a run.
enum class op_kind : std::uint8_t { get, put, insert, erase };

/// One point operation of a key-sorted run.
struct point_op {
  key_type key;
  value_type value;  ///< for put and insert; ignored otherwise
  op_kind kind;
};

/// Result of one point operation: whether the key was present just before
/// the operation, and its value then (0 when absent). So a get reports the
/// value, a put the value it replaced, an insert that found the key the value
/// it kept (`found == false` means it inserted), an erase the value it erased.
struct point_result {
  bool found;
  value_type value;
};

/// Point ops answered at their route's hint, and those whose hint was
/// missing or stale (its block did not hold the key).
struct hint_counts {
  std::size_t hinted = 0;
  std::size_t stale = 0;
};

/// A key-sorted run of point ops and where their results go, as records:
/// `apply` reads the run through this interface, so that a run given as
/// columns (`column_run`) is applied where it lies, without a copy.
struct record_run {
  const point_op* ops;
  point_result* results;

  /// Keys lie `key_stride` keys apart from keys().
  static constexpr std::size_t key_stride = sizeof(point_op) / sizeof(key_type);
  static_assert(sizeof(point_op) % sizeof(key_type) == 0, "keys of consecutive records lie whole keys apart");
  [[nodiscard]] const key_type* keys() const noexcept { return &ops->key; }
  [[nodiscard]] key_type key(std::size_t i) const noexcept { return ops[i].key; }
  [[nodiscard]] value_type value(std::size_t i) const noexcept { return ops[i].value; }
  [[nodiscard]] op_kind kind(std::size_t i) const noexcept { return ops[i].kind; }
  void answer(std::size_t i, bool found, value_type value) const noexcept { results[i] = {found, value}; }
  [[nodiscard]] record_run advanced(std::size_t k) const noexcept { return {ops + k, results + k}; }
  /// Records carry no route hints.
  [[nodiscard]] bool hinted() const noexcept { return false; }
  [[nodiscard]] leaf_hint hint(std::size_t) const noexcept { return no_hint; }
  void count_hints(std::size_t, std::size_t) const noexcept {}
};

/// The same run as columns: op i is (keys[i], values[i], kinds[i]) (kinds:
/// the byte of an op_kind), its result goes to found[i] and results[i].
struct column_run {
  const key_type* keys_at;
  const value_type* values;
  const std::uint8_t* kinds;
  value_type* results;
  std::uint8_t* found;
  /// The route's hints (core/leaf_guide.hpp) of the run's ops, or null.
  const leaf_hint* hints = nullptr;
  /// Where `apply` counts how the ops' hints fared, or null.
  hint_counts* counts = nullptr;

  static constexpr std::size_t key_stride = 1;
  [[nodiscard]] const key_type* keys() const noexcept { return keys_at; }
  [[nodiscard]] key_type key(std::size_t i) const noexcept { return keys_at[i]; }
  [[nodiscard]] value_type value(std::size_t i) const noexcept { return values[i]; }
  [[nodiscard]] op_kind kind(std::size_t i) const noexcept { return static_cast<op_kind>(kinds[i]); }
  void answer(std::size_t i, bool f, value_type value) const noexcept {
    results[i] = value;
    found[i] = f;
  }
  [[nodiscard]] column_run advanced(std::size_t k) const noexcept {
    return {keys_at + k, values + k, kinds + k, results + k, found + k, hints ? hints + k : nullptr, counts};
  }
  [[nodiscard]] bool hinted() const noexcept { return hints != nullptr; }
  [[nodiscard]] leaf_hint hint(std::size_t i) const noexcept { return hints[i]; }
  void count_hints(std::size_t hinted, std::size_t stale) const noexcept {
    if (counts == nullptr) return;
    counts->hinted += hinted;
    counts->stale += stale;
  }
};

}  // namespace tandem::host
