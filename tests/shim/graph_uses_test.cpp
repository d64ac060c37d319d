// Reading a graph's nodes (Note [Reading a graph] in shim/core/graph_uses.h) against a fake
// driver: graphs are lists of fake nodes, each answering the node queries as the driver does, and
// kernels read their layouts through a fake cuFuncGetParamInfo.
#include "core/graph_uses.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

namespace vramspill::core {
namespace {

// A fake node: its type and the parameters its getter answers.
struct FakeNode {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUDA_KERNEL_NODE_PARAMS_v2 kernel{};
  CUDA_MEMCPY3D copy{};
  CUDA_MEMSET_NODE_PARAMS fill{};
  CUgraph child = nullptr;
  CUDA_BATCH_MEM_OP_NODE_PARAMS operations{};
  bool refuse = false;  // its getter fails
};

std::map<CUgraph, std::vector<CUgraphNode>> fake_graphs;
std::map<CUgraphNode, FakeNode> fake_nodes;

CUgraph graph_handle(uintptr_t n) { return reinterpret_cast<CUgraph>(0x100 + n); }

CUgraphNode add_node(CUgraph graph, FakeNode node) {
  const auto handle = reinterpret_cast<CUgraphNode>(0x10000 + fake_nodes.size());
  fake_nodes[handle] = node;
  fake_graphs[graph].push_back(handle);
  return handle;
}

CUresult fake_nodes_of(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  const auto found = fake_graphs.find(graph);
  if (found == fake_graphs.end()) return CUDA_ERROR_INVALID_VALUE;
  if (nodes == nullptr) {
    *count = found->second.size();
    return CUDA_SUCCESS;
  }
  *count = std::min(*count, found->second.size());
  std::copy_n(found->second.begin(), *count, nodes);
  return CUDA_SUCCESS;
}

CUresult fake_type(CUgraphNode node, CUgraphNodeType* type) {
  *type = fake_nodes.at(node).type;
  return CUDA_SUCCESS;
}

template <auto Field, CUgraphNodeType Type, typename Params>
CUresult fake_getter(CUgraphNode node, Params* params) {
  const FakeNode& fake = fake_nodes.at(node);
  if (fake.type != Type || fake.refuse) return CUDA_ERROR_INVALID_VALUE;
  *params = fake.*Field;
  return CUDA_SUCCESS;
}

// Every fake kernel takes (pointer, value, pointer): 8 + 4 (+4 padding) + 8 bytes.
CUresult fake_param_info(CUfunction function, size_t index, size_t* offset, size_t* size) {
  if (function == reinterpret_cast<CUfunction>(0xBAD)) return CUDA_ERROR_INVALID_HANDLE;
  constexpr size_t kOffsets[] = {0, 8, 16};
  constexpr size_t kSizes[] = {8, 4, 8};
  if (index >= 3) return CUDA_ERROR_INVALID_VALUE;
  *offset = kOffsets[index];
  *size = kSizes[index];
  return CUDA_SUCCESS;
}

GraphQueries all_queries() {
  return {.nodes = fake_nodes_of,
          .node_type = fake_type,
          .kernel = fake_getter<&FakeNode::kernel, CU_GRAPH_NODE_TYPE_KERNEL>,
          .memcpy = fake_getter<&FakeNode::copy, CU_GRAPH_NODE_TYPE_MEMCPY>,
          .memset = fake_getter<&FakeNode::fill, CU_GRAPH_NODE_TYPE_MEMSET>,
          .child = fake_getter<&FakeNode::child, CU_GRAPH_NODE_TYPE_GRAPH>,
          .memory_operations =
              fake_getter<&FakeNode::operations, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP>,
          .layouts = {.function = fake_param_info, .kernel = nullptr}};
}

// A kernel node whose arguments are (first, 7, second); the arguments live in `storage`, as a
// node's do in the driver.
struct KernelArguments {
  uint64_t first;
  uint32_t value = 7;
  uint64_t second;
  void* pointers[3] = {&first, &value, &second};
};

FakeNode kernel_node(KernelArguments& arguments, uintptr_t function = 0x600) {
  FakeNode node{.type = CU_GRAPH_NODE_TYPE_KERNEL};
  node.kernel.func = reinterpret_cast<CUfunction>(function);
  node.kernel.kernelParams = arguments.pointers;
  return node;
}

FakeNode memcpy_node(uint64_t destination, uint64_t source, size_t bytes) {
  FakeNode node{.type = CU_GRAPH_NODE_TYPE_MEMCPY};
  node.copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  node.copy.srcDevice = source;
  node.copy.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  node.copy.dstDevice = destination;
  node.copy.WidthInBytes = bytes;
  node.copy.Height = 1;
  node.copy.Depth = 1;
  return node;
}

FakeNode memset_node(uint64_t destination, size_t elements) {
  FakeNode node{.type = CU_GRAPH_NODE_TYPE_MEMSET};
  node.fill = {
      .dst = destination, .pitch = 0, .value = 0, .elementSize = 4, .width = elements, .height = 1};
  return node;
}

class GraphUsesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_graphs.clear();
    fake_nodes.clear();
  }
  GraphUses merged(CUgraph graph, const GraphQueries& queries) {
    GraphExecUses table;
    const auto exec = reinterpret_cast<CUgraphExec>(0xE0);
    table.instantiated(exec, read_graph(graph, queries, layouts_));
    return *table.find(exec);
  }
  ParamLayoutCache layouts_;
};

