// host::snapshot: round trips (0 and 1 pairs, the edge keys, sizes around
// chunk boundaries, many seeds of random sorted keys appended in random
// pieces), the writer's bytes against the layout written out by hand from
// snapshot_file.hpp, refusal of every single-byte corruption and of every
// truncation, foreign files, newer versions, the other byte order, crafted
// files whose checksums are right but whose contents are not, writer misuse,
// and the temporary file's life (removed without commit or after a failed
// write, the target replaced only at commit).
#include <tandem/error.hpp>
#include <tandem/host/storage/snapshot_file.hpp>

#include <gtest/gtest.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace tandem;
namespace snapshot = tandem::host::snapshot;
namespace fs = std::filesystem;
using bytes = std::vector<unsigned char>;

constexpr snapshot::geometry test_geometry{1024, 64, 16, 64, 32};

snapshot::info make_info(std::uint64_t pairs, std::uint32_t chunk_pairs, std::uint64_t sequence = 7) {
  snapshot::info h;
  h.pairs = pairs;
  h.sequence = sequence;
  h.geom = test_geometry;
  h.chunk_pairs = chunk_pairs;
  return h;
}

/// `n` pairs with random strictly increasing keys (0 and UINT64_MAX among
/// them when n >= 2) and random values.
void random_pairs(std::size_t n, std::uint64_t seed, std::vector<key_type>& keys, std::vector<value_type>& values) {
  std::mt19937_64 rng(seed);
  std::set<key_type> drawn;
  if (n >= 2) drawn = {min_key, max_key};
  while (drawn.size() < n) drawn.insert(rng() >> (rng() % 64));
  keys.assign(drawn.begin(), drawn.end());
  values.resize(n);
  for (auto& v : values) v = rng();
}

bytes load_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return bytes(std::istreambuf_iterator<char>(in), {});
}

