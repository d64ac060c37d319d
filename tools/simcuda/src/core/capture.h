// Stream capture and the graphs it produces.
//
// Note [Stream capture]
// Between cuStreamBeginCapture and cuStreamEndCapture, work submitted to a capturing stream is
// recorded, not run; cuGraphLaunch replays the recorded work, in the order it was recorded, as one
// piece of work on the launch stream. A stream that waits on an event recorded inside a capture
// joins that capture (a fork), and its work is recorded into the same graph; since a dependency is
// always submitted before the wait on it, the recording order is a valid order to replay in.
// The rules simcuda enforces, after the driver's documentation:
// - Capture cannot begin on the legacy stream (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), nor on a
//   stream that already captures (CUDA_ERROR_ILLEGAL_STATE).
// - Synchronising with or querying a capturing stream, or a synchronous copy or memset on a
//   default stream that captures, fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
//   invalidates the capture.
// - While a blocking stream of a context captures, the legacy stream would implicitly depend on
//   it: work on, synchronisation with, or a query of the legacy stream fails with
//   CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates that capture (cuStreamIsCapturing on the
//   legacy stream returns the error without invalidating, as documented).
// - Potentially unsafe calls (synchronous copies and memsets here; check_unsafe_call() is for
//   other modules' synchronous calls too, for queries and synchronisations of any stream or
//   event, for pinning and unpinning host memory (vLLM saw cudaHostRegister refused so,
//   vllm-project/vllm#46933), and for cuMemAlloc, cuMemAllocManaged and cuMemFree: PyTorch's NCCL watchdog thread
//   broke global-mode captures with cudaEventQuery of events recorded before them, which a
//   thread-local mode on the watchdog mended, pytorch/pytorch#104487 and #148594)
//   follow the thread's capture-interaction mode
//   (cuThreadExchangeStreamCaptureMode): in GLOBAL mode they are refused while this thread has a
//   non-RELAXED capture or any other thread a GLOBAL one; in THREAD_LOCAL mode only this thread's
//   non-RELAXED captures count; RELAXED never refuses. A refusal returns
//   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures that caused it.
// - Work submitted to an invalidated capture fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
//   cuStreamEndCapture of it returns that error and a NULL graph.
// - Waiting on an event recorded outside the capture from a capturing stream would cross the
//   capture boundary: CUDA_ERROR_STREAM_CAPTURE_ISOLATION (and invalidation). Waiting on an
//   event of one capture from a stream in another: CUDA_ERROR_STREAM_CAPTURE_MERGE.
// - cuMemAllocAsync and cuMemFreeAsync record memory nodes (Note [Graph memory] in
//   graph_memory.h).
// Simplifications: forked streams are not checked for being joined back before the capture ends
// (the driver's CUDA_ERROR_STREAM_CAPTURE_UNJOINED), nodes are inspectable only as far as Note
// [Inspectable nodes] in graph_nodes.h says, and
// external event nodes (CU_EVENT_RECORD_EXTERNAL, CU_EVENT_WAIT_EXTERNAL) are not supported.
//
// Note [Capturing into a graph]
// cuStreamBeginCaptureToGraph (CUDA 12.3) captures into a graph the program made, after the
// nodes it names as dependencies; cuStreamEndCapture hands that graph back, and an invalidated
// capture leaves it the program's, with a NULL graph returned. Graphs here replay their nodes in
// the order they were added, so appending the captured nodes after the graph's own satisfies
// every dependency, of whatever edge type (an edge only ever orders a node after another; a
// programmatic one also lets them overlap, which a replay one after the other need not).
// Dependencies must be nodes of that graph; the graph must be of the stream's context and not
// already being captured into. simcuda's own rules, not checked against the driver: that one
// capture into a graph at a time, that cuGraphDestroy of a graph being captured into is refused
// (CUDA_ERROR_ILLEGAL_STATE), and that an invalidated capture leaves in the graph the nodes it
// had added.
#pragma once

#include <cuda.h>

#include <memory>
#include <span>
#include <vector>

#include "core/graph_memory.h"
#include "core/graph_nodes.h"
#include "core/stream.h"

