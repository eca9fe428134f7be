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

std::string batch_result::error(std::size_t i) const {
  const auto it = std::lower_bound(errors_.begin(), errors_.end(), i,
                                   [](const auto& e, std::size_t index) { return e.first < index; });
  return it != errors_.end() && it->first == i ? it->second : std::string();
}

}  // namespace tandem