void store_file(const fs::path& p, const bytes& b) {
  fs::remove(p);  // a new file: ext4 flushes a file truncated and rewritten when it is closed
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

template <class T>
T get(const bytes& b, std::size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

template <class T>
void put(bytes& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

// The layout of snapshot_file.hpp, written out again here so that the test
// checks the writer against the document, not against itself.
constexpr std::size_t header_size = 64;
constexpr std::size_t footer_size = 24;

void seal_header(bytes& b) { put<std::uint64_t>(b, 56, XXH3_64bits(b.data(), 56)); }

/// Recomputes every checksum of a file whose fields were patched (the header's
/// pairs and chunk_pairs must still describe the file).
void reseal(bytes& b) {
  seal_header(b);
  const std::uint64_t chunk_pairs = get<std::uint32_t>(b, 36);
  std::uint64_t left = get<std::uint64_t>(b, 40);
  std::vector<std::uint64_t> sums;
  std::size_t at = header_size;
  while (left > 0) {
    const std::uint64_t n = std::min(chunk_pairs, left);
    const std::size_t len = 8 + 16 * n;
    const std::uint64_t parts[2] = {XXH3_64bits(b.data() + at, 8 + 8 * n),  // n and keys
                                    XXH3_64bits(b.data() + at + 8 + 8 * n, 8 * n)};
    sums.push_back(XXH3_64bits_withSeed(parts, sizeof parts, sums.size()));
    put<std::uint64_t>(b, at + len, sums.back());
    at += len + 8;
    left -= n;
  }
  put<std::uint64_t>(b, at + 16, XXH3_64bits_withSeed(sums.data(), sums.size() * 8, get<std::uint64_t>(b, 56)));
}

/// Writes keys/values to `path` in pieces of random length (0 included).
void write_snapshot(const fs::path& path, const snapshot::info& h, const std::vector<key_type>& keys,
                    const std::vector<value_type>& values, std::uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  snapshot::writer w(path.string(), h);
  for (std::size_t done = 0; done < keys.size();) {
    const std::size_t piece = std::min<std::size_t>(keys.size() - done, rng() % (2 * h.chunk_pairs + 2));
    w.append(keys.data() + done, values.data() + done, piece);
    done += piece;
  }
  w.commit();
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const tandem::error& e) {
    return e.what();
  }
  return "(no tandem::error)";
}

void expect_same_info(const snapshot::info& a, const snapshot::info& b) {
  EXPECT_EQ(a.pairs, b.pairs);
  EXPECT_EQ(a.sequence, b.sequence);
  EXPECT_EQ(a.chunk_pairs, b.chunk_pairs);
  EXPECT_EQ(a.geom.leaf_capacity, b.geom.leaf_capacity);
  EXPECT_EQ(a.geom.log_capacity, b.geom.log_capacity);
  EXPECT_EQ(a.geom.block_count, b.geom.block_count);
  EXPECT_EQ(a.geom.block_size, b.geom.block_size);
  EXPECT_EQ(a.geom.inner_fanout, b.geom.inner_fanout);
}

class SnapshotFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "tandem_snapshot_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ / "index.snap";
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }

  /// Files in the folder, by name.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  /// Reads `path_` every way there is and checks each gives keys/values.
  void expect_contents(const snapshot::info& h, const std::vector<key_type>& keys,
                       const std::vector<value_type>& values) {
    const snapshot::contents c = snapshot::read(path_.string());
    expect_same_info(c.header, h);
    EXPECT_EQ(c.keys, keys);
    EXPECT_EQ(c.values, values);

    expect_same_info(snapshot::read_info(path_.string()), h);

    std::vector<key_type> k(keys.size() + 1, 5);
    std::vector<value_type> v(keys.size() + 1, 5);
    expect_same_info(snapshot::read_into(path_.string(), k.data(), v.data(), k.size()), h);
    EXPECT_TRUE(std::equal(keys.begin(), keys.end(), k.begin()));
    EXPECT_TRUE(std::equal(values.begin(), values.end(), v.begin()));
    EXPECT_EQ(k.back(), 5U);  // nothing past the pairs

    const bytes b = load_file(path_);
    const snapshot::contents m = snapshot::read_buffer(b.data(), b.size());
    EXPECT_EQ(m.keys, keys);
    EXPECT_EQ(m.values, values);
  }

  fs::path dir_;
  fs::path path_;
};

// ---- round trips -------------------------------------------------------------

TEST_F(SnapshotFile, EmptySnapshot) {
  const snapshot::info h = make_info(0, 4, 0);
  snapshot::writer w(path_.string(), h);
  w.append(nullptr, nullptr, 0);
  w.commit();
  EXPECT_EQ(fs::file_size(path_), header_size + footer_size);
  expect_contents(h, {}, {});
  EXPECT_EQ(listing(), std::vector<std::string>{"index.snap"});
}

TEST_F(SnapshotFile, OnePairAndTheEdgeKeys) {
  for (const std::vector<key_type>& keys : {std::vector<key_type>{0}, std::vector<key_type>{max_key},
                                            std::vector<key_type>{0, max_key}, std::vector<key_type>{0, 1, max_key}}) {
    SCOPED_TRACE(keys.size());
    const std::vector<value_type> values(keys.size(), max_key);
    const snapshot::info h = make_info(keys.size(), 2, max_key);
    write_snapshot(path_, h, keys, values);
    expect_contents(h, keys, values);
  }
}

