// tandem::index: the submission queue, the dispatcher that runs batches in
// queue order on a TBB arena, routing, the leaf phase, inner sync and stats.
#include <tandem/index.hpp>

#include <tandem/core/inner_layout.hpp>
#include <tandem/device/device_query.hpp>
#include <tandem/device/gpu_router.hpp>
#include <tandem/device/pinned.hpp>
#include <tandem/error.hpp>
#include <tandem/host/leaf_phase.hpp>
#include <tandem/host/leaf_store.hpp>
#include <tandem/host/route.hpp>
#include <tandem/scheduler/share_policy.hpp>
#include <tandem/scheduler/testing.hpp>

#include <boost/lockfree/queue.hpp>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>
#include <oneapi/tbb/parallel_sort.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace tandem {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// One unit of work in the queue: a batch, a load, or a barrier.
struct job {
  enum class kind { batch, load, barrier } type = kind::batch;
  tandem::batch ops;
  std::vector<entry> pairs;                  // load
  std::promise<batch_result> promise;        // batch via submit(b)
  index::callback done;                      // batch via submit(b, cb)
  std::promise<void> finished;               // load, barrier
  std::function<void()> barrier_work;        // barrier: runs on the dispatcher
};

/// What the route stage of one batch did.
struct route_report {
  std::size_t gpu_keys = 0;
  std::size_t cpu_keys = 0;
  double gpu_seconds = 0;
  double cpu_seconds = 0;
  bool gpu_failed = false;
  std::array<std::uint64_t, op_type_count> ops_by_type{};  // counted while the ops are checked
  bool typed = false;
  double gpu_rate = 0;  // the policy's moving averages after this batch
  double cpu_rate = 0;
  device::route_timing gpu;
};

/// Buffers of one batch's route. Two exist: one batch is routed while the
/// previous one runs its leaf phase.
struct route_space {
  device::pinned_array<key_type> keys;  // pinned: the GPU reads them directly
  host::routed_batch routes;            // the batch, grouped by leaf
  host::routed_batch cpu;               // CPU share
  host::routed_batch fallback;          // GPU share re-routed on the CPU after a failure
  device::pinned_array<std::uint32_t> gpu_positions, gpu_ordinals;
};

/// A batch between its route and its leaf phase.
struct prepared {
  job* j = nullptr;
  route_space* space = nullptr;
  std::shared_ptr<const inner_layout> latest;  // layout when routing started
  batch_result result;
  stage_times times;
  route_report info;
  std::exception_ptr failure;
};

void validate_config(const config& c) {
  if (c.fanout != 16 && c.fanout != 32 && c.fanout != 64) {
    throw std::invalid_argument("tandem::config.fanout must be 16, 32 or 64, got " + std::to_string(c.fanout));
  }
  if (!(c.leaf_fill > 0.0 && c.leaf_fill <= 1.0)) {
    throw std::invalid_argument("tandem::config.leaf_fill must be in (0, 1], got " + std::to_string(c.leaf_fill));
  }
  if (std::isnan(c.gpu_share) || c.gpu_share > 1.0) {
    throw std::invalid_argument("tandem::config.gpu_share must be in [0, 1] (or negative for automatic), got " +
                                std::to_string(c.gpu_share));
  }
  if (c.gpu_failure_limit < 1) {
    throw std::invalid_argument("tandem::config.gpu_failure_limit must be at least 1, got " +
                                std::to_string(c.gpu_failure_limit));
  }
  if (c.threads > 4096) {
    throw std::invalid_argument("tandem::config.threads must be at most 4096, got " + std::to_string(c.threads));
  }
}

std::string op_text(std::size_t i, const op& o) {
  return "op " + std::to_string(i) + " (" + to_string(o.type) + ")";
}

}  // namespace

