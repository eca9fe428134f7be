#include "report.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <utility>

namespace tandem_bench {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::size_t b = colon + 1;
        while (b < line.size() && line[b] == ' ') ++b;
        return line.substr(b);
      }
    }
  }
  return "unknown";
}

unsigned cpu_count() { return std::thread::hardware_concurrency(); }

progress_bar::progress_bar(std::string label, std::size_t total, std::string unit)
    : label_(std::move(label)), total_(total), unit_(std::move(unit)), active_(isatty(STDERR_FILENO) != 0) {
  if (active_) update(0);
}

progress_bar::~progress_bar() { finish(); }

void progress_bar::update(std::size_t done) {
  if (!active_) return;
  constexpr int width = 30;
  const double f = total_ == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total_);
  const int fill = static_cast<int>(f * width);
  std::string bar(static_cast<std::size_t>(fill), '#');
  bar.append(static_cast<std::size_t>(width - fill), '.');
  std::fprintf(stderr, "\r%-18s [%s] %5.1f%%  %zu/%zu %s", label_.c_str(), bar.c_str(), 100.0 * f, done, total_,
               unit_.c_str());
  std::fflush(stderr);
}

void progress_bar::finish() {
  if (!active_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  active_ = false;
}

void write_json(const std::string& path, const std::vector<json>& rows) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw std::runtime_error("cannot open '" + path + "' for writing");
  out << json(rows).dump(2) << '\n';
  if (!out) throw std::runtime_error("cannot write '" + path + "'");
}

namespace {

std::string csv_field(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) {
      if (c == '"') q += '"';
      q += c;
    }
    return q + "\"";
  }
  return v.dump();
}

}  // namespace

void write_csv(const std::string& path, const std::vector<json>& rows, bool append) {
  bool header = true;
  if (append) {
    std::ifstream in(path, std::ios::ate);
    header = !in || in.tellg() <= 0;
  }
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  if (!out) throw std::runtime_error("cannot open '" + path + "' for writing");
  if (rows.empty()) return;
  if (header) {
    bool first = true;
    for (const auto& item : rows.front().items()) {
      out << (first ? "" : ",") << item.key();
      first = false;
    }
    out << '\n';
  }
  for (const json& row : rows) {
    bool first = true;
    for (const auto& item : rows.front().items()) {
      out << (first ? "" : ",") << (row.contains(item.key()) ? csv_field(row[item.key()]) : "");
      first = false;
    }
    out << '\n';
  }
  if (!out) throw std::runtime_error("cannot write '" + path + "'");
}

}  // namespace tandem_bench
