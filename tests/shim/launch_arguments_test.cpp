// Reading a launch's arguments as words (Notes [Reading a launch's arguments], [Kernels launched
// as functions] and [The parameter layout cache] in shim/core/launch_arguments.h), with fake
// cuFuncGetParamInfo and cuKernelGetParamInfo and parameter buffers built as a program builds
// them for cuLaunchKernel.
#include "core/launch_arguments.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "core/use_tracker.h"

namespace vramspill::core {
namespace {

// The fake driver's kernels: one layout per handle value, and how often each query was asked.
// As on a GPU, a CUkernel (from cuLibraryGetKernel) is refused by cuFuncGetParamInfo and read by
// cuKernelGetParamInfo, and a module's CUfunction the other way round.
struct FakeKernel {
  std::vector<ParamLayout::Param> params;
  CUresult failure = CUDA_SUCCESS;  // what every query answers, if not success
  bool library_kernel = false;      // a CUkernel handle, not a CUfunction
  // A CUkernel whose function query answers as a function's past its last parameter would.
  bool seen_by_the_function_query_as_having_none = false;
};
std::vector<FakeKernel> fake_kernels;
int queries = 0;
int kernel_queries = 0;

CUfunction function_of(size_t index) { return reinterpret_cast<CUfunction>(0x1000 + index * 64); }

CUresult answer(const void* handle, bool asked_as_kernel, size_t index, size_t* offset,
                size_t* size) {
  const FakeKernel& kernel = fake_kernels.at((reinterpret_cast<uintptr_t>(handle) - 0x1000) / 64);
  if (kernel.failure != CUDA_SUCCESS) return kernel.failure;
  if (kernel.library_kernel && !asked_as_kernel && kernel.seen_by_the_function_query_as_having_none)
    return CUDA_ERROR_INVALID_VALUE;
  if (kernel.library_kernel != asked_as_kernel) return CUDA_ERROR_INVALID_HANDLE;
  if (index >= kernel.params.size()) return CUDA_ERROR_INVALID_VALUE;
  *offset = kernel.params[index].offset;
  *size = kernel.params[index].size;
  return CUDA_SUCCESS;
}

CUresult fake_param_info(CUfunction function, size_t index, size_t* offset, size_t* size) {
  ++queries;
  return answer(function, false, index, offset, size);
}

CUresult fake_kernel_param_info(CUkernel kernel, size_t index, size_t* offset, size_t* size) {
  ++kernel_queries;
  return answer(kernel, true, index, offset, size);
}

constexpr LayoutQueries kBothQueries{.function = fake_param_info, .kernel = fake_kernel_param_info};
constexpr LayoutQueries kFunctionQueryOnly{.function = fake_param_info, .kernel = nullptr};

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
    kernel_queries = 0;
  }
  int n = 3;
  uint64_t a = 0xA000;
  Pair p{2.0f, 0xB000};
  char c = 'x';
  uint64_t b = 0xC000;
  void* params[5] = {&n, &a, &p, &c, &b};
  ParamLayoutCache cache;
  LaunchWords words;

  // The words the runs hold, in order.
  std::vector<uint64_t> read() const {
    std::vector<uint64_t> all;
    for (const WordRun& run : words.view()) {
      for (size_t index = 0; index < run.words; ++index) {
        uint64_t word = 0;
        std::memcpy(&word, static_cast<const unsigned char*>(run.bytes) + 8 * index, 8);
        all.push_back(word);
      }
    }
    return all;
  }
  ArgumentsRead read_launch(CUfunction function, void** kernel_params, void** extra,
                            const LayoutQueries& queries_used = kBothQueries) {
    return argument_words(function, kernel_params, extra, cache, queries_used, words);
  }
};

