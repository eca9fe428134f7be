#include "workload.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>
#include <oneapi/tbb/parallel_sort.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>

namespace tandem_bench {
namespace {

using tandem::key_type;
using tandem::op;
using tandem::op_type;

__extension__ using u128 = unsigned __int128;

constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Uniform in [0, n) (Lemire's multiply-shift; the bias is below 2^-40 here).
std::uint64_t below(std::mt19937_64& rng, std::uint64_t n) noexcept {
  return static_cast<std::uint64_t>((static_cast<u128>(rng()) * n) >> 64);
}

double unit(std::mt19937_64& rng) noexcept { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// YCSB's FNV-1a 64 over the 8 bytes of `v` (ScrambledZipfianGenerator).
std::uint64_t fnv64(std::uint64_t v) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 8; ++i) {
    h ^= v & 0xff;
    h *= 1099511628211ull;
    v >>= 8;
  }
  return h;
}

/// YCSB's ZipfianGenerator (Gray et al., "Quickly generating billion-record
/// synthetic databases") over ranks [0, n), most popular first.
class zipfian {
 public:
  zipfian(std::uint64_t n, double theta) : n_(n), theta_(theta) {
    // zeta(n) = sum 1/i^theta, summed in a fixed order (deterministic).
    zetan_ = tbb::parallel_deterministic_reduce(
        tbb::blocked_range<std::uint64_t>(1, n + 1, 1u << 16), 0.0,
        [&](const tbb::blocked_range<std::uint64_t>& r, double acc) {
          for (std::uint64_t i = r.begin(); i < r.end(); ++i) acc += 1.0 / std::pow(static_cast<double>(i), theta_);
          return acc;
        },
        [](double x, double y) { return x + y; });
    const double zeta2 = 1.0 + 1.0 / std::pow(2.0, theta_);
    alpha_ = 1.0 / (1.0 - theta_);
    eta_ = (1.0 - std::pow(2.0 / static_cast<double>(n_), 1.0 - theta_)) / (1.0 - zeta2 / zetan_);
    second_ = 1.0 + std::pow(0.5, theta_);
  }

  std::uint64_t next(double u) const noexcept {
    const double uz = u * zetan_;
    if (uz < 1.0) return 0;
    if (uz < second_ && n_ > 1) return 1;
    const auto r = static_cast<std::uint64_t>(static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1.0, alpha_));
    return std::min(r, n_ - 1);
  }

 private:
  std::uint64_t n_;
  double theta_;
  double zetan_ = 0, alpha_ = 0, eta_ = 0, second_ = 0;
};

/// `need` distinct keys, none of them 0 or UINT64_MAX, in a random order:
/// splitmix64 is a bijection of the 64-bit integers (an added constant,
/// xor-shifts and odd multipliers), so the images of distinct counters are
/// distinct and no duplicate check is needed. Generated in parallel.
std::vector<key_type> distinct_random_keys(std::uint64_t need, std::uint64_t seed) {
  const std::uint64_t base = splitmix64(seed);
  // Two counters more: at most two images are 0 or UINT64_MAX, and those
  // are dropped.
  std::vector<key_type> keys(need + 2);
  tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, need + 2), [&](const tbb::blocked_range<std::uint64_t>& r) {
    for (std::uint64_t i = r.begin(); i < r.end(); ++i) keys[i] = splitmix64(base + i);
  });
  auto edge = [](key_type k) { return k == tandem::min_key || k == tandem::max_key; };
  const bool any_edge = tbb::parallel_reduce(
      tbb::blocked_range<std::uint64_t>(0, keys.size()), false,
      [&](const tbb::blocked_range<std::uint64_t>& r, bool found) {
        for (std::uint64_t i = r.begin(); i < r.end() && !found; ++i) found = edge(keys[i]);
        return found;
      },
      [](bool x, bool y) { return x || y; });
  if (any_edge) keys.erase(std::remove_if(keys.begin(), keys.end(), edge), keys.end());
  keys.resize(need);
  return keys;
}

