// tandem::index for Python (NativeIndex; the package's Index checks
// arguments): column calls over caller arrays, scans and counts whose
// answers are views of the result, batches run or submitted (their futures
// resolved on a thread of this module), and the one-key calls.
#include "binding.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

namespace tandem_py {
namespace {

using nb::literals::operator""_a;

// Resolves the concurrent.futures.Future of each batch submitted with
// Index.submit. The index's callbacks run on its dispatcher thread, which
// must not wait for the GIL: they queue the answer here, and this thread
// takes the GIL and sets the futures, in the order the batches finished.
class completer {
 public:
  struct item {
    PyObject* future;  // a reference owned by the item (released under the GIL)
    tandem::batch_result answer;
    std::exception_ptr error;
  };

  completer() : thread_([this] { run(); }) {}
  completer(const completer&) = delete;
  completer& operator=(const completer&) = delete;
  // The caller must not hold the GIL: the thread needs it to finish.
  ~completer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  void push(item it) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      items_.push_back(std::move(it));
    }
    wake_.notify_one();
  }

 private:
  void run() {
    for (;;) {
      std::deque<item> taken;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !items_.empty(); });
        if (items_.empty()) return;  // stop_, and nothing left
        taken.swap(items_);
      }
      nb::gil_scoped_acquire gil;
      for (item& it : taken) {
        nb::object future = nb::steal(it.future);
        try {
          if (it.error) {
            future.attr("set_exception")(exception_for(it.error));
          } else {
            future.attr("set_result")(nb::cast(result{std::move(it.answer)}));
          }
        } catch (nb::python_error& e) {
          e.discard_as_unraisable("tandem: resolving a batch's future");
        }
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<item> items_;
  bool stop_ = false;
  std::thread thread_;
};

class py_index {
 public:
  explicit py_index(const tandem::config& cfg) {
    nb::gil_scoped_release release;
    index_ = std::make_unique<tandem::index>(cfg);
  }
  py_index(const py_index&) = delete;
  py_index& operator=(const py_index&) = delete;
  ~py_index() { close(); }

  // Waits for every batch, then frees the index. Idempotent.
  void close() {
    if (!index_ && !completer_) return;
    nb::gil_scoped_release release;  // the completer needs the GIL to finish
    index_.reset();
    completer_.reset();
  }

  tandem::index& get() {
    if (!index_) throw tandem::error("tandem.Index: the index is closed");
    return *index_;
  }

  void submit(const tandem::batch& b, nb::object future) {
    tandem::index& ix = get();
    {
      std::lock_guard<std::mutex> lock(completer_mutex_);
      if (!completer_) completer_ = std::make_unique<completer>();
    }
    completer* c = completer_.get();
    PyObject* f = future.release().ptr();  // the item owns it from here
    try {
      nb::gil_scoped_release release;
      ix.submit(b, [c, f](tandem::batch_result r, std::exception_ptr e) {
        c->push({f, std::move(r), e});
      });
    } catch (...) {
      Py_DECREF(f);  // not queued: the callback never runs
      throw;
    }
  }

 private:
  std::unique_ptr<tandem::index> index_;
  std::mutex completer_mutex_;
  std::unique_ptr<completer> completer_;
};

// Runs n ops of one type over the arrays (index::submit(columns)).
void run_columns(py_index& self, tandem::op_type type, in_column keys, std::optional<in_column> values,
                 std::optional<out_column> values_out, std::optional<out_flags> found_out,
                 std::optional<out_column> keys_out) {
  tandem::columns c;
  c.type = type;
  c.n = keys.shape(0);
  c.keys = keys.data();
  if (values) {
    check_length("values", values->shape(0), c.n);
    c.values = values->data();
  }
  if (values_out) {
    check_length("values_out", values_out->shape(0), c.n);
    c.values_out = values_out->data();
  }
  if (found_out) {
    check_length("found_out", found_out->shape(0), c.n);
    c.found_out = found_out->data();
  }
  if (keys_out) {
    check_length("keys_out", keys_out->shape(0), c.n);
    c.keys_out = keys_out->data();
  }
  tandem::index& ix = self.get();
  nb::gil_scoped_release release;
  ix.submit(c).get();
}

// Raises for the first op whose status is not ok (the column forms of scan
// and count have no per-op status to hand back).
void raise_first_failure(const tandem::batch_result& r) {
  for (std::size_t i = 0; i < r.size(); ++i) {
    if (r.ok(i)) continue;
    if (r.status(i) == tandem::op_status::output_limit) throw tandem::error(r.error(i));
    throw std::invalid_argument(r.error(i));
  }
}

nb::tuple run_scans(py_index& self, in_column los, in_column his, u64 limit, bool ordered) {
  check_length("his", his.shape(0), los.shape(0));
  const std::size_t n = los.shape(0);
  tandem::batch_result r;
  {
    nb::gil_scoped_release release;
    tandem::batch b;
    const tandem::scan_order order = ordered ? tandem::scan_order::ordered : tandem::scan_order::unordered;
    for (std::size_t i = 0; i < n; ++i) b.scan(los.data()[i], his.data()[i], limit, order);
    r = self.get().execute(std::move(b));
  }
  raise_first_failure(r);
  auto* offsets = new std::int64_t[n + 1];
  nb::capsule offsets_owner(offsets, [](void* p) noexcept { delete[] static_cast<std::int64_t*>(p); });
  const tandem::entry_span all = r.scan_entries();
  for (std::size_t i = 0; i < n; ++i) {
    const tandem::entry_span s = r.scan(i);
    offsets[i] = s.empty() ? (i ? offsets[i - 1] : 0) : static_cast<std::int64_t>(s.data() - all.data());
  }
  // Scans come back one after another in op order; an empty one starts
  // where the one before it ended.
  offsets[n] = static_cast<std::int64_t>(all.size());
  for (std::size_t i = n; i-- > 0;) {
    if (r.scan(i).empty()) offsets[i] = offsets[i + 1];
  }
  nb::capsule owner = result_owner(std::move(r));
  const auto* kept = static_cast<const tandem::batch_result*>(owner.data());
  nb::tuple kv = entry_views(kept->scan_entries().data(), kept->scan_entries().size(), owner);
  return nb::make_tuple(numpy_array<std::int64_t>(offsets, {n + 1}, offsets_owner), kv[0], kv[1]);
}

