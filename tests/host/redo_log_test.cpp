// host::redo_log: append/replay round trips over seeds and sizes (0 ops, keys
// 0 and UINT64_MAX, copied and borrowed records), replay(after), torn tails
// cut at every byte of the last records and zero or garbage extensions,
// corruption of synced records, truncate_through, the folder lock, the
// commit policies, a failed write (RLIMIT_FSIZE) and processes killed with
// SIGKILL while they append.
#include <tandem/error.hpp>
#include <tandem/host/storage/redo_log.hpp>

#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace {

using namespace tandem;
using host::redo_log;
namespace fs = std::filesystem;

/// A folder of its own under the test temp folder, removed at the end.
struct temp_dir {
  std::string path;
  temp_dir() {
    std::string name = ::testing::TempDir() + "tandem_redo_XXXXXX";
    if (::mkdtemp(name.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = name;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  [[nodiscard]] std::string log_file() const { return path + "/redo.log"; }
};

struct record {
  std::uint64_t sequence = 0;
  std::vector<op_type> types;
  std::vector<key_type> keys;
  std::vector<value_type> args;
  friend bool operator==(const record& a, const record& b) {
    return a.sequence == b.sequence && a.types == b.types && a.keys == b.keys && a.args == b.args;
  }
};

/// `n` random write ops; keys 0 and UINT64_MAX come up often.
record make_record(std::uint64_t sequence, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + sequence);
  constexpr op_type writes[] = {op_type::put, op_type::insert, op_type::erase};
  record r{sequence, {}, {}, {}};
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t pick = rng() % 8;
    r.types.push_back(writes[rng() % 3]);
    r.keys.push_back(pick == 0 ? min_key : pick == 1 ? max_key : rng());
    r.args.push_back(r.types.back() == op_type::erase ? 0 : rng());
  }
  return r;
}

void append(redo_log& log, const record& r) {
  log.append(r.sequence, r.types.data(), r.keys.data(), r.args.data(), r.keys.size());
}

std::vector<record> replay(redo_log& log, std::uint64_t after, std::uint64_t* returned = nullptr) {
  std::vector<record> out;
  const std::uint64_t last = log.replay(
      after, [&](std::uint64_t s, const op_type* types, const key_type* keys, const value_type* args, std::size_t n) {
        out.push_back({s, {types, types + n}, {keys, keys + n}, {args, args + n}});
      });
  if (returned != nullptr) *returned = last;
  return out;
}

/// The records of a fresh redo_log on `dir` with sequence > after.
std::vector<record> read_log(const std::string& dir, std::uint64_t after = 0) {
  redo_log log(dir);
  return replay(log, after);
}

void expect_records(const std::vector<record>& got, const std::vector<record>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].sequence, want[i].sequence) << "record " << i;
    EXPECT_TRUE(got[i] == want[i]) << "record " << i << " (sequence " << want[i].sequence << ") differs";
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Writes `records` to a new log in `dir`, syncing after record `sync_after`
/// (0: never); returns the file offset where each record ends.
std::vector<std::uint64_t> write_log(const std::string& dir, const std::vector<record>& records,
                                     std::size_t sync_after = 0) {
  redo_log log(dir);
  replay(log, 0);
  std::vector<std::uint64_t> ends;
  for (std::size_t i = 0; i < records.size(); ++i) {
    append(log, records[i]);
    ends.push_back(log.bytes());
    if (i + 1 == sync_after) log.sync();
  }
  log.flush();
  return ends;
}

std::vector<record> make_records(std::uint64_t first, std::size_t count, std::size_t n, std::uint64_t seed) {
  std::vector<record> out;
  for (std::size_t i = 0; i < count; ++i) out.push_back(make_record(first + i, n, seed));
  return out;
}

