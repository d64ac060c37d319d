// The levels of a CUDA mipmapped array, shared by the shim (which budgets mipmapped arrays) and
// simcuda (which charges them), so the two always agree on a mipmapped array's size.
//
// Note [Mipmap levels]
// Level 0 has the descriptor's extents; each further level halves every extent that is a
// dimension of the image (width, height, and depth for a 3D array), rounding down and never
// below 1, while the layer count of a layered array and the faces of a cubemap stay. A request
// for more levels than the largest extent allows (1 + floor(log2(largest))) gets that many, and
// a request for 0 gets 1, as cudaMallocMipmappedArray documents (the driver's
// cuMipmappedArrayCreate is assumed to do the same).
#pragma once

#include <cuda.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>

namespace vramspill {

struct ArrayExtent {
  uint64_t width = 0;
  uint64_t height = 0;  // 0 for a 1D array
  uint64_t depth = 0;   // 0 for a 1D or 2D array; the layer count of a layered one
};

// Whether the descriptor's depth is a third image dimension (halved per level) rather than
// layers or cubemap faces.
constexpr bool depth_is_a_dimension(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  return (d.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) == 0;
}

// How many levels the driver allocates for `requested` (Note [Mipmap levels]).
constexpr unsigned int mipmap_level_count(const CUDA_ARRAY3D_DESCRIPTOR& d,
                                          unsigned int requested) {
  const uint64_t largest =
      std::max({uint64_t{d.Width}, uint64_t{d.Height},
                depth_is_a_dimension(d) ? uint64_t{d.Depth} : uint64_t{0}, uint64_t{1}});
  const auto most = static_cast<unsigned int>(std::bit_width(largest));  // 1 + floor(log2)
  return std::clamp(requested, 1u, most);
}

// The extents of level `level` (below mipmap_level_count(d, ...)).
constexpr ArrayExtent mipmap_level_extent(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned int level) {
  const auto halved = [level](uint64_t extent) {
    return extent == 0 ? uint64_t{0} : std::max(extent >> level, uint64_t{1});
  };
  return {.width = halved(d.Width),
          .height = halved(d.Height),
          .depth = depth_is_a_dimension(d) ? halved(d.Depth) : uint64_t{d.Depth}};
}

// Elements in `extent`: width x max(height, 1) x max(depth, 1); nullopt past 2^64.
constexpr std::optional<uint64_t> array_elements(const ArrayExtent& extent) {
  const auto at_least_one = [](uint64_t value) { return value == 0 ? uint64_t{1} : value; };
  uint64_t elements = extent.width;
  if (__builtin_mul_overflow(elements, at_least_one(extent.height), &elements) ||
      __builtin_mul_overflow(elements, at_least_one(extent.depth), &elements))
    return std::nullopt;
  return elements;
}

// The bytes of all `levels` levels (already a mipmap_level_count) of elements of
// `element_bytes` each (channels x bytes per channel); nullopt past 2^64 (no device holds it).
constexpr std::optional<uint64_t> mipmapped_array_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d,
                                                        unsigned int levels,
                                                        uint64_t element_bytes) {
  uint64_t total = 0;
  for (unsigned int level = 0; level < levels; ++level) {
    const std::optional<uint64_t> elements = array_elements(mipmap_level_extent(d, level));
    uint64_t bytes = 0;
    if (!elements || __builtin_mul_overflow(*elements, element_bytes, &bytes) ||
        __builtin_add_overflow(total, bytes, &total))
      return std::nullopt;
  }
  return total;
}

}  // namespace vramspill
