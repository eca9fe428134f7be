// ThreadSanitizer and oneTBB (linked into the tests of the tsan preset only).
//
// The oneTBB library (libtbb.so) comes uninstrumented, so ThreadSanitizer
// sees none of the synchronization that orders the work of a parallel
// algorithm:
//   fork: what a thread writes before it spawns a task happens before the
//         task runs on the worker that takes it;
//   join: what a task does happens before the wait for it returns;
//   reuse: a task object freed on one thread and rebuilt in the same memory
//         by another (libtbb pools them) is done with before it is rebuilt.
// Without them every parallel_for body that reads what the caller prepared,
// and every access after the wait to what the tasks wrote, is reported as a
// race: hundreds per test, none of them in tandem, and in tandem's own
// functions, so that no suppression could name them without hiding every
// real race inside a task as well.
//
// Built with TBB_USE_PROFILING_TOOLS=2 (cmake/TandemWarnings.cmake does so
// for -fsanitize=thread), oneTBB's headers announce these points to a
// profiling tool through r1::call_itt_notify: "releasing" on each task as it
// is spawned, on a wait_context and on a join node of the partitioner's tree
// as each task finishes, "acquired" on them where the wait returns or the
// last child joins, "destroy" on a task object going back to its pool. The
// definitions below take those calls, and a few other entry points of
// libtbb, instead of libtbb (a definition in the executable comes first;
// the real one is found with dlsym(RTLD_NEXT)) and turn them into
// __tsan_release / __tsan_acquire:
//   call_itt_notify   join edges; the release of a freed task object;
//   spawn, enqueue    the fork edge (see acquiring_task); enqueue takes the
//                     tasks of task_arena::enqueue;
//   wait, execute_and_wait   the last decrement of a wait_context's count;
//   allocate          the acquire of a rebuilt task object;
//   cache_aligned_allocate, cache_aligned_deallocate   the same for memory
//                     that libtbb's allocator hands out again.
// A report that remains is a race to fix, or a case for this file;
// tests/tsan.supp is the last resort.
#if defined(__SANITIZE_THREAD__)  // GCC
#define TANDEM_TSAN_TBB 1
#elif defined(__has_feature)  // clang
#if __has_feature(thread_sanitizer)
#define TANDEM_TSAN_TBB 1
#endif
#endif

#if defined(TANDEM_TSAN_TBB)

#include <oneapi/tbb/cache_aligned_allocator.h>
#include <oneapi/tbb/detail/_small_object_pool.h>
#include <oneapi/tbb/detail/_task.h>
#include <oneapi/tbb/profiling.h>
#include <oneapi/tbb/task_arena.h>