TEST_F(SnapshotFile, SizesAroundChunkBoundaries) {
  for (std::uint32_t chunk : {1U, 2U, 4U, 7U}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{chunk} - 1, std::size_t{chunk}, std::size_t{chunk} + 1,
                          2 * std::size_t{chunk}, 3 * std::size_t{chunk} + 1, 10 * std::size_t{chunk} - 1}) {
      if (n == 0) continue;
      SCOPED_TRACE("chunk " + std::to_string(chunk) + ", pairs " + std::to_string(n));
      std::vector<key_type> keys;
      std::vector<value_type> values;
      random_pairs(n, n * 31 + chunk, keys, values);
      const snapshot::info h = make_info(n, chunk);
      write_snapshot(path_, h, keys, values, n);
      const std::uint64_t chunks = (n + chunk - 1) / chunk;
      EXPECT_EQ(fs::file_size(path_), header_size + chunks * 16 + n * 16 + footer_size);
      expect_contents(h, keys, values);
    }
  }
}

TEST_F(SnapshotFile, RandomSnapshotsManySeeds) {
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const std::size_t n = rng() % 300;
    const auto chunk = static_cast<std::uint32_t>(1 + rng() % 40);
    std::vector<key_type> keys;
    std::vector<value_type> values;
    random_pairs(n, seed, keys, values);
    const snapshot::info h = make_info(n, chunk, rng());
    write_snapshot(path_, h, keys, values, seed);
    expect_contents(h, keys, values);
  }
}

TEST_F(SnapshotFile, DefaultChunkSizeAcrossAChunkBoundary) {
  const std::size_t n = std::size_t{snapshot::default_chunk_pairs} + 5;
  std::vector<key_type> keys(n);
  std::vector<value_type> values(n);
  for (std::size_t i = 0; i < n; ++i) {
    keys[i] = i * 3 + 1;
    values[i] = ~i;
  }
  const snapshot::info h = make_info(n, snapshot::default_chunk_pairs);
  snapshot::writer w(path_.string(), h);
  w.append(keys.data(), values.data(), 1000);
  w.append(keys.data() + 1000, values.data() + 1000, n - 1000);
  w.commit();
  EXPECT_EQ(fs::file_size(path_), header_size + 2 * 16 + n * 16 + footer_size);
  const snapshot::contents c = snapshot::read(path_.string());
  EXPECT_EQ(c.keys, keys);
  EXPECT_EQ(c.values, values);
}

TEST_F(SnapshotFile, BytesDoNotDependOnHowPairsArrive) {
  // One append of everything (whole chunks written from the caller's
  // arrays), one pair at a time (all copied), and random pieces (both).
  std::vector<key_type> keys;
  std::vector<value_type> values;
  random_pairs(1000, 5, keys, values);
  const snapshot::info h = make_info(1000, 64);
  {
    snapshot::writer w(path_.string(), h);
    w.append(keys.data(), values.data(), keys.size());
    w.commit();
  }
  const bytes whole = load_file(path_);
  {
    snapshot::writer w(path_.string(), h);
    for (std::size_t i = 0; i < keys.size(); ++i) w.append(&keys[i], &values[i], 1);
    w.commit();
  }
  EXPECT_EQ(load_file(path_), whole);
  write_snapshot(path_, h, keys, values, 3);
  EXPECT_EQ(load_file(path_), whole);
  expect_contents(h, keys, values);
}

// ---- the format ----------------------------------------------------------------

TEST_F(SnapshotFile, BytesFollowTheDocumentedLayout) {
  const std::vector<key_type> keys{0, 5, 9, 1000, max_key};
  const std::vector<value_type> values{10, 11, 12, 13, 14};
  const snapshot::info h = make_info(5, 2, 0x1122334455667788);
  write_snapshot(path_, h, keys, values);

  bytes want(header_size);
  std::memcpy(want.data(), "TANDEMSS", 8);
  put<std::uint32_t>(want, 8, 1);
  put<std::uint32_t>(want, 12, 0x01020304);
  const std::uint32_t geom[5] = {1024, 64, 16, 64, 32};
  for (std::size_t i = 0; i < 5; ++i) put<std::uint32_t>(want, 16 + 4 * i, geom[i]);
  put<std::uint32_t>(want, 36, 2);
  put<std::uint64_t>(want, 40, 5);
  put<std::uint64_t>(want, 48, 0x1122334455667788);
  for (std::size_t first = 0; first < 5; first += 2) {
    const std::size_t n = std::min<std::size_t>(2, 5 - first);
    const std::size_t at = want.size();
    want.resize(at + 8 + 16 * n + 8);
    put<std::uint64_t>(want, at, n);
    for (std::size_t i = 0; i < n; ++i) {
      put<std::uint64_t>(want, at + 8 + 8 * i, keys[first + i]);
      put<std::uint64_t>(want, at + 8 + 8 * n + 8 * i, values[first + i]);
    }
  }
  want.resize(want.size() + footer_size);
  std::memcpy(want.data() + want.size() - footer_size, "TANDEMSF", 8);
  put<std::uint64_t>(want, want.size() - 16, 5);
  reseal(want);
  EXPECT_EQ(load_file(path_), want);
}

