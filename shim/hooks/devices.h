// Which device a call charges, and what the shim knows of each device.
//
// Note [The device a request charges]
// Most routes allocate on the device of the calling thread's current context. Stream-ordered
// ones do not: cuMemAllocAsync draws on the current pool of the *stream's* device, and
// cuMemAllocFromPoolAsync on the pool's device, whatever context is current. A thread whose
// current device is 0 may allocate on a stream of device 1 (a launcher that moves threads between
// devices, cudart after cudaSetDevice), and charging device 0 would fill the wrong budget and let
// device 1 past its own. So stream-ordered routes ask the driver for the stream's device
// (cuStreamGetDevice; drivers before 12.8 lack it, and then the stream's context is made current
// for one cuCtxGetDevice) and look the pool's device up (placement/pool_books.h).
#pragma once

#include <cuda.h>

#include <optional>

#include "hooks/shim_state.h"

namespace vramspill::hooks {

// Note [A failed device query fails the request]
// A request whose device the shim cannot tell gets the driver's error for the query, not a pass
// to the driver around the budget: forwarded, it would take memory no budget counts. On a real
// driver cuCtxGetDevice fails only without a current context, where the allocation itself fails
// with the same CUDA_ERROR_INVALID_CONTEXT; so failing closed changes no answer a program gets.

// The device of `context`, made current on this thread for the question only.
CUresult device_of_context(CUcontext context, int& device);

// The device of the calling thread's current context, or cuCtxGetDevice's error.
CUresult current_device(int& device);

// The device of `stream` (Note [The device a request charges]); the current device when the
// driver cannot say, and current_device()'s error when it cannot say either.
CUresult stream_device(CUstream stream, int& device);

// Tells the ledger a device's total and limit the first time the device is seen, and logs once
// if it is integrated (Note [Integrated devices]). The error of cuDeviceTotalMem if the driver
// will not give the device's size: without it the device has no limit, and the request fails
// (Note [A failed device query fails the request]).
CUresult know_device(ShimState& shim, int device);

// Note [Integrated devices]
// An integrated GPU (Jetson, CU_DEVICE_ATTRIBUTE_INTEGRATED) has no memory of its own: device
// allocations are host memory. Spilling would move memory from the host to the host and buy
// nothing, so on such a device the shim holds the budget and does not spill: what does not fit
// is CUDA_ERROR_OUT_OF_MEMORY. Known once know_device() has seen the device.
bool is_integrated(int device);

// The driver's `attribute` of `device`; nullopt when it does not say.
std::optional<int> device_attribute(int device, CUdevice_attribute attribute) noexcept;

// Whether the driver says `device` has concurrent managed access (what the prefetch mover and
// managed spills need); nullopt when it does not say.
std::optional<bool> concurrent_managed_access(int device) noexcept;

}  // namespace vramspill::hooks
