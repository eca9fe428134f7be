// config.storage_dir: the redo log and checkpoints of an index. Reopening
// gives back every batch answered, under each log_sync policy, over seeds
// and mixes (group-commit folds and batches in flight included); a
// checkpoint drops the records it covers; load and open write one; a torn
// log tail is cut; a second index on the folder, a corrupt checkpoint and
// bad config values are refused; a record that cannot be written fails its
// batch and refuses later writes until a checkpoint succeeds. The crash
// test kills a writer process (tests/api/crash_writer.cpp) with SIGKILL at
// random times and checks that the reopened index holds every acknowledged
// batch and, of the rest, a prefix in queue order. The log file's own
// checks (every torn byte, corruption) are in tests/host/redo_log_test.cpp.
#include <tandem/device/device_query.hpp>
#include <tandem/tandem.hpp>

#include "support/batches.hpp"
#include "support/contents.hpp"
#include "support/crash_batches.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace tandem;
using test::as_entries;
using test::contents;
using test::index_model;
namespace fs = std::filesystem;

config durable(const std::string& dir, log_sync policy = log_sync::batch, std::size_t threads = 4) {
  config c;
  c.threads = threads;
  c.device = device_kind::cpu;
  c.storage_dir = dir;
  c.log_sync_policy = policy;
  return c;
}

/// Applies the ops of `b` to `model` (answers not compared).
void apply(index_model& model, const batch& b) {
  for (std::size_t i = 0; i < b.size(); ++i) (void)model.run(b[i]);
}

const char* name(log_sync p) {
  return p == log_sync::none ? "none" : p == log_sync::group ? "group" : "batch";
}

TEST(Durability, ReopenedIndexHoldsEveryAnsweredBatch) {
  // Random mixes (every op kind, edge keys) in rounds: some batches one at a
  // time, some many at once (folded by group commit), now and then a
  // checkpoint; the index is closed and reopened between rounds and must
  // equal the model, pass verify() and go on numbering batches.
  for (const log_sync policy : {log_sync::none, log_sync::group, log_sync::batch}) {
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE(std::string("policy ") + name(policy) + ", seed " + std::to_string(seed));
      test::temp_folder dir("durability-test");
      index_model model;
      test::key_source keys(seed % 2 ? test::key_pattern::edges : test::key_pattern::narrow, 3000, seed);
      std::uint64_t last_sequence = 0;
      for (int round = 0; round < 4; ++round) {
        tandem::index idx(durable(dir.path(), policy, 1 + seed % 4));
        ASSERT_TRUE(contents(idx) == as_entries(model.data)) << "round " << round;
        idx.verify();
        if (round == 0 && seed % 2 == 0) model.load(idx, keys.pairs(2000));
        for (int step = 0; step < 12; ++step) {
          if (step % 3 == 0) {
            std::vector<batch> sent;
            std::vector<std::future<batch_result>> answers;
            for (int k = 0; k < 20; ++k) {
              sent.push_back(test::random_batch(keys, test::random_batch_size(keys.rng(), 300)));
              answers.push_back(idx.submit(sent.back()));
            }
            for (std::size_t k = 0; k < sent.size(); ++k) {
              const batch_result r = answers[k].get();
              EXPECT_EQ(model.check(sent[k], r), 0u);
              // Reads answered on the caller share the next batch's number.
              EXPECT_GE(r.sequence(), last_sequence);
              last_sequence = r.sequence() + (test::answered_batches::writes(sent[k]) ? 1 : 0);
            }
          } else {
            const batch b = test::random_batch(keys, test::random_batch_size(keys.rng(), step == 4 ? 20000 : 500));
            const batch_result r = idx.execute(b);
            EXPECT_EQ(model.check(b, r), 0u);
            EXPECT_GE(r.sequence(), last_sequence);
            last_sequence = r.sequence() + (test::answered_batches::writes(b) ? 1 : 0);
          }
          if (step == 7 && round % 2 == 1) idx.checkpoint();
        }
        const tandem::stats s = idx.stats();
        EXPECT_GT(s.log_records, 0u);
        EXPECT_TRUE(s.log_error.empty()) << s.log_error;
        if (policy == log_sync::batch) {  // one sync may cover several records
          EXPECT_GT(s.log_syncs, 0u);
          EXPECT_LE(s.log_syncs, s.log_records);
        }
        if (policy == log_sync::none) {
          EXPECT_EQ(s.log_syncs, 0u);
        }
      }
      tandem::index idx(durable(dir.path(), policy));
      EXPECT_TRUE(contents(idx) == as_entries(model.data));
      EXPECT_GT(idx.stats().replayed_batches, 0u);
      idx.verify();
    }
  }
}

