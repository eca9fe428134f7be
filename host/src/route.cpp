// CPU routing (route.hpp): a radix sort of (key, position) items, then one
// descent per leaf over the sorted keys.
#include <tandem/host/route.hpp>

#include <tandem/host/counting_scatter.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace tandem::host {

namespace {

/// (key, position) in one 16-byte item, the key in the high word so one u128
/// comparison orders both.
using item = route_workspace::item;

/// Sorts group [b, e) of `out` by (key, position), unless it already is;
/// args and types follow their positions.
void sort_group(routed_batch_view& out, std::size_t b, std::size_t e, std::vector<item>& tmp,
                std::vector<std::uint64_t>& moved_args, std::vector<std::uint8_t>& moved_types) {
  bool sorted = true;
  for (std::size_t i = b + 1; i < e && sorted; ++i) {
    sorted = out.keys[i - 1] < out.keys[i] || (out.keys[i - 1] == out.keys[i] && out.positions[i - 1] < out.positions[i]);
  }
  if (sorted) return;
  const std::size_t m = e - b;
  tmp.resize(m);
  // The low word carries the position and the op's index inside the group
  // (to move args and types along): both fit 32 bits.
  for (std::size_t i = 0; i < m; ++i) {
    tmp[i] = (item{out.keys[b + i]} << 64) | (std::uint64_t{out.positions[b + i]} << 32) | i;
  }
  std::sort(tmp.begin(), tmp.end());
  const bool extra = out.args != nullptr;
  if (extra) {
    moved_args.assign(out.args + b, out.args + e);
    moved_types.assign(out.types + b, out.types + e);
  }
  for (std::size_t i = 0; i < m; ++i) {
    const item t = tmp[i];
    out.keys[b + i] = static_cast<key_type>(t >> 64);
    out.positions[b + i] = static_cast<std::uint32_t>(static_cast<std::uint64_t>(t) >> 32);
    if (extra) {
      const auto from = static_cast<std::uint32_t>(t);
      out.args[b + i] = moved_args[from];
      out.types[b + i] = moved_types[from];
    }
  }
}

constexpr std::size_t sort_group_grain = 64;

}  // namespace

void sort_groups(routed_batch_view& out, route_workspace& work) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, out.groups, sort_group_grain),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      route_workspace::thread_scratch& t = work.scratch.local();
                      for (std::size_t g = r.begin(); g < r.end(); ++g) {
                        sort_group(out, out.group_begin[g], out.group_begin[g + 1], t.items, t.args, t.types);
                      }
                    });
  out.key_sorted = true;
}

