#pragma once
// Bodies of basic_bpa's longer members (included by tandem/host/bpa.hpp).

namespace tandem::host {

template <int LogSize, int NumBlocks, int BlockSize>
std::optional<entry> basic_bpa<LogSize, NumBlocks, BlockSize>::lower_bound(key_type key) const noexcept {
  std::optional<entry> best;
  for (std::size_t i = 0; i < log_size_; ++i) {
    if (log_keys_[i] >= key && (!best || log_keys_[i] < best->key)) best = entry{log_keys_[i], log_values_[i]};
  }
  for (std::size_t b = route(key); b < block_count_; ++b) {
    const entry* es = blocks_[b];
    bool hit = false;
    std::size_t at = 0;
    for (std::size_t i = 0; i < block_size_[b]; ++i) {
      if (es[i].key >= key && (!hit || es[i].key < es[at].key)) {
        hit = true;
        at = i;
      }
    }
    if (hit) {
      if (!best || es[at].key < best->key) best = es[at];
      break;  // later blocks hold only larger keys
    }
  }
  return best;
}

template <int LogSize, int NumBlocks, int BlockSize>
template <class F>
std::size_t basic_bpa<LogSize, NumBlocks, BlockSize>::iterate(key_type from, std::size_t limit, F&& f) const {
  if (limit == 0 || size_ == 0) return 0;
  std::size_t emitted = 0;
  auto visit = [&](key_type k, value_type v) -> bool {
    ++emitted;
    if constexpr (std::is_same_v<std::invoke_result_t<F&, key_type, value_type>, void>) {
      f(k, v);
      return emitted < limit;
    } else {
      return static_cast<bool>(f(k, v)) && emitted < limit;
    }
  };
  // The log and the blocks as they lie where sorted, else sorted copies.
  // (the min()s only tell the compiler what the invariants already say)
  const std::size_t log_n = std::min<std::size_t>(log_size_, log_capacity);
  key_type lk_copy[log_capacity];
  value_type lv_copy[log_capacity];
  const key_type* lk = log_keys_;
  const value_type* lv = log_values_;
  if (!log_sorted_) {
    std::copy(log_keys_, log_keys_ + log_n, lk_copy);
    std::copy(log_values_, log_values_ + log_n, lv_copy);
    sort_pairs(lk_copy, lv_copy, log_n);
    lk = lk_copy;
    lv = lv_copy;
  }
  std::size_t li = static_cast<std::size_t>(std::lower_bound(lk, lk + log_n, from) - lk);
  entry copy[block_capacity];
  for (std::size_t b = route(from); b < block_count_; ++b) {
    const std::size_t n = std::min<std::size_t>(block_size_[b], block_capacity);
    const entry* es = blocks_[b];
    if (!(sorted_mask_ >> b & 1)) {
      std::copy(es, es + n, copy);
      sort_entries(copy, n);
      es = copy;
    }
    std::size_t i = static_cast<std::size_t>(
        std::lower_bound(es, es + n, from, [](const entry& e, key_type k) { return e.key < k; }) - es);
    for (; i < n; ++i) {
      while (li < log_n && lk[li] < es[i].key) {
        if (!visit(lk[li], lv[li])) return emitted;
        ++li;
      }
      if (!visit(es[i].key, es[i].value)) return emitted;
    }
  }
  for (; li < log_n; ++li) {
    if (!visit(lk[li], lv[li])) return emitted;
  }
  return emitted;
}

template <int LogSize, int NumBlocks, int BlockSize>
typename basic_bpa<LogSize, NumBlocks, BlockSize>::slot basic_bpa<LogSize, NumBlocks, BlockSize>::start_scan(
    key_type from, std::size_t b, std::size_t limit) const noexcept {
  if (block_count_ == 0 || !sorted()) return {-1, 0};
  const std::size_t blocks = std::min<std::size_t>(block_count_, num_blocks);
  b = seek_block(from, b);
  const std::size_t at = window_start(b, interpolation(b), from);
  // The lines from the window's on, in this block and the next ones.
  std::size_t left = std::min(limit, scan_prefetch_entries) + lookup_window;
  for (std::size_t c = b, j = at; c < blocks && left != 0; ++c, j = 0) {
    const std::size_t end = std::min<std::size_t>(block_size_[c], j + left);
    if (end <= j) continue;
    left -= end - j;
    for (std::size_t t = j - j % per_line; t < end; t += per_line) TANDEM_PREFETCH(&blocks_[c][t]);
  }
  for (std::size_t t = 0; t < log_size_; t += 64 / sizeof(key_type)) TANDEM_PREFETCH(&log_keys_[t]);
  return {static_cast<int>(b), static_cast<int>(at)};
}

template <int LogSize, int NumBlocks, int BlockSize>
template <bool Stream>
std::size_t basic_bpa<LogSize, NumBlocks, BlockSize>::copy_ordered(key_type from, std::size_t limit, entry* out,
                                                                  slot start) const noexcept {
  if (!sorted()) {
    return iterate(from, limit, [&](key_type k, value_type v) { put_entry<Stream>(out++, k, v); });
  }
  // Where `from` goes in the sorted log and first block: counted, not
  // bisected, so that their lines are read at once rather than one
  // cache miss after another.
  const std::size_t log_n = std::min<std::size_t>(log_size_, log_capacity);
  std::size_t li = 0;
  for (std::size_t j = 0; j < log_n; ++j) li += log_keys_[j] < from;
  std::size_t emitted = 0;
  const std::size_t first = start.block >= 0 ? static_cast<std::size_t>(start.block) : route(from);
  const std::size_t blocks = std::min<std::size_t>(block_count_, num_blocks);
  for (std::size_t b = first; b < blocks && emitted < limit; ++b) {
    const std::size_t n = std::min<std::size_t>(block_size_[b], block_capacity);
    const entry* es = blocks_[b];
    // Later blocks hold only keys above their bound, which is above `from`.
    std::size_t i = 0;
    if (b == first && n != 0) {
      if (start.block >= 0) {
        i = rank_in_block(b, static_cast<std::size_t>(start.index), from);
      } else {
        for (std::size_t j = 0; j < n; ++j) i += es[j].key < from;
      }
    }
    // The log's keys below the next block's bound go with this block.
    const std::size_t lj =
        b + 1 < blocks
            ? static_cast<std::size_t>(std::lower_bound(log_keys_ + li, log_keys_ + log_n, header_[b + 1]) - log_keys_)
            : log_n;
    entry* o = out + emitted;
    if (li == lj) {
      const std::size_t m = std::min(n - i, limit - emitted);
      if constexpr (Stream) {
        copy_streaming(es + i, m, o);
      } else {
        std::copy(es + i, es + i + m, o);
      }
      emitted += m;
      continue;
    }
    while (emitted < limit && (i < n || li < lj)) {
      if (li < lj && (i == n || log_keys_[li] < es[i].key)) {
        put_entry<Stream>(out + emitted++, log_keys_[li], log_values_[li]);
        ++li;
      } else {
        put_entry<Stream>(out + emitted++, es[i].key, es[i].value);
        ++i;
      }
    }
    li = lj;
  }
  return emitted;
}

template <int LogSize, int NumBlocks, int BlockSize>
template <class F>
void basic_bpa<LogSize, NumBlocks, BlockSize>::map(key_type lo, key_type hi, F&& f) const {
  for (std::size_t i = 0; i < log_size_; ++i) {
    if (log_keys_[i] >= lo && log_keys_[i] <= hi) f(log_keys_[i], log_values_[i]);
  }
  const std::size_t first = route(lo);
  const std::size_t last = route(hi);
  for (std::size_t b = first; b <= last; ++b) {
    const entry* es = blocks_[b];
    const std::size_t n = block_size_[b];
    if (b != first && b != last) {  // inside [lo, hi] by the header bounds
      for (std::size_t i = 0; i < n; ++i) f(es[i].key, es[i].value);
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        if (es[i].key >= lo && es[i].key <= hi) f(es[i].key, es[i].value);
      }
    }
  }
}

