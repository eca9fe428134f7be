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

/// FILE.gp for FILE.png (FILE.png.gp for any other name).
std::string script_path(const std::string& png) {
  std::string base = png;
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".png") == 0) base.resize(base.size() - 4);
  return base + ".gp";
}

/// Opens `script` and writes what every plot's script starts with: what it
/// draws, how to render it, the output file (another with
/// `gnuplot -e "outfile='x.png'"`) and the terminal (pngcairo where gnuplot
/// has it, else png) at `width` x `height` pixels.
std::ofstream open_script(const std::string& script, const std::string& png, const std::string& what, int width,
                          int height) {
  std::ofstream out(script, std::ios::trunc);
  if (!out) throw std::runtime_error("cannot open '" + script + "' for writing");
  out << "# tandem-bench " << what << " (written by tandem-bench).\n"
      << "# Render: gnuplot " << quoted(script) << "   (another output: gnuplot -e \"outfile='x.png'\" "
      << quoted(script) << ")\n"
      << "if (!exists(\"outfile\")) outfile = " << quoted(png) << "\n"
      << "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
      << "  set terminal pngcairo size " << width << ',' << height << " noenhanced font \"sans,11\"\n"
      << "} else {\n"
      << "  set terminal png size " << width << ',' << height << " noenhanced\n"
      << "}\n"
      << "set output outfile\n";
  return out;
}

void close_script(std::ofstream& out, const std::string& script) {
  out.close();
  if (!out) throw std::runtime_error("cannot write '" + script + "'");
}

/// A value printed above a bar: 3 significant digits or more.
std::string short_number(double x) {
  const double a = std::fabs(x);
  return fmt(a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : a >= 1 ? "%.2f" : "%.3g", x);
}

/// r[field], or null where the row has no such field.
json get(const json& r, const char* field) { return r.contains(field) ? r[field] : json(nullptr); }

/// `parts` joined by `sep` into lines of at most `width` characters (a part
/// longer than that on a line of its own), the lines joined by newlines.
std::string wrap(const std::vector<std::string>& parts, const std::string& sep, std::size_t width) {
  std::string out, line;
  for (const std::string& p : parts) {
    if (!line.empty() && line.size() + sep.size() + p.size() > width) {
      std::string end = sep;
      while (!end.empty() && end.back() == ' ') end.pop_back();
      out += (out.empty() ? "" : "\n") + line + end;
      line.clear();
    }
    line += (line.empty() ? "" : sep) + p;
  }
  if (!line.empty()) out += (out.empty() ? "" : "\n") + line;
  return out;
}

