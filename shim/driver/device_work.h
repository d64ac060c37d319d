// Waiting for a device's work from wherever the shim happens to run.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <span>

namespace vramspill::driver {

// Waits for the work of `device`: the calling thread's context when it is on that device,
// otherwise the device's primary context (what the runtime, and so most frameworks, use).
// Work in other contexts of the device is not waited for.
CUresult synchronize_device(int device);

// Waits for the work queued so far on each of `streams` (CUstream values; 0 is the legacy
// stream of the same context as synchronize_device() would choose).
CUresult synchronize_streams(int device, std::span<const uint64_t> streams);

}  // namespace vramspill::driver