template <int LogSize, int NumBlocks, int BlockSize>
std::size_t basic_bpa<LogSize, NumBlocks, BlockSize>::count(key_type lo, key_type hi, std::size_t cap) const noexcept {
  std::size_t c = 0;
  const std::size_t first = route(lo);
  const std::size_t last = route(hi);
  for (std::size_t b = first; b <= last; ++b) {
    const std::size_t n = block_size_[b];
    if (b != first && b != last) {
      c += n;
    } else {
      const entry* es = blocks_[b];
      for (std::size_t i = 0; i < n; ++i) c += (es[i].key >= lo) & (es[i].key <= hi);
    }
    if (c >= cap) return c;
  }
  for (std::size_t i = 0; i < log_size_; ++i) c += (log_keys_[i] >= lo) & (log_keys_[i] <= hi);
  return c;
}

template <int LogSize, int NumBlocks, int BlockSize>
void basic_bpa<LogSize, NumBlocks, BlockSize>::assign_sorted(const key_type* keys, const value_type* values,
                                                             std::size_t n) noexcept {
  const std::size_t blocks = std::clamp<std::size_t>(n, 1, num_blocks);
  const std::size_t per = n / blocks;
  const std::size_t extra = n % blocks;
  std::size_t at = 0;
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t m = per + (b < extra ? 1 : 0);
    for (std::size_t i = 0; i < m; ++i) blocks_[b][i] = entry{keys[at + i], values[at + i]};
    block_size_[b] = static_cast<uint_for<BlockSize>>(m);
    header_[b] = m ? keys[at] : max_key;
    at += m;
  }
  for (std::size_t b = blocks; b < num_blocks; ++b) {
    header_[b] = max_key;
    block_size_[b] = 0;
  }
  block_count_ = static_cast<uint_for<NumBlocks>>(blocks);
  sorted_mask_ = ~std::uint64_t{0};
  log_size_ = 0;
  log_sorted_ = true;
  size_ = static_cast<uint_for<capacity>>(n);
  verify_if_enabled();
}

