// index::save and index::open: round trips over fanouts, fills and configs
// (a snapshot opens with any config), the empty and one-key indexes, the
// edge keys 0 and UINT64_MAX, a snapshot taken in the middle of a stream of
// batches (it holds exactly the state at its place in queue order, and
// reads and writes queued after it go on), and files that must be refused
// (missing, truncated, corrupted, foreign) with the index left as it was.
// The file format's own checks (every byte, every length) are in
// tests/host/snapshot_file_test.cpp; the fuzz preset fuzzes its reader.
#include <tandem/tandem.hpp>

#include "support/contents.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace tandem;
using test::as_entries;
using test::contents;
namespace fs = std::filesystem;

config with(int fanout, double fill, std::size_t threads) {
  config c;
  c.fanout = fanout;
  c.leaf_fill = fill;
  c.threads = threads;
  c.device = device_kind::cpu;
  return c;
}

TEST(Snapshot, RoundTripsOverFanoutsFillsAndConfigs) {
  test::temp_folder dir("snapshot-test");
  std::mt19937_64 rng(3);
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{1000}, std::size_t{70'000}}) {
    std::vector<entry> pairs;
    for (std::size_t i = 0; i < n; ++i) pairs.push_back({i < 2 ? (i == 0 ? min_key : max_key) : rng(), rng()});
    for (const int fanout : {16, 32, 64}) {
      SCOPED_TRACE(::testing::Message() << n << " pairs, fanout " << fanout);
      tandem::index saved(with(fanout, fanout == 16 ? 1.0 : 0.5, 2));
      saved.load(pairs);
      const std::string path = dir.file("s" + std::to_string(n) + "-" + std::to_string(fanout));
      saved.save(path);
      const std::vector<entry> expected = contents(saved);
      // Opened with the same config and with another one.
      for (const int other : {fanout, fanout == 64 ? 16 : 64}) {
        tandem::index opened(with(other, 0.75, 3));
        opened.open(path);
        EXPECT_EQ(opened.size(), expected.size());
        EXPECT_TRUE(contents(opened) == expected);
        EXPECT_NO_THROW(opened.verify());
      }
    }
  }
}

TEST(Snapshot, HoldsTheStateAtOnePlaceInQueueOrder) {
  // Batches stream in from the test thread while a save is queued among
  // them from another: the snapshot holds exactly the model's state after
  // some prefix of the batches (at least those that completed before the
  // save was called), and every batch answers as the model does.
  test::temp_folder dir("snapshot-test");
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    tandem::index idx(with(32, 0.75, 4));
    test::index_model model;
    std::mt19937_64 rng(seed);
    std::vector<entry> pairs;
    for (int i = 0; i < 50'000; ++i) pairs.push_back({rng() % 200'000, rng()});
    model.load(idx, pairs);
    auto random_batch = [&] {
      batch b;
      for (int i = 0; i < 5'000; ++i) {
        const key_type k = rng() % 200'000;
        switch (rng() % 5) {
          case 0: b.put(k, rng()); break;
          case 1: b.erase(k); break;
          case 2: b.insert(k, rng()); break;
          default: b.get(k); break;
        }
      }
      return b;
    };
    std::vector<std::pair<batch, std::future<batch_result>>> sent;
    for (int i = 0; i < 4; ++i) {
      batch b = random_batch();
      sent.emplace_back(b, idx.submit(b));
    }
    sent.back().second.wait();
    const std::string path = dir.file("mid" + std::to_string(seed));
    std::future<void> saved = std::async(std::launch::async, [&] { idx.save(path); });
    for (int i = 0; i < 8; ++i) {
      batch b = random_batch();
      sent.emplace_back(b, idx.submit(b));
    }
    std::vector<std::vector<entry>> states;  // after 4, 5, ..., 12 batches
    std::uint64_t last_sequence = 0;
    for (std::size_t i = 0; i < sent.size(); ++i) {
      const batch_result r = sent[i].second.get();
      last_sequence = r.sequence();
      ASSERT_EQ(model.check(sent[i].first, r), 0u) << "batch " << i;
      if (i >= 3) states.push_back(as_entries(model.data));
    }
    saved.get();
    EXPECT_NO_THROW(idx.verify());
    tandem::index opened(with(16, 1.0, 2));
    opened.open(path);
    const std::vector<entry> got = contents(opened);
    std::size_t at = states.size();
    for (std::size_t k = 0; k < states.size(); ++k) {
      if (got == states[k]) at = k;
    }
    ASSERT_LT(at, states.size()) << "the snapshot is the state after no prefix of the batches";
    // Later batches are numbered after the snapshot's place.
    batch one;
    one.get(1);
    EXPECT_GT(opened.execute(one).sequence(), last_sequence - (states.size() - 1 - at));
  }
}