bool field_is(const json& r, const char* field, const char* value) {
  const json v = get(r, field);
  return v.is_string() && v.get<std::string>() == value;
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

namespace {

/// Runs gnuplot on `script` (which writes `png`) when one is found; `what`
/// names the plot in the message.
plot_outcome render(const std::string& script, const std::string& png, const std::string& what) {
  plot_outcome result;
  const std::string gnuplot = find_gnuplot();
  if (gnuplot.empty()) {
    result.message = "plot (" + what + "): gnuplot not found (none at build time, none on PATH): wrote " + script +
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
    result.message = "plot (" + what + "): " + png + " (gnuplot " + gnuplot + ", script " + script + ")";
  } else {
    result.message = "plot: " + gnuplot + " " + script + " failed (" +
                     (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) : "killed") +
                     "); no " + png;
  }
  return result;
}

}  // namespace

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
    const bool is_point = field_is(r, "sweep", "share");
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
  const std::string script = script_path(png);

  const json& f = *first;
  std::string title = "tandem-bench --sweep share: workload " + text(f.value("workload", json("?"))) + ", " +
                      pow2(f.value("keys", json(nullptr))) + " keys, " + pow2(f.value("ops", json(nullptr))) +
                      " ops in batches of " + pow2(f.value("batch", json(nullptr))) + ", " +
                      text(f.value("dist", json("?"))) + ", " + text(f.value("threads", json("?"))) + " threads";
  std::string subtitle = "routing: " + text(f.value("device_used", json("?"))) + "; host " +
                         text(f.value("host", json("?"))) + " (" + text(f.value("cpu_model", json("?"))) + ")";

  std::ofstream out = open_script(script, png, "--sweep share: throughput against the GPU share", 1200, 720);
  out << "set title " << double_quoted(title + "\n" + subtitle) << "\n"
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
  close_script(out, script);
  return render(script, png, "share sweep");
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
    const std::string name = text(get(r, "system")) + ", " + text(get(r, "clients")) + " client" +
                             (number(get(r, "clients")) == 1 ? "" : "s");
    auto it = std::find_if(all.begin(), all.end(), [&](const series& x) { return x.name == name; });
    if (it == all.end()) it = all.insert(all.end(), series{name, {}});
    it->points.push_back({number(get(r, "batch")), number(get(r, "p50_us")), number(get(r, "p99_us")),
                          number(get(r, "p999_us")), number(get(r, "ops_per_s")) / 1e6});
  }
  if (all.empty()) throw std::runtime_error("no --sweep latency rows to plot");
  const std::string script = script_path(png);
  const json& f = rows.front();
  const std::string host = text(get(f, "host"));
  const std::string title = "tandem-bench --sweep latency: workload " + text(f.value("workload", json("?"))) + ", " +
                            pow2(f.value("keys", json(nullptr))) + " keys; routing " +
                            text(f.value("device_used", json("?"))) + (host.empty() ? "" : "; host " + host) +
                            "\nleft: p99 (solid) and p50 (dashed) latency against batch size; right: throughput "
                            "against p99 latency, each point labelled with its batch size";
  std::ofstream out = open_script(script, png,
                                  "--sweep latency: left, p50 (dashed) and p99 latency against batch size; right, "
                                  "throughput against p99 latency",
                                  1600, 720);
  out << "set multiplot layout 1,2 title " << double_quoted(title) << "\n"
      << "set grid\nset key below\nset logscale xy\n";
  for (std::size_t i = 0; i < all.size(); ++i) {
    out << "$s" << i << " << EOD\n# batch p50_us p99_us p999_us Mops\n";
    for (const auto& p : all[i].points) out << p[0] << ' ' << p[1] << ' ' << p[2] << ' ' << p[3] << ' ' << p[4] << '\n';
    out << "EOD\n";
  }
  static const char* const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  out << "set xlabel 'ops per batch (log scale)'\nset ylabel 'latency, microseconds (submit to answer; log scale)'\nplot ";
  for (std::size_t i = 0; i < all.size(); ++i) {
    const char* c = colours[i % 6];
    out << (i ? ", \\\n     " : "") << "$s" << i << " using 1:3 with linespoints lw 2 pt 7 lc rgb '" << c
        << "' title " << quoted(all[i].name + ", p99") << ", $s" << i << " using 1:2 with linespoints dt 2 pt 6 lc rgb '"
        << c << "' notitle";
  }
  out << "\nset xlabel 'p99 latency, microseconds (log scale)'\nset ylabel 'throughput, M ops/s (log scale)'\nplot ";
  for (std::size_t i = 0; i < all.size(); ++i) {
    out << (i ? ", \\\n     " : "") << "$s" << i << " using 3:5 with linespoints lw 2 pt 7 lc rgb '" << colours[i % 6]
        << "' title " << quoted(all[i].name) << ", $s" << i
        << " using 3:5:(sprintf('%d', $1)) with labels offset 0,0.8 font ',8' tc rgb '" << colours[i % 6]
        << "' notitle";
  }
  out << "\nunset multiplot\n";
  close_script(out, script);
  return render(script, png, "latency sweep");
}

