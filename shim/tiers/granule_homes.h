// Where the granule arena's physical granules live when no block maps them: an address each, so
// that a move can copy a granule's bytes without mapping it anywhere first.
//
// Note [Granule homes]
// A granule that takes part in a move gets a home: an address of its own in a range the arena
// reserved for homes, where the granule stays mapped, and reachable by the device, until it goes
// back to the driver. A move then copies into the new granule at its home, whatever block maps
// it or none, and remaps only the block's address: one map per handle (a granule, or a chunk of
// 16), and the unmap and the access once per run of granules, where a staging range cost
// six calls a granule (a map and an access to stage, an unmap to unstage, and the remap's
// three), plus a reservation per batch. On the H200 (../shared/GPU-FACTS.md) those calls, not
// the copy, were what a move cost.
// A home is made the first time its granule moves (a job that never moves pays nothing) and
// kept as long as the granule: the pools keep granules with their homes, so a training loop
// that moves the same physical granules step after step pays for each home once. A granule may
// be mapped at two addresses, its home and its block's, as the driver allows.
// A chunk (Note [Chunks] in tiers/granule_chunks.h) has one home of its size, a mapping of the
// whole handle: its granules' homes follow each other, and a chunk moves with one copy.
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

  // Maps `handle` (of `granules` granules) at a free home and gives it access: the home's
  // address at *home, or the driver's error (nothing mapped then).
  CUresult settle(Mapping handle, CUdeviceptr* home) noexcept;
  // Unmaps the handle of `granules` at `home`, which is then free; false when the driver keeps
  // the mapping (the home is never handed out again).
  bool vacate(CUdeviceptr home, uint64_t granules) noexcept;

  // Whether `home` is the home right after `previous`, in the same reserved range: a copy may
  // cover both.
  bool follows(CUdeviceptr home, CUdeviceptr previous) const noexcept;

  // Granules mapped at their homes now.
  uint64_t settled() const noexcept;

 private:
  // Address space reserved at a time: 1 GiB, a few calls for the homes of a whole device.
  static constexpr uint64_t kRangeGranules = 512;

  // A free home of `granules`, reserving a range when none is left; 0 when the driver reserves
  // none.
  CUdeviceptr take_free(uint64_t granules) noexcept;
  // Keeps `home`, of `granules`, for the next settle() of that size.
  void free_home(CUdeviceptr home, uint64_t granules) noexcept;

  GranuleOps& ops_;
  mutable std::mutex mutex_;
  std::vector<CUdeviceptr> ranges_;  // each kRangeGranules granules
  CUdeviceptr next_ = 0;             // the next never-used home of the last range
  CUdeviceptr range_end_ = 0;
  struct Vacated {
    CUdeviceptr home = 0;
    uint64_t granules = 0;
  };
  std::vector<Vacated> vacated_;  // homes freed, handed out again first to their size
  uint64_t settled_ = 0;
};

}  // namespace vramspill::tiers
