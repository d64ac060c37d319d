// CUDA arrays on simcuda (1 GiB device): opaque device memory charged exactly to VRAM, refused
// when it does not fit, descriptors that round-trip, and the driver's errors for bad arguments.
#include "driver_test_support.h"

namespace {

using ArrayTest = DriverTest;

CUDA_ARRAY_DESCRIPTOR descriptor_2d(size_t width, size_t height, CUarray_format format,
                                    unsigned int channels) {
  CUDA_ARRAY_DESCRIPTOR d{};
  d.Width = width;
  d.Height = height;
  d.Format = format;
  d.NumChannels = channels;
  return d;
}

CUDA_ARRAY3D_DESCRIPTOR descriptor_3d(size_t width, size_t height, size_t depth,
                                      CUarray_format format, unsigned int channels,
                                      unsigned int flags = 0) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = width;
  d.Height = height;
  d.Depth = depth;
  d.Format = format;
  d.NumChannels = channels;
  d.Flags = flags;
  return d;
}

TEST_F(ArrayTest, ArraysAreChargedExactlyToVram) {
  const size_t before = used();
  // 1000 x 300 float4: 4 800 000 bytes, not a multiple of any page or granule.
  const CUDA_ARRAY_DESCRIPTOR flat = descriptor_2d(1000, 300, CU_AD_FORMAT_FLOAT, 4);
  CUarray array_2d = nullptr;
  ASSERT_CU(cuArrayCreate(&array_2d, &flat));
  EXPECT_EQ(used(), before + 1000 * 300 * 16);

  // 1D (height 0): 777 half2 = 3 108 bytes.
  const CUDA_ARRAY_DESCRIPTOR line = descriptor_2d(777, 0, CU_AD_FORMAT_HALF, 2);
  CUarray array_1d = nullptr;
  ASSERT_CU(cuArrayCreate(&array_1d, &line));
  EXPECT_EQ(used(), before + 1000 * 300 * 16 + 777 * 4);

  // 3D: 64 x 32 x 17 uint8 = 34 816 bytes.
  const CUDA_ARRAY3D_DESCRIPTOR volume = descriptor_3d(64, 32, 17, CU_AD_FORMAT_UNSIGNED_INT8, 1);
  CUarray array_3d = nullptr;
  ASSERT_CU(cuArray3DCreate(&array_3d, &volume));
  EXPECT_EQ(used(), before + 1000 * 300 * 16 + 777 * 4 + 64 * 32 * 17);

  ASSERT_CU(cuArrayDestroy(array_2d));
  EXPECT_EQ(used(), before + 777 * 4 + 64 * 32 * 17);
  ASSERT_CU(cuArrayDestroy(array_3d));
  ASSERT_CU(cuArrayDestroy(array_1d));
  EXPECT_EQ(used(), before);
}