/// High end of a count from `lo` over about `length` of `keys` uniformly
/// random keys: `length` times the mean gap between keys, capped at UINT64_MAX.
key_type count_high(key_type lo, std::uint64_t length, std::uint64_t keys) noexcept {
  const std::uint64_t gap = std::numeric_limits<std::uint64_t>::max() / keys;
  const std::uint64_t span = length > std::numeric_limits<std::uint64_t>::max() / gap ? tandem::max_key : length * gap;
  return lo > tandem::max_key - span ? tandem::max_key : lo + span;
}

bool writes_new_keys(workload_kind w) { return w == workload_kind::load || w == workload_kind::e; }

/// Percent of ops that write (put for A/B, insert for E).
std::uint64_t write_percent(workload_kind w) {
  switch (w) {
    case workload_kind::load:
      return 100;
    case workload_kind::a:
      return 50;
    case workload_kind::b:
      return 5;
    case workload_kind::e:
      return 5;
    case workload_kind::c:
    case workload_kind::scan:
    case workload_kind::count:
      return 0;
  }
  return 0;
}

bool is_write(std::uint64_t seed, std::uint64_t op_no, std::uint64_t percent) noexcept {
  if (percent == 0) return false;
  if (percent >= 100) return true;
  return splitmix64(splitmix64(seed ^ 0x5ca1ab1e) ^ op_no) % 100 < percent;
}

}  // namespace

const char* to_string(workload_kind w) noexcept {
  switch (w) {
    case workload_kind::load:
      return "load";
    case workload_kind::c:
      return "C";
    case workload_kind::a:
      return "A";
    case workload_kind::b:
      return "B";
    case workload_kind::e:
      return "E";
    case workload_kind::scan:
      return "scan";
    case workload_kind::count:
      return "count";
  }
  return "?";
}

const char* to_string(key_dist d) noexcept {
  switch (d) {
    case key_dist::uniform:
      return "uniform";
    case key_dist::zipf:
      return "zipf";
    case key_dist::sequential:
      return "sequential";
  }
  return "?";
}

std::string describe(workload_kind w, std::uint64_t scan_length, tandem::scan_order order) {
  switch (w) {
    case workload_kind::load:
      return "bulk load timed, then 100% insert of new keys";
    case workload_kind::c:
      return "100% get";
    case workload_kind::a:
      return "50% get, 50% put (update)";
    case workload_kind::b:
      return "95% get, 5% put (update)";
    case workload_kind::e:
      return "95% ordered scan of 1..100 keys, 5% insert of new keys";
    case workload_kind::scan:
      return std::string("100% ") + (order == tandem::scan_order::ordered ? "ordered" : "unordered") + " scan of " +
             std::to_string(scan_length) + " keys";
    case workload_kind::count:
      return "100% count over random ranges of about " + std::to_string(scan_length) + " keys";
  }
  return "?";
}

tandem::value_type load_value(key_type key) noexcept { return splitmix64(key ^ 0x10adu); }

tandem::value_type put_value(key_type key, std::uint64_t batch_no) noexcept {
  return splitmix64(key + (batch_no + 1) * 0x9e3779b97f4a7c15ull);
}

