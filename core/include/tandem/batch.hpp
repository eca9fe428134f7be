#pragma once
/// @file
/// `tandem::batch`: a list of operations submitted together.
///
/// A batch takes effect as if its ops ran one by one in the order they were
/// added (DESIGN, semantics 2), also for scans and counts, which see exactly
/// the writes added before them. Batches take effect in submission order.
/// Every `uint64_t` is a valid key, 0 and UINT64_MAX included.
///
/// Storage is columnar: the ops' keys, args and types sit in three arrays
/// (scan limits and orders, rare, in a side table), so the index streams
/// over them and a caller who holds arrays appends them whole with the bulk
/// forms (`get(keys, n)`, `put(keys, values, n)`, ...), one copy per column.
///
/// Building a batch never fails (but for memory). Ops that cannot run (a
/// scan or count with lo > hi, a scan limit above `max_scan_limit`) are
/// reported per op in the result with status `invalid` and a message naming
/// the op; the other ops of the batch run normally. So are scans whose
/// entries would take the batch's output past config.max_batch_output_bytes
/// (status `output_limit`).
///
/// `index::submit` takes the batch by value: pass it with std::move to hand
/// its columns over without a copy (the result reuses the key column); a
/// batch passed as an lvalue is copied and stays the caller's.
///
/// Columns of 1 MiB and more live in column memory (core/column_memory.hpp):
/// blocks freed by earlier batches and results are reused, and once an index
/// uses a GPU they are page-locked, so the GPU reads the keys directly.

#include <tandem/core/column_memory.hpp>
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

/// The side-table entry of one scan op.
struct scan_spec {
  std::size_t index;    ///< op index in the batch
  std::uint64_t limit;  ///< most entries returned
  scan_order order;
};

class batch {
 public:
  batch() = default;

  // ---- one op -----------------------------------------------------------------

  /// Value of `key`, if present.
  batch& get(key_type key) { return push(key, 0, op_type::get); }
  /// Sets `key` to `value` (insert or replace); reports the previous value.
  batch& put(key_type key, value_type value) { return push(key, value, op_type::put); }
  /// Sets `key` to `value` only if absent; reports whether it was present.
  batch& insert(key_type key, value_type value) { return push(key, value, op_type::insert); }
  /// Removes `key`; reports whether it was present and its value.
  batch& erase(key_type key) { return push(key, 0, op_type::erase); }
  /// First entry with key >= `key`, if any.
  batch& lower_bound(key_type key) { return push(key, 0, op_type::lower_bound); }
  /// Up to `limit` entries with lo <= key <= hi (inclusive bounds).
  batch& scan(key_type lo, key_type hi, std::uint64_t limit, scan_order order = scan_order::ordered) {
    scans_.push_back({keys_.size(), limit, order});
    return push(lo, hi, op_type::scan);
  }
  /// Number of keys with lo <= key <= hi.
  batch& count(key_type lo, key_type hi) { return push(lo, hi, op_type::count); }

  /// Appends a prepared op.
  batch& add(const op& o) {
    if (o.type == op_type::scan) scans_.push_back({keys_.size(), o.limit, o.order});
    return push(o.key, o.arg, o.type);
  }

  // ---- whole arrays (one copy per column) --------------------------------------

