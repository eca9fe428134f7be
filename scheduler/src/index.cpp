// tandem::index, the public API (index.hpp): thin wrappers that queue jobs
// for the dispatcher (index_impl.hpp has the stages).
#include "device_columns.hpp"
#include "index_impl.hpp"

#include <tandem/host/detail/fault_point.hpp>
#include <tandem/scheduler/testing.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace tandem {

// ---- public API -------------------------------------------------------------

index::index(const config& cfg) : impl_(std::make_unique<impl>(cfg)) {
  if (!cfg.storage_dir.empty()) impl_->recover();
}
index::~index() = default;

void index::load(const key_type* keys, const value_type* values, std::size_t n) {
  impl_->refuse_on_dispatcher("load");
  if (n != 0 && (keys == nullptr || values == nullptr)) {
    throw std::invalid_argument("tandem::index::load: null keys or values for " + std::to_string(n) + " pairs");
  }
  impl_->load_and_wait({keys, values, 1, n});
}

void index::load(const std::vector<entry>& entries) {
  impl_->refuse_on_dispatcher("load");
  static_assert(sizeof(entry) == 2 * sizeof(key_type), "entries are (key, value) pairs of two words");
  if (entries.empty()) return impl_->load_and_wait({});
  impl_->load_and_wait({&entries.front().key, &entries.front().value, 2, entries.size()});
}

std::future<batch_result> index::submit(batch b) {
  if (b.size() >= std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error("tandem::index::submit: a batch holds at most 2^32 - 2 ops, got " +
                            std::to_string(b.size()));
  }
  auto j = std::make_unique<job>();
  j->ops = std::move(b);
  std::future<batch_result> f = j->promise.get_future();
  impl_->enqueue(std::move(j));
  return f;
}

void index::submit(batch b, callback done) {
  if (!done) throw std::invalid_argument("tandem::index::submit: empty callback");
  if (b.size() >= std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error("tandem::index::submit: a batch holds at most 2^32 - 2 ops, got " +
                            std::to_string(b.size()));
  }
  auto j = std::make_unique<job>();
  j->ops = std::move(b);
  j->done = std::move(done);
  impl_->enqueue(std::move(j));
}

std::future<void> index::submit(const columns& c) {
  const auto fail = [](const std::string& why) {
    throw std::invalid_argument("tandem::index::submit(columns): " + why);
  };
  if (c.type != op_type::get && c.type != op_type::put && c.type != op_type::insert && c.type != op_type::erase &&
      c.type != op_type::lower_bound) {
    fail(std::string("ops of type ") + to_string(c.type) + " take a batch (columns take get, put, insert, erase, " +
         "lower_bound)");
  }
  if (c.n >= std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error("tandem::index::submit(columns): at most 2^32 - 2 ops, got " + std::to_string(c.n));
  }
  const bool with_values = c.type == op_type::put || c.type == op_type::insert;
  if (c.n != 0 && (c.keys == nullptr || (with_values && c.values == nullptr))) {
    fail(std::string("null ") + (c.keys == nullptr ? "keys" : "values") + " for " + std::to_string(c.n) + " ops");
  }
  // Byte ranges of every array given, for the alignment and overlap checks.
  struct range {
    const char* name;
    std::uintptr_t begin, end, align;
    bool output;
  };
  const auto at = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  std::array<range, 5> arrays{};
  std::size_t count = 0;
  const auto add = [&](const char* name, const void* p, std::size_t bytes, std::size_t align, bool output) {
    if (p != nullptr && c.n != 0) arrays[count++] = {name, at(p), at(p) + c.n * bytes, align, output};
  };
  add("keys", c.keys, sizeof(key_type), alignof(key_type), false);
  if (with_values) add("values", c.values, sizeof(value_type), alignof(value_type), false);
  add("values_out", c.values_out, sizeof(value_type), alignof(value_type), true);
  add("found_out", c.found_out, 1, 1, true);
  if (c.type == op_type::lower_bound) add("keys_out", c.keys_out, sizeof(key_type), alignof(key_type), true);
  for (std::size_t i = 0; i < count; ++i) {
    if (arrays[i].begin % arrays[i].align != 0) {
      fail(std::string(arrays[i].name) + " is not aligned to " + std::to_string(arrays[i].align) + " bytes");
    }
    for (std::size_t k = 0; k < i; ++k) {
      const bool overlap = arrays[i].begin < arrays[k].end && arrays[k].begin < arrays[i].end;
      if (overlap && (arrays[i].output || arrays[k].output)) {
        fail(std::string(arrays[k].name) + " and " + arrays[i].name + " overlap (outputs may overlap nothing)");
      }
    }
  }
  if (c.device >= 0) {
    return submit_from_device(c, impl_->keeps_device_keys(c),
                              [this](std::unique_ptr<job> j) { impl_->enqueue(std::move(j)); });
  }
  if (c.n == 0) {
    std::promise<void> none;
    none.set_value();
    return none.get_future();
  }
  auto j = std::make_unique<job>();
  // Keys serve as the args of ops that take none: an array of n words the
  // index may read, never used.
  j->ops = batch::over(c.type, c.keys, with_values ? c.values : c.keys, c.n);
  j->in_place = true;
  j->values_out = c.values_out;
  j->found_out = c.found_out;
  j->keys_out = c.type == op_type::lower_bound ? c.keys_out : nullptr;
  std::future<void> f = j->finished.get_future();
  impl_->enqueue(std::move(j));
  return f;
}

