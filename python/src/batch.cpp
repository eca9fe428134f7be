// tandem::op_type as the enum OpType, and tandem::batch (NativeBatch; the
// package's Batch checks arguments): ops one at a time or by column, the
// batch's op columns out (ops) and a batch rebuilt from them (append_ops).
#include "binding.hpp"

#include <stdexcept>
#include <string>
#include <type_traits>

namespace tandem_py {
namespace {

using op_type = tandem::op_type;
using flag_column = nb::ndarray<const bool, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using type_column = nb::ndarray<const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// A binding that appends one op per (key, value) of two columns.
template <class Append>
auto pair_columns(Append append) {
  return [append](tandem::batch& b, in_column k, in_column v) {
    check_length("values", v.shape(0), k.shape(0));
    append(b, k.data(), v.data(), k.shape(0));
  };
}

// The batch's ops as copies of its columns (the inverse of append_ops).
nb::tuple op_columns(const tandem::batch& b) {
  const std::size_t n = b.size();
  auto* types = new std::uint8_t[n ? n : 1];
  auto* keys = new u64[n ? n : 1];
  auto* args = new u64[n ? n : 1];
  auto* limits = new u64[n ? n : 1];
  auto* ordered = new bool[n ? n : 1];
  for (std::size_t i = 0; i < n; ++i) {
    types[i] = static_cast<std::uint8_t>(b.types()[i]);
    keys[i] = b.keys()[i];
    args[i] = b.args()[i];
    limits[i] = 0;
    ordered[i] = true;
  }
  for (const tandem::scan_spec& s : b.scans()) {
    limits[s.index] = s.limit;
    ordered[s.index] = s.order == tandem::scan_order::ordered;
  }
  const auto own = [](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    return nb::capsule(p, [](void* q) noexcept { delete[] static_cast<T*>(q); });
  };
  return nb::make_tuple(numpy_array<std::uint8_t>(types, {n}, own(types)), numpy_array<u64>(keys, {n}, own(keys)),
                        numpy_array<u64>(args, {n}, own(args)), numpy_array<u64>(limits, {n}, own(limits)),
                        numpy_array<bool>(ordered, {n}, own(ordered)));
}

// Appends the ops given as columns (as `ops` returns them); a run of one
// point op type goes in as one column append.
void append_ops(tandem::batch& b, type_column types, in_column keys, in_column args, in_column limits,
                          flag_column ordered) {
  const std::size_t n = types.shape(0);
  check_length("keys", keys.shape(0), n);
  check_length("args", args.shape(0), n);
  check_length("limits", limits.shape(0), n);
  check_length("ordered", ordered.shape(0), n);
  const std::uint8_t* t = types.data();
  for (std::size_t i = 0; i < n; ++i) {
    if (t[i] >= tandem::op_type_count) {
      throw std::invalid_argument("types: op " + std::to_string(i) + " has unknown op type " + std::to_string(t[i]));
    }
  }
  b.reserve(b.size() + n);
  const u64* k = keys.data();
  const u64* a = args.data();
  for (std::size_t i = 0; i < n;) {
    const auto type = static_cast<op_type>(t[i]);
    std::size_t end = i + 1;
    while (end < n && t[end] == t[i]) ++end;
    switch (type) {
      case op_type::get: b.get(k + i, end - i); break;
      case op_type::put: b.put(k + i, a + i, end - i); break;
      case op_type::insert: b.insert(k + i, a + i, end - i); break;
      case op_type::erase: b.erase(k + i, end - i); break;
      case op_type::lower_bound: b.lower_bound(k + i, end - i); break;
      case op_type::scan:
        for (std::size_t j = i; j < end; ++j) {
          b.scan(k[j], a[j], limits.data()[j],
                 ordered.data()[j] ? tandem::scan_order::ordered : tandem::scan_order::unordered);
        }
        break;
      case op_type::count:
        for (std::size_t j = i; j < end; ++j) b.count(k[j], a[j]);
        break;
    }
    i = end;
  }
}

}  // namespace

void bind_batch(nb::module_& m) {
  nb::enum_<op_type>(m, "OpType", nb::is_arithmetic(),
                     "tandem::op_type: the code of each op in a batch's type column (Batch.ops()).")
      .value("get", op_type::get)
      .value("put", op_type::put)
      .value("insert", op_type::insert)
      .value("erase", op_type::erase)
      .value("lower_bound", op_type::lower_bound)
      .value("scan", op_type::scan)
      .value("count", op_type::count);

  using nb::literals::operator""_a;
  nb::class_<tandem::batch>(m, "NativeBatch", "tandem::batch (use tandem.Batch).")
      .def(nb::init<>())
      .def("__len__", &tandem::batch::size)
      .def("clear", &tandem::batch::clear)
      .def("reserve", &tandem::batch::reserve, "n"_a)
      .def("_get", [](tandem::batch& b, u64 k) { b.get(k); }, "key"_a)
      .def("_put", [](tandem::batch& b, u64 k, u64 v) { b.put(k, v); }, "key"_a, "value"_a)
      .def("_insert", [](tandem::batch& b, u64 k, u64 v) { b.insert(k, v); }, "key"_a, "value"_a)
      .def("_erase", [](tandem::batch& b, u64 k) { b.erase(k); }, "key"_a)
      .def("_lower_bound", [](tandem::batch& b, u64 k) { b.lower_bound(k); }, "key"_a)
      .def(
          "_scan",
          [](tandem::batch& b, u64 lo, u64 hi, u64 limit, bool ordered) {
            b.scan(lo, hi, limit, ordered ? tandem::scan_order::ordered : tandem::scan_order::unordered);
          },
          "lo"_a, "hi"_a, "limit"_a, "ordered"_a)
      .def("_count", [](tandem::batch& b, u64 lo, u64 hi) { b.count(lo, hi); }, "lo"_a, "hi"_a)
      .def("_get_many", [](tandem::batch& b, in_column k) { b.get(k.data(), k.shape(0)); }, "keys"_a)
      .def("_put_many", pair_columns([](tandem::batch& b, const u64* k, const u64* v, std::size_t n) {
             b.put(k, v, n);
           }),
           "keys"_a, "values"_a)
      .def("_insert_many", pair_columns([](tandem::batch& b, const u64* k, const u64* v, std::size_t n) {
             b.insert(k, v, n);
           }),
           "keys"_a, "values"_a)
      .def("_erase_many", [](tandem::batch& b, in_column k) { b.erase(k.data(), k.shape(0)); }, "keys"_a)
      .def("_lower_bound_many", [](tandem::batch& b, in_column k) { b.lower_bound(k.data(), k.shape(0)); },
           "keys"_a)
      .def("ops", &op_columns,
           "The batch's ops as copies of its columns: (types uint8 [an OpType each], keys, args [the\n"
           "value of put/insert, hi of scan/count, else 0], limits [of scans, else 0], ordered [of scans,\n"
           "else True]). Batch.from_ops(*b.ops()) rebuilds the batch.")
      .def("append_ops", &append_ops, "types"_a, "keys"_a, "args"_a, "limits"_a, "ordered"_a,
           "Appends the ops given as columns, as ops() returns them (the values are not checked: a\n"
           "scan or count with lo > hi is an invalid op when the batch runs).");
}

}  // namespace tandem_py
