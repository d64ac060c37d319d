// Bytes per channel of a CUDA array element format, shared by the shim (which budgets arrays)
// and simcuda (which charges them), so the two always agree on an array's size.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace vramspill {

// The eight classic formats; 0 for planar video, normalized multi-channel and block-compressed
// formats, whose size is not a plain multiple of the channel count.
constexpr uint64_t array_channel_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 0;
  }
}

}  // namespace vramspill