plot_outcome plot_churn(const std::vector<json>& rows, const std::string& png) {
  std::vector<std::array<double, 5>> points;  // round, leaf MB, resident MB, leaves, M ops/s
  for (const json& r : rows) {
    if (!r.contains("round")) continue;
    points.push_back({number(get(r, "round")), number(get(r, "leaf_bytes")) / 1e6,
                      number(get(r, "resident_bytes")) / 1e6, number(get(r, "leaves")),
                      number(get(r, "ops_per_s")) / 1e6});
  }
  if (points.empty()) throw std::runtime_error("no -w churn rows to plot");
  const json& f = rows.front();
  const std::string script = script_path(png);
  const std::string title = "tandem-bench -w churn: a sliding window of " + pow2(get(f, "keys")) + " " +
                            text(get(f, "key_order")) + " keys, keys/16 inserted and erased a round; " +
                            text(get(f, "threads")) + " threads, routing " +
                            text(get(f, "device_used")).substr(0, text(get(f, "device_used")).find(" ("));
  std::ofstream out = open_script(script, png, "-w churn: memory, leaves and throughput per round", 1400, 900);
  out << "set multiplot layout 2,1 title " << double_quoted(title) << "\n"
      << "set grid\nset key below\n$r << EOD\n# round leaf_MB resident_MB leaves Mops\n";
  for (const auto& p : points) out << p[0] << ' ' << p[1] << ' ' << p[2] << ' ' << p[3] << ' ' << p[4] << '\n';
  out << "EOD\n"
      << "set xlabel 'round'\nset ylabel 'MB'\nset y2label 'leaves'\nset ytics nomirror\nset y2tics\n"
      << "set yrange [0:*]\nset y2range [0:*]\n"
      << "plot $r using 1:2 with lines lw 2 lc rgb '#1f77b4' title 'leaf bytes (MB)', \\\n"
      << "     $r using 1:3 with lines lw 2 lc rgb '#d62728' title 'process resident memory (MB)', \\\n"
      << "     $r using 1:4 axes x1y2 with lines dt 2 lc rgb '#2ca02c' title 'leaves (right axis)'\n"
      << "unset y2tics\nunset y2label\nset ytics mirror\n"
      << "set ylabel 'M ops/s (one batch a round)'\n"
      << "plot $r using 1:5 with points pt 7 ps 0.4 lc rgb '#9467bd' title 'throughput of the round', \\\n"
      << "     $r using 1:5 smooth bezier lw 2 lc rgb '#ff7f0e' title 'smoothed'\n"
      << "unset multiplot\n";
  close_script(out, script);
  return render(script, png, "churn rounds");
}

