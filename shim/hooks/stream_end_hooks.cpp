// Streams and contexts the program destroys or releases: their slots in the use tracker retire
// before the driver lets the handles go, so that the tracked window never waits on a stream that is
// gone (Note [Stream slots] in core/stream_slots.h), blocks freed on them for reuse wait for
// their frees to be reached (Note [Reuse in stream order] in tiers/stream_ordered_reuse.h), and the
// prefetch mover no longer orders its moves after them (its handle may be gone or reused). A
// context takes all its streams with it; which ones is not known here, so every slot retires.
// It takes its modules too, so the launch layouts cached by function are forgotten. A capture
// begun on a stream the program destroys ends with it (Note [Counting captures] in
// core/capture_origins.h), and so do those of a context the program destroys or resets. A reset
// of a primary context also takes its memory (Note [Resetting the device] in hooks/device_reset.h),
// and so may the release of its last reference, for which the program's retains are counted (Note
// [The last release of a primary context] there).
#include <mutex>
#include <vector>

#include "driver/stream_capture.h"
#include "hooks/device_reset.h"
#include "hooks/devices.h"
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
  if (ShimState* shim = entry.state()) {
    shim->use.stream_slots().retire(reinterpret_cast<uintptr_t>(stream), &destroy_event);
    shim->stream_ordered_blocks.stream_ended(stream);
    shim->prefetch.stream_ended(reinterpret_cast<uint64_t>(stream));
  }
}

void retire_all() noexcept {
  const Entry entry;
  if (ShimState* shim = entry.state()) {
    shim->use.stream_slots().retire_all();
    shim->stream_ordered_blocks.all_streams_ended();
    shim->prefetch.all_streams_ended();
    // Its modules go with it, unloaded or not: their functions' values may come back for others
    // (Note [The parameter layout cache] in core/launch_arguments.h).
    shim->launch_layouts.forget_all();
  }
}

// The driver destroys `stream`: a capture begun on it ends with it (Note [Counting captures] in
// core/capture_origins.h). The gate is held across the call, so that no capture begins on the
// handle, new again, before the old one's is uncounted; only for a stream being captured, since
// the gate waits for every call the shim holds captures off through (a wait for the device
// among them), and cuStreamDestroy is documented to return at once.
CUresult destroy_stream(CUstream stream, CUresult (*real)(CUstream)) noexcept {
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr || !vramspill::driver::stream_capturing(reinterpret_cast<uint64_t>(stream)))
    return real(stream);
  const auto changing = shim->captures.change();
  const uint64_t context = vramspill::driver::stream_context(reinterpret_cast<uint64_t>(stream));
  const CUresult result = real(stream);
  if (result == CUDA_SUCCESS) shim->captures.ended(reinterpret_cast<uint64_t>(stream), context);
  return result;
}

// The driver resets `device`'s primary context: its streams retire first, and what its memory
// was leaves the books after.
CUresult reset_device(CUdevice device, CUresult (*real)(CUdevice)) noexcept {
  retire_all();
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return real(device);
  const vramspill::hooks::BeforeReset before = vramspill::hooks::prepare_for_reset(*shim, device);
  const CUresult result = real(device);
  if (result == CUDA_SUCCESS)
    vramspill::hooks::forget_what_the_reset_freed(*shim, device, before, "cuDevicePrimaryCtxReset");
  return result;
}

// The program releases `device`'s primary context. Which release drops the last reference is
// not known for sure beforehand, and after it the streams may be gone: every release retires the
// slots (a later move then waits for the whole device once). The last one the shim counted may
// reset the context (Note [The last release of a primary context] in hooks/device_reset.h).
CUresult release_primary(CUdevice device, CUresult (*real)(CUdevice)) noexcept {
  retire_all();
  const Entry entry;
  ShimState* shim = entry.state();
  // Once the process exits (a runtime's teardown releasing), the driver's release alone.
  if (shim == nullptr || vramspill::hooks::exit_begun()) return real(device);
  return vramspill::hooks::program_releases_primary(*shim, device, real);
}

// The driver destroys `context`, with its streams and their captures (Note [Counting captures]
// in core/capture_origins.h), and what was allocated in it (Note [A created context's end] in
// hooks/device_reset.h).
CUresult destroy_context(CUcontext context, CUresult (*real)(CUcontext)) noexcept {
  retire_all();
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr || vramspill::hooks::exit_begun()) return real(context);
  int device = -1;
  std::vector<vramspill::core::Allocation> held;
  if (vramspill::hooks::device_of_context(context, device) == CUDA_SUCCESS)
    held = shim->ledger.all_of(device);
  CUresult result = CUDA_SUCCESS;
  if (shim->captures.capturing()) {
    const auto changing = shim->captures.change();
    result = real(context);
    if (result == CUDA_SUCCESS) shim->captures.context_ended(reinterpret_cast<uint64_t>(context));
  } else {
    result = real(context);
  }
  if (result == CUDA_SUCCESS && device >= 0)
    vramspill::hooks::forget_what_the_destroy_freed(*shim, device, held);
  return result;
}

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuStreamDestroy);
  retire(hStream);
  return destroy_stream(hStream, real);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuStreamDestroy_v2);
  retire(hStream);
  return destroy_stream(hStream, real);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  VRAMSPILL_REAL_OR_RETURN(real, cuCtxDestroy_v2);
  return destroy_context(ctx, real);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) {
  VRAMSPILL_REAL_OR_RETURN(real, cuDevicePrimaryCtxReset);
  return reset_device(dev, real);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  VRAMSPILL_REAL_OR_RETURN(real, cuDevicePrimaryCtxReset_v2);
  return reset_device(dev, real);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  VRAMSPILL_REAL_OR_RETURN(real, cuDevicePrimaryCtxRetain);
  const Entry entry;
  if (entry.state() == nullptr) return real(pctx, dev);
  return vramspill::hooks::program_retains_primary(pctx, dev, real);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  VRAMSPILL_REAL_OR_RETURN(real, cuDevicePrimaryCtxRelease);
  return release_primary(dev, real);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  VRAMSPILL_REAL_OR_RETURN(real, cuDevicePrimaryCtxRelease_v2);
  return release_primary(dev, real);
}
