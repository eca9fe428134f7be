#pragma once
/// @file
/// `inner_layout`: the inner B+tree levels in the Harmonia layout, built from
/// the sorted separator table (the leaf table), and its descent.
///
/// What it is. The leaves of tandem live in host memory; every leaf owns the
/// keys from its *low key* up to the next leaf's low key minus one. The leaf
/// table lists them in key order: `low_keys[o]` and `ids[o]` for ordinal
/// `o = 0 .. L-1`, with `low_keys[0] == 0` and low keys strictly increasing.
/// The inner levels answer "which ordinal owns key k", i.e.
/// `std::upper_bound(low_keys, k) - 1`, in `height()` node visits instead of
/// a binary search over the whole table.
///
/// How it differs from a pointer B+tree. There are no pointers: nodes sit in
/// one array in breadth-first order (the *key region*) and a prefix-sum array
/// of u32 (`child_prefix`) says where each node's children start, so the
/// child taken is `child_prefix[x] + i` (Harmonia, Eq. 1). The layout is
/// immutable: a changed leaf table means a rebuild (linear in the leaves, a
/// few bytes per leaf), never an in-place update. The same three arrays,
/// copied as they are, are what the GPU descends (`inner_layout_view` holds
/// raw pointers and sizes; the descent functions are `TANDEM_HD`).
///
/// The layout, written out (F = fanout in {16, 32, 64}, N = node_count,
/// L = leaf_count, H = height):
///
///     struct inner_layout {
///       // Nodes in breadth-first order: node 0 is the root, then level 1
///       // left to right, ..., then the bottom inner level (level H-1).
///       // level_start[l] = index of level l's first node; level_start[H] = N.
///       u32 level_start[H + 1];
///       struct node {               // F slots = F*8 bytes: 2, 4 or 8 cache
///         key_type key[F - 1];      // lines, aligned to 128 bytes
///         key_type pad;             // always max_key (keeps nodes aligned:
///       } key_region[N];            //   F = 16 is one 128-byte line)
///       u32 child_prefix[N + 1];
///       leaf_id leaf_ids[L];        // ids[o] of the leaf table, key order
///     };
///
///   Children. Child indices live in one space of N + L entries: index c < N
///   is node c, index c >= N is leaf ordinal c - N (the leaves follow the
///   inner nodes, as in Harmonia's breadth-first numbering). Node x has the
///   children child_prefix[x] .. child_prefix[x+1]-1; with i = the number of
///   its *valid* keys <= the query key (upper bound), the child taken is
///   child_prefix[x] + i.
///
///   Invariants (`verify()` checks each and names the one broken):
///   - child_prefix[0] == 1, child_prefix[N] == N + L, and child_prefix is
///     strictly increasing with at most F children per node;
///   - the children of level l are exactly the nodes of level l+1
///     (child_prefix[level_start[l]] == level_start[l+1]); the children of the
///     bottom inner level are exactly the leaf ordinals 0 .. L-1, in order;
///   - node x has valid = children(x) - 1 keys: key j (1-based) is the
///     smallest key of child j's subtree (the low key of its first leaf),
///     valid keys are strictly increasing, and every key of a subtree lies in
///     the key range its ancestors route to it;
///   - every slot past the valid keys, the pad slot included, is max_key;
///   - leaf_ids has L entries (and, with the leaf table given, equals its ids).
///
/// Padding. UINT64_MAX is a valid user key and may be a valid node key (a
/// leaf whose low key is UINT64_MAX). Searches count the keys <= k over all F
/// slots without branching and then clamp the count to the node's valid
/// keys, so the max_key padding never changes an answer.
///
/// Shape. Built bottom-up and balanced: a level of n children gets ceil(n/F)
/// nodes with the children spread evenly (sizes differ by at most one), so
/// every node but a lone root has at least 2 children. One leaf gives one
/// root with one child and no keys. `height()` (>= 1) counts inner levels.
///
/// Threads: a built layout is immutable; any number of threads (and the GPU)
/// may descend it at once. A view is invalidated by destroying, moving or
/// assigning to its layout.

#include <tandem/core/macros.hpp>
#include <tandem/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace tandem {

namespace detail {

/// Allocator that aligns to `Align` bytes, so that a node of the key region
/// never straddles more cache lines than it must.
template <class T, std::size_t Align>
struct aligned_allocator {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = aligned_allocator<U, Align>;
  };
  aligned_allocator() noexcept = default;
  template <class U>
  aligned_allocator(const aligned_allocator<U, Align>&) noexcept {}  // implicit, as rebinding needs
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{Align}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{Align}); }
  template <class U>
  bool operator==(const aligned_allocator<U, Align>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const aligned_allocator<U, Align>&) const noexcept {
    return false;
  }
};

