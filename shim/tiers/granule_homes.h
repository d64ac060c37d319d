// Where the granule arena's physical granules live when no block maps them: an address each, so
// that a move can copy a granule's bytes without mapping it anywhere first.
//
// Note [Granule homes]
// A granule that takes part in a move gets a home: an address of its own in a range the arena
// reserved for homes, where the granule stays mapped, and reachable by the device, until it goes
// back to the driver. A move then copies into the new granule at its home, whatever block maps
// it or none, and remaps only the block's address: one unmap, one map and one access call per
// granule, and the unmap and the access once per run of granules, where a staging range cost
// six calls a granule (a map and an access to stage, an unmap to unstage, and the remap's
// three), plus a reservation per batch. On the H200 (../shared/GPU-FACTS.md) those calls, not
// the copy, were what a move cost.
// A home is made the first time its granule moves (a job that never moves pays nothing) and
// kept as long as the granule: the pools keep granules with their homes, so a training loop
// that moves the same physical granules step after step pays for each home once. A granule may
// be mapped at two addresses, its home and its block's, as the driver allows.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "tiers/granule_ops.h"

namespace vramspill::tiers {

class GranuleHomes {
 public:
  explicit GranuleHomes(GranuleOps& ops) noexcept : ops_(ops) {}
  GranuleHomes(const GranuleHomes&) = delete;
  GranuleHomes& operator=(const GranuleHomes&) = delete;
  // Gives the ranges back; a range with a home still mapped in it is left to the driver.
  ~GranuleHomes();

  // Maps `handle` at a free home and gives it access: the home's address at *home, or the
  // driver's error (nothing mapped then).
  CUresult settle(GranuleHandle handle, CUdeviceptr* home) noexcept;
  // Unmaps the granule at `home`, which is then free; false when the driver keeps the mapping
  // (the home is never handed out again).
  bool vacate(CUdeviceptr home) noexcept;

  // Whether `home` is the home right after `previous`, in the same reserved range: a copy may
  // cover both.
  bool follows(CUdeviceptr home, CUdeviceptr previous) const noexcept;

  // Homes mapped now.
  uint64_t settled() const noexcept;

 private:
  // Address space reserved at a time: 1 GiB, a few calls for the homes of a whole device.
  static constexpr uint64_t kRangeGranules = 512;

  // A free home, reserving a range when none is left; 0 when the driver reserves none.
  CUdeviceptr take_free() noexcept;

  GranuleOps& ops_;
  mutable std::mutex mutex_;
  std::vector<CUdeviceptr> ranges_;  // each kRangeGranules granules
  CUdeviceptr next_ = 0;             // the next never-used home of the last range
  CUdeviceptr range_end_ = 0;
  std::vector<CUdeviceptr> vacated_;  // homes freed, handed out again first
  uint64_t settled_ = 0;
};

}  // namespace vramspill::tiers
