// tandem-bench --shards' client (bench/src/shard_cut.hpp): equal key ranges
// and the range a key belongs to (as np.searchsorted finds it), a batch cut
// by range into parts that keep batch order, and answers put back at their
// batch positions, over sizes 0, 1, around the cut's chunk and larger,
// checked against a plain loop; the pinned arrays it cuts into
// (bench/src/pinned_vector.hpp).
#include "bench/src/pinned_vector.hpp"
#include "bench/src/shard_cut.hpp"

#include <tandem/device/device_query.hpp>

#include <gtest/gtest.h>

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

using tandem::key_type;
using tandem::op_type;
using tandem::value_type;
using tandem_bench::cut_by_range;
using tandem_bench::equal_ranges;
using tandem_bench::page_locked;
using tandem_bench::pinned_allocator;
using tandem_bench::pinned_vector;
using tandem_bench::put_back;
using tandem_bench::shard_cut;
using tandem_bench::shard_of;

__extension__ using u128 = unsigned __int128;

constexpr key_type max_key = std::numeric_limits<key_type>::max();

TEST(ShardCut, EqualRangesSplitTheKeySpaceEvenly) {
  EXPECT_EQ(equal_ranges(1), (std::vector<key_type>{0}));
  EXPECT_EQ(equal_ranges(2), (std::vector<key_type>{0, key_type{1} << 63}));
  EXPECT_EQ(equal_ranges(4), (std::vector<key_type>{0, key_type{1} << 62, key_type{1} << 63, key_type{3} << 62}));
  std::mt19937_64 rng(7);
  for (std::size_t n : {1u, 2u, 3u, 5u, 7u, 16u, 255u}) {
    SCOPED_TRACE(n);
    const std::vector<key_type> lows = equal_ranges(n);
    ASSERT_EQ(lows.size(), n);
    EXPECT_EQ(lows[0], 0u);
    EXPECT_TRUE(std::is_sorted(lows.begin(), lows.end()));
    EXPECT_EQ(shard_of(lows, 0), 0u);
    EXPECT_EQ(shard_of(lows, max_key), n - 1);
    for (std::size_t i = 1; i < n; ++i) {
      EXPECT_EQ(shard_of(lows, lows[i]), i);
      EXPECT_EQ(shard_of(lows, lows[i] - 1), i - 1);
    }
    // Range i is the keys k with floor(k * n / 2^64) = i.
    for (int t = 0; t < 1000; ++t) {
      const key_type k = rng();
      EXPECT_EQ(shard_of(lows, k), static_cast<std::size_t>((static_cast<u128>(k) * n) >> 64)) << k;
    }
  }
}

TEST(ShardCut, KeyGoesToTheLastRangeStartingAtOrBelowIt) {
  // Uneven bounds, one range empty (two equal lows): np.searchsorted(lows,
  // key, side='right') - 1.
  const std::vector<key_type> lows{0, 100, 100, key_type{1} << 40};
  EXPECT_EQ(shard_of(lows, 0), 0u);
  EXPECT_EQ(shard_of(lows, 99), 0u);
  EXPECT_EQ(shard_of(lows, 100), 2u);
  EXPECT_EQ(shard_of(lows, (key_type{1} << 40) - 1), 2u);
  EXPECT_EQ(shard_of(lows, key_type{1} << 40), 3u);
  EXPECT_EQ(shard_of(lows, max_key), 3u);
}

/// Cuts a random batch of n ops (edge keys included) over `lows`, checks
/// the parts against the input, then puts made-up answers back.
void check_cut(const std::vector<key_type>& lows, std::size_t n, std::uint64_t seed, bool pinned = true) {
  SCOPED_TRACE(::testing::Message() << "shards " << lows.size() << " n " << n << " seed " << seed << " pinned "
                                    << pinned);
  std::mt19937_64 rng(seed);
  std::vector<key_type> keys(n);
  std::vector<std::uint64_t> args(n);
  std::vector<op_type> types(n);
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned pick = rng() % 16;
    keys[i] = pick == 0 ? 0 : pick == 1 ? max_key : pick == 2 ? lows[rng() % lows.size()] : rng();
    args[i] = rng();
    types[i] = rng() % 2 ? op_type::get : op_type::put;
  }
  shard_cut cut(n + 5, lows.size(), true, pinned);
  EXPECT_EQ(cut.keys.get_allocator().pinned(), pinned);
  EXPECT_EQ(cut.positions.get_allocator().pinned(), pinned);
  cut_by_range(keys.data(), args.data(), types.data(), n, lows, cut);
  ASSERT_EQ(cut.shards(), lows.size());
  ASSERT_EQ(cut.begin.front(), 0u);
  ASSERT_EQ(cut.size(), n);
  std::vector<char> seen(n, 0);
  for (std::size_t s = 0; s < cut.shards(); ++s) {
    ASSERT_LE(cut.begin[s], cut.begin[s + 1]);
    std::size_t expected = 0;
    for (const key_type k : keys) expected += shard_of(lows, k) == s;
    EXPECT_EQ(cut.part_size(s), expected) << "shard " << s;
    for (std::size_t j = cut.begin[s]; j < cut.begin[s + 1]; ++j) {
      const std::uint32_t p = cut.positions[j];
      ASSERT_LT(p, n);
      ASSERT_FALSE(seen[p]) << "position " << p << " twice";
      seen[p] = 1;
      if (j > cut.begin[s]) {
        EXPECT_LT(cut.positions[j - 1], p) << "shard " << s << " out of batch order";
      }
      EXPECT_EQ(cut.keys[j], keys[p]);
      EXPECT_EQ(cut.args[j], args[p]);
      EXPECT_EQ(cut.types[j], types[p]);
      EXPECT_EQ(shard_of(lows, cut.keys[j]), s);
    }
  }
  // Answers made up from the keys, in part order, back to batch order.
  std::vector<value_type> values(n);
  std::vector<std::uint8_t> found(n);
  for (std::size_t j = 0; j < n; ++j) {
    values[j] = cut.keys[j] * 3 + 1;
    found[j] = static_cast<std::uint8_t>(cut.keys[j] & 1);
  }
  std::vector<value_type> values_out(n, 0);
  std::vector<std::uint8_t> found_out(n, 2);
  std::uint64_t hits = 0;
  for (std::size_t s = 0; s < cut.shards(); ++s) {
    hits += put_back(cut, s, values.data() + cut.begin[s], found.data() + cut.begin[s], values_out.data(),
                     found_out.data());
  }
  std::uint64_t want_hits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(values_out[i], keys[i] * 3 + 1) << "op " << i;
    EXPECT_EQ(found_out[i], keys[i] & 1) << "op " << i;
    want_hits += keys[i] & 1;
  }
  EXPECT_EQ(hits, want_hits);
}

