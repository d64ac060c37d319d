// One block of the stress test (stress_test.cpp) and what can be done to it, by every
// allocation route the shim hooks: allocate, fill with a pattern of its own, check that pattern
// by copying the bytes back (simcuda's device memory cannot be read on the host), and free.
//
// Fills and checks of stream-ordered blocks run on the stream the block was allocated on; the
// other routes are filled either with the synchronous calls (the legacy default stream) or on
// the thread's first stream, and checked on the stream they were filled on, so a check is always
// ordered after its fill.
#pragma once

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace stress {

enum class Route { kAlloc, kPitch, kManaged, kAsync, kFromPool, kVmm };
constexpr std::size_t kRouteCount = 6;
const char* route_name(Route route);
constexpr bool is_stream_ordered(Route route) {
  return route == Route::kAsync || route == Route::kFromPool;
}

// What every thread shares: the context, a created pool for cuMemAllocFromPoolAsync, the VMM
// granularity.
struct Shared {
  CUdevice device = 0;
  CUmemoryPool pool = nullptr;
  std::size_t vmm_granularity = 0;
};

// A thread's streams: blocks are allocated on the first or the second, and sometimes freed on
// the other one.
using Streams = std::array<CUstream, 2>;

struct Block {
  Route route = Route::kAlloc;
  CUdeviceptr pointer = 0;
  std::size_t bytes = 0;      // all of them are filled and checked (pitch x height for kPitch)
  CUstream stream = nullptr;  // what it was allocated on (stream-ordered), then filled on
  uint32_t seed = 0;
  bool constant = false;  // filled by a memset of one word, else by a copy of pattern(seed, j)
  CUmemGenericAllocationHandle handle = 0;  // kVmm
};

// Allocates `block.bytes` (about; kPitch and kVmm adjust it) by `block.route` on `stream` (the
// stream-ordered routes). Returns the driver's (or the shim's) answer; on anything but success
// nothing is left allocated.
CUresult allocate(Block& block, const Shared& shared, CUstream stream);

// Fills `block` with its pattern: a memset of one word or a copy from the host (`scratch`),
// chosen by `random`; synchronously or on `stream` for the routes that are not stream-ordered.
CUresult fill(Block& block, CUstream stream, std::mt19937_64& random,
              std::vector<uint32_t>& scratch);

// The words of a block that differ from its pattern: how many, and the first of them.
struct Mismatch {
  std::size_t words = 0;
  std::size_t first = 0;
  uint32_t first_value = 0;
};
// Copies `block` back and compares it with its pattern.
CUresult check(const Block& block, std::vector<uint32_t>& scratch, Mismatch& mismatch);

// Frees `block` by its route: stream-ordered blocks on `stream` (the one they were allocated
// on, or the thread's other one: the caller has synchronised with the block's work first),
// cuMemAlloc/cuMemAllocPitch blocks by cuMemFree or, when `stream` is not null, cuMemFreeAsync
// on it; VMM blocks by unmapping, releasing and freeing their addresses.
CUresult release(const Block& block, CUstream stream);

// The word `j` of `block` must hold: spill::pattern(seed, j) after a copy (so a block holding
// another block's bytes, or its own shifted, is caught), one word per block after a memset.
uint32_t expected_word(const Block& block, std::size_t j);

}  // namespace stress
