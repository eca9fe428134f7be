// CPU routing (route.hpp): grouped, prefetching descent and grouping by leaf.
#include <tandem/host/route.hpp>

#include <tandem/core/macros.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_sort.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace tandem::host {

namespace {

// Keys in flight per worker: 16 measured best (8 and 32 in flight were 3-40%
// slower on 2^16..2^23-leaf trees); about what one core's fill buffers sustain.
constexpr std::uint32_t group_width = 16;
// Keys per parallel_for grain: big enough to amortise task overhead.
constexpr std::size_t descent_grain = 4096;
// Ops per counting-sort chunk, at least.
constexpr std::size_t counting_chunk = 1 << 15;
// Pairs below which one thread sorts.
constexpr std::size_t parallel_sort_min = 1 << 14;
// A bucket whose ops times this is below its ordinal range is sorted.
constexpr std::size_t sparse_bucket_factor = 8;

// The first hot_tree_bytes of the key region (the top levels) stay in cache
// under any load; prefetching them only costs instructions and fill buffers.
constexpr std::size_t hot_tree_bytes = 32 * 1024;

template <int F>
inline void prefetch_node(const inner_layout_view& v, std::uint32_t x) {
  // A node is F * 8 bytes at a 128-byte aligned place: F / 8 whole lines.
  const char* p = reinterpret_cast<const char*>(v.key_region + static_cast<std::size_t>(x) * F);
  for (int line = 0; line < F / 8; ++line) TANDEM_PREFETCH(p + 64 * line);
  TANDEM_PREFETCH(v.child_prefix + x);
}

// Descends m <= G keys together, level by level: each key's next node is
// prefetched whole, then the other keys of the group are searched while its
// lines arrive.
template <int F, std::uint32_t G, bool Prefetch>
inline void descend_group(const inner_layout_view& v, const key_type* keys, std::uint32_t m, std::uint32_t* out) {
  constexpr std::uint32_t hot_nodes = hot_tree_bytes / (F * sizeof(key_type));
  std::uint32_t x[G];
  for (std::uint32_t g = 0; g < m; ++g) x[g] = 0;
  for (int level = 0; level + 1 < v.height; ++level) {
    for (std::uint32_t g = 0; g < m; ++g) {
      x[g] = node_search<F>(v, x[g], keys[g]);
      if (Prefetch && x[g] >= hot_nodes) prefetch_node<F>(v, x[g]);
    }
  }
  for (std::uint32_t g = 0; g < m; ++g) out[g] = node_search<F>(v, x[g], keys[g]) - v.node_count;
}

template <int F, bool Prefetch>
void descend_groups(const inner_layout_view& v, const key_type* keys, std::size_t begin, std::size_t end,
                    std::uint32_t* ordinals) {
  std::size_t i = begin;
  for (; i + group_width <= end; i += group_width) {
    descend_group<F, group_width, Prefetch>(v, keys + i, group_width, ordinals + i);
  }
  if (i < end) descend_group<F, group_width, Prefetch>(v, keys + i, static_cast<std::uint32_t>(end - i), ordinals + i);
}

template <int F>
void descend_range(const inner_layout_view& v, const key_type* keys, std::size_t begin, std::size_t end,
                   std::uint32_t* ordinals, descent_method method) {
  switch (method) {
    case descent_method::plain:
      for (std::size_t i = begin; i < end; ++i) ordinals[i] = descend<F>(v, keys[i]);
      break;
    case descent_method::grouped_no_prefetch: descend_groups<F, false>(v, keys, begin, end, ordinals); break;
    case descent_method::grouped: descend_groups<F, true>(v, keys, begin, end, ordinals); break;
  }
}

template <int F>
void descend_batch_f(const inner_layout_view& v, const key_type* keys, std::size_t n, std::uint32_t* ordinals,
                     descent_method method) {
  if (n <= descent_grain) {
    descend_range<F>(v, keys, 0, n, ordinals, method);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, descent_grain),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      descend_range<F>(v, keys, r.begin(), r.end(), ordinals, method);
                    });
}

