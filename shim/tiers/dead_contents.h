// Which live blocks of the granule arena hold contents nothing will read again (Note [Moves of
// dead contents] in tiers/granule_arena.h): the arena asks before it moves a block.
#pragma once

#include <cstdint>

namespace vramspill::tiers {

class DeadContents {
 public:
  // Whether the block at `base` is such a block now. Called with the arena's lock held: it must
  // take no lock that is held while calling into the arena.
  virtual bool dead(uint64_t base) const noexcept = 0;

 protected:
  DeadContents() = default;
  ~DeadContents() = default;
  DeadContents(const DeadContents&) = default;
  DeadContents& operator=(const DeadContents&) = default;
};

}  // namespace vramspill::tiers