TEST_F(LaunchArguments, KernelParamsGiveEachAlignedWordOfEachParameter) {
  ASSERT_EQ(read_launch(function_of(0), params, nullptr), ArgumentsRead::kRead);
  uint64_t scale_word = 0;
  std::memcpy(&scale_word, &p, 8);  // the struct's first word: the float and its padding
  // The int and the char hold no pointer; the struct gives both its words.
  EXPECT_EQ(read(), (std::vector<uint64_t>{0xA000, scale_word, 0xB000, 0xC000}));
  EXPECT_EQ(kernel_queries, 0);  // a module's function: cuFuncGetParamInfo alone
}

TEST_F(LaunchArguments, TheLayoutIsAskedForOncePerFunction) {
  ASSERT_EQ(read_launch(function_of(0), params, nullptr), ArgumentsRead::kRead);
  EXPECT_EQ(queries, 6);  // five parameters and the index past them
  ASSERT_EQ(read_launch(function_of(0), params, nullptr), ArgumentsRead::kRead);
  EXPECT_EQ(queries, 6);
  EXPECT_EQ(read().size(), 4u);
  // An unloaded module's functions may come back as others.
  cache.forget_all();
  ASSERT_EQ(read_launch(function_of(0), params, nullptr), ArgumentsRead::kRead);
  EXPECT_EQ(queries, 12);
}

// Note [Kernels launched as functions]: what cudart launches.
TEST_F(LaunchArguments, ALibraryKernelLaunchedAsAFunctionIsReadThroughTheKernelQuery) {
  fake_kernels[0].library_kernel = true;
  ASSERT_EQ(read_launch(function_of(0), params, nullptr), ArgumentsRead::kRead);
  uint64_t scale_word = 0;
  std::memcpy(&scale_word, &p, 8);
  EXPECT_EQ(read(), (std::vector<uint64_t>{0xA000, scale_word, 0xB000, 0xC000}));
  EXPECT_EQ(queries, 1);         // refused at the first index
  EXPECT_EQ(kernel_queries, 6);  // five parameters and the index past them
  // Cached like a function's layout: no query at all the second time.
  ASSERT_EQ(read_launch(function_of(0), params, nullptr), ArgumentsRead::kRead);
  EXPECT_EQ(queries + kernel_queries, 7);
  // A driver without cuKernelGetParamInfo cannot read it: the launch may touch everything.
  cache.forget_all();
  EXPECT_EQ(read_launch(function_of(0), params, nullptr, kFunctionQueryOnly),
            ArgumentsRead::kLayoutRefused);
}

// PyTorch's multi-tensor kernels pass a struct of about 4 KiB full of pointers; the driver
// allows 32764 bytes of parameters. Every word of it is read, wherever the program put it.
TEST_F(LaunchArguments, ParameterSpacesUpToTheDriversLimitAreReadWhole) {
  constexpr size_t kStructWords = 32760 / 8;
  std::vector<uint64_t> big(kStructWords);
  for (size_t index = 0; index < big.size(); ++index) big[index] = 0x100000 + index;
  uint64_t bare = 0xD000;
  fake_kernels[0] = {{{0, 32760}, {32760, 4}}, CUDA_SUCCESS, /*library_kernel=*/true};
  uint32_t tail = 9;
  void* two[] = {big.data(), &tail};
  ASSERT_EQ(read_launch(function_of(0), two, nullptr), ArgumentsRead::kRead);
  EXPECT_EQ(read(), big);
  fake_kernels.push_back({{{0, 8}, {8, 4096}}});
  void* mixed[] = {&bare, big.data()};
  ASSERT_EQ(read_launch(function_of(1), mixed, nullptr), ArgumentsRead::kRead);
  const std::vector<uint64_t> words_read = read();
  ASSERT_EQ(words_read.size(), 1 + 4096 / 8);
  EXPECT_EQ(words_read.front(), 0xD000u);
  EXPECT_EQ(words_read.back(), big[4096 / 8 - 1]);
}

