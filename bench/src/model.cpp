#include "model.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace tandem_bench {
namespace {

using tandem::entry;
using tandem::op;
using tandem::op_result;
using tandem::op_status;
using tandem::op_type;

std::string describe(const op& o) {
  std::string s = std::string(tandem::to_string(o.type)) + "(" + std::to_string(o.key);
  if (o.type == op_type::put || o.type == op_type::insert || o.type == op_type::scan || o.type == op_type::count) {
    s += ", " + std::to_string(o.arg);
  }
  if (o.type == op_type::scan) s += ", " + std::to_string(o.limit);
  return s + ")";
}

const char* status_name(op_status s) {
  switch (s) {
    case op_status::ok: return "ok";
    case op_status::invalid: return "invalid";
    case op_status::output_limit: return "output_limit";
  }
  return "unknown";
}

std::string describe(const op_result& r) {
  return std::string("{status ") + status_name(r.status) + ", found " +
         (r.found ? "true" : "false") + ", key " + std::to_string(r.key) + ", value " + std::to_string(r.value) + "}";
}

}  // namespace

void model::load(const tandem::key_type* keys, const tandem::value_type* values, std::size_t n) {
  std::vector<entry> pairs(n);
  for (std::size_t i = 0; i < n; ++i) pairs[i] = {keys[i], values[i]};
  std::sort(pairs.begin(), pairs.end(), [](const entry& a, const entry& b) { return a.key < b.key; });
  data_.clear();
  for (const entry& e : pairs) data_.emplace_hint(data_.end(), e.key, e.value);
}

std::uint64_t model::check(const std::vector<op>& ops, const tandem::batch_result& got, std::size_t batch_no,
                           std::uint64_t& report_left) {
  std::uint64_t bad = 0;
  auto report = [&](std::size_t i, const std::string& what) {
    ++bad;
    if (report_left == 0) return;
    --report_left;
    std::fprintf(stderr, "verify: batch %zu op %zu %s: %s\n", batch_no, i, describe(ops[i]).c_str(), what.c_str());
  };
  if (got.size() != ops.size()) {
    std::fprintf(stderr, "verify: batch %zu: %zu answers for %zu ops\n", batch_no, got.size(), ops.size());
    // Still replay the batch so later batches compare against the right state.
  }
  std::vector<entry> sorted_got;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const op& o = ops[i];
    op_result want{};
    want.key = o.key;
    scan_.clear();
    const bool invalid = (o.type == op_type::scan || o.type == op_type::count) &&
                         (o.key > o.arg || (o.type == op_type::scan && o.limit > tandem::max_scan_limit));
    if (invalid) {
      want.status = op_status::invalid;
    } else {
      switch (o.type) {
        case op_type::get: {
          const auto it = data_.find(o.key);
          want.found = it != data_.end();
          want.value = want.found ? it->second : 0;
          break;
        }
        case op_type::put: {
          const auto [it, inserted] = data_.try_emplace(o.key, o.arg);
          want.found = !inserted;
          want.value = inserted ? 0 : std::exchange(it->second, o.arg);
          break;
        }
        case op_type::insert: {
          const auto [it, inserted] = data_.try_emplace(o.key, o.arg);
          want.found = !inserted;
          want.value = inserted ? 0 : it->second;
          break;
        }
        case op_type::erase: {
          const auto it = data_.find(o.key);
          want.found = it != data_.end();
          want.value = want.found ? it->second : 0;
          if (want.found) data_.erase(it);
          break;
        }
        case op_type::lower_bound: {
          const auto it = data_.lower_bound(o.key);
          want.found = it != data_.end();
          want.key = want.found ? it->first : 0;
          want.value = want.found ? it->second : 0;
          break;
        }
        case op_type::scan:
          for (auto it = data_.lower_bound(o.key); it != data_.end() && it->first <= o.arg && scan_.size() < o.limit;
               ++it) {
            scan_.push_back({it->first, it->second});
          }
          want.value = scan_.size();
          want.found = !scan_.empty();
          break;
        case op_type::count: {
          std::uint64_t c = 0;
          for (auto it = data_.lower_bound(o.key); it != data_.end() && it->first <= o.arg; ++it) ++c;
          want.value = c;
          want.found = c != 0;
          break;
        }
      }
    }
    if (i >= got.size()) {
      ++bad;
      continue;
    }
    const op_result& g = got[i];
    const bool ok = want.status == op_status::ok;
    if (g.status != want.status || (ok && (g.found != want.found || g.value != want.value || g.key != want.key))) {
      report(i, "got " + describe(g) + ", want " + describe(want));
      continue;
    }
    if (!ok && got.error(i).empty()) {
      report(i, "invalid without an error message");
      continue;
    }
    if (ok && o.type == op_type::scan) {
      const tandem::entry_span s = got.scan(i);
      const entry* first = s.begin();
      if (o.order == tandem::scan_order::unordered) {
        sorted_got.assign(s.begin(), s.end());
        std::sort(sorted_got.begin(), sorted_got.end(), [](const entry& a, const entry& b) { return a.key < b.key; });
        first = sorted_got.data();
      }
      if (s.size() != scan_.size()) {
        report(i, "scan returned " + std::to_string(s.size()) + " entries, want " + std::to_string(scan_.size()));
        continue;
      }
      for (std::size_t j = 0; j < scan_.size(); ++j) {
        if (first[j] != scan_[j]) {
          report(i, "scan entry " + std::to_string(j) + " is {" + std::to_string(first[j].key) + ", " +
                        std::to_string(first[j].value) + "}, want {" + std::to_string(scan_[j].key) + ", " +
                        std::to_string(scan_[j].value) + "}");
          break;
        }
      }
    }
  }
  return bad;
}

std::string model::compare_contents(const baseline& other) const {
  std::string diff;
  auto it = data_.begin();
  std::size_t pos = 0;
  other.for_each([&](tandem::key_type k, tandem::value_type v) {
    if (!diff.empty()) return;
    if (it == data_.end()) {
      diff = "extra key " + std::to_string(k) + " at position " + std::to_string(pos);
    } else if (it->first != k || it->second != v) {
      diff = "position " + std::to_string(pos) + " holds {" + std::to_string(k) + ", " + std::to_string(v) +
             "}, model {" + std::to_string(it->first) + ", " + std::to_string(it->second) + "}";
    } else {
      ++it;
      ++pos;
    }
  });
  if (diff.empty() && it != data_.end()) {
    diff = "missing key " + std::to_string(it->first) + " (" + std::to_string(data_.size() - pos) + " keys short)";
  }
  return diff;
}

}  // namespace tandem_bench
