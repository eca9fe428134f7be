// Plots of sweeps (--sweep share, --sweep latency) and of -w churn's rounds.
#include "gnuplot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace tandem_bench {

using namespace plot_detail;

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

}  // namespace tandem_bench