TEST_F(LaunchArguments, ExtraGivesTheWholePackedBuffer) {
  // One byte off alignment: a program may pack its buffer anywhere.
  alignas(8) unsigned char storage[49] = {};
  unsigned char* buffer = storage + 1;
  std::memcpy(buffer + 8, &a, 8);
  std::memcpy(buffer + 16, &p, 16);
  std::memcpy(buffer + 40, &b, 8);
  size_t size = 48;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  ASSERT_EQ(read_launch(function_of(0), nullptr, extra), ArgumentsRead::kRead);
  EXPECT_EQ(queries + kernel_queries, 0);  // no layout needed
  const std::vector<uint64_t> words_read = read();
  ASSERT_EQ(words_read.size(), 6u);
  EXPECT_EQ(words_read[1], 0xA000u);
  EXPECT_EQ(words_read[3], 0xB000u);
  EXPECT_EQ(words_read[5], 0xC000u);
  void* unknown[] = {reinterpret_cast<void*>(0x77), nullptr, CU_LAUNCH_PARAM_END};
  EXPECT_EQ(read_launch(function_of(0), nullptr, unknown), ArgumentsRead::kUnknownExtraKey);
}

TEST_F(LaunchArguments, AnUnreadableLayoutMeansEverything) {
  fake_kernels[0].failure = CUDA_ERROR_NOT_SUPPORTED;
  EXPECT_EQ(read_launch(function_of(0), params, nullptr), ArgumentsRead::kLayoutRefused);
  EXPECT_EQ(queries, 1);  // each query tried once
  EXPECT_EQ(kernel_queries, 1);
  EXPECT_EQ(read_launch(function_of(0), params, nullptr, LayoutQueries{}),  // before CUDA 12.4
            ArgumentsRead::kNoLayoutQuery);
  // A refusal is not cached: the next launch of the handle asks again.
  fake_kernels[0] = {{{0, 8}}};
  void* one[] = {&a};
  EXPECT_EQ(read_launch(function_of(0), one, nullptr), ArgumentsRead::kRead);
  EXPECT_EQ(read(), std::vector<uint64_t>{0xA000});
}

// More parameters than are read is the kernel's for good: cached, so that its launches do not
// each ask kMaxParams + 1 questions.
TEST_F(LaunchArguments, TooManyParametersIsAskedOnce) {
  fake_kernels[0] = {std::vector<ParamLayout::Param>(ParamLayout::kMaxParams + 1, {0, 4})};
  EXPECT_EQ(read_launch(function_of(0), params, nullptr), ArgumentsRead::kTooManyParameters);
  EXPECT_EQ(queries, static_cast<int>(ParamLayout::kMaxParams + 1));
  EXPECT_EQ(read_launch(function_of(0), params, nullptr), ArgumentsRead::kTooManyParameters);
  EXPECT_EQ(queries, static_cast<int>(ParamLayout::kMaxParams + 1));
  cache.forget_all();  // its module unloaded: the handle may be another kernel's now
  fake_kernels[0] = {{{0, 8}}};
  void* one[] = {&a};
  EXPECT_EQ(read_launch(function_of(0), one, nullptr), ArgumentsRead::kRead);
  EXPECT_EQ(read(), std::vector<uint64_t>{0xA000});
}

// A compiled optimizer step's foreach kernel: hundreds of pointer parameters, each read.
TEST_F(LaunchArguments, AForeachKernelsHundredsOfPointersAreRead) {
  constexpr size_t kPointers = 372;
  std::vector<ParamLayout::Param> layout;
  std::vector<uint64_t> pointers(kPointers);
  std::vector<void*> pointer_params(kPointers);
  for (size_t index = 0; index < kPointers; ++index) {
    layout.push_back({static_cast<uint16_t>(8 * index), 8});
    pointers[index] = 0x100000 + 0x1000 * index;
    pointer_params[index] = &pointers[index];
  }
  fake_kernels[0] = {layout};
  EXPECT_EQ(read_launch(function_of(0), pointer_params.data(), nullptr), ArgumentsRead::kRead);
  EXPECT_EQ(read(), pointers);
}

