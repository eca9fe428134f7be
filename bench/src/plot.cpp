#include "plot.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace tandem_bench {
namespace {

/// A gnuplot single-quoted string (only ' needs doubling).
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += '\'';
    q += c;
  }
  return q + "'";
}

/// A gnuplot double-quoted string: backslash escapes, newlines as \n.
std::string double_quoted(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '\\' || c == '"') q += '\\';
    if (c == '\n') {
      q += "\\n";
      continue;
    }
    q += c;
  }
  return q + "\"";
}

std::string text(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == std::floor(d) && std::fabs(d) < 1e18) return std::to_string(static_cast<long long>(d));
  }
  return v.dump();
}

double number(const json& v) {
  if (v.is_number()) return v.get<double>();
  return std::nan("");
}

std::string pow2(const json& v) {
  const double d = number(v);
  if (!(d >= 1)) return text(v);
  const auto n = static_cast<unsigned long long>(d);
  if ((n & (n - 1)) == 0) {
    int k = 0;
    while ((1ull << k) != n) ++k;
    return "2^" + std::to_string(k);
  }
  return std::to_string(n);
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

bool executable(const std::string& p) { return !p.empty() && access(p.c_str(), X_OK) == 0; }

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

std::string find_gnuplot() {
#ifdef TANDEM_BENCH_GNUPLOT
  if (executable(TANDEM_BENCH_GNUPLOT)) return TANDEM_BENCH_GNUPLOT;
#endif
  const char* path = std::getenv("PATH");
  if (!path) return "";
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string p = dir + "/gnuplot";
    if (executable(p)) return p;
  }
  return "";
}

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

/// Runs gnuplot on `script` (which writes `png`) when one is found.
plot_outcome render(const std::string& script, const std::string& png) {
  plot_outcome result;
  const std::string gnuplot = find_gnuplot();
  if (gnuplot.empty()) {
    result.message = "plot: gnuplot not found (none at build time, none on PATH): wrote " + script +
                     "; on a machine with gnuplot, `gnuplot " + script + "` writes " + png;
    return result;
  }
  std::string arg0 = gnuplot, arg1 = script;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, gnuplot.c_str(), nullptr, nullptr, argv, environ);
  if (rc != 0) {
    result.message = "plot: could not start " + gnuplot + ": " + std::strerror(rc) + "; wrote " + script;
    return result;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && access(png.c_str(), R_OK) == 0) {
    result.rendered = true;
    result.message = "plot: " + png + " (gnuplot " + gnuplot + ", script " + script + ")";
  } else {
    result.message = "plot: " + gnuplot + " " + script + " failed (" +
                     (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) : "killed") +
                     "); no " + png;
  }
  return result;
}

