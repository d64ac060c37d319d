// Physical memory of every simulated device and of host-located VMM allocations: ranges of one
// sparse memfd, so the same bytes can be mapped at several virtual addresses (VMM aliasing, the
// host and shadow views of Note [Two views of device memory]). Freed ranges are punched out of the
// file, which gives the RAM back to the system.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

#include "core/range_allocator.h"

namespace simcuda {

class PhysicalMemory {
 public:
  PhysicalMemory();
  ~PhysicalMemory();
  PhysicalMemory(const PhysicalMemory&) = delete;
  PhysicalMemory& operator=(const PhysicalMemory&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Offset of a zero-filled range of `size` bytes (a multiple of the page size).
  std::optional<uint64_t> allocate(uint64_t size);
  void release(uint64_t offset, uint64_t size);

 private:
  int fd_ = -1;
  std::mutex mutex_;
  RangeAllocator offsets_;
};

}  // namespace simcuda
