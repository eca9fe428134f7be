// index::submit of columns in GPU memory (columns::device): the same
// answers as host columns and the model for every op type, edge keys,
// zero-length arrays, arrays that are not the GPU's memory refused naming
// them, a stream with work still queued on it; without a GPU, the call says
// why.
#include <tandem/device/device_arrays.hpp>
#include <tandem/device/pinned.hpp>
#include <tandem/tandem.hpp>

#include "support/gpu.hpp"
#include "support/model.hpp"

#include <gtest/gtest.h>

#if defined(TANDEM_HAS_CUDA)
#include <cuda_runtime.h>
#endif

#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace tandem {
namespace {

/// One array of GPU 0's memory, freed at scope exit.
template <class T>
struct device_vector {
  T* p = nullptr;
  std::size_t n = 0;
  explicit device_vector(std::size_t count) : p(static_cast<T*>(device::allocate_device(count * sizeof(T), 0))), n(count) {}
  device_vector(const device_vector&) = delete;
  device_vector& operator=(const device_vector&) = delete;
  ~device_vector() { device::free_device(p, 0); }
  void upload(const std::vector<T>& v) { device::copy_to_device(p, v.data(), v.size() * sizeof(T), 0, nullptr); }
  std::vector<T> download() const {
    std::vector<T> v(n);
    device::copy_from_device(v.data(), p, n * sizeof(T), 0, nullptr);
    return v;
  }
};

TEST(DeviceColumns, WithoutAGpuTheCallSaysWhy) {
  std::string why;
  if (test::have_gpu(why)) GTEST_SKIP() << "a GPU is usable here";
  tandem::index idx(config{});
  std::vector<key_type> keys(4, 7);
  columns c;
  c.keys = keys.data();
  c.n = keys.size();
  c.device = 0;
  try {
    (void)idx.submit(c);
    FAIL() << "device columns were taken without a GPU";
  } catch (const tandem::error& e) {
    EXPECT_NE(std::string(e.what()).find("GPU"), std::string::npos) << e.what();
  }
}

/// Runs `c` over device copies of its host arrays and checks that the
/// answers equal those of the same columns in host memory, run on a twin.
void same_as_host(tandem::index& on_device, tandem::index& on_host, const columns& host, const char* what) {
  const std::size_t n = host.n;
  const bool with_values = host.type == op_type::put || host.type == op_type::insert;
  device_vector<key_type> keys(n), keys_out(n);
  device_vector<value_type> values(n), values_out(n);
  device_vector<std::uint8_t> found_out(n);
  keys.upload(std::vector<key_type>(host.keys, host.keys + n));
  if (with_values) values.upload(std::vector<value_type>(host.values, host.values + n));
  columns d = host;
  d.keys = keys.p;
  d.values = with_values ? values.p : nullptr;
  d.values_out = values_out.p;
  d.found_out = found_out.p;
  d.keys_out = host.type == op_type::lower_bound ? keys_out.p : nullptr;
  d.device = 0;
  std::vector<value_type> hv(n, 1);
  std::vector<std::uint8_t> hf(n, 9);
  std::vector<key_type> hk(n, 3);
  columns h = host;
  h.values_out = hv.data();
  h.found_out = hf.data();
  h.keys_out = host.type == op_type::lower_bound ? hk.data() : nullptr;
  on_device.submit(d).get();
  on_host.submit(h).get();
  EXPECT_EQ(values_out.download(), hv) << what;
  EXPECT_EQ(found_out.download(), hf) << what;
  if (host.type == op_type::lower_bound) {
    EXPECT_EQ(keys_out.download(), hk) << what;
  }
}

TEST(DeviceColumns, GpuAnswersAsHostColumnsForEveryType) {
  TANDEM_REQUIRE_GPU();
  for (const device_kind where : {device_kind::cpu, device_kind::gpu}) {
    config cfg;
    cfg.device = where;  // the leaves' copies on the GPU, or none: the same answers
    tandem::index a(cfg), b(cfg);
    std::vector<entry> pairs;
    for (key_type k = 1; k < 100'000; ++k) pairs.push_back({k * 5, k});
    pairs.push_back({0, 11});
    pairs.push_back({max_key, 12});
    a.load(pairs);
    b.load(pairs);
    std::mt19937_64 rng(42);
    std::vector<key_type> keys(1 << 16);
    for (key_type& k : keys) k = rng() % 600'000;
    keys[0] = 0;
    keys[1] = max_key;
    keys[2] = max_key - 1;
    std::vector<value_type> values(keys.size());
    std::iota(values.begin(), values.end(), 1000);
    for (const op_type t : {op_type::get, op_type::lower_bound, op_type::put, op_type::insert, op_type::erase,
                            op_type::get}) {
      columns c;
      c.type = t;
      c.keys = keys.data();
      c.values = values.data();
      c.n = keys.size();
      same_as_host(a, b, c, to_string(t));
    }
    a.verify();
    EXPECT_EQ(a.size(), b.size());
  }
}

TEST(DeviceColumns, GpuZeroLengthAndRefusedArrays) {
  TANDEM_REQUIRE_GPU();
  tandem::index idx(config{});
  columns none;
  none.device = 0;
  idx.submit(none).get();  // nothing to read: ready at once
  std::vector<key_type> host_keys(8, 1);
  device_vector<key_type> keys(8);
  device_vector<value_type> out(8);
  const auto refused = [&](columns c, const char* names) {
    try {
      (void)idx.submit(c);
      ADD_FAILURE() << "taken: " << names;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  };
  columns c;
  c.n = 8;
  c.device = 0;
  c.keys = host_keys.data();  // host memory given as the GPU's
  refused(c, "columns::keys");
  c.keys = keys.p;
  c.values_out = reinterpret_cast<value_type*>(reinterpret_cast<char*>(out.p) + 4);  // misaligned
  refused(c, "values_out");
  c.values_out = out.p;
  std::vector<std::uint8_t> host_found(8);
  c.found_out = host_found.data();
  refused(c, "columns::found_out");
}

/// Device gets of `keys` answered as the model answers them (found flags
/// only, as contains() asks, without `values`).
void gets_match_model(tandem::index& idx, const std::map<key_type, value_type>& model,
                      const std::vector<key_type>& keys, const std::string& what, bool values = true) {
  const std::size_t n = keys.size();
  device_vector<key_type> dk(n);
  device_vector<value_type> dv(n);
  device_vector<std::uint8_t> df(n);
  dk.upload(keys);
  columns c;
  c.type = op_type::get;
  c.keys = dk.p;
  c.values_out = values ? dv.p : nullptr;
  c.found_out = df.p;
  c.n = n;
  c.device = 0;
  idx.submit(c).get();
  const std::vector<value_type> v = dv.download();
  const std::vector<std::uint8_t> f = df.download();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto it = model.find(keys[i]);
    const bool want = it != model.end();
    if (f[i] != (want ? 1 : 0) || (values && want && v[i] != it->second)) {
      if (++wrong <= 3) ADD_FAILURE() << what << ": key " << keys[i] << " at " << i << ": found " << int(f[i]);
    }
  }
  EXPECT_EQ(wrong, 0u) << what;
}

/// Keys of the model and keys it lacks, with the edge keys.
std::vector<key_type> probe_keys(const std::map<key_type, value_type>& model, std::size_t n, std::mt19937_64& rng) {
  std::vector<key_type> present;
  present.reserve(model.size());
  for (const auto& [k, v] : model) present.push_back(k);
  std::vector<key_type> keys(n);
  for (key_type& k : keys) k = rng() % 2 == 0 ? present[rng() % present.size()] : rng();
  keys[0] = 0;
  keys[1] = max_key;
  keys[n - 1] = max_key - 1;
  return keys;
}

// Gets whose keys live on the GPU are answered by the copies' route in
// place (every lookup of the batch looked up there), the misses' answers
// scattered into the caller's arrays: with every leaf cached, after writes
// that split and merge leaves and drop copies, and with a cache of a few
// leaves (most gets missing), over several seeds.
TEST(DeviceColumns, GpuGetsStayOnTheGpuAndMatchTheModel) {
  TANDEM_REQUIRE_GPU();
  for (const std::size_t cache : {gpu_cache_auto, std::size_t{1} << 16}) {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      const std::string what = "cache " + std::to_string(cache) + ", seed " + std::to_string(seed);
      config cfg;
      cfg.device = device_kind::gpu;
      cfg.gpu_cache_bytes = cache;
      tandem::index idx(cfg);
      std::mt19937_64 rng(seed);
      std::map<key_type, value_type> model;
      model[0] = 7;
      model[max_key] = 8;
      while (model.size() < 200'000) model[rng()] = rng();
      std::vector<entry> pairs;
      for (const auto& [k, v] : model) pairs.push_back({k, v});
      idx.load(pairs);
      gets_match_model(idx, model, probe_keys(model, 1 << 16, rng), what + ", loaded");
      const stats loaded = idx.stats();
      EXPECT_EQ(loaded.cache_last_lookups, std::uint64_t{1} << 16) << what << ": not looked up in the copies";
      if (cache == gpu_cache_auto) {
        EXPECT_EQ(loaded.cache_last_hits, loaded.cache_last_lookups) << what;
        // Found flags only: nothing of the answers crosses PCIe.
        gets_match_model(idx, model, probe_keys(model, 1 << 16, rng), what + ", found flags only", false);
        EXPECT_LT(idx.stats().total_bytes.pcie - loaded.total_bytes.pcie, std::uint64_t{1} << 10) << what;
      }
      // Writes from the host: inserts (splits), erases (merges), puts.
      batch w;
      for (int i = 0; i < 40'000; ++i) {
        const key_type k = rng();
        w.insert(k, i);
        model.emplace(k, i);
      }
      std::vector<key_type> gone;
      for (auto it = model.begin(); it != model.end() && gone.size() < 30'000; ++it) {
        if (rng() % 3 == 0) gone.push_back(it->first);
      }
      for (const key_type k : gone) {
        w.erase(k);
        model.erase(k);
      }
      for (int i = 0; i < 20'000; ++i) {
        auto it = model.lower_bound(rng());
        if (it == model.end()) continue;
        w.put(it->first, it->second + 1);
        ++it->second;
      }
      idx.submit(std::move(w)).get();
      for (int round = 0; round < 3; ++round) {
        gets_match_model(idx, model, probe_keys(model, 1 << 15, rng), what + ", after writes " + std::to_string(round));
      }
      gets_match_model(idx, model, probe_keys(model, 3, rng), what + ", three keys");
      idx.verify();
    }
  }
}

#if defined(TANDEM_HAS_CUDA)
// The keys reach their device array through work still queued on the
// caller's stream when the call is made: the index reads them only after
// that work, and the answers are there when the future is ready.
TEST(DeviceColumns, GpuStreamWithQueuedWork) {
  TANDEM_REQUIRE_GPU();
  for (const device_kind where : {device_kind::gpu, device_kind::cpu}) {
    config cfg;
    cfg.device = where;
    tandem::index idx(cfg);
    std::vector<entry> pairs;
    for (key_type k = 0; k < 50'000; ++k) pairs.push_back({k * 3, k + 1});
    idx.load(pairs);
    const std::size_t n = 1 << 16;
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    device_vector<key_type> keys(n);
    device_vector<value_type> values(n);
    device_vector<std::uint8_t> found(n);
    device_vector<unsigned char> busy(std::size_t{1} << 30);
    auto* staged = static_cast<key_type*>(device::allocate_pinned(n * sizeof(key_type)));
    for (std::size_t i = 0; i < n; ++i) staged[i] = (i % 60'000) * 3 + (i % 7 == 0 ? 1 : 0);
    ASSERT_EQ(cudaMemsetAsync(keys.p, 0xff, n * sizeof(key_type), stream), cudaSuccess);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(cudaMemsetAsync(busy.p, i, busy.n, stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(keys.p, staged, n * sizeof(key_type), cudaMemcpyHostToDevice, stream), cudaSuccess);
    columns c;
    c.keys = keys.p;
    c.values_out = values.p;
    c.found_out = found.p;
    c.n = n;
    c.device = 0;
    c.stream = stream;
    idx.submit(c).get();
    const std::vector<value_type> v = values.download();
    const std::vector<std::uint8_t> f = found.download();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const key_type k = staged[i];
      const bool want = k % 3 == 0 && k / 3 < 50'000;
      wrong += f[i] != (want ? 1 : 0) || (want && v[i] != k / 3 + 1);
    }
    EXPECT_EQ(wrong, 0u) << (where == device_kind::gpu ? "gpu" : "cpu");
    device::free_pinned(staged);
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  }
}
#endif

}  // namespace
}  // namespace tandem
