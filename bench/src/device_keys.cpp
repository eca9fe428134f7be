#include "device_keys.hpp"

#include <tandem/device/device_arrays.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <future>
#include <stdexcept>

namespace tandem_bench {
namespace {

/// One batch's arrays in GPU memory.
struct device_batch {
  int device = 0;
  std::size_t n = 0;
  tandem::key_type* keys = nullptr;
  tandem::value_type* values = nullptr;
  std::uint8_t* found = nullptr;
  device_batch(int d, std::size_t count) : device(d), n(count) {
    keys = static_cast<tandem::key_type*>(tandem::device::allocate_device(n * sizeof(tandem::key_type), d));
    values = static_cast<tandem::value_type*>(tandem::device::allocate_device(n * sizeof(tandem::value_type), d));
    found = static_cast<std::uint8_t*>(tandem::device::allocate_device(n, d));
  }
  device_batch(const device_batch&) = delete;
  device_batch& operator=(const device_batch&) = delete;
  ~device_batch() {
    tandem::device::free_device(keys, device);
    tandem::device::free_device(values, device);
    tandem::device::free_device(found, device);
  }
  [[nodiscard]] tandem::columns columns() const {
    tandem::columns c;
    c.type = tandem::op_type::get;
    c.keys = keys;
    c.n = n;
    c.values_out = values;
    c.found_out = found;
    c.device = device;
    return c;
  }
};

}  // namespace

device_keys_figures run_device_keys(tandem::index& idx, const std::vector<std::vector<tandem::op>>& batches,
                                    int device, std::size_t inflight) {
  using clock_type = std::chrono::steady_clock;
  inflight = std::max<std::size_t>(inflight, 1);
  // The pipeline's arrays, on the GPU before timing.
  std::vector<std::vector<tandem::key_type>> keys(batches.size());
  std::vector<std::unique_ptr<device_batch>> on_gpu;
  on_gpu.reserve(batches.size());
  for (std::size_t b = 0; b < batches.size(); ++b) {
    for (const tandem::op& o : batches[b]) {
      if (o.type != tandem::op_type::get) throw std::invalid_argument("--keys-on gpu runs workloads of gets (C)");
      keys[b].push_back(o.key);
    }
    on_gpu.push_back(std::make_unique<device_batch>(device, keys[b].size()));
    tandem::device::copy_to_device(on_gpu[b]->keys, keys[b].data(), keys[b].size() * sizeof(tandem::key_type), device,
                                   nullptr);
  }
  device_keys_figures fig;
  const tandem::stats before = idx.stats();
  std::deque<std::future<void>> window;
  const auto t0 = clock_type::now();
  for (std::size_t b = 0; b < batches.size(); ++b) {
    if (window.size() == inflight) {
      window.front().get();
      window.pop_front();
    }
    window.push_back(idx.submit(on_gpu[b]->columns()));
  }
  while (!window.empty()) {
    window.front().get();
    window.pop_front();
  }
  fig.run.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  const tandem::stats after = idx.stats();
  fig.pcie_bytes = after.total_bytes.pcie - before.total_bytes.pcie;
  fig.cache_lookups = after.cache_lookups - before.cache_lookups;
  fig.cache_hits = after.cache_hits - before.cache_hits;
  fig.route_seconds = after.total.route - before.total.route;
  fig.last_kernel = after.gpu_kernel;
  fig.last_route = after.gpu_route;
  // The answers down, and the same gets as host columns.
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const std::size_t n = keys[b].size();
    std::vector<tandem::value_type> values(n), host_values(n);
    std::vector<std::uint8_t> found(n), host_found(n);
    tandem::device::copy_from_device(values.data(), on_gpu[b]->values, n * sizeof(tandem::value_type), device,
                                     nullptr);
    tandem::device::copy_from_device(found.data(), on_gpu[b]->found, n, device, nullptr);
    tandem::columns c;
    c.type = tandem::op_type::get;
    c.keys = keys[b].data();
    c.n = n;
    c.values_out = host_values.data();
    c.found_out = host_found.data();
    idx.submit(c).get();
    for (std::size_t i = 0; i < n; ++i) {
      fig.run.hits += found[i];
      fig.mismatches += found[i] != host_found[i] || (found[i] != 0 && values[i] != host_values[i]);
    }
    fig.run.ops += n;
  }
  return fig;
}

}  // namespace tandem_bench
