// vs_touch: the kernel that stands for a framework's launches in the workload player
// (tools/player/), shared by its real CUDA version (vs_kernels.cu), simcuda's host version
// (src/core/kernels.cpp) and the player, which fills the struct and predicts every element.
//
//   extern "C" __global__ void vs_touch(unsigned long long* bare, unsigned long long bare_words,
//                                       VsTouchList list, unsigned long long stamp);
//
// It reads and writes every 8-byte element of each block it is given, `bare` and the first
// `list.count` entries of the list: element i of a block becomes
//   x[i] * kVsTouchMultiplier + stamp + i   (modulo 2^64)
// an invertible affine map (the multiplier is odd) whose index term makes each element's value
// depend on where it lies, so a granule moved to the wrong place cannot pass for the right one.
// Touches compose: after any sequence of them, element i is mul * x0 + add + index * i, with
// (mul, add, index) updated in O(1) per touch (VsTouchMap below).
//
// Note [The touch list]
// The struct is what cudart passes for PyTorch's multi-tensor kernels (TensorListMetadata): a
// parameter of several KiB, aligned to 8, full of device pointers. Kernel parameters live in
// the launch's parameter space, not in device memory: the pointers are visible to whatever reads
// the launch's arguments, as they are to vramspill's use tracking. The whole parameter space is
// 3 872 bytes, under the 4 KiB that every driver accepts (PyTorch keeps its structs under it for
// the same reason). An entry with 0 words is skipped; a count over the capacity is read as the
// capacity, by both versions alike.
#pragma once

#ifdef __CUDACC__
#define VS_TOUCH_HOST_DEVICE __host__ __device__
#else
#define VS_TOUCH_HOST_DEVICE
#endif

inline constexpr unsigned kVsTouchListCapacity = 240;
// Odd, so the map is a bijection of 64-bit values (PCG's multiplier; any odd constant works).
inline constexpr unsigned long long kVsTouchMultiplier = 6364136223846793005ULL;

struct VsTouchList {
  unsigned long long count;                          // entries used
  unsigned long long* data[kVsTouchListCapacity];    // each block's first element
  unsigned long long words[kVsTouchListCapacity];    // each block's 8-byte elements
};
static_assert(sizeof(VsTouchList) == 3848 && alignof(VsTouchList) == 8,
              "the layout simcuda's kernel table and the player assume");

// One element after one touch.
VS_TOUCH_HOST_DEVICE inline unsigned long long vs_touch_element(unsigned long long value,
                                                                unsigned long long stamp,
                                                                unsigned long long index) {
  return value * kVsTouchMultiplier + stamp + index;
}

// Every touch a block has had, composed: element i holds mul * initial + add + index * i.
struct VsTouchMap {
  unsigned long long mul = 1;
  unsigned long long add = 0;
  unsigned long long index = 0;

  VS_TOUCH_HOST_DEVICE void touch(unsigned long long stamp) {
    mul *= kVsTouchMultiplier;
    add = add * kVsTouchMultiplier + stamp;
    index = index * kVsTouchMultiplier + 1;
  }
  VS_TOUCH_HOST_DEVICE unsigned long long value(unsigned long long initial,
                                                unsigned long long element) const {
    return mul * initial + add + index * element;
  }
};
