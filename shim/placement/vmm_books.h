// The books of the program's own VMM handles past their creation (cuMemCreate goes through
// AdmissionFlow::admit_and_allocate): the VMM tracker learns each reference and mapping, and the
// ledger lets a handle's memory go when the driver frees it, which is at the last cuMemRelease or
// the last cuMemUnmap, whichever comes later (Note [VMM memory lives until its last mapping goes]
// in core/vmm_tracker.h). The driver's call is the hook's function object, so unit tests drive
// this with fakes (tests/shim/placement/vmm_books_test.cpp).
//
// Note [The program's host-located handles]
// A cuMemCreate of host memory (CU_MEM_LOCATION_TYPE_HOST, HOST_NUMA; NCCL makes its host
// buffers so) takes no device memory, but it is pinned memory, which [spill] host_limit counts
// as it counts the program's cuMemHostAlloc: charged, never refused (the driver has made it),
// from the call until the driver frees it, which is when a device-located handle leaves the
// ledger. Uncounted, the pinned pool and the spills could grow to the whole limit beside it and
// bring the container's OOM killer the limit is there to keep away.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "core/host_budget.h"
#include "core/ledger.h"
#include "core/vmm_tracker.h"
#include "placement/admission_flow.h"
#include "placement/vmm_spill.h"

namespace vramspill::placement {

class VmmBooks {
 public:
  // Each reference must outlive this (all are the shim state's).
  VmmBooks(core::Ledger& ledger, core::VmmTracker& vmm, AdmissionFlow& admission,
           VmmSpill& vmm_spill, core::HostBudget& host_budget) noexcept
      : ledger_(ledger),
        vmm_(vmm),
        admission_(admission),
        vmm_spill_(vmm_spill),
        host_budget_(host_budget) {}
  VmmBooks(const VmmBooks&) = delete;
  VmmBooks& operator=(const VmmBooks&) = delete;

  // The driver succeeded: cuMemCreate made `handle`.
  void created(uint64_t handle) noexcept { vmm_.created(handle); }
  // cuMemCreate made `handle` of `bytes` host-located, as the program asked (Note [The program's
  // host-located handles]).
  void created_on_host(uint64_t handle, uint64_t bytes) noexcept;

  // Note [One change to a handle at a time]
  // The books change before the driver's call (another thread may get the same handle value the
  // moment the memory is freed) and are put back if the driver refuses. Two such calls on two
  // threads would each read the other's unfinished change: an unmap's mappings gone, a release
  // of the same handle takes its memory to be freed and settles it, and should the unmap then
  // fail, its mapping comes back to a handle the books have forgotten, counted nowhere. So
  // releases and unmaps go one at a time, each through its driver call (PyTorch and NCCL make
  // them under locks of their own in any case). So do retains and maps, which add a reference or a
  // mapping the books record after the driver's answer: a retain whose driver call came between an
  // unmap's change and its call, or a map between a release's, would find the handle already
  // gone from the books, and the memory it keeps alive would be counted nowhere. Creates need not
  // wait: no other call knows their handle yet.

  // cuMemRetainAllocationHandle by `retain()`, which sets `handle` (read once it succeeds):
  // another reference to it.
  template <typename Retain>
  CUresult retain(const CUmemGenericAllocationHandle& handle, Retain retain);

  // cuMemMap of `handle` at [address, address + bytes) by `map()`.
  template <typename Map>
  CUresult map(uint64_t address, uint64_t bytes, uint64_t handle, Map map);

  // cuMemRelease of `handle` by `release()`: its memory leaves the books if this was what kept
  // it, before the call (another thread may get the same handle value at once), and counts again
  // if the driver refuses.
  template <typename Release>
  CUresult release(uint64_t handle, Release release);

  // cuMemUnmap of [address, address + bytes) by `unmap()`: the handles whose last mapping goes
  // leave the books as release() says.
  template <typename Unmap>
  CUresult unmap(uint64_t address, uint64_t bytes, Unmap unmap);