namespace {

/// A field of a plain run's rows that tells runs apart, and how a value of
/// it reads in a label ("2^16 keys", "workload C").
struct run_field {
  const char* name;
  std::string (*label)(const json&);
  bool tandem_only;  // null in the baselines' rows: taken from tandem's
};

std::string with_prefix(const char* p, const json& v) { return std::string(p) + text(v); }

const run_field run_fields[] = {
    {"workload", [](const json& v) { return with_prefix("workload ", v); }, false},
    {"keys", [](const json& v) { return pow2(v) + " keys"; }, false},
    {"ops", [](const json& v) { return pow2(v) + " ops"; }, false},
    {"batch", [](const json& v) { return "batch " + pow2(v); }, false},
    {"dist", [](const json& v) { return text(v); }, false},
    {"load_order", [](const json& v) { return text(v) + " load"; }, false},
    {"scan_length", [](const json& v) { return "scan length " + pow2(v); }, false},
    {"threads", [](const json& v) { return text(v) + " threads"; }, false},
    {"device", [](const json& v) { return with_prefix("device ", v); }, false},
    {"gpu_share", [](const json& v) { return with_prefix("gpu share ", v); }, true},
    {"gpu_order", [](const json& v) { return with_prefix("gpu order ", v); }, true},
    {"gpu_scatter", [](const json& v) { return with_prefix("gpu scatter ", v); }, true},
    {"gpu_route_keys",
     [](const json& v) { return number(v) == 0 ? std::string("gpu route keys unbounded") : "gpu route keys " + pow2(v); },
     true},
    {"inflight", [](const json& v) { return text(v) + " in flight"; }, true},
    {"warmup_batches", [](const json& v) { return with_prefix("warm-up ", v); }, true},
    {"results_kept", [](const json& v) { return v.is_boolean() && v.get<bool>() ? std::string("verify") : "no verify"; },
     true},
    {"seed", [](const json& v) { return with_prefix("seed ", v); }, false},
    {"host", [](const json& v) { return with_prefix("host ", v); }, false},
    {"cpu_model", [](const json& v) { return text(v); }, false},
    {"tandem_version", [](const json& v) { return with_prefix("tandem ", v); }, false},
};

/// One plain run: its rows (one a system) and the row its settings are read
/// from (tandem's, which carries the tandem-only fields).
struct run_rows {
  std::vector<const json*> rows;
  const json* settings = nullptr;
  json value(const run_field& f) const { return get(*settings, f.name); }
};

/// Splits plain rows into runs: a run starts at a tandem row, at a system
/// the current run already has, or where a setting every system shares
/// changes (tandem-bench writes tandem's row first, then the baselines').
std::vector<run_rows> split_runs(const std::vector<json>& rows) {
  std::vector<run_rows> runs;
  for (const json& r : rows) {
    if (!get(r, "ops_per_s").is_number() || !get(r, "sweep").is_null()) continue;  // a sweep's point
    const std::string system = text(get(r, "system"));
    bool starts = runs.empty() || system == "tandem";
    if (!starts) {
      for (const json* x : runs.back().rows) starts = starts || text(get(*x, "system")) == system;
      for (const run_field& f : run_fields) {
        starts = starts || (!f.tandem_only && get(*runs.back().rows.front(), f.name) != get(r, f.name));
      }
    }
    if (starts) runs.emplace_back();
    runs.back().rows.push_back(&r);
    if (!runs.back().settings || system == "tandem") runs.back().settings = &r;
  }
  return runs;
}

}  // namespace