TEST(RedoLog, RoundTripOverSeedsAndSizes) {
  // 3854 ops are the largest copied record (payload < 64 KiB), 3855 the
  // smallest borrowed one.
  const std::size_t sizes[] = {0, 1, 2, 7, 8, 9, 100, 3854, 3855, 20000};
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    temp_dir dir;
    std::vector<record> want;
    {
      redo_log log(dir.path);
      EXPECT_EQ(log.replay(0, nullptr), 0u);
      std::uint64_t sequence = 0;
      const std::size_t count = 1 + rng() % 12;
      for (std::size_t i = 0; i < count; ++i) {
        sequence += 1 + rng() % 3;
        const std::size_t n = rng() % 3 == 0 ? rng() % 5000 : sizes[rng() % std::size(sizes)];
        want.push_back(make_record(sequence, n, seed));
        append(log, want.back());
        // Else queued: flushed with a later one, or by the destructor.
        const std::uint64_t pick = rng() % 4;
        if (pick == 0) log.flush();
        if (pick == 1) log.sync();
      }
      EXPECT_EQ(log.last_sequence(), sequence);
      if (seed % 2 == 0) log.verify();
    }
    redo_log log(dir.path);
    std::uint64_t last = 0;
    expect_records(replay(log, 0, &last), want);
    EXPECT_EQ(last, want.back().sequence);
    EXPECT_EQ(log.last_sequence(), want.back().sequence);
    EXPECT_EQ(log.bytes(), fs::file_size(dir.log_file()));
    log.verify();
  }
}

TEST(RedoLog, EmptyLogReplaysNothing) {
  temp_dir dir;
  redo_log log(dir.path + "/nested/folder/");  // created, trailing slash and all
  std::uint64_t last = 1;
  EXPECT_TRUE(replay(log, 42, &last).empty());
  EXPECT_EQ(last, 42u);
  EXPECT_EQ(log.last_sequence(), 0u);
  EXPECT_EQ(log.bytes(), 0u);
  EXPECT_TRUE(fs::exists(dir.path + "/nested/folder/redo.log"));
  log.verify();
}

TEST(RedoLog, ReplaySkipsRecordsThroughAfter) {
  temp_dir dir;
  std::vector<record> all;
  for (std::uint64_t s = 2; s <= 20; s += 2) all.push_back(make_record(s, s % 5, 1));
  write_log(dir.path, all);
  for (std::uint64_t after = 0; after <= 21; ++after) {
    SCOPED_TRACE("after " + std::to_string(after));
    std::vector<record> want;
    for (const record& r : all) {
      if (r.sequence > after) want.push_back(r);
    }
    redo_log log(dir.path);
    std::uint64_t last = 0;
    expect_records(replay(log, after, &last), want);
    EXPECT_EQ(last, want.empty() ? after : want.back().sequence);
    EXPECT_EQ(log.last_sequence(), 20u);  // skipped records count too
  }
}

TEST(RedoLog, AppendPreconditions) {
  temp_dir dir;
  redo_log log(dir.path);
  const record r = make_record(5, 3, 0);
  EXPECT_THROW(append(log, r), tandem::error);  // before replay
  replay(log, 0);
  EXPECT_THROW(log.append(0, nullptr, nullptr, nullptr, 0), tandem::error);  // 0 is never above last_sequence()
  append(log, r);
  EXPECT_THROW(append(log, r), tandem::error);
  EXPECT_THROW(append(log, make_record(4, 1, 0)), tandem::error);
  append(log, make_record(6, 1, 0));
  log.sync();
  log.verify();
}

TEST(RedoLog, TornTailAtEveryByteOfTheLastRecords) {
  // Small records: every byte of the last two (0 ops, then 2); large
  // (borrowed) ones: every 2999th byte of the last three.
  for (const std::size_t tail_ops : {std::size_t{2}, std::size_t{5000}}) {
    SCOPED_TRACE("ops in the last records: " + std::to_string(tail_ops));
    temp_dir dir;
    std::vector<record> records = make_records(1, 4, 3, 7);
    records.push_back(make_record(5, tail_ops, 7));
    records.push_back(make_record(6, 0, 7));
    records.push_back(make_record(7, tail_ops, 7));
    const std::vector<std::uint64_t> ends = write_log(dir.path, records, 4);
    const std::string whole = read_file(dir.log_file());
    ASSERT_EQ(whole.size(), ends.back());
    const bool small = tail_ops < 100;
    for (std::uint64_t cut = small ? ends[4] : ends[3]; cut < whole.size(); cut += small ? 1 : 2999) {
      SCOPED_TRACE("cut at " + std::to_string(cut));
      write_file(dir.log_file(), whole.substr(0, cut));
      std::vector<record> want;
      std::uint64_t prefix = 0;
      for (std::size_t i = 0; i < records.size() && ends[i] <= cut; ++i) {
        want.push_back(records[i]);
        prefix = ends[i];
      }
      {
        redo_log log(dir.path);
        expect_records(replay(log, 0), want);
        EXPECT_EQ(fs::file_size(dir.log_file()), prefix);
        EXPECT_EQ(log.bytes(), prefix);
        want.push_back(make_record(100, 3, 8));
        append(log, want.back());
      }
      expect_records(read_log(dir.path), want);
    }
  }
}