TEST_F(LaunchArguments, NoParametersNoWords) {
  fake_kernels[0].params.clear();
  EXPECT_EQ(read_launch(function_of(0), nullptr, nullptr), ArgumentsRead::kRead);
  EXPECT_EQ(words.count, 0u);
  EXPECT_EQ(queries, 0) << "a null kernelParams is the driver's to refuse";
  void* none[] = {nullptr};
  EXPECT_EQ(read_launch(function_of(0), none, nullptr), ArgumentsRead::kRead);
  EXPECT_EQ(words.count, 0u);
  EXPECT_EQ(read_launch(function_of(0), none, nullptr), ArgumentsRead::kRead);
  EXPECT_EQ(queries, 1) << "no parameters is a layout, cached";
  EXPECT_EQ(kernel_queries, 1) << "a function without parameters is asked as a kernel once";
}

// Note [Kernels launched as functions]: a driver that answered a CUkernel's cuFuncGetParamInfo as
// a function's without parameters would leave its pointers unread; the kernel query reads them.
TEST_F(LaunchArguments, AKernelTheFunctionQuerySeesWithoutParametersIsReadAsAKernel) {
  fake_kernels[0].library_kernel = true;
  fake_kernels[0].seen_by_the_function_query_as_having_none = true;
  EXPECT_EQ(read_launch(function_of(0), params, nullptr), ArgumentsRead::kRead);
  uint64_t scale_word = 0;
  std::memcpy(&scale_word, &p, 8);
  EXPECT_EQ(read(), (std::vector<uint64_t>{0xA000, scale_word, 0xB000, 0xC000}));
  // One with more parameters than are read is unreadable, not without parameters.
  fake_kernels.push_back(fake_kernels[0]);
  fake_kernels[1].params.assign(ParamLayout::kMaxParams + 1, {0, 4});
  EXPECT_EQ(read_launch(function_of(1), params, nullptr), ArgumentsRead::kTooManyParameters);
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
  ASSERT_EQ(read_launch(function_of(0), eight, nullptr), ArgumentsRead::kRead);
  SubmissionUse use;
  tracker.record_words(5, words.view(), use);
  EXPECT_EQ(std::vector<BlockId>(use.blocks.begin(), use.blocks.begin() + use.count),
            (std::vector<BlockId>{12, 11}));
  EXPECT_EQ(tracker.last_use(11)->stream, 5u);
}

// Note [Counting launches] in shim/core/use_tracker.h: every launch counts once, on whichever
// thread it comes from, and an unreadable one touches everything.
TEST(LaunchCounts, EveryLaunchIsCountedAndTheUnreadableOnesApart) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(uint64_t{0x7f00} << 32, 2 << 20, 1), TrackResult::kTracked);
  constexpr int kThreads = 4, kLaunches = 1000;
  std::vector<std::thread> threads;
  for (int thread = 0; thread < kThreads; ++thread) {
    threads.emplace_back([&tracker, thread] {
      SubmissionUse use;
      const std::vector<uint64_t> words{uint64_t{0x7f00} << 32, 7};
      for (int launch = 0; launch < kLaunches; ++launch) {
        if (launch % 10 == thread) {
          tracker.record_unreadable_launch(static_cast<uint64_t>(thread), use);
          EXPECT_TRUE(use.everything);
        } else {
          tracker.record_words(static_cast<uint64_t>(thread), words, use);
          EXPECT_EQ(use.count, 1u);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const LaunchCounts counts = tracker.launch_counts();
  EXPECT_EQ(counts.launches, uint64_t{kThreads * kLaunches});
  EXPECT_EQ(counts.unreadable, uint64_t{kThreads * kLaunches / 10});
}

}  // namespace
}  // namespace vramspill::core
