// Stream-ordered memory pools (cuMemAllocAsync, cuMemFreeAsync, cuMemPool*).
//
// Note [Stream-ordered pools]
// A pool reserves device memory in blocks: each allocation takes one block of its size rounded
// up to 2 MiB (kLargePage), charged to VRAM while the pool holds it (RESERVED_MEM_CURRENT), and
// registered as an Allocation of kind kDevice with `pool` set. The driver sub-allocates inside
// larger reservations; simcuda keeps one allocation per block, and reuses a free block for a
// request of at least half its size, so reserved memory stays close to the driver's.
// - cuMemFreeAsync queues a marker on the stream; the block is free for the same stream at once
//   (stream order) and for any stream once the marker ran (REUSE_ALLOW_OPPORTUNISTIC). When no
//   block fits and VRAM is short, a block whose free has not run yet is reused by making the
//   allocating stream wait for the freeing one (REUSE_ALLOW_INTERNAL_DEPENDENCIES); then idle
//   blocks of every pool of the device are released and the allocation retried.
//   REUSE_FOLLOW_EVENT_DEPENDENCIES is accepted but not modeled (such reuse happens once the
//   free ran).
// - A free block keeps its mapping and its last registry entry (the driver keeps pool memory
//   mapped too; touching it is undefined behaviour, not a fault). Reusing it registers it anew.
// - Free memory above RELEASE_THRESHOLD is given back at synchronisation points:
//   trim_pools_at_synchronize, called by cuStreamSynchronize, cuCtxSynchronize,
//   cuEventSynchronize and cuMemFree, and by cuMemPoolTrimTo on request.
// - USED_MEM_* counts the bytes the program asked for; RESERVED_MEM_* the blocks' VRAM.
// - On a capturing stream, cuMemAllocAsync and cuMemFreeAsync return
//   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: the driver records graph memory nodes there, which
//   simcuda does not model.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/allocations.h"

namespace simcuda {

class Device;
class Stream;
struct Context;
struct MemoryPool;

MemoryPool* default_pool(Device& device);
MemoryPool* current_pool(Device& device);
void set_current_pool(Device& device, MemoryPool* pool);
// A pool the program may still use (created or default, not destroyed), else nullptr.
MemoryPool* pool_from_handle(CUmemoryPool handle);
CUmemoryPool pool_handle(MemoryPool* pool);
Device& pool_device(const MemoryPool& pool);

// `props` checked by the caller (pinned, on a device).
MemoryPool* create_pool(Device& device, const CUmemPoolProps& props);
// The default pool cannot be destroyed (CUDA_ERROR_INVALID_VALUE). Outstanding blocks keep a
// destroyed pool alive until they are freed, as in the driver.
CUresult destroy_pool(MemoryPool* pool);

CUresult pool_allocate(MemoryPool& pool, uint64_t size, Stream& stream, CUdeviceptr* out);
// `block` is the registry's entry for a pointer with `pool` set. INVALID_VALUE when it is not
// a live allocation (a double free).
CUresult pool_free_async(const Allocation& block, Stream& stream);
// cuMemFree of a pool block: the caller synchronised the device, so the block is free at once.
CUresult pool_free_now(const Allocation& block);

void pool_trim_to(MemoryPool& pool, uint64_t keep_bytes);
CUresult pool_get_attribute(MemoryPool& pool, CUmemPool_attribute attribute, void* value);
CUresult pool_set_attribute(MemoryPool& pool, CUmemPool_attribute attribute, const void* value);
CUresult pool_set_access(MemoryPool& pool, const CUmemAccessDesc& desc);
CUmemAccess_flags pool_get_access(MemoryPool& pool, int device);

// cuCtxDestroy of `context`, which the caller synchronised. Stream-ordered allocations are not
// associated with a context (cuCtxDestroy's documentation): its blocks, handed out or free, stay
// in their pools and now name their device's primary context (the registry's entries too, so
// that a later cuMemFree does not follow the destroyed one), and no block remembers a stream of
// it (every free queued there has run).
void pool_forget_context(const Context& context);

// A synchronisation point of `device`: every pool of it gives back free memory above its
// release threshold (destroyed pools everything free).
void trim_pools_at_synchronize(Device& device);

}  // namespace simcuda