struct inner_layout_access;  // test-only access to the arrays (verify tests)

}  // namespace detail

/// Fanouts the layout supports.
inline constexpr int inner_fanouts[] = {16, 32, 64};
/// Alignment of the key region in bytes (one GPU memory segment).
inline constexpr std::size_t key_region_alignment = 128;

/// Cheap-to-copy view of a built layout: raw pointers and sizes, valid as
/// long as the layout lives. Pass it by value to the descent functions, on
/// the host or (pointing at device copies of the arrays) in a kernel.
struct inner_layout_view {
  const key_type* key_region = nullptr;        ///< node_count * fanout slots
  const std::uint32_t* child_prefix = nullptr;  ///< node_count + 1 entries
  const leaf_id* leaf_ids = nullptr;            ///< leaf_count entries
  std::uint32_t node_count = 0;
  std::uint32_t leaf_count = 0;
  int fanout = 0;
  int height = 0;
};

/// One interval of the radix table (`leaf_radix_view::leaf_of`): the ids of
/// the leaves that may own its keys (up to three) and the low keys between
/// them, so that the owner's id is one read of 32 bytes.
struct alignas(32) radix_bucket {
  /// Low keys of the second and third candidates; where the interval has
  /// fewer, repeated (the count of bounds <= key then skips the repeat).
  key_type bounds[2];
  /// The candidates' leaf ids, the last repeated where there are fewer.
  leaf_id ids[3];
  /// Nonzero: the interval holds more than three candidates (use `find`).
  std::uint32_t wide;
};
static_assert(sizeof(radix_bucket) == 32, "two buckets a cache line");

/// Host-side shortcut past the inner levels (`inner_layout::radix`). The key
/// space from `base` (the second leaf's low key) up to the last leaf's low
/// key is cut into `buckets` intervals of 2^shift keys; `first[t]` is the
/// ordinal that owns interval t's first key, so the owner of any key of
/// interval t lies in [first[t], first[t + 1]]: with about one interval a
/// leaf, a few leaves. A lookup reads one entry of `first` and the low
/// keys of that range (a line or two), where a descent searches a node a
/// level.
/// `buckets == 0` (one leaf, or leaves too unevenly spread over the keys:
/// more than an eighth of them in intervals of over `narrow` leaves) means
/// no table: descend instead. The GPU does not use it.
///
/// `leaf_of` reads the key's interval's `radix_bucket` instead: the ids of the
/// (up to three) candidate leaves and the low keys between them, so that a
/// lookup that wants the leaf, not its ordinal, reads one line of the table
/// where `first`, the low keys and the leaf ids took three.
struct leaf_radix_view {
  /// Widest range a lookup walks key by key (wider ones are bisected).
  static constexpr std::uint32_t narrow = 8;

  const std::uint32_t* first = nullptr;        ///< buckets + 1 entries
  const key_type* low_keys = nullptr;          ///< leaf_count entries
  const radix_bucket* bucket_table = nullptr;  ///< buckets entries
  const leaf_id* ids = nullptr;                ///< leaf_count entries: the layout's leaf ids
  key_type base = 0;
  std::uint64_t buckets = 0;
  int shift = 0;
  std::uint32_t leaf_count = 0;

