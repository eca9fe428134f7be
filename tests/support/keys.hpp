#pragma once
// Key generators shared by the tests: every pattern includes the edge keys 0
// and UINT64_MAX, and draws from few enough distinct keys that repeats are
// common.

#include <tandem/core/types.hpp>

#include <cstdint>
#include <ostream>
#include <random>
#include <vector>

namespace tandem::test {

enum class key_pattern { uniform, narrow, clustered, edges };

inline const char* name(key_pattern p) {
  switch (p) {
    case key_pattern::uniform: return "uniform";
    case key_pattern::narrow: return "narrow";
    case key_pattern::clustered: return "clustered";
    case key_pattern::edges: return "edges";
  }
  return "?";
}

// Readable parameter names in gtest and ctest output.
inline void PrintTo(key_pattern p, std::ostream* os) { *os << name(p); }

/// Draws keys of one pattern from a pool of about `distinct` keys.
class key_source {
 public:
  key_source(key_pattern pattern, std::size_t distinct, std::uint64_t seed) : rng_(seed) {
    std::uniform_int_distribution<key_type> any;
    pool_ = {min_key, max_key, 1, max_key - 1};
    while (pool_.size() < distinct) {
      switch (pattern) {
        case key_pattern::uniform: pool_.push_back(any(rng_)); break;
        case key_pattern::narrow: pool_.push_back(any(rng_) % (distinct * 2)); break;
        case key_pattern::clustered: {
          const key_type base = (any(rng_) % 8) << 60;
          pool_.push_back(base + any(rng_) % (distinct * 4));
          break;
        }
        case key_pattern::edges:
          pool_.push_back(any(rng_) % 2 ? any(rng_) % 64 : max_key - any(rng_) % 64);
          break;
      }
    }
  }

  key_type operator()() { return pool_[std::uniform_int_distribution<std::size_t>(0, pool_.size() - 1)(rng_)]; }
  std::mt19937_64& rng() { return rng_; }
  /// `n` pairs: a drawn key, then a random value, each.
  std::vector<entry> pairs(std::size_t n) {
    std::vector<entry> out(n);
    for (auto& e : out) {
      const key_type k = (*this)();
      e = {k, rng_()};
    }
    return out;
  }

 private:
  std::mt19937_64 rng_;
  std::vector<key_type> pool_;
};

}  // namespace tandem::test
