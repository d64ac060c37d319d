// Belady's MIN, offline: the fewest misses any policy can have on a sequence of uses, the
// yardstick for the conformance suite's "no policy beats the optimum" (tests/policies).
//
// The model is the simplest one the policies can be held to: every block is one granule, the
// device holds `capacity_blocks` of them and starts empty, every use needs its block on the device
// (a use of a block that is not there is a miss, cold misses included), and bringing one in when
// the device is full evicts the block whose next use is farthest away (never used again counts as
// farthest). A launch that touches several blocks is its uses one after another: keeping all of
// them on the device at once can only cost more, so the bound still holds. Touching in place is
// not modelled: it would be a third choice with its own cost, and the bound would need it too.
#pragma once

#include <cstdint>
#include <span>

#include "policies/eviction_policy.h"

namespace vramspill::policies {

// The misses of Belady's MIN over `uses`. O(n log capacity).
uint64_t belady_misses(std::span<const BlockId> uses, uint64_t capacity_blocks);

}  // namespace vramspill::policies