dataset make_dataset(const workload_spec& spec, const std::function<void(std::size_t)>& progress) {
  auto step = [&](std::size_t done) {
    if (progress) progress(done);
  };
  if (spec.keys < 2) throw std::invalid_argument("--keys must be at least 2 (0 and UINT64_MAX are always loaded)");
  if (spec.batch == 0) throw std::invalid_argument("--batch must be at least 1");
  const std::uint64_t n = spec.keys;
  const std::uint64_t nb = (spec.ops + spec.batch - 1) / spec.batch;
  const std::uint64_t wpct = write_percent(spec.kind);

  // Per batch: how many new keys its inserts take, and where they start.
  std::vector<std::uint64_t> new_begin(nb + 1, 0);
  if (writes_new_keys(spec.kind)) {
    for (std::uint64_t b = 0; b < nb; ++b) {
      const std::uint64_t lo = b * spec.batch, hi = std::min(spec.ops, lo + spec.batch);
      std::uint64_t c = 0;
      for (std::uint64_t i = lo; i < hi; ++i) c += is_write(spec.seed, i, wpct);
      new_begin[b + 1] = new_begin[b] + c;
    }
  }
  const std::uint64_t new_count = new_begin[nb];

  dataset ds;
  ds.new_keys = new_count;
  std::vector<key_type> pool = distinct_random_keys(n - 2 + new_count, spec.seed);
  // Sequential: the new keys are the largest, inserted in ascending order
  // (appended at the right end, below UINT64_MAX).
  const bool appends = spec.dist == key_dist::sequential && new_count > 0;
  if (appends) tbb::parallel_sort(pool.begin(), pool.end());
  ds.load_keys.assign(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(n - 2));
  if (appends && !spec.sorted_load) {
    std::mt19937_64 rng(splitmix64(spec.seed ^ 0x5bf1));
    std::shuffle(ds.load_keys.begin(), ds.load_keys.end(), rng);
  }
  ds.load_keys.push_back(tandem::min_key);
  ds.load_keys.push_back(tandem::max_key);
  if (spec.sorted_load) {
    tbb::parallel_sort(ds.load_keys.begin(), ds.load_keys.end());
  } else {  // put the edge keys at random places of the load order
    std::mt19937_64 rng(splitmix64(spec.seed ^ 0xed9e));
    std::swap(ds.load_keys[n - 2], ds.load_keys[below(rng, n - 1)]);
    std::swap(ds.load_keys[n - 1], ds.load_keys[below(rng, n)]);
  }
  const std::vector<key_type> new_keys(pool.begin() + static_cast<std::ptrdiff_t>(n - 2), pool.end());
  std::vector<key_type>().swap(pool);

  step(1);
  ds.load_values.resize(n);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i < r.end(); ++i) ds.load_values[i] = load_value(ds.load_keys[i]);
  });

  // The distributions pick a rank and the op gets that key: ranks in key
  // order for the sequential walk, else in load order (random already, or
  // sorted: no sort needed for uniform picks; zipf's ranks are scattered by
  // a hash).
  step(2);
  std::vector<key_type> by_rank;
  if (spec.dist == key_dist::sequential) {
    by_rank = ds.load_keys;
    tbb::parallel_sort(by_rank.begin(), by_rank.end());
  }
  const std::vector<key_type>& ranked = spec.dist == key_dist::sequential ? by_rank : ds.load_keys;

  std::unique_ptr<zipfian> zipf;
  if (spec.dist == key_dist::zipf) zipf = std::make_unique<zipfian>(n, zipf_theta);

  step(3);
  ds.batches.resize(nb);
  tbb::parallel_for(std::uint64_t{0}, nb, [&](std::uint64_t b) {
    std::mt19937_64 rng(splitmix64(splitmix64(spec.seed) ^ (b + 1)));
    const std::uint64_t lo = b * spec.batch, hi = std::min(spec.ops, lo + spec.batch);
    std::uint64_t next_new = new_begin[b];
    auto pick = [&](std::uint64_t op_no) -> key_type {
      switch (spec.dist) {
        case key_dist::uniform:
          return ranked[below(rng, n)];
        case key_dist::zipf:
          return ranked[fnv64(zipf->next(unit(rng))) % n];
        case key_dist::sequential:
          return ranked[op_no % n];
      }
      return 0;
    };
    std::vector<op>& ops = ds.batches[b];
    ops.reserve(hi - lo);
    for (std::uint64_t i = lo; i < hi; ++i) {
      const bool write = is_write(spec.seed, i, wpct);
      switch (spec.kind) {
        case workload_kind::load: {
          const key_type k = new_keys[next_new++];
          ops.push_back({k, load_value(k), 0, op_type::insert, tandem::scan_order::ordered});
          break;
        }
        case workload_kind::c:
          ops.push_back({pick(i), 0, 0, op_type::get, tandem::scan_order::ordered});
          break;
        case workload_kind::a:
        case workload_kind::b: {
          const key_type k = pick(i);
          if (write) {
            ops.push_back({k, put_value(k, b), 0, op_type::put, tandem::scan_order::ordered});
          } else {
            ops.push_back({k, 0, 0, op_type::get, tandem::scan_order::ordered});
          }
          break;
        }
        case workload_kind::e:
          if (write) {
            const key_type k = new_keys[next_new++];
            ops.push_back({k, load_value(k), 0, op_type::insert, tandem::scan_order::ordered});
          } else {
            const key_type k = pick(i);
            ops.push_back({k, tandem::max_key, 1 + below(rng, e_max_scan), op_type::scan, tandem::scan_order::ordered});
          }
          break;
        case workload_kind::scan:
          ops.push_back({pick(i), tandem::max_key, spec.scan_length, op_type::scan, spec.order});
          break;
        case workload_kind::count: {
          const key_type k = pick(i);
          ops.push_back({k, count_high(k, spec.scan_length, n), 0, op_type::count, tandem::scan_order::ordered});
          break;
        }
      }
    }
  });
  step(4);
  return ds;
}

