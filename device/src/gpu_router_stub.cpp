// Built when tandem is configured without the CUDA layer: the router exists
// so that code using it compiles, but no GPU is ever usable.
#include <tandem/device/gpu_router.hpp>
#include <tandem/error.hpp>

namespace tandem::device {

struct gpu_router::state {};

namespace {
[[noreturn]] void no_cuda() {
  throw tandem::error(
      "gpu_router: no usable GPU: tandem was built without CUDA (TANDEM_CUDA=OFF or no nvcc at build time)");
}
}  // namespace

gpu_router::gpu_router(const router_options&) { no_cuda(); }
gpu_router::~gpu_router() = default;
void gpu_router::upload(const inner_layout&) { no_cuda(); }
void gpu_router::route(const key_type*, const value_type*, const std::uint8_t*, std::size_t, routed_batch_view&,
                       route_timing*) {
  no_cuda();
}
std::size_t gpu_router::route_range(const key_type*, const value_type*, const std::uint8_t*, std::size_t, key_type,
                                    key_type, std::size_t, routed_batch_view&, route_timing*) {
  no_cuda();
}
std::size_t gpu_router::route_cached(const key_type*, std::size_t, value_type*, std::uint8_t*, routed_batch_view&,
                                     route_timing*) {
  no_cuda();
}
std::size_t gpu_router::route_cached(const key_type*, const value_type*, const std::uint8_t*, std::size_t,
                                     value_type*, std::uint8_t*, key_type*, routed_batch_view&, route_timing*) {
  no_cuda();
}
void gpu_router::reserve_copies(std::size_t) { no_cuda(); }
void gpu_router::apply_copies(const copy_changes&) { no_cuda(); }
void gpu_router::take_copy_hits(std::vector<std::uint32_t>&) { no_cuda(); }
std::size_t gpu_router::copy_bytes() const noexcept { return 0; }
void gpu_router::read_copies(std::vector<leaf_copy>&, std::vector<entry>&) { no_cuda(); }
void gpu_router::set_key_bound(std::size_t, std::size_t) { no_cuda(); }
std::size_t gpu_router::batch_bytes(std::size_t, std::size_t, bool) const { no_cuda(); }
std::size_t gpu_router::sort_bytes(std::size_t) { no_cuda(); }
void gpu_router::upload_guides(const leaf_guide*, std::size_t) { no_cuda(); }
void gpu_router::upload_compact_guides(const compact_guide*, std::size_t) { no_cuda(); }
std::size_t gpu_router::guide_count() const { no_cuda(); }
void gpu_router::scatter(const std::uint32_t*, const value_type*, const std::uint8_t*, std::size_t, value_type*,
                         std::uint8_t*, scatter_timing*) {
  no_cuda();
}
std::vector<std::size_t> gpu_router::sort_pairs(const key_type*, const value_type*, std::size_t, std::size_t,
                                                key_type*, value_type*, std::size_t, sort_timing*) {
  no_cuda();
}
std::string gpu_router::name() const { no_cuda(); }
int gpu_router::device_ordinal() const { no_cuda(); }
std::vector<int> gpu_router::group_sizes() const { no_cuda(); }
std::size_t gpu_router::layout_bytes() const { no_cuda(); }
std::size_t gpu_router::device_bytes() const noexcept { return 0; }
std::size_t gpu_router::constant_prefix_entries() const { no_cuda(); }
int gpu_router::constant_levels() const { no_cuda(); }
std::uint64_t gpu_router::version() const { no_cuda(); }
int gpu_router::partial_sort_bits() const { no_cuda(); }
double gpu_router::last_upload_seconds() const { no_cuda(); }
double gpu_router::last_calibration_seconds() const { no_cuda(); }
void gpu_router::inject_fault(stage, int) { no_cuda(); }

}  // namespace tandem::device
