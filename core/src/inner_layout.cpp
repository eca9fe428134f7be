// Build and verify of the Harmonia inner levels (layout: inner_layout.hpp).
#include <tandem/core/inner_layout.hpp>
#include <tandem/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace tandem {

namespace {

bool supported_fanout(int fanout) noexcept { return fanout == 16 || fanout == 32 || fanout == 64; }

[[noreturn]] void broken(const std::string& what) { throw invariant_error("inner_layout: " + what); }

}  // namespace

inner_layout inner_layout::build(const key_type* low_keys, const leaf_id* ids, std::size_t leaves, int fanout) {
  if (!supported_fanout(fanout)) {
    throw std::invalid_argument("inner_layout::build: fanout " + std::to_string(fanout) + " is not 16, 32 or 64");
  }
  if (leaves == 0) throw std::invalid_argument("inner_layout::build: the leaf table is empty");
  if (low_keys == nullptr || ids == nullptr) {
    throw std::invalid_argument("inner_layout::build: null low_keys or ids for " + std::to_string(leaves) +
                                " leaves");
  }
  if (low_keys[0] != min_key) {
    throw std::invalid_argument("inner_layout::build: low_keys[0] is " + std::to_string(low_keys[0]) +
                                ", must be 0 (the first leaf owns key 0)");
  }
  for (std::size_t o = 1; o < leaves; ++o) {
    if (low_keys[o] <= low_keys[o - 1]) {
      throw std::invalid_argument("inner_layout::build: low_keys not strictly increasing at ordinal " +
                                  std::to_string(o) + " (" + std::to_string(low_keys[o - 1]) + " then " +
                                  std::to_string(low_keys[o]) + ")");
    }
  }

  const auto f = static_cast<std::size_t>(fanout);
  // Nodes per level, bottom level first: ceil(n / F) nodes over n children.
  std::vector<std::size_t> bottom_up;
  std::size_t total = 0;
  for (std::size_t n = leaves;;) {
    const std::size_t m = (n + f - 1) / f;
    bottom_up.push_back(m);
    total += m;
    n = m;
    if (m == 1) break;
  }
  if (total + leaves > std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error("inner_layout::build: " + std::to_string(leaves) + " leaves need " +
                            std::to_string(total) + " nodes; child indices must fit in 32 bits");
  }

  inner_layout out;
  out.fanout_ = fanout;
  const std::size_t height = bottom_up.size();
  out.level_start_.resize(height + 1);
  out.level_start_[0] = 0;
  for (std::size_t l = 0; l < height; ++l) {
    out.level_start_[l + 1] = out.level_start_[l] + static_cast<std::uint32_t>(bottom_up[height - 1 - l]);
  }
  const auto nodes = static_cast<std::uint32_t>(total);
  out.key_region_.assign(total * f, max_key);
  out.child_prefix_.resize(total + 1);
  out.child_prefix_[total] = nodes + static_cast<std::uint32_t>(leaves);
  out.leaf_ids_.assign(ids, ids + leaves);
  out.build_radix(low_keys, ids, leaves);

  // Bottom-up: each level's children are the level below (or the leaves),
  // each with the smallest key of its subtree in `child_min`.
  std::vector<key_type> child_min(low_keys, low_keys + leaves);
  std::vector<key_type> level_min;
  std::uint32_t child_base = nodes;  // index of the first child of this level
  for (std::size_t l = height; l-- > 0;) {
    const std::uint32_t first = out.level_start_[l];
    const std::size_t m = out.level_start_[l + 1] - first;
    const std::size_t n = child_min.size();
    const std::size_t per = n / m;
    const std::size_t extra = n % m;  // the first `extra` nodes take one more
    level_min.resize(m);
    std::size_t begin = 0;
    for (std::size_t k = 0; k < m; ++k) {
      const std::size_t count = per + (k < extra ? 1 : 0);
      const std::size_t x = first + k;
      out.child_prefix_[x] = child_base + static_cast<std::uint32_t>(begin);
      key_type* keys = out.key_region_.data() + x * f;
      for (std::size_t j = 1; j < count; ++j) keys[j - 1] = child_min[begin + j];
      level_min[k] = child_min[begin];
      begin += count;
    }
    child_min.swap(level_min);
    child_base = first;
  }
  return out;
}

inner_layout_view inner_layout::view() const noexcept {
  inner_layout_view v;
  if (leaf_ids_.empty()) return v;
  v.key_region = key_region_.data();
  v.child_prefix = child_prefix_.data();
  v.leaf_ids = leaf_ids_.data();
  v.node_count = static_cast<std::uint32_t>(node_count());
  v.leaf_count = static_cast<std::uint32_t>(leaf_count());
  v.fanout = fanout_;
  v.height = height();
  return v;
}

