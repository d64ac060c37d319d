// What happens to the job's memory, told as it happens to whoever records it (the [trace] file,
// telemetry/trace_file.h). The ledger tells of devices, allocations, frees and refusals; tiered
// mode's placement tells of blocks moving between the device and the host, and of the blocks
// each submission touches. Calls come from any
// thread, inside the hooks, and must not call back into the driver or the ledger.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <span>

#include "core/allocation_table.h"
#include "core/route.h"

namespace vramspill::core {

class MemoryEvents {
 public:
  // `device` now has `limit_bytes` of its `total_bytes` to give (Ledger::set_device).
  virtual void device_configured(int device, uint64_t total_bytes,
                                 uint64_t limit_bytes) noexcept = 0;
  // An allocation recorded, on whichever route (spills included; tiered blocks are told by
  // tiered placement: Note [A tiered block in the trace] in placement/tiered_placement.cpp).
  virtual void allocated(const Allocation& allocation) noexcept = 0;
  // A recorded allocation is gone (its free, or a free the shim never saw).
  virtual void freed(const Allocation& allocation) noexcept = 0;
  // A request the budget had no room for (it may spill next).
  virtual void refused(int device, Route route, uint64_t bytes) noexcept = 0;
  // Of the tiered block at `base`, `bytes` moved to the host (evicted) or to the device
  // (promoted).
  virtual void evicted(int device, uint64_t base, uint64_t bytes) noexcept = 0;
  virtual void promoted(int device, uint64_t base, uint64_t bytes) noexcept = 0;
  // A submission on `stream` (an id that tells streams apart) is about to touch the tiered
  // blocks at `bases` of `device`.
  virtual void used(int device, uint32_t stream, std::span<const uint64_t> bases) noexcept = 0;

 protected:
  ~MemoryEvents() = default;
};

}  // namespace vramspill::core
