#pragma once
/// @file
/// `bpa`: the buffered partitioned array, tandem's leaf storage (BP-tree).
///
/// A BPA holds up to `capacity` key/value pairs of one leaf in three parts:
/// a small unsorted *log* that takes new keys in O(1), a sorted *header* of
/// block lower bounds, and *blocks* that are unsorted inside. Lookups scan the
/// log, pick the block through the header, and scan that block; a block
/// known sorted (a per-block bit, set by rebuilds and ordered reads) is
/// searched instead: the two cache lines around the slot interpolated from
/// the header bounds, compared without branches; a key outside them is
/// sought in the line beyond them on its side, then by a bisection. A route
/// may hint a lookup's block and window (core/leaf_guide.hpp). A block
/// holds key/value entries, so the lines that hold a key hold its value
/// too. When the log fills it is *flushed*: its keys are appended to their
/// blocks, or, if some block would overflow, log and blocks are merged and
/// redistributed evenly.
///
/// How it differs from the BP-tree of the thesis:
/// - Every key lives in exactly one place, the log or its block: the log holds
///   no delete markers. Every operation looks its key up anyway (an erase
///   reports whether it erased, an insert whether it inserted), so an erase
///   removes the key where it found it and a write to a key already in a block
///   overwrites it there. This removes the delete/insert/delete flaw of
///   buffered delete markers: there is nothing to cancel.
/// - The element count is exact at all times, so the split trigger is exact:
///   an insert of a new key into a BPA holding `capacity` keys is refused
///   (`full`), and a flush never fails because everything that is held fits
///   into the blocks. The owner (the leaf store) splits and retries.
/// - A header entry is a lower bound of its block, not a copy of an element:
///   erasing a block's minimum needs no redistribution.
/// - Keys 0 and UINT64_MAX are ordinary keys; occupancy is kept by counts.
///
/// Threads: a BPA is not synchronised. One task owns a leaf at a time
/// (DESIGN: leaf phase); the const operations (`get`, `lower_bound`,
/// `iterate`, `map`, `count`) may run concurrently with each other. One-key
/// ops beside other threads' writes go through shared_leaf.hpp.
///
/// The longer members' bodies are in detail/bpa.inl (fill_compact_guide in
/// detail/bpa_compact_guide.inl); the runs `apply` takes, and `put_entry`,
/// in point_run.hpp.
///
/// Storage, as a pseudo-struct (L = LogSize, B = NumBlocks, S = BlockSize):
///
///     struct bpa {
///       uint64_t   sorted_mask;        // bit b: block b is sorted by key
///       uint size, block_count, log_size;  bool log_sorted;
///       uint       block_size[B];      // (each uint: the narrowest that holds its maximum)
///       key_type   header[B];          // [0, block_count): lower bounds, strictly
///                                      // increasing; [block_count, B): max_key
///       key_type   log_keys[L];        // [0, log_size): unsorted unless log_sorted
///       value_type log_values[L];
///       entry      blocks[B][S];       // block b: [0, block_size[b]) used; in
///                                      // a leaf on a line (leaf.hpp checks),
///                                      // 4 entries a line
///     };
///
/// Invariants (checked by `verify()`):
/// 1. `size == log_size + sum(block_size)`, `size <= capacity`,
///    `1 <= block_count <= B`, `block_size[b] == 0` for `b >= block_count`.
/// 2. For b < block_count: every key k of block b has
///    `header[b] <= k < header[b+1]` (no upper bound for the last block);
///    header is strictly increasing over [0, block_count).
/// 3. Keys are unique across log and blocks together.
/// 4. A block whose sorted bit is set is sorted; the log is sorted when
///    `log_sorted` is set.

#include <tandem/core/leaf_guide.hpp>
#include <tandem/core/macros.hpp>
#include <tandem/core/types.hpp>
#include <tandem/error.hpp>
#include <tandem/host/point_run.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace tandem::host {

template <class Bpa>
struct shared_access;

enum class upsert_status : std::uint8_t { inserted, replaced, full };
enum class insert_status : std::uint8_t { inserted, present, full };

/// How `apply` runs a key-sorted run of ops.
enum class apply_path : std::uint8_t {
  automatic,  ///< merge when the run is large relative to the leaf
  per_op,     ///< one lookup and log insert per op
  merge,      ///< one merge of the sorted leaf with the run, then a rebuild
};

/// The narrowest unsigned type that holds 0 .. max.
template <std::size_t Max>
using uint_for = std::conditional_t<Max <= 0xff, std::uint8_t,
                                    std::conditional_t<Max <= 0xffff, std::uint16_t, std::uint32_t>>;

template <int LogSize = 32, int NumBlocks = 32, int BlockSize = 32>
class basic_bpa {
  static_assert(LogSize >= 1 && LogSize <= 65535, "log size out of range");
  static_assert(NumBlocks >= 1 && NumBlocks <= 64, "the sorted mask holds at most 64 blocks");
  static_assert(BlockSize >= 1 && BlockSize <= 65535, "block size out of range");

