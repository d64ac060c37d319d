// Every route by which a program takes device memory (shim/README.md, "Interception"), accounted in the
// ledger and held to the device budget. An allocation that does not fit spills to host memory
// where it can (Note [What spills] in placement/spill_placement.h); with [spill] mode = "off" it
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
#include <string>

#include "hooks/admission.h"
#include "hooks/hook.h"
#include "hooks/pool_allocation.h"
#include "hooks/unspilled_allocation.h"
#include "telemetry/log.h"

using vramspill::core::KeySpace;
using vramspill::core::Route;
using vramspill::hooks::Allocated;
using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;
using vramspill::hooks::SpillTarget;
using vramspill::hooks::array_bytes;
using vramspill::hooks::array_creation;
using vramspill::hooks::enter_and_allocate;
using vramspill::hooks::forget_then_free;
using vramspill::hooks::pool_allocation;

namespace {

// The per-thread default stream, which the _ptsz exports mean by stream 0: named explicitly when
// the shim itself queues work or asks about capture there.
CUstream per_thread(CUstream stream) { return stream == nullptr ? CU_STREAM_PER_THREAD : stream; }

// cuMemAllocPitch's pitch for a spilled allocation: rows padded to 512 bytes, what the driver
// gives on current GPUs (and simcuda), so that code tuned to the driver's pitch sees the same.
constexpr uint64_t kSpillPitchAlignment = 512;

constexpr uint64_t round_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

namespace {

// Note [A budget that leaves nothing]
// A percent budget (or a size above the device) becomes bytes only once the driver says how big
// each device is: 50% of a 1 GiB device with a 600 MiB reserve leaves a limit of 0, and every
// allocation would be refused or spilled. That is an invalid configuration like the ones
// load_config() finds, so cuInit fails with CUDA_ERROR_INVALID_VALUE and the log gives the
// figures; the real cuInit runs first because only an initialised driver answers.
bool every_device_has_room(const vramspill::DeviceConfig& config) noexcept {
  const auto count_devices = VRAMSPILL_REAL(cuDeviceGetCount);
  const auto get_device = VRAMSPILL_REAL(cuDeviceGet);
  const auto total_memory = VRAMSPILL_REAL(cuDeviceTotalMem_v2);
  int count = 0;
  if (count_devices == nullptr || get_device == nullptr || total_memory == nullptr ||
      count_devices(&count) != CUDA_SUCCESS)
    return true;  // nothing to check against; know_device() learns each device later
  bool room = true;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice device = 0;
    size_t total = 0;
    if (get_device(&device, ordinal) != CUDA_SUCCESS ||
        total_memory(&total, device) != CUDA_SUCCESS)
      continue;
    try {
      const std::string problem = config.nothing_left(total);
      if (problem.empty()) continue;
      vramspill::logging::error(
          "invalid configuration for device {}, CUDA initialisation fails: {}", ordinal, problem);
      room = false;
    } catch (...) {  // out of memory building the message: the device cannot be judged
    }
  }
  return room;
}

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuInit(unsigned int Flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuInit);
  if (vramspill::hooks::configuration_error() != nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult result = real(Flags);
  const Entry entry;
  if (result != CUDA_SUCCESS || entry.state() == nullptr) return result;
  // Note [A budget that leaves nothing]
  return every_device_has_room(entry.state()->config.device) ? result : CUDA_ERROR_INVALID_VALUE;
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAlloc_v2);
  // The driver's error for a NULL output or a zero size, before any budget or spill.
  if (dptr == nullptr || bytesize == 0) return real(dptr, bytesize);
  return enter_and_allocate(Route::kMemAlloc, bytesize,
                            SpillTarget{.out = dptr, .bytes = bytesize, .may_tier = true},
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
  // A padded size past 2^64 bytes: no tier can hold it, and the wrapped-around product must not
  // be admitted or spilled as a small block. The driver gives its error.
  uint64_t spill_bytes = 0;
  if (WidthInBytes > UINT64_MAX - (kSpillPitchAlignment - 1) ||
      __builtin_mul_overflow(round_up(WidthInBytes, kSpillPitchAlignment), Height, &spill_bytes))
    return allocate();
  const uint64_t spill_pitch = round_up(WidthInBytes, kSpillPitchAlignment);
  // Admitted at the unpadded size; the ledger then records pitch x height (what was taken).
  return enter_and_allocate(
      Route::kMemAllocPitch, uint64_t{WidthInBytes} * Height,
      SpillTarget{.out = dptr,
                  .bytes = spill_bytes,
                  .pitch_out = pPitch,
                  .pitch = static_cast<size_t>(spill_pitch),
                  .may_tier = true},
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
  return enter_and_allocate(
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

// Not allocations: the shim records where a pool's memory is, and forgets a destroyed pool's
// figure (placement/pool_books.h).
VRAMSPILL_HOOK CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool,
                                                const CUmemPoolProps* poolProps) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemPoolCreate);
  const CUresult result = real(pool, poolProps);
  if (result == CUDA_SUCCESS) vramspill::hooks::pool_books().created(*pool, *poolProps);
  return result;
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemPoolDestroy);
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return real(pool);
  return vramspill::hooks::pool_books().destroy(shim->ledger, pool, [&] { return real(pool); });
}

// A trim gives the pool's idle memory back at once, so the pools' figures are read again (Note
// [Refreshing pool figures] in placement/pool_books.cpp). Trimming a plain pool also gives the
// device's kept stream-ordered blocks back to the arena (Note [Stream-ordered requests in the
// arena] in placement/stream_ordered_blocks.h).
VRAMSPILL_HOOK CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemPoolTrimTo);
  const CUresult result = real(pool, minBytesToKeep);
  const Entry entry;
  if (ShimState* shim = entry.state(); shim != nullptr && result == CUDA_SUCCESS) {
    vramspill::hooks::pool_books().refresh(shim->ledger);
    vramspill::hooks::pool_trimmed(*shim, pool);
  }
  return result;
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
  if (pHandle == nullptr || pAllocateArray == nullptr ||
      !vramspill::hooks::array_owns_memory(*pAllocateArray))
    return create();
  const CUDA_ARRAY3D_DESCRIPTOR& d = *pAllocateArray;
  return array_creation(pHandle,
                        array_bytes(d.Width, d.Height, d.Depth, d.NumChannels, d.Format), create);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
  VRAMSPILL_REAL_OR_RETURN(real, cuArrayDestroy);
  return forget_then_free(reinterpret_cast<uint64_t>(hArray), KeySpace::kArray,
                          [&] { return real(hArray); });
}
