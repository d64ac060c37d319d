// Turning a CUstream handle into a stream, and queueing work with the default streams' rules.
//
// Note [Default streams]
// NULL means the legacy default stream for the plain exports (cuMemcpyAsync) and the calling
// thread's per-thread default stream for the _ptsz/_ptds exports (what nvcc's
// --default-stream per-thread and cudart's flags=2 lookups select). CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD name them explicitly from anywhere. Work on the legacy stream waits for
// all earlier work on every blocking stream of the context, and work on a blocking stream waits
// for earlier legacy-stream work; CU_STREAM_NON_BLOCKING streams are exempt from both.
#pragma once

#include <cuda.h>

#include <memory>

#include "core/api.h"
#include "core/graph_nodes.h"
#include "core/stream.h"

namespace simcuda {

enum class DefaultStream { kLegacy, kPerThread };

// Note [Streams of other contexts]
// A kernel launch into a stream of another context than the current one fails, but the driver
// takes such a stream where the call does not run code in the current context: the stream
// queries (cuStreamGetCtx, cuStreamGetDevice, flags, priority, id) and stream-ordered allocation,
// whose documentation says it draws on the pool of "the stream's device", which need not be the
// current one. Those calls resolve with kAnyContext; the default streams are still the current
// context's.
enum class StreamScope { kCurrentContext, kAnyContext };

// A stream of the current context (or, with kAnyContext, of any live context).
// CUDA_ERROR_INVALID_CONTEXT without a current context, CUDA_ERROR_INVALID_HANDLE for a handle
// that is no live stream of it.
CUresult resolve_stream(CUstream handle, DefaultStream null_means, Stream** out,
                        StreamScope scope = StreamScope::kCurrentContext);

// Queues `work` on `stream` after the implicit waits of Note [Default streams] and after
// `extra_waits`, not before the calling thread's host clock (Note [Host clock] in
// core/host_clock.h) nor `not_before` (modeled seconds); `footprint` is what it can touch (Note
// [Remap protocol] in core/remap_check.h). Returns its sequence number on `stream`. Knows nothing
// of capture: entry points use submit_async() or submit_sync().
uint64_t submit(Stream& stream, StreamWork work, std::vector<StreamPoint> extra_waits = {},
                Footprint footprint = {}, double not_before = 0.0);

// Where submit_async() put a piece of work.
struct Placement {
  uint64_t sequence = 0;    // its sequence number on the stream when it was queued
  uint64_t capture_id = 0;  // the capture that recorded it instead, or 0
};

// What every asynchronous entry point (a copy, a kernel launch, a host function) queues its work
// with: recorded when the stream captures, refused as Note [Stream capture] in core/capture.h
// says, otherwise submit().
// `node` describes the work for a graph that records it (Note [Inspectable nodes] in
// core/graph_nodes.h); without one it shows as a host node.
CUresult submit_async(Stream& stream, StreamWork work, Placement* placement = nullptr,
                      Footprint footprint = {}, std::shared_ptr<GraphNode> node = nullptr);

// A synchronous call on `stream` (one of the default streams): refused while capture forbids it
// (check_unsafe_call(), check_sync()), otherwise submitted and, when `wait`, waited for (which
// advances the host clock).
CUresult submit_sync(Stream& stream, StreamWork work, bool wait, Footprint footprint);

}  // namespace simcuda

// Defines the plain export `name`, where NULL is the legacy default stream, and its per-thread
// twin `pt_name` (the _ptsz/_ptds export), where NULL is the per-thread default stream, over one
// implementation called as impl(DefaultStream, args...).
#define SIMCUDA_DEFAULT_STREAM_EXPORTS(name, pt_name, impl, params, ...) \
  SIMCUDA_EXPORT CUresult CUDAAPI name params {                          \
    SIMCUDA_ENTER(#name);                                                \
    return impl(::simcuda::DefaultStream::kLegacy, __VA_ARGS__);         \
  }                                                                      \
  SIMCUDA_EXPORT CUresult CUDAAPI pt_name params {                       \
    SIMCUDA_ENTER(#pt_name);                                             \
    return impl(::simcuda::DefaultStream::kPerThread, __VA_ARGS__);      \
  }
