#include "core/host_allocations.h"

#include <utility>

namespace vramspill::core {

bool HostAllocations::add(uint64_t address, uint64_t bytes, uint64_t* replaced) noexcept {
  const std::lock_guard guard(mutex_);
  try {
    const uint64_t before = std::exchange(bytes_[address], bytes);
    if (replaced != nullptr) *replaced = before;
    return true;
  } catch (...) {
    return false;
  }
}

bool HostAllocations::put_back(uint64_t address, uint64_t bytes) noexcept {
  const std::lock_guard guard(mutex_);
  try {
    return bytes_.try_emplace(address, bytes).second;
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

uint64_t HostAllocations::forget_freed(bool (*freed)(uint64_t address)) noexcept {
  const std::lock_guard guard(mutex_);
  uint64_t bytes = 0;
  std::erase_if(bytes_, [&](const auto& record) {
    if (!freed(record.first)) return false;
    bytes += record.second;
    return true;
  });
  return bytes;
}

}  // namespace vramspill::core
