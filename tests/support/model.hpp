#pragma once
// A std::map model of the index: replays a batch's ops one by one in batch
// order and checks a batch_result against what it saw.

#include <tandem/tandem.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem::test {

class index_model {
 public:
  std::map<key_type, value_type> data;

  /// Replays `b` and compares every answer with `r`; returns the number of
  /// mismatching ops (and reports each with gtest).
  std::size_t check(const batch& b, const batch_result& r, const std::string& where = {}) {
    std::size_t bad = 0;
    if (r.size() != b.size()) {
      ADD_FAILURE() << where << ": result has " << r.size() << " answers for " << b.size() << " ops";
      return b.size();
    }
    std::vector<entry> scan;
    for (std::size_t i = 0; i < b.size(); ++i) {
      const op& o = b[i];
      op_result want{};
      want.key = o.key;
      scan.clear();
      const bool invalid = (o.type == op_type::scan || o.type == op_type::count) &&
                           (o.key > o.arg || (o.type == op_type::scan && o.limit > max_scan_limit));
      if (invalid) {
        want.status = op_status::invalid;
      } else {
        apply(o, want, scan);
      }
      const op_result& got = r[i];
      bool same = got.status == want.status && got.found == want.found && got.value == want.value &&
                  (got.key == want.key || want.status != op_status::ok);
      if (same && want.status == op_status::ok && o.type == op_type::scan) {
        const entry_span s = r.scan(i);
        std::vector<entry> g(s.begin(), s.end());
        if (o.order == scan_order::unordered) {
          std::sort(g.begin(), g.end(), [](const entry& x, const entry& y) { return x.key < y.key; });
        }
        same = g == scan;
      }
      if (same && want.status == op_status::invalid) same = !r.error(i).empty();
      if (!same) {
        ++bad;
        if (bad <= 5) {
          ADD_FAILURE() << where << ": op " << i << " " << to_string(o.type) << "(" << o.key << ", " << o.arg << ", "
                        << o.limit << ") got status " << int(got.status) << " found " << got.found << " key "
                        << got.key << " value " << got.value << "; want status " << int(want.status) << " found "
                        << want.found << " key " << want.key << " value " << want.value;
        }
      }
    }
    return bad;
  }

  /// Runs one op on the model.
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
};

}  // namespace tandem::test