void check_batch(const inner_layout_view& v, std::size_t n) {
  if (n > 0 && (v.leaf_count == 0 || v.height < 1)) {
    throw std::invalid_argument("route_cpu: " + std::to_string(n) + " keys but the inner layout is empty");
  }
  if (n > std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error("route_cpu: a batch of " + std::to_string(n) +
                            " ops does not fit 32-bit positions; split it");
  }
}

void clear_groups(routed_batch& out) {
  out.group_begin.clear();
  out.group_ordinal.clear();
  out.group_leaf.clear();
}

// ---- grouping: stable counting sort over leaf ordinals ----------------------
//
// Few leaves (<= 2^direct_bits = 4096): one pass. Each chunk of ops counts its
// ordinals, a prefix over (ordinal, chunk) gives every chunk its slots, and
// each chunk scatters its positions in order: stable.
//
// More leaves: a histogram over all of them would not stay in cache, and
// each op would pay two cache misses (count, scatter). So two passes, MSD:
// pass 1 partitions (ordinal, position) pairs stably by the ordinal's high
// bits into at most 2^12 buckets (small histograms, few write streams);
// pass 2 sorts each bucket by the low bits inside the cache, buckets in
// parallel: a counting sort over the bucket's ordinal range, or, for a bucket
// with few ops for its range, a plain sort of its pairs (the pair value
// orders by ordinal, then position, so both are stable).

// Measured on the 16-core GPU machine, 2^22 ops, ns per op with 1 / 16
// threads: 2^12 leaves: one pass 2.7 / 0.50, two passes 4.7 / 0.53; 2^16:
// one pass 6.1 / 2.2, two 5.5 / 0.50; 2^20: one pass 9.0 / 32 (16 histograms
// of 4 MiB), two 5.9 / 0.62.
constexpr unsigned direct_bits = 12;
constexpr unsigned min_high_bits = 10;
constexpr unsigned bucket_low_bits = 13;  // ordinals per bucket: up to 2^13 (32 KiB of counts)

struct bucketing {
  unsigned shift;       // bucket of ordinal o = o >> shift
  std::size_t buckets;  // ceil(leaves / 2^shift)
};

bucketing choose_buckets(std::size_t leaves) {
  unsigned bits = 0;
  while ((std::size_t{1} << bits) < leaves) ++bits;
  if (bits <= direct_bits) return {0, leaves};
  // High-bit digit: 10..12 bits (at most 4096 buckets: few write streams in
  // pass 1), the rest low (<= 13 bits up to 2^25 leaves).
  const unsigned high =
      std::min(12u, std::max(min_high_bits, bits > bucket_low_bits ? bits - bucket_low_bits : 0u));
  const unsigned shift = bits - high;
  return {shift, (leaves + (std::size_t{1} << shift) - 1) >> shift};
}

std::size_t chunk_count(std::size_t n) {
  const auto threads = static_cast<std::size_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  return std::max<std::size_t>(1, std::min(threads, (n + counting_chunk - 1) / counting_chunk));
}

