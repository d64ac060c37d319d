// Device 0's arena, and none for any other device, as tiered placement's tests and bench see it.
#pragma once

#include "placement/tiered_placement.h"
#include "tiers/granule_arena.h"

namespace vramspill::placement {

class OneArena final : public ArenaSource {
 public:
  explicit OneArena(tiers::GranuleArena& arena) : arena_(arena) {}
  tiers::GranuleArena* arena(int device) noexcept override {
    return device == 0 ? &arena_ : nullptr;
  }
  bool may_synchronize() noexcept override { return synchronize; }
  bool synchronize = true;  // false stands for a capture in progress

 private:
  tiers::GranuleArena& arena_;
};

}  // namespace vramspill::placement