  /// @return where `key`'s bucket lies (for a prefetch), or null when the
  ///         key lies outside the intervals (its owner is the first or the
  ///         last leaf).
  [[nodiscard]] const radix_bucket* bucket_of(key_type key) const noexcept {
    if (key < base) return nullptr;
    const std::uint64_t t = (key - base) >> shift;
    return t < buckets ? bucket_table + t : nullptr;
  }
  /// @return the id of the leaf that owns `key`: from its bucket alone, or,
  ///         for a key outside the intervals or in a wide one, ids[find(key)].
  [[nodiscard]] leaf_id leaf_of(key_type key) const noexcept {
    const radix_bucket* e = bucket_of(key);
    if (e != nullptr && e->wide == 0) {
      // Without branches: which candidate owns the key is not predictable.
      return e->ids[static_cast<unsigned>(e->bounds[0] <= key) + static_cast<unsigned>(e->bounds[1] <= key)];
    }
    return ids[find(key)];
  }
  /// The ordinals [lo, hi] among which `key`'s owner lies.
  void range(key_type key, std::uint32_t& lo, std::uint32_t& hi) const noexcept {
    if (key < base) {  // below the second leaf's low key
      lo = hi = 0;
      return;
    }
    const std::uint64_t t = (key - base) >> shift;
    if (t >= buckets) {  // above the last leaf's low key
      lo = hi = leaf_count - 1;
      return;
    }
    lo = first[t];
    hi = first[t + 1];
  }
  /// @return the owner of `key` among [lo, hi] (from `range`): the last
  ///         ordinal there whose low key is <= key.
  [[nodiscard]] std::uint32_t owner(key_type key, std::uint32_t lo, std::uint32_t hi) const noexcept {
    while (hi - lo > narrow) {  // low_keys[lo] <= key, the owner is at most hi
      const std::uint32_t mid = lo + (hi - lo + 1) / 2;
      if (low_keys[mid] <= key) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    while (lo < hi && low_keys[lo + 1] <= key) ++lo;
    return lo;
  }
  /// @return the leaf ordinal that owns `key` (as descend).
  [[nodiscard]] std::uint32_t find(key_type key) const noexcept {
    std::uint32_t lo = 0, hi = 0;
    range(key, lo, hi);
    return owner(key, lo, hi);
  }
};

/// Ordinal and id of the leaf that owns a key.
struct leaf_route {
  std::uint32_t ordinal;
  leaf_id leaf;
};

// ---- descent: TANDEM_HD, no exceptions, no std containers or algorithms ----

/// @brief The number of a node's keys that are <= `key`, counted over all F
///        slots and clamped to the node's `valid` keys (padding never counts).
/// @param keys  the node's F slots (F-1 keys and the pad slot)
/// @param valid the node's number of valid keys (children - 1), <= F - 1
/// @return a value in [0, valid]
template <int F>
TANDEM_HD inline std::uint32_t node_rank(const key_type* keys, std::uint32_t valid, key_type key) {
  static_assert(F == 16 || F == 32 || F == 64, "fanout must be 16, 32 or 64");
  // The F slots are sorted (valid keys strictly increasing, then max_key
  // padding), so the count of keys <= key is an upper bound found by a
  // binary search over the power-of-two slot count: log2(F) + 1 compares
  // instead of F. The step is a mask, not a branch or `?:`, because
  // compilers turn `?:` into a branch that mispredicts half the time (3x
  // slower measured on the CPU).
  std::uint32_t base = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (std::uint32_t half = F / 2; half > 0; half /= 2) {
    base += half & (0u - static_cast<std::uint32_t>(keys[base + half - 1] <= key));
  }
  const std::uint32_t count = base + static_cast<std::uint32_t>(keys[base] <= key);
  return count < valid ? count : valid;
}

/// @brief Searches node `node` for `key`.
/// @return the child index taken: a node index when < v.node_count, else
///         leaf ordinal (index - v.node_count).
template <int F>
TANDEM_HD inline std::uint32_t node_search(const inner_layout_view& v, std::uint32_t node, key_type key) {
  const std::uint32_t first = v.child_prefix[node];
  const std::uint32_t valid = v.child_prefix[node + 1] - first - 1;
  return first + node_rank<F>(v.key_region + static_cast<std::size_t>(node) * F, valid, key);
}

/// @brief Runtime-fanout form of node_search (for fanouts other than 16, 32,
///        64, which a built layout never has, it returns v.node_count + v.leaf_count).
TANDEM_HD inline std::uint32_t node_search(const inner_layout_view& v, std::uint32_t node, key_type key) {
  switch (v.fanout) {
    case 16: return node_search<16>(v, node, key);
    case 32: return node_search<32>(v, node, key);
    case 64: return node_search<64>(v, node, key);
    default: return v.node_count + v.leaf_count;
  }
}

/// The leaf that owns a key, and how far it reaches: every key k with
/// key <= k < next_low (any k >= key when !bounded) has the same leaf.
struct leaf_span {
  std::uint32_t ordinal;
  bool bounded;       ///< false for the last leaf
  key_type next_low;  ///< low_keys[ordinal + 1] when bounded
  key_type low;       ///< the largest separator <= key: low_keys[ordinal] (0 for leaf 0)
};

/// @brief Descends from the root to the leaf that owns `key`, keeping the
///        separators around `key` met on the way: the leaf's own low key
///        and the next leaf's (a walk over sorted keys descends once per
///        leaf; compact leaf guides place their bounds between the two).
template <int F>
TANDEM_HD inline leaf_span descend_span(const inner_layout_view& v, key_type key) {
  std::uint32_t x = 0;
  leaf_span s{0, false, max_key, min_key};
  for (int level = 0; level < v.height; ++level) {
    const key_type* keys = v.key_region + static_cast<std::size_t>(x) * F;
    const std::uint32_t first = v.child_prefix[x];
    const std::uint32_t valid = v.child_prefix[x + 1] - first - 1;
    const std::uint32_t rank = node_rank<F>(keys, valid, key);
    if (rank < valid) {  // deeper separators are tighter
      s.bounded = true;
      s.next_low = keys[rank];
    }
    if (rank > 0) s.low = keys[rank - 1];
    x = first + rank;
  }
  s.ordinal = x - v.node_count;
  return s;
}

/// @brief Descends from the root to the leaf that owns `key`.
/// @return the leaf ordinal o with low_keys[o] <= key < low_keys[o+1]
///         (= std::upper_bound(low_keys, key) - 1).
template <int F>
TANDEM_HD inline std::uint32_t descend(const inner_layout_view& v, key_type key) {
  std::uint32_t x = 0;
  for (int level = 0; level < v.height; ++level) x = node_search<F>(v, x, key);
  return x - v.node_count;
}

/// @brief Runtime-fanout form of descend. The view must come from a built
///        layout (for another fanout it returns v.leaf_count, out of range).
TANDEM_HD inline std::uint32_t descend(const inner_layout_view& v, key_type key) {
  switch (v.fanout) {
    case 16: return descend<16>(v, key);
    case 32: return descend<32>(v, key);
    case 64: return descend<64>(v, key);
    default: return v.leaf_count;
  }
}

/// @brief One level of a descent of m keys taken together: ordinals[i], the
///        node key i reached at `level` (0, the root, at level 0), becomes
///        the node one level down, whose key lines and child_prefix entry
///        are prefetched (on the CPU); at the last level it becomes the
///        key's leaf ordinal (as descend).
///        Taking every key a level before any takes the next overlaps the
///        loads of different keys; a caller may also interleave other work
///        between levels.
template <int F>
TANDEM_HD inline void descend_level(const inner_layout_view& v, int level, const key_type* keys, std::uint32_t m,
                                    std::uint32_t* ordinals) {
  if (level == 0) {
    for (std::uint32_t i = 0; i < m; ++i) ordinals[i] = 0;
  }
  const bool last = level + 1 == v.height;
  for (std::uint32_t i = 0; i < m; ++i) {
    const std::uint32_t x = node_search<F>(v, ordinals[i], keys[i]);
    ordinals[i] = last ? x - v.node_count : x;
    if (!last) {  // every line the search of the node below reads
      const key_type* node = v.key_region + static_cast<std::size_t>(x) * F;
      for (int line = 0; line < F / 8; ++line) TANDEM_PREFETCH(node + line * 8);
      TANDEM_PREFETCH(v.child_prefix + x);
    }
  }
}

/// @brief Runtime-fanout form of descend_level (another fanout: every
///        ordinal becomes v.leaf_count, out of range).
TANDEM_HD inline void descend_level(const inner_layout_view& v, int level, const key_type* keys, std::uint32_t m,
                                    std::uint32_t* ordinals) {
  switch (v.fanout) {
    case 16: return descend_level<16>(v, level, keys, m, ordinals);
    case 32: return descend_level<32>(v, level, keys, m, ordinals);
    case 64: return descend_level<64>(v, level, keys, m, ordinals);
    default:
      for (std::uint32_t i = 0; i < m; ++i) ordinals[i] = v.leaf_count;
  }
}

/// @brief Descends m keys in any order together, level by level
///        (descend_level on each level in turn).
/// @param ordinals gets each key's leaf ordinal (as descend)
TANDEM_HD inline void descend_each(const inner_layout_view& v, const key_type* keys, std::uint32_t m,
                                   std::uint32_t* ordinals) {
  for (int level = 0; level < v.height; ++level) descend_level(v, level, keys, m, ordinals);
}

/// @brief Descends and returns both the leaf ordinal and its leaf_id.
TANDEM_HD inline leaf_route descend_leaf(const inner_layout_view& v, key_type key) {
  const std::uint32_t o = descend(v, key);
  return {o, o < v.leaf_count ? v.leaf_ids[o] : no_leaf};
}

// ---- the owning container (host only) --------------------------------------

class inner_layout {
 public:
  using key_region_type = std::vector<key_type, detail::aligned_allocator<key_type, key_region_alignment>>;

