// The driver routes by which device memory is allocated, and how each names its allocations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace vramspill::core {

// Every allocation route (shim/README.md, "Interception") that draws on the device budget, and the
// spill tiers that take what does not fit. The ledger keeps live bytes per route, so a refusal can
// say which route holds the memory and the summary where spilled bytes went.
enum class Route : uint8_t {
  kMemAlloc,               // cuMemAlloc_v2 and the 32-bit cuMemAlloc
  kMemAllocPitch,          // cuMemAllocPitch_v2 and the 32-bit one (counted as pitch x height)
  kMemAllocManaged,        // cuMemAllocManaged
  kMemAllocAsync,          // cuMemAllocAsync(_ptsz): the device's current pool
  kMemAllocFromPoolAsync,  // cuMemAllocFromPoolAsync(_ptsz): an explicit pool
  kMemCreate,              // cuMemCreate: a VMM physical handle (cuMemMap adds nothing)
  kArray,                  // cuArrayCreate / cuArray3DCreate / cuMipmappedArrayCreate
  kSpillManaged,           // spilled to CUDA managed memory (any linear route)
  kSpillHost,              // spilled to a block of the pinned host pool (any linear route)
  kSpillVmmHost,           // cuMemCreate made host-located instead (Note [Host-located VMM spills])
  kTiered,                 // a block of tiered mode's granule arena (cuMemAlloc, pitch)
};

inline constexpr std::size_t kRouteCount = 11;

constexpr std::size_t route_index(Route route) { return static_cast<std::size_t>(route); }

// The driver function a log line should name, e.g. "cuMemAlloc". Never null.
const char* route_name(Route route);

// The route as one word, for files that tools read back (the [trace] file): the driver
// function for the driver's routes, "spill-managed", "spill-host", "spill-vmm-host" and
// "tiered" for the shim's. route_from_token() reads it back; nullopt for any other word.
std::string_view route_token(Route route);
std::optional<Route> route_from_token(std::string_view token);

// Stream-ordered routes take memory from a pool. The pool's *reserved* bytes count against the
// budget (Ledger::set_pool_reserved), so the blocks handed out from it do not count a second time.
constexpr bool is_pool_route(Route route) {
  return route == Route::kMemAllocAsync || route == Route::kMemAllocFromPoolAsync;
}

// What a pool without a size cap may still grow by.
inline constexpr uint64_t kUncappedPool = UINT64_MAX;

// The chunk a pool grows by for a request of `bytes` its unused reserve cannot hold (Note
// [Stream-ordered pools in the budget] in core/ledger.h): 32 MiB, or the request rounded up to
// the 2 MiB mapping granularity when larger; saturates for a request too large for any device.
// A pool created with a size cap (CUmemPoolProps::maxSize) that leaves less than the chunk,
// `room_under_cap`, grows by the rounded request alone, as the driver's does (a request the cap
// cannot hold at all is the driver's to refuse): reserving the whole chunk for it would refuse
// what the device has room for.
constexpr uint64_t pool_growth(uint64_t bytes, uint64_t room_under_cap = kUncappedPool) {
  constexpr uint64_t kGranularity = uint64_t{2} << 20;
  constexpr uint64_t kChunk = uint64_t{32} << 20;
  if (bytes > UINT64_MAX - (kGranularity - 1)) return UINT64_MAX;
  const uint64_t rounded = (bytes + kGranularity - 1) / kGranularity * kGranularity;
  const uint64_t chunk = rounded > kChunk ? rounded : kChunk;
  return chunk > room_under_cap ? rounded : chunk;
}

// Spilled allocations live in host memory: they are recorded (frees find their tier by the
// route) but take no device budget.
constexpr bool is_spill_route(Route route) {
  return route == Route::kSpillManaged || route == Route::kSpillHost ||
         route == Route::kSpillVmmHost;
}

// Whether an allocation's own bytes count against the device budget. A tiered block's do not:
// its arena's device granules do, taken and given back as they come and go (Ledger::take).
constexpr bool counts_against_device(Route route) {
  return !is_pool_route(route) && !is_spill_route(route) && route != Route::kTiered;
}

// What the ledger's key for an allocation is. Device pointers, VMM handles and CUarray handles
// are separate namespaces: nothing stops the driver from handing out a handle whose value equals
// some device address, so the ledger never compares keys across spaces.
enum class KeySpace : uint8_t {
  kPointer,    // a CUdeviceptr: freed by cuMemFree_v2, the 32-bit cuMemFree or cuMemFreeAsync
  kVmmHandle,  // a CUmemGenericAllocationHandle: freed by cuMemRelease
  kArray,      // a CUarray / CUmipmappedArray: freed by cuArrayDestroy / cuMipmappedArrayDestroy
};

constexpr KeySpace key_space(Route route) {
  switch (route) {
    case Route::kMemCreate:
    case Route::kSpillVmmHost:
      return KeySpace::kVmmHandle;
    case Route::kArray:
      return KeySpace::kArray;
    default:
      return KeySpace::kPointer;
  }
}

}  // namespace vramspill::core
