// Streams and contexts the program destroys or releases: their slots in the use tracker retire
// before the driver lets the handles go, so that the tracked window never waits on a stream that is
// gone (Note [Stream slots] in core/stream_slots.h). A context takes all its streams with it; which
// ones is not known here, so every slot retires.
#include "hooks/hook.h"
#include "hooks/shim_state.h"

using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;

namespace {

void destroy_event(uint64_t event) {
  if (const auto destroy = VRAMSPILL_REAL(cuEventDestroy_v2))
    destroy(reinterpret_cast<CUevent>(event));
}

void retire(CUstream stream) noexcept {
  const Entry entry;
  if (ShimState* shim = entry.state())
    shim->use.stream_slots().retire(reinterpret_cast<uintptr_t>(stream), &destroy_event);
}

void retire_all() noexcept {
  const Entry entry;
  if (ShimState* shim = entry.state()) shim->use.stream_slots().retire_all();
}

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuStreamDestroy);
  retire(hStream);
  return real(hStream);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuStreamDestroy_v2);
  retire(hStream);
  return real(hStream);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  VRAMSPILL_REAL_OR_RETURN(real, cuCtxDestroy_v2);
  retire_all();
  return real(ctx);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) {
  VRAMSPILL_REAL_OR_RETURN(real, cuDevicePrimaryCtxReset);
  retire_all();
  return real(dev);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  VRAMSPILL_REAL_OR_RETURN(real, cuDevicePrimaryCtxReset_v2);
  retire_all();
  return real(dev);
}

// Which release drops the last reference cannot be told beforehand, and after it the streams may
// be gone: every release retires the slots (a later move then waits for the whole device once).
VRAMSPILL_HOOK CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  VRAMSPILL_REAL_OR_RETURN(real, cuDevicePrimaryCtxRelease);
  retire_all();
  return real(dev);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  VRAMSPILL_REAL_OR_RETURN(real, cuDevicePrimaryCtxRelease_v2);
  retire_all();
  return real(dev);
}
