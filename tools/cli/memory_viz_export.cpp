#include "memory_viz_export.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <numeric>
#include <optional>
#include <tuple>

#include "pickle_writer.h"
#include "util/bytes.h"

namespace vramspill::cli {
namespace {

using telemetry::Trace;
using telemetry::TraceEvent;
using telemetry::TraceEventKind;

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

// What a segment needs of a live allocation (Note [Allocations a trace shows live]).
struct Live {
  uint64_t bytes = 0;
  core::Route route = core::Route::kMemAlloc;
};

class Builder {
 public:
  explicit Builder(const Trace& trace) : trace_(trace) {}

  MemoryVizSnapshot build() {
    std::vector<std::size_t> order(trace_.events.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return trace_.events[a].time_ns < trace_.events[b].time_ns;
    });
    for (const std::size_t index : order) add(trace_.events[index]);
    snapshot_.left_out = live_.left_out();
    for (const auto& [key, live] : live_.live()) {
      snapshot_.segments.push_back(VizSegment{.device = std::get<0>(key),
                                              .address = std::get<2>(key),
                                              .bytes = live.bytes,
                                              .route = live.route});
    }
    std::sort(snapshot_.segments.begin(), snapshot_.segments.end(),
              [](const VizSegment& a, const VizSegment& b) {
                return std::tie(a.device, a.address) < std::tie(b.device, b.address);
              });
    return std::move(snapshot_);
  }

 private:
  void add(const TraceEvent& event) {
    const uint64_t time_us = (trace_.start_unix_ns + event.time_ns) / 1000;
    switch (event.kind) {
      case TraceEventKind::kDevice:
        annotate(event, time_us,
                 "vramspill: device " + std::to_string(event.device) + " has a budget of " +
                     format_bytes(event.limit_bytes) + " of its " + format_bytes(event.bytes));
        break;
      case TraceEventKind::kAlloc:
        if (live_.allocate(event, Live{event.bytes, event.route}) == nullptr) break;
        ++snapshot_.allocations;
        record(event.device, {"segment_alloc", "alloc"}, event.key, event.bytes, time_us,
               event.route);
        break;
      case TraceEventKind::kFree:
        if (const std::optional<Live> freed = live_.free(event)) {
          // The allocation's size, so that memory_viz frees exactly what it allocated.
          record(event.device, {"free_requested", "free_completed", "segment_free"}, event.key,
                 freed->bytes, time_us, freed->route);
        }
        break;
      case TraceEventKind::kRefuse:
        annotate(event, time_us,
                 "vramspill: over the budget: " + format_bytes(event.bytes) + " on " +
                     std::string(core::route_token(event.route)) +
                     " (a spill or an eviction may follow)");
        break;
      case TraceEventKind::kEvict:
        annotate(event, time_us,
                 "vramspill: evicted " + format_bytes(event.bytes) + " of " + hex(event.key) +
                     " to the host");
        break;
      case TraceEventKind::kPromote:
        annotate(event, time_us,
                 "vramspill: promoted " + format_bytes(event.bytes) + " of " + hex(event.key) +
                     " to the device");
        break;
      case TraceEventKind::kUse:  // which blocks a launch touches: no memory changes hands
      case TraceEventKind::kLaunches:  // counts, not memory
        break;
    }
  }

  std::vector<VizEvent>& device_trace(int device) {
    const auto index = static_cast<std::size_t>(device);
    if (snapshot_.device_traces.size() <= index) snapshot_.device_traces.resize(index + 1);
    return snapshot_.device_traces[index];
  }

  void record(int device, std::initializer_list<std::string_view> actions, uint64_t address,
              uint64_t bytes, uint64_t time_us, core::Route route) {
    std::vector<VizEvent>& events = device_trace(device);
    for (const std::string_view action : actions) {
      events.push_back(VizEvent{action, address, bytes, time_us, route});
    }
  }

  void annotate(const TraceEvent& event, uint64_t time_us, std::string name) {
    device_trace(event.device);  // memory_viz lists a device that has a trace
    snapshot_.annotations.push_back(VizAnnotation{event.device, time_us, std::move(name)});
  }

  const Trace& trace_;
  LiveAllocations<Live> live_;
  MemoryVizSnapshot snapshot_;
};

// Writes the snapshot; each route's frames list is written once and recalled after.
class SnapshotWriter {
 public:
  explicit SnapshotWriter(std::ostream& out) : pickle_(out) {}

