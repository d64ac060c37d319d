// A captured graph's nodes as a program inspects them, and cuGraphExecKernelNodeSetParams (Note
// [Inspectable nodes] in tools/simcuda/src/core/graph_nodes.h).
#include <vector>

#include "kernel_test_support.h"

namespace {

class GraphNodesTest : public KernelFixture {
 protected:
  void SetUp() override {
    KernelFixture::SetUp();
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuMemAlloc(&first_, kBytes));
    ASSERT_CU(cuMemAlloc(&second_, kBytes));
  }
  void TearDown() override {
    cuCtxSynchronize();
    cuMemFree(first_);
    cuMemFree(second_);
    cuStreamDestroy(stream_);
    KernelFixture::TearDown();
  }

  std::vector<CUgraphNode> nodes(CUgraph graph) {
    size_t count = 0;
    EXPECT_CU(cuGraphGetNodes(graph, nullptr, &count));
    std::vector<CUgraphNode> found(count);
    EXPECT_CU(cuGraphGetNodes(graph, found.data(), &count));
    EXPECT_EQ(count, found.size());
    return found;
  }
  CUgraphNodeType type(CUgraphNode node) {
    CUgraphNodeType type{};
    EXPECT_CU(cuGraphNodeGetType(node, &type));
    return type;
  }

  static constexpr size_t kWords = 1024;
  static constexpr size_t kBytes = kWords * sizeof(uint32_t);
  CUstream stream_ = nullptr;
  CUdeviceptr first_ = 0;
  CUdeviceptr second_ = 0;
};

void CUDA_CB nothing(void*) {}

