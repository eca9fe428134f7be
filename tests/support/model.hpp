#pragma once
// A std::map model of the index: replays a batch's ops one by one in batch
// order and checks a batch_result against what it saw, reporting each
// difference with gtest. The semantics themselves are in map_model.hpp.

#include <tandem/tandem.hpp>

#include "support/map_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

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

/// Batches and their results, collected from many submitting threads and
/// checked on a model in the index's execution order (sequence()).
class answered_batches {
 public:
  struct answered {
    batch b;
    batch_result r;
  };
  /// Thread-safe.
  void add(batch b, batch_result r) {
    std::lock_guard<std::mutex> lock(mutex_);
    done_.push_back({std::move(b), std::move(r)});
  }
  /// The batches in the order they took effect: by sequence number, and a
  /// batch of reads before a batch with writes of the same number (reads
  /// answered on their callers share the number of the batch after them).
  /// Requires: no add() under way.
  const std::vector<answered>& in_sequence() {
    std::stable_sort(done_.begin(), done_.end(), [](const answered& x, const answered& y) {
      if (x.r.sequence() != y.r.sequence()) return x.r.sequence() < y.r.sequence();
      return !writes(x.b) && writes(y.b);
    });
    return done_;
  }
  /// Replays every batch on `model` in that order. Each result must equal
  /// the model's answers; a batch with writes must have a number of its
  /// own, and the numbers of those taken up by the dispatcher (all but
  /// reads answered on callers) leave no gap. Returns the mismatching ops
  /// (each reported with gtest).
  std::size_t check_in_sequence(index_model& model) {
    std::size_t bad = 0;
    const std::vector<answered>& all = in_sequence();
    for (std::size_t i = 0; i < all.size() && bad == 0; ++i) {
      if (i > 0 && writes(all[i].b) && all[i - 1].r.sequence() == all[i].r.sequence() && writes(all[i - 1].b)) {
        ADD_FAILURE() << "two batches with writes share number " << all[i].r.sequence();
        return 1;
      }
      if (i > 0 && all[i].r.sequence() > all[i - 1].r.sequence() + 1) {
        ADD_FAILURE() << "sequence numbers skip from " << all[i - 1].r.sequence() << " to " << all[i].r.sequence();
        return 1;
      }
      bad += model.check(all[i].b, all[i].r, "batch #" + std::to_string(all[i].r.sequence()));
    }
    return bad;
  }
  static bool writes(const batch& b) {
    for (std::size_t i = 0; i < b.size(); ++i) {
      const op_type t = b.types()[i];
      if (t == op_type::put || t == op_type::insert || t == op_type::erase) return true;
    }
    return false;
  }

 private:
  std::mutex mutex_;
  std::vector<answered> done_;
};

}  // namespace tandem::test