namespace {

// Pass 1 aims at 2^bucket_bits_target items per bucket (in L2 while it is
// sorted) and has at most 2^bucket_bits_max buckets (write streams per
// scatter chunk).
constexpr unsigned bucket_bits_target = 11;
constexpr unsigned bucket_bits_max = 11;
// Pass 2 digits: at most 2^12 counters per bucket.
constexpr unsigned sub_bits_max = 12;
// Ops per scatter chunk of pass 1, at least.
constexpr std::size_t chunk_min = std::size_t{1} << 15;
// Runs up to this length are sorted by insertion, longer ones by std::sort.
constexpr std::size_t insertion_max = 16;

unsigned bit_width(std::uint64_t x) noexcept { return x ? 64u - static_cast<unsigned>(__builtin_clzll(x)) : 0u; }
unsigned ceil_log2(std::size_t x) noexcept { return x <= 1 ? 0u : bit_width(x - 1); }
key_type key_of(item t) noexcept { return static_cast<key_type>(t >> 64); }
item make_item(key_type key, std::size_t position) noexcept { return (item{key} << 64) | position; }

/// The sorted columns of a bucket: keys and batch positions.
struct columns {
  key_type* keys;
  std::uint32_t* positions;
  void put(std::size_t i, item t) const noexcept {
    keys[i] = key_of(t);
    positions[i] = static_cast<std::uint32_t>(t);
  }
  [[nodiscard]] item at(std::size_t i) const noexcept { return make_item(keys[i], positions[i]); }
};

/// Sorts columns [begin, begin + n) by (key, position): by insertion when
/// short, else through `tmp` with std::sort.
void sort_run(columns c, std::size_t begin, std::size_t n, std::vector<item>& tmp) {
  if (n > insertion_max) {
    tmp.resize(n);
    for (std::size_t i = 0; i < n; ++i) tmp[i] = c.at(begin + i);
    std::sort(tmp.begin(), tmp.end());
    for (std::size_t i = 0; i < n; ++i) c.put(begin + i, tmp[i]);
    return;
  }
  for (std::size_t i = begin + 1; i < begin + n; ++i) {
    const item t = c.at(i);
    std::size_t j = i;
    for (; j > begin && c.at(j - 1) > t; --j) c.put(j, c.at(j - 1));
    c.put(j, t);
  }
}

/// A digit of `bits` bits just below the `width` low bits in which keys may
/// differ: digit(k) = (k >> shift) & mask, monotone in k for such keys.
struct digit {
  unsigned shift = 0;
  std::uint64_t mask = 0;
  [[nodiscard]] std::size_t of(key_type k) const noexcept { return static_cast<std::size_t>((k >> shift) & mask); }
  [[nodiscard]] std::size_t count() const noexcept { return static_cast<std::size_t>(mask) + 1; }
};

digit make_digit(unsigned width, unsigned bits) noexcept {
  bits = std::min(bits, width);
  if (bits == 0) return {0, 0};  // one bucket
  return {width - bits, (std::uint64_t{1} << bits) - 1};
}

/// Sorts bucket `src` (k items; keys agree above their highest differing
/// bit) into the columns `out` at [0, k): a stable counting pass on the next
/// digit of the bucket's own key range, then each run the digit left unsorted.
void sort_bucket(const item* src, std::size_t k, columns out, route_workspace::thread_scratch& scratch) {
  key_type lo = key_of(src[0]), hi = lo;
  for (std::size_t i = 1; i < k; ++i) {
    const key_type key = key_of(src[i]);
    lo = std::min(lo, key);
    hi = std::max(hi, key);
  }
  if (lo == hi || k <= 2 * insertion_max) {  // one key: the stable pass 1 left positions in order
    for (std::size_t i = 0; i < k; ++i) out.put(i, src[i]);
    if (lo != hi) sort_run(out, 0, k, scratch.items);
    return;
  }
  const digit d = make_digit(bit_width(lo ^ hi), std::min(sub_bits_max, std::max(1u, ceil_log2(k))));
  std::vector<std::uint32_t>& counts = scratch.counts;
  counts.assign(d.count() + 1, 0);
  for (std::size_t i = 0; i < k; ++i) ++counts[d.of(key_of(src[i])) + 1];
  for (std::size_t x = 1; x <= d.count(); ++x) counts[x] += counts[x - 1];
  for (std::size_t i = 0; i < k; ++i) out.put(counts[d.of(key_of(src[i]))]++, src[i]);
  // counts[x] is now the end of run x (and the start of run x + 1).
  std::size_t begin = 0;
  for (std::size_t x = 0; x < d.count(); ++x) {
    const std::size_t end = counts[x];
    if (end - begin > 1) sort_run(out, begin, end - begin, scratch.items);
    begin = end;
  }
}

void check_batch(const inner_layout_view& v, std::size_t n, std::uint32_t first_position) {
  if (n > 0 && (v.leaf_count == 0 || v.height < 1)) {
    throw std::invalid_argument("route_sorted: " + std::to_string(n) + " keys but the inner layout is empty");
  }
  if (n >= std::size_t{std::numeric_limits<std::uint32_t>::max()} - first_position) {
    throw std::length_error("route_sorted: a batch of " + std::to_string(n + first_position) +
                            " ops does not fit 32-bit positions; split it");
  }
  if (v.fanout != 16 && v.fanout != 32 && v.fanout != 64) {
    throw std::invalid_argument("route_sorted: inner layout view has fanout " + std::to_string(v.fanout));
  }
}

/// Pass 1: a stable scatter of (key, position) items into buckets by digit
/// `d` of the key (key i at keys[i * stride]), chunks of the input in
/// parallel (counting_scatter.hpp). Fills ws.bucket_begin.
void partition(const key_type* keys, std::size_t stride, std::size_t n, digit d, item* out, route_workspace& ws) {
  const std::size_t buckets = d.count();
  const auto threads = static_cast<std::size_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  const std::size_t chunks = std::max<std::size_t>(1, std::min(4 * threads, n / chunk_min));
  ws.histograms.resize(chunks * buckets);
  ws.bucket_begin.resize(buckets + 1);
  counting_scatter(
      chunks, buckets, [&](std::size_t c) { return c * n / chunks; }, [&](std::size_t i) { return keys[i * stride]; },
      [&](key_type key) { return d.of(key); },
      [&](std::size_t i, key_type key, std::uint32_t at) { out[at] = make_item(key, i); }, ws.histograms.data(),
      ws.bucket_begin.data());
}

/// Pass 1 over n keys (key i at keys[i * stride]): (key, i) items into
/// ws.items, partitioned on the digit below the bits every key shares.
/// @return the number of buckets (ws.bucket_begin holds one more entry).
std::size_t partition_by_key(const key_type* keys, std::size_t stride, std::size_t n, route_workspace& ws) {
  ws.items.resize(n);
  const auto [lo, hi] = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, n, chunk_min), std::pair<key_type, key_type>{max_key, 0},
      [&](const tbb::blocked_range<std::size_t>& r, std::pair<key_type, key_type> m) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) {
          m.first = std::min(m.first, keys[i * stride]);
          m.second = std::max(m.second, keys[i * stride]);
        }
        return m;
      },
      [](std::pair<key_type, key_type> x, std::pair<key_type, key_type> y) {
        return std::pair<key_type, key_type>{std::min(x.first, y.first), std::max(x.second, y.second)};
      });
  const unsigned want = ceil_log2(n) > bucket_bits_target ? ceil_log2(n) - bucket_bits_target : 0u;
  const digit d = make_digit(bit_width(lo ^ hi), std::min(bucket_bits_max, want));
  partition(keys, stride, n, d, ws.items.data(), ws);
  return d.count();
}