TEST_F(GraphUsesTest, KernelsCopiesAndMemsetsNameWhatTheyTouch) {
  const CUgraph graph = graph_handle(1);
  KernelArguments arguments{.first = 0xA000, .second = 0xB000};
  add_node(graph, kernel_node(arguments));
  add_node(graph, memcpy_node(0xC000, 0xD000, 256));
  add_node(graph, memset_node(0xE000, 16));
  const GraphUses uses = merged(graph, all_queries());
  ASSERT_EQ(uses.read, GraphRead::kRead);
  // The kernel's two pointers (the 4-byte value is no word of its own).
  EXPECT_EQ(uses.words, (std::vector<uint64_t>{0xA000, 0xB000}));
  ASSERT_EQ(uses.ranges.size(), 3u);        // by base
  EXPECT_EQ(uses.ranges[0].base, 0xC000u);  // the copy's destination
  EXPECT_EQ(uses.ranges[0].size, 256u);
  EXPECT_EQ(uses.ranges[1].base, 0xD000u);  // its source
  EXPECT_EQ(uses.ranges[2].base, 0xE000u);  // the memset, 16 elements of 4 bytes
  EXPECT_EQ(uses.ranges[2].size, 64u);
}

// What capturing cuStreamWriteValue32, cuStreamWaitValue64 and a flush makes: each write and
// wait names its 4 or 8 bytes; a memory operation newer than this code makes the node unread.
TEST_F(GraphUsesTest, MemoryOperationsNameTheirValues) {
  CUstreamBatchMemOpParams operations[3] = {};
  operations[0].writeValue = {CU_STREAM_MEM_OP_WRITE_VALUE_32, 0xA000, {1}, 0, 0};
  operations[1].waitValue = {CU_STREAM_MEM_OP_WAIT_VALUE_64, 0xB000, {2}, 0, 0};
  operations[2].flushRemoteWrites = {CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES, 0};
  const CUgraph graph = graph_handle(1);
  FakeNode node{.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP};
  node.operations = {.ctx = nullptr, .count = 3, .paramArray = operations, .flags = 0};
  add_node(graph, node);
  const GraphUses uses = merged(graph, all_queries());
  ASSERT_EQ(uses.read, GraphRead::kRead);
  ASSERT_EQ(uses.ranges.size(), 2u);
  EXPECT_EQ(uses.ranges[0].base, 0xA000u);
  EXPECT_EQ(uses.ranges[0].size, 4u);
  EXPECT_EQ(uses.ranges[1].base, 0xB000u);
  EXPECT_EQ(uses.ranges[1].size, 8u);
  const uint32_t newer = 99;  // an operation newer than this code (written as the driver would)
  std::memcpy(&operations[2], &newer, sizeof newer);
  EXPECT_EQ(read_memory_operations(operations, 3).read, GraphRead::kUnknownNodeType);
  GraphQueries without_getter = all_queries();
  without_getter.memory_operations = nullptr;
  EXPECT_EQ(merged(graph, without_getter).read, GraphRead::kNoQuery);
}