TEST(Durability, ReadersGoOnPastBatchesWaitingForTheirSync) {
  // With 8 threads, batches of gets answered directly run as reader tasks
  // while a batch with writes waits for its record's sync; many of them
  // in a row must not take the waiting batch's place. Every future
  // completes with the model's answers, in sequence order.
  test::temp_folder dir("durability-test");
  for (const log_sync policy : {log_sync::batch, log_sync::group}) {
    SCOPED_TRACE(name(policy));
    config c = durable(dir.path(), policy, 8);
    c.group_commit_ops = 0;  // each batch runs alone: the gets as reader tasks
    index_model model;
    test::key_source keys(test::key_pattern::uniform, 200000, 17);
    std::uint64_t first = 0;
    {
      tandem::index idx(c);
      model.load(idx, keys.pairs(100000));
      first = idx.execute(batch{}).sequence() + 1;
      test::answered_batches done;
      std::vector<std::pair<batch, std::future<batch_result>>> sent;
      for (int round = 0; round < 30; ++round) {
        batch w = test::random_batch(keys, 2000, {0, 50, 20, 30, 0, 0, 0, 0});
        sent.emplace_back(w, idx.submit(w));
        for (int r = 0; r < 5; ++r) {
          batch g;
          for (int k = 0; k < 300; ++k) g.get(keys());
          sent.emplace_back(g, idx.submit(g));
        }
      }
      for (auto& [b, f] : sent) {
        ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "a batch was never answered";
        done.add(b, f.get());
      }
      // Replayed on the model in sequence order (the load came first).
      std::size_t bad = 0;
      std::uint64_t expect = first;
      for (const auto& a : done.in_sequence()) {
        EXPECT_EQ(a.r.sequence(), expect++);
        bad += model.check(a.b, a.r);
      }
      EXPECT_EQ(bad, 0u);
      EXPECT_GT(idx.stats().direct_batches, 0u);
    }
    tandem::index reopened(durable(dir.path(), policy, 2));
    EXPECT_TRUE(contents(reopened) == as_entries(model.data));
  }
}

TEST(Durability, CheckpointDropsTheRecordsItCovers) {
  test::temp_folder dir("durability-test");
  index_model model;
  test::key_source keys(test::key_pattern::uniform, 5000, 7);
  std::uint64_t before = 0;
  {
    tandem::index idx(durable(dir.path()));
    EXPECT_EQ(idx.stats().replayed_batches, 0u);
    for (int i = 0; i < 30; ++i) {
      const batch b = test::random_batch(keys, 400);
      EXPECT_EQ(model.check(b, idx.execute(b)), 0u);
    }
    before = idx.stats().log_bytes;
    EXPECT_EQ(before, fs::file_size(dir.file("redo.log")));
    idx.checkpoint();
    EXPECT_EQ(idx.stats().log_bytes, 0u);
    EXPECT_EQ(idx.stats().checkpoints, 1u);
    EXPECT_TRUE(fs::exists(dir.file("checkpoint.snapshot")));
    for (int i = 0; i < 5; ++i) {
      batch b;
      b.put(min_key, i).put(max_key, i).erase(static_cast<key_type>(i) * 1000).get(max_key);
      EXPECT_EQ(model.check(b, idx.execute(b)), 0u);
    }
    batch reads;
    reads.get(1).lower_bound(2).count(0, max_key);
    EXPECT_EQ(model.check(reads, idx.execute(reads)), 0u);  // no record
    EXPECT_EQ(idx.stats().log_records, 30u + 5u);
    EXPECT_LT(idx.stats().log_bytes, before);
  }
  tandem::index idx(durable(dir.path()));
  EXPECT_EQ(idx.stats().replayed_batches, 5u);
  EXPECT_TRUE(contents(idx) == as_entries(model.data));
  idx.verify();
}