/// Pass 2 for bucket b: its items sorted by (key, position) into columns
/// `out` at the bucket's offset. @return the bucket's range [first, end).
std::pair<std::uint32_t, std::uint32_t> sort_bucket_into(route_workspace& ws, std::size_t b, columns out) {
  const std::uint32_t first = ws.bucket_begin[b], end = ws.bucket_begin[b + 1];
  if (first != end) {
    sort_bucket(ws.items.data() + first, end - first, columns{out.keys + first, out.positions + first},
                ws.scratch.local());
  }
  return {first, end};
}

template <int F>
void route_sorted_f(const inner_layout_view& v, const key_type* keys, const std::uint64_t* args,
                    const std::uint8_t* types, std::size_t n, std::uint32_t first_position, routed_batch_view& out,
                    route_workspace& ws) {
  const std::size_t buckets = partition_by_key(keys, 1, n, ws);

  // Pass 2 and the walk, one task per bucket: sort into the output columns,
  // gather args and types, and find the bucket's groups (one descent per
  // leaf), written at the bucket's own offset of the group arrays for now.
  ws.group_count.resize(buckets);
  ws.first_ordinal.resize(buckets);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, buckets), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t b = r.begin(); b < r.end(); ++b) {
      const auto [first, end] = sort_bucket_into(ws, b, columns{out.keys, out.positions});
      ws.group_count[b] = 0;
      if (first == end) continue;
      std::uint32_t g = first;
      leaf_span span{};
      for (std::uint32_t i = first; i < end; ++i) {
        const key_type key = out.keys[i];
        const std::uint32_t p = out.positions[i];
        out.positions[i] = p + first_position;
        if (out.args) out.args[i] = args[p];
        if (out.types) out.types[i] = types[p];
        if (i == first || (span.bounded && key >= span.next_low)) {
          span = descend_span<F>(v, key);
          out.group_begin[g] = i;
          out.group_ordinal[g++] = span.ordinal;
        }
      }
      ws.group_count[b] = g - first;
      ws.first_ordinal[b] = out.group_ordinal[first];
    }
  });

  // Move the groups into place, left to right (each bucket's groups move
  // left, over groups already moved). A leaf whose keys straddle buckets
  // ends one bucket's groups and starts the next one's: one group.
  std::uint32_t total = 0;
  for (std::size_t b = 0; b < buckets; ++b) {
    const std::uint32_t count = ws.group_count[b];
    if (count == 0) continue;
    const std::uint32_t skip = total > 0 && ws.first_ordinal[b] == out.group_ordinal[total - 1] ? 1u : 0u;
    const std::uint32_t from = ws.bucket_begin[b] + skip;
    const std::uint32_t to = ws.bucket_begin[b] + count;
    std::copy(out.group_begin + from, out.group_begin + to, out.group_begin + total);
    std::copy(out.group_ordinal + from, out.group_ordinal + to, out.group_ordinal + total);
    total += count - skip;
  }
  out.groups = total;
  out.group_begin[total] = static_cast<std::uint32_t>(n);
}

}  // namespace

