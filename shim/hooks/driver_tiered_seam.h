// Tiered mode's side of admission (placement/admission_flow.h), on the shim's arenas and the
// real driver (hooks/tiered_allocation.cpp).
#pragma once

#include <cuda.h>

#include <optional>

#include "placement/admission_flow.h"

namespace vramspill::hooks {

struct ShimState;

class DriverTieredSeam final : public placement::TieredSeam {
 public:
  explicit DriverTieredSeam(ShimState& shim) noexcept : shim_(shim) {}

  bool make_device_room(int device, uint64_t bytes) noexcept override;
  bool forget_lost_block(const core::Allocation& block) noexcept override;
  // Once the device's work is done (cuMemFree), or once `stream`'s is, without waiting for it
  // (cuMemFreeAsync: Note [Stream-ordered frees on the shim's thread] in
  // tiers/stream_ordered_frees.h). A stream-ordered request's block freed with cuMemFreeAsync is
  // kept for reuse instead (Note [Reuse in stream order] in tiers/stream_ordered_reuse.h).
  CUresult free_block(const core::Allocation& block,
                      std::optional<CUstream> stream) noexcept override;

 private:
  ShimState& shim_;
};

}  // namespace vramspill::hooks
