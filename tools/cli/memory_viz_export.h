// A [trace] file (tools/cli/trace_reader.h) as a PyTorch memory snapshot: the dict
// torch.cuda.memory._snapshot() returns, which PyTorch's memory_viz
// (https://pytorch.org/memory_viz) draws. For `vramspill export --format memory-viz`.
//
// Note [A trace as a memory snapshot]
// Every allocation the shim recorded is a segment of its own holding one block of its size:
// memory_viz's "Active Memory Timeline" shows the allocations, its "Allocator State History"
// the events one by one. Per allocation the device's trace gets segment_alloc then alloc, and
// per free free_requested, free_completed and segment_free, all at the allocation's key and
// size, on stream 0, at start_unix_ns plus the event's time. Events are sorted by time first
// (threads interleave in the file; trace_format.h). What is live when the trace ends is in
// 'segments', as in a snapshot taken then.
//
// memory_viz shows an event's frames as its stack, so each event's frames say what vramspill
// did with that memory: "vramspill: spilled to pinned host memory (spill-host)" and the like
// for spills, "vramspill: tiered block ..." for tiered mode, "device memory (cuMemAlloc)" for
// memory that stayed on the device. Evictions, promotions, refusals and each device's budget
// are annotations ('external_annotations', where PyTorch records its ranges: here a START and
// an END at the same instant): a refusal is not memory_viz's 'oom' event, whose 'device_free'
// (what the driver had free) the trace does not know, and which would call OUT_OF_MEMORY what
// was usually a spill.
//
// A free whose allocation the trace does not hold (a damaged trace), or an allocation of a key
// that is still live, is left out and counted (Note [Allocations a trace shows live] in
// live_allocations.h), so that memory_viz never sees a block freed twice or two at one address.
// Keys of different kinds (device pointers, VMM handles, CUarrays: core::KeySpace) are told
// apart when frees are matched, but memory_viz knows only addresses.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/route.h"
#include "live_allocations.h"
#include "trace_reader.h"

namespace vramspill::cli {

struct VizEvent {
  std::string_view action;  // "segment_alloc", "alloc", "free_requested", "free_completed",
                            // "segment_free"
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint64_t time_us = 0;
  core::Route route = core::Route::kMemAlloc;  // what its frames say
};

// An allocation live when the trace ends.
struct VizSegment {
  int device = 0;
  uint64_t address = 0;
  uint64_t bytes = 0;
  core::Route route = core::Route::kMemAlloc;
};

struct VizAnnotation {
  int device = 0;
  uint64_t time_us = 0;
  std::string name;
};

struct MemoryVizSnapshot {
  std::vector<VizSegment> segments;                  // by device, then address
  std::vector<std::vector<VizEvent>> device_traces;  // index: the device's ordinal
  std::vector<VizAnnotation> annotations;            // in time order
  uint64_t allocations = 0;                          // alloc events exported
  LeftOut left_out;                                  // of a damaged trace
};

MemoryVizSnapshot build_memory_viz(const telemetry::Trace& trace);

// Writes `snapshot` as a pickle memory_viz and Python read.
void write_memory_viz(const MemoryVizSnapshot& snapshot, std::ostream& out);

// The one frame an event of `route` carries: what vramspill did with its memory.
std::string route_frame_name(core::Route route);

}  // namespace vramspill::cli
