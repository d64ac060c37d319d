#include "core/route.h"

namespace vramspill::core {

const char* route_name(Route route) {
  switch (route) {
    case Route::kMemAlloc:
      return "cuMemAlloc";
    case Route::kMemAllocPitch:
      return "cuMemAllocPitch";
    case Route::kMemAllocManaged:
      return "cuMemAllocManaged";
    case Route::kMemAllocAsync:
      return "cuMemAllocAsync";
    case Route::kMemAllocFromPoolAsync:
      return "cuMemAllocFromPoolAsync";
    case Route::kMemCreate:
      return "cuMemCreate";
    case Route::kArray:
      return "cuArrayCreate";
    case Route::kSpillManaged:
      return "managed spill";
    case Route::kSpillHost:
      return "host-pool spill";
    case Route::kSpillVmmHost:
      return "host-located VMM spill";
    case Route::kTiered:
      return "tiered";
  }
  return "unknown route";
}

std::string_view route_token(Route route) {
  switch (route) {
    case Route::kSpillManaged:
      return "spill-managed";
    case Route::kSpillHost:
      return "spill-host";
    case Route::kSpillVmmHost:
      return "spill-vmm-host";
    default:
      return route_name(route);  // a driver function, or "tiered": one word already
  }
}

std::optional<Route> route_from_token(std::string_view token) {
  for (std::size_t index = 0; index < kRouteCount; ++index) {
    const auto route = static_cast<Route>(index);
    if (route_token(route) == token) return route;
  }
  return std::nullopt;
}

}  // namespace vramspill::core
