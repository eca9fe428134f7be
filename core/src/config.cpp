// config::validate: every field against the range its comment in
// config.hpp states, as an index is made (and from the Python package,
// before any shard of a ShardedIndex starts).
#include <tandem/config.hpp>
#include <tandem/core/types.hpp>

#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace tandem {

void config::validate() const {
  const config& c = *this;
  // Each field's range is stated in its comment in config.hpp; a value
  // outside it fails naming the field, the range and the value given.
  const auto fail = [](const char* field, const char* range, const std::string& got) {
    throw std::invalid_argument(std::string("tandem::config.") + field + " must be " + range + ", got " + got);
  };
  // The shortest text that reads back as the same double: 0.002 rather
  // than 0.002000, and a value just past a bound does not print as it.
  const auto real = [](double v) {
    std::array<char, 32> text{};
    return std::string(text.data(), std::to_chars(text.data(), text.data() + text.size(), v).ptr);
  };
  // index::submit's bound on a batch's ops (positions are 32-bit).
  constexpr std::size_t max_batch_ops = std::size_t{std::numeric_limits<std::uint32_t>::max()} - 1;
  constexpr std::size_t two_to_32 = std::size_t{1} << 32;

  if (c.threads > 4096) fail("threads", "0 or in [1, 4096]", std::to_string(c.threads));
  if (c.fanout != 16 && c.fanout != 32 && c.fanout != 64) fail("fanout", "16, 32 or 64", std::to_string(c.fanout));
  if (!(c.leaf_fill >= 0.0625 && c.leaf_fill <= 1.0)) fail("leaf_fill", "in [0.0625, 1]", real(c.leaf_fill));
  if (static_cast<unsigned>(c.device) > static_cast<unsigned>(device_kind::gpu)) {
    fail("device", "automatic, cpu or gpu", "the integer " + std::to_string(static_cast<unsigned>(c.device)));
  }
  if (c.gpu_device < 0 || c.gpu_device > 1023) fail("gpu_device", "in [0, 1023]", std::to_string(c.gpu_device));
  if (c.gpu_devices.size() > 16) fail("gpu_devices", "at most 16 ordinals", std::to_string(c.gpu_devices.size()));
  for (std::size_t i = 0; i < c.gpu_devices.size(); ++i) {
    const int d = c.gpu_devices[i];
    if (d < 0 || d > 1023) fail("gpu_devices", "ordinals in [0, 1023]", std::to_string(d));
    for (std::size_t j = 0; j < i; ++j) {
      if (c.gpu_devices[j] == d) fail("gpu_devices", "ordinals none of which is named twice", std::to_string(d) + " twice");
    }
  }
  if (c.small_batch_ops > two_to_32) {
    fail("small_batch_ops", "in [0, 2^32 = 4294967296]", std::to_string(c.small_batch_ops));
  }
  if (c.group_commit_ops > max_batch_ops) {
    fail("group_commit_ops", "in [0, 2^32 - 2 = 4294967294] (a batch's most ops)",
         std::to_string(c.group_commit_ops));
  }
  if (c.dispatcher_spin_us > 1'000'000) {
    fail("dispatcher_spin_us", "in [0, 1000000] (one second)", std::to_string(c.dispatcher_spin_us));
  }
  if (std::isnan(c.gpu_share) || c.gpu_share > 1.0) {
    fail("gpu_share", "in [0, 1] (or negative for automatic)", real(c.gpu_share));
  }
  if (static_cast<unsigned>(c.gpu_order) > static_cast<unsigned>(gpu_query_order::none)) {
    fail("gpu_order", "full_sort, partial_sort or none",
         "the integer " + std::to_string(static_cast<unsigned>(c.gpu_order)));
  }
  if (c.max_gpu_route_keys != 0 && (c.max_gpu_route_keys < 256 || c.max_gpu_route_keys > two_to_32)) {
    fail("max_gpu_route_keys", "0 (no bound) or in [256, 2^32 = 4294967296]", std::to_string(c.max_gpu_route_keys));
  }
  if (c.max_gpu_bytes != 0 && c.max_gpu_bytes < (std::size_t{1} << 20)) {
    fail("max_gpu_bytes", "0 (no bound) or at least 2^20 = 1048576 (1 MiB)", std::to_string(c.max_gpu_bytes));
  }
  if (c.gpu_failure_limit < 1) fail("gpu_failure_limit", "at least 1", std::to_string(c.gpu_failure_limit));
  if (c.max_batch_output_bytes != 0 && c.max_batch_output_bytes < sizeof(entry)) {
    fail("max_batch_output_bytes", "0 (no cap) or at least 16 (one scan entry)",
         std::to_string(c.max_batch_output_bytes));
  }
  if (static_cast<unsigned>(c.log_sync_policy) > static_cast<unsigned>(log_sync::batch)) {
    fail("log_sync_policy", "none, group or batch",
         "the integer " + std::to_string(static_cast<unsigned>(c.log_sync_policy)));
  }
  if (c.log_group_us > 10'000'000) fail("log_group_us", "in [0, 10000000] (ten seconds)", std::to_string(c.log_group_us));
  // Any value: min_gpu_batch, direct_get_ops, group_commit_output_bytes,
  // storage_dir and the booleans.
}

}  // namespace tandem
