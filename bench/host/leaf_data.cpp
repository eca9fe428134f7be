// leaf_data.hpp: the data sets of tandem-leaf-bench, built once from fixed
// seeds, and its copy baseline.
#include "leaf_data.hpp"

#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <numeric>
#include <optional>
#include <random>
#include <utility>

namespace tandem_leaf_bench {
namespace {

/// `n` distinct keys, uniform over [0, UINT64_MAX], in generation (random) order.
std::vector<key_type> unique_random_keys(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::unordered_set<key_type> seen;
  seen.reserve(2 * n);
  std::vector<key_type> out;
  out.reserve(n);
  while (out.size() < n) {
    const key_type k = rng();
    if (seen.insert(k).second) out.push_back(k);
  }
  return out;
}

std::vector<value_type> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<value_type> out(n);
  for (value_type& v : out) v = rng();
  return out;
}

/// `count` keys drawn uniformly (with repetition) from `keys`.
std::vector<key_type> random_probes(const std::vector<key_type>& keys, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<key_type> out(count);
  for (key_type& k : out) k = keys[rng() % keys.size()];
  return out;
}

leaf_variant build_leaf_variant(std::uint64_t seed) {
  constexpr std::size_t extra = 16;
  leaf_variant s;
  const std::vector<key_type> all = unique_random_keys(kLeafKeys + extra, seed);
  const std::vector<value_type> all_values = random_values(kLeafKeys + extra, seed ^ 0x9b1c0ffeeULL);

  s.inserted = new_bpa();
  bpa& b = *s.inserted;
  for (std::size_t i = 0; i < kLeafKeys; ++i) {
    if (b.upsert(all[i], all_values[i]) != upsert_status::inserted) die("upsert of a new key did not insert");
  }
  b.flush();
  for (std::size_t i = kLeafKeys; i < kLeafKeys + extra; ++i) {
    if (b.upsert(all[i], all_values[i]) != upsert_status::inserted) die("upsert of a new key did not insert");
  }
  // Erase `extra` random keys of the first 768 (all in blocks after the flush).
  std::vector<std::size_t> order(kLeafKeys);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::mt19937_64 rng(seed ^ 0x5eed0001ULL);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<bool> erased(kLeafKeys + extra, false);
  for (std::size_t e = 0; e < extra; ++e) {
    const std::size_t at = order[e];
    value_type old = 0;
    if (!b.erase(all[at], &old) || old != all_values[at]) die("erase of a present key failed");
    erased[at] = true;
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (erased[i]) continue;
    s.keys.push_back(all[i]);
    s.values.push_back(all_values[i]);
  }
  b.verify();
  if (b.size() != kLeafKeys || s.keys.size() != kLeafKeys) die("prepared BPA does not hold 768 keys");
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::optional<value_type> v = b.get(all[i]);
    if (erased[i] ? v.has_value() : (!v || *v != all_values[i])) die("prepared BPA get mismatch");
  }

  for (std::size_t i = 0; i < s.keys.size(); ++i) s.model.emplace(s.keys[i], s.values[i]);
  std::vector<key_type> sk;
  std::vector<value_type> sv;
  for (const auto& [k, v] : s.model) {
    sk.push_back(k);
    sv.push_back(v);
  }
  s.sorted = new_bpa();
  s.sorted->assign_sorted(sk.data(), sv.data(), sk.size());
  s.sorted->verify();
  s.key_set.insert(s.keys.begin(), s.keys.end());
  return s;
}

}  // namespace

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tandem-leaf-bench: setup check failed: %s\n", what.c_str());
  std::abort();
}

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

bpa_ptr new_bpa() { return bpa_ptr(new (::operator new(sizeof(bpa), std::align_val_t{4096})) bpa()); }
bpa_ptr new_bpa(const bpa& from) {
  return bpa_ptr(new (::operator new(sizeof(bpa), std::align_val_t{4096})) bpa(from));
}

const small_leaf_data& small_leaf() {
  static const small_leaf_data d = [] {
    small_leaf_data r;
    for (std::size_t v = 0; v < kLeafVariants; ++v) r.variants.push_back(build_leaf_variant(0x7a6d3e11ULL + 977 * v));
    const leaf_variant& v0 = r.variants[0];
    for (std::size_t i = 0; i < v0.keys.size(); ++i) {
      r.stdmap.emplace(v0.keys[i], v0.values[i]);
      r.btree.emplace(v0.keys[i], v0.values[i]);
    }
    r.probes = random_probes(v0.keys, kProbes, 0x0b5e55edULL);
    return r;
  }();
  return d;
}

const leaf_variant& leaf0() { return small_leaf().variants[0]; }

const big_data& big() {
  static const big_data d = [] {
    big_data r;
    r.keys = unique_random_keys(kStoreKeys, 0xb16b00b5ULL);
    r.values = random_values(kStoreKeys, 0xfeedfaceULL);
    std::vector<std::size_t> order(kStoreKeys);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&r](std::size_t a, std::size_t b) { return r.keys[a] < r.keys[b]; });
    r.sorted_keys.reserve(kStoreKeys);
    r.sorted_values.reserve(kStoreKeys);
    for (const std::size_t i : order) {
      r.sorted_keys.push_back(r.keys[i]);
      r.sorted_values.push_back(r.values[i]);
    }
    r.probes = random_probes(r.keys, kProbes, 0xa11ce5ULL);
    return r;
  }();
  return d;
}

const big_store_data& big_store() {
  static const big_store_data d = [] {
    const big_data& b = big();
    big_store_data r{leaf_store::bulk_load(b.sorted_keys.data(), b.sorted_values.data(), kStoreKeys), {}};
    r.table = r.store.table();
    if (r.store.size() != kStoreKeys) die("bulk-loaded leaf store does not hold 2^20 keys");
    return r;
  }();
  return d;
}

const std_map& big_stdmap() {
  static const std_map m = [] {
    std_map r;
    const big_data& b = big();
    for (std::size_t i = 0; i < kStoreKeys; ++i) r.emplace(b.keys[i], b.values[i]);
    return r;
  }();
  return m;
}

const btree_map& big_btree() {
  static const btree_map m = [] {
    btree_map r;
    const big_data& b = big();
    for (std::size_t i = 0; i < kStoreKeys; ++i) r.emplace(b.keys[i], b.values[i]);
    return r;
  }();
  return m;
}

std::vector<const bpa*> leaf_sources(bool sorted) {
  std::vector<const bpa*> out;
  for (const leaf_variant& v : small_leaf().variants) out.push_back(sorted ? v.sorted.get() : v.inserted.get());
  return out;
}

double copy_ns(const std::vector<const bpa*>& sources, bpa& dst, std::int64_t iterations) {
  const std::int64_t n = std::clamp<std::int64_t>(iterations / 5, 1000, 10000);
  double batch[5];
  for (double& t : batch) {
    const double t0 = thread_cpu_ns();
    for (std::int64_t i = 0; i < n; ++i) {
      dst = *sources[static_cast<std::size_t>(i) % sources.size()];
      benchmark::ClobberMemory();
    }
    t = (thread_cpu_ns() - t0) / static_cast<double>(n);
  }
  std::sort(std::begin(batch), std::end(batch));
  return batch[2];
}

}  // namespace tandem_leaf_bench