 public:
  static constexpr std::size_t log_capacity = LogSize;
  static constexpr std::size_t num_blocks = NumBlocks;
  static constexpr std::size_t block_capacity = BlockSize;
  /// Most keys one BPA holds; an insert of a new key beyond it is refused.
  static constexpr std::size_t capacity = std::size_t{NumBlocks} * BlockSize;
  /// `apply` merges when `run_length * merge_crossover >= size()` (see
  /// bench/host/apply_run_bench.cpp, BM_ApplyRun, for the measurement).
  static constexpr std::size_t merge_crossover = 10;

  basic_bpa() noexcept { clear(); }

  /// Removes every key.
  void clear() noexcept {
    log_size_ = 0;
    log_sorted_ = true;
    block_count_ = 1;
    size_ = 0;
    sorted_mask_ = ~std::uint64_t{0};
    for (std::size_t b = 0; b < num_blocks; ++b) {
      header_[b] = max_key;
      block_size_[b] = 0;
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] bool full() const noexcept { return size_ == capacity; }
  /// @return the blocks in use (1 .. num_blocks).
  [[nodiscard]] std::size_t block_count() const noexcept { return block_count_; }

  /// Where a key lives (block -1 is the log), or where a lookup will look
  /// (`start_get`).
  struct slot {
    int block;
    int index;
    [[nodiscard]] bool found() const noexcept { return index >= 0; }
  };

  // ---- point operations ---------------------------------------------------

  /// @return the value of `key`, or nothing when absent.
  [[nodiscard]] std::optional<value_type> get(key_type key) const noexcept {
    const slot s = find(key);
    if (!s.found()) return std::nullopt;
    return *value_at(s);
  }

  /// @brief Inserts `key` or replaces its value.
  /// @param previous when not null and the key was present, gets the old value
  /// @return `full` (nothing changed) when the key is new and size() == capacity.
  upsert_status upsert(key_type key, value_type value, value_type* previous = nullptr) noexcept {
    const slot s = find(key);
    if (s.found()) {
      value_type* v = value_at(s);
      if (previous) *previous = *v;
      *v = value;
      return upsert_status::replaced;
    }
    if (size_ == capacity) return upsert_status::full;
    append_to_log(key, value);
    return upsert_status::inserted;
  }

  /// @brief Inserts `key` only if it is absent.
  /// @param present when not null and the key was present, gets its value
  /// @return `present` (nothing changed), `inserted`, or `full` when the key
  ///         is new and size() == capacity.
  insert_status insert(key_type key, value_type value, value_type* present = nullptr) noexcept {
    const slot s = find(key);
    if (s.found()) {
      if (present) *present = *value_at(s);
      return insert_status::present;
    }
    if (size_ == capacity) return insert_status::full;
    append_to_log(key, value);
    return insert_status::inserted;
  }

  /// @brief Removes `key`.
  /// @param erased when not null and the key was present, gets its value
  /// @return whether the key was present.
  bool erase(key_type key, value_type* erased = nullptr) noexcept {
    const slot s = find(key);
    if (!s.found()) return false;
    if (erased) *erased = *value_at(s);
    erase_at(s);
    return true;
  }

  /// @brief Looks up `n` keys given in ascending order (repeats allowed): a
  ///        merge-join against the header. For each key, values[i] = its
  ///        value and found[i] = 1, or 0 and 0 when absent.
  /// @note Keys go in chunks: first every key's likely slot is interpolated
  ///       from the header bounds of its block and the two lines around it
  ///       are prefetched, so the chunk's cache misses overlap; then each
  ///       key is compared branch-free with the entries of those lines
  ///       (sorted blocks) or scanned for (unsorted blocks), and the log is
  ///       scanned for keys not found in a block.
  void get_sorted(const key_type* keys, std::size_t n, value_type* values, std::uint8_t* found) const noexcept {
    std::size_t b = 0;
    slot guesses[lookup_chunk];
    for (std::size_t c = 0; c < n; c += lookup_chunk) {
      const std::size_t m = std::min(n - c, lookup_chunk);
      b = guess_chunk<true>(keys + c, 1, m, b, guesses);
      for (std::size_t i = 0; i < m; ++i) finish_get(guesses[i], keys[c + i], values + c + i, found + c + i);
    }
  }

  /// @brief A lookup in two halves, so that the cache misses of lookups in
  ///        many BPAs overlap: `start_get` picks the key's block (a
  ///        branch-free bisection of the header, `route_bisect`) and lookup
  ///        window and prefetches its lines (two, or three for a block's
  ///        last window that does not start on a line); `finish_get`, on the
  ///        unchanged BPA, compares them (then the log) and writes the value
  ///        and found flag as `get_sorted` does.
  [[nodiscard]] slot start_get(key_type key) const noexcept {
    const std::size_t b = route_bisect(key);
    return guess_in_block(b, interpolation(b), key);
  }
  /// @brief A lookup's first step for a caller that holds one key of this
  ///        BPA and keeps many lookups in flight: reads the counts only
  ///        (with the owner's fences, the leaf's first cache line), guesses
  ///        the key's block from where `key` lies between the fences `lo`
  ///        and `hi`, and prefetches the header line of its bounds.
  /// @return the guessed block, for `start_get_near`.
  [[nodiscard]] std::size_t start_route(key_type key, key_type lo, key_type hi) const noexcept {
    const std::size_t n = block_count_;
    std::size_t b = 0;
    if (n > 1 && key > lo && hi > lo) {
      const double at = static_cast<double>(key - lo) / static_cast<double>(hi - lo) * static_cast<double>(n);
      b = at >= static_cast<double>(n - 1) ? n - 1 : static_cast<std::size_t>(at);
    }
    TANDEM_PREFETCH(&header_[b]);
    TANDEM_PREFETCH(&header_[std::min(b + 1, num_blocks - 1)]);
    return b;
  }
  /// `start_get` from the block `start_route` guessed: the block that
  /// holds `key` is sought from `b` in either direction.
  [[nodiscard]] slot start_get_near(key_type key, std::size_t b) const noexcept {
    b = seek_block(key, b);
    return guess_in_block(b, interpolation(b), key);
  }
  /// @brief An ordered read's first step for a caller that keeps many reads
  ///        in flight, as `start_get_near` is a lookup's: from the block `b`
  ///        that `start_route` guessed, finds the block that holds `from`
  ///        (reading header lines near the guess only), interpolates where
  ///        `from` lies in it, and prefetches the lines that the first
  ///        `limit` entries from there take (at most
  ///        `scan_prefetch_entries`), and the log's keys when it holds some.
  /// @return the start to pass to `copy_ordered` while the BPA is unchanged;
  ///         no start ({-1, 0}: copy_ordered routes itself, nothing
  ///         prefetched) when the BPA is not `sorted()`.
  [[nodiscard]] slot start_scan(key_type from, std::size_t b, std::size_t limit) const noexcept;
  /// Entries past which `start_scan` prefetches nothing: longer reads stream.
  static constexpr std::size_t scan_prefetch_entries = 128;

  void finish_get(slot guess, key_type key, value_type* value, std::uint8_t* found) const noexcept {
    const slot s = find_from_guess(guess, key);
    if (TANDEM_LIKELY(s.found())) {
      *value = blocks_[s.block][s.index].value;
      *found = 1;
      return;
    }
    const slot t = find_in_log(key);
    *value = t.found() ? log_values_[t.index] : 0;
    *found = t.found();
  }

  /// start_hinted's block for `unsure_hint`: the key is looked up from the leaf.
  static constexpr int unsure_block = -2;
  /// @brief A lookup's first half from a route's hint (core/leaf_guide.hpp):
  ///        prefetches the hinted window's lines and reads nothing of the
  ///        BPA. @return the guess for `finish_hinted`; block -1 for
  ///        `no_hint` or a hint outside the blocks, `unsure_block` for
  ///        `unsure_hint`.
  [[nodiscard]] slot start_hinted(leaf_hint hint) const noexcept {
    if (hint == unsure_hint) return {unsure_block, 0};
    const std::size_t b = hint / block_capacity;
    if (b >= num_blocks) return {-1, 0};
    const std::size_t at = hint % block_capacity;
    const entry* w = blocks_[b] + std::min(at, block_capacity - lookup_window);
    TANDEM_PREFETCH(w);
    if constexpr (lookup_window > per_line) TANDEM_PREFETCH(w + per_line);
    TANDEM_PREFETCH(w + lookup_window - 1);
    return {static_cast<int>(b), static_cast<int>(at)};
  }
  /// @brief Shows `touch` each block entry a lookup of `key` from `hint`
  ///        reads: those `start_hinted` prefetches, and those
  ///        `finish_hinted` compares beyond them (stats::leaf_lines counts
  ///        their lines; the counts' line is the caller's).
  template <class Touch>
  void hinted_entries(leaf_hint hint, key_type key, Touch&& touch) const noexcept {
    const slot g = start_hinted(hint);
    if (g.block < 0) return;
    const entry* es = blocks_[g.block];
    const std::size_t at = std::min<std::size_t>(static_cast<std::size_t>(g.index), block_capacity - lookup_window);
    for (std::size_t i = at; i < at + lookup_window; ++i) touch(es + i);
    const std::size_t n = std::min<std::size_t>(block_size_[g.block], block_capacity);
    if (n != 0 && sorted_mask_ >> g.block & 1) {
      const std::size_t w = n >= lookup_window ? std::min(at, n - lookup_window) : 0;
      if (n < lookup_window || key < es[w].key || key > es[w + lookup_window - 1].key) {
        touch(es + search_outside_window(es, n, w, key, touch));
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) touch(es + i);
    }
  }
  /// @brief A lookup's second half from a hint, on the unchanged BPA: when
  ///        the hinted block holds `key` (keys are unique, so that answers
  ///        the get whatever the hint), writes its value and found flag.
  /// @return false when it does not: the key is absent, or the hint stale;
  ///         the caller looks the key up from its leaf.
  bool finish_hinted(slot guess, key_type key, value_type* value, std::uint8_t* found) const noexcept {
    const entry* e = find_hinted(guess, key);
    if (e == nullptr) return false;
    *value = e->value;
    *found = 1;
    return true;
  }
  /// @return the entry of `key` in the block of `guess` (from start_hinted),
  ///         or null.
  [[nodiscard]] const entry* find_hinted(slot guess, key_type key) const noexcept {
    if (guess.block < 0) return nullptr;
    const slot s = find_from_guess(guess, key);
    return s.found() ? &blocks_[s.block][s.index] : nullptr;
  }

  /// @brief This BPA's blocks as a route's hints see them; a guide with
  ///        block_count 0 (no hints) for a geometry a guide cannot hold.
  void guide(leaf_guide& g) const noexcept {
    g = leaf_guide{};
    if constexpr (num_blocks <= guide_blocks && block_capacity <= 0xff) {
      for (std::size_t b = 0; b < guide_blocks; ++b) {
        g.bound[b] = b < block_count_ ? header_[b] : max_key;
        g.size[b] = b < block_count_ ? static_cast<std::uint8_t>(block_size_[b]) : 0;
      }
      g.sorted_mask = sorted_mask_;
      g.block_count = static_cast<std::uint16_t>(block_count_);
      g.block_capacity = static_cast<std::uint16_t>(block_capacity);
      g.per_line = static_cast<std::uint8_t>(per_line);
      g.window = static_cast<std::uint8_t>(lookup_window);
    }
  }

  /// @brief This BPA's blocks as a compact guide (core/leaf_guide.hpp)
  ///        places them between its leaf's fences `low` and `next_low`
  ///        (!bounded: the last leaf); a guide that gives no hints for a
  ///        geometry it cannot hold. Reads each block's smallest and
  ///        largest key (a whole block where it is not sorted).
  void fill_compact_guide(compact_guide& g, key_type low, key_type next_low, bool bounded) const noexcept;

  /// @brief Starts loading the lines an ordered read from `from` reads
  ///        first: the entries of the block that holds it.
  void prefetch_range(key_type from) const noexcept {
    const std::size_t b = route(from);
    for (std::size_t i = 0; i < block_size_[b]; i += per_line) TANDEM_PREFETCH(blocks_[b] + i);
  }

  /// @brief Prefetches the BPA's first cache lines: the counts and the
  ///        header, which lookups of many keys read.
  void prefetch_header() const noexcept {
    const char* p = reinterpret_cast<const char*>(this);
    const char* end = reinterpret_cast<const char*>(log_keys_);
    for (; p < end; p += 64) TANDEM_PREFETCH(p);
  }

  /// Cache lines of a BPA that point ops read, and lines they write.
  struct line_tally {
    std::uint64_t read = 0;
    std::uint64_t written = 0;
  };
  /// @brief Counts the distinct cache lines that looking up `n` keys in
  ///        ascending order reads, as `get_sorted`, `apply` and the
  ///        `start_route` steps reach them: the counts, the header entries
  ///        the block search compares from block `b` on, each key's lookup
  ///        window (bisection steps where the key lies outside it, the whole
  ///        block where it is unsorted), the log when a key is not in its
  ///        block. With `is_write(i)`, the lines that op i dirties are
  ///        counted as written (each goes back to memory once). Changes
  ///        nothing: a probe of the memory traffic of point ops
  ///        (`stats::leaf_lines`).
  template <class IsWrite>
  [[nodiscard]] line_tally lookup_lines(const key_type* keys, std::size_t n, std::size_t b,
                                        IsWrite&& is_write) const noexcept;
  [[nodiscard]] line_tally lookup_lines(const key_type* keys, std::size_t n, std::size_t b = 0) const noexcept {
    return lookup_lines(keys, n, b, [](std::size_t) { return false; });
  }

  /// @return the smallest entry with key >= `key` in this BPA, or nothing.
  [[nodiscard]] std::optional<entry> lower_bound(key_type key) const noexcept;

  // ---- ranges ---------------------------------------------------------------

  /// @brief Visits entries with key >= `from` in ascending key order, at most
  ///        `limit` of them. `f(key, value)` may return bool: false stops.
  /// @return the number of entries visited.
  /// @note Const and safe for concurrent readers: a block (or the log) that
  ///       is not sorted is sorted in a local copy. Call `sort()` first when
  ///       the BPA will be iterated repeatedly.
  template <class F>
  std::size_t iterate(key_type from, std::size_t limit, F&& f) const;

  /// @return whether the log and every block are sorted (as `sort()` and
  ///        bulk load leave a BPA): ordered reads copy it as it lies.
  [[nodiscard]] bool sorted() const noexcept {
    const std::uint64_t used = block_count_ >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << block_count_) - 1;
    return log_sorted_ && (sorted_mask_ & used) == used;
  }