// ---- refusals ------------------------------------------------------------------

/// 8 pairs in chunks of 3, 3 and 2.
class DamagedSnapshot : public SnapshotFile {
 protected:
  void SetUp() override {
    SnapshotFile::SetUp();
    random_pairs(8, 99, keys_, values_);
    write_snapshot(path_, make_info(8, 3), keys_, values_);
    good_ = load_file(path_);
    ASSERT_EQ(good_.size(), header_size + 3 * 16 + 8 * 16 + footer_size);
  }

  /// The error that reading `b` gives, through the file and the buffer
  /// readers (which must agree).
  std::string refusal(const bytes& b) {
    store_file(path_, b);
    const std::string from_file = error_of([&] { snapshot::read(path_.string()); });
    const std::string from_buffer = error_of([&] { snapshot::read_buffer(b.data(), b.size(), path_.string()); });
    EXPECT_EQ(from_file, from_buffer);
    return from_file;
  }

  std::vector<key_type> keys_;
  std::vector<value_type> values_;
  bytes good_;
};

TEST_F(DamagedSnapshot, EverySingleByteCorruptionIsRefused) {
  // The format has no padding: every byte is checked, and the message names
  // the part the byte is in.
  const std::size_t footer_at = good_.size() - footer_size;
  for (std::size_t at = 0; at < good_.size(); ++at) {
    std::string want;
    if (at < 8) {
      want = "not a tandem snapshot";
    } else if (at < header_size) {
      want = "header checksum mismatch";
    } else if (at < footer_at) {
      want = "checksum mismatch in chunk " + std::to_string((at - header_size) / (16 + 3 * 16));
    } else if (at < footer_at + 8) {
      want = "footer: no \"TANDEMSF\" magic";
    } else if (at < footer_at + 16) {
      want = "footer: ";
    } else {
      want = "footer checksum mismatch";
    }
    for (const int mask : {0x01, 0x80, 0xff}) {
      SCOPED_TRACE("byte " + std::to_string(at) + " ^ " + std::to_string(mask));
      bytes b = good_;
      b[at] = static_cast<unsigned char>(b[at] ^ mask);
      const std::string e = refusal(b);
      EXPECT_NE(e.find(want), std::string::npos) << e;
      EXPECT_NE(e.find(path_.string()), std::string::npos) << e;
    }
  }
}

TEST_F(DamagedSnapshot, EveryTruncationAndAnyTrailingByteIsRefused) {
  for (std::size_t len = 0; len < good_.size(); ++len) {
    SCOPED_TRACE("length " + std::to_string(len));
    const std::string e = refusal(bytes(good_.begin(), good_.begin() + static_cast<std::ptrdiff_t>(len)));
    EXPECT_NE(e.find("truncated"), std::string::npos) << e;
    std::vector<key_type> k(8);
    std::vector<value_type> v(8);
    EXPECT_THROW(snapshot::read_into(path_.string(), k.data(), v.data(), 8), tandem::error);
    EXPECT_THROW(snapshot::read_info(path_.string()), tandem::error);
  }
  bytes longer = good_;
  longer.push_back(0);
  EXPECT_NE(refusal(longer).find("1 bytes past the footer"), std::string::npos);
}

