#include <tandem/batch.hpp>
#include <tandem/batch_result.hpp>

#include <algorithm>

namespace tandem {

const char* to_string(op_type t) noexcept {
  switch (t) {
    case op_type::get: return "get";
    case op_type::put: return "put";
    case op_type::insert: return "insert";
    case op_type::erase: return "erase";
    case op_type::lower_bound: return "lower_bound";
    case op_type::scan: return "scan";
    case op_type::count: return "count";
  }
  return "unknown";
}

batch& batch::append(const key_type* keys, const value_type* values, std::size_t n, op_type type) {
  const std::size_t at = keys_.size();
  keys_.insert(keys_.end(), keys, keys + n);
  if (values != nullptr) {
    args_.insert(args_.end(), values, values + n);
  } else {
    args_.resize(at + n, 0);
  }
  types_.resize(at + n, type);
  return *this;
}

batch& batch::append(const batch& other) {
  if (&other == this) return append(batch(other));
  const std::size_t at = keys_.size();
  keys_.insert(keys_.end(), other.keys(), other.keys() + other.size());
  args_.insert(args_.end(), other.args(), other.args() + other.size());
  types_.insert(types_.end(), other.types_.begin(), other.types_.end());
  for (scan_spec s : other.scans_) {
    s.index += at;
    scans_.push_back(s);
  }
  return *this;
}

const scan_spec* batch::find_scan(std::size_t i) const noexcept {
  const auto it = std::lower_bound(scans_.begin(), scans_.end(), i,
                                   [](const scan_spec& s, std::size_t index) { return s.index < index; });
  return it != scans_.end() && it->index == i ? &*it : nullptr;
}

op batch::operator[](std::size_t i) const noexcept {
  op o{keys()[i], args()[i], 0, types_[i], scan_order::ordered};
  if (o.type == op_type::scan) {
    if (const scan_spec* s = find_scan(i)) {
      o.limit = s->limit;
      o.order = s->order;
    }
  }
  return o;
}

std::string batch_result::error(std::size_t i) const {
  const auto it = std::lower_bound(errors_.begin(), errors_.end(), i,
                                   [](const auto& e, std::size_t index) { return e.first < index; });
  return it != errors_.end() && it->first == i ? it->second : std::string();
}

std::size_t batch_result::invalid_count() const noexcept {
  // Every op that did not run has a message; scans refused for the output
  // cap are the ones not invalid.
  std::size_t n = 0;
  for (const auto& e : errors_) n += status(e.first) == op_status::invalid;
  return n;
}

std::pair<std::uint64_t, std::uint64_t> batch_result::scan_slot(std::size_t i) const noexcept {
  if (!columns_) return {0, 0};
  const std::vector<std::uint64_t>& ops = columns_->scan_ops;
  const std::uint64_t at = first_ + i;
  const auto it = std::lower_bound(ops.begin(), ops.end(), at);
  if (it == ops.end() || *it != at) return {0, 0};
  const auto s = static_cast<std::size_t>(it - ops.begin());
  return {columns_->scan_begin[s], columns_->scan_begin[s + 1] - columns_->scan_begin[s]};
}

std::uint64_t batch_result::scan_offset(std::size_t i) const noexcept {
  if (!columns_) return 0;
  const std::vector<std::uint64_t>& ops = columns_->scan_ops;
  const auto it = std::lower_bound(ops.begin(), ops.end(), first_ + i);
  if (it == ops.end() || *it != first_ + i) return 0;
  // scan_begin counts from the start of the shared columns; scan_entries()
  // starts at this result's first scan.
  const auto s0 = static_cast<std::size_t>(std::lower_bound(ops.begin(), ops.end(), first_) - ops.begin());
  return columns_->scan_begin[static_cast<std::size_t>(it - ops.begin())] - columns_->scan_begin[s0];
}

entry_span batch_result::scan_entries() const noexcept {
  if (!columns_ || columns_->scan_ops.empty()) return {};
  const std::vector<std::uint64_t>& ops = columns_->scan_ops;
  const auto s0 = static_cast<std::size_t>(std::lower_bound(ops.begin(), ops.end(), first_) - ops.begin());
  const auto s1 = static_cast<std::size_t>(std::lower_bound(ops.begin(), ops.end(), first_ + size_) - ops.begin());
  const std::uint64_t e0 = columns_->scan_begin[s0];
  return {columns_->scan_entries.data() + e0, static_cast<std::size_t>(columns_->scan_begin[s1] - e0)};
}

}  // namespace tandem