template <int LogSize, int NumBlocks, int BlockSize>
void basic_bpa<LogSize, NumBlocks, BlockSize>::extract_sorted(key_type* keys, value_type* values) {
  sort_log();
  std::size_t out = 0;
  std::size_t li = 0;
  for (std::size_t b = 0; b < block_count_; ++b) {
    sort_block(b);
    for (std::size_t i = 0; i < block_size_[b]; ++i) {
      const entry e = blocks_[b][i];
      while (li < log_size_ && log_keys_[li] < e.key) {
        keys[out] = log_keys_[li];
        values[out++] = log_values_[li++];
      }
      keys[out] = e.key;
      values[out++] = e.value;
    }
  }
  for (; li < log_size_; ++li) {
    keys[out] = log_keys_[li];
    values[out++] = log_values_[li];
  }
}

template <int LogSize, int NumBlocks, int BlockSize>
key_type basic_bpa<LogSize, NumBlocks, BlockSize>::split_into(basic_bpa& right, std::optional<key_type> next) {
  key_type keys[capacity];
  value_type values[capacity];
  const std::size_t n = size_;
  extract_sorted(keys, values);
  std::size_t lower = n / 2;
  if (next) {
    const auto at = static_cast<std::size_t>(std::lower_bound(keys, keys + n, *next) - keys);
    if (at >= 1 && n - at <= 1) lower = at;
  }
  const key_type separator = lower < n ? keys[lower] : *next;
  right.assign_sorted(keys + lower, values + lower, n - lower);
  assign_sorted(keys, values, lower);
  return separator;
}

template <int LogSize, int NumBlocks, int BlockSize>
void basic_bpa<LogSize, NumBlocks, BlockSize>::absorb(basic_bpa& right) {
  key_type keys[capacity];
  value_type values[capacity];
  const std::size_t n = size_;
  if (right.size_ == 0) return;
  extract_sorted(keys, values);
  right.extract_sorted(keys + n, values + n);
  assign_sorted(keys, values, n + right.size_);
  right.clear();
}