TEST_F(ArrayTest, ArraysThatDoNotFitAreOutOfMemory) {
  const size_t before = used();
  // 512 MiB: fits once on the 1 GiB device; the third does not.
  const CUDA_ARRAY_DESCRIPTOR half_gib = descriptor_2d(16384, 8192, CU_AD_FORMAT_FLOAT, 1);
  const CUDA_ARRAY3D_DESCRIPTOR half_gib_3d =
      descriptor_3d(1024, 1024, 128, CU_AD_FORMAT_UNSIGNED_INT32, 1);
  CUarray first = nullptr;
  CUarray second = nullptr;
  CUarray third = nullptr;
  ASSERT_CU(cuArrayCreate(&first, &half_gib));
  EXPECT_EQ(used(), before + 512 * kMiB);
  ASSERT_CU(cuArray3DCreate(&second, &half_gib_3d));
  EXPECT_EQ(used(), before + kGiB);
  EXPECT_EQ(cuArrayCreate(&third, &half_gib), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuArray3DCreate(&third, &half_gib_3d), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(used(), before + kGiB);  // a refusal charges nothing

  // Linear memory and arrays share the ledger.
  CUdeviceptr linear = 0;
  EXPECT_EQ(cuMemAlloc(&linear, 4096), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_CU(cuArrayDestroy(first));
  ASSERT_CU(cuMemAlloc(&linear, 4096));
  ASSERT_CU(cuMemFree(linear));
  ASSERT_CU(cuArrayDestroy(second));
  EXPECT_EQ(used(), before);

  // A size no device could hold (the product overflows 64 bits).
  const CUDA_ARRAY3D_DESCRIPTOR absurd =
      descriptor_3d(size_t{1} << 40, size_t{1} << 20, size_t{1} << 10, CU_AD_FORMAT_FLOAT, 4);
  EXPECT_EQ(cuArray3DCreate(&third, &absurd), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(used(), before);
}

TEST_F(ArrayTest, DescriptorsRoundTrip) {
  const CUDA_ARRAY_DESCRIPTOR flat = descriptor_2d(640, 480, CU_AD_FORMAT_SIGNED_INT16, 2);
  CUarray array_2d = nullptr;
  ASSERT_CU(cuArrayCreate(&array_2d, &flat));
  CUDA_ARRAY_DESCRIPTOR read{};
  ASSERT_CU(cuArrayGetDescriptor(&read, array_2d));
  EXPECT_EQ(read.Width, 640u);
  EXPECT_EQ(read.Height, 480u);
  EXPECT_EQ(read.Format, CU_AD_FORMAT_SIGNED_INT16);
  EXPECT_EQ(read.NumChannels, 2u);
  // A 2D array read as 3D: depth 0, no flags.
  CUDA_ARRAY3D_DESCRIPTOR read_3d{};
  read_3d.Depth = 99;
  read_3d.Flags = 99;
  ASSERT_CU(cuArray3DGetDescriptor(&read_3d, array_2d));
  EXPECT_EQ(read_3d.Width, 640u);
  EXPECT_EQ(read_3d.Height, 480u);
  EXPECT_EQ(read_3d.Depth, 0u);
  EXPECT_EQ(read_3d.Format, CU_AD_FORMAT_SIGNED_INT16);
  EXPECT_EQ(read_3d.NumChannels, 2u);
  EXPECT_EQ(read_3d.Flags, 0u);
  ASSERT_CU(cuArrayDestroy(array_2d));

  const CUDA_ARRAY3D_DESCRIPTOR layered =
      descriptor_3d(128, 64, 12, CU_AD_FORMAT_UNSIGNED_INT8, 4,
                    CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST);
  CUarray array_3d = nullptr;
  ASSERT_CU(cuArray3DCreate(&array_3d, &layered));
  ASSERT_CU(cuArray3DGetDescriptor(&read_3d, array_3d));
  EXPECT_EQ(read_3d.Width, 128u);
  EXPECT_EQ(read_3d.Height, 64u);
  EXPECT_EQ(read_3d.Depth, 12u);
  EXPECT_EQ(read_3d.Format, CU_AD_FORMAT_UNSIGNED_INT8);
  EXPECT_EQ(read_3d.NumChannels, 4u);
  EXPECT_EQ(read_3d.Flags, unsigned{CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST});
  // The 2D form has no depth to give.
  EXPECT_EQ(cuArrayGetDescriptor(&read, array_3d), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuArrayDestroy(array_3d));
}

TEST_F(ArrayTest, BadDescriptorsAreInvalidValues) {
  const size_t before = used();
  CUarray array = nullptr;
  const CUDA_ARRAY_DESCRIPTOR good = descriptor_2d(16, 16, CU_AD_FORMAT_FLOAT, 1);
  EXPECT_EQ(cuArrayCreate(nullptr, &good), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuArrayCreate(&array, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuArray3DCreate(&array, nullptr), CUDA_ERROR_INVALID_VALUE);

  const CUDA_ARRAY_DESCRIPTOR zero_width = descriptor_2d(0, 16, CU_AD_FORMAT_FLOAT, 1);
  EXPECT_EQ(cuArrayCreate(&array, &zero_width), CUDA_ERROR_INVALID_VALUE);
  const CUDA_ARRAY_DESCRIPTOR bad_format = descriptor_2d(16, 16, static_cast<CUarray_format>(0x7), 1);
  EXPECT_EQ(cuArrayCreate(&array, &bad_format), CUDA_ERROR_INVALID_VALUE);
  for (const unsigned int channels : {0u, 3u, 5u, 8u}) {
    const CUDA_ARRAY_DESCRIPTOR bad_channels = descriptor_2d(16, 16, CU_AD_FORMAT_FLOAT, channels);
    EXPECT_EQ(cuArrayCreate(&array, &bad_channels), CUDA_ERROR_INVALID_VALUE) << channels;
  }

  const CUDA_ARRAY3D_DESCRIPTOR zero_width_3d = descriptor_3d(0, 4, 4, CU_AD_FORMAT_FLOAT, 1);
  EXPECT_EQ(cuArray3DCreate(&array, &zero_width_3d), CUDA_ERROR_INVALID_VALUE);
  // A depth without a height is only a layered 1D array.
  const CUDA_ARRAY3D_DESCRIPTOR depth_no_height = descriptor_3d(16, 0, 4, CU_AD_FORMAT_FLOAT, 1);
  EXPECT_EQ(cuArray3DCreate(&array, &depth_no_height), CUDA_ERROR_INVALID_VALUE);
  const CUDA_ARRAY3D_DESCRIPTOR unknown_flag =
      descriptor_3d(16, 16, 0, CU_AD_FORMAT_FLOAT, 1, 0x8000);
  EXPECT_EQ(cuArray3DCreate(&array, &unknown_flag), CUDA_ERROR_INVALID_VALUE);
  const CUDA_ARRAY3D_DESCRIPTOR bad_cubemap =
      descriptor_3d(16, 8, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP);
  EXPECT_EQ(cuArray3DCreate(&array, &bad_cubemap), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(used(), before);

  const CUDA_ARRAY3D_DESCRIPTOR layered_1d =
      descriptor_3d(16, 0, 4, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED);
  ASSERT_CU(cuArray3DCreate(&array, &layered_1d));
  EXPECT_EQ(used(), before + 16 * 4 * 4);
  ASSERT_CU(cuArrayDestroy(array));
  const CUDA_ARRAY3D_DESCRIPTOR cubemap =
      descriptor_3d(16, 16, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP);
  ASSERT_CU(cuArray3DCreate(&array, &cubemap));
  EXPECT_EQ(used(), before + 16 * 16 * 6 * 4);
  ASSERT_CU(cuArrayDestroy(array));
  EXPECT_EQ(used(), before);
}

TEST_F(ArrayTest, UnknownHandlesAreInvalidHandles) {
  CUDA_ARRAY_DESCRIPTOR read{};
  CUDA_ARRAY3D_DESCRIPTOR read_3d{};
  int not_an_array = 0;
  const auto garbage = reinterpret_cast<CUarray>(&not_an_array);
  EXPECT_EQ(cuArrayDestroy(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuArrayDestroy(garbage), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuArrayGetDescriptor(&read, garbage), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuArray3DGetDescriptor(&read_3d, garbage), CUDA_ERROR_INVALID_HANDLE);

  const CUDA_ARRAY_DESCRIPTOR flat = descriptor_2d(16, 16, CU_AD_FORMAT_FLOAT, 1);
  CUarray array = nullptr;
  ASSERT_CU(cuArrayCreate(&array, &flat));
  EXPECT_EQ(cuArrayGetDescriptor(nullptr, array), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuArray3DGetDescriptor(nullptr, array), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuArrayDestroy(array));
  EXPECT_EQ(cuArrayDestroy(array), CUDA_ERROR_INVALID_HANDLE);  // destroyed twice
  EXPECT_EQ(cuArrayGetDescriptor(&read, array), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(ArrayTest, NoContextMeansInvalidContext) {
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  const CUDA_ARRAY_DESCRIPTOR flat = descriptor_2d(16, 16, CU_AD_FORMAT_FLOAT, 1);
  CUarray array = nullptr;
  EXPECT_EQ(cuArrayCreate(&array, &flat), CUDA_ERROR_INVALID_CONTEXT);
}

}  // namespace

// Mipmapped arrays: the sum of the levels, each extent halved per level (never below 1), is
// charged from create to destroy; the levels are arrays with their own descriptors.
namespace {

using MipmappedArrayTest = DriverTest;

TEST_F(MipmappedArrayTest, AllLevelsAreChargedUntilDestroy) {
  const size_t before = used();
  // 100 x 40 x 10 uint16x2 (4 bytes), 4 levels: 100x40x10, 50x20x5, 25x10x2, 12x5x1.
  const CUDA_ARRAY3D_DESCRIPTOR volume =
      descriptor_3d(100, 40, 10, CU_AD_FORMAT_UNSIGNED_INT16, 2);
  const size_t expected = 4 * (100 * 40 * 10 + 50 * 20 * 5 + 25 * 10 * 2 + 12 * 5 * 1);
  CUmipmappedArray mipmap = nullptr;
  ASSERT_CU(cuMipmappedArrayCreate(&mipmap, &volume, 4));
  EXPECT_EQ(used(), before + expected);

  CUarray level = nullptr;
  ASSERT_CU(cuMipmappedArrayGetLevel(&level, mipmap, 3));
  CUDA_ARRAY3D_DESCRIPTOR read{};
  ASSERT_CU(cuArray3DGetDescriptor(&read, level));
  EXPECT_EQ(read.Width, 12u);
  EXPECT_EQ(read.Height, 5u);
  EXPECT_EQ(read.Depth, 1u);
  EXPECT_EQ(read.Format, CU_AD_FORMAT_UNSIGNED_INT16);
  EXPECT_EQ(read.NumChannels, 2u);
  EXPECT_EQ(cuMipmappedArrayGetLevel(&level, mipmap, 4), CUDA_ERROR_INVALID_VALUE);
  // A level belongs to its mipmapped array.
  EXPECT_EQ(cuArrayDestroy(level), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(used(), before + expected);

  ASSERT_CU(cuMipmappedArrayDestroy(mipmap));
  EXPECT_EQ(used(), before);
  EXPECT_EQ(cuMipmappedArrayDestroy(mipmap), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(MipmappedArrayTest, LevelCountIsClampedAndLayersStay) {
  const size_t before = used();
  // 2D 8 x 3 float: at most 1 + floor(log2 8) = 4 levels (8x3, 4x1, 2x1, 1x1), even if 10 are
  // asked for; 0 asks for 1.
  const CUDA_ARRAY3D_DESCRIPTOR flat = descriptor_3d(8, 3, 0, CU_AD_FORMAT_FLOAT, 1);
  CUmipmappedArray clamped = nullptr;
  ASSERT_CU(cuMipmappedArrayCreate(&clamped, &flat, 10));
  EXPECT_EQ(used(), before + 4 * (24 + 4 + 2 + 1));
  CUarray level = nullptr;
  EXPECT_EQ(cuMipmappedArrayGetLevel(&level, clamped, 4), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMipmappedArrayDestroy(clamped));
  CUmipmappedArray single = nullptr;
  ASSERT_CU(cuMipmappedArrayCreate(&single, &flat, 0));
  EXPECT_EQ(used(), before + 4 * 24);
  ASSERT_CU(cuMipmappedArrayDestroy(single));

  // 2D layered 16 x 16 uint8, 3 layers, 2 levels: the layers do not halve.
  const CUDA_ARRAY3D_DESCRIPTOR layered =
      descriptor_3d(16, 16, 3, CU_AD_FORMAT_UNSIGNED_INT8, 1, CUDA_ARRAY3D_LAYERED);
  CUmipmappedArray layers = nullptr;
  ASSERT_CU(cuMipmappedArrayCreate(&layers, &layered, 2));
  EXPECT_EQ(used(), before + (16 * 16 * 3 + 8 * 8 * 3));
  ASSERT_CU(cuMipmappedArrayGetLevel(&level, layers, 1));
  CUDA_ARRAY3D_DESCRIPTOR read{};
  ASSERT_CU(cuArray3DGetDescriptor(&read, level));
  EXPECT_EQ(read.Depth, 3u);
  EXPECT_EQ(read.Flags, static_cast<unsigned int>(CUDA_ARRAY3D_LAYERED));
  ASSERT_CU(cuMipmappedArrayDestroy(layers));
  EXPECT_EQ(used(), before);
}

TEST_F(MipmappedArrayTest, BadArgumentsAndWhatDoesNotFit) {
  const size_t before = used();
  const CUDA_ARRAY3D_DESCRIPTOR flat = descriptor_3d(64, 64, 0, CU_AD_FORMAT_FLOAT, 4);
  CUmipmappedArray mipmap = nullptr;
  EXPECT_EQ(cuMipmappedArrayCreate(nullptr, &flat, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMipmappedArrayCreate(&mipmap, nullptr, 2), CUDA_ERROR_INVALID_VALUE);
  const CUDA_ARRAY3D_DESCRIPTOR three_channels = descriptor_3d(64, 64, 0, CU_AD_FORMAT_FLOAT, 3);
  EXPECT_EQ(cuMipmappedArrayCreate(&mipmap, &three_channels, 2), CUDA_ERROR_INVALID_VALUE);
  // 16384 x 16384 float4 is 4 GiB at level 0: more than the 1 GiB device.
  const CUDA_ARRAY3D_DESCRIPTOR huge = descriptor_3d(16384, 16384, 0, CU_AD_FORMAT_FLOAT, 4);
  EXPECT_EQ(cuMipmappedArrayCreate(&mipmap, &huge, 2), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(used(), before);
  CUarray level = nullptr;
  EXPECT_EQ(cuMipmappedArrayGetLevel(&level, reinterpret_cast<CUmipmappedArray>(&level), 0),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuMipmappedArrayGetLevel(nullptr, reinterpret_cast<CUmipmappedArray>(&level), 0),
            CUDA_ERROR_INVALID_VALUE);
  // An array is not a mipmapped array, nor the other way round.
  CUarray array = nullptr;
  ASSERT_CU(cuArray3DCreate(&array, &flat));
  EXPECT_EQ(cuMipmappedArrayDestroy(reinterpret_cast<CUmipmappedArray>(array)),
            CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuArrayDestroy(array));
}

}  // namespace
