#include "hooks/prefetch_devices.h"

#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "driver/real_driver.h"
#include "hooks/devices.h"
#include "telemetry/log.h"

namespace vramspill::hooks {
namespace {

// The other devices that may be advised to access `device`'s blocks (Note [Who may reach a
// managed block] in tiers/driver_prefetch_ops.h): those that can access it as a peer and have
// concurrent managed access, which the advice requires. None where the driver does not say.
std::vector<int> peers_of(int device) {
  std::vector<int> peers;
  const auto count_devices = VRAMSPILL_REAL(cuDeviceGetCount);
  const auto can_access_peer = VRAMSPILL_REAL(cuDeviceCanAccessPeer);
  int count = 0;
  if (count_devices == nullptr || can_access_peer == nullptr ||
      count_devices(&count) != CUDA_SUCCESS)
    return peers;
  for (int peer = 0; peer < count; ++peer) {
    int reachable = 0;
    if (peer != device && can_access_peer(&reachable, peer, device) == CUDA_SUCCESS &&
        reachable != 0 && concurrent_managed_access(peer).value_or(false))
      peers.push_back(peer);
  }
  return peers;
}

// How the log names `peers`: ", read where they are by its peers (device 1, 2)", or nothing.
std::string peers_said(const std::vector<int>& peers) {
  if (peers.empty()) return {};
  std::string said = ", read where they are by its peers (device";
  for (std::size_t i = 0; i < peers.size(); ++i)
    said += (i == 0 ? " " : ", ") + std::to_string(peers[i]);
  return said + ")";
}

}  // namespace

tiers::PrefetchOps* DriverPrefetchDevices::ops(int device) noexcept {
  if (device < 0 || static_cast<std::size_t>(device) >= kDevices) return nullptr;
  const std::lock_guard lock(mutex_);
  Device& state = devices_[static_cast<std::size_t>(device)];
  if (state.verdict != Verdict::kUnknown) return state.ops.get();
  // Note [Integrated devices] in hooks/devices.h: no mover tiers such a device, and the remap
  // mover's arena, which the caller turns to next, says so once for both.
  if (is_integrated(device)) {
    state.verdict = Verdict::kNone;
    return nullptr;
  }
  const std::optional<bool> concurrent = concurrent_managed_access(device);
  if (!concurrent) return nullptr;  // asked again next time
  if (!*concurrent) {
    state.verdict = Verdict::kNone;
    logging::warn("[tiered] mover = \"prefetch\" cannot move device {}'s blocks: it has no "
                  "concurrent managed access (CONCURRENT_MANAGED_ACCESS is 0); they are tiered "
                  "with the remap mover",
                  device);
    return nullptr;
  }
  std::string reached;
  try {
    std::vector<int> peers = peers_of(device);
    reached = peers_said(peers);
    state.ops.reset(new tiers::DriverPrefetchOps(device, std::move(peers)));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  state.verdict = Verdict::kMover;
  logging::info("device {}: tiered blocks are managed memory moved by prefetches{}", device,
                reached);
  return state.ops.get();
}

}  // namespace vramspill::hooks
