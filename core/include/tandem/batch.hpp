#pragma once
/// @file
/// `tandem::batch`: a list of operations submitted together.
///
/// A batch takes effect as if its ops ran one by one in the order they were
/// added (DESIGN, semantics 2), also for scans and counts, which see exactly
/// the writes added before them. Batches take effect in submission order.
/// Every `uint64_t` is a valid key, 0 and UINT64_MAX included.
///
/// Building a batch never fails. Ops that cannot run (a scan or count with
/// lo > hi, a scan limit above `max_scan_limit`) are reported per op in the
/// result with status `invalid` and a message naming the op; the other ops
/// of the batch run normally.

#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem {

enum class op_type : std::uint8_t { get, put, insert, erase, lower_bound, scan, count };

/// Number of op types (for per-type counters).
inline constexpr std::size_t op_type_count = 7;

/// @return "get", "put", ... for messages and tables.
[[nodiscard]] const char* to_string(op_type t) noexcept;

/// Order in which a scan returns its entries.
enum class scan_order : std::uint8_t {
  ordered,    ///< ascending keys
  unordered,  ///< the same entries in any order; cheaper for long ranges
};

/// Largest `limit` a scan may ask for (2^24 entries, 256 MiB of output).
inline constexpr std::uint64_t max_scan_limit = std::uint64_t{1} << 24;

/// One operation. `key` is the key (lo for scan and count); `arg` is the
/// value for put and insert and hi for scan and count; `limit` is the most
/// entries a scan returns.
struct op {
  key_type key = 0;
  std::uint64_t arg = 0;
  std::uint64_t limit = 0;
  op_type type = op_type::get;
  scan_order order = scan_order::ordered;
};

class batch {
 public:
  batch() = default;

  /// Value of `key`, if present.
  batch& get(key_type key) { return add({key, 0, 0, op_type::get, scan_order::ordered}); }
  /// Sets `key` to `value` (insert or replace); reports the previous value.
  batch& put(key_type key, value_type value) { return add({key, value, 0, op_type::put, scan_order::ordered}); }
  /// Sets `key` to `value` only if absent; reports whether it was present.
  batch& insert(key_type key, value_type value) {
    return add({key, value, 0, op_type::insert, scan_order::ordered});
  }
  /// Removes `key`; reports whether it was present and its value.
  batch& erase(key_type key) { return add({key, 0, 0, op_type::erase, scan_order::ordered}); }
  /// First entry with key >= `key`, if any.
  batch& lower_bound(key_type key) { return add({key, 0, 0, op_type::lower_bound, scan_order::ordered}); }
  /// Up to `limit` entries with lo <= key <= hi (inclusive bounds).
  batch& scan(key_type lo, key_type hi, std::uint64_t limit, scan_order order = scan_order::ordered) {
    return add({lo, hi, limit, op_type::scan, order});
  }
  /// Number of keys with lo <= key <= hi.
  batch& count(key_type lo, key_type hi) { return add({lo, hi, 0, op_type::count, scan_order::ordered}); }

  /// Appends a prepared op.
  batch& add(const op& o) {
    ops_.push_back(o);
    return *this;
  }

  void reserve(std::size_t n) { ops_.reserve(n); }
  void clear() noexcept { ops_.clear(); }
  [[nodiscard]] std::size_t size() const noexcept { return ops_.size(); }
  [[nodiscard]] bool empty() const noexcept { return ops_.empty(); }
  [[nodiscard]] const op& operator[](std::size_t i) const noexcept { return ops_[i]; }
  [[nodiscard]] const std::vector<op>& ops() const noexcept { return ops_; }

 private:
  std::vector<op> ops_;
};

}  // namespace tandem