  /// @brief An empty layout (no leaves); build() makes a usable one.
  inner_layout() = default;

  /// @brief Builds the inner levels over a leaf table.
  /// @param low_keys smallest key of each leaf, key order: low_keys[0] == 0,
  ///                 strictly increasing
  /// @param ids      leaf_id of each leaf, same order
  /// @param leaves   number of leaves, >= 1
  /// @param fanout   16, 32 or 64
  /// @throws std::invalid_argument on a bad fanout, no leaves, null
  ///         pointers, low_keys[0] != 0 or low keys not strictly increasing
  ///         (the message names the first offending ordinal).
  /// @throws std::length_error when nodes + leaves do not fit in u32.
  static inner_layout build(const key_type* low_keys, const leaf_id* ids, std::size_t leaves, int fanout);

  /// @return a view for the descent functions; valid while *this lives unchanged.
  [[nodiscard]] inner_layout_view view() const noexcept;

  [[nodiscard]] std::size_t leaf_count() const noexcept { return leaf_ids_.size(); }
  [[nodiscard]] std::size_t node_count() const noexcept { return child_prefix_.empty() ? 0 : child_prefix_.size() - 1; }
  /// @return the number of inner levels (>= 1 once built; 0 when empty).
  [[nodiscard]] int height() const noexcept { return level_start_.empty() ? 0 : static_cast<int>(level_start_.size()) - 1; }
  [[nodiscard]] int fanout() const noexcept { return fanout_; }
  /// @return bytes held by the arrays (what a device mirror has to copy, plus level_start).
  [[nodiscard]] std::size_t bytes() const noexcept;
  /// @return bytes held by the radix shortcut (host memory only).
  [[nodiscard]] std::size_t radix_bytes() const noexcept;

