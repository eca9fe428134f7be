#pragma once
// Helpers of the tests that compare whole contents: every pair of an index,
// a model's pairs in the same form, and a temporary folder for files.

#include <tandem/tandem.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace tandem::test {

/// Every pair of the index, in key order (one scan of everything).
inline std::vector<entry> contents(tandem::index& idx) {
  batch b;
  b.scan(min_key, max_key, max_scan_limit);
  const batch_result r = idx.execute(std::move(b));
  EXPECT_TRUE(r.ok(0)) << r.error(0);
  const entry_span s = r.scan(0);
  return {s.begin(), s.end()};
}

/// A model's pairs, in key order.
inline std::vector<entry> as_entries(const std::map<key_type, value_type>& m) {
  std::vector<entry> v;
  v.reserve(m.size());
  for (const auto& [k, x] : m) v.push_back({k, x});
  return v;
}

/// A fresh folder under the system's temporary folder, named after `what`,
/// the process and a counter; removed at the end.
class temp_folder {
 public:
  explicit temp_folder(const std::string& what) {
    path_ = std::filesystem::temp_directory_path() /
            ("tandem-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~temp_folder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_folder(const temp_folder&) = delete;
  temp_folder& operator=(const temp_folder&) = delete;
  [[nodiscard]] std::string path() const { return path_.string(); }
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
  static inline int counter_ = 0;
};

}  // namespace tandem::test