TEST_F(GraphUsesTest, NodesThatTouchNoBlockAddNothing) {
  const CUgraph graph = graph_handle(1);
  for (CUgraphNodeType type :
       {CU_GRAPH_NODE_TYPE_EMPTY, CU_GRAPH_NODE_TYPE_HOST, CU_GRAPH_NODE_TYPE_EVENT_RECORD,
        CU_GRAPH_NODE_TYPE_WAIT_EVENT, CU_GRAPH_NODE_TYPE_MEM_ALLOC, CU_GRAPH_NODE_TYPE_MEM_FREE})
    add_node(graph, {.type = type});
  const GraphUses uses = merged(graph, all_queries());
  EXPECT_EQ(uses.read, GraphRead::kRead);
  EXPECT_TRUE(uses.words.empty());
  EXPECT_TRUE(uses.ranges.empty());
}

TEST_F(GraphUsesTest, ChildGraphsAreReadIntoTheirParent) {
  const CUgraph parent = graph_handle(1);
  const CUgraph child = graph_handle(2);
  const CUgraph grandchild = graph_handle(3);
  KernelArguments arguments{.first = 0xA000, .second = 0xA000};
  add_node(grandchild, kernel_node(arguments));
  add_node(child, {.type = CU_GRAPH_NODE_TYPE_GRAPH, .child = grandchild});
  add_node(child, memset_node(0xE000, 1));
  add_node(parent, {.type = CU_GRAPH_NODE_TYPE_GRAPH, .child = child});
  const GraphUses uses = merged(parent, all_queries());
  ASSERT_EQ(uses.read, GraphRead::kRead);
  EXPECT_EQ(uses.words, (std::vector<uint64_t>{0xA000}));  // distinct
  ASSERT_EQ(uses.ranges.size(), 1u);
  EXPECT_EQ(uses.ranges[0].base, 0xE000u);
}

// Each way a graph cannot be read leaves it touching everything, with the reason.
TEST_F(GraphUsesTest, WhatCannotBeReadTouchesEverything) {
  KernelArguments arguments{.first = 0xA000, .second = 0xB000};
  const CUgraph unknown_type = graph_handle(1);
  add_node(unknown_type, memset_node(0xE000, 1));
  add_node(unknown_type, {.type = CU_GRAPH_NODE_TYPE_CONDITIONAL});
  EXPECT_EQ(merged(unknown_type, all_queries()).read, GraphRead::kUnknownNodeType);

  const CUgraph unreadable_kernel = graph_handle(2);
  add_node(unreadable_kernel, kernel_node(arguments, 0xBAD));
  EXPECT_EQ(merged(unreadable_kernel, all_queries()).read, GraphRead::kKernelUnread);

  const CUgraph refused = graph_handle(3);
  FakeNode node = memcpy_node(0xC000, 0xD000, 8);
  node.refuse = true;
  add_node(refused, node);
  EXPECT_EQ(merged(refused, all_queries()).read, GraphRead::kQueryFailed);

  const CUgraph plain = graph_handle(4);
  add_node(plain, kernel_node(arguments));
  GraphQueries without_kernel_getter = all_queries();
  without_kernel_getter.kernel = nullptr;
  EXPECT_EQ(merged(plain, without_kernel_getter).read, GraphRead::kNoQuery);
  GraphQueries without_node_list = all_queries();
  without_node_list.nodes = nullptr;
  const GraphUses none = merged(plain, without_node_list);
  EXPECT_EQ(none.read, GraphRead::kNoQuery);
  EXPECT_TRUE(none.words.empty());
  EXPECT_EQ(merged(graph_handle(99), all_queries()).read, GraphRead::kQueryFailed);  // no graph

  // A graph that contains itself (the driver forbids it) stops at the depth limit.
  const CUgraph loop = graph_handle(5);
  add_node(loop, {.type = CU_GRAPH_NODE_TYPE_GRAPH, .child = loop});
  EXPECT_EQ(merged(loop, all_queries()).read, GraphRead::kTooDeep);
}

