#pragma once
// The semantics of the index as a std::map, free of any test framework (the
// fuzz targets use it without GoogleTest): runs ops one by one in batch order
// and says what the index must answer, and compares one answer of a
// batch_result with that. index_model (model.hpp) reports through gtest.

#include <tandem/tandem.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tandem::test {

/// @return whether the index must answer `o` with status invalid: a range op
///         with lo > hi, a scan whose limit exceeds max_scan_limit, an op of
///         no known type.
inline bool expect_invalid(const op& o) {
  if (o.type > op_type::count) return true;
  return (o.type == op_type::scan || o.type == op_type::count) &&
         (o.key > o.arg || (o.type == op_type::scan && o.limit > max_scan_limit));
}

/// What the index must answer to one op; `scan` holds a scan's entries in
/// key order.
struct expected_answer {
  op_result result{};
  std::vector<entry> scan;
};

/// `Map` is std::map<key_type, value_type> or one with another allocator
/// (the fuzz target keeps its nodes in a pool).
template <class Map>
class basic_map_model {
 public:
  using map_type = Map;

  basic_map_model() = default;
  /// Starts from `m` (with its allocator).
  explicit basic_map_model(Map m) : data(std::move(m)) {}

  Map data;

  /// Runs one valid op on the model: `want` gets its found, value and key,
  /// `scan` (cleared by the caller) a scan's entries.
  void apply(const op& o, op_result& want, std::vector<entry>& scan) {
    switch (o.type) {
      case op_type::get: {
        const auto it = data.find(o.key);
        want.found = it != data.end();
        want.value = want.found ? it->second : 0;
        break;
      }
      case op_type::put: {
        const auto it = data.find(o.key);
        want.found = it != data.end();
        want.value = want.found ? it->second : 0;
        data[o.key] = o.arg;
        break;
      }
      case op_type::insert: {
        const auto [it, inserted] = data.emplace(o.key, o.arg);
        want.found = !inserted;
        want.value = inserted ? 0 : it->second;
        break;
      }
      case op_type::erase: {
        const auto it = data.find(o.key);
        want.found = it != data.end();
        want.value = want.found ? it->second : 0;
        if (want.found) data.erase(it);
        break;
      }
      case op_type::lower_bound: {
        const auto it = data.lower_bound(o.key);
        want.found = it != data.end();
        want.key = want.found ? it->first : 0;
        want.value = want.found ? it->second : 0;
        break;
      }
      case op_type::scan: {
        for (auto it = data.lower_bound(o.key); it != data.end() && it->first <= o.arg && scan.size() < o.limit; ++it) {
          scan.push_back({it->first, it->second});
        }
        want.value = scan.size();
        want.found = !scan.empty();
        break;
      }
      case op_type::count: {
        std::uint64_t c = 0;
        for (auto it = data.lower_bound(o.key); it != data.end() && it->first <= o.arg; ++it) ++c;
        want.value = c;
        want.found = c != 0;
        break;
      }
    }
  }

  /// Runs op `o` (valid or not) on the model and returns what the index
  /// must answer.
  expected_answer run(const op& o) {
    expected_answer want;
    want.result.key = o.key;
    if (expect_invalid(o)) {
      want.result.status = op_status::invalid;
    } else {
      want.result.status = op_status::ok;
      apply(o, want.result, want.scan);
    }
    return want;
  }

  /// @return "" when answer `i` of `r` is `want`'s answer to op `o`, else a
  ///         line naming the op and both answers. An invalid op must have an
  ///         error message; its key is not compared. The entries of an
  ///         unordered scan are compared in key order.
  static std::string compare(const op& o, const expected_answer& want, const batch_result& r, std::size_t i) {
    const op_result got = r[i];
    const op_result& w = want.result;
    bool same = got.status == w.status && got.found == w.found && got.value == w.value &&
                (got.key == w.key || w.status != op_status::ok);
    bool entries_differ = false;
    if (same && w.status == op_status::ok && o.type == op_type::scan) {
      const entry_span s = r.scan(i);
      std::vector<entry> g(s.begin(), s.end());
      if (o.order == scan_order::unordered) {
        std::sort(g.begin(), g.end(), [](const entry& x, const entry& y) { return x.key < y.key; });
      }
      entries_differ = g != want.scan;
      same = !entries_differ;
    }
    if (same && w.status == op_status::invalid) same = !r.error(i).empty();
    if (same) return {};
    std::string line = "op " + std::to_string(i) + " " + to_string(o.type) + "(" + std::to_string(o.key) + ", " +
                       std::to_string(o.arg) + ", " + std::to_string(o.limit) + ") got status " +
                       std::to_string(static_cast<int>(got.status)) + " found " + std::to_string(got.found) + " key " +
                       std::to_string(got.key) + " value " + std::to_string(got.value) + "; want status " +
                       std::to_string(static_cast<int>(w.status)) + " found " + std::to_string(w.found) + " key " +
                       std::to_string(w.key) + " value " + std::to_string(w.value);
    if (entries_differ) line += "; the scan's entries differ";
    if (w.status == op_status::invalid && got.status == op_status::invalid) line += "; no error message";
    return line;
  }
};

using map_model = basic_map_model<std::map<key_type, value_type>>;

}  // namespace tandem::test