TEST_F(DamagedSnapshot, ForeignFiles) {
  EXPECT_NE(refusal({}).find("truncated"), std::string::npos);
  const std::string text = "hello, this is not a snapshot at all\n";
  EXPECT_NE(refusal(bytes(text.begin(), text.end())).find("not a tandem snapshot"), std::string::npos);
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed);
    bytes b(rng() % 600);
    for (auto& c : b) c = static_cast<unsigned char>(rng());
    if (seed % 2 == 1 && b.size() >= 8) std::memcpy(b.data(), "TANDEMSS", 8);  // past the magic too
    SCOPED_TRACE("seed " + std::to_string(seed));
    EXPECT_NE(refusal(b).find(path_.string()), std::string::npos);
  }
  const std::string missing = (dir_ / "missing.snap").string();
  const std::string e = error_of([&] { snapshot::read(missing); });
  EXPECT_NE(e.find(missing), std::string::npos) << e;
  EXPECT_NE(e.find(std::strerror(ENOENT)), std::string::npos) << e;
  EXPECT_THROW(snapshot::read_info(missing), tandem::error);
}

TEST_F(DamagedSnapshot, NewerVersionAndOtherByteOrder) {
  bytes b = good_;
  put<std::uint32_t>(b, 8, 2);
  seal_header(b);
  EXPECT_NE(refusal(b).find("format version 2 is newer than this build reads (1)"), std::string::npos);
  put<std::uint32_t>(b, 8, 0);
  seal_header(b);
  EXPECT_NE(refusal(b).find("format version 0"), std::string::npos);

  // The byte-order mark as a machine of the other order writes it: refused
  // for that reason, whether or not the rest matches.
  b = good_;
  put<std::uint32_t>(b, 12, 0x04030201);
  EXPECT_NE(refusal(b).find("other byte order"), std::string::npos);
  seal_header(b);
  EXPECT_NE(refusal(b).find("other byte order"), std::string::npos);
  put<std::uint32_t>(b, 12, 0x01020305);
  seal_header(b);
  EXPECT_NE(refusal(b).find("byte-order mark is neither byte order"), std::string::npos);
}

TEST_F(DamagedSnapshot, HeaderFieldsOutOfRange) {
  const auto patched = [&](std::size_t at, auto v) {
    bytes b = good_;
    put(b, at, v);
    seal_header(b);
    return refusal(b);
  };
  EXPECT_NE(patched(16, std::uint32_t{0}).find("geometry leaf_capacity = 0 is out of range"), std::string::npos);
  EXPECT_NE(patched(32, std::uint32_t{70000}).find("geometry inner_fanout = 70000"), std::string::npos);
  EXPECT_NE(patched(36, std::uint32_t{0}).find("chunk size of 0 pairs"), std::string::npos);
  EXPECT_NE(patched(36, snapshot::max_chunk_pairs + 1).find("chunk size"), std::string::npos);
  // Counts the file's size cannot hold: refused before anything is allocated.
  EXPECT_NE(patched(40, std::uint64_t{max_key}).find("truncated"), std::string::npos);
  EXPECT_NE(patched(40, std::uint64_t{1} << 40).find("truncated"), std::string::npos);
  EXPECT_NE(patched(40, std::uint64_t{9}).find("truncated"), std::string::npos);
  EXPECT_NE(patched(40, std::uint64_t{7}).find("16 bytes past the footer"), std::string::npos);
  // Another chunk size is another file size.
  EXPECT_NE(patched(36, std::uint32_t{4}).find("16 bytes past the footer"), std::string::npos);
}