TEST(Snapshot, SaveWaitsForNothingOfItsOwnAndGetsRunBesideIt) {
  // Gets submitted while saves run are answered; puts queued after a save
  // see its effect only once it is done (the file holds the state before).
  test::temp_folder dir("snapshot-test");
  tandem::index idx(with(32, 0.75, 8));
  std::vector<entry> pairs;
  for (key_type k = 0; k < 300'000; ++k) pairs.push_back({k * 3, k});
  idx.load(pairs);
  const std::string path = dir.file("busy");
  std::vector<std::future<void>> saves;
  for (int i = 0; i < 3; ++i) saves.push_back(std::async(std::launch::async, [&] { idx.save(path); }));
  for (int round = 0; round < 20; ++round) {
    batch g;
    for (key_type k = 0; k < 200; ++k) g.get(k * 3 * 997 % 900'000);
    const batch_result r = idx.execute(g);
    for (std::size_t i = 0; i < g.size(); ++i) ASSERT_EQ(r.found(i), g[i].key % 3 == 0);
  }
  batch p;
  p.put(1, 2);
  (void)idx.execute(p);
  for (auto& s : saves) s.get();
  tandem::index opened;
  opened.open(path);
  EXPECT_GE(opened.size(), pairs.size());
}

TEST(Snapshot, BadFilesAreRefusedAndTheIndexIsLeftAsItWas) {
  test::temp_folder dir("snapshot-test");
  tandem::index idx(with(32, 0.75, 2));
  std::vector<entry> pairs;
  for (key_type k = 0; k < 5'000; ++k) pairs.push_back({k * 11, k});
  idx.load(pairs);
  const std::string good = dir.file("good");
  idx.save(good);
  std::vector<char> bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 5'000u * 16);
  auto write = [&](const std::string& name, const std::vector<char>& b) {
    std::ofstream out(dir.file(name), std::ios::binary);
    out.write(b.data(), static_cast<std::streamsize>(b.size()));
    return dir.file(name);
  };
  tandem::index target(with(16, 0.75, 2));
  std::vector<entry> mine;
  for (key_type k = 0; k < 100; ++k) mine.push_back({k, k + 1});
  target.load(mine);
  auto refused = [&](const std::string& path, const std::string& says) {
    try {
      target.open(path);
      ADD_FAILURE() << path << " was opened";
    } catch (const tandem::error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_TRUE(contents(target) == mine) << path << " changed the index";
    EXPECT_NO_THROW(target.verify());
  };
  refused(dir.file("missing"), "No such file");
  std::vector<char> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2));
  refused(write("truncated", cut), "truncated");
  std::vector<char> flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;
  refused(write("corrupted", flipped), "checksum");
  refused(write("foreign", std::vector<char>(4096, 'x')), "not a tandem snapshot");
  refused(write("empty", {}), "");
  // And the good one still opens.
  target.open(good);
  EXPECT_TRUE(contents(target) == pairs);
}

TEST(Snapshot, UnwritablePathFailsAndTheIndexGoesOn) {
  tandem::index idx(with(32, 0.75, 2));
  idx.load(std::vector<entry>{{1, 2}, {3, 4}});
  EXPECT_THROW(idx.save("/nonexistent-folder-of-tandem/snapshot"), tandem::error);
  batch b;
  b.put(5, 6).get(1);
  const batch_result r = idx.execute(b);
  EXPECT_TRUE(r.found(1));
  EXPECT_EQ(idx.size(), 3u);
}

}  // namespace
