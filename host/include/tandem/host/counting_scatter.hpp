#pragma once
/// @file
/// A stable, parallel counting scatter: items [0, n) go to buckets by their
/// keys, the buckets back to back in one output, each bucket's items in
/// input order. It is the first pass of CPU routing (route.cpp: buckets are
/// a radix digit of the key) and tandem-bench's cut of a batch by key range
/// (bench/src/shard_cut.cpp: buckets are the ranges).
///
/// How. The input is cut into chunks, one task each. Pass 1 counts each
/// chunk's items per bucket; a serial prefix, bucket by bucket and chunk by
/// chunk inside a bucket, turns the counts into each chunk's first slot in
/// each bucket (so a bucket keeps input order); pass 2 writes each item at
/// its chunk's next slot of its bucket.
///
///     counts[c * buckets + b]   after pass 1: items of chunk c in bucket b;
///                               after the prefix: their first slot; after
///                               pass 2: one past their last slot
///     begin[b]                  bucket b's first slot; begin[buckets] = n
///
/// Waiting: the call waits; both passes run in the caller's current task
/// arena.

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cstddef>

namespace tandem::host {

/// @brief Scatters items [0, n) into `buckets` buckets, stably (see the file
///        comment). Parallel, waits.
/// @param chunks      tasks of each pass (>= 1 when n > 0)
/// @param chunk_begin chunk_begin(c): chunk c's first item, for c in
///                    [0, chunks]; chunk_begin(0) = 0, chunk_begin(chunks) = n,
///                    non-decreasing
/// @param key_of      key_of(i): item i's key (read once in each pass)
/// @param bucket_of   bucket_of(key): its bucket, < buckets
/// @param place       place(i, key, j): puts item i, of key `key`, at slot j
/// @param counts      chunks * buckets counters (any contents on entry)
/// @param begin       buckets + 1 entries: bucket b is slots [begin[b], begin[b + 1])
template <class Count, class ChunkBegin, class KeyOf, class BucketOf, class Place>
void counting_scatter(std::size_t chunks, std::size_t buckets, ChunkBegin&& chunk_begin, KeyOf&& key_of,
                      BucketOf&& bucket_of, Place&& place, Count* counts, Count* begin) {
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    Count* mine = counts + c * buckets;
    std::fill(mine, mine + buckets, Count{0});
    for (std::size_t i = chunk_begin(c), e = chunk_begin(c + 1); i < e; ++i) ++mine[bucket_of(key_of(i))];
  });
  Count at = 0;
  for (std::size_t b = 0; b < buckets; ++b) {
    begin[b] = at;
    for (std::size_t c = 0; c < chunks; ++c) {
      const Count count = counts[c * buckets + b];
      counts[c * buckets + b] = at;
      at += count;
    }
  }
  begin[buckets] = at;
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    Count* next = counts + c * buckets;
    for (std::size_t i = chunk_begin(c), e = chunk_begin(c + 1); i < e; ++i) {
      const auto key = key_of(i);
      place(i, key, next[bucket_of(key)]++);
    }
  });
}

}  // namespace tandem::host
