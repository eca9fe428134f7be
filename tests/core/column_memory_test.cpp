// Column memory (core/column_memory.hpp): large batch and result columns
// come from a process-wide cache of blocks, reused batch after batch, from a
// replaceable source.
#include <tandem/batch.hpp>
#include <tandem/core/column_memory.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

namespace {

using tandem::detail::column_source;

// A source that counts its blocks and can be told to refuse.
std::atomic<int> given{0};
std::atomic<int> taken_back{0};
std::atomic<bool> refuse{false};
void* counting_allocate(std::size_t bytes) noexcept {
  if (refuse.load()) return nullptr;
  ++given;
  return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
}
void counting_release(void* block, std::size_t) noexcept {
  ++taken_back;
  std::free(block);
}
const column_source counting{&counting_allocate, &counting_release};

// Installs the counting source for one test and puts the previous one back.
class ColumnMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    given = 0;
    taken_back = 0;
    refuse = false;
    previous_ = tandem::detail::use_column_source(&counting);
  }
  void TearDown() override { tandem::detail::use_column_source(previous_); }

 private:
  const column_source* previous_ = nullptr;
};

TEST_F(ColumnMemoryTest, FreedBlocksAreReusedBySizeClass) {
  constexpr std::size_t bytes = (std::size_t{3} << 20) + 12345;
  void* a = tandem::detail::allocate_column(bytes);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 64, 0u);
  std::memset(a, 0xab, bytes);  // the whole request is usable
  EXPECT_EQ(given.load(), 1);
  const auto before = tandem::detail::column_cache();
  tandem::detail::release_column(a, bytes);
  EXPECT_EQ(tandem::detail::column_cache().free_blocks, before.free_blocks + 1);
  // The same size class (3.5 MiB: a quarter of 2^21 above 3 MiB) is served
  // from the cache; a size of another class is not.
  void* b = tandem::detail::allocate_column(std::size_t{3} << 20 | 1);
  EXPECT_EQ(b, a);
  EXPECT_EQ(given.load(), 1);
  EXPECT_EQ(tandem::detail::column_cache().reused, before.reused + 1);
  void* c = tandem::detail::allocate_column(std::size_t{5} << 20);
  EXPECT_NE(c, a);
  EXPECT_EQ(given.load(), 2);
  tandem::detail::release_column(b, bytes);
  tandem::detail::release_column(c, std::size_t{5} << 20);
  EXPECT_EQ(taken_back.load(), 0);  // both cached
}

TEST_F(ColumnMemoryTest, AnotherSourceFreesTheCachedBlocks) {
  void* a = tandem::detail::allocate_column(std::size_t{2} << 20);
  void* b = tandem::detail::allocate_column(std::size_t{2} << 20);
  tandem::detail::release_column(a, std::size_t{2} << 20);
  EXPECT_EQ(given.load(), 2);
  EXPECT_EQ(taken_back.load(), 0);
  // Switching to ordinary memory frees the cached block; the block still in
  // use goes back to its own source when released.
  EXPECT_EQ(tandem::detail::use_column_source(nullptr), &counting);
  EXPECT_EQ(taken_back.load(), 1);
  tandem::detail::release_column(b, std::size_t{2} << 20);
  EXPECT_EQ(taken_back.load(), 2);
  void* d = tandem::detail::allocate_column(std::size_t{2} << 20);  // ordinary memory now
  EXPECT_EQ(given.load(), 2);
  tandem::detail::release_column(d, std::size_t{2} << 20);
}

TEST_F(ColumnMemoryTest, ASourceThatRefusesFallsBackToOrdinaryMemory) {
  refuse = true;
  constexpr std::size_t bytes = std::size_t{7} << 20;
  void* a = tandem::detail::allocate_column(bytes);
  ASSERT_NE(a, nullptr);
  std::memset(a, 1, bytes);
  EXPECT_EQ(given.load(), 0);
  tandem::detail::release_column(a, bytes);  // not cached as the counting source's
  EXPECT_EQ(taken_back.load(), 0);
  refuse = false;
  void* b = tandem::detail::allocate_column(bytes);
  EXPECT_EQ(given.load(), 1);
  tandem::detail::release_column(b, bytes);
}

TEST_F(ColumnMemoryTest, BatchColumnsComeFromTheCacheAndKeepTheirContents) {
  constexpr std::size_t n = std::size_t{1} << 18;  // 2 MiB of keys and args
  std::vector<std::uint64_t> keys(n), values(n);
  std::iota(keys.begin(), keys.end(), std::uint64_t{0} - n / 2);  // wraps through UINT64_MAX and 0
  std::iota(values.begin(), values.end(), std::uint64_t{7});
  const auto before = tandem::detail::column_cache();
  for (int round = 0; round < 4; ++round) {
    tandem::batch b;
    b.put(keys.data(), values.data(), n);
    b.get(std::uint64_t{42});
    ASSERT_EQ(b.size(), n + 1);
    for (std::size_t i = 0; i < n; i += 4099) {
      EXPECT_EQ(b.keys()[i], keys[i]);
      EXPECT_EQ(b.args()[i], values[i]);
      EXPECT_EQ(b.types()[i], tandem::op_type::put);
    }
    EXPECT_EQ(b.keys()[n], 42u);
    tandem::batch moved = std::move(b);
    EXPECT_EQ(moved.keys()[n - 1], keys[n - 1]);
  }
  // Each round frees its blocks; later rounds reuse them.
  const auto after = tandem::detail::column_cache();
  EXPECT_GE(after.reused - before.reused, 3u);
  EXPECT_LE(given.load(), 8);
}

TEST_F(ColumnMemoryTest, ManyThreadsAllocateAndRelease) {
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([t, &wrong] {
      for (int i = 0; i < 200; ++i) {
        const std::size_t bytes = (std::size_t{1} << 20) + static_cast<std::size_t>((t * 7 + i) % 5) * (std::size_t{1} << 19);
        auto* p = static_cast<unsigned char*>(tandem::detail::allocate_column(bytes));
        p[0] = static_cast<unsigned char>(t);
        p[bytes - 1] = static_cast<unsigned char>(i);
        if (p[0] != static_cast<unsigned char>(t) || p[bytes - 1] != static_cast<unsigned char>(i)) ++wrong;
        tandem::detail::release_column(p, bytes);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  // At most one block per thread and size class was ever live at once.
  EXPECT_LE(given.load(), 8 * 5);
}

}  // namespace
