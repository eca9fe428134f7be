// gpu_router, the leaf copies (core/leaf_copy.hpp): route_cached (the route
// itself is gpu_route.cu's, in its cached mode), the pool and table in
// device memory, changes applied to them, and the hit counters that
// route_cached's lookups keep. Every call takes the route mutex: a change
// never overlaps a lookup. Design: gpu_router.hpp.
#include <tandem/device/gpu_router.hpp>

#include <tandem/device/detail/copy_kernels.cuh>
#include <tandem/device/detail/cuda_check.cuh>
#include <tandem/device/detail/router_state.cuh>

#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <cuda_runtime.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::device {

std::size_t gpu_router::route_cached(const key_type* keys, std::size_t n, value_type* values_out,
                                     std::uint8_t* found_out, routed_batch_view& out, route_timing* timing) {
  if (state_->options.order != aggregation::full) {
    throw std::logic_error("gpu_router::route_cached: needs aggregation::full");
  }
  if (n > 0 && found_out == nullptr) {
    throw std::invalid_argument("gpu_router::route_cached: null found_out for " + std::to_string(n) + " keys");
  }
  out.args = nullptr;
  out.types = nullptr;
  const detail::copy_answers answers{values_out, found_out};
  return state_->route_call(keys, nullptr, nullptr, n, out, timing, nullptr, &answers);
}

std::size_t gpu_router::route_cached(const key_type* keys, const value_type* args, const std::uint8_t* types,
                                     std::size_t n, value_type* values_out, std::uint8_t* found_out,
                                     key_type* keys_out, routed_batch_view& out, route_timing* timing) {
  if (state_->options.order != aggregation::full) {
    throw std::logic_error("gpu_router::route_cached: needs aggregation::full");
  }
  if (n > 0 && (values_out == nullptr || found_out == nullptr || out.args == nullptr || out.types == nullptr)) {
    throw std::invalid_argument("gpu_router::route_cached: null values_out, found_out, out.args or out.types for " +
                                std::to_string(n) + " ops");
  }
  const detail::copy_answers answers{values_out, found_out, keys_out};
  return state_->route_call(keys, args, types, n, out, timing, nullptr, &answers);
}

std::size_t gpu_router::state::select_missed(std::size_t n, cudaStream_t stream) {
  detail::route_resources& r = route;
  std::size_t bytes = r.temp.capacity();
  TANDEM_CUDA_TRY(cub::DeviceSelect::Flagged(r.temp.data(), bytes, r.keys.data(), r.missed.data(), r.keys_alt.data(),
                                             r.selected.data(), static_cast<std::int64_t>(n), stream));
  bytes = r.temp.capacity();
  TANDEM_CUDA_TRY(cub::DeviceSelect::Flagged(r.temp.data(), bytes, r.iota.data(), r.missed.data(),
                                             r.batch_positions.data(), r.selected.data(),
                                             static_cast<std::int64_t>(n), stream));
  TANDEM_CUDA_TRY(cudaMemcpyAsync(r.selected_host.data(), r.selected.data(), sizeof(std::uint32_t),
                                  cudaMemcpyDeviceToHost, stream));
  TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
  const std::size_t rows = *r.selected_host.data();
  TANDEM_CUDA_TRY(cudaMemcpyAsync(r.keys.data(), r.keys_alt.data(), rows * sizeof(key_type), cudaMemcpyDeviceToDevice,
                                  stream));
  return rows;
}