template <int LogSize, int NumBlocks, int BlockSize>
void basic_bpa<LogSize, NumBlocks, BlockSize>::flush() {
  if (log_size_ == 0) return;
  sort_log();  // appends in key order keep sorted blocks sorted more often
  std::uint16_t add[num_blocks] = {};
  bool fits = true;
  for (std::size_t i = 0; i < log_size_; ++i) {
    const std::size_t b = route(log_keys_[i]);
    if (block_size_[b] + ++add[b] > block_capacity) fits = false;
  }
  if (!fits) {
    rebuild();
    return;
  }
  for (std::size_t i = 0; i < log_size_; ++i) {
    const key_type k = log_keys_[i];
    const std::size_t b = route(k);
    const std::size_t n = block_size_[b];
    const std::uint64_t bit = std::uint64_t{1} << b;
    if ((sorted_mask_ & bit) && n && blocks_[b][n - 1].key > k) sorted_mask_ &= ~bit;
    blocks_[b][n] = entry{k, log_values_[i]};
    block_size_[b] = static_cast<uint_for<BlockSize>>(n + 1);
    if (k < header_[b]) header_[b] = k;  // only block 0 can see a key below its bound
  }
  log_size_ = 0;
  log_sorted_ = true;
  verify_if_enabled();
}

template <int LogSize, int NumBlocks, int BlockSize>
void basic_bpa<LogSize, NumBlocks, BlockSize>::verify() const {
  auto fail = [](const std::string& what) { throw invariant_error("bpa: " + what); };
  if (block_count_ < 1 || block_count_ > num_blocks) fail("block_count out of range");
  if (log_size_ > log_capacity) fail("log_size over the log capacity");
  std::size_t total = log_size_;
  for (std::size_t b = 0; b < num_blocks; ++b) {
    if (block_size_[b] > block_capacity) fail("block " + std::to_string(b) + " over capacity");
    if (b >= block_count_ && (block_size_[b] != 0 || header_[b] != max_key)) {
      fail("unused block " + std::to_string(b) + " not empty or not padded");
    }
    total += block_size_[b];
  }
  if (total != size_) fail("size " + std::to_string(size_) + " != counted " + std::to_string(total));
  if (size_ > capacity) fail("size over capacity");
  for (std::size_t b = 0; b + 1 < block_count_; ++b) {
    if (!(header_[b] < header_[b + 1])) fail("header not strictly increasing at block " + std::to_string(b));
  }
  for (std::size_t b = 0; b < block_count_; ++b) {
    const std::size_t n = block_size_[b];
    for (std::size_t i = 0; i < n; ++i) {
      const key_type k = blocks_[b][i].key;
      if (k < header_[b] || (b + 1 < block_count_ && k >= header_[b + 1])) {
        fail("key " + std::to_string(k) + " outside the bounds of block " + std::to_string(b));
      }
      if (route(k) != b) fail("key " + std::to_string(k) + " does not route to its block");
      if ((sorted_mask_ >> b & 1) && i > 0 && blocks_[b][i - 1].key >= k) {
        fail("block " + std::to_string(b) + " marked sorted but is not");
      }
      for (std::size_t j = i + 1; j < n; ++j) {
        if (blocks_[b][j].key == k) fail("duplicate key " + std::to_string(k) + " in block " + std::to_string(b));
      }
    }
  }
  const std::size_t logged = std::min<std::size_t>(log_size_, log_capacity);  // (checked above)
  for (std::size_t i = 0; i < logged; ++i) {
    const key_type k = log_keys_[i];
    if (log_sorted_ && i > 0 && log_keys_[i - 1] >= k) fail("log marked sorted but is not");
    for (std::size_t j = i + 1; j < logged; ++j) {
      if (log_keys_[j] == k) fail("duplicate key " + std::to_string(k) + " in the log");
    }
    if (find_in_blocks(k).found()) fail("key " + std::to_string(k) + " both in the log and in a block");
  }
}

