// The remap protocol (Note [Remap protocol] in tools/simcuda/src/core/remap_check.h): unmapping,
// mapping or changing the access of a VMM range while queued or running work can touch it is a
// violation, and so are work that touches a granule in the middle of a remap and a cuMemFree of a
// stream-ordered block that queued work can touch. simcuda counts
// them (read here through its simcuda_remap_violations export) and prints a line for each.
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>

#include "kernel_test_support.h"
#include "stream_test_support.h"

namespace {

constexpr size_t kGranule = 2 * kMiB;

// simcuda's counter; nullptr on a real driver, which has no such export.
uint64_t (*const counter)() = reinterpret_cast<uint64_t (*)()>(dlsym(RTLD_DEFAULT,
                                                                     "simcuda_remap_violations"));

class RemapTest : public KernelFixture {
 protected:
  void SetUp() override {
    if (counter == nullptr) GTEST_SKIP() << "not simcuda: no simcuda_remap_violations";
    KernelFixture::SetUp();
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    ASSERT_CU(cuMemAddressReserve(&reserved_, 2 * kGranule, 0, 0, 0));
    ASSERT_CU(cuMemCreate(&handle_, 2 * kGranule, &prop_, 0));
    ASSERT_CU(map());
    before_ = counter();
  }
  void TearDown() override {
    if (counter == nullptr) return;
    cuStreamSynchronize(stream_);
    cuStreamDestroy(stream_);
    cuMemUnmap(reserved_, 2 * kGranule);
    cuMemRelease(handle_);
    cuMemAddressFree(reserved_, 2 * kGranule);
    KernelFixture::TearDown();
  }

  // Maps the handle over the whole reservation, readable and writable by device 0.
  CUresult map() {
    const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                 CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (CUresult result = cuMemMap(reserved_, 2 * kGranule, 0, handle_, 0); result != CUDA_SUCCESS)
      return result;
    return cuMemSetAccess(reserved_, 2 * kGranule, &access, 1);
  }
  // A remap done right or wrong: unmap, then map the same handle back with access.
  CUresult remap() {
    if (CUresult result = cuMemUnmap(reserved_, 2 * kGranule); result != CUDA_SUCCESS)
      return result;
    return map();
  }
  uint64_t violations() const { return counter() - before_; }