  /// @brief `iterate` into an array: the first `limit` entries with key >=
  ///        `from`, ascending, written to out[0..) (with Stream, the lines
  ///        they fill whole past the caches: put_entry, copy_streaming). A
  ///        BPA whose log and blocks are sorted (as
  ///        `sort()` and bulk load leave it) is copied block by block in
  ///        straight loops; the log's keys are merged into the block whose
  ///        bounds hold them. `start`, from `start_scan` for the same
  ///        `from`, saves reading the whole header and first block to find
  ///        where `from` lies.
  /// @return the number of entries written.
  template <bool Stream = false>
  std::size_t copy_ordered(key_type from, std::size_t limit, entry* out, slot start = {-1, 0}) const noexcept;

  /// @brief Sorts the log and every block in place (contents unchanged), so
  ///        that later `iterate` calls copy nothing.
  void sort() noexcept {
    sort_log();
    for (std::size_t b = 0; b < block_count_; ++b) sort_block(b);
  }

  /// @brief Calls `f(key, value)` for every entry with lo <= key <= hi, in no
  ///        particular order. No sorting. Requires lo <= hi.
  template <class F>
  void map(key_type lo, key_type hi, F&& f) const;

  /// @return the number of keys with lo <= key <= hi, or, once the blocks
  ///         alone hold `cap` of them, some number >= cap (the rest and the
  ///         log unread). Requires lo <= hi.
  [[nodiscard]] std::size_t count(key_type lo, key_type hi,
                                  std::size_t cap = std::numeric_limits<std::size_t>::max()) const noexcept;

