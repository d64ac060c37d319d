// CUDA graphs in tiered mode (Note [Reading a graph] in shim/core/graph_uses.h): a graph captured
// as PyTorch captures one (kernels with pointer arguments, a copy, a memset, and stream-ordered
// scratch memory allocated and freed inside the capture) is instantiated and replayed while the
// blocks it touches are evicted and promoted between replays, and every byte is checked; so are
// execs updated to touch another block (cuGraphExecKernelNodeSetParams, cuGraphExecUpdate) and
// execs made by every instantiation ABI.
// Before each replay the graph's stream sleeps in a host function, so that the replay is still
// queued when another stream's work evicts the graph's blocks: a move that did not wait for it
// remaps under queued work, which simcuda counts (run with SIMCUDA_REMAP_VIOLATIONS=abort). With
// [tiered] window = "tracked" a move waits only for the streams recorded on its blocks, so a
// graph launch that named fewer blocks than it touches fails here; tests/shim/tiered/
// CMakeLists.txt also checks that no graph launch was counted as unreadable (taken as touching
// everything), so that the test passes because the graphs were read.
#include <cuda.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "tiered_fixture.h"

namespace {

using tiered_test::kBlock;
using tiered_test::kWords;
using tiered_test::TieredTest;

// With the graph's 4 blocks, twice the budget (16 MiB: tests/shim/tiered/CMakeLists.txt). The
// capture's scratch is graph memory, which the budget does not count (Note [A captured request
// is the graph's] in shim/hooks/pool_allocation.h): with the budget full of tiered blocks, the
// capture's cuMemAllocAsync must still go through, as nothing may move during a capture.
constexpr int kOthers = 4;

class TieredGraphTest : public TieredTest {
 protected:
  void SetUp() override {
    TieredTest::SetUp();
    for (CUdeviceptr& block : others_) ASSERT_CU(cuMemAlloc(&block, kBlock));
  }
  void TearDown() override {
    for (CUdeviceptr block : others_) {
      if (block != 0) {
        EXPECT_CU(cuMemFree(block));
      }
    }
    TieredTest::TearDown();
  }

  // What is queued on `stream` after this waits a while: long enough for another stream's work
  // to ask for moves meanwhile.
  static CUresult hold(CUstream stream) {
    return cuLaunchHostFunc(
        stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }, nullptr);
  }
  // Fills the other blocks on another stream: the budget then holds none of the graph's.
  void churn(uint32_t value) {
    for (CUdeviceptr block : others_) ASSERT_CU(fill(block, value, streams_[1]));
  }
  void expect_others(uint32_t value) {
    ASSERT_CU(cuStreamSynchronize(streams_[1]));
    for (CUdeviceptr block : others_) expect_block(block, value);
  }

  CUdeviceptr others_[kOthers] = {};
};

TEST_F(TieredGraphTest, ACapturedGraphKeepsEveryByteWhileItsBlocksMove) {
  CUdeviceptr input = 0, output = 0, copied = 0, filled = 0, stamped = 0;
  for (CUdeviceptr* block : {&input, &output, &copied, &filled, &stamped})
    ASSERT_CU(cuMemAlloc(block, kBlock));
  constexpr uint32_t kFilled = 0x5EED5EED;
  constexpr uint32_t kStamp = 0x57A4;
  ASSERT_CU(fill(stamped, 0, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));

  CUstream stream = streams_[0];
  ASSERT_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr scratch = 0;  // graph memory: no tiered block, at one address in every replay
  ASSERT_CU(cuMemAllocAsync(&scratch, kBlock, stream));
  ASSERT_CU(copy(scratch, input, stream));
  ASSERT_CU(copy(output, scratch, stream));
  ASSERT_CU(cuMemcpyDtoDAsync(copied, output, kBlock, stream));
  ASSERT_CU(cuMemsetD32Async(filled, kFilled, kWords, stream));
  ASSERT_CU(cuStreamWriteValue32(stream, stamped + 4, kStamp, 0));  // a memory operation node
  ASSERT_CU(cuMemFreeAsync(scratch, stream));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream, &graph));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));

  for (uint32_t round = 0; round < 12; ++round) {
    const uint32_t value = 1000 + round;
    ASSERT_CU(fill(input, value, stream));
    ASSERT_CU(hold(stream));
    ASSERT_CU(cuGraphLaunch(exec, stream));
    churn(round);
    ASSERT_CU(cuStreamSynchronize(stream));
    expect_block(output, value);
    expect_block(copied, value);
    expect_block(filled, kFilled);
    expect_block(input, value);
    uint32_t stamp[3] = {};
    ASSERT_CU(cuMemcpyDtoH(stamp, stamped, sizeof stamp));
    EXPECT_EQ(stamp[0], 0u);
    EXPECT_EQ(stamp[1], kStamp);
    EXPECT_EQ(stamp[2], 0u);
    expect_others(round);
  }
  EXPECT_CU(cuGraphExecDestroy(exec));
  EXPECT_CU(cuGraphDestroy(graph));
  for (CUdeviceptr block : {input, output, copied, filled, stamped}) EXPECT_CU(cuMemFree(block));
}