TEST_F(DamagedSnapshot, ConsistentChecksumsOverBadContents) {
  // Files a buggy writer could make: every checksum right, the contents not.
  const std::size_t chunk_bytes = 16 + 3 * 16;
  const auto key_at = [&](std::size_t i) { return header_size + (i / 3) * chunk_bytes + 8 + (i % 3) * 8; };

  bytes b = good_;
  put(b, key_at(1), keys_[0]);  // equal to the key before it
  reseal(b);
  EXPECT_NE(refusal(b).find("keys not strictly increasing at pair 1 (chunk 0)"), std::string::npos);

  b = good_;
  put(b, key_at(3), keys_[2]);  // first key of chunk 1 equal to chunk 0's last
  reseal(b);
  EXPECT_NE(refusal(b).find("keys not strictly increasing at pair 3 (chunk 1)"), std::string::npos);

  b = good_;
  put(b, key_at(7), keys_[5]);  // last key of the last chunk below the one before it
  reseal(b);
  EXPECT_NE(refusal(b).find("keys not strictly increasing at pair 7 (chunk 2)"), std::string::npos);

  b = good_;
  put<std::uint64_t>(b, header_size + chunk_bytes, 2);  // chunk 1 says 2 pairs
  reseal(b);
  EXPECT_NE(refusal(b).find("chunk 1 holds 2 pairs where the header implies 3"), std::string::npos);

  b = good_;
  put<std::uint64_t>(b, b.size() - 16, 9);  // the footer's count
  reseal(b);
  EXPECT_NE(refusal(b).find("footer: 9 pairs where the header says 8"), std::string::npos);

  // Chunks 0 and 1 swapped, each with its checksum: chunk checksums are
  // seeded with the chunk's place.
  b = good_;
  std::swap_ranges(b.begin() + header_size, b.begin() + header_size + chunk_bytes,
                   b.begin() + header_size + chunk_bytes);
  EXPECT_NE(refusal(b).find("checksum mismatch in chunk 0"), std::string::npos);
}

TEST_F(DamagedSnapshot, ReadIntoTooSmallArrays) {
  std::vector<key_type> k(7);
  std::vector<value_type> v(7);
  const std::string e = error_of([&] { snapshot::read_into(path_.string(), k.data(), v.data(), k.size()); });
  EXPECT_NE(e.find("holds 8 pairs, more than the room for 7"), std::string::npos) << e;
}

// ---- the writer ----------------------------------------------------------------

