#include "core/copy_engine.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/device_memory.h"
#include "core/driver.h"
#include "core/traffic.h"

namespace simcuda {

MemoryPlace place_of(uint64_t address) {
  Driver& driver = *Driver::instance();
  if (driver.addresses().contains(address)) return MemoryPlace::kDevice;
  const std::optional<Allocation> found = driver.allocations().find_containing(address);
  return found && found->host_located ? MemoryPlace::kPinnedHost : MemoryPlace::kPageableHost;
}

CUresult check_range(uint64_t address, uint64_t size) {
  if (address == 0 || size > std::numeric_limits<uint64_t>::max() - address)
    return CUDA_ERROR_INVALID_VALUE;
  const AllocationRegistry& registry = Driver::instance()->allocations();
  const uint64_t end = address + size;
  for (uint64_t cursor = address;;) {
    const std::optional<Allocation> found = registry.find_containing(cursor);
    if (!found) return CUDA_ERROR_INVALID_VALUE;
    // A VMM mapping is usable up to its mapped end; other allocations up to the size asked for.
    const bool vmm = found->kind == MemoryKind::kVmmMapping;
    const uint64_t limit = found->base + (vmm ? found->mapped : found->size);
    if (cursor >= limit) return CUDA_ERROR_INVALID_VALUE;
    if (end <= limit) return CUDA_SUCCESS;
    if (!vmm) return CUDA_ERROR_INVALID_VALUE;
    cursor = limit;
  }
}

CUresult check_host_pointer(uint64_t address, uint64_t size, MemoryPlace* place) {
  if (address == 0) return CUDA_ERROR_INVALID_VALUE;
  *place = place_of(address);
  if (*place == MemoryPlace::kDevice) return check_range(address, size);
  // Memory only partly page-locked is staged by the driver like pageable memory.
  if (*place == MemoryPlace::kPinnedHost && check_range(address, size) != CUDA_SUCCESS)
    *place = MemoryPlace::kPageableHost;
  return CUDA_SUCCESS;
}

std::shared_ptr<std::vector<unsigned char>> stage_source(Copy2D& copy) {
  auto staging = std::make_shared<std::vector<unsigned char>>(copy.width * copy.height);
  for (uint64_t row = 0; row < copy.height; ++row)
    std::memcpy(staging->data() + row * copy.width, device_view(copy.src + row * copy.src_pitch),
                copy.width);
  copy.src = reinterpret_cast<uint64_t>(staging->data());
  copy.src_pitch = copy.width;
  return staging;
}

StreamWork copy_work(Device& device, Copy2D copy,
                     std::shared_ptr<std::vector<unsigned char>> staging) {
  return [&device, copy, staging = std::move(staging)] {
    for (uint64_t row = 0; row < copy.height; ++row)
      std::memmove(device_view(copy.dst + row * copy.dst_pitch),
                   device_view(copy.src + row * copy.src_pitch), copy.width);
    if (place_of(copy.src) == MemoryPlace::kPageableHost &&
        place_of(copy.dst) == MemoryPlace::kPageableHost)
      return 0.0;
    const uint64_t bytes = copy.width * copy.height;
    return account_access(device, Engine::kCopy, copy.src, bytes, Access::kRead) +
           account_access(device, Engine::kCopy, copy.dst, bytes, Access::kWrite);
  };
}

namespace {

template <typename Element>
void fill_row(void* row, uint64_t count, uint32_t value) {
  std::fill_n(static_cast<Element*>(row), count, static_cast<Element>(value));
}

}  // namespace

StreamWork fill_work(Device& device, Fill fill) {
  return [&device, fill] {
    for (uint64_t row = 0; row < fill.height; ++row) {
      void* start = device_view(fill.dst + row * fill.pitch);
      switch (fill.element_size) {
        case 1:
          fill_row<uint8_t>(start, fill.width, fill.value);
          break;
        case 2:
          fill_row<uint16_t>(start, fill.width, fill.value);
          break;
        default:
          fill_row<uint32_t>(start, fill.width, fill.value);
          break;
      }
    }
    return account_access(device, Engine::kKernel, fill.dst,
                          fill.width * fill.element_size * fill.height, Access::kWrite);
  };
}

}  // namespace simcuda