const char* describe_warmup(workload_kind w) noexcept {
  switch (w) {
    case workload_kind::c:
      return "gets";
    case workload_kind::scan:
      return "the workload's scans";
    case workload_kind::count:
      return "the workload's counts";
    case workload_kind::e:
      return "the workload's scans and inserts of loaded keys (present: no change)";
    case workload_kind::a:
    case workload_kind::b:
    case workload_kind::load:
      return "gets and inserts of loaded keys (present: no change)";
  }
  return "?";
}

std::vector<std::vector<op>> make_warmup_batches(const dataset& ds, const workload_spec& spec, std::uint64_t count) {
  const std::uint64_t batch = spec.batch, seed = spec.seed;
  std::vector<std::vector<op>> out(count);
  const std::uint64_t n = ds.load_keys.size();
  if (n == 0) return out;
  tbb::parallel_for(std::uint64_t{0}, count, [&](std::uint64_t b) {
    std::mt19937_64 rng(splitmix64(splitmix64(seed ^ 0x3a53u) ^ (b + 1)));
    std::vector<op>& ops = out[b];
    ops.reserve(batch);
    for (std::uint64_t i = 0; i < batch; ++i) {
      const tandem::key_type k = ds.load_keys[below(rng, n)];
      switch (spec.kind) {
        case workload_kind::c:
          ops.push_back({k, 0, 0, op_type::get, tandem::scan_order::ordered});
          break;
        case workload_kind::a:
        case workload_kind::b:
        case workload_kind::load:
          if (i % 2 == 1) {
            ops.push_back({k, load_value(k), 0, op_type::insert, tandem::scan_order::ordered});
          } else {
            ops.push_back({k, 0, 0, op_type::get, tandem::scan_order::ordered});
          }
          break;
        case workload_kind::e:
          if (i % 20 == 19) {
            ops.push_back({k, load_value(k), 0, op_type::insert, tandem::scan_order::ordered});
          } else {
            ops.push_back({k, tandem::max_key, 1 + below(rng, e_max_scan), op_type::scan, tandem::scan_order::ordered});
          }
          break;
        case workload_kind::scan:
          ops.push_back({k, tandem::max_key, spec.scan_length, op_type::scan, spec.order});
          break;
        case workload_kind::count:
          ops.push_back({k, count_high(k, spec.scan_length, n), 0, op_type::count, tandem::scan_order::ordered});
          break;
      }
    }
  });
  return out;
}

}  // namespace tandem_bench