// An exec captured as filling `first_` with 0xAAAA and updated to fill `second_` with 0xBBBB:
// the tests below update it two ways.
class UpdatedGraphTest : public TieredGraphTest {
 protected:
  void SetUp() override {
    TieredGraphTest::SetUp();
    ASSERT_CU(cuMemAlloc(&first_, kBlock));
    ASSERT_CU(cuMemAlloc(&second_, kBlock));
    ASSERT_CU(fill(first_, 1, streams_[0]));
    ASSERT_CU(fill(second_, 2, streams_[0]));
    // Done before any check reads them: a copy on the legacy stream does not wait for a
    // non-blocking stream (the remap mover's windows hid this by draining the device; nothing
    // drains it with the prefetch mover).
    ASSERT_CU(cuStreamSynchronize(streams_[0]));
    graph_ = capture_fill(first_, 0xAAAA);
    ASSERT_CU(cuGraphInstantiate(&exec_, graph_, 0));
  }
  void TearDown() override {
    if (exec_ != nullptr) {
      EXPECT_CU(cuGraphExecDestroy(exec_));
    }
    for (CUgraph graph : {graph_, other_graph_}) {
      if (graph != nullptr) {
        EXPECT_CU(cuGraphDestroy(graph));
      }
    }
    for (CUdeviceptr block : {first_, second_}) {
      if (block != 0) {
        EXPECT_CU(cuMemFree(block));
      }
    }
    TieredGraphTest::TearDown();
  }