 private:
  // After the driver's answer to the call that frees a handle's memory: a host-located spill gives
  // its host budget back too.
  void settle(const core::Allocation& forgotten, CUresult result) noexcept;
  // A host-located handle of the program's leaves the books before the call that frees it (its
  // bytes; nullopt for any other handle), and after the driver's answer gives its bytes back
  // to the host budget or, refused, is in the books again.
  std::optional<uint64_t> forget_on_host(uint64_t handle) noexcept;
  void settle_on_host(uint64_t handle, uint64_t bytes, CUresult result) noexcept;

  core::Ledger& ledger_;
  core::VmmTracker& vmm_;
  AdmissionFlow& admission_;
  VmmSpill& vmm_spill_;
  core::HostBudget& host_budget_;
  std::mutex changing_;  // Note [One change to a handle at a time]
  std::mutex on_host_mutex_;
  std::vector<std::pair<uint64_t, uint64_t>> on_host_;  // handle, bytes; guarded by on_host_mutex_
};

template <typename Retain>
CUresult VmmBooks::retain(const CUmemGenericAllocationHandle& handle, Retain retain) {
  const std::lock_guard one_at_a_time(changing_);
  const CUresult result = retain();
  if (result == CUDA_SUCCESS) vmm_.retained(handle);
  return result;
}

template <typename Map>
CUresult VmmBooks::map(uint64_t address, uint64_t bytes, uint64_t handle, Map map) {
  const std::lock_guard one_at_a_time(changing_);
  const CUresult result = map();
  if (result == CUDA_SUCCESS) vmm_.mapped(address, bytes, handle);
  return result;
}

template <typename Release>
CUresult VmmBooks::release(uint64_t handle, Release release) {
  const std::lock_guard one_at_a_time(changing_);
  const core::VmmTracker::Released released = vmm_.release(handle);
  if (!released.freed) {  // still mapped (or referenced): the memory stays counted
    const CUresult result = release();
    if (result != CUDA_SUCCESS) vmm_.undo_release(handle, released);
    return result;
  }
  const std::optional<core::Allocation> forgotten =
      ledger_.forget(handle, core::KeySpace::kVmmHandle);
  const std::optional<uint64_t> on_host = forget_on_host(handle);
  const CUresult result = release();
  if (result != CUDA_SUCCESS) vmm_.undo_release(handle, released);
  if (forgotten) settle(*forgotten, result);
  if (on_host) settle_on_host(handle, *on_host, result);
  return result;
}

template <typename Unmap>
CUresult VmmBooks::unmap(uint64_t address, uint64_t bytes, Unmap unmap) {
  const std::lock_guard one_at_a_time(changing_);
  const core::VmmTracker::Unmapping unmapping = vmm_.unmap(address, bytes);
  std::vector<core::Allocation> forgotten;
  std::vector<std::pair<uint64_t, uint64_t>> forgotten_on_host;
  for (uint64_t handle : unmapping.freed_handles) {
    if (auto allocation = ledger_.forget(handle, core::KeySpace::kVmmHandle)) {
      try {
        forgotten.push_back(*allocation);
      } catch (...) {  // cannot hold it until the driver answers: let it go now
        settle(*allocation, CUDA_SUCCESS);
      }
    }
    if (const std::optional<uint64_t> on_host = forget_on_host(handle)) {
      try {
        forgotten_on_host.emplace_back(handle, *on_host);
      } catch (...) {  // as above
        settle_on_host(handle, *on_host, CUDA_SUCCESS);
      }
    }
  }
  const CUresult result = unmap();
  if (result != CUDA_SUCCESS) vmm_.undo_unmap(unmapping);
  for (const core::Allocation& allocation : forgotten) settle(allocation, result);
  for (const auto& [handle, on_host] : forgotten_on_host) settle_on_host(handle, on_host, result);
  return result;
}

}  // namespace vramspill::placement
