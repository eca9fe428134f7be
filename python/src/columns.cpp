// Column helpers of the native module: the memory answer arrays are made
// of, length checks, and views of a result's entries.
#include "binding.hpp"

#include <tandem/device/pinned.hpp>

#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

namespace tandem_py {
namespace {

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

}  // namespace

nb::object answer_u64(std::size_t n) { return answer_array<u64>(n); }
nb::object answer_bool(std::size_t n) { return answer_array<bool>(n); }

void check_length(const char* what, std::size_t n, std::size_t expected) {
  if (n != expected) {
    throw std::invalid_argument(std::string(what) + " has " + std::to_string(n) + " elements, expected " +
                                std::to_string(expected));
  }
}

nb::capsule result_owner(tandem::batch_result&& r) {
  return nb::capsule(new tandem::batch_result(std::move(r)),
                     [](void* p) noexcept { delete static_cast<tandem::batch_result*>(p); });
}

nb::tuple entry_views(const tandem::entry* first, std::size_t n, nb::handle owner) {
  static tandem::entry none{};
  const tandem::entry* base = n ? first : &none;
  const std::initializer_list<std::int64_t> stride{2};
  auto keys = numpy_array<const u64>(&base->key, {n}, owner, stride);
  auto values = numpy_array<const u64>(&base->value, {n}, owner, stride);
  return nb::make_tuple(keys, values);
}

}  // namespace tandem_py
