#include "core/peer_access.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <vector>

#include "core/context.h"
#include "core/driver.h"

namespace simcuda {
namespace {

// One enabled access. The peer's device is kept with it so that the kernel-side check never
// follows the peer pointer: a program may destroy the peer while one of `from`'s kernels runs.
struct PeerLink {
  const Context* from;
  const Context* peer;
  int peer_device;
};

std::mutex links_mutex;
std::vector<PeerLink>& links() {
  static auto* all = new std::vector<PeerLink>();  // outlives exit-time callers
  return *all;
}

// Caller holds links_mutex.
auto find_link(const Context& from, const Context& peer) {
  return std::find_if(links().begin(), links().end(), [&](const PeerLink& link) {
    return link.from == &from && link.peer == &peer;
  });
}

bool has_access_to_device(const Context& from, int device) {
  std::lock_guard lock(links_mutex);
  return std::any_of(links().begin(), links().end(), [&](const PeerLink& link) {
    return link.from == &from && link.peer_device == device;
  });
}

}  // namespace

CUresult enable_peer_access(const Context& from, const Context& peer) {
  std::lock_guard lock(links_mutex);
  if (find_link(from, peer) != links().end()) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  links().push_back({&from, &peer, peer.device->ordinal()});
  return CUDA_SUCCESS;
}

CUresult disable_peer_access(const Context& from, const Context& peer) {
  std::lock_guard lock(links_mutex);
  const auto link = find_link(from, peer);
  if (link == links().end()) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  links().erase(link);
  return CUDA_SUCCESS;
}

void forget_peer_access(const Context& context) {
  std::lock_guard lock(links_mutex);
  std::erase_if(links(), [&](const PeerLink& link) {
    return link.from == &context || link.peer == &context;
  });
}

std::optional<uint64_t> first_address_without_peer_access(const Context& from, uint64_t address,
                                                          uint64_t size) {
  Driver& driver = *Driver::instance();
  if (driver.device_count() == 1) return std::nullopt;  // there is no other device's memory
  const AllocationRegistry& registry = driver.allocations();
  const int own_device = from.device->ordinal();
  const uint64_t end = size > std::numeric_limits<uint64_t>::max() - address
                           ? std::numeric_limits<uint64_t>::max()
                           : address + size;
  // A range may run through several adjacent allocations; each is judged on its own.
  for (uint64_t cursor = address; cursor < end;) {
    const std::optional<Allocation> found = registry.find_containing(cursor);
    if (!found) return std::nullopt;
    const bool plain_device_memory = found->kind == MemoryKind::kDevice && found->pool == nullptr;
    if (plain_device_memory && found->device != own_device &&
        !has_access_to_device(from, found->device))
      return cursor;
    // The extent find_containing() searches.
    cursor = found->base + std::max(found->mapped, found->size);
  }
  return std::nullopt;
}

}  // namespace simcuda
