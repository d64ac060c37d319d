// Spill tier `host`: an allocation that does not fit on the device becomes a block of the pinned
// host pool (tiers/host_pool.h), mapped into the device: the device reads and writes it over the
// link (zero-copy), at the same address the host uses (shim/README.md, "Placement modes").
//
// The pool pins with cuMemHostAlloc(DEVICEMAP | PORTABLE): portable, so the memory is usable from
// every context; device-mapped, so kernels can reach it. "Same pointer on host and device" needs
// unified addressing (all 64-bit Linux GPUs since Fermi), which supported() checks, and pin()
// verifies for each region with cuMemHostGetDevicePointer. Pinned bytes are bounded by the host
// budget (the pool reserves before it pins) and by RLIMIT_MEMLOCK.
//
// Note [The pool's context]
// Page-locked memory belongs to the context it was allocated in, and goes when that context is
// destroyed, portable or not. A program's own contexts come and go (cuCtxDestroy, a library's
// private context), so the pool pins only in the primary context of the first device that
// spills, which the shim retains itself: every pin pushes it, on the spilling thread or the
// background one. The memory is portable, so every context can use it. What remains: a program
// that resets that device (cudaDeviceReset, cuDevicePrimaryCtxReset) frees the pool's memory
// under its live blocks, as it frees the program's own allocations.
//
// Note [The pool's thread and captures]
// The pool pins ahead of need and unpins idle regions on its own thread, whenever the program's
// spills and frees ask for it: possibly while the program captures a stream in global mode on
// another thread. Whether the driver forbids cuMemHostAlloc and cuMemFreeHost then is not
// measured (tools/demo/capture_probe.c measures it on a GPU); vLLM reported cudaHostRegister on
// a background thread refused during a capture, which invalidated it. So the pool's thread makes
// neither while a capture is in progress: it holds the capture gate through each round of its
// work, once no capture is in progress, and otherwise tries again a little later; meanwhile an
// allocation that would have waited for its pin pins on its own thread (HostPool::held_off_),
// but not beside a capture either: a stream-ordered spill beside one (which holds the gate
// through its allocation: Note [Stream-ordered spills beside a capture]) is refused when the
// pool has no room (simcuda refuses pins beside a capture, as the driver refused vLLM's). The cuMemFreeHost of a free that unpins at once is still made whatever
// captures are in progress (a free beside a capture is rare: capture_probe will tell whether
// the driver forbids it).
//
// Note [Freeing spilled host blocks]
// A block goes back to the pool only when no queued work can still touch it, or a later spill
// would hand the same bytes to another allocation under a running kernel. cuMemFree_v2 waits for
// the context's work before it frees (the driver's own cuMemFree synchronises too), and
// cuMemFreeAsync returns the block from a host function queued on the stream, so it is freed in
// stream order, after everything queued before it, without blocking the caller.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>

#include "config/config.h"
#include "core/capture_gate.h"
#include "core/host_budget.h"
#include "driver/primary_context.h"
#include "tiers/host_pool.h"
#include "tiers/spill_tier.h"

namespace vramspill::tiers {

class HostTier final : public SpillTier {
 public:
  // `captures`: Note [The pool's thread and captures].
  HostTier(const SpillConfig& config, core::HostBudget& budget,
           core::CaptureGate& captures) noexcept;

  // The start of the pool block that holds `address`; nullopt when no block does. Costs one
  // relaxed load while nothing has been pinned.
  std::optional<CUdeviceptr> block_containing(CUdeviceptr address) const noexcept;

  HostPoolStats stats() const noexcept { return pool_.stats(); }
  // After a device reset: HostPool::forget_lost_regions.
  uint64_t forget_lost_regions() noexcept { return pool_.forget_lost_regions(); }
  // After a reset of `device` in which the shim gave up its references (Note [The last release
  // of a primary context] in hooks/device_reset.h): if the pool pinned in that device's primary
  // context, it pins in the primary context of the next device that spills, retained anew.
  void forget_context_given_up(int device) noexcept;
  // At exit: no pinning may be in flight while the driver tears down.
  void stop_background_pinning() noexcept { pool_.stop_background_pinning(); }

 private:
  struct PendingFree;  // a block waiting in a stream for its free

  // Whether the device can map host memory at the host's address.
  std::optional<bool> do_query_support(int device) noexcept override;
  // A pool block; refused when the pool cannot grow (host budget, RLIMIT_MEMLOCK, pinning
  // refused).
  SpillOutcome do_allocate(const SpillAllocation& request, CUdeviceptr* out) noexcept override;
  // Note [Freeing spilled host blocks]: waits for `device`'s work (the device the block was
  // spilled for), then frees. CUDA_ERROR_INVALID_VALUE for a pointer not in the pool.
  CUresult do_free(CUdeviceptr pointer, uint64_t bytes, int device) noexcept override;
  CUresult do_free_in_stream_order(CUdeviceptr pointer, uint64_t bytes, int device,
                                   CUstream stream) noexcept override;
  // Always gone: a pool block stands in for a device allocation of the reset device, whatever
  // became of the pool's own memory. It goes back to the pool if its region survived.
  bool do_forget_if_lost(CUdeviceptr pointer, uint64_t bytes) noexcept override;
  CUresult pool_block(int device, uint64_t bytes, CUdeviceptr* out) noexcept;
  // Gives the block at `pointer` back to the pool now: one whose work is done, or one a reset
  // took (HostPool::forget_lost_regions), which nothing can touch. CUDA_ERROR_INVALID_VALUE for
  // a pointer that is no block of the pool.
  CUresult free_in_pool(CUdeviceptr pointer) noexcept;

  // Counts `bytes` against RLIMIT_MEMLOCK if they fit under it.
  bool reserve_locked_memory(uint64_t bytes) noexcept;
  static bool pin(void* self, std::size_t bytes, void** base);
  // PinnedMemoryOps::when_quiet: the step, holding the capture gate, unless a capture is in
  // progress.
  static bool when_quiet(void* self, void (*step)(void* pool), void* pool);
  // False with `*base` set: pinned but unusable, for the pool to give back (pinned_memory_ops.h).
  bool pin_reserved(std::size_t bytes, void** base) noexcept;
  static bool unpin(void* self, void* base, std::size_t bytes);
  // PinnedMemoryOps::gone and forget: memory a device reset freed under the pool.
  static bool gone(void* self, void* base);
  static void forget(void* self, void* base, std::size_t bytes, bool held_blocks);
  // PinnedMemoryOps::room: what RLIMIT_MEMLOCK leaves (Note [RLIMIT_MEMLOCK and the host limit]
  // in tiers/host_tier.cpp).
  static uint64_t room_to_lock(void* self);
  static void CUDA_CB free_from_stream(void* block);

  core::HostBudget& budget_;
  core::CaptureGate& captures_;
  // Where the pool pins (Note [The pool's context]): the primary context of the first spilling
  // device, retained until the program's last release of it, and that device's NUMA node.
  std::atomic<CUcontext> context_{nullptr};
  std::mutex context_mutex_;                 // held to set context_ and reference_
  driver::PrimaryReference reference_;       // to context_
  std::atomic<int> numa_node_{-1};
  std::atomic<uint64_t> pinned_bytes_{0};
  std::atomic<uint64_t> memlock_refusals_{0};
  uint64_t memlock_limit_;
  HostPool pool_;
};

}  // namespace vramspill::tiers