  // ---- runs ---------------------------------------------------------------

  /// @brief Applies a run of point ops sorted by key (ops on one key in their
  ///        intended order), writing one result per op.
  /// @return the number of ops applied, a prefix of the run: fewer than `n`
  ///         only when op `[return]` would add a key to a full BPA. The caller
  ///         splits and continues with the rest.
  template <class Run>
  std::size_t apply(const Run& run, std::size_t n, apply_path path = apply_path::automatic) {
    if (path == apply_path::automatic) {
      path = n * merge_crossover >= size_ ? apply_path::merge : apply_path::per_op;
    }
    return path == apply_path::merge ? apply_merge(run, n) : apply_per_op(run, n);
  }
  std::size_t apply(const point_op* ops, std::size_t n, point_result* results,
                    apply_path path = apply_path::automatic) {
    return apply(record_run{ops, results}, n, path);
  }

  // ---- whole-leaf operations ----------------------------------------------

  /// @brief Replaces the contents with `n` entries sorted by strictly
  ///        increasing key, spread evenly over the blocks. Requires n <= capacity.
  void assign_sorted(const key_type* keys, const value_type* values, std::size_t n) noexcept;

  /// @brief Writes every entry in ascending key order to `keys`/`values`
  ///        (each with room for size() entries).
  /// @note Sorts the log and the blocks in place.
  void extract_sorted(key_type* keys, value_type* values);