class index::impl {
 public:
  explicit impl(const config& cfg) : cfg_(cfg), queue_(128) {
    validate_config(cfg_);
    open_gpu();
    auto_share_.store(cfg_.gpu_share < 0);
    fixed_share_.store(cfg_.gpu_share < 0 ? 0.0 : cfg_.gpu_share);
    const int threads = cfg_.threads ? static_cast<int>(cfg_.threads) : tbb::info::default_concurrency();
    arena_.initialize(threads);
    threads_ = static_cast<std::size_t>(threads);
    rebuild_table_from_store();
    publish_stats({}, 0);
    dispatcher_ = std::thread([this] { dispatch(); });
  }

  ~impl() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    dispatcher_.join();
  }

  void enqueue(job* j) {
    queued_.fetch_add(1, std::memory_order_acq_rel);
    while (!queue_.push(j)) std::this_thread::yield();  // push fails only when memory runs out
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_one();
  }

  std::size_t size() const { return keys_.load(std::memory_order_acquire); }

  void set_share(double share) {
    if (std::isnan(share) || share < 0.0 || share > 1.0) {
      throw std::invalid_argument("tandem::index::set_gpu_share: the share must be in [0, 1], got " +
                                  std::to_string(share));
    }
    fixed_share_.store(share);
    auto_share_.store(false);
  }
  void set_auto_share() { auto_share_.store(true); }

  bool inject_gpu_fault(device::stage s, int count) {
    if (!gpu_) return false;
    gpu_->inject_fault(s, count);
    return true;
  }

  tandem::stats snapshot() const {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return stats_;
  }

 private:
  /// config.device: automatic takes a GPU when one works, gpu requires one.
  void open_gpu() {
    if (cfg_.device == device_kind::cpu) {
      device_ = "cpu (config.device = cpu)";
      return;
    }
    const device::device_report devices = device::query_devices();
    if (devices.devices.empty()) {
      if (cfg_.device == device_kind::gpu) {
        throw error("tandem::config.device = gpu, but there is no usable GPU: " + devices.reason);
      }
      device_ = "cpu (" + device::describe(devices) + ")";
      return;
    }
    try {
      device::router_options options;
      options.order = cfg_.gpu_order == gpu_query_order::full_sort ? device::aggregation::full
                      : cfg_.gpu_order == gpu_query_order::none    ? device::aggregation::none
                                                                   : device::aggregation::partial;
      gpu_ = std::make_unique<device::gpu_router>(options);
      device_ = "gpu " + gpu_->name();
    } catch (const std::exception& e) {
      if (cfg_.device == device_kind::gpu) {
        throw error(std::string("tandem::config.device = gpu, but the GPU cannot be used: ") + e.what());
      }
      gpu_.reset();
      device_ = std::string("cpu (GPU unusable: ") + e.what() + ")";
    }
  }

  /// Uploads the latest layout to the GPU's idle buffer. On failure the GPU
  /// keeps routing on its older version, which stays correct (DESIGN step 6).
  void sync_gpu() {
    if (!gpu_ || degraded_.load()) return;
    try {
      // The router switches versions when the upload completes; a route in
      // flight must see its ordinals mapped through the version it used, so
      // uploads and routes on the GPU take turns (see route()).
      std::lock_guard<std::mutex> turn(gpu_turn_);
      gpu_->upload(*layout_);
      std::lock_guard<std::mutex> lock(layout_mutex_);
      gpu_layout_ = layout_;
      group_sizes_.clear();
      for (int g : gpu_->group_sizes()) group_sizes_ += (group_sizes_.empty() ? "" : ",") + std::to_string(g);
    } catch (const std::exception&) {
      note_gpu_failure();
    }
  }

  void note_gpu_failure() {
    ++gpu_failures_;
    if (++consecutive_failures_ >= cfg_.gpu_failure_limit) degraded_.store(true);
  }

  // The layout pointers change in inner sync (dispatcher) while the next
  // batch is being routed (another thread): both sides go through the lock.
  std::shared_ptr<const inner_layout> layout_snapshot() const {
    std::lock_guard<std::mutex> lock(layout_mutex_);
    return layout_;
  }
  std::shared_ptr<const inner_layout> gpu_layout_snapshot() const {
    std::lock_guard<std::mutex> lock(layout_mutex_);
    return gpu_layout_;
  }
  void set_layout(std::shared_ptr<const inner_layout> l) {
    std::lock_guard<std::mutex> lock(layout_mutex_);
    layout_ = std::move(l);
  }

  /// Pops the next job, waiting for one; nullptr once stopping and drained.
  job* pop_or_wait() {
    for (;;) {
      job* j = nullptr;
      if (queue_.pop(j)) {
        queued_.fetch_sub(1, std::memory_order_acq_rel);
        return j;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      if (stopping_ && queued_.load(std::memory_order_acquire) == 0) return nullptr;
      wake_.wait(lock, [&] { return stopping_ || queued_.load(std::memory_order_acquire) > 0; });
    }
  }

  job* try_pop() {
    job* j = nullptr;
    if (!queue_.pop(j)) return nullptr;
    queued_.fetch_sub(1, std::memory_order_acq_rel);
    return j;
  }

  /// Runs jobs in queue order. While one batch runs its leaf phase, the next
  /// queued batch is checked and routed on another thread (DESIGN,
  /// pipelining): on the layout version of that moment, which stays correct
  /// after the first batch's splits because ops follow right links.
  void dispatch() {
    std::unique_ptr<prepared> ready;
    job* held = nullptr;  // a non-batch job popped while looking ahead
    for (;;) {
      if (!ready) {
        job* j = held ? held : pop_or_wait();
        held = nullptr;
        if (!j) return;
        if (j->type != job::kind::batch) {
          run(j);
          delete j;
          continue;
        }
        ready = prepare(j, spaces_[next_space_]);
        next_space_ ^= 1;
      }
      std::future<std::unique_ptr<prepared>> next;
      job* pending = nullptr;
      if (job* j2 = try_pop()) {
        if (j2->type == job::kind::batch) {
          route_space& space = spaces_[next_space_];
          next_space_ ^= 1;
          pending = j2;
          next = std::async(std::launch::async, [this, j2, &space] { return prepare(j2, space); });
        } else {
          held = j2;
        }
      }
      finish(*ready);
      delete ready->j;
      ready.reset();
      if (next.valid()) {
        try {
          ready = next.get();
        } catch (...) {  // prepare() could not even allocate its record: fail that batch alone
          ready = std::make_unique<prepared>();
          ready->j = pending;
          ready->failure = std::current_exception();
        }
      }
    }
  }

  void run(job* j) {
    switch (j->type) {
      case job::kind::batch: break;  // batches go through prepare() and finish()
      case job::kind::load:
        try {
          arena_.execute([&] { load(j->pairs); });
          j->finished.set_value();
        } catch (...) {
          j->finished.set_exception(std::current_exception());
        }
        break;
      case job::kind::barrier:
        try {
          arena_.execute([&] { j->barrier_work(); });
          j->finished.set_value();
        } catch (...) {
          j->finished.set_exception(std::current_exception());
        }
        break;
    }
  }

  /// Checks and routes one batch (exceptions are kept for finish()).
  std::unique_ptr<prepared> prepare(job* j, route_space& space) {
    auto p = std::make_unique<prepared>();
    p->j = j;
    p->space = &space;
    p->latest = layout_snapshot();
    try {
      arena_.execute([&] { check_and_route(*p); });
    } catch (...) {
      p->failure = std::current_exception();
    }
    return p;
  }

  /// Leaf phase, inner sync, stats and answer of a prepared batch.
  void finish(prepared& p) {
    job& j = *p.j;
    std::uint64_t splits = 0;
    const std::size_t n = j.ops.size();
    if (!p.failure) {
      try {
        arena_.execute([&] { run_leaves(p, splits); });
      } catch (...) {
        p.failure = std::current_exception();
        // The batch may have split leaves before failing: bring the leaf table
        // and inner layout back in line with the leaves so the index stays
        // consistent for the next batch.
        try {
          arena_.execute([&] { rebuild_table_from_store(); });
        } catch (...) {
        }
      }
    }
    batch_result result = p.failure ? batch_result() : std::move(p.result);
    result.set_sequence(sequence_++);
    publish_stats(p.times, n, &j.ops, p.failure != nullptr, splits, result.invalid_count(), &p.info);
    if (j.done) {
      try {
        j.done(std::move(result), p.failure);
      } catch (const std::exception& e) {
        note_callback_error(e.what());
      } catch (...) {
        note_callback_error("unknown exception");
      }
    } else if (p.failure) {
      j.promise.set_exception(p.failure);
    } else {
      j.promise.set_value(std::move(result));
    }
  }

  void note_callback_error(const std::string& what) {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    ++stats_.callback_errors;
    stats_.last_callback_error = what;
  }

  /// DESIGN steps 1-2 of one batch: check the ops, route the keys.
  void check_and_route(prepared& p) {
    const batch& b = p.j->ops;
    batch_result& result = p.result;
    stage_times& times = p.times;
    const std::size_t n = b.size();
    auto t0 = clock_type::now();
    op_result_vector& results = result.mutable_results();
    results.resize(n);
    std::vector<op_type>& types = result.mutable_types();
    types.resize(n);
    device::pinned_array<key_type>& keys = p.space->keys;
    keys.resize(n);
    const op* ops = b.ops().data();
    // Checks in parallel; the (rare) invalid ops are collected, then sorted.
    tbb::enumerable_thread_specific<std::vector<std::pair<std::size_t, std::string>>> bad;
    tbb::enumerable_thread_specific<std::array<std::uint64_t, op_type_count>> type_counts(
        std::array<std::uint64_t, op_type_count>{});
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 4096), [&](const tbb::blocked_range<std::size_t>& r) {
      std::array<std::uint64_t, op_type_count>& counts = type_counts.local();
      for (std::size_t i = r.begin(); i < r.end(); ++i) {
        const op& o = ops[i];
        types[i] = o.type;
        if (static_cast<std::size_t>(o.type) < op_type_count) ++counts[static_cast<std::size_t>(o.type)];
        keys[i] = o.key;
        results[i] = op_result{o.key, 0, 0, op_status::ok, false};
        if (o.type == op_type::scan || o.type == op_type::count) {
          if (o.key > o.arg) {
            bad.local().emplace_back(i, op_text(i, o) + ": lo " + std::to_string(o.key) + " > hi " +
                                            std::to_string(o.arg));
          } else if (o.type == op_type::scan && o.limit > max_scan_limit) {
            bad.local().emplace_back(i, op_text(i, o) + ": limit " + std::to_string(o.limit) +
                                            " exceeds max_scan_limit " + std::to_string(max_scan_limit));
          }
        } else if (o.type > op_type::count) {
          bad.local().emplace_back(i, op_text(i, o) + ": unknown op type " + std::to_string(static_cast<int>(o.type)));
        }
      }
    });
    for (const auto& counts : type_counts) {
      for (std::size_t t = 0; t < op_type_count; ++t) p.info.ops_by_type[t] += counts[t];
    }
    p.info.typed = true;
    std::vector<std::pair<std::size_t, std::string>> errors;
    for (auto& v : bad) errors.insert(errors.end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
    std::sort(errors.begin(), errors.end());
    for (auto& [i, message] : errors) invalidate(result, i, std::move(message));
    times.validate = seconds_since(t0);
    if (n == 0) return;

    t0 = clock_type::now();
    route(p);
    times.route = seconds_since(t0);
  }

  /// DESIGN steps 3-7: leaf phase, key count, inner sync.
  void run_leaves(prepared& p, std::uint64_t& split_count) {
    const op* ops = p.j->ops.ops().data();
    const std::size_t n = p.j->ops.size();
    batch_result& result = p.result;
    stage_times& times = p.times;
    if (n == 0) return;
    const host::routed_batch& routes = p.space->routes;
    const host::route_groups groups{routes.positions.data(), routes.group_begin.data(), routes.group_leaf.data(),
                                    routes.group_count()};
    std::vector<host::split_record> splits;
    host::leaf_phase_times lt;
    host::run_leaf_phase(store_, ops, n, groups, result, splits, lt, leaf_ws_);
    times.order = lt.order;
    times.read = lt.read;
    times.leaf = lt.leaf;
    times.complete = lt.complete;

    // Keys held: every put or insert that found nothing added one, every
    // erase that found its key removed one.
    const op_result_vector& res = result.mutable_results();
    const std::int64_t delta = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, n, 4096), std::int64_t{0},
        [&](const tbb::blocked_range<std::size_t>& r, std::int64_t d) {
          for (std::size_t i = r.begin(); i < r.end(); ++i) {
            if (res[i].status != op_status::ok) continue;
            const op_type t = ops[i].type;
            if ((t == op_type::put || t == op_type::insert) && !res[i].found) ++d;
            if (t == op_type::erase && res[i].found) --d;
          }
          return d;
        },
        std::plus<std::int64_t>());
    keys_.store(static_cast<std::size_t>(static_cast<std::int64_t>(keys_.load()) + delta), std::memory_order_release);

    auto t0 = clock_type::now();
    split_count = splits.size();
    if (!splits.empty()) inner_sync(splits);
    times.sync = seconds_since(t0);
    if (cfg_.verify_each_batch) verify_all();
  }

  /// DESIGN step 2: share s of the keys (the first s * n) routes on the
  /// GPU while the CPU workers route the rest, both on the same layout
  /// version; the two groupings are merged by leaf ordinal. A GPU failure
  /// re-routes the GPU's share on the CPU.
  void route(prepared& p) {
    route_space& sp = *p.space;
    route_report& info = p.info;
    const device::pinned_array<key_type>& keys = sp.keys;
    const std::size_t n = keys.size();
    double share = auto_share_.load() ? policy_.share() : fixed_share_.load();
    // Held until the GPU route has finished: no upload may switch the
    // router's version between reading it here and the route using it.
    std::unique_lock<std::mutex> turn(gpu_turn_, std::defer_lock);
    std::shared_ptr<const inner_layout> on_gpu;
    if (gpu_ && !degraded_.load() && n >= cfg_.min_gpu_batch && share > 0) {
      turn.lock();
      on_gpu = gpu_layout_snapshot();
    }
    if (!on_gpu) share = 0;
    const std::size_t m = std::min(n, static_cast<std::size_t>(std::llround(share * static_cast<double>(n))));
    if (m == 0) {
      const auto t0 = clock_type::now();
      host::route_cpu(p.latest->view(), keys.data(), n, sp.routes);
      info.cpu_seconds = seconds_since(t0);
      info.cpu_keys = n;
      return;
    }
    const inner_layout& version = *on_gpu;  // both sides route on it
    sp.gpu_positions.resize(m);
    sp.gpu_ordinals.resize(m);
    std::future<double> gpu_side = std::async(std::launch::async, [&] {
      const auto t0 = clock_type::now();
      gpu_->route(keys.data(), m, sp.gpu_positions.data(), sp.gpu_ordinals.data(), &info.gpu);
      return seconds_since(t0);
    });
    const auto t0 = clock_type::now();
    host::route_cpu(version.view(), keys.data() + m, n - m, sp.cpu);
    info.cpu_seconds = seconds_since(t0);
    info.cpu_keys = n - m;
    try {
      info.gpu_seconds = gpu_side.get();
      info.gpu_keys = m;
      consecutive_failures_.store(0);
    } catch (const std::exception&) {
      note_gpu_failure();
      info.gpu_failed = true;
      host::route_cpu(version.view(), keys.data(), m, sp.fallback);
      flatten(sp.fallback, sp.gpu_positions, sp.gpu_ordinals);
      info.cpu_keys = n;
    }
    if (!info.gpu_failed) policy_.observe(info.gpu_keys, info.gpu_seconds, info.cpu_keys, info.cpu_seconds);
    info.gpu_rate = policy_.gpu_rate();
    info.cpu_rate = policy_.cpu_rate();
    merge_routes(version, m, sp);
  }

  /// (position, ordinal) pairs grouped by ordinal, from a routed batch.
  static void flatten(const host::routed_batch& r, device::pinned_array<std::uint32_t>& positions,
                      device::pinned_array<std::uint32_t>& ordinals) {
    positions.resize(r.size());
    ordinals.resize(r.size());
    std::copy(r.positions.begin(), r.positions.end(), positions.data());
    for (std::size_t g = 0; g < r.group_count(); ++g) {
      std::fill(ordinals.data() + r.group_begin[g], ordinals.data() + r.group_begin[g + 1], r.group_ordinal[g]);
    }
  }

  /// sp.routes = the GPU's pairs (positions 0..m-1) and the CPU's groups
  /// (positions m..n-1), one group per ordinal, in ordinal order.
  void merge_routes(const inner_layout& version, std::size_t m, route_space& sp) {
    const std::vector<leaf_id>& leaf_ids = version.leaf_ids();
    host::routed_batch& out = sp.routes;
    const host::routed_batch& cpu = sp.cpu;
    const device::pinned_array<std::uint32_t>& gpu_ordinals = sp.gpu_ordinals;
    const device::pinned_array<std::uint32_t>& gpu_positions = sp.gpu_positions;
    out.positions.resize(m + cpu.size());
    out.group_begin.clear();
    out.group_ordinal.clear();
    out.group_leaf.clear();
    const auto offset = static_cast<std::uint32_t>(m);
    std::size_t i = 0, g = 0, o = 0;
    const std::size_t groups = cpu.group_count();
    constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
    while (i < m || g < groups) {
      const std::uint32_t ord = std::min(i < m ? gpu_ordinals[i] : none, g < groups ? cpu.group_ordinal[g] : none);
      if (ord >= leaf_ids.size()) {
        throw error("tandem: a route names leaf ordinal " + std::to_string(ord) + " of a layout with " +
                    std::to_string(leaf_ids.size()) + " leaves");
      }
      out.group_begin.push_back(static_cast<std::uint32_t>(o));
      out.group_ordinal.push_back(ord);
      out.group_leaf.push_back(leaf_ids[ord]);
      for (; i < m && gpu_ordinals[i] == ord; ++i) out.positions[o++] = gpu_positions[i];
      if (g < groups && cpu.group_ordinal[g] == ord) {
        for (std::uint32_t k = cpu.group_begin[g]; k < cpu.group_begin[g + 1]; ++k) {
          out.positions[o++] = cpu.positions[k] + offset;
        }
        ++g;
      }
    }
    out.group_begin.push_back(static_cast<std::uint32_t>(o));
  }

  static void invalidate(batch_result& result, std::size_t i, std::string message) {
    result.mutable_results()[i].status = op_status::invalid;
    result.add_error(i, std::move(message));
  }

  /// DESIGN step 6: merge the new separators into the leaf table, rebuild the
  /// inner layout (linear in the number of leaves).
  void inner_sync(std::vector<host::split_record>& splits) {
    std::sort(splits.begin(), splits.end(),
              [](const host::split_record& a, const host::split_record& b) { return a.separator < b.separator; });
    std::vector<key_type> low(table_.low_keys.size() + splits.size());
    std::vector<leaf_id> ids(low.size());
    std::size_t i = 0, s = 0, o = 0;
    while (i < table_.low_keys.size() || s < splits.size()) {
      if (s == splits.size() || (i < table_.low_keys.size() && table_.low_keys[i] < splits[s].separator)) {
        low[o] = table_.low_keys[i];
        ids[o++] = table_.ids[i++];
      } else {
        low[o] = splits[s].separator;
        ids[o++] = splits[s++].right;
      }
    }
    table_.low_keys = std::move(low);
    table_.ids = std::move(ids);
    set_layout(std::make_shared<const inner_layout>(
        inner_layout::build(table_.low_keys.data(), table_.ids.data(), table_.size(), cfg_.fanout)));
    sync_gpu();
    ++inner_syncs_;
  }

  void rebuild_table_from_store() {
    table_ = store_.table();
    set_layout(std::make_shared<const inner_layout>(
        inner_layout::build(table_.low_keys.data(), table_.ids.data(), table_.size(), cfg_.fanout)));
    sync_gpu();
    keys_.store(store_.size(), std::memory_order_release);
  }

  void load(std::vector<entry>& pairs) {
    // Sort by key; for a key given twice the later pair wins (stable order by index).
    std::vector<std::pair<key_type, std::size_t>> order(pairs.size());
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, pairs.size()), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t i = r.begin(); i < r.end(); ++i) order[i] = {pairs[i].key, i};
    });
    tbb::parallel_sort(order.begin(), order.end());
    std::vector<key_type> keys;
    std::vector<value_type> values;
    keys.reserve(order.size());
    values.reserve(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (i + 1 < order.size() && order[i + 1].first == order[i].first) continue;  // a later duplicate wins
      keys.push_back(order[i].first);
      values.push_back(pairs[order[i].second].value);
    }
    std::vector<entry>().swap(pairs);
    store_ = host::leaf_store::bulk_load(keys.data(), values.data(), keys.size(), cfg_.leaf_fill);
    rebuild_table_from_store();
    ++inner_syncs_;
  }

 public:
  void verify_all() {
    store_.verify();
    const host::leaf_table walked = store_.table();
    if (walked.low_keys != table_.low_keys || walked.ids != table_.ids) {
      throw invariant_error("index: the leaf table differs from the chain of leaves");
    }
    layout_->verify(table_.low_keys.data(), table_.ids.data(), table_.size());
    if (store_.size() != keys_.load()) {
      throw invariant_error("index: key count " + std::to_string(keys_.load()) + " != " +
                            std::to_string(store_.size()) + " keys in the leaves");
    }
  }

 private:
  void publish_stats(const stage_times& t, std::size_t n, const batch* b = nullptr, bool failed = false,
                     std::uint64_t splits = 0, std::size_t invalid = 0, const route_report* r = nullptr) {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    if (r) {
      stats_.gpu_share = n ? static_cast<double>(r->gpu_keys) / static_cast<double>(n) : 0;
      stats_.gpu_keys += r->gpu_keys;
      stats_.cpu_keys += r->cpu_keys;
      stats_.gpu_upload = r->gpu.upload;
      stats_.gpu_sort = r->gpu.sort;
      stats_.gpu_kernel = r->gpu.kernel;
      stats_.gpu_download = r->gpu.download;
      stats_.gpu_route = r->gpu_seconds;
      stats_.cpu_route = r->cpu_seconds;
    }
    stats_.gpu_share_auto = auto_share_.load();
    stats_.gpu_degraded = degraded_.load();
    stats_.gpu_failures = gpu_failures_;
    stats_.gpu_group_sizes = group_sizes_;
    if (r && (r->gpu_rate > 0 || r->cpu_rate > 0)) {
      stats_.gpu_rate = r->gpu_rate;
      stats_.cpu_rate = r->cpu_rate;
    }
    if (b) {
      ++stats_.batches;
      stats_.failed_batches += failed;
      stats_.ops += n;
      stats_.invalid_ops += invalid;
      if (r && r->typed) {
        for (std::size_t type = 0; type < op_type_count; ++type) stats_.ops_by_type[type] += r->ops_by_type[type];
      } else {  // the batch failed before its ops were checked
        for (const op& o : b->ops()) {
          const auto type = static_cast<std::size_t>(o.type);
          if (type < op_type_count) ++stats_.ops_by_type[type];
        }
      }
      stats_.splits += splits;
      stats_.total += t;
      stats_.last = t;
      stats_.last_batch_ops = n;
    }
    stats_.inner_syncs = inner_syncs_;
    stats_.keys = keys_.load(std::memory_order_acquire);
    stats_.leaves = table_.size();
    stats_.inner_height = layout_->height();
    stats_.inner_bytes = layout_->bytes();
    stats_.threads = threads_;
    stats_.device = degraded_.load() ? device_ + " [degraded: routing on the CPU]" : device_;
  }

  config cfg_;
  tbb::task_arena arena_;
  std::size_t threads_ = 0;
  std::string device_;

  // Owned by the dispatcher thread.
  host::leaf_store store_;
  host::leaf_table table_;
  std::shared_ptr<const inner_layout> layout_;      // latest version
  std::shared_ptr<const inner_layout> gpu_layout_;  // version on the GPU
  host::leaf_phase_workspace leaf_ws_;  // leaf phases run one at a time
  mutable std::mutex layout_mutex_;      // guards layout_ and gpu_layout_ (the pointers)
  std::mutex gpu_turn_;                  // a GPU route and an upload never overlap
  route_space spaces_[2];               // one batch routes while the previous runs its leaves
  int next_space_ = 0;
  std::unique_ptr<device::gpu_router> gpu_;
  scheduler::share_policy policy_;      // used by one route at a time
  std::atomic<int> consecutive_failures_{0};
  std::atomic<bool> degraded_{false};
  std::atomic<std::uint64_t> gpu_failures_{0};
  std::string group_sizes_;
  std::atomic<bool> auto_share_{true};
  std::atomic<double> fixed_share_{0.0};
  std::uint64_t inner_syncs_ = 0;
  std::uint64_t sequence_ = 0;  // batches run so far

  std::atomic<std::size_t> keys_{0};
  mutable std::mutex stats_mutex_;
  tandem::stats stats_;

  boost::lockfree::queue<job*> queue_;
  std::atomic<std::size_t> queued_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread dispatcher_;
};

