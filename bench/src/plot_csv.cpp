// Reading a CSV of tandem-bench rows back (read_csv) and plotting it as what
// it holds (plot_rows).
#include "gnuplot.hpp"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <utility>

namespace tandem_bench {
namespace {

/// Splits one CSV line (fields as csv_field writes them).
std::vector<std::pair<std::string, bool>> split_csv(const std::string& line) {
  std::vector<std::pair<std::string, bool>> out;  // (text, was quoted)
  std::string cur;
  bool in_quotes = false, was_quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_quotes) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        in_quotes = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      in_quotes = was_quoted = true;
    } else if (c == ',') {
      out.emplace_back(std::move(cur), was_quoted);
      cur.clear();
      was_quoted = false;
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.emplace_back(std::move(cur), was_quoted);
  return out;
}

}  // namespace

std::vector<json> read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open '" + path + "'");
  std::string line;
  if (!std::getline(in, line)) throw std::runtime_error("'" + path + "' is empty");
  std::vector<std::string> header;
  for (auto& [t, q] : split_csv(line)) header.push_back(t);
  std::vector<json> rows;
  std::size_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line == "\r") continue;
    const auto fields = split_csv(line);
    if (fields.size() != header.size()) {
      throw std::runtime_error("'" + path + "' line " + std::to_string(line_no) + ": " +
                               std::to_string(fields.size()) + " fields, the header has " +
                               std::to_string(header.size()));
    }
    json row = json::object();
    for (std::size_t i = 0; i < header.size(); ++i) {
      const auto& [t, was_quoted] = fields[i];
      if (was_quoted) {
        row[header[i]] = t;
      } else if (t.empty()) {
        row[header[i]] = nullptr;
      } else if (t == "true" || t == "false") {
        row[header[i]] = t == "true";
      } else {
        char* end = nullptr;
        errno = 0;
        const double d = std::strtod(t.c_str(), &end);
        if (end == t.c_str() + t.size() && errno == 0) {
          row[header[i]] = d;
        } else {
          row[header[i]] = t;
        }
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

plot_outcome plot_rows(const std::vector<json>& rows, const std::string& png) {
  using plot_detail::field_is;
  using plot_detail::get;
  bool share = false, latency = false;
  for (const json& r : rows) {
    share = share || field_is(r, "sweep", "share");
    latency = latency || field_is(r, "sweep", "latency") || get(r, "p99_us").is_number();
  }
  if (share) return plot_share_sweep(rows, png);
  if (latency) return plot_latency(rows, png);
  if (!rows.empty() && rows.front().contains("round")) return plot_churn(rows, png);
  return plot_runs(rows, png);
}

}  // namespace tandem_bench
