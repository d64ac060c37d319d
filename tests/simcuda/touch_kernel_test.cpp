// vs_touch, the kernel with a struct parameter full of pointers (vs_touch.h, Note [The touch
// list]): its parameter layout as the driver reports it, its arguments packed either way, every
// element it writes, and what the cost model charges for it.
#include <array>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "kernel_test_support.h"
#include "vs_touch.h"

namespace {

constexpr size_t kListOffset = 16;
constexpr size_t kStampOffset = 3864;
constexpr size_t kParamBytes = kStampOffset + 8;

// A block of `words` elements, each filled with `initial`, and the touches it has had.
struct Block {
  CUdeviceptr address = 0;
  size_t words = 0;
  unsigned long long initial = 0;
  VsTouchMap map;
};

class TouchKernelTest : public KernelFixture {
 protected:
  void SetUp() override {
    KernelFixture::SetUp();
    ASSERT_CU(cuModuleGetFunction(&touch_, module_, "vs_touch"));
  }
  void TearDown() override {
    for (const Block& block : blocks_) cuMemFree(block.address);
    KernelFixture::TearDown();
  }

  // A block with a few words of slack after it, which no touch may reach.
  Block& add_block(size_t words, unsigned char fill) {
    Block& block = blocks_.emplace_back();
    block.words = words;
    std::memset(&block.initial, fill, sizeof block.initial);
    EXPECT_CU(cuMemAlloc(&block.address, (words + kSlackWords) * 8));
    EXPECT_CU(cuMemsetD8(block.address, fill, (words + kSlackWords) * 8));
    // A memset of device memory may return before it is done, on the legacy stream, which a
    // non-blocking stream's kernel does not wait for: the fill must be done before any launch.
    EXPECT_CU(cuCtxSynchronize());
    return block;
  }

  // Every element of `block`, and its slack, as the touches it had predict.
  void expect_predicted(const Block& block) {
    const auto host = download<unsigned long long>(block.address, block.words + kSlackWords);
    for (size_t i = 0; i < host.size(); ++i) {
      const unsigned long long expected =
          i < block.words ? block.map.value(block.initial, i) : block.initial;
      ASSERT_EQ(host[i], expected) << "element " << i << " of a block of " << block.words;
    }
  }

  static constexpr size_t kSlackWords = 4;
  CUfunction touch_ = nullptr;
  std::deque<Block> blocks_;  // add_block() hands out references that must stay valid
};

TEST_F(TouchKernelTest, ParameterInfoGivesTheStructItsSizeAndAlignment) {
  // The list is aligned to 8, not to its size: it starts right after the two scalars.
  const std::array<std::pair<size_t, size_t>, 4> expected{
      {{0, 8}, {8, 8}, {kListOffset, sizeof(VsTouchList)}, {kStampOffset, 8}}};
  CUlibrary library = nullptr;
  if (const char* image = std::getenv("VS_KERNELS_FATBIN"); image != nullptr) {
    ASSERT_CU(cuLibraryLoadFromFile(&library, image, nullptr, nullptr, 0, nullptr, nullptr, 0));
  } else {
    ASSERT_CU(cuLibraryLoadData(&library, "any image", nullptr, nullptr, 0, nullptr, nullptr, 0));
  }
  CUkernel kernel = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&kernel, library, "vs_touch"));
  for (size_t i = 0; i < expected.size(); ++i) {
    size_t offset = 0, size = 0;
    ASSERT_CU(cuFuncGetParamInfo(touch_, i, &offset, &size));
    EXPECT_EQ(offset, expected[i].first) << "parameter " << i;
    EXPECT_EQ(size, expected[i].second) << "parameter " << i;
    ASSERT_CU(cuKernelGetParamInfo(kernel, i, &offset, &size));
    EXPECT_EQ(offset, expected[i].first) << "parameter " << i << " of the CUkernel";
    EXPECT_EQ(size, expected[i].second) << "parameter " << i << " of the CUkernel";
  }
  size_t offset = 0, size = 0;
  EXPECT_EQ(cuFuncGetParamInfo(touch_, expected.size(), &offset, &size),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuLibraryUnload(library));
}

TEST_F(TouchKernelTest, EveryElementOfEveryNamedBlockIsTouchedOnce) {
  Block& bare = add_block(1000, 0x11);
  Block& first = add_block((size_t{1} << 18) + 3, 0x5A);
  Block& skipped = add_block(64, 0x77);
  Block& last = add_block(1, 0xC3);
  // Blocks are touched in any order and any number of times; a 0-word entry names nothing.
  const unsigned long long stamps[] = {1, 0xFEEDFACECAFEBEEFULL, 42};
  for (const unsigned long long stamp : stamps) {
    VsTouchList list{};
    list.count = 3;
    list.data[0] = reinterpret_cast<unsigned long long*>(last.address);
    list.words[0] = last.words;
    list.data[1] = reinterpret_cast<unsigned long long*>(skipped.address);
    list.words[1] = 0;
    list.data[2] = reinterpret_cast<unsigned long long*>(first.address);
    list.words[2] = first.words;
    unsigned long long* bare_pointer = reinterpret_cast<unsigned long long*>(bare.address);
    unsigned long long bare_words = bare.words;
    unsigned long long stamp_value = stamp;
    void* params[] = {&bare_pointer, &bare_words, &list, &stamp_value};
    ASSERT_CU(cuLaunchKernel(touch_, 64, 4, 1, 256, 1, 1, 0, nullptr, params, nullptr));
    for (Block* block : {&bare, &first, &last}) block->map.touch(stamp);
  }
  for (const Block& block : blocks_) expect_predicted(block);
}