TEST_F(GraphNodesTest, EachCapturedCallIsANodeWithItsParameters) {
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr scratch = 0;
  ASSERT_CU(cuMemAllocAsync(&scratch, kBytes, stream_));
  ASSERT_CU(fill(first_, 7, kWords, stream_));
  ASSERT_CU(cuMemcpyDtoDAsync(second_, first_, kBytes, stream_));
  ASSERT_CU(cuMemsetD32Async(scratch, 9, kWords, stream_));
  ASSERT_CU(cuLaunchHostFunc(stream_, &nothing, nullptr));
  ASSERT_CU(cuMemFreeAsync(scratch, stream_));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));

  const std::vector<CUgraphNode> found = nodes(graph);
  ASSERT_EQ(found.size(), 6u);
  EXPECT_EQ(type(found[0]), CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  EXPECT_EQ(type(found[1]), CU_GRAPH_NODE_TYPE_KERNEL);
  EXPECT_EQ(type(found[2]), CU_GRAPH_NODE_TYPE_MEMCPY);
  EXPECT_EQ(type(found[3]), CU_GRAPH_NODE_TYPE_MEMSET);
  EXPECT_EQ(type(found[4]), CU_GRAPH_NODE_TYPE_HOST);
  EXPECT_EQ(type(found[5]), CU_GRAPH_NODE_TYPE_MEM_FREE);

  CUDA_KERNEL_NODE_PARAMS kernel{};
  ASSERT_CU(cuGraphKernelNodeGetParams(found[1], &kernel));
  EXPECT_EQ(kernel.func, fill_);
  EXPECT_EQ(kernel.gridDimX, 64u);
  EXPECT_EQ(kernel.blockDimX, 256u);
  ASSERT_NE(kernel.kernelParams, nullptr);
  EXPECT_EQ(*static_cast<CUdeviceptr*>(kernel.kernelParams[0]), first_);
  EXPECT_EQ(*static_cast<uint32_t*>(kernel.kernelParams[1]), 7u);
  EXPECT_EQ(*static_cast<uint64_t*>(kernel.kernelParams[2]), kWords);

  CUDA_MEMCPY3D copy{};
  ASSERT_CU(cuGraphMemcpyNodeGetParams(found[2], &copy));
  EXPECT_EQ(copy.srcMemoryType, CU_MEMORYTYPE_DEVICE);
  EXPECT_EQ(copy.srcDevice, first_);
  EXPECT_EQ(copy.dstDevice, second_);
  EXPECT_EQ(copy.WidthInBytes, kBytes);
  EXPECT_EQ(copy.Height, 1u);
  EXPECT_EQ(copy.Depth, 1u);

  CUDA_MEMSET_NODE_PARAMS memset{};
  ASSERT_CU(cuGraphMemsetNodeGetParams(found[3], &memset));
  EXPECT_EQ(memset.dst, scratch);
  EXPECT_EQ(memset.value, 9u);
  EXPECT_EQ(memset.elementSize, 4u);
  EXPECT_EQ(memset.width, kWords);
  EXPECT_EQ(memset.height, 1u);

  // A getter of another node type, a bad handle, and too small a list.
  EXPECT_EQ(cuGraphMemsetNodeGetParams(found[1], &memset), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphKernelNodeGetParams(reinterpret_cast<CUgraphNode>(&copy), &kernel),
            CUDA_ERROR_INVALID_VALUE);
  CUgraphNode two[3] = {};
  size_t count = 2;
  ASSERT_CU(cuGraphGetNodes(graph, two, &count));
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(two[1], found[1]);
  EXPECT_EQ(cuGraphGetNodes(graph, two, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuGraphDestroy(graph));
}

TEST_F(GraphNodesTest, AReplacedKernelNodeRunsItsNewParametersInThatExecAlone) {
  ASSERT_CU(fill(first_, 1, kWords, stream_));
  ASSERT_CU(fill(second_, 2, kWords, stream_));
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(fill(first_, 0xAAAA, kWords, stream_));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  const std::vector<CUgraphNode> found = nodes(graph);
  ASSERT_EQ(found.size(), 1u);

  CUDA_KERNEL_NODE_PARAMS params{};
  ASSERT_CU(cuGraphKernelNodeGetParams(found[0], &params));
  uint32_t value = 0xBBBB;
  uint64_t count = kWords;
  void* arguments[] = {&second_, &value, &count};
  params.kernelParams = arguments;
  ASSERT_CU(cuGraphExecKernelNodeSetParams(exec, found[0], &params));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(download<uint32_t>(first_, kWords), std::vector<uint32_t>(kWords, 1));
  EXPECT_EQ(download<uint32_t>(second_, kWords), std::vector<uint32_t>(kWords, 0xBBBB));

  // The graph keeps its own parameters: an exec instantiated again runs them.
  CUDA_KERNEL_NODE_PARAMS kept{};
  ASSERT_CU(cuGraphKernelNodeGetParams(found[0], &kept));
  EXPECT_EQ(*static_cast<CUdeviceptr*>(kept.kernelParams[0]), first_);
  CUgraphExec again = nullptr;
  ASSERT_CU(cuGraphInstantiate(&again, graph, 0));
  ASSERT_CU(cuGraphLaunch(again, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(download<uint32_t>(first_, kWords), std::vector<uint32_t>(kWords, 0xAAAA));

  // A node of another exec's graph, or parameters the kernel cannot take, are refused.
  EXPECT_EQ(cuGraphExecKernelNodeSetParams(exec, reinterpret_cast<CUgraphNode>(&params), &params),
            CUDA_ERROR_INVALID_VALUE);
  params.gridDimX = 0;
  EXPECT_EQ(cuGraphExecKernelNodeSetParams(exec, found[0], &params), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuGraphExecDestroy(again));
  EXPECT_CU(cuGraphExecDestroy(exec));
  EXPECT_CU(cuGraphDestroy(graph));
}

// cuGraphExecUpdate: a graph with the same nodes gives the exec its work; one that differs is
// refused with the reason and the exec is unchanged.
TEST_F(GraphNodesTest, AnExecUpdatedFromAnotherGraphRunsThatGraphsWork) {
  const auto capture_fill = [&](CUdeviceptr block, uint32_t value, int fills) {
    EXPECT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
    for (int i = 0; i < fills; ++i) EXPECT_CU(fill(block, value, kWords, stream_));
    CUgraph graph = nullptr;
    EXPECT_CU(cuStreamEndCapture(stream_, &graph));
    return graph;
  };
  const CUgraph original = capture_fill(first_, 1, 1);
  const CUgraph same_shape = capture_fill(second_, 2, 1);
  const CUgraph longer = capture_fill(first_, 3, 2);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, original, 0));
  ASSERT_CU(fill(first_, 0, kWords, stream_));
  ASSERT_CU(fill(second_, 0, kWords, stream_));

  CUgraphExecUpdateResultInfo info{};
  ASSERT_CU(cuGraphExecUpdate(exec, same_shape, &info));
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
  EXPECT_EQ(cuGraphExecUpdate(exec, longer, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(download<uint32_t>(first_, kWords), std::vector<uint32_t>(kWords, 0));
  EXPECT_EQ(download<uint32_t>(second_, kWords), std::vector<uint32_t>(kWords, 2));
  EXPECT_CU(cuGraphExecDestroy(exec));
  for (CUgraph graph : {original, same_shape, longer}) EXPECT_CU(cuGraphDestroy(graph));
}

}  // namespace
