// The native module `tandem._tandem`: tandem::index, tandem::batch and
// tandem::batch_result for Python (nanobind). The package (python/tandem)
// checks and converts arguments; this module works on contiguous 1-D uint64
// arrays, releases the GIL whenever the index works, and hands answers out as
// numpy arrays over memory the index wrote (no copy on the way out).
#include <tandem/device/pinned.hpp>
#include <tandem/tandem.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using u64 = std::uint64_t;
using in_column = nb::ndarray<const u64, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using out_column = nb::ndarray<u64, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using out_flags = nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <class T>
using numpy_array = nb::ndarray<nb::numpy, T, nb::ndim<1>>;

PyObject* error_type = nullptr;
PyObject* invariant_type = nullptr;

// The Python exception (an instance) that stands for a failed batch.
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

// Memory for the answer arrays the column methods return. A fresh numpy
// array of millions of answers costs the index a page fault every 4 KiB as
// it writes them; these blocks come back here when their array is freed
// and are handed out again with their pages in place. Page-locked where a
// GPU driver is found (allocate_pinned), so an index on a GPU writes the
// answers straight into them, with no staging. At most `cap` bytes wait here.
class answer_memory {
 public:
  static constexpr std::size_t smallest = std::size_t{1} << 16;
  static constexpr std::size_t cap = std::size_t{1} << 30;

  // A block of at least `bytes`, and the size class to give back with it.
  static std::pair<void*, std::size_t> take(std::size_t bytes) {
    std::size_t size = smallest;
    while (size < bytes) size <<= 1;
    {
      std::lock_guard<std::mutex> lock(mutex());
      auto& list = blocks()[size];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        cached() -= size;
        return {p, size};
      }
    }
    return {tandem::device::allocate_pinned(size), size};
  }

  static void give_back(void* p, std::size_t size) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex());
      if (cached() + size <= cap) {
        try {
          blocks()[size].push_back(p);
          cached() += size;
          return;
        } catch (...) {
        }
      }
    }
    tandem::device::free_pinned(p);
  }

 private:
  // Never destroyed: arrays may be freed while the interpreter shuts down.
  static std::mutex& mutex() {
    static auto* m = new std::mutex;
    return *m;
  }
  static std::map<std::size_t, std::vector<void*>>& blocks() {
    static auto* b = new std::map<std::size_t, std::vector<void*>>;
    return *b;
  }
  static std::size_t& cached() {
    static std::size_t c = 0;
    return c;
  }
};

// A 1-D numpy array of n elements of T over a block of answer_memory.
template <class T>
nb::object answer_array(std::size_t n) {
  struct block {
    void* p;
    std::size_t size;
  };
  const auto [p, size] = answer_memory::take(n * sizeof(T));
  auto* owner = new block{p, size};
  nb::capsule cap(owner, [](void* b) noexcept {
    auto* k = static_cast<block*>(b);
    answer_memory::give_back(k->p, k->size);
    delete k;
  });
  return nb::cast(numpy_array<T>(static_cast<T*>(p), {n}, cap));
}

// A batch's answers. Its columns are handed out as numpy views that keep
// this object alive (rv_policy::reference_internal).
struct result {
  tandem::batch_result r;
};

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

void check_length(const char* what, std::size_t n, std::size_t expected) {
  if (n != expected) {
    throw std::invalid_argument(std::string(what) + " has " + std::to_string(n) + " elements, expected " +
                                std::to_string(expected));
  }
}