template <int LogSize, int NumBlocks, int BlockSize>
template <bool Dense>
std::size_t basic_bpa<LogSize, NumBlocks, BlockSize>::guess_chunk(const key_type* keys, std::size_t stride,
                                                                 std::size_t m, std::size_t b,
                                                                 slot* out) const noexcept {
  if constexpr (Dense) {
    std::size_t ip_block = num_blocks;  // the block `ip` describes
    block_interpolation ip{};
    for (std::size_t i = 0; i < m; ++i) {
      const key_type key = keys[i * stride];
      b = walk_blocks(b, key);
      if (b != ip_block) {
        ip = interpolation(b);
        ip_block = b;
      }
      out[i] = guess_in_block(b, ip, key);
    }
  } else {
    for (std::size_t i = 0; i < m; ++i) {
      const key_type key = keys[i * stride];
      b = advance(b, key);
      out[i] = guess_in_block(b, interpolation(b), key);
    }
  }
  return b;
}

template <int LogSize, int NumBlocks, int BlockSize>
template <class IsWrite>
typename basic_bpa<LogSize, NumBlocks, BlockSize>::line_tally basic_bpa<LogSize, NumBlocks, BlockSize>::lookup_lines(
    const key_type* keys, std::size_t n, std::size_t b, IsWrite&& is_write) const noexcept {
  // One bit a line of this BPA (and the line before it, which the leaf's
  // fences share with the counts).
  constexpr std::size_t line = 64;
  constexpr std::size_t words = (sizeof(basic_bpa) / line + 2 + 63) / 64;
  std::uint64_t read[words] = {}, written[words] = {};
  const std::uintptr_t base = reinterpret_cast<std::uintptr_t>(this) / line;
  auto mark = [&](std::uint64_t* bits, const void* p) {
    const std::uintptr_t l = reinterpret_cast<std::uintptr_t>(p) / line - base;
    bits[l / 64] |= std::uint64_t{1} << (l % 64);
  };
  auto mark_span = [&](const void* first, std::size_t bytes) {
    if (bytes == 0) return;
    const char* p = static_cast<const char*>(first);
    for (std::size_t at = 0; at < bytes; at += line) mark(read, p + at);
    mark(read, p + bytes - 1);
  };
  mark(read, &sorted_mask_);
  mark(read, &block_count_);
  mark(read, &log_size_);
  if (n != 0) {
    // The first key's block is sought from `b` (seek_block), the others'
    // from the block before (advance).
    b = std::min<std::size_t>(b, block_count_ - 1u);
    mark(read, &header_[b]);
    while (b > 0 && header_[b] > keys[0]) mark(read, &header_[--b]);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const key_type key = keys[i];
    while (b + 1 < num_blocks && b + 1 < block_count_) {
      mark(read, &header_[b + 1]);
      if (header_[b + 1] > key) break;
      ++b;
    }
    const entry* es = blocks_[b];
    const std::size_t size = std::min<std::size_t>(block_size_[b], block_capacity);
    mark(read, &block_size_[b]);
    std::size_t at = 0;
    if (sorted_mask_ >> b & 1) {
      mark(read, &header_[b]);
      mark(read, &header_[b + 1 < num_blocks && b + 1 < block_count_ ? b + 1 : 0]);
      at = window_start(b, interpolation(b), key);
      // guess_chunk's prefetches, then the lines find_from_guess compares:
      // the window, else its bisection.
      mark(read, es + at);
      if constexpr (lookup_window > per_line) mark(read, es + at + per_line);
      mark(read, es + at + lookup_window - 1);
      if (size != 0) {
        bool in_window = false;
        const std::size_t w = size >= lookup_window ? std::min(at, size - lookup_window) : 0;
        if (size >= lookup_window) {
          mark_span(es + w, lookup_window * sizeof(entry));
          in_window = es[w].key <= key && key <= es[w + lookup_window - 1].key;
        }
        if (!in_window) {
          mark(read, es + search_outside_window(es, size, w, key, [&](const entry* p) { mark(read, p); }));
        }
      }
    } else {
      mark_span(es, size * sizeof(entry));
    }
    slot s = find_from_guess({static_cast<int>(b), static_cast<int>(at)}, key);
    if (!s.found() && log_size_ != 0) {
      mark_span(log_keys_, log_size_ * sizeof(key_type));
      s = find_in_log(key);
    }
    if (s.found()) {
      mark(read, value_at(s));
      if (is_write(i)) mark(written, value_at(s));
    } else if (is_write(i)) {  // a new key goes to the log
      mark(written, &log_keys_[std::min<std::size_t>(log_size_, log_capacity - 1)]);
      mark(written, &log_values_[std::min<std::size_t>(log_size_, log_capacity - 1)]);
    }
  }
  line_tally t;
  for (std::size_t w = 0; w < words; ++w) {
    t.read += static_cast<std::uint64_t>(__builtin_popcountll(read[w]));
    t.written += static_cast<std::uint64_t>(__builtin_popcountll(written[w]));
  }
  return t;
}

