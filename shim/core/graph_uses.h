// What an executable graph may touch, read from its graph's nodes when it is instantiated, so
// that a cuGraphLaunch names its blocks like the launches, copies and memsets it holds instead of
// touching everything (shim/README.md, "Use tracking"). Driver-free: the node queries come
// through GraphQueries, with the driver's signatures, so unit tests read fake graphs.
//
// Note [Reading a graph]
// At instantiation the graph's nodes are walked (cuGraphGetNodes, cuGraphNodeGetType):
// - kernel nodes (cuGraphKernelNodeGetParams_v2): the aligned 8-byte words of their arguments,
//   read with the launch reader (Note [Reading a launch's arguments] in core/launch_arguments.h)
//   and copied, since the words must outlive the call;
// - memcpy and memset nodes: the linear ranges they name (core/copy_ranges.h);
// - batch memory operation nodes (cuGraphBatchMemOpNodeGetParams; what capturing
//   cuStreamWriteValue, cuStreamWaitValue or cuStreamBatchMemOp makes): the 4 or 8 bytes each
//   write or wait names;
// - child graph nodes: their graph's nodes, recursively, as one node of the parent;
// - empty, host, event record and wait nodes, and memory allocation and free nodes, touch no
//   tracked block: graph memory belongs to the graph, never to a tiered block, and a kernel that
//   uses it passes its address, which names no block;
// - anything else (a conditional node, external semaphores, a memory operation newer than this
//   code, a node type newer than this code), a query the driver lacks or refuses, or a kernel whose
//   layout cannot be read makes the whole graph "may touch everything", as before, with the reason
//   for the log.
// The reading is kept per node of the instantiated graph, so that cuGraphExecKernelNodeSetParams
// and the memcpy, memset, batch memory operation and child graph setters replace one node's reading
// with the new parameters'; cuGraphExecUpdate reads the new graph whole. A node the table does not
// know (the exec was instantiated while nothing was tracked), or a setter it cannot read, makes the
// exec touch everything. Addresses are kept as read: a block freed after instantiation is no longer
// tracked, so its words name nothing, or name a new block allocated at the same address, which only
// makes that block look used.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/launch_arguments.h"
#include "core/use_tracker.h"

namespace vramspill::core {

// The driver's graph queries; null where the driver lacks one.
struct GraphQueries {
  CUresult (*nodes)(CUgraph graph, CUgraphNode* nodes, size_t* count) = nullptr;
  CUresult (*node_type)(CUgraphNode node, CUgraphNodeType* type) = nullptr;
  CUresult (*kernel)(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v2* params) = nullptr;
  CUresult (*memcpy)(CUgraphNode node, CUDA_MEMCPY3D* params) = nullptr;
  CUresult (*memset)(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* params) = nullptr;
  CUresult (*child)(CUgraphNode node, CUgraph* graph) = nullptr;
  CUresult (*memory_operations)(CUgraphNode node, CUDA_BATCH_MEM_OP_NODE_PARAMS* params) = nullptr;
  LayoutQueries layouts;
};

// Why a graph, or one of its nodes, may touch everything (for the log).
enum class GraphRead : uint8_t {
  kRead,
  kNoQuery,          // the driver lacks a query this node needs
  kQueryFailed,      // the driver refused a query
  kUnknownNodeType,  // a node type that may touch memory this code cannot see
  kKernelUnread,     // a kernel whose arguments cannot be read (core::ArgumentsRead)
  kTooDeep,          // child graphs nested deeper than kMaxDepth
  kNodeUnknown,      // an exec setter named a node the instantiation did not read
  kUpdateFailed,     // the driver refused an update, which may have changed part of the exec
};
const char* describe(GraphRead read) noexcept;

// What one node (a child graph node: its whole graph) touches.
struct NodeUses {
  GraphRead read = GraphRead::kRead;  // anything else: it may touch everything
  std::vector<uint64_t> words;        // kernel argument words
  std::vector<AddressRange> ranges;   // copy and memset ranges
};

// A node that may touch everything, and why.
NodeUses unread_node(GraphRead why);
// What a node of a type with no parameters to read touches: nothing for empty, host, event and
// graph memory allocation and free nodes (Note [Reading a graph]); everything for a type not
// known, which may touch memory unseen.
NodeUses uses_of_type(CUgraphNodeType type);

// Every node of a graph, by handle: what an exec instantiated from it touches.
using GraphReading = std::unordered_map<CUgraphNode, NodeUses>;

// Nested child graphs beyond this are not walked (the driver allows deep nesting; programs
// rarely go past two).
inline constexpr int kMaxGraphDepth = 8;

// Note [Reading a graph]. `layouts` caches the kernels' parameter layouts, as for launches.
GraphReading read_graph(CUgraph graph, const GraphQueries& queries, ParamLayoutCache& layouts);
// One node's new parameters, for the exec setters.
NodeUses read_kernel(const CUDA_KERNEL_NODE_PARAMS_v2& params, const GraphQueries& queries,
                     ParamLayoutCache& layouts);
NodeUses read_memcpy(const CUDA_MEMCPY3D& params);
NodeUses read_memset(const CUDA_MEMSET_NODE_PARAMS& params);
// `count` operations of a batch memory operation node (Note [Reading a graph]).
NodeUses read_memory_operations(const CUstreamBatchMemOpParams* operations, unsigned count);
// A child graph as one node: every node of `graph` merged.
NodeUses read_child(CUgraph graph, const GraphQueries& queries, ParamLayoutCache& layouts);

// What a launch of an exec records: every node's uses merged, or "everything" and why.
struct GraphUses {
  GraphRead read = GraphRead::kRead;
  std::vector<uint64_t> words;       // sorted, distinct
  std::vector<AddressRange> ranges;  // sorted by base
};

// The readings of the live executable graphs. A graph launch stands for many kernel launches and
// the driver's own launch costs microseconds, so a lookup takes a mutex and copies a shared
// pointer; the reading itself is immutable once published.
class GraphExecUses {
 public:
  // cuGraphInstantiate*: `exec` touches what `reading` says (an exec handle reused after a
  // destroy the shim missed is simply replaced).
  void instantiated(CUgraphExec exec, GraphReading reading);
  // cuGraphExecUpdate and the setters. An exec not in the table stays out of it (its launches
  // touch everything); a node the reading lacks makes the exec touch everything.
  void update_node(CUgraphExec exec, CUgraphNode node, NodeUses uses);
  void update_all(CUgraphExec exec, GraphReading reading);
  // A setter this cannot read (cuGraphExecNodeSetParams of another type, a failed query).
  void touch_everything(CUgraphExec exec, GraphRead why);
  void forget(CUgraphExec exec) noexcept;
  // Null: not read (launches touch everything).
  std::shared_ptr<const GraphUses> find(CUgraphExec exec) const noexcept;
  size_t size() const noexcept;

 private:
  struct Entry {
    GraphReading reading;
    std::shared_ptr<const GraphUses> merged;
  };
  static std::shared_ptr<const GraphUses> merge(const GraphReading& reading);

  mutable std::mutex mutex_;
  std::unordered_map<CUgraphExec, Entry> execs_;
};

}  // namespace vramspill::core
