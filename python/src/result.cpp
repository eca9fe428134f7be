// tandem::batch_result for Python (Result): numpy views of its answer
// columns, op i's answers as an OpResult, and the entries of its scans.
#include "binding.hpp"

#include <nanobind/stl/string.h>

#include <string>

namespace tandem_py {
namespace {

using nb::literals::operator""_a;

// collections.namedtuple("OpResult", ...), made when the module loads.
nb::handle op_result_type;  // the module attribute OpResult keeps it alive

std::size_t op_index(const result& r, std::int64_t i) {
  const auto n = static_cast<std::int64_t>(r.r.size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) throw nb::index_error("op index out of range");
  return static_cast<std::size_t>(i);
}

nb::object op_answers(const result& r, std::int64_t i) {
  const std::size_t k = op_index(r, i);
  return op_result_type(r.r.found(k), r.r.value(k), r.r.key(k), static_cast<int>(r.r.status(k)));
}

std::string describe(const result& r) {
  return "tandem.Result(" + std::to_string(r.r.size()) + " ops, " + std::to_string(r.r.invalid_count()) +
         " invalid, sequence " + std::to_string(r.r.sequence()) + ")";
}

}  // namespace

void bind_result(nb::module_& m) {
  nb::object type = nb::module_::import_("collections").attr("namedtuple")("OpResult", "found value key status");
  op_result_type = type;
  op_result_type.attr("__module__") = "tandem";
  op_result_type.attr("__doc__") =
      "The answers of one op of a batch (Result[i]): found, value, key and status, as the columns of\n"
      "Result hold them.";
  m.attr("OpResult") = type;

  nb::class_<result>(m, "Result",
                     "The answers of one batch, one per op in batch order. The column properties are numpy\n"
                     "views of the index's answer columns (read-only; they keep this result alive); r[i] is\n"
                     "op i's answers as an OpResult (found, value, key, status).\n\n"
                     "Per op: get: found = key present, value = its value; put/insert/erase: found = key was\n"
                     "present, value = the value replaced/kept/erased; lower_bound: found = an entry >= key,\n"
                     "key/value = that entry; scan: value = entries returned (see scan(i)); count: value = the\n"
                     "count. status: 0 ok, 1 invalid, 2 output_limit (see error(i)).")
      .def("__len__", [](const result& r) { return r.r.size(); })
      .def("__getitem__", &op_answers, "i"_a, "Op i's answers: OpResult(found, value, key, status).")
      .def("__repr__", &describe)
      .def_prop_ro("sequence", [](const result& r) { return r.r.sequence(); },
                   "The batch's place in queue order (batch_result::sequence).")
      .def_prop_ro(
          "values", [](const result& r) { return numpy_array<const u64>(r.r.values(), {r.r.size()}); },
          nb::rv_policy::reference_internal, "uint64 answers' values.")
      .def_prop_ro(
          "found",
          [](const result& r) {
            return numpy_array<const bool>(reinterpret_cast<const bool*>(r.r.found_flags()), {r.r.size()});
          },
          nb::rv_policy::reference_internal, "bool answers' found flags.")
      .def_prop_ro(
          "keys", [](const result& r) { return numpy_array<const u64>(r.r.keys(), {r.r.size()}); },
          nb::rv_policy::reference_internal, "uint64: the op's key (lower_bound: the entry's key).")
      .def_prop_ro(
          "status",
          [](const result& r) {
            return numpy_array<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(r.r.statuses()),
                                                   {r.r.size()});
          },
          nb::rv_policy::reference_internal, "uint8 per-op status: 0 ok, 1 invalid, 2 output_limit.")
      .def_prop_ro("invalid_count", [](const result& r) { return r.r.invalid_count(); },
                   "Ops whose status is invalid (1); scans refused for the output cap (2) are not counted.")
      .def(
          "error", [](const result& r, std::int64_t i) { return r.r.error(op_index(r, i)); }, "i"_a,
          "The message of op i when its status is not ok, else an empty string.")
      .def(
          "scan",
          [](nb::handle self, std::int64_t i) {
            const result& r = nb::cast<const result&>(self);
            const tandem::entry_span s = r.r.scan(op_index(r, i));
            return entry_views(s.data(), s.size(), self);
          },
          "i"_a, "(keys, values) of scan op i: uint64 views (empty for another op or a failed scan).")
      .def(
          "scan_entries",
          [](nb::handle self) {
            const tandem::entry_span s = nb::cast<const result&>(self).r.scan_entries();
            return entry_views(s.data(), s.size(), self);
          },
          "(keys, values) of every ok scan's entries, scan after scan in op order.");
}

}  // namespace tandem_py