plot_outcome plot_runs(const std::vector<json>& rows, const std::string& png) {
  const std::vector<run_rows> runs = split_runs(rows);
  if (runs.empty()) throw std::runtime_error("no rows of plain runs (rows with ops_per_s and no sweep) to plot");

  // The settings that differ between runs label them; the rest go in the title.
  std::vector<const run_field*> differ, common;
  for (const run_field& f : run_fields) {
    bool same = true;
    for (const run_rows& r : runs) same = same && r.value(f) == runs.front().value(f);
    (same ? common : differ).push_back(&f);
  }
  const bool keys_only = runs.size() > 1 && differ.size() == 1 && std::string(differ.front()->name) == "keys";

  // y: scan entries (or keys counted) per second when every run is a scan
  // (count) run and the CSV has the column; otherwise ops per second.
  bool all_scan = true, all_count = true, has_entries = true;
  for (const run_rows& r : runs) {
    all_scan = all_scan && field_is(*r.settings, "workload", "scan");
    all_count = all_count && field_is(*r.settings, "workload", "count");
    for (const json* x : r.rows) has_entries = has_entries && get(*x, "entries_per_s").is_number();
  }
  const bool entries = has_entries && (all_scan || all_count);
  const char* const y_field = entries ? "entries_per_s" : "ops_per_s";
  const std::string unit = !entries ? "M ops/s" : all_scan ? "M entries/s" : "M keys counted/s";
  const std::string y_what = !entries ? "throughput" : all_scan ? "scan entries returned" : "keys counted";

  // Systems in order of first appearance; y[run][system] (NaN: not run).
  std::vector<std::string> systems;
  for (const run_rows& r : runs) {
    for (const json* x : r.rows) {
      const std::string s = text(get(*x, "system"));
      if (std::find(systems.begin(), systems.end(), s) == systems.end()) systems.push_back(s);
    }
  }
  std::vector<std::vector<double>> y(runs.size(), std::vector<double>(systems.size(), std::nan("")));
  double y_lo = INFINITY, y_hi = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    for (const json* x : runs[i].rows) {
      const auto j = static_cast<std::size_t>(
          std::find(systems.begin(), systems.end(), text(get(*x, "system"))) - systems.begin());
      const double v = number(get(*x, y_field)) / 1e6;
      y[i][j] = v;
      if (v > 0) {
        y_lo = std::min(y_lo, v);
        y_hi = std::max(y_hi, v);
      }
    }
  }
  if (!(y_hi > 0)) throw std::runtime_error("the runs' rows hold no throughput above 0 to plot");

  // The image's width: the bars' groups set it (at least 1000 pixels).
  const double n = static_cast<double>(systems.size());
  const int px = keys_only ? 1200
                           : static_cast<int>(std::clamp(
                                 300.0 + static_cast<double>(runs.size()) * std::max(n, 2.0) * 60.0, 1000.0, 2400.0));
  const std::size_t chars = static_cast<std::size_t>(px) / 9;  // of the title font, about

  // Title: what the plot shows, the settings all runs share (seed and
  // version left out), tandem's routing and the machine, wrapped.
  std::vector<std::string> shared, machine;
  for (const run_field* c : common) {
    const json v = runs.front().value(*c);
    const std::string name = c->name;
    if (v.is_null() || name == "seed" || name == "tandem_version") continue;
    (name == "host" || name == "cpu_model" ? machine : shared).push_back(c->label(v));
  }
  std::string routing;
  for (const run_rows& r : runs) {
    const std::string d = text(get(*r.settings, "device_used"));
    if (!d.empty() && routing.find(d) == std::string::npos) routing += (routing.empty() ? "" : ", ") + d;
  }
  machine.insert(machine.begin(), "tandem routing: " + (routing.empty() ? std::string("?") : routing));
  const std::string title =
      std::string("tandem-bench: ") +
      (keys_only ? y_what + " against the number of keys loaded"
                 : y_what + " of " + std::to_string(runs.size()) + (runs.size() == 1 ? " run" : " runs") +
                       ", one bar per system") +
      (shared.empty() ? std::string("") : "\n" + wrap(shared, ", ", chars)) + "\n" + wrap(machine, "; ", chars);

  static const char* const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  const std::string script = script_path(png);

  if (keys_only) {
    const bool log_y = y_hi / y_lo > 20;
    std::vector<std::size_t> order(runs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return number(runs[a].value(*differ.front())) < number(runs[b].value(*differ.front()));
    });
    std::ofstream out = open_script(script, png, "plain runs: " + y_what + " against the keys loaded", px, 720);
    out << "set title " << double_quoted(title) << "\n"
        << "set xlabel 'keys loaded (log2 scale)'\n"
        << "set ylabel '" << y_what << ", " << unit << (log_y ? " (log scale)" : "") << "'\n"
        << "set logscale x 2\n"
        << "set offsets graph 0.04, graph 0.04, graph 0.06, 0\n"
        << (log_y ? "set logscale y\nset yrange [*:*]\n" : "set yrange [0:*]\n")
        << "set grid xtics ytics\n"
        << "set key below\n"
        << "set xtics (";
    for (std::size_t k = 0; k < order.size(); ++k) {
      const json v = runs[order[k]].value(*differ.front());
      out << (k ? ", " : "") << quoted(pow2(v)) << ' ' << number(v);
    }
    out << ")\n";
    for (std::size_t j = 0; j < systems.size(); ++j) {
      out << "$s" << j << " << EOD\n# keys " << unit << "\n";
      for (std::size_t i : order) {
        if (y[i][j] > 0) out << number(runs[i].value(*differ.front())) << ' ' << y[i][j] << '\n';
      }
      out << "EOD\n";
    }
    out << "plot ";
    for (std::size_t j = 0; j < systems.size(); ++j) {
      out << (j ? ", \\\n     " : "") << "$s" << j << " using 1:2 with linespoints lw 2 pt 7 ps 1.3 lc rgb '"
          << colours[j % 6] << "' title " << quoted(systems[j]);
    }
    out << "\n";
    close_script(out, script);
    return render(script, png, "plain runs, throughput against keys");
  }

  // Grouped bars: group i at x = i, the systems' bars side by side in it.
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    std::string l;
    for (const run_field* d : differ) {
      const json v = runs[i].value(*d);
      if (!v.is_null()) l += (l.empty() ? "" : "\n") + d->label(v);
    }
    if (l.empty()) l = runs.size() == 1 ? run_fields[0].label(runs[i].value(run_fields[0])) : "run " + std::to_string(i + 1);
    labels.push_back(l);
  }
  const double width = 0.8 / n;
  // Tic labels of several lines (one a differing setting), turned when a
  // line is wider than its group (about 7 pixels a character, 150 pixels of
  // margins; gnuplot then makes room for them, in a taller image). For
  // upright labels gnuplot leaves room for one line, so the bottom margin
  // (in character heights) is set to hold the labels, the x label and the
  // key, and the x label moved below the labels' lines.
  std::size_t label_lines = 1, line_chars = 0;
  for (const std::string& l : labels) {
    label_lines = std::max<std::size_t>(label_lines, 1 + static_cast<std::size_t>(std::count(l.begin(), l.end(), '\n')));
    std::stringstream lines(l);
    for (std::string line; std::getline(lines, line);) line_chars = std::max(line_chars, line.size());
  }
  const double group_px = (px - 150.0) / static_cast<double>(runs.size());
  const bool rotate = static_cast<double>(line_chars) * 7.0 > 0.95 * group_px;
  const std::size_t bottom = label_lines + 2 + (systems.size() + 3) / 4 + 1;
  const int height = rotate ? static_cast<int>(std::min<std::size_t>(1200, 720 + 4 * line_chars)) : 720;
  std::ofstream out = open_script(script, png, "plain runs: " + y_what + " by run and system", px, height);
  out << "set title " << double_quoted(title) << "\n"
      << "set xlabel "
      << double_quoted(differ.empty() ? "runs (the same settings)"
                                      : "runs, labelled by the settings that differ between them")
      << " offset 0,-" << (rotate ? 0 : label_lines - 1) << "\n"
      << "set ylabel '" << y_what << ", " << unit << "'\n"
      << "set yrange [0:" << y_hi * 1.15 << "]\n"
      << "set xrange [-0.6:" << static_cast<double>(runs.size()) - 0.4 << "]\n"
      << "set style fill solid 0.85 border -1\n"
      << "set boxwidth " << width << " absolute\n"
      << "set grid ytics\n"
      << "set key below\n"
      << (rotate ? std::string("") : "set bmargin " + std::to_string(bottom) + "\n")
      << "set xtics nomirror" << (rotate ? " rotate by -30" : "") << " (";
  for (std::size_t i = 0; i < labels.size(); ++i) out << (i ? ", " : "") << double_quoted(labels[i]) << ' ' << i;
  out << ")\n";
  for (std::size_t j = 0; j < systems.size(); ++j) {
    out << "$s" << j << " << EOD\n# x " << unit << " label\n";
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (!(y[i][j] >= 0)) continue;
      const double x = static_cast<double>(i) - 0.4 + width * (static_cast<double>(j) + 0.5);
      out << x << ' ' << y[i][j] << ' ' << double_quoted(short_number(y[i][j])) << '\n';
    }
    out << "EOD\n";
  }
  out << "plot ";
  for (std::size_t j = 0; j < systems.size(); ++j) {
    out << (j ? ", \\\n     " : "") << "$s" << j << " using 1:2 with boxes lc rgb '" << colours[j % 6]
        << "' title " << quoted(systems[j]) << ", \\\n     $s" << j
        << " using 1:2:3 with labels offset 0,0.7 font ',9' notitle";
  }
  out << "\n";
  close_script(out, script);
  return render(script, png, "plain runs, bars by run");
}

plot_outcome plot_rows(const std::vector<json>& rows, const std::string& png) {
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