batch_result index::execute(batch b) {
  impl_->refuse_on_dispatcher("execute");
  if (b.size() >= std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error("tandem::index::execute: a batch holds at most 2^32 - 2 ops, got " +
                            std::to_string(b.size()));
  }
  auto j = std::make_unique<job>();
  j->ops = std::move(b);
  j->awaited = true;
  std::future<batch_result> f = j->promise.get_future();
  impl_->enqueue(std::move(j));
  return f.get();
}

std::optional<value_type> index::get(key_type key) { return impl_->point_get(key); }

std::optional<entry> index::lower_bound(key_type key) { return impl_->point_lower_bound(key); }

std::optional<value_type> index::put(key_type key, value_type value) {
  impl_->refuse_on_dispatcher("put");
  std::optional<value_type> previous;
  if (impl_->write_on_caller(op_type::put, key, value, previous)) return previous;
  const batch_result r = impl_->write_point(op_type::put, key, value);
  return r.found(0) ? std::optional<value_type>(r.value(0)) : std::nullopt;
}

bool index::insert(key_type key, value_type value) {
  impl_->refuse_on_dispatcher("insert");
  std::optional<value_type> present;
  if (impl_->write_on_caller(op_type::insert, key, value, present)) return !present.has_value();
  return !impl_->write_point(op_type::insert, key, value).found(0);
}

std::optional<value_type> index::erase(key_type key) {
  impl_->refuse_on_dispatcher("erase");
  std::optional<value_type> erased;
  if (impl_->write_on_caller(op_type::erase, key, 0, erased)) return erased;
  const batch_result r = impl_->write_point(op_type::erase, key, 0);
  return r.found(0) ? std::optional<value_type>(r.value(0)) : std::nullopt;
}

std::size_t index::size() const { return impl_->size(); }

void index::set_gpu_share(double share) { impl_->set_share(share); }
void index::set_gpu_share(auto_share_t) { impl_->set_auto_share(); }

bool detail::index_access::inject_gpu_fault(tandem::index& idx, device::stage s, int count) {
  return idx.impl_->inject_gpu_fault(s, count);
}

bool detail::index_access::inject_gpu_fault(tandem::index& idx, std::size_t gpu, device::stage s, int count) {
  return idx.impl_->inject_peer_fault(gpu, s, count);
}

void detail::index_access::fail_nth_allocation(std::uint64_t n) noexcept { host::detail::arm_allocation_fault(n); }

std::uint64_t detail::index_access::disarm_allocation_fault() noexcept {
  return host::detail::disarm_allocation_fault();
}

tandem::stats index::stats() const { return impl_->snapshot(); }

void index::save(const std::string& path) {
  impl_->refuse_on_dispatcher("save");
  auto j = std::make_unique<job>();
  j->type = job::kind::save;
  j->path = path;
  std::future<void> done = j->finished.get_future();
  impl_->enqueue(std::move(j));
  done.get();
}

void index::open(const std::string& path) {
  impl_->refuse_on_dispatcher("open");
  impl_->open_snapshot(path);
}

void index::checkpoint() {
  impl_->refuse_on_dispatcher("checkpoint");
  impl_->checkpoint();
}

void index::compact() {
  impl_->refuse_on_dispatcher("compact");
  impl* self = impl_.get();
  impl_->run_barrier([self] { self->compact(); });
}

void index::verify() {
  impl_->refuse_on_dispatcher("verify");
  impl* self = impl_.get();
  impl_->run_barrier([self] {
    self->verify_all();
    self->verify_copies();
  });
}

}  // namespace tandem
