#pragma once
/// @file
/// `tandem::batch_result`: the answers of one batch, one per op, in batch
/// order, read per op (`value(i)`, `found(i)`, ...) or as whole columns
/// (`values()`, `keys()`, `found_flags()`, `statuses()`), so a caller with
/// millions of answers reads them as arrays. Scans point into one flat
/// buffer owned by the result; spans and column pointers stay valid as long
/// as the result lives (moving it keeps them valid).
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
///
/// Memory: the answer columns come from the index's pools and go back to
/// them when the result is destroyed (or assigned over), so a caller that
/// drops results as it goes lets later batches reuse the same pages; a
/// result kept alive keeps its memory, and no later batch touches it. A
/// result may outlive its index. Results of batches run together (group
/// commit, see index.hpp) share one set of columns, which goes back when the
/// last of them is destroyed.

#include <tandem/batch.hpp>
#include <tandem/core/column_memory.hpp>
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
  /// A scan that did not run: its entries would have taken the batch's scan
  /// output past config.max_batch_output_bytes (see batch_result::error);
  /// the other ops ran, scans included.
  output_limit,
};

/// The answer to one op.
struct op_result {
  key_type key;
  value_type value;
  std::uint64_t scan_offset;  ///< scans: first entry in scan_entries()
  op_status status;
  bool found;
};

/// A read-only view of scan entries (std::span is C++20).
class entry_span {
 public:
  entry_span() = default;
  entry_span(const entry* data, std::size_t size) : data_(data), size_(size) {}
  [[nodiscard]] const entry* begin() const noexcept { return data_; }
  [[nodiscard]] const entry* end() const noexcept { return data_ + size_; }
  [[nodiscard]] const entry* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] const entry& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  const entry* data_ = nullptr;
  std::size_t size_ = 0;
};

namespace detail {
/// The answer columns of one batch. An index pool owns the memory behind the
/// pointers and gets the whole object back when the last result lets go.
struct answer_columns {
  value_type* values = nullptr;
  std::uint8_t* found = nullptr;
  op_status* status = nullptr;
  entry_vector scan_entries;              ///< every ok scan's entries, scan after scan
  std::vector<std::uint64_t> scan_ops;    ///< op index of every ok scan, increasing
  std::vector<std::uint64_t> scan_begin;  ///< first entry of each, then the end
  virtual ~answer_columns() = default;
};
}  // namespace detail

class batch_result {
 public:
  batch_result() = default;

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// @return every answer of op `i` (a copy assembled from the columns).
  [[nodiscard]] op_result operator[](std::size_t i) const noexcept {
    return {key(i), value(i), scan_offset(i), status(i), found(i)};
  }
  [[nodiscard]] op_status status(std::size_t i) const noexcept { return columns_->status[first_ + i]; }
  [[nodiscard]] bool ok(std::size_t i) const noexcept { return status(i) == op_status::ok; }
  [[nodiscard]] bool found(std::size_t i) const noexcept { return columns_->found[first_ + i] != 0; }
  [[nodiscard]] value_type value(std::size_t i) const noexcept { return columns_->values[first_ + i]; }
  [[nodiscard]] key_type key(std::size_t i) const noexcept { return keys_[i]; }
  /// Entries of scan op `i` (empty for other ops).
  [[nodiscard]] entry_span scan(std::size_t i) const noexcept {
    const auto [first, count] = scan_slot(i);
    return count ? entry_span(columns_->scan_entries.data() + first, count) : entry_span();
  }
  /// Why op `i` did not run (status `invalid` or `output_limit`); empty when
  /// it ran.
  [[nodiscard]] std::string error(std::size_t i) const;
  /// Number of ops with status `invalid`.
  [[nodiscard]] std::size_t invalid_count() const noexcept;
  /// Every entry of every scan, scan after scan in batch order.
  [[nodiscard]] entry_span scan_entries() const noexcept;
  /// Place of this batch in the index's execution order (0 for the first
  /// batch an index runs): batches with lower numbers took effect before,
  /// and it sees the writes of exactly those. A batch of reads answered on
  /// its caller shares the number of the batch after it (and took effect
  /// before it); a batch with writes has a number of its own.
  [[nodiscard]] std::uint64_t sequence() const noexcept { return sequence_; }

  // ---- columns: size() entries each, in batch order ---------------------------
  /// value(i) for every op.
  [[nodiscard]] const value_type* values() const noexcept { return columns_ ? columns_->values + first_ : nullptr; }
  /// key(i) for every op.
  [[nodiscard]] const key_type* keys() const noexcept { return keys_.data(); }
  /// found(i) for every op, as 0 or 1.
  [[nodiscard]] const std::uint8_t* found_flags() const noexcept {
    return columns_ ? columns_->found + first_ : nullptr;
  }
  /// status(i) for every op.
  [[nodiscard]] const op_status* statuses() const noexcept { return columns_ ? columns_->status + first_ : nullptr; }

  /// @cond internal
  /// Filled by the index: answer i is answer first + i of `columns` (its
  /// scan_ops numbered the same way), which must hold first + n answers.
  batch_result(std::shared_ptr<detail::answer_columns> columns, std::size_t first, std::size_t n,
               detail::column<key_type>&& keys)
      : columns_(std::move(columns)), keys_(std::move(keys)), first_(first), size_(n) {}
  detail::answer_columns& mutable_columns() noexcept { return *columns_; }
  detail::column<key_type>& mutable_keys() noexcept { return keys_; }
  /// The messages of the ops that did not run, sorted by op index (moved
  /// in: nothing is allocated).
  void set_errors(std::vector<std::pair<std::size_t, std::string>>&& errors) noexcept { errors_ = std::move(errors); }
  void set_sequence(std::uint64_t s) noexcept { sequence_ = s; }
  /// @endcond

 private:
  /// (first entry, entry count) of scan op i; (0, 0) when it is no ok scan.
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> scan_slot(std::size_t i) const noexcept;
  /// First entry of scan op i in scan_entries() (which, for a result that
  /// shares its columns with others of a group commit, starts inside them);
  /// 0 when it is no ok scan.
  [[nodiscard]] std::uint64_t scan_offset(std::size_t i) const noexcept;

  std::shared_ptr<detail::answer_columns> columns_;
  detail::column<key_type> keys_;
  std::size_t first_ = 0;  // of this batch's answers in columns_
  std::size_t size_ = 0;
  std::vector<std::pair<std::size_t, std::string>> errors_;  // sorted by op index
  std::uint64_t sequence_ = 0;
};

}  // namespace tandem