std::size_t inner_layout::bytes() const noexcept {
  return key_region_.size() * sizeof(key_type) + child_prefix_.size() * sizeof(std::uint32_t) +
         leaf_ids_.size() * sizeof(leaf_id) + level_start_.size() * sizeof(std::uint32_t);
}

std::size_t inner_layout::radix_bytes() const noexcept {
  return radix_low_.size() * sizeof(key_type) + radix_first_.size() * sizeof(std::uint32_t) +
         radix_buckets_.size() * sizeof(radix_bucket);
}

void inner_layout::build_radix(const key_type* low_keys, const leaf_id* ids, std::size_t leaves) {
  if (leaves < 2) return;
  // About one interval a leaf, at most 2^21.
  int bits = 1;
  while (bits < 21 && (std::size_t{1} << bits) < leaves) ++bits;
  const key_type base = low_keys[1];
  const key_type span = low_keys[leaves - 1] - base;
  int shift = 0;
  while ((span >> shift) >= (std::uint64_t{1} << bits)) ++shift;
  const std::uint64_t buckets = (span >> shift) + 1;
  const key_type below = (key_type{1} << shift) - 1;
  // The first interval whose first key is at or above low_keys[o] (o >= 1).
  auto first_interval = [&](std::size_t o) {
    const key_type d = low_keys[o] - base;
    return (d >> shift) + ((d & below) != 0 ? 1 : 0);
  };
  // first[t], the last ordinal whose low key is at or below interval t's
  // first key, counts the leaves o >= 1 with first_interval(o) <= t.
  std::vector<std::uint32_t> first(buckets + 1);
  for (std::size_t o = 1; o < leaves; ++o) ++first[first_interval(o)];
  std::uint32_t below_or_at = 0;
  for (std::uint32_t& f : first) f = below_or_at += f;
  std::size_t crowded = 0;
  for (std::uint64_t i = 0; i < buckets; ++i) {
    const std::uint32_t width = first[i + 1] - first[i];
    crowded += width > leaf_radix_view::narrow ? width : 0;
  }
  if (crowded > leaves / 8) return;  // too uneven: descents serve better
  // Each interval's candidates first[t] .. first[t + 1], up to three, the
  // last repeated where there are fewer (radix_bucket).
  radix_buckets_.resize(buckets);
  for (std::uint64_t t = 0; t < buckets; ++t) {
    const std::uint32_t lo = first[t];
    const std::uint32_t width = first[t + 1] - lo;
    radix_bucket& e = radix_buckets_[t];
    const std::uint32_t second = lo + (width >= 1 ? 1 : 0);
    const std::uint32_t third = lo + std::min<std::uint32_t>(width, 2);
    e.bounds[0] = low_keys[second];
    e.bounds[1] = low_keys[third];
    e.ids[0] = ids[lo];
    e.ids[1] = ids[second];
    e.ids[2] = ids[third];
    e.wide = width > 2 ? 1 : 0;
  }
  radix_low_.assign(low_keys, low_keys + leaves);
  radix_first_ = std::move(first);
  radix_base_ = base;
  radix_shift_ = shift;
}

leaf_radix_view inner_layout::radix() const noexcept {
  leaf_radix_view r;
  if (radix_first_.empty()) return r;
  r.first = radix_first_.data();
  r.low_keys = radix_low_.data();
  r.bucket_table = radix_buckets_.data();
  r.ids = leaf_ids_.data();
  r.base = radix_base_;
  r.buckets = radix_first_.size() - 1;
  r.shift = radix_shift_;
  r.leaf_count = static_cast<std::uint32_t>(radix_low_.size());
  return r;
}

std::vector<key_type> inner_layout::low_keys() const { return check(); }

void inner_layout::verify() const { (void)check(); }

void inner_layout::verify(const key_type* low_keys, const leaf_id* ids, std::size_t leaves) const {
  const std::vector<key_type> mine = check();
  if (leaves != leaf_ids_.size()) {
    broken("indexes " + std::to_string(leaf_ids_.size()) + " leaves, the leaf table has " + std::to_string(leaves));
  }
  for (std::size_t o = 0; o < leaves; ++o) {
    if (mine[o] != low_keys[o]) {
      broken("node keys give leaf ordinal " + std::to_string(o) + " the low key " + std::to_string(mine[o]) +
             ", the leaf table says " + std::to_string(low_keys[o]));
    }
    if (leaf_ids_[o] != ids[o]) {
      broken("leaf_ids[" + std::to_string(o) + "] is " + std::to_string(leaf_ids_[o]) + ", the leaf table says " +
             std::to_string(ids[o]));
    }
  }
}