  /// @brief Moves the upper half of the entries (by key) into `right`, which
  ///        is overwritten, and rebuilds this BPA from the lower half. With
  ///        `next` (the key about to be inserted) above every entry but at
  ///        most one, splits at `next` instead: this BPA keeps the entries
  ///        below it (full) and `right` gets the rest (none or one), so keys
  ///        appended in ascending order leave full leaves behind them.
  /// @return the separator: the smallest key `right` owns (its least entry,
  ///         or `next` when it gets none).
  /// @note Requires size() >= 2.
  key_type split_into(basic_bpa& right, std::optional<key_type> next = std::nullopt);

  /// @brief The inverse of a split: moves every entry of `right`, whose
  ///        keys all lie above this BPA's, into this one (spread evenly
  ///        over the blocks) and leaves `right` empty.
  /// @note Requires size() + right.size() <= capacity.
  void absorb(basic_bpa& right);

  /// @brief Moves the log into the blocks: appends in place when every block
  ///        has room, else merges log and blocks and redistributes evenly.
  void flush();

  /// Where the blocks start in a BPA: a leaf places its BPA so that they
  /// start on a cache line.
  static constexpr std::size_t blocks_offset() noexcept { return offsetof(basic_bpa, blocks_); }

  /// @brief Checks every invariant of the pseudo-struct above.
  /// @throws tandem::invariant_error naming the first broken invariant.
  void verify() const;

 private:
  template <class>
  friend struct shared_access;  // shared_leaf.hpp: one-key ops beside other threads'
  /// Block that holds (or would hold) `key`: the number of header bounds
  /// <= key among blocks 1.., clamped. Branch-free over the padded header.
  [[nodiscard]] std::size_t route(key_type key) const noexcept {
    std::size_t c = 0;
    for (std::size_t b = 1; b < num_blocks; ++b) c += header_[b] <= key;
    return std::min<std::size_t>(c, block_count_ - 1u);
  }

  /// route(key) by a bisection of the header (padded with max_key past
  /// the blocks in use): log2(num_blocks) compares and no loop exit to
  /// mispredict, for a key that may lie in any block.
  [[nodiscard]] std::size_t route_bisect(key_type key) const noexcept {
    std::size_t b = 0;
    if constexpr ((num_blocks & (num_blocks - 1)) == 0) {  // a fixed number of steps, unrolled
      // (arithmetic, not a select: a compiler may turn a select into a branch)
      for (std::size_t half = num_blocks / 2; half > 0; half /= 2) {
        b += half & (std::size_t{0} - static_cast<std::size_t>(header_[b + half] <= key));
      }
    } else {
      for (std::size_t left = num_blocks; left > 1;) {
        const std::size_t half = left / 2;
        b = header_[b + half] <= key ? b + half : b;
        left -= half;
      }
    }
    return std::min<std::size_t>(b, block_count_ - 1u);
  }

