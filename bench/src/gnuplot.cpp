// gnuplot.hpp: a row's fields, gnuplot's strings, the script's frame and the
// gnuplot process.
#include "gnuplot.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace tandem_bench {
namespace plot_detail {

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += '\'';
    q += c;
  }
  return q + "'";
}

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

std::string short_number(double x) {
  const double a = std::fabs(x);
  return fmt(a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : a >= 1 ? "%.2f" : "%.3g", x);
}

json get(const json& r, const char* field) { return r.contains(field) ? r[field] : json(nullptr); }

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

std::string script_path(const std::string& png) {
  std::string base = png;
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".png") == 0) base.resize(base.size() - 4);
  return base + ".gp";
}

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

}  // namespace plot_detail

namespace {

bool executable(const std::string& p) { return !p.empty() && access(p.c_str(), X_OK) == 0; }

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

}  // namespace tandem_bench
