// The project's test kernels in real CUDA C++. simcuda runs host implementations of the same
// kernels (tools/simcuda/src/core/kernels.cpp) under the same names with the same parameters, so
// a driver-API program that loads this fatbin on a GPU runs unchanged on simcuda. Keep the two
// in step: names, parameter types and order, and results bit for bit.
//
// extern "C" keeps the names unmangled for cuModuleGetFunction; every kernel is a grid-stride
// loop, so any grid and block shape covers the whole range.
#include <cstdint>

#include "vs_touch.h"

namespace {

__device__ uint64_t first_index() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ uint64_t grid_stride() { return static_cast<uint64_t>(gridDim.x) * blockDim.x; }

}  // namespace

extern "C" __global__ void vs_fill_u32(uint32_t* dst, uint32_t value, uint64_t count) {
  for (uint64_t i = first_index(); i < count; i += grid_stride()) dst[i] = value;
}

// Byte-wise, so any alignment and size work (simcuda's version is a memmove).
extern "C" __global__ void vs_copy(void* dst, const void* src, uint64_t bytes) {
  auto* to = static_cast<unsigned char*>(dst);
  const auto* from = static_cast<const unsigned char*>(src);
  for (uint64_t i = first_index(); i < bytes; i += grid_stride()) to[i] = from[i];
}

// y = a*x + y, the multiply and the add each rounded (no FMA contraction), as simcuda computes it.
extern "C" __global__ void vs_axpy_f32(float* y, const float* x, float a, uint64_t n) {
  for (uint64_t i = first_index(); i < n; i += grid_stride())
    y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
}

// Every element of each block it names: x[i] = x[i] * kVsTouchMultiplier + stamp + i (vs_touch.h,
// Note [The touch list]). Blocks go along y (0: the bare one, then the list's entries), elements
// along x, each a grid-stride loop, so any grid covers every element of every block.
extern "C" __global__ void vs_touch(unsigned long long* bare, unsigned long long bare_words,
                                    VsTouchList list, unsigned long long stamp) {
  const unsigned long long count =
      list.count < kVsTouchListCapacity ? list.count : kVsTouchListCapacity;
  for (unsigned long long block = blockIdx.y; block <= count; block += gridDim.y) {
    unsigned long long* x = block == 0 ? bare : list.data[block - 1];
    const unsigned long long words = block == 0 ? bare_words : list.words[block - 1];
    for (uint64_t i = first_index(); i < words; i += grid_stride())
      x[i] = vs_touch_element(x[i], stamp, i);
  }
}