nb::object run_counts(py_index& self, in_column los, in_column his) {
  check_length("his", his.shape(0), los.shape(0));
  const std::size_t n = los.shape(0);
  tandem::batch_result r;
  {
    nb::gil_scoped_release release;
    tandem::batch b;
    b.reserve(n);
    for (std::size_t i = 0; i < n; ++i) b.count(los.data()[i], his.data()[i]);
    r = self.get().execute(std::move(b));
  }
  raise_first_failure(r);
  nb::capsule owner = result_owner(std::move(r));
  const auto* kept = static_cast<const tandem::batch_result*>(owner.data());
  static const u64 none = 0;
  return nb::cast(numpy_array<const u64>(n ? kept->values() : &none, {n}, owner));
}

}  // namespace

void bind_index(nb::module_& m) {
  nb::class_<py_index>(m, "NativeIndex", "tandem::index (use tandem.Index).")
      .def(nb::init<const tandem::config&>(), "config"_a)
      .def("close", &py_index::close)
      .def("size", [](py_index& s) { return s.get().size(); })
      .def("stats", [](py_index& s) { return stats_dict(s.get().stats()); })
      .def("set_gpu_share", [](py_index& s, double share) { s.get().set_gpu_share(share); }, "share"_a)
      .def("set_gpu_share_auto", [](py_index& s) { s.get().set_gpu_share(tandem::auto_share); })
      .def("verify", [](py_index& s) {
        tandem::index& ix = s.get();
        nb::gil_scoped_release release;
        ix.verify();
      })
      .def("compact", [](py_index& s) {
        tandem::index& ix = s.get();
        nb::gil_scoped_release release;
        ix.compact();
      })
      .def("checkpoint", [](py_index& s) {
        tandem::index& ix = s.get();
        nb::gil_scoped_release release;
        ix.checkpoint();
      })
      .def(
          "save",
          [](py_index& s, const std::string& path) {
            tandem::index& ix = s.get();
            nb::gil_scoped_release release;
            ix.save(path);
          },
          "path"_a)
      .def(
          "open",
          [](py_index& s, const std::string& path) {
            tandem::index& ix = s.get();
            nb::gil_scoped_release release;
            ix.open(path);
          },
          "path"_a)
      .def(
          "load",
          [](py_index& s, in_column keys, in_column values) {
            check_length("values", values.shape(0), keys.shape(0));
            tandem::index& ix = s.get();
            nb::gil_scoped_release release;
            ix.load(keys.data(), values.data(), keys.shape(0));
          },
          "keys"_a, "values"_a)
      .def("columns", &run_columns, "type"_a, "keys"_a, "values"_a.none(), "values_out"_a.none(),
           "found_out"_a.none(), "keys_out"_a.none())
      .def(
          "device_columns",
          [](py_index& s, tandem::op_type type, int device, std::uintptr_t stream, std::size_t n, std::uintptr_t keys,
             std::uintptr_t values, std::uintptr_t values_out, std::uintptr_t found_out, std::uintptr_t keys_out) {
            device_columns(s.get(), type, device, stream, n, keys, values, values_out, found_out, keys_out);
          },
          "type"_a, "device"_a, "stream"_a, "n"_a, "keys"_a, "values"_a, "values_out"_a, "found_out"_a, "keys_out"_a)
      .def("scans", &run_scans, "los"_a, "his"_a, "limit"_a, "ordered"_a)
      .def("counts", &run_counts, "los"_a, "his"_a)
      .def(
          "execute",
          [](py_index& s, const tandem::batch& b) {
            tandem::index& ix = s.get();
            nb::gil_scoped_release release;
            return result{ix.execute(b)};
          },
          "batch"_a)
      .def("submit", &py_index::submit, "batch"_a, "future"_a)
      .def(
          "get_one",
          [](py_index& s, u64 key) {
            tandem::index& ix = s.get();
            nb::gil_scoped_release release;
            return ix.get(key);
          },
          "key"_a)
      .def(
          "lower_bound_one",
          [](py_index& s, u64 key) -> std::optional<std::pair<u64, u64>> {
            tandem::index& ix = s.get();
            std::optional<tandem::entry> e;
            {
              nb::gil_scoped_release release;
              e = ix.lower_bound(key);
            }
            if (!e) return std::nullopt;
            return std::make_pair(e->key, e->value);
          },
          "key"_a)
      .def(
          "put_one",
          [](py_index& s, u64 key, u64 value) {
            tandem::index& ix = s.get();
            nb::gil_scoped_release release;
            return ix.put(key, value);
          },
          "key"_a, "value"_a)
      .def(
          "insert_one",
          [](py_index& s, u64 key, u64 value) {
            tandem::index& ix = s.get();
            nb::gil_scoped_release release;
            return ix.insert(key, value);
          },
          "key"_a, "value"_a)
      .def(
          "erase_one",
          [](py_index& s, u64 key) {
            tandem::index& ix = s.get();
            nb::gil_scoped_release release;
            return ix.erase(key);
          },
          "key"_a);
}

}  // namespace tandem_py
