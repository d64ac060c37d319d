// Stream-ordered allocation during capture on simcuda: memory allocation and free nodes, the
// allocations' lifetime across launches, and their VRAM (Note [Graph memory] in
// tools/simcuda/src/core/graph_memory.h).
#include <vector>

#include "kernel_test_support.h"

namespace {

class GraphMemoryTest : public KernelFixture {
 protected:
  void SetUp() override {
    KernelFixture::SetUp();
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuMemAlloc(&result_, kBytes));
    // On the test's stream: a memset of device memory may return before it ran, and stream_ does
    // not wait for the legacy stream.
    ASSERT_CU(cuMemsetD8Async(result_, 0, kBytes, stream_));
    baseline_ = used();
  }
  void TearDown() override {
    cuCtxSynchronize();
    if (exec_ != nullptr) cuGraphExecDestroy(exec_);
    if (graph_ != nullptr) cuGraphDestroy(graph_);
    cuMemFree(result_);
    cuStreamDestroy(stream_);
    KernelFixture::TearDown();
  }

  cuuint64_t graph_memory(CUgraphMem_attribute which) {
    cuuint64_t value = 0;
    EXPECT_CU(cuDeviceGetGraphMemAttribute(device_, which, &value));
    return value;
  }
  // Captures: allocate kBytes, fill them with `value`, copy them to result_, and free them in
  // the graph when `free_in_graph`. Returns the allocation's address.
  CUdeviceptr capture_fill(uint32_t value, bool free_in_graph) {
    CUdeviceptr scratch = 0;
    EXPECT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT_CU(cuMemAllocAsync(&scratch, kBytes, stream_));
    EXPECT_CU(fill(scratch, value, kBytes / 4, stream_));
    EXPECT_CU(cuMemcpyDtoDAsync(result_, scratch, kBytes, stream_));
    if (free_in_graph) {
      EXPECT_CU(cuMemFreeAsync(scratch, stream_));
    }
    EXPECT_CU(cuStreamEndCapture(stream_, &graph_));
    return scratch;
  }

  static constexpr size_t kBytes = kMiB;
  CUstream stream_ = nullptr;
  CUdeviceptr result_ = 0;
  size_t baseline_ = 0;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

TEST_F(GraphMemoryTest, ACapturedAllocationIsLiveInEveryLaunch) {
  CUmemoryPool pool = nullptr;
  ASSERT_CU(cuDeviceGetMemPool(&pool, device_));
  const CUdeviceptr scratch = capture_fill(0xC0FFEEu, /*free_in_graph=*/true);
  ASSERT_NE(scratch, 0u);
  CUmemoryPool owner = nullptr;
  ASSERT_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, scratch));
  EXPECT_EQ(owner, pool);
  cuuint64_t pool_reserved = 1;
  ASSERT_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &pool_reserved));
  EXPECT_EQ(pool_reserved, 0u);  // the graph owns it, not the pool
  EXPECT_EQ(used(), baseline_);  // nothing charged before instantiation

  ASSERT_CU(cuGraphInstantiateWithFlags(&exec_, graph_, 0));
  EXPECT_EQ(used(), baseline_ + kBytes);
  EXPECT_EQ(graph_memory(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), kBytes);
  for (int launch = 0; launch < 2; ++launch) {
    ASSERT_CU(cuMemsetD8Async(result_, 0, kBytes, stream_));
    ASSERT_CU(cuGraphLaunch(exec_, stream_));
    ASSERT_CU(cuStreamSynchronize(stream_));
    EXPECT_EQ(download<uint32_t>(result_, kBytes / 4), std::vector<uint32_t>(kBytes / 4, 0xC0FFEEu))
        << launch;
  }
  EXPECT_EQ(cuMemFreeAsync(scratch, stream_), CUDA_ERROR_INVALID_VALUE);  // the graph frees it

  ASSERT_CU(cuGraphExecDestroy(exec_));
  exec_ = nullptr;
  ASSERT_CU(cuGraphDestroy(graph_));
  graph_ = nullptr;
  EXPECT_EQ(used(), baseline_);
  EXPECT_EQ(graph_memory(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(graph_memory(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), kBytes);
  cuuint64_t zero = 0;
  ASSERT_CU(cuDeviceSetGraphMemAttribute(device_, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero));
  EXPECT_EQ(graph_memory(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 0u);
}

TEST_F(GraphMemoryTest, AnAllocationTheGraphDoesNotFreeOutlivesTheLaunch) {
  const CUdeviceptr scratch = capture_fill(7u, /*free_in_graph=*/false);
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec_, graph_, 0));
  ASSERT_CU(cuGraphLaunch(exec_, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(download<uint32_t>(scratch, 4), std::vector<uint32_t>(4, 7u));  // still allocated
  EXPECT_EQ(cuGraphLaunch(exec_, stream_), CUDA_ERROR_INVALID_VALUE);       // not freed yet
  ASSERT_CU(cuMemFreeAsync(scratch, stream_));
  EXPECT_EQ(cuMemFreeAsync(scratch, stream_), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphLaunch(exec_, stream_));

  // The allocation the last launch left outlives the graph, until it is freed.
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuGraphExecDestroy(exec_));
  exec_ = nullptr;
  ASSERT_CU(cuGraphDestroy(graph_));
  graph_ = nullptr;
  EXPECT_EQ(download<uint32_t>(scratch, 4), std::vector<uint32_t>(4, 7u));
  EXPECT_EQ(used(), baseline_ + kBytes);
  ASSERT_CU(cuMemFree(scratch));
  EXPECT_EQ(used(), baseline_);
  EXPECT_EQ(graph_memory(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0u);
}

TEST_F(GraphMemoryTest, AutoFreeOnLaunchFreesWhatTheLastLaunchLeft) {
  capture_fill(9u, /*free_in_graph=*/false);
  ASSERT_CU(
      cuGraphInstantiateWithFlags(&exec_, graph_, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
  ASSERT_CU(cuGraphLaunch(exec_, stream_));
  ASSERT_CU(cuGraphLaunch(exec_, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(download<uint32_t>(result_, 4), std::vector<uint32_t>(4, 9u));
}

TEST_F(GraphMemoryTest, InstantiationFailsWhenTheGraphsMemoryDoesNotFit) {
  CUdeviceptr scratch = 0, hog = 0;
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemAllocAsync(&scratch, 600 * kMiB, stream_));
  ASSERT_CU(cuMemFreeAsync(scratch, stream_));
  ASSERT_CU(cuStreamEndCapture(stream_, &graph_));
  ASSERT_CU(cuMemAlloc(&hog, 600 * kMiB));
  EXPECT_EQ(cuGraphInstantiateWithFlags(&exec_, graph_, 0), CUDA_ERROR_OUT_OF_MEMORY);
  exec_ = nullptr;
  ASSERT_CU(cuMemFree(hog));
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec_, graph_, 0));
  EXPECT_EQ(used(), baseline_ + 600 * kMiB);
}

TEST_F(GraphMemoryTest, CaptureRefusesToFreeMemoryAllocatedOutsideIt) {
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAllocAsync(&block, kMiB, stream_));
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_EQ(cuMemFreeAsync(block, stream_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_CU(cuStreamEndCapture(stream_, &graph_));
  ASSERT_CU(cuMemFreeAsync(block, stream_));
}

}  // namespace
