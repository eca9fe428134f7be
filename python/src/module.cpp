// The native module `tandem._tandem`: tandem::index, tandem::batch and
// tandem::batch_result for Python (nanobind). The package (python/tandem)
// checks and converts arguments; this module works on contiguous 1-D uint64
// arrays, releases the GIL whenever the index works, and hands answers out as
// numpy arrays over memory the index wrote (no copy on the way out).
//
//   module.cpp   the module: constants, answer memory, exceptions
//   config.cpp   Config and the stats dict
//   batch.cpp    OpType, NativeBatch (ops out, append_ops in)
//   result.cpp   Result and OpResult
//   index.cpp    NativeIndex: columns, scans, counts, batches, one-key calls
//   columns.cpp  answer memory, length checks, entry views
#include "binding.hpp"

#include <new>
#include <stdexcept>

namespace tandem_py {
namespace {

PyObject* error_type = nullptr;
PyObject* invariant_type = nullptr;

}  // namespace

nb::object exception_for(std::exception_ptr e) {
  const auto make = [](PyObject* type, const char* what) { return nb::handle(type)(nb::str(what)); };
  try {
    std::rethrow_exception(e);
  } catch (const tandem::invariant_error& x) {
    return make(invariant_type, x.what());
  } catch (const tandem::error& x) {
    return make(error_type, x.what());
  } catch (const std::bad_alloc& x) {
    return make(PyExc_MemoryError, x.what());
  } catch (const std::invalid_argument& x) {
    return make(PyExc_ValueError, x.what());
  } catch (const std::length_error& x) {
    return make(PyExc_ValueError, x.what());
  } catch (const std::exception& x) {
    return make(PyExc_RuntimeError, x.what());
  } catch (...) {
    return make(PyExc_RuntimeError, "unknown C++ exception");
  }
}

}  // namespace tandem_py

NB_MODULE(_tandem, m) {
  namespace nb = nanobind;
  using namespace nb::literals;
  using namespace tandem_py;
  m.doc() = "Native core of the tandem package (use the classes of `tandem`, which check their arguments).";
  m.attr("__version__") = tandem::version();
  m.attr("built_with_cuda") = tandem::built_with_cuda();
  m.attr("max_scan_limit") = tandem::max_scan_limit;
  m.def("answer_u64", &answer_u64, "n"_a, nb::sig("def answer_u64(n: int) -> numpy.typing.NDArray[numpy.uint64]"),
        "An uninitialised uint64 array of n elements over reused (page-locked where a GPU driver is found) memory.");
  m.def("answer_bool", &answer_bool, "n"_a, nb::sig("def answer_bool(n: int) -> numpy.typing.NDArray[numpy.bool_]"),
        "As answer_u64, of bools.");
  // Results and indexes held by module globals are still alive when the
  // interpreter tears the module down; that is no leak worth a warning.
  nb::set_leak_warnings(false);

  static nb::exception<tandem::error> error(m, "Error", PyExc_RuntimeError);
  static nb::exception<tandem::invariant_error> invariant(m, "InvariantError", error.ptr());
  error_type = error.ptr();
  invariant_type = invariant.ptr();

  bind_config(m);
  bind_batch(m);
  bind_result(m);
  bind_index(m);
  bind_device(m);
}
