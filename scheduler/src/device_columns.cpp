// index::submit of columns in GPU memory (device_columns.hpp). Gets whose
// leaves have current copies on the GPU are answered there without their
// keys or answers crossing PCIe; the rest of a batch (the misses: keys down
// in the route, answers up here) and every other job run on host copies.
#include "device_columns.hpp"

#include <tandem/device/device_arrays.hpp>
#include <tandem/device/pinned.hpp>

#include <cstdint>
#include <exception>
#include <memory>
#include <new>

namespace tandem {

device_io::~device_io() {
  for (void* p : {keys, values, values_out, found_out, keys_out}) device::free_pinned(p);
  device::destroy_stream(stream, c.device);
}

namespace {

bool with_values(const columns& c) { return c.type == op_type::put || c.type == op_type::insert; }

void* host_room(const void* given, std::size_t bytes) {
  return given != nullptr ? device::allocate_pinned(bytes) : nullptr;
}

/// The answers up, on the caller's stream, once a job run on host copies is
/// done.
std::exception_ptr finish_on_host(const device_io& io, std::exception_ptr failure) {
  if (failure || io.on_gpu) return failure;
  try {
    const columns& c = io.c;
    const std::size_t n = c.n;
    if (io.values_out != nullptr) {
      device::copy_to_device(c.values_out, io.values_out, n * sizeof(value_type), c.device, io.stream);
    }
    if (io.found_out != nullptr) device::copy_to_device(c.found_out, io.found_out, n, c.device, io.stream);
    if (io.keys_out != nullptr) {
      device::copy_to_device(c.keys_out, io.keys_out, n * sizeof(key_type), c.device, io.stream);
    }
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace

void to_host(job& j) {
  device_io* io = j.device.get();
  if (!keys_on_gpu(j)) return;
  const columns& c = io->c;
  const std::size_t n = c.n;
  io->keys = device::allocate_pinned(n * sizeof(key_type));
  io->values = with_values(c) ? device::allocate_pinned(n * sizeof(value_type)) : nullptr;
  io->values_out = host_room(c.values_out, n * sizeof(value_type));
  io->found_out = host_room(c.found_out, n);
  io->keys_out = c.type == op_type::lower_bound ? host_room(c.keys_out, n * sizeof(key_type)) : nullptr;
  device::copy_from_device(io->keys, c.keys, n * sizeof(key_type), c.device, io->stream);
  if (io->values != nullptr) device::copy_from_device(io->values, c.values, n * sizeof(value_type), c.device, io->stream);
  io->pcie_bytes = n * (sizeof(key_type) + (io->values != nullptr ? sizeof(value_type) : 0) +
                        (io->values_out != nullptr ? sizeof(value_type) : 0) + (io->found_out != nullptr ? 1 : 0) +
                        (io->keys_out != nullptr ? sizeof(key_type) : 0));
  const auto* keys = static_cast<const key_type*>(io->keys);
  // Keys serve as the args of ops that take none (as for host columns).
  j.ops = batch::over(c.type, keys, io->values != nullptr ? static_cast<const value_type*>(io->values) : keys, n);
  j.values_out = static_cast<value_type*>(io->values_out);
  j.found_out = static_cast<std::uint8_t*>(io->found_out);
  j.keys_out = static_cast<key_type*>(io->keys_out);
  io->on_gpu = false;
}

std::size_t scatter_misses(const job& j, const std::uint32_t* positions, const value_type* values,
                           const std::uint8_t* found, std::size_t m) {
  const device_io& io = *j.device;
  device::scatter_into_device(io.c.values_out, io.c.found_out, positions, values, found, m, io.c.device, io.stream);
  const std::size_t out = (io.c.values_out != nullptr ? sizeof(value_type) : 0) + (io.c.found_out != nullptr ? 1 : 0);
  return out == 0 ? 0 : m * (sizeof(std::uint32_t) + out);
}

std::future<void> submit_from_device(const columns& c, bool keep_on_gpu,
                                     const std::function<void(std::unique_ptr<job>)>& enqueue) {
  const std::size_t n = c.n;
  device::check_device_array(c.keys, n * sizeof(key_type), alignof(key_type), c.device, "columns::keys");
  if (with_values(c)) {
    device::check_device_array(c.values, n * sizeof(value_type), alignof(value_type), c.device, "columns::values");
  }
  if (c.values_out != nullptr) {
    device::check_device_array(c.values_out, n * sizeof(value_type), alignof(value_type), c.device,
                               "columns::values_out");
  }
  if (c.found_out != nullptr) device::check_device_array(c.found_out, n, 1, c.device, "columns::found_out");
  if (c.type == op_type::lower_bound && c.keys_out != nullptr) {
    device::check_device_array(c.keys_out, n * sizeof(key_type), alignof(key_type), c.device, "columns::keys_out");
  }
  if (n == 0) {
    std::promise<void> none;
    none.set_value();
    return none.get_future();
  }
  // The inputs are written once the caller's stream is done; after that,
  // tandem's copies and scatters go on a stream of its own, so that work
  // the caller queues later never holds them up.
  device::synchronize(c.device, c.stream);
  auto io = std::make_shared<device_io>();
  io->c = c;
  io->on_gpu = true;
  io->stream = device::create_stream(c.device);
  auto j = std::make_unique<job>();
  j->ops = batch::over(c.type, c.keys, c.keys, n);
  j->in_place = true;
  j->values_out = c.values_out;
  j->found_out = c.found_out;
  j->device = io;
  if (!keep_on_gpu) to_host(*j);
  j->then = [io](std::exception_ptr failure) { return finish_on_host(*io, std::move(failure)); };
  std::future<void> f = j->finished.get_future();
  enqueue(std::move(j));
  return f;
}

}  // namespace tandem
