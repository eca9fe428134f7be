// Batch memory pools (batch_memory.hpp).
#include "batch_memory.hpp"

#include <tandem/device/pinned.hpp>
#include <tandem/host/detail/fault_point.hpp>
#include <tandem/host/detail/huge_pages.hpp>

#include <algorithm>
#include <memory>
#include <new>

namespace tandem::scheduler {

void* allocate_host(std::size_t bytes, memory_kind kind) {
  if (kind == memory_kind::pinned) {
    host::detail::allocation_point();  // allocate_huge counts its own
    return device::allocate_pinned(bytes);
  }
  return host::detail::allocate_huge(bytes);
}

void free_host(void* p, memory_kind kind) noexcept {
  if (kind == memory_kind::pinned) {
    device::free_pinned(p);
  } else {
    host::detail::free_huge(p);
  }
}

struct answer_pool::slot : tandem::detail::answer_columns {
  explicit slot(memory_kind kind) : value_memory(kind), found_memory(kind), status_memory(kind) {}
  void reserve(std::size_t n) {
    values = value_memory.get(n);
    found = found_memory.get(n);
    status = status_memory.get(n);
  }
  host_array<value_type> value_memory;
  host_array<std::uint8_t> found_memory;
  host_array<op_status> status_memory;
};

namespace {
struct small_columns final : tandem::detail::answer_columns {
  explicit small_columns(std::size_t n)
      : memory(new unsigned char[std::max<std::size_t>(n, 1) * (sizeof(value_type) + 1 + sizeof(op_status))]) {
    values = reinterpret_cast<value_type*>(memory.get());  // new[]'s alignment holds a value_type
    found = memory.get() + n * sizeof(value_type);
    status = reinterpret_cast<op_status*>(found + n);
  }
  std::unique_ptr<unsigned char[]> memory;
};
}  // namespace

std::shared_ptr<tandem::detail::answer_columns> small_answer_columns(std::size_t n) {
  host::detail::allocation_point();
  return std::make_shared<small_columns>(n);
}

answer_pool::answer_pool(memory_kind kind) : kind_(kind) {}
answer_pool::~answer_pool() = default;

std::shared_ptr<tandem::detail::answer_columns> answer_pool::take(std::size_t n) {
  std::unique_ptr<slot> s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      s = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (!s) {
    host::detail::allocation_point();
    s = std::make_unique<slot>(kind_);
  }
  s->reserve(n);
  s->scan_entries.clear();
  s->scan_ops.clear();
  s->scan_begin.clear();
  std::weak_ptr<answer_pool> home = weak_from_this();
  slot* raw = s.release();
  return std::shared_ptr<tandem::detail::answer_columns>(raw, [home](tandem::detail::answer_columns* c) {
    auto* sl = static_cast<slot*>(c);
    if (const std::shared_ptr<answer_pool> pool = home.lock()) {
      pool->give_back(sl);
    } else {
      delete sl;
    }
  });
}

void answer_pool::release_free() noexcept {
  std::vector<std::unique_ptr<slot>> free;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free.swap(free_);
  }
}

void answer_pool::give_back(slot* s) noexcept {
  std::unique_ptr<slot> owned(s);
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(std::move(owned));
  } catch (...) {  // no room to keep it: free it
  }
}

}  // namespace tandem::scheduler
