// gpu_router, the scatter: takes answers in routed order with their batch
// positions, gives them back in batch order in the caller's arrays (DESIGN
// step 5 on the GPU). Runs on the thread that calls scatter (the scheduler's
// answer stage), one scatter at a time per router, on its own two streams
// and device buffers, so it may overlap a route and an upload of other
// threads. Design: gpu_router.hpp; state: detail/router_state.cuh.
#include <tandem/device/gpu_router.hpp>

#include <tandem/device/detail/cuda_check.cuh>
#include <tandem/device/detail/router_state.cuh>
#include <tandem/device/detail/shuffle_kernels.cuh>
#include <tandem/device/detail/transfers.cuh>

#include <cuda_runtime.h>

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

enum slice : int { positions_slice = 0, values_slice = 1, flags_slice = 2 };

}  // namespace

void gpu_router::state::run_scatter(const std::uint32_t* positions, const value_type* values,
                                    const std::uint8_t* flags, std::size_t n, value_type* values_out,
                                    std::uint8_t* flags_out, scatter_timing* timing) {
  detail::scatter_resources& r = scatter;
  detail::fault_gate gate(faults);
  const bool want_values = values_out != nullptr;
  const bool want_flags = flags_out != nullptr;
  const std::size_t chunk = std::min(options.chunk, n);
  const std::size_t chunks = (n + chunk - 1) / chunk;
  const std::size_t lanes_used = std::min(r.lanes.size(), chunks);
  const cudaStream_t main_stream = r.lanes[0]->stream.get();

  const bool positions_pinned = detail::dma_ready(positions);
  const bool values_pinned = want_values && detail::dma_ready(values);
  const bool flags_pinned = want_flags && detail::dma_ready(flags);

  // ---- room: every growth before anything is enqueued --------------------
  // Under set_key_bound: a quarter more within the scatter room, n alone
  // past it (a scatter decided before the room shrank).
  const std::size_t room = key_bound.load() == 0          ? grown(n, 0)
                           : n <= scatter_bound.load() ? grown(n, scatter_bound.load())
                                                        : n;
  if (want_values && r.values_out.capacity() < n) r.values_out.reserve(room);
  if (want_flags && r.flags_out.capacity() < n) r.flags_out.reserve(room);
  detail::staging_layout staging;
  staging.add(positions_slice, chunk * sizeof(std::uint32_t), !positions_pinned);
  staging.add(values_slice, chunk * sizeof(value_type), want_values && !values_pinned);
  staging.add(flags_slice, chunk, want_flags && !flags_pinned);
  for (std::size_t l = 0; l < lanes_used; ++l) {
    detail::scatter_lane& lane = *r.lanes[l];
    lane.staging.reserve(staging.total);
    lane.positions.reserve(chunk);
    if (want_values) lane.values.reserve(chunk);
    if (want_flags) lane.flags.reserve(chunk);
  }

  detail::event_pool* marks = timing != nullptr ? &r.marks : nullptr;
  auto mark = [&](cudaStream_t stream) -> std::size_t { return marks != nullptr ? marks->record(stream) : 0; };
  if (marks != nullptr) {
    marks->reset();
    r.chunk_spans.clear();
    r.chunk_spans.reserve(chunks);
  }
  double host_in = 0;
  double host_out = 0;

  // ---- up and scatter, chunk by chunk on two streams: chunk i+1 is staged
  // and goes up while chunk i is scattered -----------------------------------
  for (std::size_t i = 0; i < chunks; ++i) {
    detail::scatter_lane& lane = *r.lanes[i % r.lanes.size()];
    const cudaStream_t stream = lane.stream.get();
    const std::size_t offset = i * chunk;
    const std::size_t count = std::min(chunk, n - offset);
    if (staging.total > 0) TANDEM_CUDA_TRY(cudaEventSynchronize(lane.staged.get()));  // its staging is free
    TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::upload));
    unsigned char* st = lane.staging.data();
    const void* position_src = detail::stage_up(positions + offset, count * sizeof(std::uint32_t), positions_pinned,
                                                st + staging.offset[positions_slice], scatter_pool, host_in);
    const void* value_src = want_values ? detail::stage_up(values + offset, count * sizeof(value_type),
                                                           values_pinned, st + staging.offset[values_slice], scatter_pool,
                                                           host_in)
                                        : nullptr;
    const void* flag_src = want_flags ? detail::stage_up(flags + offset, count, flags_pinned,
                                                         st + staging.offset[flags_slice], scatter_pool, host_in)
                                      : nullptr;
    detail::scatter_resources::chunk_marks cm{};
    cm.begin = mark(stream);
    TANDEM_CUDA_TRY(cudaMemcpyAsync(lane.positions.data(), position_src, count * sizeof(std::uint32_t),
                                    cudaMemcpyDefault, stream));
    if (want_values) {
      TANDEM_CUDA_TRY(cudaMemcpyAsync(lane.values.data(), value_src, count * sizeof(value_type),
                                      cudaMemcpyDefault, stream));
    }
    if (want_flags) {
      TANDEM_CUDA_TRY(cudaMemcpyAsync(lane.flags.data(), flag_src, count, cudaMemcpyDefault, stream));
    }
    TANDEM_CUDA_TRY(cudaEventRecord(lane.staged.get(), stream));
    cm.uploaded = mark(stream);
    TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::kernel));
    detail::scatter_kernel<<<detail::shuffle_blocks(count), detail::shuffle_block_threads, 0, stream>>>(
        lane.positions.data(), count, n, lane.values.data(), want_values ? r.values_out.data() : nullptr,
        lane.flags.data(), want_flags ? r.flags_out.data() : nullptr);
    TANDEM_CUDA_TRY(cudaGetLastError());
    cm.scattered = mark(stream);
    if (marks != nullptr) r.chunk_spans.push_back(cm);
  }
  for (std::size_t l = 1; l < lanes_used; ++l) {
    TANDEM_CUDA_TRY(cudaEventRecord(r.lanes[l]->done.get(), r.lanes[l]->stream.get()));
    TANDEM_CUDA_TRY(cudaStreamWaitEvent(main_stream, r.lanes[l]->done.get(), 0));
  }

  // ---- down: any chunk may have written anywhere, so after all of them ----
  TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::download));
  detail::download_item items[2];
  std::size_t count = 0;
  if (want_values) {
    items[count++] = {values_out, r.values_out.data(), n * sizeof(value_type), detail::dma_ready(values_out), nullptr};
  }
  if (want_flags) items[count++] = {flags_out, r.flags_out.data(), n, detail::dma_ready(flags_out), nullptr};
  std::size_t spans[4] = {};
  r.download.run(items, count, main_stream, scatter_pool, marks, spans, host_out);
  TANDEM_CUDA_TRY(detail::injected_fault_at(gate, stage::sync));
  TANDEM_CUDA_TRY(cudaStreamSynchronize(main_stream));

  if (timing != nullptr) {
    for (const auto& cm : r.chunk_spans) {
      timing->upload += marks->seconds(cm.begin, cm.uploaded);
      timing->kernel += marks->seconds(cm.uploaded, cm.scattered);
    }
    for (std::size_t k = 0; k < count; ++k) timing->download += marks->seconds(spans[2 * k], spans[2 * k + 1]);
    timing->upload += host_in;
    timing->bytes_up = n * (sizeof(std::uint32_t) + (want_values ? sizeof(value_type) : 0) + (want_flags ? 1 : 0));
    timing->bytes_down = n * ((want_values ? sizeof(value_type) : 0) + (want_flags ? 1 : 0));
  }
  (void)host_out;  // part of `download` (the staged pieces' spans include it)
}