  /// Whether block `b` is route(key): its bounds hold the key.
  [[nodiscard]] bool bounds_hold(std::size_t b, key_type key) const noexcept {
    if (b >= std::min<std::size_t>(block_count_, num_blocks)) return false;
    return (b == 0 || header_[b] <= key) && !(b + 1 < num_blocks && b + 1 < block_count_ && header_[b + 1] <= key);
  }

  /// The block that holds (or would hold) `key`, route(key), sought from
  /// block `b` in either direction: reads header lines near `b` only.
  [[nodiscard]] std::size_t seek_block(key_type key, std::size_t b) const noexcept {
    if constexpr (num_blocks > 1) {
      const std::size_t last = std::max<std::size_t>(block_count_, 1) - 1;
      b = std::min(b, last);
      // One block either way without branches (the guess is off by one
      // about as often as not), then walk where it was off by more.
      b -= static_cast<std::size_t>((b > 0) & (header_[b] > key));
      b += static_cast<std::size_t>((b < last) & (header_[std::min(b + 1, last)] <= key));
      // A walk, not `advance`: the block is mostly found by now, and
      // `advance`'s bounds ahead may lie on header lines not yet loaded.
      while (b > 0 && header_[b] > key) --b;
      return walk_blocks(b, key);
    } else {
      return 0;
    }
  }

  /// Entries of sorted block `b` below `key`: counted in the lookup window
  /// at `at` when the rank lies there, else over the whole block.
  [[nodiscard]] std::size_t rank_in_block(std::size_t b, std::size_t at, key_type key) const noexcept {
    const entry* es = blocks_[b];
    const std::size_t n = std::min<std::size_t>(block_size_[b], block_capacity);
    std::size_t c = 0;
    if (n >= lookup_window) {
      const std::size_t w = std::min(at, n - lookup_window);
      const entry* we = es + w;
      // Entries before the window are below `key`, entries after it are not.
      if ((w == 0 || we[0].key <= key) && (w + lookup_window == n || key <= we[lookup_window - 1].key)) {
        for (std::size_t t = 0; t < lookup_window; ++t) c += we[t].key < key;
        return w + c;
      }
    }
    for (std::size_t t = 0; t < n; ++t) c += es[t].key < key;
    return c;
  }

  /// Keys per chunk of a sorted lookup or run: this many lookups' cache
  /// misses are in flight together.
  static constexpr std::size_t lookup_chunk = 32;

  /// Block of `key` for keys visited in ascending order: `b` is the block of
  /// the previous key. `advance_span` bounds from `b` on (from the header's
  /// last ones near its end: those before `b` are <= key too) are counted
  /// without branches, since how many blocks a key moves on is not
  /// predictable where a leaf's keys are spread over its blocks; a key that
  /// passes them all walks on.
  [[nodiscard]] std::size_t advance(std::size_t b, key_type key) const noexcept {
    if constexpr (num_blocks > advance_span) {
      // Bounds past the last block are max_key: they count only for key ==
      // max_key, which counts all `advance_span` and walks on (clamped to
      // the blocks in use).
      const std::size_t base = std::min(b, num_blocks - 1 - advance_span);
      std::size_t step = 0;
      for (std::size_t j = 1; j <= advance_span; ++j) step += header_[base + j] <= key;
      if (TANDEM_LIKELY(step < advance_span)) return base + step;
      b = base + advance_span;
    }
    return std::min<std::size_t>(walk_blocks(b, key), block_count_ - 1u);
  }
  /// Bounds `advance` compares at once.
  static constexpr std::size_t advance_span = 4;
  /// `advance` by a walk, for keys that mostly stay in their block.
  [[nodiscard]] std::size_t walk_blocks(std::size_t b, key_type key) const noexcept {
    while (b + 1 < num_blocks && b + 1 < block_count_ && header_[b + 1] <= key) ++b;
    return b;
  }

  /// Entries a cache line holds (a leaf's blocks start on a line).
  static constexpr std::size_t per_line = 64 / sizeof(entry);
  /// Entries a sorted-block lookup compares at once, branch-free, around the
  /// slot interpolated for its key: two lines, values included.
  static constexpr std::size_t lookup_window = std::min<std::size_t>(2 * per_line, BlockSize);

  /// Block `b`'s interpolation (core/leaf_guide.hpp).
  [[nodiscard]] block_interpolation interpolation(std::size_t b) const noexcept {
    return interpolate_block(header_, b, std::min<std::size_t>(block_count_, num_blocks), block_size_[b]);
  }

  /// First slot of the lookup window for `key` in sorted block `b`
  /// (core/leaf_guide.hpp, window_start).
  [[nodiscard]] std::size_t window_start(std::size_t b, const block_interpolation& ip, key_type key) const noexcept {
    return ::tandem::window_start(ip, key, block_size_[b], per_line, lookup_window);
  }

