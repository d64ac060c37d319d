// The books of the program's own VMM handles past their creation (cuMemCreate goes through
// AdmissionFlow::admit_and_allocate): the VMM tracker learns each reference and mapping, and the
// ledger lets a handle's memory go when the driver frees it, which is at the last cuMemRelease or
// the last cuMemUnmap, whichever comes later (Note [VMM memory lives until its last mapping goes]
// in core/vmm_tracker.h). The driver's call is the hook's function object, so unit tests drive
// this with fakes (tests/shim/placement/vmm_books_test.cpp).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "core/ledger.h"
#include "core/vmm_tracker.h"
#include "placement/admission_flow.h"
#include "placement/vmm_spill.h"

namespace vramspill::placement {

class VmmBooks {
 public:
  // Each reference must outlive this (all are the shim state's).
  VmmBooks(core::Ledger& ledger, core::VmmTracker& vmm, AdmissionFlow& admission,
           VmmSpill& vmm_spill) noexcept
      : ledger_(ledger), vmm_(vmm), admission_(admission), vmm_spill_(vmm_spill) {}
  VmmBooks(const VmmBooks&) = delete;
  VmmBooks& operator=(const VmmBooks&) = delete;

  // The driver succeeded: cuMemCreate made `handle`, cuMemRetainAllocationHandle gave another
  // reference to it, cuMemMap mapped it at [address, address + bytes).
  void created(uint64_t handle) noexcept { vmm_.created(handle); }
  void retained(uint64_t handle) noexcept { vmm_.retained(handle); }
  void mapped(uint64_t address, uint64_t bytes, uint64_t handle) noexcept {
    vmm_.mapped(address, bytes, handle);
  }

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

  core::Ledger& ledger_;
  core::VmmTracker& vmm_;
  AdmissionFlow& admission_;
  VmmSpill& vmm_spill_;
};

template <typename Release>
CUresult VmmBooks::release(uint64_t handle, Release release) {
  const core::VmmTracker::Released released = vmm_.release(handle);
  if (!released.freed) {  // still mapped (or referenced): the memory stays counted
    const CUresult result = release();
    if (result != CUDA_SUCCESS) vmm_.undo_release(handle, released);
    return result;
  }
  const std::optional<core::Allocation> forgotten =
      ledger_.forget(handle, core::KeySpace::kVmmHandle);
  const CUresult result = release();
  if (result != CUDA_SUCCESS) vmm_.undo_release(handle, released);
  if (forgotten) settle(*forgotten, result);
  return result;
}

template <typename Unmap>
CUresult VmmBooks::unmap(uint64_t address, uint64_t bytes, Unmap unmap) {
  const core::VmmTracker::Unmapping unmapping = vmm_.unmap(address, bytes);
  std::vector<core::Allocation> forgotten;
  for (uint64_t handle : unmapping.freed_handles) {
    if (auto allocation = ledger_.forget(handle, core::KeySpace::kVmmHandle)) {
      try {
        forgotten.push_back(*allocation);
      } catch (...) {  // cannot hold it until the driver answers: let it go now
        settle(*allocation, CUDA_SUCCESS);
      }
    }
  }
  const CUresult result = unmap();
  if (result != CUDA_SUCCESS) vmm_.undo_unmap(unmapping);
  for (const core::Allocation& allocation : forgotten) settle(allocation, result);
  return result;
}

}  // namespace vramspill::placement
