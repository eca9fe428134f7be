// The index's GPUs past its first (config.gpu_devices; index_impl.hpp).
// Each is opened beside the first, receives every layout the first does
// and the same leaf copies (the fan-out copy target of leaf_copies.cpp),
// and takes a share of each batch of gets that the copies' route takes:
// the batch is cut by position into one part a GPU, every part goes up,
// is answered from that GPU's copies and comes down over its own link,
// all at once, and the misses of the parts are merged into one route on
// the host (host::merge_routes). A GPU that fails is dropped for good
// (stats().device says why) and its batch takes the usual route on the
// first GPU: nothing is lost.
#include "gpu_peers.hpp"
#include "index_impl.hpp"

#include <tandem/device/current_device.hpp>
#include <tandem/error.hpp>

#include <algorithm>
#include <array>
#include <new>
#include <string>

namespace tandem {

void index::impl::open_peers(const device::router_options& first, const device::device_report& devices) {
  for (std::size_t i = 1; i < cfg_.gpu_devices.size(); ++i) {
    const int ordinal = cfg_.gpu_devices[i];
    std::string why;
    if (std::none_of(devices.devices.begin(), devices.devices.end(),
                     [&](const device::device_info& d) { return d.ordinal == ordinal; })) {
      why = "names no usable GPU (found " + device::describe(devices) + ")";
    } else {
      try {
        auto peer = std::make_unique<scheduler::peer_gpu>();
        device::router_options options = first;
        options.device_ordinal = ordinal;
        peer->router = std::make_unique<device::gpu_router>(options);
        device_ += "; gpu " + std::to_string(ordinal) + ": " + peer->router->name();
        peer->thread = std::make_unique<scheduler::worker_thread>([ordinal] {
          try {
            device::make_current(ordinal);
          } catch (const std::exception&) {  // each GPU call makes it current again, and reports a failure
          }
        });
        peers_.push_back(std::move(peer));
        continue;
      } catch (const std::exception& e) {
        why = std::string("cannot be used: ") + e.what();
      }
    }
    if (cfg_.device == device_kind::gpu) {
      throw error("tandem::config.device = gpu, but config.gpu_devices[" + std::to_string(i) + "] = " +
                  std::to_string(ordinal) + " " + why);
    }
    device_ += "; gpu " + std::to_string(ordinal) + " left out (" + why + ")";
  }
}

void index::impl::drop_peer(scheduler::peer_gpu& peer, const char* what) noexcept {
  if (peer.off.load()) return;
  try {
    peer.why = what;
  } catch (const std::bad_alloc&) {  // dropped all the same, without the reason
  }
  peer.off.store(true);
  ++gpu_failures_;
}

bool index::impl::inject_peer_fault(std::size_t gpu, device::stage s, int count) {
  if (gpu == 0 || gpu > peers_.size()) return false;
  peers_[gpu - 1]->router->inject_fault(s, count);
  return true;
}

std::size_t index::impl::peers_on() const noexcept {
  return static_cast<std::size_t>(
      std::count_if(peers_.begin(), peers_.end(), [](const auto& peer) { return !peer->off.load(); }));
}

void index::impl::for_each_peer(const std::function<void(device::gpu_router&)>& call) {
  if (peers_.empty()) return;
  for (auto& peer : peers_) {
    if (peer->off.load()) continue;
    try {
      call(*peer->router);
    } catch (const std::exception& e) {
      drop_peer(*peer, e.what());
    }
  }
  use_gpu_device();  // the first GPU current again on this thread
}

std::optional<std::size_t> index::impl::route_cached_split(prepared& p, value_type* values, std::uint8_t* found,
                                                           routed_batch_view& out, device::route_timing& sum) {
  constexpr std::size_t most = 16;  // config::validate: at most 16 GPUs
  std::array<device::gpu_router*, most> gpus{};
  std::array<scheduler::peer_gpu*, most> peer_of{};
  std::size_t k = 0;
  gpus[k++] = gpu_.get();
  for (auto& peer : peers_) {
    if (peer->off.load()) continue;
    peer_of[k] = peer.get();
    gpus[k++] = peer->router.get();
  }
  const std::size_t n = p.n;
  const key_type* keys = p.j->ops.keys();
  route_space& sp = *p.space;
  const std::size_t per = (n + k - 1) / k;
  const routed_batch_view all = sp.gpu_side.view(n + k, false);
  std::vector<routed_batch_view>& parts = sp.parts;
  std::vector<std::uint32_t>& bases = sp.part_bases;
  parts.assign(k, routed_batch_view{});
  bases.assign(k, 0);
  std::array<device::route_timing, most> t{};
  std::array<std::size_t, most> routed{};
  auto part = [&](std::size_t i) {
    const std::size_t at = std::min(n, i * per);
    const std::size_t len = std::min(per, n - at);
    routed_batch_view& v = parts[i];
    v.positions = all.positions + at;
    v.keys = all.keys + at;
    v.group_begin = all.group_begin + at + i;
    v.group_ordinal = all.group_ordinal + at;
    bases[i] = static_cast<std::uint32_t>(at);
    routed[i] = gpus[i]->route_cached(keys + at, len, values ? values + at : nullptr, found + at, v, &t[i]);
  };
  // Every part started is waited for before this frame (which they use)
  // is left, whatever throws.
  std::size_t started = 1;
  std::exception_ptr first_failed;
  try {
    for (; started < k; ++started) peer_of[started]->thread->start([&part, i = started] { part(i); });
    part(0);
  } catch (...) {
    first_failed = std::current_exception();
  }
  bool peer_failed = false;
  for (std::size_t i = 1; i < started; ++i) {
    try {
      peer_of[i]->thread->wait();
    } catch (const std::exception& e) {
      drop_peer(*peer_of[i], e.what());
      peer_failed = true;
    } catch (...) {
      drop_peer(*peer_of[i], "an exception of an unknown type");
      peer_failed = true;
    }
  }
  if (first_failed) std::rethrow_exception(first_failed);
  if (peer_failed) return std::nullopt;
  std::size_t m = 0;
  sum = {};
  for (std::size_t i = 0; i < k; ++i) {
    const device::route_timing& ti = t[i];
    m += routed[i];
    // The parts run at once: each stage takes its slowest part; bytes and answers add up.
    sum.upload = std::max(sum.upload, ti.upload);
    sum.sort = std::max(sum.sort, ti.sort);
    sum.kernel = std::max(sum.kernel, ti.kernel);
    sum.grouping = std::max(sum.grouping, ti.grouping);
    sum.download = std::max(sum.download, ti.download);
    sum.total = std::max(sum.total, ti.total);
    sum.lookup = std::max(sum.lookup, ti.lookup);
    sum.chunks += ti.chunks;
    sum.bytes_up += ti.bytes_up;
    sum.bytes_down += ti.bytes_down;
    sum.answered += ti.answered;
  }
  out.hints = nullptr;
  out.hinted = false;
  out.key_sorted = true;
  if (m == 0) {
    out.group_begin[0] = 0;
    out.groups = 0;
    return 0;
  }
  run_in_arena([&] { host::merge_routes(parts.data(), bases.data(), k, m, out, sp.merge_work); });
  return m;
}

}  // namespace tandem
