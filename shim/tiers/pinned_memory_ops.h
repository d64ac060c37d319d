// How the pinned host pool gets and gives back page-locked memory: two function pointers, so the
// pool never knows the CUDA driver (shim/README.md, "Layers": tiers sit above driver/, and unit
// tests drive tiers with fakes).
//
// The shim passes cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) and
// cuMemFreeHost, wrapped so that the pinning thread prefers the GPU's NUMA node
// (tiers/numa_policy.h). Tests pass mmap/munmap fakes that count calls.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vramspill::tiers {

struct PinnedMemoryOps {
  void* context = nullptr;
  // Pins `bytes` of host memory and stores its address in `*base`; false if it cannot. May be
  // slow (about 0.35 s per GiB on a real GPU) and is called without any pool lock held, from an
  // allocating thread or from the pool's background thread. The address should be aligned to
  // the pool's granularity (page alignment is enough for the default of 4 KiB). False with
  // `*base` set: memory was pinned but is unusable (the device cannot map it); the pool gives it
  // back with unpin(), never on an allocating thread (tiers/host_pool.h, Note [Unpinning off the
  // allocating thread]: an unpin waits for the device).
  bool (*pin)(void* context, std::size_t bytes, void** base) = nullptr;
  // Gives back exactly what one successful pin() returned; false if the memory could not be
  // given back (it then stays counted against the host budget).
  bool (*unpin)(void* context, void* base, std::size_t bytes) = nullptr;
  // Runs `step(pool)`, the pool's background thread's pins ahead or unpins, and returns true if
  // the driver may be asked for them now; false, without running it, if not: the thread tries
  // again a little later. Null: always now. The shim's says no while a stream capture is in
  // progress, and holds captures off through the step (tiers/host_tier.h, Note [The pool's thread
  // and captures]).
  bool (*when_quiet)(void* context, void (*step)(void* pool), void* pool) = nullptr;
  // The most bytes pin() may still take, beside the host budget's own room: the shim's says what
  // RLIMIT_MEMLOCK leaves (tiers/host_tier.cpp). Null: the host budget alone. A region the pool
  // pins ahead of need is no larger than this, so that a small block is not refused for a step
  // the limit cannot hold.
  uint64_t (*room)(void* context) = nullptr;
  // Whether memory one successful pin() returned is gone: a device reset frees it under the pool
  // (HostPool::forget_lost_regions). Null: never gone.
  bool (*gone)(void* context, void* base) = nullptr;
  // Gives back what pin() counted of such memory, as unpin() would; when it still `held_blocks`,
  // its addresses are kept from being handed out again, so that a block still in use there
  // faults where it is reached rather than meet a new one.
  void (*forget)(void* context, void* base, std::size_t bytes, bool held_blocks) = nullptr;
};

}  // namespace vramspill::tiers
