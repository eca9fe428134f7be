#pragma once
// A std::map model of the index: replays a batch's ops one by one in batch
// order and checks a batch_result against what it saw, reporting each
// difference with gtest. The semantics themselves are in map_model.hpp.

#include <tandem/tandem.hpp>

#include "support/map_model.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <string>

namespace tandem::test {

class index_model : public map_model {
 public:
  /// Loads `pairs` into `idx` and into the model (a later pair wins).
  void load(tandem::index& idx, const std::vector<entry>& pairs) {
    idx.load(pairs);
    for (const auto& e : pairs) data[e.key] = e.value;
  }

  /// Replays `b` and compares every answer with `r`; returns the number of
  /// mismatching ops (and reports each with gtest).
  std::size_t check(const batch& b, const batch_result& r, const std::string& where = {}) {
    if (r.size() != b.size()) {
      ADD_FAILURE() << where << ": result has " << r.size() << " answers for " << b.size() << " ops";
      return b.size();
    }
    std::size_t bad = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
      const op o = b[i];
      const std::string diff = compare(o, run(o), r, i);
      if (!diff.empty() && ++bad <= 5) ADD_FAILURE() << where << ": " << diff;
    }
    return bad;
  }
};

}  // namespace tandem::test