  /// For m ascending keys (keys[i * stride]), starting at block `b`: each
  /// key's block and lookup window into `out`, and the window's lines
  /// prefetched (every line of an unsorted block), so that the chunk's cache
  /// misses overlap. @return the block of the last key.
  /// @tparam Dense keys share blocks (a lookup of many keys a block): a
  ///         key's block is walked to from the block before, and a block's
  ///         interpolation serves the keys after its first. Else keys are
  ///         spread (a few a block, as in a leaf's run of mixed point ops):
  ///         branches on where they lie would mispredict, so `advance`
  ///         counts without them and each key interpolates afresh.
  template <bool Dense = false>
  std::size_t guess_chunk(const key_type* keys, std::size_t stride, std::size_t m, std::size_t b,
                          slot* out) const noexcept;

  /// One key of `guess_chunk`, in its block `b` (`ip`: interpolation(b),
  /// read only when the block is sorted).
  [[nodiscard]] slot guess_in_block(std::size_t b, const block_interpolation& ip, key_type key) const noexcept {
    if (sorted_mask_ >> b & 1) {
      const std::size_t at = window_start(b, ip, key);
      // The window's lines: two, or three where the block's last window
      // does not start on a line.
      const entry* w = blocks_[b] + at;
      TANDEM_PREFETCH(w);
      if constexpr (lookup_window > per_line) TANDEM_PREFETCH(w + per_line);
      TANDEM_PREFETCH(w + lookup_window - 1);
      return {static_cast<int>(b), static_cast<int>(at)};
    }
    for (std::size_t j = 0; j < block_size_[b]; j += per_line) TANDEM_PREFETCH(&blocks_[b][j]);
    return {static_cast<int>(b), 0};
  }

  /// Index of the last of n sorted entries whose key is <= key (0 when
  /// none is): a branch-free bisection. `touch` sees each entry it reads
  /// (lookup_lines counts their lines).
  template <class Touch = void (*)(const entry*)>
  [[nodiscard]] static std::size_t last_not_above(const entry* es, std::size_t n, key_type key,
                                                  Touch&& touch = [](const entry*) {}) noexcept {
    const entry* base = es;
    for (std::size_t left = n; left > 1;) {
      const std::size_t half = left / 2;
      touch(base + half);
      base = base[half].key <= key ? base + half : base;
      left -= half;
    }
    return static_cast<std::size_t>(base - es);
  }

  /// Index of the last of the n sorted entries `es` whose key is <= key (0
  /// when none is), for a key outside the lookup window at `w` (when
  /// n >= lookup_window; else outside none). An interpolation that misses
  /// mostly misses by a few slots: the line beyond the window on the key's
  /// side is compared first, and the rest of the block bisected only when
  /// the key lies past that too. `touch` as for last_not_above.
  template <class Touch = void (*)(const entry*)>
  [[nodiscard]] static std::size_t search_outside_window(const entry* es, std::size_t n, std::size_t w, key_type key,
                                                         Touch&& touch = [](const entry*) {}) noexcept {
    if (n < lookup_window) return last_not_above(es, n, key, touch);
    if (key > es[w + lookup_window - 1].key) {
      const std::size_t lo = w + lookup_window - 1;  // below key
      const std::size_t end = std::min(lo + 1 + per_line, n);
      touch(es + end - 1);
      if (key <= es[end - 1].key) return lo + last_not_above(es + lo, end - lo, key, touch);
      return end - 1 + last_not_above(es + end - 1, n - (end - 1), key, touch);
    }
    const std::size_t begin = w > per_line ? w - per_line : 0;  // es[w] is above key
    touch(es + begin);
    if (es[begin].key <= key) return begin + last_not_above(es + begin, w - begin, key, touch);
    return last_not_above(es, begin, key, touch);
  }

  /// `key` in the block of `g` (found or not; the log is not looked at). A
  /// sorted block compares the window at g.index (clamped: a stale window
  /// after a removal is still a window of the block) without branches, and
  /// bisects the block when the key lies outside it; an unsorted block is
  /// scanned.
  [[nodiscard]] [[gnu::always_inline]] inline slot find_from_guess(slot g, key_type key) const noexcept;

  [[nodiscard]] slot find_in_log(key_type key) const noexcept {
    for (std::size_t i = 0; i < log_size_; ++i) {
      if (log_keys_[i] == key) return {-1, static_cast<int>(i)};
    }
    return {-1, -1};
  }

  [[nodiscard]] slot find_in_blocks(key_type key) const noexcept {
    const std::size_t b = route(key);
    const std::size_t at = sorted_mask_ >> b & 1 ? window_start(b, interpolation(b), key) : 0;
    return find_from_guess({static_cast<int>(b), static_cast<int>(at)}, key);
  }

  [[nodiscard]] slot find(key_type key) const noexcept {
    const slot s = find_in_log(key);
    return s.found() ? s : find_in_blocks(key);
  }

  [[nodiscard]] value_type* value_at(slot s) noexcept {
    return s.block < 0 ? &log_values_[s.index] : &blocks_[s.block][s.index].value;
  }
  [[nodiscard]] const value_type* value_at(slot s) const noexcept {
    return s.block < 0 ? &log_values_[s.index] : &blocks_[s.block][s.index].value;
  }

