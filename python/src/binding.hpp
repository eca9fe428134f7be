// What the units of the native module `tandem._tandem` share: the column
// types it takes and gives, the answer memory, the result wrapper, and the
// functions that bind each class (module.cpp calls them in order).
#pragma once

#include <tandem/tandem.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

namespace tandem_py {

namespace nb = nanobind;
using u64 = std::uint64_t;
using in_column = nb::ndarray<const u64, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using out_column = nb::ndarray<u64, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using out_flags = nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <class T>
using numpy_array = nb::ndarray<nb::numpy, T, nb::ndim<1>>;

// A batch's answers. Its columns are handed out as numpy views that keep
// this object alive (rv_policy::reference_internal).
struct result {
  tandem::batch_result r;
};

// Raises std::invalid_argument (ValueError) unless n == expected.
void check_length(const char* what, std::size_t n, std::size_t expected);

// The Python exception (an instance) that stands for a failed batch.
nb::object exception_for(std::exception_ptr e);

// Uninitialised 1-D numpy arrays of n elements over reused answer memory.
nb::object answer_u64(std::size_t n);
nb::object answer_bool(std::size_t n);

// A capsule that owns a batch_result (the memory behind views of it).
nb::capsule result_owner(tandem::batch_result&& r);

// Entries as two strided views (keys, values) over memory `owner` keeps.
nb::tuple entry_views(const tandem::entry* first, std::size_t n, nb::handle owner);

// tandem::stats as a dict of its fields (nested dicts for per-type counts
// and stage times).
nb::dict stats_dict(const tandem::stats& s);

void bind_config(nb::module_& m);
void bind_batch(nb::module_& m);
void bind_result(nb::module_& m);
void bind_index(nb::module_& m);
void bind_device(nb::module_& m);

// index::submit of columns in GPU memory `device`, pointers as integers
// (0: none), ordered after `stream` (a cudaStream_t as an integer).
void device_columns(tandem::index& ix, tandem::op_type type, int device, std::uintptr_t stream, std::size_t n,
                    std::uintptr_t keys, std::uintptr_t values, std::uintptr_t values_out, std::uintptr_t found_out,
                    std::uintptr_t keys_out);

}  // namespace tandem_py
