#include "core/capture.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "core/context.h"
#include "core/handle_table.h"

namespace simcuda {
namespace {

struct Sequence {
  uint64_t id = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;
  Stream* origin = nullptr;
  std::vector<Stream*> members;  // the origin and the streams forked into the capture
  bool invalidated = false;
  std::shared_ptr<Graph> graph;
  bool into_programs_graph = false;  // Note [Capturing into a graph]
};

// One lock for all capture state: captures are rare, and the fast path of capture_work() does
// not take it while none is active.
std::mutex capture_mutex;
std::vector<std::unique_ptr<Sequence>> sequences;  // active or invalidated, not yet ended
std::atomic<size_t> sequence_count{0};
uint64_t next_sequence_id = 1;
HandleTable<Graph> graphs;
HandleTable<GraphExec> graph_execs;

thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

// The helpers below expect capture_mutex held.

Sequence* sequence_of(const Stream& stream) {
  for (const auto& sequence : sequences)
    if (std::ranges::find(sequence->members, &stream) != sequence->members.end())
      return sequence.get();
  return nullptr;
}

Sequence* sequence_by_id(uint64_t id) {
  for (const auto& sequence : sequences)
    if (sequence->id == id) return sequence.get();
  return nullptr;
}

// The captures the legacy stream `stream` would implicitly depend on: those with a blocking
// member in its context.
std::vector<Sequence*> implicit_dependencies(const Stream& stream) {
  std::vector<Sequence*> found;
  if (stream.kind() != Stream::Kind::kLegacyDefault) return found;
  for (const auto& sequence : sequences) {
    const bool depends = std::ranges::any_of(sequence->members, [&](const Stream* member) {
      return member->context() == stream.context() && member->blocking();
    });
    if (depends) found.push_back(sequence.get());
  }
  return found;
}

// The implicit-dependency rule shared by every use of the legacy stream.
CUresult check_legacy(const Stream& stream) {
  const std::vector<Sequence*> dependencies = implicit_dependencies(stream);
  for (Sequence* sequence : dependencies) sequence->invalidated = true;
  return dependencies.empty() ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
}

void end_sequence(Sequence* sequence, bool keep_graph) {
  sequence->graph->capturing = false;
  if (!keep_graph && !sequence->into_programs_graph) graphs.erase(sequence->graph.get());
  std::erase_if(sequences, [&](const auto& entry) { return entry.get() == sequence; });
  sequence_count.store(sequences.size(), std::memory_order_release);
}

bool valid_mode(CUstreamCaptureMode mode) {
  return mode == CU_STREAM_CAPTURE_MODE_GLOBAL || mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
         mode == CU_STREAM_CAPTURE_MODE_RELAXED;
}

}  // namespace

bool stream_is_capturing(Stream& stream) {
  if (sequence_count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(capture_mutex);
  return sequence_of(stream) != nullptr;
}

CUresult begin_capture(Stream& stream, CUstreamCaptureMode mode, std::shared_ptr<Graph> into) {
  if (!valid_mode(mode)) return CUDA_ERROR_INVALID_VALUE;
  if (stream.kind() == Stream::Kind::kLegacyDefault) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (into != nullptr && into->context != stream.context()) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(capture_mutex);
  if (sequence_of(stream) != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (into != nullptr && into->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  auto sequence = std::make_unique<Sequence>();
  sequence->id = next_sequence_id++;
  sequence->mode = mode;
  sequence->thread = std::this_thread::get_id();
  sequence->origin = &stream;
  sequence->members.push_back(&stream);
  sequence->into_programs_graph = into != nullptr;
  if (into != nullptr) {
    sequence->graph = std::move(into);
  } else {
    sequence->graph = std::make_shared<Graph>();
    sequence->graph->context = stream.context();
    graphs.emplace(sequence->graph.get(), sequence->graph);
  }
  sequence->graph->capturing = true;
  sequences.push_back(std::move(sequence));
  sequence_count.store(sequences.size(), std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult end_capture(Stream& stream, Graph** graph) {
  std::lock_guard lock(capture_mutex);
  Sequence* sequence = sequence_of(stream);
  if (sequence == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (sequence->origin != &stream) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  if (sequence->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
      sequence->thread != std::this_thread::get_id())
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  const bool invalidated = sequence->invalidated;
  Graph* captured = sequence->graph.get();
  end_sequence(sequence, /*keep_graph=*/!invalidated);
  *graph = invalidated ? nullptr : captured;
  return invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

CUresult capture_info(Stream& stream, CaptureInfo& info) {
  std::lock_guard lock(capture_mutex);
  if (!implicit_dependencies(stream).empty()) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  info = {};
  if (const Sequence* sequence = sequence_of(stream)) {
    info.status = sequence->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                        : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    info.id = sequence->id;
    info.graph = sequence->graph.get();
  }
  return CUDA_SUCCESS;
}

CUresult exchange_thread_capture_mode(CUstreamCaptureMode* mode) {
  if (mode == nullptr || !valid_mode(*mode)) return CUDA_ERROR_INVALID_VALUE;
  std::swap(thread_mode, *mode);
  return CUDA_SUCCESS;
}

CUresult capture_work(Stream& stream, const StreamWork& work, uint64_t* capture_id,
                      const Footprint& footprint, std::shared_ptr<GraphNode> node) {
  *capture_id = 0;
  if (sequence_count.load(std::memory_order_acquire) == 0) return CUDA_SUCCESS;
  std::lock_guard lock(capture_mutex);
  if (Sequence* sequence = sequence_of(stream)) {
    if (sequence->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (work) {
      if (node == nullptr) node = std::make_shared<GraphNode>();  // a host node
      node->work = sequence->graph->nodes.size();
      node->touches = footprint.ranges;
      sequence->graph->nodes.push_back(work);
      sequence->graph->inspectable.push_back(std::move(node));
    }
    std::vector<AddressRange>& touches = sequence->graph->touches;
    touches.insert(touches.end(), footprint.ranges.begin(), footprint.ranges.end());
    *capture_id = sequence->id;
    return CUDA_SUCCESS;
  }
  return check_legacy(stream);
}

CUresult check_sync(Stream& stream) {
  if (sequence_count.load(std::memory_order_acquire) == 0) return CUDA_SUCCESS;
  std::lock_guard lock(capture_mutex);
  if (Sequence* sequence = sequence_of(stream)) {
    sequence->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return check_legacy(stream);
}

CUresult check_unsafe_call() {
  if (sequence_count.load(std::memory_order_acquire) == 0) return CUDA_SUCCESS;
  if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  std::lock_guard lock(capture_mutex);
  const std::thread::id self = std::this_thread::get_id();
  bool refused = false;
  for (const auto& sequence : sequences) {
    const bool own = sequence->thread == self && sequence->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool other_global = thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                              sequence->thread != self &&
                              sequence->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (own || other_global) {
      sequence->invalidated = true;
      refused = true;
    }
  }
  return refused ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult check_outside_dependency(Stream& stream) {
  if (sequence_count.load(std::memory_order_acquire) == 0) return CUDA_SUCCESS;
  std::lock_guard lock(capture_mutex);
  if (Sequence* sequence = sequence_of(stream)) {
    if (sequence->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    sequence->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  return check_legacy(stream);
}

CUresult join_capture(Stream& stream, uint64_t capture_id) {
  std::lock_guard lock(capture_mutex);
  Sequence* target = sequence_by_id(capture_id);
  // The event's capture has ended: what it recorded exists only in a graph.
  if (target == nullptr) return CUDA_ERROR_CAPTURED_EVENT;
  if (target->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  Sequence* current = sequence_of(stream);
  if (current == target) return CUDA_SUCCESS;  // a join: the order is already the recording's
  if (current != nullptr) {
    current->invalidated = target->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_MERGE;
  }
  if (stream.kind() == Stream::Kind::kLegacyDefault) {
    target->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  target->members.push_back(&stream);
  return CUDA_SUCCESS;
}

CUresult capture_memory_alloc(Stream& stream, std::shared_ptr<GraphAllocation> allocation) {
  std::lock_guard lock(capture_mutex);
  Sequence* sequence = sequence_of(stream);
  if (sequence == nullptr) return CUDA_ERROR_ILLEGAL_STATE;  // the capture ended meanwhile
  if (sequence->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  // The node holds the memory too, so that it outlives every launch still queued.
  auto node = std::make_shared<GraphNode>();
  node->type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  node->work = sequence->graph->nodes.size();
  node->address = allocation->memory.base;
  node->bytes = allocation->memory.size;
  sequence->graph->inspectable.push_back(std::move(node));
  sequence->graph->nodes.push_back([allocation] { return 0.0; });
  sequence->graph->memory.push_back({.allocation = std::move(allocation)});
  return CUDA_SUCCESS;
}

CUresult capture_memory_free(Stream& stream, uint64_t address) {
  std::lock_guard lock(capture_mutex);
  Sequence* sequence = sequence_of(stream);
  if (sequence == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (sequence->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  auto& memory = sequence->graph->memory;
  const auto node = std::ranges::find_if(
      memory, [&](const GraphMemoryNode& each) { return each.allocation->memory.base == address; });
  if (node == memory.end()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (node->freed_in_graph) return CUDA_ERROR_INVALID_VALUE;
  node->freed_in_graph = true;
  auto free_node = std::make_shared<GraphNode>();
  free_node->type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  free_node->work = sequence->graph->nodes.size();
  free_node->address = address;
  sequence->graph->inspectable.push_back(std::move(free_node));
  sequence->graph->nodes.push_back([] { return 0.0; });
  return CUDA_SUCCESS;
}

void abandon_capture(Stream& stream) {
  if (sequence_count.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(capture_mutex);
  Sequence* sequence = sequence_of(stream);
  if (sequence == nullptr) return;
  if (sequence->origin == &stream) {
    end_sequence(sequence, /*keep_graph=*/false);
  } else {
    std::erase(sequence->members, &stream);
    sequence->invalidated = true;
  }
}

void forget_context_captures(Context* context) {
  std::lock_guard lock(capture_mutex);
  std::vector<Sequence*> doomed;
  for (const auto& sequence : sequences)
    if (sequence->origin->context() == context) doomed.push_back(sequence.get());
  for (Sequence* sequence : doomed) end_sequence(sequence, /*keep_graph=*/false);
  // Forks from other contexts would otherwise point at streams about to be destroyed.
  for (const auto& sequence : sequences) {
    const size_t before = sequence->members.size();
    std::erase_if(sequence->members,
                  [&](const Stream* member) { return member->context() == context; });
    if (sequence->members.size() != before) sequence->invalidated = true;
  }
  std::erase_if(graphs, [&](const auto& entry) { return entry.second->context == context; });
  std::erase_if(graph_execs, [&](const auto& entry) { return entry.second->context == context; });
}

std::shared_ptr<Graph> new_graph(Context* context) {
  auto graph = std::make_shared<Graph>();
  graph->context = context;
  std::lock_guard lock(capture_mutex);
  graphs.emplace(graph.get(), graph);
  return graph;
}

std::shared_ptr<Graph> graph_from_handle(CUgraph handle) {
  std::lock_guard lock(capture_mutex);
  return find_handle(graphs, handle);
}

CUresult destroy_graph(CUgraph handle) {
  std::lock_guard lock(capture_mutex);
  const std::shared_ptr<Graph> graph = find_handle(graphs, handle);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The capture still appends to it; cuStreamEndCapture hands it over, or discards it.
  if (graph->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  graphs.erase(graph.get());
  return CUDA_SUCCESS;
}

CUresult new_graph_exec(const Graph& graph, bool auto_free_on_launch,
                        std::shared_ptr<GraphExec>* out) {
  auto exec = std::make_shared<GraphExec>();
  std::vector<std::shared_ptr<GraphAllocation>> allocations;
  {
    std::lock_guard lock(capture_mutex);
    if (graph.capturing) return CUDA_ERROR_ILLEGAL_STATE;
    exec->context = graph.context;
    exec->nodes = std::make_shared<const std::vector<StreamWork>>(graph.nodes);
    exec->touches = graph.touches;
    exec->instantiated_from.assign(graph.inspectable.begin(), graph.inspectable.end());
    exec->work_touches.resize(graph.nodes.size());
    for (const std::shared_ptr<GraphNode>& node : graph.inspectable)
      if (node->work < graph.nodes.size()) exec->work_touches[node->work] = node->touches;
    exec->auto_free_on_launch = auto_free_on_launch;
    for (const GraphMemoryNode& node : graph.memory) {
      allocations.push_back(node.allocation);
      if (!node.freed_in_graph) exec->left_allocated.push_back(node.allocation);
    }
  }
  if (CUresult result = charge_graph_allocations(allocations); result != CUDA_SUCCESS)
    return result;
  std::lock_guard lock(capture_mutex);
  graph_execs.emplace(exec.get(), exec);
  *out = std::move(exec);
  return CUDA_SUCCESS;
}

std::shared_ptr<GraphExec> graph_exec_from_handle(CUgraphExec handle) {
  std::lock_guard lock(capture_mutex);
  return find_handle(graph_execs, handle);
}

std::shared_ptr<GraphNode> graph_node_from_handle(CUgraphNode handle) {
  std::lock_guard lock(capture_mutex);
  // Graphs are few and inspected rarely: a scan keeps node handles free of a table of their own.
  for (const auto& [key, graph] : graphs)
    for (const std::shared_ptr<GraphNode>& node : graph->inspectable)
      if (to_handle(node.get()) == handle) return node;
  return nullptr;
}

bool graph_has_nodes(const Graph& graph, std::span<const CUgraphNode> handles) {
  std::lock_guard lock(capture_mutex);  // a capture into the graph may be adding nodes
  return std::ranges::all_of(handles, [&](CUgraphNode handle) {
    return std::ranges::any_of(graph.inspectable,
                               [&](const auto& node) { return to_handle(node.get()) == handle; });
  });
}

CUresult replace_exec_kernel(GraphExec& exec, const GraphNode* node, KernelWork replacement) {
  std::lock_guard lock(capture_mutex);
  const bool known = std::ranges::any_of(exec.instantiated_from, [&](const auto& each) {
    return each.get() == node;
  });
  if (!known || node->type != CU_GRAPH_NODE_TYPE_KERNEL || node->work >= exec.nodes->size())
    return CUDA_ERROR_INVALID_VALUE;
  // Copied, not changed in place: launches already queued share the old list.
  auto nodes = std::make_shared<std::vector<StreamWork>>(*exec.nodes);
  (*nodes)[node->work] = std::move(replacement.work);
  exec.nodes = std::move(nodes);
  // The node's old footprint goes: a remap of memory the exec no longer touches is no violation.
  for (const AddressRange& old : exec.work_touches[node->work]) {
    const auto found = std::ranges::find_if(exec.touches, [&](const AddressRange& range) {
      return range.address == old.address && range.size == old.size;
    });
    if (found != exec.touches.end()) exec.touches.erase(found);
  }
  exec.work_touches[node->work] = replacement.footprint.ranges;
  exec.touches.insert(exec.touches.end(), replacement.footprint.ranges.begin(),
                      replacement.footprint.ranges.end());
  return CUDA_SUCCESS;
}

CUresult update_exec(GraphExec& exec, const Graph& graph, CUgraphExecUpdateResult* result,
                     CUgraphNode* error_node) {
  std::lock_guard lock(capture_mutex);
  *error_node = nullptr;
  const auto fail = [&](CUgraphExecUpdateResult why, GraphNode* node) {
    *result = why;
    *error_node = to_handle(node);
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  };
  if (graph.capturing || graph.context != exec.context)
    return fail(CU_GRAPH_EXEC_UPDATE_ERROR, nullptr);
  if (graph.inspectable.size() != exec.instantiated_from.size() ||
      graph.nodes.size() != exec.nodes->size())
    return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, nullptr);
  for (size_t i = 0; i < graph.inspectable.size(); ++i) {
    GraphNode* node = graph.inspectable[i].get();
    if (node->type != exec.instantiated_from[i]->type)
      return fail(CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, node);
    if (node->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || node->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
      return fail(CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, node);
  }
  exec.nodes = std::make_shared<const std::vector<StreamWork>>(graph.nodes);
  exec.touches = graph.touches;
  for (const std::shared_ptr<GraphNode>& node : graph.inspectable)
    if (node->work < graph.nodes.size()) exec.work_touches[node->work] = node->touches;
  *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult destroy_graph_exec(CUgraphExec handle) {
  std::lock_guard lock(capture_mutex);
  return graph_execs.erase(reinterpret_cast<GraphExec*>(handle)) == 1 ? CUDA_SUCCESS
                                                                      : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace simcuda