namespace simcuda {

struct Context;

// A memory allocation node's memory (Note [Graph memory] in graph_memory.h).
struct GraphMemoryNode {
  std::shared_ptr<GraphAllocation> allocation;
  bool freed_in_graph = false;  // a free node follows
};

struct Graph {
  Context* context = nullptr;
  std::vector<StreamWork> nodes;      // in replay order
  std::vector<AddressRange> touches;  // every node's footprint (Note [Remap protocol])
  std::vector<GraphMemoryNode> memory;
  std::vector<std::shared_ptr<GraphNode>> inspectable;  // every node, in capture order
  bool capturing = false;  // still being filled by a capture
};

struct GraphExec {
  Context* context = nullptr;
  std::shared_ptr<const std::vector<StreamWork>> nodes;  // shared with launches still queued
  std::vector<AddressRange> touches;                     // each launch's footprint
  // The graph's nodes when it was instantiated: their handles name this exec's nodes in
  // cuGraphExecKernelNodeSetParams.
  std::vector<std::shared_ptr<const GraphNode>> instantiated_from;
  // Each node's footprint as this exec runs it, by work index: what `touches` holds for it, taken
  // out again when cuGraphExecKernelNodeSetParams replaces the node.
  std::vector<std::vector<AddressRange>> work_touches;
  std::vector<std::shared_ptr<GraphAllocation>> left_allocated;  // by each launch
  bool auto_free_on_launch = false;
};

// True while `stream` belongs to a capture sequence (active or invalidated). For the shim,
// which must not queue its own work into a program's graph.
bool stream_is_capturing(Stream& stream);

// `into`: cuStreamBeginCaptureToGraph's graph, which the capture appends to and which
// cuStreamEndCapture hands back (Note [Capturing into a graph]); null: a new graph.
CUresult begin_capture(Stream& stream, CUstreamCaptureMode mode,
                       std::shared_ptr<Graph> into = nullptr);
// On success `*graph` is the captured graph, a new handle owned by the program unless the capture
// was into one of its graphs.
CUresult end_capture(Stream& stream, Graph** graph);

struct CaptureInfo {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  uint64_t id = 0;         // unique per capture sequence
  Graph* graph = nullptr;  // the graph being captured
};
CUresult capture_info(Stream& stream, CaptureInfo& info);

// cuThreadExchangeStreamCaptureMode.
CUresult exchange_thread_capture_mode(CUstreamCaptureMode* mode);

// The rules of Note [Stream capture] for submissions. Each returns CUDA_SUCCESS when the caller
// may go on.
// Records `work` and its footprint when `stream` captures (`*capture_id` is then the capture's
// id, else 0). An empty `work` records no node: an event record only marks the event with the
// capture.
// `node` says what the work is (Note [Inspectable nodes] in graph_nodes.h); null: a host node.
CUresult capture_work(Stream& stream, const StreamWork& work, uint64_t* capture_id,
                      const Footprint& footprint = {}, std::shared_ptr<GraphNode> node = nullptr);
// Before synchronising with, querying, or doing a synchronous operation on `stream`.
CUresult check_sync(Stream& stream);
// Before a potentially unsafe synchronous call, by the thread's capture mode.
CUresult check_unsafe_call();
// Before `stream` waits on work recorded outside any capture.
CUresult check_outside_dependency(Stream& stream);
// `stream` waits on an event recorded in capture `capture_id`.
CUresult join_capture(Stream& stream, uint64_t capture_id);
// Records a memory allocation node for `allocation` in the capture `stream` belongs to.
CUresult capture_memory_alloc(Stream& stream, std::shared_ptr<GraphAllocation> allocation);
// Records a free node for `address`, which this capture must have allocated (otherwise
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; CUDA_ERROR_INVALID_VALUE when it is freed already).
CUresult capture_memory_free(Stream& stream, uint64_t address);

// cuStreamDestroy of a capturing stream: an origin abandons its capture, a fork leaves it.
void abandon_capture(Stream& stream);
// The context is being destroyed: its captures, graphs and executable graphs go with it.
void forget_context_captures(Context* context);

// Graph handles. Lookups return nullptr for a handle that is not live.
std::shared_ptr<Graph> new_graph(Context* context);
std::shared_ptr<Graph> graph_from_handle(CUgraph handle);
CUresult destroy_graph(CUgraph handle);
// CUDA_ERROR_ILLEGAL_STATE while `graph` is still being captured; CUDA_ERROR_OUT_OF_MEMORY when
// its memory nodes' VRAM does not fit.
CUresult new_graph_exec(const Graph& graph, bool auto_free_on_launch,
                        std::shared_ptr<GraphExec>* out);
std::shared_ptr<GraphExec> graph_exec_from_handle(CUgraphExec handle);
// The node of a live graph that `handle` names, or nullptr.
std::shared_ptr<GraphNode> graph_node_from_handle(CUgraphNode handle);
// Whether every node `handles` names is one of `graph`'s.
bool graph_has_nodes(const Graph& graph, std::span<const CUgraphNode> handles);
// cuGraphExecKernelNodeSetParams: `exec`'s copy of `node` runs `replacement` from its next launch
// on (launches already queued keep what they had). CUDA_ERROR_INVALID_VALUE when `node` is not a
// kernel node `exec` was instantiated from.
CUresult replace_exec_kernel(GraphExec& exec, const GraphNode* node, KernelWork replacement);
// cuGraphExecUpdate: `exec` runs `graph`'s work from its next launch on, when the two have the same
// nodes in the same order, by type (simcuda's graphs are chains, so that is their topology), and
// neither holds memory nodes, whose memory an update cannot move (simcuda refuses those updates,
// CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED). Otherwise CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, the
// exec unchanged, with the reason in `*result` and the node of `graph` that caused it in
// `*error_node` (null when none does).
CUresult update_exec(GraphExec& exec, const Graph& graph, CUgraphExecUpdateResult* result,
                     CUgraphNode* error_node);
CUresult destroy_graph_exec(CUgraphExec handle);

inline CUgraph to_handle(Graph* graph) { return reinterpret_cast<CUgraph>(graph); }
inline CUgraphExec to_handle(GraphExec* exec) { return reinterpret_cast<CUgraphExec>(exec); }

}  // namespace simcuda