TEST_F(SnapshotFile, WriterRefusesMisuse) {
  EXPECT_THROW(snapshot::writer(path_.string(), make_info(1, 0)), std::invalid_argument);
  EXPECT_THROW(snapshot::writer(path_.string(), make_info(1, snapshot::max_chunk_pairs + 1)), std::invalid_argument);
  snapshot::info bad = make_info(1, 4);
  bad.geom.block_size = 0;
  EXPECT_THROW(snapshot::writer(path_.string(), bad), std::invalid_argument);
  EXPECT_TRUE(listing().empty());

  const std::vector<key_type> keys{1, 2, 3, 4, 5, 6};
  const std::vector<value_type> values{1, 2, 3, 4, 5, 6};
  const std::vector<key_type> unsorted{1, 3, 2};
  {
    snapshot::writer w(path_.string(), make_info(6, 4));
    EXPECT_THROW(w.append(unsorted.data(), values.data(), 3), std::invalid_argument);
    EXPECT_THROW(w.append(keys.data(), nullptr, 1), std::invalid_argument);
    EXPECT_THROW(w.append(keys.data(), values.data(), 7), std::invalid_argument);  // more than announced
    w.append(keys.data(), values.data(), 2);
    EXPECT_THROW(w.append(keys.data() + 1, values.data() + 1, 1), std::invalid_argument);  // key 2 again
    EXPECT_THROW(w.append(keys.data(), values.data(), 1), std::invalid_argument);          // below
    w.append(keys.data() + 2, values.data() + 2, 3);
    const std::string e = error_of([&] { w.commit(); });  // 5 of 6
    EXPECT_NE(e.find("commit after 5 of the 6 pairs"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(path_));
    w.append(keys.data() + 5, values.data() + 5, 1);
    w.commit();
    EXPECT_THROW(w.append(keys.data(), values.data(), 0), std::logic_error);
    EXPECT_THROW(w.commit(), std::logic_error);
  }
  expect_contents(make_info(6, 4), keys, values);
}

TEST_F(SnapshotFile, TemporaryFileRemovedWithoutCommit) {
  const std::vector<key_type> keys{1, 2, 3, 4, 5};
  const std::vector<value_type> values{1, 2, 3, 4, 5};
  {
    snapshot::writer w(path_.string(), make_info(5, 2));
    w.append(keys.data(), values.data(), 3);
    const std::vector<std::string> names = listing();
    ASSERT_EQ(names.size(), 1U);
    EXPECT_EQ(names[0].rfind("index.snap.tmp." + std::to_string(::getpid()) + ".", 0), 0U) << names[0];
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(SnapshotFile, ExistingFileReplacedOnlyAtCommit) {
  std::vector<key_type> old_keys, new_keys;
  std::vector<value_type> old_values, new_values;
  random_pairs(10, 1, old_keys, old_values);
  random_pairs(12, 2, new_keys, new_values);
  write_snapshot(path_, make_info(10, 3, 1), old_keys, old_values);
  {
    snapshot::writer w(path_.string(), make_info(12, 3, 2));
    w.append(new_keys.data(), new_values.data(), 12);
    expect_contents(make_info(10, 3, 1), old_keys, old_values);  // all written, not committed
  }
  expect_contents(make_info(10, 3, 1), old_keys, old_values);  // abandoned
  {
    snapshot::writer w(path_.string(), make_info(12, 3, 2));
    w.append(new_keys.data(), new_values.data(), 12);
    w.commit();
  }
  expect_contents(make_info(12, 3, 2), new_keys, new_values);
  EXPECT_EQ(listing(), std::vector<std::string>{"index.snap"});
}

TEST_F(SnapshotFile, FailedWriteRemovesTheFile) {
  // A file size limit makes the I/O thread's write of some chunk fail
  // (EFBIG), in a child process that the limit cannot outlive.
  const auto child = [&] {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{100000, 100000};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::vector<key_type> keys;
    std::vector<value_type> values;
    random_pairs(20000, 8, keys, values);
    snapshot::writer w(path_.string(), make_info(keys.size(), 1000));
    const std::string e = error_of([&] {
      for (std::size_t i = 0; i < keys.size(); i += 100) w.append(&keys[i], &values[i], 100);
      w.commit();
    });
    const bool refused =
        e.find("cannot write chunk") != std::string::npos && e.find(std::strerror(EFBIG)) != std::string::npos;
    bool unusable = false;
    try {
      w.commit();
    } catch (const std::logic_error&) {
      unusable = true;
    }
    std::exit(refused && unusable && listing().empty() ? 0 : 1);
  };
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST_F(SnapshotFile, UnwritableFolder) {
  const std::string missing = (dir_ / "no" / "such" / "x.snap").string();
  std::string e = error_of([&] { snapshot::writer(missing, make_info(0, 4)); });
  EXPECT_NE(e.find(missing), std::string::npos) << e;
  EXPECT_NE(e.find(std::strerror(ENOENT)), std::string::npos) << e;

  store_file(dir_ / "plain", {1});
  e = error_of([&] { snapshot::writer((dir_ / "plain" / "x.snap").string(), make_info(0, 4)); });
  EXPECT_NE(e.find(std::strerror(ENOTDIR)), std::string::npos) << e;

  if (::geteuid() != 0) {  // root writes anywhere
    fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
    e = error_of([&] { snapshot::writer(path_.string(), make_info(0, 4)); });
    EXPECT_NE(e.find(std::strerror(EACCES)), std::string::npos) << e;
  }
}

}  // namespace