#include <sanitizer/tsan_interface.h>

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace tbb::detail::r1 {

void __TBB_EXPORTED_FUNC call_itt_notify(int t, void* ptr) {
  switch (t) {
    case d1::acquired:
      __tsan_acquire(ptr);
      break;
    case d1::releasing:
    case d1::destroy:  // a task object goes back to its pool: see allocate()
      __tsan_release(ptr);
      break;
    default:
      break;
  }
}

namespace {

/// The "acquired" that matches a spawn would be made inside libtbb, where a
/// worker takes the task. So a spawned task goes to libtbb inside this one,
/// which releases where it is built (on the spawning thread) and acquires
/// on the thread that runs it, before it runs the real task; then it frees
/// itself (libtbb never touches a task after it has run).
class acquiring_task final : public d1::task {
 public:
  explicit acquiring_task(d1::task& inner) : inner_(&inner) { __tsan_release(this); }
  d1::task* execute(d1::execution_data& ed) override {
    __tsan_acquire(this);
    d1::task* next = inner_->execute(ed);
    delete this;
    return next;
  }
  d1::task* cancel(d1::execution_data& ed) override {
    __tsan_acquire(this);
    d1::task* next = inner_->cancel(ed);
    delete this;
    return next;
  }

 private:
  d1::task* inner_;
};

template <class F>
F next_definition(const char* mangled) {
  void* f = dlsym(RTLD_NEXT, mangled);
  if (!f) {
    std::fprintf(stderr, "tsan_tbb: libtbb has no %s\n", mangled);
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

}  // namespace

void __TBB_EXPORTED_FUNC spawn(d1::task& t, d1::task_group_context& ctx) {
  using fn = void (*)(d1::task&, d1::task_group_context&);
  static const fn real = next_definition<fn>("_ZN3tbb6detail2r15spawnERNS0_2d14taskERNS2_18task_group_contextE");
  real(*new acquiring_task(t), ctx);
}

void __TBB_EXPORTED_FUNC spawn(d1::task& t, d1::task_group_context& ctx, d1::slot_id id) {
  using fn = void (*)(d1::task&, d1::task_group_context&, d1::slot_id);
  static const fn real = next_definition<fn>("_ZN3tbb6detail2r15spawnERNS0_2d14taskERNS2_18task_group_contextEt");
  real(*new acquiring_task(t), ctx, id);
}

// task_arena::enqueue: the task runs later on any thread of the arena.
void __TBB_EXPORTED_FUNC enqueue(d1::task& t, d1::task_arena_base* a) {
  using fn = void (*)(d1::task&, d1::task_arena_base*);
  static const fn real = next_definition<fn>("_ZN3tbb6detail2r17enqueueERNS0_2d14taskEPNS2_15task_arena_baseE");
  real(*new acquiring_task(t), a);
}

void __TBB_EXPORTED_FUNC enqueue(d1::task& t, d1::task_group_context& ctx, d1::task_arena_base* a) {
  using fn = void (*)(d1::task&, d1::task_group_context&, d1::task_arena_base*);
  static const fn real = next_definition<fn>(
      "_ZN3tbb6detail2r17enqueueERNS0_2d14taskERNS2_18task_group_contextEPNS2_15task_arena_baseE");
  real(*new acquiring_task(t), ctx, a);
}

// A parallel algorithm waits on a wait_context, on the waiting thread's
// stack. Each task that finishes announces "releasing" on it and then
// decrements its count; the waiter returns once libtbb sees the count at
// zero. The headers' "acquired" after the wait orders what the tasks did
// before their announcements, but not the decrements themselves: the last
// one would look unordered with whatever the waiter's later frames write to
// that stack memory. The wait below acquires what the decrements released,
// as libtbb's own load of the count does. The count is the second word of a
// wait_context, as laid out in oneTBB's binary interface.
namespace {

void acquire_count(d1::wait_context& w) {
  static_assert(sizeof(d1::wait_context) == 2 * sizeof(std::uint64_t), "oneTBB's wait_context layout changed");
  __tsan_acquire(reinterpret_cast<char*>(&w) + sizeof(std::uint64_t));
}

}  // namespace

void __TBB_EXPORTED_FUNC wait(d1::wait_context& w, d1::task_group_context& ctx) {
  using fn = void (*)(d1::wait_context&, d1::task_group_context&);
  static const fn real =
      next_definition<fn>("_ZN3tbb6detail2r14waitERNS0_2d112wait_contextERNS2_18task_group_contextE");
  real(w, ctx);
  acquire_count(w);
}

void __TBB_EXPORTED_FUNC execute_and_wait(d1::task& t, d1::task_group_context& t_ctx, d1::wait_context& w,
                                          d1::task_group_context& w_ctx) {
  using fn = void (*)(d1::task&, d1::task_group_context&, d1::wait_context&, d1::task_group_context&);
  static const fn real = next_definition<fn>(
      "_ZN3tbb6detail2r116execute_and_waitERNS0_2d14taskERNS2_18task_group_contextERNS2_12wait_contextES6_");
  real(t, t_ctx, w, w_ctx);
  acquire_count(w);
}

// Task objects come from per-thread pools inside libtbb, and a task freed on
// one thread may go back to the pool of the thread that allocated it, which
// builds its next task in the same memory. The headers announce the free
// ("destroy", released above); the allocation acquires it, so the new
// task's construction comes after everything done to the old one.
void* __TBB_EXPORTED_FUNC allocate(d1::small_object_pool*& pool, std::size_t bytes, const d1::execution_data& ed) {
  using fn = void* (*)(d1::small_object_pool*&, std::size_t, const d1::execution_data&);
  static const fn real = next_definition<fn>(
      "_ZN3tbb6detail2r18allocateERPNS0_2d117small_object_poolEmRKNS2_14execution_dataE");
  void* p = real(pool, bytes, ed);
  __tsan_acquire(p);
  return p;
}

void* __TBB_EXPORTED_FUNC allocate(d1::small_object_pool*& pool, std::size_t bytes) {
  using fn = void* (*)(d1::small_object_pool*&, std::size_t);
  static const fn real = next_definition<fn>("_ZN3tbb6detail2r18allocateERPNS0_2d117small_object_poolEm");
  void* p = real(pool, bytes);
  __tsan_acquire(p);
  return p;
}

// Memory libtbb takes from and gives back to its allocator (tbbmalloc where
// installed, which ThreadSanitizer does not see): task pools and the
// storage of enumerable_thread_specific among it. A block a task object
// lived in (freed on one thread: "destroy" above) may come back from here
// on another thread as the storage of something else; the allocation
// acquires what the free released.
void __TBB_EXPORTED_FUNC cache_aligned_deallocate(void* p) {
  using fn = void (*)(void*);
  static const fn real = next_definition<fn>("_ZN3tbb6detail2r124cache_aligned_deallocateEPv");
  if (p) __tsan_release(p);
  real(p);
}

void* __TBB_EXPORTED_FUNC cache_aligned_allocate(std::size_t bytes) {
  using fn = void* (*)(std::size_t);
  static const fn real = next_definition<fn>("_ZN3tbb6detail2r122cache_aligned_allocateEm");
  void* p = real(bytes);
  if (p) __tsan_acquire(p);
  return p;
}

}  // namespace tbb::detail::r1

#endif  // TANDEM_TSAN_TBB
