// Plots of plain runs: throughput against keys, or grouped bars by run and
// system.
#include "gnuplot.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace tandem_bench {

using namespace plot_detail;

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

}  // namespace tandem_bench