TEST(Durability, LoadAndOpenWriteACheckpoint) {
  test::temp_folder dir("durability-test");
  test::temp_folder other("durability-test");
  test::key_source keys(test::key_pattern::edges, 100000, 11);
  const std::vector<entry> pairs = keys.pairs(50000);
  index_model model;
  {
    tandem::index idx(durable(dir.path()));
    for (int i = 0; i < 10; ++i) {
      const batch b = test::random_batch(keys, 300);
      EXPECT_EQ(model.check(b, idx.execute(b)), 0u);
    }
    EXPECT_GT(idx.stats().log_bytes, 0u);
    model.data.clear();
    model.load(idx, pairs);
    EXPECT_EQ(idx.stats().log_bytes, 0u) << "the load's checkpoint covers every record";
    const batch b = test::random_batch(keys, 1000);
    EXPECT_EQ(model.check(b, idx.execute(b)), 0u);
    idx.save(other.file("elsewhere.snapshot"));
  }
  {
    tandem::index idx(durable(dir.path()));
    EXPECT_EQ(idx.stats().replayed_batches, 1u);
    EXPECT_TRUE(contents(idx) == as_entries(model.data));
    batch b;
    b.put(5, 5).erase(pairs[0].key);
    const std::vector<entry> saved = contents(idx);
    (void)idx.execute(b);
    idx.open(other.file("elsewhere.snapshot"));  // back to the saved contents, made durable
    EXPECT_TRUE(contents(idx) == saved);
  }
  tandem::index idx(durable(dir.path()));
  EXPECT_EQ(idx.stats().replayed_batches, 0u);
  EXPECT_TRUE(contents(idx) == as_entries(model.data));
  idx.verify();
}

TEST(Durability, TornTailIsCutAtTheLastWholeBatch) {
  // A log cut at any of a few points, or ending in garbage, reopens to the
  // batches whose records are whole.
  test::temp_folder dir("durability-test");
  std::vector<std::vector<entry>> states;  // after each batch
  std::vector<std::uint64_t> ends;         // log size after each batch
  {
    tandem::index idx(durable(dir.path()));
    test::key_source keys(test::key_pattern::narrow, 2000, 5);
    for (int i = 0; i < 12; ++i) {
      (void)idx.execute(test::random_batch(keys, 200));
      states.push_back(contents(idx));
      ends.push_back(idx.stats().log_bytes);
    }
  }
  const std::string log = dir.file("redo.log");
  std::vector<char> whole(fs::file_size(log));
  std::ifstream(log, std::ios::binary).read(whole.data(), static_cast<std::streamsize>(whole.size()));
  ASSERT_EQ(whole.size(), ends.back());
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 8; ++trial) {
    const std::size_t b = 1 + rng() % (ends.size() - 1);  // cut inside record b
    const std::uint64_t cut = ends[b - 1] + 1 + rng() % (ends[b] - ends[b - 1] - 1);
    {
      std::ofstream out(log, std::ios::binary | std::ios::trunc);
      out.write(whole.data(), static_cast<std::streamsize>(cut));
      if (trial % 2 == 1) {
        for (int k = 0; k < 300; ++k) out.put(static_cast<char>(rng()));
      }
    }
    tandem::index idx(durable(dir.path()));
    EXPECT_TRUE(contents(idx) == states[b - 1]) << "cut at " << cut << " in record " << b;
    EXPECT_EQ(fs::file_size(log), ends[b - 1]);
    idx.verify();
  }
}

TEST(Durability, SecondIndexOnTheFolderIsRefused) {
  test::temp_folder dir("durability-test");
  tandem::index first(durable(dir.path()));
  try {
    tandem::index second(durable(dir.path()));
    FAIL() << "a second index opened the folder";
  } catch (const tandem::error& e) {
    EXPECT_NE(std::string(e.what()).find("redo.lock"), std::string::npos) << e.what();
  }
  batch b;
  b.put(1, 2);
  (void)first.execute(b);  // the first goes on
}

TEST(Durability, CorruptCheckpointIsRefusedNamingTheFile) {
  test::temp_folder dir("durability-test");
  {
    tandem::index idx(durable(dir.path()));
    std::vector<entry> pairs;
    for (key_type k = 0; k < 5000; ++k) pairs.push_back({k * 3, k});
    idx.load(pairs);
  }
  {
    std::fstream f(dir.file("checkpoint.snapshot"), std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(fs::file_size(dir.file("checkpoint.snapshot")) / 2));
    f.put('\x5a');
  }
  try {
    tandem::index idx(durable(dir.path()));
    FAIL() << "a corrupt checkpoint opened";
  } catch (const tandem::error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint.snapshot"), std::string::npos) << e.what();
  }
}

