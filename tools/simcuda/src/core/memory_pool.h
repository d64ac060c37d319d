// Stream-ordered memory pools (cuMemAllocAsync, cuMemFreeAsync, cuMemPool*).
//
// Note [Stream-ordered pools]
// A pool reserves device memory in chunks (RESERVED_MEM_CURRENT, charged to VRAM while the pool
// holds them) and hands out ranges cut from them (Note [Pool chunks]), each registered as an
// Allocation of kind kDevice with `pool` set, so pointer queries answer for the range alone.
// - cuMemFreeAsync queues a marker on the stream; the range is free for the same stream at once
//   (stream order) and for any stream once the marker ran (REUSE_ALLOW_OPPORTUNISTIC; without it,
//   once the host has synchronised with the freeing stream). When nothing fits and no new chunk
//   can be reserved, a range whose free has not run yet is reused by making the allocating stream
//   wait for the freeing one (REUSE_ALLOW_INTERNAL_DEPENDENCIES); then idle chunks of every pool
//   of the device are released and the allocation retried. REUSE_FOLLOW_EVENT_DEPENDENCIES is
//   accepted but not modeled (such reuse happens once the free ran).
// - A chunk stays mapped while the pool holds it (the driver's pool memory stays mapped too:
//   touching a freed range is undefined behaviour, not a fault), and a freed range keeps its
//   registry entry until a new range overlaps it, so that work queued before the free still
//   finds its memory.
// - Only wholly free chunks are released: at synchronisation points, down to RELEASE_THRESHOLD
//   (trim_pools_at_synchronize, called by cuStreamSynchronize, cuCtxSynchronize,
//   cuEventSynchronize and cuMemFree), by cuMemPoolTrimTo, and when VRAM is short.
// - maxSize caps RESERVED_MEM_CURRENT.
// - On a capturing stream, cuMemAllocAsync and cuMemFreeAsync record graph memory nodes instead
//   (Note [Graph memory] in graph_memory.h).
//
// Note [Pool chunks]
// What is publicly known of the driver: a first small cudaMallocAsync (12 bytes) makes the pool
// reserve 32 MiB, and USED_MEM_CURRENT then reads 512 (CuPy's MemoryAsyncPool tests,
// cupy/cupy#5177); the driver's mapping granularity is 2 MiB. So simcuda:
// - rounds each request up to 512 bytes (kRangeAlignment), which is also every range's alignment
//   (the driver documents at least 256 for cuMemAlloc); USED_MEM_* counts these rounded bytes;
// - places it in the smallest free range, of any chunk, that the stream may use (best fit),
//   splitting off the rest;
// - otherwise reserves a new chunk of 32 MiB (kSmallestChunk), or of the request rounded up to
//   2 MiB when that is larger; when VRAM or maxSize leaves less than that, a chunk of just the
//   request rounded up to 2 MiB;
// - merges a freed range with free neighbours: at once when neither has a pending free or both
//   were freed on the same stream, otherwise once the pending frees are over.
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
// The default pool cannot be destroyed (CUDA_ERROR_INVALID_VALUE). Ranges still handed out keep a
// destroyed pool alive until they are freed, as in the driver.
CUresult destroy_pool(MemoryPool* pool);

CUresult pool_allocate(MemoryPool& pool, uint64_t size, Stream& stream, CUdeviceptr* out);
// `range` is the registry's entry for a pointer with `pool` set. INVALID_VALUE when it is not
// a live allocation (a double free).
CUresult pool_free_async(const Allocation& range, Stream& stream);
// cuMemFree of a pool range (or of a graph allocation a launch left allocated): the caller
// synchronised the device, so the range is free at once.
CUresult pool_free_now(const Allocation& range);

void pool_trim_to(MemoryPool& pool, uint64_t keep_bytes);
CUresult pool_get_attribute(MemoryPool& pool, CUmemPool_attribute attribute, void* value);
CUresult pool_set_attribute(MemoryPool& pool, CUmemPool_attribute attribute, const void* value);
CUresult pool_set_access(MemoryPool& pool, const CUmemAccessDesc& desc);
CUmemAccess_flags pool_get_access(MemoryPool& pool, int device);

// cuCtxDestroy of `context`, which the caller synchronised. Stream-ordered allocations are not
// associated with a context (cuCtxDestroy's documentation): its ranges, handed out or free, stay
// in their pools and now name their device's primary context (the registry's entries too, so
// that a later cuMemFree does not follow the destroyed one), and no free range remembers a stream
// of it (every free queued there has run).
void pool_forget_context(const Context& context);

// A synchronisation point of `device`: every pool of it gives back free memory above its
// release threshold (destroyed pools everything free).
void trim_pools_at_synchronize(Device& device);

}  // namespace simcuda
