#include "core/graph_uses.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "core/copy_ranges.h"

namespace vramspill::core {
namespace {

void merge_into(NodeUses& into, const NodeUses& from) {
  if (into.read != GraphRead::kRead) return;
  if (from.read != GraphRead::kRead) {
    into = unread_node(from.read);
    return;
  }
  into.words.insert(into.words.end(), from.words.begin(), from.words.end());
  into.ranges.insert(into.ranges.end(), from.ranges.begin(), from.ranges.end());
}

NodeUses read_node(CUgraphNode node, const GraphQueries& queries, ParamLayoutCache& layouts,
                   int depth);

// Every node of `graph`, each read; `each` gets (node, uses).
template <typename Each>
GraphRead read_nodes(CUgraph graph, const GraphQueries& queries, ParamLayoutCache& layouts,
                     int depth, Each each) {
  if (depth > kMaxGraphDepth) return GraphRead::kTooDeep;
  if (queries.nodes == nullptr) return GraphRead::kNoQuery;
  size_t count = 0;
  if (queries.nodes(graph, nullptr, &count) != CUDA_SUCCESS) return GraphRead::kQueryFailed;
  std::vector<CUgraphNode> nodes(count);
  if (count != 0 && queries.nodes(graph, nodes.data(), &count) != CUDA_SUCCESS)
    return GraphRead::kQueryFailed;
  nodes.resize(std::min(count, nodes.size()));
  for (CUgraphNode node : nodes) each(node, read_node(node, queries, layouts, depth));
  return GraphRead::kRead;
}

NodeUses read_child_at(CUgraph graph, const GraphQueries& queries, ParamLayoutCache& layouts,
                       int depth) {
  NodeUses merged;
  const GraphRead read =
      read_nodes(graph, queries, layouts, depth,
                 [&](CUgraphNode, const NodeUses& uses) { merge_into(merged, uses); });
  return read == GraphRead::kRead ? merged : unread_node(read);
}

NodeUses read_node(CUgraphNode node, const GraphQueries& queries, ParamLayoutCache& layouts,
                   int depth) {
  if (queries.node_type == nullptr) return unread_node(GraphRead::kNoQuery);
  CUgraphNodeType type{};
  if (queries.node_type(node, &type) != CUDA_SUCCESS) return unread_node(GraphRead::kQueryFailed);
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      if (queries.kernel == nullptr) return unread_node(GraphRead::kNoQuery);
      CUDA_KERNEL_NODE_PARAMS_v2 params{};
      if (queries.kernel(node, &params) != CUDA_SUCCESS)
        return unread_node(GraphRead::kQueryFailed);
      return read_kernel(params, queries, layouts);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      if (queries.memcpy == nullptr) return unread_node(GraphRead::kNoQuery);
      CUDA_MEMCPY3D params{};
      if (queries.memcpy(node, &params) != CUDA_SUCCESS)
        return unread_node(GraphRead::kQueryFailed);
      return read_memcpy(params);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      if (queries.memset == nullptr) return unread_node(GraphRead::kNoQuery);
      CUDA_MEMSET_NODE_PARAMS params{};
      if (queries.memset(node, &params) != CUDA_SUCCESS)
        return unread_node(GraphRead::kQueryFailed);
      return read_memset(params);
    }
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
      if (queries.memory_operations == nullptr) return unread_node(GraphRead::kNoQuery);
      CUDA_BATCH_MEM_OP_NODE_PARAMS params{};
      if (queries.memory_operations(node, &params) != CUDA_SUCCESS)
        return unread_node(GraphRead::kQueryFailed);
      return read_memory_operations(params.paramArray, params.count);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      if (queries.child == nullptr) return unread_node(GraphRead::kNoQuery);
      CUgraph child = nullptr;
      if (queries.child(node, &child) != CUDA_SUCCESS) return unread_node(GraphRead::kQueryFailed);
      return read_child_at(child, queries, layouts, depth + 1);
    }
    default:
      return uses_of_type(type);
  }
}

}  // namespace

