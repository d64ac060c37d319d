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
  }
  return "unknown route";
}

}  // namespace vramspill::core