  void write(const MemoryVizSnapshot& snapshot) {
    pickle_.begin_dict();
    pickle_.string("segments");
    pickle_.begin_list();
    for (const VizSegment& segment : snapshot.segments) write_segment(segment);
    pickle_.end_list();
    pickle_.string("device_traces");
    pickle_.begin_list();
    for (const std::vector<VizEvent>& events : snapshot.device_traces) {
      pickle_.begin_list();
      for (const VizEvent& event : events) write_event(event);
      pickle_.end_list();
    }
    pickle_.end_list();
    pickle_.string("allocator_settings");
    pickle_.begin_dict();
    pickle_.end_dict();
    pickle_.string("external_annotations");
    pickle_.begin_list();
    for (const VizAnnotation& annotation : snapshot.annotations) {
      for (const std::string_view stage : {"START", "END"}) write_annotation(annotation, stage);
    }
    pickle_.end_list();
    pickle_.end_dict();
    pickle_.finish();
  }

 private:
  void key(std::string_view name) { pickle_.string(name); }

  void frames(core::Route route) {
    std::optional<uint32_t>& id = frames_ids_[core::route_index(route)];
    if (id) {
      pickle_.recall(*id);
      return;
    }
    pickle_.begin_list();
    pickle_.begin_dict();
    key("name");
    pickle_.string(route_frame_name(route));
    key("filename");
    pickle_.string("vramspill");
    key("line");
    pickle_.integer(0);
    pickle_.end_dict();
    pickle_.end_list();
    id = pickle_.remember();
  }

  void write_segment(const VizSegment& segment) {
    pickle_.begin_dict();
    key("device");
    pickle_.integer(segment.device);
    key("address");
    pickle_.unsigned_integer(segment.address);
    for (const std::string_view size :
         {"total_size", "allocated_size", "active_size", "requested_size"}) {
      key(size);
      pickle_.unsigned_integer(segment.bytes);
    }
    key("stream");
    pickle_.integer(0);
    key("segment_type");
    pickle_.string("large");
    key("segment_pool_id");
    pickle_.begin_tuple();
    pickle_.integer(0);
    pickle_.integer(0);
    pickle_.end_tuple();
    key("is_expandable");
    pickle_.boolean(false);
    key("frames");
    frames(segment.route);
    key("blocks");
    pickle_.begin_list();
    pickle_.begin_dict();
    key("address");
    pickle_.unsigned_integer(segment.address);
    key("size");
    pickle_.unsigned_integer(segment.bytes);
    key("requested_size");
    pickle_.unsigned_integer(segment.bytes);
    key("state");
    pickle_.string("active_allocated");
    key("frames");
    frames(segment.route);
    pickle_.end_dict();
    pickle_.end_list();
    pickle_.end_dict();
  }

  void write_event(const VizEvent& event) {
    pickle_.begin_dict();
    key("action");
    pickle_.string(event.action);
    key("addr");
    pickle_.unsigned_integer(event.address);
    key("size");
    pickle_.unsigned_integer(event.bytes);
    key("stream");
    pickle_.integer(0);
    key("time_us");
    pickle_.unsigned_integer(event.time_us);
    key("frames");
    frames(event.route);
    pickle_.end_dict();
  }

  void write_annotation(const VizAnnotation& annotation, std::string_view stage) {
    pickle_.begin_dict();
    key("stage");
    pickle_.string(stage);
    key("name");
    pickle_.string(annotation.name);
    key("device");
    pickle_.integer(annotation.device);
    key("time_us");
    pickle_.unsigned_integer(annotation.time_us);
    pickle_.end_dict();
  }

  PickleWriter pickle_;
  std::array<std::optional<uint32_t>, core::kRouteCount> frames_ids_{};
};

}  // namespace

std::string route_frame_name(core::Route route) {
  switch (route) {
    case core::Route::kSpillManaged:
      return "vramspill: spilled to CUDA managed memory (spill-managed)";
    case core::Route::kSpillHost:
      return "vramspill: spilled to pinned host memory (spill-host)";
    case core::Route::kSpillVmmHost:
      return "vramspill: spilled to host-located VMM memory (spill-vmm-host)";
    case core::Route::kTiered:
      return "vramspill: tiered block, its granules moved between the device and the host "
             "(tiered)";
    case core::Route::kMemAllocManaged:
      return "managed memory (cuMemAllocManaged)";
    default:
      return "device memory (" + std::string(core::route_name(route)) + ")";
  }
}

MemoryVizSnapshot build_memory_viz(const Trace& trace) { return Builder(trace).build(); }

void write_memory_viz(const MemoryVizSnapshot& snapshot, std::ostream& out) {
  SnapshotWriter(out).write(snapshot);
}

}  // namespace vramspill::cli
