#pragma once
/// @file
/// tandem-bench output helpers: host facts, the stderr progress bar, and
/// the CSV/JSON writers (one row/object per system).

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem_bench {

using json = nlohmann::ordered_json;
/// SplitMix64's finalizer: distinct keys spread over the key space for
/// distinct i (-w churn's random keys, -w save's pairs).
[[nodiscard]] inline std::uint64_t spread_key(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

[[nodiscard]] std::string host_name();
/// "model name" of /proc/cpuinfo, or "unknown".
[[nodiscard]] std::string cpu_model();
[[nodiscard]] unsigned cpu_count();

/// A one-line progress bar on stderr, redrawn on each update; silent when
/// stderr is not a terminal.
class progress_bar {
 public:
  progress_bar(std::string label, std::size_t total, std::string unit = "batches");
  ~progress_bar();
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;
  void update(std::size_t done);
  /// Erases the bar (also done by the destructor).
  void finish();

 private:
  std::string label_;
  std::size_t total_;
  std::string unit_;
  bool active_;
};

/// Writes `rows` as one JSON array of objects.
void write_json(const std::string& path, const std::vector<json>& rows);
/// Writes `rows` as CSV, columns in the order of the first row's fields;
/// with `append`, adds to an existing non-empty file without a header.
void write_csv(const std::string& path, const std::vector<json>& rows, bool append);

}  // namespace tandem_bench
