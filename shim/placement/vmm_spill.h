// Where a cuMemCreate of device memory goes when it does not fit: host-located VMM memory, or
// nowhere (CUDA_ERROR_OUT_OF_MEMORY), with a log line that says which and why. The tier is
// reached through tiers/host_vmm_tier.h and the driver's other answers through
// placement/spill_facts.h, so unit tests drive this with fakes of both.
//
// Note [Host-located VMM spills]
// A program that builds its memory from VMM handles (PyTorch's expandable segments, NCCL)
// creates device-located handles with cuMemCreate, maps them with cuMemMap and grants the device
// access with cuMemSetAccess. Past the budget (the ledger refuses) or when the driver runs out of
// device memory, such a cuMemCreate is made again with the same size, flags and properties but a
// host location, and the program gets that handle: it maps it and sets access as it would have,
// and its kernels reach the memory over the link. Nothing is evicted to make room (tiered mode
// aside, below), and the new handle is host memory for its whole life. Where it goes: CU_MEM_LOCATION_TYPE_HOST_NUMA on the GPU's
// own node (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID) where the device supports host-NUMA VMM memory,
// else CU_MEM_LOCATION_TYPE_HOST where it supports host VMM memory, else nowhere.
// The driver tells the truth about the handle afterwards (cuMemGetAllocationPropertiesFromHandle
// and pointer attributes say host): the shim does not hide the move.
//
// In every [spill] mode but `off` (relocates_vmm_handles()). A handle can only ever be mapped
// as a handle: neither a block of the pinned host pool nor managed memory can be given to
// cuMemMap, so host-located VMM memory is the only place off the device a handle can live, and
// `host` and `managed` send handles there too (said once per job, since the mode names another
// tier), as `auto` does. In `tiered` mode a handle is not an arena block: the program maps it
// itself, at addresses the arena does not own, so the arena cannot move it. Before such a handle
// spills, the arena of its device evicts blocks to make room for it under the budget
// (TieredPlacement::make_device_room, in hooks/admission.h); only what eviction cannot free
// makes it host-located. `off` spills nothing.
//
// Not when the program asked for something host memory would change in a way it would notice:
//   - exportable handles other than POSIX file descriptors (FABRIC for NVLink peers and
//     multicast objects, which bind device memory; Win32 handles): the importer expects device
//     memory. POSIX file descriptors (what PyTorch asks for) stay where the handle can be
//     HOST_NUMA, which cuda.h does not bar from IPC, so the program's
//     cuMemExportToShareableHandle works as before; HOST memory is "not IPC capable" (cuMemCreate
//     refuses the request), so without a NUMA node such a request does not spill;
//   - a usage (CU_MEM_CREATE_USAGE_TILE_POOL for sparse arrays, HW_DECOMPRESS): device roles;
//   - any handle while a multicast object of the program waits for its memory (Note [Multicast
//     binds device memory]).
// gpuDirectRDMACapable does spill: PyTorch's expandable segments set it on every handle where
// the device has GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED (measured on an H200), whether or not
// a network adapter will ever read them, and refusing it made the job fail with
// OutOfMemoryError. The driver API reference (CUmemAllocationProp) documents the flag as an
// allocation hint, for devices with that attribute, that the memory "will be used for GPUDirect
// RDMA": a peer device reading device memory through the GPU's BAR. Host memory needs no such path (an adapter registers host pages
// directly), and the driver documents no meaning for the flag on a host location, so the
// host-located request is made without it rather than depend on an undocumented answer. The
// handle then says the truth (cuMemGetAllocationPropertiesFromHandle: gpuDirectRDMACapable 0,
// a host location), and the first such spill logs once per job that handles asked for RDMA
// may live on the host: a program that registers them with an adapter through nvidia-peermem
// would find host memory.
// compressionType is a hint the driver may decline (cuda.h tells programs to check the handle's
// properties), and host memory is never compressed: it is cleared. win32HandleMetaData and the
// reserved bytes pass as they are. Then, as for every spill (Note [What spills]): not on an
// integrated device, not below [spill] min_size, and not past the host limit, which the handle
// is charged to from cuMemCreate until the driver frees it (the last cuMemRelease or cuMemUnmap:
// Note [VMM memory lives until its last mapping goes]).
//
// Note [Multicast binds device memory]
// A multicast object (NVLink SHARP through NVSwitch) binds only memory "created on one of the
// devices that was added to the multicast team" (cuda.h, cuMulticastBindMem). NCCL's NVLS
// buffers ask for POSIX file descriptors on one node, as PyTorch's expandable segments do, so
// the request alone does not tell them apart; but NCCL adds its device to the object
// (cuMulticastAddDevice) before it creates the memory it then binds (cuMulticastBindMem). So
// between the two, while an object of the process waits for memory, no cuMemCreate handle of
// the process spills: past the budget it is refused with CUDA_ERROR_OUT_OF_MEMORY, which the log
// explains, where a host-located handle would have failed at the bind (NCCL then fails the job
// with a message about the fabric). An object waits from the first device added to it until
// every device added has bound its whole size (memory may be bound piece by piece, at several
// offsets). One whose size is not known, imported from the process that made it (NCCL's other
// ranks import the object local rank 0 made, and keep it for the communicator's life), waits
// until it has had a bind for each device added: as NCCL binds each device's buffer whole, in
// one call; waiting until its release, as it once did, refused every handle past the budget on
// those ranks for the whole job. Then handles spill again: the rest of the job, PyTorch's expandable segments
// included, keeps its spills (placement/multicast_books.h keeps the objects). A handle spilled
// before an object waited (PyTorch's symmetric memory makes its memory first) cannot be bound;
// the log says so at the bind, which the driver refuses.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "config/config.h"
#include "core/host_budget.h"
#include "core/ledger.h"
#include "core/vmm_tracker.h"
#include "placement/multicast_books.h"
#include "placement/spill_facts.h"
#include "tiers/host_vmm_tier.h"

