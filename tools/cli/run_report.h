// What `vramspill report` shows of a job's [trace] file (tools/cli/trace_reader.h): per device,
// the bytes in each tier over time, the bytes moved and the refusals and spills over time, and
// the figures of the summary; for the job, the largest allocations. report_html.h draws it.
//
// Note [Bytes per tier from a trace]
// An allocation's bytes are in one tier for its life, found by its route: the driver's routes on
// the device, spill-host, spill-vmm-host and spill-managed in their host tiers. A tiered block's
// bytes are split between the device and the host: all on the device when allocated, then each
// evict moves bytes of it to the host and each promote brings bytes back (the evict that follows
// an alloc says what was placed on the host at once: trace_format.h). A free takes the block's
// bytes from wherever they are. Stream-ordered allocations count at their own size (the trace
// does not record the pool's reservations, which are what the budget counts), so "on the device"
// can differ a little from what the shim's ledger held. Events are taken in time order (threads
// interleave in the file); a free, evict or promote of a block the trace does not show live (a
// damaged trace), or an alloc of a key still live, is left out and counted, as by `export` and
// `replay` (Note [Allocations a trace shows live] in live_allocations.h).
//
// Note [Downsampling keeps the peaks]
// A series has a point after each event that changes memory, which for a long job is millions.
// Above max_points, the job's time is cut into max_points equal buckets, and a bucket's point is
// the instant in it (the state carried in from before the bucket included) when all tiers
// together held the most: every tier's value from that one instant, so that the stacked chart's
// total is a total the job really had, and no peak of the total disappears. (Taking each tier's
// own largest value in the bucket kept every tier's peak, but stacked them into totals up to 9%
// above any the job reached, on a real trace.) A tier's own peak inside a bucket may not show;
// the summary's peaks come from every event, never from the buckets, and the page says when a
// chart is downsampled.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/route.h"
#include "trace_reader.h"

namespace vramspill::cli {

// Where an allocation's bytes are (Note [Bytes per tier from a trace]).
enum class Tier : uint8_t {
  kDevice,        // the driver's routes
  kTieredDevice,  // tiered blocks' bytes on the device
  kTieredHost,    // tiered blocks' bytes evicted to the host
  kSpillHost,     // spilled to the pinned host pool
  kSpillVmmHost,  // spilled to host-located VMM memory
  kSpillManaged,  // spilled to managed memory
};
inline constexpr std::size_t kTierCount = 6;
using TierBytes = std::array<uint64_t, kTierCount>;

constexpr std::size_t tier_index(Tier tier) { return static_cast<std::size_t>(tier); }
constexpr bool tier_on_device(Tier tier) {
  return tier == Tier::kDevice || tier == Tier::kTieredDevice;
}

struct BytesPoint {
  double time_s = 0;  // since the shim started
  TierBytes bytes{};
};

// What happened in one bucket of the job's time.
struct ActivityBucket {
  double start_s = 0;
  uint64_t evicted_bytes = 0;
  uint64_t promoted_bytes = 0;
  uint64_t refusals = 0;
  uint64_t spills = 0;  // allocations on a spill route
};

struct DeviceReport {
  int device = 0;
  uint64_t total_bytes = 0;       // from the trace's device event; 0 when it has none
  uint64_t limit_bytes = 0;       // the budget; 0 when unknown
  std::vector<BytesPoint> bytes;  // in time order, ending at the job's end
  uint64_t samples = 0;           // the points before downsampling (Note [Downsampling ...])
  std::vector<ActivityBucket> activity;
  double bucket_s = 0;  // each activity bucket's length
  TierBytes peak_bytes{};
  uint64_t peak_on_device_bytes = 0;  // of the sum of the device tiers
  uint64_t allocations = 0;
  uint64_t spills = 0;
  uint64_t spilled_bytes = 0;
  uint64_t refusals = 0;
  uint64_t evictions = 0;
  uint64_t evicted_bytes = 0;
  uint64_t promotions = 0;
  uint64_t promoted_bytes = 0;
};

struct LargeAllocation {
  int device = 0;
  core::Route route = core::Route::kMemAlloc;
  uint64_t key = 0;
  uint64_t bytes = 0;
  double allocated_s = 0;
  std::optional<double> freed_s;  // none: live when the trace ends
};

struct JobReport {
  std::string command;
  uint64_t pid = 0;
  uint64_t start_unix_ns = 0;
  double duration_s = 0;                 // the last event's time
  bool complete = false;                 // the trace has its '# end' line
  std::vector<DeviceReport> devices;     // by ordinal, those the trace names
  std::vector<LargeAllocation> largest;  // largest first
  uint64_t allocations = 0;              // of which `largest` shows the first ReportLimits::largest
  uint64_t left_out_events = 0;  // frees, evicts, promotes and allocs that did not fit (Note)
  // The trace's launches event (tiered mode writes it at exit), if it has one.
  std::optional<telemetry::TraceEvent> launches;
};

struct ReportLimits {
  std::size_t max_points = 2000;  // per bytes series (Note [Downsampling keeps the peaks])
  std::size_t activity_buckets = 60;
  std::size_t largest = 20;
};

JobReport build_report(const telemetry::Trace& trace, const ReportLimits& limits = {});

// What a tier is called on the page, e.g. "spilled to the host pool".
const char* tier_label(Tier tier);

}  // namespace vramspill::cli
