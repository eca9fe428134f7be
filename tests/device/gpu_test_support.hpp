#pragma once
// Shared by the gpu_router tests: the GPU-skip macro, host arrays that are
// pinned or pageable on request, batches with edge-key patterns, and the
// checker of a routed_batch_view against the host descent (core's
// descend(), the same TANDEM_HD routine the kernels run).

#include <tandem/core/inner_layout.hpp>
#include <tandem/core/routed_batch.hpp>
#include <tandem/device/device_query.hpp>
#include <tandem/device/gpu_router.hpp>
#include <tandem/device/pinned.hpp>

#include "support/keys.hpp"
#include "support/tables.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#define TANDEM_REQUIRE_GPU()                                                      \
  do {                                                                            \
    const ::tandem::device::device_report tandem_report_ = ::tandem::device::query_devices(); \
    if (tandem_report_.devices.empty()) {                                         \
      GTEST_SKIP() << "no usable GPU: " << tandem_report_.reason;                 \
    }                                                                             \
  } while (0)

namespace tandem::test {

inline const char* name(device::aggregation a) {
  switch (a) {
    case device::aggregation::partial: return "partial";
    case device::aggregation::full: return "full";
    case device::aggregation::none: return "none";
  }
  return "?";
}

/// n elements of host memory: pinned (allocate_pinned) or pageable, filled
/// with `fill` bytes so that an element the router never wrote shows.
template <class T>
class host_array {
 public:
  host_array(std::size_t n, bool pinned, unsigned char fill = 0xab) : n_(n), pinned_(pinned) {
    const std::size_t bytes = std::max<std::size_t>(n, 1) * sizeof(T);
    data_ = static_cast<T*>(pinned ? device::allocate_pinned(bytes) : ::operator new(bytes));
    std::memset(static_cast<void*>(data_), fill, bytes);
  }
  ~host_array() {
    if (pinned_) {
      device::free_pinned(data_);
    } else {
      ::operator delete(data_);
    }
  }
  host_array(const host_array&) = delete;
  host_array& operator=(const host_array&) = delete;

  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  T* data_ = nullptr;
  std::size_t n_ = 0;
  bool pinned_ = false;
};

/// A batch in batch order: keys, args, types.
struct gpu_batch {
  std::vector<key_type> keys;
  std::vector<value_type> args;
  std::vector<std::uint8_t> types;
};

enum class pattern { uniform, clustered, all_equal, edges, separators };

inline const char* name(pattern p) {
  switch (p) {
    case pattern::uniform: return "uniform";
    case pattern::clustered: return "clustered";
    case pattern::all_equal: return "all_equal";
    case pattern::edges: return "edges";
    case pattern::separators: return "separators";
  }
  return "?";
}

/// n keys of a pattern; every pattern but all_equal includes 0 and
/// UINT64_MAX often; all_equal repeats 0, UINT64_MAX or a random key;
/// `separators` hits leaf low keys and their neighbours. Args are random,
/// types in 0..7.
inline gpu_batch make_batch(pattern p, std::size_t n, std::uint64_t seed, const table& t) {
  gpu_batch b;
  b.keys.resize(n);
  b.args.resize(n);
  b.types.resize(n);
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < n; ++i) {
    b.args[i] = rng();
    b.types[i] = static_cast<std::uint8_t>(rng() & 7u);
  }
  switch (p) {
    case pattern::all_equal: {
      const key_type k = seed % 3 == 0 ? max_key : seed % 3 == 1 ? min_key : rng();
      std::fill(b.keys.begin(), b.keys.end(), k);
      return b;
    }
    case pattern::separators:
      for (key_type& k : b.keys) {
        const key_type s = t.low_keys[rng() % t.low_keys.size()];
        const int d = static_cast<int>(rng() % 3) - 1;
        k = d < 0 ? (s == min_key ? s : s - 1) : d > 0 ? (s == max_key ? s : s + 1) : s;
      }
      return b;
    default: break;
  }
  const key_pattern kp = p == pattern::uniform     ? key_pattern::uniform
                         : p == pattern::clustered ? key_pattern::clustered
                                                   : key_pattern::edges;
  key_source source(kp, std::max<std::size_t>(n, 16), seed);
  for (key_type& k : b.keys) k = source();
  return b;
}

/// The caller-side arrays of a route, pinned or pageable.
struct routed_arrays {
  routed_arrays(std::size_t n, bool pinned, bool with_args, bool with_types)
      : positions(n, pinned),
        keys(n, pinned),
        args(with_args ? n : 0, pinned),
        types(with_types ? n : 0, pinned),
        group_begin(n + 1, pinned),
        group_ordinal(n, pinned),
        with_args_(with_args),
        with_types_(with_types) {}