// An exec's setters replace one node's reading; a node the instantiation did not read, a failed
// update or an exec the table never saw touch everything; a destroyed exec is forgotten.
TEST_F(GraphUsesTest, UpdatesReplaceOneNodeAndUnknownsTouchEverything) {
  const CUgraph graph = graph_handle(1);
  KernelArguments old_arguments{.first = 0xA000, .second = 0xA000};
  const CUgraphNode kernel = add_node(graph, kernel_node(old_arguments));
  const CUgraphNode fill = add_node(graph, memset_node(0xE000, 1));
  GraphExecUses table;
  const auto exec = reinterpret_cast<CUgraphExec>(0xE0);
  table.instantiated(exec, read_graph(graph, all_queries(), layouts_));

  KernelArguments new_arguments{.first = 0xF000, .second = 0xF100};
  CUDA_KERNEL_NODE_PARAMS_v2 params = kernel_node(new_arguments).kernel;
  table.update_node(exec, kernel, read_kernel(params, all_queries(), layouts_));
  EXPECT_EQ(table.find(exec)->words, (std::vector<uint64_t>{0xF000, 0xF100}));
  table.update_node(exec, fill, read_memset(memset_node(0x9000, 2).fill));
  ASSERT_EQ(table.find(exec)->ranges.size(), 1u);
  EXPECT_EQ(table.find(exec)->ranges[0].base, 0x9000u);
  EXPECT_EQ(table.find(exec)->read, GraphRead::kRead);

  table.update_node(exec, reinterpret_cast<CUgraphNode>(0x1234), {});
  EXPECT_EQ(table.find(exec)->read, GraphRead::kNodeUnknown);
  // cuGraphExecUpdate reads the whole new graph, which is readable again.
  table.update_all(exec, read_graph(graph, all_queries(), layouts_));
  EXPECT_EQ(table.find(exec)->read, GraphRead::kRead);
  table.touch_everything(exec, GraphRead::kUpdateFailed);
  EXPECT_EQ(table.find(exec)->read, GraphRead::kUpdateFailed);

  const auto stranger = reinterpret_cast<CUgraphExec>(0xE1);
  table.update_node(stranger, kernel, {});
  EXPECT_EQ(table.find(stranger), nullptr);  // not read: its launches touch everything
  table.forget(exec);
  EXPECT_EQ(table.find(exec), nullptr);
  EXPECT_EQ(table.size(), 0u);
}

// A graph launch is one submission: every block its words and ranges name, under one sequence
// number, counted as one (readable) launch.
TEST(UseTrackerGraphs, AGraphLaunchTouchesWhatItsNodesName) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  UseTracker tracker;
  ASSERT_EQ(tracker.track(0x10000000, 2 * kMiB, 1), TrackResult::kTracked);
  ASSERT_EQ(tracker.track(0x20000000, 2 * kMiB, 2), TrackResult::kTracked);
  ASSERT_EQ(tracker.track(0x30000000, 2 * kMiB, 3), TrackResult::kTracked);
  const std::vector<uint64_t> words = {0x10000010, 42};
  const std::vector<AddressRange> ranges = {{0x20000000 + kMiB, 16}};
  SubmissionUse use;
  tracker.record_graph(7, words, ranges, use);
  EXPECT_FALSE(use.everything);
  ASSERT_EQ(use.count, 2u);
  EXPECT_EQ(use.blocks[0], 1u);
  EXPECT_EQ(use.blocks[1], 2u);
  EXPECT_EQ(tracker.last_use(1)->sequence, use.sequence);
  EXPECT_EQ(tracker.last_use(2)->sequence, use.sequence);
  EXPECT_EQ(tracker.last_use(3)->sequence, 0u);
  const LaunchCounts counts = tracker.launch_counts();
  EXPECT_EQ(counts.launches, 1u);
  EXPECT_EQ(counts.unreadable, 0u);
}

}  // namespace
}  // namespace vramspill::core