TEST(RedoLog, ZeroAndGarbageTailsAreCut) {
  const std::vector<record> records = make_records(1, 5, 40, 3);
  std::mt19937_64 rng(3);
  const auto garbage = [&](std::size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  };
  const std::vector<std::size_t> lengths = {1, 7, 8, 47, 48, 49, 4096, std::size_t{1} << 20};
  temp_dir dir;
  const std::vector<std::uint64_t> ends = write_log(dir.path, records, 5);
  const std::string whole = read_file(dir.log_file());
  std::vector<std::pair<std::string, std::string>> cases;  // (name, damaged file)
  for (const std::size_t n : lengths) {
    cases.emplace_back("zeros after the log: " + std::to_string(n), whole + std::string(n, '\0'));
    cases.emplace_back("garbage after the log: " + std::to_string(n), whole + garbage(n));
  }
  const std::size_t last = ends[3];  // where the last record begins
  cases.emplace_back("last record zeroed", whole.substr(0, last) + std::string(whole.size() - last, '\0'));
  cases.emplace_back("last record's payload zeroed",
                     whole.substr(0, last + 48) + std::string(whole.size() - last - 48, '\0'));
  cases.emplace_back("last record garbage", whole.substr(0, last) + garbage(whole.size() - last));
  for (const auto& [name, bytes] : cases) {
    SCOPED_TRACE(name);
    write_file(dir.log_file(), bytes);
    const bool last_damaged = bytes.size() == whole.size();
    const std::vector<record> want(records.begin(), records.end() - (last_damaged ? 1 : 0));
    expect_records(read_log(dir.path), want);
    EXPECT_EQ(fs::file_size(dir.log_file()), last_damaged ? last : whole.size());
    expect_records(read_log(dir.path), want);  // the cut log reads alike
  }
}

/// Flips one bit of byte `at` of `path`.
void flip(const std::string& path, std::uint64_t at) {
  std::string bytes = read_file(path);
  bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
  write_file(path, bytes);
}

TEST(RedoLog, DamagedSyncedRecordFollowedByWholeOnesThrows) {
  const std::vector<record> records = make_records(1, 10, 50, 4);
  temp_dir dir;
  const std::vector<std::uint64_t> ends = write_log(dir.path, records, 5);  // records 6.. vouch for 1..5
  const std::string whole = read_file(dir.log_file());
  // Record 2's header and payload, record 5's last byte.
  for (const std::uint64_t at : {ends[0] + 3, ends[0] + 20, ends[0] + 47, ends[0] + 48, ends[1] - 1, ends[4] - 1}) {
    SCOPED_TRACE("flipped byte " + std::to_string(at));
    write_file(dir.log_file(), whole);
    flip(dir.log_file(), at);
    const std::uint64_t start = at < ends[0] ? 0 : *(std::upper_bound(ends.begin(), ends.end(), at) - 1);
    try {
      read_log(dir.path);
      ADD_FAILURE() << "no tandem::error";
    } catch (const tandem::error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(dir.log_file()), std::string::npos) << what;
      EXPECT_NE(what.find("offset " + std::to_string(start) + " "), std::string::npos) << what;
    }
    EXPECT_EQ(read_file(dir.log_file()).size(), whole.size()) << "a corrupt log is left as it was";
  }
}

