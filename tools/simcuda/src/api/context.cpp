// Primary contexts, created contexts and the current-context stack.
#include <mutex>

#include "core/api.h"
#include "core/capture.h"
#include "core/context.h"
#include "core/driver.h"
#include "core/memory_pool.h"

using simcuda::Context;
using simcuda::Device;
using simcuda::Driver;

namespace {

std::mutex primary_mutex;  // guards Context::primary_retains

Device* device_or_null(CUdevice ordinal) { return Driver::instance()->device(ordinal); }

CUresult create(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* device = device_or_null(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  Context* context = simcuda::create_context(device, flags);
  if (!simcuda::push_context(context)) {
    simcuda::destroy_context(context);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *pctx = context->handle();
  return CUDA_SUCCESS;
}

// "The context is automatically reset once the last reference to it is released" (cuda.h): the
// reset is made holding the lock, so that a retain on another thread finds the context either
// still live, keeping it, or already empty.
CUresult release_primary(CUdevice dev) {
  Device* device = device_or_null(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(primary_mutex);
  Context* primary = device->primary_context();
  if (primary->primary_retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--primary->primary_retains == 0) simcuda::reset_primary_context(primary);
  return CUDA_SUCCESS;
}

CUresult reset_primary(CUdevice dev) {
  Device* device = device_or_null(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  simcuda::reset_primary_context(device->primary_context());
  return CUDA_SUCCESS;
}

CUresult set_primary_flags(CUdevice dev, unsigned int flags) {
  Device* device = device_or_null(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(primary_mutex);
  device->primary_context()->flags = flags;
  return CUDA_SUCCESS;
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  SIMCUDA_ENTER("cuDevicePrimaryCtxRetain");
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* device = device_or_null(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(primary_mutex);
  ++device->primary_context()->primary_retains;
  *pctx = device->primary_context()->handle();
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  SIMCUDA_ENTER("cuDevicePrimaryCtxRelease");
  return release_primary(dev);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  SIMCUDA_ENTER("cuDevicePrimaryCtxRelease_v2");
  return release_primary(dev);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) {
  SIMCUDA_ENTER("cuDevicePrimaryCtxReset");
  return reset_primary(dev);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  SIMCUDA_ENTER("cuDevicePrimaryCtxReset_v2");
  return reset_primary(dev);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  SIMCUDA_ENTER("cuDevicePrimaryCtxSetFlags");
  return set_primary_flags(dev, flags);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  SIMCUDA_ENTER("cuDevicePrimaryCtxSetFlags_v2");
  return set_primary_flags(dev, flags);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags,
                                                           int* active) {
  SIMCUDA_ENTER("cuDevicePrimaryCtxGetState");
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* device = device_or_null(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(primary_mutex);
  *flags = device->primary_context()->flags;
  *active = device->primary_context()->primary_retains > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  SIMCUDA_ENTER("cuCtxCreate_v2");
  return create(pctx, flags, dev);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params,
                                               unsigned int flags, CUdevice dev) {
  SIMCUDA_ENTER("cuCtxCreate_v4");
  // Execution affinity and CIG parameters have no meaning on a simulated device.
  if (params != nullptr && (params->numExecAffinityParams != 0 || params->cigParams != nullptr))
    return CUDA_ERROR_NOT_SUPPORTED;
  return create(pctx, flags, dev);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  SIMCUDA_ENTER("cuCtxDestroy_v2");
  Context* context = simcuda::context_from_handle(ctx);
  if (context == nullptr || context->primary) return CUDA_ERROR_INVALID_CONTEXT;
  simcuda::destroy_context(context);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  SIMCUDA_ENTER("cuCtxPushCurrent_v2");
  Context* context = simcuda::context_from_handle(ctx);
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return simcuda::push_context(context) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
  SIMCUDA_ENTER("cuCtxPopCurrent_v2");
  Context* top = simcuda::pop_context();
  if (top == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = top->handle();
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  SIMCUDA_ENTER("cuCtxSetCurrent");
  Context* context = nullptr;
  if (ctx != nullptr) {
    context = simcuda::context_from_handle(ctx);
    if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  }
  simcuda::set_current_context(context);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  SIMCUDA_ENTER("cuCtxGetCurrent");
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = simcuda::current_context();
  *pctx = context != nullptr ? context->handle() : nullptr;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  SIMCUDA_ENTER("cuCtxGetDevice");
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = context->device->ordinal();
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxGetFlags(unsigned int* flags) {
  SIMCUDA_ENTER("cuCtxGetFlags");
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *flags = context->flags;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  SIMCUDA_ENTER("cuCtxGetApiVersion");
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = ctx != nullptr ? simcuda::context_from_handle(ctx) : simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 3020;  // every context since CUDA 3.2 reports this API version
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxSynchronize() {
  SIMCUDA_ENTER("cuCtxSynchronize");
  Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  context->synchronize();
  simcuda::trim_pools_at_synchronize(*context->device);
  return context->sticky_error.load();
}