template <int LogSize, int NumBlocks, int BlockSize>
typename basic_bpa<LogSize, NumBlocks, BlockSize>::slot basic_bpa<LogSize, NumBlocks, BlockSize>::find_from_guess(
    slot g, key_type key) const noexcept {
  const auto b = static_cast<std::size_t>(g.block);
  const entry* es = blocks_[b];
  const std::size_t n = std::min<std::size_t>(block_size_[b], block_capacity);
  if (n == 0) return {g.block, -1};
  if (sorted_mask_ >> b & 1) {
    std::size_t j = 0;
    bool in_window = false;
    std::size_t w = 0;
    if (n >= lookup_window) {
      w = std::min(static_cast<std::size_t>(g.index), n - lookup_window);
      const entry* we = es + w;
      in_window = (we[0].key <= key) & (key <= we[lookup_window - 1].key);
      if (in_window) {
        std::size_t below = 0;
        for (std::size_t t = 0; t < lookup_window; ++t) below += we[t].key <= key;
        j = w + below - 1;
      }
    }
    if (!in_window) j = search_outside_window(es, n, w, key);
    return {g.block, es[j].key == key ? static_cast<int>(j) : -1};
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (es[i].key == key) return {g.block, static_cast<int>(i)};
  }
  return {g.block, -1};
}