NodeUses unread_node(GraphRead why) {
  NodeUses uses;
  uses.read = why;
  return uses;
}

NodeUses uses_of_type(CUgraphNodeType type) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_HOST:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return {};
    default:
      return unread_node(GraphRead::kUnknownNodeType);
  }
}

const char* describe(GraphRead read) noexcept {
  switch (read) {
    case GraphRead::kRead:
      return "read";
    case GraphRead::kNoQuery:
      return "the driver lacks a graph node query";
    case GraphRead::kQueryFailed:
      return "the driver refused a graph node query";
    case GraphRead::kUnknownNodeType:
      return "a node type that may touch memory unseen";
    case GraphRead::kKernelUnread:
      return "a kernel node whose arguments could not be read";
    case GraphRead::kTooDeep:
      return "child graphs nested too deep";
    case GraphRead::kNodeUnknown:
      return "an update named a node the instantiation did not read";
    case GraphRead::kUpdateFailed:
      return "an update of the executable graph failed";
  }
  return "unknown";
}

GraphReading read_graph(CUgraph graph, const GraphQueries& queries, ParamLayoutCache& layouts) {
  GraphReading reading;
  const GraphRead read = read_nodes(
      graph, queries, layouts, 0,
      [&](CUgraphNode node, NodeUses uses) { reading.insert_or_assign(node, std::move(uses)); });
  // The graph's node list itself could not be had: one unnamed node stands for everything.
  if (read != GraphRead::kRead) reading.insert_or_assign(nullptr, unread_node(read));
  return reading;
}

NodeUses read_kernel(const CUDA_KERNEL_NODE_PARAMS_v2& params, const GraphQueries& queries,
                     ParamLayoutCache& layouts) {
  // A node names its kernel by `func`, or by `kern` when `func` is null; either reads as a
  // launch's handle does (Note [Kernels launched as functions]).
  const CUfunction function =
      params.func != nullptr ? params.func : reinterpret_cast<CUfunction>(params.kern);
  // On the heap: 8 KiB, and nodes are read recursively (a child graph's), off the launch path.
  const auto words = std::make_unique<LaunchWords>();
  if (argument_words(function, params.kernelParams, params.extra, layouts, queries.layouts,
                     *words) != ArgumentsRead::kRead)
    return unread_node(GraphRead::kKernelUnread);
  NodeUses uses;
  for (const WordRun& run : words->view()) {
    const auto* bytes = static_cast<const unsigned char*>(run.bytes);
    for (size_t index = 0; index < run.words; ++index) {
      uint64_t word;  // the parameters need not be aligned in the node's memory
      std::memcpy(&word, bytes + index * sizeof word, sizeof word);
      uses.words.push_back(word);
    }
  }
  return uses;
}

NodeUses read_memcpy(const CUDA_MEMCPY3D& params) {
  NodeUses uses;
  for (const AddressRange& range : copy_3d_ranges(params))
    if (range.size != 0) uses.ranges.push_back(range);
  return uses;
}

NodeUses read_memset(const CUDA_MEMSET_NODE_PARAMS& params) {
  NodeUses uses;
  if (const AddressRange range = memset_range(params); range.size != 0)
    uses.ranges.push_back(range);
  return uses;
}

NodeUses read_memory_operations(const CUstreamBatchMemOpParams* operations, unsigned count) {
  if (count != 0 && operations == nullptr) return unread_node(GraphRead::kQueryFailed);
  NodeUses uses;
  for (unsigned index = 0; index < count; ++index) {
    const CUstreamBatchMemOpParams& operation = operations[index];
    // The tag read as the integer it is: one newer than cuda.h's enum is no value of the enum.
    static_assert(sizeof(CUstreamBatchMemOpType) == sizeof(uint32_t));
    uint32_t tag = 0;
    std::memcpy(&tag, &operation, sizeof tag);
    switch (tag) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
        // A write's fields begin as a wait's do (their structs' common initial sequence).
        const bool wide =
            tag == CU_STREAM_MEM_OP_WAIT_VALUE_64 || tag == CU_STREAM_MEM_OP_WRITE_VALUE_64;
        uses.ranges.push_back({operation.waitValue.address, wide ? 8u : 4u});
        break;
      }
      case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      case CU_STREAM_MEM_OP_BARRIER:
        break;  // they name no memory
      default:
        return unread_node(GraphRead::kUnknownNodeType);
    }
  }
  return uses;
}