namespace vramspill::placement {

// Whether [spill] `mode` lets the shim give the program a host-located handle for a device one:
// every mode that spills, since no other tier can hold a handle (Note [Host-located VMM spills]).
constexpr bool relocates_vmm_handles(SpillMode mode) { return mode != SpillMode::kOff; }

struct VmmSpillRequest {
  int device = 0;  // prop->location.id
  uint64_t bytes = 0;
  const CUmemAllocationProp* prop = nullptr;  // the program's, device-located
  unsigned long long flags = 0;               // cuMemCreate's own
};

class VmmSpill {
 public:
  // Each reference must outlive the placement (all are members of the shim's state).
  VmmSpill(const SpillConfig& config, core::Ledger& ledger, core::VmmTracker& vmm,
           core::HostBudget& host_budget, SpillFacts& facts, tiers::HostVmmTier& tier) noexcept
      : config_(config),
        ledger_(ledger),
        vmm_(vmm),
        host_budget_(host_budget),
        facts_(facts),
        tier_(tier) {}
  VmmSpill(const VmmSpill&) = delete;
  VmmSpill& operator=(const VmmSpill&) = delete;

  // Creates a host-located handle for `request` at *out, charged to the host budget and recorded
  // in the ledger (core::Route::kSpillVmmHost) and the VMM tracker; otherwise returns
  // CUDA_ERROR_OUT_OF_MEMORY and logs why. `refusal` is the ledger's explanation of why the
  // device had no room (empty when the driver itself ran out of memory).
  //
  // Note [A refused cuMemCreate that was invalid]
  // A request the budget refuses never reaches the driver, which would have refused it for
  // another reason had it been invalid: a size that is not a multiple of the granularity of its
  // properties, or properties the driver does not take. The program must get that error, not
  // CUDA_ERROR_OUT_OF_MEMORY, which PyTorch's caching allocator answers by freeing its cache and
  // trying again, and which a probe of what the driver supports (a fabric handle type) reads as
  // supported. So, before anything else, the driver is asked the granularity of the properties
  // (its error is the answer) and the size checked against it, and flags other than 0 (which
  // cuda.h reserves) are refused as the driver refuses them.
  CUresult spill(const VmmSpillRequest& request, const std::string& refusal,
                 CUmemGenericAllocationHandle* out) noexcept;

  // The driver freed a handle this made (its ledger entry, forgotten and released): the host
  // budget has its bytes back.
  void freed(const core::Allocation& spilled) noexcept;

  // Note [Multicast binds device memory]: the program's multicast objects, which the hooks keep
  // up to date; the driver added a device to `object` (said once).
  MulticastBooks& multicast() noexcept { return multicast_; }
  void multicast_device_added(uint64_t object) noexcept;
  // The driver refused to bind `handle` to a multicast object: if the handle is a spill, the log
  // says why.
  void bind_refused(uint64_t handle, CUresult result) noexcept;

 private:
  // Why `prop` must stay device memory, or empty (Note [Host-located VMM spills]).
  std::string kept_on_device(const CUmemAllocationProp& prop) const;
  // Why `device` gives no host location for it, or empty (then `location` holds it).
  std::string no_location(int device, const CUmemAllocationProp& prop, CUmemLocation& location);
  // After a spill of `request` to `where`: what is said once per job (Note [Host-located VMM
  // spills]). May throw (building the lines).
  void say_once(const VmmSpillRequest& request, const std::string& where);

  const SpillConfig& config_;
  core::Ledger& ledger_;
  core::VmmTracker& vmm_;
  core::HostBudget& host_budget_;
  SpillFacts& facts_;
  tiers::HostVmmTier& tier_;
  std::atomic<bool> told_mode_{false};  // `host` or `managed` sent a handle to host VMM memory
  std::atomic<bool> told_rdma_{false};  // a handle that asked for GPUDirect RDMA spilled
  std::atomic<bool> told_multicast_{false};
  MulticastBooks multicast_;
};

}  // namespace vramspill::placement