template <int LogSize, int NumBlocks, int BlockSize>
template <class Run>
std::size_t basic_bpa<LogSize, NumBlocks, BlockSize>::apply_per_op(const Run& run, std::size_t n) {
  std::size_t b = 0;
  slot guesses[lookup_chunk];
  slot located[lookup_chunk];
  for (std::size_t c = 0; c < n; c += lookup_chunk) {
    const std::size_t m = std::min(n - c, lookup_chunk);
    // A chunk whose ops all carry route hints takes its guesses from them
    // (no header line read); a key not found in its hinted block is then
    // routed here unless that block's bounds hold it.
    bool hinted = run.hinted();
    for (std::size_t i = 0; hinted && i < m; ++i) hinted = run.hint(c + i) != no_hint;
    if (hinted) {
      for (std::size_t i = 0; i < m; ++i) guesses[i] = start_hinted(run.hint(c + i));
    } else {
      b = guess_chunk(run.advanced(c).keys(), Run::key_stride, m, b, guesses);
    }
    // Every key of the chunk is located in its block before any op runs,
    // so that the lookups' cache misses (the bisections of keys outside
    // their windows among them) overlap.
    for (std::size_t i = 0; i < m; ++i) {
      located[i] = guesses[i].block < 0 ? slot{-1, -1} : find_from_guess(guesses[i], run.key(c + i));
    }
    bool erased = false;  // in a block: the slots located there may have moved
    for (std::size_t i = 0; i < m; ++i) {
      const key_type key = run.key(c + i);
      const op_kind kind = run.kind(c + i);
      // An earlier op of the chunk may have flushed the log: then the
      // guesses are stale and the key is routed again. A key absent from
      // its block is sought in the log, where an earlier op may have put it.
      slot s = guesses[i].block < 0 ? find_in_blocks(key) : erased ? find_from_guess(guesses[i], key) : located[i];
      // (hinted: a hint's block that does not hold the key is stale)
      const bool stale = hinted && !s.found() && guesses[i].block >= 0 &&
                         !bounds_hold(static_cast<std::size_t>(guesses[i].block), key);
      if (stale) s = find_in_blocks(key);
      if (!s.found()) s = find_in_log(key);
      const bool adds = !s.found() && (kind == op_kind::put || kind == op_kind::insert);
      if (adds && size_ == capacity) return c + i;
      // (!hinted: a hint missing; an unsure hint counts as neither)
      if (run.hinted()) run.count_hints(hinted && !stale && guesses[i].block != unsure_block, !hinted || stale);
      // The key's value slot, for the answer and a put (a key not found has
      // slot {-1, -1}: its index clamped, the log's first value's).
      value_type* const value = value_at({s.block, std::max(s.index, 0)});
      run.answer(c + i, s.found(), s.found() ? *value : 0);
      // A put of a present key stores its value without a branch (gets and
      // puts mix unpredictably): every other op stores it into `sink`, so
      // that a get leaves its line clean.
      value_type sink;
      const auto to_value = reinterpret_cast<std::uintptr_t>(value);
      const std::uintptr_t replaces =
          std::uintptr_t{0} - static_cast<std::uintptr_t>(s.found() & (kind == op_kind::put));
      *reinterpret_cast<value_type*>((to_value & replaces) | (reinterpret_cast<std::uintptr_t>(&sink) & ~replaces)) =
          run.value(c + i);
      if (adds) {
        if (log_size_ == log_capacity) {  // the flush moves keys and block bounds
          for (std::size_t j = i + 1; j < m; ++j) guesses[j].block = -1;
          b = 0;
        }
        append_to_log(key, run.value(c + i));
      } else if (s.found() && kind == op_kind::erase) {
        erased = erased || s.block >= 0;
        erase_at(s);
      }
    }
  }
  return n;
}

template <int LogSize, int NumBlocks, int BlockSize>
template <class Run>
std::size_t basic_bpa<LogSize, NumBlocks, BlockSize>::apply_merge(const Run& run, std::size_t n) {
  key_type in_keys[capacity];
  value_type in_values[capacity];
  key_type out_keys[capacity];
  value_type out_values[capacity];
  const std::size_t m = size_;
  extract_sorted(in_keys, in_values);
  std::size_t in = 0;
  std::size_t out = 0;
  std::size_t live = m;  // keys held if the merge stopped here
  std::size_t i = 0;
  while (i < n) {
    const key_type k = run.key(i);
    while (in < m && in_keys[in] < k) {
      out_keys[out] = in_keys[in];
      out_values[out++] = in_values[in++];
    }
    bool present = in < m && in_keys[in] == k;
    value_type value = present ? in_values[in] : 0;
    if (present) ++in;
    bool stopped = false;
    for (; i < n && run.key(i) == k; ++i) {
      run.answer(i, present, present ? value : 0);
      switch (run.kind(i)) {
        case op_kind::get:
          break;
        case op_kind::put:
        case op_kind::insert:
          if (!present) {
            if (live == capacity) {
              stopped = true;
              break;
            }
            ++live;
            present = true;
            value = run.value(i);
          } else if (run.kind(i) == op_kind::put) {
            value = run.value(i);
          }
          break;
        case op_kind::erase:
          if (present) --live;
          present = false;
          break;
      }
      if (stopped) break;
    }
    if (present) {
      out_keys[out] = k;
      out_values[out++] = value;
    }
    if (stopped) break;
  }
  for (; in < m; ++in) {
    out_keys[out] = in_keys[in];
    out_values[out++] = in_values[in];
  }
  assign_sorted(out_keys, out_values, out);
  return i;
}

}  // namespace tandem::host
