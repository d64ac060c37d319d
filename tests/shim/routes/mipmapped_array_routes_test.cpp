// Mipmapped arrays (cuMipmappedArrayCreate / cuMipmappedArrayDestroy) are held to the budget:
// all their levels count, each extent halved per level (Note [Mipmap levels] in
// shim/util/mipmap_levels.h), from creation until destroy, and they never spill.
//
// Run twice (CMakeLists.txt): under the shim with a 256 MiB budget and spilling off on simcuda's
// 1 GiB device, and without the preload, where simcuda charges the same sum.
#include <algorithm>

#include "routes_support.h"

namespace {

using routes::kBudget;
using routes::kDeviceMemory;
using routes::kMiB;
using routes::under_shim;

CUDA_ARRAY3D_DESCRIPTOR descriptor_2d(size_t width, size_t height, CUarray_format format,
                                      unsigned int channels) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = width;
  d.Height = height;
  d.Format = format;
  d.NumChannels = channels;
  return d;
}

// The bytes of a 2D mipmapped array's first `levels` levels, computed here independently.
size_t levels_bytes(size_t width, size_t height, unsigned int levels, size_t element_bytes) {
  size_t total = 0;
  for (unsigned int level = 0; level < levels; ++level) {
    total += std::max<size_t>(width >> level, 1) * std::max<size_t>(height >> level, 1) *
             element_bytes;
  }
  return total;
}

using MipmappedArrayRoutes = routes::PrimaryContextTest<>;

// 8192 x 8192 float2 with all 14 levels: 512 MiB at level 0, about 683 MiB in all, over the
// budget and within the device.
TEST_F(MipmappedArrayRoutes, OverBudgetIsRefusedOnlyUnderTheShim) {
  const CUDA_ARRAY3D_DESCRIPTOR d = descriptor_2d(8192, 8192, CU_AD_FORMAT_FLOAT, 2);
  const size_t bytes = levels_bytes(8192, 8192, 14, 8);
  ASSERT_GT(bytes, 512 * kMiB);
  CUmipmappedArray mipmap = nullptr;
  const CUresult result = cuMipmappedArrayCreate(&mipmap, &d, 14);
  if (under_shim()) {
    EXPECT_EQ(result, CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(free_bytes(), kBudget);
  } else {
    ASSERT_CU(result);
    EXPECT_EQ(free_bytes(), kDeviceMemory - bytes);
    ASSERT_CU(cuMipmappedArrayDestroy(mipmap));
    EXPECT_EQ(free_bytes(), kDeviceMemory);
  }
}

// 4096 x 2048 uint8x4, 5 levels (42.6 MiB): held in cuMemGetInfo until destroy; under the shim
// the seventh, which would pass the budget, is refused while the others are held.
TEST_F(MipmappedArrayRoutes, HeldBytesShowUntilDestroy) {
  const size_t total = under_shim() ? kBudget : kDeviceMemory;
  const CUDA_ARRAY3D_DESCRIPTOR d = descriptor_2d(4096, 2048, CU_AD_FORMAT_UNSIGNED_INT8, 4);
  const size_t bytes = levels_bytes(4096, 2048, 5, 4);
  CUmipmappedArray first = nullptr;
  ASSERT_CU(cuMipmappedArrayCreate(&first, &d, 5));
  EXPECT_EQ(free_bytes(), total - bytes);

  // The levels are views of the same memory: getting one takes nothing more.
  CUarray level = nullptr;
  ASSERT_CU(cuMipmappedArrayGetLevel(&level, first, 4));
  EXPECT_EQ(free_bytes(), total - bytes);

  CUmipmappedArray more[6] = {};
  size_t made = 1;
  CUresult result = CUDA_SUCCESS;
  for (CUmipmappedArray& each : more) {
    result = cuMipmappedArrayCreate(&each, &d, 5);
    if (result != CUDA_SUCCESS) break;
    ++made;
    EXPECT_EQ(free_bytes(), total - made * bytes);
  }
  if (under_shim()) {
    EXPECT_EQ(result, CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(made, kBudget / bytes);
  } else {
    EXPECT_CU(result);
  }
  for (size_t i = 0; i + 1 < made; ++i) {
    ASSERT_CU(cuMipmappedArrayDestroy(more[i]));
  }
  EXPECT_EQ(free_bytes(), total - bytes);
  ASSERT_CU(cuMipmappedArrayDestroy(first));
  EXPECT_EQ(free_bytes(), total);
}

}  // namespace