  /// @return node_count() * fanout() key slots (see the layout above).
  [[nodiscard]] const key_region_type& key_region() const noexcept { return key_region_; }
  /// @return node_count() + 1 prefix sums.
  [[nodiscard]] const std::vector<std::uint32_t>& child_prefix() const noexcept { return child_prefix_; }
  /// @return the leaf ids in key order (ordinal -> leaf_id).
  [[nodiscard]] const std::vector<leaf_id>& leaf_ids() const noexcept { return leaf_ids_; }
  /// @return height() + 1 entries: the first node of each level, then node_count().
  [[nodiscard]] const std::vector<std::uint32_t>& level_start() const noexcept { return level_start_; }

  /// @return the radix shortcut over this layout's leaf table (host only;
  ///         `buckets == 0` when it has none), built with the layout: at
  ///         most 2^21 intervals (4 bytes each in `first` and 32 in the
  ///         bucket table: 72 MiB) and the low keys (8 bytes a leaf).
  [[nodiscard]] leaf_radix_view radix() const noexcept;

  /// @return the leaf ordinal that owns `key` (host convenience for descend()).
  [[nodiscard]] std::uint32_t find(key_type key) const noexcept { return descend(view(), key); }

  /// @return the low keys of the leaf table, recovered from the node keys
  ///         (every leaf but the first has its low key in exactly one node).
  /// @throws tandem::invariant_error when the layout is broken.
  [[nodiscard]] std::vector<key_type> low_keys() const;

  /// What the owner records of a version when it builds it, before sharing
  /// it (tandem's index: its versions' numbers, counting up, and
  /// leaf_store::made() at the build).
  struct stamp_type {
    std::uint64_t version = 0;
    std::uint64_t leaves_made = 0;
  };
  [[nodiscard]] const stamp_type& stamp() const noexcept { return stamp_; }
  void set_stamp(const stamp_type& s) noexcept { stamp_ = s; }

  /// @brief Checks every invariant listed in this header.
  /// @throws tandem::invariant_error naming "inner_layout" and the broken invariant.
  void verify() const;

  /// @brief verify(), and that the layout indexes exactly this leaf table.
  /// @throws tandem::invariant_error
  void verify(const key_type* low_keys, const leaf_id* ids, std::size_t leaves) const;

 private:
  friend struct detail::inner_layout_access;

  // Checks everything and returns the recovered low keys.
  std::vector<key_type> check() const;
  // Fills the radix_ members from the leaf table, unless it is too uneven.
  void build_radix(const key_type* low_keys, const leaf_id* ids, std::size_t leaves);

  int fanout_ = 0;
  stamp_type stamp_;
  key_region_type key_region_;
  std::vector<std::uint32_t> child_prefix_;
  std::vector<leaf_id> leaf_ids_;
  std::vector<std::uint32_t> level_start_;
  // The radix shortcut (radix()): the leaf table's low keys, buckets + 1
  // first ordinals and buckets radix_buckets; all empty when the layout has
  // none.
  std::vector<key_type> radix_low_;
  std::vector<std::uint32_t> radix_first_;
  std::vector<radix_bucket> radix_buckets_;
  key_type radix_base_ = 0;
  int radix_shift_ = 0;
};

}  // namespace tandem
