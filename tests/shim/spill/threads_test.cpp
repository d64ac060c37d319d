// Eight threads allocating over the budget (so that some of their blocks spill), launching
// kernels on their own streams, verifying and freeing, concurrently, for many rounds. At the end
// the whole budget is free again; CMakeLists.txt checks that the exit summary counts spills.
#include <atomic>
#include <thread>

#include "spill_support.h"

namespace {

using spill::bits_of;
using spill::kBlock;
using spill::Tier;
using spill::tier_of;

constexpr int kThreads = 8;
constexpr int kRounds = 12;
constexpr size_t kWords = kBlock / sizeof(uint32_t);

class Threads : public spill::SpillTest {};

TEST_F(Threads, EightThreadsAllocateLaunchVerifyAndFree) {
  ASSERT_FALSE(spill::spilling_off());
  std::atomic<int> spilled{0};
  std::atomic<int> on_device{0};
  std::atomic<int> failures{0};
  const CUcontext context = context_;
  const auto worker = [&](int thread) {
    const auto check = [&](CUresult result, const char* what) {
      if (result == CUDA_SUCCESS) return true;
      ADD_FAILURE() << "thread " << thread << ": " << what << " returned " << result;
      failures.fetch_add(1);
      return false;
    };
    if (!check(cuCtxSetCurrent(context), "cuCtxSetCurrent")) return;
    CUstream stream = nullptr;
    if (!check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) return;
    std::vector<uint32_t> back(kWords);
    for (int round = 0; round < kRounds && failures.load() == 0; ++round) {
      const float value = static_cast<float>(thread * 100 + round);
      CUdeviceptr a = 0;
      CUdeviceptr b = 0;
      CUdeviceptr c = 0;
      // a by cuMemAlloc, b stream-ordered, c by cuMemAlloc: 12 MiB a thread, 96 MiB in all.
      if (!check(cuMemAlloc(&a, kBlock), "cuMemAlloc(a)") ||
          !check(cuMemAllocAsync(&b, kBlock, stream), "cuMemAllocAsync(b)") ||
          !check(cuMemAlloc(&c, kBlock), "cuMemAlloc(c)"))
        break;
      for (const CUdeviceptr pointer : {a, b, c}) {
        const Tier tier = tier_of(pointer);
        if (tier == Tier::kDevice) {
          on_device.fetch_add(1);
        } else {
          EXPECT_EQ(tier, spill::expected_tier()) << "thread " << thread;
          spilled.fetch_add(1);
        }
      }
      // a = value, b = 1, b = 3a + b, c = b: each kernel reads what the one before wrote.
      uint64_t count = kWords;
      uint32_t a_bits = bits_of(value);
      uint32_t one_bits = bits_of(1.0F);
      float three = 3.0F;
      void* fill_a[] = {&a, &a_bits, &count};
      void* fill_b[] = {&b, &one_bits, &count};
      void* axpy_ba[] = {&b, &a, &three, &count};
      uint64_t bytes = kBlock;
      void* copy_cb[] = {&c, &b, &bytes};
      if (!check(cuLaunchKernel(fill_, 32, 1, 1, 256, 1, 1, 0, stream, fill_a, nullptr), "fill") ||
          !check(cuLaunchKernel(fill_, 32, 1, 1, 256, 1, 1, 0, stream, fill_b, nullptr), "fill") ||
          !check(cuLaunchKernel(axpy_, 32, 1, 1, 256, 1, 1, 0, stream, axpy_ba, nullptr), "axpy") ||
          !check(cuLaunchKernel(copy_, 32, 1, 1, 256, 1, 1, 0, stream, copy_cb, nullptr), "copy") ||
          !check(cuMemcpyDtoHAsync(back.data(), c, kBlock, stream), "cuMemcpyDtoHAsync") ||
          !check(cuStreamSynchronize(stream), "cuStreamSynchronize"))
        break;
      const uint32_t expected = bits_of(3.0F * value + 1.0F);
      size_t wrong = 0;
      for (const uint32_t word : back) wrong += word != expected ? 1 : 0;
      if (wrong != 0) {
        ADD_FAILURE() << "thread " << thread << " round " << round << ": " << wrong
                      << " words wrong";
        failures.fetch_add(1);
      }
      // Free by every route: a at once, b and c in stream order, c behind one more kernel that
      // writes it (the free must wait for it).
      void* fill_c[] = {&c, &one_bits, &count};
      if (!check(cuMemFree(a), "cuMemFree(a)") ||
          !check(cuMemFreeAsync(b, stream), "cuMemFreeAsync(b)") ||
          !check(cuLaunchKernel(fill_, 32, 1, 1, 256, 1, 1, 0, stream, fill_c, nullptr), "fill") ||
          !check(cuMemFreeAsync(c, stream), "cuMemFreeAsync(c)"))
        break;
    }
    check(cuStreamSynchronize(stream), "cuStreamSynchronize");
    check(cuStreamDestroy(stream), "cuStreamDestroy");
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(spilled.load(), 0) << "nothing spilled: the test does not oversubscribe";
  EXPECT_GT(on_device.load(), 0);
  EXPECT_EQ(free_bytes(), expected_free(0)) << "the budget is not all free again";
  std::printf("%d blocks on the device, %d spilled\n", on_device.load(), spilled.load());
}

}  // namespace