  /// Requires: key absent and size_ < capacity.
  void append_to_log(key_type key, value_type value) {
    if (log_size_ == log_capacity) flush();
    if (log_sorted_ && log_size_ && log_keys_[log_size_ - 1] > key) log_sorted_ = false;
    log_keys_[log_size_] = key;
    log_values_[log_size_] = value;
    ++log_size_;
    ++size_;
  }

  /// Removes the key at `s` (found).
  void erase_at(slot s) noexcept {
    if (s.block < 0) {
      const std::size_t last = --log_size_;
      log_keys_[s.index] = log_keys_[last];
      log_values_[s.index] = log_values_[last];
      if (static_cast<std::size_t>(s.index) != last) log_sorted_ = false;
    } else {
      remove_from_block(static_cast<std::size_t>(s.block), static_cast<std::size_t>(s.index));
    }
    --size_;
  }

  void remove_from_block(std::size_t b, std::size_t i) noexcept {
    const std::size_t n = block_size_[b];
    if (sorted_mask_ >> b & 1) {  // shift keeps the block sorted
      std::copy(blocks_[b] + i + 1, blocks_[b] + n, blocks_[b] + i);
    } else {
      blocks_[b][i] = blocks_[b][n - 1];
    }
    block_size_[b] = static_cast<uint_for<BlockSize>>(n - 1);
  }

  /// Insertion sort of the log's parallel key/value arrays (or a copy of
  /// them): they are short and often nearly sorted.
  static void sort_pairs(key_type* keys, value_type* values, std::size_t n) noexcept {
    for (std::size_t i = 1; i < n; ++i) {
      const key_type k = keys[i];
      const value_type v = values[i];
      std::size_t j = i;
      for (; j > 0 && keys[j - 1] > k; --j) {
        keys[j] = keys[j - 1];
        values[j] = values[j - 1];
      }
      keys[j] = k;
      values[j] = v;
    }
  }

  /// Insertion sort of a block's entries (short, often nearly sorted).
  static void sort_entries(entry* es, std::size_t n) noexcept {
    for (std::size_t i = 1; i < n; ++i) {
      const entry e = es[i];
      std::size_t j = i;
      for (; j > 0 && es[j - 1].key > e.key; --j) es[j] = es[j - 1];
      es[j] = e;
    }
  }

  void sort_log() noexcept {
    if (log_sorted_) return;
    sort_pairs(log_keys_, log_values_, std::min<std::size_t>(log_size_, log_capacity));
    log_sorted_ = true;
  }

  void sort_block(std::size_t b) noexcept {
    const std::uint64_t bit = std::uint64_t{1} << b;
    if (sorted_mask_ & bit) return;
    // (the min() only tells the compiler what the invariants already say)
    sort_entries(blocks_[b], std::min<std::size_t>(block_size_[b], block_capacity));
    sorted_mask_ |= bit;
  }

  /// Merge log and blocks, redistribute evenly.
  void rebuild() {
    key_type keys[capacity];
    value_type values[capacity];
    const std::size_t n = size_;
    extract_sorted(keys, values);
    assign_sorted(keys, values, n);
  }

  /// One lookup per op, merge-joined against the header like `get_sorted`
  /// (chunks: prefetch every op's likely slot, then apply the ops in order).
  template <class Run>
  std::size_t apply_per_op(const Run& run, std::size_t n);

  /// One pass: merge the sorted contents with the run into a new sorted
  /// array, then redistribute.
  template <class Run>
  std::size_t apply_merge(const Run& run, std::size_t n);

  void verify_if_enabled() const {
#if defined(TANDEM_VERIFY_FLUSHES)
    verify();
#endif
  }

  // The counts come first, in the narrowest types that hold them: with the
  // leaf's fences they fill the leaf's first cache line (the default
  // geometry), which is all a lookup reads before the header line of its
  // block. The header then starts on the second line, the log and the
  // blocks on lines of their own; a block's entries fill whole lines.
  std::uint64_t sorted_mask_;
  uint_for<capacity> size_;
  uint_for<NumBlocks> block_count_;
  uint_for<LogSize> log_size_;
  bool log_sorted_;
  uint_for<BlockSize> block_size_[NumBlocks];
  key_type header_[NumBlocks];
  key_type log_keys_[LogSize];
  value_type log_values_[LogSize];
  entry blocks_[NumBlocks][BlockSize];
};

#if defined(TANDEM_SMALL_LEAVES)
/// The leaf geometry of small-leaf builds (CMake TANDEM_SMALL_LEAVES, the
/// fuzz build): 4-slot log, 4 blocks of 4 slots, 16 keys, so that a few
/// dozen keys split leaves, flush logs and grow inner levels.
using bpa = basic_bpa<4, 4, 4>;
#else
/// The default leaf geometry: 32-slot log, 32 blocks of 32 slots.
using bpa = basic_bpa<>;
#endif

}  // namespace tandem::host

#include <tandem/host/detail/bpa.inl>
#include <tandem/host/detail/bpa_compact_guide.inl>
