#include "persist.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <oneapi/tbb/parallel_sort.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>

namespace tandem_bench {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

constexpr std::size_t piece = std::size_t{16} << 20;

}  // namespace

void plain_write(const std::string& path, const unsigned char* data, std::size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", path);
  for (std::size_t at = 0; at < bytes;) {
    const ssize_t w = ::write(fd, data + at, std::min(piece, bytes - at));
    if (w <= 0) {
      ::close(fd);
      fail("cannot write", path);
    }
    at += static_cast<std::size_t>(w);
  }
  if (::fsync(fd) != 0) fail("cannot fsync", path);
  ::close(fd);
}

namespace {

/// Reads the whole of `path` into `data` in 16 MiB pieces. @return bytes read
std::size_t plain_read(const std::string& path, unsigned char* data, std::size_t room) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open", path);
  std::size_t at = 0;
  for (;;) {
    const ssize_t r = ::read(fd, data + at, std::min(piece, room - at));
    if (r < 0) fail("cannot read", path);
    if (r == 0 || at + static_cast<std::size_t>(r) == room) {
      at += static_cast<std::size_t>(r);
      break;
    }
    at += static_cast<std::size_t>(r);
  }
  ::close(fd);
  return at;
}

/// Drops `path`'s pages from the page cache (they are clean after fsync), so
/// that the next read comes from the disk.
void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open", path);
  (void)::fdatasync(fd);
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

std::size_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("cannot stat", path);
  return static_cast<std::size_t>(st.st_size);
}

}  // namespace

