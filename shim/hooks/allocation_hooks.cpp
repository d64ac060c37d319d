// Every route by which a program takes device memory (DESIGN section 4), accounted in the
// ledger and held to the device budget. An allocation that does not fit spills to host memory
// where it can (Note [What spills] in hooks/spill_placement.h); with [spill] mode = "off" it
// returns CUDA_ERROR_OUT_OF_MEMORY and the log says who holds what.
//
// Each hook: enter (Note [Entering the shim]); without shim state, forward untouched. Otherwise
// admit, call the driver, settle the admission (Note [Reservation protocol] in core/ledger.h).
// Arguments are never dereferenced before the driver has checked them: a NULL or invalid
// argument gets the driver's own error, and the reservation is cancelled. A NULL output pointer
// goes straight to the driver, so that even a request over the budget gets the driver's error.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "hooks/admission.h"
#include "hooks/hook.h"
#include "util/array_format.h"

using vramspill::core::KeySpace;
using vramspill::core::Route;
using vramspill::hooks::Allocated;
using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;
using vramspill::hooks::SpillTarget;
using vramspill::hooks::admit_and_allocate;
using vramspill::hooks::current_device;
using vramspill::hooks::forget_then_free;

namespace {

// The per-thread default stream, which the _ptsz exports mean by stream 0: named explicitly when
// the shim itself queues work or asks about capture there.
CUstream per_thread(CUstream stream) { return stream == nullptr ? CU_STREAM_PER_THREAD : stream; }

// `call` is the driver's allocation; `pool` is null for kMemAllocAsync (the device's current pool).
template <typename Call>
CUresult pool_allocation(Route route, CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                         CUstream stream, Call call) {
  if (dptr == nullptr) return call();  // the driver's error, whatever the budget would say
  const Entry entry;
  ShimState* shim = entry.state();
  const std::optional<int> device = shim != nullptr ? current_device() : std::nullopt;
  if (!device) return call();
  if (route == Route::kMemAllocAsync) pool = vramspill::hooks::current_pool(*device);
  const vramspill::hooks::PoolUsage before = vramspill::hooks::pool_usage(pool);
  return admit_and_allocate(
      *shim, *device, route, bytesize,
      before.reserved > before.used ? before.reserved - before.used : 0,
      SpillTarget{.out = dptr, .bytes = bytesize, .stream = stream, .stream_ordered = true},
      [&](Allocated& allocated) {
        const CUresult result = call();
        if (result == CUDA_SUCCESS) allocated.key = *dptr;
        return result;
      },
      [&](const Allocated&) { vramspill::hooks::report_pool(*shim, *device, pool); });
}

// For formats without a plain per-channel size (block-compressed, planar) one byte per channel
// is a lower bound.
uint64_t array_bytes(size_t width, size_t height, size_t depth, unsigned int channels,
                     CUarray_format format) {
  const auto at_least_one = [](uint64_t extent) { return extent == 0 ? uint64_t{1} : extent; };
  return uint64_t{width} * at_least_one(height) * at_least_one(depth) * channels *
         std::max<uint64_t>(vramspill::array_channel_bytes(format), 1);
}

template <typename Create>
CUresult array_creation(CUarray* handle, uint64_t bytes, Create create) {
  const Entry entry;
  ShimState* shim = entry.state();
  const std::optional<int> device = shim != nullptr ? current_device() : std::nullopt;
  if (!device) return create();
  // Arrays never spill (Note [What spills]).
  return admit_and_allocate(*shim, *device, Route::kArray, bytes, SpillTarget{},
                            [&](Allocated& allocated) {
                              const CUresult result = create();
                              if (result == CUDA_SUCCESS)
                                allocated.key = reinterpret_cast<uint64_t>(*handle);
                              return result;
                            });
}

// cuMemAlloc, cuMemAllocPitch and cuMemAllocManaged: `*dptr` is the allocation, from the driver
// or from a spill tier.
template <typename Allocate>
CUresult linear_allocation(Route route, uint64_t bytes, const SpillTarget& spill_target,
                           Allocate allocate) {
  const Entry entry;
  ShimState* shim = entry.state();
  const std::optional<int> device = shim != nullptr ? current_device() : std::nullopt;
  if (!device) {
    Allocated ignored;
    return allocate(ignored);
  }
  return admit_and_allocate(*shim, *device, route, bytes, spill_target, allocate);
}

// cuMemAllocPitch's pitch for a spilled allocation: rows padded to 512 bytes, what the driver
// gives on current GPUs (and simcuda), so that code tuned to the driver's pitch sees the same.
constexpr uint64_t kSpillPitchAlignment = 512;

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuInit(unsigned int Flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuInit);
  if (vramspill::hooks::configuration_error() != nullptr) return CUDA_ERROR_INVALID_VALUE;
  return real(Flags);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAlloc_v2);
  // The driver's error for a NULL output or a zero size, before any budget or spill.
  if (dptr == nullptr || bytesize == 0) return real(dptr, bytesize);
  return linear_allocation(Route::kMemAlloc, bytesize, SpillTarget{.out = dptr, .bytes = bytesize},
                           [&](Allocated& allocated) {
                             const CUresult result = real(dptr, bytesize);
                             if (result == CUDA_SUCCESS) allocated.key = *dptr;
                             return result;
                           });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch,
                                                   size_t WidthInBytes, size_t Height,
                                                   unsigned int ElementSizeBytes) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocPitch_v2);
  const auto allocate = [&] { return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes); };
  // The driver's error for NULL outputs and bad shapes, before any budget or spill.
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0 ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
    return allocate();
  const uint64_t spill_pitch =
      (uint64_t{WidthInBytes} + kSpillPitchAlignment - 1) / kSpillPitchAlignment *
      kSpillPitchAlignment;
  // Admitted at the unpadded size; the ledger then records pitch x height (what was taken).
  return linear_allocation(
      Route::kMemAllocPitch, uint64_t{WidthInBytes} * Height,
      SpillTarget{.out = dptr,
                  .bytes = spill_pitch * Height,
                  .pitch_out = pPitch,
                  .pitch = static_cast<size_t>(spill_pitch)},
      [&](Allocated& allocated) {
        const CUresult result = allocate();
        if (result == CUDA_SUCCESS) {
          allocated.key = *dptr;
          allocated.bytes = uint64_t{*pPitch} * Height;
        }
        return result;
      });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize,
                                                  unsigned int flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocManaged);
  if (dptr == nullptr || bytesize == 0) return real(dptr, bytesize, flags);  // the driver's error
  return linear_allocation(
      Route::kMemAllocManaged, bytesize,
      SpillTarget{.out = dptr, .bytes = bytesize, .managed_flags = flags},
      [&](Allocated& allocated) {
        const CUresult result = real(dptr, bytesize, flags);
        if (result == CUDA_SUCCESS) allocated.key = *dptr;
        return result;
      });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize,
                                                CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocAsync);
  return pool_allocation(Route::kMemAllocAsync, dptr, bytesize, nullptr, hStream,
                         [&] { return real(dptr, bytesize, hStream); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                     CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocAsync_ptsz);
  return pool_allocation(Route::kMemAllocAsync, dptr, bytesize, nullptr, per_thread(hStream),
                         [&] { return real(dptr, bytesize, hStream); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                                        CUmemoryPool pool, CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocFromPoolAsync);
  return pool_allocation(Route::kMemAllocFromPoolAsync, dptr, bytesize, pool, hStream,
                         [&] { return real(dptr, bytesize, pool, hStream); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                             CUmemoryPool pool,
                                                             CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocFromPoolAsync_ptsz);
  return pool_allocation(Route::kMemAllocFromPoolAsync, dptr, bytesize, pool, per_thread(hStream),
                         [&] { return real(dptr, bytesize, pool, hStream); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemFree_v2);
  return forget_then_free(dptr, KeySpace::kPointer, [&] { return real(dptr); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemFreeAsync);
  return forget_then_free(dptr, KeySpace::kPointer, [&] { return real(dptr, hStream); }, hStream);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemFreeAsync_ptsz);
  return forget_then_free(dptr, KeySpace::kPointer, [&] { return real(dptr, hStream); },
                          per_thread(hStream));
}

VRAMSPILL_HOOK CUresult CUDAAPI cuArrayCreate_v2(CUarray* pHandle,
                                                 const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  VRAMSPILL_REAL_OR_RETURN(real, cuArrayCreate_v2);
  const auto create = [&] { return real(pHandle, pAllocateArray); };
  if (pHandle == nullptr || pAllocateArray == nullptr) return create();
  const CUDA_ARRAY_DESCRIPTOR& d = *pAllocateArray;
  return array_creation(pHandle, array_bytes(d.Width, d.Height, 1, d.NumChannels, d.Format),
                        create);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuArray3DCreate_v2(CUarray* pHandle,
                                                   const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  VRAMSPILL_REAL_OR_RETURN(real, cuArray3DCreate_v2);
  const auto create = [&] { return real(pHandle, pAllocateArray); };
  if (pHandle == nullptr || pAllocateArray == nullptr) return create();
  const CUDA_ARRAY3D_DESCRIPTOR& d = *pAllocateArray;
  return array_creation(pHandle,
                        array_bytes(d.Width, d.Height, d.Depth, d.NumChannels, d.Format), create);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
  VRAMSPILL_REAL_OR_RETURN(real, cuArrayDestroy);
  return forget_then_free(reinterpret_cast<uint64_t>(hArray), KeySpace::kArray,
                          [&] { return real(hArray); });
}