std::vector<key_type> inner_layout::check() const {
  if (leaf_ids_.empty() && child_prefix_.empty() && key_region_.empty() && level_start_.empty()) return {};
  if (!supported_fanout(fanout_)) broken("fanout " + std::to_string(fanout_) + " is not 16, 32 or 64");
  const auto f = static_cast<std::size_t>(fanout_);
  const std::size_t leaves = leaf_ids_.size();
  if (leaves == 0) broken("no leaves but non-empty arrays");
  if (child_prefix_.size() < 2) broken("child_prefix has " + std::to_string(child_prefix_.size()) + " entries");
  const std::size_t nodes = child_prefix_.size() - 1;
  if (key_region_.size() != nodes * f) {
    broken("key_region has " + std::to_string(key_region_.size()) + " slots, expected node_count * fanout = " +
           std::to_string(nodes * f));
  }
  if (nodes + leaves > std::numeric_limits<std::uint32_t>::max()) broken("node_count + leaf_count overflows u32");

  // Levels: one root, contiguous, ending at node_count.
  if (level_start_.size() < 2) broken("level_start has " + std::to_string(level_start_.size()) + " entries");
  const std::size_t height = level_start_.size() - 1;
  if (level_start_[0] != 0 || level_start_[1] != 1) broken("level 0 is not the single root node 0");
  for (std::size_t l = 0; l < height; ++l) {
    if (level_start_[l + 1] <= level_start_[l]) broken("level " + std::to_string(l) + " is empty");
  }
  if (level_start_[height] != nodes) {
    broken("level_start ends at " + std::to_string(level_start_[height]) + ", node_count is " + std::to_string(nodes));
  }

  // Prefix sums: strictly increasing, 1..F children per node, each level's
  // children exactly the next level (then the leaves, in order).
  if (child_prefix_[nodes] != nodes + leaves) {
    broken("child_prefix[node_count] is " + std::to_string(child_prefix_[nodes]) +
           ", expected node_count + leaf_count = " + std::to_string(nodes + leaves));
  }
  for (std::size_t x = 0; x < nodes; ++x) {
    const std::uint64_t a = child_prefix_[x];
    const std::uint64_t b = child_prefix_[x + 1];
    if (b <= a) {
      broken("child_prefix not strictly increasing at node " + std::to_string(x) + " (" + std::to_string(a) +
             " then " + std::to_string(b) + ")");
    }
    if (b - a > f) {
      broken("node " + std::to_string(x) + " has " + std::to_string(b - a) + " children, more than fanout " +
             std::to_string(f));
    }
  }
  for (std::size_t l = 0; l < height; ++l) {
    const std::size_t first_child = child_prefix_[level_start_[l]];
    const std::size_t want = l + 1 < height ? level_start_[l + 1] : nodes;
    if (first_child != want) {
      broken("child index out of range: level " + std::to_string(l) + " starts its children at " +
             std::to_string(first_child) + ", its next level starts at " + std::to_string(want));
    }
  }

  // Keys, top-down: each node knows the key range its ancestors route to it,
  // [lo, hi) (hi absent at the right edge). Its valid keys must be strictly
  // increasing inside (lo, hi); child j (1-based) then starts at key j, so a
  // leaf's low key is the lo it inherits: that recovers the leaf table.
  std::vector<key_type> lo(nodes + leaves, 0);
  std::vector<key_type> hi(nodes + leaves, 0);
  std::vector<unsigned char> has_hi(nodes + leaves, 0);
  for (std::size_t x = 0; x < nodes; ++x) {
    const std::size_t first = child_prefix_[x];
    const std::size_t valid = child_prefix_[x + 1] - first - 1;
    const key_type* keys = key_region_.data() + x * f;
    for (std::size_t j = 0; j < valid; ++j) {
      if (j > 0 && keys[j] <= keys[j - 1]) {
        broken("node " + std::to_string(x) + " keys not strictly increasing at slot " + std::to_string(j) + " (" +
               std::to_string(keys[j - 1]) + " then " + std::to_string(keys[j]) + ")");
      }
      if (keys[j] <= lo[x] || (has_hi[x] != 0 && keys[j] >= hi[x])) {
        broken("node " + std::to_string(x) + " key " + std::to_string(keys[j]) + " at slot " + std::to_string(j) +
               " is outside the range its ancestors route to it, (" + std::to_string(lo[x]) + ", " +
               (has_hi[x] != 0 ? std::to_string(hi[x]) : std::string("max]")) +
               "): it is not the smallest key of its child's subtree");
      }
    }
    for (std::size_t j = valid; j < f; ++j) {
      if (keys[j] != max_key) {
        broken("node " + std::to_string(x) + " padding slot " + std::to_string(j) + " is " + std::to_string(keys[j]) +
               ", not max_key");
      }
    }
    for (std::size_t j = 0; j <= valid; ++j) {
      const std::size_t c = first + j;
      lo[c] = j == 0 ? lo[x] : keys[j - 1];
      if (j < valid) {
        hi[c] = keys[j];
        has_hi[c] = 1;
      } else {
        hi[c] = hi[x];
        has_hi[c] = has_hi[x];
      }
    }
  }
  return std::vector<key_type>(lo.begin() + static_cast<std::ptrdiff_t>(nodes), lo.end());
}

}  // namespace tandem