// Runs n ops of one type over the arrays (index::submit(columns)).
void run_columns(py_index& self, int type, in_column keys, std::optional<in_column> values,
                 std::optional<out_column> values_out, std::optional<out_flags> found_out,
                 std::optional<out_column> keys_out) {
  tandem::columns c;
  c.type = static_cast<tandem::op_type>(type);
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

nb::capsule result_owner(tandem::batch_result&& r) {
  return nb::capsule(new tandem::batch_result(std::move(r)),
                     [](void* p) noexcept { delete static_cast<tandem::batch_result*>(p); });
}

// Entries as two strided views (keys, values) over memory `owner` keeps.
nb::tuple entry_views(const tandem::entry* first, std::size_t n, nb::handle owner) {
  static tandem::entry none{};
  const tandem::entry* base = n ? first : &none;
  const std::initializer_list<std::int64_t> stride{2};
  auto keys = numpy_array<const u64>(&base->key, {n}, owner, stride);
  auto values = numpy_array<const u64>(&base->value, {n}, owner, stride);
  return nb::make_tuple(keys, values);
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

nb::dict stats_dict(const tandem::stats& s) {
  nb::dict d;
#define TANDEM_FIELD(name) d[#name] = s.name
  TANDEM_FIELD(batches);
  TANDEM_FIELD(failed_batches);
  TANDEM_FIELD(grouped_batches);
  TANDEM_FIELD(ops);
  TANDEM_FIELD(invalid_ops);
  TANDEM_FIELD(splits);
  TANDEM_FIELD(merges);
  TANDEM_FIELD(compactions);
  TANDEM_FIELD(inner_syncs);
  TANDEM_FIELD(last_load);
  TANDEM_FIELD(callback_errors);
  TANDEM_FIELD(last_callback_error);
  TANDEM_FIELD(log_bytes);
  TANDEM_FIELD(log_records);
  TANDEM_FIELD(log_syncs);
  TANDEM_FIELD(checkpoints);
  TANDEM_FIELD(replayed_batches);
  TANDEM_FIELD(recovery_seconds);
  TANDEM_FIELD(log_error);
  TANDEM_FIELD(keys);
  TANDEM_FIELD(leaves);
  TANDEM_FIELD(dead_leaves);
  TANDEM_FIELD(inner_height);
  TANDEM_FIELD(inner_bytes);
  TANDEM_FIELD(leaf_bytes);
  TANDEM_FIELD(guide_bytes);
  TANDEM_FIELD(host_bytes);
  TANDEM_FIELD(gpu_bytes);
  TANDEM_FIELD(gpu_budget_bytes);
  TANDEM_FIELD(gpu_route_keys);
  TANDEM_FIELD(guides_dropped);
  TANDEM_FIELD(threads);
  TANDEM_FIELD(device);
  TANDEM_FIELD(gpu_share);
  TANDEM_FIELD(gpu_share_auto);
  TANDEM_FIELD(gpu_degraded);
  TANDEM_FIELD(gpu_failures);
  TANDEM_FIELD(gpu_keys);
  TANDEM_FIELD(cpu_keys);
  TANDEM_FIELD(gpu_group_sizes);
  TANDEM_FIELD(gpu_rate);
  TANDEM_FIELD(cpu_rate);
  TANDEM_FIELD(gpu_scatters);
  TANDEM_FIELD(host_scatters);
  TANDEM_FIELD(direct_batches);
  TANDEM_FIELD(caller_batches);
  TANDEM_FIELD(point_reads);
  TANDEM_FIELD(last_batch_ops);
#undef TANDEM_FIELD
  nb::dict by_type;
  for (std::size_t t = 0; t < tandem::op_type_count; ++t) {
    by_type[tandem::to_string(static_cast<tandem::op_type>(t))] = s.ops_by_type[t];
  }
  d["ops_by_type"] = by_type;
  const auto stages = [](const tandem::stage_times& t) {
    nb::dict x;
    x["validate"] = t.validate;
    x["route"] = t.route;
    x["order"] = t.order;
    x["read"] = t.read;
    x["leaf"] = t.leaf;
    x["sync"] = t.sync;
    x["complete"] = t.complete;
    return x;
  };
  d["stage_seconds"] = stages(s.total);
  d["last_stage_seconds"] = stages(s.last);
  d["queue_wait_p50_us"] = s.queue_wait.percentile_us(50);
  d["queue_wait_p99_us"] = s.queue_wait.percentile_us(99);
  d["execution_p50_us"] = s.execution.percentile_us(50);
  d["execution_p99_us"] = s.execution.percentile_us(99);
  return d;
}

}  // namespace

NB_MODULE(_tandem, m) {
  m.doc() = "Native core of the tandem package (use the classes of `tandem`, which check their arguments).";
  m.attr("__version__") = tandem::version();
  m.attr("built_with_cuda") = tandem::built_with_cuda();
  m.attr("max_scan_limit") = tandem::max_scan_limit;
  m.def("answer_u64", &answer_array<u64>, "n"_a,
        "An uninitialised uint64 array of n elements over reused (page-locked where a GPU driver is found) memory.");
  m.def("answer_bool", &answer_array<bool>, "n"_a, "As answer_u64, of bools.");
  // Results and indexes held by module globals are still alive when the
  // interpreter tears the module down; that is no leak worth a warning.
  nb::set_leak_warnings(false);

  static nb::exception<tandem::error> error(m, "Error", PyExc_RuntimeError);
  static nb::exception<tandem::invariant_error> invariant(m, "InvariantError", error.ptr());
  error_type = error.ptr();
  invariant_type = invariant.ptr();

  nb::class_<tandem::config>(m, "Config", "tandem::config: every field, with its C++ default.")
      .def(nb::init<>())
      .def_rw("threads", &tandem::config::threads)
      .def_rw("fanout", &tandem::config::fanout)
      .def_rw("leaf_fill", &tandem::config::leaf_fill)
      .def_prop_rw(
          "device", [](const tandem::config& c) { return static_cast<int>(c.device); },
          [](tandem::config& c, int v) { c.device = static_cast<tandem::device_kind>(v); })
      .def_rw("gpu_device", &tandem::config::gpu_device)
      .def_rw("min_gpu_batch", &tandem::config::min_gpu_batch)
      .def_rw("small_batch_ops", &tandem::config::small_batch_ops)
      .def_rw("direct_get_ops", &tandem::config::direct_get_ops)
      .def_rw("caller_runs", &tandem::config::caller_runs)
      .def_rw("group_commit_ops", &tandem::config::group_commit_ops)
      .def_rw("group_commit_output_bytes", &tandem::config::group_commit_output_bytes)
      .def_rw("dispatcher_spin_us", &tandem::config::dispatcher_spin_us)
      .def_rw("gpu_share", &tandem::config::gpu_share)
      .def_prop_rw(
          "gpu_order", [](const tandem::config& c) { return static_cast<int>(c.gpu_order); },
          [](tandem::config& c, int v) { c.gpu_order = static_cast<tandem::gpu_query_order>(v); })
      .def_rw("gpu_scatter", &tandem::config::gpu_scatter)
      .def_rw("gpu_leaf_hints", &tandem::config::gpu_leaf_hints)
      .def_rw("max_gpu_route_keys", &tandem::config::max_gpu_route_keys)
      .def_rw("max_gpu_bytes", &tandem::config::max_gpu_bytes)
      .def_rw("gpu_failure_limit", &tandem::config::gpu_failure_limit)
      .def_rw("max_batch_output_bytes", &tandem::config::max_batch_output_bytes)
      .def_rw("verify_each_batch", &tandem::config::verify_each_batch)
      .def_rw("storage_dir", &tandem::config::storage_dir)
      .def_prop_rw(
          "log_sync_policy", [](const tandem::config& c) { return static_cast<int>(c.log_sync_policy); },
          [](tandem::config& c, int v) { c.log_sync_policy = static_cast<tandem::log_sync>(v); })
      .def_rw("log_group_us", &tandem::config::log_group_us);

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
      .def(
          "_put_many",
          [](tandem::batch& b, in_column k, in_column v) {
            check_length("values", v.shape(0), k.shape(0));
            b.put(k.data(), v.data(), k.shape(0));
          },
          "keys"_a, "values"_a)
      .def(
          "_insert_many",
          [](tandem::batch& b, in_column k, in_column v) {
            check_length("values", v.shape(0), k.shape(0));
            b.insert(k.data(), v.data(), k.shape(0));
          },
          "keys"_a, "values"_a)
      .def("_erase_many", [](tandem::batch& b, in_column k) { b.erase(k.data(), k.shape(0)); }, "keys"_a)
      .def("_lower_bound_many", [](tandem::batch& b, in_column k) { b.lower_bound(k.data(), k.shape(0)); },
           "keys"_a)
      .def(
          "ops",
          [](const tandem::batch& b) {
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
            return nb::make_tuple(numpy_array<std::uint8_t>(types, {n}, own(types)),
                                  numpy_array<u64>(keys, {n}, own(keys)), numpy_array<u64>(args, {n}, own(args)),
                                  numpy_array<u64>(limits, {n}, own(limits)),
                                  numpy_array<bool>(ordered, {n}, own(ordered)));
          },
          "The batch's ops as copies of its columns: (types uint8 [get 0, put 1, insert 2, erase 3,\n"
          "lower_bound 4, scan 5, count 6], keys, args [the value of put/insert, hi of scan/count],\n"
          "limits [of scans, else 0], ordered [of scans, else True]).");

  nb::class_<result>(m, "Result",
                     "The answers of one batch, one per op in batch order. The column properties are numpy\n"
                     "views of the index's answer columns (read-only; they keep this result alive).\n\n"
                     "Per op: get: found = key present, value = its value; put/insert/erase: found = key was\n"
                     "present, value = the value replaced/kept/erased; lower_bound: found = an entry >= key,\n"
                     "key/value = that entry; scan: value = entries returned (see scan(i)); count: value = the\n"
                     "count. status: 0 ok, 1 invalid, 2 output_limit (see error(i)).")
      .def("__len__", [](const result& r) { return r.r.size(); })
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
          "error",
          [](const result& r, std::size_t i) {
            if (i >= r.r.size()) throw nb::index_error("op index out of range");
            return r.r.error(i);
          },
          "i"_a, "The message of op i when its status is not ok, else an empty string.")
      .def(
          "scan",
          [](nb::handle self, std::size_t i) {
            const result& r = nb::cast<const result&>(self);
            if (i >= r.r.size()) throw nb::index_error("op index out of range");
            const tandem::entry_span s = r.r.scan(i);
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
