// The granule arena when memory runs out inside it: whatever allocation of its own fails, every
// physical handle stays in its books or goes back to the driver, never lost. This program
// replaces the global operator new so a test can make one allocation throw; it is a program of
// its own so that replacement touches no other test.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "../nth_allocation_fails.h"
#include "fake_granule_ops.h"
#include "tiers/granule_arena.h"

namespace vramspill::tiers {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

using testing::kNoAllocationFailed;

// How a run with one allocation failing ended (or kNoAllocationFailed).
enum Ending : int { kBalanced = 0, kLost = 1 };

// An arena whose pools hold two device singles and two device chunks, asked for a block of
// four device singles: the pools give their singles, and a chunk goes back to the driver for
// the other two (Note [Chunks] in tiers/granule_chunks.h). The `nth` allocation made inside
// allocate() throws.
int allocate_failing_at(uint64_t nth) {
  FakeGranuleOps ops;
  {
    GranuleArena arena{ops, ArenaOptions{.keep_device_granules = 64, .keep_host_granules = 64}};
    CUdeviceptr chunked = 0;
    CUdeviceptr singles = 0;
    if (arena.allocate(64 * kMiB, 32, &chunked) != CUDA_SUCCESS ||
        arena.allocate(4 * kMiB, 2, &singles) != CUDA_SUCCESS || !arena.free(chunked) ||
        !arena.free(singles))
      return kLost;
    CUdeviceptr base = 0;
    CUresult result = CUDA_SUCCESS;
    {
      const testing::NthAllocationFails failing(nth);
      result = arena.allocate(8 * kMiB, 4, &base);
      if (!failing.failed()) return kNoAllocationFailed;
    }
    std::string problem;
    if (result == CUDA_SUCCESS || !arena.check_invariants(&problem)) return kLost;
  }
  return ops.live_handles() == 0 && ops.misuse().empty() ? kBalanced : kLost;
}

// Each allocation in turn fails, in a child process.
TEST(GranuleArenaOutOfMemory, NoFailedAllocationLosesAHandle) {
  testing::fail_each_allocation_in_turn(allocate_failing_at,
                                        [](int) { return std::string("a handle was lost"); });
}

}  // namespace
}  // namespace vramspill::tiers
