// Snapshots (index_impl.hpp): index::save writes the pairs, in key order,
// to a snapshot file (host/snapshot_file.hpp) on a thread of its own that
// counts as a reader, so that batches of gets go on beside it while a
// batch that writes waits for it; index::open reads and checks a snapshot
// on the caller's thread and loads its pairs as a queued load.
#include "index_impl.hpp"

#include <tandem/host/snapshot_file.hpp>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <numeric>
#include <utility>

namespace tandem {
namespace {

host::snapshot::geometry geometry_of(const config& cfg) {
  return {static_cast<std::uint32_t>(host::bpa::capacity), static_cast<std::uint32_t>(host::bpa::log_capacity),
          static_cast<std::uint32_t>(host::bpa::num_blocks), static_cast<std::uint32_t>(host::bpa::block_capacity),
          static_cast<std::uint32_t>(cfg.fanout)};
}

/// Pairs copied from the leaves per step of a save (and written while the
/// next step copies): 64 MiB.
constexpr std::size_t save_step_pairs = std::size_t{1} << 22;

}  // namespace

void index::impl::start_save(job* j) {
  // Every batch before the save has run its leaf phase, none after it has:
  // the leaves hold exactly the state the snapshot is of.
  if (saver_.joinable()) saver_.join();  // the previous save's thread, done reading
  host::leaf_table t = sync_pending_ ? store_.table() : table_;
  const std::uint64_t sequence = sequence_;
  readers_running_.fetch_add(1, std::memory_order_acq_rel);
  try {
    saver_ = std::thread([this, j, t = std::move(t), sequence] {
      try {
        write_snapshot(j->path, t.ids, sequence);
        j->finished.set_value();
      } catch (...) {
        j->finished.set_exception(std::current_exception());
      }
      delete j;
      readers_running_.fetch_sub(1, std::memory_order_acq_rel);  // the thread touches nothing after this
    });
  } catch (...) {
    readers_running_.fetch_sub(1, std::memory_order_acq_rel);
    throw;
  }
}

void index::impl::write_snapshot(const std::string& path, const std::vector<leaf_id>& ids, std::uint64_t sequence) {
  const std::size_t leaves = ids.size();
  std::vector<std::uint32_t> sizes(leaves);
  std::vector<key_type> keys;
  std::vector<value_type> values;
  arena_.execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, leaves, 1024), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t i = r.begin(); i < r.end(); ++i) sizes[i] = static_cast<std::uint32_t>(store_[ids[i]].data.size());
    });
  });
  const std::uint64_t pairs = std::accumulate(sizes.begin(), sizes.end(), std::uint64_t{0});
  host::snapshot::info header;
  header.pairs = pairs;
  header.sequence = sequence;
  header.geom = geometry_of(cfg_);
  host::snapshot::writer out(path, header);
  keys.resize(std::min<std::uint64_t>(pairs, save_step_pairs + host::bpa::capacity));
  values.resize(keys.size());
  std::vector<std::size_t> offset;
  for (std::size_t first = 0; first < leaves;) {
    // Leaves [first, last) fill at most the step's arrays.
    std::size_t last = first, n = 0;
    offset.clear();
    while (last < leaves && (n == 0 || n + sizes[last] <= keys.size())) {
      offset.push_back(n);
      n += sizes[last++];
    }
    arena_.execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(first, last, 64), [&](const tbb::blocked_range<std::size_t>& r) {
        entry buffer[host::bpa::capacity];
        for (std::size_t i = r.begin(); i < r.end(); ++i) {
          const host::bpa& data = store_[ids[i]].data;
          const std::size_t m = data.copy_ordered(min_key, sizes[i], buffer);
          const std::size_t at = offset[i - first];
          for (std::size_t k = 0; k < m; ++k) {
            keys[at + k] = buffer[k].key;
            values[at + k] = buffer[k].value;
          }
        }
      });
    });
    out.append(keys.data(), values.data(), n);
    first = last;
  }
  out.commit();
}

void index::impl::open_snapshot(const std::string& path) {
  const host::snapshot::info header = host::snapshot::read_info(path);
  scheduler::host_array<key_type> keys;
  scheduler::host_array<value_type> values;
  const std::size_t n = static_cast<std::size_t>(header.pairs);
  key_type* k = keys.get(n);
  value_type* v = values.get(n);
  (void)host::snapshot::read_into(path, k, v, n);
  load_input in{k, v, 1, n};
  in.sequence = header.sequence;
  load_and_wait(in);
}

}  // namespace tandem