  /// `n` gets of keys[0..n).
  batch& get(const key_type* keys, std::size_t n) { return append(keys, nullptr, n, op_type::get); }
  /// `n` puts of (keys[i], values[i]).
  batch& put(const key_type* keys, const value_type* values, std::size_t n) {
    return append(keys, values, n, op_type::put);
  }
  /// `n` inserts of (keys[i], values[i]).
  batch& insert(const key_type* keys, const value_type* values, std::size_t n) {
    return append(keys, values, n, op_type::insert);
  }
  /// `n` erases of keys[0..n).
  batch& erase(const key_type* keys, std::size_t n) { return append(keys, nullptr, n, op_type::erase); }
  /// `n` lower_bounds of keys[0..n).
  batch& lower_bound(const key_type* keys, std::size_t n) { return append(keys, nullptr, n, op_type::lower_bound); }
  batch& get(const std::vector<key_type>& keys) { return get(keys.data(), keys.size()); }
  batch& erase(const std::vector<key_type>& keys) { return erase(keys.data(), keys.size()); }
  batch& lower_bound(const std::vector<key_type>& keys) { return lower_bound(keys.data(), keys.size()); }
  /// @note keys and values must have the same size (the shorter one counts).
  batch& put(const std::vector<key_type>& keys, const std::vector<value_type>& values) {
    return put(keys.data(), values.data(), keys.size() < values.size() ? keys.size() : values.size());
  }
  batch& insert(const std::vector<key_type>& keys, const std::vector<value_type>& values) {
    return insert(keys.data(), values.data(), keys.size() < values.size() ? keys.size() : values.size());
  }

  /// Every op of `other`, in its order (scans keep their limits and orders).
  batch& append(const batch& other);

  void reserve(std::size_t n) {
    keys_.reserve(n);
    args_.reserve(n);
    types_.reserve(n);
  }
  void clear() noexcept {
    view_keys_ = nullptr;
    view_args_ = nullptr;
    keys_.clear();
    args_.clear();
    types_.clear();
    scans_.clear();
  }
  [[nodiscard]] std::size_t size() const noexcept { return view_keys_ ? types_.size() : keys_.size(); }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  /// @return op `i` (a copy, assembled from the columns).
  [[nodiscard]] op operator[](std::size_t i) const noexcept;

  // ---- columns --------------------------------------------------------------------
  /// Keys (lo for scan and count), one per op.
  [[nodiscard]] const key_type* keys() const noexcept { return view_keys_ ? view_keys_ : keys_.data(); }
  /// Values of put/insert, hi of scan/count, 0 otherwise.
  [[nodiscard]] const std::uint64_t* args() const noexcept { return view_keys_ ? view_args_ : args_.data(); }
  [[nodiscard]] const op_type* types() const noexcept { return types_.data(); }
  /// Scan limits and orders, by increasing op index.
  [[nodiscard]] const std::vector<scan_spec>& scans() const noexcept { return scans_; }
  /// @return the side-table entry of op `i`, or nullptr when it is no scan.
  [[nodiscard]] const scan_spec* find_scan(std::size_t i) const noexcept;

  /// @cond internal
  /// The index moves the key column into the result (batch_result::keys);
  /// empty for a batch over the caller's arrays.
  detail::column<key_type>&& take_keys() noexcept { return static_cast<detail::column<key_type>&&>(keys_); }
  /// `n` ops of `type` whose keys and args are the caller's arrays, read in
  /// place (index::submit(columns)): they must outlive every use of the
  /// batch, which must not be added to. Only its type column is its own.
  static batch over(op_type type, const key_type* keys, const std::uint64_t* args, std::size_t n) {
    batch b;
    b.types_.resize(n, type);
    b.view_keys_ = keys;
    b.view_args_ = args;
    return b;
  }
  /// Whether the keys and args are the caller's arrays (`over`).
  [[nodiscard]] bool borrowed() const noexcept { return view_keys_ != nullptr; }
  /// @endcond

 private:
  batch& push(key_type key, std::uint64_t arg, op_type type) {
    keys_.push_back(key);
    args_.push_back(arg);
    types_.push_back(type);
    return *this;
  }
  batch& append(const key_type* keys, const value_type* values, std::size_t n, op_type type);

  detail::column<key_type> keys_;
  detail::column<std::uint64_t> args_;
  detail::column<op_type> types_;
  std::vector<scan_spec> scans_;
  // A batch over the caller's arrays (`over`): its keys and args, n of each
  // (the type column's size).
  const key_type* view_keys_ = nullptr;
  const std::uint64_t* view_args_ = nullptr;
};

}  // namespace tandem