TEST(RedoLog, ReopeningVouchesForEarlierRecords) {
  // Records flushed but never synced, then the log is reopened (replay
  // syncs) and one more record appended: it vouches for all before it.
  const std::vector<record> records = make_records(1, 5, 20, 5);
  temp_dir dir;
  const std::vector<std::uint64_t> ends = write_log(dir.path, records);
  {
    redo_log log(dir.path);
    replay(log, 0);
    append(log, make_record(6, 1, 5));
  }
  flip(dir.log_file(), ends[1] + 60);  // record 3
  EXPECT_THROW(read_log(dir.path), tandem::error);
}

TEST(RedoLog, DamageNoLaterRecordVouchesForIsATornTail) {
  // Never synced: the OS may have written record 5 before record 3, so a
  // damaged record 3 followed by whole ones is what a crash leaves.
  const std::vector<record> records = make_records(1, 6, 20, 6);
  temp_dir dir;
  const std::vector<std::uint64_t> ends = write_log(dir.path, records);
  flip(dir.log_file(), ends[1] + 60);
  expect_records(read_log(dir.path), {records.begin(), records.begin() + 2});
  EXPECT_EQ(fs::file_size(dir.log_file()), ends[1]);
}

TEST(RedoLog, TruncateThrough) {
  std::vector<record> records;
  for (std::uint64_t s = 1; s <= 10; ++s) records.push_back(make_record(s, s == 3 ? 9000 : s * 3, 9));
  temp_dir dir;
  write_log(dir.path, records);
  {
    redo_log log(dir.path);
    replay(log, 0);
    const std::uint64_t bytes = log.bytes();
    log.truncate_through(0);
    EXPECT_EQ(log.bytes(), bytes);
    log.truncate_through(4);
    log.verify();
    EXPECT_LT(log.bytes(), bytes);
    EXPECT_EQ(log.bytes(), fs::file_size(dir.log_file()));
    EXPECT_FALSE(fs::exists(dir.path + "/redo.log.new"));
    expect_records(replay(log, 0), {records.begin() + 4, records.end()});
    append(log, make_record(11, 4, 9));  // queued while truncating
    log.truncate_through(10);
    log.verify();
  }
  expect_records(read_log(dir.path), {make_record(11, 4, 9)});
  {
    redo_log log(dir.path);
    replay(log, 0);
    log.truncate_through(11);
    EXPECT_EQ(log.bytes(), 0u);
    EXPECT_EQ(fs::file_size(dir.log_file()), 0u);
    EXPECT_EQ(log.last_sequence(), 11u);
    EXPECT_THROW(append(log, make_record(11, 1, 9)), tandem::error);
    append(log, make_record(12, 2, 9));
    log.verify();
  }
  expect_records(read_log(dir.path), {make_record(12, 2, 9)});
  // A leftover redo.log.new (a crash inside truncate_through) is removed.
  write_file(dir.path + "/redo.log.new", "partial");
  expect_records(read_log(dir.path), {make_record(12, 2, 9)});
  EXPECT_FALSE(fs::exists(dir.path + "/redo.log.new"));
}

