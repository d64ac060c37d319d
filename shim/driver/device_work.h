// Waiting for a device's work from wherever the shim happens to run.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <span>

#include "util/stream_end.h"

namespace vramspill::driver {

// Waits for the work of `device`: the calling thread's context when it is on that device,
// otherwise the device's primary context (what the runtime, and so most frameworks, use).
// Work in other contexts of the device is not waited for.
CUresult synchronize_device(int device);

// As synchronize_device(), but only where the device is in use: the calling thread's context is
// on it or its primary context is active. None is made for it (an inactive device has no work).
CUresult synchronize_device_if_active(int device);

// The primary context of `device` when it is active (someone retains it), without making it; 0
// when it is not, or the driver does not say.
uint64_t active_primary_context(int device);

// Waits, for each of `ends`, for its event, or without one for the work queued so far on its
// stream (0 is the legacy stream of the context synchronize_device() would choose).
CUresult wait_for_stream_ends(int device, std::span<const StreamEnd> ends);

}  // namespace vramspill::driver
