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

}  // namespace vramspill::core
