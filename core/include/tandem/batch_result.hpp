#pragma once
/// @file
/// `tandem::batch_result`: the answers of one batch, one per op, in batch
/// order. Scans point into one flat buffer owned by the result; the spans
/// stay valid as long as the result lives (moving it keeps them valid).
///
/// Per op:
/// | op          | found                          | value                    | key            |
/// |-------------|--------------------------------|--------------------------|----------------|
/// | get         | key present                    | its value                | the op's key   |
/// | put         | key was present before         | the value it replaced    | the op's key   |
/// | insert      | key was present (not inserted) | the value it kept        | the op's key   |
/// | erase       | key was present (erased)       | the value it erased      | the op's key   |
/// | lower_bound | some key >= the op's key       | that entry's value       | that entry's key |
/// | scan        | at least one entry             | number of entries        | the op's lo    |
/// | count       | count > 0                      | the count                | the op's lo    |
/// `value` is 0 and `found` false where the table says nothing applies, and
/// for ops whose status is not `ok`; a lower_bound that finds nothing has
/// key 0.

#include <tandem/batch.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tandem {

namespace detail {
/// An allocator whose value-less construct() default-initialises: resizing a
/// vector of trivial elements leaves them unwritten, so the index can fill a
/// batch's answers in parallel instead of zeroing them first on one thread.
template <class T>
struct default_init_allocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = default_init_allocator<U>;
  };
  default_init_allocator() = default;
  template <class U>
  default_init_allocator(const default_init_allocator<U>&) noexcept {}  // NOLINT: rebinding converts implicitly
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
}  // namespace detail

/// The flat buffer of scan entries.
using entry_vector = std::vector<entry, detail::default_init_allocator<entry>>;

enum class op_status : std::uint8_t {
  ok,       ///< the op ran
  invalid,  ///< the op was rejected (see batch_result::error); others ran
};

/// The answer to one op.
struct op_result {
  key_type key;
  value_type value;
  std::uint64_t scan_offset;  ///< scans: first entry in the flat buffer
  op_status status;
  bool found;
};

/// The answers of a batch, one per op.
using op_result_vector = std::vector<op_result, detail::default_init_allocator<op_result>>;

/// A read-only view of scan entries (std::span is C++20).
class entry_span {
 public:
  entry_span() = default;
  entry_span(const entry* data, std::size_t size) : data_(data), size_(size) {}
  [[nodiscard]] const entry* begin() const noexcept { return data_; }
  [[nodiscard]] const entry* end() const noexcept { return data_ + size_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] const entry& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  const entry* data_ = nullptr;
  std::size_t size_ = 0;
};

class batch_result {
 public:
  batch_result() = default;

  [[nodiscard]] std::size_t size() const noexcept { return results_.size(); }
  [[nodiscard]] const op_result& operator[](std::size_t i) const noexcept { return results_[i]; }
  [[nodiscard]] op_status status(std::size_t i) const noexcept { return results_[i].status; }
  [[nodiscard]] bool ok(std::size_t i) const noexcept { return results_[i].status == op_status::ok; }
  [[nodiscard]] bool found(std::size_t i) const noexcept { return results_[i].found; }
  [[nodiscard]] value_type value(std::size_t i) const noexcept { return results_[i].value; }
  [[nodiscard]] key_type key(std::size_t i) const noexcept { return results_[i].key; }
  /// Entries of scan op `i` (empty for other ops).
  [[nodiscard]] entry_span scan(std::size_t i) const noexcept {
    const op_result& r = results_[i];
    if (!is_scan(i)) return {};
    return {scan_entries_.data() + r.scan_offset, static_cast<std::size_t>(r.value)};
  }
  /// Why op `i` is invalid; empty when it ran.
  [[nodiscard]] std::string error(std::size_t i) const;
  /// Number of ops with status `invalid`.
  [[nodiscard]] std::size_t invalid_count() const noexcept { return errors_.size(); }
  /// Every entry of every scan, scan after scan in batch order.
  [[nodiscard]] const entry_vector& scan_entries() const noexcept { return scan_entries_; }
  /// Place of this batch in the index's execution order (0 for the first
  /// batch an index runs): batches with lower numbers took effect before.
  [[nodiscard]] std::uint64_t sequence() const noexcept { return sequence_; }

  // ---- filled by the index ------------------------------------------------
  /// @cond internal
  op_result_vector& mutable_results() noexcept { return results_; }
  entry_vector& mutable_scan_entries() noexcept { return scan_entries_; }
  std::vector<op_type>& mutable_types() noexcept { return types_; }
  void add_error(std::size_t i, std::string message) { errors_.emplace_back(i, std::move(message)); }
  void set_sequence(std::uint64_t s) noexcept { sequence_ = s; }
  /// @endcond

 private:
  [[nodiscard]] bool is_scan(std::size_t i) const noexcept {
    return i < types_.size() && types_[i] == op_type::scan && results_[i].status == op_status::ok;
  }

  op_result_vector results_;
  std::vector<op_type> types_;
  entry_vector scan_entries_;
  std::vector<std::pair<std::size_t, std::string>> errors_;  // sorted by op index
  std::uint64_t sequence_ = 0;
};

}  // namespace tandem
