// cuMemAdvise on managed memory, through whichever of its two ABIs the driver has: since 12.2 a
// CUmemLocation (cuMemAdvise_v2), before that a device ordinal with CU_DEVICE_CPU for the host.
// For the managed spill tier (tiers/managed_tier.h) and the prefetch mover
// (tiers/driver_prefetch_ops.h).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace vramspill::tiers {

// `on_host`: the advice names the host; otherwise device `device`.
CUresult advise_managed(CUdeviceptr pointer, uint64_t bytes, CUmem_advise advice, int device,
                        bool on_host) noexcept;

}  // namespace vramspill::tiers
