// The stats snapshot (index_impl.hpp): updated by the dispatcher after each
// batch, read by any thread through index::stats().
#include "index_impl.hpp"

namespace tandem {

void index::impl::publish_stats(const prepared* p, bool failed, std::uint64_t splits) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  if (p) {
    const route_report& r = p->info;
    const std::size_t n = p->n;
    stats_.gpu_share = n ? static_cast<double>(r.gpu_keys) / static_cast<double>(n) : 0;
    stats_.gpu_keys += r.gpu_keys;
    stats_.cpu_keys += r.cpu_keys;
    stats_.gpu_upload = r.gpu.upload;
    stats_.gpu_sort = r.gpu.sort;
    stats_.gpu_kernel = r.gpu.kernel;
    stats_.gpu_download = r.gpu.download;
    stats_.gpu_route = r.gpu_seconds;
    stats_.cpu_route = r.cpu_seconds;
    if (r.gpu_rate > 0 || r.cpu_rate > 0) {
      stats_.gpu_rate = r.gpu_rate;
      stats_.cpu_rate = r.cpu_rate;
    }
    // A group-commit job counts as the batches its submitters built.
    const std::vector<job*>& members = p->j->members;
    const std::uint64_t batches = members.empty() ? 1 : members.size();
    stats_.batches += batches;
    stats_.grouped_batches += members.size();
    stats_.failed_batches += failed ? batches : 0;
    stats_.ops += n;
    stats_.invalid_ops += failed ? 0 : p->errors.size();  // invalid and output_limit
    for (std::size_t type = 0; type < op_type_count; ++type) stats_.ops_by_type[type] += r.ops_by_type[type];
    if (!failed && n != 0) {
      (p->direct ? stats_.direct_batches : p->gpu_scatter ? stats_.gpu_scatters : stats_.host_scatters) += 1;
    }
    stats_.splits += splits;
    stats_.total += p->times;
    stats_.total_bytes += p->bytes;
    stats_.leaf_line_ops += p->lines.ops;
    stats_.leaf_lines += p->lines.lines;
    stats_.hinted_ops += p->hinted_ops;
    stats_.stale_hints += p->stale_hints;
    stats_.last = p->times;
    stats_.last_batch_ops = n;
    const double execution = seconds_since(p->taken);
    if (members.empty()) {
      stats_.queue_wait.add(std::chrono::duration<double>(p->taken - p->j->submitted).count());
      stats_.execution.add(execution);
    }
    for (const job* m : members) {
      stats_.queue_wait.add(std::chrono::duration<double>(p->taken - m->submitted).count());
      stats_.execution.add(execution);
    }
  }
  stats_.gpu_share_auto = auto_share_.load();
  stats_.gpu_degraded = degraded_.load();
  stats_.gpu_failures = gpu_failures_;
  stats_.gpu_group_sizes = group_sizes_;
  stats_.inner_syncs = inner_syncs_;
  stats_.guide_refreshes = guide_refreshes_;
  stats_.last_load = last_load_;
  stats_.keys = keys_.load(std::memory_order_acquire);
  stats_.leaves = table_.size();
  stats_.dead_leaves = store_.dead_leaves();
  stats_.merges = store_.merges() + merges_before_;
  stats_.compactions = compactions_;
  stats_.log_bytes = log_bytes_.load();
  stats_.log_records = log_records_.load();
  stats_.log_syncs = log_syncs_.load();
  stats_.checkpoints = checkpoints_.load();
  stats_.replayed_batches = replayed_batches_;
  stats_.recovery_seconds = recovery_seconds_;
  stats_.log_error = log_failed_.load(std::memory_order_acquire) ? log_failure() : std::string();
  stats_.inner_height = layout_->height();
  stats_.inner_bytes = layout_->bytes();
  stats_.leaf_bytes = store_.leaf_count() * sizeof(host::leaf);
  stats_.guide_bytes = guides_.capacity() * sizeof(leaf_guide) + compact_guides_.capacity() * sizeof(compact_guide);
  stats_.host_bytes = stats_.leaf_bytes + stats_.inner_bytes + layout_->radix_bytes() + stats_.guide_bytes;
  stats_.gpu_bytes = gpu_ ? gpu_->device_bytes() : 0;
  if (cache_) {
    const host::leaf_cache_counters c = cache_->counters();
    const int off = copies_off_.load();
    if (off != 1) stats_.cache = standin_ != nullptr ? "host" : off == 2 ? "off (auto: the leaves do not fit)" : "gpu";
    stats_.cache_bytes = c.target_bytes;
    stats_.cache_capacity_bytes = c.capacity_bytes;
    stats_.cache_slots = c.slots;
    stats_.cached_leaves = c.cached;
    stats_.cache_lookups = copy_lookups_.load();
    stats_.cache_hits = copy_hits_.load();
    stats_.cache_last_lookups = last_copy_lookups_.load();
    stats_.cache_last_hits = last_copy_hits_.load();
    stats_.cache_held = copies_rate_.load() / 1000.0;
    stats_.cache_copies = c.copies;
    stats_.cache_synced_bytes = c.synced_bytes;
    stats_.cache_last_synced_bytes = last_synced_bytes_.load();
    stats_.cache_evictions = c.evictions;
    stats_.cache_claims = c.claims;
    stats_.cache_patched = c.patched;
  }
  stats_.gpu_budget_bytes = cfg_.max_gpu_bytes;
  stats_.gpu_route_keys = route_keys_.load();
  stats_.guides_dropped = guides_dropped_.load();
  stats_.guides_compact = guide_kind_.load() == guide_kind::compact;  // chosen only with hints on, never dropped
  stats_.threads = threads_;
  if (over_budget_.load()) {
    stats_.device = "cpu (config.max_gpu_bytes = " + std::to_string(cfg_.max_gpu_bytes) +
                    " cannot hold the GPU's inner layout (" + std::to_string(budget_layout_bytes_.load()) +
                    " bytes for two versions) and routes of " + std::to_string(min_budget_route_keys) + " keys; " +
                    device_ + " unused)";
  } else {
    stats_.device = degraded_.load() ? device_ + " [degraded: routing on the CPU]" : device_;
  }
  for (const auto& peer : peers_) {
    if (!peer->off.load()) continue;
    stats_.device += " [gpu " + std::to_string(peer->router->device_ordinal()) + " dropped: " + peer->why + "]";
  }
}

tandem::stats index::impl::snapshot() const {
  tandem::stats s;
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    s = stats_;
  }
  // What readers answered on their callers' threads, counted in their slots.
  gate_.for_each_slot([&](const scheduler::reader_gate::slot& slot) {
    const std::uint64_t batches = slot.batches.load(std::memory_order_relaxed);
    s.batches += batches;
    s.caller_batches += batches;
    s.direct_batches += batches;
    s.point_reads += scheduler::reader_gate::point_reads(slot);
    s.point_writes += slot.point_writes.load(std::memory_order_relaxed);
    for (std::size_t t = 0; t < op_type_count; ++t) {
      const std::uint64_t ops = slot.ops[t].load(std::memory_order_relaxed);
      s.ops_by_type[t] += ops;
      s.ops += ops;
    }
  });
  return s;
}

}  // namespace tandem
