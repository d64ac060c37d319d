// A trace as a memory snapshot (tools/cli/memory_viz_export.h): the events memory_viz gets for
// allocations, frees, spills, evictions and refusals, what is live at the end, and the frees
// and allocations a damaged trace holds.
#include "memory_viz_export.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "trace_events.h"

namespace vramspill::cli {
namespace {

using core::Route;
using telemetry::Trace;
using telemetry::TraceEvent;
using telemetry::TraceEventKind;
using testing::event;

constexpr uint64_t kStartNs = 1'764'662'400'000'000'000;

Trace trace_of(std::vector<TraceEvent> events) {
  Trace trace;
  trace.start_unix_ns = kStartNs;
  trace.complete = true;
  trace.events = std::move(events);
  return trace;
}

// "action addr size route" per event, for comparing sequences.
std::vector<std::string> described(const std::vector<VizEvent>& events) {
  std::vector<std::string> out;
  for (const VizEvent& e : events) {
    out.push_back(std::string(e.action) + " " + std::to_string(e.address) + " " +
                  std::to_string(e.bytes) + " " + std::string(core::route_token(e.route)));
  }
  return out;
}

TEST(MemoryVizExport, AnAllocationIsASegmentAndABlockFreedInThreeSteps) {
  const MemoryVizSnapshot snapshot =
      build_memory_viz(trace_of({event(1000, TraceEventKind::kAlloc, Route::kMemAlloc, 4096, 512),
                                 event(9000, TraceEventKind::kFree, Route::kMemAlloc, 4096, 512)}));
  ASSERT_EQ(snapshot.device_traces.size(), 1u);
  EXPECT_EQ(described(snapshot.device_traces[0]),
            (std::vector<std::string>{
                "segment_alloc 4096 512 cuMemAlloc", "alloc 4096 512 cuMemAlloc",
                "free_requested 4096 512 cuMemAlloc", "free_completed 4096 512 cuMemAlloc",
                "segment_free 4096 512 cuMemAlloc"}));
  EXPECT_EQ(snapshot.device_traces[0][0].time_us, kStartNs / 1000 + 1);
  EXPECT_EQ(snapshot.device_traces[0][4].time_us, kStartNs / 1000 + 9);
  EXPECT_TRUE(snapshot.segments.empty());
  EXPECT_EQ(snapshot.allocations, 1u);
}

TEST(MemoryVizExport, SpilledAndTieredAllocationsCarryTheirRouteAndStayLiveAsSegments) {
  const MemoryVizSnapshot snapshot = build_memory_viz(
      trace_of({event(1, TraceEventKind::kAlloc, Route::kSpillHost, 0x9000, 8192),
                event(2, TraceEventKind::kAlloc, Route::kTiered, 0x5000, 4096, 1)}));
  ASSERT_EQ(snapshot.device_traces.size(), 2u);
  EXPECT_EQ(described(snapshot.device_traces[0]),
            (std::vector<std::string>{"segment_alloc 36864 8192 spill-host",
                                      "alloc 36864 8192 spill-host"}));
  EXPECT_EQ(
      described(snapshot.device_traces[1]),
      (std::vector<std::string>{"segment_alloc 20480 4096 tiered", "alloc 20480 4096 tiered"}));
  ASSERT_EQ(snapshot.segments.size(), 2u);
  EXPECT_EQ(snapshot.segments[0].device, 0);
  EXPECT_EQ(snapshot.segments[0].route, Route::kSpillHost);
  EXPECT_EQ(snapshot.segments[1].device, 1);
  EXPECT_EQ(snapshot.segments[1].address, 0x5000u);
  EXPECT_EQ(route_frame_name(Route::kSpillHost),
            "vramspill: spilled to pinned host memory (spill-host)");
  EXPECT_EQ(route_frame_name(Route::kSpillManaged),
            "vramspill: spilled to CUDA managed memory (spill-managed)");
  EXPECT_EQ(route_frame_name(Route::kMemAlloc), "device memory (cuMemAlloc)");
  EXPECT_TRUE(route_frame_name(Route::kTiered).starts_with("vramspill: tiered block"));
}

TEST(MemoryVizExport, EvictionsPromotionsRefusalsAndBudgetsAreAnnotations) {
  TraceEvent device = event(0, TraceEventKind::kDevice, Route::kMemAlloc, 0, 256 << 20);
  device.limit_bytes = 64 << 20;
  const MemoryVizSnapshot snapshot = build_memory_viz(
      trace_of({device, event(1000, TraceEventKind::kRefuse, Route::kMemAlloc, 0, 16 << 20),
                event(2000, TraceEventKind::kEvict, Route::kTiered, 0x7f3a00000000, 16 << 20),
                event(3000, TraceEventKind::kPromote, Route::kTiered, 0x7f3a00000000, 2 << 20)}));
  ASSERT_EQ(snapshot.annotations.size(), 4u);
  EXPECT_EQ(snapshot.annotations[0].name,
            "vramspill: device 0 has a budget of 64.0 MiB of its 256.0 MiB");
  EXPECT_EQ(snapshot.annotations[1].name,
            "vramspill: over the budget: 16.0 MiB on cuMemAlloc (a spill or an eviction may "
            "follow)");
  EXPECT_EQ(snapshot.annotations[2].name,
            "vramspill: evicted 16.0 MiB of 0x7f3a00000000 to the host");
  EXPECT_EQ(snapshot.annotations[2].time_us, kStartNs / 1000 + 2);
  EXPECT_EQ(snapshot.annotations[3].name,
            "vramspill: promoted 2.0 MiB of 0x7f3a00000000 to the device");
  ASSERT_EQ(snapshot.device_traces.size(), 1u);
  EXPECT_TRUE(snapshot.device_traces[0].empty());
}

TEST(MemoryVizExport, EventsAreInTimeOrderWhateverTheFileOrder) {
  // Another thread's line can land first in the file with a later time.
  const MemoryVizSnapshot snapshot = build_memory_viz(
      trace_of({event(5000, TraceEventKind::kAlloc, Route::kMemAlloc, 0x1000, 64),
                event(3000, TraceEventKind::kFree, Route::kMemAlloc, 0x1000, 64),
                event(1000, TraceEventKind::kAlloc, Route::kMemAlloc, 0x1000, 32)}));
  EXPECT_EQ(described(snapshot.device_traces[0]),
            (std::vector<std::string>{
                "segment_alloc 4096 32 cuMemAlloc", "alloc 4096 32 cuMemAlloc",
                "free_requested 4096 32 cuMemAlloc", "free_completed 4096 32 cuMemAlloc",
                "segment_free 4096 32 cuMemAlloc", "segment_alloc 4096 64 cuMemAlloc",
                "alloc 4096 64 cuMemAlloc"}));
  EXPECT_EQ(snapshot.left_out.unmatched_frees, 0u);
}

TEST(MemoryVizExport, KeysOfDifferentKindsAreToldApart) {
  // A VMM handle may have the value of a device pointer; its free is cuMemRelease's.
  const MemoryVizSnapshot snapshot =
      build_memory_viz(trace_of({event(1, TraceEventKind::kAlloc, Route::kMemAlloc, 0x1000, 64),
                                 event(2, TraceEventKind::kAlloc, Route::kMemCreate, 0x1000, 128),
                                 event(3, TraceEventKind::kFree, Route::kMemCreate, 0x1000, 128)}));
  ASSERT_EQ(snapshot.segments.size(), 1u);
  EXPECT_EQ(snapshot.segments[0].route, Route::kMemAlloc);
  EXPECT_EQ(snapshot.segments[0].bytes, 64u);
}

TEST(MemoryVizExport, LeavesOutAndCountsFreesAndAllocationsThatDoNotFit) {
  const MemoryVizSnapshot snapshot =
      build_memory_viz(trace_of({event(1, TraceEventKind::kFree, Route::kMemAlloc, 0x2000, 64),
                                 event(2, TraceEventKind::kAlloc, Route::kMemAlloc, 0x1000, 64),
                                 event(3, TraceEventKind::kAlloc, Route::kMemAlloc, 0x1000, 64),
                                 event(4, TraceEventKind::kFree, Route::kMemAlloc, 0x1000, 64),
                                 event(5, TraceEventKind::kFree, Route::kMemAlloc, 0x1000, 64)}));
  EXPECT_EQ(snapshot.left_out.unmatched_frees, 2u);
  EXPECT_EQ(snapshot.left_out.repeated_allocations, 1u);
  EXPECT_EQ(snapshot.allocations, 1u);
  EXPECT_EQ(snapshot.device_traces[0].size(), 5u);  // one allocation, allocated and freed
}

TEST(MemoryVizExport, WritesTheSnapshotsKeys) {
  std::ostringstream out;
  write_memory_viz(build_memory_viz(trace_of(
                       {event(1, TraceEventKind::kAlloc, Route::kSpillHost, 0x9000, 8192)})),
                   out);
  const std::string pickle = out.str();
  ASSERT_GE(pickle.size(), 3u);
  EXPECT_EQ(pickle.substr(0, 2), "\x80\x02");
  EXPECT_EQ(pickle.back(), '.');
  for (const char* key : {"segments", "device_traces", "allocator_settings", "external_annotations",
                          "segment_pool_id", "active_allocated",
                          "vramspill: spilled to pinned host memory (spill-host)"}) {
    EXPECT_NE(pickle.find(key), std::string::npos) << key;
  }
}

}  // namespace
}  // namespace vramspill::cli
