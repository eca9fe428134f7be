#pragma once
// The write batches of the crash test (tests/api/durability_test.cpp): the
// writer process (tests/api/crash_writer.cpp) runs them, and the test
// rebuilds the same ones to model what the writer was acknowledged. Batch
// `i` of generation `g` depends only on (seed, g, i).

#include <tandem/tandem.hpp>

#include <cstdint>
#include <random>

namespace tandem::test {

/// Keys of the crash batches: a narrow range, so that writes meet earlier
/// ones and leaves split and merge, plus the edge keys 0 and UINT64_MAX.
inline key_type crash_key(std::mt19937_64& rng) {
  const std::uint64_t d = rng() % 64;
  if (d == 0) return min_key;
  if (d == 1) return max_key;
  return rng() % 6000;
}

/// Mostly small batches (written on the dispatcher), some of thousands of
/// ops (written on the logger thread while the next batch runs); puts,
/// inserts and erases with some gets and lower_bounds.
inline batch crash_batch(std::uint64_t seed, std::uint64_t generation, std::uint64_t i) {
  std::mt19937_64 rng(seed * 1'000'003 + generation * 7'919 + i);
  const std::size_t n = rng() % 8 == 0 ? 1000 + rng() % 6000 : 1 + rng() % 60;
  batch b;
  b.reserve(n);
  for (std::size_t k = 0; k < n; ++k) {
    const key_type key = crash_key(rng);
    switch (rng() % 10) {
      case 0: case 1: case 2: case 3: b.put(key, rng()); break;
      case 4: case 5: b.insert(key, rng()); break;
      case 6: case 7: b.erase(key); break;
      case 8: b.get(key); break;
      default: b.lower_bound(key); break;
    }
  }
  return b;
}

/// Batches the writer keeps in flight at once.
inline constexpr std::size_t crash_in_flight = 8;

/// The one-key mode: threads of the writer each calling index::put,
/// insert and erase on keys of their own, one call at a time.
inline constexpr std::uint64_t crash_point_threads = 4;

/// Call `i` of thread `t` in generation `g`: a put to one of 16 keys, an
/// insert of a new key, the erase of that key, an insert kept (each thread
/// keys of its own, above 2^40).
struct point_call {
  op_type type;
  key_type key;
  value_type value;
};
inline point_call crash_point_call(std::uint64_t t, std::uint64_t g, std::uint64_t i) {
  const key_type base = (t + 1) << 40;
  const value_type value = (g << 32) | i;
  switch (i % 4) {
    case 0: return {op_type::put, base | (i / 4 % 16), value};
    case 1: return {op_type::insert, base | std::uint64_t{1} << 30 | g << 20 | i, value};
    case 2: return {op_type::erase, base | std::uint64_t{1} << 30 | g << 20 | (i - 1), 0};
    default: return {op_type::insert, base | std::uint64_t{1} << 31 | g << 20 | i, value};
  }
}

}  // namespace tandem::test
