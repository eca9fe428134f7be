#pragma once
// Random mixed batches for the index tests: every op kind, keys from a
// key_source (edge keys included), short and long scans, occasional invalid
// ops (lo > hi, limit over max_scan_limit).

#include <tandem/tandem.hpp>

#include "support/keys.hpp"

#include <algorithm>
#include <cstdint>
#include <random>

namespace tandem::test {

struct batch_mix {
  unsigned get = 30, put = 20, insert = 10, erase = 15, lower_bound = 8, scan = 10, count = 5;
  unsigned invalid_per_mille = 5;  ///< share of range ops made invalid
};

inline batch random_batch(key_source& keys, std::size_t n, const batch_mix& mix = {}) {
  auto& rng = keys.rng();
  const unsigned total = mix.get + mix.put + mix.insert + mix.erase + mix.lower_bound + mix.scan + mix.count;
  batch b;
  b.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    unsigned d = static_cast<unsigned>(rng() % total);
    const key_type k = keys();
    const value_type v = rng();
    // Widths: mostly below 2^12, the rest log-uniform up to 2^64.
    auto range = [&](key_type& lo, key_type& hi) {
      lo = k;
      const key_type width = rng() >> (rng() % 5 ? 52 + rng() % 12 : rng() % 64);
      hi = lo > max_key - width ? max_key : lo + width;
      if (rng() % 1000 < mix.invalid_per_mille && lo != hi) std::swap(lo, hi);  // invalid on purpose
    };
    if (d < mix.get) { b.get(k); continue; }
    d -= mix.get;
    if (d < mix.put) { b.put(k, v); continue; }
    d -= mix.put;
    if (d < mix.insert) { b.insert(k, v); continue; }
    d -= mix.insert;
    if (d < mix.erase) { b.erase(k); continue; }
    d -= mix.erase;
    if (d < mix.lower_bound) { b.lower_bound(k); continue; }
    d -= mix.lower_bound;
    if (d < mix.scan) {
      key_type lo, hi;
      range(lo, hi);
      std::uint64_t limit = rng() % 4 == 0 ? rng() % 1000 : rng() % 20;
      if (rng() % 1000 < mix.invalid_per_mille) limit = max_scan_limit + 1 + rng() % 10;
      b.scan(lo, hi, limit, rng() % 3 == 0 ? scan_order::unordered : scan_order::ordered);
      continue;
    }
    key_type lo, hi;
    range(lo, hi);
    b.count(lo, hi);
  }
  return b;
}

/// Sizes spread log-uniformly over [1, max].
inline std::size_t random_batch_size(std::mt19937_64& rng, std::size_t max) {
  const double x = std::uniform_real_distribution<double>(0.0, std::log(static_cast<double>(max)))(rng);
  return std::max<std::size_t>(1, static_cast<std::size_t>(std::exp(x)));
}

}  // namespace tandem::test
