// The linear memory a copy or memset names, as address ranges for use tracking: shared by the
// submission hooks (hooks/use_tracking.cpp) and the reading of a graph's memcpy and memset nodes
// (core/graph_uses.h). Host memory and arrays are never tracked, so they name nothing.
#pragma once

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/use_tracker.h"

namespace vramspill::core {

// The bytes a pitched (2D) region spans: `rows` rows of `width` bytes, `pitch` apart.
inline AddressRange pitched(uint64_t base, size_t pitch, size_t width, size_t rows) noexcept {
  if (width == 0 || rows == 0) return {};
  return {base, (rows - 1) * pitch + width};
}

// One side of a 2D/3D copy: the bytes it spans when it is linear memory (device or unified).
inline AddressRange copy_side(CUmemorytype type, CUdeviceptr device, size_t x, size_t y, size_t z,
                              size_t pitch, size_t slice_rows, size_t width, size_t height,
                              size_t depth) noexcept {
  if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) return {};
  if (depth == 0) return {};
  return pitched(device + (z * slice_rows + y) * pitch + x, pitch, width,
                 (depth - 1) * slice_rows + height);
}

// CUDA_MEMCPY3D and CUDA_MEMCPY3D_PEER name their two sides with the same fields: {source,
// destination}.
template <typename Copy3D>
std::array<AddressRange, 2> copy_3d_ranges(const Copy3D& c) noexcept {
  return {copy_side(c.srcMemoryType, c.srcDevice, c.srcXInBytes, c.srcY, c.srcZ, c.srcPitch,
                    c.srcHeight, c.WidthInBytes, c.Height, c.Depth),
          copy_side(c.dstMemoryType, c.dstDevice, c.dstXInBytes, c.dstY, c.dstZ, c.dstPitch,
                    c.dstHeight, c.WidthInBytes, c.Height, c.Depth)};
}

// A memset node's destination: `height` rows of `width` elements, `pitch` apart (the pitch is
// unused for one row, as documented).
inline AddressRange memset_range(const CUDA_MEMSET_NODE_PARAMS& m) noexcept {
  return pitched(m.dst, m.pitch, m.width * m.elementSize, m.height);
}

}  // namespace vramspill::core