std::vector<json> run_save(const options& opt, const tandem::config& cfg, tandem::index& idx) {
  const std::size_t n = static_cast<std::size_t>(*parse_count(opt.keys));
  const std::string path = opt.snapshot_path;
  const std::string plain = path + ".plain";
  std::printf("save: %s random pairs; snapshot %s, plain file %s (same folder, same disk)\n", pow2_text(n).c_str(),
              path.c_str(), plain.c_str());
  std::vector<tandem::key_type> keys(n);
  std::vector<tandem::value_type> values(n);
  for (std::size_t i = 0; i < n; ++i) {
    keys[i] = spread_key(i ^ opt.seed);
    values[i] = i;
  }
  idx.load(keys.data(), values.data(), n);
  const std::size_t held = idx.size();

  std::vector<json> rows;
  auto row = [&](const char* what, double seconds, std::size_t bytes) {
    json r;
    r["system"] = what;
    r["workload"] = "save";
    r["keys"] = n;
    r["seconds"] = seconds;
    r["bytes"] = bytes;
    r["gb_per_s"] = static_cast<double>(bytes) / seconds / 1e9;
    r["threads"] = cfg.threads;
    rows.push_back(r);
    return static_cast<double>(bytes) / seconds / 1e9;
  };

  // Save, then the plain write of as many bytes.
  auto t0 = clock_type::now();
  idx.save(path);
  const double save_s = seconds_since(t0);
  const std::size_t bytes = file_size(path);
  const double save_rate = row("tandem save", save_s, bytes);
  // As many bytes of random words as the snapshot (a disk that compresses
  // or skips zeros would flatter a file of zeros).
  std::vector<unsigned char> buffer(bytes);
  for (std::size_t at = 0; at + sizeof(std::uint64_t) <= bytes; at += sizeof(std::uint64_t)) {
    const std::uint64_t word = spread_key(at ^ ~opt.seed);
    std::memcpy(buffer.data() + at, &word, sizeof word);
  }
  t0 = clock_type::now();
  plain_write(plain, buffer.data(), bytes);
  const double write_s = seconds_since(t0);
  const double write_rate = row("plain write", write_s, bytes);

  // From the disk (both files evicted from the page cache), twice: some
  // disks (a VM's) serve recently touched files from a cache of their own,
  // and the plain file was written after the snapshot. The first round
  // reads each file once; the second, where the disk has seen both alike,
  // is the comparison.
  auto open_once = [&] {
    tandem::index opened(cfg);
    const auto s0 = clock_type::now();
    opened.open(path);
    const double s = seconds_since(s0);
    if (opened.size() != held) {
      throw std::runtime_error("the opened index holds " + std::to_string(opened.size()) + " keys, the saved one " +
                               std::to_string(held));
    }
    return s;
  };
  auto read_once = [&] {
    const auto s0 = clock_type::now();
    if (plain_read(plain, buffer.data(), buffer.size()) != bytes) throw std::runtime_error("short read of " + plain);
    return seconds_since(s0);
  };
  evict(plain);
  evict(path);
  const double read1_s = read_once();
  const double open1_s = open_once();
  evict(plain);
  evict(path);
  const double open2_s = open_once();
  const double read2_s = read_once();
  const double read_s = read2_s, open_s = open2_s;
  const double read_rate = row("plain read", read_s, bytes);
  const double open_rate = row("tandem open", open_s, bytes);
  // Open again from the page cache (the file was just read).
  double cached_s = 0;
  {
    tandem::index opened(cfg);
    t0 = clock_type::now();
    opened.open(path);
    cached_s = seconds_since(t0);
  }
  row("tandem open (page cache)", cached_s, bytes);

  // The bulk load of the same pairs, sorted, from memory.
  std::vector<tandem::entry> sorted(n);
  for (std::size_t i = 0; i < n; ++i) sorted[i] = {keys[i], values[i]};
  tbb::parallel_sort(sorted.begin(), sorted.end(),
                     [](const tandem::entry& a, const tandem::entry& b) { return a.key < b.key; });
  for (std::size_t i = 0; i < n; ++i) {
    keys[i] = sorted[i].key;
    values[i] = sorted[i].value;
  }
  sorted = {};
  double load_s = 0;
  {
    tandem::index loaded(cfg);
    t0 = clock_type::now();
    loaded.load(keys.data(), values.data(), n);
    load_s = seconds_since(t0);
  }
  row("sorted bulk load", load_s, n * 16);

  // What waits for a save: a batch of gets and a batch of puts submitted
  // while one runs.
  double gets_s = 0, puts_s = 0, second_save_s = 0;
  {
    std::future<void> saving = std::async(std::launch::async, [&] {
      const auto s0 = clock_type::now();
      idx.save(path);
      second_save_s = seconds_since(s0);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    tandem::batch gets, puts;
    for (std::size_t i = 0; i < 4096; ++i) gets.get(keys[(i * 7919) % n]);
    for (std::size_t i = 0; i < 4096; ++i) puts.put(keys[(i * 104729) % n], i);
    t0 = clock_type::now();
    (void)idx.execute(std::move(gets));
    gets_s = seconds_since(t0);
    t0 = clock_type::now();
    (void)idx.execute(std::move(puts));
    puts_s = seconds_since(t0);
    saving.get();
  }
  std::remove(plain.c_str());
  std::remove(path.c_str());

  std::printf("tandem save: %.3f s, %.2f GB/s (%zu bytes); plain sequential write of as many bytes: %.3f s, %.2f "
              "GB/s; save/plain %.2f\n",
              save_s, save_rate, bytes, write_s, write_rate, save_rate / write_rate);
  std::printf("tandem open (from the disk, second round): %.3f s, %.2f GB/s; plain sequential read: %.3f s, %.2f GB/s; "
              "open/plain %.2f (first round, each file's first read since written: open %.3f s, plain %.3f s); open "
              "from the page cache %.3f s\n",
              open_s, open_rate, read_s, read_rate, open_rate / read_rate, open1_s, read1_s, cached_s);
  std::printf("sorted bulk load of the same pairs from memory: %.3f s; open / bulk load %.2fx (from the page cache "
              "%.2fx)\n",
              load_s, open_s / load_s, cached_s / load_s);
  std::printf("during a save of %.3f s: a batch of 4096 gets answered in %.4f s, a batch of 4096 puts (submitted "
              "after it) in %.4f s: writes wait for the save, reads do not\n",
              second_save_s, gets_s, puts_s);
  return rows;
}

}  // namespace tandem_bench
