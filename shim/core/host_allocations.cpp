#include "core/host_allocations.h"

namespace vramspill::core {

bool HostAllocations::add(uint64_t address, uint64_t bytes) noexcept {
  const std::lock_guard guard(mutex_);
  try {
    bytes_[address] = bytes;
    return true;
  } catch (...) {
    return false;
  }
}

std::optional<uint64_t> HostAllocations::remove(uint64_t address) noexcept {
  const std::lock_guard guard(mutex_);
  const auto it = bytes_.find(address);
  if (it == bytes_.end()) return std::nullopt;
  const uint64_t bytes = it->second;
  bytes_.erase(it);
  return bytes;
}

}  // namespace vramspill::core