void sort_keys(const key_type* keys, std::size_t stride, std::size_t n, key_type* keys_out,
               std::uint32_t* positions_out, route_workspace& work) {
  if (n >= std::size_t{std::numeric_limits<std::uint32_t>::max()}) {
    throw std::length_error("sort_keys: " + std::to_string(n) + " keys do not fit 32-bit positions");
  }
  if (n == 0) return;
  const std::size_t buckets = partition_by_key(keys, stride, n, work);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, buckets), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t b = r.begin(); b < r.end(); ++b) sort_bucket_into(work, b, columns{keys_out, positions_out});
  });
}

void route_sorted(const inner_layout_view& v, const key_type* keys, const std::uint64_t* args,
                  const std::uint8_t* types, std::size_t n, std::uint32_t first_position, routed_batch_view& out,
                  route_workspace& work) {
  out.key_sorted = true;
  if (n == 0) {
    out.groups = 0;
    out.group_begin[0] = 0;
    return;
  }
  check_batch(v, n, first_position);
  switch (v.fanout) {
    case 16: route_sorted_f<16>(v, keys, args, types, n, first_position, out, work); break;
    case 32: route_sorted_f<32>(v, keys, args, types, n, first_position, out, work); break;
    default: route_sorted_f<64>(v, keys, args, types, n, first_position, out, work); break;
  }
}

namespace {

/// k values, one per part of a merge: inline up to 16 parts (no allocation).
template <class T>
class per_part {
 public:
  explicit per_part(std::size_t k) {
    if (k > 16) heap_.resize(k);
  }
  T* data() noexcept { return heap_.empty() ? inline_ : heap_.data(); }

 private:
  T inline_[16];
  std::vector<T> heap_;
};

}  // namespace