void counting_sort(const inner_layout_view& v, routed_batch& out) {
  const std::size_t n = out.ordinals.size();
  const std::uint32_t* ord = out.ordinals.data();
  const bucketing bk = choose_buckets(v.leaf_count);
  const std::size_t buckets = bk.buckets;
  const unsigned shift = bk.shift;
  const std::size_t chunks = chunk_count(n);
  auto chunk_begin = [&](std::size_t c) { return c * n / chunks; };
  route_workspace& ws = out.workspace;
  out.positions.resize(n);
  std::uint32_t* pos = out.positions.data();
  clear_groups(out);

  // Pass 1: per-chunk histograms over buckets, prefix, stable scatter.
  ws.chunk_counts.assign(chunks * buckets, 0);
  std::uint32_t* hist = ws.chunk_counts.data();
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    std::uint32_t* h = hist + c * buckets;
    for (std::size_t i = chunk_begin(c), e = chunk_begin(c + 1); i < e; ++i) ++h[ord[i] >> shift];
  });
  ws.bucket_begin.resize(buckets + 1);
  std::uint32_t* bucket_begin = ws.bucket_begin.data();
  std::uint32_t sum = 0;
  for (std::size_t b = 0; b < buckets; ++b) {
    bucket_begin[b] = sum;
    for (std::size_t c = 0; c < chunks; ++c) {
      const std::uint32_t count = hist[c * buckets + b];
      hist[c * buckets + b] = sum;
      sum += count;
    }
  }
  bucket_begin[buckets] = sum;

  if (shift == 0) {
    // Buckets are ordinals: scatter positions, and the groups are the
    // non-empty buckets.
    tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
      std::uint32_t* h = hist + c * buckets;
      for (std::size_t i = chunk_begin(c), e = chunk_begin(c + 1); i < e; ++i) {
        pos[h[ord[i]]++] = static_cast<std::uint32_t>(i);
      }
    });
    for (std::size_t o = 0; o < buckets; ++o) {
      if (bucket_begin[o] == bucket_begin[o + 1]) continue;
      out.group_begin.push_back(bucket_begin[o]);
      out.group_ordinal.push_back(static_cast<std::uint32_t>(o));
      out.group_leaf.push_back(v.leaf_ids[o]);
    }
    out.group_begin.push_back(static_cast<std::uint32_t>(n));
    return;
  }

  ws.pairs.resize(n);
  std::uint64_t* pairs = ws.pairs.data();
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    std::uint32_t* h = hist + c * buckets;
    for (std::size_t i = chunk_begin(c), e = chunk_begin(c + 1); i < e; ++i) {
      pairs[h[ord[i] >> shift]++] = (std::uint64_t{ord[i]} << 32) | i;
    }
  });

  // Pass 2a: per bucket, count by ordinal (or sort a sparse bucket) and
  // count its groups. counts[o] is only touched by o's bucket.
  ws.counts.resize(v.leaf_count);
  std::uint32_t* counts = ws.counts.data();
  ws.bucket_groups.resize(buckets + 1);
  std::uint32_t* bucket_groups = ws.bucket_groups.data();
  ws.bucket_sorted.resize(buckets);
  unsigned char* bucket_sorted = ws.bucket_sorted.data();
  const std::size_t range = std::size_t{1} << shift;
  constexpr std::size_t bucket_grain = 16;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, buckets, bucket_grain),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t b = r.begin(); b < r.end(); ++b) {
                        const std::size_t k = bucket_begin[b + 1] - bucket_begin[b];
                        std::uint64_t* p = pairs + bucket_begin[b];
                        std::uint32_t groups = 0;
                        if (k * sparse_bucket_factor < range) {
                          std::sort(p, p + k);
                          for (std::size_t i = 0; i < k; ++i) groups += (i == 0 || (p[i] >> 32) != (p[i - 1] >> 32));
                          bucket_sorted[b] = 1;
                        } else {
                          const std::size_t lo = b << shift;
                          const std::size_t hi = std::min<std::size_t>(lo + range, v.leaf_count);
                          std::fill(counts + lo, counts + hi, 0u);
                          for (std::size_t i = 0; i < k; ++i) ++counts[p[i] >> 32];
                          for (std::size_t o = lo; o < hi; ++o) groups += counts[o] != 0;
                          bucket_sorted[b] = 0;
                        }
                        bucket_groups[b] = groups;
                      }
                    });
  std::uint32_t total_groups = 0;
  for (std::size_t b = 0; b < buckets; ++b) {
    const std::uint32_t g = bucket_groups[b];
    bucket_groups[b] = total_groups;
    total_groups += g;
  }
  bucket_groups[buckets] = total_groups;
  out.group_begin.resize(std::size_t{total_groups} + 1);
  out.group_ordinal.resize(total_groups);
  out.group_leaf.resize(total_groups);
  out.group_begin[total_groups] = static_cast<std::uint32_t>(n);

  // Pass 2b: per bucket, write its groups and its positions.
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, buckets, bucket_grain),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t b = r.begin(); b < r.end(); ++b) {
                        const std::uint32_t first = bucket_begin[b];
                        const std::size_t k = bucket_begin[b + 1] - first;
                        const std::uint64_t* p = pairs + first;
                        std::uint32_t g = bucket_groups[b];
                        if (bucket_sorted[b] != 0) {
                          for (std::size_t i = 0; i < k; ++i) {
                            const auto o = static_cast<std::uint32_t>(p[i] >> 32);
                            if (i == 0 || o != static_cast<std::uint32_t>(p[i - 1] >> 32)) {
                              out.group_begin[g] = first + static_cast<std::uint32_t>(i);
                              out.group_ordinal[g] = o;
                              out.group_leaf[g] = v.leaf_ids[o];
                              ++g;
                            }
                            pos[first + i] = static_cast<std::uint32_t>(p[i]);
                          }
                          continue;
                        }
                        const std::size_t lo = b << shift;
                        const std::size_t hi = std::min<std::size_t>(lo + range, v.leaf_count);
                        std::uint32_t at = first;
                        for (std::size_t o = lo; o < hi; ++o) {
                          const std::uint32_t count = counts[o];
                          if (count == 0) continue;
                          out.group_begin[g] = at;
                          out.group_ordinal[g] = static_cast<std::uint32_t>(o);
                          out.group_leaf[g] = v.leaf_ids[o];
                          ++g;
                          counts[o] = at;
                          at += count;
                        }
                        for (std::size_t i = 0; i < k; ++i) pos[counts[p[i] >> 32]++] = static_cast<std::uint32_t>(p[i]);
                      }
                    });
}

