// Arrays in GPU memory for the native module: the GPU a pointer's memory
// belongs to, a buffer of GPU memory (answer arrays for callers whose array
// kind tandem cannot make), a DLPack device array's pointer, and the column
// call over device pointers (index::submit of columns with `device` set).
#include "binding.hpp"

#include <tandem/device/device_arrays.hpp>

#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>

namespace tandem_py {
namespace {

using nb::literals::operator""_a;

// Memory of one GPU, freed with the object.
class device_buffer {
 public:
  device_buffer(std::size_t bytes, int device)
      : p_(tandem::device::allocate_device(bytes, device)), bytes_(bytes), device_(device) {}
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { tandem::device::free_device(p_, device_); }
  [[nodiscard]] std::uintptr_t ptr() const { return reinterpret_cast<std::uintptr_t>(p_); }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  [[nodiscard]] int device() const { return device_; }

 private:
  void* p_;
  std::size_t bytes_;
  int device_;
};

template <class T>
T* at(std::uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

}  // namespace

// (pointer, elements, GPU, type code, bits, dimensions, stride of dimension
// 0 in elements) of a DLPack array in GPU memory.
std::tuple<std::uintptr_t, std::size_t, int, int, int, std::size_t, std::int64_t> dlpack_array(
    nb::ndarray<nb::ro, nb::device::cuda> a) {
  const std::size_t n = a.ndim() == 1 ? a.shape(0) : a.size();
  return {reinterpret_cast<std::uintptr_t>(a.data()), n, a.device_id(), static_cast<int>(a.dtype().code),
          static_cast<int>(a.dtype().bits), a.ndim(), a.ndim() == 1 ? a.stride(0) : 1};
}

void device_columns(tandem::index& ix, tandem::op_type type, int device, std::uintptr_t stream, std::size_t n,
                    std::uintptr_t keys, std::uintptr_t values, std::uintptr_t values_out, std::uintptr_t found_out,
                    std::uintptr_t keys_out) {
  tandem::columns c;
  c.type = type;
  c.n = n;
  c.keys = at<const tandem::key_type>(keys);
  c.values = at<const tandem::value_type>(values);
  c.values_out = at<tandem::value_type>(values_out);
  c.found_out = at<std::uint8_t>(found_out);
  c.keys_out = at<tandem::key_type>(keys_out);
  c.device = device;
  c.stream = at<void>(stream);
  nb::gil_scoped_release release;
  ix.submit(c).get();
}

void bind_device(nb::module_& m) {
  nb::class_<device_buffer>(m, "DeviceBuffer", "Memory of one GPU (cudaMalloc), freed with the object.")
      .def(nb::init<std::size_t, int>(), "bytes"_a, "device"_a)
      .def_prop_ro("ptr", &device_buffer::ptr)
      .def_prop_ro("bytes", &device_buffer::bytes)
      .def_prop_ro("device", &device_buffer::device);
  m.def(
      "device_of", [](std::uintptr_t p) { return tandem::device::device_of(reinterpret_cast<const void*>(p)); },
      "ptr"_a, "The GPU whose memory holds the address, or -1.");
  m.def(
      "copy_to_host",
      [](nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> out, std::uintptr_t p, int device) {
        nb::gil_scoped_release release;
        tandem::device::copy_from_device(out.data(), reinterpret_cast<const void*>(p), out.shape(0), device, nullptr);
      },
      "out"_a, "ptr"_a, "device"_a, "Copies len(out) bytes of GPU memory into out.");
  m.def(
      "invert_flags",
      [](std::uintptr_t p, std::size_t n, int device) {
        nb::gil_scoped_release release;
        tandem::device::invert_flags(reinterpret_cast<std::uint8_t*>(p), n, device, nullptr);
      },
      "ptr"_a, "n"_a, "device"_a, "Flips n flags in GPU memory.");
  m.def("dlpack_array", &dlpack_array, "array"_a,
        "(pointer, elements, GPU, DLPack type code, bits, dimensions, stride) of a DLPack array in GPU memory.");
}

}  // namespace tandem_py