TEST(Durability, ConfigAndCallsWithoutAFolder) {
  config c = durable("");
  c.log_sync_policy = static_cast<log_sync>(3);
  EXPECT_THROW(tandem::index{c}, std::invalid_argument);
  c = durable("");
  c.log_group_us = 10'000'001;
  EXPECT_THROW(tandem::index{c}, std::invalid_argument);
  tandem::index plain(durable(""));
  EXPECT_THROW(plain.checkpoint(), tandem::error);
  batch b;
  b.put(1, 1);
  (void)plain.execute(b);
  EXPECT_EQ(plain.stats().log_records, 0u);
}

TEST(Durability, FailedRecordRefusesWritesUntilACheckpoint) {
  // RLIMIT_FSIZE makes the log's write fail (EFBIG) for a record that would
  // pass it: that batch fails (its writes stay in memory), later batches
  // with writes are refused without running, reads go on; a checkpoint
  // (the snapshot is written after the limit is lifted) starts a fresh log.
  test::temp_folder dir("durability-test");
  index_model model;
  auto owned = std::make_unique<tandem::index>(durable(dir.path(), log_sync::batch, 2));
  tandem::index& idx = *owned;
  test::key_source keys(test::key_pattern::uniform, 50000, 3);
  for (int i = 0; i < 5; ++i) {
    const batch b = test::random_batch(keys, 200);
    EXPECT_EQ(model.check(b, idx.execute(b)), 0u);
  }
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = idx.stats().log_bytes + 4096;
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  batch big;
  for (key_type k = 0; k < 5000; ++k) big.put(k * 7 + 1, k);
  bool failed = false;
  try {
    (void)idx.execute(big);
  } catch (const tandem::error& e) {
    failed = true;
    EXPECT_NE(std::string(e.what()).find("redo log record could not be made durable"), std::string::npos) << e.what();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  ::signal(SIGXFSZ, old_handler);
  ASSERT_TRUE(failed);
  apply(model, big);  // applied in memory
  EXPECT_FALSE(idx.stats().log_error.empty());
  batch refused;
  refused.put(3, 3);
  EXPECT_THROW((void)idx.execute(refused), tandem::error);
  batch reads;
  reads.get(8).count(0, max_key).lower_bound(2);
  EXPECT_EQ(model.check(reads, idx.execute(reads)), 0u);
  idx.checkpoint();
  EXPECT_TRUE(idx.stats().log_error.empty());
  const batch after = test::random_batch(keys, 300);
  EXPECT_EQ(model.check(after, idx.execute(after)), 0u);
  idx.verify();
  // Reopened: the checkpoint holds the failed batch's writes, the fresh
  // log the batch after.
  owned.reset();
  tandem::index reopened(durable(dir.path()));
  EXPECT_TRUE(contents(reopened) == as_entries(model.data));
  EXPECT_EQ(reopened.stats().replayed_batches, 1u);
}

TEST(GpuDurability, GpuRoutedWritesAreLoggedAndReplayed) {
  // Batches routed on the GPU (whole, and split with the CPU), their
  // answers put back on the GPU while the logger thread writes their
  // records; reopened on the GPU and on the CPU alone.
  const auto report = device::query_devices();
  if (report.devices.empty()) GTEST_SKIP() << "no usable GPU: " << report.reason;
  for (const double share : {1.0, 0.5}) {
    SCOPED_TRACE("share " + std::to_string(share));
    test::temp_folder dir("durability-test");
    index_model model;
    test::key_source keys(test::key_pattern::edges, 400000, 21);
    config c = durable(dir.path(), log_sync::group, 8);
    c.device = device_kind::gpu;
    c.gpu_share = share;
    c.min_gpu_batch = 1;
    {
      tandem::index idx(c);
      model.load(idx, keys.pairs(200000));
      std::vector<batch> sent;
      std::vector<std::future<batch_result>> answers;
      for (int i = 0; i < 12; ++i) {
        sent.push_back(test::random_batch(keys, i % 3 == 0 ? 200000 : 30000));
        answers.push_back(idx.submit(sent.back()));
      }
      for (std::size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(model.check(sent[i], answers[i].get()), 0u);
      const tandem::stats s = idx.stats();
      EXPECT_GT(s.gpu_keys, 0u);
      EXPECT_GT(s.gpu_scatters, 0u);
      EXPECT_EQ(s.log_records, 12u);
    }
    {
      tandem::index idx(c);
      EXPECT_EQ(idx.stats().replayed_batches, 12u);
      EXPECT_TRUE(contents(idx) == as_entries(model.data));
      idx.verify();
    }
    tandem::index cpu(durable(dir.path()));
    EXPECT_TRUE(contents(cpu) == as_entries(model.data));
  }
}

// ---- crashes ------------------------------------------------------------------

/// tandem_crash_writer, built beside this test program.
std::string crash_writer_path() {
  return (fs::read_symlink("/proc/self/exe").parent_path() / "tandem_crash_writer").string();
}

/// Runs the writer on `dir` for generation `generation` (`mode`: a
/// policy's name, "-points" after it for the one-key mode), kills it with
/// SIGKILL after `delay`, and returns the numbers it reported.
std::vector<std::uint64_t> spawn_and_kill(const std::string& dir, std::uint64_t seed, std::uint64_t generation,
                                          std::string mode, std::chrono::microseconds delay) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  const std::string exe = crash_writer_path();
  const std::string seed_text = std::to_string(seed), generation_text = std::to_string(generation);
  std::vector<char*> args{const_cast<char*>(exe.c_str()), const_cast<char*>(dir.c_str()),
                          const_cast<char*>(seed_text.c_str()), const_cast<char*>(generation_text.c_str()),
                          mode.data(), nullptr};
  pid_t child = 0;
  const int spawned = ::posix_spawn(&child, exe.c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    throw std::runtime_error("cannot start " + exe + ": " + std::strerror(spawned));
  }
  std::this_thread::sleep_for(delay);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::vector<std::uint64_t> numbers;
  std::uint64_t number = 0;
  std::size_t have = 0;
  char buffer[4096];
  for (;;) {
    const ssize_t r = ::read(fds[0], buffer, sizeof(buffer));
    if (r <= 0) break;
    for (ssize_t k = 0; k < r; ++k) {
      reinterpret_cast<char*>(&number)[have++] = buffer[k];
      if (have == sizeof(number)) {
        numbers.push_back(number);
        have = 0;
      }
    }
  }
  ::close(fds[0]);
  // Killed, or exited on its own with an error (printed to stderr).
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the writer exited with status " << status;
  return numbers;
}

/// The batches the writer reported acknowledged (in order, each once).
std::uint64_t run_and_kill(const std::string& dir, std::uint64_t seed, std::uint64_t generation, log_sync policy,
                           std::chrono::microseconds delay) {
  std::uint64_t acknowledged = 0;
  for (const std::uint64_t number : spawn_and_kill(dir, seed, generation, name(policy), delay)) {
    EXPECT_EQ(number, acknowledged) << "reports out of order";
    acknowledged = number + 1;
  }
  return acknowledged;
}

/// Kills the writer `kills` times (TANDEM_CRASH_KILLS overrides) and checks
/// after each kill that the folder reopens to the model of the acknowledged
/// batches plus a prefix of the ones in flight.
void crash_test(log_sync policy, int kills, std::uint64_t seed) {
  if (const char* env = std::getenv("TANDEM_CRASH_KILLS")) kills = std::atoi(env);
  ASSERT_TRUE(fs::exists(crash_writer_path())) << crash_writer_path() << " is missing (build tandem_crash_writer)";
  test::temp_folder dir("durability-test");
  index_model model;
  std::mt19937_64 rng(seed);
  std::uint64_t total_acknowledged = 0, total_extra = 0;
  for (int g = 0; g < kills; ++g) {
    const auto delay = std::chrono::microseconds(2000 + rng() % 60000);
    const std::uint64_t acked = run_and_kill(dir.path(), seed, static_cast<std::uint64_t>(g), policy, delay);
    tandem::index idx(durable(dir.path(), policy, 2));
    const std::vector<entry> got = contents(idx);
    for (std::uint64_t i = 0; i < acked; ++i) apply(model, test::crash_batch(seed, static_cast<std::uint64_t>(g), i));
    // The reopened index holds the acknowledged batches and maybe some of
    // those in flight, in order.
    std::uint64_t extra = 0;
    while (got != as_entries(model.data) && extra <= test::crash_in_flight) {
      apply(model, test::crash_batch(seed, static_cast<std::uint64_t>(g), acked + extra));
      ++extra;
    }
    ASSERT_TRUE(got == as_entries(model.data))
        << "kill " << g << ": the reopened index is not the " << acked
        << " acknowledged batches plus a prefix of the next " << test::crash_in_flight;
    idx.verify();
    total_acknowledged += acked;
    total_extra += extra;
  }
  ::testing::Test::RecordProperty("kills", kills);
  ::testing::Test::RecordProperty("acknowledged_batches", static_cast<int>(total_acknowledged));
  std::printf("%d kills (%s): %llu batches acknowledged, %llu more found after reopening\n", kills, name(policy),
              static_cast<unsigned long long>(total_acknowledged), static_cast<unsigned long long>(total_extra));
}

/// The one-key mode: threads of the writer calling put, insert and erase
/// at once, each on keys of its own. After each kill, each thread's keys
/// must hold its acknowledged calls, and maybe the one it had in flight.
void point_crash_test(log_sync policy, int kills, std::uint64_t seed) {
  if (const char* env = std::getenv("TANDEM_CRASH_KILLS")) kills = std::atoi(env);
  ASSERT_TRUE(fs::exists(crash_writer_path())) << crash_writer_path() << " is missing (build tandem_crash_writer)";
  test::temp_folder dir("durability-points");
  constexpr std::uint64_t threads = test::crash_point_threads;
  std::vector<index_model> models(threads);
  std::mt19937_64 rng(seed);
  std::uint64_t total_acknowledged = 0, total_extra = 0;
  auto apply_call = [](index_model& m, const test::point_call& c) {
    batch b;
    b.add({c.key, c.value, 0, c.type});
    apply(m, b);
  };
  for (int g = 0; g < kills; ++g) {
    const auto gen = static_cast<std::uint64_t>(g);
    const auto delay = std::chrono::microseconds(30'000 + rng() % 120'000);
    std::vector<std::uint64_t> acked(threads, 0);
    for (const std::uint64_t number : spawn_and_kill(dir.path(), seed, gen, std::string(name(policy)) + "-points", delay)) {
      const std::uint64_t t = number >> 56;
      ASSERT_LT(t, threads);
      EXPECT_EQ(number & ((std::uint64_t{1} << 56) - 1), acked[t]) << "thread " << t << ": reports out of order";
      acked[t] = (number & ((std::uint64_t{1} << 56) - 1)) + 1;
    }
    tandem::index idx(durable(dir.path(), policy, 2));
    const std::vector<entry> got = contents(idx);
    for (std::uint64_t t = 0; t < threads; ++t) {
      const key_type low = (t + 1) << 40, high = ((t + 2) << 40) - 1;
      std::vector<entry> mine;
      for (const entry& e : got) {
        if (e.key >= low && e.key <= high) mine.push_back(e);
      }
      for (std::uint64_t i = 0; i < acked[t]; ++i) apply_call(models[t], test::crash_point_call(t, gen, i));
      if (mine != as_entries(models[t].data)) {  // its call in flight made it too
        apply_call(models[t], test::crash_point_call(t, gen, acked[t]));
        ++total_extra;
      }
      ASSERT_TRUE(mine == as_entries(models[t].data))
          << "kill " << g << ", thread " << t << ": not its " << acked[t] << " acknowledged calls (and maybe the next)";
      total_acknowledged += acked[t];
    }
    idx.verify();
  }
  ::testing::Test::RecordProperty("acknowledged_calls", static_cast<int>(total_acknowledged));
  std::printf("%d kills (%s, one-key calls from %llu threads): %llu calls acknowledged, %llu more found\n", kills,
              name(policy), static_cast<unsigned long long>(threads), static_cast<unsigned long long>(total_acknowledged),
              static_cast<unsigned long long>(total_extra));
}

TEST(DurabilityCrash, SyncBatchKeepsEveryAcknowledgedBatch) { crash_test(log_sync::batch, 20, 101); }
TEST(DurabilityCrash, PointWritesFromThreadsKeepEveryAcknowledgedCall) { point_crash_test(log_sync::batch, 6, 404); }
TEST(DurabilityCrash, GroupPointWritesFromThreadsKeepEveryAcknowledgedCall) {
  point_crash_test(log_sync::group, 4, 505);
}
TEST(DurabilityCrash, SyncGroupKeepsEveryAcknowledgedBatch) { crash_test(log_sync::group, 6, 202); }
TEST(DurabilityCrash, SyncNoneKeepsEveryAcknowledgedBatch) { crash_test(log_sync::none, 6, 303); }

}  // namespace