  CUstream stream_ = nullptr;
  CUmemAllocationProp prop_{};
  CUdeviceptr reserved_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
  uint64_t before_ = 0;
};

using RemapDeathTest = RemapTest;

TEST_F(RemapTest, UnmappingUnderAQueuedMemsetIsAViolation) {
  Gate gate;
  ASSERT_CU(gate.block(stream_));
  ASSERT_CU(cuMemsetD32Async(reserved_ + kGranule, 7, 16, stream_));
  ASSERT_CU(cuMemUnmap(reserved_, 2 * kGranule));
  EXPECT_EQ(violations(), 1u);
  // Mapping back under the same queued memset breaks the rule again; granting access does not.
  // The memset then runs on the mapping and does not fault.
  ASSERT_CU(map());
  EXPECT_EQ(violations(), 2u);
  gate.open();
  EXPECT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(download<uint32_t>(reserved_ + kGranule, 1)[0], 7u);
  EXPECT_EQ(violations(), 2u);
}

TEST_F(RemapTest, RemappingAfterSynchronisingIsNoViolation) {
  Gate gate;
  ASSERT_CU(gate.block(stream_));
  ASSERT_CU(cuMemsetD32Async(reserved_, 7, 16, stream_));
  gate.open();
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(remap());
  EXPECT_EQ(violations(), 0u);
}

// cuMemFree of a stream-ordered block makes no implicit synchronisation (cuda.h): the caller must
// have made sure that its accesses are over, since its pool may hand the memory out at once.
TEST_F(RemapTest, FreeingAPoolBlockUnderQueuedWorkIsAViolation) {
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAllocAsync(&block, 4096, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  Gate gate;
  ASSERT_CU(gate.block(stream_));
  ASSERT_CU(cuMemsetD32Async(block, 7, 16, stream_));
  ASSERT_CU(cuMemFree(block));
  EXPECT_EQ(violations(), 1u);
  gate.open();
  EXPECT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuMemAllocAsync(&block, 4096, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuMemFree(block));  // nothing queued touches it: no violation
  EXPECT_EQ(violations(), 1u);
}

TEST_F(RemapTest, APendingCopyOfAnotherRangeIsNoViolation) {
  CUdeviceptr source = 0, destination = 0;
  ASSERT_CU(cuMemAlloc(&source, 4096));
  ASSERT_CU(cuMemAlloc(&destination, 4096));
  Gate gate;
  ASSERT_CU(gate.block(stream_));
  ASSERT_CU(cuMemcpyDtoDAsync(destination, source, 4096, stream_));
  ASSERT_CU(fill(destination, 1, 16, stream_));
  ASSERT_CU(remap());
  EXPECT_EQ(violations(), 0u);
  gate.open();
  EXPECT_CU(cuStreamSynchronize(stream_));
  EXPECT_CU(cuMemFree(source));
  EXPECT_CU(cuMemFree(destination));
}

TEST_F(RemapTest, APendingCopyIntoTheRangeIsAViolation) {
  CUdeviceptr source = 0;
  ASSERT_CU(cuMemAlloc(&source, 4096));
  Gate gate;
  ASSERT_CU(gate.block(stream_));
  ASSERT_CU(cuMemcpyDtoDAsync(reserved_ + 4096, source, 4096, stream_));
  ASSERT_CU(remap());
  EXPECT_EQ(violations(), 2u);  // the unmap and the map
  gate.open();
  EXPECT_CU(cuStreamSynchronize(stream_));
  EXPECT_CU(cuMemFree(source));
}

// The kernel's argument points into the second granule, not at the mapping's base.
TEST_F(RemapTest, AQueuedKernelWithAnInteriorPointerIsAViolation) {
  Gate gate;
  ASSERT_CU(gate.block(stream_));
  ASSERT_CU(fill(reserved_ + kGranule + 4096, 5, 16, stream_));
  ASSERT_CU(cuMemUnmap(reserved_, 2 * kGranule));
  EXPECT_EQ(violations(), 1u);
  ASSERT_CU(map());
  gate.open();
  EXPECT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(download<uint32_t>(reserved_ + kGranule + 4096, 1)[0], 5u);
}

// A graph launch carries the footprints of the work its capture recorded.
TEST_F(RemapTest, AQueuedGraphLaunchThatTouchesTheRangeIsAViolation) {
  CUstream capturing = nullptr;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuStreamCreate(&capturing, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemsetD32Async(reserved_, 9, 16, capturing));
  ASSERT_CU(cuStreamEndCapture(capturing, &graph));
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  Gate gate;
  ASSERT_CU(gate.block(stream_));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuMemUnmap(reserved_, 2 * kGranule));
  EXPECT_EQ(violations(), 1u);
  ASSERT_CU(map());
  gate.open();
  EXPECT_CU(cuStreamSynchronize(stream_));
  EXPECT_CU(cuGraphExecDestroy(exec));
  EXPECT_CU(cuGraphDestroy(graph));
  EXPECT_CU(cuStreamDestroy(capturing));
}

// Taking access away under queued work makes it fault: a violation. Granting it is not.
TEST_F(RemapTest, RevokingAccessUnderQueuedWorkIsAViolation) {
  Gate gate;
  ASSERT_CU(gate.block(stream_));
  ASSERT_CU(cuMemsetD32Async(reserved_, 3, 16, stream_));
  const CUmemAccessDesc read_write{{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                   CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  // Access as it was: nothing taken away.
  ASSERT_CU(cuMemSetAccess(reserved_, 2 * kGranule, &read_write, 1));
  EXPECT_EQ(violations(), 0u);
  const CUmemAccessDesc read_only{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READ};
  ASSERT_CU(cuMemSetAccess(reserved_ + kGranule, kGranule, &read_only, 1));  // not the memset's
  EXPECT_EQ(violations(), 0u);
  ASSERT_CU(cuMemSetAccess(reserved_, kGranule, &read_only, 1));
  EXPECT_EQ(violations(), 1u);
  ASSERT_CU(cuMemSetAccess(reserved_, kGranule, &read_write, 1));  // back, before the memset runs
  gate.open();
  EXPECT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(violations(), 1u);
}

// Touching a granule between its unmap and its next map: a copy or memset is refused at the
// call, and counted.
TEST_F(RemapTest, AMemsetIntoARangeBeingRemappedIsRefusedAndCounted) {
  ASSERT_CU(cuMemUnmap(reserved_, 2 * kGranule));
  EXPECT_EQ(cuMemsetD32(reserved_ + kGranule, 1, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(violations(), 1u);
  ASSERT_CU(map());
  EXPECT_EQ(violations(), 1u);
}

// A reserved range that was never mapped is not being remapped: refused, not counted.
TEST_F(RemapTest, AMemsetIntoANeverMappedRangeIsNoViolation) {
  CUdeviceptr never_mapped = 0;
  ASSERT_CU(cuMemAddressReserve(&never_mapped, kGranule, 0, 0, 0));
  EXPECT_EQ(cuMemsetD32(never_mapped, 1, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(violations(), 0u);
  EXPECT_CU(cuMemAddressFree(never_mapped, kGranule));
}

// The line names the call, the range and the pending work. A kernel that then touches the
// unmapped range faults (which poisons the context, hence the child) and counts again.
TEST_F(RemapDeathTest, EachViolationPrintsALine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Gate gate;
        if (gate.block(stream_) != CUDA_SUCCESS ||
            fill(reserved_ + kGranule + 4096, 5, 16, stream_) != CUDA_SUCCESS ||
            cuMemUnmap(reserved_, 2 * kGranule) != CUDA_SUCCESS)
          std::exit(2);
        gate.open();
        const bool faulted = cuStreamSynchronize(stream_) == CUDA_ERROR_ILLEGAL_ADDRESS;
        std::exit(faulted && violations() == 2 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "remap violation: cuMemUnmap of \\[0x[0-9a-f]+, 0x[0-9a-f]+\\) while work that can touch it "
      "is pending: vs_fill_u32 \\(stream [0-9]+, work [0-9]+, queued\\)(.|\n)*"
      "remap violation: vs_fill_u32 touched 0x[0-9a-f]+, in a granule unmapped after it was "
      "mapped \\(a remap in progress\\)");
}

// The child of AbortEndsTheProcessAtTheFirstViolation: a copy into a range being remapped.
[[noreturn]] void violate_with_abort_set() {
  setenv("SIMCUDA_REMAP_VIOLATIONS", "abort", 1);
  init_child_with_attributes("", 2);
  CUdeviceptr reserved = 0;
  CUmemGenericAllocationHandle handle = 0;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                               CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (cuMemAddressReserve(&reserved, kGranule, 0, 0, 0) != CUDA_SUCCESS ||
      cuMemCreate(&handle, kGranule, &prop, 0) != CUDA_SUCCESS ||
      cuMemMap(reserved, kGranule, 0, handle, 0) != CUDA_SUCCESS ||
      cuMemSetAccess(reserved, kGranule, &access, 1) != CUDA_SUCCESS ||
      cuMemUnmap(reserved, kGranule) != CUDA_SUCCESS)
    std::exit(3);
  cuMemsetD32(reserved, 1, 16);  // refused at the call: a violation, so it aborts
  std::exit(0);
}

// SIMCUDA_REMAP_VIOLATIONS=abort makes the first violation end the process.
TEST(RemapAbortDeathTest, AbortEndsTheProcessAtTheFirstViolation) {
  if (counter == nullptr) GTEST_SKIP() << "not simcuda: no simcuda_remap_violations";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(violate_with_abort_set(), "aborting \\(SIMCUDA_REMAP_VIOLATIONS=abort\\)");
}

TEST(RemapAbortDeathTest, AnUnknownActionFailsCuInit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("SIMCUDA_REMAP_VIOLATIONS", "ignore", 1);
        std::exit(cuInit(0) == CUDA_ERROR_INVALID_VALUE ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "SIMCUDA_REMAP_VIOLATIONS='ignore': expected report or abort");
}

}  // namespace
