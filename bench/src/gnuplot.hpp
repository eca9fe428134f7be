#pragma once
/// @file
/// What tandem-bench's plots (plot.hpp) share: reading a row's fields,
/// numbers and strings as a gnuplot script writes them, the script's
/// opening and closing, and gnuplot run on it as a child process.

#include "plot.hpp"

#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

namespace tandem_bench::plot_detail {

// ---- a row's fields ---------------------------------------------------------

/// A field as label text: a string as it is, a whole number without a
/// fraction, null as "".
[[nodiscard]] std::string text(const json& v);
/// A number field; NaN when the field is not a number.
[[nodiscard]] double number(const json& v);
/// "2^k" for a power of two, else the whole number (text(v) below 1).
[[nodiscard]] std::string pow2(const json& v);
/// r[field], or null where the row has no such field.
[[nodiscard]] json get(const json& r, const char* field);
/// Whether r[field] is the string `value`.
[[nodiscard]] bool field_is(const json& r, const char* field, const char* value);

// ---- text ------------------------------------------------------------------

/// `x` printed with the printf format `f`.
[[nodiscard]] std::string fmt(const char* f, double x);
/// A value printed above a bar: 3 significant digits or more.
[[nodiscard]] std::string short_number(double x);
/// `parts` joined by `sep` into lines of at most `width` characters (a part
/// longer than that on a line of its own), the lines joined by newlines.
[[nodiscard]] std::string wrap(const std::vector<std::string>& parts, const std::string& sep, std::size_t width);
/// A gnuplot single-quoted string (only ' needs doubling).
[[nodiscard]] std::string quoted(const std::string& s);
/// A gnuplot double-quoted string: backslash escapes, newlines as \n.
[[nodiscard]] std::string double_quoted(const std::string& s);

// ---- the script and gnuplot ---------------------------------------------------

/// FILE.gp for FILE.png (FILE.png.gp for any other name).
[[nodiscard]] std::string script_path(const std::string& png);
/// Opens `script` and writes what every plot's script starts with: what it
/// draws, how to render it, the output file (another with
/// `gnuplot -e "outfile='x.png'"`) and the terminal (pngcairo where gnuplot
/// has it, else png) at `width` x `height` pixels.
/// @throws std::runtime_error when the script cannot be opened
[[nodiscard]] std::ofstream open_script(const std::string& script, const std::string& png, const std::string& what,
                                        int width, int height);
/// @throws std::runtime_error when the script could not be written
void close_script(std::ofstream& out, const std::string& script);
/// Runs gnuplot on `script` (which writes `png`) when one is found; `what`
/// names the plot in the message.
[[nodiscard]] plot_outcome render(const std::string& script, const std::string& png, const std::string& what);

}  // namespace tandem_bench::plot_detail
