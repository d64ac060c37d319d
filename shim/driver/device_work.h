// Waiting for a device's work from wherever the shim happens to run.
#pragma once

#include <cuda.h>

namespace vramspill::driver {

// Waits for the work of `device`: the calling thread's context when it is on that device,
// otherwise the device's primary context (what the runtime, and so most frameworks, use).
// Work in other contexts of the device is not waited for.
CUresult synchronize_device(int device);

}  // namespace vramspill::driver
