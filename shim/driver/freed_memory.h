// Whether the driver has freed memory the shim still counts. A context that ends (a device
// reset: Note [Resetting the device] in hooks/device_reset.h) takes its memory with it, and the
// driver then answers for its addresses as for memory it never handed out.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace vramspill::driver {

// Device, managed, pool or page-locked host memory at `address`: a pointer query answers
// CUDA_ERROR_INVALID_VALUE. Any other answer, an error included (a driver being torn down),
// keeps the memory counted: the books never give back what may still be held.
bool memory_freed(uint64_t address);

// cuMemFree_v2 of `address`, CUDA_SUCCESS also where the driver refuses memory it has freed
// already (a free held back past a device reset).
CUresult free_device_memory(uint64_t address);

}  // namespace vramspill::driver
