// Allocations that never spill (Note [What spills] in placement/spill_placement.h): CUDA arrays,
// plain and mipmapped, and the 32-bit ABI's device pointers (Note [Legacy allocations never
// spill] in hooks/legacy_allocation_hooks.cpp). Over the budget they are
// CUDA_ERROR_OUT_OF_MEMORY, with the refusal logged.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstdint>

#include "hooks/admission.h"
#include "util/array_format.h"

namespace vramspill::hooks {

// enter_and_allocate() with nowhere to spill.
template <typename Allocate>
CUresult unspilled_allocation(core::Route route, uint64_t bytes, Allocate allocate) {
  return enter_and_allocate(route, bytes, SpillTarget{}, allocate);
}

// For formats without a plain per-channel size (block-compressed, planar) one byte per channel
// is a lower bound.
inline uint64_t array_element_bytes(unsigned int channels, CUarray_format format) {
  return uint64_t{channels} * std::max<uint64_t>(array_channel_bytes(format), 1);
}

inline uint64_t array_bytes(size_t width, size_t height, size_t depth, unsigned int channels,
                            CUarray_format format) {
  const auto at_least_one = [](uint64_t extent) { return extent == 0 ? uint64_t{1} : extent; };
  return uint64_t{width} * at_least_one(height) * at_least_one(depth) *
         array_element_bytes(channels, format);
}

// Whether an array of descriptor `d` owns memory: a sparse or deferred-mapping one owns none
// until the program maps tile-pool handles into it (cuMemMapArrayAsync), and those handles are
// cuMemCreate's, charged there; charged here too, they would count twice.
inline bool array_owns_memory(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  return (d.Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) == 0;
}

// cuArrayCreate, cuArray3DCreate and cuMipmappedArrayCreate: `*handle` (a CUarray or a
// CUmipmappedArray) names the array until its destroy.
template <typename Handle, typename Create>
CUresult array_creation(Handle* handle, uint64_t bytes, Create create) {
  return unspilled_allocation(core::Route::kArray, bytes, [&](Allocated& allocated) {
    const CUresult result = create();
    if (result == CUDA_SUCCESS) allocated.key = reinterpret_cast<uint64_t>(*handle);
    return result;
  });
}

}  // namespace vramspill::hooks