NodeUses read_child(CUgraph graph, const GraphQueries& queries, ParamLayoutCache& layouts) {
  return read_child_at(graph, queries, layouts, 1);
}

std::shared_ptr<const GraphUses> GraphExecUses::merge(const GraphReading& reading) {
  auto merged = std::make_shared<GraphUses>();
  for (const auto& [node, uses] : reading) {
    if (uses.read != GraphRead::kRead) {
      merged->read = uses.read;
      merged->words.clear();
      merged->ranges.clear();
      return merged;
    }
    merged->words.insert(merged->words.end(), uses.words.begin(), uses.words.end());
    merged->ranges.insert(merged->ranges.end(), uses.ranges.begin(), uses.ranges.end());
  }
  // A launch looks every word up: the same pointer passed to many kernels is looked up once. The
  // nodes come in no particular order (a hash map), so the result is sorted to be the same for
  // the same graph.
  std::ranges::sort(merged->words);
  merged->words.erase(std::ranges::unique(merged->words).begin(), merged->words.end());
  std::ranges::sort(merged->ranges, {}, [](const AddressRange& range) {
    return std::pair{range.base, range.size};
  });
  return merged;
}

void GraphExecUses::instantiated(CUgraphExec exec, GraphReading reading) {
  std::shared_ptr<const GraphUses> merged = merge(reading);
  const std::lock_guard lock(mutex_);
  execs_.insert_or_assign(exec, Entry{std::move(reading), std::move(merged)});
}

void GraphExecUses::update_node(CUgraphExec exec, CUgraphNode node, NodeUses uses) {
  const std::lock_guard lock(mutex_);
  const auto found = execs_.find(exec);
  if (found == execs_.end()) return;
  GraphReading& reading = found->second.reading;
  // The null key is no node of the graph: it stands for "everything" (read_graph).
  if (node == nullptr || !reading.contains(node)) {
    reading.insert_or_assign(nullptr, unread_node(GraphRead::kNodeUnknown));
  } else {
    reading[node] = std::move(uses);
  }
  found->second.merged = merge(reading);
}

void GraphExecUses::update_all(CUgraphExec exec, GraphReading reading) {
  std::shared_ptr<const GraphUses> merged = merge(reading);
  const std::lock_guard lock(mutex_);
  const auto found = execs_.find(exec);
  if (found == execs_.end()) return;
  found->second = Entry{std::move(reading), std::move(merged)};
}

void GraphExecUses::touch_everything(CUgraphExec exec, GraphRead why) {
  const std::lock_guard lock(mutex_);
  const auto found = execs_.find(exec);
  if (found == execs_.end()) return;
  found->second.reading.insert_or_assign(nullptr, unread_node(why));
  found->second.merged = merge(found->second.reading);
}

void GraphExecUses::forget(CUgraphExec exec) noexcept {
  const std::lock_guard lock(mutex_);
  execs_.erase(exec);
}

std::shared_ptr<const GraphUses> GraphExecUses::find(CUgraphExec exec) const noexcept {
  const std::lock_guard lock(mutex_);
  const auto found = execs_.find(exec);
  return found == execs_.end() ? nullptr : found->second.merged;
}

size_t GraphExecUses::size() const noexcept {
  const std::lock_guard lock(mutex_);
  return execs_.size();
}

}  // namespace vramspill::core
