// tandem::config (every field, enums as ints: the package maps their
// names) and tandem::stats as a dict for Python.
#include "binding.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace tandem_py {

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
  TANDEM_FIELD(guides_compact);
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
  TANDEM_FIELD(point_writes);
  TANDEM_FIELD(last_batch_ops);
  TANDEM_FIELD(cache);
  TANDEM_FIELD(cache_bytes);
  TANDEM_FIELD(cache_capacity_bytes);
  TANDEM_FIELD(cache_slots);
  TANDEM_FIELD(cached_leaves);
  TANDEM_FIELD(cache_lookups);
  TANDEM_FIELD(cache_hits);
  TANDEM_FIELD(cache_last_lookups);
  TANDEM_FIELD(cache_last_hits);
  TANDEM_FIELD(cache_held);
  TANDEM_FIELD(cache_copies);
  TANDEM_FIELD(cache_synced_bytes);
  TANDEM_FIELD(cache_last_synced_bytes);
  TANDEM_FIELD(cache_evictions);
  TANDEM_FIELD(cache_claims);
  TANDEM_FIELD(cache_patched);
#undef TANDEM_FIELD
  nb::dict by_type;
  for (std::size_t t = 0; t < tandem::op_type_count; ++t) {
    by_type[tandem::to_string(static_cast<tandem::op_type>(t))] = s.ops_by_type[t];
  }
  d["ops_by_type"] = by_type;
  const auto stages = [](const tandem::stage_times& t) {
    nb::dict x;
    tandem::stage_times::for_each_field([&](const char* name, auto field) { x[name] = t.*field; });
    return x;
  };
  d["stage_seconds"] = stages(s.total);
  nb::dict bytes;
  tandem::stage_bytes::for_each_field([&](const char* name, auto field) { bytes[name] = s.total_bytes.*field; });
  d["stage_bytes"] = bytes;
  d["last_stage_seconds"] = stages(s.last);
  d["queue_wait_p50_us"] = s.queue_wait.percentile_us(50);
  d["queue_wait_p99_us"] = s.queue_wait.percentile_us(99);
  d["execution_p50_us"] = s.execution.percentile_us(50);
  d["execution_p99_us"] = s.execution.percentile_us(99);
  return d;
}

namespace {

// An enum field of tandem::config as an int (the package maps the names).
template <class E>
void def_enum(nb::class_<tandem::config>& cls, const char* name, E tandem::config::*field) {
  cls.def_prop_rw(
      name, [field](const tandem::config& c) { return static_cast<int>(c.*field); },
      [field](tandem::config& c, int v) { c.*field = static_cast<E>(v); });
}

}  // namespace

void bind_config(nb::module_& m) {
  nb::class_<tandem::config> cls(m, "Config", "tandem::config: every field, with its C++ default.");
  cls.def(nb::init<>())
      .def("validate", &tandem::config::validate,
           "Checks every field against its range (as an index does when it is made); raises ValueError naming "
           "the first one out of range.")
      .def_rw("threads", &tandem::config::threads)
      .def_rw("fanout", &tandem::config::fanout)
      .def_rw("leaf_fill", &tandem::config::leaf_fill)
      .def_rw("gpu_device", &tandem::config::gpu_device)
      .def_rw("gpu_devices", &tandem::config::gpu_devices)
      .def_rw("min_gpu_batch", &tandem::config::min_gpu_batch)
      .def_rw("small_batch_ops", &tandem::config::small_batch_ops)
      .def_rw("direct_get_ops", &tandem::config::direct_get_ops)
      .def_rw("caller_runs", &tandem::config::caller_runs)
      .def_rw("group_commit_ops", &tandem::config::group_commit_ops)
      .def_rw("group_commit_output_bytes", &tandem::config::group_commit_output_bytes)
      .def_rw("dispatcher_spin_us", &tandem::config::dispatcher_spin_us)
      .def_rw("gpu_share", &tandem::config::gpu_share)
      .def_rw("gpu_scatter", &tandem::config::gpu_scatter)
      .def_rw("gpu_leaf_hints", &tandem::config::gpu_leaf_hints)
      .def_rw("max_gpu_route_keys", &tandem::config::max_gpu_route_keys)
      .def_rw("gpu_cache_bytes", &tandem::config::gpu_cache_bytes)
      .def_rw("gpu_cache_writes", &tandem::config::gpu_cache_writes)
      .def_rw("max_gpu_bytes", &tandem::config::max_gpu_bytes)
      .def_rw("gpu_failure_limit", &tandem::config::gpu_failure_limit)
      .def_rw("max_batch_output_bytes", &tandem::config::max_batch_output_bytes)
      .def_rw("verify_each_batch", &tandem::config::verify_each_batch)
      .def_rw("storage_dir", &tandem::config::storage_dir)
      .def_rw("log_group_us", &tandem::config::log_group_us);
  def_enum(cls, "device", &tandem::config::device);
  def_enum(cls, "gpu_order", &tandem::config::gpu_order);
  def_enum(cls, "log_sync_policy", &tandem::config::log_sync_policy);
}

}  // namespace tandem_py