  CUgraph capture_fill(CUdeviceptr block, uint32_t value) {
    EXPECT_CU(cuStreamBeginCapture(streams_[0], CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT_CU(fill(block, value, streams_[0]));
    CUgraph graph = nullptr;
    EXPECT_CU(cuStreamEndCapture(streams_[0], &graph));
    return graph;
  }

  // Replays the updated exec, which touches `second_` alone, while the other blocks' churn moves
  // it. Each round starts with `second_` read last, so that it is on the device (and the least
  // recently used block but one) when the replay is queued, and the churn evicts it while the
  // replay waits behind the hold: with the old reading, it would move under the replay in the
  // tracked window.
  void replay_while_second_moves() {
    churn(100);
    expect_others(100);
    expect_block(first_, 1);
    expect_block(second_, 2);
    for (uint32_t round = 0; round < 6; ++round) {
      ASSERT_CU(hold(streams_[0]));
      ASSERT_CU(cuGraphLaunch(exec_, streams_[0]));
      churn(round);
      ASSERT_CU(cuStreamSynchronize(streams_[0]));
      expect_others(round);
      expect_block(first_, 1);
      expect_block(second_, 0xBBBB);
    }
  }

  CUdeviceptr first_ = 0;
  CUdeviceptr second_ = 0;
  CUgraph graph_ = nullptr;
  CUgraph other_graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

// cuGraphExecKernelNodeSetParams points the graph's kernel at another block.
TEST_F(UpdatedGraphTest, AnUpdatedKernelNodeTouchesItsNewBlock) {
  size_t count = 0;
  ASSERT_CU(cuGraphGetNodes(graph_, nullptr, &count));
  ASSERT_EQ(count, 1u);
  CUgraphNode node = nullptr;
  ASSERT_CU(cuGraphGetNodes(graph_, &node, &count));
  CUgraphNodeType type{};
  ASSERT_CU(cuGraphNodeGetType(node, &type));
  ASSERT_EQ(type, CU_GRAPH_NODE_TYPE_KERNEL);
  CUDA_KERNEL_NODE_PARAMS params{};
  ASSERT_CU(cuGraphKernelNodeGetParams(node, &params));
  uint32_t value = 0xBBBB;
  uint64_t words = kWords;
  void* arguments[] = {&second_, &value, &words};
  params.kernelParams = arguments;
  ASSERT_CU(cuGraphExecKernelNodeSetParams(exec_, node, &params));
  replay_while_second_moves();
}

// cuGraphExecUpdate gives the exec the nodes of a graph that fills the other block.
TEST_F(UpdatedGraphTest, AnExecUpdatedFromAnotherGraphTouchesItsBlocks) {
  other_graph_ = capture_fill(second_, 0xBBBB);
  CUgraphExecUpdateResultInfo info{};
  ASSERT_CU(cuGraphExecUpdate(exec_, other_graph_, &info));
  replay_while_second_moves();
}

// Every instantiation ABI is read: the runtime reaches cuGraphInstantiateWithFlags and
// cuGraphInstantiateWithParams(_ptsz), older programs the 5-argument cuGraphInstantiate(_v2),
// all through cuGetProcAddress. Each exec is replayed while its block moves (an unread one would
// count as unreadable in the exit summary, which tests/shim/tiered/CMakeLists.txt checks).
TEST_F(TieredGraphTest, EveryInstantiationFormIsRead) {
  using WithLog = CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);
  using WithParams = CUresult (*)(CUgraphExec*, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS*);
  const auto lookup = [](const char* name, int version, cuuint64_t flags) {
    void* function = nullptr;
    CUdriverProcAddressQueryResult status{};
    EXPECT_CU(cuGetProcAddress(name, &function, version, flags, &status));
    EXPECT_NE(function, nullptr) << name << " at " << version;
    return function;
  };
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAlloc(&block, kBlock));
  CUstream stream = streams_[0];
  ASSERT_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(fill(block, 0xF00D, stream));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream, &graph));

  std::vector<CUgraphExec> execs(5);
  ASSERT_CU(cuGraphInstantiateWithFlags(&execs[0], graph, 0));
  CUDA_GRAPH_INSTANTIATE_PARAMS params{};
  ASSERT_CU(cuGraphInstantiateWithParams(&execs[1], graph, &params));
  const auto per_thread = reinterpret_cast<WithParams>(
      lookup("cuGraphInstantiateWithParams", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  ASSERT_NE(per_thread, nullptr);
  ASSERT_CU(per_thread(&execs[2], graph, &params));
  for (int version : {10000, 11000}) {
    const auto with_log = reinterpret_cast<WithLog>(
        lookup("cuGraphInstantiate", version, CU_GET_PROC_ADDRESS_DEFAULT));
    ASSERT_NE(with_log, nullptr);
    ASSERT_CU(with_log(&execs[version == 10000 ? 3 : 4], graph, nullptr, nullptr, 0));
  }
  for (uint32_t round = 0; round < 3; ++round) {
    for (CUgraphExec exec : execs) {
      ASSERT_CU(cuGraphLaunch(exec, stream));
      churn(round);
    }
    ASSERT_CU(cuStreamSynchronize(stream));
    expect_block(block, 0xF00D);
    expect_others(round);
  }
  for (CUgraphExec exec : execs) EXPECT_CU(cuGraphExecDestroy(exec));
  EXPECT_CU(cuGraphDestroy(graph));
  EXPECT_CU(cuMemFree(block));
}

}  // namespace
