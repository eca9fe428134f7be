// Steps 3 and 5 of a batch (index_impl.hpp): the leaf phase on the routed
// batch, the key count, inner sync after splits, then the answers back to
// batch order: on the GPU (sorted answers up, scatter kernel, batch-order
// answers down into the result's pinned columns) for GPU-routed batches,
// else on the host in parallel; lower_bound keys are written by the host
// (scan entries went straight to the result in the leaf phase). Runs on the
// dispatcher thread, in the arena.
#include "index_impl.hpp"

#include <tandem/host/answer_scatter.hpp>

namespace tandem {

void index::impl::run_leaves(prepared& p, std::uint64_t& split_count) {
  const batch& b = p.j->ops;
  const std::size_t n = b.size();
  if (n == 0) return;
  route_space& sp = *p.space;
  host::leaf_phase_input in;
  in.routes = &p.routes;
  in.n = n;
  in.leaf_ids = p.version->leaf_ids().data();
  in.ops = &b;
  in.scan_slot = sp.scan_slot.data();
  in.status = p.columns->status;
  in.gets_only = p.gets_only;
  const host::sorted_answers sorted{sp.answers.get(n), sp.found.get(n), p.columns.get()};
  host::leaf_phase_report& lr = leaf_report_;
  host::run_leaf_phase(store_, in, sorted, lr, leaf_ws_);
  p.times.order = lr.order;
  p.times.read = lr.read;
  p.times.leaf = lr.leaf;
  p.bytes.leaf = lr.bytes;
  p.bytes.read = lr.read_bytes;
  keys_.store(static_cast<std::size_t>(static_cast<std::int64_t>(keys_.load()) + lr.key_delta),
              std::memory_order_release);

  auto t0 = clock_type::now();
  split_count = lr.splits.size();
  if (!lr.splits.empty()) inner_sync(lr.splits);
  p.times.sync = seconds_since(t0);

  t0 = clock_type::now();
  tandem::detail::answer_columns& cols = *p.columns;
  p.gpu_scatter = cfg_.gpu_scatter && p.info.gpu_keys != 0 && gpu_ && !degraded_.load() &&
                  (cfg_.max_gpu_route_keys == 0 || n <= cfg_.max_gpu_route_keys);
  if (!p.gpu_scatter) host::scatter_answers(p.routes.positions, sorted.values, sorted.found, n, cols.values, cols.found);
  p.result_keys = p.j->ops.take_keys();
  p.bytes.complete = n * (sizeof(std::uint32_t) + 2 * (sizeof(value_type) + 1)) +
                     host::write_lower_bound_keys(leaf_ws_, in, p.result_keys.data());
  p.times.complete = seconds_since(t0);
  {
    std::lock_guard<std::mutex> lock(policy_mutex_);
    policy_.observe_leaf(n, p.times.order + p.times.read + p.times.leaf + p.times.complete);
  }
  if (cfg_.verify_each_batch) verify_all();
}

void index::impl::scatter_on_gpu(prepared& p) {
  const auto t0 = clock_type::now();
  route_space& sp = *p.space;
  tandem::detail::answer_columns& cols = *p.columns;
  try {
    device::scatter_timing st;
    gpu_->scatter(p.routes.positions, sp.answers.data(), sp.found.data(), p.n, cols.values, cols.found, &st);
    p.bytes.pcie += st.bytes_up + st.bytes_down;
  } catch (const std::exception&) {
    note_gpu_failure();
    p.gpu_scatter = false;
    run_in_arena([&] {
      host::scatter_answers(p.routes.positions, sp.answers.data(), sp.found.data(), p.n, cols.values, cols.found);
    });
  }
  p.times.complete += seconds_since(t0);
}

}  // namespace tandem