void gpu_router::state::drain_scatter() noexcept {
  for (const auto& lane : scatter.lanes) {
    if (lane) (void)cudaStreamSynchronize(lane->stream.get());
  }
  (void)cudaGetLastError();
}

void gpu_router::scatter(const std::uint32_t* positions, const value_type* values, const std::uint8_t* flags,
                         std::size_t n, value_type* values_out, std::uint8_t* flags_out, scatter_timing* timing) {
  const auto t0 = clock_type::now();
  if (n > std::size_t{std::numeric_limits<std::uint32_t>::max()}) {
    throw std::length_error("gpu_router::scatter: " + std::to_string(n) +
                            " answers; a batch holds at most 2^32 - 1 (positions are u32)");
  }
  if (n > 0) {
    if (positions == nullptr) {
      throw std::invalid_argument("gpu_router::scatter: null positions for " + std::to_string(n) + " answers");
    }
    if ((values == nullptr) != (values_out == nullptr) || (flags == nullptr) != (flags_out == nullptr)) {
      throw std::invalid_argument(
          "gpu_router::scatter: values and values_out (flags and flags_out) must both be set or both be null");
    }
  }
  state& s = *state_;
  const detail::account_scope scope(s.account);
  std::lock_guard<std::mutex> scatter_lock(s.scatter_mutex);
  scatter_timing t;
  if (n > 0 && (values_out != nullptr || flags_out != nullptr)) {
    s.set_device();
    try {
      s.run_scatter(positions, values, flags, n, values_out, flags_out, timing != nullptr ? &t : nullptr);
    } catch (...) {
      s.drain_scatter();
      throw;
    }
  }
  t.total = seconds_since(t0);
  if (timing != nullptr) *timing = t;
}

}  // namespace tandem::device