// ---- public API -------------------------------------------------------------

index::index(const config& cfg) : impl_(std::make_unique<impl>(cfg)) {}
index::~index() = default;

void index::load(const key_type* keys, const value_type* values, std::size_t n) {
  std::vector<entry> pairs(n);
  for (std::size_t i = 0; i < n; ++i) pairs[i] = {keys[i], values[i]};
  auto j = std::make_unique<job>();
  j->type = job::kind::load;
  j->pairs = std::move(pairs);
  std::future<void> done = j->finished.get_future();
  impl_->enqueue(j.release());
  done.get();
}

void index::load(const std::vector<entry>& entries) {
  auto j = std::make_unique<job>();
  j->type = job::kind::load;
  j->pairs = entries;
  std::future<void> done = j->finished.get_future();
  impl_->enqueue(j.release());
  done.get();
}

std::future<batch_result> index::submit(batch b) {
  if (b.size() >= std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error("tandem::index::submit: a batch holds at most 2^32 - 2 ops, got " +
                            std::to_string(b.size()));
  }
  auto j = std::make_unique<job>();
  j->ops = std::move(b);
  std::future<batch_result> f = j->promise.get_future();
  impl_->enqueue(j.release());
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
  impl_->enqueue(j.release());
}

batch_result index::execute(batch b) { return submit(std::move(b)).get(); }

std::size_t index::size() const { return impl_->size(); }

void index::set_gpu_share(double share) { impl_->set_share(share); }
void index::set_gpu_share(auto_share_t) { impl_->set_auto_share(); }

bool detail::index_access::inject_gpu_fault(tandem::index& idx, device::stage s, int count) {
  return idx.impl_->inject_gpu_fault(s, count);
}

tandem::stats index::stats() const { return impl_->snapshot(); }

void index::verify() {
  auto j = std::make_unique<job>();
  j->type = job::kind::barrier;
  impl* self = impl_.get();
  j->barrier_work = [self] { self->verify_all(); };
  std::future<void> done = j->finished.get_future();
  impl_->enqueue(j.release());
  done.get();
}

}  // namespace tandem