std::size_t gpu_router::state::answer_sorted(const detail::version_buffer& vb, const detail::layout_meta& m,
                                            std::size_t n, detail::row_arrays& rows, cudaStream_t stream) {
  detail::route_resources& r = route;
  detail::copy_resources& c = copies;
  const unsigned blocks = detail::shuffle_blocks(n);
  constexpr unsigned threads = detail::shuffle_block_threads;
  detail::gather_kernel<<<blocks, threads, 0, stream>>>(rows.positions, n, static_cast<const key_type*>(nullptr),
                                                        static_cast<key_type*>(nullptr), r.args.data(),
                                                        r.args_out.data(), r.types.data(), r.types_out.data());
  TANDEM_CUDA_TRY(cudaGetLastError());
  detail::copy_rows_kernel<<<blocks, threads, 0, stream>>>(
      rows.keys, r.types_out.data(), rows.ordinals, rows.positions, n, vb.leaf_ids.data(), m.leaf_count,
      c.table.data(), c.table_size, c.pool.data(), c.hits.data(), r.answers.data(), r.answer_found.data(),
      r.answer_keys.data(), r.missed.data());
  TANDEM_CUDA_TRY(cudaGetLastError());
  detail::copy_patch_kernel<<<blocks, threads, 0, stream>>>(rows.keys, r.types_out.data(), rows.ordinals,
                                                            r.args_out.data(), r.missed.data(), n,
                                                            vb.leaf_ids.data(), c.table.data(), c.pool.data());
  TANDEM_CUDA_TRY(cudaGetLastError());
  // Each row's place among those left: an exclusive sum, in group_begin
  // (the grouping writes it later).
  std::size_t bytes = r.temp.capacity();
  TANDEM_CUDA_TRY(cub::DeviceScan::ExclusiveSum(
      r.temp.data(), bytes, thrust::make_transform_iterator(r.missed.data(), detail::row_for_host{}),
      r.group_begin.data(), static_cast<std::int64_t>(n), stream));
  rows.args = r.args_out.data();
  rows.types = r.types_out.data();
  const detail::row_outputs out{rows.keys == r.keys.data() ? r.keys_alt.data() : r.keys.data(),
                                rows.positions == r.positions.data() ? r.positions_alt.data() : r.positions.data(),
                                r.ordinals_alt.data(),
                                r.args.data(),
                                r.types.data(),
                                rows.hints != nullptr ? r.hints_alt.data() : nullptr};
  detail::copy_compact_kernel<<<blocks, threads, 0, stream>>>(rows, r.missed.data(), r.group_begin.data(), n, out,
                                                              r.selected.data());
  TANDEM_CUDA_TRY(cudaGetLastError());
  TANDEM_CUDA_TRY(cudaMemcpyAsync(r.selected_host.data(), r.selected.data(), sizeof(std::uint32_t),
                                  cudaMemcpyDeviceToHost, stream));
  TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
  rows = detail::row_arrays{out.keys, out.positions, out.ordinals, out.args, out.types, out.hints};
  return *r.selected_host.data();
}

void gpu_router::reserve_copies(std::size_t entries) {
  state& s = *state_;
  const detail::account_scope scope(s.account);
  std::lock_guard<std::mutex> route_lock(s.route_mutex);
  s.set_device();
  detail::copy_resources& c = s.copies;
  if (entries == 0) {
    c.pool.release();
    c.table.release();
    c.hits.release();
    c.staged.release();
    c.moves.release();
    c.ids.release();
    c.entries.release();
    c.table_size = 0;
    return;
  }
  if (entries <= c.pool.capacity()) return;
  // Grows keeping the copies (the caller asks in steps).
  detail::device_array<entry> pool;
  pool.reserve(entries);
  const cudaStream_t stream = s.route.lanes[0]->stream.get();
  if (c.pool.capacity() > 0) {
    TANDEM_CUDA_TRY(cudaMemcpyAsync(pool.data(), c.pool.data(), c.pool.capacity() * sizeof(entry),
                                    cudaMemcpyDeviceToDevice, stream));
    TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
  }
  c.pool.swap(pool);
}