plot_outcome plot_share_sweep(const std::vector<json>& rows, const std::string& png) {
  struct point {
    double requested, used, mops;
  };
  std::vector<point> fixed;
  std::vector<point> automatic;
  std::vector<std::pair<std::string, double>> lines;
  const json* first = nullptr;
  for (const json& r : rows) {
    const double ops_per_s = r.contains("ops_per_s") ? number(r["ops_per_s"]) : std::nan("");
    if (!(ops_per_s >= 0)) continue;
    const bool is_point = r.contains("sweep") && r["sweep"].is_string() && r["sweep"].get<std::string>() == "share";
    if (!is_point) {
      lines.emplace_back(r.contains("system") ? text(r["system"]) : "?", ops_per_s / 1e6);
      continue;
    }
    if (!first) first = &r;
    const double used = r.contains("gpu_share_used") ? number(r["gpu_share_used"]) : std::nan("");
    const json& req = r.contains("gpu_share") ? r["gpu_share"] : json(nullptr);
    if (req.is_string() && req.get<std::string>() == "auto") {
      automatic.push_back({std::nan(""), used, ops_per_s / 1e6});
    } else if (req.is_number()) {
      fixed.push_back({req.get<double>(), used, ops_per_s / 1e6});
    }
  }
  if (!first) throw std::runtime_error("no --sweep share rows to plot");
  std::sort(fixed.begin(), fixed.end(), [](const point& a, const point& b) { return a.requested < b.requested; });

  double lo = INFINITY, hi = 0;
  auto extend = [&](double y) {
    if (y > 0) {
      lo = std::min(lo, y);
      hi = std::max(hi, y);
    }
  };
  for (const point& p : fixed) extend(p.mops);
  for (const point& p : automatic) extend(p.mops);
  for (const auto& l : lines) extend(l.second);
  const bool log_y = hi > 0 && lo < INFINITY && hi / lo > 20;

  std::string base = png;
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".png") == 0) base.resize(base.size() - 4);
  const std::string script = base + ".gp";

  const json& f = *first;
  std::string title = "tandem-bench --sweep share: workload " + text(f.value("workload", json("?"))) + ", " +
                      pow2(f.value("keys", json(nullptr))) + " keys, " + pow2(f.value("ops", json(nullptr))) +
                      " ops in batches of " + pow2(f.value("batch", json(nullptr))) + ", " +
                      text(f.value("dist", json("?"))) + ", " + text(f.value("threads", json("?"))) + " threads";
  std::string subtitle = "routing: " + text(f.value("device_used", json("?"))) + "; host " +
                         text(f.value("host", json("?"))) + " (" + text(f.value("cpu_model", json("?"))) + ")";

  std::ofstream out(script, std::ios::trunc);
  if (!out) throw std::runtime_error("cannot open '" + script + "' for writing");
  out << "# tandem-bench --sweep share: throughput against the GPU share (written by tandem-bench).\n"
      << "# Render: gnuplot " << quoted(script) << "   (another output: gnuplot -e \"outfile='x.png'\" "
      << quoted(script) << ")\n"
      << "if (!exists(\"outfile\")) outfile = " << quoted(png) << "\n"
      << "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
      << "  set terminal pngcairo size 1200,720 noenhanced font \"sans,11\"\n"
      << "} else {\n"
      << "  set terminal png size 1200,720 noenhanced\n"
      << "}\n"
      << "set output outfile\n"
      << "set title " << double_quoted(title + "\n" + subtitle) << "\n"
      << "set xlabel 'GPU share requested (index::set_gpu_share); auto: at the share it used'\n"
      << "set ylabel 'throughput, M ops/s" << (log_y ? " (log scale)" : "") << "'\n"
      << "set y2label 'GPU share used (keys routed on the GPU / all)'\n"
      << "set xrange [-0.05:1.05]\n"
      << "set y2range [-0.05:1.05]\n"
      << "set xtics 0.1\n"
      << "set ytics nomirror\n"
      << "set y2tics 0.2\n"
      << (log_y ? "set logscale y\nset yrange [*:*]\n" : "set yrange [0:*]\n")
      << "set grid xtics ytics\n"
      << "set key below\n";
  out << "$fixed_share << EOD\n# requested used Mops\n";
  for (const point& p : fixed) out << p.requested << ' ' << p.used << ' ' << p.mops << '\n';
  out << "EOD\n$auto_share << EOD\n# used Mops\n";
  for (const point& p : automatic) out << p.used << ' ' << p.mops << '\n';
  out << "EOD\n";
  out << "plot $fixed_share using 1:3 with linespoints lw 2 pt 7 ps 1.4 lc rgb '#1f77b4' title 'tandem, fixed share'";
  if (!automatic.empty()) {
    out << ", \\\n     $auto_share using 1:2 with points pt 9 ps 3 lc rgb '#d62728' title "
        << quoted("tandem, auto (" + fmt("%.1f", automatic.front().mops) + " M ops/s at share " +
                  fmt("%.2f", automatic.front().used) + ")");
  }
  out << ", \\\n     $fixed_share using 1:2 axes x1y2 with linespoints dt 3 pt 6 lc rgb 'gray40' "
         "title 'GPU share used (right axis)'";
  static const char* const colours[] = {"#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  std::size_t ci = 0;
  for (const auto& [name, mops] : lines) {
    if (!(mops > 0)) continue;
    out << ", \\\n     " << mops << " with lines dt 2 lw 2 lc rgb '" << colours[ci++ % 6] << "' title "
        << quoted(name + " (" + fmt("%.1f", mops) + " M ops/s)");
  }
  out << "\n";
  out.close();
  if (!out) throw std::runtime_error("cannot write '" + script + "'");

  return render(script, png);
}