TEST(RedoLog, SecondOpenerOfAFolderIsRefused) {
  temp_dir dir;
  {
    redo_log first(dir.path);
    try {
      redo_log second(dir.path);
      ADD_FAILURE() << "no tandem::error";
    } catch (const tandem::error& e) {
      EXPECT_NE(std::string(e.what()).find("in use"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(redo_log again(dir.path));
}

TEST(RedoLog, FlushAndSyncWriteEveryQueuedRecord) {
  // After each flush or sync, a copy of redo.log read by a fresh redo_log
  // in another folder holds every record queued so far.
  for (const bool durable : {false, true}) {
    SCOPED_TRACE(durable ? "sync" : "flush");
    temp_dir dir;
    temp_dir reader;
    const std::vector<record> records = make_records(1, 9, 500, 10);
    redo_log log(dir.path);
    replay(log, 0);
    for (std::size_t i = 0; i < records.size(); ++i) {
      append(log, records[i]);
      EXPECT_LT(fs::file_size(dir.log_file()), log.bytes()) << "append writes nothing";
      if (i % 3 != 2 && i + 1 != records.size()) continue;  // groups of 3
      if (durable) {
        log.sync();
      } else {
        log.flush();
      }
      EXPECT_EQ(fs::file_size(dir.log_file()), log.bytes());
      fs::copy_file(dir.log_file(), reader.log_file(), fs::copy_options::overwrite_existing);
      expect_records(read_log(reader.path), {records.begin(), records.begin() + static_cast<std::ptrdiff_t>(i) + 1});
    }
  }
}

TEST(RedoLog, FailedWriteLeavesTheLogAtItsLastWholeRecord) {
  temp_dir dir;
  std::vector<record> want = make_records(1, 3, 100, 11);
  const record big = make_record(4, 10000, 11);  // borrowed: the short write stops inside it
  {
    redo_log log(dir.path);
    replay(log, 0);
    for (const record& r : want) append(log, r);
    log.sync();
    const std::uint64_t whole = log.bytes();

    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    rlimit small = old;
    small.rlim_cur = whole + 5000;
    const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    append(log, big);
    append(log, make_record(5, 1, 11));
    std::string what;
    try {
      log.flush();
    } catch (const tandem::error& e) {
      what = e.what();
    }
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
    ::signal(SIGXFSZ, old_handler);

    EXPECT_NE(what.find(dir.log_file()), std::string::npos) << what;
    EXPECT_NE(what.find("File too large"), std::string::npos) << what;
    EXPECT_EQ(fs::file_size(dir.log_file()), whole);
    EXPECT_EQ(log.bytes(), whole);
    EXPECT_EQ(log.last_sequence(), 3u);
    append(log, big);  // the failed records were dropped: their sequences are free
    want.push_back(big);
    log.sync();
    log.verify();
  }
  expect_records(read_log(dir.path), want);
}

/// The records the crash test's writer appends: mostly small, every fifth
/// one of 1 MB (a write that a kill may cut short).
record crash_record(std::uint64_t sequence) {
  return make_record(sequence, sequence % 5 == 0 ? 60000 : sequence * 7919 % 5000, 12);
}

/// The child: goes on from the log's last record, appending and syncing
/// record after record and reporting each synced sequence on `report`,
/// until killed.
[[noreturn]] void crash_writer(const std::string& dir, int report) {
  try {
    redo_log log(dir);
    for (std::uint64_t s = log.replay(0, nullptr) + 1;; ++s) {
      const record r = crash_record(s);  // borrowed until sync() returns
      append(log, r);
      log.sync();
      if (::write(report, &s, sizeof s) != static_cast<ssize_t>(sizeof s)) ::_exit(3);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crash writer: %s\n", e.what());
    ::_exit(2);
  }
}

TEST(RedoLog, KilledWriterLosesNoSyncedRecord) {
  temp_dir dir;
  std::mt19937_64 rng(13);
  std::uint64_t total = 0;
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      crash_writer(dir.path, fds[1]);
    }
    ::close(fds[1]);
    // Kill it at a random time after its first synced record of the round
    // (disk latency varies too much for a fixed delay to mean anything).
    pollfd first{fds[0], POLLIN, 0};
    const int ready = ::poll(&first, 1, 10000);
    if (ready == 1) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30000));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_EQ(ready, 1) << "the writer synced nothing in 10 s";
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited with " << WEXITSTATUS(status);
    std::uint64_t reported = 0;
    for (std::uint64_t s = 0; ::read(fds[0], &s, sizeof s) == static_cast<ssize_t>(sizeof s);) reported = s;
    ::close(fds[0]);

    redo_log log(dir.path);
    std::uint64_t expected = 1;
    log.replay(0, [&](std::uint64_t s, const op_type* types, const key_type* keys, const value_type* args,
                      std::size_t n) {
      ASSERT_EQ(s, expected) << "the replayed records are no prefix";
      if (s > total) {  // records of earlier rounds were checked then
        const record want = crash_record(s);
        EXPECT_TRUE(want == (record{s, {types, types + n}, {keys, keys + n}, {args, args + n}})) << "record " << s;
      }
      ++expected;
    });
    EXPECT_GE(expected - 1, reported) << "a synced record is missing";
    total = expected - 1;
  }
  EXPECT_GE(total, 20u);
}

}  // namespace
