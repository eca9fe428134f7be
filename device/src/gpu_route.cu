// gpu_router, the route: takes a batch's keys (and args, types) in batch
// order, gives the caller's routed_batch_view filled: sorted (or partly
// sorted) on the GPU, descended, grouped by leaf with the group boundaries
// found on the GPU, and brought down. route_range does the same for the
// ops of one key range, kept on the GPU as the batch's chunks come up
// (entry points: gpu_route_call.cu). Runs on the thread that calls route
// (the scheduler's routing stage), one route at a time per router, beside an
// upload and a scatter on other threads. Design: gpu_router.hpp; state:
// detail/router_state.cuh; the descent is launched by gpu_router.cu.
#include <tandem/device/gpu_router.hpp>

#include <tandem/device/detail/copy_kernels.cuh>
#include <tandem/device/detail/cuda_check.cuh>
#include <tandem/device/detail/router_state.cuh>
#include <tandem/device/detail/shuffle_kernels.cuh>
#include <tandem/device/detail/transfers.cuh>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <cuda_runtime.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

namespace tandem::device {

using detail::clock_type;
using detail::seconds_since;

namespace {

/// Staging slices of a route chunk.
enum slice : int { keys_slice = 0, args_slice = 1, types_slice = 2 };

/// Most arrays one route downloads: positions, keys, args, types, hints,
/// copy answers' values, flags and keys; then group_begin, group_ordinal.
constexpr std::size_t max_downloads = 10;

}  // namespace

std::size_t gpu_router::state::run_route(const detail::version_buffer& vb, const detail::layout_meta& m,
                                         const key_type* keys, const value_type* args, const std::uint8_t* types,
                                         std::size_t n, routed_batch_view& out, route_timing* timing,
                                         const detail::key_range* range, const detail::copy_answers* answers) {
  detail::route_resources& r = route;
  detail::fault_gate gate(faults);
  // A range keeps its ops in device arrays of `limit` entries as the chunks
  // come up, one chunk at a time on the main stream (the kept ops must stay
  // in batch order), then routes them as a full sort routes a batch.
  const bool ranged = range != nullptr;
  // route_cached: each chunk descends and is answered from the leaf copies
  // on its lane (answers straight down when the outputs are pinned); the
  // ops no copy answered are then selected, in batch order, and routed as a
  // range's are. remap: positions of the routed ops are batch positions
  // kept in r.batch_positions.
  // With writes (types given), the batch is sorted whole and its rows
  // judged after the descent (answer_sorted).
  const bool cached = answers != nullptr;
  const bool patching = cached && out.types != nullptr;
  const bool remap = ranged || (cached && !patching);
  // Gets-only: values may be unwanted (null), found flags never are.
  const bool want_values = cached && answers->values != nullptr;
  const bool answers_direct = cached && !patching && (!want_values || detail::dma_ready(answers->values)) &&
                              detail::dma_ready(answers->found);
  const detail::in_range keep{ranged ? range->lo : 0, ranged ? range->hi : 0};
  const std::size_t room = ranged ? range->limit : n;  // ops the arrays hold
  const bool full = options.order == aggregation::full;
  const bool partial = options.order == aggregation::partial;
  const bool want_args = out.args != nullptr;
  const bool want_types = out.types != nullptr;
  // Hints need keys in sorted order and the guides of the leaves.
  const bool want_hints = full && out.hints != nullptr && guide_count > 0;
  const std::size_t chunk = std::min(options.chunk, n);
  const std::size_t chunks = (n + chunk - 1) / chunk;
  const std::size_t last_chunk = n - (chunks - 1) * chunk;
  const std::size_t lanes_used = ranged ? 1 : std::min(r.lanes.size(), chunks);
  const cudaStream_t main_stream = r.lanes[0]->stream.get();
  // Positions and keys start down on a second stream while the main one
  // still descends (full sort: they are final once sorted).
  const cudaStream_t down_stream = r.lanes.size() > 1 ? r.lanes[1]->stream.get() : main_stream;

  const bool keys_pinned = detail::dma_ready(keys);
  // Keys and copy answers in GPU memory (device columns) cross no link.
  const bool keys_on_gpu = timing != nullptr && detail::in_gpu_memory(keys);
  // Bytes of copy answers that cross PCIe (none into outputs in GPU memory).
  const std::size_t answer_bytes =
      timing == nullptr || !cached
          ? 0
          : n * ((!want_values || detail::in_gpu_memory(answers->values) ? 0 : sizeof(value_type)) +
                 (detail::in_gpu_memory(answers->found) ? 0 : 1) +
                 (patching && answers->keys != nullptr && !detail::in_gpu_memory(answers->keys) ? sizeof(key_type)
                                                                                                 : 0));
  const bool args_pinned = want_args && detail::dma_ready(args);
  const bool types_pinned = want_types && detail::dma_ready(types);

  // ---- room: every growth before anything is enqueued (a growth frees) ----
  auto grow = [&](auto& a, std::size_t count) { return a.capacity() < count && a.reserve(grown(count)); };
  grow(r.keys, room);
  grow(r.keys_alt, room);
  if (want_args) {
    grow(r.args, room);
    grow(r.args_out, room);
  }
  if (want_types) {
    grow(r.types, room);
    grow(r.types_out, room);
  }
  grow(r.positions, room);
  grow(r.positions_alt, room);
  grow(r.ordinals, room);
  if (!full) grow(r.ordinals_alt, room);
  if (full) grow(r.nodes, room);
  grow(r.flags, room);
  grow(r.group_begin, room);
  grow(r.group_ordinal, room);
  if (want_hints) grow(r.hints, room);
  if (cached) {
    grow(r.answers, n);
    grow(r.answer_found, n);
    grow(r.missed, n);
    grow(r.batch_positions, n);
    if (patching) grow(r.ordinals_alt, n);
    if (patching) grow(r.answer_keys, n);
    if (patching && want_hints) grow(r.hints_alt, n);
  }
  if (ranged) {
    grow(r.batch_positions, room);
    r.chunk_keys.reserve(chunk);
    if (want_args) r.chunk_args.reserve(chunk);
    if (want_types) r.chunk_types.reserve(chunk);
    r.chunk_offsets.reserve(chunk);
    r.kept.reserve(1);
    std::size_t scan_bytes = 0;
    TANDEM_CUDA_TRY(cub::DeviceScan::ExclusiveSum(
        nullptr, scan_bytes, thrust::make_transform_iterator(
                                 static_cast<const key_type*>(r.chunk_keys.data()), keep),
        r.chunk_offsets.data(), static_cast<int>(chunk), main_stream));
    r.chunk_temp.reserve(scan_bytes);
  }
  if (grow(r.iota, ranged ? room : std::max(n, chunk))) {
    const std::size_t count = std::min<std::size_t>(r.iota.capacity(), std::numeric_limits<std::uint32_t>::max());
    detail::iota_kernel<<<detail::shuffle_blocks(count), detail::shuffle_block_threads, 0, main_stream>>>(
        r.iota.data(), count, std::uint32_t{0});
    TANDEM_CUDA_TRY(cudaGetLastError());
    TANDEM_CUDA_TRY(cudaStreamSynchronize(main_stream));  // every lane reads iota
  }
  detail::staging_layout staging;
  staging.add(keys_slice, chunk * sizeof(key_type), !keys_pinned);
  staging.add(args_slice, chunk * sizeof(value_type), want_args && !args_pinned);
  staging.add(types_slice, chunk, want_types && !types_pinned);
  const int psa_begin_bit = 64 - m.psa_bits;
  std::size_t lane_temp = 0;
  if (partial) {
    detail::route_lane& l0 = *r.lanes[0];
    l0.keys_sorted.reserve(chunk);
    l0.positions.reserve(chunk);
    for (const std::size_t count : {chunk, last_chunk}) {
      std::size_t bytes = 0;
      TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, bytes, r.keys.data(), l0.keys_sorted.data(),
                                                      r.iota.data(), l0.positions.data(),
                                                      static_cast<std::uint32_t>(count), psa_begin_bit, 64,
                                                      main_stream));
      lane_temp = std::max(lane_temp, bytes);
    }
  }
  for (std::size_t l = 0; l < lanes_used; ++l) {
    detail::route_lane& lane = *r.lanes[l];
    lane.staging.reserve(staging.total);
    if (!full || cached) lane.nodes.reserve(chunk);
    if (partial) {
      lane.keys_sorted.reserve(chunk);
      lane.positions.reserve(chunk);
      lane.temp.reserve(lane_temp);
    }
  }
  {
    const auto n32 = static_cast<std::uint32_t>(room);
    std::size_t sort_bytes = 0;
    cub::DoubleBuffer<key_type> key_buffers(r.keys.data(), r.keys_alt.data());
    cub::DoubleBuffer<std::uint32_t> position_buffers(r.positions.data(), r.positions_alt.data());
    cub::DoubleBuffer<std::uint32_t> ordinal_buffers(r.ordinals.data(), r.ordinals_alt.data());
    if (full) {
      TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, key_buffers, position_buffers, n32, 0, 64,
                                                      main_stream));
    } else if (m.group_bits > 0) {
      TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, ordinal_buffers, position_buffers, n32, 0,
                                                      m.group_bits, main_stream));
    }
    std::size_t select_bytes = 0;
    TANDEM_CUDA_TRY(cub::DeviceSelect::Flagged(nullptr, select_bytes, r.iota.data(), r.flags.data(),
                                               r.group_begin.data(), r.selected.data(),
                                               static_cast<std::int64_t>(room), main_stream));
    if (cached) {
      std::size_t key_select = 0;
      TANDEM_CUDA_TRY(cub::DeviceSelect::Flagged(nullptr, key_select, r.keys.data(), r.missed.data(),
                                                 r.keys_alt.data(), r.selected.data(),
                                                 static_cast<std::int64_t>(room), main_stream));
      std::size_t scan = 0;  // answer_sorted's
      TANDEM_CUDA_TRY(cub::DeviceScan::ExclusiveSum(
          nullptr, scan, thrust::make_transform_iterator(r.missed.data(), detail::row_for_host{}),
          r.group_begin.data(), static_cast<std::int64_t>(room), main_stream));
      select_bytes = std::max({select_bytes, key_select, scan});
    }
    const std::size_t temp_bytes = std::max(sort_bytes, select_bytes);  // within batch_bytes' 2 x sort scratch
    if (r.temp.capacity() < temp_bytes) r.temp.reserve(temp_bytes, 25);
  }

  // ---- timing marks (events only when asked for) -------------------------
  detail::event_pool* marks = timing != nullptr ? &r.marks : nullptr;
  auto mark = [&](cudaStream_t stream) -> std::size_t { return marks != nullptr ? marks->record(stream) : 0; };
  if (marks != nullptr) {
    marks->reset();
    r.chunk_spans.clear();
    r.chunk_spans.reserve(chunks);
  }
  double host_in = 0;
  double host_out = 0;

  // ---- up: chunks rotate over the lanes; without a full sort each chunk
  // is also (partly) sorted and descended on its lane ----------------------
  if (ranged) TANDEM_CUDA_TRY(cudaMemsetAsync(r.kept.data(), 0, sizeof(std::uint32_t), main_stream));
  for (std::size_t i = 0; i < chunks; ++i) {
    detail::route_lane& lane = *r.lanes[i % lanes_used];
    const cudaStream_t stream = lane.stream.get();
    const std::size_t offset = i * chunk;
    const std::size_t count = std::min(chunk, n - offset);
    if (staging.total > 0) TANDEM_CUDA_TRY(cudaEventSynchronize(lane.staged.get()));  // its staging is free
    TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::upload));
    unsigned char* st = lane.staging.data();
    const void* key_src = detail::stage_up(keys + offset, count * sizeof(key_type), keys_pinned,
                                           st + staging.offset[keys_slice], pool, host_in);
    const void* arg_src = want_args ? detail::stage_up(args + offset, count * sizeof(value_type), args_pinned,
                                                       st + staging.offset[args_slice], pool, host_in)
                                    : nullptr;
    const void* type_src = want_types ? detail::stage_up(types + offset, count, types_pinned,
                                                         st + staging.offset[types_slice], pool, host_in)
                                      : nullptr;
    detail::route_resources::chunk_marks cm{};
    cm.begin = mark(stream);
    key_type* key_dst = ranged ? r.chunk_keys.data() : r.keys.data() + offset;
    value_type* arg_dst = ranged ? r.chunk_args.data() : r.args.data() + offset;
    std::uint8_t* type_dst = ranged ? r.chunk_types.data() : r.types.data() + offset;
    TANDEM_CUDA_TRY(cudaMemcpyAsync(key_dst, key_src, count * sizeof(key_type), cudaMemcpyDefault, stream));
    if (want_args) {
      TANDEM_CUDA_TRY(cudaMemcpyAsync(arg_dst, arg_src, count * sizeof(value_type), cudaMemcpyDefault, stream));
    }
    if (want_types) TANDEM_CUDA_TRY(cudaMemcpyAsync(type_dst, type_src, count, cudaMemcpyDefault, stream));
    TANDEM_CUDA_TRY(cudaEventRecord(lane.staged.get(), stream));
    cm.uploaded = mark(stream);
    if (ranged) {  // keep the chunk's ops in the range, after those kept before
      std::size_t scan_bytes = r.chunk_temp.capacity();
      TANDEM_CUDA_TRY(cub::DeviceScan::ExclusiveSum(
          r.chunk_temp.data(), scan_bytes,
          thrust::make_transform_iterator(static_cast<const key_type*>(key_dst), keep),
          r.chunk_offsets.data(), static_cast<int>(count), stream));
      detail::keep_in_range_kernel<<<detail::shuffle_blocks(count), detail::shuffle_block_threads, 0, stream>>>(
          key_dst, want_args ? arg_dst : nullptr, want_types ? type_dst : nullptr, r.chunk_offsets.data(), count,
          keep, r.kept.data(), static_cast<std::uint32_t>(offset), room, r.keys.data(), r.args.data(),
          r.types.data(), r.batch_positions.data());
      TANDEM_CUDA_TRY(cudaGetLastError());
      detail::add_kept_kernel<<<1, 1, 0, stream>>>(key_dst, r.chunk_offsets.data(), count, keep, r.kept.data());
      TANDEM_CUDA_TRY(cudaGetLastError());
    }
    if (cached && !patching) {  // descend in batch order, answer from the copies
      TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::kernel));
      detail::descent_args a;
      a.keys = r.keys.data() + offset;
      a.n = static_cast<std::uint32_t>(count);
      a.nodes_out = lane.nodes.data();
      a.ordinals = r.ordinals.data() + offset;
      cm.sorted = mark(stream);
      launch_descent(vb, m, a, stream, 0, m.height, m.groups);
      detail::copy_lookup_kernel<<<detail::shuffle_blocks(count), detail::shuffle_block_threads, 0, stream>>>(
          r.keys.data() + offset, r.ordinals.data() + offset, count, vb.leaf_ids.data(), m.leaf_count,
          copies.table.data(), copies.table_size, copies.pool.data(), copies.hits.data(), offset,
          r.answers.data() + offset, r.answer_found.data() + offset, r.missed.data() + offset);
      TANDEM_CUDA_TRY(cudaGetLastError());
      cm.descended = mark(stream);
      if (answers_direct) {
        TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::download));
        if (want_values) {
          TANDEM_CUDA_TRY(cudaMemcpyAsync(answers->values + offset, r.answers.data() + offset,
                                          count * sizeof(value_type), cudaMemcpyDefault, stream));
        }
        TANDEM_CUDA_TRY(cudaMemcpyAsync(answers->found + offset, r.answer_found.data() + offset, count,
                                        cudaMemcpyDefault, stream));
      }
    }
    if (!full) {
      detail::descent_args a;
      a.keys = r.keys.data() + offset;
      a.n = static_cast<std::uint32_t>(count);
      a.nodes_out = lane.nodes.data();
      a.ordinals = r.ordinals.data() + offset;  // by position inside the chunk
      if (partial) {
        TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::sort));
        std::size_t bytes = lane.temp.capacity();
        TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(lane.temp.data(), bytes, r.keys.data() + offset,
                                                        lane.keys_sorted.data(), r.iota.data(), lane.positions.data(),
                                                        static_cast<std::uint32_t>(count), psa_begin_bit, 64, stream));
        a.keys = lane.keys_sorted.data();
        a.positions = lane.positions.data();
      }
      cm.sorted = mark(stream);
      TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::kernel));
      launch_descent(vb, m, a, stream, 0, m.height, m.groups);
      cm.descended = mark(stream);
    }
    if (marks != nullptr) r.chunk_spans.push_back(cm);
  }
  for (std::size_t l = 1; l < lanes_used; ++l) {
    TANDEM_CUDA_TRY(cudaEventRecord(r.lanes[l]->done.get(), r.lanes[l]->stream.get()));
    TANDEM_CUDA_TRY(cudaStreamWaitEvent(main_stream, r.lanes[l]->done.get(), 0));
  }
  // The ops routed from here on: the batch, those of the range, or those
  // no copy answered.
  std::size_t rows = n;
  // Copy answers that go down through the staged download (outputs not pinned).
  auto answer_items = [&](detail::download_item* items, std::size_t& count, cudaEvent_t after) {
    if (!cached || answers_direct) return;
    if (want_values) {
      items[count++] = {answers->values, r.answers.data(), n * sizeof(value_type),
                        detail::dma_ready(answers->values), after};
    }
    items[count++] = {answers->found, r.answer_found.data(), n, detail::dma_ready(answers->found), after};
    if (patching && answers->keys != nullptr) {
      items[count++] = {answers->keys, r.answer_keys.data(), n * sizeof(key_type), detail::dma_ready(answers->keys),
                        after};
    }
  };
  // Every op answered from the copies: their answers go down, no rows.
  auto all_answered = [&](std::size_t lookup_begin, std::size_t lookup_end) -> std::size_t {
    TANDEM_CUDA_TRY(cudaEventRecord(r.grouped.get(), main_stream));
    detail::download_item items[3];
    std::size_t count = 0;
    answer_items(items, count, r.grouped.get());
    std::size_t spans[6] = {};
    double host_out0 = 0;
    if (count > 0) r.download.run(items, count, down_stream, pool, nullptr, spans, host_out0);
    TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::sync));
    TANDEM_CUDA_TRY(cudaStreamSynchronize(down_stream));
    TANDEM_CUDA_TRY(cudaStreamSynchronize(main_stream));
    out.group_begin[0] = 0;
    out.groups = 0;
    out.key_sorted = true;
    if (timing != nullptr) {
      for (const auto& cm : r.chunk_spans) {
        timing->upload += marks->seconds(cm.begin, cm.uploaded);
        timing->lookup += marks->seconds(cm.sorted, cm.descended);
      }
      if (lookup_end != lookup_begin) timing->lookup += marks->seconds(lookup_begin, lookup_end);
      timing->kernel = timing->lookup;
      timing->host_in = host_in;
      timing->host_out = host_out0;
      timing->upload += host_in;
      timing->chunks = chunks;
      timing->answered = n;
      timing->bytes_up = (keys_on_gpu ? 0 : n * sizeof(key_type)) + (patching ? n * (sizeof(value_type) + 1) : 0);
      timing->bytes_down = answer_bytes + sizeof(std::uint32_t);
    }
    return 0;
  };
  if (cached && !patching) {
    rows = select_missed(n, main_stream);
    if (rows == 0) return all_answered(0, 0);
  }
  if (ranged) {
    TANDEM_CUDA_TRY(cudaMemcpyAsync(r.selected_host.data(), r.kept.data(), sizeof(std::uint32_t),
                                    cudaMemcpyDeviceToHost, main_stream));
    TANDEM_CUDA_TRY(cudaStreamSynchronize(main_stream));
    rows = *r.selected_host.data();
    if (rows > room) return room + 1;
    if (rows == 0) {
      out.group_begin[0] = 0;
      out.groups = 0;
      out.key_sorted = true;
      return 0;
    }
  }
  auto n32 = static_cast<std::uint32_t>(rows);

  // ---- sort: (key, position) over the batch, or (ordinal, position) -------
  const std::uint32_t* routed_positions = nullptr;
  const key_type* routed_keys = nullptr;
  const std::uint32_t* routed_ordinals = nullptr;
  const value_type* routed_args = r.args_out.data();
  const std::uint8_t* routed_types = r.types_out.data();
  const leaf_hint* routed_hints = r.hints.data();
  TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::sort));
  const std::size_t sort_begin = mark(main_stream);
  std::size_t sort_end = 0;
  std::size_t kernel_begin = 0;
  std::size_t kernel_end = 0;
  if (full) {
    TANDEM_CUDA_TRY(cudaMemcpyAsync(r.positions.data(), r.iota.data(), rows * sizeof(std::uint32_t),
                                    cudaMemcpyDeviceToDevice, main_stream));
    cub::DoubleBuffer<key_type> key_buffers(r.keys.data(), r.keys_alt.data());
    cub::DoubleBuffer<std::uint32_t> position_buffers(r.positions.data(), r.positions_alt.data());
    std::size_t bytes = r.temp.capacity();
    TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(r.temp.data(), bytes, key_buffers, position_buffers, n32, 0, 64,
                                                    main_stream));
    sort_end = mark(main_stream);
    TANDEM_CUDA_TRY(cudaEventRecord(r.sorted.get(), main_stream));
    routed_keys = key_buffers.Current();
    routed_positions = position_buffers.Current();
    routed_ordinals = r.ordinals.data();

    // Sorted keys: ordinals come out non-decreasing, written in sorted order.
    TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::kernel));
    kernel_begin = mark(main_stream);
    detail::descent_args a;
    a.keys = routed_keys;
    a.n = n32;
    a.nodes_out = r.nodes.data();
    a.ordinals = r.ordinals.data();
    launch_descent(vb, m, a, main_stream, 0, m.height, m.groups);
    if (want_hints && guides_compact) {
      inner_layout_view v;
      v.key_region = vb.key_region.data();
      v.child_prefix = vb.child_prefix.data();
      v.node_count = m.node_count;
      v.leaf_count = m.leaf_count;
      v.fanout = m.fanout;
      v.height = m.height;
      const auto blocks = detail::shuffle_blocks(rows);
      constexpr auto threads = detail::shuffle_block_threads;
      const compact_guide* g = compact_guides.data();
      leaf_hint* h = r.hints.data();
      switch (m.fanout) {
        case 16:
          detail::compact_hint_kernel<16><<<blocks, threads, 0, main_stream>>>(routed_keys, rows, v, vb.leaf_ids.data(),
                                                                               g, guide_count, h);
          break;
        case 32:
          detail::compact_hint_kernel<32><<<blocks, threads, 0, main_stream>>>(routed_keys, rows, v, vb.leaf_ids.data(),
                                                                               g, guide_count, h);
          break;
        default:
          detail::compact_hint_kernel<64><<<blocks, threads, 0, main_stream>>>(routed_keys, rows, v, vb.leaf_ids.data(),
                                                                               g, guide_count, h);
          break;
      }
      TANDEM_CUDA_TRY(cudaGetLastError());
    } else if (want_hints) {
      detail::hint_kernel<<<detail::shuffle_blocks(rows), detail::shuffle_block_threads, 0, main_stream>>>(
          routed_keys, r.ordinals.data(), rows, vb.leaf_ids.data(), m.leaf_count, guides.data(), guide_count,
          r.hints.data());
      TANDEM_CUDA_TRY(cudaGetLastError());
    }
    if (patching) {  // the rows left after the copies' answers and patches
      detail::row_arrays left{routed_keys, routed_positions, routed_ordinals, nullptr, nullptr,
                              want_hints ? routed_hints : nullptr};
      rows = answer_sorted(vb, m, rows, left, main_stream);
      if (rows == 0) return all_answered(kernel_begin, mark(main_stream));  // gets and lower_bounds only
      n32 = static_cast<std::uint32_t>(rows);
      routed_keys = left.keys;
      routed_positions = left.positions;
      routed_ordinals = left.ordinals;
      routed_args = left.args;
      routed_types = left.types;
      routed_hints = left.hints;
    }
    kernel_end = mark(main_stream);
  } else {
    routed_positions = r.iota.data();  // one leaf: batch order is grouped already
    routed_ordinals = r.ordinals.data();
    if (m.group_bits > 0) {
      TANDEM_CUDA_TRY(cudaMemcpyAsync(r.positions.data(), r.iota.data(), n * sizeof(std::uint32_t),
                                      cudaMemcpyDeviceToDevice, main_stream));
      cub::DoubleBuffer<std::uint32_t> ordinal_buffers(r.ordinals.data(), r.ordinals_alt.data());
      cub::DoubleBuffer<std::uint32_t> position_buffers(r.positions.data(), r.positions_alt.data());
      std::size_t bytes = r.temp.capacity();
      TANDEM_CUDA_TRY(cub::DeviceRadixSort::SortPairs(r.temp.data(), bytes, ordinal_buffers, position_buffers, n32, 0,
                                                      m.group_bits, main_stream));
      routed_ordinals = ordinal_buffers.Current();
      routed_positions = position_buffers.Current();
    }
    sort_end = mark(main_stream);
    routed_keys = r.keys_alt.data();
  }

  // ---- grouping: run starts of the ordinal, selected into the groups;
  // keys (args, types) gathered by routed position ---------------------------
  const std::size_t grouping_begin = mark(main_stream);
  const unsigned blocks = detail::shuffle_blocks(rows);
  detail::run_start_kernel<<<blocks, detail::shuffle_block_threads, 0, main_stream>>>(routed_ordinals, rows,
                                                                                      r.flags.data());
  TANDEM_CUDA_TRY(cudaGetLastError());
  std::size_t bytes = r.temp.capacity();
  TANDEM_CUDA_TRY(cub::DeviceSelect::Flagged(r.temp.data(), bytes, r.iota.data(), r.flags.data(), r.group_begin.data(),
                                             r.selected.data(), static_cast<std::int64_t>(rows), main_stream));
  bytes = r.temp.capacity();
  TANDEM_CUDA_TRY(cub::DeviceSelect::Flagged(r.temp.data(), bytes, routed_ordinals, r.flags.data(),
                                             r.group_ordinal.data(), r.selected.data(),
                                             static_cast<std::int64_t>(rows), main_stream));
  if (!patching && (!full || want_args || want_types)) {
    // With a full sort the keys are sorted already (and r.keys may hold the
    // sort's scratch): only args and types are gathered.
    detail::gather_kernel<<<blocks, detail::shuffle_block_threads, 0, main_stream>>>(
        routed_positions, rows, r.keys.data(), full ? nullptr : r.keys_alt.data(), r.args.data(),
        want_args ? r.args_out.data() : nullptr, r.types.data(), want_types ? r.types_out.data() : nullptr);
    TANDEM_CUDA_TRY(cudaGetLastError());
  }
  if (remap) {  // positions among the kept ops to batch positions, into the sort's free buffer
    std::uint32_t* batch_order =
        routed_positions == r.positions.data() ? r.positions_alt.data() : r.positions.data();
    detail::gather_kernel<<<blocks, detail::shuffle_block_threads, 0, main_stream>>>(
        routed_positions, rows, r.batch_positions.data(), batch_order, static_cast<const value_type*>(nullptr),
        static_cast<value_type*>(nullptr), static_cast<const std::uint8_t*>(nullptr),
        static_cast<std::uint8_t*>(nullptr));
    TANDEM_CUDA_TRY(cudaGetLastError());
    routed_positions = batch_order;
  }
  TANDEM_CUDA_TRY(cudaMemcpyAsync(r.selected_host.data(), r.selected.data(), sizeof(std::uint32_t),
                                  cudaMemcpyDeviceToHost, main_stream));
  const std::size_t grouping_end = mark(main_stream);
  TANDEM_CUDA_TRY(cudaEventRecord(r.grouped.get(), main_stream));

  // ---- down: the per-op arrays, then (G known) the groups ------------------
  TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::download));
  const cudaEvent_t early = full && !remap && !patching ? r.sorted.get() : r.grouped.get();
  detail::download_item items[max_downloads];
  std::size_t count = 0;
  items[count++] = {out.positions, routed_positions, rows * sizeof(std::uint32_t), detail::dma_ready(out.positions),
                    early};
  items[count++] = {out.keys, routed_keys, rows * sizeof(key_type), detail::dma_ready(out.keys), early};
  if (want_args) {
    items[count++] = {out.args, routed_args, rows * sizeof(value_type), detail::dma_ready(out.args),
                      r.grouped.get()};
  }
  if (want_types) {
    items[count++] = {out.types, routed_types, rows, detail::dma_ready(out.types), r.grouped.get()};
  }
  if (want_hints) {
    items[count++] = {out.hints, routed_hints, rows * sizeof(leaf_hint), detail::dma_ready(out.hints),
                      r.grouped.get()};
  }
  answer_items(items, count, r.grouped.get());
  std::size_t spans[2 * max_downloads] = {};
  r.download.run(items, count, down_stream, pool, marks, spans, host_out);

  TANDEM_CUDA_TRY(cudaEventSynchronize(r.grouped.get()));
  const std::size_t groups = *r.selected_host.data();
  detail::download_item group_items[2] = {
      {out.group_begin, r.group_begin.data(), groups * sizeof(std::uint32_t), detail::dma_ready(out.group_begin),
       nullptr},
      {out.group_ordinal, r.group_ordinal.data(), groups * sizeof(std::uint32_t),
       detail::dma_ready(out.group_ordinal), nullptr}};
  r.download.run(group_items, 2, down_stream, pool, marks, spans + 2 * count, host_out);

  TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::sync));
  TANDEM_CUDA_TRY(cudaStreamSynchronize(down_stream));
  TANDEM_CUDA_TRY(cudaStreamSynchronize(main_stream));
  out.group_begin[groups] = n32;
  out.groups = groups;
  out.key_sorted = full;
  out.hinted = want_hints;

  if (timing != nullptr) {
    for (const auto& cm : r.chunk_spans) {
      timing->upload += marks->seconds(cm.begin, cm.uploaded);
      if (cached) timing->lookup += marks->seconds(cm.sorted, cm.descended);
      if (!full) {
        timing->sort += marks->seconds(cm.uploaded, cm.sorted);
        timing->kernel += marks->seconds(cm.sorted, cm.descended);
      }
    }
    const double batch_sort = marks->seconds(sort_begin, sort_end);
    timing->sort += batch_sort;
    if (!full) timing->group_sort = batch_sort;
    if (full) timing->kernel += marks->seconds(kernel_begin, kernel_end) + timing->lookup;
    timing->answered = cached ? n - rows : 0;
    timing->grouping = marks->seconds(grouping_begin, grouping_end);
    for (std::size_t k = 0; k < count + 2; ++k) timing->download += marks->seconds(spans[2 * k], spans[2 * k + 1]);
    timing->host_in = host_in;
    timing->host_out = host_out;
    timing->upload += host_in;
    timing->chunks = chunks;
    timing->bytes_up = (keys_on_gpu ? 0 : n * sizeof(key_type)) +
                       n * ((want_args ? sizeof(value_type) : 0) + (want_types ? 1 : 0));
    timing->bytes_down = rows * (sizeof(std::uint32_t) + sizeof(key_type) + (want_args ? sizeof(value_type) : 0) +
                                 (want_types ? 1 : 0) + (want_hints ? sizeof(leaf_hint) : 0)) +
                         groups * 2 * sizeof(std::uint32_t) + sizeof(std::uint32_t) * (remap ? 2 : 1) +
                         answer_bytes;
  }
  return rows;
}

}  // namespace tandem::device
