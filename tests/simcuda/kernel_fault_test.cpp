// Kernel faults on simcuda: a kernel touching unmapped memory poisons the context
// (CUDA_ERROR_ILLEGAL_ADDRESS from then on) without killing the process, while a host thread
// touching a device pointer still crashes, as on a GPU.
//
// A poisoned context stays poisoned, so each case runs in a child process (EXPECT_EXIT; the
// "threadsafe" style re-executes the test binary, as stream worker threads are running), which
// prints what the driver returned and exits normally.
#include <cstdio>
#include <cstdlib>

#include "kernel_test_support.h"

namespace {

using KernelFaultDeathTest = KernelFixture;

// Synchronises, then makes an unrelated call, and reports both results on stderr.
[[noreturn]] void report_and_exit() {
  const CUresult synchronized = cuCtxSynchronize();
  CUdeviceptr later = 0;
  const CUresult allocated = cuMemAlloc(&later, 16);
  std::fprintf(stderr, "synchronize=%d later=%d\n", synchronized, allocated);
  std::exit(0);
}

TEST_F(KernelFaultDeathTest, FreedPointerPoisonsTheContext) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        CUdeviceptr freed = 0;
        if (cuMemAlloc(&freed, 1 << 20) != CUDA_SUCCESS || cuMemFree(freed) != CUDA_SUCCESS)
          std::exit(2);
        if (fill(freed, 1, 1 << 18) != CUDA_SUCCESS) std::exit(3);  // the launch itself succeeds
        report_and_exit();
      },
      ::testing::ExitedWithCode(0), "synchronize=700 later=700");
}

TEST_F(KernelFaultDeathTest, GarbagePointerPoisonsTheContext) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (copy(0x1000, 0x2000, 64) != CUDA_SUCCESS) std::exit(3);
        report_and_exit();
      },
      ::testing::ExitedWithCode(0), "synchronize=700 later=700");
}

TEST_F(KernelFaultDeathTest, MisalignedPointerIsReportedAsSuch) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        CUdeviceptr buffer = 0;
        if (cuMemAlloc(&buffer, 4096) != CUDA_SUCCESS) std::exit(2);
        if (fill(buffer + 2, 1, 16) != CUDA_SUCCESS) std::exit(3);
        report_and_exit();
      },
      ::testing::ExitedWithCode(0), "synchronize=716 later=716");
}

TEST_F(KernelFaultDeathTest, LaterWorkIsNotRunAfterAFault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        void* pinned = nullptr;
        CUdeviceptr busy = 0;
        if (cuMemHostAlloc(&pinned, 4096, 0) != CUDA_SUCCESS) std::exit(2);
        *static_cast<volatile uint32_t*>(pinned) = 0;
        if (cuMemAlloc(&busy, 64 << 20) != CUDA_SUCCESS) std::exit(2);
        if (fill(busy, 1, 16 << 20) != CUDA_SUCCESS) std::exit(3);  // keeps the stream busy
        if (copy(0x1000, 0x2000, 64) != CUDA_SUCCESS) std::exit(3);
        // Queued behind the faulting kernel on the same stream: never runs. (Should the fault
        // come first after all, the launch itself returns the sticky error.)
        const CUresult queued = fill(reinterpret_cast<CUdeviceptr>(pinned), 42, 1);
        const CUresult synchronized = cuCtxSynchronize();
        std::fprintf(stderr, "synchronize=%d value=%u queued=%d\n", synchronized,
                     *static_cast<volatile uint32_t*>(pinned), queued);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "synchronize=700 value=0 queued=(0|700)");
}

// Host code touching a device pointer must still crash after simcuda's fault handler is
// installed (it is, at the first launch).
TEST_F(KernelFaultDeathTest, HostAccessToDevicePointerStillCrashesAfterALaunch) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAlloc(&buffer, 4096));
  EXPECT_DEATH(
      {
        if (fill(buffer, 1, 16) != CUDA_SUCCESS || cuCtxSynchronize() != CUDA_SUCCESS)
          std::exit(0);  // would not count as a death
        *reinterpret_cast<volatile int*>(buffer) = 1;
      },
      "");
  ASSERT_CU(cuMemFree(buffer));
}

}  // namespace
