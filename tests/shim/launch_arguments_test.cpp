// Reading a launch's arguments as words (Note [Reading a launch's arguments], Note [The parameter
// layout cache] in shim/core/launch_arguments.h), with a fake cuFuncGetParamInfo and parameter
// buffers built as a program builds them for cuLaunchKernel.
#include "core/launch_arguments.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/use_tracker.h"

namespace vramspill::core {
namespace {

// The fake driver's kernels: one layout per CUfunction value, and how often it was asked.
struct FakeKernel {
  std::vector<ParamLayout::Param> params;
  CUresult failure = CUDA_SUCCESS;  // what every query answers, if not success
};
std::vector<FakeKernel> fake_kernels;
int queries = 0;

CUfunction function_of(size_t index) { return reinterpret_cast<CUfunction>(0x1000 + index * 64); }

CUresult fake_param_info(CUfunction function, size_t index, size_t* offset, size_t* size) {
  ++queries;
  const FakeKernel& kernel =
      fake_kernels.at((reinterpret_cast<uintptr_t>(function) - 0x1000) / 64);
  if (kernel.failure != CUDA_SUCCESS) return kernel.failure;
  if (index >= kernel.params.size()) return CUDA_ERROR_INVALID_VALUE;
  *offset = kernel.params[index].offset;
  *size = kernel.params[index].size;
  return CUDA_SUCCESS;
}

struct Pair {
  float scale;
  uint64_t pointer;
};

// kernel(int n, float* a, Pair p, char c, double* b): offsets 0, 8, 16, 32, 40.
class LaunchArguments : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_kernels = {{{{0, 4}, {8, 8}, {16, 16}, {32, 1}, {40, 8}}}};
    queries = 0;
  }
  int n = 3;
  uint64_t a = 0xA000;
  Pair p{2.0f, 0xB000};
  char c = 'x';
  uint64_t b = 0xC000;
  void* params[5] = {&n, &a, &p, &c, &b};
  ParamLayoutCache cache;
  ArgumentWords words;

  std::vector<uint64_t> read() { return {words.words.begin(), words.words.begin() + words.count}; }
};

TEST_F(LaunchArguments, KernelParamsGiveEachAlignedWordOfEachParameter) {
  ASSERT_TRUE(argument_words(function_of(0), params, nullptr, cache, fake_param_info, words));
  uint64_t scale_word = 0;
  std::memcpy(&scale_word, &p, 8);  // the struct's first word: the float and its padding
  // The int and the char hold no pointer; the struct gives both its words.
  EXPECT_EQ(read(), (std::vector<uint64_t>{0xA000, scale_word, 0xB000, 0xC000}));
}

TEST_F(LaunchArguments, TheLayoutIsAskedForOncePerFunction) {
  ASSERT_TRUE(argument_words(function_of(0), params, nullptr, cache, fake_param_info, words));
  EXPECT_EQ(queries, 6);  // five parameters and the index past them
  ASSERT_TRUE(argument_words(function_of(0), params, nullptr, cache, fake_param_info, words));
  EXPECT_EQ(queries, 6);
  EXPECT_EQ(words.count, 4u);
  // An unloaded module's functions may come back as others.
  cache.forget_all();
  ASSERT_TRUE(argument_words(function_of(0), params, nullptr, cache, fake_param_info, words));
  EXPECT_EQ(queries, 12);
}

TEST_F(LaunchArguments, ExtraGivesTheWholePackedBuffer) {
  alignas(8) unsigned char buffer[48] = {};
  std::memcpy(buffer + 8, &a, 8);
  std::memcpy(buffer + 16, &p, 16);
  std::memcpy(buffer + 40, &b, 8);
  size_t size = sizeof buffer;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  ASSERT_TRUE(argument_words(function_of(0), nullptr, extra, cache, fake_param_info, words));
  EXPECT_EQ(queries, 0);  // no layout needed
  ASSERT_EQ(words.count, 6u);
  EXPECT_EQ(words.words[1], 0xA000u);
  EXPECT_EQ(words.words[3], 0xB000u);
  EXPECT_EQ(words.words[5], 0xC000u);
  void* unknown[] = {reinterpret_cast<void*>(0x77), nullptr, CU_LAUNCH_PARAM_END};
  EXPECT_FALSE(argument_words(function_of(0), nullptr, unknown, cache, fake_param_info, words));
}

TEST_F(LaunchArguments, AnUnreadableLayoutMeansEverything) {
  fake_kernels[0].failure = CUDA_ERROR_NOT_SUPPORTED;
  EXPECT_FALSE(argument_words(function_of(0), params, nullptr, cache, fake_param_info, words));
  EXPECT_FALSE(argument_words(function_of(0), params, nullptr, cache, nullptr, words));  // < 12.4
  fake_kernels[0] = {std::vector<ParamLayout::Param>(ParamLayout::kMaxParams + 1, {0, 4})};
  EXPECT_FALSE(argument_words(function_of(0), params, nullptr, cache, fake_param_info, words));
}

TEST_F(LaunchArguments, NoParametersNoWords) {
  fake_kernels[0].params.clear();
  EXPECT_TRUE(argument_words(function_of(0), nullptr, nullptr, cache, fake_param_info, words));
  EXPECT_EQ(words.count, 0u);
}

// Decoding and lookup together, as the launch hook does them: 8 parameters, two of them
// pointers into tracked blocks (one an interior pointer), one into untracked memory.
TEST_F(LaunchArguments, ALaunchTouchesTheBlocksItsArgumentsPointInto) {
  fake_kernels[0] = {{{0, 8}, {8, 8}, {16, 8}, {24, 4}, {28, 4}, {32, 8}, {40, 8}, {48, 8}}};
  const uint64_t base = uint64_t{0x7f00} << 32, mib = uint64_t{1} << 20;
  UseTracker tracker;
  ASSERT_EQ(tracker.track(base, 4 * mib, 11), TrackResult::kTracked);
  ASSERT_EQ(tracker.track(base + 4 * mib, 4 * mib, 12), TrackResult::kTracked);
  uint64_t in_first = base + 100, in_second = base + 5 * mib, untracked = 0x7e00ull << 32;
  uint64_t count = 1000, seed = 7;
  int width = 4, height = 5;
  double alpha = 0.5;
  void* eight[] = {&in_second, &count, &untracked, &width, &height, &seed, &alpha, &in_first};
  ASSERT_TRUE(argument_words(function_of(0), eight, nullptr, cache, fake_param_info, words));
  SubmissionUse use;
  tracker.record_words(5, {words.words.data(), words.count}, use);
  EXPECT_EQ(std::vector<BlockId>(use.blocks.begin(), use.blocks.begin() + use.count),
            (std::vector<BlockId>{12, 11}));
  EXPECT_EQ(tracker.last_use(11)->stream, 5u);
}

}  // namespace
}  // namespace vramspill::core