TEST(ShardCut, PartsKeepBatchOrderAndAnswersComeBackInPlace) {
  constexpr std::size_t chunk = std::size_t{1} << 16;  // shard_cut.cpp's chunk
  std::mt19937_64 rng(2024);
  for (std::size_t shards : {1u, 2u, 3u, 8u}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, chunk - 1, chunk, chunk + 1, 3 * chunk + 17}) {
      check_cut(equal_ranges(shards), n, rng());
    }
    check_cut(equal_ranges(shards), rng() % 400'000, rng());
  }
  check_cut({0, 100, 100, key_type{1} << 40}, 5000, rng());
  // In ordinary memory (as the load's cut) it cuts the same.
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, 3 * chunk + 17}) check_cut(equal_ranges(3), n, rng(), false);
}

TEST(ShardCut, KeysAloneAreCutWithoutArgs) {
  const std::vector<key_type> lows = equal_ranges(2);
  const std::vector<key_type> keys{max_key, 0, key_type{1} << 63, 5, (key_type{1} << 63) - 1};
  shard_cut cut(keys.size(), 2, false);
  cut_by_range(keys.data(), nullptr, nullptr, keys.size(), lows, cut);
  EXPECT_EQ(cut.begin, (std::vector<std::size_t>{0, 3, 5}));
  EXPECT_EQ(std::vector<key_type>(cut.keys.begin(), cut.keys.begin() + 5),
            (std::vector<key_type>{0, 5, (key_type{1} << 63) - 1, max_key, key_type{1} << 63}));
  EXPECT_EQ(std::vector<std::uint32_t>(cut.positions.begin(), cut.positions.begin() + 5),
            (std::vector<std::uint32_t>{1, 3, 4, 0, 2}));
  // A cut without room for args refuses them; more ops than its room too.
  const std::vector<std::uint64_t> args(keys.size(), 1);
  EXPECT_THROW(cut_by_range(keys.data(), args.data(), nullptr, keys.size(), lows, cut), std::invalid_argument);
  const std::vector<key_type> more(keys.size() + 1, 0);
  EXPECT_THROW(cut_by_range(more.data(), nullptr, nullptr, more.size(), lows, cut), std::invalid_argument);
}

TEST(ShardCut, PinnedVectorIsAVectorOfAlignedZeroedMemory) {
  static_assert(std::is_same_v<decltype(shard_cut::keys), pinned_vector<key_type>>);
  static_assert(std::is_same_v<decltype(shard_cut::types), pinned_vector<op_type>>);
  for (const bool pinned : {true, false}) {
    SCOPED_TRACE(pinned);
    pinned_vector<std::uint64_t> v(1000, pinned_allocator<std::uint64_t>(pinned));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % 64, 0u);
    EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](std::uint64_t x) { return x == 0; }));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = i * 7;
    v.resize(100'000);  // moves to a new block of the same kind
    EXPECT_EQ(v.get_allocator().pinned(), pinned);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % 64, 0u);
    for (std::size_t i = 0; i < 1000; ++i) ASSERT_EQ(v[i], i * 7);
    EXPECT_EQ(v[99'999], 0u);
    pinned_vector<std::uint64_t> moved = std::move(v);  // the kind travels with the block
    EXPECT_EQ(moved.get_allocator().pinned(), pinned);
    pinned_vector<std::uint8_t> empty(pinned_allocator<std::uint8_t>{moved.get_allocator()});
    EXPECT_EQ(empty.get_allocator().pinned(), pinned);
    EXPECT_EQ(empty.data(), nullptr);
  }
  EXPECT_TRUE(pinned_allocator<int>() == pinned_allocator<char>(true));
  EXPECT_TRUE(pinned_allocator<int>(false) != pinned_allocator<int>(true));
}

// What an index on a GPU checks before copying a caller's array directly
// (cudaPointerGetAttributes): a pinned_vector passes, the cut's arrays too,
// ordinary memory does not.
TEST(ShardCut, GpuTakesPinnedVectorsForPinned) {
  const tandem::device::device_report report = tandem::device::query_devices();
  if (report.devices.empty()) GTEST_SKIP() << "no usable GPU: " << report.reason;
  const pinned_vector<key_type> keys(1 << 16);
  EXPECT_TRUE(page_locked(keys.data()));
  const shard_cut cut(1 << 16, 2, true);
  EXPECT_TRUE(page_locked(cut.keys.data()));
  EXPECT_TRUE(page_locked(cut.types.data()));
  const shard_cut ordinary(1 << 16, 2, true, false);
  EXPECT_FALSE(page_locked(ordinary.keys.data()));
  const std::vector<key_type> pageable(1 << 16);
  EXPECT_FALSE(page_locked(pageable.data()));
}

}  // namespace