void pair_sort(const inner_layout_view& v, routed_batch& out) {
  const std::size_t n = out.ordinals.size();
  // (ordinal, position) as one u64: sorting it orders positions inside a group.
  std::vector<std::uint64_t>& pairs = out.workspace.pairs;
  pairs.resize(n);
  for (std::size_t i = 0; i < n; ++i) pairs[i] = (std::uint64_t{out.ordinals[i]} << 32) | i;
  if (n >= parallel_sort_min) {
    tbb::parallel_sort(pairs.begin(), pairs.end());
  } else {
    std::sort(pairs.begin(), pairs.end());
  }
  out.positions.resize(n);
  clear_groups(out);
  for (std::size_t i = 0; i < n; ++i) {
    const auto o = static_cast<std::uint32_t>(pairs[i] >> 32);
    out.positions[i] = static_cast<std::uint32_t>(pairs[i]);
    if (i == 0 || o != out.group_ordinal.back()) {
      out.group_begin.push_back(static_cast<std::uint32_t>(i));
      out.group_ordinal.push_back(o);
      out.group_leaf.push_back(v.leaf_ids[o]);
    }
  }
  out.group_begin.push_back(static_cast<std::uint32_t>(n));
}

}  // namespace

void descend_batch(const inner_layout_view& v, const key_type* keys, std::size_t n, std::uint32_t* ordinals,
                   descent_method method) {
  check_batch(v, n);
  if (n == 0) return;
  switch (v.fanout) {
    case 16: descend_batch_f<16>(v, keys, n, ordinals, method); break;
    case 32: descend_batch_f<32>(v, keys, n, ordinals, method); break;
    case 64: descend_batch_f<64>(v, keys, n, ordinals, method); break;
    default: throw std::invalid_argument("route_cpu: inner layout view has fanout " + std::to_string(v.fanout));
  }
}

void group_by_leaf(const inner_layout_view& v, routed_batch& out, grouping_method method) {
  const std::size_t n = out.ordinals.size();
  check_batch(v, n);
  if (method == grouping_method::automatic) {
    method = n <= pair_sort_max_ops ? grouping_method::pair_sort : grouping_method::counting_sort;
  }
  if (method == grouping_method::counting_sort) {
    counting_sort(v, out);
  } else {
    pair_sort(v, out);
  }
}