void gpu_router::apply_copies(const copy_changes& ch) {
  state& s = *state_;
  const detail::account_scope scope(s.account);
  std::lock_guard<std::mutex> route_lock(s.route_mutex);
  s.set_device();
  detail::copy_resources& c = s.copies;
  const cudaStream_t stream = s.route.lanes[0]->stream.get();
  for (std::size_t i = 0; i < ch.move_count; ++i) {
    const copy_move& m = ch.moves[i];
    if (m.to + m.count > c.pool.capacity() || m.from + m.count > ch.staged_count) {
      throw std::invalid_argument("gpu_router::apply_copies: move " + std::to_string(i) + " passes the pool (" +
                                  std::to_string(c.pool.capacity()) + " entries) or the staged entries");
    }
  }
  if (ch.table_size > c.table_size) {  // grow: the old entries come along, the new ones unusable
    detail::device_array<leaf_copy> table;
    detail::device_array<std::uint32_t> hits;
    table.reserve(ch.table_size, 25);
    hits.reserve(table.capacity());
    TANDEM_CUDA_TRY(cudaMemsetAsync(table.data(), 0, table.capacity() * sizeof(leaf_copy), stream));
    TANDEM_CUDA_TRY(cudaMemsetAsync(hits.data(), 0, hits.capacity() * sizeof(std::uint32_t), stream));
    if (c.table_size > 0) {
      TANDEM_CUDA_TRY(cudaMemcpyAsync(table.data(), c.table.data(), c.table_size * sizeof(leaf_copy),
                                      cudaMemcpyDeviceToDevice, stream));
      TANDEM_CUDA_TRY(cudaMemcpyAsync(hits.data(), c.hits.data(), c.table_size * sizeof(std::uint32_t),
                                      cudaMemcpyDeviceToDevice, stream));
    }
    TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
    c.table.swap(table);
    c.hits.swap(hits);
    c.table_size = c.table.capacity();
  }
  if (ch.clear && c.table_size > 0) {
    TANDEM_CUDA_TRY(cudaMemsetAsync(c.table.data(), 0, c.table_size * sizeof(leaf_copy), stream));
  }
  if (ch.move_count > 0) {
    c.staged.reserve(ch.staged_count, 25);
    c.moves.reserve(ch.move_count, 25);
    TANDEM_CUDA_TRY(cudaMemcpyAsync(c.staged.data(), ch.staged, ch.staged_count * sizeof(entry),
                                    cudaMemcpyHostToDevice, stream));
    TANDEM_CUDA_TRY(cudaMemcpyAsync(c.moves.data(), ch.moves, ch.move_count * sizeof(copy_move),
                                    cudaMemcpyHostToDevice, stream));
    const auto blocks = static_cast<unsigned>(std::min<std::size_t>(ch.move_count, 65535));
    detail::copy_moves_kernel<<<blocks, 256, 0, stream>>>(c.staged.data(), c.moves.data(), ch.move_count,
                                                          c.pool.data());
    TANDEM_CUDA_TRY(cudaGetLastError());
  }
  if (ch.entry_count > 0) {
    c.ids.reserve(ch.entry_count, 25);
    c.entries.reserve(ch.entry_count, 25);
    TANDEM_CUDA_TRY(cudaMemcpyAsync(c.ids.data(), ch.ids, ch.entry_count * sizeof(leaf_id), cudaMemcpyHostToDevice,
                                    stream));
    TANDEM_CUDA_TRY(cudaMemcpyAsync(c.entries.data(), ch.entries, ch.entry_count * sizeof(leaf_copy),
                                    cudaMemcpyHostToDevice, stream));
    detail::copy_entries_kernel<<<detail::shuffle_blocks(ch.entry_count), detail::shuffle_block_threads, 0,
                                  stream>>>(c.ids.data(), c.entries.data(), ch.entry_count, c.table.data());
    TANDEM_CUDA_TRY(cudaGetLastError());
  }
  TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
  // The staging arrays are kept while small; a large fill gives them back.
  if (c.staged.capacity() > (std::size_t{1} << 24)) c.staged.release();
}

void gpu_router::take_copy_hits(std::vector<std::uint32_t>& hits) {
  state& s = *state_;
  const detail::account_scope scope(s.account);
  std::lock_guard<std::mutex> route_lock(s.route_mutex);
  detail::copy_resources& c = s.copies;
  if (c.table_size == 0) return;
  s.set_device();
  const cudaStream_t stream = s.route.lanes[0]->stream.get();
  std::vector<std::uint32_t> counted(c.table_size);
  TANDEM_CUDA_TRY(cudaMemcpyAsync(counted.data(), c.hits.data(), c.table_size * sizeof(std::uint32_t),
                                  cudaMemcpyDeviceToHost, stream));
  TANDEM_CUDA_TRY(cudaMemsetAsync(c.hits.data(), 0, c.table_size * sizeof(std::uint32_t), stream));
  TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
  const std::size_t n = std::min(hits.size(), counted.size());
  for (std::size_t i = 0; i < n; ++i) hits[i] += counted[i];
}

void gpu_router::read_copies(std::vector<leaf_copy>& table, std::vector<entry>& pool) {
  state& s = *state_;
  const detail::account_scope scope(s.account);
  std::lock_guard<std::mutex> route_lock(s.route_mutex);
  s.set_device();
  const detail::copy_resources& c = s.copies;
  const cudaStream_t stream = s.route.lanes[0]->stream.get();
  table.resize(c.table_size);
  pool.resize(c.pool.capacity());
  if (!table.empty()) {
    TANDEM_CUDA_TRY(cudaMemcpyAsync(table.data(), c.table.data(), table.size() * sizeof(leaf_copy),
                                    cudaMemcpyDeviceToHost, stream));
  }
  if (!pool.empty()) {
    TANDEM_CUDA_TRY(
        cudaMemcpyAsync(pool.data(), c.pool.data(), pool.size() * sizeof(entry), cudaMemcpyDeviceToHost, stream));
  }
  TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
}

std::size_t gpu_router::copy_bytes() const noexcept {
  const detail::copy_resources& c = state_->copies;
  return c.pool.capacity() * sizeof(entry) +
         c.table.capacity() * (sizeof(leaf_copy) + sizeof(std::uint32_t)) + c.staged.capacity() * sizeof(entry) +
         c.moves.capacity() * sizeof(copy_move) + c.ids.capacity() * sizeof(leaf_id) +
         c.entries.capacity() * sizeof(leaf_copy);
}

}  // namespace tandem::device