TEST_F(TouchKernelTest, PackedExtraBufferAndCountPastTheCapacity) {
  Block& listed = add_block(4099, 0x3C);
  // Packed at the offsets the driver reports, as a generic launcher would. A count past the
  // capacity is read as the capacity; the entries after the first have 0 words.
  VsTouchList list{};
  list.count = ~0ULL;
  list.data[0] = reinterpret_cast<unsigned long long*>(listed.address);
  list.words[0] = listed.words;
  const unsigned long long bare = 0, bare_words = 0, stamp = 7;
  const void* args[] = {&bare, &bare_words, &list, &stamp};
  std::vector<unsigned char> buffer(kParamBytes);
  for (size_t i = 0; i < 4; ++i) {
    size_t offset = 0, size = 0;
    ASSERT_CU(cuFuncGetParamInfo(touch_, i, &offset, &size));
    std::memcpy(buffer.data() + offset, args[i], size);
  }
  size_t buffer_size = buffer.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &buffer_size, CU_LAUNCH_PARAM_END};
  ASSERT_CU(cuLaunchKernel(touch_, 8, 1, 1, 128, 1, 1, 0, nullptr, nullptr, extra));
  listed.map.touch(stamp);
  expect_predicted(listed);
}

TEST_F(TouchKernelTest, ACUkernelLaunchesThroughLaunchKernelEx) {
  // As cudart launches: a CUkernel from a library, passed where a CUfunction is expected.
  CUlibrary library = nullptr;
  ASSERT_CU(cuLibraryLoadData(&library, "any image", nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel kernel = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&kernel, library, "vs_touch"));
  Block& block = add_block(777, 0x01);
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  VsTouchList list{};
  list.count = 1;
  list.data[0] = reinterpret_cast<unsigned long long*>(block.address);
  list.words[0] = block.words;
  unsigned long long* bare = nullptr;
  unsigned long long bare_words = 0, stamp = 99;
  void* params[] = {&bare, &bare_words, &list, &stamp};
  CUlaunchConfig config{};
  config.gridDimX = 4;
  config.gridDimY = 2;
  config.gridDimZ = 1;
  config.blockDimX = 256;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.hStream = stream;
  ASSERT_CU(cuLaunchKernelEx(&config, reinterpret_cast<CUfunction>(kernel), params, nullptr));
  ASSERT_CU(cuStreamSynchronize(stream));
  block.map.touch(stamp);
  expect_predicted(block);
  ASSERT_CU(cuStreamDestroy(stream));
  ASSERT_CU(cuLibraryUnload(library));
}

// The cost model charges what touches() reports: each named block read and written once at HBM
// bandwidth, plus the launch overhead (tools/simcuda/README.md, "Cost model"). Modeled figures,
// so only on simcuda.
TEST_F(TouchKernelTest, TheCostModelChargesAReadAndAWriteOfEachBlock) {
  char name[64] = {};
  ASSERT_CU(cuDeviceGetName(name, sizeof name, device_));
  if (std::string(name).rfind("simcuda", 0) != 0) GTEST_SKIP() << "modeled times only";
  Block& bare = add_block(8 * kMiB / 8, 0);
  Block& listed = add_block(24 * kMiB / 8, 0);
  VsTouchList list{};
  list.count = 1;
  list.data[0] = reinterpret_cast<unsigned long long*>(listed.address);
  list.words[0] = listed.words;
  unsigned long long* bare_pointer = reinterpret_cast<unsigned long long*>(bare.address);
  unsigned long long bare_words = bare.words, stamp = 5;
  void* params[] = {&bare_pointer, &bare_words, &list, &stamp};
  CUevent start = nullptr, stop = nullptr;
  ASSERT_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventRecord(start, nullptr));
  ASSERT_CU(cuLaunchKernel(touch_, 64, 2, 1, 256, 1, 1, 0, nullptr, params, nullptr));
  ASSERT_CU(cuEventRecord(stop, nullptr));
  ASSERT_CU(cuEventSynchronize(stop));
  float milliseconds = 0;
  ASSERT_CU(cuEventElapsedTime(&milliseconds, start, stop));
  // 32 MiB read and written at the default 4.3e12 bytes/s, plus 3 us to start the kernel.
  const double expected = (2.0 * 32 * kMiB / 4.3e12 + 3e-6) * 1e3;
  EXPECT_NEAR(milliseconds, expected, expected * 1e-3);
  ASSERT_CU(cuEventDestroy(start));
  ASSERT_CU(cuEventDestroy(stop));
}

}  // namespace
