// Tiered placement when memory runs out inside an allocation: whatever allocation of its own
// fails, the block the program gets is one the policy knows (a launch may touch it and the policy
// may evict it), or the program gets none and nothing stays charged. This program replaces the
// global operator new so a test can make one allocation throw; it is a program of its own so that
// replacement touches no other test.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include "../tiers/fake_granule_ops.h"
#include "fake_tiered_budgets.h"
#include "one_arena.h"
#include "placement/tiered_placement.h"

namespace {
// Allocations counted on this thread while armed; the one numbered `failing` throws.
thread_local bool armed = false;
thread_local uint64_t counted = 0;
thread_local uint64_t failing = 0;
}  // namespace

// Not inlined: GCC would otherwise see free() meet operator new's pointer and warn of a mismatch
// (-Wmismatched-new-delete), which is exactly the pairing a replacement is allowed to make.
[[gnu::noinline]] void* operator new(std::size_t size) {
  if (armed && ++counted == failing) throw std::bad_alloc();
  if (void* memory = std::malloc(size == 0 ? 1 : size)) return memory;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* memory) noexcept { std::free(memory); }
[[gnu::noinline]] void operator delete(void* memory, std::size_t /*size*/) noexcept {
  std::free(memory);
}

namespace vramspill::placement {
namespace {

using tiers::kGranuleBytes;

// How a run with one allocation failing ended.
enum Ending : int { kKnownOrNone = 0, kUnknownToThePolicy = 1, kNoneFailed = 2, kUnbalanced = 3 };

// A pinned block of 4 granules within an 8-granule budget: the rules' books, the policy's
// allocation and its move each take memory. The `nth` allocation made inside allocate() throws.
// Then a launch touches the block the program got and frees it: the policy, which aborts at a
// broken contract, must know it.
Ending allocate_failing_at(uint64_t nth) {
  tiers::FakeGranuleOps ops;
  tiers::GranuleArena arena{ops, tiers::ArenaOptions{}};
  FakeBudgets budgets{8 * kGranuleBytes, 64 * kGranuleBytes};
  OneArena arenas{arena};
  core::RemapWindow window;
  TieredPlacement placement{budgets,
                            arenas,
                            window,
                            {.policy = "lru", .invariant_mode = policies::InvariantMode::kAbort}};
  CUdeviceptr base = 0;
  armed = true;
  counted = 0;
  failing = nth;
  const TieredPlacement::Allocated allocated =
      placement.allocate(0, 4 * kGranuleBytes, &base, RuleAction::kPin);
  armed = false;
  if (counted < nth) return kNoneFailed;
  // From here a broken contract of the policy's aborts, which this run reports as such.
  std::signal(SIGABRT, [](int) { _exit(kUnknownToThePolicy); });
  if (allocated.result == CUDA_SUCCESS) {
    const policies::BlockId touched[] = {base};
    placement.before_launch(0, 1, 1, touched);
    if (placement.free(0, base) != CUDA_SUCCESS) return kUnknownToThePolicy;
  }
  std::string problem;
  if (!arena.check_invariants(&problem)) return kUnbalanced;
  return arena.stats().blocks == 0 ? kKnownOrNone : kUnbalanced;
}

// Each allocation in turn fails, in a child process: where the fake driver's own allocation
// fails, its noexcept call ends that child, which says nothing of the placement and is skipped.
TEST(TieredPlacementOutOfMemory, EveryBlockTheProgramGetsIsOneThePolicyKnows) {
  int checked = 0;
  for (uint64_t nth = 1;; ++nth) {
    const pid_t child = fork();
    ASSERT_NE(child, -1);
    if (child == 0) {
      std::freopen("/dev/null", "w", stderr);  // the ended children's std::terminate() says why
      _exit(allocate_failing_at(nth));
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    if (!WIFEXITED(status)) continue;  // the fake's allocation failed
    const int ending = WEXITSTATUS(status);
    if (ending == kNoneFailed) break;
    EXPECT_EQ(ending, kKnownOrNone) << "allocation " << nth << " failed: "
                                    << (ending == kUnknownToThePolicy
                                            ? "the program got a block the policy did not know"
                                            : "the arena kept a block or broke its books");
    checked += ending == kKnownOrNone ? 1 : 0;
  }
  EXPECT_GT(checked, 0) << "no allocation of the placement's own failed";
}

}  // namespace
}  // namespace vramspill::placement