void route_cpu(const inner_layout_view& v, const key_type* keys, std::size_t n, routed_batch& out,
               const route_options& options) {
  check_batch(v, n);
  out.ordinals.resize(n);
  descend_batch(v, keys, n, out.ordinals.data(), options.descent);
  group_by_leaf(v, out, options.grouping);
}

routed_batch route_cpu(const inner_layout& layout, const key_type* keys, std::size_t n,
                       const route_options& options) {
  routed_batch out;
  route_cpu(layout.view(), keys, n, out, options);
  return out;
}


namespace {

/// One op of a group being sorted: (key, position) in one 16-byte item, the
/// key in the high word so one u128 comparison orders both.
__extension__ typedef unsigned __int128 sort_item;

/// Sorts group [b, e) of `out` by (key, position), unless it already is;
/// args and types follow their positions.
void sort_group(routed_batch_view& out, std::size_t b, std::size_t e, std::vector<sort_item>& tmp,
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
    tmp[i] = (sort_item{out.keys[b + i]} << 64) | (std::uint64_t{out.positions[b + i]} << 32) | i;
  }
  std::sort(tmp.begin(), tmp.end());
  const bool extra = out.args != nullptr;
  if (extra) {
    moved_args.assign(out.args + b, out.args + e);
    moved_types.assign(out.types + b, out.types + e);
  }
  for (std::size_t i = 0; i < m; ++i) {
    const sort_item t = tmp[i];
    out.keys[b + i] = static_cast<key_type>(t >> 64);
    out.positions[b + i] = static_cast<std::uint32_t>(static_cast<std::uint64_t>(t) >> 32);
    if (extra) {
      const auto from = static_cast<std::uint32_t>(t);
      out.args[b + i] = moved_args[from];
      out.types[b + i] = moved_types[from];
    }
  }
}

constexpr std::size_t group_grain = 64;

/// Per worker thread, kept: sorting a group allocates nothing once warm.
struct sort_buffers {
  std::vector<sort_item> items;
  std::vector<std::uint64_t> args;
  std::vector<std::uint8_t> types;
};
thread_local sort_buffers sort_buffer;

}  // namespace

void sort_groups(routed_batch_view& out) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, out.groups, group_grain),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      sort_buffers& t = sort_buffer;
                      for (std::size_t g = r.begin(); g < r.end(); ++g) {
                        sort_group(out, out.group_begin[g], out.group_begin[g + 1], t.items, t.args, t.types);
                      }
                    });
  out.key_sorted = true;
}

void route_sorted(const inner_layout_view& v, const key_type* keys, const std::uint64_t* args,
                  const std::uint8_t* types, std::size_t n, std::uint32_t first_position, routed_batch_view& out,
                  routed_batch& work) {
  route_cpu(v, keys, n, work);
  const std::size_t groups = work.group_count();
  std::copy(work.group_begin.begin(), work.group_begin.end(), out.group_begin);
  std::copy(work.group_ordinal.begin(), work.group_ordinal.end(), out.group_ordinal);
  out.groups = groups;
  if (groups == 0) out.group_begin[0] = 0;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, groups, group_grain),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      sort_buffers& t = sort_buffer;
                      for (std::size_t g = r.begin(); g < r.end(); ++g) {
                        const std::size_t b = work.group_begin[g], e = work.group_begin[g + 1];
                        for (std::size_t i = b; i < e; ++i) {
                          const std::uint32_t p = work.positions[i];
                          out.keys[i] = keys[p];
                          out.positions[i] = p + first_position;
                          if (out.args) out.args[i] = args[p];
                          if (out.types) out.types[i] = types[p];
                        }
                        sort_group(out, b, e, t.items, t.args, t.types);
                      }
                    });
  out.key_sorted = true;
}

}  // namespace tandem::host