void merge_routes(const routed_batch_view* parts, const std::uint32_t* bases, std::size_t k, std::size_t n,
                  routed_batch_view& out, merge_workspace& work) {
  std::uint64_t lo = std::numeric_limits<std::uint32_t>::max(), hi = 0;  // ordinals [lo, hi)
  for (std::size_t i = 0; i < k; ++i) {
    const routed_batch_view& h = parts[i];
    if (h.groups == 0) continue;
    lo = std::min<std::uint64_t>(lo, h.group_ordinal[0]);
    hi = std::max<std::uint64_t>(hi, std::uint64_t{h.group_ordinal[h.groups - 1]} + 1);
  }
  if (hi <= lo) hi = lo = 0;
  const std::size_t ranges = std::max<std::size_t>(1, std::min<std::size_t>({hi - lo, n >> 14, 4096}));
  // first[r * k + i]: part i's first group of range r (ordinals >= the range's start).
  std::vector<std::uint32_t>& first = work.first;
  first.resize((ranges + 1) * k);
  tbb::parallel_for(std::size_t{0}, ranges + 1, [&](std::size_t r) {
    const std::uint64_t from = lo + (hi - lo) * r / ranges;
    for (std::size_t i = 0; i < k; ++i) {
      const routed_batch_view& h = parts[i];
      first[r * k + i] = r == ranges ? static_cast<std::uint32_t>(h.groups)
                                     : static_cast<std::uint32_t>(std::lower_bound(h.group_ordinal,
                                                                                   h.group_ordinal + h.groups, from) -
                                                                  h.group_ordinal);
    }
  });
  // Walks range r's group lists in ordinal order: visit(ordinal, ops of it).
  auto walk_groups = [&](std::size_t r, auto&& visit) {
    constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
    per_part<std::uint32_t> heads(k);
    std::uint32_t* head = heads.data();
    std::copy(first.begin() + static_cast<std::ptrdiff_t>(r * k), first.begin() + static_cast<std::ptrdiff_t>((r + 1) * k),
              head);
    const std::uint32_t* end = first.data() + (r + 1) * k;
    for (;;) {
      std::uint32_t ord = none;
      for (std::size_t i = 0; i < k; ++i) {
        if (head[i] < end[i]) ord = std::min(ord, parts[i].group_ordinal[head[i]]);
      }
      if (ord == none) return;
      std::uint32_t ops = 0;
      for (std::size_t i = 0; i < k; ++i) {
        const routed_batch_view& h = parts[i];
        if (head[i] < end[i] && h.group_ordinal[head[i]] == ord) {
          ops += h.group_begin[head[i] + 1] - h.group_begin[head[i]];
          ++head[i];
        }
      }
      visit(ord, ops);
    }
  };
  std::vector<std::size_t>& group_at = work.group_at;  // per range: its first output group
  std::vector<std::size_t>& op_at = work.op_at;        // per range: its first output op
  group_at.assign(ranges + 1, 0);
  op_at.assign(ranges + 1, 0);
  tbb::parallel_for(std::size_t{0}, ranges, [&](std::size_t r) {
    std::size_t groups = 0;
    walk_groups(r, [&](std::uint32_t, std::uint32_t) { ++groups; });
    std::size_t ops = 0;
    for (std::size_t i = 0; i < k; ++i) {
      ops += parts[i].group_begin[first[(r + 1) * k + i]] - parts[i].group_begin[first[r * k + i]];
    }
    group_at[r + 1] = groups;
    op_at[r + 1] = ops;
  });
  for (std::size_t r = 0; r < ranges; ++r) {
    group_at[r + 1] += group_at[r];
    op_at[r + 1] += op_at[r];
  }
  if (op_at[ranges] != n) {
    throw std::logic_error("merge_routes: the parts hold " + std::to_string(op_at[ranges]) + " ops, not " + std::to_string(n));
  }
  out.groups = group_at[ranges];
  out.group_begin[out.groups] = static_cast<std::uint32_t>(n);
  out.key_sorted = true;
  tbb::parallel_for(std::size_t{0}, ranges, [&](std::size_t r) {
    std::size_t g = group_at[r];
    auto at = static_cast<std::uint32_t>(op_at[r]);
    walk_groups(r, [&](std::uint32_t ord, std::uint32_t ops) {
      out.group_ordinal[g] = ord;
      out.group_begin[g++] = at;
      at += ops;
    });
    // Each part is sorted by (key, position) as a whole: a k-way merge of
    // the parts' ops in this range.
    per_part<std::uint32_t> cursor(k), stop(k), head_position(k);
    per_part<key_type> head_key(k);
    std::uint32_t* pos = cursor.data();
    std::uint32_t* end = stop.data();
    key_type* hk = head_key.data();
    std::uint32_t* hp = head_position.data();
    // A spent part's head is (max_key, UINT32_MAX): it loses to every op
    // (positions are below 2^32 - 1).
    auto load = [&](std::size_t i) {
      const bool left = pos[i] < end[i];
      hk[i] = left ? parts[i].keys[pos[i]] : max_key;
      hp[i] = left ? parts[i].positions[pos[i]] + bases[i] : std::numeric_limits<std::uint32_t>::max();
    };
    for (std::size_t i = 0; i < k; ++i) {
      pos[i] = parts[i].group_begin[first[r * k + i]];
      end[i] = parts[i].group_begin[first[(r + 1) * k + i]];
      load(i);
    }
    for (std::size_t o = op_at[r], o_end = op_at[r + 1]; o < o_end; ++o) {
      std::size_t best = 0;
      key_type best_key = hk[0];
      std::uint32_t best_position = hp[0];
      for (std::size_t i = 1; i < k; ++i) {  // branch-free: the heads' order is random
        const bool less = (hk[i] < best_key) | ((hk[i] == best_key) & (hp[i] < best_position));
        best = less ? i : best;
        best_key = less ? hk[i] : best_key;
        best_position = less ? hp[i] : best_position;
      }
      const std::uint32_t q = pos[best]++;
      out.keys[o] = best_key;
      out.positions[o] = best_position;
      if (out.args) {
        out.args[o] = parts[best].args[q];
        out.types[o] = parts[best].types[q];
      }
      load(best);
    }
  });
}

}  // namespace tandem::host
