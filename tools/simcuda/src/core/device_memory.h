// Creating and destroying memory that lives in the simulated address space (device linear
// memory, managed memory, pool blocks), and translating device addresses for simcuda's own
// copy engine and kernels (Note [Two views of device memory] in address_space.h).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/allocations.h"

namespace simcuda {

class Device;
class Driver;

constexpr uint64_t kLargePage = uint64_t{2} << 20;  // VMM granularity; alignment of large allocations

uint64_t page_size();
// `value` rounded up to a multiple of `multiple`; UINT64_MAX where that would not fit 64 bits, so
// that a request of SIZE_MAX stays too large to allocate instead of wrapping round to 0.
uint64_t round_up(uint64_t value, uint64_t multiple);

struct MemoryRequest {
  uint64_t size = 0;
  MemoryKind kind = MemoryKind::kDevice;
  bool charge_vram = true;       // false for managed memory, whose pages are charged as they move
  bool host_accessible = false;  // the host view starts accessible (managed memory)
};

// Reserves addresses, takes physical memory, charges VRAM and maps both views. On success fills
// `out` (not yet in the registry). CUDA_ERROR_OUT_OF_MEMORY when VRAM or addresses run out.
CUresult map_new_memory(Device& device, const MemoryRequest& request, Allocation& out);
// Undoes map_new_memory (uncharging `charged_bytes` of VRAM).
void unmap_memory(const Allocation& allocation, uint64_t charged_bytes);

// Where simcuda reads or writes the bytes at `address`: the shadow view for addresses in the
// simulated address space, the address itself for host memory.
void* device_view(uint64_t address);

}  // namespace simcuda
