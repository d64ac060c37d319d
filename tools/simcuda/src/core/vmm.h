// Virtual memory management: address reservations, physical allocation handles, mappings and
// their access (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess, ...).
//
// Note [VMM model]
// - A handle owns a range of PhysicalMemory, charged to its device's VRAM (device location) or
//   not (host locations), from cuMemCreate until it is released AND no mapping uses it.
// - cuMemMap maps that range into both views (Note [Two views of device memory]); mapping one
//   handle at two addresses aliases the same bytes.
// - As on the driver, a new mapping is inaccessible until cuMemSetAccess: simcuda keeps its shadow
//   view PROT_NONE (PROT_READ for read-only access) per 2 MiB granule until then, so a kernel
//   touching it faults (CUDA_ERROR_ILLEGAL_ADDRESS) exactly like one touching an unmapped range.
//   The mapping's Allocation (kind kVmmMapping, for pointer attributes and the copy engine) is
//   registered only while devices may read every granule of it, so a copy to or from an
//   inaccessible mapping fails its range check (CUDA_ERROR_INVALID_VALUE) instead of crashing
//   simcuda. The driver already answers pointer attributes between cuMemMap and cuMemSetAccess;
//   simcuda does not (cuMemRetainAllocationHandle does work then). A copy or memset that writes
//   into a read-only mapping is refused the same way: check_range (core/copy_engine.h) asks
//   vmm_range_accessible for every write. Access changed or a mapping removed after that check,
//   while the copy is queued, makes the copy fault, which poisons the context (Note [Copy faults]).
// - Access is recorded per device, but the shadow view can hold only one protection, the most
//   any device was given: a kernel on a device without access whose peer has it does not fault.
// - The host view of a mapping is accessible only when host access was granted to host-located
//   memory; host access to device-located memory is CUDA_ERROR_NOT_SUPPORTED.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/host_call_cost.h"

namespace simcuda {

struct Context;

constexpr uint64_t kVmmGranularity = uint64_t{2} << 20;

CUresult vmm_reserve(uint64_t size, uint64_t alignment, uint64_t hint, CUdeviceptr* out);
CUresult vmm_free_reservation(uint64_t address, uint64_t size);

// `prop` is checked by the caller; `device` is the VRAM charged, or -1 for host memory.
CUresult vmm_create(uint64_t size, const CUmemAllocationProp& prop, int device,
                    CUmemGenericAllocationHandle* out);
CUresult vmm_release(CUmemGenericAllocationHandle handle);
// `size`, when not null, gets the handle's size.
CUresult vmm_properties(CUmemGenericAllocationHandle handle, CUmemAllocationProp* out,
                        uint64_t* size = nullptr);
CUresult vmm_retain(uint64_t address, CUmemGenericAllocationHandle* out);

// On success, `*granules` counts the granules of the range by their memory's location (what the
// call costs the host, Note [Host call costs] in core/host_call_cost.h).
CUresult vmm_map(uint64_t address, uint64_t size, uint64_t offset,
                 CUmemGenericAllocationHandle handle, GranuleCount* granules);
CUresult vmm_unmap(uint64_t address, uint64_t size, GranuleCount* granules);

// `*revoked` tells whether a device or the host lost access it had somewhere in the range.
CUresult vmm_set_access(uint64_t address, uint64_t size, const CUmemAccessDesc* descriptors,
                        size_t count, bool* revoked, GranuleCount* granules);
CUresult vmm_get_access(uint64_t address, const CUmemLocation& location, unsigned long long* flags);

// cuCtxDestroy of `context`: VMM memory outlives contexts (handles and mappings are not the
// context's), so mappings made while it was current now name their device's primary context.
void vmm_forget_context(const Context& context);

// True when `address` lies in a reserved granule that was mapped once and is not mapped now: a
// remap in progress (Note [Remap protocol] in remap_check.h).
bool vmm_remap_in_progress(uint64_t address);

// True when every byte of [address, address + size) is mapped and readable (`write`: writable)
// by devices: what the copy engine must check for kVmmMapping memory before touching it.
bool vmm_range_accessible(uint64_t address, uint64_t size, bool write);

}  // namespace simcuda