plot_outcome plot_latency(const std::vector<json>& rows, const std::string& png) {
  // One series per (system, clients): batch, p50, p99, p99.9, M ops/s.
  struct series {
    std::string name;
    std::vector<std::array<double, 5>> points;
  };
  std::vector<series> all;
  for (const json& r : rows) {
    if (!r.contains("p99_us")) continue;
    const std::string name = text(r["system"]) + ", " + text(r["clients"]) + " client" +
                             (number(r["clients"]) == 1 ? "" : "s");
    auto it = std::find_if(all.begin(), all.end(), [&](const series& x) { return x.name == name; });
    if (it == all.end()) it = all.insert(all.end(), series{name, {}});
    it->points.push_back({number(r["batch"]), number(r["p50_us"]), number(r["p99_us"]), number(r["p999_us"]),
                          number(r["ops_per_s"]) / 1e6});
  }
  if (all.empty()) throw std::runtime_error("no --sweep latency rows to plot");
  std::string base = png;
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".png") == 0) base.resize(base.size() - 4);
  const std::string script = base + ".gp";
  const json& f = rows.front();
  const std::string title = "tandem-bench --sweep latency: workload " + text(f.value("workload", json("?"))) + ", " +
                            pow2(f.value("keys", json(nullptr))) + " keys; routing " +
                            text(f.value("device_used", json("?"))) + "; host " + text(f.value("host", json("?")));
  std::ofstream out(script, std::ios::trunc);
  if (!out) throw std::runtime_error("cannot open '" + script + "' for writing");
  out << "# tandem-bench --sweep latency (written by tandem-bench): left, p50 (dashed) and p99 latency against\n"
      << "# batch size; right, throughput against p99 latency. Render: gnuplot " << quoted(script) << "\n"
      << "if (!exists(\"outfile\")) outfile = " << quoted(png) << "\n"
      << "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
      << "  set terminal pngcairo size 1600,720 noenhanced font \"sans,11\"\n"
      << "} else {\n"
      << "  set terminal png size 1600,720 noenhanced\n"
      << "}\n"
      << "set output outfile\n"
      << "set multiplot layout 1,2 title " << double_quoted(title) << "\n"
      << "set grid\nset key top left\nset logscale xy\n";
  for (std::size_t i = 0; i < all.size(); ++i) {
    out << "$s" << i << " << EOD\n# batch p50_us p99_us p999_us Mops\n";
    for (const auto& p : all[i].points) out << p[0] << ' ' << p[1] << ' ' << p[2] << ' ' << p[3] << ' ' << p[4] << '\n';
    out << "EOD\n";
  }
  static const char* const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  out << "set xlabel 'ops per batch'\nset ylabel 'latency, microseconds (submit to answer)'\nplot ";
  for (std::size_t i = 0; i < all.size(); ++i) {
    const char* c = colours[i % 6];
    out << (i ? ", \\\n     " : "") << "$s" << i << " using 1:3 with linespoints lw 2 pt 7 lc rgb '" << c
        << "' title " << quoted(all[i].name + ", p99") << ", $s" << i << " using 1:2 with linespoints dt 2 pt 6 lc rgb '"
        << c << "' notitle";
  }
  out << "\nset xlabel 'p99 latency, microseconds'\nset ylabel 'throughput, M ops/s'\nplot ";
  for (std::size_t i = 0; i < all.size(); ++i) {
    out << (i ? ", \\\n     " : "") << "$s" << i << " using 3:5 with linespoints lw 2 pt 7 lc rgb '" << colours[i % 6]
        << "' title " << quoted(all[i].name);
  }
  out << "\nunset multiplot\n";
  out.close();
  if (!out) throw std::runtime_error("cannot write '" + script + "'");
  return render(script, png);
}

}  // namespace tandem_bench
