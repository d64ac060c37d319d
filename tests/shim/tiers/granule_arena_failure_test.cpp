// The granule arena when memory runs out inside it: whatever allocation of its own fails, every
// physical handle stays in its books or goes back to the driver, never lost. This program
// replaces the global operator new so a test can make one allocation throw; it is a program of
// its own so that replacement touches no other test.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include "fake_granule_ops.h"
#include "tiers/granule_arena.h"

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

namespace vramspill::tiers {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// How a run with one allocation failing ended.
enum Ending : int { kBalanced = 0, kLost = 1, kNoneFailed = 2 };

// An arena whose pools hold two device singles and two device chunks, asked for a block of
// four device singles: the pools give their singles, and a chunk goes back to the driver for
// the other two (Note [Chunks] in tiers/granule_chunks.h). The `nth` allocation made inside
// allocate() throws.
Ending allocate_failing_at(uint64_t nth) {
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
    armed = true;
    counted = 0;
    failing = nth;
    const CUresult result = arena.allocate(8 * kMiB, 4, &base);
    armed = false;
    if (counted < nth) return kNoneFailed;
    std::string problem;
    if (result == CUDA_SUCCESS || !arena.check_invariants(&problem)) return kLost;
  }
  return ops.live_handles() == 0 && ops.misuse().empty() ? kBalanced : kLost;
}

// Each allocation in turn fails, in a child process: where the fake driver's own allocation
// fails, its noexcept call ends that child, which says nothing of the arena and is skipped.
TEST(GranuleArenaOutOfMemory, NoFailedAllocationLosesAHandle) {
  int balanced = 0;
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
    EXPECT_EQ(ending, kBalanced) << "allocation " << nth << " failed and a handle was lost";
    balanced += ending == kBalanced ? 1 : 0;
  }
  EXPECT_GT(balanced, 0) << "no allocation of the arena's own failed";
}

}  // namespace
}  // namespace vramspill::tiers