  routed_batch_view view() {
    routed_batch_view v;
    v.positions = positions.data();
    v.keys = keys.data();
    v.args = with_args_ ? args.data() : nullptr;
    v.types = with_types_ ? types.data() : nullptr;
    v.group_begin = group_begin.data();
    v.group_ordinal = group_ordinal.data();
    v.groups = 0xdead;  // the router must set both
    v.key_sorted = false;
    return v;
  }

  host_array<std::uint32_t> positions;
  host_array<key_type> keys;
  host_array<value_type> args;
  host_array<std::uint8_t> types;
  host_array<std::uint32_t> group_begin;
  host_array<std::uint32_t> group_ordinal;

 private:
  bool with_args_;
  bool with_types_;
};

/// Checks `v` (a route of batch `b`, n = b.keys.size()) against the host:
/// groups are the runs of ordinal, non-empty, ordinals strictly increasing
/// and each the ordinal layout.find() gives for every key in the group;
/// every position once; keys, args, types are those of the op at the
/// position; (key, position) increases inside a group when key_sorted,
/// positions increase otherwise; key_sorted == (order == full).
inline void expect_routed(const routed_batch_view& v, const gpu_batch& b, const inner_layout& layout,
                          device::aggregation order) {
  const std::size_t n = b.keys.size();
  ASSERT_EQ(v.key_sorted, order == device::aggregation::full);
  if (n == 0) {
    ASSERT_EQ(v.groups, 0u);
    ASSERT_EQ(v.group_begin[0], 0u);
    return;
  }
  const std::size_t g_count = v.groups;
  ASSERT_GE(g_count, 1u);
  ASSERT_LE(g_count, n);
  ASSERT_LE(g_count, layout.leaf_count());
  ASSERT_EQ(v.group_begin[0], 0u);
  ASSERT_EQ(v.group_begin[g_count], n);
  std::vector<char> seen(n, 0);
  for (std::size_t g = 0; g < g_count; ++g) {
    const std::uint32_t begin = v.group_begin[g];
    const std::uint32_t end = v.group_begin[g + 1];
    ASSERT_LT(begin, end) << "group " << g << " is empty";
    ASSERT_LT(v.group_ordinal[g], layout.leaf_count()) << "group " << g;
    if (g > 0) {
      ASSERT_LT(v.group_ordinal[g - 1], v.group_ordinal[g]) << "group ordinals not increasing at " << g;
    }
    for (std::uint32_t i = begin; i < end; ++i) {
      const std::uint32_t p = v.positions[i];
      ASSERT_LT(p, n) << "entry " << i;
      ASSERT_EQ(seen[p], 0) << "position " << p << " twice";
      seen[p] = 1;
      ASSERT_EQ(v.keys[i], b.keys[p]) << "entry " << i << " position " << p;
      if (v.args != nullptr) {
        ASSERT_EQ(v.args[i], b.args[p]) << "entry " << i << " position " << p;
      }
      if (v.types != nullptr) {
        ASSERT_EQ(v.types[i], b.types[p]) << "entry " << i << " position " << p;
      }
      ASSERT_EQ(v.group_ordinal[g], layout.find(b.keys[p])) << "op " << p << " key " << b.keys[p];
      if (i > begin) {
        const std::uint32_t q = v.positions[i - 1];
        if (v.key_sorted) {
          ASSERT_TRUE(v.keys[i - 1] < v.keys[i] || (v.keys[i - 1] == v.keys[i] && q < p))
              << "(key, position) not increasing at entry " << i;
        } else {
          ASSERT_LT(q, p) << "positions not increasing in group " << g;
        }
      }
    }
  }
}

/// Routes `b` into fresh arrays (pinned or pageable outputs; args/types
/// asked for or not) and checks the result.
inline void route_and_check(device::gpu_router& router, const gpu_batch& b, const inner_layout& layout,
                            device::aggregation order, bool pinned_out = false, bool with_args = true,
                            bool with_types = true, device::route_timing* timing = nullptr) {
  const std::size_t n = b.keys.size();
  routed_arrays out(n, pinned_out, with_args, with_types);
  routed_batch_view v = out.view();
  router.route(b.keys.data(), with_args ? b.args.data() : nullptr, with_types ? b.types.data() : nullptr, n, v,
               timing);
  ASSERT_NO_FATAL_FAILURE(expect_routed(v, b, layout, order));
}

}  // namespace tandem::test
