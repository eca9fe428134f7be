#pragma once
/// @file
/// The --verify model: an absl::btree_map that replays the batches one op
/// at a time in batch order (what tandem promises: batch-sequential
/// semantics) and checks each of tandem's answers against it.

#include "baselines.hpp"

#include <tandem/batch.hpp>
#include <tandem/batch_result.hpp>

#include <absl/container/btree_map.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem_bench {

class model {
 public:
  /// Starts from `n` distinct pairs (any order).
  void load(const tandem::key_type* keys, const tandem::value_type* values, std::size_t n);

  /// Replays `ops` (batch number `batch_no`) and compares every answer of
  /// `got` with the model's: status, found, value and key of every op, and
  /// every entry of every scan (unordered scans are sorted first). Returns
  /// the number of mismatching ops; the first `report_left` of them are
  /// described on stderr (and `report_left` is decreased).
  std::uint64_t check(const std::vector<tandem::op>& ops, const tandem::batch_result& got, std::size_t batch_no,
                      std::uint64_t& report_left);

  /// Compares the final contents of a baseline with the model's; returns
  /// "" when equal, else what differs first.
  [[nodiscard]] std::string compare_contents(const baseline& other) const;

  [[nodiscard]] std::size_t size() const { return data_.size(); }

  /// The model's value of `key` (for checking the GPU sorted array's gets):
  /// true and `value` set when present.
  [[nodiscard]] bool find(tandem::key_type key, tandem::value_type& value) const {
    const auto it = data_.find(key);
    if (it == data_.end()) return false;
    value = it->second;
    return true;
  }

 private:
  absl::btree_map<tandem::key_type, tandem::value_type> data_;
  std::vector<tandem::entry> scan_;
};

}  // namespace tandem_bench
