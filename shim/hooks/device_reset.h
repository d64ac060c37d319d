// What a device reset takes from the shim's books.
//
// Note [Resetting the device]
// cuDevicePrimaryCtxReset (which cudaDeviceReset calls) destroys every allocation and all state of
// a device's primary context, whoever still uses it (cuda.h: it is for the caller to make sure no
// other module does). Programs call it at the end of main (CUDA's samples do), and some call it
// between jobs and go on. Left alone, the shim's books would keep charging the budget for memory
// that no longer exists, so the next job would spill what fits, and the pinned host pool, which
// pins in the primary context of the first device that spills (Note [The pool's context] in
// tiers/host_tier.h), would hand out blocks of freed memory: a kernel writing one faults, and the
// program dies where it ran without the shim.
// So the shim notes the device's allocations before the reset and, once the driver has reset, asks
// it what went (driver/freed_memory.h): the pool's regions the driver no longer knows leave the
// pool, with their blocks (HostPool::forget_lost_regions); the driver's own allocations it no
// longer knows leave the budget (AdmissionFlow::forget_reset), as do the program's pinned memory it
// took and managed spills made in that context; host-pool spills of the device go too, whatever
// became of the pool's memory, since they stand in for device memory of the reset context. Tiered
// blocks go too, and the blocks kept for stream-ordered reuse: the remap mover's arena forgets its
// copies in flight and their events and frees the blocks into its pools (their VMM memory outlives
// contexts), the prefetch mover forgets its lanes and the blocks' managed memory; both make new
// streams and events at their next move. The captures of the context's streams end with it (Note
// [Counting captures] in core/capture_origins.h). What the driver keeps (VMM handles, arrays,
// memory of the device's other contexts) stays counted. The shim takes a host-pool spill or a
// tiered block as made in the primary context, as every framework's are; one made in a context the
// program created would be forgotten too early.
// Before the reset, the device's queued work is finished, as the reset would finish it, and the
// frees it releases to the shim's own thread (cuMemFreeAsync of a managed spill or a tiered block)
// are waited for: made after the reset, they would fail on memory already gone and leave its bytes
// counted. One held back past the reset (a capture in progress holds the free thread) settles as
// made, since the driver no longer knows its memory.
// A region of the pool that held live blocks keeps its addresses from being handed out again
// (HostTier's PinnedMemoryOps::forget): a block spilled there for another device, whose contents
// the reset took (the pool pins in the context of the first device that spilled), then faults where
// it is reached, as freed memory does, rather than reading a new spill's bytes; the program may
// still free it. The fence is an inaccessible mapping made once the driver has unmapped the region,
// so another thread's mmap may take part of the range first: then the log warns. Pinning the pool
// by registering memory of the shim's own, which a reset would only unregister, would close that
// window (and could keep such blocks' contents); not done.
// A reset while other threads still allocate on the device is the program's error, as the driver
// documents; the shim's books may then miss what those threads did.
//
// Note [The last release of a primary context]
// cuda.h: a primary context "is automatically reset once the last reference to it is released".
// Programs that hold it through the driver API let go of it when they are done with the device
// (numba's cuda.close(), XLA when a client goes, a library's teardown) and may go on. Two things
// stood in the way under the shim. Its books went on charging the budget for the memory the
// reset took, as after cuDevicePrimaryCtxReset. And its own references (Note [The shim's
// references to primary contexts] in driver/primary_context.h) kept the context alive past the
// program's last release, with all the program's memory in it: memory the program can no longer
// reach nor free, and the device no longer has.
// So the shim counts the program's retains and releases of each device's primary context. At the
// release of what it counts as the program's last reference, it makes ready as for a reset
// (prepare_for_reset), lets the driver release, then gives back its own references
// (driver::reset_if_only_the_shim_holds). The driver resets the context if no one else holds it,
// as it would have without the shim; the shim's references then stay given up, so the context is
// inactive as it would be without the shim (each part of the shim retains a new one at its next
// need), and the books forget what went as after cuDevicePrimaryCtxReset. If someone else holds
// it, the shim takes its references again and nothing went. The driver decides, not the count: a
// reference the shim did not see keeps the context and everything in it, as it would without the
// shim. A release past what the shim saw retained goes to the driver unchanged, and so does every
// release once the process exits (a runtime's teardown may release there): the books no longer
// matter, and resetting them would wait for the device and log after the exit summary.
//
// Note [A created context's end]
// cuCtxDestroy of a context the program created (PyCUDA's, cuda-python's, a video pipeline's)
// frees what was allocated in it: device memory, managed memory and page-locked host memory
// (cuda.h). The shim's books went on charging the budget and the host limit for it, so later
// allocations spilled, or were refused, with the room free. So, once the driver has destroyed
// it, the device's allocations the driver no longer knows leave the books (as after a reset:
// AdmissionFlow::forget_what_went), with managed spills made in it and the program's page-locked
// memory it took. Host-pool spills and tiered blocks stay: the shim made them in primary
// contexts (the pool's, the arena's), which live on, and it does not record which context the
// program had current when it asked for them; the program may still free them.
#pragma once

#include <cuda.h>

#include <string_view>
#include <vector>

#include "core/ledger.h"

namespace vramspill::hooks {

struct ShimState;

// What the shim knows of `device` just before the driver resets it.
struct BeforeReset {
  std::vector<core::Allocation> held;  // the ledger's allocations of the device
  uint64_t primary = 0;                // its primary context, 0 if inactive
};

// Just before the driver resets `device`: its queued work is finished (as the reset would) and
// the shim's stream-ordered frees that work released are made while their memory exists, then
// what the shim holds of the device is noted.
BeforeReset prepare_for_reset(ShimState& shim, int device) noexcept;

// After the driver reset `device`'s primary context (`how` says what made it reset it): what went
// with it leaves the books, and the log says how much.
void forget_what_the_reset_freed(ShimState& shim, int device, const BeforeReset& before,
                                 std::string_view how) noexcept;

// After the driver destroyed a context of `device` the program created: what went with it leaves
// the books (Note [A created context's end]); `held` is the ledger's allocations of the device
// just before.
void forget_what_the_destroy_freed(ShimState& shim, int device,
                                   const std::vector<core::Allocation>& held) noexcept;

// The program's cuDevicePrimaryCtxRetain (`real`), counted when it succeeds.
CUresult program_retains_primary(CUcontext* primary, CUdevice device,
                                 CUresult (*real)(CUcontext*, CUdevice)) noexcept;

// The program's cuDevicePrimaryCtxRelease (`real`, either ABI): its last reference, by the count,
// resets the context when no one else holds it (Note [The last release of a primary context]).
CUresult program_releases_primary(ShimState& shim, CUdevice device,
                                  CUresult (*real)(CUdevice)) noexcept;

}  // namespace vramspill::hooks
