// Tiered placement when memory runs out inside an allocation: whatever allocation of its own
// fails, the block the program gets is one the policy knows (a launch may touch it and the policy
// may evict it), or the program gets none and nothing stays charged. This program replaces the
// global operator new so a test can make one allocation throw; it is a program of its own so that
// replacement touches no other test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <string>

#include "../nth_allocation_fails.h"
#include "tiered_on_fake_vmm.h"

namespace vramspill::placement {
namespace {

using tiers::kGranuleBytes;

using testing::kNoAllocationFailed;

// How a run with one allocation failing ended (or kNoAllocationFailed).
enum Ending : int { kKnownOrNone = 0, kUnknownToThePolicy = 1, kUnbalanced = 2 };

// A pinned block of 4 granules within an 8-granule budget: the rules' books, the policy's
// allocation and its move each take memory. The `nth` allocation made inside allocate() throws.
// Then a launch touches the block the program got and frees it: the policy, which aborts at a
// broken contract, must know it.
int allocate_failing_at(uint64_t nth) {
  TieredOnFakeVmm tiered;
  TieredPlacement& placement = tiered.placement;
  CUdeviceptr base = 0;
  TieredPlacement::Allocated allocated;
  {
    const testing::NthAllocationFails failing(nth);
    allocated = placement.allocate(0, 4 * kGranuleBytes, &base, RuleAction::kPin);
    if (!failing.failed()) return kNoAllocationFailed;
  }
  // From here a broken contract of the policy's aborts, which this run reports as such.
  std::signal(SIGABRT, [](int) { _exit(kUnknownToThePolicy); });
  if (allocated.result == CUDA_SUCCESS) {
    const policies::BlockId touched[] = {base};
    placement.before_launch(0, 1, 1, touched);
    if (placement.free(0, base) != CUDA_SUCCESS) return kUnknownToThePolicy;
  }
  std::string problem;
  if (!tiered.arena.check_invariants(&problem)) return kUnbalanced;
  return tiered.arena.stats().blocks == 0 ? kKnownOrNone : kUnbalanced;
}

// Each allocation in turn fails, in a child process.
TEST(TieredPlacementOutOfMemory, EveryBlockTheProgramGetsIsOneThePolicyKnows) {
  testing::fail_each_allocation_in_turn(allocate_failing_at, [](int ending) {
    return std::string(ending == kUnknownToThePolicy
                           ? "the program got a block the policy did not know"
                           : "the arena kept a block or broke its books");
  });
}

}  // namespace
}  // namespace vramspill::placement
